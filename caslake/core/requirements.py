"""Commit requirements: what must still hold on the base version a commit lands on.

Each requirement is a small frozen value whose ``validate(base, io)`` raises
the typed conflict that tells the caller what to do next (``caslake.errors``):

* :class:`BaseVersionIs` -- the commit is only valid on exactly the version it
  was planned on (overwrite) -> :class:`ConcurrentModification`;
* :class:`SchemaUnchanged` -- files were written with this schema ->
  :class:`ConcurrentModification`;
* :class:`FilesUntouchedSince` -- no commit since the plan removed these files or
  added a tombstone on them (compaction; deletes re-plan instead) ->
  :class:`ConcurrentModification`;
* :class:`ReadSetUnchanged` -- optimistic read validation: nothing a change
  computed from ``read_version`` could match changed since ->
  :class:`ReadValidationFailed`;
* :class:`TxnNotApplied` -- idempotent writes: the ``(app id, version)`` has not
  landed -> :class:`TxnAlreadyApplied` (the commit loop makes it a no-op);
* :class:`RefAtVersion` -- another ref's pointer is at a given version ->
  :class:`ConcurrentModification`.
* :class:`UploadsNotCollected` -- the operation began its uploads after every
  object gc has collected (gc's fence, ``Manifest.collected_until_ms``) ->
  :class:`WriterOutlivedGc` (the runner applies it to every commit that adds
  objects).

The commit loop (:func:`caslake.core.commit.commit_with_retry`) validates a
plan's requirements against every base it tries, before ``prepare`` runs, so a
commit is never applied on a base one of them rejects.  This module never
writes and never decides what to do about a conflict.
"""

from __future__ import annotations

from dataclasses import dataclass

from caslake.core.changes import Requirement, txn_applied
from caslake.core.conflicts import Condition, changed_since, touched_since
from caslake.core.metadata_io import MetadataIO, Snapshot
from caslake.errors import (
    ConcurrentModification,
    InvalidArgument,
    ReadValidationFailed,
    TxnAlreadyApplied,
    WriterOutlivedGc,
)
from caslake.format.schema import STRUCT, Field, TableSchema


@dataclass(frozen=True)
class BaseVersionIs:
    version: int
    operation: str

    def validate(self, base: Snapshot, io: MetadataIO) -> None:
        if base.version != self.version:
            raise ConcurrentModification(
                f"{self.operation} was planned against version {self.version} but the "
                f"table is now at version {base.version}",
                help=f"re-run the {self.operation} so it sees the rows committed since")


@dataclass(frozen=True)
class SchemaUnchanged:
    """The base's schema is the one the commit planned with -- or, unless ``exact``,
    that schema plus added nullable columns only: files written with the planned
    schema read under it by field id (the new columns as NULL), so an append
    rebases over a concurrent ``add_column``.  Any other change is a conflict."""

    schema: TableSchema
    exact: bool = False

    def validate(self, base: Snapshot, io: MetadataIO) -> None:
        now = base.manifest.schema
        if now == self.schema:
            return
        if not self.exact and _only_added_nullable(self.schema, now):
            return
        raise ConcurrentModification("the table schema changed during the write",
                                     help="re-run the write against the new schema")


def _only_added_nullable(planned: TableSchema, now: TableSchema) -> bool:
    """Whether ``now`` is ``planned`` plus optional columns and optional struct fields
    at any depth (what ``add_column`` does, by any path)."""
    return _extends(planned.fields, now.fields)


def _extends(planned: tuple[Field, ...], now: tuple[Field, ...]) -> bool:
    by_id = {f.id: f for f in now}
    if any(f.id not in by_id or not _field_extends(f, by_id[f.id]) for f in planned):
        return False
    ids = {f.id for f in planned}
    return all(f.nullable for f in now if f.id not in ids)


