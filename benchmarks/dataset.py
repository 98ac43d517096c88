"""Datasets (RFC-0008): caslake's ParquetDatasetStore vs raw pyarrow.parquet and vs
remote-store's own implementation, on the same data, backend and durability.

* local filesystem: caslake's LocalStore fsyncs every object, so the raw
  ``pq.write_table`` baseline fsyncs its file and directory too; remote-store
  writes through its LocalBackend (its own durability, reported as is);
* moto S3: caslake's S3Store vs ``pq.write_table`` / ``pq.read_table`` through
  pyarrow's own S3FileSystem on the same server;
* a streaming write of a ~2 GB RecordBatchReader in a fresh process, reporting
  its peak RSS (VmHWM).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from benchmarks.timing import Row, best_of, print_rows
from caslake.dataset import ParquetDatasetStore
from caslake.store import LocalStore, S3Store
from caslake.testing.moto_server import REGION, run_moto_server, storage_options

STREAM_BYTES = 2 * 1024**3
RSS_LIMIT_MB = 500


def make_table(rows: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({
        "id": pa.array(np.arange(rows, dtype=np.int64)),
        "user": pa.array(rng.integers(0, 100_000, rows)).cast(pa.string()),
        "amount": pa.array(rng.normal(100, 30, rows)),
        "ts": pa.array(rng.integers(1_700_000_000_000, 1_800_000_000_000, rows),
                       pa.timestamp("ms")),
    })


def _fsync_write(table: pa.Table, path: Path) -> None:
    pq.write_table(table, path, compression="zstd")
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def bench_local(root: Path, rows: int) -> list[Row]:
    table = make_table(rows)
    pds = ParquetDatasetStore(LocalStore(root / "caslake"))
    raw = root / "raw"
    raw.mkdir()
    n = {"c": 0, "r": 0, "s": 0}

    def ours_write() -> None:
        n["c"] += 1
        pds.write_dataset(table, f"w{n['c']}")

    def raw_write() -> None:
        n["r"] += 1
        _fsync_write(table, raw / f"w{n['r']}.parquet")

    t_ours_w = best_of(ours_write)
    t_raw_w = best_of(raw_write)
    t_ours_r = best_of(lambda: pds.read_dataset("w1"))
    t_raw_r = best_of(lambda: pq.read_table(raw / "w1.parquet"))
    rows_out = [
        Row(f"write_dataset {rows:,} rows (fsync)", t_ours_w, t_raw_w,
            "pq.write_table + fsync", "<= 1.11x (>= 0.9x throughput)", t_ours_w <= 1.11 * t_raw_w),
        Row(f"read_dataset {rows:,} rows", t_ours_r, t_raw_r, "pq.read_table",
            "<= 1.11x (>= 0.9x throughput)", t_ours_r <= 1.11 * t_raw_r),
    ]
    try:
        from remote_store import Store
        from remote_store.backends import LocalBackend
        from remote_store.ext.parquet import ParquetDatasetStore as RemoteStorePDS
    except ImportError:
        print("remote-store is not installed: skipping the remote-store comparison")
        return rows_out
    (root / "rs").mkdir()
    rs = RemoteStorePDS(Store(LocalBackend(str(root / "rs"))))

    def rs_write() -> None:
        n["s"] += 1
        rs.write_dataset(table, f"w{n['s']}")

    t_rs_w = best_of(rs_write)
    t_rs_r = best_of(lambda: rs.read_dataset("w1"))
    rows_out += [
        Row(f"write_dataset {rows:,} rows", t_ours_w, t_rs_w, "remote-store write_dataset",
            "<= 1.0x (on par or faster)", t_ours_w <= 1.05 * t_rs_w),
        Row(f"read_dataset {rows:,} rows", t_ours_r, t_rs_r, "remote-store read_dataset",
            "<= 1.0x (on par or faster)", t_ours_r <= 1.05 * t_rs_r),
    ]
    return rows_out


def bench_s3(rows: int) -> list[Row]:
    import boto3

    table = make_table(rows, seed=1)
    with run_moto_server() as endpoint:
        opts = storage_options(endpoint)
        bucket = f"bench-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=endpoint, region_name=REGION,
                     aws_access_key_id=opts["access_key_id"],
                     aws_secret_access_key=opts["secret_access_key"]).create_bucket(Bucket=bucket)
        pds = ParquetDatasetStore(S3Store(f"s3://{bucket}/ours", opts))
        fs = pafs.S3FileSystem(access_key=opts["access_key_id"],
                               secret_key=opts["secret_access_key"], region=REGION,
                               endpoint_override=endpoint, scheme="http")
        n = {"c": 0, "r": 0}

        def ours_write() -> None:
            n["c"] += 1
            pds.write_dataset(table, f"w{n['c']}")

        def raw_write() -> None:
            n["r"] += 1
            pq.write_table(table, f"{bucket}/raw/w{n['r']}.parquet", filesystem=fs,
                           compression="zstd")

        t_ours_w = best_of(ours_write)
        t_raw_w = best_of(raw_write)
        t_ours_r = best_of(lambda: pds.read_dataset("w1"))
        t_raw_r = best_of(lambda: pq.read_table(f"{bucket}/raw/w1.parquet", filesystem=fs))
    return [
        Row(f"moto S3 write_dataset {rows:,} rows", t_ours_w, t_raw_w,
            "pq.write_table (pyarrow S3)", "<= 1.11x", t_ours_w <= 1.11 * t_raw_w),
        Row(f"moto S3 read_dataset {rows:,} rows", t_ours_r, t_raw_r,
            "pq.read_table (pyarrow S3)", "<= 1.11x", t_ours_r <= 1.11 * t_raw_r),
    ]


def _stream_batches(total_bytes: int) -> Iterator[pa.RecordBatch]:
    made = 0
    seed = 0
    while made < total_bytes:
        b = make_table(262_144, seed).combine_chunks().to_batches()[0]
        seed += 1
        made += b.nbytes
        yield b


def streaming_child(root: str, total_bytes: int) -> None:
    """Run in a fresh process: stream ``total_bytes`` of Arrow data into a dataset."""
    schema = make_table(1).schema
    reader = pa.RecordBatchReader.from_batches(schema, _stream_batches(total_bytes))
    m = ParquetDatasetStore(LocalStore(root)).write_dataset(reader, "stream")
    with open("/proc/self/status") as f:
        hwm = next(line for line in f if line.startswith("VmHWM")).split()[1]
    print(f"{m.row_count} {len(m.parts)} {int(hwm) // 1024}")


def bench_streaming_rss(root: Path, total_bytes: int) -> list[Row]:
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from benchmarks.dataset import streaming_child; "
         f"streaming_child(sys.argv[1], {total_bytes})", str(root / "stream")],
        capture_output=True, text=True, check=True,
        cwd=Path(__file__).resolve().parents[1])
    rows, parts, hwm_mb = (int(x) for x in proc.stdout.split())
    print(f"streaming write: {total_bytes / 1024**3:.1f} GiB of Arrow data, {rows:,} rows, "
          f"{parts} parts, peak RSS {hwm_mb} MB")
    return [Row(f"streaming write of {total_bytes / 1024**3:.1f} GiB: peak RSS (VmHWM)",
                float(hwm_mb), float(RSS_LIMIT_MB), "limit", f"< {RSS_LIMIT_MB} MB",
                hwm_mb < RSS_LIMIT_MB, unit="MB")]


def main(quick: bool = False) -> list[Row]:
    root = Path(tempfile.mkdtemp(prefix="caslake-bench-dataset-"))
    try:
        rows = bench_local(root, 1_000_000 if quick else 4_000_000)
        rows += bench_s3(300_000 if quick else 1_000_000)
        rows += bench_streaming_rss(root, STREAM_BYTES // (8 if quick else 1))
        print_rows("datasets: caslake ParquetDatasetStore vs raw pyarrow and remote-store", rows)
        return rows
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
