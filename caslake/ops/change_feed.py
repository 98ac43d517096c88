"""The change feed: what each version of a range changed, as rows (docs/protocol.md,
"Change feed").

Owns resolving a range of versions (inclusive at both ends, as Delta's
``table_changes``; tags as ends; gc-expired versions refused with
``VersionExpired``), the difference of two neighbouring versions found from
their metadata (:func:`diff_versions`: data files one has and the other does
not, files whose tombstones differ), reading the changed rows back from the
data files (:class:`ChangeScan`), pairing an upsert's (or MERGE's) deletes and
inserts by key into preimages and postimages, and an update's by position, and
:func:`follow`, which polls a ref and yields the feed of each version as it lands.
Never writes: the feed needs nothing stored at commit time.
"""

from __future__ import annotations

import bisect
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from caslake.core import (
    POSITION,
    ArrowExport,
    DeletionMask,
    FooterCache,
    MetadataIO,
    Scan,
    Snapshot,
    SnapshotSubset,
    TombstoneCache,
    load_masks,
)
from caslake.errors import InvalidArgument, VersionExpired, VersionNotFound
from caslake.expr import Expr, compile_where, filter_table, referenced_columns
from caslake.expr.bind import resolve_column
from caslake.format.manifest import DataFile, Manifest
from caslake.format.schema import TableSchema

CHANGE_TYPE = "_change_type"
COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"
META_COLUMNS = (CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP)
INSERT, DELETE = "insert", "delete"
PREIMAGE, POSTIMAGE = "update_preimage", "update_postimage"
TIMESTAMP = pa.timestamp("ms", tz="UTC")
#: Operations that change no row's value (Delta's dataChange=false): no rows, nothing read.
NO_DATA_CHANGE = frozenset({"compact", "expire", "set_properties", "schema"})
PURGE = "purge"
RESTORE = "restore"
KEY_PARAM = "key"  # an upsert's (or a MERGE's) key columns, in its operation_params
# An update's rows pair by position: operation_params ``pair = position``.
PAIR_PARAM, PAIR_BY_POSITION = "pair", "position"

TagResolver = Callable[[str], Snapshot]


# --- the range ---------------------------------------------------------------------


def _version_of(end: int | str, name: str, io: MetadataIO, head: Snapshot,
                tag: TagResolver) -> int:
    """A range end as a version of ``head``'s chain: an int, or a tag's version."""
    if isinstance(end, bool) or not isinstance(end, int | str):
        raise InvalidArgument(f"{name} must be a version (int) or a tag name, not {end!r}")
    if isinstance(end, int):
        if end < 0 or end > head.version:
            raise VersionNotFound(f"{name} {end} does not exist (the table is at version "
                                  f"{head.version})")
        return end
    snap = tag(end)
    v = snap.version
    if v <= head.version and v >= head.manifest.oldest_version and \
            io.at_version(head, v).manifest.commit_id == snap.manifest.commit_id:
        return v
    if v < head.manifest.oldest_version:
        _check_readable(head, v)
    raise InvalidArgument(f"tag {end!r} (version {v}) is not a version of this branch")


def _check_readable(head: Snapshot, start: int) -> None:
    """The changes of ``start`` need version ``start - 1``: refuse one gc expired."""
    oldest = head.manifest.oldest_version
    if oldest > 0 and start <= oldest:
        raise VersionExpired(f"the changes of version {start} need version {start - 1}, which "
                             f"gc expired; the oldest version whose changes can be read is "
                             f"{oldest + 1}", oldest_readable=oldest + 1)


def resolve_range(io: MetadataIO, head: Snapshot, start: int | str, end: int | str | None,
                  tag: TagResolver) -> list[tuple[Snapshot | None, Snapshot]]:
    """``(version v - 1, version v)`` for every ``v`` from ``start`` to ``end``
    (inclusive; None: the head), oldest first.  Typed errors for a bad range."""
    lo = _version_of(start, "start_version", io, head, tag)
    hi = head.version if end is None else _version_of(end, "end_version", io, head, tag)
    if lo > hi:
        raise InvalidArgument(f"start_version {lo} is after end_version {hi}")
    _check_readable(head, lo)
    chain = io.history(io.at_version(head, hi), limit=hi - lo + 2)
    by_version = {s.version: s for s in chain}
    return [(by_version.get(v - 1), by_version[v]) for v in range(lo, hi + 1)]


