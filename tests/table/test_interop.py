"""Data out (issue 10, item 6): Scan and Table export the Arrow PyCapsule stream, so
DuckDB, Polars and pandas read the current table directly; ``live_files()`` lists
the files with their deleted-row counts."""

from __future__ import annotations

import builtins
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import caslake
from caslake.errors import OptionalDependencyMissing


@pytest.fixture
def table(tmp_path: Path) -> caslake.Table:
    t = caslake.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64()),
                                                             ("user", pa.string())]))
    t.append(pa.table({"id": list(range(10)), "user": [f"u{i % 3}" for i in range(10)]}))
    t.append(pa.table({"id": list(range(10, 15)), "user": ["u9"] * 5}))
    t.delete("user = 'u0'")
    return t


def test_duckdb_and_polars_read_a_scan_and_a_table(table: caslake.Table) -> None:
    scan = table.scan(columns=["id"], where="id < 12")
    assert duckdb.sql("select count(*), sum(id) from scan").fetchone() == (8, 48)
    frame = pl.DataFrame(scan)  # a new stream each time: the scan is re-readable
    assert frame.shape == (8, 1) and frame["id"].sum() == 48
    assert duckdb.from_arrow(table).aggregate("count(*)").fetchone() == (11,)
    assert pa.table(table).num_rows == 11
    uris = [f["uri"] for f in table.live_files()]
    # the raw files still hold the deleted rows
    assert duckdb.sql(f"select count(*) from read_parquet({uris})").fetchone() == (15,)


def test_to_pandas_and_to_polars(table: caslake.Table) -> None:
    df = table.scan(where="user = 'u9'").to_pandas()
    assert isinstance(df, pd.DataFrame) and sorted(df["id"]) == [10, 11, 12, 13, 14]
    assert len(table.to_pandas()) == 11
    p = table.to_polars()
    assert isinstance(p, pl.DataFrame) and p.height == 11
    assert table.scan(columns=["user"]).to_polars().columns == ["user"]


def test_to_polars_without_polars_is_a_typed_error(table: caslake.Table,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_polars(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "polars" or name.startswith("polars."):
            raise ImportError("No module named 'polars'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_polars)
    with pytest.raises(OptionalDependencyMissing, match="pip install polars"):
        table.to_polars()


def test_live_files_full_uri_rows_and_deleted_rows(table: caslake.Table, tmp_path: Path) -> None:
    files = table.live_files()
    assert len(files) == 2
    for f in files:
        assert f["uri"].startswith("file://") and f["uri"].endswith(".parquet")
        assert pq.ParquetFile(f["uri"].removeprefix("file://")).metadata.num_rows == f["rows"]
    assert sorted((f["rows"], f["deleted_rows"]) for f in files) == [(5, 0), (10, 4)]
    assert sum(f["rows"] - f["deleted_rows"] for f in files) == table.scan().count()


def test_live_files_on_s3_are_s3_uris(s3_uri: str, s3_options: dict[str, str]) -> None:
    t = caslake.create_table(s3_uri, pa.schema([("id", pa.int64())]),
                             storage_options=s3_options)
    t.append(pa.table({"id": [1, 2]}))
    [f] = t.live_files()
    assert f["uri"].startswith(s3_uri + "/data/") and f["rows"] == 2
