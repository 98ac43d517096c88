"""Schema evolution inside nested columns on a table: ``update_schema()`` by dotted
path, ``schema_mode="merge"`` adding struct fields, typed errors that leave nothing
behind, and a Hypothesis run of random nested schemas and changes, each followed by
appends and deletes, against a plain model (Python rows and pyarrow types)."""

from __future__ import annotations

import json
import random
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import caslake
from caslake.errors import (
    ConcurrentModification,
    InvalidSchemaChange,
    SchemaMismatch,
    UserInputError,
)
from caslake.format.keys import POINTER_KEY
from caslake.store import open_store
from tests.table.test_refs import objects

DEVICE = pa.struct([("os", pa.string()), ("v", pa.int32())])
ITEMS = pa.list_(pa.struct([("price", pa.float32()), ("sku", pa.string())]))
SCHEMA = pa.schema([("id", pa.int64()), ("device", DEVICE), ("tags", pa.list_(pa.int32())),
                    ("items", ITEMS), ("attrs", pa.map_(pa.string(), pa.int32()))])
ROWS = [
    {"id": 1, "device": {"os": "ios", "v": 17}, "tags": [1, None, 3],
     "items": [{"price": 1.5, "sku": "a"}, None], "attrs": [("x", 1)]},
    {"id": 2, "device": None, "tags": None, "items": [], "attrs": None},
    {"id": 3, "device": {"os": None, "v": None}, "tags": [], "items": None,
     "attrs": [("y", None), ("z", 3)]},
]


@pytest.fixture
def table(tmp_path) -> caslake.Table:  # type: ignore[no-untyped-def]
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(pa.Table.from_pylist(ROWS, schema=SCHEMA))  # v1
    return t


def by_id(t: pa.Table) -> list[dict[str, Any]]:
    return sorted(t.to_pylist(), key=lambda r: r["id"])


def test_update_schema_inside_structs_lists_and_maps(table) -> None:  # type: ignore[no-untyped-def]
    res = (table.update_schema()
           .add_column("device.loc", pa.struct([("lat", pa.float64()), ("lon", pa.float64())]))
           .add_column("items.element.qty", "int32")
           .rename_column("device.os", "platform")
           .drop_column("items.element.sku")
           .widen_column("tags.element", "int64")
           .widen_column("attrs.value", pa.int64())
           .add_column("labels", "map<string,list<string>>")
           .commit())
    assert res.version == 2 and res.operation == "schema"
    new_rows = [{"id": 4, "device": {"platform": "android", "v": 9, "loc": {"lat": 1.0,
                                                                          "lon": 2.0}},
                 "tags": [2**40], "items": [{"price": 2.5, "qty": 3}],
                 "attrs": [("big", 2**40)], "labels": [("l", ["a", None])]}]
    table.append(pa.Table.from_pylist(new_rows, schema=table.schema))
    got = table.scan().to_arrow()
    assert got.schema.field("tags").type.value_type == pa.int64()
    assert got.schema.field("device").type.names == ["platform", "v", "loc"]
    assert by_id(got) == [
        {"id": 1, "device": {"platform": "ios", "v": 17, "loc": None}, "tags": [1, None, 3],
         "items": [{"price": 1.5, "qty": None}, None], "attrs": [("x", 1)], "labels": None},
        {"id": 2, "device": None, "tags": None, "items": [], "attrs": None, "labels": None},
        {"id": 3, "device": {"platform": None, "v": None, "loc": None}, "tags": [],
         "items": None, "attrs": [("y", None), ("z", 3)], "labels": None},
        *new_rows]
    # DuckDB reads the same rows through to_reader(), nested fields under current names.
    rel = duckdb.from_arrow(table.scan().to_reader())
    assert sorted(rel.project("id, device.platform, items[1].qty, attrs['z']").fetchall(),
                  key=lambda r: r[0]) == [(1, "ios", None, None), (2, None, None, None),
                                          (3, None, None, 3), (4, "android", 3, None)]
    assert by_id(table.scan(version=1).to_arrow()) == ROWS  # v1 under its own schema
    pointer = json.loads(open_store(table.uri).get(POINTER_KEY).data)
    assert pointer["format_version"] == 4


def test_a_nested_field_dropped_then_added_never_shows_old_values(table) -> None:  # type: ignore[no-untyped-def]
    table.update_schema().drop_column("device.os").commit()
    assert table.scan().to_arrow().schema.field("device").type.names == ["v"]
    table.update_schema().add_column("device.os", "string").commit()
    got = by_id(table.scan().to_arrow())
    assert [r["device"] for r in got] == [{"v": 17, "os": None}, None,
                                          {"v": None, "os": None}]
    assert table.scan(where="device.os IS NOT NULL").count() == 0
    assert [r["device"] for r in by_id(table.scan(version=1).to_arrow())] == [
        {"os": "ios", "v": 17}, None, {"os": None, "v": None}]


