"""In-process object store (``memory://name``) for tests and ephemeral tables.

Objects live in a dict guarded by one lock, so every operation is atomic and
conditional writes are exact.  Stores opened with the same ``memory://name``
in one process share a space through a module-level registry, so a table can
be closed and reopened; ``memory://`` without a name gets a fresh private
space.  ETags are quoted random tokens, new on every write.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from caslake.errors import AlreadyExists, NotFound, PreconditionFailed
from caslake.store.base import (
    COMPOSE,
    DELETE,
    GET,
    GET_RANGE,
    HEAD,
    LIST,
    PUT,
    ComposePart,
    CopyFrom,
    GetResult,
    IfMatch,
    Mode,
    ObjectMeta,
    ObjectStore,
    PutMode,
    StoreCounters,
    check_compose_parts,
    normalize_etag,
)
from caslake.store.keys import check_key, check_prefix
from caslake.store.ranges import DEFAULT_MAX_REQUEST, LOCAL_MAX_GAP, plan_ranges, slice_results

SCHEME = "memory://"


@dataclass(frozen=True)
class _Entry:
    data: bytes
    etag: str
    last_modified: datetime


@dataclass
class _Space:
    objects: dict[str, _Entry] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


_registry: dict[str, _Space] = {}
_registry_lock = threading.Lock()


def _space_for(name: str) -> _Space:
    if not name:
        return _Space()
    with _registry_lock:
        space = _registry.get(name)
        if space is None:
            space = _registry[name] = _Space()
        return space


def forget_memory_space(name: str) -> None:
    """Drop the shared space called ``name`` (its objects are freed once unused)."""
    with _registry_lock:
        _registry.pop(name, None)


def _new_etag() -> str:
    return f'"{uuid.uuid4().hex}"'


class MemoryStore(ObjectStore):
    """Dict-backed store; see the module docstring."""

    def __init__(self, uri: str = SCHEME, *, max_gap: int = LOCAL_MAX_GAP,
                 max_request: int = DEFAULT_MAX_REQUEST) -> None:
        if not uri.startswith(SCHEME):
            from caslake.errors import StoreConfigError

            raise StoreConfigError(f"not a memory:// URI: {uri!r}")
        self.name = uri[len(SCHEME):].strip("/")
        self.uri = f"{SCHEME}{self.name}"
        self.counters = StoreCounters()
        self.max_gap = max_gap
        self.max_request = max_request
        self._space = _space_for(self.name)

    def __repr__(self) -> str:
        return f"MemoryStore({self.uri!r})"

    def get(self, key: str) -> GetResult:
        check_key(key)
        with self._space.lock:
            entry = self._space.objects.get(key)
        if entry is None:
            self.counters.record(GET)
            raise NotFound(f"no object {key!r} in {self.uri}", key=key)
        self.counters.record(GET, bytes_in=len(entry.data))
        return GetResult(entry.data, entry.etag)

    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]], *,
                   etag: str | None = None) -> list[bytes]:
        check_key(key)
        requests = plan_ranges(ranges, max_gap=self.max_gap, max_request=self.max_request)
        if not requests:
            return [b""] * len(ranges)
        with self._space.lock:
            entry = self._space.objects.get(key)
        if entry is None:
            self.counters.record(GET_RANGE)
            raise NotFound(f"no object {key!r} in {self.uri}", key=key)
        if etag is not None and normalize_etag(etag) != entry.etag:
            self.counters.record(GET_RANGE)
            raise PreconditionFailed(
                f"object {key!r} changed: ETag is {entry.etag}, expected {normalize_etag(etag)}",
                key=key,
            )
        view = memoryview(entry.data)
        payloads = []
        for req in requests:
            payload = view[req.start:req.end]
            self.counters.record(GET_RANGE, bytes_in=len(payload))
            payloads.append(payload)
        return slice_results(ranges, requests, payloads, key=key)

    def put(self, key: str, data: bytes, *, mode: Mode = PutMode.OVERWRITE) -> str:
        check_key(key)
        data = bytes(data)
        self.counters.record(PUT, bytes_out=len(data))
        new = _Entry(data, _new_etag(), datetime.now(UTC))
        with self._space.lock:
            current = self._space.objects.get(key)
            if mode is PutMode.CREATE:
                if current is not None:
                    raise AlreadyExists(f"object {key!r} already exists in {self.uri}", key=key)
            elif isinstance(mode, IfMatch):
                if current is None:
                    raise NotFound(f"no object {key!r} to compare-and-swap in {self.uri}",
                                   key=key)
                if current.etag != normalize_etag(mode.etag):
                    raise PreconditionFailed(
                        f"object {key!r} changed: ETag is {current.etag}, "
                        f"expected {normalize_etag(mode.etag)}",
                        key=key,
                    )
            elif mode is not PutMode.OVERWRITE:
                raise TypeError(f"unknown put mode {mode!r}")
            self._space.objects[key] = new
        return new.etag

    def head(self, key: str) -> ObjectMeta:
        check_key(key)
        self.counters.record(HEAD)
        with self._space.lock:
            entry = self._space.objects.get(key)
        if entry is None:
            raise NotFound(f"no object {key!r} in {self.uri}", key=key)
        return ObjectMeta(key, len(entry.data), entry.etag, entry.last_modified)

    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        check_prefix(prefix)
        self.counters.record(LIST)
        with self._space.lock:
            found = [
                ObjectMeta(k, len(e.data), e.etag, e.last_modified)
                for k, e in self._space.objects.items()
                if k.startswith(prefix)
            ]
        found.sort(key=lambda m: m.key)
        return iter(found)

    def delete(self, key: str) -> None:
        check_key(key)
        self.counters.record(DELETE)
        with self._space.lock:
            self._space.objects.pop(key, None)

    def compose(self, dest: str, parts: Sequence[ComposePart]) -> str:
        """Copies ranges inside the space, atomically under its lock (see ObjectStore)."""
        check_key(dest)
        check_compose_parts(dest, parts, self.min_part_size)
        copied = uploaded = 0
        with self._space.lock:
            chunks: list[bytes] = []
            for part in parts:
                if isinstance(part, CopyFrom):
                    entry = self._space.objects.get(check_key(part.key))
                    if entry is None:
                        raise NotFound(f"compose source {part.key!r} is gone from {self.uri}",
                                       key=part.key)
                    if entry.etag != normalize_etag(part.etag):
                        raise PreconditionFailed(
                            f"compose source {part.key!r} changed: ETag is {entry.etag}, "
                            f"expected {normalize_etag(part.etag)}", key=part.key)
                    if part.end > len(entry.data):
                        from caslake.errors import InvalidArgument

                        raise InvalidArgument(f"compose copies [{part.start}, {part.end}) of "
                                              f"{part.key!r}, which has {len(entry.data)} bytes")
                    chunks.append(entry.data[part.start:part.end])
                    copied += part.size
                else:
                    chunks.append(bytes(part))
                    uploaded += len(part)
            if dest in self._space.objects:
                raise AlreadyExists(f"object {dest!r} already exists in {self.uri}", key=dest)
            new = _Entry(b"".join(chunks), _new_etag(), datetime.now(UTC))
            self._space.objects[dest] = new
        self.counters.record(COMPOSE, bytes_out=uploaded, bytes_copied=copied)
        return new.etag
