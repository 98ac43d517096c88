"""Reading one resolved dataset generation: checks, part and row-group pruning, decoding.

Owns: resolving a dataset key to one manifest and its parts (``_SUCCESS``
first, then the manifest, then -- with verification -- every part, before any
data is read); opening a part as a ``pyarrow.parquet.ParquetFile`` (a local
path, the whole object, or pinned range reads); checking each part's schema
hash and the row counts against the manifest; pruning parts and row groups
with caslake predicates; streaming the surviving row groups.

A reader never writes.  It reads only the parts one manifest lists, so it
never mixes generations; a part that vanishes or changes under it is a
:class:`~caslake.errors.DatasetIncomplete`, never a partial answer.
"""

from __future__ import annotations

import base64
import contextlib
import io
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from caslake.dataset.manifest import (
    MANIFEST,
    SUCCESS,
    DatasetManifest,
    check_part_path,
    schema_hash_matches,
)
from caslake.errors import (
    CorruptMetadata,
    DatasetIncomplete,
    ManifestCorrupted,
    NotFound,
    PreconditionFailed,
    UnknownColumn,
)
from caslake.expr import (
    BoundExpr,
    Expr,
    compile_where,
    filter_table,
    might_match,
    referenced_columns,
)
from caslake.format.parquet import row_group_stats
from caslake.store.base import ObjectStore

#: Parallel requests when a store has no local path (HEADs, whole-part GETs).
PARALLEL_REQUESTS = 8


@dataclass(frozen=True)
class ResolvedPart:
    name: str  # as listed in the manifest, relative to the dataset key
    key: str  # store key
    size: int | None = None  # known after verification (HEAD)
    etag: str | None = None


@dataclass(frozen=True)
class Resolved:
    dataset_key: str
    manifest: DatasetManifest
    manifest_etag: str
    parts: list[ResolvedPart]


def _map(store: ObjectStore, fn: Any, items: Sequence[Any]) -> list[Any]:
    """``fn`` over ``items``, in parallel unless the store is local."""
    if len(items) <= 1 or store.local_path(MANIFEST) is not None:
        return [fn(i) for i in items]
    with ThreadPoolExecutor(max_workers=min(PARALLEL_REQUESTS, len(items))) as pool:
        return list(pool.map(fn, items))


def load_manifest(store: ObjectStore, dataset_key: str) -> tuple[DatasetManifest, str]:
    """The manifest at ``dataset_key`` and its ETag.  Raises NotFound, ManifestCorrupted."""
    key = f"{dataset_key}/{MANIFEST}"
    got = store.get(key)
    try:
        text = got.data.decode("utf-8")
    except UnicodeDecodeError:
        raise ManifestCorrupted(key, "not UTF-8 text") from None
    return DatasetManifest.from_json(text, key=key), got.etag


def resolve(store: ObjectStore, dataset_key: str, *, verify: bool) -> Resolved:
    """Pick the one generation a read sees: RFC PDS-003 order, all checks before any data."""
    try:
        store.head(f"{dataset_key}/{SUCCESS}")
    except NotFound:
        raise DatasetIncomplete(f"dataset {dataset_key!r} is incomplete: no {SUCCESS} "
                                "marker (never written, still being written, or its writer "
                                "crashed)", dataset_key=dataset_key) from None
    try:
        manifest, etag = load_manifest(store, dataset_key)
    except NotFound:
        raise DatasetIncomplete(f"dataset {dataset_key!r} has {SUCCESS} but no {MANIFEST} "
                                "(being deleted?)", dataset_key=dataset_key) from None
    if not manifest.parts:
        raise ManifestCorrupted(f"{dataset_key}/{MANIFEST}", "the manifest lists no parts")
    parts: list[ResolvedPart] = []
    for name in manifest.parts:
        reason = check_part_path(dataset_key, name)
        if reason is not None:
            raise ManifestCorrupted(f"{dataset_key}/{MANIFEST}", reason, part=str(name))
        parts.append(ResolvedPart(name, f"{dataset_key}/{name}"))
    if verify:
        def head(p: ResolvedPart) -> ResolvedPart:
            try:
                meta = store.head(p.key)
            except NotFound:
                raise DatasetIncomplete(f"dataset {dataset_key!r} is incomplete: part "
                                        f"{p.name!r} is missing", dataset_key=dataset_key,
                                        part=p.name) from None
            return ResolvedPart(p.name, p.key, meta.size, meta.etag)

        parts = _map(store, head, parts)
    return Resolved(dataset_key, manifest, etag, parts)


def _part_error(dataset_key: str, part: ResolvedPart, exc: BaseException) -> Exception:
    if isinstance(exc, (NotFound, FileNotFoundError)):
        return DatasetIncomplete(f"dataset {dataset_key!r} is incomplete: part {part.name!r} "
                                 "is missing", dataset_key=dataset_key, part=part.name)
    if isinstance(exc, PreconditionFailed):
        return DatasetIncomplete(f"dataset {dataset_key!r}: part {part.name!r} changed while "
                                 "it was read (rewritten in place by another writer)",
                                 dataset_key=dataset_key, part=part.name)
    return CorruptMetadata(part.key, f"unreadable Parquet part of dataset {dataset_key!r} "
                           f"({exc})")


