"""The CLI's CSV and JSON lines input and output round-trip (issue 27, items 1, 2, 4, 5).

NULL and the empty string stay apart: an unquoted empty CSV field is NULL, a quoted
``""`` is the empty string (DuckDB's ``read_csv`` with ``allow_quoted_nulls=false``;
Spark's ``spark.read.csv`` and DuckDB's default read ``""`` as NULL),
and ``scan --output x.csv`` writes them that way.  caslake's parse of a file is
compared with DuckDB's ``read_csv`` / ``read_json`` of the same file.
"""

from __future__ import annotations

import datetime as dt
import io
import json
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import caslake
from caslake.cli import main


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def rows_of(uri: str) -> list[dict[str, object]]:
    t = caslake.open_table(uri).to_arrow()
    return sorted(t.to_pylist(), key=lambda r: r["id"])  # type: ignore[arg-type,return-value]


SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string()), ("f", pa.float64()),
                    ("d", pa.date32()), ("t", pa.timestamp("us"))])
SCHEMA_TEXT = "id:int64,s:string,f:float64,d:date32,t:timestamp[us]"

# Text with everything CSV must quote: delimiters, quotes, newlines (LF and CRLF),
# leading/trailing spaces, unicode beyond the BMP; no surrogates or NUL.
text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
               max_size=12) | st.sampled_from(["", ",", '"', '""', "\n", "a\r\nb", " ",
                                                 "NULL", "NA", "null", "nan", "é,ü", "😀"])
floats = st.floats(allow_nan=False, width=64) | st.none()
dates = st.dates(min_value=dt.date(1, 1, 1), max_value=dt.date(9999, 12, 31)) | st.none()
times = st.datetimes(min_value=dt.datetime(1900, 1, 1),
                     max_value=dt.datetime(2200, 1, 1)) | st.none()
rows = st.lists(st.tuples(text | st.none(), floats, dates, times), min_size=1, max_size=8)


def _table(data: list[tuple[object, ...]]) -> pa.Table:
    return pa.table({"id": list(range(len(data))),
                     "s": [r[0] for r in data], "f": [r[1] for r in data],
                     "d": [r[2] for r in data], "t": [r[3] for r in data]}, schema=SCHEMA)


def _duck_csv(path: Path, **extra: str) -> list[dict[str, object]]:
    opts = "".join(f", {k}={v}" for k, v in extra.items())
    rel = duckdb.sql(
        f"select * from read_csv('{path}', header=true, allow_quoted_nulls=false, "
        "columns={'id': 'BIGINT', 's': 'VARCHAR', 'f': 'DOUBLE', 'd': 'DATE', "
        f"'t': 'TIMESTAMP'}}{opts}) order by id")
    return [dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()]


# --- 1. NULL is not the empty string --------------------------------------------------------


def test_csv_unquoted_empty_is_null_and_quoted_empty_is_empty(tmp_path: Path) -> None:
    src = tmp_path / "a.csv"
    src.write_text('id,name,note\n1,,x\n2,"",y\n3,a,\n', encoding="utf-8")
    code, _ = run("create", str(tmp_path / "t"), "--from", str(src))
    assert code == 0
    got = rows_of(str(tmp_path / "t"))
    duck = duckdb.sql(f"select * from read_csv('{src}', allow_quoted_nulls=false) order by id")
    assert [tuple(r.values()) for r in got] == duck.fetchall() == [
        (1, None, "x"), (2, "", "y"), (3, "a", None)]
    # the same for an append to an existing (typed) table
    code, _ = run("append", str(tmp_path / "t"), str(src))
    assert code == 0
    assert [r["name"] for r in rows_of(str(tmp_path / "t"))] == [None, None, "", "", "a", "a"]


