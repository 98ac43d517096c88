"""purge(expire=True): after it, no object on storage holds an erased value.

Checked by decoding every object under the table's prefix (Parquet with pyarrow,
rows and footer statistics; every other object -- manifests, tombstones, the
pointer, refs -- by its bytes), never by trusting the manifest.  The value is a
unique string, so finding its bytes anywhere is a leak.  Refused, naming the
holder, while another branch, a tag or a clone hold needs a version holding it.
"""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import caslake
from caslake.api import Table
from caslake.cli import main as cli_main
from caslake.errors import ErasureHeld, RefInUse, VersionNotFound
from caslake.format.keys import data_file_key
from caslake.ops.verify import verify_table
from caslake.store import ObjectStore, open_store
from caslake.store.base import PutMode
from tests.export.readers import deltalake_rows
from tests.maintenance.erasure import assert_erased
from tests.sample_data import wait_out_gc_fence

SECRET = "alice-7f3a9c0e"
WHERE = f"user = '{SECRET}'"
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("user", pa.string())])


def rows(lo: int, hi: int, secret_every: int = 0) -> pa.Table:
    users = [SECRET if secret_every and i % secret_every == 0 else f"u{i % 7}"
             for i in range(lo, hi)]
    return pa.table({"id": list(range(lo, hi)), "user": users}, schema=SCHEMA)


def leaks(store: ObjectStore) -> list[str]:
    """Every object under the prefix that holds the secret, found by decoding it."""
    out = []
    for meta in store.list(""):
        data = store.get(meta.key).data
        if meta.key.endswith(".parquet") and data[:4] == b"PAR1":
            table = pq.read_table(io.BytesIO(data))
            md = pq.read_metadata(io.BytesIO(data))
            stats = [md.row_group(g).column(c).statistics
                     for g in range(md.num_row_groups) for c in range(md.num_columns)]
            values = [v for s in stats if s is not None and s.has_min_max
                      for v in (s.min, s.max)]
            # every cell (a Delta checkpoint's add.stats too), not just "user"'s
            if SECRET in str(table.to_pylist()) or SECRET in values:
                out.append(meta.key)
        elif SECRET.encode() in data:
            out.append(meta.key)
    return out


def build(uri: str, opts: dict[str, str]) -> tuple[Table, list[int]]:
    """Versions holding the secret in live, deleted, compacted-away and orphaned rows,
    and in a delete's recorded predicate and key-range tombstone."""
    t = caslake.create_table(uri, SCHEMA, storage_options=opts or None)
    t.append(rows(0, 100, secret_every=10))
    t.append(rows(100, 200))
    t.delete(WHERE)  # the where text (with the secret) goes into the manifest
    t.append(rows(200, 300, secret_every=25))
    t.compact()
    t.append(rows(300, 400, secret_every=50))
    # a crashed writer's upload holding the secret
    buf = io.BytesIO()
    pq.write_table(rows(900, 910, secret_every=3), buf)
    t.store.put(data_file_key(), buf.getvalue(), mode=PutMode.CREATE)
    expected = [i for i in range(400)
                if not (i < 100 and i % 10 == 0) and not (200 <= i < 300 and i % 25 == 0)
                and not (i >= 300 and i % 50 == 0)]
    return t, expected


@pytest.fixture(params=["memory", "local", pytest.param("s3", marks=pytest.mark.s3)])
def uri_opts(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, str]]:
    from tests.conftest import _store_uri

    return _store_uri(str(request.param), request, tmp_path)


def test_after_purge_with_expire_no_object_holds_the_value(
        uri_opts: tuple[str, dict[str, str]]) -> None:
    uri, opts = uri_opts
    t, expected = build(uri, opts)
    store = open_store(uri, opts)
    assert len(leaks(store)) >= 6  # files, the orphan, the tombstone, manifests
    before = t.version

    report = t.purge(WHERE, expire=True)

    assert not report.noop and report.version == before + 1
    assert report.expired_below == report.version and report.expiry is not None
    assert report.expiry.deleted_count > 0
    assert leaks(store) == []
    assert_erased(store, [SECRET])  # every object decoded, staging and uploads included
    assert sorted(t.to_arrow().column("id").to_pylist()) == expected
    fresh = caslake.open_table(uri, storage_options=opts or None)
    assert sorted(fresh.to_arrow().column("id").to_pylist()) == expected
    with pytest.raises(VersionNotFound):
        fresh.scan(version=before).to_arrow()
    assert verify_table(store, deep=True, all_versions=True).ok
    # A writer that starts before the fence is refused (WriterOutlivedGc): on S3 the fence
    # is a deleted orphan's whole-second Last-Modified + 999 ms, so wait it out first.
    wait_out_gc_fence(fresh)
    t.append(rows(500, 510))  # the table stays writable
    assert fresh.refresh().version > report.version


