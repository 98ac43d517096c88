"""Segment statistics (format 3, issue 16): a point read opens only the segments and
blocks whose summaries might match; a summary that lies is CorruptMetadata, never a
skipped file; format-1 segments (earlier manifests) are still read."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

import caslake
from caslake.api import Table
from caslake.core import segments
from caslake.core.changes import Changes
from caslake.core.commit import commit_with_retry
from caslake.errors import CorruptMetadata
from caslake.format.manifest import DataFile, Manifest, Pointer, segment_ref_check
from caslake.ops.verify import verify_table
from caslake.store import open_store
from caslake.store.base import GET, GET_RANGE, HEAD, LIST, PutMode
from tests.conftest import segment_thresholds

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def _rows(lo: int, hi: int) -> pa.Table:
    return pa.table({"id": pa.array(range(lo, hi), pa.int64()),
                     "v": [f"v{i}" for i in range(lo, hi)]}, schema=SCHEMA)


def _sorted_table(uri: str, files: int = 12, per_file: int = 5) -> caslake.Table:
    """Appends in key order, one file each, under lowered fold thresholds: several
    segment objects of several blocks, each with a narrow key range."""
    t = caslake.create_table(uri, SCHEMA)
    with segment_thresholds():
        for i in range(files):
            t.append(_rows(i * per_file, (i + 1) * per_file))
    m = t.refresh().snapshot.manifest
    assert sum(s.is_object for s in m.segments) >= 2
    return t


def _rewrite_root(t: caslake.Table, edit: object) -> None:
    """Overwrite the current root manifest with ``edit(json)``'s result."""
    key = t.refresh().snapshot.key
    doc = json.loads(t.store.get(key).data)
    edit(doc)  # type: ignore[operator]
    t.store.put(key, json.dumps(doc).encode(), mode=PutMode.OVERWRITE)


def test_point_read_skips_segments_and_matches_pyarrow(tmp_path: Path) -> None:
    t = _sorted_table(str(tmp_path / "t"))
    m = t.snapshot.manifest
    assert m.format_version == 3
    segments.CACHE.clear()
    fresh = caslake.open_table(t.uri)
    fresh.store.counters.reset()
    got = fresh.scan(where="id = 7").to_arrow()
    assert got.to_pylist() == [{"id": 7, "v": "v7"}]
    gets = fresh.store.counters.snapshot().get(GET, 0)
    # the scan's own pointer read (root cached since the open), and only the
    # segment holding id 7
    assert gets == 2, gets
    everything = pa.concat_tables([_rows(i * 5, (i + 1) * 5) for i in range(12)])
    for where, mask in [("id BETWEEN 13 AND 31", (13, 31)), ("id >= 50", (50, 10**9))]:
        want = [r for r in everything.to_pylist() if mask[0] <= r["id"] <= mask[1]]
        assert sorted(fresh.scan(where=where).to_arrow().to_pylist(),
                      key=lambda r: r["id"]) == want


def test_reopened_table_reuses_cached_segments(tmp_path: Path) -> None:
    t = _sorted_table(str(tmp_path / "t"))
    caslake.open_table(t.uri).scan().to_arrow()  # warms the process-wide cache
    again = caslake.open_table(t.uri)
    again.store.counters.reset()
    assert again.scan().to_arrow().num_rows == 60
    # every segment came from the cache: only the pointer and root were fetched
    assert again.store.counters.snapshot().get(GET, 0) == 1


def test_edited_summary_is_corrupt_even_where_it_would_skip(tmp_path: Path) -> None:
    """A summary changed on its own (damage, a hand edit) fails its reference's
    check when the manifest is parsed: before a planner could skip by it."""
    t = _sorted_table(str(tmp_path / "t"))

    def lie(doc: dict) -> None:  # type: ignore[type-arg]
        ref = next(s for s in doc["segments"] if "segment" in s)
        ref["stats"]["1"]["min"] = ref["stats"]["1"]["max"] = 10**9  # "no small ids here"
    _rewrite_root(t, lie)
    with pytest.raises(CorruptMetadata, match="check"):
        caslake.open_table(t.uri).scan(where="id = 1").to_arrow()


