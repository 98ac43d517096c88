"""Core benchmarks against raw pyarrow.parquet on the same data, in the same run.

* append throughput vs ``pq.write_table`` (goal: >= 0.9x)
* 1-column scan filtered to 0.1% of rows, and a full 2-column scan, vs
  ``pq.read_table`` on the same files (goal: <= 1.1x the time)
* commit latency with 100,000 data files vs 100 files (goal: <= 2x)
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import caslake
from benchmarks.timing import Row, best_of, print_rows
from caslake.core.changes import Changes
from caslake.core.commit import commit_with_retry
from caslake.format.manifest import DataFile

SCHEMA = pa.schema([("id", pa.int64()), ("user", pa.string()), ("value", pa.float64()),
                    ("ts", pa.timestamp("us", tz="UTC"))])


def make_data(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({
        "id": pa.array(np.arange(n), pa.int64()),
        "user": pa.array(np.char.add("user-", rng.integers(0, 100_000, n).astype(str))),
        "value": pa.array(rng.normal(100, 15, n)),
        "ts": pa.array((np.int64(1_767_225_600_000_000) + np.arange(n) * 1000),
                       pa.timestamp("us", tz="UTC")),
    }, schema=SCHEMA)


def bench_append_and_scan(root: Path, rows: int) -> list[Row]:
    data = make_data(rows)
    out: list[Row] = []

    # --- append throughput --------------------------------------------------------
    def ours_append() -> None:
        p = root / "append"
        shutil.rmtree(p, ignore_errors=True)
        caslake.create_table(str(p), SCHEMA).append(data)

    t_ours = best_of(ours_append)
    ours_file = root / "append" / caslake.open_table(str(root / "append")).describe()[
        "data_files"][0]["path"]
    md = pq.ParquetFile(ours_file).metadata
    rg_rows = md.row_group(0).num_rows

    def peer_append(row_group_size: int | None) -> None:
        pq.write_table(data, root / "append.parquet", compression="zstd",
                       row_group_size=row_group_size)

    t_same = best_of(lambda: peer_append(rg_rows))
    t_default = best_of(lambda: peer_append(None))
    mb = data.nbytes / 1e6
    out.append(Row(f"append {rows:,} rows ({mb:.0f} MB Arrow), same layout "
                   f"({md.num_row_groups} row groups of {rg_rows:,} rows)", mb / t_ours,
                   mb / t_same, "pq.write_table", ">= 0.9x", mb / t_ours >= 0.9 * mb / t_same,
                   unit="MB/s"))
    out.append(Row(f"append {rows:,} rows, vs pyarrow's default layout (1M-row groups)",
                   mb / t_ours, mb / t_default, "pq.write_table", "(for reference)", True,
                   unit="MB/s"))

    # --- scans -------------------------------------------------------------------------
    uri = str(root / "scan")
    shutil.rmtree(uri, ignore_errors=True)
    table = caslake.create_table(uri, SCHEMA)
    per_file = rows // 4
    for i in range(4):
        table.append(data.slice(i * per_file, per_file))
    files = [str(Path(uri) / f["path"]) for f in table.describe()["data_files"]]
    lo = rows // 2
    hi = lo + rows // 1000 - 1

    def ours_filtered() -> int:
        return caslake.open_table(uri).scan(
            columns=["value"], where=f"id BETWEEN {lo} AND {hi}").to_arrow().num_rows

    def peer_filtered() -> int:
        return pq.read_table(files, columns=["value"],
                             filters=[("id", ">=", lo), ("id", "<=", hi)]).num_rows

    assert ours_filtered() == peer_filtered() == hi - lo + 1
    t_ours, t_peer = best_of(ours_filtered, 5), best_of(peer_filtered, 5)
    out.append(Row("1-column scan, 0.1% of rows", t_ours, t_peer, "pq.read_table(filters)",
                   "<= 1.1x", t_ours <= 1.1 * t_peer))

    def ours_full() -> int:
        return caslake.open_table(uri).scan(columns=["id", "value"]).to_arrow().num_rows

    def peer_full() -> int:
        return pq.read_table(files, columns=["id", "value"]).num_rows

    assert ours_full() == peer_full() == rows
    t_ours, t_peer = best_of(ours_full), best_of(peer_full)
    out.append(Row("full 2-column scan", t_ours, t_peer, "pq.read_table", "<= 1.1x",
                   t_ours <= 1.1 * t_peer))
    return out


def _synthetic(i: int) -> DataFile:
    return DataFile(path=f"data/bench/{i:09d}.parquet", size=1_000_000, etag=f'"{i:x}"',
                    row_count=10_000, row_group_count=1, footer_size=1000,
                    stats={1: {"min": i * 10_000, "max": i * 10_000 + 9_999, "nulls": 0}})


def _table_with_files(root: Path, n_files: int, chunk: int = 1000) -> caslake.Table:
    p = root / f"commit-{n_files}"
    shutil.rmtree(p, ignore_errors=True)
    t = caslake.create_table(str(p), SCHEMA)
    made = 0
    while made < n_files:
        k = min(chunk, n_files - made)
        batch = tuple(_synthetic(made + j) for j in range(k))
        commit_with_retry(t.io, lambda base, b=batch: Changes("append", add_files=b))
        made += k
    return t.refresh()


def _commit_latencies(t: caslake.Table, n: int, start: int) -> list[float]:
    lat = []
    for i in range(n):
        f = (_synthetic(start + i),)
        t0 = time.perf_counter()
        commit_with_retry(t.io, lambda base, f=f: Changes("append", add_files=f))
        lat.append(time.perf_counter() - t0)
    return lat


def bench_commit_latency(root: Path, big: int, commits: int) -> list[Row]:
    small_t = _table_with_files(root, 100)
    big_t = _table_with_files(root, big)
    small = _commit_latencies(small_t, commits, 10_000_000)
    large = _commit_latencies(big_t, commits, 20_000_000)
    p50s, p50b = statistics.median(small), statistics.median(large)
    means, meanb = statistics.fmean(small), statistics.fmean(large)
    m = big_t.snapshot.manifest
    print(f"\n{big:,}-file table after the timed commits: {len(m.files)} inline entries, "
          f"{len(m.segments)} segments, {big_t.store.head(big_t.snapshot.key).size:,}-byte root")
    return [
        Row(f"commit latency p50, {big:,} vs 100 files", p50b, p50s, "same, 100 files",
            "<= 2x", p50b <= 2 * p50s),
        Row(f"commit latency mean, {big:,} vs 100 files", meanb, means, "same, 100 files",
            "(amortised folds)", True),
    ]


def main(quick: bool = False) -> list[Row]:
    root = Path(tempfile.mkdtemp(prefix="caslake-bench-"))
    try:
        rows = bench_append_and_scan(root, 1_000_000 if quick else 5_000_000)
        rows += bench_commit_latency(root, 10_000 if quick else 100_000, 50 if quick else 200)
        print_rows("core: caslake vs raw pyarrow.parquet (local filesystem)", rows)
        return rows
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    import sys

    main(quick="--quick" in sys.argv)