class _RangeFile(io.RawIOBase):
    """A read-only file over a store object: each read is a range GET pinned to the ETag."""

    def __init__(self, store: ObjectStore, key: str, size: int, etag: str | None) -> None:
        self._store = store
        self._key = key
        self._size = size
        self._etag = etag
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buf: Any) -> int:
        n = min(len(buf), self._size - self._pos)
        if n <= 0:
            return 0
        data = self._store.get_ranges(self._key, [(self._pos, self._pos + n)], etag=self._etag)[0]
        buf[:len(data)] = data
        self._pos += len(data)
        return len(data)


def open_part(store: ObjectStore, dataset_key: str, part: ResolvedPart, *,
              whole: bool) -> pq.ParquetFile:
    """The part as a ParquetFile: a local file when the store has one, else the whole
    object (``whole``) or pinned range reads.  Errors name the dataset and part."""
    try:
        path = store.local_path(part.key, etag=part.etag)
        if path is not None:
            return pq.ParquetFile(path)
        if whole:
            got = store.get(part.key)
            if part.etag is not None and got.etag != part.etag:
                raise PreconditionFailed("changed", key=part.key)
            return pq.ParquetFile(pa.BufferReader(got.data))
        size, etag = part.size, part.etag
        if size is None:
            meta = store.head(part.key)
            size, etag = meta.size, meta.etag
        return pq.ParquetFile(pa.PythonFile(_RangeFile(store, part.key, size, etag), mode="r"))
    except (NotFound, FileNotFoundError, PreconditionFailed, OSError, pa.ArrowException,
            ValueError) as exc:
        raise _part_error(dataset_key, part, exc) from None


def written_schemas(pf: pq.ParquetFile) -> list[pa.Schema]:
    """The schemas a part's writer may have hashed: the schema as read, and the Arrow
    schema the writer stored in the footer (``ARROW:schema``).  They differ for nested
    columns: Parquet renames a list's item field ``element`` and a map's entries field,
    and the read schema shows those names while the writer hashed its own."""
    out = [pf.schema_arrow]
    raw = (pf.metadata.metadata or {}).get(b"ARROW:schema")
    if raw is not None:
        # not a schema: the read schema alone decides
        with contextlib.suppress(ValueError, pa.ArrowException):
            out.append(pa.ipc.read_schema(pa.py_buffer(base64.b64decode(raw))))
    return out


