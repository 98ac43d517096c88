"""Zero-copy clones and dropping a table: the clone protocol (docs/protocol.md, "Clones").

Owns: ``clone`` (a new table whose version 0 references a source version's
data files and tombstones where they lie, pinned by a hold record under the
source), ``drop_table`` (delete a table, then release exactly its holds), and
opening a table whose manifests reference other tables (a
:class:`~caslake.store.routing.RoutingStore`).  Never copies a data file and
never writes or deletes under another table's prefix, except the hold records
it owns.
"""

from __future__ import annotations

import re
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace

from caslake.core import (
    MetadataIO,
    RoutingStore,
    Snapshot,
    create_record,
    external_uris,
    progress_advance,
    progress_total,
    route,
)
from caslake.errors import (
    CloneAcrossProviders,
    InvalidArgument,
    NotFound,
    RefInUse,
    StoreError,
    TableAlreadyExists,
    TableNotFound,
)
from caslake.format.keys import (
    MANIFEST_PREFIX,
    POINTER_KEY,
    external_key,
    manifest_key,
    new_token,
    parse_manifest_key,
    split_external,
)
from caslake.format.manifest import (
    ExternalTable,
    Manifest,
    Pointer,
    TombstoneRef,
    Totals,
    parse_manifest,
)
from caslake.format.refs import MAIN, REFS_FORMAT_VERSION, Hold, RefTarget, hold_key
from caslake.ops import refs
from caslake.store import open_store
from caslake.store.base import ObjectStore
from caslake.store.options import StorageOptions

#: URI scheme -> the provider a clone must stay on (a plain path is local).
_PROVIDERS = {"": "local files", "file": "local files", "memory": "memory",
              "s3": "S3", "gs": "Google Cloud Storage", "az": "Azure Blob Storage",
              "abfs": "Azure Blob Storage", "abfss": "Azure Blob Storage"}
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def provider(uri: str) -> str:
    """The storage provider of ``uri`` (by its scheme): any bucket, container or
    account of one provider can hold a clone of a table on another of them."""
    match = _SCHEME.match(uri)
    scheme = match.group(1).lower() if match else ""
    return _PROVIDERS.get(scheme, scheme)


#: Providers a clone may span: this machine's files and this process's memory.
_ONE_MACHINE = frozenset({"local files", "memory"})


def check_same_provider(source_uri: str, target_uri: str) -> None:
    """Raise CloneAcrossProviders unless both URIs are on one provider (local files
    and memory count as one: both are read by this process without credentials)."""
    source, target = provider(source_uri), provider(target_uri)
    if source != target and not {source, target} <= _ONE_MACHINE:
        raise CloneAcrossProviders(source_uri, target_uri, source_provider=source,
                                   target_provider=target)


def with_externals(store: ObjectStore, manifest: Manifest,
                   storage_options: StorageOptions | None) -> ObjectStore:
    """``store`` able to read the objects of every table ``manifest`` references."""
    return route(store, external_uris(manifest), storage_options)


def _rekey(key: str, source_alias: str, aliases: Mapping[str, str]) -> str:
    """A source manifest's key as a key of the clone: the source's own objects go
    under ``source_alias``; objects the source itself references elsewhere keep
    pointing at their original owner (a clone of a clone chains to it)."""
    alias, inner = split_external(key)
    return external_key(inner, source_alias if alias is None else aliases[alias])


