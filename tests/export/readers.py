"""The four outside readers the exports are checked with, each returning an Arrow
table in the caslake schema, sorted by ``id`` (so tests compare content, not counts).

* pyiceberg ``StaticTable.from_metadata`` (optionally at a snapshot id);
* DuckDB ``iceberg_scan`` (extension from the ``duckdb-ext-iceberg`` package);
* deltalake ``DeltaTable`` through ``QueryBuilder`` (its DataFusion scan applies
  deletion vectors; ``to_pyarrow_table`` refuses tables that have them);
* DuckDB ``delta_scan`` (extension from the ``duckdb-ext-delta`` package).
"""

from __future__ import annotations

from typing import Any

import duckdb
import duckdb_ext
import pyarrow as pa

from caslake.api import Table

EXTENSION_DIR = f"{next(iter(duckdb_ext.__path__))}/extensions"


def normal(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` in ``schema`` (no field metadata), sorted by id."""
    plain = pa.schema([pa.field(f.name, f.type) for f in schema])
    return table.select(plain.names).cast(plain).sort_by("id")


def caslake_rows(t: Table, version: int | None = None) -> pa.Table:
    return normal(t.scan(version=version).to_arrow(), t.schema)


def duck(extensions: tuple[str, ...], settings: dict[str, str] | None = None
         ) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with ``extensions`` loaded from the pip packages (offline)."""
    con = duckdb.connect(config={"extension_directory": EXTENSION_DIR,
                                 "autoinstall_known_extensions": False,
                                 "autoload_known_extensions": False})
    for ext in extensions:
        con.execute(f"LOAD {ext}")
    for k, v in (settings or {}).items():
        con.execute(f"SET {k} = '{v}'")
    return con


def pyiceberg_rows(metadata: str, schema: pa.Schema, snapshot_id: int | None = None,
                   properties: dict[str, str] | None = None) -> pa.Table:
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(metadata, properties=properties or {})
    scan = table.scan(snapshot_id=snapshot_id) if snapshot_id is not None else table.scan()
    return normal(scan.to_arrow(), schema)


def duckdb_iceberg_rows(metadata: str, schema: pa.Schema, snapshot_id: int | None = None,
                        con: duckdb.DuckDBPyConnection | None = None) -> pa.Table:
    con = con or duck(("avro", "iceberg"))
    extra = f", snapshot_from_id => {snapshot_id}" if snapshot_id is not None else ""
    got = con.execute(f"SELECT * FROM iceberg_scan('{metadata}'{extra})").fetch_arrow_table()
    return normal(got, schema)


def deltalake_rows(root: str, schema: pa.Schema, version: int | None = None,
                   storage_options: dict[str, str] | None = None) -> pa.Table:
    from deltalake import DeltaTable, QueryBuilder

    dt = DeltaTable(root, version=version, storage_options=storage_options)
    result: Any = QueryBuilder().register("t", dt).execute("SELECT * FROM t")
    return normal(pa.table(result), schema)


def duckdb_delta_rows(root: str, schema: pa.Schema,
                      con: duckdb.DuckDBPyConnection | None = None) -> pa.Table:
    con = con or duck(("delta",))
    got = con.execute(f"SELECT * FROM delta_scan('{root}')").fetch_arrow_table()
    return normal(got, schema)
