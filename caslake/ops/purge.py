"""Purge: physical erasure of the rows a predicate matches, by row-group splice.

Owns :func:`purge` (``Table.purge``, ``caslake purge``).  Per affected file:

1. **Find.**  The rows matching ``where`` are found with the delete planner's scan
   (statistics pruning, then only the predicate's columns decoded), *including rows
   tombstones already delete*: erasing a row someone deleted earlier is the point.
2. **Splice** (:mod:`caslake.format.splice`).  The footer and the touched row groups
   are range-read; each touched group is decoded, loses the matching rows *and every
   row already deleted in it*, and is re-encoded with the file's own settings.  The
   new object is assembled with :meth:`ObjectStore.compose`: untouched bytes are
   copied inside the store, the re-encoded groups and the footer are uploaded,
   widened with verbatim neighbour bytes where a part would be under 5 MiB.  A file
   with nothing worth copying, or a store that cannot copy ranges, is uploaded whole
   (strategy ``rewrite``); the re-encoding is the same.
3. **Commit one version** (``purge``) that replaces the old files by the new ones,
   drops the tombstone entries now applied, and records the deletes of untouched row
   groups as positions in the new files (one new tombstone; key ranges are resolved
   to positions so no deleted value is carried along).  Tombstones that named a
   purged file are superseded for every other file they name, so the old tombstone
   objects leave the live version.  ``operation_params`` hold an HMAC-SHA256 of the
   predicate, never its text.
4. **Concurrency.**  If a commit since the plan removed a purged file or added a
   tombstone to it (or to a file whose tombstone entry is carried), the purge is
   planned again from the new version and the objects it built are deleted: a
   concurrent delete is never lost and a deleted row never comes back.

5. **Erasure** (``expire=True``).  Refused (:class:`ErasureHeld`, naming each)
   before anything is written while another branch's retained history, a tag or
   a clone hold needs a data file holding a matching row.  Otherwise the purge
   commit folds every segment inline (no retained manifest keeps the removed
   files' entries), and gc (``erase_below``) expires every version below it and
   deletes at once what those versions alone referenced, and every unreferenced
   object written before the purge began, fencing off writers older than those.

Never rewrites a file that has no matching row; without ``expire`` never deletes
an object that a committed version may reference (old objects are gc's, see
docs/protocol.md, "Purge").
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyroaring import BitMap

from caslake.core import (
    Changes,
    DeletionMask,
    FilesUntouchedSince,
    PredicateCondition,
    Scan,
    Snapshot,
    SnapshotSubset,
    TableContext,
    load_masks,
    noop_result,
    put_new,
    run_operation,
)
from caslake.errors import (
    ConcurrentModification,
    CorruptMetadata,
    ErasureHeld,
    InvalidArgument,
    InvalidPredicate,
    NotFound,
    PreconditionFailed,
    StoreCapabilityUnsupported,
    StoreError,
)
from caslake.expr import Expr, compile_where
from caslake.expr.nodes import to_sql
from caslake.format import splice as sp
from caslake.format.keys import data_file_key, tombstone_key
from caslake.format.manifest import DataFile, TombstoneRef
from caslake.format.parquet import stats_by_field_id
from caslake.format.parquet_thrift import MAGIC, decode_file_metadata, footer_length
from caslake.format.refs import branch_key
from caslake.format.schema import TableSchema
from caslake.format.tombstone import FileDeletes, Tombstone
from caslake.ops import refs
from caslake.ops.delete import check_where, matching_positions
from caslake.ops.gc import GcReport, RootsProvider, collect_garbage
from caslake.store.base import ComposePart, CopyFrom, ObjectStore, normalize_etag
from caslake.store.ranges import DEFAULT_MAX_REQUEST, plan_ranges

PURGE = "purge"
SPLICE = "splice"
SPLICE_WIDENED = "splice-widened"
REWRITE = "rewrite"

#: progress(stage, done, total): "plan" once, then "file" per file written.
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class FilePurge:
    """What the purge did (or, in a dry run, would do) to one data file."""

    path: str
    new_path: str | None  # None: no row left, the file is dropped
    strategy: str  # splice | splice-widened | rewrite | drop
    row_groups_reencoded: int
    rows_erased: int
    bytes_widened: int  # verbatim bytes re-uploaded to keep parts >= 5 MiB

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "new_path": self.new_path, "strategy": self.strategy,
                "row_groups_reencoded": self.row_groups_reencoded,
                "rows_erased": self.rows_erased, "bytes_widened": self.bytes_widened}


@dataclass(frozen=True)
class PurgeReport:
    version: int  # the purge's version (the unchanged version for a no-op or dry run)
    commit_id: str | None
    noop: bool
    dry_run: bool
    files_rewritten: int
    row_groups_reencoded: int
    rows_erased: int  # matching rows plus rows already deleted in the touched groups
    bytes_downloaded: int  # dry run: what the purge would download (planning reads included)
    bytes_uploaded: int
    bytes_copied: int  # inside the store (UploadPartCopy), never crossing the wire
    whole_file_rewrite_bytes: int  # what rewriting the affected files whole would upload
    strategy: dict[str, str] = field(default_factory=dict)  # old path -> strategy
    files: tuple[FilePurge, ...] = ()
    predicate_hmac: str = ""
    attempts: int = 0
    # expire=True: the versions below ``expired_below`` expired, and the objects they
    # alone referenced deleted at once (gc's report of that step); None otherwise.
    expired_below: int | None = None
    expiry: GcReport | None = None
    # expire=True: what the exports' erasure did (one line per export; a dry run:
    # what it would do), from the ``erase_exports`` callback.
    exports: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "commit_id": self.commit_id, "noop": self.noop,
                "dry_run": self.dry_run, "files_rewritten": self.files_rewritten,
                "row_groups_reencoded": self.row_groups_reencoded,
                "rows_erased": self.rows_erased, "bytes_downloaded": self.bytes_downloaded,
                "bytes_uploaded": self.bytes_uploaded, "bytes_copied": self.bytes_copied,
                "whole_file_rewrite_bytes": self.whole_file_rewrite_bytes,
                "strategy": dict(self.strategy), "files": [f.to_json() for f in self.files],
                "predicate_hmac": self.predicate_hmac, "attempts": self.attempts,
                "expired_below": self.expired_below,
                "expiry": self.expiry.to_json() if self.expiry is not None else None,
                "exports": list(self.exports)}


def predicate_hmac(where: str | Expr, key: bytes) -> str:
    """The keyed hash recorded instead of the predicate (whose literals may be the very
    values being erased).  Only a holder of ``key`` can test a guess against it."""
    text = where if isinstance(where, str) else to_sql(where)
    return hmac.new(key, text.strip().encode("utf-8"), hashlib.sha256).hexdigest()


# --- planning -------------------------------------------------------------------


@dataclass
class _FilePlan:
    file: DataFile
    etag: str  # the ETag its footer was proven under (a copied table's differs)
    footer: Any  # thrift FileMetaData
    matched: BitMap  # positions matching the predicate (live or deleted)
    deleted: BitMap  # positions deleted by tombstones (key ranges resolved)
    touched: list[int]  # row groups to re-encode

    @property
    def group_rows(self) -> list[int]:
        return [int(rg.num_rows) for rg in self.footer.row_groups]

    def starts(self) -> list[int]:
        out, pos = [], 0
        for n in self.group_rows:
            out.append(pos)
            pos += n
        return out


@dataclass
class _Plan:
    base: Snapshot
    files: list[_FilePlan]
    carried: dict[str, tuple[FileDeletes, int]]  # other files' entries to re-record


def _without_tombstones(snap: Snapshot) -> Snapshot:
    """The same version as if nothing were deleted: to find deleted rows too."""
    return Snapshot(replace(snap.manifest, tombstones=()), snap.key)


def _read_footer(ctx: TableContext, f: DataFile) -> tuple[Any, str]:
    """The thrift footer of ``f`` and the ETag it was read under, from the footer cache
    the planning scan just filled (no second GET).  The relocation rule of reads
    (:mod:`caslake.core.footers`): an ETag other than the committed one (a copied
    table) is accepted only once the footer's CRC-32, size and row counts proved the
    content the committed one; every later read of the file is pinned to it, so a
    file replaced since is refused there."""
    try:
        info = ctx.footers.get(ctx.store, f)
    except (PreconditionFailed, NotFound) as exc:
        raise _replaced(f.path, exc) from exc
    if normalize_etag(info.etag) != normalize_etag(f.etag) and f.footer_crc32 is None:
        raise _replaced(f.path, f"ETag {info.etag}, committed {f.etag}, and no footer "
                                "CRC-32 to prove the content by")
    tail = info.raw
    length = footer_length(tail, what=f.path)
    if length + 8 != f.footer_size:
        raise CorruptMetadata(f.path, f"footer is {length + 8} bytes; the manifest says "
                                      f"{f.footer_size}")
    fmd = decode_file_metadata(tail[:-8], what=f.path)
    if fmd.num_rows != f.row_count or len(fmd.row_groups) != f.row_group_count:
        raise CorruptMetadata(f.path, "footer row counts differ from the manifest")
    return fmd, info.etag


def _pinned_ranges(store: ObjectStore, fp: _FilePlan, ranges: list[tuple[int, int]]
                   ) -> list[bytes]:
    """Range reads pinned to the ETag the footer was proven under; a replaced or
    vanished file is corrupt table state, named, and never purged."""
    f = fp.file
    try:
        return store.get_ranges(f.path, ranges, etag=fp.etag)
    except (PreconditionFailed, NotFound) as exc:
        raise _replaced(f.path, exc) from exc


def _replaced(path: str, detail: object) -> CorruptMetadata:
    return CorruptMetadata(path, "the data file was replaced or removed behind the "
                                 f"table's back ({detail})")


def _plan(ctx: TableContext, base: Snapshot, where: str | Expr) -> _Plan:
    io, store = ctx.io, ctx.store
    cond = PredicateCondition(where)
    bare = _without_tombstones(base)
    scan = Scan(io, ctx.footers, bare, [], where, ctx.tombstones)
    files_by_path = {f.path: f for f in io.live_files(base)}
    try:
        found = matching_positions(scan, cond)
    except (PreconditionFailed, NotFound) as exc:
        if exc.key not in files_by_path:
            raise
        raise _replaced(exc.key, exc) from exc
    masks = load_masks(store, ctx.tombstones, base.manifest.tombstones, files_by_path,
                       list(found), base.manifest.schema)
    plans: list[_FilePlan] = []
    for path, (task, positions) in sorted(found.items()):
        f = task.file
        fmd, etag = _read_footer(ctx, f)
        deleted = _all_deleted(ctx, bare, f, fmd, masks.get(path))
        starts = list(np.cumsum([0] + [int(rg.num_rows) for rg in fmd.row_groups]))
        touched = sorted({int(np.searchsorted(starts, p, side="right")) - 1 for p in positions})
        plans.append(_FilePlan(f, etag, fmd, BitMap(positions), deleted, touched))
    purged = {p.file.path for p in plans}
    carried: dict[str, tuple[FileDeletes, int]] = {}
    for ref in base.manifest.tombstones:
        if purged.intersection(ref.files):
            entries = {fd.path: fd for fd in ctx.tombstones.get(store, ref).files}
            for other, count in ref.files.items():
                if other not in purged:
                    carried[other] = (entries[other], count)
    return _Plan(base, plans, carried)


def _all_deleted(ctx: TableContext, bare: Snapshot, f: DataFile, fmd: Any,
                 mask: DeletionMask | None) -> BitMap:
    """Every position of ``f`` its tombstones delete, key ranges resolved by reading
    just the key columns."""
    if mask is None:
        return BitMap()
    key_values = None
    if mask.key_ranges:
        cols = sorted(mask.key_columns())
        key_values = Scan(ctx.io, ctx.footers, SnapshotSubset.of(bare, [f]), cols, None,
                          ctx.tombstones).to_arrow()
    return mask.deleted_positions([int(rg.num_rows) for rg in fmd.row_groups], key_values)


# --- building one new file ------------------------------------------------------


@dataclass
class _Built:
    plan: _FilePlan
    result: FilePurge
    new_file: DataFile | None
    deletes: FileDeletes | None  # remapped deletes of untouched groups in the new file
    hidden: int  # rows those deletes hide


def _build(ctx: TableContext, fp: _FilePlan, schema: TableSchema, *, dry_run: bool
           ) -> _Built:
    store, f, fmd = ctx.store, fp.file, fp.footer
    starts, rows = fp.starts(), fp.group_rows
    spans = [sp.row_group_span(fmd.row_groups[i]) for i in fp.touched]
    if not dry_run:
        store.prepare_compose()  # the S3 multipart client is set up meanwhile
    datas = _pinned_ranges(store, fp, spans) if not dry_run else [b""] * len(spans)
    replacements: dict[int, sp.EncodedGroup | None] = {}
    erased = 0
    for i, raw in zip(fp.touched, datas, strict=True):
        lo, n = starts[i], rows[i]
        drop = np.zeros(n, dtype=bool)
        drop[_positions_in(fp.matched | fp.deleted, lo, n) - lo] = True
        erased += int(drop.sum())
        if dry_run:
            continue
        group = sp.decode_row_group(fmd, i, raw, what=f.path)
        kept = group.filter(pa.array(~drop))
        replacements[i] = sp.encode_row_group(fmd, i, kept, raw) if kept.num_rows else None
    if dry_run:
        return _Built(fp, FilePurge(f.path, None, "planned", len(fp.touched), erased, 0),
                      None, None, 0)
    untouched = [i for i in range(len(rows)) if i not in replacements]
    aux_ranges = [r for i in untouched for r in sp.aux_ranges(fmd.row_groups[i])]
    aux = dict(zip(aux_ranges, _pinned_ranges(store, fp, aux_ranges), strict=True)
               ) if aux_ranges else {}
    spliced = sp.splice_file(fmd, replacements, aux)
    deletes, hidden = _remap_deletes(fp, spliced, untouched)
    if spliced.num_rows == 0 or hidden == spliced.num_rows:
        # Nothing live is left: the file goes, with everything in it.
        return _Built(fp, FilePurge(f.path, None, "drop", len(fp.touched),
                                    erased + spliced.num_rows, 0), None, None, 0)
    key = data_file_key()
    strategy, etag, widened = _write(store, fp, key, spliced)
    new_file = _data_file(schema, key, etag, spliced)
    if deletes is not None:
        deletes = replace(deletes, path=key, row_count=spliced.num_rows)
    return _Built(fp, FilePurge(f.path, key, strategy, len(fp.touched), erased, widened),
                  new_file, deletes, hidden)


# --- the dry run's download estimate ---------------------------------------------


def _download_estimate(store: ObjectStore, fp: _FilePlan) -> int:
    """The bytes :func:`_build` downloads for ``fp`` after planning: the touched row
    groups, the page indexes of the untouched ones, and the verbatim source bytes
    of every uploaded part (the widening; all of them for a ``rewrite``), each read
    coalesced as the store coalesces it.  Exact but for the size of the re-encoded
    groups (taken as their old size times the share of rows kept), which only
    moves where the 5 MiB part boundaries fall."""
    fmd, rows, starts = fp.footer, fp.group_rows, fp.starts()
    gone = fp.matched | fp.deleted
    total = _fetched(store, [sp.row_group_span(fmd.row_groups[i]) for i in fp.touched])
    touched = set(fp.touched)
    untouched = [i for i in range(len(rows)) if i not in touched]
    aux = [r for i in untouched for r in sp.aux_ranges(fmd.row_groups[i])]
    total += _fetched(store, aux)
    kept = {i: rows[i] - gone.range_cardinality(starts[i], starts[i] + rows[i])
            for i in fp.touched}
    stored = sum(kept.values()) + sum(rows[i] for i in untouched)
    hidden = sum(fp.deleted.range_cardinality(starts[i], starts[i] + rows[i])
                 for i in untouched)
    if stored == 0 or hidden == stored:
        return total  # the file is dropped: nothing is written
    pieces: list[sp.Piece] = [MAGIC]
    for i, rg in enumerate(fmd.row_groups):
        start, end = sp.row_group_span(rg)
        if i not in touched:
            pieces.append(sp.SourceRange(start, end))
        elif kept[i]:
            pieces.append(bytes(max(1, (end - start) * kept[i] // rows[i])))
    pieces += [bytes(e - s) for s, e in aux] + [bytes(fp.file.footer_size)]
    merged = sp._merge_pieces(pieces)  # the same layout the splice produces
    parts = sp.plan_parts(merged, min_part=store.min_part_size)
    client_side = store.range_copy == "client"  # copies are downloads
    # A store that cannot copy ranges ("none"): purge rewrites, downloading them all.
    if store.range_copy != "none" and any(isinstance(p, sp.SourceRange) for p in parts):
        for part in parts:
            if isinstance(part, sp.SourceRange):
                total += _fetched(store, [(part.start, part.end)]) if client_side else 0
            else:
                total += _fetched(store, [(s.start, s.end) for s in part.segments
                                          if isinstance(s, sp.SourceRange)])
        return total
    return total + _fetched(store, [(p.start, p.end) for p in merged
                                    if isinstance(p, sp.SourceRange)])


def _fetched(store: ObjectStore, ranges: list[tuple[int, int]]) -> int:
    """The bytes one ``get_ranges`` call of ``ranges`` downloads (gaps it bridges too)."""
    if not ranges:
        return 0
    requests = plan_ranges(ranges, max_gap=getattr(store, "max_gap", 0),
                           max_request=getattr(store, "max_request", DEFAULT_MAX_REQUEST))
    return sum(r.length for r in requests)


def _commit_read_estimate(ctx: TableContext) -> int:
    """The commit reads the branch pointer once (assuming no concurrent commit)."""
    try:
        return ctx.store.head(ctx.pointer_key).size
    except NotFound:
        return 0


def _positions_in(bitmap: BitMap, start: int, rows: int) -> np.ndarray:
    """The positions of ``bitmap`` in ``[start, start + rows)``, as int64."""
    arr = np.asarray(bitmap.to_array(), dtype=np.int64)
    lo, hi = np.searchsorted(arr, [start, start + rows])
    return arr[lo:hi]


def _remap_deletes(fp: _FilePlan, spliced: sp.SplicedFile, untouched: list[int]
                   ) -> tuple[FileDeletes | None, int]:
    """The deletes of untouched groups, at their positions in the new file."""
    starts, rows = fp.starts(), fp.group_rows
    groups: set[int] = set()
    positions = BitMap()
    hidden = 0
    for i in untouched:
        lo, n = starts[i], rows[i]
        dead = fp.deleted.range_cardinality(lo, lo + n)
        if not dead:
            continue
        hidden += dead
        new_index = spliced.group_map[i]
        assert new_index is not None
        if dead == n:
            groups.add(new_index)
            continue
        shift = spliced.row_offsets[i] - lo
        positions.update((_positions_in(fp.deleted, lo, n) + shift).astype(np.uint32))
    if not hidden:
        return None, 0
    return FileDeletes("", 0, frozenset(groups), (), positions), hidden


def _write(store: ObjectStore, fp: _FilePlan, key: str, spliced: sp.SplicedFile
           ) -> tuple[str, str, int]:
    """Upload the new object; return (strategy, etag, widened bytes)."""
    parts = sp.plan_parts(spliced.pieces, min_part=store.min_part_size)
    copies = [p for p in parts if isinstance(p, sp.SourceRange)]
    if copies:
        widened = sum(p.widened_bytes for p in parts if isinstance(p, sp.UploadPart))
        try:
            etag = store.compose(key, _compose_parts(store, fp, parts))
            return (SPLICE_WIDENED if widened else SPLICE), etag, widened
        except StoreCapabilityUnsupported:
            pass  # an endpoint without UploadPartCopy: upload the whole object
    ranges = [(p.start, p.end) for p in spliced.pieces if isinstance(p, sp.SourceRange)]
    source = dict(zip(ranges, _pinned_ranges(store, fp, ranges), strict=True))
    etag = put_new(store, key, sp.assemble(spliced.pieces, source))
    return REWRITE, etag, 0


def _compose_parts(store: ObjectStore, fp: _FilePlan, parts: list[sp.Part]
                   ) -> list[ComposePart]:
    out: list[ComposePart] = []
    for part in parts:
        if isinstance(part, sp.SourceRange):
            out.append(CopyFrom(fp.file.path, part.start, part.end, fp.etag))
            continue
        ranges = [(s.start, s.end) for s in part.segments if isinstance(s, sp.SourceRange)]
        fetched = dict(zip(ranges, _pinned_ranges(store, fp, ranges), strict=True)
                       ) if ranges else {}
        out.append(sp.assemble(part.segments, fetched))
    return out


def _data_file(schema: TableSchema, key: str, etag: str, spliced: sp.SplicedFile
               ) -> DataFile:
    """The manifest entry of a new file, statistics recomputed from its new footer."""
    tail = spliced.pieces[-1]
    assert isinstance(tail, bytes)
    tail = tail[-spliced.footer_size:]
    md: pq.FileMetaData = pq.read_metadata(pa.BufferReader(tail))
    stats = stats_by_field_id(md, schema)
    return DataFile(path=key, size=spliced.size, etag=etag, row_count=spliced.num_rows,
                    row_group_count=spliced.row_group_count, footer_size=spliced.footer_size,
                    footer_crc32=zlib.crc32(tail), stats=stats)


# --- expire=True: what holds the values ---------------------------------------------


def _files_holding(ctx: TableContext, head: Snapshot, where: str | Expr) -> set[str]:
    """The data files of the branch's retained history (``head`` down to its
    ``oldest_version``) that store a row ``where`` matches, live or deleted.  A
    version whose schema cannot evaluate ``where`` counts all its files (the check
    can only err towards refusing)."""
    io = ctx.io
    cond = PredicateCondition(where)
    by_version: dict[int, tuple[Snapshot, list[DataFile]]] = {}
    seen: set[str] = set()
    for snap in io.history(head):
        for f in io.live_files(snap):
            if f.path not in seen:
                seen.add(f.path)
                by_version.setdefault(snap.version, (snap, []))[1].append(f)
    holding: set[str] = set()
    for snap, files in by_version.values():
        subset = SnapshotSubset.of(_without_tombstones(snap), files)
        try:
            found = matching_positions(Scan(io, ctx.footers, subset, [], where,
                                            ctx.tombstones), cond)
        except InvalidPredicate:
            holding.update(f.path for f in files)
            continue
        except (PreconditionFailed, NotFound) as exc:
            if exc.key not in {f.path for f in files}:
                raise
            raise _replaced(exc.key, exc) from exc
        holding.update(found)
    return holding


def _holders(ctx: TableContext, holding: set[str]) -> list[str]:
    """Every live ref or hold other than the handle's branch whose retained versions
    reference one of ``holding``: expiring the branch would not free those files."""
    if not holding:
        return []
    io = ctx.io
    out: list[str] = []

    def needs(snap: Snapshot) -> bool:
        return any(f.path in holding for f in io.live_files(snap))

    for name in refs.list_branches(io):
        if branch_key(name) != ctx.pointer_key and any(
                needs(s) for s in io.history(refs.branch_head(io, name))):
            out.append(f"branch {name!r}")
    out += [f"tag {t.name!r}" for t in refs.list_tags(io)
            if needs(refs.tag_snapshot(io, t.name))]
    out += [f"clone hold {h.key!r}" for h in refs.list_holds(io)
            if needs(refs.target_snapshot(io, h.target, where=h.key))]
    return out


# --- the operation --------------------------------------------------------------------


def purge(ctx: TableContext, where: str | Expr, *, dry_run: bool = False,
          expire: bool = False, progress: Progress | None = None,
          audit_key: bytes | None = None, max_replans: int = 3,
          extra_roots: Sequence[RootsProvider] = (),
          erase_exports: Callable[[bool], Sequence[str]] | None = None) -> PurgeReport:
    """Physically erase the rows ``where`` matches (see the module docstring).
    ``extra_roots``: what else stored next to the table references data files (the
    exports, as for gc): erasure is refused while one names a file holding a matching
    row, and its expiry keeps what they reference.  ``erase_exports(dry_run)``
    (expire=True; the facade passes the exports' erasure): rewrites what
    ``extra_roots`` reference so it holds no older version, run after the purge
    commit and before the expiry; with it, ``extra_roots`` hold no erasure.  Its
    lines are the report's ``exports``."""
    where = check_where(where)
    if isinstance(where, str) and not where.strip():
        raise InvalidArgument("purge needs a non-empty where predicate (to erase "
                              "everything, drop the table)")
    if compile_where(where, ctx.snapshot.manifest.schema.to_arrow()) is None:
        raise InvalidArgument("purge needs a where predicate")
    key = audit_key if audit_key is not None else os.urandom(32)
    fingerprint = predicate_hmac(where, key)
    started = ctx.meter()
    if not expire:
        return _purge(ctx, where, dry_run, progress, fingerprint, started, max_replans)
    # Erasure: refuse while a ref or hold needs a version holding the values, before
    # anything is written; then purge, expire every version below the purge, and
    # delete at once what those versions alone referenced (and every unreferenced
    # object written before we began: orphans may hold the values too).
    began = datetime.fromtimestamp(ctx.now_ms() / 1000, UTC)
    holding = _files_holding(ctx, ctx.refresh(), where)
    holders = _holders(ctx, holding)
    if erase_exports is None and any(holding & provider(ctx.store).keep
                                     for provider in extra_roots):
        holders.append("Delta/Iceberg export")
    if holders:
        raise ErasureHeld(holders)
    report = _purge(ctx, where, dry_run, progress, fingerprint, started, max_replans,
                    fold=True)
    if dry_run:
        return replace(report, exports=tuple(erase_exports(True)) if erase_exports else ())
    exports = tuple(erase_exports(False)) if erase_exports is not None else ()
    # Nothing stored matches any more: expire nothing, but still collect what an
    # earlier, interrupted erasure (or a crashed writer) left unreferenced.
    head = ctx.snapshot
    below = (report.version if not report.noop else head.version if holding
             else head.manifest.oldest_version)
    expiry = collect_garbage(ctx, retention=timedelta(0), force=True, now=began,
                             erase_below=below, extra_roots=extra_roots)
    return replace(report, expired_below=below, expiry=expiry, exports=exports)


def _purge(ctx: TableContext, where: str | Expr, dry_run: bool, progress: Progress | None,
           fingerprint: str, started: dict[str, int], max_replans: int, *,
           fold: bool = False) -> PurgeReport:
    tried = 0  # commit attempts of the plans a concurrent change made stale
    for attempt in range(max_replans + 1):
        base = ctx.refresh()
        plan = _plan(ctx, base, where)
        if progress:
            progress("plan", len(plan.files), len(plan.files))
        if not plan.files or dry_run:
            planned = [_build(ctx, fp, base.manifest.schema, dry_run=True)
                       for fp in plan.files]
            noop_result(ctx, PURGE, base, started=started)
            report = _report(ctx, started, base.version, None, planned, fingerprint,
                             noop=not plan.files, dry_run=dry_run, attempts=tried)
            if not plan.files:
                return report
            # What the purge reads beyond the planning this dry run did.
            more = sum(_download_estimate(ctx.store, fp) for fp in plan.files)
            return replace(report, bytes_downloaded=report.bytes_downloaded + more
                           + _commit_read_estimate(ctx))
        built: list[_Built] = []
        try:
            for n, fp in enumerate(plan.files, 1):
                built.append(_build(ctx, fp, base.manifest.schema, dry_run=False))
                if progress:
                    progress("file", n, len(plan.files))
            commit_id, snapshot, attempts = _commit(ctx, plan, built, fingerprint, started,
                                                    fold)
        except ConcurrentModification as conflict:
            _discard(ctx.store, built)
            tried += max(conflict.attempts, 1)
            if attempt == max_replans:
                raise
            continue  # a purged file changed under us: plan again on the new version
        except BaseException as exc:
            if not _outcome_unknown(exc):
                _discard(ctx.store, built)
            raise
        return _report(ctx, started, snapshot.version, commit_id, built, fingerprint,
                       noop=False, dry_run=False, attempts=attempts + tried)
    raise AssertionError("unreachable")  # pragma: no cover


def _outcome_unknown(exc: BaseException) -> bool:
    from caslake.errors import CommitOutcomeUnknown

    # Objects of a commit that may have landed are never removed here (gc decides);
    # nor after a crash (SimulatedCrash is not an Exception).
    return isinstance(exc, CommitOutcomeUnknown) or not isinstance(exc, Exception)


def _discard(store: ObjectStore, built: list[_Built]) -> None:
    """Delete new objects that no version references (best effort: gc sweeps the rest)."""
    for b in built:
        if b.new_file is not None:
            with contextlib.suppress(StoreError):
                store.delete(b.new_file.path)


def _commit(ctx: TableContext, plan: _Plan, built: list[_Built], fingerprint: str,
            started: dict[str, int], fold: bool) -> tuple[str, Snapshot, int]:
    store = ctx.store
    entries = [b.deletes for b in built if b.deletes is not None]
    counts = {b.new_file.path: b.hidden for b in built
              if b.deletes is not None and b.new_file is not None}
    for path, (fd, count) in plan.carried.items():
        entries.append(fd)
        counts[path] = count
    refs: tuple[TombstoneRef, ...] = ()
    if entries:
        tomb = Tombstone(plan.base.manifest.table_id, "purge", tuple(entries))
        data = tomb.to_bytes()
        tkey = tombstone_key()
        etag = put_new(store, tkey, data)
        refs = (TombstoneRef(tkey, len(data), etag, counts),)
    # A commit since the plan that removed a purged file or added a tombstone naming
    # it (or a file whose entry is re-recorded) would be lost: plan again instead.
    watched = frozenset({fp.file.path for fp in plan.files} | set(plan.carried))
    added = tuple(b.new_file for b in built if b.new_file is not None)
    removed = tuple(fp.file for fp in plan.files)
    params = {"predicate_hmac": fingerprint, "files_rewritten": str(len(built)),
              "rows_erased": str(sum(b.result.rows_erased for b in built))}

    def prepare(base: Snapshot) -> Changes | None:
        return Changes(PURGE, add_files=added, remove_files=removed, add_tombstones=refs,
                       rows_deleted=sum(b.hidden for b in built), params=params,
                       fold_segments=fold)

    result = run_operation(ctx, PURGE, prepare,
                           requirements=(FilesUntouchedSince(plan.base, watched, PURGE),),
                           started=started)
    return result.commit_id, ctx.snapshot, result.attempts


def _report(ctx: TableContext, before: dict[str, int], version: int, commit_id: str | None,
            built: list[_Built], fingerprint: str, *, noop: bool, dry_run: bool,
            attempts: int) -> PurgeReport:
    after = ctx.meter()

    def moved(name: str) -> int:
        return after.get(name, 0) - before.get(name, 0)

    return PurgeReport(
        version=version, commit_id=commit_id, noop=noop, dry_run=dry_run,
        files_rewritten=len(built),
        row_groups_reencoded=sum(b.result.row_groups_reencoded for b in built),
        rows_erased=sum(b.result.rows_erased for b in built),
        bytes_downloaded=moved("bytes_in"), bytes_uploaded=moved("bytes_out"),
        bytes_copied=moved("bytes_copied"),
        whole_file_rewrite_bytes=sum(b.plan.file.size for b in built),
        strategy={b.result.path: b.result.strategy for b in built},
        files=tuple(b.result for b in built), predicate_hmac=fingerprint, attempts=attempts)
