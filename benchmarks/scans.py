"""Scans of issue 14's synthetic table: caslake vs raw pyarrow, deltalake, Lance
and pyiceberg, in one run, and how caslake's and pyarrow's scans scale with cores.

Data (``make_data``, seeded): 5M rows (``--quick``: 1M) of

* ``id``: int64, 0..N-1 in order (the key every delete and range filter uses);
* ``ts``: timestamp[us, UTC], one millisecond apart, rising with ``id``;
* ``user``: string, low cardinality: ``user-<k>`` with k uniform in 0..999;
* ``amount``: float64 rounded to cents (gamma-distributed, mean 100), so a sum
  of ``round(amount * 100)`` as an integer is an exact, order-free checksum;
* ``payload``: string of exactly 100 random lowercase hex digits (a token or hash:
  4 bits of entropy a byte, so it compresses about 2x).

Every system (adapters in :mod:`benchmarks.peers`, each at its library's write
defaults; pyarrow raw is Parquet files written by ``pq.write_table``, deleted
from by rewriting them) gets the same Arrow table in **one append**, then a
**one-row delete** (``id = N/2 + 17``) and a **1% range delete**
(``id BETWEEN 0.6N AND 0.61N - 1``).  Then, from a freshly opened table:

* (a) **full scan of 2 columns** (``user, amount``), after the deletes;
* (b) **1-column scan at 0.1% selectivity**: ``amount`` of the rows with
  ``id BETWEEN N/2 AND N/2 + N/1000 - 1`` (the one-row delete falls inside it).

Each scan: the median of 5 warm runs, the systems interleaved (each repetition
runs every system in turn, so load changes hit them alike) after one untimed
warm-up repetition.  Each system's warm scans run in a process of its own,
started once and driven over a pipe (:class:`~benchmarks.timing.Worker`).  In
one shared process, a Lance scan tripled the kernel time and page faults of the
caslake scan after it (47 against 7-14 ms, 6,165 against 400-1,000 faults), and
the interleaved ratio of caslake to pyarrow moved from 0.84 with pyarrow alone
to 0.99-1.39 with every peer loaded, while the same two scans, alone, stayed at
0.77-0.85.  Each scan also gets a cold first run in a fresh process per system,
the median of 5 (the OS
page cache is warm).  Before its clock starts, the fresh process imports the system's package
and pandas: pyarrow imports pandas on its first conversion in any process that
has it installed (Lance imports it at import time), about 0.3 s that is no
system's own first-scan cost.  What else a first scan loads (``pyarrow.dataset``
for ``pq.read_table``) is counted.  The range filter is structured where the
library has a structured form: pyarrow's and deltalake's ``filters`` tuples,
pyiceberg's expression classes, caslake's ``col("id").between(lo, hi)``; Lance
takes SQL text.  caslake's cold scan (b) with the ``where`` as SQL text is
reported too: it counts the first parse of a SQL string in the process (sqlglot
and its DuckDB dialect load with ``import caslake``, before the clock).
Append and deletes are timed once, for reference (caslake's delete with its
expression API, like its scans: see :mod:`benchmarks.peers`).  Every result, warm and
cold, is checked against DuckDB on the same Arrow data after the same deletes:
row count, the exact cents sum of ``amount`` and the sum of the users'
numbers.  A wrong answer makes :func:`main` print ``WRONG ANSWERS`` and return
1; a peer that fails is reported (and also fails the run); caslake failing raises.

**Core scaling**: caslake's scan (a), before and after the deletes, and
``pq.read_table`` of caslake's own data files (same columns), at 1, 2 and all
cores (``pa.set_cpu_count`` and caslake's pool size, ``pools.set_threads``),
interleaved, median of 5: rows/s and the speedup over 1 core.

Run: ``PYTHONPATH=$PWD python -m benchmarks.scans [--quick] [--rows=N]
[--systems=caslake,pyarrow,...]``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from benchmarks.peers import SYSTEMS, CaslakeSystem, IdRange, Ran, System
from benchmarks.timing import (
    Check,
    Worker,
    failure,
    fresh_process,
    set_cores,
    timed,
    timed_cpu,
)

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", tz="UTC")),
                    ("user", pa.string()), ("amount", pa.float64()),
                    ("payload", pa.string())])
FULL_COLUMNS = ["user", "amount"]
SELECTIVE_COLUMNS = ["amount"]
USERS = 1000
PAYLOAD_BYTES = 100
WARM = 5
COLD = 5  # fresh processes per cold scan: single cold runs of one scan spread 1.1-1.5x
CHUNK = 1 << 20  # rows generated at a time (bounds the payload's scratch memory)
SCANS = ("full", "selective")
SQL_SCAN = "selective-sql"  # caslake only, cold only: the same scan, where as SQL text
HEX = np.frombuffer(b"0123456789abcdef", np.uint8)


class WrongAnswer(AssertionError):
    """A system's answer differs from DuckDB's on the same data."""


def _payload(rng: np.random.Generator, n: int) -> pa.Array:
    digits = HEX[rng.integers(0, 16, n * PAYLOAD_BYTES, dtype=np.uint8)]
    offsets = np.arange(0, (n + 1) * PAYLOAD_BYTES, PAYLOAD_BYTES, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(digits))


def make_data(n: int, seed: int = 14) -> pa.Table:
    """The synthetic table (see the module docstring), ``id`` 0..n-1."""
    rng = np.random.default_rng(seed)
    ids = np.arange(n, dtype=np.int64)
    users = pa.array([f"user-{k}" for k in range(USERS)], pa.string())
    return pa.table({
        "id": pa.array(ids),
        "ts": pa.array(np.int64(1_767_225_600_000_000) + ids * 1000, SCHEMA.field("ts").type),
        "user": users.take(pa.array(rng.integers(0, USERS, n))),
        "amount": pa.array(np.round(rng.gamma(2.0, 50.0, n), 2)),
        "payload": pa.chunked_array([_payload(rng, min(CHUNK, n - i))
                                     for i in range(0, n, CHUNK)], pa.string()),
    }, schema=SCHEMA)


@dataclass(frozen=True)
class Plan:
    """The deletes and scan ranges at ``n`` rows."""

    n: int

    @property
    def one_row(self) -> int:
        return self.n // 2 + 17

    @property
    def range_delete(self) -> IdRange:
        lo = int(self.n * 0.6)
        return lo, lo + self.n // 100 - 1

    @property
    def selective(self) -> IdRange:
        lo = self.n // 2
        return lo, lo + max(1, self.n // 1000) - 1


def checksum(t: pa.Table) -> dict[str, int]:
    """Rows, the exact cents sum of ``amount`` and (if read) the sum of users' numbers."""
    out = {"rows": t.num_rows,
           "cents": int(pc.sum(pc.cast(pc.round(pc.multiply(t["amount"], 100)),
                                       pa.int64())).as_py() or 0)}
    if "user" in t.column_names:
        k = pc.cast(pc.utf8_slice_codeunits(t["user"], 5), pa.int64())
        out["users"] = int(pc.sum(k).as_py() or 0)
    return out


