"""Cross-process atomicity of LocalStore: create via link(2), CAS under flock(2).

Threads in one process could be serialised by a Python lock by mistake; these
tests use separate processes, as independent writers on one machine would.
"""

from __future__ import annotations

from multiprocessing.synchronize import Barrier
from pathlib import Path

import pytest

from caslake.errors import AlreadyExists, PreconditionFailed
from caslake.store import IfMatch, LocalStore, PutMode
from tests.store import procs

pytestmark = pytest.mark.slow

PROCESSES = 8
INCREMENTS = 25


def _create_worker(root: str, key: str, ident: int, barrier: Barrier) -> str:
    store = LocalStore(root)
    barrier.wait()
    try:
        store.put(key, f"process-{ident}".encode(), mode=PutMode.CREATE)
    except AlreadyExists:
        return "lost"
    return "won"


def _increment_worker(root: str, key: str, times: int, barrier: Barrier) -> tuple[int, int]:
    """Add 1 to the counter object ``times`` times; return (successes, retries)."""
    store = LocalStore(root)
    barrier.wait()
    done = retries = 0
    while done < times:
        current = store.get(key)
        value = int(current.data.decode())
        try:
            store.put(key, str(value + 1).encode(), mode=IfMatch(current.etag))
        except PreconditionFailed:
            retries += 1
            continue
        done += 1
    return done, retries


def test_processes_creating_one_key_have_exactly_one_winner(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    ctx = procs.context()
    for round_no in range(3):
        key = f"_log/{round_no:020d}.json"
        with ctx.Manager() as manager, procs.pool(ctx, PROCESSES) as pool:
            barrier = manager.Barrier(PROCESSES)
            results = pool.starmap(_create_worker,
                                   [(root, key, i, barrier) for i in range(PROCESSES)])
        assert sorted(results) == ["lost"] * (PROCESSES - 1) + ["won"]
        data = LocalStore(root).get(key).data
        assert data.startswith(b"process-")


def test_processes_incrementing_with_cas_lose_no_update(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    store = LocalStore(root)
    store.put("counter", b"0", mode=PutMode.CREATE)
    ctx = procs.context()
    with ctx.Manager() as manager, procs.pool(ctx, PROCESSES) as pool:
        barrier = manager.Barrier(PROCESSES)
        results = pool.starmap(_increment_worker,
                               [(root, "counter", INCREMENTS, barrier) for _ in range(PROCESSES)])
    assert [done for done, _ in results] == [INCREMENTS] * PROCESSES
    assert int(store.get("counter").data) == PROCESSES * INCREMENTS
    # With 8 racing processes some CAS attempts must have lost and retried;
    # zero retries would mean the processes never actually overlapped.
    assert sum(retries for _, retries in results) > 0
    # Temp files are cleaned up after every write.
    assert list((tmp_path / "store" / ".caslake-tmp").iterdir()) == []
