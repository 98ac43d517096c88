"""Scan planning and execution over one pinned snapshot.

Planning prunes at three levels:

1. files, by the manifest's per-file min/max/null counts and partition values
   (:mod:`caslake.core.read.partition_prune`);
2. row groups, by footer statistics (one exact-size range GET per file,
   checked and cached by :mod:`caslake.core.footers`);
3. columns: only the column chunks of the projected and predicate columns are
   fetched, as coalesced, parallel range GETs pinned to the
   ETag the file's footer was read under (the relocation rule: see
   :mod:`caslake.core.footers`).  A nested column is all its leaf chunks; a
   projected nested field (``columns=["dev.os"]``) only that field's.

Projection of nested fields: ``columns`` may name a field inside a column by
its dotted path (``dev.os``, ``dev.geo.lat``, ``items.element.price``).  The
result keeps the column's shape holding only the named fields, as Spark's
nested column pruning does: ``dev.os`` gives a column ``dev: struct<os>`` (NULL
where ``dev`` is NULL), ``items.element.price`` gives ``items:
list<struct<price>>``; several paths into one column merge into one column, in
the table's field order; naming the column itself (``dev``) gives it whole.  A
map is always read whole.  Every stored column is presented under the table's
type by field id at every level (renamed, dropped, added, widened nested fields;
``time32[s]``, ``date64``, ``decimal32/64``, ``uuid`` read back as the table's
types).

A scan reads a whole :class:`Snapshot` or a :class:`SnapshotSubset` (chosen
files and row groups of one, e.g. one Spark task's share).  Parquet layout
(footers, chunk ranges, page CRCs) is :mod:`caslake.format.parquet`'s.

Execution decodes the fetched chunks with pyarrow, applies the exact row
filter, and projects.  ``to_reader`` streams work units (a file's surviving
row groups, split to bound memory) with a small in-order prefetch window.
"""

from __future__ import annotations

import copy
import io
import itertools
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from caslake.core.cache import LruCache
from caslake.core.footers import FooterCache
from caslake.core.metadata_io import MetadataIO, Snapshot
from caslake.core.pools import METADATA_THREADS, fetch_all, shared_pool, threads
from caslake.core.read.deletion_mask import DeletionMask, TombstoneCache, load_masks
from caslake.core.read.interop import ArrowExport
from caslake.core.read.partition_prune import partition_might_match
from caslake.core.segments import MightMatch
from caslake.errors import CorruptMetadata, InvalidArgument
from caslake.expr import (
    BoundExpr,
    ColumnStats,
    Expr,
    StatsKey,
    compile_where,
    filter_table,
    is_computed,
    might_match,
    predicate_mask,
    pruning_paths,
    referenced_columns,
    resolve_column,
)
from caslake.format.manifest import DataFile, TombstoneRef
from caslake.format.parquet import VERIFY_PAGE_CHECKSUMS, FooterInfo, LeafSpan, row_group_stats
from caslake.format.partition import Partitioning
from caslake.format.schema import MAP, STRUCT, Field, TableSchema, type_to_str
from caslake.format.schema_evolution import conform_column, field_ids_of, is_widening
from caslake.format.segment import Stats
from caslake.format.stats import column_stats
from caslake.store.base import GET_RANGE

POSITION = "__pos"
# pyarrow-stubs type the nested constructors narrower than pyarrow accepts.
_pa: Any = pa
# Mean surviving run length (rows) from which deletes are sliced out rather than
# filtered.  A slice costs ~1.4 us a column and copies nothing; a filter copies
# every kept row (~15 ns a row for TPC-H Q1's 7 columns): slicing wins from
# runs of a few hundred rows.  1024 keeps chunks large enough for consumers
# (Spark, DuckDB) while TPC-H RF2 at SF1 (runs of ~3,900 rows) is sliced.
SLICE_RUN_ROWS = 1024
UNIT_BYTES = 64 * 1024 * 1024  # bytes of column chunks fetched per work unit (memory bound)
MIN_UNIT_BYTES = 4 * 1024 * 1024  # below this, a unit's fixed cost outweighs the parallelism
UNITS_PER_THREAD = 2  # work units per scan thread, for balance
# A lone work unit's columns are decoded on pyarrow's threads from this many bytes of
# column chunks.  One row group on 2 cores, warm, median of 15-21: 0.5 MB of 2
# columns, 0.7 MB of 1 and 1.3 MB of 3 took 0.3-0.4 ms less inline, 0.8 MB of 2
# 1.1 ms more, and 2.0-2.6 MB of 4-7 columns 1.6-4 ms more (Q1's: 17.1 against
# 13.1 ms).  In a fresh process the 0.5 MB read took ~1 ms less inline.
COLUMN_THREADS_BYTES = 1024 * 1024

#: A work unit: runs of row groups of one or more files, ``(task, row groups)`` in order.
Unit = tuple[tuple["FileTask", list[int]], ...]
FOOTER_WINDOW = 16  # footers fetched ahead of a streaming scan
# Files in one work unit at most.  Units pack small files up to the unit size, and
# a streaming scan queues a few units before its first batch: uncapped, 4 MB of
# one-row files was thousands of footers and reads before the first row (issue 27).
MAX_UNIT_FILES = 32
#: Each data file's dictionary-only column chunks, by (path, footer CRC-32 from the
#: manifest, which the footer was checked against; a file without one uses its
#: footer's own memo): process-wide, because a table
#: handle keeps its own footer cache and a Spark task builds a new one, and the
#: footer's Thrift decode that finds them costs ~50-100 ms for TPC-H SF1's file.
_DICTIONARY_CHUNKS: LruCache[tuple[str, int], frozenset[tuple[int, int]]] = LruCache(4096)


@dataclass(frozen=True)
class SnapshotSubset:
    """Chosen data files of one pinned snapshot, and the tombstones that touch them:
    all a scan needs, so it can run where the snapshot's manifests are not read
    (a Spark task).  Build it with :meth:`of`; it pickles.

    ``row_groups`` maps a file's path to the only row groups to read in it (a
    file not in it is read whole).  ``tombstones`` list only these files."""

    version: int
    key: str  # the snapshot's manifest key
    schema: TableSchema
    files: tuple[DataFile, ...]
    tombstones: tuple[TombstoneRef, ...] = ()
    row_groups: Mapping[str, frozenset[int]] = field(default_factory=dict)
    partitioning: Partitioning | None = None  # the specs the files' partitions name

    @staticmethod
    def of(snapshot: Snapshot, files: Iterable[DataFile],
           row_groups: Mapping[str, Iterable[int]] | None = None) -> SnapshotSubset:
        """The subset of ``snapshot`` holding ``files`` (live files of it)."""
        files = tuple(files)
        paths = {f.path for f in files}
        refs = tuple(TombstoneRef(r.path, r.size, r.etag,
                                  {p: n for p, n in r.files.items() if p in paths})
                     for r in snapshot.manifest.tombstones if paths.intersection(r.files))
        groups = {p: frozenset(g) for p, g in (row_groups or {}).items()}
        return SnapshotSubset(snapshot.version, snapshot.key, snapshot.manifest.schema, files,
                              refs, groups, snapshot.manifest.partitioning)


@dataclass(frozen=True)
class _Prepared:
    """A scan's planning before any footer: the files that may match (in order),
    their deletion masks, row-group restrictions, the live file count, row groups
    of files pruned by statistics, and the tombstones loaded."""

    kept: list[DataFile]
    masks: Mapping[str, DeletionMask]
    only_groups: Mapping[str, frozenset[int]]
    files_total: int
    rg_skipped: int
    tombstones_loaded: int


