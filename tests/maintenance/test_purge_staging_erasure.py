"""purge(expire=True) erases from what no listing shows too (issue 27): a crashed
writer's staging file (``.caslake-tmp/``, local store) and an unfinished multipart
upload under the table's prefix (S3).  A writer that begins staging after the purge
began keeps its file: its rows are new rows, like a concurrent append's.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pytest

import caslake
from caslake.ops.verify import verify_table
from caslake.store import open_store
from tests.maintenance.erasure import assert_erased, find_leaks
from tests.maintenance.test_gc_staging import SECRET, crash_mid_append, staged
from tests.maintenance.test_purge_expire import WHERE as _WHERE
from tests.maintenance.test_purge_expire import build

WHERE = f"user = '{SECRET}'"
assert _WHERE != WHERE  # test_purge_expire's secret is another value


def test_purge_expire_erases_a_crashed_writers_staging_file(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t, _expected = build(uri, {})
    t.append(pa.table({"id": [7000, 7001], "user": [SECRET, "u1"]}))
    left = crash_mid_append(uri, tmp_path)
    assert any(".caslake-tmp/" in leak for leak in find_leaks(uri, [SECRET]))

    report = t.purge(WHERE, expire=True)

    assert report.expiry is not None
    assert report.expiry.deleted.get("staging") == [f".caslake-tmp/{left.name}"]
    assert not left.exists()
    assert_erased(uri, [SECRET])
    assert verify_table(open_store(uri), deep=True, all_versions=True).ok
    assert t.scan(where="id = 7001").count() == 1


def test_purge_expire_keeps_a_staging_file_begun_after_it_started(tmp_path: Path) -> None:
    """A writer that starts staging while the purge runs (after ``began``): its file is
    younger than the purge's cutoff and survives (docs/protocol.md, "Purge")."""
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, pa.schema([("id", pa.int64()), ("user", pa.string())]))
    t.append(pa.table({"id": [1, 2], "user": [SECRET, "u"]}))
    fresh: list[Path] = []

    def progress(stage: str, done: int, total: int) -> None:
        if stage == "plan" and not fresh:
            path = Path(str(t.store.staging_dir())) / f"{uuid.uuid4().hex}.parquet.tmp"
            path.write_bytes(b"PAR1 a writer that started after the purge")
            fresh.append(path)

    t.purge(WHERE, expire=True, progress=progress)
    assert fresh and fresh[0].exists() and staged(Path(uri)) == fresh
    fresh[0].unlink()
    assert_erased(uri, [SECRET])


@pytest.mark.s3
def test_purge_expire_aborts_an_unfinished_upload_holding_the_value(
        s3_uri: str, s3_options: dict[str, str]) -> None:
    from caslake.store.s3 import S3Store

    t, _ = build(s3_uri, s3_options)
    t.append(pa.table({"id": [7000], "user": [SECRET]}))
    store = open_store(s3_uri, s3_options)
    assert isinstance(store, S3Store)
    client = store.boto3_client()
    for key in ("metadata/00002-crashed.metadata.json", "data/crashed.parquet"):
        up = client.create_multipart_upload(Bucket=store.bucket, Key=store.full_key(key))
        client.upload_part(Bucket=store.bucket, Key=store.full_key(key), PartNumber=1,
                           UploadId=up["UploadId"], Body=f'{{"user": "{SECRET}"}}'.encode())
    assert len(store.list_multipart_uploads()) == 2

    report = t.purge(WHERE, expire=True)

    assert report.expiry is not None and report.expiry.multipart_aborted == 2
    assert_erased(store, [SECRET])
