"""GC: expire versions by age, delete only what no retained version references and
what is older than the cutoff, marker commit first, dry run, minimum retention."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

import caslake
from caslake.api import Table
from caslake.cli import main as cli_main
from caslake.core.metadata_io import MetadataIO
from caslake.errors import CaslakeError, InvalidArgument, VersionNotFound
from caslake.format.keys import (
    DATA_PREFIX,
    MANIFEST_PREFIX,
    SEGMENT_PREFIX,
    TOMBSTONE_PREFIX,
    data_file_key,
)
from caslake.ops.verify import verify_table
from caslake.store import ObjectStore, open_store
from caslake.store.base import PutMode
from tests.sample_data import live_ids as ids
from tests.sample_data import wait_out_gc_fence

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string())])
LATER = timedelta(days=30)  # "now" for a GC run that finds everything old


def rows(lo: int, hi: int) -> pa.Table:
    return pa.table({"id": list(range(lo, hi)), "v": [f"v{i}" for i in range(lo, hi)]},
                    schema=SCHEMA)


def all_keys(store: ObjectStore) -> set[str]:
    return {m.key for p in (MANIFEST_PREFIX, SEGMENT_PREFIX, DATA_PREFIX, TOMBSTONE_PREFIX)
            for m in store.list(p)}


def referenced(store: ObjectStore) -> set[str]:
    """What the retained versions reference, computed independently of gc.py."""
    io = MetadataIO(store)
    out: set[str] = set()
    for snap in io.history(io.latest()):
        out.add(snap.key)
        out.update(s.manifest for s in snap.manifest.segments)
        out.update(t.path for t in snap.manifest.tombstones)
        out.update(f.path for f in io.live_files(snap))
    return out


def build(uri: str, **kw: object) -> tuple[Table, list[list[int]]]:
    """Versions 0..5: appends, a delete (tombstone), an overwrite (drops every file),
    an append and a delete; returns the live ids of each version."""
    t = caslake.create_table(uri, SCHEMA, **kw)  # type: ignore[arg-type]
    t.append(rows(0, 100))
    t.append(rows(100, 200))
    t.delete("id < 10")
    t.overwrite(rows(1000, 1100))
    t.append(rows(2000, 2050))
    t.delete("id BETWEEN 1000 AND 1004")
    expected = [[], list(range(100)), list(range(200)), list(range(10, 200)),
                list(range(1000, 1100)), list(range(1000, 1100)) + list(range(2000, 2050)),
                list(range(1005, 1100)) + list(range(2000, 2050))]
    return t, expected


def orphan(store: ObjectStore) -> str:
    """A data file a crashed writer uploaded but never committed."""
    key = data_file_key()
    store.put(key, b"PAR1 not really", mode=PutMode.CREATE)
    return key


@pytest.fixture(params=["memory", "local",
                        pytest.param("s3", marks=pytest.mark.s3)])
def uri_opts(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, str]]:
    from tests.conftest import _store_uri

    return _store_uri(str(request.param), request, tmp_path)


def test_gc_deletes_only_unreferenced_old_objects(uri_opts: tuple[str, dict[str, str]]) -> None:
    uri, opts = uri_opts
    t, expected = build(uri, storage_options=opts or None)
    store = open_store(uri, opts or None)
    lost = orphan(store)
    before = all_keys(store)
    assert lost in before and lost not in referenced(store)

    report = t.gc(now=datetime.now(UTC) + LATER)

    after = all_keys(store)
    assert report.oldest_version == 6 and report.head_version == 7  # the expire marker
    assert lost not in after
    assert after == referenced(store), "gc left garbage or deleted something referenced"
    assert before - after == {k for ks in report.deleted.values() for k in ks}
    # Files the overwrite dropped are gone; the live rows are untouched.
    fresh = caslake.open_table(uri, storage_options=opts or None)
    assert ids(fresh) == expected[-1]
    assert fresh.history()[0].operation == "expire"
    assert [h.version for h in fresh.history()] == [7, 6]
    assert verify_table(store, deep=True, all_versions=True).ok
    with pytest.raises(VersionNotFound, match="expired by gc"):
        fresh.scan(version=2).to_arrow()
    assert ids(fresh, version=6) == expected[6]
    # A second gc finds nothing to do and commits nothing; later commits work.
    again = fresh.gc(now=datetime.now(UTC) + LATER)
    assert again.deleted_count == 0 and again.head_version == 7 and fresh.version == 7
    wait_out_gc_fence(fresh)  # on S3 the fence can be up to a second ahead of now
    fresh.append(rows(5000, 5001))
    assert ids(caslake.open_table(uri, storage_options=opts or None)) == \
        expected[-1] + [5000]


def test_young_objects_and_versions_are_kept(tmp_path: Path) -> None:
    t, expected = build(str(tmp_path / "t"))
    store = t.store
    lost = orphan(store)
    before = all_keys(store)
    report = t.gc()  # default retention 7 days: everything here is young
    assert report.deleted_count == 0 and report.kept_too_young >= 1
    assert all_keys(store) == before and lost in before
    assert t.version == 6  # nothing expired, so no marker commit
    for v, want in enumerate(expected):
        assert ids(t, version=v) == want


def test_retention_keeps_the_version_current_at_the_cutoff(tmp_path: Path) -> None:
    """Time travel to the cutoff itself must still work after gc."""
    t, expected = build(str(tmp_path / "t"))
    at = {h.version: h.created_at for h in t.history()}[3]
    # Cutoff at version 3's commit time: versions 3.. are retained (3 was current then).
    now = at + timedelta(hours=24)
    report = t.gc(retention=timedelta(hours=24), now=now)
    assert report.oldest_version == 3
    assert ids(t, version=3) == expected[3]
    with pytest.raises(VersionNotFound):
        t.scan(version=2).to_arrow()
    assert verify_table(t.store, deep=True, all_versions=True).ok


def test_dry_run_changes_nothing(tmp_path: Path) -> None:
    t, _ = build(str(tmp_path / "t"))
    lost = orphan(t.store)
    before = all_keys(t.store)
    report = t.gc(now=datetime.now(UTC) + LATER, dry_run=True)
    assert report.dry_run and lost in report.deleted["data"]
    assert all_keys(t.store) == before
    assert caslake.open_table(str(tmp_path / "t")).version == 6


def test_retention_below_a_day_needs_force(tmp_path: Path) -> None:
    t, _ = build(str(tmp_path / "t"))
    with pytest.raises(InvalidArgument, match="24 h minimum"):
        t.gc(retention=timedelta(hours=1))
    with pytest.raises(InvalidArgument, match="negative"):
        t.gc(retention=timedelta(hours=-1), force=True)
    report = t.gc(retention=timedelta(0), force=True, now=datetime.now(UTC) + timedelta(seconds=5))
    assert report.oldest_version == 6


def test_a_stale_handle_gets_version_not_found_not_a_missing_manifest(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _, _ = build(uri)
    stale = caslake.open_table(uri)
    caslake.open_table(uri).gc(now=datetime.now(UTC) + LATER)
    with pytest.raises(VersionNotFound):
        stale.io.at_version(stale.snapshot, 1)


def test_a_reader_pinned_to_an_expired_version_fails_typed(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t, _ = build(uri)
    pinned = t.scan(version=2)  # its files are dropped by the overwrite at version 4
    pinned.plan()
    caslake.open_table(uri).gc(now=datetime.now(UTC) + LATER)
    with pytest.raises(CaslakeError):
        pinned.to_arrow()


def test_segments_of_retained_versions_survive(tmp_path: Path) -> None:
    """Many small appends fold file lists into earlier manifests (segments): gc must
    keep those manifests although their own versions expire."""
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA)
    for i in range(80):
        t.append(rows(i * 2, i * 2 + 2))
    assert t.snapshot.manifest.segments, "the test needs a manifest with segments"
    t.gc(now=datetime.now(UTC) + LATER)
    fresh = caslake.open_table(uri)
    assert ids(fresh) == list(range(160))
    assert all_keys(t.store) == referenced(t.store)
    assert verify_table(t.store, deep=True, all_versions=True).ok


def test_cli_gc_reports_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = str(tmp_path / "t")
    t, _ = build(uri)
    orphan(t.store)
    assert cli_main(["gc", uri, "--dry-run", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["dry_run"] is True and out["deleted"] == {}  # all young
    assert cli_main(["gc", uri, "--retain-hours", "1"]) == 1
    assert "24 h minimum" in capsys.readouterr().err
