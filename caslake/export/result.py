"""What an export wrote: the result record and the one writer every exporter uses.

Owns counting the objects and bytes an export puts (the export-cost figure)
and the put modes: new objects are create-only (a fresh key each time), only
the publication objects (``v<N>.metadata.json``, ``version-hint.text``) are
overwritten.  A publication put (those two, and Delta's create-only commit
object) whose reply is lost is settled by reading the object back, never
guessed from the error.  Never writes under ``data/``, ``manifest/`` or
``tombstone/``.
"""

from __future__ import annotations

from dataclasses import dataclass

from caslake.core import create_record, put_new, record_holds
from caslake.errors import (
    AlreadyExists,
    CommitOutcomeUnknown,
    InvalidArgument,
    NotFound,
    PreconditionFailed,
    StoreError,
)
from caslake.format.keys import (
    DATA_PREFIX,
    MANIFEST_PREFIX,
    POINTER_KEY,
    SEGMENT_PREFIX,
    TOMBSTONE_PREFIX,
)
from caslake.store.base import ObjectStore, PutMode

_CASLAKE_KEYS = (DATA_PREFIX, MANIFEST_PREFIX, SEGMENT_PREFIX, TOMBSTONE_PREFIX)
PUBLISH_ATTEMPTS = 3


@dataclass(frozen=True)
class ExportResult:
    """``location``: the Iceberg metadata file, or the Delta table root;
    ``checkpoint``: the Delta version this export also checkpointed, if any."""

    format: str
    version: int
    location: str
    noop: bool = False
    objects_written: int = 0
    bytes_written: int = 0
    manifests_reused: int = 0
    manifests_written: int = 0
    checkpoint: int | None = None


class Writer:
    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.objects = 0
        self.bytes = 0

    def put(self, key: str, data: bytes, *, overwrite: bool = False) -> str:
        self._check(key)
        etag = (self.store.put(key, data, mode=PutMode.OVERWRITE) if overwrite
                else put_new(self.store, key, data))
        self._count(data)
        return etag

    @staticmethod
    def _check(key: str) -> None:
        if key == POINTER_KEY or key.startswith(_CASLAKE_KEYS):
            raise InvalidArgument(f"an export may not write caslake's own key {key!r}")

    def publish(self, key: str, data: bytes, *, overwrite: bool = False,
                commit_id: str = "") -> None:
        """Put a publication object.  A failure whose outcome is unclear (a lost
        reply, a reset) is settled by reading ``key`` back: our bytes there mean it
        is published; otherwise the same put is sent again (the same bytes, so a
        late copy of an earlier try changes nothing).  Raises AlreadyExists when a
        create-only ``key`` holds another exporter's object, CommitOutcomeUnknown
        when it stays unclear."""
        if not overwrite:
            self._check(key)
            if create_record(self.store, key, data, what=f"the export's {key!r}",
                             attempts=PUBLISH_ATTEMPTS, commit_id=commit_id):
                self._count(data)
            elif not record_holds(self.store, key, data):  # equal: this export, published
                raise AlreadyExists(f"the export's {key!r} holds another exporter's object",
                                    key=key)
            return
        for attempt in range(1, PUBLISH_ATTEMPTS + 1):
            try:
                self.put(key, data, overwrite=True)
                return
            except (NotFound, PreconditionFailed):
                raise
            except StoreError as exc:
                if record_holds(self.store, key, data):
                    self._count(data)
                    return
                if attempt == PUBLISH_ATTEMPTS:
                    raise CommitOutcomeUnknown(
                        f"the export's {key!r} could not be written ({exc}) and a late "
                        "copy may still land; export again (a no-op once it has)",
                        commit_id=commit_id) from exc

    def _count(self, data: bytes) -> None:
        self.objects += 1
        self.bytes += len(data)

    def result(self, fmt: str, version: int, location: str, *, reused: int = 0,
               written: int = 0) -> ExportResult:
        return ExportResult(fmt, version, location, objects_written=self.objects,
                            bytes_written=self.bytes, manifests_reused=reused,
                            manifests_written=written)
