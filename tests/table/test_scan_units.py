"""How a scan splits its work: a narrow projection of a wide table is cut into
enough work units for every scan thread, sized by the projected columns'
bytes, not by every column's (which gave one unit per file, and one core)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import caslake
from caslake.core import WriteOptions
from caslake.core.pools import set_threads, threads
from caslake.core.read import scan as scan_mod

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
    groups = sum(len(g) for unit in units for _, g in unit)
    assert groups >= 8, "the test needs a file of many row groups"
    assert len(units) >= 2 * threads()
    got = scan.to_arrow().column("id").to_numpy()
    assert np.array_equal(np.sort(got), np.arange(n))


def test_to_arrow_never_leaves_a_thread_idle_behind_a_slow_first_unit(
        tmp_path: Path, two_threads: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """``to_arrow`` keeps every result anyway, so it queues every unit at once: a
    slow unit at the head must not hold back the units after it (a bounded
    window in consumption order left a core idle until the head finished).
    Here the first unit waits until the last one has started; with a window
    it would wait forever (the event's timeout fails the test)."""
    monkeypatch.setattr(scan_mod, "MIN_UNIT_BYTES", 1)
    n = 6 * 2048
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA,
                             write_options=WriteOptions(row_group_size=2048))
    t.append(pa.table({"id": np.arange(n), "payload": [b"x" * 50] * n}, schema=SCHEMA))
    scan = t.scan(columns=["id"])
    units = list(scan._units())
    assert len(units) > threads() + 1, "the test needs more units than a window holds"
    last_started = threading.Event()
    read_unit = scan_mod.Scan._read_unit

    def read(self: scan_mod.Scan, task: scan_mod.FileTask, groups: list[int],
             **kw: bool) -> pa.Table:
        if (task.file.path, groups) == (units[-1][-1][0].file.path, units[-1][-1][1]):
            last_started.set()
        if (task.file.path, groups) == (units[0][0][0].file.path, units[0][0][1]):
            assert last_started.wait(timeout=10), "the last unit never started"
        return read_unit(self, task, groups, **kw)

    monkeypatch.setattr(scan_mod.Scan, "_read_unit", read)
    got = scan.to_arrow().column("id").to_numpy()
    assert np.array_equal(got, np.arange(n))


def test_units_span_files_so_that_no_small_unit_runs_alone_at_the_end(
        tmp_path: Path, two_threads: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file of many row groups and one of a few (one big append, one small): cut
    per file, the units were as big as the limit allows and a small one was left
    over from each file (the synthetic benchmark's units: 9, 9, 9, 6 and 3 row
    groups, the last running alone on one core).  Cut across files, there are
    exactly two per scan thread, their bytes within a row group of each other."""
    monkeypatch.setattr(scan_mod, "MIN_UNIT_BYTES", 1)
    rng = np.random.default_rng(7)
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA,
                             write_options=WriteOptions(row_group_size=16 * 1024))
    n = {0: 33 * 4096, 1: 3 * 4096}
    for part in (0, 1):
        ids = np.arange(part * n[0], part * n[0] + n[part])
        t.append(pa.table({"id": rng.permutation(ids), "payload": [b"p"] * len(ids)},
                          schema=SCHEMA))
    scan = t.scan(columns=["id"])
    plan = scan.plan()
    assert len(plan.tasks) == 2 and min(len(t.row_groups) for t in plan.tasks) >= 2
    units = list(scan._units())

    def nbytes(unit: tuple[tuple[scan_mod.FileTask, list[int]], ...]) -> int:
        return sum(task.footer.chunk_bytes(groups, task.column_indexes)
                   for task, groups in unit)

    biggest = max(task.footer.chunk_bytes([rg], task.column_indexes)
                  for task in plan.tasks for rg in task.row_groups)
    assert len(units) == 2 * threads()
    assert max(map(nbytes, units)) - min(map(nbytes, units)) <= biggest
    assert len(units[-1]) == 2  # the last unit holds the end of one file and the other
    got = scan.to_arrow().column("id").to_numpy()
    assert np.array_equal(np.sort(got), np.arange(n[0] + n[1]))


def test_matching_rows_decodes_units_on_the_scan_threads_and_yields_them_in_order(
        tmp_path: Path, two_threads: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A delete's (and an export's) matching scan: the units are decoded on the
    scan pool, more than one at a time (it read them one after another on the
    caller's thread, one core for a delete whose predicate prunes nothing, such
    as TPC-H RF2's key list), and are yielded in scan order with the right
    positions.  The first unit waits until a second one has started: read one
    after another, it would wait forever (the event's timeout fails the test)."""
    monkeypatch.setattr(scan_mod, "MIN_UNIT_BYTES", 1)
    n = 6 * 2048
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA,
                             write_options=WriteOptions(row_group_size=2048))
    t.append(pa.table({"id": np.arange(n), "payload": [b"x" * 50] * n}, schema=SCHEMA))
    scan = t.scan(columns=["id"], where=caslake.col("id").isin(range(0, n, 3)))
    units = list(scan._units())
    assert len(units) > threads(), "the test needs more units than threads"
    second_started = threading.Event()
    read_unit = scan_mod.Scan._read_unit
    first = (units[0][0][0].file.path, units[0][0][1])

    def read(self: scan_mod.Scan, task: scan_mod.FileTask, groups: list[int],
             **kw: bool) -> pa.Table:
        if (task.file.path, groups) == first:
            assert second_started.wait(timeout=10), "no second unit started"
        else:
            second_started.set()
        return read_unit(self, task, groups, **kw)

    monkeypatch.setattr(scan_mod.Scan, "_read_unit", read)
    got = list(scan.matching_rows())
    task0, rows0 = got[0]
    assert (task0.file.path, rows0["__pos"][0].as_py()) == (first[0], 0)
    ids = np.concatenate([rows.column("id").to_numpy() for _, rows in got])
    pos = np.concatenate([rows.column("__pos").to_numpy() for _, rows in got])
    want = np.arange(0, n, 3)
    assert np.array_equal(ids, want)  # in scan order
    assert np.array_equal(pos, want)  # one file: position == id


@pytest.mark.parametrize(("rows", "threaded"), [(2_000, False), (200_000, True)])
def test_a_lone_unit_decodes_its_columns_on_pyarrows_threads_only_when_large(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rows: int, threaded: bool) -> None:
    """A scan of one work unit decodes inline; pyarrow's threads decode its columns
    in parallel only from ``COLUMN_THREADS_BYTES`` of column chunks (below that,
    the hand-offs cost more than they save)."""
    rng = np.random.default_rng(2)
    schema = pa.schema([("a", pa.int64()), ("b", pa.int64())])
    t = caslake.create_table(str(tmp_path / "t"), schema)
    t.append(pa.table({"a": rng.integers(0, 2**62, rows), "b": rng.integers(0, 2**62, rows)},
                      schema=schema))
    scan = t.scan(columns=["a", "b"])
    units = list(scan._units())
    assert len(units) == 1
    assert (scan_mod.unit_bytes(units[0]) >= scan_mod.COLUMN_THREADS_BYTES) is threaded
    seen: list[bool] = []
    read = scan_mod.pq.ParquetFile.read_row_group

    def spy(self: object, *args: object, use_threads: bool = True, **kw: object) -> pa.Table:
        seen.append(use_threads)
        return read(self, *args, use_threads=use_threads, **kw)  # type: ignore[arg-type]
    monkeypatch.setattr(scan_mod.pq.ParquetFile, "read_row_group", spy)
    assert scan.to_arrow().num_rows == rows
    assert seen and set(seen) == {threaded}