@dataclass
class FileTask:
    """One data file of a scan plan: its checked footer (whose ``etag`` every read
    of the file pins to), the row groups to read and the columns."""

    file: DataFile
    footer: FooterInfo
    row_groups: list[int]
    bytes_to_read: int
    columns: list[str]  # the file's columns to read (its own names)
    mask: DeletionMask | None = None
    # Schema evolution (matched by field id): the table columns these present, and
    # those the file lacks (added after it was written; read as NULL).  Empty
    # ``presents``: the file's names are the table's.
    presents: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    widened: bool = False  # a column's type was widened after the file was written
    # String/binary columns (file names) stored in the table's type, in neither the
    # predicate nor a key-range record: decoded as dictionaries where the chunk is
    # dictionary-only, and expanded after the mask and the filter (_expand).
    dictionary: frozenset[str] = frozenset()
    # The leaf columns read of each of ``columns`` (all of a nested column's, or
    # those of its projected fields), and the field each is conformed to after
    # decoding (None: read as stored; see :func:`_needs_conform`).
    column_leaves: tuple[tuple[int, ...], ...] = ()
    conform: tuple[Field | None, ...] = ()

    @property
    def table_columns(self) -> list[str]:
        """The table's names for what this task reads (projection + predicate + mask keys)."""
        if not self.presents and not self.missing:
            return self.columns
        return [*self.presents, *self.missing]

    @property
    def evolved(self) -> bool:
        return self.widened or bool(self.missing) or (
            bool(self.presents) and list(self.presents) != self.columns)

    @property
    def starts(self) -> tuple[int, ...]:
        """File position of each row group's first row."""
        return self.footer.group_starts

    @cached_property
    def column_indexes(self) -> list[int]:
        """The leaf columns read, in file order (their chunks are what is fetched)."""
        if not self.column_leaves:
            return self.footer.column_indexes(self.columns)
        return sorted({i for leaves in self.column_leaves for i in leaves})

    def spans(self, groups: Sequence[int]) -> list[tuple[int, int, int]]:
        return [(rg, self.starts[rg], self.footer.group_rows[rg]) for rg in groups]


@dataclass
class ScanPlan:
    version: int
    files_total: int
    files_pruned: int
    row_groups_total: int
    row_groups_pruned: int  # by statistics, or wholly deleted
    bytes_to_read: int
    columns: list[str]
    tasks: list[FileTask] = field(default_factory=list)
    tombstones_loaded: int = 0
    row_groups_deleted: int = 0

    def describe(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "files": {"total": self.files_total, "pruned": self.files_pruned,
                      "read": len(self.tasks)},
            "row_groups": {"total": self.row_groups_total, "pruned": self.row_groups_pruned,
                           "read": sum(len(t.row_groups) for t in self.tasks)},
            "bytes_to_read": self.bytes_to_read,
            "columns": self.columns,
            "tombstones_loaded": self.tombstones_loaded,
            "row_groups_deleted": self.row_groups_deleted,
            "files_read": [{"path": t.file.path, "row_groups": t.row_groups,
                            "bytes": t.bytes_to_read} for t in self.tasks],
        }


class _SparseFile(io.RawIOBase):
    """A read-only file made of the byte ranges we fetched; any other read is a bug."""

    def __init__(self, size: int, pieces: list[tuple[int, bytes]], name: str) -> None:
        self._size = size
        self._pieces = sorted(pieces)
        self._starts = [p[0] for p in self._pieces]
        self._pos = 0
        self._name = name

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._size}[whence]
        self._pos = base + offset
        return self._pos

    def readinto(self, buf: Any) -> int:
        import bisect

        n = min(len(buf), self._size - self._pos)
        if n <= 0:
            return 0
        i = bisect.bisect_right(self._starts, self._pos) - 1
        if i >= 0:
            start, data = self._pieces[i]
            if self._pos + n <= start + len(data):
                off = self._pos - start
                buf[:n] = data[off:off + n]
                self._pos += n
                return n
        raise CorruptMetadata(self._name, f"read of unfetched bytes [{self._pos}, {self._pos + n})"
                              " (footer offsets do not match the column chunks)")


