"""What multi-table transactions cost (issue 35), on the local filesystem.

* A two-table transaction (an append to each of two tables) vs the same two
  appends as two single-table commits: wall time (median of interleaved runs) and
  store requests (every request of both tables' stores).  Goal: <= 2.2x each.
* Single-table work with no transaction in flight -- an append, and a read (open
  the table and read it whole) -- against the code before multi-table
  transactions landed: that commit's ``caslake`` package is extracted with
  ``git archive`` and the same operations run in fresh processes, alternating
  today's code and it, same data, same run.  Time ratio (goal: within 10%) and
  request counts (goal: equal).  Without git (or its history) the row is skipped
  with a printed reason.

Run: ``python -m benchmarks.multitable [--quick]``.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

import caslake
from benchmarks.timing import REPO, Row, interleaved_medians, print_rows

SCHEMA = pa.schema([("id", pa.int64()), ("user", pa.string()), ("value", pa.float64())])


def batch(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "user": [f"user-{i % 97}" for i in range(start, start + n)],
                     "value": [i * 0.5 for i in range(start, start + n)]}, schema=SCHEMA)


def _requests(stores: list[Any], fn: Callable[[], object]) -> int:
    """Store requests (not bytes) ``fn`` makes through ``stores``."""
    before = [s.counters.snapshot() for s in stores]
    fn()
    total = 0
    for s, b in zip(stores, before, strict=True):
        after = s.counters.snapshot()
        total += sum(v - b.get(k, 0) for k, v in after.items() if not k.startswith("bytes"))
    return total


def bench_transaction(root: Path, rows: int, runs: int) -> list[Row]:
    """A two-table transaction vs two single-table commits of the same appends."""
    tables = {}
    for name in ("txn-a", "txn-b", "one-a", "one-b"):
        t = caslake.create_table(str(root / name), SCHEMA)
        t.append(batch(0, rows))
        tables[name] = t
    ta, tb, oa, ob = (tables[n] for n in ("txn-a", "txn-b", "one-a", "one-b"))
    step = iter(range(1, 1_000_000))

    def two_commits() -> None:
        start = next(step) * 1000
        oa.append(batch(start, 100))
        ob.append(batch(start, 100))

    def transaction() -> None:
        start = next(step) * 1000
        with caslake.transaction(ta, tb) as tx:
            tx[ta].append(batch(start, 100))
            tx[tb].append(batch(start, 100))

    med = interleaved_medians({"txn": transaction, "two": two_commits}, runs)
    req_txn = _requests([ta.store, tb.store], transaction)
    req_two = _requests([oa.store, ob.store], two_commits)
    same = (caslake.open_table(ta.uri).to_arrow().num_rows
            == caslake.open_table(oa.uri).to_arrow().num_rows)
    print(f"two-table transaction: {req_txn} requests, two single-table commits: "
          f"{req_two}; same rows in both: {same}")
    return [
        Row("two-table transaction (an append to each) vs two single-table commits: time",
            med["txn"], med["two"], "two commits", "<= 2.2x",
            same and med["txn"] <= 2.2 * med["two"]),
        Row("two-table transaction vs two single-table commits: store requests",
            req_txn, req_two, "two commits", "<= 2.2x", same and req_txn <= 2.2 * req_two,
            unit="requests"),
    ]


# The same single-table work, run in a fresh interpreter against whichever caslake
# is first on its path: medians of an append and of a read, and their requests.
SINGLE_TABLE = """
import json, statistics, sys, time
import pyarrow as pa
import caslake
root, rows, runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
schema = pa.schema([("id", pa.int64()), ("user", pa.string()), ("value", pa.float64())])
def batch(start, n):
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "user": [f"user-{i % 97}" for i in range(start, start + n)],
                     "value": [i * 0.5 for i in range(start, start + n)]}, schema=schema)
t = caslake.create_table(root + "/t", schema)
for i in range(4):
    t.append(batch(i * rows, rows))
def requests(store, fn):
    before = store.counters.snapshot()
    fn()
    after = store.counters.snapshot()
    return sum(v - before.get(k, 0) for k, v in after.items() if not k.startswith("bytes"))
def append(i=[0]):
    i[0] += 1
    t.append(batch(10_000_000 + i[0] * 100, 100))
def read():
    caslake.open_table(root + "/t").to_arrow()
times = {"append": [], "read": []}
for fn in (append, read):
    fn()
for _ in range(runs):
    for name, fn in (("append", append), ("read", read)):
        t0 = time.perf_counter(); fn(); times[name].append(time.perf_counter() - t0)
