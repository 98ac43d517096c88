"""Lock files of the local store are collected (issue 10, item 12).

A lock file may be opened by a concurrent compare-and-swap at any moment, so
the collector only unlinks a lock file it holds under an exclusive
non-blocking ``flock``; a locker that opened the file before the unlink sees,
after acquiring, that the path no longer names its inode and locks again.  The
tests run real processes doing CAS increments while the collector runs in a
loop: no update may be lost."""

from __future__ import annotations

import os
from datetime import timedelta
from multiprocessing.synchronize import Barrier, Event
from pathlib import Path

import pyarrow as pa
import pytest

import caslake
from caslake.errors import PreconditionFailed
from caslake.store import IfMatch, LocalStore, PutMode
from tests.store import procs

pytestmark = pytest.mark.slow

PROCESSES = 4
INCREMENTS = 60


def _increment(root: str, key: str, barrier: Barrier) -> int:
    store = LocalStore(root)
    barrier.wait()
    done = 0
    while done < INCREMENTS:
        cur = store.get(key)
        try:
            store.put(key, str(int(cur.data) + 1).encode(), mode=IfMatch(cur.etag))
        except PreconditionFailed:
            continue
        done += 1
    return done


def _collect(root: str, barrier: Barrier, stop: Event) -> int:
    store = LocalStore(root)
    barrier.wait()
    removed = 0
    while not stop.is_set():
        removed += store.collect_stale_locks()
    return removed


def test_collecting_locks_during_concurrent_cas_loses_no_update(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    store = LocalStore(root)
    store.put("counter", b"0", mode=PutMode.CREATE)
    ctx = procs.context()
    with ctx.Manager() as manager, procs.pool(ctx, PROCESSES + 1) as pool:
        barrier = manager.Barrier(PROCESSES + 1)
        stop = manager.Event()
        collector = pool.apply_async(_collect, (root, barrier, stop))
        writers = [pool.apply_async(_increment, (root, "counter", barrier))
                   for _ in range(PROCESSES)]
        assert [w.get(timeout=300) for w in writers] == [INCREMENTS] * PROCESSES
        stop.set()
        removed = collector.get(timeout=60)
    assert int(store.get("counter").data) == PROCESSES * INCREMENTS
    assert removed > 0  # the collector really raced the writers


def test_a_held_lock_file_is_not_collected(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path / "store"))
    store.put("k", b"0", mode=PutMode.CREATE)
    store.put("k", b"1", mode=IfMatch(store.head("k").etag))
    with store._key_lock("k"):
        assert store.collect_stale_locks() == 0
        assert store._lock_path("k").exists()
    assert store.collect_stale_locks() == 1
    assert not store._lock_path("k").exists()
    store.put("k", b"2", mode=IfMatch(store.head("k").etag))  # locks again from scratch
    assert store.get("k").data == b"2"


def test_gc_collects_lock_files(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, pa.schema([("a", pa.int64())]))
    for i in range(20):
        t.append(pa.table({"a": [i]}))
    t.delete("a < 5")
    locks = Path(uri) / ".caslake-locks"
    assert len(os.listdir(locks)) > 0
    report = t.gc(retention=timedelta(0), force=True)
    assert report.lock_files_deleted > 0 and os.listdir(locks) == []
    assert t.scan().count() == 15
    t.append(pa.table({"a": [100]}))
    assert caslake.open_table(uri).scan().count() == 16
    dry = t.gc(retention=timedelta(0), force=True, dry_run=True)
    assert dry.lock_files_deleted == 0

