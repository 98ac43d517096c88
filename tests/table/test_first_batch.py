"""The first batch of a streaming scan waits for O(1) work units, not for every file.

A table of 2,000 one-row data files committed by one append (one commit, so
one segment holds every entry).  Reading the first batch, through every
streaming entry point (``to_reader``, ``to_batches``, iterating the scan, the
Arrow C stream), with and without a ``where`` predicate, and with tombstones
present, may touch only a bounded number of data files: counted as the
store's ranged GETs (a footer and a chunk read per file), never timed.
The whole stream still returns exactly the rows pyarrow and DuckDB compute
over the expected rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import caslake
from caslake.core import WriteOptions
from caslake.core.pools import threads
from caslake.core.read import scan as scan_module
from caslake.store.base import GET_RANGE

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
FILES = 2_000
DELETED = {3, 500, 1001, 1500, 1999, *range(10, 21), *range(1200, 1300)}


def one_row_files(uri: str, ids: list[int]) -> caslake.Table:
    """Append ``ids`` as one data file per row, in one commit."""
    t = caslake.open_table(uri, write_options=WriteOptions(target_file_size=1,
                                                           row_group_size=1))
    data = pa.table({"id": pa.array(ids, pa.int64()), "v": [f"v{i % 7}" for i in ids]},
                    schema=SCHEMA)
    t.append(data.to_reader(max_chunksize=1))
    return t


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> str:  # type: ignore[no-untyped-def]
    """Version 1: FILES one-row files, one commit.  Versions 2-4: deletes that
    touch files all over the table (several tombstones)."""
    uri = str(tmp_path_factory.mktemp("first_batch") / "t")
    caslake.create_table(uri, SCHEMA)
    t = one_row_files(uri, list(range(FILES)))
    assert len(t.live_files()) == FILES and t.version == 1
    t.delete("id IN (3, 500, 1001, 1500, 1999)")
    t.delete("id BETWEEN 10 AND 20")
    t.delete("id >= 1200 AND id < 1300")
    return uri


def _unit_files() -> int:
    return int(getattr(scan_module, "MAX_UNIT_FILES", 32))


def _bound() -> int:
    """Ranged GETs the first batch may make: a footer and a chunk read for each
    file of the footer read-ahead window and of the units queued before it."""
    units = max(2, threads()) + threads() + 2
    return 2 * (scan_module.FOOTER_WINDOW + units * _unit_files())


def _reader_first(s: caslake.Scan) -> pa.RecordBatch:
    return s.to_reader().read_next_batch()


def _batches_first(s: caslake.Scan) -> pa.RecordBatch:
    return next(iter(s.to_batches()))


def _iter_first(s: caslake.Scan) -> pa.RecordBatch:
    batch: pa.RecordBatch = next(iter(s))  # type: ignore[call-overload]
    return batch


def _stream_first(s: caslake.Scan) -> pa.RecordBatch:
    return pa.RecordBatchReader.from_stream(s).read_next_batch()


FIRSTS: dict[str, Callable[[caslake.Scan], pa.RecordBatch]] = {
    "to_reader": _reader_first, "to_batches": _batches_first, "iter": _iter_first,
    "arrow_c_stream": _stream_first}
WHERES: list[str | None] = [None, "id >= 0", "v <> 'v3'", "id >= 1000"]


def expected(version: int, where: str | None) -> pa.Table:
    ids = [i for i in range(FILES) if version == 1 or i not in DELETED]
    want = pa.table({"id": pa.array(ids, pa.int64()), "v": [f"v{i % 7}" for i in ids]},
                    schema=SCHEMA)
    if where is None:
        return want
    return duckdb.sql(f"SELECT * FROM want WHERE {where} ORDER BY id").fetch_arrow_table()


@pytest.mark.parametrize("version", [1, 4], ids=["no_deletes", "deletes"])
@pytest.mark.parametrize("where", WHERES)
@pytest.mark.parametrize("entry", list(FIRSTS))
def test_the_first_batch_touches_a_bounded_number_of_files(table, entry, where, version) -> None:  # type: ignore[no-untyped-def]
    t = caslake.open_table(table)  # fresh caches: every footer is a GET
    counters = t.store.counters
    counters.reset()
    batch = FIRSTS[entry](t.scan(where=where, version=version))
    gets = counters.count(GET_RANGE)
    assert batch.num_rows >= 1
    assert gets <= _bound() < FILES, (
        f"the first batch made {gets} ranged GETs (bound {_bound()}, {FILES} files)")


@pytest.mark.parametrize("version", [1, 4], ids=["no_deletes", "deletes"])
@pytest.mark.parametrize("where", WHERES)
def test_the_stream_returns_every_row_in_order(table, where, version) -> None:  # type: ignore[no-untyped-def]
    t = caslake.open_table(table)
    want = expected(version, where)
    streamed = pa.Table.from_batches(list(t.scan(where=where, version=version)
                                          .to_batches()), schema=SCHEMA)
    whole = t.scan(where=where, version=version).to_arrow()
    for got in (streamed, whole):
        # one commit's files are read in the order they were written: ids ascending
        assert got.column("id").to_pylist() == want.column("id").to_pylist()
        assert got.column("v").to_pylist() == want.column("v").to_pylist()
    q = "SELECT count(*), sum(id), min(id), max(id) FROM {}"
    con = duckdb.connect()
    con.register("got", streamed)
    con.register("want", want)
    assert con.execute(q.format("got")).fetchall() == con.execute(q.format("want")).fetchall()
    assert pc.sum(streamed["id"]).as_py() == pc.sum(want["id"]).as_py()


def test_an_abandoned_stream_stops_reading(table) -> None:  # type: ignore[no-untyped-def]
    t = caslake.open_table(table)
    counters = t.store.counters
    counters.reset()
    it: Iterator[Any] = iter(t.scan(where="v <> 'v1'", version=4).to_batches())
    for _ in range(3):
        next(it)
    del it
    import time

    time.sleep(0.2)  # let cancelled work settle
    assert counters.count(GET_RANGE) <= _bound() + 2 * 3 * _unit_files()
