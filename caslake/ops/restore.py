"""Restore: a new version whose contents equal an older one (docs/protocol.md, "Restore").

Owns resolving the target (a version, a timestamp or a tag of the handle's
branch; an expired version is ``VersionExpired``), checking that the objects
the target references and the head does not are still on storage, and the one
``restore`` commit: every file of the head removed, the target's data-file
entries and tombstone references added unchanged (no data is rewritten), the
target's schema under a new schema id when it differs.  The commit must land on
the head it was planned on (as an overwrite), so a concurrent commit -- gc's
marker included -- is a ``ConcurrentModification`` and nothing is applied.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

from caslake.core import (
    Changes,
    CommitResult,
    Snapshot,
    TableContext,
    noop_result,
    run_operation,
    write_requirements,
)
from caslake.errors import CorruptMetadata, InvalidArgument, NotFound, VersionExpired
from caslake.format.manifest import Manifest
from caslake.format.schema import TableSchema
from caslake.ops import refs

OPERATION = "restore"
HEAD_THREADS = 16


def _target(ctx: TableContext, head: Snapshot, version: int | None, timestamp: int | None,
            tag: str | None, tag_snapshot: Callable[[str], Snapshot]) -> Snapshot:
    """The snapshot to restore: exactly one of a version, a time (ms) or a tag."""
    given = [x for x in (version, timestamp, tag) if x is not None]
    if len(given) != 1:
        raise InvalidArgument("restore needs exactly one of version=, timestamp= or tag=")
    if tag is not None:
        return tag_snapshot(tag)
    oldest = head.manifest.oldest_version
    if version is not None:
        if isinstance(version, bool) or not isinstance(version, int):
            raise InvalidArgument(f"version must be an integer, not {version!r}")
        if 0 <= version < oldest:
            raise VersionExpired(f"version {version} was expired by gc; the oldest version "
                                 f"that can be restored is {oldest}", oldest_readable=oldest)
        return ctx.io.at_version(head, version)
    assert timestamp is not None
    snap = ctx.io.as_of(head, timestamp)
    if snap.version < oldest:
        raise VersionExpired(f"version {snap.version} (current at that time) was expired by "
                             f"gc; the oldest version that can be restored is {oldest}",
                             oldest_readable=oldest)
    return snap


def _check_present(ctx: TableContext, keys: Iterable[str], version: int) -> None:
    """HEAD every key (in parallel); one missing is CorruptMetadata naming it."""
    keys = sorted(keys)
    if not keys:
        return

    def present(key: str) -> str | None:
        try:
            ctx.store.head(key)
        except NotFound:
            return key
        return None

    with ThreadPoolExecutor(max_workers=min(HEAD_THREADS, len(keys))) as pool:
        missing = [k for k in pool.map(present, keys) if k is not None]
    if missing:
        raise CorruptMetadata(missing[0], f"version {version} references it but it is not on "
                              f"storage ({len(missing)} object(s) missing); it cannot be "
                              "restored")


def _schema(head: Manifest, target: Manifest) -> TableSchema | None:
    """The restored schema: the target's fields under a new schema id, the highest
    field id kept (never reused); None when the fields are the head's."""
    if target.schema.fields == head.schema.fields:
        return None
    return TableSchema(target.schema.fields, schema_id=head.schema.schema_id + 1,
                       highest_field_id=max(head.schema.last_field_id,
                                            target.schema.last_field_id))


def restore(ctx: TableContext, *, version: int | None, timestamp: int | None,
            tag: str | None, tag_snapshot: Callable[[str], Snapshot]) -> CommitResult:
    """Commit one ``restore`` version equal to the target (see the module docstring)."""
    started = ctx.meter()
    head = ctx.refresh()
    target = _target(ctx, head, version, timestamp, tag, tag_snapshot)
    tm, hm = target.manifest, head.manifest
    files = ctx.io.live_files(target)
    head_files = {f.path for f in ctx.io.live_files(head)}
    schema = _schema(hm, tm)
    if ({f.path for f in files} == head_files and schema is None
            and {t.path: dict(t.files) for t in tm.tombstones}
            == {t.path: dict(t.files) for t in hm.tombstones}):
        return noop_result(ctx, OPERATION, head, started=started, commit_id="")
    head_tombs = {t.path for t in hm.tombstones}
    _check_present(ctx, [f.path for f in files if f.path not in head_files]
                   + [t.path for t in tm.tombstones if t.path not in head_tombs], tm.version)
    if schema is not None:
        refs.ensure_format(ctx.io)  # a schema change: format 2
    params = {"version": str(tm.version), "commit_id": tm.commit_id,
              **({"tag": tag} if tag is not None else {})}
    changes = Changes(OPERATION, add_files=tuple(files), remove_all=True,
                      add_tombstones=tm.tombstones, rows_deleted=hm.totals.live_rows,
                      params=params, schema=schema)
    return run_operation(ctx, OPERATION, lambda base: changes,
                         requirements=write_requirements(OPERATION, hm.schema,
                                                         base_version=head.version),
                         started=started)
