"""A store wrapper that injects faults into a real backend, for tests and drills.

Each :class:`Fault` targets operation kinds and a key prefix, and fires on
chosen calls (by index), on a random share of calls (seeded), or both, up to
``times`` times.  Kinds (``when``):

* ``"before"``: the request fails before it reaches the store -- a reset or
  a 503 SlowDown (``error``; a TransientStoreError by default);
* ``"after"``: the request is applied, then the reply is lost (raises anyway);
* ``"latency"``: the request is delayed by ``latency_s`` ± ``jitter_s``, then runs;
* ``"truncate"``: a GET applies but its body comes back cut short;
* ``"crash"``: raises :class:`SimulatedCrash` (not a CaslakeError) before the
  request, standing in for the process dying at that call.

Every fault that fires is counted (``Fault.fired``, ``FaultyStore.fired_by_kind``)
so a test can assert that the fault it set up really happened.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from caslake.errors import CaslakeError, TransientStoreError
from caslake.store.base import (
    ComposePart,
    GetResult,
    Mode,
    MultipartUpload,
    ObjectMeta,
    ObjectStore,
    PutMode,
    StagedFile,
)

ALL_OPS = frozenset({"get", "get_ranges", "put", "head", "list", "delete", "compose",
                     "list_multipart_uploads", "abort_multipart_upload", "list_staged",
                     "delete_staged"})


class SimulatedCrash(BaseException):
    """The process 'died' at this call.  Deliberately not an Exception subclass,
    so no ``except Exception`` in the code under test can swallow it."""


def reset_error(key: str) -> CaslakeError:
    return TransientStoreError(f"injected connection reset on {key}", key=key)


def slowdown_error(key: str) -> CaslakeError:
    return TransientStoreError(f"injected 503 SlowDown on {key}", key=key)


@dataclass
class Fault:
    ops: frozenset[str]  # see ALL_OPS
    when: str  # "before" | "after" | "latency" | "truncate" | "crash"
    prefix: str = ""
    calls: frozenset[int] | None = None  # 1-based indexes of matching calls; None = any
    times: int | None = None  # stop after firing this many times
    probability: float = 1.0  # share of eligible calls that fire (seeded below)
    error: Callable[[str], CaslakeError] = reset_error
    latency_s: float = 0.0
    jitter_s: float = 0.0
    seed: int = 0
    seen: int = 0
    fired: int = 0
    _rng: random.Random = field(default_factory=random.Random, repr=False)

    def __post_init__(self) -> None:
        self._rng.seed(self.seed)

    def matches(self, op: str, key: str) -> bool:
        if op not in self.ops or not key.startswith(self.prefix):
            return False
        self.seen += 1
        if self.times is not None and self.fired >= self.times:
            return False
        if self.calls is not None and self.seen not in self.calls:
            return False
        return self.probability >= 1.0 or self._rng.random() < self.probability


class FaultyStore(ObjectStore):
    def __init__(self, inner: ObjectStore, faults: Sequence[Fault] = ()) -> None:
        self.inner = inner
        self.uri = inner.uri
        self.counters = inner.counters
        self.faults = list(faults)
        self.calls = 0
        self._lock = threading.Lock()

    @property
    def fired(self) -> int:
        return sum(f.fired for f in self.faults)

    def fired_by_kind(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for f in self.faults:
            out[f.when] = out.get(f.when, 0) + f.fired
        return out

    def _pick(self, op: str, key: str) -> Fault | None:
        with self._lock:
            self.calls += 1
            for f in self.faults:
                if f.matches(op, key):
                    f.fired += 1
                    return f
        return None

    def _run(self, op: str, key: str, fn: Callable[[], object]) -> object:
        fault = self._pick(op, key)
        if fault is None:
            return fn()
        if fault.when == "crash":
            raise SimulatedCrash(f"crash at {op} {key}")
        if fault.when == "before":
            raise fault.error(key)
        if fault.when == "latency":
            time.sleep(max(0.0, fault.latency_s + fault._rng.uniform(-fault.jitter_s,
                                                                      fault.jitter_s)))
            return fn()
        result = fn()
        if fault.when == "truncate":
            return _truncated(result)
        raise fault.error(key)

    def get(self, key: str) -> GetResult:
        return self._run("get", key, lambda: self.inner.get(key))  # type: ignore[return-value]

    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]], *,
                   etag: str | None = None) -> list[bytes]:
        return self._run("get_ranges", key,  # type: ignore[return-value]
                         lambda: self.inner.get_ranges(key, ranges, etag=etag))

    def put(self, key: str, data: bytes, *, mode: Mode = PutMode.OVERWRITE) -> str:
        return self._run("put", key,  # type: ignore[return-value]
                         lambda: self.inner.put(key, data, mode=mode))

    def put_file(self, key: str, path: str, *, mode: Mode) -> str:
        return self._run("put", key,  # type: ignore[return-value]
                         lambda: self.inner.put_file(key, path, mode=mode))

    def head(self, key: str) -> ObjectMeta:
        return self._run("head", key, lambda: self.inner.head(key))  # type: ignore[return-value]

    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        return self._run("list", prefix,  # type: ignore[return-value]
                         lambda: iter(list(self.inner.list(prefix))))

    def delete(self, key: str) -> None:
        self._run("delete", key, lambda: self.inner.delete(key))

    @property  # type: ignore[override]
    def min_part_size(self) -> int:
        """The wrapped store's rule, so plans made through the wrapper fit it."""
        return self.inner.min_part_size

    @min_part_size.setter
    def min_part_size(self, value: int) -> None:
        self.inner.min_part_size = value

    def compose(self, dest: str, parts: Sequence[ComposePart]) -> str:
        return self._run("compose", dest,  # type: ignore[return-value]
                         lambda: self.inner.compose(dest, parts))

    @property
    def range_copy(self) -> str:
        return self.inner.range_copy

    def prepare_compose(self) -> None:
        self.inner.prepare_compose()  # a hint: no request, nothing to inject

    def list_multipart_uploads(self, prefix: str = "") -> Sequence[MultipartUpload]:
        return self._run("list_multipart_uploads", prefix,  # type: ignore[return-value]
                         lambda: self.inner.list_multipart_uploads(prefix))

    def abort_multipart_upload(self, upload: MultipartUpload) -> None:
        self._run("abort_multipart_upload", upload.key,
                  lambda: self.inner.abort_multipart_upload(upload))

    def list_staged(self) -> Sequence[StagedFile]:
        return self._run("list_staged", "",  # type: ignore[return-value]
                         lambda: self.inner.list_staged())

    def delete_staged(self, staged: StagedFile, *, not_after: datetime | None = None
                      ) -> bool:
        return self._run("delete_staged", staged.name,  # type: ignore[return-value]
                         lambda: self.inner.delete_staged(staged, not_after=not_after))

    def local_path(self, key: str, *, etag: str | None = None) -> str | None:
        # Reads through a local path would bypass fault injection: force store reads.
        return None

    def collect_stale_locks(self) -> int:
        return self.inner.collect_stale_locks()

    def staging_dir(self) -> str | None:
        return self.inner.staging_dir()


def _truncated(result: object) -> object:
    if isinstance(result, GetResult):
        return GetResult(result.data[: len(result.data) // 2], result.etag)
    if isinstance(result, list) and result and isinstance(result[0], bytes):
        return [b[: len(b) // 2] for b in result]
    return result
