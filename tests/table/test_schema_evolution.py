"""Schema evolution on a table: reads by field id, appends after a rename, merge mode,
concurrency, typed errors, and a Hypothesis run against a plain model."""

from __future__ import annotations

import json

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import caslake
from caslake.errors import (
    CommitConflict,
    ConcurrentModification,
    InvalidSchemaChange,
    SchemaMismatch,
    UserInputError,
)
from caslake.format.keys import POINTER_KEY
from caslake.format.schema import FIELD_ID_KEY
from caslake.store import open_store
from tests.format.schema_model import SchemaModel, valid_changes
from tests.table.test_refs import objects

SCHEMA = pa.schema([("id", pa.int32()), ("name", pa.string()), ("score", pa.float32())])


def data(ids: list[int], prefix: str = "n") -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int32()), "name": [f"{prefix}{i}" for i in ids],
                     "score": pa.array([i / 2 for i in ids], pa.float32())}, schema=SCHEMA)


@pytest.fixture
def table(tmp_path) -> caslake.Table:  # type: ignore[no-untyped-def]
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(data([1, 2, 3]))  # v1
    return t


def test_every_written_column_carries_its_field_id(table) -> None:  # type: ignore[no-untyped-def]
    path = table.describe()["data_files"][0]["path"]
    schema = pq.read_schema(open_store(table.uri).local_path(path))
    assert [f.metadata[FIELD_ID_KEY] for f in schema] == [b"1", b"2", b"3"]


def test_files_written_before_a_rename_read_by_field_id(table) -> None:  # type: ignore[no-untyped-def]
    res = table.update_schema().rename_column("name", "label").widen_column(
        "id", "int64").widen_column("score", pa.float64()).add_column("extra", "string").commit()
    assert res.version == 2 and res.operation == "schema"
    assert table.table_schema.schema_id == 1
    table.append(pa.table({"id": pa.array([4], pa.int64()), "label": ["n4"],
                           "score": [2.0], "extra": ["x"]}))
    got = table.scan().to_arrow().sort_by("id")
    assert got.schema.names == ["id", "label", "score", "extra"]
    assert got.schema.field("id").type == pa.int64()
    assert got.column("label").to_pylist() == ["n1", "n2", "n3", "n4"]
    assert got.column("score").to_pylist() == [0.5, 1.0, 1.5, 2.0]
    assert got.column("extra").to_pylist() == [None, None, None, "x"]
    # DuckDB through to_reader() sees the same rows under the current names.
    rel = duckdb.from_arrow(table.scan(where="label <> 'n2'").to_reader())
    rows = rel.order("id").project("id, label").fetchall()
    assert rows == [(1, "n1"), (3, "n3"), (4, "n4")]
    # The old version reads under its own schema.
    old = table.scan(version=1).to_arrow()
    assert old.schema.names == ["id", "name", "score"] and old.num_rows == 3
    assert [h.version for h in table.history()] == [3, 2, 1, 0]
    assert json.loads(open_store(table.uri).get(POINTER_KEY).data)["format_version"] == 2


def test_predicates_and_pruning_use_current_names_and_stats_by_field_id(tmp_path) -> None:  # type: ignore[no-untyped-def]
    t = caslake.create_table(str(tmp_path / "p"), SCHEMA)
    for lo in (0, 100, 200):
        t.append(data(list(range(lo, lo + 10))))
    t.update_schema().rename_column("id", "key").commit()
    scan = t.scan(columns=["name"], where="key >= 200")
    assert scan.plan().files_pruned == 2
    assert sorted(scan.to_arrow().column("name").to_pylist()) == [f"n{i}" for i in range(200, 210)]
    t.delete("key BETWEEN 100 AND 104")
    assert t.scan().count() == 25


def test_drop_then_add_of_the_same_name_never_shows_old_values(table) -> None:  # type: ignore[no-untyped-def]
    table.update_schema().drop_column("name").commit()
    assert table.scan().to_arrow().schema.names == ["id", "score"]
    table.update_schema().add_column("name", "string").commit()
    assert table.table_schema.field("name").id == 4
    assert table.scan().to_arrow().column("name").to_pylist() == [None, None, None]
    assert table.scan(where="name IS NOT NULL").count() == 0
    assert table.scan(version=1).to_arrow().column("name").to_pylist() == ["n1", "n2", "n3"]


