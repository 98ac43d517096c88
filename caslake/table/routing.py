"""A table's store plus the stores of the tables its clone manifests reference.

Owns: resolving ``data/x=<alias>/...`` and ``tombstone/x=<alias>/...`` keys
(docs/format.md, "Clones") to the referenced table's store, for reads only.
Every write, delete and listing goes to the table's own store: a clone can
never modify or delete an object of the table it was cloned from.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime

from caslake.errors import InvalidArgument
from caslake.format.keys import split_external
from caslake.store.base import (
    GetResult,
    Mode,
    MultipartUpload,
    ObjectMeta,
    ObjectStore,
    PutMode,
    StagedFile,
)


class RoutingStore(ObjectStore):
    def __init__(self, own: ObjectStore, external: Mapping[str, ObjectStore]) -> None:
        self.own = own
        self.external = dict(external)
        self.uri = own.uri
        self.counters = own.counters

    def _route(self, key: str) -> tuple[ObjectStore, str]:
        alias, inner = split_external(key)
        if alias is None:
            return self.own, key
        store = self.external.get(alias)
        if store is None:
            raise InvalidArgument(f"key {key!r} names external table {alias!r}, which this "
                                  "table does not reference")
        return store, inner

    def _own_only(self, key: str) -> str:
        if split_external(key)[0] is not None:
            raise InvalidArgument(f"{key!r} belongs to another table: a clone never writes "
                                  "or deletes it")
        return key

    def get(self, key: str) -> GetResult:
        store, inner = self._route(key)
        return store.get(inner)

    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]], *,
                   etag: str | None = None) -> list[bytes]:
        store, inner = self._route(key)
        return store.get_ranges(inner, ranges, etag=etag)

    def head(self, key: str) -> ObjectMeta:
        store, inner = self._route(key)
        meta = store.head(inner)
        return ObjectMeta(key, meta.size, meta.etag, meta.last_modified)

    def local_path(self, key: str, *, etag: str | None = None) -> str | None:
        store, inner = self._route(key)
        return store.local_path(inner, etag=etag)

    def put(self, key: str, data: bytes, *, mode: Mode = PutMode.OVERWRITE) -> str:
        return self.own.put(self._own_only(key), data, mode=mode)

    def put_file(self, key: str, path: str, *, mode: Mode = PutMode.CREATE) -> str:
        return self.own.put_file(self._own_only(key), path, mode=mode)

    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        return self.own.list(prefix)

    def delete(self, key: str) -> None:
        self.own.delete(self._own_only(key))

    def staging_dir(self) -> str | None:
        return self.own.staging_dir()

    # gc's leftovers (staging files, unfinished uploads) are the own store's only.
    def list_staged(self) -> Sequence[StagedFile]:
        return self.own.list_staged()

    def delete_staged(self, staged: StagedFile, *, not_after: datetime | None = None
                      ) -> bool:
        return self.own.delete_staged(staged, not_after=not_after)

    def list_multipart_uploads(self, prefix: str = "") -> Sequence[MultipartUpload]:
        return self.own.list_multipart_uploads(prefix)

    def abort_multipart_upload(self, upload: MultipartUpload) -> None:
        self.own.abort_multipart_upload(upload)
