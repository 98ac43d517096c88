"""Predicates on nested columns through a caslake table (issue 29): ``scan(where=)``,
``delete`` and ``purge`` with struct fields, list and map functions, compared
with DuckDB on the same rows; struct-leaf statistics prune row groups (and
never a row that matches)."""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
import pytest

import caslake
from caslake.core import WriteOptions
from caslake.errors import ReadValidationFailed
from caslake.expr import UnknownField, col
from tests.expr.test_nested_predicates import CASES, SCHEMA, duckdb_ids, make_rows

SMALL = WriteOptions(target_file_size=16 * 1024, row_group_size=64)


def _by_version(rows: pa.Table) -> pa.Table:
    """Rows in order of device.ver: row groups' leaf statistics differ."""
    devices = rows.column("device").to_pylist()
    order = sorted(range(rows.num_rows), key=lambda i: ((devices[i] or {}).get("ver") or 0, i))
    return rows.take(pa.array(order))


def _table(parts: int = 3, rows: int = 200) -> tuple[caslake.Table, pa.Table]:
    t = caslake.create_table(f"memory://{uuid.uuid4().hex}", SCHEMA, write_options=SMALL)
    written = []
    for seed in range(parts):
        batch = _by_version(make_rows(rows, seed + 40, start=seed * 1000))
        t.append(batch)
        written.append(batch)
    return t, pa.concat_tables(written)


@pytest.fixture(scope="module")
def table() -> tuple[caslake.Table, pa.Table]:
    return _table()


def _ids(t: caslake.Table, where: Any = None) -> list[int]:
    return sorted(t.scan(columns=["id"], where=where).to_arrow().column("id").to_pylist())


@pytest.mark.parametrize(("where", "reference"), CASES)
def test_scan_where_matches_duckdb(table: tuple[caslake.Table, pa.Table], where: str,
                                   reference: str) -> None:
    t, rows = table
    assert _ids(t, where) == duckdb_ids(rows, reference)


STRUCT_LEAF_CASES = [
    ("device.ver BETWEEN 2 AND 3", "device.ver BETWEEN 2 AND 3"),
    ("device.ver = 9", "device.ver = 9"),
    ("device.ver IS NULL", "device.ver IS NULL"),
    ("device['ver'] IN (0, 8)", "device.ver IN (0, 8)"),
    ("NOT device.ver <= 7 AND device.os IS NOT NULL",
     "NOT device.ver <= 7 AND device.os IS NOT NULL"),
]


@pytest.mark.parametrize(("where", "reference"), STRUCT_LEAF_CASES)
def test_struct_leaf_statistics_prune_row_groups(table: tuple[caslake.Table, pa.Table],
                                                 where: str, reference: str) -> None:
    t, rows = table
    scan = t.scan(where=where)
    plan = scan.plan()
    # Manifest statistics of the leaf (by its field id) skip files; footer
    # statistics of its leaf column skip row groups in the files read.
    assert plan.files_pruned > 0
    assert plan.row_groups_pruned > plan.row_groups_total // 3
    assert sorted(scan.to_arrow().column("id").to_pylist()) == duckdb_ids(rows, reference)


def test_projection_and_predicate_on_the_same_struct(table: tuple[caslake.Table, pa.Table]
                                                     ) -> None:
    t, rows = table
    got = t.scan(columns=["id", "tags"], where="device.info.deep.n = 2").to_arrow()
    want = duckdb_ids(rows, "device.info.deep.n = 2")
    assert sorted(got.column("id").to_pylist()) == want
    assert got.column_names == ["id", "tags"]


def test_unknown_field_in_a_scan_names_the_path(table: tuple[caslake.Table, pa.Table]) -> None:
    t, _ = table
    with pytest.raises(UnknownField) as info:
        t.scan(where="device.info.vv > 1")
    assert info.value.column == "device.info.vv"
    assert info.value.available == ["v", "ts", "deep"]
    with pytest.raises(UnknownField, match=r"'device\.osx'"):
        t.delete(col("device")["osx"] == "ios")


