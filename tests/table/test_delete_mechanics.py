"""How deletes are recorded and applied: record kinds, pruning of deleted row
groups, dropped files, tombstone loading, transactions, and the tombstone parser."""

from __future__ import annotations

import struct
import uuid
import zlib

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyroaring import BitMap

import caslake
from caslake.core import WriteOptions
from caslake.errors import CorruptMetadata, InvalidPredicate
from caslake.format.tombstone import FileDeletes, KeyRange, Tombstone, parse_tombstone
from caslake.store.base import GET_RANGE

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def table_with(n: int, *, rg: int = 2_000, files: int = 1) -> caslake.Table:
    t = caslake.create_table(f"memory://{uuid.uuid4().hex}", SCHEMA,
                             write_options=WriteOptions(row_group_size=rg))
    per = n // files
    for i in range(files):
        ids = range(i * per, (i + 1) * per)
        t.append(pa.table({"id": pa.array(ids, pa.int64()), "v": [str(x % 7) for x in ids]}))
    return t


def tombstones(t: caslake.Table) -> list[Tombstone]:
    return [parse_tombstone(t.store.get(r.path).data, r.path)
            for r in t.snapshot.manifest.tombstones]


def test_emptied_row_group_is_recorded_whole_and_never_fetched() -> None:
    t = table_with(50_000)
    plan = t.scan(columns=["id"]).plan()
    first_rg = plan.tasks[0].footer.row_group(0).num_rows
    res = t.delete(f"id < {first_rg}")
    assert res.rows_deleted == first_rg
    (tomb,) = tombstones(t)
    assert tomb.files[0].row_groups == {0} and not tomb.files[0].positions
    t.store.counters.reset()
    scan = t.scan(columns=["id"])
    plan = scan.plan()
    assert plan.row_groups_deleted == 1
    assert 0 not in plan.tasks[0].row_groups
    got = scan.to_arrow()
    assert got.num_rows == 50_000 - first_rg and min(got.column("id").to_pylist()) == first_rg
    c = t.store.counters.snapshot()
    # Only the surviving groups' chunks were fetched (the pointer is the other read).
    assert c[GET_RANGE] >= 1
    assert plan.bytes_to_read <= c["bytes_in"] <= plan.bytes_to_read + 1_000


def test_one_row_delete_is_a_position_and_big_ranges_become_key_ranges() -> None:
    t = table_with(50_000, rg=1 << 20)
    t.delete("id = 7")
    (tomb,) = tombstones(t)
    assert list(tomb.files[0].positions) == [7] and not tomb.files[0].key_ranges
    t.delete("v = '3'")  # ~7,000 scattered rows: a key range is smaller than the bitmap
    (tomb,) = tombstones(t)  # the new tombstone holds the merged mask and supersedes the old
    assert tomb.files[0].key_ranges == (KeyRange(2, "3", "3"),)
    assert list(tomb.files[0].positions) == [7]
    got = t.scan().to_arrow()
    assert "3" not in set(got.column("v").to_pylist()) and 7 not in got.column("id").to_pylist()
    assert got.num_rows == 50_000 - 1 - sum(1 for i in range(50_000) if i % 7 == 3 and i != 7)
    # the key-range column is read even when not projected, and the mask still applies
    assert t.scan(columns=["id"]).count() == got.num_rows


def test_file_whose_rows_all_go_is_dropped_not_tombstoned() -> None:
    t = table_with(30_000, files=3)
    res = t.delete("id < 10000")  # exactly the first file
    assert res.rows_deleted == 10_000 and res.files_removed == 1 and res.tombstones_added == 0
    m = t.snapshot.manifest
    assert m.totals.files == 2 and not m.tombstones and m.totals.live_rows == 20_000
    # a file partly deleted before, then emptied, is dropped and its refs forgotten
    t.delete("id = 10000")
    t.delete("id > 10000 AND id < 20000")
    m = t.snapshot.manifest
    assert m.totals.files == 1 and not m.tombstones and m.totals.deleted_rows == 0
    assert t.scan().count() == 10_000


def test_tombstones_are_loaded_only_for_files_that_survive_pruning() -> None:
    t = table_with(40_000, files=4)
    for k in (5, 10_005, 20_005, 30_005):
        t.delete(f"id = {k}")
    plan = t.scan(where="id >= 30000").plan()
    assert plan.tombstones_loaded == 1 and len(plan.tasks) == 1
    t.store.counters.reset()
    t.context.tombstones = type(t.tombstones)()  # cold cache
    assert t.scan(where="id >= 30000").count() == 9_999
    assert t.store.counters.count("get") == 2  # pointer + the one tombstone


