"""A table's store plus the stores of the tables its clone manifests reference.

Owns: resolving ``data/x=<alias>/...`` and ``tombstone/x=<alias>/...`` keys
(docs/format.md, "Clones") to the referenced table's store, for reads only.
Every write, delete and listing goes to the table's own store: a clone can
never modify or delete an object of the table it was cloned from.

:func:`route` builds the store every reader of a clone uses (``Table.open``,
Spark tasks, which get the plain ``alias -> URI`` map of :func:`external_uris`);
:func:`resolve` names an object's real store and key, for readers outside
caslake (Spark's Parquet reader, the Iceberg and Delta exports) that must be
handed the real location of a source's file; :func:`key_at` is its inverse, for
gc reading what an export names.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime

from caslake.errors import InvalidArgument
from caslake.format.keys import external_key, split_external
from caslake.format.manifest import Manifest
from caslake.store import open_store
from caslake.store.base import (
    GetResult,
    Mode,
    MultipartUpload,
    ObjectMeta,
    ObjectStore,
    PutMode,
    StagedFile,
)
from caslake.store.options import StorageOptions


class RoutingStore(ObjectStore):
    def __init__(self, own: ObjectStore, external: Mapping[str, ObjectStore]) -> None:
        self.own = own
        self.external = dict(external)
        self.uri = own.uri
        self.counters = own.counters

    def resolve(self, key: str) -> tuple[ObjectStore, str]:
        """The store that holds ``key`` and its key there."""
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
        store, inner = self.resolve(key)
        return store.get(inner)

    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]], *,
                   etag: str | None = None) -> list[bytes]:
        store, inner = self.resolve(key)
        return store.get_ranges(inner, ranges, etag=etag)

    def head(self, key: str) -> ObjectMeta:
        store, inner = self.resolve(key)
        meta = store.head(inner)
        return ObjectMeta(key, meta.size, meta.etag, meta.last_modified)

    def local_path(self, key: str, *, etag: str | None = None) -> str | None:
        store, inner = self.resolve(key)
        return store.local_path(inner, etag=etag)

    def put(self, key: str, data: bytes, *, mode: Mode = PutMode.OVERWRITE) -> str:
        return self.own.put(self._own_only(key), data, mode=mode)

    def put_file(self, key: str, path: str, *, mode: Mode) -> str:
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


def external_uris(manifest: Manifest) -> dict[str, str]:
    """``alias -> URI`` of every table ``manifest`` references (picklable)."""
    return {alias: ext.uri for alias, ext in manifest.external.items()}


def route(store: ObjectStore, external: Mapping[str, str],
          storage_options: StorageOptions | None) -> ObjectStore:
    """``store`` able to read the objects of the tables ``external`` (``alias ->
    URI``, see :func:`external_uris`) names; ``store`` itself when it names none.
    The referenced tables are never clones' aliases themselves: a clone of a clone
    references every file's original owner directly."""
    if not external:
        return store
    return RoutingStore(store, {alias: open_store(uri, storage_options)
                                for alias, uri in external.items()})


def resolve(store: ObjectStore, key: str) -> tuple[ObjectStore, str]:
    """The store that holds object ``key`` of ``store``'s table, and its key there:
    the referenced table's store for a clone's aliased key, else ``store`` and
    ``key`` themselves."""
    if isinstance(store, RoutingStore):
        return store.resolve(key)
    return store, key


def key_at(store: ObjectStore, location: str) -> str | None:
    """The key, in ``store``'s table, of the object at ``location`` (an absolute URI,
    or the absolute path of a local one, as :func:`resolve`'s store and key make
    it): a key under the table's root, or a clone's aliased key for an object of a
    table it references.  None for a location under none of them."""
    owners: list[tuple[str, str | None]] = [(store.uri, None)]
    if isinstance(store, RoutingStore):
        owners = [(store.own.uri, None)] + [(s.uri, a) for a, s in store.external.items()]
    prefixes = []
    for uri, alias in owners:
        root = uri.rstrip("/")
        prefixes.append((root + "/", alias))
        if root.startswith("file:///"):
            prefixes.append((root[len("file://"):] + "/", alias))
    for prefix, alias in sorted(prefixes, key=lambda p: -len(p[0])):  # the nearest root
        if location.startswith(prefix):
            inner = location[len(prefix):]
            return inner if alias is None else external_key(inner, alias)
    return None