# --- what two neighbouring versions differ in -----------------------------------------


@dataclass(frozen=True)
class VersionDiff:
    """The data files of version ``new`` that ``old`` lacked (their live rows are
    inserts), those of ``old`` that ``new`` lacks (their live rows at ``old`` are
    deletes), and files both have whose deletion masks may differ."""

    added: tuple[DataFile, ...]
    removed: tuple[DataFile, ...]
    changed: tuple[DataFile, ...]


def _tombstones_by_file(m: Manifest) -> dict[str, frozenset[str]]:
    out: dict[str, set[str]] = {}
    for ref in m.tombstones:
        for path in ref.files:
            out.setdefault(path, set()).add(ref.path)
    return {p: frozenset(s) for p, s in out.items()}


def _own_entries(io: MetadataIO, snap: Snapshot, skip: set[str]) -> dict[str, DataFile]:
    """The live entries of ``snap`` held in segments whose keys are not in ``skip``,
    and inline."""
    m = snap.manifest
    out: dict[str, DataFile] = {}
    for ref in m.segments:
        if ref.manifest not in skip:
            out.update((f.path, f) for f in io.iter_segment(ref, snap.key)
                       if f.path not in m.removed)
    out.update((f.path, f) for f in m.files)
    return out


def _find_in(io: MetadataIO, snap: Snapshot, keys: set[str], paths: set[str]
             ) -> dict[str, DataFile]:
    """The entries of ``paths`` in the segments of ``snap`` named by ``keys``."""
    found: dict[str, DataFile] = {}
    for ref in snap.manifest.segments:
        if len(found) == len(paths):
            break
        if ref.manifest in keys:
            found.update((f.path, f) for f in io.iter_segment(ref, snap.key) if f.path in paths)
    return found


def diff_versions(io: MetadataIO, old: Snapshot | None, new: Snapshot) -> VersionDiff:
    """What ``new`` changed over ``old`` (None: the empty table), from metadata alone:
    segments both versions reference are only opened to find an entry whose removal
    or tombstones changed, never walked for nothing."""
    if old is None:
        return VersionDiff(tuple(io.live_files(new)), (), ())
    om, nm = old.manifest, new.manifest
    common = {s.manifest for s in om.segments} & {s.manifest for s in nm.segments}
    mine_new = _own_entries(io, new, common)
    mine_old = _own_entries(io, old, common)
    # Entries of shared segments that one version hides (``removed``) and the other not.
    back, gone = set(om.removed - nm.removed), set(nm.removed - om.removed)
    t_old, t_new = _tombstones_by_file(om), _tombstones_by_file(nm)
    masked = {p for p in t_old.keys() | t_new.keys() if t_old.get(p) != t_new.get(p)}
    moved = mine_new.keys() & mine_old.keys()
    wanted_new = (back | masked) - mine_new.keys()
    wanted_old = (gone | masked) - mine_old.keys()
    in_new = _find_in(io, new, common, wanted_new) if wanted_new else {}
    in_old = _find_in(io, old, common, wanted_old) if wanted_old else {}
    live_new = {p: f for p, f in in_new.items() if p not in nm.removed} | mine_new
    live_old = {p: f for p, f in in_old.items() if p not in om.removed} | mine_old
    both = live_new.keys() & live_old.keys()
    added = tuple(f for p, f in mine_new.items() if p not in both)
    added += tuple(f for p, f in in_new.items() if p in back and p not in both)
    removed = tuple(f for p, f in mine_old.items() if p not in both)
    removed += tuple(f for p, f in in_old.items() if p in gone and p not in both)
    changed = tuple(live_new[p] for p in sorted(both & (masked | moved))
                    if t_old.get(p) != t_new.get(p))
    return VersionDiff(added, removed, changed)


# --- reading the rows ----------------------------------------------------------------