class Scan(ArrowExport):
    """A planned read of one snapshot, or of a :class:`SnapshotSubset` of one.
    Build it with ``Table.scan``.  ``columns`` may hold dotted paths to nested
    fields: the result keeps the struct shape with only those fields (see the
    module docstring).  DuckDB, Polars and pyarrow read it directly
    (``__arrow_c_stream__``, :mod:`caslake.core.read.interop`)."""

    def __init__(self, io_: MetadataIO, footers: FooterCache,
                 snapshot: Snapshot | SnapshotSubset,
                 columns: Sequence[str] | None, where: str | Expr | None,
                 tombstones: TombstoneCache | None = None) -> None:
        self._io = io_
        self._store = io_.store
        self._footers = footers
        self._tombstones = tombstones or TombstoneCache()
        self.source = snapshot
        schema = self.table_schema
        self._arrow_schema = schema.to_arrow()
        names = schema.names
        if isinstance(columns, str):
            columns = [columns]
        # Names resolve as in a where predicate: exact, else unique ignoring case;
        # a dotted path projects a nested field (see :func:`projection`).
        self.columns, self._pruned = (names, {}) if columns is None else projection(
            schema, columns)
        self._bound = compile_where(where, self._arrow_schema)
        pred_cols = referenced_columns(self._bound) if self._bound is not None else set()
        pred_tops = top_columns(schema, pred_cols)
        self._where = where
        self._pred_tops = [n for n in names if n in pred_tops]
        # Read the projection plus the predicate's columns, in table order.
        self._read_columns = [n for n in names if n in set(self.columns) | pred_tops]
        # The columns and struct leaves whose statistics prune the predicate.
        self._pred_leaves = {} if self._bound is None else predicate_leaves(self._bound, schema)
        # Each column read, as the field it is read as: a column projected only in
        # part (and not in the predicate) reads just the projected fields' leaves.
        self._read_fields = {n: self._pruned[n] if n in self._pruned and n not in pred_tops
                             else schema.field(n) for n in self._read_columns}
        self._read_schema = pa.schema([self._read_fields[f.name].arrow_field()
                                       if f.name in self._read_fields else f.arrow_field()
                                       for f in schema.fields])
        # Projected in part but read whole (the predicate needs it): cut after the filter.
        self._trim = {n: f for n, f in self._pruned.items() if self._read_fields[n] is not f}
        self._plan: ScanPlan | None = None
        self._prepared: _Prepared | None = None
        self._limit: int | None = None  # rows at most (:meth:`limit`)
        # Row-group pruning needs statistics of the predicate's columns only.
        self._rg_types = {f.name: f.arrow_type for f in schema.fields if f.name in pred_cols}

    @property
    def snapshot(self) -> Snapshot:
        """The whole snapshot this scan reads (not defined for a subset scan)."""
        if not isinstance(self.source, Snapshot):
            raise InvalidArgument("this scan reads a subset of a snapshot, not a whole one")
        return self.source

    @property
    def version(self) -> int:
        return self.source.version

    @property
    def table_schema(self) -> TableSchema:
        src = self.source
        return src.manifest.schema if isinstance(src, Snapshot) else src.schema

    @property
    def schema(self) -> pa.Schema:
        return pa.schema([self._pruned[c].arrow_field() if c in self._pruned
                          else self._arrow_schema.field(c) for c in self.columns])

    # --- planning --------------------------------------------------------------

    def _file_might_match(self, f: DataFile) -> bool:
        if self._bound is None:
            return True
        stats = leaf_stats(f.stats, self._pred_leaves, key=self.source.key, path=f.path)
        if not might_match(self._bound, stats, f.row_count):
            return False
        src = self.source
        return partition_might_match(
            self._bound, f, src.manifest.partitioning if isinstance(src, Snapshot)
            else src.partitioning, self.table_schema, key=src.key)

    def _source(self) -> tuple[list[DataFile], Sequence[TombstoneRef],
                               Mapping[str, frozenset[int]], int, bool]:
        """The files to consider, their tombstones, any row-group restriction, how
        many live files there are, and whether the files are all of them (segments
        and blocks whose summaries cannot match are left out)."""
        src = self.source
        if isinstance(src, Snapshot):
            if self._bound is None:
                return self._io.live_files(src), src.manifest.tombstones, {}, \
                    src.manifest.totals.files, True
            matcher = summary_matcher(self._bound, schema=self.table_schema)
            files = self._io.pruned_files(src, matcher)
            return files, src.manifest.tombstones, {}, src.manifest.totals.files, False
        return list(src.files), src.tombstones, src.row_groups, len(src.files), True

    def _prepare(self) -> _Prepared:
        """Everything planning decides before reading a footer."""
        if self._prepared is None:
            files, refs, only_groups, total, complete = self._source()
            kept = [f for f in files if f.row_count > 0 and self._file_might_match(f)]
            kept_paths = {f.path for f in kept}
            masks = load_masks(self._store, self._tombstones, refs,
                               {f.path: f for f in files}, kept_paths, self.table_schema,
                               complete=complete)
            rg_skipped = 0
            for f in files:
                if f.path not in kept_paths:
                    rg_skipped += (f.row_group_count if f.path not in only_groups
                                   else len(only_groups[f.path]))
            self._prepared = _Prepared(
                kept, masks, only_groups, total, rg_skipped,
                sum(1 for ref in refs if not kept_paths.isdisjoint(ref.files)))
        return self._prepared

    def _task(self, f: DataFile, footer: FooterInfo, mask: DeletionMask | None,
              only_groups: Mapping[str, frozenset[int]], counts: list[int]) -> FileTask | None:
        """The task reading ``f`` (None: no row group survives); ``counts`` gains the
        row groups seen, pruned and wholly deleted."""
        schema = self.table_schema
        # Read at least one column, so row counts survive a predicate-only read.
        columns = self._read_columns or schema.names[:1]
        if mask is not None and mask.key_columns() - set(columns):
            columns = [n for n in schema.names if n in set(columns) | mask.key_columns()]
        file_cols, presents, missing = by_field_id(footer, schema, columns)
        column_leaves, conform = self._leaves(footer, file_cols, presents)
        col_idx = sorted({i for leaves in column_leaves for i in leaves})
        rename = dict(zip(file_cols, presents, strict=False))
        widened = any(_widened(footer.arrow_schema.field(src).type,
                               schema.field(dst).arrow_type) for src, dst in rename.items())
        file_types = {src: self._rg_types[dst] for src, dst in rename.items()
                      if dst in self._rg_types}
        struct_leaves = footer_leaves(footer, schema, self._pred_leaves, rename)
        wanted = only_groups.get(f.path)
        groups = []
        for rg, (start, n) in enumerate(zip(footer.group_starts, footer.group_rows,
                                            strict=True)):
            if wanted is not None and rg not in wanted:
                continue  # not this subset's share of the file
            counts[0] += 1
            if n == 0 or (self._bound is not None and not might_match(
                    self._bound, {rename[k]: v for k, v in footer.row_group_stats(
                        rg, file_types).items()} | leaf_group_stats(footer, rg, struct_leaves),
                    n)):
                counts[1] += 1
                continue
            if mask is not None and mask.group_fully_deleted(rg, start, n):
                counts[1] += 1
                counts[2] += 1
                continue
            groups.append(rg)
        if not groups:
            return None
        keys = set(self._rg_types) | (mask.key_columns() if mask is not None else set())
        dictionary = frozenset(src for src, dst in rename.items() if dst not in keys and _text(
            footer.arrow_schema.field(src).type, schema.field(dst).arrow_type))
        return FileTask(f, footer, groups, footer.chunk_bytes(groups, col_idx), file_cols, mask,
                        tuple(presents), tuple(missing), widened, dictionary,
                        column_leaves, conform)

    def _leaves(self, footer: FooterInfo, file_cols: list[str], presents: list[str]
                ) -> tuple[tuple[tuple[int, ...], ...], tuple[Field | None, ...]]:
        """The leaf columns to read of each of a file's ``file_cols`` (presenting
        table columns ``presents``) and the field each is conformed to (None: as
        stored).  A file read only for its row count (``presents`` empty) reads
        one leaf."""
        spans = footer.leaf_spans
        if not presents:
            return ((spans[file_cols[0]].first,),), (None,)
        leaves: list[tuple[int, ...]] = []
        conform: list[Field | None] = []
        for src, dst in zip(file_cols, presents, strict=True):
            want = self._read_fields.get(dst) or self.table_schema.field(dst)
            span = spans[src]
            leaves.append(tuple(_leaves_for(span, want)))
            conform.append(want if _needs_conform(span.field, want) else None)
        return tuple(leaves), tuple(conform)

    def plan(self) -> ScanPlan:
        if self._plan is not None:
            return self._plan
        prep = self._prepare()
        counts = [0, 0, 0]
        tasks = [t for f, footer in zip(prep.kept, self._fetch_footers(prep.kept), strict=True)
                 if (t := self._task(f, footer, prep.masks.get(f.path), prep.only_groups,
                                     counts)) is not None]
        self._plan = ScanPlan(version=self.version, files_total=prep.files_total,
                              files_pruned=prep.files_total - len(prep.kept),
                              row_groups_total=counts[0] + prep.rg_skipped,
                              row_groups_pruned=counts[1] + prep.rg_skipped,
                              bytes_to_read=sum(t.bytes_to_read for t in tasks),
                              columns=self.columns, tasks=tasks,
                              tombstones_loaded=prep.tombstones_loaded,
                              row_groups_deleted=counts[2])
        return self._plan

    @property
    def _streams(self) -> bool:
        """An unfiltered scan of a whole snapshot streams its entries block by block,
        even into ``to_arrow`` (its work units are sized from the manifest's totals)."""
        return isinstance(self.source, Snapshot) and self._bound is None

    def _lazy(self, streaming: bool) -> bool:
        """Whether to plan as the read goes (footers fetched as the files are
        reached) rather than from a finished plan: always for a streaming consumer
        (``to_batches``), else for an unfiltered snapshot scan."""
        return self._plan is None and (streaming or self._streams)

    def _stream_files(self) -> tuple[Iterator[tuple[DataFile, DeletionMask | None]],
                                     Mapping[str, frozenset[int]], int]:
        """The files to read, in order, each with its deletion mask; any row-group
        restriction; and the stored bytes they are drawn from, from what the
        manifest holds (no footer), to size work units by.  Entries are decoded a
        segment block at a time and pruned by statistics as they come, and each
        file's mask is loaded when the file is reached (its tombstones found
        through an index of the snapshot's references built once), so the first
        file waits for no other file, whatever the snapshot's size or history."""
        src = self.source
        files: Iterable[DataFile]
        if isinstance(src, Snapshot):
            refs: Sequence[TombstoneRef] = src.manifest.tombstones
            matcher = (None if self._bound is None
                       else summary_matcher(self._bound, schema=self.table_schema))
            files = self._io.iter_pruned_files(src, matcher)
            total = self._io.pruned_bytes(src, matcher, self._file_might_match)
            only_groups: Mapping[str, frozenset[int]] = {}
        else:
            files, refs, only_groups = src.files, src.tombstones, src.row_groups
            total = sum(f.size for f in src.files)
        touching: dict[str, list[TombstoneRef]] = {}
        for ref in refs:
            for path in ref.files:
                touching.setdefault(path, []).append(ref)
        schema = self.table_schema

        def stream() -> Iterator[tuple[DataFile, DeletionMask | None]]:
            for f in files:
                if f.row_count == 0 or not self._file_might_match(f):
                    continue
                mask = None
                if f.path in touching:
                    mask = load_masks(self._store, self._tombstones, touching[f.path],
                                      {f.path: f}, [f.path], schema, complete=False
                                      ).get(f.path)
                yield f, mask
        return stream(), only_groups, total

    def _tasks(self, footer_window: int = FOOTER_WINDOW
               ) -> tuple[Generator[FileTask, None, None], int]:
        """The tasks of a scan planned as it goes (:meth:`_stream_files`), in order,
        and the stored bytes they are drawn from: footers are fetched a bounded
        window (``footer_window`` files) ahead, so the first task needs one footer,
        not all."""
        files, only_groups, stored = self._stream_files()
        return self._lazy_tasks(files, only_groups, footer_window), stored

    def _lazy_tasks(self, pending: Iterator[tuple[DataFile, DeletionMask | None]],
                    only_groups: Mapping[str, frozenset[int]],
                    footer_window: int = FOOTER_WINDOW) -> Generator[FileTask, None, None]:
        counts = [0, 0, 0]
        window: deque[tuple[DataFile, DeletionMask | None, Future[FooterInfo]]] = deque()
        # Footer fetches never submit to a pool and wait: sharing cannot deadlock.
        pool = shared_pool("metadata", METADATA_THREADS)
        try:
            def refill() -> None:
                while len(window) < footer_window:
                    nxt = next(pending, None)
                    if nxt is None:
                        return
                    f, mask = nxt
                    hit = self._footers.cached(f)
                    if hit is not None:  # no I/O to overlap: no thread hand-off either
                        done: Future[FooterInfo] = Future()
                        done.set_result(hit)
                        window.append((f, mask, done))
                    else:
                        window.append((f, mask, pool.submit(self._footers.get, self._store, f)))
            refill()
            while window:
                f, mask, fut = window.popleft()
                footer = fut.result()
                refill()
                task = self._task(f, footer, mask, only_groups, counts)
                if task is not None:
                    yield task
        finally:
            # An abandoned stream must not leave fetches running: those not yet
            # started are cancelled, and those already under way are waited for.
            running = [fut for _, _, fut in window if not fut.cancel()]
            wait_futures(running)

    def _fetch_footers(self, files: list[DataFile]) -> list[FooterInfo]:
        return fetch_all(lambda f: self._footers.get(self._store, f), files)

    # --- execution -------------------------------------------------------------

    def _units(self, lazy: bool | None = None) -> Iterator[Unit]:
        """Work units: runs of row groups, in scan order, each at most ``UNIT_BYTES``
        of column chunks and ``MAX_UNIT_FILES`` files, and small enough that there
        are ``UNITS_PER_THREAD`` units per scan thread (so every core decodes), but
        not below ``MIN_UNIT_BYTES``.  A unit may span files (one segment per
        file): cut per file, a small file, or the end of each file, became a small
        unit that ran alone on one core at the end.  Each cut falls at the row
        group boundary nearest a multiple of the unit size, so the units come out
        equal to within a row group.

        ``lazy`` (:meth:`_lazy`): the tasks stream in (footers fetched as they are
        reached), and units are sized by the stored bytes the manifest gives for
        the files the scan may read (:meth:`_stream_files`), scaled to the share
        of them the first file's projected column chunks hold (the stored bytes
        are every column's: a 2-column scan of a wide table would otherwise get
        one unit per file, and one core would decode it all).  The file cap keeps
        a unit's footers and reads bounded however small the files are, so the
        first units, and the first batch, wait for O(1) files.  Otherwise units
        are sized by the finished plan's exact bytes.  (None: as ``to_arrow``.)"""
        tasks: Iterable[FileTask]
        if lazy is None:
            lazy = self._lazy(streaming=False)
        if lazy:
            pending, stored = self._tasks()
            first = next(pending, None)
            if first is None:
                return
            tasks = itertools.chain([first], pending)
            share = first.bytes_to_read / max(1, first.file.size)
            total = int(stored * min(1.0, share))
        else:
            tasks = self.plan().tasks
            total = sum(t.bytes_to_read for t in tasks)
        limit = min(UNIT_BYTES, max(MIN_UNIT_BYTES, total // (UNITS_PER_THREAD * threads())))
        unit: list[tuple[FileTask, list[int]]] = []
        done = 0  # bytes of the row groups before ``rg``
        cut = limit  # the next multiple of the limit
        for t in tasks:
            if len(unit) >= MAX_UNIT_FILES:  # many small files: cut at the cap
                yield tuple(unit)
                unit = []
                cut = done + limit
            col_idx = t.column_indexes
            group: list[int] = []
            for rg in t.row_groups:
                rg_bytes = t.footer.chunk_bytes([rg], col_idx)
                # Cut before ``rg`` if the cut is more than half of it away.
                if (group or unit) and done + rg_bytes / 2 > cut:
                    if group:
                        unit.append((t, group))
                    yield tuple(unit)
                    unit, group = [], []
                    cut += limit
                    while cut <= done:  # a row group bigger than the limit
                        cut += limit
                group.append(rg)
                done += rg_bytes
            if group:
                unit.append((t, group))
        if unit:
            yield tuple(unit)

    def _open_unit(self, task: FileTask, groups: list[int]
                   ) -> Callable[[tuple[str, ...]], pq.ParquetFile]:
        """Opens ParquetFiles that can serve exactly the needed column chunks of
        ``groups``, decoding the named columns as dictionaries.

        On a local store pyarrow reads the pinned file directly (counted as one
        ranged read of the chunk bytes); elsewhere the chunks are fetched with
        coalesced, parallel range GETs pinned by ETag and served from memory."""
        footer = task.footer
        ranges = footer.chunk_ranges(groups, task.column_indexes)
        path = self._store.local_path(task.file.path, etag=footer.etag)
        if path is not None:
            self._store.counters.record(GET_RANGE, bytes_in=sum(e - s for s, e in ranges))
            local = path
            return lambda dictionary: pq.ParquetFile(
                local, metadata=footer.metadata, memory_map=True, read_dictionary=list(dictionary),
                **VERIFY_PAGE_CHECKSUMS)
        datas = self._store.get_ranges(task.file.path, ranges, etag=footer.etag)
        pieces = [(s, d) for (s, _), d in zip(ranges, datas, strict=True)]
        return lambda dictionary: pq.ParquetFile(
            pa.PythonFile(_SparseFile(task.file.size, pieces, task.file.path), mode="r"),
            metadata=footer.metadata, pre_buffer=False, read_dictionary=list(dictionary),
            **VERIFY_PAGE_CHECKSUMS)

    def _read_unit(self, task: FileTask, groups: list[int], *,
                   with_positions: bool = False, column_threads: bool = True) -> pa.Table:
        """Decode, drop deleted rows, filter, project.  ``with_positions`` adds a
        ``__pos`` column with each surviving row's position in the file;
        ``column_threads``: pyarrow decodes a row group's columns on its own threads."""
        files: dict[tuple[str, ...], pq.ParquetFile] = {}
        try:
            opener = self._open_unit(task, groups)
        except (OSError, pa.ArrowException) as e:
            raise CorruptMetadata(task.file.path, f"unreadable column data ({e})") from None
        # One row group at a time: pyarrow's multi-group read concatenates every
        # column into one buffer (a full copy), and the mask and filter then run
        # on a group's rows while they are fresh, each output its own chunk.
        parts = []
        chunks: frozenset[tuple[int, int]] = frozenset()
        crc = task.file.footer_crc32
        if task.dictionary:
            chunks = (task.footer.dictionary_chunks if crc is None else
                      _DICTIONARY_CHUNKS.get_or_load((task.file.path, crc),
                                                     lambda: task.footer.dictionary_chunks))
        for span in task.spans(groups):
            dictionary = _dictionary_columns(task, span[0], chunks)
            pf = files.get(dictionary)
            if pf is None:
                try:
                    pf = files[dictionary] = opener(dictionary)
                except (OSError, pa.ArrowException) as e:
                    raise CorruptMetadata(task.file.path, f"unreadable column data ({e})"
                                          ) from None
            parts.append(self._read_group(pf, task, span, with_positions, column_threads))
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts)

    def _read_group(self, pf: pq.ParquetFile, task: FileTask, span: tuple[int, int, int],
                    with_positions: bool, column_threads: bool) -> pa.Table:
        """Decode one row group of ``pf`` and finish it (see :meth:`_finish`)."""
        rg, _, rows = span
        try:
            if task.footer.flat:
                table = pf.read_row_group(rg, columns=task.columns, use_threads=column_threads)
            else:  # by leaf index: a nested column's projected fields only, and never
                # by a dotted path (a top-level name may contain dots)
                table = pf.reader.read_row_group(rg, column_indices=task.column_indexes,
                                                 use_threads=column_threads)
        except (OSError, pa.ArrowException) as e:
            raise CorruptMetadata(task.file.path, f"unreadable column data ({e})") from None
        if table.column_names != task.columns:
            table = table.select(task.columns)
        if any(f is not None for f in task.conform):
            spans = task.footer.leaf_spans
            table = _conform(table, [None if want is None else (_with_ids(
                table.schema.field(i), spans[task.columns[i]].field), want)
                for i, want in enumerate(task.conform)], task.file.path)
        if task.evolved:
            table = _present(table, task, self._read_schema)
        table = _cast_to(table, self._read_schema, task.table_columns, task.file.path)
        if table.num_rows != rows:
            raise CorruptMetadata(task.file.path, f"decoded {table.num_rows} rows where the "
                                  f"footer promises {rows}")
        return self._finish(table, task.mask, [span], with_positions, task.file.path)

    def _finish(self, table: pa.Table, mask: DeletionMask | None,
                spans: list[tuple[int, int, int]], with_positions: bool, path: str
                ) -> pa.Table:
        """Drop deleted rows, filter, project, and expand dictionary-decoded columns
        to the table's types: ``table`` holds every row of ``spans``, decoded
        from data file ``path``.

        A simple predicate (columns against literals: it cannot fail on any
        value) and the deletion mask become one filter (a row is kept where the
        predicate is TRUE and the mask keeps it); a computed predicate runs after
        the mask, so it never sees a deleted row."""
        if with_positions:
            table = table.append_column(POSITION, _int64_array(np.concatenate(
                [np.arange(start, start + n, dtype=np.int64) for _, start, n in spans])))
        dead = mask.dead_rows(spans, table) if mask is not None else None
        bound = self._bound

        def expand(t: pa.Table) -> pa.Table:
            return _expand(t, self._arrow_schema, path)
        if bound is not None and not is_computed(bound):
            table = _filter(table, predicate_mask(table, bound), dead, expand)
        else:
            if dead is not None:
                table = drop_deleted(table, dead, expand)
            if bound is not None:
                table = filter_table(table, bound)
        table = table.select([*self.columns, POSITION] if with_positions else self.columns)
        if self._trim:
            table = _conform(table, [(self._read_fields[n].arrow_field(), self._trim[n])
                                     if n in self._trim else None
                                     for n in table.column_names], path)
        return _expand(table, self._arrow_schema, path)

    def matching_rows(self) -> Iterator[tuple[FileTask, pa.Table]]:
        """Per segment of a work unit, in scan order: its file, and the projected
        live rows that match ``where`` with their file positions in a ``__pos``
        column.  Units are decoded on the scan pool, ``threads() + 1`` ahead."""
        yield from self._in_order(threads() + 1, with_positions=True,
                                  lazy=self._lazy(streaming=False))

    def _read_segments(self, unit: Unit, column_threads: bool, with_positions: bool
                       ) -> list[tuple[FileTask, pa.Table]]:
        """Every segment of ``unit``, in order, with its rows (``column_threads``
        and ``with_positions``: see :meth:`_read_unit`)."""
        return [(task, self._read_unit(task, groups, with_positions=with_positions,
                                       column_threads=column_threads))
                for task, groups in unit]

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """Stream the rows; the first batch waits only for the first work units'
        footers and chunks (O(1) files: footers further on are fetched, and
        tombstones loaded, as the stream advances), with or without ``where``."""
        return self._stream(ahead=threads() + 1, lazy=self._lazy(streaming=True))

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        """The rows as record batches: :meth:`to_batches`."""
        return self.to_batches()

    def _stream(self, ahead: int | None, lazy: bool) -> Iterator[pa.RecordBatch]:
        """The rows, unit by unit in order, at most ``ahead`` units decoded or
        queued ahead of the consumer (``None``: every unit at once); a limited
        scan's first rows only (:meth:`_first_rows`)."""
        if self._limit is not None:
            yield from self._first_rows(self._limit)
            return
        for _, table in self._in_order(ahead, with_positions=False, lazy=lazy):
            yield from table.to_batches()

    # --- limit and count ---------------------------------------------------------

    def limit(self, n: int) -> Scan:
        """This scan stopped after ``n`` rows: a new :class:`Scan` whose reads
        (``to_arrow``, ``to_batches``, the Arrow stream, ``count``) return the
        first ``n`` rows in scan order.  It decodes one row group at a time, in
        order, and fetches nothing past the row group that completes ``n``."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InvalidArgument(f"limit needs a whole number of rows >= 0, not {n!r}")
        limited = copy.copy(self)
        limited._limit = n if self._limit is None else min(n, self._limit)
        return limited

    def _first_rows(self, n: int) -> Iterator[pa.RecordBatch]:
        """The first ``n`` rows, row group by row group on this thread: footers
        are fetched one file ahead (a few ahead when a predicate may skip files)."""
        if n == 0:
            return
        window = 1 if self._bound is None else FOOTER_WINDOW
        lazy = None if self._plan is not None else self._tasks(footer_window=window)[0]
        tasks: Iterable[FileTask] = self.plan().tasks if lazy is None else lazy
        try:
            for task in tasks:
                for rg in task.row_groups:
                    table = self._read_unit(task, [rg], column_threads=False)
                    for batch in table.to_batches():
                        if batch.num_rows >= n:
                            yield batch.slice(0, n)
                            return
                        n -= batch.num_rows
                        yield batch
        finally:
            if lazy is not None:
                lazy.close()  # cancels the footers fetched ahead

    def count(self) -> int:
        """The number of rows the scan returns.  Without a predicate it is read from
        the manifest (stored rows less the rows its tombstones delete; the
        tombstones are loaded and checked as a read would), no data file opened;
        with one the matching rows are read and counted, reading only the
        predicate's columns."""
        known = self._counted_rows()
        if known is not None:
            return known if self._limit is None else min(known, self._limit)
        narrow = self
        if self._pred_tops != self.columns:  # only the predicate's columns are read
            narrow = Scan(self._io, self._footers, self.source, self._pred_tops, self._where,
                          self._tombstones)
            narrow._limit = self._limit
        return sum(b.num_rows for b in narrow.to_batches())

    def _counted_rows(self) -> int | None:
        """The live rows, from metadata and tombstones alone (None: a predicate, or
        a row-group restriction, needs the data)."""
        if self._bound is not None:
            return None
        src = self.source
        if isinstance(src, Snapshot) or not src.row_groups:
            self._prepare()  # the tombstones are loaded and checked, as a read would
        if isinstance(src, Snapshot):
            m = src.manifest
            return m.totals.rows - sum(m.deleted_rows_per_file().values())
        if src.row_groups:
            return None
        paths = {f.path for f in src.files}
        gone = sum(n for ref in src.tombstones for p, n in ref.files.items() if p in paths)
        return sum(f.row_count for f in src.files) - gone

    def _in_order(self, ahead: int | None, with_positions: bool, lazy: bool
                  ) -> Iterator[tuple[FileTask, pa.Table]]:
        """Every segment of every work unit with its rows, in scan order; the units
        are read on the scan pool, at most ``ahead`` decoded or queued ahead of
        the consumer (``None``: every unit at once).  ``lazy``: see :meth:`_units`."""
        units = self._units(lazy)
        first = list(itertools.islice(units, max(2, threads())))
        if len(first) == 1:  # nothing to overlap: read inline, no thread hand-off
            # pyarrow decodes the columns in parallel only if that pays for its
            # hand-offs: it does not for a few row groups' worth of small chunks.
            unit = first[0]
            yield from self._read_segments(unit, unit_bytes(unit) >= COLUMN_THREADS_BYTES,
                                           with_positions)
            return
        # With a unit for every scan thread, each thread decodes its row group's
        # columns itself: handing them to pyarrow's pool as well (which the other
        # scan threads share) cost ~15% of a 2-core full scan in hand-offs.  With
        # fewer units than threads, pyarrow's threads decode columns in parallel.
        inner = len(first) < threads()
        window: deque[Future[list[tuple[FileTask, pa.Table]]]] = deque()
        pending = itertools.chain(first, units)
        # Units never wait on other units, so one process-wide pool cannot deadlock.
        pool = shared_pool("scan", threads())
        try:
            def refill() -> None:
                while ahead is None or len(window) < ahead:
                    nxt = next(pending, None)
                    if nxt is None:
                        return
                    window.append(pool.submit(self._read_segments, nxt, inner,
                                              with_positions))
            refill()
            while window:
                segments = window.popleft().result()
                refill()
                yield from segments
        finally:
            for f in window:  # an abandoned reader must not leave work running
                f.cancel()

    def to_reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self.schema, self.to_batches())

    def _export_reader(self) -> pa.RecordBatchReader:
        return self.to_reader()

    def to_arrow(self) -> pa.Table:
        # Every result is kept, so every unit is queued at once: a bounded window
        # in consumption order would leave a core idle behind a slow unit.
        return pa.Table.from_batches(list(self._stream(ahead=None,
                                                       lazy=self._lazy(streaming=False))),
                                     schema=self.schema)


