"""``Scan.limit(n)`` / ``Table.head(n)`` stop reading after ``n`` rows, and
``Scan.count()`` answers from the manifest when there is no predicate.

The table has files of many row groups; bytes are counted on a fresh handle's
store, and the rows are compared with pyarrow reading the data files itself
(deleted rows taken out by the ids the test deleted)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import caslake
from caslake.core import WriteOptions
from caslake.errors import InvalidArgument
from caslake.store.base import GET_RANGE

N = 120_000
SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string()), ("x", pa.float64())])
WRITE = WriteOptions(target_file_size=512 * 1024, row_group_size=24 * 1024)
DELETED = "id < 300 OR id % 7 = 3"


def _data(lo: int, hi: int) -> pa.Table:
    ids = np.arange(lo, hi, dtype=np.int64)
    return pa.table({"id": ids, "s": pa.array([f"v{i % 977}" for i in ids.tolist()]),
                     "x": ids * 0.5 + np.random.default_rng(lo).random(hi - lo)}, schema=SCHEMA)


@pytest.fixture(scope="module")
def table_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    uri = str(tmp_path_factory.mktemp("limit") / "t")
    t = caslake.create_table(uri, SCHEMA, write_options=WRITE)
    t.append(_data(0, N // 2))
    t.append(_data(N // 2, N))
    t.delete(DELETED)
    return uri


def _live(table: pa.Table) -> pa.Table:
    """pyarrow's own answer: the rows whose ids the test did not delete."""
    ids = table.column("id").to_numpy()
    return table.filter(pa.array(~((ids < 300) | (ids % 7 == 3))))


def _files(uri: str) -> list[str]:
    return [f["uri"].removeprefix("file://") for f in caslake.open_table(uri).live_files()]


def test_limit_reads_one_row_group_and_returns_the_first_live_rows(table_uri: str) -> None:
    files = _files(table_uri)
    meta = pq.ParquetFile(files[0]).metadata
    assert meta.num_row_groups >= 4, "the test needs files of many row groups"
    group = meta.row_group(0)
    rg_bytes = sum(group.column(c).total_compressed_size for c in range(group.num_columns))
    t = caslake.open_table(table_uri)
    t.store.counters.reset()
    got = t.scan().limit(10).to_arrow()
    ranged = t.store.counters.count(GET_RANGE)
    read = t.store.counters.bytes_in
    expected = _live(pq.read_table(files[0], schema=SCHEMA)).slice(0, 10)
    assert got.equals(expected)
    # the file's tombstones, its footer, the chunks of its first row group only, and
    # perhaps the next file's footer: it is fetched one file ahead on the metadata
    # pool, and the limit cancels it if it has not started (and waits for it if it
    # has), so it is counted or not by timing; nothing else may be read
    whole = sum(f["bytes"] for f in t.live_files())
    masks = sum(r.size for r in t.snapshot.manifest.tombstones)
    assert ranged in (2, 3), t.store.counters.snapshot()
    assert read <= masks + 2 * meta.serialized_size + rg_bytes + 1024, (read, masks, rg_bytes)
    assert read * 10 < whole
    t.store.counters.reset()
    assert t.scan().to_arrow().num_rows > 10 and t.store.counters.bytes_in > 10 * read


def test_head_with_columns_and_where_equals_pyarrow(table_uri: str) -> None:
    t = caslake.open_table(table_uri)
    got = t.head(25, columns=["id", "s"], where="x >= 40000")
    every = _live(pa.concat_tables(pq.read_table(f, schema=SCHEMA) for f in _files(table_uri)))
    expected = every.filter(pc.greater_equal(every.column("x"), 40000))
    assert got.column_names == ["id", "s"]
    assert got.equals(expected.select(["id", "s"]).slice(0, 25))


def test_limit_larger_than_the_table_and_zero(table_uri: str) -> None:
    t = caslake.open_table(table_uri)
    live = sum(_live(pq.read_table(f, schema=SCHEMA)).num_rows for f in _files(table_uri))
    assert t.scan(columns=["id"]).limit(N * 2).to_arrow().num_rows == live
    assert t.scan().limit(0).to_arrow().num_rows == 0
    assert t.scan().limit(0).to_arrow().schema == t.schema
    assert t.scan().limit(50).limit(7).count() == 7
    assert pa.table(t.scan().limit(33)).num_rows == 33  # the Arrow stream is limited too
    with pytest.raises(InvalidArgument):
        t.scan().limit(-1)


def test_count_without_a_predicate_reads_no_data_file_only_the_tombstones(table_uri: str) -> None:
    files = _files(table_uri)
    live = sum(_live(pq.read_table(f, schema=SCHEMA)).num_rows for f in files)
    stored = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    assert live < stored, "the test needs deleted rows"
    t = caslake.open_table(table_uri)
    scan = t.scan()
    t.store.counters.reset()
    assert scan.count() == live
    masks = sum(r.size for r in t.snapshot.manifest.tombstones)  # loaded and checked
    assert t.store.counters.count(GET_RANGE) == 0 and t.store.counters.bytes_in == masks
    # with a predicate the rows are read, and counted the same as pyarrow
    every = _live(pa.concat_tables(pq.read_table(f, schema=SCHEMA) for f in files))
    t.store.counters.reset()
    assert t.scan(where="id >= 100000").count() == pc.sum(
        pc.greater_equal(every.column("id"), 100000)).as_py()
    narrow = t.store.counters.bytes_in  # the id column only
    t.store.counters.reset()
    t.scan(where="id >= 100000").to_arrow()
    assert narrow * 2 < t.store.counters.bytes_in
    # an older version (before the delete) counts its own rows
    assert t.scan(version=2).count() == N


def test_count_of_a_subset_counts_its_tombstones(table_uri: str) -> None:
    from caslake.core import Scan, SnapshotSubset

    t = caslake.open_table(table_uri)
    first = t.io.live_files(t.snapshot)[:1]
    sub = Scan(t.io, t.footers, SnapshotSubset.of(t.snapshot, first), None, None,
               t.tombstones)
    path = _files(table_uri)[0]
    assert sub.count() == _live(pq.read_table(path, schema=SCHEMA)).num_rows