def expected(data: pa.Table, plan: Plan) -> dict[str, dict[str, int]]:
    """DuckDB's answers for (a) and (b) on ``data`` after the plan's deletes."""
    import duckdb

    con = duckdb.connect()
    con.register("t", data)
    lo, hi = plan.range_delete
    kept = f"NOT (id = {plan.one_row} OR id BETWEEN {lo} AND {hi})"
    cents = "CAST(coalesce(sum(CAST(round(amount * 100) AS BIGINT)), 0) AS BIGINT)"
    users = "CAST(coalesce(sum(CAST(substr(\"user\", 6) AS BIGINT)), 0) AS BIGINT)"
    full = con.execute(f"SELECT count(*), {cents}, {users} FROM t WHERE {kept}").fetchone()
    s_lo, s_hi = plan.selective
    sel = con.execute(f"SELECT count(*), {cents} FROM t WHERE {kept} "
                      f"AND id BETWEEN {s_lo} AND {s_hi}").fetchone()
    assert full is not None and sel is not None
    return {"full": {"rows": int(full[0]), "cents": int(full[1]), "users": int(full[2])},
            "selective": {"rows": int(sel[0]), "cents": int(sel[1])}}


class Answers(Check):
    """DuckDB's answers for the scans (``expected``), and every comparison with them."""

    def __init__(self, want: dict[str, dict[str, int]]) -> None:
        super().__init__()
        self.want = want

    def scan(self, what: str, scan: str, got: dict[str, int]) -> None:
        self.eq(what, got, self.want[scan])


