"""Partitioned writes in the crash-at-every-step suite: a transaction (an append and
an upsert) and ``Table.upsert`` on a ``day(ts)``, ``bucket(2, id)`` table.  For each
store call, a crash, a lost reply or a failure before the call (the suite's fault
kinds, :func:`tests.reliability.test_crash_every_step.fault_every_call`) leaves the
old version or exactly the new one: rows equal the model (pyarrow), every file of
the table lies in one partition, a deep verify passes, no object of the old version
is gone, and a later append works."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import LongType

import caslake
from caslake.api import Table
from caslake.ops.verify import verify_table
from caslake.store import open_store
from tests.partition.data import SCHEMA, events
from tests.reliability.test_crash_every_step import (
    FAST,
    MODES,
    WRITE,
    Tables,
    fault_every_call,
    list_keys,
    referenced_keys,
)

PARTITION_BY = ["day(ts)", "bucket(2, id)"]
BASE = events(120, seed=31, days=2)
ADDED = events(30, seed=32, days=2, first_id=1000)
CHANGED = events(40, seed=33, days=2, first_id=100)  # ids 100..119 exist, 120..139 new
EPOCH = dt.datetime(1970, 1, 1)
_BUCKET = BucketTransform(2).transform(LongType())


def _rows(t: pa.Table) -> list[tuple[object, ...]]:
    return sorted(tuple(r.values()) for r in t.to_pylist())


def _after_upsert(rows: pa.Table, change: pa.Table) -> pa.Table:
    keep = pc.invert(pc.is_in(rows["id"], change["id"]))
    return pa.concat_tables([rows.filter(keep), change])


OLD = _rows(BASE)
NEW = {"transaction": _rows(_after_upsert(pa.concat_tables([BASE, ADDED]), CHANGED)),
       "upsert": _rows(_after_upsert(BASE, CHANGED))}


def _transaction(t: Table) -> None:
    with t.transaction() as tx:
        tx.append(ADDED)
        tx.upsert(CHANGED, key="id")


def _upsert(t: Table) -> None:
    t.upsert(CHANGED, key="id")


RUN: dict[str, Callable[[Table], None]] = {"transaction": _transaction, "upsert": _upsert}


def _one_partition_each(t: Table, where: str) -> None:
    """Every live file's rows (read back with pyarrow) lie in the one partition its
    manifest entry records (day by pyarrow, bucket by pyiceberg)."""
    for f in t.io.live_files(t.context.refresh()):
        rows = pq.read_table(pa.BufferReader(t.store.get(f.path).data), columns=["ts", "id"])
        days = pc.days_between(pa.scalar(EPOCH, pa.timestamp("us")), rows["ts"]).to_pylist()
        found = {(d, _BUCKET(i)) for d, i in zip(days, rows["id"].to_pylist(), strict=True)}
        assert f.partition is not None and found == {tuple(f.partition.values)}, \
            f"{where}: {f.path} holds {sorted(found)}"


def _checker(name: str, before: dict[str, set[str]]) -> Callable[[str, str], str]:
    def check(uri: str, where: str) -> str:
        t = caslake.open_table(uri)
        assert t.version in (1, 2), where
        state = "old" if t.version == 1 else "new"
        assert _rows(t.to_arrow()) == (OLD if state == "old" else NEW[name]), where
        store = open_store(uri)
        _one_partition_each(t, where)
        report = verify_table(store, deep=True, all_versions=True)
        assert report.ok, f"{where}: verify found {report.problems}"
        refs, _ = referenced_keys(store)
        keys = list_keys(store)
        assert refs <= keys and before[uri] <= keys, where
        later = caslake.open_table(uri)
        later.commit_policy = FAST
        assert later.append(events(5, seed=34, first_id=5000)).version == t.version + 1, where
        return state

    return check


@pytest.fixture
def memory(tmp_path: Path) -> Tables:
    return Tables("memory", tmp_path)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(RUN))
def test_partitioned_write_fault_at_every_store_call(memory: Tables, mode: str,
                                                     name: str) -> None:
    before: dict[str, set[str]] = {}

    def setup() -> str:
        uri = memory.new_uri()
        t = caslake.create_table(uri, SCHEMA, partition_by=PARTITION_BY, write_options=WRITE)
        t.append(BASE)
        before[uri] = list_keys(open_store(uri))
        return uri

    fault_every_call(f"partitioned {name}", memory.kind, mode, setup, RUN[name],
                     _checker(name, before), 5)