def _field_extends(planned: Field, now: Field) -> bool:
    if planned == now:
        return True
    if (planned.name, planned.type, planned.nullable) != (now.name, now.type, now.nullable):
        return False
    if planned.type != STRUCT:  # a list's element, a map's key and value: by position
        return len(planned.children) == len(now.children) and all(
            _field_extends(a, b) for a, b in zip(planned.children, now.children, strict=True))
    return _extends(planned.children, now.children)


@dataclass(frozen=True)
class FilesUntouchedSince:
    planned: Snapshot
    paths: frozenset[str]
    operation: str

    def holds(self, base: Snapshot, io: MetadataIO) -> bool:
        return not touched_since(io, self.planned, base, set(self.paths))

    def validate(self, base: Snapshot, io: MetadataIO) -> None:
        if not self.holds(base, io):
            raise ConcurrentModification(
                f"a file this {self.operation} rewrites was changed by a concurrent commit "
                f"after version {self.planned.version}",
                help=f"run {self.operation} again")


@dataclass(frozen=True)
class ReadSetUnchanged:
    read_version: int
    conditions: tuple[Condition, ...]
    operation: str

    def validate(self, base: Snapshot, io: MetadataIO) -> None:
        if self.read_version > base.version:
            raise InvalidArgument(f"read_version {self.read_version} is newer than the table "
                                  f"(version {base.version})")
        reason = changed_since(io, io.at_version(base, self.read_version), base,
                               self.conditions)
        if reason is not None:
            raise ReadValidationFailed(f"{reason} after version {self.read_version}, which "
                                       f"this {self.operation} was computed from")


@dataclass(frozen=True)
class TxnNotApplied:
    txn: tuple[str, int]

    def validate(self, base: Snapshot, io: MetadataIO) -> None:
        if txn_applied(base.manifest.txns, self.txn):
            app, version = self.txn
            raise TxnAlreadyApplied(f"txn ({app!r}, {version}) is already committed "
                                    f"(version {base.version} records "
                                    f"{base.manifest.txns[app]})")


@dataclass(frozen=True)
class RefAtVersion:
    pointer_key: str
    version: int

    def validate(self, base: Snapshot, io: MetadataIO) -> None:
        pointer, _ = io.read_pointer(self.pointer_key)
        if pointer.version != self.version:
            raise ConcurrentModification(
                f"ref {self.pointer_key} is at version {pointer.version}, not "
                f"{self.version} as planned")


@dataclass(frozen=True)
class UploadsNotCollected:
    """The operation started (its first upload began) after the newest object gc may
    have collected: otherwise its own uploads may be gone and the commit would
    reference missing objects (a writer that outlived gc's retention).  gc commits
    its fence before deleting anything, so a commit that validated an older base
    loses its CAS to the fence and meets it on the rebase."""

    started_at_ms: int
    operation: str

    def validate(self, base: Snapshot, io: MetadataIO) -> None:
        fence = base.manifest.collected_until_ms
        if self.started_at_ms <= fence:
            raise WriterOutlivedGc(
                f"this {self.operation} began uploading at {self.started_at_ms} ms, before "
                f"gc collected unreferenced objects uploaded up to {fence} ms (version "
                f"{base.version}); its own uploads may be gone", started_at_ms=self.started_at_ms,
                collected_until_ms=fence)


def write_requirements(operation: str, schema: TableSchema, *,
                       txn: tuple[str, int] | None = None,
                       base_version: int | None = None,
                       exact_schema: bool = False) -> tuple[Requirement, ...]:
    """The requirements of a commit that adds files written with ``schema``: its txn
    not applied (checked first: a replay is a no-op, whatever else changed), the
    schema unchanged, and for an overwrite the base version it planned on.
    ``exact_schema``: the commit changes the schema itself (a merge-mode append), so
    even a concurrent ``add_column`` is a conflict (its new schema would drop the
    other's column, whose fresh id it may have given to another)."""
    out: list[Requirement] = []
    if txn is not None:
        out.append(TxnNotApplied(txn))
    out.append(SchemaUnchanged(schema, exact=exact_schema))
    if base_version is not None:
        out.append(BaseVersionIs(base_version, operation))
    return tuple(out)