@dataclass(frozen=True)
class _Reader:
    """How a feed reads rows: the metadata IO, caches, the schema rows are presented
    under (the end version's), the table columns to read and the predicate pushed
    into the file scans (None: none)."""

    io: MetadataIO
    footers: FooterCache
    tombstones: TombstoneCache
    schema: TableSchema

    def subset(self, snap: Snapshot, f: DataFile, groups: Iterable[int] | None = None
               ) -> SnapshotSubset:
        only = None if groups is None else {f.path: groups}
        return replace(SnapshotSubset.of(snap, [f], only), schema=self.schema)

    def scan(self, source: SnapshotSubset, columns: Sequence[str],
             where: str | Expr | None) -> Scan:
        return Scan(self.io, self.footers, source, list(columns), where, self.tombstones)

    def live_rows(self, snap: Snapshot, f: DataFile, columns: Sequence[str],
                  where: str | Expr | None) -> Iterator[pa.Table]:
        for batch in self.scan(self.subset(snap, f), columns, where).to_batches():
            yield pa.Table.from_batches([batch])

    def _mask(self, snap: Snapshot, f: DataFile) -> DeletionMask | None:
        refs = [r for r in snap.manifest.tombstones if f.path in r.files]
        return load_masks(self.io.store, self.tombstones, refs, {f.path: f}, [f.path],
                          self.schema, complete=False).get(f.path)

    def position_diff(self, old: Snapshot, new: Snapshot, f: DataFile,
                      columns: Sequence[str], where: str | Expr | None
                      ) -> tuple[pa.Table | None, pa.Table | None]:
        """Rows of ``f`` live at ``old`` and deleted at ``new`` (deletes), and the
        reverse (inserts: rows a restore brings back).  Reads each side only where
        it has rows the other deletes: the row groups holding them, once."""
        a, b = self._mask(old, f), self._mask(new, f)
        if (a is not None and a.key_ranges) or (b is not None and b.key_ranges):
            return self._both_sides(old, new, f, columns, where)
        footer = self.footers.get(self.io.store, f)
        dead_old, dead_new = _dead(a, footer.group_rows), _dead(b, footer.group_rows)
        return (self._rows_at(old, f, dead_new - dead_old, footer.group_starts, columns, where),
                self._rows_at(new, f, dead_old - dead_new, footer.group_starts, columns, where))

    def _rows_at(self, snap: Snapshot, f: DataFile, positions: BitMap,
                 starts: Sequence[int], columns: Sequence[str], where: str | Expr | None
                 ) -> pa.Table | None:
        """The rows of ``f`` at ``positions`` that are live at ``snap`` (and match
        ``where``), reading only the row groups holding them."""
        if not positions:
            return None
        groups = sorted({bisect.bisect_right(starts, p) - 1 for p in positions})
        wanted = pa.array(np.asarray(positions.to_array(), dtype=np.int64))
        parts = [t.filter(pc.is_in(t[POSITION], wanted)) for _, t in
                 self.scan(self.subset(snap, f, groups), columns, where).matching_rows()]
        out = pa.concat_tables(parts).drop_columns([POSITION]) if parts else None
        return out if out is not None and out.num_rows else None

    def _both_sides(self, old: Snapshot, new: Snapshot, f: DataFile,
                    columns: Sequence[str], where: str | Expr | None
                    ) -> tuple[pa.Table | None, pa.Table | None]:
        """:meth:`position_diff` for masks with key ranges (which rows they delete
        takes the key values): every row group of both sides, compared by position."""
        sides = []
        for snap in (old, new):
            parts = [t for _, t in self.scan(self.subset(snap, f), columns,
                                             where).matching_rows()]
            sides.append(pa.concat_tables(parts) if parts else None)
        before, after = sides

        def minus(x: pa.Table | None, y: pa.Table | None) -> pa.Table | None:
            if x is None:
                return None
            if y is not None:
                x = x.filter(pc.invert(pc.is_in(x[POSITION], y[POSITION])))
            return x.drop_columns([POSITION]) if x.num_rows else None

        return minus(before, after), minus(after, before)


def _dead(mask: DeletionMask | None, group_rows: Sequence[int]) -> BitMap:
    """Every position a mask without key ranges deletes (None: none)."""
    if mask is None:
        return BitMap()
    return mask.deleted_positions(group_rows)


# --- the feed --------------------------------------------------------------------------


def feed_schema(schema: TableSchema, columns: Sequence[str]) -> pa.Schema:
    """The feed's schema: ``columns`` of the table, nullable, then the three columns."""
    arrow = schema.to_arrow()
    return pa.schema([arrow.field(c).with_nullable(True) for c in columns]
                     + [pa.field(CHANGE_TYPE, pa.string(), nullable=False),
                        pa.field(COMMIT_VERSION, pa.int64(), nullable=False),
                        pa.field(COMMIT_TIMESTAMP, TIMESTAMP, nullable=False)])