def test_forged_summary_is_caught_when_the_segment_is_opened(tmp_path: Path) -> None:
    """A summary forged consistently (check recomputed) still cannot make a reader
    drop rows of a segment it opens: the reference must equal the segment's own
    summary, which must equal the merge of its entries."""
    t = _sorted_table(str(tmp_path / "t"))
    target = {}

    def forge(doc: dict) -> None:  # type: ignore[type-arg]
        ref = next(s for s in doc["segments"] if "segment" in s)
        target.update(lo=ref["stats"]["1"]["min"], hi=ref["stats"]["1"]["max"])
        ref["stats"]["1"]["max"] = ref["stats"]["1"]["min"]  # hides all but its first id
        ref["check"] = segment_ref_check(ref)
    _rewrite_root(t, forge)
    segments.CACHE.clear()
    reader = caslake.open_table(t.uri)
    with pytest.raises(CorruptMetadata, match="summary"):
        reader.scan().to_arrow()  # a full scan opens every segment
    with pytest.raises(CorruptMetadata, match="summary"):
        reader.scan(where=f"id = {target['lo']}").to_arrow()
    report = verify_table(reader.store)
    assert not report.ok and any("summary" in p.problem for p in report.problems)


def test_lying_block_summary_in_the_segment_object_is_corrupt(tmp_path: Path) -> None:
    t = _sorted_table(str(tmp_path / "t"))
    m = t.snapshot.manifest
    ref = next(s for s in m.segments if s.is_object)
    seg = segments.open_segment(t.store, ref, t.snapshot.key)
    assert len(seg.blocks) >= 2
    # Re-encode the entries with block 0 claiming a narrower range, and point a new
    # reference (consistent size, CRC and check) at it.
    from caslake.format import segment as fmt
    entries = list(seg.files())
    data, summary = fmt.encode_segment(entries, m.schema)
    doc = json.loads(bytes(pa.ipc.open_file(pa.py_buffer(data)).schema.metadata[
        fmt.HEADER_KEY]))
    doc["blocks"][0]["stats"]["1"]["max"] = doc["blocks"][0]["stats"]["1"]["min"]
    forged_schema = fmt._COLUMNS.with_metadata({fmt.HEADER_KEY: json.dumps(doc)})
    reader = pa.ipc.open_file(pa.py_buffer(data))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, forged_schema) as w:
        for i in range(reader.num_record_batches):
            w.write_batch(reader.get_batch(i).replace_schema_metadata(forged_schema.metadata))
    forged = sink.getvalue().to_pybytes()
    with pytest.raises(CorruptMetadata, match="summary"):
        fmt.SegmentFile(forged, "segment/x.arrow")  # header: blocks no longer add up
    # Even with the header's total made to agree, decoding the block catches it.
    doc["stats"] = fmt.stats_to_json(fmt.merge_summaries(
        [fmt.parse_summary(b, "b", "k") for b in doc["blocks"]], m.schema).stats)
    forged_schema = fmt._COLUMNS.with_metadata({fmt.HEADER_KEY: json.dumps(doc)})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, forged_schema) as w:
        for i in range(reader.num_record_batches):
            w.write_batch(reader.get_batch(i).replace_schema_metadata(forged_schema.metadata))
    seg2 = fmt.SegmentFile(sink.getvalue().to_pybytes(), "segment/x.arrow")
    with pytest.raises(CorruptMetadata, match="block 0"):
        seg2.block(0)
    assert summary.files == len(entries)