def output_schema(pf: pq.ParquetFile) -> pa.Schema:
    """The schema a part reads back as: its writer's own (``ARROW:schema``) when
    that has the same columns, so nested names (a list's ``item``, a map's
    ``entries``) and types Parquet does not keep (``date64``) come back as written;
    else the schema as read."""
    read, *stored = written_schemas(pf)
    if stored and stored[0].names == read.names:
        return stored[0]
    return read


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` (as Parquet read it) in ``schema`` (its writer's)."""
    if table.schema.equals(schema):
        return table
    try:
        return table.cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return table  # not castable: the values as Parquet read them


def check_parts(resolved: Resolved, files: Sequence[pq.ParquetFile]) -> None:
    """Every part has the manifest's schema hash and the row counts sum to ``row_count``."""
    m = resolved.manifest
    total = 0
    for part, pf in zip(resolved.parts, files, strict=True):
        if not any(schema_hash_matches(m.schema_hash, s) for s in written_schemas(pf)):
            raise ManifestCorrupted(
                f"{resolved.dataset_key}/{MANIFEST}",
                f"part {part.name!r} has schema {pf.schema_arrow.names} whose hash does not "
                f"start with the manifest's schema_hash {m.schema_hash!r}", part=part.name)
        total += pf.metadata.num_rows
    if total != m.row_count:
        raise ManifestCorrupted(f"{resolved.dataset_key}/{MANIFEST}",
                                f"the parts hold {total} rows; the manifest says {m.row_count}")


def check_columns(schema: pa.Schema, columns: Sequence[str] | None) -> list[str]:
    if columns is None:
        return list(schema.names)
    if isinstance(columns, str):
        columns = [columns]
    for c in columns:
        if c not in schema.names:
            raise UnknownColumn(c, list(schema.names))
    return list(columns)


@dataclass
class ReadPlan:
    """What a filtered read will touch (and what pruning skipped)."""

    dataset_key: str
    schema: pa.Schema  # of the output
    columns: list[str]
    parts_total: int = 0
    parts_pruned: int = 0
    row_groups_total: int = 0
    row_groups_pruned: int = 0
    units: list[tuple[ResolvedPart, pq.ParquetFile, list[int]]] = field(default_factory=list)

    def describe(self) -> dict[str, Any]:
        return {"dataset_key": self.dataset_key, "columns": self.columns,
                "parts": {"total": self.parts_total, "pruned": self.parts_pruned},
                "row_groups": {"total": self.row_groups_total,
                               "pruned": self.row_groups_pruned}}


def plan_read(store: ObjectStore, resolved: Resolved, columns: Sequence[str] | None,
              where: str | Expr | None, *, verify: bool
              ) -> tuple[ReadPlan, BoundExpr | None]:
    """Open every part's footer, check them (``verify``), prune by ``where``."""
    files = _map(store, lambda p: open_part(store, resolved.dataset_key, p, whole=False),
                 resolved.parts)
    if verify:
        check_parts(resolved, files)
    schema = output_schema(files[0])
    names = check_columns(schema, columns)
    bound = compile_where(where, schema)
    plan = ReadPlan(resolved.dataset_key, pa.schema([schema.field(n) for n in names]), names)
    for part, pf in zip(resolved.parts, files, strict=True):
        md = pf.metadata
        plan.parts_total += 1
        plan.row_groups_total += md.num_row_groups
        keep = prune_row_groups(pf, bound)
        plan.row_groups_pruned += md.num_row_groups - len(keep)
        if not keep:
            plan.parts_pruned += 1
            continue
        plan.units.append((part, pf, keep))
    return plan, bound


def prunable_types(schema: pa.Schema, names: Iterable[str]) -> dict[str, pa.DataType]:
    """The types of the named top-level columns whose footer statistics pruning can
    use: primitive columns, except half floats (Parquet keeps their bounds as raw
    bytes); a nested column's statistics are those of its leaves."""
    out = {}
    for name in names:
        i = schema.get_field_index(name)
        t = schema.field(i).type if i >= 0 else None
        if t is not None and not pa.types.is_nested(t) and not pa.types.is_float16(t):
            out[name] = t
    return out


def prune_row_groups(pf: pq.ParquetFile, bound: BoundExpr | None) -> list[int]:
    """The row groups of a part whose footer statistics do not rule ``bound`` out."""
    md = pf.metadata
    groups = list(range(md.num_row_groups))
    if bound is None:
        return groups
    types = prunable_types(pf.schema_arrow, referenced_columns(bound))
    return [rg for rg in groups if might_match(bound, row_group_stats(md, rg, types),
                                               md.row_group(rg).num_rows)]


def part_batches(dataset_key: str, part: ResolvedPart, pf: pq.ParquetFile,
                 groups: Sequence[int], columns: Sequence[str], bound: BoundExpr | None,
                 schema: pa.Schema | None = None) -> Iterator[pa.RecordBatch]:
    """The rows of ``groups`` of one part, filtered exactly by ``bound``, projected to
    ``columns`` (and cast to ``schema``), one row group at a time (bounded memory)."""
    needed = list(columns)
    if bound is not None:
        # The bound tree names columns as the schema spells them (a where may say ORIGIN).
        needed += [c for c in sorted(referenced_columns(bound)) if c not in needed]
    for rg in groups:
        try:
            t = pf.read_row_group(rg, columns=needed)
        except (NotFound, FileNotFoundError, PreconditionFailed, OSError,
                pa.ArrowException) as exc:
            raise _part_error(dataset_key, part, exc) from None
        if bound is not None:
            t = filter_table(t, bound)
        t = t.select(list(columns))
        yield from (conform(t, schema) if schema is not None else t).to_batches()


def stream(plan: ReadPlan, bound: BoundExpr | None) -> Iterator[pa.RecordBatch]:
    """The rows of a plan, part by part, row group by row group."""
    for part, pf, groups in plan.units:
        yield from part_batches(plan.dataset_key, part, pf, groups, plan.columns, bound,
                                plan.schema)


def read_whole(store: ObjectStore, resolved: Resolved, columns: Sequence[str] | None, *,
               verify: bool) -> pa.Table:
    """Every part in full (projected), checked before the table is returned."""
    def one(part: ResolvedPart) -> tuple[pq.ParquetFile, pa.Table]:
        pf = open_part(store, resolved.dataset_key, part, whole=True)
        schema = output_schema(pf)
        names = check_columns(schema, columns)
        try:
            table = pf.read(columns=names, use_threads=True)
            return pf, conform(table, pa.schema([schema.field(n) for n in names]))
        except (OSError, pa.ArrowException) as exc:
            raise _part_error(resolved.dataset_key, part, exc) from None

    got = _map(store, one, resolved.parts)
    if verify:
        check_parts(resolved, [pf for pf, _ in got])
    tables = [t for _, t in got]
    try:
        return pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    except pa.ArrowInvalid as exc:
        raise ManifestCorrupted(f"{resolved.dataset_key}/{MANIFEST}",
                                f"the parts have different schemas ({exc})") from None
