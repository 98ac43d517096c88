"""Predicates on nested data (issue 29), evaluated by caslake.expr and compared
with DuckDB on the same Arrow table: struct fields at any depth, list and map
functions, IS [NOT] NULL at every level, with NULLs at every level of the data.
Also: the expression API builds the same trees as SQL, bad paths give typed
errors naming the full path, and statistics of struct leaves prune soundly
(checked against DuckDB per row group of a Parquet file)."""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from caslake.errors import AmbiguousColumn, InvalidPredicate, UnknownColumn, UnsupportedExpression
from caslake.expr import (
    ColumnStats,
    UnknownField,
    col,
    compile_where,
    filter_table,
    might_match,
    parse_sql,
    pruning_paths,
    to_arrow,
)

INFO = pa.struct([pa.field("v", pa.float64()), pa.field("ts", pa.timestamp("us")),
                  pa.field("deep", pa.struct([pa.field("n", pa.int32())]))])
DEVICE = pa.struct([pa.field("os", pa.string()), pa.field("ver", pa.int32()),
                    pa.field("info", INFO)])
ITEM = pa.struct([pa.field("price", pa.decimal128(10, 2)), pa.field("qty", pa.int32())])
SCHEMA = pa.schema([
    pa.field("id", pa.int64()),
    pa.field("device", DEVICE),
    pa.field("tags", pa.list_(pa.field("element", pa.string()))),
    pa.field("nums", pa.list_(pa.field("element", pa.int64()))),
    pa.field("attrs", pa.map_(pa.string(), pa.int64())),
    pa.field("items", pa.list_(pa.field("element", ITEM))),
])


def _maybe(rng: random.Random, make: Any, rate: float = 0.15) -> Any:
    return None if rng.random() < rate else make()


def _device(rng: random.Random) -> dict[str, Any]:
    return {
        "os": _maybe(rng, lambda: rng.choice(["ios", "android", "IOS", "web"])),
        "ver": _maybe(rng, lambda: rng.randint(0, 9)),
        "info": _maybe(rng, lambda: {
            "v": _maybe(rng, lambda: rng.randint(-20, 20) / 4),
            "ts": _maybe(rng, lambda: pa.scalar(rng.randint(0, 10**6) * 10**9,
                                                pa.timestamp("us")).as_py()),
            "deep": _maybe(rng, lambda: {"n": _maybe(rng, lambda: rng.randint(0, 5))}),
        }),
    }


def make_rows(n: int, seed: int, start: int = 0) -> pa.Table:
    """Random rows with NULLs at every level: whole structs, struct fields, lists,
    list elements, maps, map values; and empty lists and maps."""
    rng = random.Random(seed)
    rows: dict[str, list[Any]] = {f.name: [] for f in SCHEMA}
    for i in range(start, start + n):
        rows["id"].append(i)
        rows["device"].append(_maybe(rng, lambda: _device(rng)))
        rows["tags"].append(_maybe(rng, lambda: [
            _maybe(rng, lambda: rng.choice("abcd")) for _ in range(rng.randint(0, 4))]))
        rows["nums"].append(_maybe(rng, lambda: [
            _maybe(rng, lambda: rng.randint(0, 6)) for _ in range(rng.randint(0, 3))]))
        rows["attrs"].append(_maybe(rng, lambda: [
            (k, _maybe(rng, lambda: rng.randint(0, 3)))
            for k in rng.sample(["k", "j", "z"], rng.randint(0, 3))]))
        rows["items"].append(_maybe(rng, lambda: [
            _maybe(rng, lambda: {"price": _maybe(rng, lambda: Decimal(rng.randint(0, 999)) / 100),
                                 "qty": _maybe(rng, lambda: rng.randint(0, 5))})
            for _ in range(rng.randint(0, 3))]))
    return pa.Table.from_pydict(rows, schema=SCHEMA)


