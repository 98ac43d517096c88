"""Process-wide thread pools: one for metadata fetches (footers, tombstones),
one for scan work units (decoding in parallel: pyarrow releases the GIL), one
for encoding appended row groups.

:func:`set_threads` sizes the scan and encode pools (default: the machine's
cores); with pyarrow's own ``pa.set_cpu_count`` it bounds how many cores a
read or an append uses.

Starting threads costs milliseconds each on a loaded machine, and every scan
used to start its own; these pools start once per process and are shared.
Tasks in the metadata pool never submit to a pool and wait, so sharing cannot
deadlock.  Never holds state beyond the executors.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from caslake.errors import InvalidArgument

T = TypeVar("T")
R = TypeVar("R")

METADATA_THREADS = 16  # concurrent footer / tombstone GETs (I/O bound)

_LOCK = threading.Lock()
_POOLS: dict[str, ThreadPoolExecutor] = {}
_THREADS = [max(1, os.cpu_count() or 1)]


def threads() -> int:
    """How many work units a scan (or row groups an append) processes at once."""
    return _THREADS[0]


def set_threads(n: int) -> None:
    """Size the scan and encode pools to ``n`` threads (from the next use on).
    Work already submitted to the old pools finishes there."""
    if n < 1:
        raise InvalidArgument(f"threads must be at least 1, not {n}")
    with _LOCK:
        _THREADS[0] = n
        for name in ("scan", "encode"):
            old = _POOLS.pop(name, None)
            if old is not None:
                old.shutdown(wait=False)


def shared_pool(name: str, workers: int) -> ThreadPoolExecutor:
    """The process's pool called ``name``, started on first use."""
    with _LOCK:
        pool = _POOLS.get(name)
        if pool is None:
            pool = _POOLS[name] = ThreadPoolExecutor(max_workers=workers,
                                                     thread_name_prefix=f"caslake-{name}")
        return pool


def shutdown_all() -> None:
    """Finish the work already submitted to every pool and join their threads (the
    CLI calls it before exit, so no thread outlives the command).  A later use
    starts the pools again."""
    with _LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
    for pool in pools:
        pool.shutdown(wait=True)


def fetch_all(fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """``[fn(x) for x in items]``, run concurrently on the metadata pool when
    there is more than one item (in the caller's thread otherwise)."""
    items = list(items)
    if len(items) <= 1:
        return [fn(x) for x in items]
    return list(shared_pool("metadata", METADATA_THREADS).map(fn, items))
