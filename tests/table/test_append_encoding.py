"""How appended row groups are encoded: dictionaries a column overflowed are
not tried again in the write's later row groups, and the file stays standard
Parquet (statistics, page CRCs) that pyarrow and DuckDB read back unchanged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import caslake
from caslake.core import WriteOptions
from caslake.core.pools import set_threads, threads
from caslake.format.parquet import VERIFY_PAGE_CHECKSUMS

SCHEMA = pa.schema([("id", pa.int64()), ("kind", pa.string()), ("payload", pa.string())])


def data(n: int) -> pa.Table:
    rng = np.random.default_rng(7)
    # 48 random characters a row: unique, so one row group's dictionary of
    # them passes pyarrow's 1 MiB dictionary-page limit and falls back.
    chars = np.frombuffer(b"0123456789abcdef", np.uint8)[rng.integers(0, 16, n * 48)]
    offsets = np.arange(0, n * 48 + 1, 48, dtype=np.int32)
    payload = pa.StringArray.from_buffers(n, pa.py_buffer(offsets.tobytes()),
                                          pa.py_buffer(chars.tobytes()))
    kind = pa.array(np.array(["a", "b", "c"])[rng.integers(0, 3, n)])
    return pa.table({"id": pa.array(np.arange(n)), "kind": kind, "payload": payload},
                    schema=SCHEMA)


@pytest.fixture
def two_threads():  # type: ignore[no-untyped-def]
    before = threads()
    set_threads(2)
    yield
    set_threads(before)


def test_a_column_whose_dictionary_overflowed_is_written_plain_afterwards(
        tmp_path: Path, two_threads: None) -> None:
    duckdb = pytest.importorskip("duckdb")
    rows = data(240_000)
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA,
                             write_options=WriteOptions(row_group_size=1_200_000))
    t.append(rows)
    (entry,) = t.describe()["data_files"]
    path = tmp_path / "t" / entry["path"]
    md = pq.ParquetFile(path).metadata
    assert md.num_row_groups >= 6
    payload = [md.row_group(g).column(2) for g in range(md.num_row_groups)]
    kind = [md.row_group(g).column(1) for g in range(md.num_row_groups)]
    # The first group tried the dictionary and overflowed; every later group
    # writes the unique column plain.  The small column keeps its dictionary.
    assert payload[0].has_dictionary_page
    assert not any(c.has_dictionary_page for c in payload[1:])
    assert all(c.has_dictionary_page for c in kind)
    # Statistics are kept in every group, page CRCs verify, and readers agree.
    for c in payload + kind:
        assert c.is_stats_set and c.statistics.has_min_max
    back = pq.ParquetFile(path, **VERIFY_PAGE_CHECKSUMS).read()
    assert back.equals(rows)
    assert t.scan().to_arrow().sort_by("id").equals(rows)
    got = duckdb.sql(f"select count(*), count(distinct payload), min(payload), max(kind) "
                     f"from read_parquet('{path}')").fetchall()[0]
    assert got == (rows.num_rows, rows.num_rows, min(rows["payload"].to_pylist()), "c")


def test_decimals_are_stored_as_integers_and_read_exactly(tmp_path: Path) -> None:
    """A decimal of precision <= 18 is stored as INT64 (a wide one stays
    FIXED_LEN_BYTE_ARRAY); DuckDB and pyarrow read the exact values, and decimal
    statistics still prune."""
    from decimal import Decimal

    import duckdb

    schema = pa.schema([("id", pa.int64()), ("price", pa.decimal128(15, 2)),
                        ("wide", pa.decimal128(30, 4))])
    t = caslake.create_table((tmp_path / "t").as_uri(), schema)
    prices = [Decimal(i) / 100 - 5 for i in range(1000)]
    t.append(pa.table({"id": pa.array(range(1000), pa.int64()),
                       "price": pa.array(prices, pa.decimal128(15, 2)),
                       "wide": pa.array([p * 10**12 for p in prices], pa.decimal128(30, 4))},
                      schema=schema))
    (f,) = t.io.live_files(t.snapshot)
    path = str(tmp_path / "t" / f.path)
    md = pq.read_metadata(path)
    assert md.row_group(0).column(1).physical_type == "INT64"
    assert md.row_group(0).column(2).physical_type == "FIXED_LEN_BYTE_ARRAY"
    got = duckdb.connect().execute(
        f"SELECT sum(price), min(wide) FROM read_parquet('{path}')").fetchone()
    assert got == (sum(prices), min(prices) * 10**12)
    assert t.scan(where="price > 4.98").to_arrow().column("id").to_pylist() == [999]
    assert t.scan(where="price > 5").to_arrow().num_rows == 0