#: (caslake where, the same predicate in DuckDB's SQL)
CASES: list[tuple[str, str]] = [
    ("device.os = 'ios'", "device.os = 'ios'"),
    ("device['os'] = 'ios'", "device.os = 'ios'"),
    ("Device.OS = 'ios'", "device.os = 'ios'"),
    ("device.os <> 'ios'", "device.os <> 'ios'"),
    ("NOT device.os = 'ios'", "NOT device.os = 'ios'"),
    ("device.os IN ('ios', 'web')", "device.os IN ('ios', 'web')"),
    ("device.os NOT IN ('ios', 'web')", "device.os NOT IN ('ios', 'web')"),
    ("device.os LIKE 'i%'", "device.os LIKE 'i%'"),
    ("device.os ILIKE 'i%'", "device.os ILIKE 'i%'"),
    ("device.ver BETWEEN 2 AND 5", "device.ver BETWEEN 2 AND 5"),
    ("device.ver > 4.5", "device.ver > 4.5"),
    ("device.ver = 4.5", "device.ver = 4.5"),
    ("device.info.v > 1.25e0", "device.info.v > 1.25"),
    ("NOT device.info.v < 0", "NOT device.info.v < 0"),
    ("device.info.ts < TIMESTAMP '1970-01-06 00:00:00'",
     "device.info.ts < TIMESTAMP '1970-01-06 00:00:00'"),
    ("device.info.deep.n >= 3", "device.info.deep.n >= 3"),
    ("device['info']['deep']['n'] = 2", "device.info.deep.n = 2"),
    ("device IS NULL", "device IS NULL"),
    ("device IS NOT NULL", "device IS NOT NULL"),
    ("device.info IS NULL", "device.info IS NULL"),
    ("device.info.deep IS NOT NULL", "device.info.deep IS NOT NULL"),
    ("device.info.deep.n IS NULL", "device.info.deep.n IS NULL"),
    ("device.os IS NULL AND device IS NOT NULL", "device.os IS NULL AND device IS NOT NULL"),
    ("lower(device.os) = 'ios'", "lower(device.os) = 'ios'"),
    ("coalesce(device.ver, device.info.deep.n, -1) > 2",
     "coalesce(device.ver, device.info.deep.n, -1) > 2"),
    ("device.ver + device.info.deep.n > 6", "device.ver + device.info.deep.n > 6"),
    ("device.ver = device.info.deep.n", "device.ver = device.info.deep.n"),
    ("array_contains(tags, 'a')", "list_contains(tags, 'a')"),
    ("NOT array_contains(tags, 'a')", "NOT list_contains(tags, 'a')"),
    ("list_contains(nums, 3)", "list_contains(nums, 3)"),
    ("array_contains(nums, 3) OR device.os = 'web'", "list_contains(nums, 3) OR device.os = 'web'"),
    ("cardinality(tags) > 1", "len(tags) > 1"),
    ("size(tags) = 0", "len(tags) = 0"),
    ("array_size(nums) <= 1", "len(nums) <= 1"),
    ("len(tags) = 2", "len(tags) = 2"),
    ("cardinality(tags) IS NULL", "len(tags) IS NULL"),
    ("tags IS NULL", "tags IS NULL"),
    ("NOT cardinality(nums) = 0", "NOT len(nums) = 0"),
    ("element_at(tags, 1) = 'a'", "tags[1] = 'a'"),
    ("element_at(tags, -1) = 'b'", "tags[-1] = 'b'"),
    ("element_at(tags, 3) IS NULL", "tags[3] IS NULL"),
    ("element_at(tags, -2) IS NOT NULL", "tags[-2] IS NOT NULL"),
    ("element_at(nums, 2) > 3", "nums[2] > 3"),
    ("element_at(attrs, 'k') = 1", "map_extract_value(attrs, 'k') = 1"),
    ("attrs['k'] IS NULL", "map_extract_value(attrs, 'k') IS NULL"),
    ("attrs['j'] >= 2 OR attrs['z'] IS NOT NULL",
     "map_extract_value(attrs, 'j') >= 2 OR map_extract_value(attrs, 'z') IS NOT NULL"),
    ("cardinality(attrs) >= 2", "cardinality(attrs) >= 2"),
    ("attrs IS NULL", "attrs IS NULL"),
    ("element_at(items, 1).qty > 2", "items[1].qty > 2"),
    ("element_at(items, -1)['price'] < 5.5", "items[-1].price < 5.5"),
    ("element_at(items, 2) IS NULL", "items[2] IS NULL"),
]