def test_scan_output_csv_keeps_null_and_empty_apart(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    caslake.create_table(uri, pa.schema([("id", pa.int64()), ("s", pa.string())])).append(
        pa.table({"id": [1, 2], "s": [None, ""]}))
    out = tmp_path / "o.csv"
    assert run("scan", uri, "--output", str(out))[0] == 0
    assert out.read_text().splitlines()[1:] == ["1,", '2,""']


def test_all_empty_column_is_typed_as_string(tmp_path: Path) -> None:
    src = tmp_path / "e.csv"
    src.write_text("id,e\n1,\n2,\n", encoding="utf-8")
    code, _ = run("create", str(tmp_path / "t"), "--from", str(src))
    assert code == 0
    t = caslake.open_table(str(tmp_path / "t"))
    assert t.schema.field("e").type == pa.string()
    assert rows_of(str(tmp_path / "t")) == [{"id": 1, "e": None}, {"id": 2, "e": None}]


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=rows)
def test_csv_round_trip_property(tmp_path_factory: pytest.TempPathFactory,
                                 data: list[tuple[object, ...]]) -> None:
    """create -> scan --output csv -> append that file -> scan: the rows come back, and
    DuckDB reads the file as caslake does."""
    d = tmp_path_factory.mktemp("rt")
    original = _table(data)
    uri = str(d / "t")
    caslake.create_table(uri, SCHEMA).append(original)
    out = d / "o.csv"
    code, _ = run("scan", uri, "--output", str(out))
    assert code == 0
    assert _duck_csv(out) == original.to_pylist()
    code, _ = run("append", uri, str(out))
    assert code == 0
    assert rows_of(uri) == sorted(original.to_pylist() * 2, key=lambda r: r["id"])  # type: ignore[arg-type,return-value]
    # create --from the file with --schema giving the types
    code, _ = run("create", str(d / "t2"), "--from", str(out), "--schema", SCHEMA_TEXT)
    assert code == 0
    assert rows_of(str(d / "t2")) == original.to_pylist()


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=rows, null=st.sampled_from(["NULL", "\\N", "NA"]))
def test_csv_null_value_and_formats_round_trip(tmp_path_factory: pytest.TempPathFactory,
                                               data: list[tuple[object, ...]],
                                               null: str) -> None:
    d = tmp_path_factory.mktemp("fmt")
    original = _table(data)
    uri = str(d / "t")
    caslake.create_table(uri, SCHEMA).append(original)
    out = d / "o.csv"
    fmt = ["--null-value", null, "--date-format", "%d/%m/%Y",
           "--timestamp-format", "%d/%m/%Y %H:%M:%S.%f"]
    code, _ = run("scan", uri, "--output", str(out), *fmt)
    assert code == 0
    assert _duck_csv(out, nullstr=f"'{null}'", dateformat="'%d/%m/%Y'",
                     timestampformat="'%d/%m/%Y %H:%M:%S.%f'") == original.to_pylist()
    code, _ = run("append", uri, str(out), *fmt)
    assert code == 0
    assert rows_of(uri) == sorted(original.to_pylist() * 2, key=lambda r: r["id"])  # type: ignore[arg-type,return-value]


def test_null_value_marker_is_unquoted_and_a_quoted_marker_is_text(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    caslake.create_table(uri, pa.schema([("id", pa.int64()), ("s", pa.string())])).append(
        pa.table({"id": [1, 2, 3], "s": [None, "NULL", ""]}))
    out = tmp_path / "o.csv"
    assert run("scan", uri, "--output", str(out), "--null-value", "NULL")[0] == 0
    assert out.read_text().splitlines()[1:] == ["1,NULL", '2,"NULL"', '3,""']
    assert run("append", uri, str(out), "--null-value", "NULL")[0] == 0
    assert [r["s"] for r in rows_of(uri)] == [None, None, "NULL", "NULL", "", ""]


def test_null_value_with_a_delimiter_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                ) -> None:
    uri = str(tmp_path / "t")
    caslake.create_table(uri, pa.schema([("id", pa.int64())]))
    code, _ = run("scan", uri, "--output", str(tmp_path / "o.csv"), "--null-value", 'a,"b')
    assert code != 0
    assert "--null-value" in capsys.readouterr().err


def test_date_format_in_create_from_infers_dates(tmp_path: Path) -> None:
    src = tmp_path / "d.csv"
    src.write_text("id,d,t\n1,31/12/2020,31/12/2020 10:11:12\n2,,\n", encoding="utf-8")
    code, _ = run("create", str(tmp_path / "t"), "--from", str(src), "--date-format",
                  "%d/%m/%Y", "--timestamp-format", "%d/%m/%Y %H:%M:%S")
    assert code == 0
    t = caslake.open_table(str(tmp_path / "t"))
    assert t.schema.field("d").type == pa.date32()
    assert pa.types.is_timestamp(t.schema.field("t").type)
    assert rows_of(str(tmp_path / "t")) == [
        {"id": 1, "d": dt.date(2020, 12, 31), "t": dt.datetime(2020, 12, 31, 10, 11, 12)},
        {"id": 2, "d": None, "t": None}]