def scan_fn(system: System, scan: str, plan: Plan) -> Callable[[], pa.Table]:
    if scan == "full":
        return lambda: system.read(FULL_COLUMNS)
    if scan == SQL_SCAN:  # caslake only: the predicate as SQL text
        assert isinstance(system, CaslakeSystem)
        return lambda: system.read(SELECTIVE_COLUMNS, plan.selective, sql=True)
    return lambda: system.read(SELECTIVE_COLUMNS, plan.selective)


def cold_run(name: str, root: str, scan: str, n: int) -> None:
    """Entry point of the fresh process: one scan, after imports; prints its
    seconds and the result's checksum as JSON."""
    system = SYSTEMS[name](Path(root), defaults=True)
    t, out = timed(scan_fn(system, scan, Plan(n)))
    print(json.dumps({"seconds": t, "checksum": checksum(out)}))


def _cold(system: System, scan: str, n: int) -> tuple[float, dict[str, int]]:
    imports = "; ".join(f"import {m}" for m in ("pyarrow", "pandas", *type(system).IMPORTS))
    got = fresh_process(f"{imports}; import benchmarks.scans as b; "
                        f"b.cold_run({system.name!r}, {str(system.root)!r}, {scan!r}, {n})",
                        what=f"{system.name} {scan} scan")
    return float(got["seconds"]), {k: int(v) for k, v in got["checksum"].items()}


class ScanServer:
    """One system's warm scans, served from a :class:`~benchmarks.timing.Worker`."""

    def __init__(self, cls: type[System], root: str, n: int) -> None:
        self.system, self.plan = cls(Path(root), defaults=True), Plan(n)

    def scan(self, scan: str) -> tuple[float, float, dict[str, int]]:
        """(seconds, CPU seconds, checksum) of one scan."""
        t, cpu, out = timed_cpu(scan_fn(self.system, scan, self.plan))
        return t, cpu, checksum(out)


@dataclass
class Result(Ran):
    once: dict[str, float] = field(default_factory=dict)  # append, deletes
    warm: dict[str, list[float]] = field(default_factory=dict)
    cpu: dict[str, list[float]] = field(default_factory=dict)  # of the warm runs
    cold: dict[str, float] = field(default_factory=dict)  # median of ``colds``
    colds: dict[str, list[float]] = field(default_factory=dict)

    def seconds(self, row: str) -> float:
        if self.error:
            return math.nan
        if row in self.once:
            return self.once[row]
        scan, _, how = row.partition(" ")
        if how == "(cold)":
            return self.cold.get(scan, math.nan)
        runs = (self.cpu if how == "(warm CPU)" else self.warm).get(scan)
        return statistics.median(runs) if runs else math.nan