def duckdb_ids(table: pa.Table, where: str) -> list[int]:
    con = duckdb.connect()
    # DuckDB 1.4 misreads structs nested two deep in a sliced Arrow array (rows of
    # device.info.deep come out shifted), so it is given fresh buffers.
    con.register("t", table.combine_chunks())
    return sorted(r[0] for r in con.execute(f"SELECT id FROM t WHERE {where}").fetchall())


def caslake_ids(table: pa.Table, where: Any) -> list[int]:
    bound = compile_where(where, table.schema)
    assert bound is not None
    return sorted(filter_table(table, bound).column("id").to_pylist())


@pytest.fixture(scope="module")
def rows() -> pa.Table:
    # Several chunks (one sliced): evaluation must respect chunk and slice offsets.
    parts = [make_rows(300, seed, start=seed * 1000) for seed in range(3)]
    parts[1] = parts[1].slice(7, 250)
    return pa.concat_tables(parts)


@pytest.mark.parametrize(("where", "reference"), CASES)
def test_nested_predicates_match_duckdb(rows: pa.Table, where: str, reference: str) -> None:
    expected = duckdb_ids(rows, reference)
    got = caslake_ids(rows, where)
    assert got == expected
    assert len(expected) < rows.num_rows  # the case discriminates
    assert expected or where == "device.ver = 4.5"  # (no integer equals 4.5)


@pytest.mark.parametrize("seed", range(12))
def test_random_data_every_case(seed: int) -> None:
    table = make_rows(60, seed + 100)
    for where, reference in CASES:
        assert caslake_ids(table, where) == duckdb_ids(table, reference), where


def test_rendered_predicates_parse_back_to_the_same_tree() -> None:
    for where, _ in CASES:
        tree = parse_sql(where)
        assert parse_sql(str(tree)) == tree, where
        bound = compile_where(where, SCHEMA)
        assert bound is not None
        if "UNLESS_NULL" not in str(bound):  # a guarded constant has no SQL spelling
            again = compile_where(str(bound), SCHEMA)
            assert again is not None and again.expr == bound.expr, where


API_CASES: list[tuple[Any, str]] = [
    (col("device")["os"] == "ios", "device.os = 'ios'"),
    (col("device").field("os") == "ios", "device.os = 'ios'"),
    (col("device.os") == "ios", "device.os = 'ios'"),
    (col("device.info.deep.n") >= 3, "device.info.deep.n >= 3"),
    (col("device")["info"]["v"].is_null(), "device.info.v IS NULL"),
    (col("tags").contains("a"), "array_contains(tags, 'a')"),
    (~col("tags").contains("a"), "NOT array_contains(tags, 'a')"),
    (col("tags").cardinality() > 1, "cardinality(tags) > 1"),
    (col("attrs")["k"] == 1, "attrs['k'] = 1"),
    (col("attrs").element_at("k").is_not_null(), "element_at(attrs, 'k') IS NOT NULL"),
    (col("tags").element_at(-1) == "b", "element_at(tags, -1) = 'b'"),
    (col("items").element_at(1).field("qty") > 2, "element_at(items, 1).qty > 2"),
]


@pytest.mark.parametrize(("expr", "sql"), API_CASES)
def test_expression_api_matches_sql(rows: pa.Table, expr: Any, sql: str) -> None:
    api, text = compile_where(expr, rows.schema), compile_where(sql, rows.schema)
    assert api is not None and text is not None
    assert api.expr == text.expr
    assert caslake_ids(rows, expr) == caslake_ids(rows, sql)


def test_a_dotted_column_name_wins_over_a_struct_path() -> None:
    table = pa.table({"id": [1, 2], "device.os": ["x", "y"],
                      "device": pa.array([{"os": "y"}, {"os": "x"}])})
    assert caslake_ids(table, col("device.os") == "x") == [1]  # the column named so
    assert caslake_ids(table, "\"device.os\" = 'x'") == [1]
    assert caslake_ids(table, "device.os = 'x'") == [2]  # SQL: the struct's field
    assert caslake_ids(table, col("device")["os"] == "x") == [2]