def unit_bytes(unit: Unit) -> int:
    """Bytes of the column chunks a work unit reads."""
    return sum(t.footer.chunk_bytes(groups, t.column_indexes) for t, groups in unit)


def summary_matcher(bound: BoundExpr, *, schema: TableSchema) -> MightMatch:
    """Whether a segment or block whose entries' merged statistics are ``stats``
    may hold a row ``bound`` matches: the same soundness rules as a single file."""
    leaves = predicate_leaves(bound, schema)

    def check(stats: Stats, rows: int, where: str) -> bool:
        return bool(might_match(bound, leaf_stats(stats, leaves, key=where, path=where), rows))
    return check


PredicateLeaves = dict[StatsKey, tuple[str, Field]]


def predicate_leaves(bound: BoundExpr, schema: TableSchema) -> PredicateLeaves:
    """The primitive columns and struct leaves (``device.os``) whose statistics
    can prune ``bound``, under the key :func:`~caslake.expr.might_match` reads
    them by (see :func:`~caslake.expr.pruning_paths`), each with its dotted path."""
    out: PredicateLeaves = {}
    for path in pruning_paths(bound):
        node = schema.find(path[0])
        for name in path[1:]:
            node = node.child(name) if node is not None and node.type == STRUCT else None
        if node is not None and not node.nested:
            out[path[0] if len(path) == 1 else path] = (".".join(path), node)
    return out