def build(system: System, data: pa.Table, plan: Plan, check: Answers) -> Result:
    """One append, the one-row delete, the 1% range delete: timed once each."""
    res = Result(system.name, version=str(system.version))
    res.once["append"], _ = timed(lambda: system.build([data]))
    res.files = system.data_files()
    res.once["one-row delete"], rows = timed(lambda: system.delete(plan.one_row, plan.one_row))
    if rows != 1:
        check.failures.append(f"{system.name} one-row delete: deleted {rows} rows, not 1")
    lo, hi = plan.range_delete
    res.once["1% range delete"], rows = timed(lambda: system.delete(lo, hi))
    if rows != hi - lo + 1:
        check.failures.append(f"{system.name} 1% range delete: deleted {rows} rows, "
                                f"not {hi - lo + 1}")
    return res


def bench_peers(root: Path, data: pa.Table, names: Sequence[str], check: Answers,
                warm: int = WARM, cold: bool = True) -> tuple[dict[str, Result], dict[str, System]]:
    plan = Plan(data.num_rows)
    results: dict[str, Result] = {}
    systems: dict[str, System] = {}
    for name in names:
        t0 = time.perf_counter()
        phase = "setup"
        try:
            system = SYSTEMS[name](root / name, defaults=True)
            phase = "append and deletes"
            results[name] = build(system, data, plan, check)
            systems[name] = system
            status = "ok"
        except Exception as err:
            if name == "caslake":
                raise
            results[name] = Result(name)
            results[name].error = failure(phase, err)
            status = f"FAILED ({results[name].error})"
        print(f"  {name}: built, {status}, {time.perf_counter() - t0:.1f}s", flush=True)
    t0 = time.perf_counter()
    # Interleaved: every system in turn, each repetition, each in its own process
    # (Worker).  Repetition 0 warms up and is not timed: right after the
    # builds, every system's first scan ran up to 2x slower than its later ones
    # (pyarrow's too).
    workers = {name: Worker(ScanServer, type(system), str(system.root), plan.n)
               for name, system in systems.items()}
    try:
        for rep in range(warm + 1):
            for name in list(workers):
                try:
                    for scan in SCANS:
                        t, cpu, got = workers[name].call("scan", scan)
                        check.scan(f"{name} {scan} scan (warm)", scan, got)
                        if rep:
                            results[name].warm.setdefault(scan, []).append(t)
                            results[name].cpu.setdefault(scan, []).append(cpu)
                except Exception as err:
                    if name == "caslake":
                        raise
                    results[name].error = str(err)
                    workers.pop(name).close()
                    del systems[name]
    finally:
        for worker in workers.values():
            worker.close()
    t1 = time.perf_counter()
    if cold:  # COLD fresh processes per scan, the systems interleaved
        for _ in range(COLD):
            for name, system in systems.items():
                for scan in (*SCANS, SQL_SCAN) if name == "caslake" else SCANS:
                    t, got = _cold(system, scan, plan.n)
                    check.scan(f"{name} {scan} scan (cold)", scan.removesuffix("-sql"), got)
                    results[name].colds.setdefault(scan, []).append(t)
        for r in results.values():
            r.cold = {scan: statistics.median(ts) for scan, ts in r.colds.items()}
    print(f"  warm scans {t1 - t0:.1f}s, cold scans (fresh processes) "
          f"{time.perf_counter() - t1:.1f}s", flush=True)
    return results, systems


ROWS = ["append", "one-row delete", "1% range delete", "full (warm)", "full (warm CPU)",
        "full (cold)", "selective (warm)", "selective (warm CPU)", "selective (cold)"]
LABELS = {"full": "full scan of 2 columns (user, amount), after the deletes",
          "selective": "1-column scan (amount) at 0.1% selectivity"}


def _label(row: str) -> str:
    scan, _, how = row.partition(" ")
    return f"{LABELS[scan]} {how}" if scan in LABELS else row


def _goal(row: str) -> tuple[str, float]:
    """The issue's goal for ``row``, as (text, bound on caslake / best peer)."""
    if row.endswith("(warm)"):
        return "<= 1.0x best peer", 1.0
    return "(for reference)", math.inf


