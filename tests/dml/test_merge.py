"""``Table.merge``: each clause kind, first-clause-wins, names, the cardinality
error, typed errors, one commit, and the change feed's pairs by key -- each
compared with DuckDB's ``MERGE INTO`` on the same rows (or delta-rs for the
cardinality rule, which DuckDB 1.4 does not check)."""

from __future__ import annotations

import uuid

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import caslake
from caslake.errors import DuplicateKey, SchemaMismatch, UnknownColumn

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.int64()),
                    pa.field("s", pa.string())])
TARGET = pa.table({"id": [1, 2, 3, 4, 5, None], "v": [10, 20, 30, 40, 50, 60],
                   "s": ["a", "b", None, "d", "e", "f"]}, schema=SCHEMA)
SOURCE = pa.table({"id": pa.array([2, 4, 6, 7, None], pa.int64()),
                   "w": pa.array([200, 400, 600, 700, 800], pa.int64()),
                   "op": ["u", "d", "i", "i", "i"]})


def make(target: pa.Table = TARGET) -> caslake.Table:
    t = caslake.create_table(f"memory://{uuid.uuid4().hex}", target.schema)
    t.append(target.slice(0, 3))
    t.append(target.slice(3))
    return t


def duck_merge(target: pa.Table, source: pa.Table, sql: str) -> pa.Table:
    con = duckdb.connect()
    con.register("tgt", target)
    con.register("src", source)
    con.execute("CREATE TABLE target AS SELECT * FROM tgt")
    con.execute("CREATE TABLE source AS SELECT * FROM src")
    con.execute(sql)
    return con.execute("SELECT * FROM target").fetch_arrow_table()


def rows(t: pa.Table) -> list[tuple[object, ...]]:
    return sorted((tuple(r.values()) for r in t.to_pylist()), key=repr)


CASES = [
    (lambda m: m.when_matched_update(set={"v": "source.w"}),
     "WHEN MATCHED THEN UPDATE SET v = source.w"),
    (lambda m: m.when_matched_update(set={"v": "target.v + w", "s": "op"},
                                     condition="op = 'u'")
     .when_matched_delete(),
     "WHEN MATCHED AND source.op = 'u' THEN UPDATE SET v = target.v + source.w, s = source.op "
     "WHEN MATCHED THEN DELETE"),
    (lambda m: m.when_not_matched_insert(values={"id": "source.id", "v": "w"},
                                         condition="w > 600"),
     "WHEN NOT MATCHED AND source.w > 600 THEN INSERT (id, v) VALUES (source.id, source.w)"),
    (lambda m: m.when_not_matched_by_source_delete(condition="target.v > 30")
     .when_not_matched_by_source_update(set={"s": "'gone'", "v": "v * 2"}),
     "WHEN NOT MATCHED BY SOURCE AND target.v > 30 THEN DELETE "
     "WHEN NOT MATCHED BY SOURCE THEN UPDATE SET s = 'gone', v = target.v * 2"),
    (lambda m: m.when_matched_delete(condition="op = 'd'")
     .when_matched_update(set={"v": "w"})
     .when_not_matched_insert(values={"id": "id", "v": "w", "s": "op"})
     .when_not_matched_by_source_update(set={"v": "target.v + 1"}, condition="s IS NOT NULL"),
     "WHEN MATCHED AND source.op = 'd' THEN DELETE WHEN MATCHED THEN UPDATE SET v = source.w "
     "WHEN NOT MATCHED THEN INSERT (id, v, s) VALUES (source.id, source.w, source.op) "
     "WHEN NOT MATCHED BY SOURCE AND target.s IS NOT NULL THEN UPDATE SET v = target.v + 1"),
]


@pytest.mark.parametrize(("build", "sql"), CASES)
def test_merge_equals_duckdb(build, sql: str) -> None:  # type: ignore[no-untyped-def]
    t = make()
    v = t.version
    build(t.merge(SOURCE, on=["id"])).execute()
    assert t.version == v + 1
    assert t.history(limit=1)[0].operation == "merge_into"
    want = duck_merge(TARGET, SOURCE,
                      f"MERGE INTO target USING source ON target.id = source.id {sql}")
    assert rows(t.to_arrow()) == rows(want)


def test_update_all_and_insert_all() -> None:
    src = pa.table({"id": pa.array([1, 9], pa.int64()), "v": [-1, -9], "s": ["x", "y"],
                    "extra": [True, False]})
    t = make()
    t.merge(src, on="id").when_matched_update_all().when_not_matched_insert_all().execute()
    want = duck_merge(TARGET, src, "MERGE INTO target USING source ON target.id = source.id "
                      "WHEN MATCHED THEN UPDATE SET v = source.v, s = source.s "
                      "WHEN NOT MATCHED THEN INSERT (id, v, s) VALUES (source.id, source.v, "
                      "source.s)")
    assert rows(t.to_arrow()) == rows(want)