@pytest.mark.parametrize(("where", "path", "parent", "available"), [
    ("device.osx = 'ios'", "device.osx", "device", ["os", "ver", "info"]),
    ("device['osx'] = 'ios'", "device.osx", "device", ["os", "ver", "info"]),
    ("device.info.deep.m IS NULL", "device.info.deep.m", "device.info.deep", ["n"]),
    ("element_at(items, 1).cost > 1", "(element_at(items, 1)).cost", "element_at(items, 1)",
     ["price", "qty"]),
])
def test_unknown_field_names_the_full_path(where: str, path: str, parent: str,
                                           available: list[str]) -> None:
    with pytest.raises(UnknownField) as info:
        compile_where(where, SCHEMA)
    assert isinstance(info.value, UnknownColumn)
    assert info.value.column == path
    assert info.value.parent == parent
    assert info.value.available == available
    assert repr(path) in str(info.value) and ", ".join(available) in str(info.value)


def test_unknown_field_through_the_api() -> None:
    with pytest.raises(UnknownField, match=r"'device\.info\.x'"):
        compile_where(col("device.info.x") == 1, SCHEMA)
    with pytest.raises(UnknownField, match=r"'device\.nope'"):
        compile_where(col("device")["nope"] == 1, SCHEMA)
    with pytest.raises(UnknownColumn, match=r"'nodevice\.os'"):
        compile_where(col("nodevice.os") == 1, SCHEMA)
    with pytest.raises(UnknownColumn, match="'t'"):  # a table-qualified name
        compile_where("t.id = 1", SCHEMA)


def test_ambiguous_field_names_the_path() -> None:
    schema = pa.schema([pa.field("s", pa.struct([pa.field("Ab", pa.int64()),
                                                  pa.field("aB", pa.int64())]))])
    with pytest.raises(AmbiguousColumn, match=r"'s\.ab'.*'s\.Ab', 's\.aB'"):
        compile_where("s.ab = 1", schema)
    bound = compile_where("s.Ab = 1 AND s.aB = 2", schema)  # exact names resolve
    assert bound is not None and str(bound) == "s.Ab = 1 AND s.aB = 2"


@pytest.mark.parametrize(("where", "fragment"), [
    ("tags[1] = 'a'", "use element_at(tags, position)"),
    ("tags.x = 1", "not a struct"),
    ("attrs.k = 1", "attrs['k']"),
    ("element_at(tags, 0) = 'a'", "non-zero integer"),
    ("element_at(tags, 'a') = 'a'", "non-zero integer"),
    ("array_contains(tags, 1)", "element of list tags"),
    ("array_contains(nums, 1.5)", "no value of type int64"),
    ("array_contains(nums, NULL)", "NULL"),
    ("array_contains(device, 'a')", "takes a list"),
    ("element_at(attrs, 1) = 1", "key of map attrs"),
    ("element_at(device, 'os') = 1", "takes a list or a map"),
    ("cardinality(device) = 1", "takes a list or a map"),
    ("cardinality(id) = 1", "takes a list or a map"),
    ("device['os'] = 1", "cannot compare field 'device.os'"),
    ("device[1] = 1", "named by a string"),
    ("id['x'] = 1", "not a struct or map"),
    ("device = 'x'", "supports only IS NULL"),
    ("tags = 'x'", "supports only IS NULL"),
    ("array_contains(tags, device.os)", "literal"),
    ("element_at(tags, id) = 'a'", "literal"),
    ("tags[1:2] = 'a'", "one literal key"),
    ("tags[id] = 'a'", "literal"),
])
def test_bad_nested_predicates_give_typed_errors(where: str, fragment: str) -> None:
    with pytest.raises(InvalidPredicate) as info:
        compile_where(where, SCHEMA)
    assert fragment in str(info.value)


def test_list_functions_have_no_arrow_expression() -> None:
    bound = compile_where("array_contains(tags, 'a')", SCHEMA)
    assert bound is not None
    with pytest.raises(UnsupportedExpression, match="filter_table"):
        to_arrow(bound)
    struct_only = compile_where("device.info.v > 1 AND lower(device.os) = 'ios'", SCHEMA)
    assert struct_only is not None
    table = make_rows(200, 7)
    assert sorted(table.filter(to_arrow(struct_only)).column("id").to_pylist()) == \
        duckdb_ids(table, "device.info.v > 1 AND lower(device.os) = 'ios'")