# --- 2. create --from with --schema ---------------------------------------------------------


def test_create_from_with_schema_uses_the_schema_as_the_file_types(tmp_path: Path) -> None:
    src = tmp_path / "a.csv"
    src.write_text("id,code\n1,007\n2,\n", encoding="utf-8")
    code, out = run("create", str(tmp_path / "t"), "--from", str(src), "--schema",
                    "id:int32,code:string")
    assert code == 0 and "appended 2 rows" in out, out
    t = caslake.open_table(str(tmp_path / "t"))
    assert t.schema == pa.schema([("id", pa.int32()), ("code", pa.string())])
    assert rows_of(str(tmp_path / "t")) == [{"id": 1, "code": "007"}, {"id": 2, "code": None}]


def test_create_from_with_a_schema_that_does_not_fit_creates_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "a.parquet"
    pq.write_table(pa.table({"id": [1], "x": ["a"]}), src)
    code, _ = run("create", str(tmp_path / "t"), "--from", str(src), "--schema", "id:int64")
    assert code != 0
    err = capsys.readouterr().err
    assert "'x'" in err and "Traceback" not in err
    assert not (tmp_path / "t").exists()


# --- 4. scan --columns "" -------------------------------------------------------------------


@pytest.mark.parametrize("columns", ["", " ", "a,,b", ","])
def test_scan_empty_columns_is_an_error_naming_the_option(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], columns: str) -> None:
    uri = str(tmp_path / "t")
    caslake.create_table(uri, pa.schema([("a", pa.int64()), ("b", pa.int64())])).append(
        pa.table({"a": [1], "b": [2]}))
    code, out = run("scan", uri, "--columns", columns)
    assert code != 0 and out == ""
    assert "--columns" in capsys.readouterr().err


# --- 5. JSON lines input --------------------------------------------------------------------


def test_json_lines_input_create_and_append(tmp_path: Path) -> None:
    src = tmp_path / "a.json"
    src.write_text('{"id": 1, "s": "x"}\n{"id": 2, "s": null}\n{"id": 3, "s": ""}\n',
                   encoding="utf-8")
    code, _ = run("create", str(tmp_path / "t"), "--from", str(src))
    assert code == 0
    got = rows_of(str(tmp_path / "t"))
    duck = duckdb.sql(f"select * from read_json('{src}', format='newline_delimited') "
                      "order by id").fetchall()
    assert [tuple(r.values()) for r in got] == duck == [(1, "x"), (2, None), (3, "")]
    code, _ = run("append", str(tmp_path / "t"), str(src))
    assert code == 0 and len(rows_of(str(tmp_path / "t"))) == 6


def test_unknown_input_format_names_the_supported_ones(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "a.xlsx"
    src.write_bytes(b"PK\x03\x04 not a parquet file")
    code, _ = run("create", str(tmp_path / "t"), "--from", str(src))
    assert code != 0
    err = capsys.readouterr().err
    assert "parquet" in err and "csv" in err and "json" in err, err


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=rows)
def test_json_round_trip_property(tmp_path_factory: pytest.TempPathFactory,
                                  data: list[tuple[object, ...]]) -> None:
    """scan --json | append: the CLI's own JSON lines output is valid input, and DuckDB
    reads it as caslake does."""
    d = tmp_path_factory.mktemp("js")
    original = _table(data)
    uri = str(d / "t")
    caslake.create_table(uri, SCHEMA).append(original)
    code, text_out = run("scan", uri, "--json")
    assert code == 0
    src = d / "o.jsonl"
    src.write_text(text_out, encoding="utf-8")
    for line in text_out.splitlines():
        json.loads(line)
    rel = duckdb.sql(f"select * from read_json('{src}', format='newline_delimited', "
                     "columns={'id': 'BIGINT', 's': 'VARCHAR', 'f': 'DOUBLE', 'd': 'DATE', "
                     "'t': 'TIMESTAMP'}) order by id")
    assert [dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()] == \
        original.to_pylist()
    code, _ = run("append", uri, str(src))
    assert code == 0
    assert rows_of(uri) == sorted(original.to_pylist() * 2, key=lambda r: r["id"])  # type: ignore[arg-type,return-value]
