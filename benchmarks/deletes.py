"""Delete benchmarks: caslake tombstones vs deltalake, pyiceberg and Lance, one run.

Every system gets its own copy of the same Arrow data (5M rows, ``id`` sorted;
``--quick``: 1M) on the local filesystem, laid out the same way: 4 data files
of N/4 rows each (4 appends).  Then, on each system in turn and sequentially
on the same table (never reset between steps):

1. 5 one-row deletes ``id = k`` at ids spread over the table (median time);
2. one delete of a 1% id range ``id BETWEEN a AND b``;
3. a full scan of every row and column to Arrow, from a freshly opened table.

Only the delete call itself is timed, on a table handle opened beforehand.
Rows deleted are cross-checked (every system must agree), and the bytes each
delete wrote are measured as the growth of the table's directory.

caslake only (narrow ``id, value`` tables):

4. one-row delete at 50M rows vs 5M rows (``--quick``: 10M vs 1M);
5. a full 2-column scan after 1, 100 and 1,000 one-row delete commits (each a
   tombstone object) vs the same scan with none, all on one table via
   ``scan(version=v)`` so the data files are identical.

Goals: caslake's one-row delete faster than Lance's and >= 20x faster than
deltalake's and pyiceberg's; 50M/5M <= 1.5x; 1,000-tombstone scan <= 1.3x none.
"""

from __future__ import annotations

import gc
import math
import shutil
import statistics
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

import caslake
from benchmarks.core import make_data
from benchmarks.peers import PEERS, CaslakeSystem, Ran, System, dir_bytes
from benchmarks.timing import Row, best_of, failure, print_rows

NARROW = pa.schema([("id", pa.int64()), ("value", pa.float64())])
FILES = 4  # data files (appends) per table, for every system
ONE_ROW_DELETES = 5
RANGE_FRACTION = 0.01


@dataclass
class Outcome(Ran):
    build_s: float = math.nan
    one_row_s: list[float] = field(default_factory=list)
    one_row_rows: list[int] = field(default_factory=list)
    one_row_bytes: list[int] = field(default_factory=list)
    range_s: float = math.nan
    range_rows: int = -1
    range_bytes: int = -1
    scan_s: float = math.nan
    scan_rows: int = -1
    requests: dict[str, int] = field(default_factory=dict)

    @property
    def one_row_median(self) -> float:
        return statistics.median(self.one_row_s) if self.one_row_s else math.nan


def _timed_delete(system: System, lo: int, hi: int) -> tuple[float, int, int]:
    """(seconds, rows the system reports deleted, bytes its directory grew by)."""
    before = dir_bytes(system.root)
    gc.collect()
    t0 = time.perf_counter()
    rows = system.delete(lo, hi)
    elapsed = time.perf_counter() - t0
    return elapsed, rows, dir_bytes(system.root) - before


def run_system(cls: type[System], root: Path, batches: list[pa.Table], ids: list[int],
               rng: tuple[int, int]) -> Outcome:
    out = Outcome(cls.name)
    phase = "import"
    try:
        system = cls(root / cls.name)
        out.version = str(getattr(system, "version", "?"))
        phase = "build"
        t0 = time.perf_counter()
        system.build(batches)
        out.build_s = time.perf_counter() - t0
        out.files = system.data_files()
        phase = "one-row delete"
        for k in ids:
            t, rows, grew = _timed_delete(system, k, k)
            out.one_row_s.append(t)
            out.one_row_rows.append(rows)
            out.one_row_bytes.append(grew)
        if isinstance(system, CaslakeSystem) and system.requests:
            out.requests = system.requests[-1]
        phase = "range delete"
        out.range_s, out.range_rows, out.range_bytes = _timed_delete(system, *rng)
        phase = "full scan"
        counts: list[int] = []
        out.scan_s = best_of(lambda: counts.append(system.scan().num_rows), 3)
        out.scan_rows = counts[-1]
    except Exception as err:  # a peer that fails is reported, never given a number
        out.error = failure(phase, err)
    finally:
        shutil.rmtree(root / cls.name, ignore_errors=True)
        gc.collect()
    return out