# --- pruning -------------------------------------------------------------------


def _footer_stats(md: pq.FileMetaData, rg: int) -> dict[Any, ColumnStats]:
    """Statistics of every leaf column of row group ``rg``, keyed as might_match
    reads them (a column name or the tuple path of a struct leaf)."""
    out: dict[Any, ColumnStats] = {}
    group = md.row_group(rg)
    for i in range(group.num_columns):
        chunk = group.column(i)
        parts = tuple(chunk.path_in_schema.split("."))
        stats = chunk.statistics
        if stats is None or any(p in ("list", "element", "key_value", "key", "value")
                                for p in parts[1:]):
            continue
        lo, hi = (stats.min, stats.max) if stats.has_min_max else (None, None)
        out[parts[0] if len(parts) == 1 else parts] = ColumnStats(
            lo, hi, stats.null_count if stats.has_null_count else None)
    return out


PRUNE_CASES = [
    ("device.os = 'ios'", "device.os = 'ios'"),
    ("device.os IS NULL", "device.os IS NULL"),
    ("device.os IS NOT NULL", "device.os IS NOT NULL"),
    ("device.info.v > 4", "device.info.v > 4"),
    ("NOT device.info.v <= 4", "NOT device.info.v <= 4"),
    ("device.info.deep.n = 5", "device.info.deep.n = 5"),
    ("device.info.deep.n IS NULL", "device.info.deep.n IS NULL"),
    ("device.ver IN (0, 9)", "device.ver IN (0, 9)"),
    ("device.ver NOT IN (0, 9)", "device.ver NOT IN (0, 9)"),
    ("device.ver != 3", "device.ver != 3"),
    ("device.ver = 4.5", "device.ver = 4.5"),
    ("device.info.ts >= TIMESTAMP '1970-01-12 00:00:00'",
     "device.info.ts >= TIMESTAMP '1970-01-12 00:00:00'"),
    ("device.os LIKE 'and%'", "device.os LIKE 'and%'"),
    ("device.os = 'web' OR id < 10", "device.os = 'web' OR id < 10"),
    ("element_at(attrs, 'k') = 1 AND device.ver < 2",
     "map_extract_value(attrs, 'k') = 1 AND device.ver < 2"),
]


def _sorted_file(tmp: Path, seed: int) -> tuple[pa.Table, pq.FileMetaData]:
    """Rows in runs by device.ver and device.os, in row groups of 40: leaf
    statistics differ between groups, so pruning has something to do."""
    rng = random.Random(seed)
    table = make_rows(400, seed)
    devices = table.column("device").to_pylist()
    ordered = sorted(range(table.num_rows), key=lambda i: (
        (devices[i] or {}).get("ver") or 0, (devices[i] or {}).get("os") or "", rng.random()))
    table = table.take(pa.array(ordered))
    path = tmp / f"rows{seed}.parquet"
    pq.write_table(table, path, row_group_size=40)
    return table, pq.read_metadata(path)


@pytest.mark.parametrize("seed", range(4))
def test_struct_leaf_statistics_prune_soundly(tmp_path: Path, seed: int) -> None:
    table, md = _sorted_file(tmp_path, seed)
    pruned = 0
    for where, reference in PRUNE_CASES:
        bound = compile_where(where, SCHEMA)
        assert bound is not None
        start = 0
        for rg in range(md.num_row_groups):
            n = md.row_group(rg).num_rows
            group = table.slice(start, n)
            start += n
            if not might_match(bound, _footer_stats(md, rg), n):
                pruned += 1
                assert duckdb_ids(group, reference) == [], (where, rg)
    assert pruned > 20  # the statistics of struct leaves are used


def test_pruning_paths_name_the_struct_leaves() -> None:
    bound = compile_where("device.os = 'a' AND (device.info.deep.n IS NULL OR id > 3) "
                          "AND element_at(attrs, 'k') = 1 AND lower(device.os) = 'x'", SCHEMA)
    assert bound is not None
    assert pruning_paths(bound) == {("device", "os"), ("device", "info", "deep", "n"), ("id",)}
    assert not might_match(bound, {("device", "os"): ColumnStats("b", "c", 0)}, 10)
    assert might_match(bound, {"device": ColumnStats("b", "c", 0)}, 10)  # not the leaf's key
    nulls_only = compile_where("device.info.deep.n IS NOT NULL", SCHEMA)
    assert nulls_only is not None
    assert not might_match(nulls_only, {("device", "info", "deep", "n"):
                                        ColumnStats(None, None, 10)}, 10)


