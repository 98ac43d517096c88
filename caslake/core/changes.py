"""What a commit changes, as data, and the pure function that applies it.

``apply_changes(base, changes, ...)`` builds the next manifest from the base
snapshot; its only I/O goes through two callbacks: ``load`` (segments the
folding policy rewrites) and ``write`` (a new segment object).

Metadata scaling policy (see docs/format.md "Segments"):

* New entries go inline.  While the base's inline list is shorter than
  ``INLINE_LIMIT`` it is carried forward, so the common commit rewrites at most
  ``INLINE_LIMIT`` entries.
* When the base's inline list is full, its live entries become a segment
  object (format 3, with statistics summaries) and the inline list starts empty.
* Segments are tiered by size; when the last ``FANOUT`` segments share a
  tier they are merged into one segment object of the next tier.  Each entry is
  rewritten O(log_FANOUT n) times in its life, and the root lists
  O(FANOUT * log n) segments.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from caslake.core.metadata_io import MetadataIO, Snapshot
from caslake.errors import InvalidArgument
from caslake.format import (
    PARTITION_FORMAT_VERSION,
    SEGMENTS_FORMAT_VERSION,
    TYPES_FORMAT_VERSION,
)
from caslake.format.keys import manifest_key
from caslake.format.manifest import (
    AncestorRef,
    AppliedIntent,
    DataFile,
    Manifest,
    SegmentRef,
    TombstoneRef,
    Totals,
)
from caslake.format.partition import Partitioning
from caslake.format.schema import TableSchema

INLINE_LIMIT = 64
FANOUT = 8
MAX_FOLD_LEVEL = 2  # segments of 32,768+ entries are only rewritten to drop removed ones


@dataclass(frozen=True)
class Changes:
    operation: str
    add_files: tuple[DataFile, ...] = ()
    remove_files: tuple[DataFile, ...] = ()
    remove_all: bool = False  # overwrite: the new version holds only add_files
    add_tombstones: tuple[TombstoneRef, ...] = ()
    rows_deleted: int = 0  # rows the new tombstones make invisible (for the summary)
    params: dict[str, str] = field(default_factory=dict)
    # Idempotent writes: (app id, txn version) recorded with the commit.
    txn: tuple[str, int] | None = None
    # Group commit: the tokens of the other intents the version applies.
    txns: tuple[tuple[str, int], ...] = ()
    # GC's expiry marker: raise the manifest's oldest_version (never lowers it).
    oldest_version: int | None = None
    # GC's fence (Manifest.collected_until_ms): raise it (never lowers it).
    collected_until_ms: int | None = None
    # Table properties to set (merged over the base's).
    properties: Mapping[str, str] | None = None
    # Rewrite every segment that holds a removed entry (purge with expire: no retained
    # manifest may keep the entries, statistics included, of the files it removes).
    fold_segments: bool = False
    # A schema change: the schema of the new version (schema id already advanced).
    schema: TableSchema | None = None
    # A partition spec change (format 5): the new version's partition specs.
    partitioning: Partitioning | None = None
    # Group commit: the intents this version applies (their files are in add_files).
    intents: tuple[AppliedIntent, ...] = ()


class Requirement(Protocol):
    """What must hold on the base a commit lands on (the concrete, frozen ones are in
    :mod:`caslake.core.requirements`).  ``validate`` raises the typed
    :class:`~caslake.errors.CommitConflict` that says what the caller should do."""

    def validate(self, base: Snapshot, io: MetadataIO) -> None: ...


def check_txn(txn: object) -> tuple[str, int]:
    """A valid idempotency token: ``(app id, version)``, a non-empty string and an
    integer >= 0.  Raises InvalidArgument."""
    if (not isinstance(txn, tuple) or len(txn) != 2 or not isinstance(txn[0], str)
            or not txn[0] or isinstance(txn[1], bool) or not isinstance(txn[1], int)
            or txn[1] < 0):
        raise InvalidArgument(f"txn must be (app id, version): a non-empty string and an "
                              f"integer >= 0, not {txn!r}")
    return txn[0], txn[1]


def txn_applied(txns: Mapping[str, int], txn: tuple[str, int] | None) -> bool:
    """The idempotent-write rule (Delta's SetTransaction): a write tagged
    ``(app_id, version)`` is a no-op once the table's ``txns`` (a manifest's
    ``txns``) record that app id at this version or a later one.  Each commit
    records its tag in its own manifest."""
    return txn is not None and txns.get(txn[0], -1) >= txn[1]


def write_prepare(operation: str, files: Sequence[DataFile], *, remove_all: bool,
                  txn: tuple[str, int] | None = None, params: dict[str, str] | None = None
                  ) -> Callable[[Snapshot], Changes | None]:
    """The ``prepare`` of a commit that adds already uploaded data files (append, or
    with ``remove_all`` overwrite), for :func:`caslake.core.commit.commit_with_retry`.
    A no-op for an append of nothing.  What must still hold on the base (txn not
    applied, schema unchanged, base version) is the plan's requirements
    (:func:`caslake.core.requirements.write_requirements`)."""
    added = tuple(files)

    def prepare(base: Snapshot) -> Changes | None:
        if not added and not remove_all:
            return None
        return Changes(operation, add_files=added, remove_all=remove_all,
                       params=dict(params or {}), txn=txn)

    return prepare


def _level(count: int) -> int:
    if count < INLINE_LIMIT * FANOUT:
        return 0
    return int(math.log(count / INLINE_LIMIT, FANOUT))


def _totals(files: Sequence[DataFile]) -> Totals:
    return Totals(len(files), sum(f.row_count for f in files), sum(f.size for f in files))


def _ancestors(base: Snapshot) -> tuple[AncestorRef, ...]:
    """Skip pointers for version base.version+1: for each k, the base version with
    its low k bits cleared.  Each is either the base or one of the base's own."""
    b = base.version
    known = {a.version: a for a in base.manifest.ancestors}
    known[b] = AncestorRef(b, base.key, base.manifest.created_at_ms)
    out: dict[int, AncestorRef] = {}
    k = 0
    while True:
        v = (b >> k) << k
        if v in known:
            out[v] = known[v]
        if v == 0:
            break
        k += 1
    return tuple(sorted(out.values(), key=lambda a: -a.version))