def leaf_stats(stats: Stats, leaves: PredicateLeaves, *, key: str, path: str
               ) -> dict[StatsKey, ColumnStats]:
    """Manifest or summary statistics (by field id) of the predicate's ``leaves``;
    a leaf without any is unknown.  A bad value is CorruptMetadata naming ``key``."""
    return {k: column_stats(stats[f.id], f.arrow_type, key=key, path=path, column=name)
            for k, (name, f) in leaves.items() if f.id in stats}


def footer_leaves(footer: FooterInfo, schema: TableSchema, leaves: PredicateLeaves,
                  rename: Mapping[str, str]) -> dict[StatsKey, tuple[int, pa.DataType]]:
    """The leaf column of a data file, and the table type, of each struct leaf in
    ``leaves``: matched by field id at every level (``rename``: the file's
    top-level names to the table's).  A leaf the file does not hold is left out."""
    by_table = {dst: src for src, dst in rename.items()}
    spans = footer.leaf_spans
    out: dict[StatsKey, tuple[int, pa.DataType]] = {}
    for key, (_, leaf) in leaves.items():
        if isinstance(key, str) or key[0] not in by_table:
            continue  # a column: read through the footer's column statistics
        node: Field | None = schema.field(key[0])
        span: LeafSpan | None = spans.get(by_table[key[0]])
        for name in key[1:]:
            node = node.child(name) if node is not None else None
            span = span.child_by_id(node.id) if span is not None and node is not None else None
        if span is not None and not span.children and span.count == 1:
            out[key] = (span.first, leaf.arrow_type)
    return out