DELETES = [
    ("device.os = 'ios'", "device.os = 'ios'"),
    ("device.info.deep.n IS NULL AND device IS NOT NULL",
     "device.info.deep.n IS NULL AND device IS NOT NULL"),
    ("array_contains(tags, 'a')", "list_contains(tags, 'a')"),
    ("attrs['k'] = 2 OR element_at(nums, -1) = 0",
     "map_extract_value(attrs, 'k') = 2 OR nums[-1] = 0"),
    ("cardinality(items) > 2", "len(items) > 2"),
]


def _kept(rows: pa.Table, reference: str) -> list[int]:
    """The ids of the rows a delete of ``reference`` keeps (FALSE or NULL)."""
    return duckdb_ids(rows, f"({reference}) IS NOT TRUE")


@pytest.mark.parametrize(("where", "reference"), DELETES)
def test_delete_where_on_nested_columns(where: str, reference: str) -> None:
    t, rows = _table(parts=2, rows=150)
    result = t.delete(where)
    kept = _kept(rows, reference)
    assert result.rows_deleted == rows.num_rows - len(kept)
    assert _ids(t) == kept
    # The deleted rows no longer match; the rest still do as before.
    assert _ids(t, where) == []


def test_deletes_in_sequence_with_the_expression_api() -> None:
    t, rows = _table(parts=2, rows=150)
    t.delete(col("device.info.v") > 2)
    t.delete(col("tags").contains("b") & (col("tags").cardinality() >= 2))
    t.delete(col("attrs")["j"].is_null() & col("device").is_null())
    kept = duckdb_ids(rows, "(device.info.v > 2) IS NOT TRUE "
                            "AND (list_contains(tags, 'b') AND len(tags) >= 2) IS NOT TRUE "
                            "AND (map_extract_value(attrs, 'j') IS NULL AND device IS NULL) "
                            "IS NOT TRUE")
    assert _ids(t) == kept


@pytest.mark.parametrize(("where", "reference"), DELETES[:3])
def test_purge_where_on_nested_columns(where: str, reference: str) -> None:
    t, rows = _table(parts=2, rows=150)
    report = t.purge(where)
    kept = _kept(rows, reference)
    assert report.rows_erased == rows.num_rows - len(kept)  # no earlier deletes
    assert _ids(t) == kept
    # Every nested value of the kept rows survives the row-group splice.
    got = t.scan().to_arrow().sort_by("id")
    want = rows.filter(pa.array([i in set(kept) for i in rows.column("id").to_pylist()]))
    assert got.to_pylist() == want.sort_by("id").to_pylist()


def _with_version(ver: int, start: int) -> pa.Table:
    """Random rows whose device (where present) has version ``ver``."""
    rows = make_rows(50, start, start=start)
    devices = [None if d is None else {**d, "ver": ver} for d in rows.column("device").to_pylist()]
    return rows.set_column(1, "device", pa.array(devices, SCHEMA.field("device").type))


def test_read_validation_judges_struct_leaf_predicates_by_their_statistics() -> None:
    uri = f"memory://{uuid.uuid4().hex}"
    caslake.create_table(uri, SCHEMA, write_options=SMALL).append(_with_version(1, 0))
    a, b = caslake.open_table(uri), caslake.open_table(uri)
    v = a.version
    b.append(_with_version(3, 100))  # device.ver = 3 only: cannot hold a row ver = 9 matches
    assert not a.delete("device.ver = 9 OR device.ver = 1", read_version=v).noop
    a, b = caslake.open_table(uri), caslake.open_table(uri)
    v = a.version
    b.append(_with_version(9, 200))  # may hold (does hold) rows the delete matches
    with pytest.raises(ReadValidationFailed):
        a.delete("device['ver'] = 9", read_version=v)
