"""The CLI with nested columns (issue 29): the ``--schema`` grammar (``list<T>``,
``struct<name:T,...>``, ``map<K,V>``), ``scan --json`` writing nested values as JSON
objects and arrays (and the newer primitives as text), the CLI's own JSON output
appended back into a fresh table (equal rows; DuckDB's ``read_json`` of the same
file agrees), CSV refusing a nested column with a typed error, and ``schema``
changes by dotted path."""

from __future__ import annotations

import datetime as dt
import io
import json
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

import caslake
from caslake.cli import main
from caslake.format.type_text import type_text

U1 = uuid.UUID("2b8f1c1e-0c8e-4c3f-9f3e-6a1f2d3c4b5a")
SCHEMA = pa.schema([
    ("id", pa.int64()),
    ("tags", pa.list_(pa.string())),
    ("dev", pa.struct([("os", pa.string()), ("v", pa.int32())])),
    ("attrs", pa.map_(pa.string(), pa.int64())),
    ("items", pa.list_(pa.struct([("price", pa.decimal128(10, 2)),
                                  ("at", pa.timestamp("us", tz="UTC")),
                                  ("codes", pa.map_(pa.int32(), pa.list_(pa.float64())))]))),
    ("u", pa.uuid()), ("t", pa.time64("us")), ("d", pa.date32()), ("b", pa.binary()),
    ("h", pa.float16()), ("fx", pa.binary(3)), ("small", pa.decimal32(5, 1)),
])
ROWS: list[dict[str, Any]] = [
    {"id": 1, "tags": ["a", None, ""], "dev": {"os": "ios", "v": 17},
     "attrs": [("x", 1), ("y", None)],
     "items": [{"price": Decimal("12.50"), "at": dt.datetime(2024, 2, 29, 1, 2, 3, 4,
                                                                tzinfo=dt.UTC),
                "codes": [(7, [1.5, None]), (-1, None)]}, None,
               {"price": None, "at": None, "codes": None}],
     "u": U1, "t": dt.time(12, 30, 0, 500000), "d": dt.date(1999, 12, 31), "b": b"\x00\xff",
     "h": 1.5, "fx": b"abc", "small": Decimal("-1234.5")},
    {"id": 2, "tags": None, "dev": None, "attrs": None, "items": None, "u": None, "t": None,
     "d": None, "b": None, "h": None, "fx": None, "small": None},
    {"id": 3, "tags": [], "dev": {"os": None, "v": None}, "attrs": [], "items": [],
     "u": uuid.UUID(int=0), "t": dt.time(0), "d": dt.date(1, 1, 1), "b": b"",
     "h": -0.25, "fx": b"\x00\x00\x00", "small": Decimal("0.0")},
]


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def by_id(t: pa.Table) -> list[dict[str, Any]]:
    return sorted(t.to_pylist(), key=lambda r: r["id"])


@pytest.fixture
def nested(tmp_path: Path) -> caslake.Table:
    t = caslake.create_table(str(tmp_path / "src"), SCHEMA)
    t.append(pa.Table.from_pylist(ROWS, schema=SCHEMA))
    return t


def test_schema_grammar_takes_nested_types(tmp_path: Path) -> None:
    uri = str(tmp_path / "g")
    text = ("id:int64,tags:list<string>,dev:struct<os:string,v:int32>,"
            "attrs:map<string,int64>,deep:list<struct<p:decimal128(10, 2),"
            "m:map<int32,list<timestamp[us, tz=UTC]>>>>,plain:decimal128(5, 2)")
    assert run("create", uri, "--schema", text)[0] == 0
    got = caslake.open_table(uri).schema
    want = pa.schema([
        ("id", pa.int64()), ("tags", pa.list_(pa.string())),
        ("dev", pa.struct([("os", pa.string()), ("v", pa.int32())])),
        ("attrs", pa.map_(pa.string(), pa.int64())),
        ("deep", pa.list_(pa.struct([
            ("p", pa.decimal128(10, 2)),
            ("m", pa.map_(pa.int32(), pa.list_(pa.timestamp("us", tz="UTC"))))]))),
        ("plain", pa.decimal128(5, 2))])
    assert [(f.name, type_text(f.type)) for f in got] == [(f.name, type_text(f.type))
                                                            for f in want]
    code, shown = run("show", uri)
    assert code == 0 and ("schema     id:int64, tags:list<string>, dev:struct<os:string,"
                          "v:int32>, attrs:map<string,int64>") in shown


