"""Appends take what users have (issue 10, items 1-5): CSV parsed with the table's
types, missing columns refused, safe casts accepted and lossy ones named, any
Arrow PyCapsule stream accepted, duplicate upsert keys refused."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import caslake
from caslake.cli import main
from caslake.errors import DuplicateKey, InputDataError, InvalidArgument, SchemaMismatch


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


# --- 1. CSV append uses the table's column types --------------------------------------


def test_csv_append_is_parsed_with_the_table_types(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    first = tmp_path / "flights.csv"
    first.write_text("carrier,dep_time,tailnum\nUA,517.5,N14228\nAA,,N24211\n")
    assert run("create", uri, "--from", str(first))[0] == 0
    # dep_time holds only integers here: a guessing reader would call it int64.
    december = tmp_path / "december.csv"
    december.write_text("carrier,dep_time,tailnum\nB6,542,N619JB\nDL,,007\n")
    code, out = run("append", uri, str(december))
    assert code == 0, out
    got = caslake.open_table(uri).to_arrow()
    assert got.schema.field("dep_time").type == pa.float64()
    # "007" stays a string: the table's type, not a guess
    assert sorted(got.column("tailnum").to_pylist()) == ["007", "N14228", "N24211", "N619JB"]
    own = duckdb.connect()  # a connection of its own: the view "got" dies with it
    rel = own.from_arrow(got)
    assert rel.query("got", "select sum(dep_time) from got").fetchone() == (517.5 + 542,)


def test_csv_bad_cell_is_reported_with_line_and_column(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    uri = str(tmp_path / "t")
    caslake.create_table(uri, pa.schema([("id", pa.int64()), ("x", pa.float64())]))
    bad = tmp_path / "bad.csv"
    bad.write_text("id,x\n1,1.5\n2,2.5\n3,oops\n4,4\n")
    code, _ = run("append", uri, str(bad))
    err = capsys.readouterr().err
    assert code == 1
    assert "line 4" in err and "'x'" in err and "'oops'" in err and "double" in err, err
    assert err.count("\n") == 1
    assert caslake.open_table(uri).version == 0  # nothing committed

    from caslake.cli.input import open_input

    with pytest.raises(InputDataError) as ei:
        open_input(str(bad), None, caslake.open_table(uri).schema).read_all()
    assert (ei.value.line, ei.value.column, ei.value.value) == (4, "x", "oops")


def test_csv_missing_and_extra_columns_are_named(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    uri = str(tmp_path / "t")
    caslake.create_table(uri, pa.schema([("id", pa.int64()), ("x", pa.float64())]))
    p = tmp_path / "few.csv"
    p.write_text("id\n1\n")
    assert run("append", uri, str(p))[0] == 1
    assert "missing" in capsys.readouterr().err


# --- 2. an append lacking a column is refused ----------------------------------------------


def test_append_missing_columns_refused_naming_them(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, pa.schema([("id", pa.int64()), ("a", pa.string()),
                                             ("b", pa.float64())]))
    with pytest.raises(SchemaMismatch) as ei:
        t.append(pa.table({"id": [1]}))
    assert "'a'" in str(ei.value) and "'b'" in str(ei.value) and "missing" in str(ei.value)
    assert t.refresh().version == 0
    p = tmp_path / "id.parquet"
    pq.write_table(pa.table({"id": pa.array([1], pa.int64())}), p)
    assert run("append", uri, str(p))[0] == 1
    err = capsys.readouterr().err
    assert "SchemaMismatch" not in err and "'a'" in err and "'b'" in err
    assert caslake.open_table(uri).version == 0


# --- 3. safe casts --------------------------------------------------------------------------

US_UTC = pa.timestamp("us", tz="UTC")


def _ts_table(tmp_path: Path, typ: pa.DataType = US_UTC) -> caslake.Table:
    return caslake.create_table(str(tmp_path / "t"), pa.schema([("ts", typ)]))


def test_pandas_ns_timestamps_append_to_a_us_table_when_lossless(tmp_path: Path) -> None:
    t = _ts_table(tmp_path)
    stamps = pd.to_datetime(["2026-01-01 10:00:00.123456", "2026-01-02 00:00:00.000000"],
                            utc=True)
    df = pd.DataFrame({"ts": stamps.astype("datetime64[ns, UTC]")})
    assert pa.Table.from_pandas(df).schema.field("ts").type == pa.timestamp("ns", tz="UTC")
    t.append(df)
    assert t.to_arrow().column("ts").to_pylist()[0] == datetime(2026, 1, 1, 10, 0, 0, 123456,
                                                                tzinfo=UTC)


def test_lossy_timestamp_names_column_and_first_lossy_value(tmp_path: Path) -> None:
    t = _ts_table(tmp_path)
    ns = pa.array([1_000, 2_000_001, 3_000_002], pa.timestamp("ns", tz="UTC"))
    with pytest.raises(SchemaMismatch) as ei:
        t.append(pa.table({"ts": ns}))
    msg = str(ei.value)
    assert "'ts'" in msg and "1970-01-01 00:00:00.002000001" in msg and "precision" in msg, msg
    assert t.refresh().version == 0


@pytest.mark.parametrize(("table_type", "data_type", "which"), [
    (pa.timestamp("us", tz="UTC"), pa.timestamp("us"), "the data has no time zone"),
    (pa.timestamp("us"), pa.timestamp("us", tz="UTC"), "the table has no time zone"),
])
def test_naive_vs_aware_refused_both_ways(tmp_path: Path, table_type: pa.DataType,
                                          data_type: pa.DataType, which: str) -> None:
    t = _ts_table(tmp_path, table_type)
    with pytest.raises(SchemaMismatch) as ei:
        t.append(pa.table({"ts": pa.array([0], data_type)}))
    assert which in str(ei.value) and "'ts'" in str(ei.value)


@pytest.mark.parametrize("zone", ["UTC", "Etc/UTC", "+00:00"])
def test_equivalent_utc_names_are_equal(tmp_path: Path, zone: str) -> None:
    t = _ts_table(tmp_path)
    t.append(pa.table({"ts": pa.array([5], pa.timestamp("us", tz=zone))}))
    assert t.to_arrow().column("ts").type == US_UTC


def test_duckdb_etc_utc_export_appends(tmp_path: Path) -> None:
    t = _ts_table(tmp_path)
    rel = duckdb.sql("select TIMESTAMPTZ '2026-03-01 12:00:00+00' as ts")
    t.append(rel)
    assert t.to_arrow().column("ts").to_pylist() == [datetime(2026, 3, 1, 12, tzinfo=UTC)]


def test_other_zone_refused(tmp_path: Path) -> None:
    t = _ts_table(tmp_path)
    with pytest.raises(SchemaMismatch, match="Europe/Paris"):
        t.append(pa.table({"ts": pa.array([5], pa.timestamp("us", tz="Europe/Paris"))}))


def test_lossless_widenings_and_string_binary_variants(tmp_path: Path) -> None:
    schema = pa.schema([("i", pa.int64()), ("f", pa.float64()), ("s", pa.string()),
                        ("ls", pa.large_string()), ("b", pa.binary()), ("d", pa.date32()),
                        ("ts", pa.timestamp("ns"))])
    t = caslake.create_table(str(tmp_path / "t"), schema)
    t.append(pa.table({
        "i": pa.array([1], pa.int32()), "f": pa.array([1], pa.int32()),
        "s": pa.array(["a"], pa.large_string()), "ls": pa.array(["b"], pa.string_view()),
        "b": pa.array([b"x"], pa.large_binary()), "d": pa.array([0], pa.date32()),
        "ts": pa.array([1], pa.timestamp("s"))}))
    t.append(pa.table({
        "i": pa.array([2], pa.uint32()), "f": pa.array([2.5], pa.float32()),
        "s": pa.array(["c"]).dictionary_encode(), "ls": pa.array(["d"]),
        "b": pa.array([b"y"], pa.binary_view()), "d": pa.array([1], pa.date32()),
        "ts": pa.array([2], pa.timestamp("ms"))}))
    got = t.to_arrow().sort_by("i")
    # A table stores logical types: create_table keeps large_string as string
    # (issue 29, docs/format.md "Arrow encodings").
    assert got.schema == schema.set(3, pa.field("ls", pa.string()))
    assert got.column("f").to_pylist() == [1.0, 2.5]
    assert got.column("ts").to_pylist()[1] == datetime(1970, 1, 1, 0, 0, 0, 2000)
    row = got.slice(0, 1)
    with pytest.raises(SchemaMismatch, match="'i'"):
        t.append(row.set_column(0, "i", pa.array([1.5])))


# --- 4. anything with __arrow_c_stream__ ----------------------------------------------------


def test_polars_duckdb_and_capsule_objects_append(tmp_path: Path) -> None:
    t = caslake.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64()),
                                                             ("name", pa.string())]))
    t.append(pl.DataFrame({"id": [1, 2], "name": ["a", "b"]}))
    t.append(duckdb.sql("select 3::BIGINT as id, 'c' as name"))
    t.append(pa.table({"id": [4], "name": ["d"]}).to_reader())

    class Capsule:  # any object exporting the stream interface
        def __arrow_c_stream__(self, requested_schema: object = None) -> object:
            return pa.table({"id": [5], "name": ["e"]}).__arrow_c_stream__(requested_schema)

    t.append(Capsule())
    got = duckdb.sql(f"select id, name from read_parquet({[f['uri'] for f in t.live_files()]})"
                     " order by id").fetchall()
    assert got == [(1, "a"), (2, "b"), (3, "c"), (4, "d"), (5, "e")]


def test_unaccepted_input_lists_what_is_accepted(tmp_path: Path) -> None:
    t = caslake.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64())]))
    with pytest.raises(InvalidArgument) as ei:
        t.append({"id": [1]})
    msg = str(ei.value)
    assert "__arrow_c_stream__" in msg and "Polars" in msg and "DuckDB" in msg
    assert "pandas" in msg and "RecordBatchReader" in msg


# --- 5. upsert with duplicate keys ----------------------------------------------------------


def _keyed(tmp_path: Path) -> caslake.Table:
    t = caslake.create_table(str(tmp_path / "t"), pa.schema([("a", pa.int64()),
                                                             ("b", pa.string()),
                                                             ("v", pa.int64())]))
    t.append(pa.table({"a": [1, 2], "b": ["x", "y"], "v": [10, 20]}))
    return t


def test_upsert_duplicate_keys_refused_naming_one(tmp_path: Path) -> None:
    t = _keyed(tmp_path)
    data = pa.table({"a": [1, 3, 1], "b": ["x", "z", "x"], "v": [11, 30, 12]})
    with pytest.raises(DuplicateKey) as ei:
        t.upsert(data, key=["a", "b"])
    assert "a=1" in str(ei.value) and "b='x'" in str(ei.value) and "2 times" in str(ei.value)
    assert ei.value.key == {"a": 1, "b": "x"}
    assert t.refresh().version == 1


@pytest.mark.parametrize(("choice", "want"), [("last", 12), ("first", 11)])
def test_upsert_on_duplicate_keeps_the_chosen_row(tmp_path: Path, choice: str,
                                                  want: int) -> None:
    t = _keyed(tmp_path)
    data = pa.table({"a": [1, 3, 1], "b": ["x", "z", "x"], "v": [11, 30, 12]})
    res = t.upsert(data, key=["a", "b"], on_duplicate=choice)
    assert (res.rows_added, res.rows_deleted) == (2, 1)
    got = t.to_arrow()
    own = duckdb.connect()  # a connection of its own: the view "got" dies with it
    rel = own.from_arrow(got)
    assert rel.query("got", "select a, b, v from got order by a").fetchall() == [
        (1, "x", want), (2, "y", 20), (3, "z", 30)]


def test_upsert_on_duplicate_rejects_unknown_choice(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="on_duplicate"):
        _keyed(tmp_path).upsert(pa.table({"a": [1], "b": ["x"], "v": [1]}), key="a",
                                on_duplicate="any")


def test_batches_in_another_column_order_are_matched_by_name() -> None:
    """A conformer is built from one input schema; a later batch of the same
    stream with its columns in another order is still matched by name."""
    from caslake.core.coerce import SchemaConformer

    table = pa.schema([pa.field("a", pa.int64(), nullable=False), ("b", pa.string())])
    first = pa.record_batch({"b": ["x", "y"], "a": [1, 2]})
    conform = SchemaConformer(table, first.schema)
    assert conform(first).to_pydict() == {"a": [1, 2], "b": ["x", "y"]}
    later = pa.record_batch({"a": [3], "b": ["z"]})
    assert conform(later).to_pydict() == {"a": [3], "b": ["z"]}
    with pytest.raises(SchemaMismatch, match="'a' is not nullable"):
        conform(pa.record_batch({"b": ["w"], "a": pa.array([None], pa.int64())}))
