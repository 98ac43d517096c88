"""Bounded, jittered retries of transient store errors (503 SlowDown, resets, timeouts).

:class:`Retrier` holds the rules; the backends that can fail transiently
(:class:`~caslake.store.s3.S3Store`, :class:`~caslake.store.local.LocalStore`)
run every request through one, and :class:`RetryingStore` applies the same
rules on top of any store (tests put it over a
:class:`~caslake.store.faults.FaultyStore`).  The rules, which the commit
protocol relies on:

* reads, heads, lists and deletes are idempotent: retried (a delete of a
  missing key is a success, so a delete whose reply was lost is harmless);
* an unconditional put is idempotent: retried;
* a create-only put (``If-None-Match: *``) is retried.  When it meets the
  object already there, an earlier attempt -- ours, or one the client library
  re-sent on its own after a lost reply -- may have landed, so the backend
  checks whether the object is *ours by content* (``own_landed``: a SHA-256
  of the body kept in the object's metadata on S3, the bytes themselves
  elsewhere) and then returns its ETag; anything else at that key is still
  AlreadyExists.  caslake creates only unique keys, so equal content means ours;
* a compare-and-swap put (``If-Match``) is **never** retried: after a
  transient failure its outcome is unknown (it may have applied, or still
  apply late), so it raises :class:`~caslake.errors.PutOutcomeUnknown` and
  the caller settles it by reading back (docs/protocol.md, "Commit");
* precondition failures, NotFound and configuration errors are never retried.

This module must never guess an outcome from an error, and never retry
anything but :class:`~caslake.errors.TransientStoreError`.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from caslake.errors import (
    AlreadyExists,
    NotFound,
    PutOutcomeUnknown,
    TransientStoreError,
)
from caslake.store.base import (
    GetResult,
    IfMatch,
    Mode,
    MultipartUpload,
    ObjectMeta,
    ObjectStore,
    PutMode,
    StagedFile,
)

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently one store call is retried.

    ``attempts`` counts the first try.  The wait before retry ``n`` is uniform
    in ``[0, min(cap_s, base_s * 2**n)]`` ("full jitter"), so the worst case
    for the default policy is about 0.1 + 0.2 + 0.4 = 0.7 s of sleeping on top
    of the requests themselves (and of the client library's own retries).
    """

    attempts: int = 4
    base_s: float = 0.05
    cap_s: float = 1.0


DEFAULT_RETRY = RetryPolicy()


class Retrier:
    """Runs store calls under a :class:`RetryPolicy`; counts the retries it made."""

    def __init__(self, policy: RetryPolicy = DEFAULT_RETRY, *,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.policy = policy
        self._sleep = sleep
        self._lock = threading.Lock()
        self.retries = 0

    def call(self, fn: Callable[[], T]) -> T:
        """``fn()``, retried on TransientStoreError; the last one is raised."""
        attempts = max(1, self.policy.attempts)
        for attempt in range(1, attempts + 1):
            try:
                return fn()
            except TransientStoreError:
                if attempt == attempts:
                    raise
                with self._lock:
                    self.retries += 1
                self._sleep(random.uniform(0, min(self.policy.cap_s,
                                                  self.policy.base_s * 2 ** attempt)))
        raise AssertionError("unreachable")

    def put(self, key: str, mode: Mode, attempt: Callable[[], str],
            own_landed: Callable[[], str | None], *, client_resends: bool = False) -> str:
        """One logical put of ``key``: ``attempt()`` sends it once and returns the
        ETag; ``own_landed()`` returns the ETag of the object now at ``key`` if its
        content is ours, else None (NotFound counts as None).

        A create that meets an existing object asks ``own_landed`` only when an
        earlier attempt of this call failed transiently, or when the client
        library may re-send a request by itself (``client_resends``, as obstore
        does after a 5xx): otherwise the object cannot be ours.
        """
        if isinstance(mode, IfMatch):
            try:
                return attempt()
            except TransientStoreError as exc:
                raise PutOutcomeUnknown(
                    f"compare-and-swap of {key!r} may or may not have applied ({exc}); "
                    "read the object back to settle it", key=key) from exc
        if mode is not PutMode.CREATE:
            return self.call(attempt)
        maybe_ours = client_resends

        def create() -> str:
            nonlocal maybe_ours
            try:
                return attempt()
            except TransientStoreError:
                maybe_ours = True  # it may have applied: a later AlreadyExists may be ours
                raise
            except AlreadyExists:
                if not maybe_ours:
                    raise
                try:
                    etag = own_landed()
                except NotFound:
                    etag = None
                if etag is None:
                    raise
                return etag

        return self.call(create)


def same_bytes(store: ObjectStore, key: str, data: bytes) -> str | None:
    """The ETag of the object at ``key`` if its bytes are exactly ``data``, else None."""
    try:
        current = store.get(key)
    except NotFound:
        return None
    return current.etag if current.data == data else None


class RetryingStore(ObjectStore):
    """Any store, with every call run through a :class:`Retrier` (rules above)."""

    def __init__(self, inner: ObjectStore, *, attempts: int = 5, base_s: float = 0.02,
                 cap_s: float = 1.0, sleep: Callable[[float], None] = time.sleep) -> None:
        self.inner = inner
        self.uri = inner.uri
        self.counters = inner.counters
        self.retrier = Retrier(RetryPolicy(attempts, base_s, cap_s), sleep=sleep)

    @property
    def retries(self) -> int:
        return self.retrier.retries

    def get(self, key: str) -> GetResult:
        return self.retrier.call(lambda: self.inner.get(key))

    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]], *,
                   etag: str | None = None) -> list[bytes]:
        return self.retrier.call(lambda: self.inner.get_ranges(key, ranges, etag=etag))

    def head(self, key: str) -> ObjectMeta:
        return self.retrier.call(lambda: self.inner.head(key))

    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        return iter(self.retrier.call(lambda: list(self.inner.list(prefix))))

    def delete(self, key: str) -> None:
        self.retrier.call(lambda: self.inner.delete(key))

    def put(self, key: str, data: bytes, *, mode: Mode = PutMode.OVERWRITE) -> str:
        return self.retrier.put(key, mode, lambda: self.inner.put(key, data, mode=mode),
                                lambda: same_bytes(self.inner, key, data))

    def put_file(self, key: str, path: str, *, mode: Mode) -> str:
        with open(path, "rb") as f:
            data = f.read()
        return self.put(key, data, mode=mode)

    def local_path(self, key: str, *, etag: str | None = None) -> str | None:
        return self.inner.local_path(key, etag=etag)

    def collect_stale_locks(self) -> int:
        return self.inner.collect_stale_locks()

    def staging_dir(self) -> str | None:
        return None  # staged files are read back and re-put, so any directory will do

    def list_staged(self) -> Sequence[StagedFile]:
        return self.retrier.call(lambda: self.inner.list_staged())

    def delete_staged(self, staged: StagedFile, *, not_after: datetime | None = None
                      ) -> bool:
        return self.retrier.call(lambda: self.inner.delete_staged(staged, not_after=not_after))

    def list_multipart_uploads(self, prefix: str = "") -> Sequence[MultipartUpload]:
        return self.retrier.call(lambda: self.inner.list_multipart_uploads(prefix))

    def abort_multipart_upload(self, upload: MultipartUpload) -> None:
        self.retrier.call(lambda: self.inner.abort_multipart_upload(upload))