def test_many_deletes_leave_one_live_tombstone_per_file() -> None:
    t = table_with(20_000, files=2)
    for k in range(0, 20_000, 97):
        t.delete(f"id = {k}")
    ids = set(t.scan(columns=["id"]).to_arrow().column("id").to_pylist())
    assert ids == {i for i in range(20_000) if i % 97}
    assert t.describe()["deleted_rows"] == len(range(0, 20_000, 97))
    m = t.snapshot.manifest
    assert len(m.tombstones) == 2  # 207 delete commits, one live tombstone per data file
    assert sorted(n for r in m.tombstones for n in r.files.values()) == [103, 104]
    # older versions still see exactly their own deletes
    assert t.scan(version=3).count() == 20_000 - 1


def test_transaction_is_one_commit_and_a_raising_block_commits_nothing() -> None:
    t = table_with(1_000)
    with t.transaction() as tx:
        tx.delete("id < 10")
        tx.append(pa.table({"id": pa.array([5], pa.int64()), "v": ["new"]}))
        tx.delete("id = 5")  # planned against the committed rows: the new 5 survives
    assert tx.result is not None and tx.result.version == 2
    assert tx.result.rows_deleted == 10 and tx.result.rows_added == 1
    assert t.scan(where="id < 10").to_arrow().to_pylist() == [{"id": 5, "v": "new"}]
    files_before = {m.key for m in t.store.list("data/")}
    with pytest.raises(RuntimeError), t.transaction() as tx2:
        tx2.append(pa.table({"id": pa.array([1], pa.int64()), "v": ["x"]}))
        raise RuntimeError("boom")
    assert t.refresh().version == 2
    assert {m.key for m in t.store.list("data/")} == files_before  # staged file removed
    with pytest.raises(InvalidPredicate), t.transaction() as tx3:
        tx3.delete("id = = 3")
    assert t.refresh().version == 2


def test_upsert_replaces_rows_by_composite_key() -> None:
    t = table_with(100)
    res = t.upsert(pa.table({"id": pa.array([1, 2, 500], pa.int64()), "v": ["a", "b", "c"]}),
                   key=["id", "v"])  # no current row has (1,'a'), (2,'b') or (500,'c')
    assert res.rows_deleted == 0 and res.rows_added == 3
    res = t.upsert(pa.table({"id": pa.array([3, 4], pa.int64()), "v": ["3", "4"]}),
                   key=["id", "v"])
    assert res.rows_deleted == 2 and t.scan().count() == 103
    assert t.scan(where="id = 3").count() == 1


# --- the tombstone parser ---------------------------------------------------------


def valid_tombstone() -> bytes:
    return Tombstone("t", "c", (
        FileDeletes("data/a.parquet", 1000, frozenset({1}), (KeyRange(1, 5, 9),),
                    BitMap([3, 999])),
        FileDeletes("data/b.parquet", 10, positions=BitMap([0])),
    )).to_bytes()


def test_tombstone_round_trip() -> None:
    tomb = parse_tombstone(valid_tombstone(), "tombstone/x.del")
    assert tomb.files[0].row_groups == {1} and list(tomb.files[0].positions) == [3, 999]
    assert tomb.files[0].key_ranges == (KeyRange(1, 5, 9),)


def _reseal(header: bytes, blobs: bytes) -> bytes:
    body = b"CLTB" + struct.pack("<I", len(header)) + header + blobs
    return body + struct.pack("<I", zlib.crc32(body))


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "beyond", "card", "dup",
                                    "escape", "version"])
def test_bad_tombstones_are_corrupt_metadata_naming_the_object(damage: str) -> None:
    import json

    raw = valid_tombstone()
    hlen = struct.unpack("<I", raw[4:8])[0]
    header = json.loads(raw[8:8 + hlen])
    blobs = raw[8 + hlen:-4]
    if damage == "truncate":
        data = raw[:-7]
    elif damage == "flip":
        data = raw[:20] + bytes([raw[20] ^ 1]) + raw[21:]
    elif damage == "empty":
        data = b""
    else:
        if damage == "beyond":
            header["files"][1]["row_count"] = 0
        elif damage == "card":
            header["files"][0]["positions"]["cardinality"] = 3
        elif damage == "dup":
            header["files"][1]["path"] = "data/a.parquet"
        elif damage == "escape":
            header["files"][1]["path"] = "data/../../etc/passwd"
        elif damage == "version":
            header["format_version"] = 99
        data = _reseal(json.dumps(header).encode(), blobs)
    with pytest.raises(CorruptMetadata) as e:
        parse_tombstone(data, "tombstone/x.del")
    assert e.value.key == "tombstone/x.del"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | st.builds(
    lambda i, b: valid_tombstone()[:i] + bytes([b]) + valid_tombstone()[i + 1:],
    st.integers(0, 120), st.integers(0, 255)))
def test_tombstone_parser_fuzz_only_raises_corrupt_metadata(data: bytes) -> None:
    try:
        parse_tombstone(data, "tombstone/f.del")
    except CorruptMetadata as e:
        assert e.key == "tombstone/f.del"