def test_a_top_level_nested_column_added_to_a_flat_table(tmp_path) -> None:  # type: ignore[no-untyped-def]
    t = caslake.create_table(str(tmp_path / "flat"), pa.schema([("id", pa.int64())]))
    t.append(pa.table({"id": [1]}))
    t.update_schema().add_column("tags", pa.list_(pa.string())).add_column(
        "dev", "struct<os:string,v:int32>").commit()
    t.append(pa.Table.from_pylist([{"id": 2, "tags": ["a", None], "dev": {"os": "x", "v": 1}}],
                                  schema=t.schema))
    assert by_id(t.scan().to_arrow()) == [{"id": 1, "tags": None, "dev": None},
                                          {"id": 2, "tags": ["a", None],
                                           "dev": {"os": "x", "v": 1}}]
    assert json.loads(open_store(t.uri).get(POINTER_KEY).data)["format_version"] == 4


def test_merge_mode_adds_new_struct_fields_at_any_depth(table) -> None:  # type: ignore[no-untyped-def]
    wider = pa.schema([("id", pa.int64()),
                       ("device", pa.struct([("os", pa.string()), ("v", pa.int32()),
                                             ("model", pa.string())])),
                       ("tags", pa.list_(pa.int32())),
                       ("items", pa.list_(pa.struct([("price", pa.float32()), ("sku", pa.string()),
                                                     ("qty", pa.int16())]))),
                       ("attrs", pa.map_(pa.string(), pa.int32()))])
    row = [{"id": 9, "device": {"os": "ios", "v": 1, "model": "m1"}, "tags": [],
            "items": [{"price": 1.0, "sku": "s", "qty": 2}], "attrs": []}]
    v = table.refresh().version
    with pytest.raises(SchemaMismatch) as e:
        table.append(pa.Table.from_pylist(row, schema=wider))
    assert "'device.model'" in str(e.value) and "'items.element.qty'" in str(e.value)
    assert "merge" in str(e.value) and table.refresh().version == v
    res = table.append(pa.Table.from_pylist(row, schema=wider), schema_mode="merge")
    assert res.version == v + 1  # data and schema in one commit
    assert table.table_schema.find_path("device.model").id > 11
    got = {r["id"]: r for r in table.scan().to_arrow().to_pylist()}
    assert got[9]["device"] == {"os": "ios", "v": 1, "model": "m1"}
    assert got[9]["items"] == [{"price": 1.0, "sku": "s", "qty": 2}]
    assert got[1]["device"] == {"os": "ios", "v": 17, "model": None}


def test_merge_after_a_nested_rename_matches_the_old_name_by_field_id(table) -> None:  # type: ignore[no-untyped-def]
    before = table.scan(version=1).to_arrow()  # carries the field ids of version 1
    table.update_schema().rename_column("device.os", "platform").commit()
    table.append(before, schema_mode="merge")  # nothing to add: os is platform by id
    assert table.table_schema.find_path("device.os") is None
    got = sorted(r["device"]["platform"] for r in table.scan().to_arrow().to_pylist()
                 if r["device"] and r["device"]["platform"])
    assert got == ["ios", "ios"]


def test_an_append_rebases_over_a_concurrent_nested_add_and_conflicts_with_a_rename(  # type: ignore[no-untyped-def]
        table) -> None:
    writer = caslake.open_table(table.uri)  # plans on version 1
    other = caslake.open_table(table.uri)
    other.update_schema().add_column("device.model", "string").add_column(
        "items.element.qty", "int32").commit()
    row = [{"id": 10, "device": {"os": "x", "v": 1}, "tags": [5], "items": [
        {"price": 0.5, "sku": "z"}], "attrs": []}]
    res = writer.append(pa.Table.from_pylist(row, schema=SCHEMA))  # rebases: only adds
    assert res.version == 3 and not res.noop
    got = caslake.open_table(table.uri).scan(where="id = 10").to_arrow().to_pylist()
    assert got[0]["device"] == {"os": "x", "v": 1, "model": None}
    assert got[0]["items"] == [{"price": 0.5, "sku": "z", "qty": None}]
    stale = caslake.open_table(table.uri)
    other.refresh().update_schema().rename_column("device.os", "platform").commit()
    with pytest.raises(ConcurrentModification):
        stale.append(pa.Table.from_pylist(row, schema=stale.schema))
    nullable = caslake.open_table(table.uri)
    other.refresh().update_schema().widen_column("tags.element", "int64").commit()
    with pytest.raises(ConcurrentModification):
        nullable.append(pa.Table.from_pylist(
            [{**row[0], "device": {"platform": "y", "v": 2, "model": None}}],
            schema=nullable.schema))


