"""gc and the leftovers no listing shows (issue 27): a crashed writer's staging file in
the local store's ``.caslake-tmp/`` and an unfinished S3 multipart upload anywhere
under the table's prefix.  Both hold row data; both are collected by gc's rule for
orphans -- older than the cutoff, behind the fence -- and a live writer's fresh
staging file is never touched.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

import caslake
from caslake.cli import main as cli_main
from caslake.core import WriteOptions
from caslake.errors import CaslakeError
from caslake.ops.verify import verify_table
from caslake.store import open_store
from tests.maintenance.erasure import assert_erased, find_leaks
from tests.sample_data import wait_out_gc_fence

SECRET = "mallory-5d1e0b"
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("user", pa.string())])
LATER = timedelta(days=30)
ROOT = Path(__file__).resolve().parents[2]


def rows(lo: int, hi: int, user: str = "u") -> pa.Table:
    return pa.table({"id": list(range(lo, hi)), "user": [user] * (hi - lo)}, schema=SCHEMA)


def staged(root: Path) -> list[Path]:
    return sorted((root / ".caslake-tmp").glob("*.tmp"))


def crash_mid_append(uri: str, tmp_path: Path, min_bytes: int = 2 * 1024 * 1024) -> Path:
    """Run tests/maintenance/staging_worker.py, SIGKILL it once it has staged
    ``min_bytes`` of rows holding SECRET; return its staging file."""
    ready = tmp_path / f"ready-{time.monotonic_ns()}"
    proc = subprocess.Popen([sys.executable, "-m", "tests.maintenance.staging_worker", uri,
                             SECRET, str(ready), str(min_bytes)], cwd=ROOT)
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert proc.poll() is None, f"worker exited early ({proc.returncode})"
            assert time.monotonic() < deadline, "the worker never staged enough"
            time.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    (left,) = [p for p in staged(Path(uri)) if p.name.endswith(".parquet.tmp")]
    assert left.stat().st_size >= min_bytes
    return left


def test_gc_removes_the_staging_file_of_a_writer_killed_mid_append(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA)
    t.append(rows(0, 100))
    left = crash_mid_append(uri, tmp_path)
    assert find_leaks(uri, [SECRET])  # the check sees it (it is hidden from list())
    size = left.stat().st_size

    # Too young for a 24 h retention: kept, and counted as kept.
    kept = t.gc()
    assert left.exists() and kept.kept_too_young >= 1
    # dry run: reported, not deleted
    assert cli_main(["gc", uri, "--retain-hours", "0", "--force", "--dry-run", "--json"]) == 0
    dry = json.loads(capsys.readouterr().out)
    assert dry["deleted_keys"].get("staging") == [f".caslake-tmp/{left.name}"]
    assert left.exists()

    assert cli_main(["gc", uri, "--retain-hours", "0", "--force", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["deleted_keys"].get("staging") == [f".caslake-tmp/{left.name}"]
    assert report["bytes_deleted"] >= size
    assert not left.exists() and staged(Path(uri)) == []
    assert_erased(uri, [SECRET])
    assert verify_table(open_store(uri), deep=True, all_versions=True).ok
    fresh = caslake.open_table(uri)
    wait_out_gc_fence(fresh)
    fresh.append(rows(100, 110))
    assert fresh.scan().count() == 110


def test_a_live_writers_fresh_staging_file_is_never_deleted(tmp_path: Path) -> None:
    """A writer staging right now: gc with the minimum retention (and a forced short
    one, cutoff an hour back) keeps its file; the append then commits."""
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA)
    t.append(rows(0, 10))
    go, staging = threading.Event(), threading.Event()
    w = caslake.open_table(uri, write_options=WriteOptions(row_group_size=16 * 1024))
    outcome: list[object] = []

    def batches() -> Iterator[pa.RecordBatch]:
        for i in range(40):
            yield pa.RecordBatch.from_pandas(rows(1000 + i * 1000, 2000 + i * 1000,
                                                  f"user-{i}").to_pandas(), schema=SCHEMA)
            if i == 20:
                staging.set()
                go.wait(60)

    def run() -> None:
        try:
            outcome.append(w.append(pa.RecordBatchReader.from_batches(SCHEMA, batches())))
        except BaseException as exc:  # reported below
            outcome.append(exc)

    th = threading.Thread(target=run)
    th.start()
    try:
        assert staging.wait(60)
        (live,) = staged(Path(uri))
        for retention, force in ((timedelta(hours=24), False), (timedelta(hours=1), True)):
            report = t.gc(retention=retention, force=force)
            assert live.exists() and report.deleted.get("staging") is None
    finally:
        go.set()
        th.join(60)
    assert not isinstance(outcome[0], BaseException), outcome[0]
    assert caslake.open_table(uri).scan().count() == 10 + 40_000


def test_a_stalled_writer_whose_staging_file_gc_collected_is_refused(tmp_path: Path) -> None:
    """The same fence as an uncommitted upload: the writer began before the collected
    file, so it can neither publish it nor commit; nothing of it lands."""
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA)
    t.append(rows(0, 10))
    go, staging = threading.Event(), threading.Event()
    w = caslake.open_table(uri, write_options=WriteOptions(row_group_size=16 * 1024))
    outcome: list[object] = []

    def batches() -> Iterator[pa.RecordBatch]:
        for i in range(40):
            yield pa.RecordBatch.from_pandas(rows(1000 + i * 1000, 2000 + i * 1000,
                                                  SECRET).to_pandas(), schema=SCHEMA)
            if i == 20:
                staging.set()
                go.wait(60)

    def run() -> None:
        try:
            outcome.append(w.append(pa.RecordBatchReader.from_batches(SCHEMA, batches())))
        except BaseException as exc:  # checked below
            outcome.append(exc)

    th = threading.Thread(target=run)
    th.start()
    try:
        assert staging.wait(60)
        (live,) = staged(Path(uri))
        report = t.gc(now=datetime.now(UTC) + LATER)  # the writer "stalled" 30 days
        assert report.deleted.get("staging") == [f".caslake-tmp/{live.name}"]
        assert not live.exists()
    finally:
        go.set()
        th.join(60)
    assert isinstance(outcome[0], CaslakeError), outcome[0]
    fresh = caslake.open_table(uri)
    assert fresh.scan().count() == 10 and fresh.version == t.refresh().version
    assert verify_table(open_store(uri), deep=True).ok
    assert staged(Path(uri)) == []
    assert_erased(uri, [SECRET])


@pytest.mark.s3
def test_gc_aborts_stale_multipart_uploads_anywhere_under_the_table_prefix(
        moto_server: str, s3_options: dict[str, str]) -> None:
    from caslake.store.s3 import S3Store
    from tests.conftest import make_bucket

    bucket = make_bucket(moto_server)
    uri, other_uri = f"s3://{bucket}/tables/t", f"s3://{bucket}/tables/t2"
    t = caslake.create_table(uri, SCHEMA, storage_options=s3_options)
    t.append(rows(0, 10))
    store, other = open_store(uri, s3_options), open_store(other_uri, s3_options)
    assert isinstance(store, S3Store) and isinstance(other, S3Store)
    mine = ["data/dead.parquet", "metadata/snap-1.avro", "_delta_log/00000000000000000001.json",
            "elsewhere.bin"]
    for s, key in [(store, k) for k in mine] + [(other, "data/theirs.parquet")]:
        s.boto3_client().create_multipart_upload(Bucket=s.bucket, Key=s.full_key(key))
    assert sorted(u.key for u in store.list_multipart_uploads()) == sorted(mine)

    dry = t.gc(now=datetime.now(UTC) + LATER, dry_run=True)
    assert dry.multipart_aborted == len(mine)
    report = t.gc(now=datetime.now(UTC) + LATER)
    assert report.multipart_aborted == len(mine)
    assert store.list_multipart_uploads() == []
    # Another table's upload (a sibling prefix, not under this table) is theirs.
    assert [u.key for u in other.list_multipart_uploads()] == ["data/theirs.parquet"]
    assert_erased(store, [SECRET])