fresh = caslake.open_table(root + "/t")
req_read = requests(fresh.store, lambda: fresh.refresh().to_arrow())
req_append = requests(t.store, append)
n = caslake.open_table(root + "/t").to_arrow().num_rows
print(json.dumps({"caslake": caslake.__file__, "rows": n,
                  "append_s": statistics.median(times["append"]),
                  "read_s": statistics.median(times["read"]),
                  "append_requests": req_append, "read_requests": req_read}))
"""


def before_multitable(dest: Path) -> tuple[Path | None, str]:
    """The ``caslake`` package of the commit before multi-table transactions landed,
    extracted under ``dest``: (its path, the commit) or (None, why not)."""
    git = shutil.which("git")
    if git is None:
        return None, "git is not installed"
    log = subprocess.run([git, "-C", str(REPO), "log", "--format=%H", "--",
                          "caslake/core/multitable.py"], capture_output=True, text=True,
                         check=False)
    commits = log.stdout.split()
    if log.returncode != 0 or not commits:
        return None, f"no git history of caslake/core/multitable.py ({log.stderr.strip()})"
    base = f"{commits[-1]}^"
    archive = subprocess.run([git, "-C", str(REPO), "archive", "--format=tar", base,
                              "caslake"], capture_output=True, check=False)
    if archive.returncode != 0:
        return None, f"git archive {base} failed: {archive.stderr.decode().strip()}"
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    rev = subprocess.run([git, "-C", str(REPO), "rev-parse", "--short", base],
                         capture_output=True, text=True, check=False).stdout.strip()
    return dest, rev


def run_single_table(path: Path, root: Path, rows: int, runs: int) -> dict[str, Any]:
    """SINGLE_TABLE in a fresh interpreter with ``path`` first on its module path."""
    env = dict(os.environ, PYTHONPATH=str(path))
    root.mkdir(parents=True)
    res = subprocess.run([sys.executable, "-c", SINGLE_TABLE, str(root), str(rows),
                          str(runs)], capture_output=True, text=True, env=env, check=False,
                         cwd=root)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
    if res.returncode != 0 or not lines:
        raise RuntimeError(f"single-table run with {path} failed: {res.stderr[-2000:]}")
    out: dict[str, Any] = json.loads(lines[-1])
    assert Path(out["caslake"]).resolve().is_relative_to(path.resolve()), out
    return out


def bench_single_table(root: Path, rows: int, runs: int, rounds: int) -> list[Row]:
    """Today's single-table append and read (no transaction in flight) vs the code
    before multi-table transactions, alternating fresh processes."""
    old, rev = before_multitable(root / "before")
    if old is None:
        print(f"single-table cost vs before multi-table transactions: skipped ({rev})")
        return []
    results: dict[str, list[dict[str, Any]]] = {"now": [], "before": []}
    for r in range(rounds):
        for name, path in (("now", REPO), ("before", old)):
            results[name].append(run_single_table(path, root / f"{name}-{r}", rows, runs))
    now, before = results["now"], results["before"]
    same = {x["rows"] for x in now + before} == {now[0]["rows"]}

    def med(side: list[dict[str, Any]], key: str) -> float:
        return statistics.median(float(x[key]) for x in side)

    out = []
    for op in ("append", "read"):
        t_now, t_before = med(now, f"{op}_s"), med(before, f"{op}_s")
        r_now, r_before = med(now, f"{op}_requests"), med(before, f"{op}_requests")
        out.append(Row(f"single-table {op}, no transaction in flight, vs before multi-table "
                       f"transactions ({rev}): time", t_now, t_before, f"caslake {rev}",
                       "<= 1.1x", same and t_now <= 1.1 * t_before))
        out.append(Row(f"single-table {op}, no transaction in flight, vs {rev}: requests",
                       r_now, r_before, f"caslake {rev}", "equal",
                       same and r_now == r_before, unit="requests"))
    return out


def main(quick: bool = False, rows: int | None = None, runs: int | None = None,
         rounds: int | None = None) -> list[Row]:
    root = Path(tempfile.mkdtemp(prefix="caslake-bench-multi-"))
    n = rows if rows is not None else (20_000 if quick else 100_000)
    k = runs if runs is not None else (7 if quick else 15)
    try:
        out = bench_transaction(root / "txn", n, k)
        out += bench_single_table(root / "single", n, k,
                                  rounds if rounds is not None else (2 if quick else 3))
        print_rows("multi-table transactions: cost (local filesystem)", out)
        return out
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