def test_format_1_segments_are_still_read(tmp_path: Path) -> None:
    """A version-1 manifest whose segment is an earlier manifest (no summary)."""
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA)
    for i in range(3):
        t.append(_rows(i * 2, i * 2 + 2))
    base = t.refresh().snapshot
    bm = base.manifest
    from caslake.format.manifest import SegmentRef
    v1 = Manifest(table_id=bm.table_id, version=bm.version + 1, parent=base.key,
                  commit_id=uuid.uuid4().hex, created_at_ms=bm.created_at_ms + 1,
                  operation="append", schema=bm.schema, files=(),
                  segments=(SegmentRef(base.key, bm.version, len(bm.files),
                                       sum(f.row_count for f in bm.files),
                                       sum(f.size for f in bm.files)),),
                  totals=bm.totals, format_version=1, ancestors=bm.ancestors)
    key = f"manifest/v{v1.version:020d}-{uuid.uuid4().hex}.json"
    t.store.put(key, v1.to_bytes(), mode=PutMode.CREATE)
    assert b'"format_version":1' in v1.to_bytes() and b'"segment"' not in v1.to_bytes()
    t.store.put(t.io.pointer_key, Pointer(bm.table_id, v1.version, key, v1.commit_id,
                                          format_version=1).to_bytes(),
                mode=PutMode.OVERWRITE)
    fresh = caslake.open_table(t.uri)
    assert sorted(fresh.scan(where="id >= 1").to_arrow().column("id").to_pylist()) == [
        1, 2, 3, 4, 5]
    fresh.append(_rows(100, 101))  # a format-3 writer's commit on top of a format-1 version
    assert fresh.refresh().snapshot.manifest.format_version == 1  # no segment object yet
    assert fresh.scan().count() == 7


def _fake(i: int) -> DataFile:
    return DataFile(path=f"data/fake/{i:08d}.parquet", size=1000, etag=f'"{i:x}"',
                    row_count=1, row_group_count=1, footer_size=100,
                    stats={1: {"min": 1000 + i, "max": 1000 + i, "nulls": 0}})


@pytest.mark.s3
def test_point_read_request_count_on_s3(s3_uri: str, s3_options: dict[str, str]) -> None:
    """A scaled slice of the 100,000-file goal: on a 5,000-file table a point read
    costs pointer + root + the matching segment + the file's footer and ranges.
    (The 4,990 other entries name files that do not exist: reading any would fail.)"""
    t = caslake.create_table(s3_uri, SCHEMA, storage_options=s3_options)
    for i in range(10):
        t.append(_rows(i, i + 1))
    for start in range(0, 4990, 250):
        batch = tuple(_fake(i) for i in range(start, min(4990, start + 250)))
        commit_with_retry(t.io, lambda base, b=batch: Changes("append", add_files=b))
    m = t.refresh().snapshot.manifest
    assert m.totals.files == 5000 and sum(s.is_object for s in m.segments) >= 3
    segments.CACHE.clear()  # as a new process would
    store = open_store(s3_uri, s3_options)
    fresh = Table.load(store)
    assert fresh.scan(where="id = 7").to_arrow().column("id").to_pylist() == [7]
    c = store.counters.snapshot()
    # the pointer (read by the open and again by the scan), the root, one segment
    assert c.get(GET, 0) == 4, c
    assert c.get(GET_RANGE, 0) <= 2, c  # the file's footer and its column chunks
    assert c.get(HEAD, 0) == 0 and c.get(LIST, 0) == 0, c


