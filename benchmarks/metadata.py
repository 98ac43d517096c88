"""Metadata at scale (issue 16): what a point read, a one-row delete, a commit and the
first batch of a streaming scan cost on a table of 100 vs 3,000 vs 100,000 files.

Tables are local-store tables of 1-row data files, every one a distinct Parquet
file (row ``id = i``, written by caslake's own writer with
``target_file_size=1, row_group_size=1``, in parallel processes) and all of
them committed by ONE commit, as one append of many batches would: a table
committed in chunks of 1,000, or whose files were hard links of one file (this
benchmark's recipe 3), hid that a streaming scan's first batch read every
file's footer (issue 27).  One commit puts every entry in one segment, the
worst case for anything that walks entries; ids ascend with the files, so the
table is perfectly clustered (the best case for statistics, which is the case
the segment summaries are built for).

Each operation runs in a fresh process (so a timeout can stop it, and the
first, cold call is measured too) and reports the cold time and the median of
``repeat`` warm runs:

* ``point``: ``open_table`` + ``scan(where="id = 7").to_arrow()`` (1 row);
* ``delete``: ``delete("id = k")`` on an open table, a different k each time;
* ``commit``: commit of a 1-row append (file written beforehand);
* ``first_batch``: ``open_table``, ``scan().to_reader()``, ``read_next_batch()``;
* ``memory``: peak RSS of a cold point read above the process's baseline.

Building the 100,000-file table takes minutes, so built tables are kept in a
cache directory (``--cache``, or ``$CASLAKE_BENCH_CACHE``, default
``~/.cache/caslake-bench/metadata``) under a name that records the build recipe
and the metadata layout (format version, inline limit, block size); each run
works on a copy whose immutable objects are hard links to the cached ones (so a
copy is made in seconds and the cached table is never changed) and whose
pointer is a real copy.

``python -m benchmarks.metadata [--sizes 100,3000,10000,100000] [--timeout 300] [--cache DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

import caslake
from benchmarks.timing import Row, print_rows
from caslake.core import changes as changes_policy
from caslake.core.changes import Changes
from caslake.core.commit import commit_with_retry
from caslake.format import FORMAT_VERSION
from caslake.format import segment as segment_format
from caslake.format.keys import DATA_PREFIX, MANIFEST_PREFIX, SEGMENT_PREFIX, TOMBSTONE_PREFIX
from caslake.format.manifest import DataFile
from caslake.ops.write import WriteOptions, write_data_files

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
FILLER_ID = 1_000_000_000
CHUNK = 1000  # files per writing task (all committed at once)
TINY = WriteOptions(target_file_size=1, row_group_size=1)
OPS = ("point", "first_batch", "memory", "delete", "commit")


def _rows(ids: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"v{i}" for i in ids]},
                    schema=SCHEMA)


def _write_files(t: caslake.Table, ids: list[int]) -> list[DataFile]:
    return write_data_files(t.store, _rows(ids).to_reader(max_chunksize=1), t.table_schema,
                            TINY)


def _commit(t: caslake.Table, files: tuple[DataFile, ...]) -> None:
    commit_with_retry(t.io, lambda base: Changes("append", add_files=files))


def _write_range(uri: str, lo: int, hi: int) -> list[DataFile]:
    return _write_files(caslake.open_table(uri), list(range(lo, hi)))


def build_table(path: Path, n_files: int) -> str:
    """A table of ``n_files`` one-row data files in one commit (see the module
    docstring)."""
    from concurrent.futures import ProcessPoolExecutor

    shutil.rmtree(path, ignore_errors=True)
    uri = str(path)
    t = caslake.create_table(uri, SCHEMA)
    starts = list(range(0, n_files, CHUNK))
    with ProcessPoolExecutor(max(1, os.cpu_count() or 1)) as pool:
        parts = pool.map(_write_range, [uri] * len(starts), starts,
                         [min(n_files, lo + CHUNK) for lo in starts])
        files = tuple(f for part in parts for f in part)
    _commit(t, files)
    return uri


BUILD_RECIPE = 4  # bump when build_table, or the folding policy, changes what it builds
_IMMUTABLE = tuple(p.rstrip("/") for p in (DATA_PREFIX, MANIFEST_PREFIX, SEGMENT_PREFIX,
                                           TOMBSTONE_PREFIX))


def default_cache() -> Path:
    env = os.environ.get("CASLAKE_BENCH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "caslake-bench" / "metadata"


def cached_table(cache: Path, n_files: int) -> Path:
    """The cached pristine table of ``n_files`` files, built on first use."""
    name = (f"r{BUILD_RECIPE}-f{FORMAT_VERSION}-i{changes_policy.INLINE_LIMIT}"
            f"-b{segment_format.BLOCK_FILES}-n{n_files}")
    path = cache / name
    if not (path / ".complete").exists():
        t0 = time.perf_counter()
        build_table(path, n_files)
        (path / ".complete").write_text("")
        print(f"built {n_files:,}-file table in {time.perf_counter() - t0:.1f} s "
              f"(cached in {path})", flush=True)
    return path


def working_copy(src: Path, dst: Path) -> str:
    """A copy of a cached table to run on: immutable objects (written create-only,
    never changed in place) are hard links; everything else is copied."""
    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir(parents=True)
    for entry in src.iterdir():
        if entry.name == ".complete":
            continue
        if entry.is_dir():
            shutil.copytree(entry, dst / entry.name, symlinks=True,
                            copy_function=os.link if entry.name in _IMMUTABLE else shutil.copy2)
        else:
            shutil.copy2(entry, dst / entry.name)
    return str(dst)


# --- one operation, in its own process ------------------------------------------------


_CPU: list[float] = []  # process CPU seconds of each timed run (all threads)


def _timed(fn: Any) -> float:
    c0 = time.process_time()
    t0 = time.perf_counter()
    fn()
    elapsed = time.perf_counter() - t0
    _CPU.append(time.process_time() - c0)
    return elapsed


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(field)


BUDGET = 30.0  # seconds of warm runs per operation: slow ones are repeated fewer times


def _repeat(fn: Any, repeat: int) -> list[float]:
    """The cold run, then up to ``repeat`` warm runs within BUDGET seconds."""
    times = [_timed(fn)]
    start = time.perf_counter()
    while len(times) <= repeat and (len(times) < 2 or time.perf_counter() - start < BUDGET):
        times.append(_timed(fn))
    return times


def run_op(op: str, uri: str, repeat: int) -> dict[str, Any]:
    if op == "memory":
        with open("/proc/self/clear_refs", "w") as f:  # reset the peak (VmHWM) to now
            f.write("5")
        base = _rss_kib("VmRSS")
        rows = caslake.open_table(uri).scan(where="id = 7").to_arrow().num_rows
        assert rows == 1, rows
        return {"peak_above_baseline_mb": (_rss_kib("VmHWM") - base) / 1024}
    times: list[float] = []
    if op == "point":
        def point() -> None:
            n = caslake.open_table(uri).scan(where="id = 7").to_arrow().num_rows
            assert n == 1, n
        times = _repeat(point, repeat)
    elif op == "first_batch":
        def first() -> None:
            reader = caslake.open_table(uri).scan().to_reader()
            assert reader.read_next_batch().num_rows >= 1
        times = _repeat(first, repeat)
    elif op == "delete":
        t = caslake.open_table(uri)
        ids = iter(range(9, 9 + repeat + 1))

        def delete() -> None:
            res = t.delete(f"id = {next(ids)}")
            assert res.rows_deleted == 1 and not res.noop, res
        times = _repeat(delete, repeat)
    elif op == "commit":
        t = caslake.open_table(uri)
        files = iter(_write_files(t, list(range(FILLER_ID + 1, FILLER_ID + 2 + repeat))))
        times = _repeat(lambda: _commit(t, (next(files),)), repeat)
    else:
        raise SystemExit(f"unknown op {op}")
    # CPU time too: on a shared, loaded machine it shows the work apart from the wait
    return {"cold": times[0], "median": statistics.median(times[1:]), "runs": len(times) - 1,
            "cpu_median": statistics.median(_CPU[1:])}


def measure(uri: str, op: str, repeat: int, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.metadata", "--op", op, "--table", uri,
           "--repeat", str(repeat)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=True,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    except subprocess.TimeoutExpired:
        return {"timeout": timeout}
    except subprocess.CalledProcessError as e:
        return {"error": e.stderr[-800:]}
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _fmt(r: dict[str, Any], key: str) -> str:
    if "timeout" in r:
        return f"> {r['timeout']:.0f} s (timeout)"
    if "error" in r:
        return "error"
    v = r[key]
    return f"{v:.1f} MB" if key.endswith("mb") else f"{v * 1000:.1f} ms"


def run(sizes: list[int], repeat: int, timeout: float, cache: Path | None = None
        ) -> dict[int, dict[str, dict[str, Any]]]:
    cache = cache or default_cache()
    cache.mkdir(parents=True, exist_ok=True)
    # Working copies beside the cache: hard links need the same file system.
    root = Path(tempfile.mkdtemp(prefix="run-", dir=cache))
    results: dict[int, dict[str, dict[str, Any]]] = {}
    try:
        for n in sizes:
            uri = working_copy(cached_table(cache, n), root / f"t{n}")
            results[n] = {}
            for op in OPS:
                results[n][op] = r = measure(uri, op, repeat, timeout)
                key = "peak_above_baseline_mb" if op == "memory" else "median"
                print(f"  {n:>9,} files  {op:<12} "
                      f"{_fmt(r, key)}" + (f"  (cold {_fmt(r, 'cold')}, CPU "
                                           f"{_fmt(r, 'cpu_median')})" if "cold" in r else ""),
                      flush=True)
                if "error" in r:
                    print(r["error"], flush=True)
            shutil.rmtree(root / f"t{n}", ignore_errors=True)  # the cached table stays
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return results


GOALS = {  # op: (absolute limit in seconds, limit on the ratio to the smallest table)
    "point": (0.050, 5.0), "delete": (0.030, 5.0), "commit": (None, 2.0),
}
FIRST_BATCH_LIMIT = 0.300  # seconds: the first batch of a streaming scan, any table size


def rows_for(results: dict[int, dict[str, dict[str, Any]]]) -> list[Row]:
    small, big = min(results), max(results)
    out = []
    for op, (limit, ratio) in GOALS.items():
        a, b = results[small][op], results[big][op]
        if "median" not in a or "median" not in b:
            continue
        ok = (limit is None or b["median"] <= limit) and (
            ratio is None or b["median"] <= ratio * a["median"])
        goal = " and ".join(x for x in (f"<= {limit * 1000:.0f} ms" if limit else "",
                                        f"<= {ratio:.0f}x" if ratio else "") if x)
        out.append(Row(f"{op}, {big:,} vs {small:,} files", b["median"], a["median"],
                       f"same, {small:,} files", goal, ok))
    # Time to the first batch of ``scan().to_reader()`` in a fresh process, on each
    # table of 10,000 files or more (all committed at once) against the smallest.
    for n in sorted(results):
        r, a = results[n]["first_batch"], results[small]["first_batch"]
        if n < 10_000 or "median" not in r or "median" not in a:
            continue
        out.append(Row(f"first batch, {n:,} one-row files in one commit (cold "
                       f"{r['cold'] * 1000:.0f} ms)", r["median"], a["median"],
                       f"same, {small:,} files", f"<= {FIRST_BATCH_LIMIT * 1000:.0f} ms",
                       r["median"] <= FIRST_BATCH_LIMIT and r["cold"] <= 2 * FIRST_BATCH_LIMIT))
    mem = results[big]["memory"]
    if "peak_above_baseline_mb" in mem:
        mb = mem["peak_above_baseline_mb"]
        out.append(Row(f"point-read peak memory above baseline, {big:,} files", mb, 100.0,
                       "limit", "<= 100 MB", mb <= 100, unit="MB"))
    return out


def main(quick: bool = False, sizes: list[int] | None = None, repeat: int = 15,
         timeout: float = 300, cache: Path | None = None) -> list[Row]:
    sizes = sizes or ([100, 3000, 10_000] if quick else [100, 3000, 10_000, 100_000])
    results = run(sizes, repeat, timeout, cache)
    rows = rows_for(results)
    print_rows("metadata at scale: operation cost on a large table vs a small one", rows)
    return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--op")
    ap.add_argument("--table")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--sizes", default="")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--cache", type=Path, help="where built tables are kept (see the docstring)")
    args = ap.parse_args()
    if args.op:
        print(json.dumps(run_op(args.op, args.table, args.repeat)))
    else:
        sizes = [int(s) for s in args.sizes.split(",") if s] or None
        res = run(sizes or ([100, 3000, 10_000] if args.quick else [100, 3000, 10_000, 100_000]),
                  args.repeat, args.timeout, args.cache)
        if args.json:
            Path(args.json).write_text(json.dumps({str(k): v for k, v in res.items()}, indent=1))
        print_rows("metadata at scale", rows_for(res))
