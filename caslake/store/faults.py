"""A store wrapper that injects faults into a real backend, for tests and drills.

Each :class:`Fault` targets operation kinds and a key prefix and fires on
chosen calls.  Kinds of fault:

* ``before``: the request fails before it reaches the store (a reset, a 503);
* ``after``: the request is applied, then the reply is lost (raises anyway);
* ``crash``: raises :class:`SimulatedCrash` (not a CaslakeError) before the
  request, standing in for the process dying at that call.

Every fault that fires is counted in ``fired`` so a test can assert that the
fault it set up really happened.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from caslake.errors import CaslakeError, TransientStoreError
from caslake.store.base import GetResult, Mode, ObjectMeta, ObjectStore, PutMode


class SimulatedCrash(BaseException):
    """The process 'died' at this call.  Deliberately not an Exception subclass,
    so no ``except Exception`` in the code under test can swallow it."""


@dataclass
class Fault:
    ops: frozenset[str]  # "get", "get_ranges", "put", "head", "list", "delete"
    when: str  # "before" | "after" | "crash"
    prefix: str = ""
    calls: frozenset[int] | None = None  # 1-based indexes of matching calls; None = every call
    times: int | None = None  # stop after firing this many times
    error: Callable[[str], CaslakeError] = field(
        default=lambda key: TransientStoreError(f"injected fault on {key}", key=key))
    seen: int = 0
    fired: int = 0

    def matches(self, op: str, key: str) -> bool:
        if op not in self.ops or not key.startswith(self.prefix):
            return False
        self.seen += 1
        if self.times is not None and self.fired >= self.times:
            return False
        return self.calls is None or self.seen in self.calls


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
        fn()
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

    def head(self, key: str) -> ObjectMeta:
        return self._run("head", key, lambda: self.inner.head(key))  # type: ignore[return-value]

    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        return self._run("list", prefix,  # type: ignore[return-value]
                         lambda: iter(list(self.inner.list(prefix))))

    def delete(self, key: str) -> None:
        self._run("delete", key, lambda: self.inner.delete(key))
