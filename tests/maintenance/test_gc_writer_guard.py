"""A writer that outlives gc's retention: its commit must refuse, never reference
what gc collected (RELIABILITY.md items 11-12, docs/protocol.md "GC", the fence).

The writer's clock and gc's clock are one injectable clock: the writer starts its
uploads, the clock moves past the retention, gc runs and collects the uploads
(unreferenced and, by that clock, old), and the writer then tries to commit."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

import caslake
from caslake.api import Table
from caslake.core.metadata_io import MetadataIO
from caslake.errors import CommitConflict, WriterOutlivedGc
from caslake.format.keys import DATA_PREFIX
from caslake.ops.verify import verify_table
from caslake.store import open_store
from tests.deletes.helpers import HookStore
from tests.maintenance.test_gc import orphan

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string())])


def rows(lo: int, hi: int) -> pa.Table:
    return pa.table({"id": list(range(lo, hi)), "v": [f"v{i}" for i in range(lo, hi)]},
                    schema=SCHEMA)


class Clock:
    """The injectable clock: wall time plus an offset the test moves."""

    def __init__(self) -> None:
        self.offset_ms = 0

    def __call__(self) -> int:
        return int(time.time() * 1000) + self.offset_ms

    def advance(self, delta: timedelta) -> None:
        self.offset_ms += int(delta.total_seconds() * 1000)


@pytest.fixture(params=["memory", "local", pytest.param("s3", marks=pytest.mark.s3)])
def uri_opts(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, str]]:
    from tests.conftest import _store_uri

    return _store_uri(str(request.param), request, tmp_path)


def _handle(uri: str, opts: dict[str, str], clock: Clock) -> Table:
    t = caslake.open_table(uri, storage_options=opts)
    t.context.now_ms = clock
    return t


def _ids(t: Table) -> list[int]:
    return sorted(t.scan().to_arrow().column("id").to_pylist())


def test_a_transaction_whose_uploads_gc_collected_refuses_and_leaves_the_table(
        uri_opts: tuple[str, dict[str, str]]) -> None:
    uri, opts = uri_opts
    t = caslake.create_table(uri, SCHEMA, storage_options=opts)
    t.append(rows(0, 10))
    clock = Clock()
    writer, collector = _handle(uri, opts, clock), _handle(uri, opts, clock)
    with pytest.raises(WriterOutlivedGc) as err, writer.transaction() as tx:
        tx.append(rows(100, 110))  # uploaded now, committed only at the end
        uploaded = {m.key for m in writer.store.list(DATA_PREFIX)} - {
            f.path for f in MetadataIO(writer.store).live_files(
                MetadataIO(writer.store).latest())}
        assert len(uploaded) == 1
        clock.advance(timedelta(days=8))  # past the 7-day retention
        report = collector.gc()
        assert uploaded <= set(report.deleted.get("data", []))  # really collected
    assert isinstance(err.value, CommitConflict)
    # The guard refuses when the writer began at or before gc's fence: its upload can
    # land in the very millisecond it began, so the two may be equal (flaky as '<').
    assert err.value.started_at_ms <= err.value.collected_until_ms
    fresh = caslake.open_table(uri, storage_options=opts)
    assert fresh.version == collector.version  # nothing committed after gc's marker
    assert _ids(fresh) == list(range(10))
    assert verify_table(open_store(uri, opts), deep=True).ok


def test_an_append_raced_by_gc_at_its_cas_refuses_on_the_rebase(
        uri_opts: tuple[str, dict[str, str]]) -> None:
    """gc runs between the append's validation and its pointer CAS: gc's marker moves
    the pointer, the CAS fails, and the rebase finds the fence (a check done only
    before the CAS, against a separately stored cutoff, would miss this)."""
    uri, opts = uri_opts
    t = caslake.create_table(uri, SCHEMA, storage_options=opts)
    t.append(rows(0, 10))
    clock = Clock()
    collector = _handle(uri, opts, clock)
    deleted: list[str] = []

    def gc_now() -> None:
        clock.advance(timedelta(days=8))
        deleted.extend(collector.gc().deleted.get("data", []))

    store = HookStore(open_store(uri, opts), gc_now)
    writer = Table.load(store)
    writer.context.now_ms = clock
    with pytest.raises(WriterOutlivedGc):
        writer.append(rows(100, 110))
    assert store.fired == 1 and deleted  # the race really ran and collected the upload
    fresh = caslake.open_table(uri, storage_options=opts)
    assert fresh.version == collector.version
    assert _ids(fresh) == list(range(10))
    assert verify_table(open_store(uri, opts), deep=True).ok


def test_a_writer_that_starts_after_gc_collected_is_not_refused(tmp_path: Path) -> None:
    """gc with a clock far ahead (as tests and a skewed gc host do) collects an orphan;
    writes that start after it commit normally: the fence is the newest collected
    object's time, not gc's cutoff."""
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA)
    t.append(rows(0, 10))
    orphan(t.store)
    report = t.gc(now=datetime.now(UTC) + timedelta(days=30))
    assert report.deleted.get("data")
    t.append(rows(10, 20))
    t.delete("id < 5")
    assert _ids(caslake.open_table(uri)) == list(range(5, 20))
    later = datetime.now(UTC) + timedelta(days=30)
    t.gc(now=later)
    v = caslake.open_table(uri).version
    again = t.gc(now=later)  # a second run commits no fence and deletes nothing
    assert again.deleted_count == 0 and caslake.open_table(uri).version == v
    assert verify_table(open_store(uri), deep=True).ok


def test_gc_that_collects_nothing_commits_no_fence(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA)
    t.append(rows(0, 10))
    v = t.version
    t.gc()  # 7 days: nothing is old
    assert caslake.open_table(uri).version == v


def test_a_gc_that_only_collects_orphans_still_fences_a_racing_append() -> None:
    """Nothing to expire (the table has one version): gc's only marker is the fence,
    and it alone makes the racing append's CAS fail and refuse."""
    uri = f"memory://{uuid.uuid4().hex}"
    caslake.create_table(uri, SCHEMA)
    clock = Clock()
    collector = _handle(uri, {}, clock)
    deleted: list[str] = []

    def gc_now() -> None:
        clock.advance(timedelta(days=8))
        report = collector.gc()
        assert report.oldest_version == 0  # nothing expired
        deleted.extend(report.deleted.get("data", []))

    store = HookStore(open_store(uri), gc_now)
    writer = Table.load(store)
    writer.context.now_ms = clock
    with pytest.raises(WriterOutlivedGc):
        writer.append(rows(0, 10))
    assert store.fired == 1 and deleted and store.cas_attempts == 1
    head = MetadataIO(open_store(uri)).latest()
    assert head.version == 1 and head.manifest.operation == "expire"
    assert head.manifest.collected_until_ms >= clock() - 8 * 86400_000 - 60_000
    assert verify_table(open_store(uri), deep=True).ok