def test_a_merge_append_racing_an_add_column_never_loses_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    t = caslake.create_table(str(tmp_path / "race"), pa.schema([("id", pa.int64())]))
    t.append(pa.table({"id": [1]}))
    writer = caslake.open_table(t.uri)  # plans on version 1
    other = caslake.open_table(t.uri)
    other.update_schema().add_column("extra", "int64").commit()
    other.append(pa.table({"id": [2], "extra": [42]}))
    with pytest.raises(ConcurrentModification):
        writer.append(pa.table({"id": [3], "dev": [{"os": "x"}]}), schema_mode="merge")
    got = caslake.open_table(t.uri)
    assert got.schema.names == ["id", "extra"]
    assert sorted(got.to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "extra": None}, {"id": 2, "extra": 42}]


def test_make_a_nested_field_nullable_then_append_nulls(tmp_path) -> None:  # type: ignore[no-untyped-def]
    schema = pa.schema([("id", pa.int64()), ("s", pa.struct([pa.field("x", pa.int8(), False)])),
                        ("l", pa.list_(pa.field("element", pa.int32(), False)))])
    t = caslake.create_table(str(tmp_path / "nn"), schema)
    t.append(pa.Table.from_pylist([{"id": 1, "s": {"x": 1}, "l": [1]}], schema=schema))
    bad = pa.table({"id": [2], "s": pa.array([{"x": None}], pa.struct([("x", pa.int8())])),
                    "l": pa.array([[None]], pa.list_(pa.int32()))})
    with pytest.raises(SchemaMismatch):
        t.append(bad)
    t.update_schema().make_nullable("s.x").make_nullable("l.element").commit()
    t.append(bad)
    got = t.scan().to_arrow()
    assert got.schema.field("s").type.field("x").nullable
    assert got.schema.field("l").type.value_field.nullable
    assert by_id(got) == [{"id": 1, "s": {"x": 1}, "l": [1]},
                          {"id": 2, "s": {"x": None}, "l": [None]}]


def test_merge_adds_a_nested_column_to_a_flat_table_as_format_4(tmp_path) -> None:  # type: ignore[no-untyped-def]
    t = caslake.create_table(str(tmp_path / "m"), pa.schema([("id", pa.int64())]))
    t.append(pa.table({"id": [1]}))
    t.append(pa.table({"id": [2], "dev": [{"os": "x", "tags": ["a"]}]}), schema_mode="merge")
    assert t.table_schema.find_path("dev.tags.element").id == 5
    assert by_id(t.scan().to_arrow()) == [{"id": 1, "dev": None},
                                          {"id": 2, "dev": {"os": "x", "tags": ["a"]}}]
    assert json.loads(open_store(t.uri).get(POINTER_KEY).data)["format_version"] == 4


@pytest.mark.parametrize("build,path", [
    (lambda u: u.add_column("tags.x", "int32"), "tags.x"),
    (lambda u: u.drop_column("tags.element"), "tags.element"),
    (lambda u: u.widen_column("tags.element", "int16"), "tags.element"),
    (lambda u: u.rename_column("attrs.key", "k"), "attrs.key"),
    (lambda u: u.add_column("device.zz.y", "int32"), "device.zz.y"),
    (lambda u: u.add_column("device.x", pa.struct([("d", pa.duration("s"))])), "device.x.d"),
    (lambda u: u.add_column("device.x", "struct<a:int65>"), "device.x"),
])
def test_bad_nested_changes_are_typed_errors_and_leave_nothing(table, build, path) -> None:  # type: ignore[no-untyped-def]
    before = objects(table.uri)
    with pytest.raises(InvalidSchemaChange) as e:
        build(table.update_schema()).commit()
    assert isinstance(e.value, UserInputError) and e.value.column == path
    assert path in str(e.value)
    assert objects(table.uri) == before


# --- Hypothesis: random nested schemas and changes against a model -----------------------

NAMES = ["a", "b", "c", "d"]
COLUMNS = ["c0", "c1", "c2", "c3"]
LEAVES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.float32(), pa.float64(),
          pa.string()]
WIDER = {pa.int8(): [pa.int16(), pa.int32(), pa.int64()], pa.int16(): [pa.int32(), pa.int64()],
         pa.int32(): [pa.int64()], pa.float32(): [pa.float64()]}


