"""Pointer and manifest: frozen models, their JSON form, and their one parser each.

A manifest describes one whole table version.  To keep commits O(1) in the
size of the table, the live data-file list is split between:

* ``files``: entries held inline in this manifest, and
* ``segments``: references to segment objects (format 3, with statistics
  summaries: :mod:`caslake.format.segment`) or to *earlier manifests* (format 1),
  whose entries are part of this version too (both are immutable), minus the
  paths listed in ``removed``.

See docs/format.md for every field and docs/protocol.md for how commits
choose between carrying entries inline and referencing them.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeVar

from caslake.errors import CorruptMetadata, UnsupportedFormatVersion
from caslake.format import (
    BASE_FORMAT_VERSION,
    FORMAT_VERSION,
    MAX_INT64,
    PARTITION_FORMAT_VERSION,
    SEGMENTS_FORMAT_VERSION,
)
from caslake.format.keys import (
    DATA_PREFIX,
    MANIFEST_PREFIX,
    SEGMENT_PREFIX,
    TOMBSTONE_PREFIX,
    check_relative_key,
    valid_alias,
)
from caslake.format.partition import (
    FilePartition,
    PartitionField,
    Partitioning,
    PartitionSpec,
    check_file_partition,
    check_partitioning,
)
from caslake.format.schema import (
    ELEMENT,
    KEY,
    LIST,
    MAP,
    NESTED,
    VALUE,
    Field,
    TableSchema,
    type_from_str,
)

POINTER_FORMAT = "caslake.pointer"
MANIFEST_FORMAT = "caslake.manifest"
#: The format_version of a *staged* manifest (one with ``transaction``): a reader
#: that does not know multi-table transactions refuses it (UnsupportedFormatVersion)
#: instead of showing a version that may never commit (docs/format.md, version 6).
#: Only staged manifests say it; the table's own version is in
#: ``table_format_version`` and is what the pointer and later commits carry.
TXN_FORMAT_VERSION = 6

T = TypeVar("T")


# --- models -----------------------------------------------------------------


@dataclass(frozen=True)
class DataFile:
    path: str
    size: int
    etag: str
    row_count: int
    row_group_count: int
    footer_size: int  # bytes of footer + 8 (length and magic) at the end of the file
    stats: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)  # field id -> stats
    footer_crc32: int | None = None  # CRC-32 of those footer_size bytes; None: not recorded
    # Format 5: the file's partition (spec id and values); None: not recorded.
    partition: FilePartition | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": self.path, "size": self.size, "etag": self.etag,
            "row_count": self.row_count, "row_group_count": self.row_group_count,
            "footer_size": self.footer_size}
        if self.footer_crc32 is not None:
            out["footer_crc32"] = self.footer_crc32
        out["stats"] = {str(k): dict(v) for k, v in sorted(self.stats.items())}
        if self.partition is not None:
            out["partition"] = self.partition.to_json()
        return out


@dataclass(frozen=True)
class SegmentRef:
    """Entries that belong to this version, held elsewhere.

    Format 1: ``manifest`` is an earlier manifest, whose inline ``files`` are the
    segment (``stats`` is None: no summary, never skipped).  Format 3: ``manifest``
    is a segment object (``segment/...arrow``, :mod:`caslake.format.segment`)
    of ``size`` bytes with CRC-32 ``crc32``, and ``stats`` summarises its
    entries (field id -> min/max/nulls), so a planner can skip it."""

    manifest: str  # the key: an earlier manifest (format 1) or a segment object
    version: int
    file_count: int
    row_count: int
    byte_count: int
    stats: Mapping[int, Mapping[str, Any]] | None = None
    size: int = 0
    crc32: int = 0

    @property
    def is_object(self) -> bool:
        """True for a format-3 segment object (with a summary)."""
        return self.stats is not None

    def to_json(self) -> dict[str, Any]:
        if self.stats is None:
            return {"manifest": self.manifest, "version": self.version,
                    "files": self.file_count, "rows": self.row_count, "bytes": self.byte_count}
        body = {"segment": self.manifest, "version": self.version, "files": self.file_count,
                "rows": self.row_count, "bytes": self.byte_count, "size": self.size,
                "crc32": self.crc32,
                "stats": {str(k): dict(v) for k, v in sorted(self.stats.items())}}
        return {**body, "check": segment_ref_check(body)}


def segment_ref_check(body: Mapping[str, Any]) -> int:
    """CRC-32 of a segment reference's canonical JSON (keys sorted, no whitespace,
    without ``check``): a summary damaged or edited on its own is detected when the
    manifest is parsed, before any planner trusts it to skip the segment."""
    return zlib.crc32(json.dumps({k: v for k, v in body.items() if k != "check"},
                                 sort_keys=True, separators=(",", ":")).encode())


@dataclass(frozen=True)
class AncestorRef:
    """A skip pointer: the manifest of an earlier version, for O(log n) time travel."""

    version: int
    manifest: str
    created_at_ms: int

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "manifest": self.manifest,
                "created_at": format_ts(self.created_at_ms)}


@dataclass(frozen=True)
class TombstoneRef:
    """A tombstone object and, for each live data file it deletes from, how many
    rows it deletes there that no earlier tombstone had deleted."""

    path: str
    size: int
    etag: str
    files: Mapping[str, int]

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "etag": self.etag,
                "files": dict(sorted(self.files.items()))}


@dataclass(frozen=True)
class Totals:
    files: int
    rows: int  # rows stored in the live data files
    bytes: int
    deleted_rows: int = 0  # of those, rows deleted by tombstones

    @property
    def live_rows(self) -> int:
        return self.rows - self.deleted_rows

    def to_json(self) -> dict[str, int]:
        return {"files": self.files, "rows": self.rows, "bytes": self.bytes,
                "deleted_rows": self.deleted_rows}


@dataclass(frozen=True)
class ExternalTable:
    """Another table whose objects this one references (a zero-copy clone's source):
    its location, its id, and the hold this table keeps on it (format version 2)."""

    uri: str
    table_id: str
    hold: str  # key of our hold record under that table's root

    def to_json(self) -> dict[str, Any]:
        return {"uri": self.uri, "table_id": self.table_id, "hold": self.hold}


@dataclass(frozen=True)
class AppliedIntent:
    """A group-commit intent a version applied (docs/protocol.md, "Group commit"):
    its id, the commit id its writer waits for, and what it added."""

    id: str
    commit_id: str
    files: int
    rows: int

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "commit_id": self.commit_id, "files": self.files,
                "rows": self.rows}


@dataclass(frozen=True)
class TransactionRef:
    """A staged version's multi-table transaction: its id, and the URI of the table
    whose ``_txn/<id>.json`` decides it (docs/format.md, "Transaction record")."""

    id: str
    record: str

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "record": self.record}


@dataclass(frozen=True)
class Manifest:
    table_id: str
    version: int
    parent: str | None
    commit_id: str
    created_at_ms: int
    operation: str
    schema: TableSchema
    files: tuple[DataFile, ...] = ()
    segments: tuple[SegmentRef, ...] = ()
    removed: frozenset[str] = frozenset()
    tombstones: tuple[TombstoneRef, ...] = ()
    ancestors: tuple[AncestorRef, ...] = ()
    operation_params: Mapping[str, str] = field(default_factory=dict)
    summary: Mapping[str, int] = field(default_factory=dict)
    properties: Mapping[str, str] = field(default_factory=dict)
    txns: Mapping[str, int] = field(default_factory=dict)
    totals: Totals = Totals(0, 0, 0)
    format_version: int = BASE_FORMAT_VERSION
    # GC may have deleted the manifests of versions below this one (time travel
    # to them is VersionNotFound); carried forward by every commit.
    oldest_version: int = 0
    # Tables whose objects ``data/x=<alias>/...`` keys name (clones); carried forward.
    external: Mapping[str, ExternalTable] = field(default_factory=dict)
    # GC's fence: gc may have collected unreferenced objects uploaded up to this time
    # (ms since the epoch); a commit adding objects whose operation started at or
    # before it is refused.  Carried forward (never lowered); 0: no fence.
    collected_until_ms: int = 0
    # Format 5: the partition specs (None: the table was never partitioned).
    partitioning: Partitioning | None = None
    # Group commit: the intents this version applied (not carried forward; readers
    # ignore it, so it needs no format version).
    intents: tuple[AppliedIntent, ...] = ()
    # Multi-table transactions: set on a *staged* version, committed only if its
    # record says so (not carried forward).
    transaction: TransactionRef | None = None

    def has_commit(self, commit_id: str) -> bool:
        """Whether this version is ``commit_id``'s: its own, or a group-commit intent
        it applied."""
        return self.commit_id == commit_id or any(i.commit_id == commit_id
                                                  for i in self.intents)

    def deleted_rows_per_file(self) -> dict[str, int]:
        """Rows the tombstones delete in each data file that has any (one live
        tombstone per file, but older manifests may hold several: they add up)."""
        out: dict[str, int] = {}
        for ref in self.tombstones:
            for path, n in ref.files.items():
                out[path] = out.get(path, 0) + n
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "format": MANIFEST_FORMAT,
            # A staged version needs a reader that knows multi-table transactions.
            "format_version": (max(self.format_version, TXN_FORMAT_VERSION)
                               if self.transaction else self.format_version),
            "table_id": self.table_id,
            "version": self.version,
            "parent": self.parent,
            "commit_id": self.commit_id,
            "created_at": format_ts(self.created_at_ms),
            "operation": self.operation,
            "operation_params": dict(self.operation_params),
            "summary": dict(self.summary),
            "schema": self.schema.to_json(),
            "properties": dict(self.properties),
            "txns": dict(self.txns),
            "totals": self.totals.to_json(),
            "oldest_version": self.oldest_version,
            **({"collected_until": self.collected_until_ms}
               if self.collected_until_ms else {}),
            **({"external": {a: e.to_json() for a, e in sorted(self.external.items())}}
               if self.external else {}),
            "ancestors": [a.to_json() for a in self.ancestors],
            "segments": [s.to_json() for s in self.segments],
            "removed": sorted(self.removed),
            "tombstones": [t.to_json() for t in self.tombstones],
            "files": [f.to_json() for f in self.files],
            **(self.partitioning.to_json() if self.partitioning is not None else {}),
            **({"intents": [i.to_json() for i in self.intents]} if self.intents else {}),
            **({"transaction": self.transaction.to_json(),
                "table_format_version": self.format_version} if self.transaction else {}),
        }

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_json(), separators=(",", ":")).encode()


@dataclass(frozen=True)
class Pointer:
    table_id: str
    version: int
    manifest: str
    commit_id: str
    format_version: int = BASE_FORMAT_VERSION

    def to_bytes(self) -> bytes:
        return json.dumps({
            "format": POINTER_FORMAT, "format_version": self.format_version,
            "table_id": self.table_id, "version": self.version,
            "manifest": self.manifest, "commit_id": self.commit_id,
        }, separators=(",", ":")).encode()


def format_ts(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def parse_ts(text: str) -> int:
    d = datetime.fromisoformat(text)
    if d.tzinfo is None:
        raise ValueError("timestamp must carry a timezone")
    return round(d.timestamp() * 1000)


# --- parsing ----------------------------------------------------------------


class _Doc:
    """Typed field access on a decoded JSON object; every defect names the object."""

    def __init__(self, key: str, obj: object, where: str = "") -> None:
        self.key = key
        self.where = where
        if not isinstance(obj, dict):
            raise self.error("expected a JSON object")
        self.obj: dict[str, Any] = obj

    def error(self, reason: str) -> CorruptMetadata:
        return CorruptMetadata(self.key, f"{self.where}: {reason}" if self.where else reason)

    def get(self, name: str, kind: type[T] | tuple[type, ...], *, optional: bool = False,
            default: Any = None) -> Any:
        if name not in self.obj or self.obj[name] is None:
            if optional:
                return default
            raise self.error(f"missing field {name!r}")
        v = self.obj[name]
        if kind is int and isinstance(v, bool):
            raise self.error(f"field {name!r} must be an integer")
        if not isinstance(v, kind):
            raise self.error(f"field {name!r} has the wrong type ({type(v).__name__})")
        return v

    def nonneg(self, name: str) -> int:
        v: int = self.get(name, int)
        if not 0 <= v <= MAX_INT64:
            raise self.error(f"field {name!r} must be a non-negative 64-bit integer")
        return v

    def child(self, name: str, obj: object) -> _Doc:
        return _Doc(self.key, obj, f"{self.where}.{name}" if self.where else name)

    def items(self, name: str, *, optional: bool = False) -> Iterator[tuple[int, object]]:
        seq = self.get(name, list, optional=optional, default=[])
        return enumerate(seq)

    def string_map(self, name: str, value_kind: type) -> dict[str, Any]:
        m = self.get(name, dict, optional=True, default={})
        for k, v in m.items():
            if not isinstance(v, value_kind) or (value_kind is int and isinstance(v, bool)):
                raise self.error(f"{name}[{k!r}] has the wrong type")
        return dict(m)

    def safe_key(self, name: str, prefix: str) -> str:
        v: str = self.get(name, str)
        reason = check_relative_key(v, prefix=prefix)
        if reason:
            raise self.error(reason)
        return v


def _load_json(data: bytes, key: str) -> object:
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as e:  # incl. ints past int_max_str_digits
        raise CorruptMetadata(key, f"not valid JSON ({e})") from None


def _check_header(doc: _Doc, expected: str, highest: int = FORMAT_VERSION) -> int:
    fmt = doc.get("format", str)
    if fmt != expected:
        raise doc.error(f"format is {fmt!r}, expected {expected!r}")
    return _supported(doc, "format_version", highest)


def _supported(doc: _Doc, field: str, highest: int) -> int:
    """``doc[field]``, a format version: UnsupportedFormatVersion past ``highest``."""
    fv: int = doc.get(field, int)
    if fv > highest or fv < 1:
        raise UnsupportedFormatVersion(
            doc.key, f"{field} {fv} is not supported by this reader "
                     f"(it reads up to {highest}); upgrade caslake")
    return fv


def _table_format_version(doc: _Doc, fv: int) -> int:
    """The table's format version a manifest carries: its ``format_version``, except
    for a staged manifest written as TXN_FORMAT_VERSION (so that a reader that does
    not know multi-table transactions refuses it), which keeps the table's in
    ``table_format_version``.  A staged manifest of an earlier writer (below 6)
    carries the table's version as any manifest does."""
    if fv < TXN_FORMAT_VERSION:
        return fv
    if doc.obj.get("transaction") is None:
        raise UnsupportedFormatVersion(
            doc.key, f"format_version {fv} without a transaction is not supported by this "
                     f"reader (it reads up to {FORMAT_VERSION}, and {TXN_FORMAT_VERSION} for "
                     "a staged version); upgrade caslake")
    return _supported(doc, "table_format_version", FORMAT_VERSION)


def parse_pointer(data: bytes, key: str) -> Pointer:
    doc = _Doc(key, _load_json(data, key))
    fv = _check_header(doc, POINTER_FORMAT)
    version = doc.nonneg("version")
    return Pointer(table_id=doc.get("table_id", str), version=version,
                   manifest=doc.safe_key("manifest", MANIFEST_PREFIX),
                   commit_id=doc.get("commit_id", str), format_version=fv)


def _guard(doc: _Doc, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except (ValueError, TypeError, KeyError, OverflowError) as e:
        raise doc.error(str(e)) from None


def _parse_field(f: _Doc, ids: set[int], path: str) -> Field:
    fid = f.get("id", int)
    name = f.get("name", str)
    typ = f.get("type", str)
    if fid in ids or fid < 1 or not name:
        raise f.error("duplicate or invalid field id or name")
    ids.add(fid)
    here = f"{path}.{name}" if path else name
    children: list[Field] = []
    if typ in NESTED:
        names: set[str] = set()
        for i, raw in f.items("fields"):
            c = _parse_field(f.child(f"fields[{i}]", raw), ids, here)
            if c.name in names:
                raise f.error(f"duplicate field name {c.name!r} in {here!r}")
            names.add(c.name)
            children.append(c)
        want = {LIST: [ELEMENT], MAP: [KEY, VALUE]}.get(typ)
        if (want is not None and [c.name for c in children] != want) or not children:
            raise f.error(f"a {typ} field has children {[c.name for c in children]}")
    else:
        _guard(f, partial(type_from_str, typ))
    return Field(fid, name, typ, f.get("nullable", bool), tuple(children))


def _parse_schema(doc: _Doc) -> TableSchema:
    fields = []
    ids: set[int] = set()
    names: set[str] = set()
    for i, raw in doc.items("fields"):
        f = _parse_field(doc.child(f"fields[{i}]", raw), ids, "")
        if f.name in names:
            raise doc.error("duplicate or invalid field id or name")
        names.add(f.name)
        fields.append(f)
    if not fields:
        raise doc.error("schema has no fields")
    last = doc.get("last_field_id", int, optional=True, default=0)
    if last and last < max(ids):
        raise doc.error("last_field_id is below a field's id")
    schema_id = doc.get("schema_id", int, optional=True, default=0)
    if not 0 <= schema_id <= MAX_INT64:
        raise doc.error("schema_id must be a non-negative 64-bit integer")
    return TableSchema(tuple(fields), schema_id=schema_id, highest_field_id=last)


def _parse_file_partition(doc: _Doc, partitioning: Partitioning | None) -> FilePartition:
    values = doc.get("values", list)
    fp = FilePartition(doc.nonneg("spec_id"), tuple(values))
    _guard(doc, partial(check_file_partition, fp, partitioning))
    return fp


def _parse_data_file(doc: _Doc, schema: TableSchema,
                     partitioning: Partitioning | None = None) -> DataFile:
    by_id = schema.all_by_id()  # columns, and (format 4) fields inside structs
    stats: dict[int, dict[str, Any]] = {}
    raw_stats = doc.get("stats", dict, optional=True, default={})
    for sk, sv in raw_stats.items():
        sdoc = doc.child(f"stats[{sk}]", sv)
        fid: int = _guard(sdoc, partial(int, sk))
        if fid not in by_id:
            if 1 <= fid <= schema.last_field_id:
                continue  # a dropped column's statistics: nothing reads them
            raise sdoc.error(f"field id {fid} is not in the schema")
        # Values are only type-checked as JSON scalars here; they are decoded (and a
        # bad one reported as CorruptMetadata) when a predicate prunes on them.
        for bound in ("min", "max"):
            v = sdoc.obj.get(bound)
            if v is not None and not isinstance(v, int | float | str):
                raise sdoc.error(f"{bound} must be a number or a string")
        if "nulls" in sdoc.obj:
            sdoc.nonneg("nulls")
        stats[fid] = dict(sdoc.obj)
    size = doc.nonneg("size")
    footer = doc.nonneg("footer_size")
    if footer < 8 or footer > size:
        raise doc.error("footer_size must be between 8 and the file size")
    crc: int | None = doc.get("footer_crc32", int, optional=True)
    if crc is not None and not 0 <= crc < 2**32:
        raise doc.error("footer_crc32 must be an unsigned 32-bit integer")
    return DataFile(path=doc.safe_key("path", DATA_PREFIX), size=size,
                    etag=doc.get("etag", str), row_count=doc.nonneg("row_count"),
                    row_group_count=doc.nonneg("row_group_count"), footer_size=footer,
                    footer_crc32=crc,
                    stats=stats,
                    partition=None if "partition" not in doc.obj else _parse_file_partition(
                        doc.child("partition", doc.get("partition", dict)), partitioning))


def parse_data_file(obj: object, schema: TableSchema, *, source: str,
                    partitioning: Partitioning | None = None) -> DataFile:
    """Validate one data-file entry (e.g. from a Spark task's commit message);
    defects are CorruptMetadata naming ``source``.  A ``partition`` must name a
    spec of ``partitioning``."""
    return _parse_data_file(_Doc(source, obj), schema, partitioning)


def parse_partitioning(obj: dict[str, Any], schema: TableSchema, fv: int, *, source: str
                       ) -> Partitioning | None:
    """The ``partition_specs``/``default_spec_id``/``last_partition_id`` of a manifest or
    segment header (None when absent); defects are CorruptMetadata naming ``source``."""
    return _parse_partitioning(_Doc(source, obj), schema, fv)


def _parse_partitioning(doc: _Doc, schema: TableSchema, fv: int) -> Partitioning | None:
    if "partition_specs" not in doc.obj:
        return None
    if fv < PARTITION_FORMAT_VERSION:
        raise doc.error(f"a format_version {fv} manifest has partition specs "
                        f"(format {PARTITION_FORMAT_VERSION})")
    specs = []
    for i, raw in doc.items("partition_specs"):
        sdoc = doc.child(f"partition_specs[{i}]", raw)
        fields = []
        for j, fraw in sdoc.items("fields"):
            fdoc = sdoc.child(f"fields[{j}]", fraw)
            fields.append(PartitionField(fdoc.nonneg("field_id"), fdoc.nonneg("source_id"),
                                         fdoc.get("name", str), fdoc.get("transform", str)))
        specs.append(PartitionSpec(sdoc.nonneg("spec_id"), tuple(fields)))
    if not specs:
        raise doc.error("partition_specs is empty")
    p = Partitioning(tuple(specs), doc.nonneg("default_spec_id"), doc.nonneg("last_partition_id"))
    _guard(doc, partial(check_partitioning, p, schema))
    return p


def parse_table_schema(obj: object, *, source: str) -> TableSchema:
    """Validate a ``TableSchema.to_json()`` object (e.g. from a Spark commit message)
    with the manifest's own schema parser; defects are CorruptMetadata naming ``source``."""
    return _parse_schema(_Doc(source, obj))


def _parse_segment_ref(s: _Doc) -> SegmentRef:
    if "segment" not in s.obj:  # format 1: an earlier manifest
        return SegmentRef(manifest=s.safe_key("manifest", MANIFEST_PREFIX),
                          version=s.nonneg("version"), file_count=s.nonneg("files"),
                          row_count=s.nonneg("rows"), byte_count=s.nonneg("bytes"))
    stats: dict[int, dict[str, Any]] = {}
    for sk, sv in s.get("stats", dict).items():
        sdoc = s.child(f"stats[{sk}]", sv)
        fid: int = _guard(sdoc, partial(int, sk))
        for bound in ("min", "max"):
            if bound in sdoc.obj and (sdoc.obj[bound] is None
                                      or isinstance(sdoc.obj[bound], list | dict)):
                raise sdoc.error(f"{bound} must be a number, a string or a boolean")
        if "nulls" in sdoc.obj:
            sdoc.nonneg("nulls")
        stats[fid] = {b: sdoc.obj[b] for b in ("min", "max", "nulls") if b in sdoc.obj}
    crc = s.nonneg("crc32")
    if crc >= 2**32:
        raise s.error("crc32 must be an unsigned 32-bit integer")
    if s.get("check", int) != segment_ref_check(s.obj):
        raise s.error("the segment reference's check does not match its content "
                      "(the summary or counts were damaged or edited)")
    return SegmentRef(manifest=s.safe_key("segment", SEGMENT_PREFIX), version=s.nonneg("version"),
                      file_count=s.nonneg("files"), row_count=s.nonneg("rows"),
                      byte_count=s.nonneg("bytes"), stats=stats, size=s.nonneg("size"),
                      crc32=crc)


def parse_manifest(data: bytes, key: str) -> Manifest:
    doc = _Doc(key, _load_json(data, key))
    fv = _table_format_version(doc, _check_header(doc, MANIFEST_FORMAT, TXN_FORMAT_VERSION))
    schema = _parse_schema(doc.child("schema", doc.get("schema", dict)))
    partitioning = _parse_partitioning(doc, schema, fv)
    files = tuple(_parse_data_file(doc.child(f"files[{i}]", raw), schema, partitioning)
                  for i, raw in doc.items("files"))
    paths = [f.path for f in files]
    if len(set(paths)) != len(paths):
        raise doc.error("a data file is listed twice")
    segments = [_parse_segment_ref(doc.child(f"segments[{i}]", raw))
                for i, raw in doc.items("segments")]
    if len({s.manifest for s in segments}) != len(segments):
        raise doc.error("a segment is referenced twice")
    if fv < SEGMENTS_FORMAT_VERSION and any(s.is_object for s in segments):
        raise doc.error(f"a format_version {fv} manifest references a segment object "
                        f"(format {SEGMENTS_FORMAT_VERSION})")
    ancestors = []
    for i, raw in doc.items("ancestors"):
        a = doc.child(f"ancestors[{i}]", raw)
        ancestors.append(AncestorRef(version=a.nonneg("version"),
                                     manifest=a.safe_key("manifest", MANIFEST_PREFIX),
                                     created_at_ms=_guard(a, partial(
                                         parse_ts, a.get("created_at", str)))))
    removed = []
    for i, raw in doc.items("removed", optional=True):
        reason = check_relative_key(raw, prefix=DATA_PREFIX)
        if reason:
            raise doc.error(f"removed[{i}]: {reason}")
        removed.append(str(raw))
    tombstones = []
    tomb_paths: set[str] = set()
    for i, raw in doc.items("tombstones", optional=True):
        tdoc = doc.child(f"tombstones[{i}]", raw)
        tpath = tdoc.safe_key("path", TOMBSTONE_PREFIX)
        if tpath in tomb_paths:
            raise tdoc.error(f"tombstone {tpath!r} is listed twice")
        tomb_paths.add(tpath)
        tfiles = tdoc.string_map("files", int)
        for fp, n in tfiles.items():
            reason = check_relative_key(fp, prefix=DATA_PREFIX)
            if reason or n < 0:
                raise tdoc.error(reason or f"negative deleted-row count for {fp!r}")
        tombstones.append(TombstoneRef(tpath, tdoc.nonneg("size"), tdoc.get("etag", str),
                                       tfiles))
    version = doc.nonneg("version")
    parent = doc.get("parent", str, optional=True)
    if parent is not None:
        parent = doc.safe_key("parent", MANIFEST_PREFIX)
    if (parent is None) != (version == 0):
        raise doc.error("only version 0 may lack a parent")
    if (any(a.version >= version for a in ancestors)
            or any(s.version >= version for s in segments if not s.is_object)
            or any(s.version > version for s in segments)):
        raise doc.error("ancestors and segments must be older than the manifest")
    external: dict[str, ExternalTable] = {}
    for alias, raw in doc.get("external", dict, optional=True, default={}).items():
        edoc = doc.child(f"external[{alias!r}]", raw)
        if not valid_alias(alias):
            raise edoc.error("an external alias is 1-16 lowercase letters or digits")
        hold = edoc.get("hold", str)
        if check_relative_key(hold, prefix="refs/holds/"):
            raise edoc.error(f"hold {hold!r} is not a hold key")
        external[alias] = ExternalTable(edoc.get("uri", str), edoc.get("table_id", str), hold)
    t = doc.child("totals", doc.get("totals", dict))
    oldest = doc.get("oldest_version", int, optional=True, default=0)
    if not 0 <= oldest <= version:
        raise doc.error("oldest_version must be between 0 and the manifest's version")
    collected_until = doc.get("collected_until", int, optional=True, default=0)
    if collected_until < 0:
        raise doc.error("collected_until must not be negative")
    intents = []
    for i, raw in doc.items("intents", optional=True):
        idoc = doc.child(f"intents[{i}]", raw)
        intents.append(AppliedIntent(idoc.get("id", str), idoc.get("commit_id", str),
                                     idoc.nonneg("files"), idoc.nonneg("rows")))
    transaction = None
    if doc.obj.get("transaction") is not None:
        tdoc = doc.child("transaction", doc.get("transaction", dict))
        transaction = TransactionRef(_txn_id(tdoc, "id"), tdoc.get("record", str))
    return Manifest(
        table_id=doc.get("table_id", str), version=version, parent=parent,
        commit_id=doc.get("commit_id", str),
        created_at_ms=_guard(doc, partial(parse_ts, doc.get("created_at", str))),
        operation=doc.get("operation", str), schema=schema, files=files,
        segments=tuple(segments), removed=frozenset(removed), tombstones=tuple(tombstones),
        ancestors=tuple(ancestors),
        operation_params=doc.string_map("operation_params", str),
        summary=doc.string_map("summary", int), properties=doc.string_map("properties", str),
        txns=doc.string_map("txns", int),
        totals=Totals(t.nonneg("files"), t.nonneg("rows"), t.nonneg("bytes"),
                      t.get("deleted_rows", int, optional=True, default=0)),
        format_version=fv, oldest_version=oldest, external=external,
        collected_until_ms=collected_until, partitioning=partitioning,
        intents=tuple(intents), transaction=transaction)


# --- multi-table transaction records ---------------------------------------------

TXN_FORMAT = "caslake-txn"
TXN_PREFIX = "_txn/"
PENDING, COMMITTED, ABORTED = "pending", "committed", "aborted"
_TXN_STATES = (PENDING, COMMITTED, ABORTED)


def txn_record_key(txn_id: str) -> str:
    """The key, under its coordinator table's root, of transaction ``txn_id``'s record."""
    return f"{TXN_PREFIX}{txn_id}.json"


def _txn_id(doc: _Doc, name: str) -> str:
    v: str = doc.get(name, str)
    if len(v) != 32 or any(c not in "0123456789abcdef" for c in v):
        raise doc.error(f"{name} must be 32 lowercase hex digits")
    return v


@dataclass(frozen=True)
class TxnParticipant:
    """One table of a multi-table transaction: its URI and id, the version it was at
    when the transaction began, and its staged version (None until committed)."""

    uri: str
    table_id: str
    base_version: int
    version: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"uri": self.uri, "table_id": self.table_id,
                "base_version": self.base_version, "version": self.version}


@dataclass(frozen=True)
class TxnRecord:
    """A multi-table transaction's decision record (docs/format.md, "Transaction
    record"): ``pending`` until one swap makes it ``committed`` or ``aborted``."""

    id: str
    state: str
    created_ms: int
    deadline_ms: int
    participants: tuple[TxnParticipant, ...]

    def to_bytes(self) -> bytes:
        return json.dumps({
            "format": TXN_FORMAT, "format_version": 1, "id": self.id, "state": self.state,
            "created_ms": self.created_ms, "deadline_ms": self.deadline_ms,
            "participants": [p.to_json() for p in self.participants],
        }, separators=(",", ":")).encode()


def parse_txn_record(data: bytes, key: str) -> TxnRecord:
    doc = _Doc(key, _load_json(data, key))
    if doc.get("format", str) != TXN_FORMAT:
        raise doc.error(f"format is not {TXN_FORMAT!r}")
    if doc.get("format_version", int) != 1:
        raise UnsupportedFormatVersion(key, "transaction record format_version is not 1; "
                                       "upgrade caslake")
    state = doc.get("state", str)
    if state not in _TXN_STATES:
        raise doc.error(f"state {state!r} is not one of {', '.join(_TXN_STATES)}")
    parts = []
    for i, raw in doc.items("participants"):
        pdoc = doc.child(f"participants[{i}]", raw)
        version = pdoc.get("version", int, optional=True)
        parts.append(TxnParticipant(pdoc.get("uri", str), pdoc.get("table_id", str),
                                    pdoc.nonneg("base_version"), version))
    return TxnRecord(_txn_id(doc, "id"), state, doc.nonneg("created_ms"),
                     doc.nonneg("deadline_ms"), tuple(parts))
