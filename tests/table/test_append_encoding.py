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
from caslake.format.parquet import VERIFY_PAGE_CHECKSUMS
from caslake.table.pools import set_threads, threads
from caslake.table.write import WriteOptions

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
