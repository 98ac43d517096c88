"""Deleted rows as sorted offsets: DeletionMask.dead_rows and the keep bitmap
built from them give exactly what the per-row keep mask gives."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from pyroaring import BitMap

from caslake.core.read.deletion_mask import DecodedKeyRange, DeletionMask
from caslake.core.read.scan import keep_bitmap


@pytest.mark.parametrize("deleted", [0, 1, 7, 300, 5_000, 9_999, 10_000])
def test_keep_bitmap_equals_packed_keep_mask(deleted: int) -> None:
    n = 10_000
    dead = np.sort(np.random.default_rng(deleted).choice(n, deleted, replace=False))
    keep = np.ones(n, dtype=bool)
    keep[dead] = False
    got = keep_bitmap(dead.astype(np.int64), n)
    assert got.equals(pa.array(keep))


@pytest.mark.parametrize("n", [1, 7, 8, 9, 63, 64, 65])
def test_keep_bitmap_at_byte_edges(n: int) -> None:
    for dead in ([], [0], [n - 1], list(range(n))):
        keep = np.ones(n, dtype=bool)
        keep[dead] = False
        assert keep_bitmap(np.array(dead, dtype=np.int64), n).equals(pa.array(keep))


def _spans(sizes: list[int]) -> list[tuple[int, int, int]]:
    out, start = [], 0
    for rg, n in enumerate(sizes):
        out.append((rg, start, n))
        start += n
    return out


@pytest.mark.parametrize("which", [[0], [1], [0, 1], [1, 2]])
def test_dead_rows_equal_the_keep_mask(which: list[int]) -> None:
    """Positions, whole groups and key ranges, over any run of groups of a file."""
    sizes = [1000, 700, 1300]
    rng = np.random.default_rng(5)
    mask = DeletionMask(positions=BitMap(rng.choice(3000, 200, replace=False).tolist()))
    spans = [s for s in _spans(sizes) if s[0] in which]
    rows = sum(n for _, _, n in spans)
    table = pa.table({"k": np.arange(rows)})
    for extra in (None, "group", "range"):
        if extra == "group":
            mask.row_groups = {which[-1]}
        if extra == "range":
            mask.key_ranges = [DecodedKeyRange("k", pa.scalar(10), pa.scalar(40))]
        keep = mask.keep_mask(spans, table)
        dead = mask.dead_rows(spans, table)
        if keep is None or keep.all():
            assert dead is None or len(dead) == 0
        else:
            assert dead is not None
            assert dead.dtype == np.int64
            assert dead.tolist() == np.flatnonzero(~keep).tolist()


def test_no_deletes_in_these_groups_is_none() -> None:
    mask = DeletionMask(positions=BitMap([5000]))
    assert mask.dead_rows(_spans([1000]), pa.table({"k": np.arange(1000)})) is None