def print_report(n: int, results: dict[str, Result]) -> list[str]:
    """The table of seconds with caslake / best peer; returns the goals missed."""
    names = list(results)
    missed: list[str] = []
    print(f"\n### synthetic scans: {n:,} rows (id, ts, user, amount, payload), one append, "
          f"a one-row delete, a 1% range delete; seconds, warm = median of {WARM} after a "
          "warm-up "
          "(interleaved), warm CPU = this process's CPU seconds in those runs (steadier "
          f"under load), cold = first scan in a fresh process (median of {COLD}); peers at "
          "their defaults\n")
    print("| operation | " + " | ".join(names) + " | best peer | caslake / best peer | goal "
          "| met |")
    print("|---|" + "---:|" * len(names) + "---|---:|---|---|")
    ours = results.get("caslake")
    for row in ROWS:
        vals = {m: r.seconds(row) for m, r in results.items()}
        peers = {m: v for m, v in vals.items() if m != "caslake" and not math.isnan(v)}
        best = min(peers, key=lambda m: peers[m]) if peers else None
        mine = vals.get("caslake", math.nan)
        ratio = mine / peers[best] if best else math.nan
        goal, bound = _goal(row)
        met = "yes" if ratio <= bound or bound == math.inf else "NO"
        if met == "NO":
            missed.append(f"{_label(row)}: {ratio:.2f}x {best}")
        cells = ["err" if math.isnan(v) else f"{v:.4f}" for v in vals.values()]
        print(f"| {_label(row)} | " + " | ".join(cells) + f" | {best or 'n/a'} | "
              f"{ratio:.2f} | {goal} | {met} |")
    if ours and not ours.error:
        print("\n| caslake scan | cold (s) | warm (s) | cold / warm | goal | met |")
        print("|---|---:|---:|---:|---|---|")
        for scan in SCANS:
            c, w = ours.seconds(f"{scan} (cold)"), ours.seconds(f"{scan} (warm)")
            met = "yes" if c / w <= 1.3 else "NO"
            if met == "NO":
                missed.append(f"caslake {scan} scan cold / warm: {c / w:.2f}")
            print(f"| {LABELS[scan]} | {c:.4f} | {w:.4f} | {c / w:.2f} | <= 1.3x | {met} |")
        c, w = ours.seconds(f"{SQL_SCAN} (cold)"), ours.seconds("selective (warm)")
        print(f"| {LABELS['selective']}, `where` as SQL text (its first parse falls in the "
              f"first scan) | {c:.4f} | {w:.4f} | {c / w:.2f} | (for reference) | |")
    print("\n| system | version | data files |\n|---|---|---:|")
    for r in results.values():
        print(f"| {r.name} | {r.version} | {r.files if not r.error else 'FAILED'} |")
    for r in results.values():
        if r.error:
            print(f"- **{r.name} failed** — {r.error}")
    return missed


# --- core scaling -------------------------------------------------------------------

