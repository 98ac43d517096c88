"""The one in-process cache of parsed immutable objects: a bounded, thread-safe LRU.

Keys name an object version -- ``(path, etag)`` for data-file footers and
tombstones, the key alone for manifests (a manifest key is never reused) -- so
an entry can never go stale; it only ages out.  Loading happens outside the
lock: two threads missing on one key may both load it, and the second result
simply replaces the first (both are parses of the same bytes).
Never performs I/O itself; callers pass the loader.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LruCache(Generic[K, V]):
    """At most ``size`` entries; the least recently used is dropped first."""

    def __init__(self, size: int) -> None:
        self._items: OrderedDict[K, V] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
            return hit

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def get_or_load(self, key: K, load: Callable[[], V]) -> V:
        hit = self.get(key)
        if hit is not None:
            return hit
        value = load()
        self.put(key, value)
        return value

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