def _typed_table() -> pa.Table:
    """Lists of dates, timestamps, decimals, bools, floats (NaN, -0.0), lists
    inside structs inside lists, and a map with integer keys."""
    utc = pa.timestamp("us", tz="UTC")
    inner = pa.struct([("a", pa.list_(pa.int32()))])
    return pa.table({
        "id": [1, 2, 3, 4, 5],
        "m": pa.array([[(1, "a"), (2, "b")], None, [(2, None)], [], [(-1, "z")]],
                      pa.map_(pa.int64(), pa.string())),
        "ds": pa.array([[dt.date(2020, 1, 1), None], None, [], [dt.date(2021, 5, 5)], [None]],
                       pa.list_(pa.date32())),
        "ts": pa.array([[dt.datetime(2020, 1, 1, 12)], None, [], [dt.datetime(2021, 5, 5)],
                        [None]], pa.list_(utc)),
        "dec": pa.array([[Decimal("1.50")], None, [Decimal("2.00"), None], [],
                         [Decimal("-1.00")]], pa.list_(pa.decimal128(5, 2))),
        "bs": pa.array([[True], None, [False, None], [], [None]], pa.list_(pa.bool_())),
        "fl": pa.array([[1.5, float("nan")], None, [0.0], [-0.0], [None]],
                       pa.list_(pa.float32())),
        "ls": pa.array([[{"a": [1, 2]}], None, [{"a": None}], [], [None]], pa.list_(inner)),
    })


TYPED_CASES = [
    ("m[1] = 'a'", "m[1] = 'a'"),  # an integer map key is not shifted as a list index
    ("m[-1] = 'z'", "m[-1] = 'z'"),
    ("m[2] IS NULL", "m[2] IS NULL"),
    ("element_at(m, 2) IS NOT NULL", "m[2] IS NOT NULL"),
    ("array_contains(ds, DATE '2021-05-05')", "list_contains(ds, DATE '2021-05-05')"),
    ("array_contains(ds, '2020-01-01')", "list_contains(ds, DATE '2020-01-01')"),
    ("element_at(ds, 1) < DATE '2021-01-01'", "ds[1] < DATE '2021-01-01'"),
    ("array_contains(ts, TIMESTAMP '2020-01-01 12:00:00')",
     "list_contains(ts, TIMESTAMPTZ '2020-01-01 12:00:00+00')"),
    ("array_contains(dec, 2)", "list_contains(dec, 2.00::DECIMAL(5,2))"),
    ("element_at(dec, -1) < 0", "dec[-1] < 0"),
    ("array_contains(bs, FALSE)", "list_contains(bs, FALSE)"),
    ("array_contains(fl, 0)", "list_contains(fl, 0::FLOAT)"),
    ("array_contains(fl, 1.5)", "list_contains(fl, 1.5::FLOAT)"),
    ("cardinality(element_at(ls, 1).a) = 2", "len(ls[1].a) = 2"),
    ("array_contains(element_at(ls, 1).a, 2)", "list_contains(ls[1].a, 2)"),
    ("element_at(element_at(ls, 1)['a'], -1) = 2", "ls[1].a[-1] = 2"),
]


@pytest.mark.parametrize(("where", "reference"), TYPED_CASES)
def test_typed_lists_and_integer_keyed_maps_match_duckdb(where: str, reference: str) -> None:
    table = _typed_table()
    expected = duckdb_ids(table, reference)
    assert expected  # the case selects something
    assert caslake_ids(table, where) == expected


def test_values_are_not_iterable_and_nan_is_no_element() -> None:
    with pytest.raises(InvalidPredicate, match="cannot be iterated"):
        list(col("tags"))
    with pytest.raises(InvalidPredicate, match="no value of type float"):
        compile_where(col("fl").contains(float("nan")), _typed_table().schema)
