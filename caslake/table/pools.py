"""Process-wide thread pools for reads: one for metadata fetches (footers,
tombstones), one for scan work units.

Starting threads costs milliseconds each on a loaded machine, and every scan
used to start its own; these pools start once per process and are shared.
Tasks in the metadata pool never submit to a pool and wait, so sharing cannot
deadlock.  Never holds state beyond the executors.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

METADATA_THREADS = 16  # concurrent footer / tombstone GETs (I/O bound)

_LOCK = threading.Lock()
_POOLS: dict[str, ThreadPoolExecutor] = {}


def shared_pool(name: str, workers: int) -> ThreadPoolExecutor:
    """The process's pool called ``name``, started on first use."""
    with _LOCK:
        pool = _POOLS.get(name)
        if pool is None:
            pool = _POOLS[name] = ThreadPoolExecutor(max_workers=workers,
                                                     thread_name_prefix=f"caslake-{name}")
        return pool


def fetch_all(fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """``[fn(x) for x in items]``, run concurrently on the metadata pool when
    there is more than one item (in the caller's thread otherwise)."""
    items = list(items)
    if len(items) <= 1:
        return [fn(x) for x in items]
    return list(shared_pool("metadata", METADATA_THREADS).map(fn, items))