def _fmt_bytes(n: float) -> str:
    if n < 0 or math.isnan(n):
        return "?"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def bench_peers(root: Path, n: int) -> tuple[list[Row], list[Outcome], tuple[int, int]]:
    t0 = time.perf_counter()
    data = make_data(n)
    per = n // FILES
    batches = [data.slice(i * per, per if i < FILES - 1 else n - i * per) for i in range(FILES)]
    print(f"generated {n:,} rows ({data.nbytes / 1e6:.0f} MB Arrow) in "
          f"{time.perf_counter() - t0:.1f}s; {FILES} files of {per:,} rows per system")
    # one-row deletes spread over all four files, none inside the 1% range
    ids = [int(n * f) + 7 for f in (0.03, 0.27, 0.51, 0.74, 0.98)][:ONE_ROW_DELETES]
    lo = int(n * 0.6)
    rng = (lo, lo + int(n * RANGE_FRACTION) - 1)
    outcomes = []
    for cls in (CaslakeSystem, *PEERS):
        t0 = time.perf_counter()
        o = run_system(cls, root, batches, ids, rng)
        status = f"FAILED ({o.error})" if o.error else "ok"
        print(f"  {cls.name}: {status}, {time.perf_counter() - t0:.1f}s", flush=True)
        outcomes.append(o)
    del data, batches

    ours = outcomes[0]
    rows: list[Row] = []
    goals = {"lance": ("< 1x (faster)", 1.0), "deltalake": ("<= 0.05x (>= 20x faster)", 0.05),
             "pyiceberg": ("<= 0.05x (>= 20x faster)", 0.05)}
    for peer in outcomes[1:]:
        label = peer.name if peer.error is None else f"{peer.name} (FAILED, see below)"
        goal, bound = goals.get(peer.name, ("(for reference)", math.inf))
        r = Row(f"one-row delete on {n:,} rows (median of {len(ids)}), vs {peer.name}",
                ours.one_row_median, peer.one_row_median, label, goal,
                ours.one_row_median < bound * peer.one_row_median)
        rows.append(r)
    for peer in outcomes[1:]:
        label = peer.name if peer.error is None else f"{peer.name} (FAILED)"
        rows.append(Row(f"1% range delete ({rng[1] - rng[0] + 1:,} rows), vs {peer.name}",
                        ours.range_s, peer.range_s, label, "(for reference)",
                        not math.isnan(ours.range_s) and not math.isnan(peer.range_s)))
    for peer in outcomes[1:]:
        label = peer.name if peer.error is None else f"{peer.name} (FAILED)"
        rows.append(Row(f"full scan after the deletes, all columns, vs {peer.name}",
                        ours.scan_s, peer.scan_s, label, "(for reference)",
                        not math.isnan(ours.scan_s) and not math.isnan(peer.scan_s)))
    return rows, outcomes, rng


def print_crosscheck(outcomes: list[Outcome], n: int, rng: tuple[int, int]) -> bool:
    expect_range = rng[1] - rng[0] + 1
    expect = ([1] * ONE_ROW_DELETES, expect_range, n - ONE_ROW_DELETES - expect_range)
    print("\n### deletes: rows deleted (cross-check) and bytes written\n")
    print("| system | version | data files | rows deleted, one-row deletes | "
          "rows deleted, 1% range | rows in full scan after | bytes written per one-row "
          "delete (median) | bytes written, 1% range delete | build time |")
    print("|---|---|---:|---|---:|---:|---:|---:|---:|")
    agree = True
    for o in outcomes:
        if o.error:
            print(f"| {o.name} | {o.version} | FAILED | | | | | | |")
            continue
        got = (o.one_row_rows, o.range_rows, o.scan_rows)
        agree &= got == expect
        print(f"| {o.name} | {o.version} | {o.files} | {o.one_row_rows} | {o.range_rows:,} | "
              f"{o.scan_rows:,} | {_fmt_bytes(statistics.median(o.one_row_bytes))} | "
              f"{_fmt_bytes(o.range_bytes)} | {o.build_s:.1f} s |")
    print(f"\nexpected: {expect[0]}, {expect[1]:,}, {expect[2]:,}; every system that ran "
          f"agrees: {'yes' if agree else 'NO'}")
    ours = outcomes[0]
    if ours.requests:
        reqs = ", ".join(f"{k}={v}" for k, v in sorted(ours.requests.items()) if v)
        print(f"caslake store requests for its last one-row delete: {reqs}")
    for o in outcomes:
        if o.error:
            print(f"**{o.name} failed** — {o.error}")
    return agree


