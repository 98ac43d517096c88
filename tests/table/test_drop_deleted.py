"""drop_deleted: slicing out sparse deletes and filtering dense ones give
exactly pyarrow's filter result, on both paths and at the edges."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pytest

from caslake.core.read.scan import SLICE_RUN_ROWS, drop_deleted


def _dead(keep: np.ndarray) -> np.ndarray:
    """The deleted offsets ``drop_deleted`` takes: where ``keep`` is false."""
    return np.flatnonzero(~keep)


@pytest.mark.parametrize("deleted", [0, 1, 3, 50, 5_000, 19_999, 20_000])
def test_drop_deleted_equals_filter(deleted: int) -> None:
    n = 20_000
    rng = np.random.default_rng(deleted)
    keep = np.ones(n, dtype=bool)
    keep[rng.choice(n, deleted, replace=False)] = False
    table = pa.table({"id": np.arange(n), "s": [str(i) for i in range(n)]})
    got = drop_deleted(table, _dead(keep))
    assert got.equals(table.filter(pa.array(keep)))


def test_edges_and_sparse_path_is_zero_copy() -> None:
    n = SLICE_RUN_ROWS * 8
    table = pa.table({"id": np.arange(n)})
    keep = np.ones(n, dtype=bool)
    keep[[0, n // 2, n - 1]] = False
    got = drop_deleted(table, _dead(keep))
    assert got["id"].to_pylist() == [i for i in range(n) if keep[i]]
    # the sparse path slices: every chunk shares the decoded buffer
    base = table["id"].chunk(0).buffers()[1].address
    assert all(c.buffers()[1].address == base for c in got["id"].chunks)


@pytest.mark.parametrize("runs", [1, 3])
def test_a_deleted_range_is_sliced_out_whatever_its_length(runs: int) -> None:
    """A delete of contiguous rows (an id range) leaves few runs of kept rows,
    however many rows it removed: slices, not a row-by-row filter."""
    n = SLICE_RUN_ROWS * 64
    table = pa.table({"id": np.arange(n)})
    keep = np.ones(n, dtype=bool)
    for r in range(runs):
        start = (2 * r + 1) * n // (2 * runs + 1)
        keep[start:start + n // 50] = False  # 2% of the rows each, contiguous
    got = drop_deleted(table, _dead(keep))
    assert got.equals(table.filter(pa.array(keep)))
    base = table["id"].chunk(0).buffers()[1].address
    assert all(c.buffers()[1].address == base for c in got["id"].chunks)


def test_dictionary_columns_expand_once_before_slicing() -> None:
    """A sparse delete (the sliced path) expands the decoded dictionary columns
    once for the whole group, then slices the plain result: expanding each
    slice cost ~70 us of Python per chunk (TPC-H Q1 after RF2, 1.45x -> 1.2x)."""
    from caslake.core.read.scan import _expand

    n = SLICE_RUN_ROWS * 16
    flags = pa.array(np.array(["A", "N", "R"])[np.arange(n) % 3]).dictionary_encode()
    table = pa.table({"id": np.arange(n), "flag": flags})
    plain = pa.schema([("id", pa.int64()), ("flag", pa.string())])
    keep = np.ones(n, dtype=bool)
    keep[np.arange(SLICE_RUN_ROWS // 2, n, SLICE_RUN_ROWS * 2)] = False  # 8 deletes: sliced
    seen: list[int] = []

    def expand(t: pa.Table) -> pa.Table:
        seen.append(t.column("flag").num_chunks)
        return _expand(t, plain, "data/f.parquet")

    got = drop_deleted(table, _dead(keep), expand)
    assert seen == [1]
    assert got.schema == plain
    assert got.column("flag").num_chunks == 9
    assert got.equals(_expand(table, plain, "data/f.parquet").filter(pa.array(keep)))
    # Dense deletes are filtered as decoded (the indices, not the strings, are copied).
    keep[::3] = False
    assert drop_deleted(table, _dead(keep), expand).equals(table.filter(pa.array(keep)))
    assert seen == [1]


def test_rf2_sized_deletes_are_sliced_not_filtered() -> None:
    """TPC-H RF2 at SF1 deletes ~1,500 orders' line items from ~22 row groups of
    ~273k rows: ~70 short runs per group, leaving kept runs of ~3,900 rows.
    Slicing them costs ~1 ms a group; a filter copies every kept row (~4.5 ms a
    group of Q1's columns), so such groups are sliced."""
    n = 273_000
    rng = np.random.default_rng(1)
    keep = np.ones(n, dtype=bool)
    for start in rng.choice(n - 8, 70, replace=False):
        keep[start:start + 4] = False
    table = pa.table({"id": np.arange(n)})
    got = drop_deleted(table, _dead(keep))
    assert got.equals(table.filter(pa.array(keep)))
    base = table["id"].chunk(0).buffers()[1].address
    assert got["id"].num_chunks > 1
    assert all(c.buffers()[1].address == base for c in got["id"].chunks)


def test_scattered_dense_deletes_are_filtered_into_few_chunks() -> None:
    """A 1% scattered delete leaves runs of ~100 rows: slicing would hand the
    consumer thousands of tiny chunks, so it is one filter (one chunk)."""
    n = 100_000
    keep = np.random.default_rng(2).random(n) > 0.01
    table = pa.table({"id": np.arange(n)})
    got = drop_deleted(table, _dead(keep))
    assert got.equals(table.filter(pa.array(keep)))
    assert got["id"].num_chunks == 1


@pytest.mark.parametrize("pieces", [1, 3])
def test_sliced_result_is_the_same_from_one_chunk_or_several(pieces: int) -> None:
    """A decoded group is one chunk a column (its batch is sliced); a table of
    several chunks is sliced as a table: the same rows either way."""
    n = SLICE_RUN_ROWS * 30
    whole = pa.table({"id": np.arange(n), "s": pa.array([f"v{i % 7}" for i in range(n)])})
    bounds = np.linspace(0, n, pieces + 1).astype(int)
    table = pa.concat_tables([whole.slice(a, b - a) for a, b in itertools.pairwise(bounds)])
    keep = np.ones(n, dtype=bool)
    keep[[5, 6, n // 3, n // 2 + 1, n - 2]] = False
    got = drop_deleted(table, _dead(keep))
    assert got.schema == table.schema
    assert got.column("id").num_chunks > pieces
    assert got.equals(whole.filter(pa.array(keep)))