def test_delete_conflict_check_opens_no_segment_after_appends(tmp_path: Path) -> None:
    """A delete re-checks, after a concurrent commit, that the files it planned on
    are still live.  When the commits in between removed no file (their summaries
    say so), it decides without opening a segment; after a removal it reads the
    live list and sees the file gone."""
    from caslake.core.conflicts import touched_since
    t = _sorted_table(str(tmp_path / "t"))
    planned = t.snapshot
    victim = next(f for f in t.io.live_files(planned) if f.stats[1]["min"] == 0)
    t.append(_rows(1000, 1001))
    t.delete("id = 1000")  # a delete that removes its whole (one-row) file
    t.append(_rows(1001, 1002))
    base = t.refresh().snapshot
    assert base.manifest.summary["removed_files"] == 0
    segments.CACHE.clear()
    t.store.counters.reset()
    # the delete of id 1000 removed a file between planned and base: unsure, so the
    # live list is read (and the victim is found still live)
    assert not touched_since(t.io, planned, base, {victim.path})
    assert t.store.counters.snapshot().get(GET, 0) > 0
    later = t.refresh().snapshot
    t.append(_rows(1002, 1003))
    t.append(_rows(1003, 1004))
    newest = t.refresh().snapshot
    segments.CACHE.clear()
    t.store.counters.reset()
    assert not touched_since(t.io, later, newest, {victim.path})
    # only the parents' manifests are read (cached here): no segment object
    assert t.store.counters.snapshot().get(GET, 0) == 0
    # a removal of the victim itself is seen
    t.delete("id BETWEEN 0 AND 4")  # all of the victim's rows: the file is removed
    gone = t.refresh().snapshot
    assert touched_since(t.io, newest, gone, {victim.path})


def test_gc_mark_walks_each_segment_once_and_honours_removed(tmp_path: Path) -> None:
    """gc's mark phase: a file removed from a segment (listed in ``removed``) stays
    referenced while any retained version still has it live, and is unreferenced
    once every retained version naming the segment has removed it."""
    from caslake.ops.gc import _referenced
    t = _sorted_table(str(tmp_path / "t"))
    before = t.snapshot
    victim = next(f for f in t.io.live_files(before) if f.stats[1]["min"] == 0)
    seg_keys = {s.manifest for s in before.manifest.segments}
    t.delete("id BETWEEN 0 AND 4")  # removes the victim's file
    after = t.refresh().snapshot
    assert victim.path in after.manifest.removed  # held in a segment both versions share
    assert seg_keys & {s.manifest for s in after.manifest.segments}
    assert victim.path in _referenced(t.io, [before, after])
    assert victim.path in _referenced(t.io, [after, before])
    only_after = _referenced(t.io, [after])
    assert victim.path not in only_after
    assert {f.path for f in t.io.live_files(after)} <= only_after


def _ids(t: caslake.Table, **kw: object) -> list[int]:
    return sorted(t.scan(**kw).to_arrow().column("id").to_pylist())  # type: ignore[arg-type]


def test_segments_with_refs_clone_purge_export_compaction_gc(tmp_path: Path) -> None:
    """Format 3 coexists with everything format 2 has: a branch and a tag pointing
    at roots with segment objects, a clone of such a table, purge, Iceberg export,
    compaction, time travel, verify and gc, all over several segments."""
    import pyarrow.parquet as pq

    from caslake.format.keys import POINTER_KEY
    from caslake.format.refs import branch_key
    t = _sorted_table(str(tmp_path / "t"))
    everything = list(range(60))
    with segment_thresholds():
        t.create_tag("v-base")
        t.create_branch("dev")
        dev = t.branch("dev")
        for i in range(4):
            dev.append(_rows(100 + i * 5, 105 + i * 5))
        dev.delete("id = 101")
        dev_head = json.loads(t.store.get(branch_key("dev")).data)
        assert dev_head["format_version"] == 3
        assert json.loads(t.store.get(POINTER_KEY).data)["format_version"] == 3
        dev_ids = everything + [i for i in range(100, 120) if i != 101]
        assert _ids(dev.refresh()) == dev_ids
        assert _ids(dev, where="id >= 100") == dev_ids[60:]
        # main moves on: a purge and a compaction over segments
        t.purge("id BETWEEN 10 AND 12")
        t.delete("id = 40")
        t.compact(target_file_size=1 << 20, deleted_fraction=0.01)
        main_ids = [i for i in everything if not 10 <= i <= 12 and i != 40]
        assert _ids(t.refresh()) == main_ids
        assert _ids(t, where="id < 20") == [i for i in main_ids if i < 20]
        # time travel to the tagged version, reading segments it shares with the head
        assert _ids(t, version=12) == everything
        # a clone of the head holds every entry; its own commits write its segments
        clone_uri = str(tmp_path / "clone")
        caslake.clone(t.uri, clone_uri)
        c = caslake.open_table(clone_uri)
        for i in range(3):
            c.append(_rows(200 + i, 201 + i))
        assert _ids(c) == [*main_ids, 200, 201, 202]
        assert _ids(c, where="id = 201") == [201]
        # Iceberg export of a segmented version, read back by pyarrow
        res = t.export_iceberg()
        assert res is not None
        files = [f["path"] for f in t.live_files()]
        got = sorted(pq.read_table([str(tmp_path / "t" / p) for p in files]).column(
            "id").to_pylist())
        assert set(main_ids) <= set(got)
    report = t.gc(now=datetime.now(UTC) + timedelta(days=30))
    assert report.deleted  # old segments and files went
    for table in (t.refresh(), c.refresh()):
        assert verify_table(table.store).ok
    assert _ids(t) == main_ids
    assert _ids(dev) == dev_ids
    assert _ids(t, tag="v-base") == everything  # the tag keeps its version's segments
    assert _ids(c) == [*main_ids, 200, 201, 202]


