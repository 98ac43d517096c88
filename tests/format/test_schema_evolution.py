"""Schema evolution by field id (pure layer): evolve() rules and reading old files by id."""

from __future__ import annotations

import io as _io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from caslake.errors import InvalidSchemaChange, UserInputError
from caslake.format.manifest import Manifest, parse_manifest
from caslake.format.schema import TableSchema
from caslake.format.schema_evolution import (
    AddColumn,
    DropColumn,
    MakeNullable,
    RenameColumn,
    WidenColumn,
    conform_to_schema,
    evolve,
    is_widening,
    map_input_columns,
)
from tests.format.schema_model import SchemaModel, valid_changes


def _row_key(row: dict) -> str:
    return repr(sorted(row.items()))


BASE = TableSchema.from_arrow(pa.schema([("id", pa.int32()), ("name", pa.string()),
                                         ("amount", pa.decimal128(10, 2))]))


def _roundtrip_parquet(table: pa.Table) -> pa.Table:
    """Write and read back through Parquet, as a data file would be."""
    buf = _io.BytesIO()
    pq.write_table(table, buf)
    return pq.read_table(pa.BufferReader(buf.getvalue()))


def test_add_gets_a_fresh_id_even_after_a_drop() -> None:
    s1 = evolve(BASE, [DropColumn("amount")])
    s2 = evolve(s1, [AddColumn("amount", "float64")])
    assert s2.schema_id == 2
    assert s2.field("amount").id == 4  # never 3, the dropped column's id
    assert s2.last_field_id == 4


def test_last_field_id_survives_the_manifest_round_trip() -> None:
    s = evolve(BASE, [AddColumn("x", "int64"), DropColumn("x")])
    m = Manifest(table_id="t", version=0, parent=None, commit_id="0" * 32, created_at_ms=0,
                 operation="create", schema=s)
    back = parse_manifest(m.to_bytes(), "manifest/x.json").schema
    assert back == s and back.last_field_id == 4 and back.schema_id == 1


@pytest.mark.parametrize("old,new,ok", [
    ("int8", "int16", True), ("int8", "int64", True), ("int16", "int32", True),
    ("int32", "int64", True), ("float32", "float64", True),
    ("decimal128(10, 2)", "decimal128(20, 2)", True),
    ("int64", "int32", False), ("int64", "int64", False), ("string", "int64", False),
    ("float64", "float32", False), ("int32", "float64", False),
    ("decimal128(10, 2)", "decimal128(20, 3)", False),
    ("decimal128(10, 2)", "decimal128(9, 2)", False),
])
def test_widening_rules(old: str, new: str, ok: bool) -> None:
    assert is_widening(old, new) is ok


@pytest.mark.parametrize("changes,column", [
    ([WidenColumn("id", "int16")], "id"),                 # narrowing
    ([WidenColumn("name", "int64")], "name"),             # string -> int
    ([WidenColumn("amount", "decimal128(12, 3)")], "amount"),  # scale change
    ([RenameColumn("id", "name")], "name"),               # onto an existing name
    ([DropColumn("id"), DropColumn("name"), DropColumn("amount")], "amount"),  # the last one
    ([DropColumn("nope")], "nope"),
    ([RenameColumn("nope", "x")], "nope"),
    ([AddColumn("id", "int64")], "id"),
    ([AddColumn("", "int64")], ""),
    ([AddColumn("x", "list<int65>")], "x"),       # an unknown inner type
    ([AddColumn("x", pa.duration("s"))], "x"),    # no table can hold it (nested types can)
])
def test_bad_changes_are_typed_errors_naming_the_column(changes: list, column: str) -> None:
    with pytest.raises(InvalidSchemaChange) as e:
        evolve(BASE, changes)
    assert isinstance(e.value, UserInputError)
    assert e.value.column == column