def _key_names(snap: Snapshot, end: TableSchema) -> list[str] | None:
    """An upsert's key columns, by their names in the end schema (found by field id),
    or None when the commit pairs nothing (no key, or a key column dropped since)."""
    raw = snap.manifest.operation_params.get(KEY_PARAM)
    if not raw:
        return None
    by_id = {f.id: f.name for f in end.fields}
    names = []
    for k in raw.split(","):
        fld = next((f for f in snap.manifest.schema.fields if f.name == k), None)
        if fld is None or fld.id not in by_id:
            return None
        names.append(by_id[fld.id])
    return names


def _row_keys(table: pa.Table, names: Sequence[str]) -> list[tuple[Any, ...]]:
    """Each row's key values, a nested value (a struct, list or map key) by its text."""
    cols = [[v if v is None or isinstance(v, int | float | str | bytes) else repr(v)
             for v in table.column(n).to_pylist()] for n in names]
    return list(zip(*cols, strict=True)) if cols else [()] * table.num_rows


def _pair(deletes: pa.Table, inserts: pa.Table, keys: Sequence[str]
          ) -> list[tuple[str, pa.Table]]:
    """An upsert's (or MERGE's) rows: per key (no NULL), as many deleted and added
    rows as both have, in read order, become preimages and postimages; the rest
    stay deletes and inserts (a MERGE that deletes one of two rows sharing a key and
    updates the other gives one pair and one delete)."""
    def hashable(k: tuple[Any, ...]) -> bool:
        return all(v is not None for v in k)

    d_keys, i_keys = _row_keys(deletes, keys), _row_keys(inserts, keys)
    both = Counter(k for k in d_keys if hashable(k)) & Counter(k for k in i_keys if hashable(k))
    d_pair = pa.array([not x for x in _take_from(d_keys, dict(both))], pa.bool_())
    i_pair = pa.array([not x for x in _take_from(i_keys, dict(both))], pa.bool_())
    inv = pc.invert
    return [(DELETE, deletes.filter(inv(d_pair))), (PREIMAGE, deletes.filter(d_pair)),
            (INSERT, inserts.filter(inv(i_pair))), (POSTIMAGE, inserts.filter(i_pair))]


def _take_from(keys: Sequence[Any], budget: dict[Any, int]) -> list[bool]:
    """Per key: False for each of the first ``budget[key]`` occurrences (spent), else True."""
    keep = []
    for k in keys:
        spend = budget.get(k, 0) > 0
        if spend:
            budget[k] -= 1
        keep.append(not spend)
    return keep


def _cancel(deletes: pa.Table, inserts: pa.Table) -> tuple[pa.Table, pa.Table]:
    """A restore's rows without the rows both versions show (equal values, whatever
    file holds them), counted as a multiset."""
    def row_keys(t: pa.Table) -> list[str]:
        return [repr(r) for r in zip(*(t.column(i).to_pylist() for i in range(t.num_columns)),
                                     strict=True)]

    d, i = row_keys(deletes), row_keys(inserts)
    common = dict(Counter(d) & Counter(i))
    keep_d = _take_from(d, dict(common))
    keep_i = _take_from(i, dict(common))
    return (deletes.filter(pa.array(keep_d, pa.bool_())),
            inserts.filter(pa.array(keep_i, pa.bool_())))


def _concat(parts: list[pa.Table], schema: pa.Schema) -> pa.Table:
    parts = [p for p in parts if p.num_rows]
    if not parts:
        return schema.empty_table()
    return pa.concat_tables([p.select(schema.names) for p in parts])