def clone(source_uri: str, target_uri: str, *, version: int | None = None,
          tag: str | None = None, branch: str = MAIN,
          storage_options: StorageOptions | None = None) -> Snapshot:
    """Create a table at ``target_uri`` whose version 0 is ``version`` (or tag
    ``tag``, or the head) of ``branch`` of the table at ``source_uri``, without
    copying data.  Returns the clone's version-0 snapshot.

    The target may be in another bucket (container, account) of the source's
    provider: the clone names the source by its full URI and reads its files
    where they lie, with the same ``storage_options``.  Across providers it raises
    CloneAcrossProviders, before anything is written."""
    if version is not None and tag is not None:
        raise InvalidArgument("give either version or tag, not both")
    check_same_provider(source_uri, target_uri)
    src_store = open_store(source_uri, storage_options)
    src_io = MetadataIO(src_store)
    head = src_io.latest()
    src_store = with_externals(src_store, head.manifest, storage_options)
    src_io = MetadataIO(src_store)
    if tag is not None:
        snap = refs.tag_snapshot(src_io, tag)
    else:
        bhead = refs.branch_head(src_io, branch)
        snap = bhead if version is None else src_io.at_version(bhead, version)
    target = open_store(target_uri, storage_options)
    if target.exists(POINTER_KEY):
        raise TableAlreadyExists(f"a table already exists at {target.uri}")
    m = snap.manifest
    clone_id = new_token()
    now = int(time.time() * 1000)
    # Aliases: the source's own objects, then each table the source references
    # (a clone of a clone holds the original owner of every file).
    owners: dict[str, tuple[str, str, RefTarget]] = {
        "s0": (src_store.uri, m.table_id, RefTarget(snap.version, snap.key, m.commit_id))}
    live = src_io.live_files(snap)
    # Only the tables this version still references: a hold the source released
    # (it compacted off that table) is not chained.
    used = {a for k in [*(f.path for f in live), *(t.path for t in m.tombstones)]
            if (a := split_external(k)[0]) is not None}
    aliases: dict[str, str] = {}
    for i, (a, ext) in enumerate(sorted(e for e in m.external.items() if e[0] in used),
                                 start=1):
        aliases[a] = f"s{i}"
        # The source's own hold there names the version the source references.
        held = _read_hold(open_store(ext.uri, storage_options), ext.hold)
        owners[f"s{i}"] = (ext.uri, ext.table_id, held.target)
    holds = {alias: hold_key(clone_id) for alias in owners}
    external = {alias: ExternalTable(uri, table_id, holds[alias])
                for alias, (uri, table_id, _) in owners.items()}
    # 1. Version 0 of the clone, create-only: the source version's files and
    #    tombstones, re-keyed.  It names the holds before they exist, so a drop of a
    #    clone that crashed before its pointer still finds (and releases) them.
    #    Each entry keeps everything but its key (statistics, partition), and the
    #    manifest the source's partition specs and format version (nested types,
    #    partitions): the clone is the same table.
    files = tuple(replace(f, path=_rekey(f.path, "s0", aliases)) for f in live)
    tombstones = tuple(TombstoneRef(_rekey(t.path, "s0", aliases), t.size, t.etag,
                                    {_rekey(p, "s0", aliases): n for p, n in t.files.items()})
                       for t in m.tombstones)
    commit_id = new_token()
    fv = max(REFS_FORMAT_VERSION, m.format_version)
    manifest = Manifest(
        table_id=clone_id, version=0, parent=None, commit_id=commit_id,
        created_at_ms=now, operation="create", schema=m.schema, files=files,
        tombstones=tombstones, properties=dict(m.properties),
        operation_params={"clone_of": src_store.uri, "version": str(snap.version)},
        totals=Totals(m.totals.files, m.totals.rows, m.totals.bytes, m.totals.deleted_rows),
        format_version=fv, external=external, partitioning=m.partitioning)
    key = manifest_key(0, new_token())
    target_io = MetadataIO(target)
    progress_total(len(owners) + 2)  # the manifest, a hold per owner, the pointer
    create_record(target_io.store, key, manifest.to_bytes(), what="clone manifest")
    progress_advance()
    # 2. Holds, create-only, under each owner: from here on no owner's gc deletes
    #    what the clone references.
    for alias, (uri, table_id, target_ref) in owners.items():
        owner_io = MetadataIO(open_store(uri, storage_options))
        refs.ensure_format(owner_io)
        hold = Hold(clone_id, target.uri, table_id, target_ref,
                    branch if alias == "s0" and tag is None else MAIN, now)
        create_record(owner_io.store, hold.key, hold.to_bytes(), what=f"hold on {uri}")
        progress_advance()
    # 3. The pointer: the clone exists.
    pointer = Pointer(clone_id, 0, key, commit_id, format_version=fv)
    if not create_record(target_io.store, POINTER_KEY, pointer.to_bytes(),
                              what="clone pointer"):
        _release(external, storage_options, clone_id)
        raise TableAlreadyExists(f"a table already exists at {target.uri}")
    progress_advance()
    return Snapshot(manifest, key)