@pytest.mark.parametrize("text,words", [
    ("id:int64,tags:list<strin>", "unknown type 'strin'"),
    ("id:int64,dev:struct<os:string", "expected"),
    ("m:map<string>", "expected ','"),
    ("id:int65", "unknown type 'int65' for column 'id'"),
])
def test_a_bad_nested_schema_is_one_error_line(tmp_path: Path, text: str, words: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert run("create", str(tmp_path / "b"), "--schema", text)[0] == 1
    err = capsys.readouterr().err
    assert err.startswith("caslake: error:") and words in err and err.count("\n") == 1
    assert not (tmp_path / "b").exists()


def test_scan_json_writes_nested_values_as_objects_and_arrays(nested: caslake.Table) -> None:
    code, out = run("scan", nested.uri, "--json")
    assert code == 0
    rows = sorted((json.loads(line) for line in out.splitlines()), key=lambda r: r["id"])
    first = rows[0]
    assert first["tags"] == ["a", None, ""] and first["dev"] == {"os": "ios", "v": 17}
    assert first["attrs"] == {"x": 1, "y": None}  # a map is an object, as DuckDB's to_json
    assert first["items"][0] == {"price": "12.50", "at": "2024-02-29T01:02:03.000004+00:00",
                                 "codes": {"7": [1.5, None], "-1": None}}
    assert first["items"][1:] == [None, {"price": None, "at": None, "codes": None}]
    assert (first["u"], first["t"], first["d"]) == (str(U1), "12:30:00.500000", "1999-12-31")
    assert (first["b"], first["h"], first["fx"], first["small"]) == ("AP8=", 1.5, "YWJj",
                                                                     "-1234.5")
    assert rows[1] == dict.fromkeys(SCHEMA.names) | {"id": 2}
    # DuckDB's own JSON of the same rows: the nested parts agree.
    duck = duckdb.from_arrow(nested.scan(columns=["id", "tags", "dev", "attrs"]).to_reader())
    theirs = [{"id": r[0], "tags": r[1], "dev": r[2], "attrs": r[3]}
              for r in duck.order("id").fetchall()]
    ours = [{k: r[k] for k in ("id", "tags", "dev", "attrs")} for r in rows]
    assert ours == theirs


def _duckdb_json(path: Path) -> list[dict[str, Any]]:
    columns = {"id": "BIGINT", "tags": "VARCHAR[]", "dev": "STRUCT(os VARCHAR, v INTEGER)",
               "attrs": "MAP(VARCHAR, BIGINT)",
               "items": 'STRUCT("price" DECIMAL(10, 2), "at" TIMESTAMPTZ, '
                        '"codes" MAP(INTEGER, DOUBLE[]))[]',
               "u": "UUID", "t": "TIME", "d": "DATE"}
    rel = duckdb.sql(f"SELECT {', '.join(columns)} FROM read_json('{path}', "
                     f"format='newline_delimited', columns={columns!r}) ORDER BY id")
    return [dict(zip(columns, r, strict=True)) for r in rel.fetchall()]


def test_scan_json_appends_back_into_a_fresh_table_equal(nested: caslake.Table,
                                                         tmp_path: Path) -> None:
    """The CLI's own output is its input: scan --json, then append that file into a
    fresh table of the same schema (created by --schema text); the rows are equal.
    DuckDB reads the same file to the same values."""
    out_path = tmp_path / "rows.jsonl"
    code, out = run("scan", nested.uri, "--json")
    assert code == 0
    out_path.write_text(out)
    fresh = str(tmp_path / "fresh")
    text = ",".join(f"{f.name}:{type_text(f.type)}" for f in SCHEMA)
    assert run("create", fresh, "--schema", text)[0] == 0
    assert run("append", fresh, str(out_path))[0] == 0
    back = caslake.open_table(fresh).to_arrow()
    assert back.schema.equals(nested.to_arrow().schema)
    assert by_id(back) == by_id(nested.to_arrow()) == by_id(
        pa.Table.from_pylist(ROWS, schema=SCHEMA))
    theirs = _duckdb_json(out_path)
    ours = [{k: r[k] for k in theirs[0]} for r in by_id(back)]
    for row in ours:  # DuckDB gives a map as a dict
        row["attrs"] = None if row["attrs"] is None else dict(row["attrs"])
        for item in row["items"] or []:
            if item is not None and item["codes"] is not None:
                item["codes"] = dict(item["codes"])
    assert ours == theirs
    # create --from the file with --schema reads it the same way
    again = str(tmp_path / "again")
    assert run("create", again, "--from", str(out_path), "--schema", text)[0] == 0
    assert by_id(caslake.open_table(again).to_arrow()) == by_id(back)


def test_csv_output_of_a_nested_column_is_a_typed_error(nested: caslake.Table, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    target = tmp_path / "o.csv"
    assert run("scan", nested.uri, "--output", str(target))[0] == 1
    err = capsys.readouterr().err
    assert "column 'tags' is list<string>, which CSV cannot hold" in err
    assert "--json" in err and "Parquet" in err and not target.exists()
    # without the nested columns CSV works
    assert run("scan", nested.uri, "--columns", "id,d", "--output", str(target))[0] == 0
    assert target.read_text().splitlines()[0] == '"id","d"'
    # Parquet keeps the nesting
    pq_out = tmp_path / "o.parquet"
    assert run("scan", nested.uri, "--output", str(pq_out))[0] == 0
    import pyarrow.parquet as pq

    assert by_id(pq.read_table(pq_out)) == by_id(nested.to_arrow())


def test_csv_input_into_a_nested_table_is_a_typed_error(nested: caslake.Table, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    src = tmp_path / "in.csv"
    src.write_text("id,tags\n1,a\n")
    assert run("append", nested.uri, str(src))[0] == 1
    err = capsys.readouterr().err
    assert "which CSV cannot hold" in err and "JSON lines" in err


@pytest.mark.parametrize("line,path,lineno", [
    ('{"id": 5, "items": [{"price": "x"}]}', "items.element.price", 2),
    ('{"id": 5, "dev": {"os": 1}}', "dev.os", 2),
    ('{"id": 5, "dev": {"model": "m"}}', "dev.model", 2),
    ('{"id": 5, "attrs": {"k": "v"}}', "attrs.value", 2),
    ('{"id": 5, "items": [{"codes": {"seven": []}}]}', "items.element.codes.key", 2),
    ('{"id": 5, "tags": "a"}', "tags", 2),
    ('{"id": 5, "u": "not-a-uuid"}', "u", 2),
])
def test_a_bad_nested_json_value_names_its_line_and_path(
        nested: caslake.Table, tmp_path: Path, line: str, path: str, lineno: int,
        capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "bad.jsonl"
    src.write_text('{"id": 4}\n' + line + "\n")
    before = nested.refresh().version
    assert run("append", nested.uri, str(src))[0] == 1
    err = capsys.readouterr().err
    assert f"line {lineno}" in err and repr(path) in err, err
    assert nested.refresh().version == before


def test_schema_changes_by_dotted_path_from_the_command_line(nested: caslake.Table) -> None:
    code, _ = run("schema", nested.uri, "--add", "dev.loc:struct<lat:float64,lon:float64>",
                  "--rename", "dev.os:platform", "--widen", "dev.v:int64",
                  "--add", "items.element.qty:int32", "--make-nullable", "attrs.value")
    assert code == 0
    code, out = run("schema", nested.uri)
    assert code == 0
    last = out.splitlines()[-1]
    assert "dev:struct<platform:string#" in last and "v:int64#" in last
    assert "loc:struct<lat:float64#" in last and "qty:int32#" in last
    code, out = run("scan", nested.uri, "--json", "--columns", "id,dev")
    rows = sorted((json.loads(x) for x in out.splitlines()), key=lambda r: r["id"])
    assert rows[0] == {"id": 1, "dev": {"platform": "ios", "v": 17, "loc": None}}
    assert run("schema", nested.uri, "--drop", "tags.element")[0] == 1