def test_read_validation_reads_only_segments_that_might_match(tmp_path: Path) -> None:
    """An upsert or delete with ``read_version`` checks the commits since through
    the pruned path: a concurrent change elsewhere opens no segment of the other
    keys, and a concurrent change to a matching key is still a conflict."""
    from caslake.core.conflicts import PredicateCondition, changed_since
    t = _sorted_table(str(tmp_path / "t"))
    read = t.snapshot
    t.append(_rows(1000, 1001))
    base = t.refresh().snapshot
    objects = [s for s in base.manifest.segments if s.is_object]
    assert len(objects) >= 2
    segments.CACHE.clear()
    t.store.counters.reset()
    assert changed_since(t.io, read, base, [PredicateCondition("id = 7")]) is None
    assert t.store.counters.snapshot().get(GET, 0) == 1  # only the segment holding id 7
    t.delete("id = 7")
    after = t.refresh().snapshot
    reason = changed_since(t.io, read, after, [PredicateCondition("id = 7")])
    assert reason is not None and "id = 7" in reason
    assert changed_since(t.io, read, after, [PredicateCondition("id = 33")]) is None


def test_summaries_are_keyed_by_field_id_across_schema_changes(tmp_path: Path) -> None:
    """Summaries, like file statistics, are keyed by field id: after a rename, a
    drop and an added column, a point read on the renamed key still opens only
    the segment that holds it, and equals pyarrow's filter of the same rows."""
    t = _sorted_table(str(tmp_path / "t"))
    t.update_schema().rename_column("id", "key").drop_column("v").add_column(
        "w", pa.int32()).commit()
    with segment_thresholds():
        for i in range(3):
            t.append(pa.table({"key": pa.array([100 + i], pa.int64()),
                               "w": pa.array([i], pa.int32())}))
    t.update_schema().widen_column("w", pa.int64()).commit()
    segments.CACHE.clear()
    fresh = caslake.open_table(t.uri)
    fresh.store.counters.reset()
    assert fresh.scan(where="key = 7").to_arrow().to_pylist() == [{"key": 7, "w": None}]
    assert fresh.store.counters.snapshot().get(GET, 0) == 2  # pointer + the one segment
    everything = fresh.scan().to_arrow()
    for where, keep in [("key >= 58", lambda k: k >= 58), ("w = 1", lambda k: k == 101),
                        ("w IS NULL AND key < 3", lambda k: k < 3)]:
        want = sorted(r["key"] for r in everything.to_pylist() if keep(r["key"]))
        assert sorted(fresh.scan(where=where).to_arrow().column("key").to_pylist()) == want
