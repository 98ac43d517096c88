"""Read- and append-path benchmark on TPC-H ``lineitem``: caslake against pyarrow on
the very same data files, before and after deletes, at 1 and 2 cores, cold and warm.

Run: ``PYTHONPATH=$PWD python -m benchmarks.scan_paths [--sf=0.1] [--cores=1,2]``.

The data is the cached ``tpchgen-cli`` output of :mod:`benchmarks.tpch`.  The
table is loaded once; the rows measured, each the median of 5 warm runs in this
process, are:

* **Q1 columns** and **Q6** (real predicate) on caslake, and ``pq.read_table``
  of the table's own data files (same columns, same filter): the same bytes,
  so the ratio is caslake's overhead;
* the same two scans after **RF2** (the line items of ``SF * 1500`` orders
  deleted) and after a further **1% scattered delete** (every row whose
  ``l_suppkey <= SF * 100``, of ``SF * 10000`` suppliers), each divided by
  the same scan before any delete (the goal is at most 1.15);
* the same scans once more after ``compact(deleted_fraction=0.01)`` has rewritten
  the files those deletes touched (the compaction's time is printed too);
* the **floor** of that ratio for Q1 after the scattered delete: pyarrow decodes
  every row of a row group, so dropping the deleted ones copies the survivors
  once more, and no filter after decoding can cost less than a memcpy of the
  result's bytes at the same core count (:func:`copy_floor`);
* a **cold** first Q1 and Q6 in a fresh process against the warm ones after it in
  the same process, with only ``import caslake`` before the clock (Q6's first scan
  then loads pandas, which pyarrow imports on its first conversion of a Python
  value, and sqlglot for the SQL string; Q1's loads neither) and with those
  imports done first too;
* **append**: caslake's ``append`` against ``pq.write_table`` with the same
  settings (zstd at caslake's level, page CRCs, statistics, same row-group size) and Lance.

Every caslake answer is checked against DuckDB on the same Arrow data.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.timing import set_cores
from benchmarks.tpch import (
    Q1_COLUMNS,
    Q6_COLUMNS,
    Q6_SQL,
    PyarrowSystem,
    _plain_strings,
    ensure_data,
    refresh_sets,
    revenue,
)

WARM = 5


def median_time(fn: Callable[[], Any], n: int = WARM) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(n):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def duck(data: pa.Table, sql: str) -> Any:
    import duckdb

    con = duckdb.connect()
    con.register("t", data)
    row = con.execute(sql).fetchone()
    assert row is not None
    return row[0]


def copy_floor(nbytes: int, cores: int) -> float:
    """Median seconds of 5 to copy ``nbytes`` between buffers already in memory, split
    over ``cores`` threads: the least any filter applied after decoding can cost
    (it writes every surviving row once more).  The buffers are touched first, so
    this is memory bandwidth alone, with no page faults."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    part = max(1, nbytes // cores)
    src = [np.ones(part, dtype=np.uint8) for _ in range(cores)]
    dst = [np.zeros(part, dtype=np.uint8) for _ in range(cores)]
    with ThreadPoolExecutor(cores) as pool:
        def run() -> None:
            list(pool.map(np.copyto, dst, src))
        run()
        s, _ = median_time(run)
    return s


COMPACTED = "after RF2 + 1% scattered, compacted"

COLD_IMPORTS = {
    "import caslake only": "",
    # Many programs have pandas loaded already; a scan itself loads no module
    # (sqlglot and its DuckDB dialect load with caslake, tests/test_import_cost.py).
    "pandas imported first": "import pandas",
}


def cold_scan(root: Path, version: int, preload: str, columns: list[str], where: str | None
              ) -> tuple[float, float, float]:
    """A fresh process: ``import caslake`` (and ``preload``), then the first scan and
    three more.  Returns (import seconds, first scan, median of the later three):
    the first and the warm scans share the process, so load hits them alike."""
    code = (f"import time; t0 = time.perf_counter(); import caslake; {preload}\n"
            "imp = time.perf_counter() - t0\nts = []\n"
            "for _ in range(4):\n"
            "    t0 = time.perf_counter()\n"
            f"    caslake.open_table({str(root)!r}).scan(columns={columns!r}, where={where!r}, "
            f"version={version}).to_arrow()\n"
            "    ts.append(time.perf_counter() - t0)\n"
            "print(imp, ts[0], sorted(ts[1:])[1])")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True)
    imp, first, warm = (float(x) for x in res.stdout.strip().splitlines()[-1].split())
    return imp, first, warm


