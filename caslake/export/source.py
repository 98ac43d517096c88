"""What an export reads from caslake: one snapshot's files, grouped as caslake stores
them, and the exact row positions each file's tombstones delete.

Owns: resolving a version to a snapshot, grouping its live files by the
segment (immutable earlier manifest) they come from, so an exporter can reuse
its own output for unchanged groups, and turning deletion masks (row groups,
key ranges, positions) into plain row positions.  Never writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from pyroaring import BitMap

from caslake.core import (
    POSITION,
    FooterCache,
    MetadataIO,
    Scan,
    Snapshot,
    SnapshotSubset,
    TombstoneCache,
    load_masks,
    resolve,
)
from caslake.format.keys import split_external
from caslake.format.manifest import DataFile, TombstoneRef
from caslake.store.base import ObjectStore


class TableHandle(Protocol):
    """What an export needs of a table handle (a ``Table`` or its context)."""

    store: ObjectStore
    io: MetadataIO
    footers: FooterCache
    tombstones: TombstoneCache


@dataclass(frozen=True)
class FileGroup:
    """The entries of one caslake segment (``segment`` is its key: a segment
    object or, format 1, an earlier manifest) or, with ``segment`` None, the
    snapshot's own inline list, in stored order, with the ones this version
    removed; a segment never changes, so slices of ``entries`` are stable across
    versions."""

    segment: str | None
    entries: tuple[DataFile, ...]
    removed: frozenset[str] = frozenset()

    @property
    def files(self) -> list[DataFile]:
        return [f for f in self.entries if f.path not in self.removed]


@dataclass(frozen=True)
class ExportSource:
    table: TableHandle
    snapshot: Snapshot
    groups: tuple[FileGroup, ...]

    @property
    def version(self) -> int:
        return self.snapshot.version

    @property
    def tombstones(self) -> tuple[TombstoneRef, ...]:
        return self.snapshot.manifest.tombstones

    def files(self) -> list[DataFile]:
        return [f for g in self.groups for f in g.files]

    def location(self, key: str) -> str:
        """The absolute URI of a table object (what other formats store): where it
        lies, so a clone's file of another table is named under that table's root
        (the clone's alias key exists for caslake's routing only)."""
        store, inner = resolve(self.table.store, key)
        return f"{store.uri.rstrip('/')}/{inner}"

    def is_own(self, key: str) -> bool:
        """Whether object ``key`` lies under this table's root (not a clone's file
        of another table, named by :meth:`location` only)."""
        return split_external(key)[0] is None

    def deleted_positions(self, paths: Iterable[str]) -> dict[str, BitMap]:
        """For each of ``paths`` with deletes: every row position deleted in it,
        merged over all tombstones (whole row groups and key ranges resolved by
        reading the file the way a caslake scan does)."""
        files = {f.path: f for f in self.files()}
        manifest = self.snapshot.manifest
        masks = load_masks(self.table.store, self.table.tombstones, manifest.tombstones,
                           files, paths, manifest.schema)
        out: dict[str, BitMap] = {}
        needs_scan: list[str] = []
        for path, mask in masks.items():
            if mask.row_groups or mask.key_ranges:
                needs_scan.append(path)
            elif mask.positions:
                out[path] = BitMap(mask.positions)
        if needs_scan:
            out.update(self._positions_by_scan(needs_scan, files))
        return out

    def _positions_by_scan(self, paths: Sequence[str], files: dict[str, DataFile]
                           ) -> dict[str, BitMap]:
        first = self.snapshot.manifest.schema.names[:1]
        subset = SnapshotSubset.of(self.snapshot, [files[p] for p in paths])
        scan = Scan(self.table.io, self.table.footers, subset, first, None,
                    self.table.tombstones)
        alive: dict[str, BitMap] = {p: BitMap() for p in paths}
        for task, rows in scan.matching_rows():
            alive[task.file.path].update(rows.column(POSITION).to_numpy())
        out = {}
        for p in paths:
            dead = BitMap(range(files[p].row_count)) - alive[p]
            if dead:
                out[p] = dead
        return out


def load_source(table: TableHandle, version: int | None) -> ExportSource:
    """The snapshot at ``version`` (latest if None) and its files, by segment."""
    head = table.io.latest()
    snap = head if version is None else table.io.at_version(head, version)
    m = snap.manifest
    groups = []
    # Segment objects and (format 1) earlier manifests alike, each checked against
    # its reference; a segment's entries are immutable, so a group per segment.
    for ref, entries in zip(m.segments, table.io.segment_entries(m.segments, where=snap.key),
                            strict=True):
        groups.append(FileGroup(ref.manifest, tuple(entries),
                                m.removed.intersection(f.path for f in entries)))
    groups.append(FileGroup(None, m.files))
    return ExportSource(table, snap, tuple(groups))