# (segment refs) -> their entries; (entries) -> a new segment object's reference
LoadSegments = Callable[[Sequence[SegmentRef]], list[list[DataFile]]]
WriteSegment = Callable[[Sequence[DataFile]], SegmentRef]


def _fold(segments: list[SegmentRef], removed: set[str], files: int, load: LoadSegments,
          write: WriteSegment, *, rewrite_all: bool = False) -> list[SegmentRef]:
    """The folding policy (docs/format.md, "Segments").  One fold per commit:

    * when ``removed`` has grown past ``max(INLINE_LIMIT * FANOUT, files / 4)``,
      or ``rewrite_all`` (a purge with expire: no manifest from here on may keep
      an entry, statistics included, of a removed file), every segment holding a
      removed entry is rewritten without it;
    * else the rightmost run of ``FANOUT`` neighbouring segments that share a tier
      below ``MAX_FOLD_LEVEL + 1`` is merged into one segment of the next tier.

    Merged entries keep their order (append order), so segments stay clustered
    when appends arrive in key or time order.  ``removed`` loses the paths whose
    removal a rewrite applied."""
    if rewrite_all or len(removed) > max(INLINE_LIMIT * FANOUT, files // 4):
        out = []
        for ref, entries in zip(segments, load(segments), strict=True):
            if not any(f.path in removed for f in entries):
                out.append(ref)
                continue
            kept = [f for f in entries if f.path not in removed]
            removed.difference_update(f.path for f in entries)
            if kept:
                out.append(write(kept))
        return out
    # The rightmost run of FANOUT neighbours of one tier (not only the tail: a fold
    # of the tail makes a segment of the next tier in the same commit that appends a
    # new small one, so a tail-only rule would never merge that tier again).
    levels = [_level(s.file_count) for s in segments]
    for start in range(len(segments) - FANOUT, -1, -1):
        run = levels[start:start + FANOUT]
        if run[0] <= MAX_FOLD_LEVEL and run.count(run[0]) == FANOUT:
            merged: list[DataFile] = []
            for entries in load(segments[start:start + FANOUT]):
                for f in entries:
                    if f.path in removed:
                        removed.discard(f.path)  # the removal is applied by not copying it
                    else:
                        merged.append(f)
            return (segments[:start] + ([write(merged)] if merged else [])
                    + segments[start + FANOUT:])
    return segments


def apply_changes(base: Snapshot, changes: Changes, *, commit_id: str, token: str,
                  created_at_ms: int, load: LoadSegments, write: WriteSegment,
                  schema: TableSchema | None = None) -> tuple[str, Manifest]:
    """The key and content of the manifest for version base.version+1.  ``load``
    reads segments the folding policy rewrites; ``write`` writes a segment object
    (the full inline list of the base, or a fold) and returns its reference."""
    bm = base.manifest
    version = bm.version + 1
    drop = {f.path for f in changes.remove_files}
    if changes.remove_all:
        files: list[DataFile] = []
        segments: list[SegmentRef] = []
        removed: set[str] = set()
        totals = Totals(0, 0, 0)
    else:
        segments = list(bm.segments)
        removed = set(bm.removed)
        inline_paths = {f.path for f in bm.files}
        files = [f for f in bm.files if f.path not in drop]
        removed |= drop - inline_paths
        if len(bm.files) >= INLINE_LIMIT:
            # The base's inline list is full: it becomes a segment object.
            if files:
                segments.append(write(files))
            files = []
        gone = _totals(changes.remove_files)
        totals = Totals(bm.totals.files - gone.files, bm.totals.rows - gone.rows,
                        bm.totals.bytes - gone.bytes)
    added = _totals(changes.add_files)
    totals = Totals(totals.files + added.files, totals.rows + added.rows,
                    totals.bytes + added.bytes)
    files.extend(changes.add_files)
    if len(files) > INLINE_LIMIT:
        # A big commit: its entries go straight to a segment object, so the root
        # (read by every reader) never holds more than INLINE_LIMIT entries.
        segments.append(write(files))
        files = []
    segments = _fold(segments, removed, totals.files, load, write,
                     rewrite_all=changes.fold_segments)

    # Tombstones: carry forward, forget files that left the table, add the new ones.
    tombstones: list[TombstoneRef] = []
    # A new tombstone's entry for a file holds the file's whole merged mask, so it
    # supersedes every older reference to that file: one live tombstone per file.
    superseded = {p for ref in changes.add_tombstones for p in ref.files}
    deleted = pruned = 0
    if not changes.remove_all:
        for ref in bm.tombstones:
            kept = {p: n for p, n in ref.files.items() if p not in drop and p not in superseded}
            pruned += sum(n for p, n in ref.files.items() if p in drop)
            if kept:
                tombstones.append(ref if len(kept) == len(ref.files) else
                                  TombstoneRef(ref.path, ref.size, ref.etag, kept))
                deleted += sum(kept.values())
    tombstones.extend(changes.add_tombstones)
    totals = Totals(totals.files, totals.rows, totals.bytes,
                    deleted + sum(n for ref in changes.add_tombstones for n in ref.files.values()))

    txns = dict(bm.txns)
    for app, at in ((changes.txn,) if changes.txn is not None else ()) + changes.txns:
        txns[app] = max(at, txns.get(app, at))  # a group fold: the highest per app
    summary = {"added_files": len(changes.add_files), "added_rows": added.rows,
               "added_bytes": added.bytes,
               "removed_files": (bm.totals.files if changes.remove_all
                                 else len(changes.remove_files)),
               # rows this commit made invisible: new tombstones plus the still-live rows
               # of files it removed
               "deleted_rows": (changes.rows_deleted
                                + sum(f.row_count for f in changes.remove_files) - pruned),
               "added_tombstones": len(changes.add_tombstones)}
    manifest = Manifest(
        table_id=bm.table_id, version=version, parent=base.key, commit_id=commit_id,
        created_at_ms=max(created_at_ms, bm.created_at_ms + 1),  # commit times are monotonic
        operation=changes.operation, schema=schema or changes.schema or bm.schema,
        files=tuple(files),
        segments=tuple(segments), removed=frozenset(removed), tombstones=tuple(tombstones),
        ancestors=_ancestors(base),
        operation_params=dict(changes.params), summary=summary,
        properties={**bm.properties, **(changes.properties or {})},
        txns=txns, totals=totals,
        oldest_version=max(bm.oldest_version, changes.oldest_version or 0),
        external=bm.external,
        collected_until_ms=max(bm.collected_until_ms, changes.collected_until_ms or 0),
        partitioning=changes.partitioning or bm.partitioning,
        intents=changes.intents,
        # Segment objects are format 3: the first commit that references one raises
        # the table's version (docs/format.md, "Format version rule"); never lowered.
        format_version=max(
            bm.format_version,
            SEGMENTS_FORMAT_VERSION if any(s.is_object for s in segments) else 0,
            # Nested fields or a newer type: format 4 from the commit that adds them.
            TYPES_FORMAT_VERSION if changes.schema is not None and changes.schema.needs_v4
            else 0,
            # Partition specs: format 5 from the commit that adds the first one.
            PARTITION_FORMAT_VERSION if changes.partitioning is not None else 0))
    return manifest_key(version, token), manifest