def _narrow(start: int, n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({"id": pa.array(np.arange(start, start + n), pa.int64()),
                     "value": pa.array(rng.normal(100, 15, n))}, schema=NARROW)


def _narrow_table(uri: str, n: int, chunk: int = 5_000_000) -> caslake.Table:
    table = caslake.create_table(uri, NARROW)
    for i, start in enumerate(range(0, n, chunk)):
        table.append(_narrow(start, min(chunk, n - start), seed=i))
    return table


def _one_row_delete(table: caslake.Table, k: int) -> tuple[float, int]:
    """(seconds, bytes the table directory grew by) for ``delete("id = k")``."""
    root = Path(table.uri.removeprefix("file://"))
    before = dir_bytes(root)
    t0 = time.perf_counter()
    result = table.delete(f"id = {k}")
    elapsed = time.perf_counter() - t0
    assert result.rows_deleted == 1, result
    return elapsed, dir_bytes(root) - before


def bench_scale(root: Path, small: int, big: int, count: int = 9) -> list[Row]:
    t0 = time.perf_counter()
    tables = {small: _narrow_table(str(root / "scale-small"), small),
              big: _narrow_table(str(root / "scale-big"), big)}
    print(f"built narrow caslake tables of {small:,} and {big:,} rows in "
          f"{time.perf_counter() - t0:.1f}s ({len(tables[small].describe()['data_files'])} and "
          f"{len(tables[big].describe()['data_files'])} data files)")
    times: dict[int, list[float]] = {small: [], big: []}
    grew: dict[int, list[int]] = {small: [], big: []}
    # interleaved (small, big, small, ...) so drift on the machine hits both alike
    for f in np.linspace(0.02, 0.98, count):
        for n, table in tables.items():
            t, b = _one_row_delete(table, int(n * f))
            times[n].append(t)
            grew[n].append(b)
    print(f"bytes written per one-row delete (median): "
          f"{_fmt_bytes(statistics.median(grew[small]))} at {small:,} rows, "
          f"{_fmt_bytes(statistics.median(grew[big]))} at {big:,} rows")
    shutil.rmtree(root / "scale-small", ignore_errors=True)
    shutil.rmtree(root / "scale-big", ignore_errors=True)
    ts, tb = statistics.median(times[small]), statistics.median(times[big])
    return [Row(f"caslake one-row delete (median of {count}), {big:,} vs {small:,} rows",
                tb, ts, f"caslake, {small:,} rows", "<= 1.5x", tb <= 1.5 * ts)]


def bench_tombstones(root: Path, n: int, marks: tuple[int, ...] = (1, 100, 1000)) -> list[Row]:
    uri = str(root / "tombstones")
    table = _narrow_table(uri, n)
    versions = {0: table.version}
    ids = np.linspace(n * 0.001, n * 0.999, marks[-1]).astype(np.int64)
    assert len(np.unique(ids)) == len(ids)
    lat = []
    t0 = time.perf_counter()
    for i, k in enumerate(ids, start=1):
        t1 = time.perf_counter()
        result = table.delete(f"id = {int(k)}")
        lat.append(time.perf_counter() - t1)
        assert result.rows_deleted == 1 and not result.noop, result
        if i in marks:
            versions[i] = result.version
    print(f"{marks[-1]:,} one-row delete commits on {n:,} rows in {time.perf_counter() - t0:.1f}s "
          f"(p50 of the first 100: {statistics.median(lat[:100]) * 1000:.1f} ms, "
          f"of the last 100: {statistics.median(lat[-100:]) * 1000:.1f} ms)")

    def scan_at(v: int) -> int:
        return caslake.open_table(uri).scan(columns=["id", "value"],
                                            version=v).to_arrow().num_rows

    times = {}
    for k, v in versions.items():
        assert scan_at(v) == n - k, (k, v)
        times[k] = best_of(lambda v=v: scan_at(v), 5)
    shutil.rmtree(uri, ignore_errors=True)
    return [Row(f"caslake full 2-column scan of {n:,} rows, {k:,} tombstone"
                f"{'s' if k > 1 else ''} vs none", times[k], times[0],
                "caslake, no tombstones", "<= 1.3x" if k == marks[-1] else "(for reference)",
                times[k] <= 1.3 * times[0] if k == marks[-1] else True)
            for k in marks]


def _guard(title: str, fn: object) -> list[Row]:
    """Run one caslake-only part; a failure is printed, not fatal to the other parts."""
    try:
        return fn()  # type: ignore[operator, no-any-return]
    except Exception as err:
        print(f"**{title} failed** — {type(err).__name__}: {err}")
        traceback.print_exc()
        return []


def main(quick: bool = False) -> list[Row]:
    n = 1_000_000 if quick else 5_000_000
    small, big = (1_000_000, 10_000_000) if quick else (5_000_000, 50_000_000)
    root = Path(tempfile.mkdtemp(prefix="caslake-bench-deletes-"))
    t0 = time.perf_counter()
    try:
        rows, outcomes, rng = bench_peers(root, n)
        rows += _guard("scale", lambda: bench_scale(root, small, big))
        rows += _guard("tombstones", lambda: bench_tombstones(root, small))
        print_rows("deletes: caslake vs deltalake, pyiceberg, lance (local filesystem)", rows)
        print_crosscheck(outcomes, n, rng)
        print(f"\n(deletes suite: {time.perf_counter() - t0:.0f}s wall)")
        return rows
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    import sys

    main(quick="--quick" in sys.argv)