def main(sf: float, cores: list[int], append: bool) -> int:
    import caslake

    src = ensure_data(sf)
    data = _plain_strings(pq.read_table(src / "lineitem.parquet"))
    orders = pq.read_table(src / "orders.parquet", columns=["o_orderkey"])
    _, rf2_keys = refresh_sets(data, orders, sf)
    scatter_sql = f"l_suppkey <= {max(1, round(sf * 100))}"
    rf2_sql = f"l_orderkey IN ({', '.join(str(k) for k in rf2_keys)})"
    q6_want = Decimal(duck(data, "SELECT coalesce(sum(l_extendedprice * l_discount), 0) "
                                 f"FROM t WHERE {Q6_SQL}"))
    deleted_after = {"after RF2": f"({rf2_sql})",
                     "after RF2 + 1% scattered": f"(({rf2_sql}) OR {scatter_sql})"}
    want6 = {"before deletes": q6_want}
    for stage, deleted in deleted_after.items():
        want6[stage] = Decimal(duck(data, "SELECT coalesce(sum(l_extendedprice * "
                                    f"l_discount), 0) FROM t WHERE {Q6_SQL} AND NOT "
                                    f"{deleted}"))
    root = Path(tempfile.mkdtemp(prefix="caslake-scanpaths-"))
    failures: list[str] = []
    try:
        table_dir = root / "t"
        t0 = time.perf_counter()
        tbl = caslake.create_table(str(table_dir), data.schema)
        tbl.append(data)
        load_s = time.perf_counter() - t0
        files = [str(table_dir / task.file.path) for task in tbl.scan().plan().tasks]
        versions = {"before deletes": tbl.version}
        versions["after RF2"] = tbl.delete(rf2_sql).version
        versions["after RF2 + 1% scattered"] = tbl.delete(scatter_sql).version
        # The maintenance answer to dense deletes: rewrite the files they touch.
        t0 = time.perf_counter()
        versions[COMPACTED] = tbl.compact(deleted_fraction=0.01).version
        compact_s = time.perf_counter() - t0
        want6[COMPACTED] = want6["after RF2 + 1% scattered"]
        pyarrow_sys = PyarrowSystem(table_dir)
        pyarrow_sys.files = lambda: files  # type: ignore[method-assign]

        def ours(columns: list[str], where: str | None, version: int) -> pa.Table:
            return caslake.open_table(str(table_dir)).scan(
                columns=columns, where=where, version=version).to_arrow()

        rows: list[tuple[str, str, float, float, float, float, float]] = []
        floors: list[tuple[int, int, float, float]] = []  # cores, bytes, copy s, before s
        for n in cores:
            set_cores(n)
            for label, columns, where in (("Q1 columns", Q1_COLUMNS, None),
                                          ("Q6", Q6_COLUMNS, Q6_SQL)):
                runs: dict[str, list[float]] = {}
                cpu: dict[str, list[float]] = {}  # process CPU seconds: steadier under load
                fns: dict[str, Callable[[], pa.Table]] = {
                    "pq.read_table same files": (lambda: pyarrow_sys.scan(Q1_COLUMNS))
                    if where is None else pyarrow_sys.q6}
                for stage, v in versions.items():
                    fns[stage] = (lambda v=v, c=columns, w=where: ours(c, w, v))
                for _ in range(WARM):  # interleaved, so load changes hit every row alike
                    for what, fn in fns.items():
                        t0, c0 = time.perf_counter(), time.process_time()
                        out = fn()
                        runs.setdefault(what, []).append(time.perf_counter() - t0)
                        cpu.setdefault(what, []).append(time.process_time() - c0)
                        if label == "Q6" and what in want6 and revenue(out) != want6[what]:
                            failures.append(f"{what} Q6 at {n} cores: {revenue(out)} != "
                                            f"{want6[what]}")
                med = {w: statistics.median(ts) for w, ts in runs.items()}
                mcpu = {w: statistics.median(ts) for w, ts in cpu.items()}
                if label == "Q1 columns":  # any filter after decoding copies the result
                    kept = ours(columns, where, versions["after RF2 + 1% scattered"]).nbytes
                    floors.append((n, kept, copy_floor(kept, n), med["before deletes"]))
                for what, s in med.items():
                    rows.append((f"{label}, {n} core(s)", what, s, s / med["before deletes"],
                                 s / med["pq.read_table same files"],
                                 mcpu[what] / mcpu["before deletes"],
                                 mcpu[what] / mcpu["pq.read_table same files"]))
        set_cores(max(cores))
        colds: list[tuple[str, str, float, float, float]] = []
        for label, columns, where in (("Q1 columns", Q1_COLUMNS, None),
                                      ("Q6", Q6_COLUMNS, Q6_SQL)):
            for stage, v in versions.items():
                for how, preload in COLD_IMPORTS.items():
                    runs3 = [cold_scan(table_dir, v, preload, columns, where) for _ in range(3)]
                    imp, first, warm = (statistics.median(r[i] for r in runs3)
                                        for i in range(3))
                    colds.append((f"{label} {stage}", how, imp, first, warm))
        print(f"\n### scan paths, TPC-H SF{sf:g} lineitem ({data.num_rows:,} rows), "
              f"seconds (median of {WARM} warm, interleaved); load {load_s:.2f} s\n")
        print("| scan | what | seconds | / caslake before deletes | / pyarrow same files | "
              "CPU / caslake before | CPU / pyarrow |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for scan, what, s, rb, rp, cb, cp in rows:
            print(f"| {scan} | {what} | {s:.3f} | {rb:.2f} | {rp:.2f} | {cb:.2f} | {cp:.2f} |")
        print(f"\n`compact(deleted_fraction=0.01)` after the deletes took {compact_s:.2f} s.")
        print("\n| Q1 columns after RF2 + 1% scattered | result MB | memcpy of the result s "
              "(median of 5) | before deletes s | (before + memcpy) / before: the floor "
              "for any filter after decoding |")
        print("|---|---:|---:|---:|---:|")
        for n, kept, floor, before in floors:
            print(f"| {n} core(s) | {kept / 1e6:.0f} | {floor:.3f} | {before:.3f} | "
                  f"{(before + floor) / before:.2f} |")
        print("\n| cold: fresh process (median of 3) | imports before the clock | "
              "import s | first scan s | warm scan s (same process) | first / warm |")
        print("|---|---|---:|---:|---:|---:|")
        for stage, how, imp, first, warm in colds:
            print(f"| {stage} | {how} | {imp:.3f} | {first:.3f} | {warm:.3f} | "
                  f"{first / warm:.2f} |")
        if append:
            bench_append(data, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if failures:
        print("\nWRONG ANSWERS:\n" + "\n".join(failures))
        return 1
    print("- every Q6 revenue equals DuckDB's")
    return 0


def bench_append(data: pa.Table, root: Path) -> None:
    import caslake
    from caslake.core.write_options import ZSTD_DEFAULT_LEVEL
    from caslake.format.parquet import WRITE_PAGE_CHECKSUMS

    n = [0]

    def ours() -> None:
        n[0] += 1
        caslake.create_table(str(root / f"a{n[0]}"), data.schema).append(data)

    def raw() -> None:
        n[0] += 1
        pq.write_table(data, root / f"p{n[0]}.parquet", compression="zstd",
                       compression_level=ZSTD_DEFAULT_LEVEL, write_statistics=True,
                       row_group_size=1 << 20, **WRITE_PAGE_CHECKSUMS)

    def lance_() -> None:
        import lance

        n[0] += 1
        lance.write_dataset(data, str(root / f"l{n[0]}"))

    print("\n| append | seconds (median of 3) |\n|---|---:|")
    for name, fn in (("caslake", ours), ("pq.write_table", raw), ("lance", lance_)):
        s, _ = median_time(fn, 3)
        print(f"| {name} | {s:.3f} |")


if __name__ == "__main__":
    args = dict(a.lstrip("-").split("=", 1) if "=" in a else (a.lstrip("-"), "1")
                for a in sys.argv[1:])
    sys.exit(main(float(args.get("sf", "0.1")),
                  [int(c) for c in args.get("cores", "1,2").split(",")],
                  "append" in args))
