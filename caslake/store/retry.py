"""Bounded, jittered retries of transient store errors (503 SlowDown, resets, timeouts).

The rules, which the commit protocol relies on:

* reads, lists and deletes are idempotent: retried;
* an unconditional put is idempotent: retried;
* a create-only put (``If-None-Match: *``) is retried; when it finds the
  object already there, an earlier attempt -- ours, or one the client library
  re-sent on its own after a lost reply -- may have landed, so the object is
  read back and accepted only if its bytes are exactly ours (else
  AlreadyExists).  caslake creates only unique keys, so equal bytes mean ours;
* a compare-and-swap put (``If-Match``) is **never** retried here: its
  outcome is ambiguous and only the commit protocol can settle it, by reading
  the pointer back (docs/protocol.md, "Commit");
* precondition failures are never retried.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from caslake.errors import AlreadyExists, TransientStoreError
from caslake.store.base import GetResult, IfMatch, Mode, ObjectMeta, ObjectStore, PutMode

T = TypeVar("T")


class RetryingStore(ObjectStore):
    def __init__(self, inner: ObjectStore, *, attempts: int = 5, base_s: float = 0.02,
                 cap_s: float = 1.0, sleep: Callable[[float], None] = time.sleep) -> None:
        self.inner = inner
        self.uri = inner.uri
        self.counters = inner.counters
        self.attempts = attempts
        self.base_s = base_s
        self.cap_s = cap_s
        self._sleep = sleep
        self.retries = 0

    def _retry(self, fn: Callable[[], T]) -> T:
        for attempt in range(1, self.attempts + 1):
            try:
                return fn()
            except TransientStoreError:
                if attempt == self.attempts:
                    raise
                self.retries += 1
                self._sleep(random.uniform(0, min(self.cap_s, self.base_s * 2 ** attempt)))
        raise AssertionError("unreachable")

    def get(self, key: str) -> GetResult:
        return self._retry(lambda: self.inner.get(key))

    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]], *,
                   etag: str | None = None) -> list[bytes]:
        return self._retry(lambda: self.inner.get_ranges(key, ranges, etag=etag))

    def head(self, key: str) -> ObjectMeta:
        return self._retry(lambda: self.inner.head(key))

    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        return iter(self._retry(lambda: list(self.inner.list(prefix))))

    def delete(self, key: str) -> None:
        self._retry(lambda: self.inner.delete(key))

    def put(self, key: str, data: bytes, *, mode: Mode = PutMode.OVERWRITE) -> str:
        if isinstance(mode, IfMatch):
            return self.inner.put(key, data, mode=mode)  # never retried: see module doc
        if mode is PutMode.OVERWRITE:
            return self._retry(lambda: self.inner.put(key, data, mode=mode))
        def create() -> str:
            try:
                return self.inner.put(key, data, mode=mode)
            except AlreadyExists:
                current = self.inner.get(key)  # did an earlier, unanswered attempt land?
                if current.data != data:
                    raise
                return current.etag

        return self._retry(create)

    def put_file(self, key: str, path: str, *, mode: Mode = PutMode.CREATE) -> str:
        with open(path, "rb") as f:
            data = f.read()
        return self.put(key, data, mode=mode)

    def local_path(self, key: str, *, etag: str | None = None) -> str | None:
        return self.inner.local_path(key, etag=etag)

    def collect_stale_locks(self) -> int:
        return self.inner.collect_stale_locks()

    def staging_dir(self) -> str | None:
        return None  # staged files are read back and re-put, so any directory will do