def test_append_with_the_old_schema_after_a_rename_maps_by_field_id(table) -> None:  # type: ignore[no-untyped-def]
    before = table.scan(version=1).to_arrow()  # carries the field ids of version 1
    table.update_schema().rename_column("name", "label").commit()
    table.append(before)
    got = table.scan().to_arrow()
    assert sorted(got.column("label").to_pylist()) == ["n1", "n1", "n2", "n2", "n3", "n3"]


def test_extra_columns_need_merge_mode(table) -> None:  # type: ignore[no-untyped-def]
    extra = data([7]).append_column("color", pa.array(["red"])).append_column(
        "size", pa.array([3], pa.int16()))
    v = table.refresh().version
    with pytest.raises(SchemaMismatch) as e:
        table.append(extra)
    assert "'color'" in str(e.value) and "'size'" in str(e.value) and "merge" in str(e.value)
    assert table.refresh().version == v
    res = table.append(extra, schema_mode="merge")
    assert res.version == v + 1  # data and schema in one commit
    got = table.scan(columns=["id", "color", "size"], where="color = 'red'").to_arrow()
    assert got.to_pylist() == [{"id": 7, "color": "red", "size": 3}]
    assert table.table_schema.schema_id == 1


def test_concurrent_add_column_rebases_an_append_and_a_rename_conflicts(table) -> None:  # type: ignore[no-untyped-def]
    writer = caslake.open_table(table.uri)  # plans on version 1
    other = caslake.open_table(table.uri)
    other.update_schema().add_column("extra", "int64").commit()
    res = writer.append(data([10]))  # rebases: the new column is nullable
    assert res.version == 3 and not res.noop
    got = caslake.open_table(table.uri).scan(where="id = 10").to_arrow()
    assert got.column("extra").to_pylist() == [None]
    stale = caslake.open_table(table.uri)
    other.refresh().update_schema().rename_column("name", "label").commit()
    # The stale handle's data has every column it knows (``extra`` included), so the
    # append gets as far as the commit, where the rename is a conflict.
    row = data([11]).append_column("extra", pa.array([None], pa.int64()))
    with pytest.raises(ConcurrentModification) as e:
        stale.append(row)
    assert isinstance(e.value, CommitConflict)
    rival = caslake.open_table(table.uri)
    pending = rival.update_schema().add_column("z", "string")
    other.refresh().update_schema().add_column("w", "string").commit()
    with pytest.raises(ConcurrentModification):
        pending.commit()


@pytest.mark.parametrize("build", [
    lambda u: u.widen_column("id", "int16"),              # narrowing (int32 -> int16)
    lambda u: u.widen_column("name", "int64"),            # string -> int
    lambda u: u.rename_column("name", "id"),              # onto an existing name
    lambda u: u.drop_column("id").drop_column("name").drop_column("score"),  # the last one
    lambda u: u.drop_column("missing"),
    lambda u: u.add_column("x", "not-a-type"),
    lambda u: u.add_column("x", 42),
    lambda u: u.commit(),                                 # nothing to commit
])
def test_bad_schema_changes_are_typed_errors_and_leave_nothing(table, build) -> None:  # type: ignore[no-untyped-def]
    before = objects(table.uri)
    with pytest.raises(InvalidSchemaChange) as e:
        build(table.update_schema()).commit()
    assert isinstance(e.value, UserInputError)
    assert objects(table.uri) == before


