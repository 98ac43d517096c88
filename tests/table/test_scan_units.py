"""How a scan splits its work: a narrow projection of a wide table is cut into
enough work units for every scan thread, sized by the projected columns'
bytes, not by every column's (which gave one unit per file, and one core)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import caslake
from caslake.table import scan as scan_mod
from caslake.table.pools import set_threads, threads
from caslake.table.write import WriteOptions

SCHEMA = pa.schema([("id", pa.int64()), ("payload", pa.binary())])


@pytest.fixture
def two_threads() -> Iterator[None]:
    before = threads()
    set_threads(2)
    yield
    set_threads(before)


def test_a_narrow_scan_of_a_wide_table_gets_a_unit_per_thread(
        tmp_path: Path, two_threads: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scan_mod, "MIN_UNIT_BYTES", 64 * 1024)
    n = 400_000
    rng = np.random.default_rng(1)
    offsets = np.arange(0, 100 * n + 1, 100, dtype=np.int32)
    payload = pa.BinaryArray.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets),
                                                          pa.py_buffer(rng.bytes(100 * n))])
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA,
                             write_options=WriteOptions(row_group_size=1024 * 1024))
    t.append(pa.table({"id": np.arange(n), "payload": payload}, schema=SCHEMA))
    assert len(t.describe()["data_files"]) == 1
    scan = t.scan(columns=["id"])
    units = list(scan._units())
    groups = sum(len(g) for _, g in units)
    assert groups >= 8, "the test needs a file of many row groups"
    assert len(units) >= 2 * threads()
    got = scan.to_arrow().column("id").to_numpy()
    assert np.array_equal(np.sort(got), np.arange(n))