def leaf_group_stats(footer: FooterInfo, rg: int,
                     leaves: Mapping[StatsKey, tuple[int, pa.DataType]]
                     ) -> dict[StatsKey, ColumnStats]:
    """Footer statistics of row group ``rg`` for struct leaves (:func:`footer_leaves`).
    Parquet counts a leaf's nulls at every level, so a struct leaf's null count is
    the rows where it, or any struct above it, is NULL -- what a predicate sees."""
    if not leaves:
        return {}
    names = {key: str(i) for i, key in enumerate(leaves)}
    stats = row_group_stats(footer.metadata, rg, {names[k]: t for k, (_, t) in leaves.items()},
                            leaves={names[k]: i for k, (i, _) in leaves.items()})
    return {k: stats[names[k]] for k in leaves if names[k] in stats}


def drop_deleted(table: pa.Table, dead: np.ndarray,
                 before_slicing: Callable[[pa.Table], pa.Table] | None = None) -> pa.Table:
    """The rows of ``table`` but those at ``dead`` (sorted int64 offsets), in order.

    Deletes that leave long runs of kept rows (a few rows, or contiguous
    ranges however long) are cut out as zero-copy slices of the decoded
    columns (no per-row work at all); the runs are counted, not the deleted
    rows.  Scattered dense deletes go through one vectorised ``filter``.
    ``before_slicing`` (e.g. dictionary expansion) runs on the whole table when
    it is sliced, so once rather than once per slice."""
    if len(dead) == 0:
        return table
    n = table.num_rows
    # Kept runs [start, end): before the first deleted row, and after each
    # deleted row whose successor is kept, up to the next deleted row.
    after = np.flatnonzero(np.diff(dead, append=n) > 1)
    starts = dead[after] + 1
    ends = np.append(dead, n)[after + 1]
    if dead[0] > 0:
        starts, ends = np.append(0, starts), np.append(dead[0], ends)
    if len(starts) * SLICE_RUN_ROWS > n:
        return table.filter(keep_bitmap(dead, n))
    runs = list(zip(starts.tolist(), ends.tolist(), strict=True))
    if not runs:
        return table.slice(0, 0)
    if before_slicing is not None:
        table = before_slicing(table)
    batches = table.to_batches()
    if len(batches) == 1:  # a decoded group: slicing one batch is ~2x cheaper than a table
        cut = batches[0].slice
        return pa.Table.from_batches([cut(a, b - a) for a, b in runs], schema=table.schema)
    return pa.concat_tables([table.slice(a, b - a) for a, b in runs])