def test_int64_to_int32_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    t = caslake.create_table(str(tmp_path / "w"), pa.schema([("a", pa.int64()),
                                                             ("b", pa.string())]))
    before = objects(t.uri)
    with pytest.raises(InvalidSchemaChange, match="int64 to int32"):
        t.update_schema().widen_column("a", "int32").commit()
    assert objects(t.uri) == before and t.refresh().version == 0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_evolution_with_appends_and_deletes_matches_the_model(  # type: ignore[no-untyped-def]
        tmp_path_factory, data) -> None:
    """Random add / rename / drop / widen, each followed by an append and maybe a
    delete: every version of the table reads exactly as the model says."""
    model = SchemaModel([("k", "int64"), ("a", "int32"), ("b", "string")])
    t = caslake.create_table(str(tmp_path_factory.mktemp("h") / "t"), model.arrow_schema())
    versions: list[tuple[list[str], list[dict]]] = [([*model.names], [])]
    key = 0
    for _ in range(data.draw(st.integers(1, 5), label="steps")):
        ch = data.draw(valid_changes(model, frozenset({"k"})), label="change")
        t.update_schema()._queue(ch).commit()
        model.apply(ch)
        versions.append(([*model.names], [dict(r) for r in model.rows]))
        rows = model.new_rows(data.draw(st.integers(1, 3), label="rows"))
        for r in rows:
            r["k"] = key
            key += 1
        t.append(model.to_arrow(rows))
        model.rows.extend(rows)
        versions.append(([*model.names], [dict(r) for r in model.rows]))
        if model.rows and data.draw(st.booleans(), label="delete"):
            k = data.draw(st.sampled_from([r["k"] for r in model.rows]), label="k")
            t.delete(f"k <= {k}")
            model.rows = [r for r in model.rows if r["k"] > k]
            versions.append(([*model.names], [dict(r) for r in model.rows]))
    fresh = caslake.open_table(t.uri)
    assert fresh.version == len(versions) - 1
    for v, (names, rows) in enumerate(versions):
        got = fresh.scan(version=v).to_arrow()
        assert got.schema.names == names, v
        assert sorted(got.to_pylist(), key=lambda r: r["k"]) == sorted(
            rows, key=lambda r: r["k"]), v


def test_every_widening_and_make_nullable_read_old_files_exactly(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from decimal import Decimal

    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("a", pa.int8()),
                        ("b", pa.int16()), ("c", pa.int32()), ("f", pa.float32()),
                        ("d", pa.decimal128(10, 2))])
    t = caslake.create_table(str(tmp_path / "w"), schema)
    t.append(pa.table({"k": [1, 2], "a": pa.array([-128, 127], pa.int8()),
                       "b": pa.array([-32768, 5], pa.int16()),
                       "c": pa.array([-2**31, 7], pa.int32()),
                       "f": pa.array([0.5, -1.25], pa.float32()),
                       "d": pa.array([Decimal("12345678.91"), None], pa.decimal128(10, 2))},
                      schema=schema))
    (t.update_schema().widen_column("a", "int64").widen_column("b", "int64")
     .widen_column("c", "int64").widen_column("f", "float64")
     .widen_column("d", pa.decimal128(20, 2)).make_nullable("k").commit())
    t.append(pa.table({"k": pa.array([None], pa.int64()), "a": [2**40], "b": [2**40],
                       "c": [2**40], "f": [1e300],
                       "d": pa.array([Decimal("123456789012345678.99")], pa.decimal128(20, 2))}))
    got = t.scan().to_arrow()
    assert got.schema.field("k").nullable
    assert [got.schema.field(n).type for n in "abcfd"] == [
        pa.int64(), pa.int64(), pa.int64(), pa.float64(), pa.decimal128(20, 2)]
    expected = [
        {"k": None, "a": 2**40, "b": 2**40, "c": 2**40, "f": 1e300,
         "d": Decimal("123456789012345678.99")},
        {"k": 1, "a": -128, "b": -32768, "c": -2**31, "f": 0.5, "d": Decimal("12345678.91")},
        {"k": 2, "a": 127, "b": 5, "c": 7, "f": -1.25, "d": None}]
    assert sorted(got.to_pylist(), key=lambda r: r["k"] or 0) == expected
    rel = duckdb.from_arrow(t.scan(where="a < 0 OR k IS NULL").to_reader())
    assert sorted(rel.project("k, a, d").fetchall(), key=lambda r: r[0] or 0) == [
        (None, 2**40, Decimal("123456789012345678.99")), (1, -128, Decimal("12345678.91"))]
    old = t.scan(version=1).to_arrow()  # version 1 reads under its own schema
    assert old.schema.field("a").type == pa.int8() and old.num_rows == 2
