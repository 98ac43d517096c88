"""Schema strings (issue 32): ``--schema`` and ``add_column`` take DuckDB and Spark
DDL names as well as Arrow names; an unknown name is an error listing the valid
ones; ``caslake schema`` prints the schema in Arrow names and as DuckDB DDL.

Each SQL name's table type is compared with the Arrow type DuckDB gives a column
declared with the same (or, for Spark-only spellings, the equivalent) DDL.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import caslake
from caslake.cli import main
from caslake.errors import CaslakeError
from caslake.format.schema import canonical_type

# (what the user writes, the DuckDB DDL of the same type)
NAMES = [
    ("bigint", "BIGINT"), ("BIGINT", "BIGINT"), ("long", "BIGINT"), ("int", "INTEGER"),
    ("integer", "INTEGER"), ("smallint", "SMALLINT"), ("short", "SMALLINT"),
    ("tinyint", "TINYINT"), ("byte", "TINYINT"), ("double", "DOUBLE"),
    ("double precision", "DOUBLE"), ("float", "FLOAT"), ("real", "REAL"),
    ("boolean", "BOOLEAN"), ("date", "DATE"), ("decimal(7,2)", "DECIMAL(7,2)"),
    ("DECIMAL(38, 10)", "DECIMAL(38,10)"), ("numeric(5)", "NUMERIC(5)"),
    ("varchar", "VARCHAR"), ("string", "VARCHAR"), ("text", "TEXT"),
    ("timestamp", "TIMESTAMP"), ("timestamp_ntz", "TIMESTAMP"),
    ("timestamptz", "TIMESTAMPTZ"), ("timestamp_ltz", "TIMESTAMPTZ"),
    ("timestamp with time zone", "TIMESTAMP WITH TIME ZONE"), ("timestamp_ms", "TIMESTAMP_MS"),
    ("binary", "BLOB"), ("blob", "BLOB"), ("time", "TIME"), ("ubigint", "UBIGINT"),
    ("array<int>", "INTEGER[]"), ("list<varchar>", "VARCHAR[]"), ("INTEGER[]", "INTEGER[]"),
    ("struct<a:int,b:string>", "STRUCT(a INTEGER, b VARCHAR)"),
    ("STRUCT<a: INT, b ARRAY<DOUBLE>>", "STRUCT(a INTEGER, b DOUBLE[])"),
    ("struct(a integer, b varchar[])", "STRUCT(a INTEGER, b VARCHAR[])"),
    ("map<string,bigint>", "MAP(VARCHAR, BIGINT)"), ("map(varchar, date)", "MAP(VARCHAR, DATE)"),
    ("array<struct<k:decimal(10,2),m:map<int,array<timestamptz>>>>",
     "STRUCT(k DECIMAL(10,2), m MAP(INTEGER, TIMESTAMPTZ[]))[]"),
    ("int64", "BIGINT"), ("decimal128(10, 2)", "DECIMAL(10,2)"),
    ("timestamp[us, tz=UTC]", "TIMESTAMPTZ"),
]


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def duckdb_type(ddl: str) -> pa.DataType:
    """The Arrow type DuckDB gives a column declared ``ddl`` (in UTC)."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(f"CREATE TABLE t (c {ddl})")
    return canonical_type(con.execute("SELECT * FROM t").arrow().schema.field("c").type)


def plain(t: pa.DataType) -> pa.DataType:
    """``t`` with its list elements and map entries under one name."""
    if pa.types.is_list(t):
        return pa.list_(plain(t.value_type))
    if pa.types.is_map(t):
        return pa.map_(plain(t.key_type), plain(t.item_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, plain(f.type), f.nullable) for f in t])
    return t


def same(a: pa.DataType, b: pa.DataType) -> bool:
    """Equal types, the names of list elements and map entries aside."""
    return plain(a) == plain(b)


@pytest.mark.parametrize("text,ddl", NAMES)
def test_cli_schema_takes_the_name(tmp_path: Path, text: str, ddl: str) -> None:
    uri = str(tmp_path / "t")
    assert run("create", uri, "--schema", f"id:int64,c:{text}")[0] == 0
    got = caslake.open_table(uri).schema.field("c").type
    assert same(got, duckdb_type(ddl)), (got, duckdb_type(ddl))