def test_upsert_is_the_merge_case() -> None:
    src = pa.table({"id": pa.array([1, 3, 8, None], pa.int64()), "v": [7, 8, 9, 10],
                    "s": ["p", "q", "r", "z"]}, schema=SCHEMA)
    a, b = make(TARGET.filter(pc.is_valid(TARGET["id"]))), make(
        TARGET.filter(pc.is_valid(TARGET["id"])))
    a.upsert(src, key="id")
    b.merge(src, on=["id"]).when_matched_update_all().when_not_matched_insert_all().execute()
    assert rows(a.to_arrow()) == rows(b.to_arrow())


def test_two_source_rows_matching_one_target_row_is_duplicate_key() -> None:
    src = pa.table({"id": pa.array([2, 2, 3], pa.int64()), "w": [1, 2, 3]})
    t = make()
    v = t.version
    keys = set(t.store.list(""))
    with pytest.raises(DuplicateKey) as info:
        t.merge(src, on=["id"]).when_matched_update(set={"v": "w"}).execute()
    assert info.value.key == {"id": 2} and info.value.count == 2
    assert t.refresh().version == v and set(t.store.list("")) == keys
    # only one of them satisfies the clause: allowed (delta-rs)
    t.merge(src, on=["id"]).when_matched_update(set={"v": "w"}, condition="w > 1").execute()
    assert sorted(r["v"] for r in t.to_arrow().to_pylist() if r["id"] == 2) == [2]
    # a lone unconditional delete deletes the row once
    t.merge(src, on=["id"]).when_matched_delete().execute()
    assert sorted(r["id"] for r in t.to_arrow().to_pylist() if r["id"] is not None) == [1, 4, 5]
    # unmatched duplicates are each inserted
    t.merge(pa.table({"id": pa.array([11, 11], pa.int64())}), on=["id"]) \
        .when_not_matched_insert(values={"id": "id"}).execute()
    assert [r["id"] for r in t.to_arrow().to_pylist()].count(11) == 2


def test_delta_rs_agrees_on_the_cardinality_rule(tmp_path) -> None:  # type: ignore[no-untyped-def]
    deltalake = pytest.importorskip("deltalake")
    src = pa.table({"id": pa.array([2, 2], pa.int64()), "w": pa.array([1, 2], pa.int64())})
    deltalake.write_deltalake(str(tmp_path), TARGET.filter(pc.is_valid(TARGET["id"])))
    dt = deltalake.DeltaTable(str(tmp_path))
    with pytest.raises(Exception, match="multiple source rows"):
        dt.merge(src, "target.id = source.id", source_alias="source", target_alias="target") \
            .when_matched_update(updates={"v": "source.w"}).execute()
    t = make(TARGET.filter(pc.is_valid(TARGET["id"])))
    with pytest.raises(DuplicateKey):
        t.merge(src, on=["id"]).when_matched_update(set={"v": "w"}).execute()


def test_typed_errors_name_the_column() -> None:
    t = make()
    v = t.version
    with pytest.raises(SchemaMismatch) as info:
        t.merge(SOURCE, on=["id"]).when_matched_update(set={"v": "op"}).execute()
    assert info.value.column == "v"
    with pytest.raises(UnknownColumn):  # both sides have id: qualify it
        t.merge(SOURCE, on=["id"]).when_matched_update(set={"v": "id"}).execute()
    with pytest.raises(UnknownColumn):
        t.merge(SOURCE, on=["id"]).when_matched_update(set={"nope": "1"})
    with pytest.raises(UnknownColumn):
        t.merge(SOURCE, on=["nope"])
    with pytest.raises(SchemaMismatch) as info:  # a key the source lacks
        t.merge(SOURCE.drop_columns(["id"]), on=["id"])
    assert info.value.column == "id"
    with pytest.raises(SchemaMismatch) as info:  # update_all needs every table column
        t.merge(SOURCE, on=["id"]).when_matched_update_all().execute()
    assert info.value.column in ("v", "s")
    assert t.refresh().version == v


def test_a_merge_changing_nothing_creates_no_version() -> None:
    t = make()
    v = t.version
    res = t.merge(SOURCE, on=["id"]).when_matched_delete(condition="w > 10000").execute()
    assert res.noop and t.version == v


def test_change_feed_pairs_a_merge_by_key() -> None:
    t = make()
    v = t.version + 1
    t.merge(SOURCE, on=["id"]).when_matched_delete(condition="op = 'd'") \
        .when_matched_update(set={"v": "w"}) \
        .when_not_matched_insert(values={"id": "id", "v": "w"}).execute()
    feed = t.changes(v, v).to_arrow()
    got = sorted(((r["_change_type"], r["id"], r["v"]) for r in feed.to_pylist()), key=repr)
    assert got == sorted([("update_preimage", 2, 20), ("update_postimage", 2, 200),
                          ("delete", 4, 40), ("insert", 6, 600), ("insert", 7, 700),
                          ("insert", None, 800)], key=repr)