def bench_cores(caslake_root: Path, n_rows: int, check: Answers, cores: Sequence[int],
                warm: int = WARM) -> None:
    """Scan (a) on caslake (after and before the deletes) and ``pq.read_table`` of
    caslake's own data files, at each core count: rows/s and speedup over 1 core."""
    import pyarrow.parquet as pq

    import caslake

    table = caslake.open_table(str(caslake_root))
    files = [str(caslake_root / t.file.path) for t in table.scan().plan().tasks]
    before = table.version - 2  # the append's version: each delete committed once

    fns: dict[str, Callable[[], pa.Table]] = {
        "caslake, after the deletes":
            lambda: caslake.open_table(str(caslake_root)).scan(columns=FULL_COLUMNS).to_arrow(),
        "caslake, before the deletes (same files)":
            lambda: caslake.open_table(str(caslake_root)).scan(
                columns=FULL_COLUMNS, version=before).to_arrow(),
        "pq.read_table of caslake's files": lambda: pq.read_table(files, columns=FULL_COLUMNS),
    }
    runs: dict[tuple[str, int], list[float]] = {}
    rows: dict[str, int] = {}
    try:
        for n in cores:
            set_cores(n)
            for _ in range(warm):
                for what, fn in fns.items():
                    t, out = timed(fn)
                    runs.setdefault((what, n), []).append(t)
                    rows[what] = out.num_rows
                    if what.startswith("caslake, after"):
                        check.scan(f"caslake full scan at {n} core(s)", "full", checksum(out))
                    elif out.num_rows != n_rows:
                        check.failures.append(f"{what} at {n} core(s): {out.num_rows:,} rows, "
                                                f"not {n_rows:,}")
                    del out
    finally:
        set_cores(os.cpu_count() or 1)
    print(f"\n### core scaling: full scan of 2 columns, median of {warm} (interleaved); "
          f"pa.set_cpu_count(n) and caslake pools.set_threads(n); this machine has "
          f"{os.cpu_count()} cores\n")
    print("| scan | rows | " + " | ".join(f"{n} core(s): s, M rows/s" for n in cores)
          + " | " + " | ".join(f"speedup {n}/{cores[0]}" for n in cores[1:]) + " |")
    print("|---|---:|" + "---:|" * (len(cores) + len(cores) - 1))
    for what in fns:
        med = {n: statistics.median(runs[(what, n)]) for n in cores}
        cells = [f"{med[n]:.4f} s, {rows[what] / med[n] / 1e6:.1f}" for n in cores]
        speed = [f"{med[cores[0]] / med[n]:.2f}x" for n in cores[1:]]
        print(f"| {what} | {rows[what]:,} | " + " | ".join(cells + speed) + " |")


# --- entry ---------------------------------------------------------------------------

def main(quick: bool = False, rows: int | None = None, systems: Sequence[str] | None = None,
         warm: int = WARM, cold: bool = True, cores: Sequence[int] | None = None,
         root: Path | None = None) -> int:
    """Run the suite; 0 if every answer equals DuckDB's and every system ran."""
    n = rows or (1_000_000 if quick else 5_000_000)
    names = list(systems or SYSTEMS)
    if "caslake" not in names:
        names.insert(0, "caslake")
    cores = list(cores or sorted({1, 2, os.cpu_count() or 1}))
    t0 = time.perf_counter()
    data = make_data(n)
    plan = Plan(n)
    check = Answers(expected(data, plan))
    print(f"generated {n:,} rows ({data.nbytes / 1e6:.0f} MB Arrow) in "
          f"{time.perf_counter() - t0:.1f}s; DuckDB answers: {check.want}", flush=True)
    own_root = root is None
    base = Path(tempfile.mkdtemp(prefix="caslake-bench-scans-")) if root is None else root
    try:
        results, built = bench_peers(base, data, names, check, warm, cold)
        del data
        missed = print_report(n, results)
        if "caslake" in built and cores:
            bench_cores(built["caslake"].root, n, check, cores, warm)
    finally:
        if own_root:
            shutil.rmtree(base, ignore_errors=True)
    print(f"\n(scans suite: {time.perf_counter() - t0:.0f}s wall)")
    if missed:
        print("- goals missed: " + "; ".join(missed))
    failed = [r.name for r in results.values() if r.error]
    return check.verdict(failed, "every answer (warm and cold) equals DuckDB's on the same "
                         "data after the same deletes")

if __name__ == "__main__":
    args = dict(a.lstrip("-").split("=", 1) if "=" in a else (a.lstrip("-"), "1")
                for a in sys.argv[1:])
    sys.exit(main(quick="quick" in args,
                  rows=int(args["rows"]) if "rows" in args else None,
                  systems=args["systems"].split(",") if "systems" in args else None))