@pytest.mark.parametrize("text,ddl", NAMES)
def test_add_column_takes_the_name(tmp_path: Path, text: str, ddl: str) -> None:
    t = caslake.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64())]))
    t.update_schema().add_column("c", text).commit()
    got = caslake.open_table(str(tmp_path / "t")).schema.field("c").type
    assert same(got, duckdb_type(ddl)), (got, duckdb_type(ddl))


def test_cli_schema_takes_sql_ddl_with_spaces_and_not_null(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    ddl = 'id BIGINT NOT NULL, price DECIMAL(7,2), tags VARCHAR[], "at" TIMESTAMPTZ'
    assert run("create", uri, "--schema", ddl)[0] == 0
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(f"CREATE TABLE t ({ddl})")
    want = con.execute("SELECT * FROM t").arrow().schema
    got = caslake.open_table(uri).schema
    assert [(f.name, f.nullable) for f in got] == _duckdb_columns(con)
    assert all(same(g.type, canonical_type(w.type)) for g, w in zip(got, want, strict=True))


def _duckdb_columns(con: duckdb.DuckDBPyConnection) -> list[tuple[str, bool]]:
    """The names and nullability of DuckDB's table ``t`` (its Arrow results say
    every column is nullable)."""
    return [(n, v == "YES") for n, v in con.execute(
        "SELECT column_name, is_nullable FROM information_schema.columns "
        "WHERE table_name = 't' ORDER BY ordinal_position").fetchall()]


@pytest.mark.parametrize("text", ["bigint2", "array<strin>", "decimal", "struct<a int, b>"])
def test_an_unknown_name_lists_the_valid_ones(tmp_path: Path, text: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert run("create", str(tmp_path / "b"), "--schema", f"id:int64,c:{text}")[0] == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'c" in err
    t = caslake.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64())]))
    with pytest.raises(CaslakeError) as e:
        t.update_schema().add_column("c", text).commit()
    for name in ("bigint", "varchar", "decimal(p,s)", "timestamptz", "array<T>", "int64"):
        assert name in err and name in str(e.value)


def test_a_bare_decimal_says_which_precision_to_write(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert run("create", str(tmp_path / "b"), "--schema", "p:decimal")[0] == 1
    assert "decimal(p,s)" in capsys.readouterr().err


SHOWN = pa.schema([
    pa.field("id", pa.int64(), nullable=False), ("name", pa.string()),
    ("price", pa.decimal128(10, 2)), ("at", pa.timestamp("us", tz="UTC")),
    ("day", pa.date32()), ("ok", pa.bool_()), ("raw", pa.binary()),
    ("tags", pa.list_(pa.string())),
    ("dev", pa.struct([("os", pa.string()), ("v", pa.int32()), ("odd name", pa.float32())])),
    ("attrs", pa.map_(pa.string(), pa.list_(pa.timestamp("us")))),
])


def test_cli_schema_prints_arrow_and_duckdb_ddl(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    caslake.create_table(uri, SHOWN)
    code, out = run("schema", uri)
    assert code == 0
    arrow = next(line for line in out.splitlines() if line.startswith("arrow: "))[7:]
    sql = next(line for line in out.splitlines() if line.startswith("sql:   "))[7:]
    # the DDL is DuckDB's own: DuckDB makes the same table of it
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(f"CREATE TABLE t ({sql})")
    want = con.execute("SELECT * FROM t").arrow().schema
    assert [(f.name, f.nullable) for f in SHOWN] == _duckdb_columns(con)
    assert all(same(f.type, canonical_type(w.type)) for f, w in zip(SHOWN, want, strict=True))
    # and both lines create the same table again
    for i, text in enumerate((arrow, sql)):
        assert run("create", str(tmp_path / f"again{i}"), "--schema", text)[0] == 0
        again = caslake.open_table(str(tmp_path / f"again{i}")).schema
        assert all(same(a.type, b.type) for a, b in zip(again, SHOWN, strict=True))
    code, out = run("schema", uri, "--json")
    assert json.loads(out)[-1]["sql"] == sql and json.loads(out)[-1]["arrow"] == arrow
