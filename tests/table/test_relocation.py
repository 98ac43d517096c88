"""A copied table is the same table: relocation changes ETags, never content.

``cp -a``, ``shutil.copytree`` (new inodes and mtimes, so new local ETags) and
S3 copies (a multipart copy gets a ``-N`` ETag) must leave a table that scans,
deletes, appends, compacts and verifies like the original; DuckDB reading the
copy's data files agrees.  A data file whose content really changed is still a
typed error naming it, never a wrong answer.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import caslake
from caslake.core import WriteOptions
from caslake.errors import CaslakeError, CorruptMetadata
from caslake.ops.verify import verify_table
from caslake.store import open_store

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
DELETED = {3, 150, 151, 299}


def rows(lo: int, hi: int) -> pa.Table:
    return pa.table({"id": pa.array(range(lo, hi), pa.int64()),
                     "name": [f"n{i:05d}" for i in range(lo, hi)]}, schema=SCHEMA)


def build(uri: str, storage_options: dict[str, str] | None = None) -> caslake.Table:
    # Uncompressed: files of equal row counts have equal sizes (used below).
    t = caslake.create_table(uri, SCHEMA, storage_options=storage_options,
                             write_options=WriteOptions(compression="none"))
    for lo in (0, 100, 200):
        t.append(rows(lo, lo + 100))
    t.delete(f"id IN ({', '.join(map(str, sorted(DELETED)))})")
    return t


def ids(t: caslake.Table, where: str | None = None) -> list[int]:
    return sorted(t.scan(columns=["id"], where=where).to_arrow().column("id").to_pylist())


def duckdb_live_ids(root: Path, t: caslake.Table, deleted: set[int]) -> list[int]:
    """The copy's rows as DuckDB reads its data files, minus the deleted ids."""
    files = [str(root / f.path) for f in t.io.live_files(t.snapshot)]
    got = duckdb.sql(f"SELECT id FROM read_parquet({files!r})").fetchall()
    return sorted(i for (i,) in got if i not in deleted)


def copy_with_copytree(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst)


def copy_with_cp_a(src: Path, dst: Path) -> None:
    subprocess.run(["cp", "-a", str(src), str(dst)], check=True)


COPIES = [copy_with_copytree, copy_with_cp_a]


@pytest.mark.parametrize("copy", COPIES, ids=["copytree", "cp-a"])
def test_a_copied_local_table_reads_writes_and_verifies(tmp_path: Path,
                                                        copy: Callable[[Path, Path], None]
                                                        ) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    original = build(str(src))
    copy(src, dst)
    t = caslake.open_table(str(dst))
    # The copy really has other ETags (or this test proves nothing).
    report = verify_table(open_store(str(dst)), deep=True, all_versions=True)
    assert report.ok, report.problems
    assert report.etags_differ == 4  # 3 data files and 1 tombstone
    assert report.footers_checked == 3

    want = [i for i in range(300) if i not in DELETED]
    assert ids(t) == want == duckdb_live_ids(dst, t, DELETED)
    assert ids(t, "id >= 140 AND id < 160") == [i for i in want if 140 <= i < 160]
    assert ids(caslake.open_table(str(dst)), "id = 150") == []
    assert t.scan(version=3).count() == 300  # time travel, before the delete

    assert t.delete("id IN (10, 210)").rows_deleted == 2
    t.append(rows(300, 310))
    want = [i for i in range(310) if i not in DELETED | {10, 210}]
    assert ids(caslake.open_table(str(dst))) == want
    t.compact()
    fresh = caslake.open_table(str(dst))
    assert ids(fresh) == want == duckdb_live_ids(dst, fresh, set())
    assert verify_table(open_store(str(dst)), deep=True, all_versions=True).ok
    # The original is untouched.
    assert ids(caslake.open_table(str(src))) == [i for i in range(300) if i not in DELETED]
    assert original.version == caslake.open_table(str(src)).version


def test_a_data_file_replaced_by_other_valid_parquet_is_a_typed_error(tmp_path: Path) -> None:
    """Same size, other content (another data file of the table), other ETag: the
    footer CRC-32 tells them apart.  Also after a copy, and for a different size."""
    src = tmp_path / "src"
    t = build(str(src))
    files = t.io.live_files(t.snapshot)
    victim, other = files[0], files[1]
    assert victim.size == other.size and victim.footer_crc32 != other.footer_crc32
    shutil.copyfile(src / other.path, src / victim.path)
    for reader in (lambda: caslake.open_table(str(src)).scan().to_arrow(),
                   lambda: caslake.open_table(str(src)).delete("id = 7"),
                   lambda: caslake.open_table(str(src)).scan(where="id < 50").to_arrow()):
        with pytest.raises(CorruptMetadata) as err:
            reader()
        assert err.value.key == victim.path
    report = verify_table(open_store(str(src)), deep=True)
    assert [p.object for p in report.problems] == [victim.path]

    dst = tmp_path / "dst"
    shutil.copytree(src, dst)
    (dst / files[2].path).write_bytes((dst / files[2].path).read_bytes()[:-100])
    with pytest.raises(CaslakeError) as caught:
        caslake.open_table(str(dst)).scan().to_arrow()
    assert getattr(caught.value, "key", None) in (victim.path, files[2].path)
    report = verify_table(open_store(str(dst)), deep=True)
    assert {p.object for p in report.problems} == {victim.path, files[2].path}


@pytest.mark.s3
def test_a_table_copied_on_s3_with_copy_object_opens(moto_server: str,
                                                     s3_options: dict[str, str]) -> None:
    import boto3
    from boto3.s3.transfer import TransferConfig

    from tests.conftest import make_bucket

    bucket = make_bucket(moto_server)
    build(f"s3://{bucket}/a/t", s3_options)
    client = boto3.client("s3", endpoint_url=moto_server, region_name=s3_options["region"],
                          aws_access_key_id=s3_options["access_key_id"],
                          aws_secret_access_key=s3_options["secret_access_key"])
    # Data files by multipart copy (UploadPartCopy): a "-N" ETag, as `aws s3 sync`
    # gives large objects; the rest with a plain CopyObject.
    multipart = TransferConfig(multipart_threshold=1, multipart_chunksize=5 * 1024 * 1024)
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix="a/t/")["Contents"]]
    for key in keys:
        dest = "b/" + key[len("a/"):]
        if key.endswith(".parquet"):
            client.copy({"Bucket": bucket, "Key": key}, bucket, dest, Config=multipart)
            assert client.head_object(Bucket=bucket, Key=dest)["ETag"].endswith('-1"')
        else:
            client.copy_object(Bucket=bucket, Key=dest, CopySource={"Bucket": bucket, "Key": key})
    uri = f"s3://{bucket}/b/t"
    t = caslake.open_table(uri, storage_options=s3_options)
    want = [i for i in range(300) if i not in DELETED]
    assert ids(t) == want
    assert ids(t, "id BETWEEN 100 AND 199") == [i for i in want if 100 <= i <= 199]
    assert t.delete("id = 42").rows_deleted == 1
    t.append(rows(300, 305))
    assert ids(caslake.open_table(uri, storage_options=s3_options)) == \
        [i for i in range(305) if i not in DELETED | {42}]
    report = verify_table(open_store(uri, s3_options), deep=True, all_versions=True)
    assert report.ok, report.problems
    assert report.etags_differ >= 3