class ChangeScan(ArrowExport):
    """The change feed of a range of versions, read version by version: ``to_arrow``,
    ``to_batches`` / ``to_reader`` (streamed), the Arrow PyCapsule stream (DuckDB,
    Polars, ``pa.table``), ``count``.  Build it with ``Table.changes``."""

    def __init__(self, reader: _Reader, versions: Sequence[tuple[Snapshot | None, Snapshot]],
                 columns: Sequence[str] | None, where: str | Expr | None) -> None:
        schema = reader.schema
        names = schema.names
        clash = [c for c in META_COLUMNS if c in names]
        if clash:
            raise InvalidArgument(f"the table has a column named {clash[0]!r}, which the "
                                  "change feed adds itself; rename it to read the feed")
        self._reader = reader
        self.versions = tuple(versions)
        if isinstance(columns, str):
            columns = [columns]
        picked = None if columns is None else {resolve_column(c, names) for c in columns
                                               if c not in META_COLUMNS}
        self.columns = [n for n in names if picked is None or n in picked]
        self.schema = feed_schema(schema, self.columns)
        self._full = feed_schema(schema, names)
        self._bound = compile_where(where, self._full)
        refs = referenced_columns(self._bound) if self._bound is not None else set()
        self._pred_columns = {c for c in refs if c in names}
        # A predicate on table columns only is also pushed into the file scans.
        self._push = where if self._bound is not None and not refs & set(META_COLUMNS) \
            else None

    # --- one version -------------------------------------------------------------

    def _read_columns(self, extra: Iterable[str] = ()) -> list[str]:
        want = set(self.columns) | self._pred_columns | set(extra)
        return [n for n in self._reader.schema.names if n in want] or \
            self._reader.schema.names[:1]

    def _finish(self, rows: pa.Table, kind: str, snap: Snapshot) -> pa.Table:
        """``rows`` (table columns read, or none: a purge's) as feed rows of ``kind``,
        filtered and projected."""
        n = rows.num_rows
        fields = [f for f in self._full if f.name in rows.column_names
                  or f.name in self.columns]
        arrays = [rows.column(f.name) if f.name in rows.column_names
                  else pa.nulls(n, f.type) for f in fields]
        m = snap.manifest
        table = pa.Table.from_arrays(
            [*arrays, pa.repeat(pa.scalar(kind), n),
             pa.repeat(pa.scalar(m.version, pa.int64()), n),
             pa.repeat(pa.scalar(m.created_at_ms, TIMESTAMP), n)],
            schema=pa.schema([*fields, *(self._full.field(c) for c in META_COLUMNS)]))
        if self._bound is not None:
            table = filter_table(table, self._bound)
        return table.select(self.schema.names)

    def _version(self, old: Snapshot | None, new: Snapshot) -> Iterator[pa.Table]:
        op = new.manifest.operation
        if op in NO_DATA_CHANGE:
            return
        if op == PURGE and old is not None:
            erased = old.manifest.totals.live_rows - new.manifest.totals.live_rows
            if erased > 0:
                yield self._finish(_null_rows(erased), DELETE, new)
            return
        diff = diff_versions(self._reader.io, old, new)
        if old is not None and new.manifest.operation_params.get(PAIR_PARAM) == PAIR_BY_POSITION:
            yield from self._by_position(old, new, diff)
            return
        keys = _key_names(new, self._reader.schema)
        if op == RESTORE or keys is not None:
            yield from self._whole(old, new, diff, keys)
            return
        cols = self._read_columns()
        inserts: list[pa.Table] = []
        for f in diff.removed:
            assert old is not None
            for t in self._reader.live_rows(old, f, cols, self._push):
                yield self._finish(t, DELETE, new)
        for f in diff.changed:
            assert old is not None
            gone, back = self._reader.position_diff(old, new, f, cols, self._push)
            if gone is not None:
                yield self._finish(gone, DELETE, new)
            if back is not None:
                inserts.append(back)
        for t in inserts:
            yield self._finish(t, INSERT, new)
        for f in diff.added:
            for t in self._reader.live_rows(new, f, cols, self._push):
                yield self._finish(t, INSERT, new)

    def _whole(self, old: Snapshot | None, new: Snapshot, diff: VersionDiff,
               keys: list[str] | None) -> Iterator[pa.Table]:
        """A commit whose rows are decided together: an upsert's pairs by key, a
        restore's rows both versions show cancelled.  Read whole (no pushdown)."""
        cols = self._reader.schema.names if keys is None else self._read_columns(keys)
        d, i = self._sides(old, new, diff, cols, by_path=False)
        if keys is None:
            d, i = _cancel(d, i)
            parts = [(DELETE, d), (INSERT, i)]
        else:
            parts = _pair(d, i, keys)
        order = {DELETE: 0, PREIMAGE: 1, INSERT: 2, POSTIMAGE: 3}
        for kind, rows in sorted(parts, key=lambda p: order[p[0]]):
            if rows.num_rows:
                yield self._finish(rows, kind, new)

    def _sides(self, old: Snapshot | None, new: Snapshot, diff: VersionDiff,
               cols: list[str], *, by_path: bool) -> tuple[pa.Table, pa.Table]:
        """Every row ``new`` hides that ``old`` showed, and every row it shows that
        ``old`` did not, read whole (no pushdown).  ``by_path``: the hidden rows in
        (file path, position) order, else removed files first."""
        read = pa.schema([self._reader.schema.to_arrow().field(c) for c in cols])
        removed = {f.path for f in diff.removed}
        files = [*diff.removed, *diff.changed]
        deletes: list[pa.Table] = []
        inserts: list[pa.Table] = []
        for f in sorted(files, key=lambda f: f.path) if by_path else files:
            assert old is not None
            if f.path in removed:
                deletes.extend(self._reader.live_rows(old, f, cols, None))
                continue
            gone, back = self._reader.position_diff(old, new, f, cols, None)
            deletes.extend([gone] if gone is not None else [])
            inserts.extend([back] if back is not None else [])
        for f in diff.added:
            inserts.extend(self._reader.live_rows(new, f, cols, None))
        return _concat(deletes, read), _concat(inserts, read)

    def _by_position(self, old: Snapshot, new: Snapshot, diff: VersionDiff
                     ) -> Iterator[pa.Table]:
        """An update's rows: what it hid, in (file path, position) order, are the
        preimages, and what it added, in the order written, the postimages; the
        ``i``-th of each are one row (docs/protocol.md, "Update").  Read whole (no
        pushdown: a pair's sides are filtered after pairing)."""
        d, i = self._sides(old, new, diff, self._read_columns(), by_path=True)
        paired = d.num_rows == i.num_rows
        for kind, rows in ((PREIMAGE if paired else DELETE, d),
                           (POSTIMAGE if paired else INSERT, i)):
            if rows.num_rows:
                yield self._finish(rows, kind, new)

    # --- the whole range ----------------------------------------------------------

    def tables(self) -> Iterator[pa.Table]:
        """The feed's rows as tables, version by version (none for empty pieces)."""
        for old, new in self.versions:
            for t in self._version(old, new):
                if t.num_rows:
                    yield t

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        for t in self.tables():
            yield from t.to_batches()

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        return self.to_batches()

    def to_reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self.schema, self.to_batches())

    def _export_reader(self) -> pa.RecordBatchReader:
        return self.to_reader()

    def to_arrow(self) -> pa.Table:
        return _concat(list(self.tables()), self.schema)

    def count(self) -> int:
        return sum(t.num_rows for t in self.tables())