def types(depth: int = 2) -> st.SearchStrategy[pa.DataType]:
    leaf = st.sampled_from(LEAVES)
    if depth == 0:
        return leaf
    inner = types(depth - 1)
    struct = st.lists(st.tuples(st.sampled_from(NAMES), inner), min_size=1, max_size=3,
                      unique_by=lambda f: f[0]).map(pa.struct)
    return st.one_of(leaf, struct, inner.map(pa.list_),
                     st.tuples(st.sampled_from([pa.string(), pa.int32()]), inner).map(
                         lambda kv: pa.map_(*kv)))


def kids(t: pa.DataType) -> list[tuple[str, pa.DataType]]:
    if pa.types.is_struct(t):
        return [(f.name, f.type) for f in t]
    if pa.types.is_list(t):
        return [("element", t.value_type)]
    if pa.types.is_map(t):
        return [("key", t.key_type), ("value", t.item_type)]
    return []


def rebuilt(t: pa.DataType, children: list[tuple[str, pa.DataType]]) -> pa.DataType:
    if pa.types.is_struct(t):
        return pa.struct(children)
    if pa.types.is_list(t):
        return pa.list_(children[0][1])
    return pa.map_(children[0][1], children[1][1])


def value(t: pa.DataType, rnd: random.Random, top: bool = False) -> Any:
    """A random value of ``t`` with NULLs at every level (never a map key)."""
    if not top and rnd.random() < 0.15:
        return None
    if pa.types.is_integer(t):
        return rnd.randint(-100, 100)
    if pa.types.is_floating(t):
        return rnd.randint(-40, 40) / 4  # exact in float32
    if pa.types.is_string(t):
        return f"s{rnd.randint(0, 999)}"
    if pa.types.is_struct(t):
        return {f.name: value(f.type, rnd) for f in t}
    if pa.types.is_list(t):
        return [value(t.value_type, rnd) for _ in range(rnd.randint(0, 3))]
    keys = {value(t.key_type, rnd, top=True) for _ in range(rnd.randint(0, 3))}
    return [(k, value(t.item_type, rnd)) for k in sorted(keys, key=str)]


def at(v: Any, t: pa.DataType, parts: list[str], fn: Any) -> Any:
    """``v`` (of type ``t``) with ``fn`` applied to every struct value at ``parts``."""
    if v is None:
        return None
    if not parts:
        return fn(v)
    head, rest = parts[0], parts[1:]
    if pa.types.is_struct(t):
        return {n: at(x, t.field(n).type, rest, fn) if n == head else x for n, x in v.items()}
    if pa.types.is_list(t):
        return [at(x, t.value_type, rest, fn) for x in v]
    return [(k, at(x, t.item_type, rest, fn)) for k, x in v]


def type_at(t: pa.DataType, parts: list[str], fn: Any) -> pa.DataType:
    if not parts:
        return fn(t)
    return rebuilt(t, [(n, type_at(c, parts[1:], fn) if n == parts[0] else c)
                       for n, c in kids(t)])


def nodes(t: pa.DataType, parts: list[str]) -> list[tuple[list[str], pa.DataType, str | None]]:
    """Every node below the root: (path, type, the kind of its parent)."""
    out = []
    for name, c in kids(t):
        kind = "struct" if pa.types.is_struct(t) else "list" if pa.types.is_list(t) else "map"
        out.append(([*parts, name], c, kind))
        out.extend(nodes(c, [*parts, name]))
    return out


def shape(t: pa.DataType) -> Any:
    """A type's structure and leaf types (list/map child names and field ids aside)."""
    if pa.types.is_struct(t):
        return ("struct", [(f.name, shape(f.type)) for f in t])
    if pa.types.is_list(t):
        return ("list", shape(t.value_type))
    if pa.types.is_map(t):
        return ("map", shape(t.key_type), shape(t.item_type))
    return str(t)


@st.composite
def change(draw: Any, root: pa.DataType) -> tuple[str, list[str], Any]:
    """(kind, path, argument) of one change valid for ``root`` (the model's row type)."""
    every = nodes(root, [])
    structs = [([], root)] + [(p, t) for p, t, _ in every if pa.types.is_struct(t)]
    options: list[tuple[str, list[str], Any]] = []
    for p, t in structs:
        free = [n for n in (COLUMNS if not p else NAMES) if n not in t.names]
        if free:
            options.append(("add", [*p, draw(st.sampled_from(free))], draw(types(1))))
    for p, _, kind in every:
        if kind != "struct" or p == ["k"]:
            continue
        siblings = [n for n, _ in kids(_type(root, p[:-1]))]
        free = [n for n in (COLUMNS if len(p) == 1 else NAMES) if n not in siblings]
        if free:
            options.append(("rename", p, draw(st.sampled_from(free))))
        if len(siblings) > 1:
            options.append(("drop", p, None))
    for p, t, kind in every:
        if t in WIDER and not (kind == "map" and p[-1] == "key"):
            options.append(("widen", p, draw(st.sampled_from(WIDER[t]))))
    return draw(st.sampled_from(options))