def _read_hold(store: ObjectStore, key: str) -> Hold:
    from caslake.format.refs import parse_hold

    try:
        return parse_hold(store.get(key).data, key)
    except NotFound:
        raise TableNotFound(f"the hold {key} on {store.uri} is missing") from None


def _release(external: Mapping[str, ExternalTable], storage_options: StorageOptions | None,
             holder_id: str) -> None:
    for ext in external.values():
        if ext.hold == hold_key(holder_id):
            refs.delete_object(MetadataIO(open_store(ext.uri, storage_options)), ext.hold)


def release_unused_holds(store: ObjectStore, retained: Iterable[Manifest],
                         referenced: Collection[str], *, dry_run: bool = False) -> list[str]:
    """Release this table's holds on the tables none of ``referenced`` (every key a
    retained version, tag, hold or other root of this table references) is under.
    Called by gc once it has computed ``referenced``: from then on no commit can
    reference such a table again (a commit only carries forward what a retained
    version has, or adds its own objects).  Only the holds this table created
    (its own table id) are released; a missing hold is success, so the release is
    idempotent.  Returns ``"<owner uri>/<hold key>"`` of each hold released (or,
    with ``dry_run``, that would be)."""
    if not isinstance(store, RoutingStore):
        return []
    used = {alias for key in referenced if (alias := split_external(key)[0]) is not None}
    released: list[str] = []
    for m in retained:
        for alias, ext in sorted(m.external.items()):
            owner = store.external.get(alias)
            name = f"{ext.uri.rstrip('/')}/{ext.hold}"
            if (alias in used or owner is None or ext.hold != hold_key(m.table_id)
                    or name in released or not owner.exists(ext.hold)):
                continue
            if not dry_run:
                refs.delete_object(MetadataIO(owner), ext.hold)
            released.append(name)
    return released


def _last_manifest(store: ObjectStore) -> Manifest | None:
    """The newest manifest on storage (for a drop whose pointer is already gone)."""
    keys = [(v, m.key) for m in store.list(MANIFEST_PREFIX)
            if (v := (parse_manifest_key(m.key) or (None,))[0]) is not None]
    if not keys:
        return None
    _, key = max(keys)
    return parse_manifest(store.get(key).data, key)


def drop_table(uri: str, *, storage_options: StorageOptions | None = None) -> None:
    """Delete the table at ``uri`` and release the holds it has on other tables.
    Refused (RefInUse, naming them) while clones of it still hold its objects.

    Order: the pointer first (the table is gone for readers and writers), then
    the holds (exactly this table's, found in its manifests), then every other
    object.  Idempotent: a drop that crashed half way is finished by another."""
    store = open_store(uri, storage_options)
    io = MetadataIO(store)
    try:
        manifest: Manifest | None = io.latest().manifest
    except (TableNotFound, StoreError):
        manifest = _last_manifest(store)
    if manifest is None and not any(True for _ in store.list("")):
        raise TableNotFound(f"no table at {store.uri}")
    holders = refs.list_holds(io)
    if holders:
        raise RefInUse("table", store.uri, [f"clone {h.holder_uri} (hold {h.holder_id})"
                                            for h in holders])
    refs.delete_object(io, POINTER_KEY)
    if manifest is not None:
        _release(manifest.external, storage_options, manifest.table_id)
    metas = list(store.list(""))
    for meta in sorted(metas, key=lambda m: m.key.startswith(MANIFEST_PREFIX)):
        refs.delete_object(io, meta.key)  # manifests last: a rerun still finds the holds