def _filter(table: pa.Table, matches: Any, dead: np.ndarray | None,
            before_slicing: Callable[[pa.Table], pa.Table]) -> pa.Table:
    """The rows of ``table`` where ``matches`` (a predicate's per-row value, or a
    constant scalar) is TRUE and that are not at ``dead`` (None: none), in
    order (``before_slicing``: see :func:`drop_deleted`)."""
    if isinstance(matches, pa.Scalar):
        if matches.as_py() is not True:
            return table.slice(0, 0)
        return table if dead is None else drop_deleted(table, dead, before_slicing)
    if dead is not None:
        matches = pc.and_(matches, keep_bitmap(dead, table.num_rows))
    return table.filter(matches)


def keep_bitmap(dead: np.ndarray, n: int) -> Any:
    """A boolean Arrow array of ``n`` rows, false exactly at ``dead`` (sorted int64
    offsets), built as a bitmap: per deleted row when they are few, else by
    packing a per-row mask (``ufunc.at`` costs more per element than a pass)."""
    if len(dead) * 64 > n:
        keep = np.ones(n, dtype=bool)
        keep[dead] = False
        return _bool_array(keep)
    bits = np.full((n + 7) // 8, 0xFF, dtype=np.uint8)
    np.bitwise_and.at(bits, dead >> 3, ~np.left_shift(1, dead & 7).astype(np.uint8))
    return pa.Array.from_buffers(pa.bool_(), n, [None, _buffer(bits)])


def _bool_array(values: np.ndarray) -> Any:
    """A boolean Arrow array of ``values``, built from a buffer: pyarrow imports
    pandas (~0.3 s) on its first conversion of a NumPy array or a Python value."""
    bits = np.packbits(values, bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(values), [None, _buffer(bits)])


def _int64_array(values: np.ndarray) -> Any:
    """An int64 Arrow array of ``values`` (int64), built from its buffer (see
    :func:`_bool_array`)."""
    return pa.Array.from_buffers(pa.int64(), len(values), [None, _buffer(values)])


def _buffer(values: np.ndarray) -> pa.Buffer:
    """A zero-copy Arrow buffer over a contiguous NumPy array."""
    return pa.py_buffer(cast(Any, values))


def _view(buffer: pa.Buffer | None, dtype: str, count: int, offset: int) -> np.ndarray:
    """``count`` items of ``dtype`` at byte ``offset`` of an Arrow buffer, zero-copy."""
    return np.frombuffer(cast(Any, buffer), dtype, count, offset)


def _text(stored: pa.DataType, table_type: pa.DataType) -> bool:
    """A string or binary column stored in the table's own type (not a large one:
    pyarrow decodes those to dictionaries of the small type)."""
    return stored.equals(table_type) and (pa.types.is_string(stored)
                                          or pa.types.is_binary(stored))


def _dictionary_columns(task: FileTask, rg: int, chunks: frozenset[tuple[int, int]]
                        ) -> tuple[str, ...]:
    """The columns of ``task`` to decode as dictionaries in row group ``rg``: those
    whose chunk there is dictionary-only (in ``chunks``, the file's; a plain or
    fallen-back chunk would be hashed into a dictionary value by value, slower
    than decoding it plain)."""
    if not task.dictionary:
        return ()
    return tuple(name for name, leaves in zip(task.columns, task.column_leaves, strict=True)
                 if name in task.dictionary and (rg, leaves[0]) in chunks)


def _expand(table: pa.Table, schema: pa.Schema, path: str) -> pa.Table:
    """``table`` with its dictionary-decoded columns in the table's plain types.

    pyarrow does not check dictionary indices when it decodes to dictionaries;
    one past its dictionary (a damaged page header, which page CRCs do not
    cover) is CorruptMetadata naming data file ``path``."""
    for i, fld in enumerate(table.schema):
        if pa.types.is_dictionary(fld.type):
            to = schema.field(fld.name).type
            try:
                chunks = [_expand_chunk(c, to) for c in table.column(i).chunks]
            except (IndexError, pa.ArrowInvalid) as e:
                raise CorruptMetadata(path, f"column {fld.name!r} holds a dictionary index "
                                      f"past its dictionary ({e})") from None
            table = table.set_column(i, fld.with_type(to), pa.chunked_array(chunks, to))
    return table


_OFFSETS: dict[int, np.ndarray] = {}  # width -> 0, width, 2 * width...: shared, read-only


def _expand_chunk(chunk: Any, to: pa.DataType) -> Any:
    """A dictionary-encoded string or binary array as plain ``to``.

    A dictionary whose values all have one small width (TPC-H's flags) expands
    with one NumPy gather of fixed-width values, and offsets shared by every
    array of that width (~4x faster than pyarrow's cast); any other goes
    through pyarrow's cast."""
    values, indices, n = chunk.dictionary, chunk.indices, len(chunk)
    if (n == 0 or len(values) == 0 or not indices.type.equals(pa.int32())
            or not values.type.equals(to) or (chunk.null_count and chunk.offset)):
        return chunk.cast(to)
    bounds = _view(values.buffers()[1], "int32", len(values) + 1, values.offset * 4)
    width = int(bounds[1] - bounds[0])
    if not 0 < width <= 16 or width * (2 * n + 1) >= 2**31 or bool(
            (np.diff(bounds) != width).any()):
        return chunk.cast(to)
    fixed = _view(values.buffers()[2], f"V{width}", len(values), int(bounds[0]))
    # Unsigned, so that a negative index is out of bounds too (NumPy would wrap it).
    at = _view(indices.buffers()[1], "uint32", n, chunk.offset * 4)
    try:
        data = fixed.take(at)
    except IndexError:  # a NULL slot's arbitrary index, or damage: Arrow tells which
        return chunk.cast(to)
    offsets = _OFFSETS.get(width)
    if offsets is None or len(offsets) <= n:
        offsets = _OFFSETS[width] = np.arange(0, width * (2 * n + 1), width, dtype=np.int32)
    validity = chunk.buffers()[0] if chunk.null_count else None
    return pa.Array.from_buffers(to, n, [validity, _buffer(offsets[:n + 1]), _buffer(data)],
                                 chunk.null_count)


def _same_values(a: pa.DataType, b: pa.DataType) -> bool:
    """True if a column stored as ``a`` may be presented as ``b`` without changing
    any value: equal types, string/binary offset widths, or a timestamp's unit
    (Parquet stores seconds as milliseconds; the cast below is a checked one) or
    time zone spelling."""
    if a.equals(b):
        return True
    if pa.types.is_timestamp(a) and pa.types.is_timestamp(b):
        return (a.tz is None) == (b.tz is None)
    text = (pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view)
    blob = (pa.types.is_binary, pa.types.is_large_binary, pa.types.is_binary_view)
    return any(any(k(a) for k in kind) and any(k(b) for k in kind) for kind in (text, blob))


def _cast_to(table: pa.Table, schema: pa.Schema, names: list[str], path: str) -> pa.Table:
    """Present ``table`` (decoded from data file ``path``) in the table schema.  A
    column whose stored type would change values to fit is a damaged file."""
    # A dictionary-decoded column stays so (expanded at the end, see _expand).
    target = pa.schema([have if pa.types.is_dictionary(have.type)
                        and have.type.value_type.equals(schema.field(n).type)
                        else schema.field(n) for have, n in zip(table.schema, names, strict=True)])
    if table.schema.equals(target, check_metadata=False):
        return table
    for have, want in zip(table.schema, target, strict=True):
        if not _same_values(have.type, want.type):
            raise CorruptMetadata(path, f"column {want.name!r} is stored as {have.type}; the "
                                  f"table schema says {want.type}")
    try:
        return table.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise CorruptMetadata(path, f"column types differ from the table schema ({e})"
                              ) from None


def by_field_id(footer: FooterInfo, schema: TableSchema, names: Sequence[str]
                ) -> tuple[list[str], list[str], list[str]]:
    """Match table columns ``names`` to a data file's columns by field id, never by
    name (docs/format.md, "Reading by field id").  Returns the file's column names
    to read, the table names they present (same order), and the table names the
    file lacks.  A file whose columns carry no field ids at all (not written by
    caslake) is matched by name."""
    file_ids = field_ids_of(footer.arrow_schema)
    file_names = footer.arrow_schema.names
    if all(i is None for i in file_ids):
        return list(names), list(names), []
    by_id = {i: n for i, n in zip(file_ids, file_names, strict=True) if i is not None}
    read: list[str] = []
    presents: list[str] = []
    missing: list[str] = []
    for name in names:
        src = by_id.get(schema.field(name).id)
        if src is None:
            missing.append(name)
        else:
            read.append(src)
            presents.append(name)
    if not read:  # only added columns: read one column anyway, for the row count
        read, presents = [file_names[0]], []
    return read, presents, missing


def _widened(stored: pa.DataType, table_type: pa.DataType) -> bool:
    if stored.equals(table_type):
        return False
    try:
        return is_widening(type_to_str(stored), type_to_str(table_type))
    except InvalidArgument:
        return False


def _present(table: pa.Table, task: FileTask, schema: pa.Schema) -> pa.Table:
    """A file's columns under the table's names: renamed by field id, widened types
    cast (every old value fits), columns the file lacks as NULLs."""
    arrays: list[Any] = []
    names: list[str] = []
    for i, name in enumerate(task.presents):
        col = table.column(i)
        want = schema.field(name).type
        if not pa.types.is_dictionary(col.type) and _widened(col.type, want):
            col = col.cast(want)
        arrays.append(col)
        names.append(name)
    for name in task.missing:
        arrays.append(pa.nulls(table.num_rows, schema.field(name).type))
        names.append(name)
    return pa.Table.from_arrays(arrays, names=names)


# --- nested columns: which leaves to read, and conforming what was read -------------


def projection(schema: TableSchema, columns: Sequence[str]) -> tuple[list[str], dict[str, Field]]:
    """The top-level columns a projection returns, in the order first named, and
    for each named only by nested paths (``dev.os``, ``items.element.price``) its
    field cut down to those paths: the column keeps its shape (``dev:
    struct<os>``), as Spark's nested column pruning gives it.  A column named
    whole (``dev``) is returned whole.  Names resolve as in a predicate: exact,
    else unique ignoring case (UnknownColumn / AmbiguousColumn otherwise)."""
    tops: list[str] = []
    paths: dict[str, list[tuple[str, ...]]] = {}
    for c in columns:
        top, rest = resolve_path(schema, c)
        if top not in paths:
            tops.append(top)
            paths[top] = []
        paths[top].append(rest)
    return tops, {t: _prune(schema.field(t), paths[t]) for t in tops if all(paths[t])}


def _match(name: str, names: Sequence[str]) -> str | None:
    """``name`` among ``names``: exact, else the one equal ignoring case (None)."""
    if name in names:
        return name
    folded = [n for n in names if n.casefold() == name.casefold()]
    return folded[0] if len(folded) == 1 else None


def resolve_path(schema: TableSchema, name: str) -> tuple[str, tuple[str, ...]]:
    """The top-level column ``name`` denotes and the path below it (empty: the
    whole column).  A top-level name that contains dots wins over a nested path."""
    names = schema.names
    if name in names:
        return name, ()
    parts = name.split(".")
    for i in range(len(parts) - 1, 0, -1):
        top = _match(".".join(parts[:i]), names)
        if top is None:
            continue
        node = schema.field(top)
        rest: list[str] = []
        for part in parts[i:]:
            hit = _match(part, [c.name for c in node.children])
            if hit is None:
                break
            rest.append(hit)
            node = next(c for c in node.children if c.name == hit)
        else:
            return top, tuple(rest)
    return resolve_column(name, names), ()


def top_columns(schema: TableSchema, names: Iterable[str]) -> set[str]:
    """The top-level columns that ``names`` (columns or nested paths) lie in."""
    return {resolve_path(schema, n)[0] for n in names}


def _prune(f: Field, paths: Sequence[tuple[str, ...]]) -> Field:
    """``f`` with only the nested fields on ``paths`` (relative to ``f``; an empty
    path keeps all of ``f``).  A map is kept whole."""
    if not f.nested or f.type == MAP or any(not p for p in paths):
        return f
    kids = [_prune(c, [p[1:] for p in paths if p[0] == c.name])
            for c in f.children if any(p[0] == c.name for p in paths)]
    return replace(f, children=tuple(kids))


def _leaves_for(span: LeafSpan, want: Field) -> list[int]:
    """The leaf columns of a stored column (``span``) to read to present it as
    ``want``: those of the fields ``want`` has, matched by field id at every level
    (a dropped field's are not read).  When none of them is stored, one leaf of
    the node, so its own nulls (and a list's lengths) are still known."""
    if not want.nested or want.type == MAP or not span.children:
        return list(span.leaves)
    out: list[int] = []
    for c in want.children:
        hit = span.child_by_id(c.id)
        if hit is not None:
            out.extend(_leaves_for(hit, c))
    return out or [span.first]


def _needs_conform(stored: pa.Field[Any], want: Field) -> bool:
    """Whether a stored column is presented through ``conform_column``: every
    nested one (matched by field id at every level), and a primitive Parquet
    stores in another type (``time32[s]`` as milliseconds, ``date64`` as days,
    ``decimal32``/``decimal64``, ``uuid``).  Equal types, string widths,
    timestamp units and widenings go through the flat path (:func:`_cast_to`)."""
    if want.nested:
        return True
    t = want.arrow_type
    if stored.type.equals(t) or pa.types.is_dictionary(stored.type):
        return False
    return not (_same_values(stored.type, t) or _widened(stored.type, t))


def _conform(table: pa.Table, fields: Sequence[tuple[pa.Field[Any], Field] | None], path: str
             ) -> pa.Table:
    """``table`` with each column whose entry in ``fields`` is ``(stored, want)``
    presented as ``want``'s type (by field id at every level, the ids read from
    ``stored``, the column's field; its own name is kept).  A stored column that
    cannot be presented so is CorruptMetadata naming ``path``."""
    for i, entry in enumerate(fields):
        if entry is None:
            continue
        stored, want = entry
        target = want.arrow_type
        try:
            col = conform_column(table.column(i), stored, want)
            if str(col.type) != str(target):  # e.g. a map's entries under another name
                col = col.cast(target)
        except (ValueError, pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise CorruptMetadata(path, f"column {stored.name!r} cannot be read as the table "
                                  f"schema's {target} ({e})") from None
        table = table.set_column(i, want.arrow_field().with_name(stored.name), col)
    return table


def _with_ids(read: pa.Field[Any], stored: pa.Field[Any]) -> pa.Field[Any]:
    """``read`` (a column as pyarrow decoded some of its leaves) with the field ids
    of ``stored`` (the file's whole column) at every level: pyarrow drops a list
    element's id when it reads only some of the element's fields.  Struct fields
    are matched by name (the file's own names), a list's element and a map's key
    and value by position."""
    t, st = read.type, stored.type
    out: Any = t
    if pa.types.is_struct(t) and pa.types.is_struct(st):
        by_name = {f.name: f for f in st}
        out = pa.struct([_with_ids(c, by_name[c.name]) if c.name in by_name else c for c in t])
    elif pa.types.is_list(t) and pa.types.is_list(st):
        out = pa.list_(_with_ids(t.value_field, st.value_field))
    elif pa.types.is_large_list(t) and pa.types.is_large_list(st):
        out = pa.large_list(_with_ids(t.value_field, st.value_field))
    elif pa.types.is_map(t) and pa.types.is_map(st):
        out = _pa.map_(_with_ids(t.key_field, st.key_field),
                       _with_ids(t.item_field, st.item_field), keys_sorted=t.keys_sorted)
    return pa.field(read.name, out, read.nullable, metadata=stored.metadata)
