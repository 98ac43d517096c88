"""The storage contract.  This package is the only code that talks to storage.

Every backend implements :class:`ObjectStore` over keys relative to a root
(the table URI).  The contract, which the conformance suite checks for every
backend:

1. **Atomic visibility.**  A ``put`` is visible whole or not at all; a reader
   never sees a partial object.
2. **Mutual exclusion of create.**  Of any number of concurrent
   ``put(key, mode=CREATE)`` calls on one key, exactly one succeeds; the
   others raise :class:`~caslake.errors.AlreadyExists`.
3. **Compare-and-swap.**  Of any number of concurrent
   ``put(key, mode=IfMatch(e))`` calls, at most one succeeds, and only if the
   current ETag is ``e``; the others raise
   :class:`~caslake.errors.PreconditionFailed`.  On a missing key it raises
   :class:`~caslake.errors.NotFound`.
4. **ETags change on every write** and are returned by ``get``/``head``/``put``
   in one canonical form (quoted, as S3 sends them).
5. **Pinned reads.**  ``get_ranges(..., etag=e)`` returns bytes of the object
   whose ETag is ``e`` or raises PreconditionFailed; never a mix of versions.
6. **Read-after-write.**  A successful ``put`` is visible to every later
   ``get``/``head``/``list`` (S3 is strongly consistent since 2020).

Backends never retry a precondition failure; transient errors are retried by
the backend with bounded, jittered backoff (:mod:`caslake.store.retry`) before
being raised as :class:`~caslake.errors.TransientStoreError` -- except for a
compare-and-swap, which is never retried: after a transient failure its
outcome is unknown and it raises :class:`~caslake.errors.PutOutcomeUnknown`.
A create-only put that was retried, or that the client library re-sent by
itself, and then finds its *own* object at the key (same content) succeeds.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum


class PutMode(Enum):
    CREATE = "create"  # If-None-Match: *
    OVERWRITE = "overwrite"  # unconditional


@dataclass(frozen=True)
class IfMatch:
    """Put mode for compare-and-swap: succeed only if the current ETag is ``etag``."""

    etag: str


Mode = PutMode | IfMatch


@dataclass(frozen=True)
class ObjectMeta:
    key: str
    size: int
    etag: str
    last_modified: datetime | None = None


@dataclass(frozen=True)
class GetResult:
    data: bytes
    etag: str

    @property
    def size(self) -> int:
        return len(self.data)


def normalize_etag(etag: str) -> str:
    """Canonical ETag form: with surrounding double quotes, as S3 returns it."""
    etag = etag.strip()
    if etag.startswith("W/"):
        etag = etag[2:]
    if not (etag.startswith('"') and etag.endswith('"') and len(etag) >= 2):
        etag = f'"{etag.strip(chr(34))}"'
    return etag


@dataclass
class StoreCounters:
    """Requests by kind and bytes moved, for one store instance.  Thread-safe."""

    requests: dict[str, int] = field(default_factory=dict)
    bytes_in: int = 0  # downloaded
    bytes_out: int = 0  # uploaded
    bytes_copied: int = 0  # copied inside the store (server-side), never crossing the wire
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def record(self, kind: str, *, bytes_in: int = 0, bytes_out: int = 0, count: int = 1,
               bytes_copied: int = 0) -> None:
        with self._lock:
            self.requests[kind] = self.requests.get(kind, 0) + count
            self.bytes_in += bytes_in
            self.bytes_out += bytes_out
            self.bytes_copied += bytes_copied

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            out = dict(self.requests)
            out["bytes_in"] = self.bytes_in
            out["bytes_out"] = self.bytes_out
            out["bytes_copied"] = self.bytes_copied
            return out

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.bytes_in = 0
            self.bytes_out = 0
            self.bytes_copied = 0

    def count(self, kind: str) -> int:
        with self._lock:
            return self.requests.get(kind, 0)


# Request kinds recorded in StoreCounters.requests.  A ranged GET counts once
# per HTTP request actually issued (after coalescing).
GET = "get"
GET_RANGE = "get_range"
PUT = "put"
HEAD = "head"
LIST = "list"
DELETE = "delete"
# compose (multipart assembly); S3 counts each multipart call, other stores one COMPOSE.
COMPOSE = "compose"
MPU_CREATE = "mpu_create"
MPU_UPLOAD_PART = "mpu_upload_part"
MPU_COPY_PART = "mpu_copy_part"
MPU_COMPLETE = "mpu_complete"
MPU_ABORT = "mpu_abort"
MPU_LIST = "mpu_list"

#: S3's minimum size of every part of a multipart upload but the last.
MIN_PART_SIZE = 5 * 1024 * 1024


@dataclass(frozen=True)
class CopyFrom:
    """A compose part: bytes ``[start, end)`` of the object ``key`` whose ETag is ``etag``."""

    key: str
    start: int
    end: int
    etag: str

    @property
    def size(self) -> int:
        return self.end - self.start


#: A compose part: a range copied inside the store, or bytes sent by the client.
ComposePart = CopyFrom | bytes


@dataclass(frozen=True)
class MultipartUpload:
    """An unfinished multipart upload (invisible to :meth:`ObjectStore.list`)."""

    key: str
    upload_id: str
    initiated: datetime | None


@dataclass(frozen=True)
class StagedFile:
    """A file a writer built in the store's hidden staging area before publishing it
    (the local store's ``.caslake-tmp/``): invisible to :meth:`ObjectStore.list`, and
    after a crash full of rows.  ``name`` is relative to the store root."""

    name: str
    size: int
    last_modified: datetime | None


def part_size(part: ComposePart) -> int:
    return part.size if isinstance(part, CopyFrom) else len(part)


def check_compose_parts(dest: str, parts: Sequence[ComposePart], min_part_size: int) -> None:
    """Every backend enforces S3's rules, so a plan that works on one works on all."""
    from caslake.errors import InvalidArgument

    if not parts:
        raise InvalidArgument(f"compose of {dest!r} needs at least one part")
    for i, part in enumerate(parts):
        if isinstance(part, CopyFrom) and not 0 <= part.start < part.end:
            raise InvalidArgument(f"compose of {dest!r}: part {i + 1} copies an empty or "
                                  f"negative range [{part.start}, {part.end})")
        if i < len(parts) - 1 and part_size(part) < min_part_size:
            raise InvalidArgument(
                f"compose of {dest!r}: part {i + 1} of {len(parts)} is {part_size(part)} "
                f"bytes; every part but the last must be at least {min_part_size}")


class ObjectStore(ABC):
    """Keys are '/'-separated and relative to the store's root URI."""

    uri: str
    counters: StoreCounters

    @abstractmethod
    def get(self, key: str) -> GetResult:
        """The whole object and its ETag.  Raises NotFound."""

    @abstractmethod
    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]], *,
                   etag: str | None = None) -> list[bytes]:
        """Bytes ``[start, end)`` for each range, in order.

        Nearby ranges are coalesced into fewer requests and requests run in
        parallel.  With ``etag`` every request carries ``If-Match`` and a
        changed object raises PreconditionFailed.
        """

    @abstractmethod
    def put(self, key: str, data: bytes, *, mode: Mode = PutMode.OVERWRITE) -> str:
        """Write the object; return its new ETag.

        CREATE raises AlreadyExists if the key exists.  IfMatch raises
        PreconditionFailed if the ETag differs and NotFound if the key is missing.
        """

    @abstractmethod
    def head(self, key: str) -> ObjectMeta:
        """Size and ETag.  Raises NotFound."""

    @abstractmethod
    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        """Every object whose key starts with ``prefix``, in no promised order."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove the object.  Deleting a missing key is not an error."""

    def local_path(self, key: str, *, etag: str | None = None) -> str | None:
        """A filesystem path holding the object's bytes, when the store is local,
        so readers can hand it to a native reader; None otherwise.  With ``etag``
        it raises PreconditionFailed if the object changed, NotFound if missing.
        Counts nothing: callers record the reads they make."""
        return None

    def collect_stale_locks(self) -> int:
        """Remove bookkeeping lock files no operation is using; return how many.
        Only stores that keep such files (the local one) have any."""
        return 0

    def staging_dir(self) -> str | None:
        """A local directory where callers should build files meant for
        :meth:`put_file`, or None for the system temp directory."""
        return None

    def put_file(self, key: str, path: str, *, mode: Mode) -> str:
        """Upload a finished local file (which the store may consume: callers
        must not reuse ``path`` afterwards).  Same contract as :meth:`put`."""
        with open(path, "rb") as f:
            data = f.read()
        return self.put(key, data, mode=mode)

    # --- compose (multipart assembly) ---------------------------------------------

    #: The smallest non-final part :meth:`compose` accepts (S3's rule, on every backend).
    min_part_size: int = MIN_PART_SIZE

    def compose(self, dest: str, parts: Sequence[ComposePart]) -> str:
        """Create ``dest`` (create-only) as the concatenation of ``parts``; return its ETag.

        A :class:`CopyFrom` part is copied inside the store when the backend can
        (S3 UploadPartCopy; a local file copy), counted in ``counters.bytes_copied``;
        bytes parts are uploaded, counted in ``bytes_out``.  Every part but the last
        must be at least :attr:`min_part_size` bytes (InvalidArgument otherwise).
        Raises PreconditionFailed if a source's ETag is no longer the one named (the
        new object is then not left behind), NotFound if a source is gone,
        AlreadyExists if ``dest`` exists, and
        :class:`~caslake.errors.StoreCapabilityUnsupported` if the backend cannot
        copy ranges (the caller uploads the whole object instead).  ``dest`` is
        visible whole or not at all.

        This default assembles the object on the client: ranges are downloaded
        (pinned to their ETag) and the whole object is put create-only.
        """
        check_compose_parts(dest, parts, self.min_part_size)
        chunks = [self.get_ranges(p.key, [(p.start, p.end)], etag=p.etag)[0]
                  if isinstance(p, CopyFrom) else p for p in parts]
        return self.put(dest, b"".join(chunks), mode=PutMode.CREATE)

    @property
    def range_copy(self) -> str:
        """How :meth:`compose` gets a :class:`CopyFrom` part's bytes: ``"client"``
        (downloaded and uploaded again: this default), ``"server"`` (copied inside
        the store: a backend that overrides :meth:`compose`) or ``"none"`` (it cannot
        copy ranges, so a caller such as purge rewrites the whole object).  Cost
        estimates read it; :meth:`compose` itself decides nothing by it."""
        return "client" if type(self).compose is ObjectStore.compose else "server"

    def prepare_compose(self) -> None:
        """A hint that :meth:`compose` will be called soon: a backend may set up what it
        needs for it (S3: the multipart client) in the background, while the caller
        is still downloading and encoding.  Never required, never fails."""
        return  # nothing to prepare: the default compose needs no setup

    def list_multipart_uploads(self, prefix: str = "") -> Sequence[MultipartUpload]:
        """Unfinished multipart uploads under ``prefix``; [] on stores without them."""
        return []

    def list_staged(self) -> Sequence[StagedFile]:
        """Files in the store's hidden staging area (writers' work in progress, or a
        crashed writer's leftovers); [] on stores that stage nowhere under the root."""
        return []

    def delete_staged(self, staged: StagedFile, *, not_after: datetime | None = None
                      ) -> bool:
        """Delete one staging file, unless it was written to after ``not_after`` (checked
        right before the unlink); return whether it was deleted.  Deleting a missing
        file is not an error.  Never removes a published object."""
        _ = staged, not_after
        return False

    def abort_multipart_upload(self, upload: MultipartUpload) -> None:
        """Abort one unfinished upload, freeing its parts.  Aborting a finished or
        unknown upload is not an error.  Stores without multipart uploads have none."""
        _ = upload

    def exists(self, key: str) -> bool:
        from caslake.errors import NotFound

        try:
            self.head(key)
        except NotFound:
            return False
        return True