def _null_rows(n: int) -> pa.Table:
    """``n`` rows of no table column (a purge's erased rows: their values are NULL)."""
    return pa.table({"rows": pa.nulls(n)}).drop_columns(["rows"])


# --- entry points ----------------------------------------------------------------------


def changes(io: MetadataIO, footers: FooterCache, tombstones: TombstoneCache, head: Snapshot,
            start: int | str, end: int | str | None, *, columns: Sequence[str] | None,
            where: str | Expr | None, tag: TagResolver) -> ChangeScan:
    """The change feed of versions ``start`` .. ``end`` (inclusive) of the chain whose
    head is ``head``, presented under the end version's schema."""
    versions = resolve_range(io, head, start, end, tag)
    schema = versions[-1][1].manifest.schema
    return ChangeScan(_Reader(io, footers, tombstones, schema), versions, columns, where)


def follow(latest: Callable[[], Snapshot],
           feed: Callable[[int, int], ChangeScan], start: int, *,
           poll_initial_s: float, poll_max_s: float, stop: Callable[[], bool] | None,
           sleep: Callable[[float], None] = time.sleep) -> Iterator[pa.RecordBatch]:
    """Yield the feed from version ``start`` on, as versions land: ``feed(lo, hi)``
    for each new head ``hi``; between polls of ``latest`` that find nothing new,
    sleep from ``poll_initial_s`` doubling up to ``poll_max_s``.  ``stop()`` is
    asked before each poll; without it the iterator never ends on its own."""
    if not (poll_initial_s > 0 and poll_max_s >= poll_initial_s):
        raise InvalidArgument("follow needs 0 < poll_initial_s <= poll_max_s, not "
                              f"{poll_initial_s!r} and {poll_max_s!r}")
    nxt = start
    delay = poll_initial_s
    while stop is None or not stop():
        head = latest()
        if head.version >= nxt:
            yield from feed(nxt, head.version).to_batches()
            nxt = head.version + 1
            delay = poll_initial_s
            continue
        sleep(delay)
        delay = min(poll_max_s, delay * 2)
