"""Purge on a copied table (issue 27): relocation changes ETags, never content, so a
purge of a ``cp -a`` / copytree / S3 copy works like on the original -- and a data file
whose content really changed is still CorruptMetadata naming it, before or after the
footer was cached.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

import caslake
from caslake.errors import CorruptMetadata
from caslake.ops.verify import verify_table
from caslake.store import open_store
from tests.maintenance.erasure import assert_erased
from tests.table.test_relocation import COPIES, DELETED, build, ids


@pytest.mark.parametrize("copy", COPIES, ids=["copytree", "cp-a"])
@pytest.mark.parametrize("expire", [False, True], ids=["purge", "expire"])
def test_purge_on_a_copied_local_table(tmp_path: Path, copy: Callable[[Path, Path], None],
                                       expire: bool) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    build(str(src))
    copy(src, dst)
    t = caslake.open_table(str(dst))
    assert verify_table(open_store(str(dst))).etags_differ == 4  # really relocated

    report = t.purge("name IN ('n00005', 'n00150', 'n00250')", expire=expire)

    assert report.rows_erased >= 2 and report.files_rewritten == 3
    want = [i for i in range(300) if i not in DELETED | {5, 150, 250}]
    assert ids(caslake.open_table(str(dst))) == want
    assert verify_table(open_store(str(dst)), deep=True, all_versions=True).ok
    if expire:
        assert_erased(dst, ["n00005", "n00150", "n00250"])
    assert ids(caslake.open_table(str(src))) == [i for i in range(300) if i not in DELETED]


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "footer-cached"])
def test_a_replaced_file_in_a_copied_table_is_still_refused(tmp_path: Path,
                                                           warm: bool) -> None:
    """Same size, other content (another data file of the table): the footer CRC-32
    refuses it on a cold handle; on a handle that cached the copy's footer before the
    file was replaced, the range reads pinned to the observed ETag do."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    build(str(src))
    shutil.copytree(src, dst)
    t = caslake.open_table(str(dst))
    if warm:
        assert len(ids(t)) == 296  # footers read under the copy's ETags
    files = t.io.live_files(t.snapshot)
    victim, other = files[0], files[1]
    assert victim.size == other.size
    shutil.copyfile(dst / other.path, dst / victim.path)
    version = t.version
    with pytest.raises(CorruptMetadata, match="replaced") as err:
        t.purge("id < 300", expire=True)
    assert err.value.key == victim.path
    fresh = caslake.open_table(str(dst))
    assert fresh.version == version
    assert [f.path for f in fresh.io.live_files(fresh.snapshot)] == [f.path for f in files]


@pytest.mark.s3
def test_purge_on_a_table_copied_on_s3(moto_server: str, s3_options: dict[str, str]) -> None:
    import boto3
    from boto3.s3.transfer import TransferConfig

    from tests.conftest import make_bucket

    bucket = make_bucket(moto_server)
    build(f"s3://{bucket}/a/t", s3_options)
    client = boto3.client("s3", endpoint_url=moto_server, region_name=s3_options["region"],
                          aws_access_key_id=s3_options["access_key_id"],
                          aws_secret_access_key=s3_options["secret_access_key"])
    multipart = TransferConfig(multipart_threshold=1, multipart_chunksize=5 * 1024 * 1024)
    for obj in client.list_objects_v2(Bucket=bucket, Prefix="a/t/")["Contents"]:
        client.copy({"Bucket": bucket, "Key": obj["Key"]}, bucket,
                    "b/" + obj["Key"][len("a/"):], Config=multipart)
    uri = f"s3://{bucket}/b/t"
    t = caslake.open_table(uri, storage_options=s3_options)
    t.purge("name = 'n00005'", expire=True)
    assert ids(caslake.open_table(uri, storage_options=s3_options)) == [
        i for i in range(300) if i not in DELETED | {5}]
    assert verify_table(open_store(uri, s3_options), deep=True, all_versions=True).ok
    assert_erased(open_store(uri, s3_options), ["n00005"])