def test_no_changes_is_an_error_and_input_is_untouched() -> None:
    with pytest.raises(InvalidSchemaChange):
        evolve(BASE, [])
    assert BASE.schema_id == 0 and BASE.names == ["id", "name", "amount"]


def test_make_nullable_and_pyarrow_types_accepted() -> None:
    nn = TableSchema.from_arrow(pa.schema([pa.field("k", pa.int64(), nullable=False),
                                           ("v", pa.float32())]))
    s = evolve(nn, [MakeNullable("k"), WidenColumn("v", pa.float64())])
    assert s.field("k").nullable and s.field("v").type == "float64"


def test_renamed_column_of_an_old_file_resolves_by_id() -> None:
    old = _roundtrip_parquet(pa.table({"id": pa.array([1, 2], pa.int32()),
                                       "name": ["x", "y"],
                                       "amount": pa.array([None, None], pa.decimal128(10, 2))},
                                      schema=BASE.to_arrow()))
    s = evolve(BASE, [RenameColumn("name", "label"), WidenColumn("id", "int64"),
                      AddColumn("extra", "string")])
    out = conform_to_schema(old, s)
    assert out.column_names == ["id", "label", "amount", "extra"]
    assert out.column("label").to_pylist() == ["x", "y"]
    assert out.schema.field("id").type == pa.int64()
    assert out.column("extra").to_pylist() == [None, None]


def test_drop_then_add_same_name_never_shows_old_values() -> None:
    old = _roundtrip_parquet(pa.table({"id": pa.array([1], pa.int32()), "name": ["secret"],
                                       "amount": pa.array([None], pa.decimal128(10, 2))},
                                      schema=BASE.to_arrow()))
    s = evolve(evolve(BASE, [DropColumn("name")]), [AddColumn("name", "string")])
    assert conform_to_schema(old, s).column("name").to_pylist() == [None]


def test_a_file_column_without_a_field_id_is_refused() -> None:
    plain = pa.table({"id": pa.array([1], pa.int32())})
    with pytest.raises(ValueError, match="field id"):
        conform_to_schema(plain, BASE)


def test_append_mapping_by_name_then_by_id_for_renamed_columns() -> None:
    s = evolve(BASE, [RenameColumn("name", "label")])
    old_shape = BASE.to_arrow()  # carries field ids: 'name' is id 2, now called 'label'
    m = map_input_columns(old_shape, s)
    assert {k: v.name for k, v in m.items()} == {"id": "id", "name": "label",
                                                  "amount": "amount"}
    # A name always wins: a column 'label' in the input maps to 'label' itself, and
    # the id-2 column 'name' is then extra (reported by the caller).
    both = pa.schema([*old_shape, pa.field("label", pa.string())])
    m2 = map_input_columns(both, s)
    assert m2["label"].id == 2 and "name" not in m2
    # Plain data without ids maps by name only.
    assert set(map_input_columns(pa.schema([("name", pa.string())]), s)) == set()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_evolution_reads_every_file_like_the_model(data: st.DataObject) -> None:
    """Random add / rename / drop / widen sequences, each followed by writing a file
    under the then-current schema: every file, read under every later schema by
    field id, equals the model (which works by name, with no ids)."""
    model = SchemaModel([("a", "int32"), ("b", "string")])
    schema = TableSchema.from_arrow(model.arrow_schema())
    files: list[pa.Table] = []
    for _ in range(data.draw(st.integers(1, 6), label="steps")):
        ch = data.draw(valid_changes(model), label="change")
        schema = evolve(schema, [ch])
        model.apply(ch)
        assert schema.names == model.names
        rows = model.new_rows(data.draw(st.integers(0, 3)))
        model.rows.extend(rows)
        table = model.to_arrow(rows).cast(schema.to_arrow())
        files.append(_roundtrip_parquet(table))
        got = pa.concat_tables([conform_to_schema(f, schema) for f in files])
        assert got.column_names == model.names
        assert sorted(got.to_pylist(), key=_row_key) == sorted(model.rows, key=_row_key)
