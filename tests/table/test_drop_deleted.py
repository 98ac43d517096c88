"""drop_deleted: slicing out sparse deletes and filtering dense ones give
exactly pyarrow's filter result, on both paths and at the edges."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from caslake.table.scan import SLICE_RUN_ROWS, drop_deleted


@pytest.mark.parametrize("deleted", [0, 1, 3, 50, 5_000, 19_999, 20_000])
def test_drop_deleted_equals_filter(deleted: int) -> None:
    n = 20_000
    rng = np.random.default_rng(deleted)
    keep = np.ones(n, dtype=bool)
    keep[rng.choice(n, deleted, replace=False)] = False
    table = pa.table({"id": np.arange(n), "s": [str(i) for i in range(n)]})
    got = drop_deleted(table, keep)
    assert got.equals(table.filter(pa.array(keep)))


def test_edges_and_sparse_path_is_zero_copy() -> None:
    n = SLICE_RUN_ROWS * 8
    table = pa.table({"id": np.arange(n)})
    keep = np.ones(n, dtype=bool)
    keep[[0, n // 2, n - 1]] = False
    got = drop_deleted(table, keep)
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
    got = drop_deleted(table, keep)
    assert got.equals(table.filter(pa.array(keep)))
    base = table["id"].chunk(0).buffers()[1].address
    assert all(c.buffers()[1].address == base for c in got["id"].chunks)