def test_a_tag_on_a_version_holding_the_value_refuses_and_changes_nothing() -> None:
    uri = f"memory://{uuid.uuid4().hex}"
    t, _ = build(uri, {})
    t.create_tag("audit", version=1)
    keys = sorted((m.key, m.etag) for m in t.store.list(""))
    with pytest.raises(ErasureHeld) as err:
        t.purge(WHERE, expire=True)
    assert isinstance(err.value, RefInUse) and err.value.holders == ["tag 'audit'"]
    assert sorted((m.key, m.etag) for m in t.store.list("")) == keys
    t.drop_tag("audit")
    t.purge(WHERE, expire=True)
    assert leaks(t.store) == []


def test_a_branch_or_clone_needing_the_value_refuses_naming_it(tmp_path: Path) -> None:
    uri = f"memory://{uuid.uuid4().hex}"
    t, _ = build(uri, {})
    t.create_branch("dev", from_version=2)
    with pytest.raises(ErasureHeld) as err:
        t.purge(WHERE, expire=True)
    assert err.value.holders == ["branch 'dev'"]
    t.drop_branch("dev")
    t.create_branch("clean", from_version=0)  # holds nothing erased: no refusal
    target = str(tmp_path / "clone")
    caslake.clone(uri, target)
    with pytest.raises(ErasureHeld) as err:
        t.purge(WHERE, expire=True)
    assert [h.split()[0:2] for h in err.value.holders] == [["clone", "hold"]]
    caslake.drop_table(target)
    t.purge(WHERE, expire=True)
    assert leaks(t.store) == []
    assert t.branch("clean").to_arrow().num_rows == 0


def test_cli_purge_expire(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = str(tmp_path / "t")
    build(uri, {})
    assert cli_main(["purge", uri, "--where", WHERE, "--expire", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["expired_below"] == out["version"] and out["expiry"]["deleted"]
    assert leaks(open_store(uri)) == []


def test_purge_with_expire_leaves_no_value_in_segment_objects() -> None:
    """The same, on a table whose entries live in several segment objects (lowered
    fold thresholds): entry statistics and segment summaries hold the value too,
    so the purge rewrites every segment holding a removed entry."""
    from caslake.format.keys import SEGMENT_PREFIX
    from tests.conftest import segment_thresholds
    with segment_thresholds():
        t, expected = build(f"memory://{uuid.uuid4().hex}", {})
        assert any(k.startswith(SEGMENT_PREFIX) for k in leaks(t.store))  # values in play
        report = t.purge(WHERE, expire=True)
        assert not report.noop
        assert leaks(t.store) == []
        assert sorted(t.to_arrow().column("id").to_pylist()) == expected
        assert sorted(t.scan(where="id < 150").to_arrow().column("id").to_pylist()) == [
            i for i in expected if i < 150]
        assert verify_table(t.store, deep=True, all_versions=True).ok


def test_an_export_referencing_a_file_holding_the_value_is_rewritten(tmp_path: Path) -> None:
    """A Delta export's latest state names the files holding the value: the erasure
    rewrites the export to the purge's version (caslake/export/erase.py) before the
    expiry, so the old files and every log entry naming them go, and the export
    still reads (the export side is tested in tests/export/test_export_erasure.py)."""
    uri = (tmp_path / "t").as_uri()
    t = caslake.create_table(uri, SCHEMA)
    t.append(rows(0, 50, secret_every=10))
    t.export_delta()
    report = t.purge(WHERE, expire=True)
    assert report.expiry is not None and report.exports
    assert leaks(t.store) == []
    assert sorted(deltalake_rows(uri, SCHEMA).column("id").to_pylist()) == [
        i for i in range(50) if i % 10]


def test_purge_expire_keeps_the_files_an_export_of_an_old_version_references(
        tmp_path: Path) -> None:
    """An export of an old version is rewritten to the purge's version: it stays
    readable, and shows the table as it is after the purge."""
    uri = (tmp_path / "t").as_uri()
    t = caslake.create_table(uri, SCHEMA)
    t.append(rows(0, 25))
    t.append(rows(25, 50))
    t.export_delta()
    assert t.compact().files_removed == 2  # the exported files: now the export's alone
    t.append(rows(50, 60, secret_every=5))
    t.purge(WHERE, expire=True)
    assert sorted(deltalake_rows(uri, SCHEMA).column("id").to_pylist()) == [
        i for i in range(60) if i < 50 or i % 5]


def test_cli_purge_text_says_what_the_dry_run_covers_and_what_exports_do(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The text report of a dry run states its download estimate as one, bounds the
    upload (a dry run re-encodes nothing, so it cannot know it exactly: it never
    claims 0 B), says the expiry and the exports' rewrite read more, and lists what
    the purge does to each export -- as the real purge's text does too."""
    uri = str(tmp_path / "t")
    t, _ = build(uri, {})
    t.export_delta()
    t.export_iceberg()
    capsys.readouterr()
    assert cli_main(["purge", uri, "--where", WHERE, "--expire", "--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert "uploaded 0 B" not in dry, dry
    assert "would download about" in dry and "upload at most" in dry, dry
    assert "delta:" in dry and "iceberg:" in dry, dry
    assert cli_main(["purge", uri, "--where", WHERE, "--expire"]) == 0
    done = capsys.readouterr().out
    assert "delta:" in done and "iceberg:" in done, done
    assert leaks(open_store(uri)) == []