def _type(root: pa.DataType, parts: list[str]) -> pa.DataType:
    for p in parts:
        root = dict(kids(root))[p]
    return root


def apply(root: pa.DataType, rows: list[dict[str, Any]], ch: tuple[str, list[str], Any]
          ) -> tuple[pa.DataType, list[dict[str, Any]]]:
    kind, path, arg = ch
    parent, name = path[:-1], path[-1]
    if kind == "add":
        return (type_at(root, parent, lambda t: pa.struct([*kids(t), (name, arg)])),
                [at(r, root, parent, lambda d: {**d, name: None}) for r in rows])
    if kind == "rename":
        return (type_at(root, parent, lambda t: pa.struct(
                    [(arg if n == name else n, c) for n, c in kids(t)])),
                [at(r, root, parent, lambda d: {(arg if n == name else n): x
                                                 for n, x in d.items()}) for r in rows])
    if kind == "drop":
        return (type_at(root, parent, lambda t: pa.struct([(n, c) for n, c in kids(t)
                                                           if n != name])),
                [at(r, root, parent, lambda d: {n: x for n, x in d.items() if n != name})
                 for r in rows])
    return (type_at(root, parent, lambda t: rebuilt(t, [(n, arg if n == name else c)
                                                        for n, c in kids(t)])), rows)


def schema_change(u: Any, ch: tuple[str, list[str], Any]) -> Any:
    kind, path, arg = ch
    dotted = ".".join(path)
    if kind == "add":
        return u.add_column(dotted, arg)
    if kind == "rename":
        return u.rename_column(dotted, arg)
    if kind == "drop":
        return u.drop_column(dotted)
    return u.widen_column(dotted, arg)


@settings(max_examples=20, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large])
@given(data=st.data())
def test_random_nested_evolution_with_appends_and_deletes_matches_the_model(  # type: ignore[no-untyped-def]
        tmp_path_factory, data) -> None:
    """Random nested columns; random add / rename / drop / widen inside them (and of
    whole columns), each followed by an append and maybe a delete: every version reads
    exactly as the model says, structure and values."""
    cols = data.draw(st.lists(types(2), min_size=1, max_size=3), label="columns")
    root = pa.struct([("k", pa.int64()), *[(f"c{i}", t) for i, t in enumerate(cols)]])
    rnd = random.Random(data.draw(st.integers(0, 2**32), label="seed"))
    t = caslake.create_table(str(tmp_path_factory.mktemp("n") / "t"), pa.schema(list(root)))
    rows: list[dict[str, Any]] = []
    versions = [(root, [])]
    key = 0

    def append() -> None:
        nonlocal key
        new = []
        for _ in range(rnd.randint(1, 4)):
            r = value(root, rnd, top=True)
            r["k"] = key
            key += 1
            new.append(r)
        t.append(pa.Table.from_pylist(new, schema=pa.schema(list(root))))
        rows.extend(new)
        versions.append((root, [dict(r) for r in rows]))

    append()
    for _ in range(data.draw(st.integers(1, 4), label="steps")):
        ch = data.draw(change(root), label="change")
        schema_change(t.update_schema(), ch).commit()
        root, rows = apply(root, rows, ch)
        versions.append((root, [dict(r) for r in rows]))
        append()
        if data.draw(st.booleans(), label="delete"):
            k = data.draw(st.sampled_from([r["k"] for r in rows]), label="k")
            upto = data.draw(st.booleans(), label="upto")
            t.delete(f"k <= {k}" if upto else f"k = {k}")
            rows = [r for r in rows if (r["k"] > k if upto else r["k"] != k)]
            versions.append((root, [dict(r) for r in rows]))
    fresh = caslake.open_table(t.uri)
    assert fresh.version == len(versions) - 1
    for v, (want_type, want_rows) in enumerate(versions):
        got = fresh.scan(version=v).to_arrow()
        assert shape(pa.struct(list(got.schema))) == shape(want_type), v
        assert sorted(got.to_pylist(), key=lambda r: r["k"]) == sorted(
            want_rows, key=lambda r: r["k"]), v
