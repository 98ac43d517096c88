"""Parquet physics: the footer, the byte layout of a data file, checksums, statistics.

This module owns everything caslake knows about the inside of a Parquet file:

* **the footer**: where it lies (:func:`footer_size_from_trailer`), its CRC-32
  (:func:`footer_crc32`), checking it against a manifest entry and parsing it
  (:func:`check_footer`, :func:`parse_footer`), giving a :class:`FooterInfo`;
* **byte ranges**: of every column chunk and row group (:class:`FooterInfo`,
  :class:`RowGroupInfo`, :class:`ColumnChunkInfo`), so readers fetch exactly the
  chunks they need and the row-group splice (purge) can copy whole groups;
* **column indexes**: the leaf columns of a top-level column from its name
  (:meth:`FooterInfo.column_indexes`; a nested column has one leaf per primitive
  below it), and the file schema's tree with each node's leaves
  (:class:`LeafSpan`, :func:`leaf_spans`), so a reader fetches only the chunks
  of the nested fields it projects;
* **page CRCs**: data pages carry CRC-32s; :data:`WRITE_PAGE_CHECKSUMS` and
  :data:`VERIFY_PAGE_CHECKSUMS` are the writer and reader options that add and
  check them;
* **footer statistics**: decoding a row group's min/max/null counts into
  :class:`~caslake.format.stats.ColumnStats` (:func:`row_group_stats`) and
  merging them into a file's manifest statistics (:func:`file_stats`).

Pure: nothing here performs I/O (callers fetch the bytes), and every defect of
a file's bytes is :class:`~caslake.errors.CorruptMetadata` naming the file.
The Thrift codec that purge needs to rewrite footers belongs here too.  It is
imported inside the functions that decode or encode Thrift, not at module load:
a scan of caslake's own files never needs it, and thriftpy2's IDL parse costs
~50 ms of ``import caslake`` (``tests/test_import_cost.py``).
"""

from __future__ import annotations

import copy
import itertools
import json
import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cached_property
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from caslake.errors import CorruptMetadata
from caslake.format.manifest import DataFile
from caslake.format.schema import TableSchema
from caslake.format.schema_evolution import field_id_of, stored_children
from caslake.format.stats import ColumnStats, JsonStats, footer_value, value_to_json

MAGIC = b"PAR1"
K = TypeVar("K")
#: Bytes after the footer's Thrift metadata: its little-endian u32 length, then MAGIC.
TRAILER_SIZE = 8

#: ``pq.ParquetWriter`` options: every data page carries a CRC-32, so a flipped
#: bit in a page is an error, not a wrong value.
WRITE_PAGE_CHECKSUMS: dict[str, Any] = {"write_page_checksum": True}
#: ``pq.ParquetWriter`` options: a decimal of precision <= 18 is stored as INT32/INT64
#: (the Parquet spec allows it; Spark and arrow-rs write it so), not as a big-endian
#: FIXED_LEN_BYTE_ARRAY: pyarrow decodes it ~5x faster (TPC-H Q6's columns, SF1).
DECIMALS_AS_INTEGERS: dict[str, Any] = {"store_decimal_as_integer": True}
#: ``pq.ParquetFile`` options: check the page CRC-32s while decoding.
VERIFY_PAGE_CHECKSUMS: dict[str, Any] = {"page_checksum_verification": True}


# --- footer location and checksum ---------------------------------------------------


def footer_size_from_trailer(trailer: bytes, *, path: str) -> int:
    """The footer's size *including* the 8-byte trailer, from a file's last 8 bytes
    (this is the manifest's ``footer_size``)."""
    if len(trailer) != TRAILER_SIZE or trailer[4:] != MAGIC:
        raise CorruptMetadata(path, "the file does not end with a Parquet footer")
    return int(struct.unpack("<I", trailer[:4])[0]) + TRAILER_SIZE


def footer_crc32(tail: bytes) -> int:
    """CRC-32 of a file's last ``footer_size`` bytes (the manifest's ``footer_crc32``)."""
    return zlib.crc32(tail)


# --- layout --------------------------------------------------------------------------


@dataclass(frozen=True)
class ColumnChunkInfo:
    """One column chunk of one row group: bytes ``[start, end)`` of the file."""

    column: int  # index among the file's leaf columns
    name: str  # its path in the schema ("a.b", "tags.list.element" for nested fields)
    start: int  # dictionary page if any, else the first data page
    end: int
    num_values: int
    has_column_index: bool  # the page index lies outside the chunk, before the footer
    has_offset_index: bool


@dataclass(frozen=True)
class RowGroupInfo:
    """One row group: its rows, its place among the file's rows, and its bytes."""

    index: int
    num_rows: int
    first_row: int  # file position of its first row
    columns: tuple[ColumnChunkInfo, ...]

    @property
    def start(self) -> int:
        """First byte of its column chunks (inclusive)."""
        return min((c.start for c in self.columns), default=0)

    @property
    def end(self) -> int:
        """Last byte of its column chunks (exclusive)."""
        return max((c.end for c in self.columns), default=0)


@dataclass(frozen=True)
class FooterInfo:
    """A data file's parsed footer and the byte layout it describes.

    ``raw`` is the file's last ``footer_size`` bytes: the Thrift ``FileMetaData``
    (``footer_len`` bytes at file offset ``footer_start``) then the 8-byte
    trailer.  ``etag`` is the ETag the bytes were read under (a reader pins its
    later range reads of the file to it); empty when unknown.
    Per-group and per-chunk values are computed on first use and kept."""

    path: str
    file_size: int
    raw: bytes
    metadata: pq.FileMetaData = field(repr=False, compare=False)
    group_rows: tuple[int, ...]
    etag: str = ""

    @property
    def footer_size(self) -> int:
        return len(self.raw)

    @property
    def footer_start(self) -> int:
        return self.file_size - len(self.raw)

    @property
    def footer_len(self) -> int:
        return len(self.raw) - TRAILER_SIZE

    @property
    def num_rows(self) -> int:
        return int(self.metadata.num_rows)

    @property
    def num_row_groups(self) -> int:
        return len(self.group_rows)

    @cached_property
    def group_starts(self) -> tuple[int, ...]:
        """File position of each row group's first row."""
        return tuple(itertools.accumulate(self.group_rows, initial=0))[:-1]

    @cached_property
    def arrow_schema(self) -> pa.Schema:
        return self.metadata.schema.to_arrow_schema()

    @cached_property
    def leaf_spans(self) -> dict[str, LeafSpan]:
        """Each top-level column of the file by name, with its leaf columns."""
        return {span.field.name: span for span in leaf_spans(self.arrow_schema,
                                                             self.metadata.num_columns,
                                                             path=self.path)}

    def column_indexes(self, names: Iterable[str]) -> list[int]:
        """Leaf-column indexes of the top-level columns ``names`` (every leaf of a
        nested one), in order; a missing column is CorruptMetadata."""
        spans = self.leaf_spans
        out: list[int] = []
        for n in names:
            span = spans.get(n)
            if span is None:
                raise CorruptMetadata(self.path, f"data file has no column {n!r}")
            out.extend(span.leaves)
        return out

    @cached_property
    def _chunk_ranges(self) -> dict[tuple[int, int], tuple[int, int]]:
        return {}

    def chunk_range(self, rg: int, column: int) -> tuple[int, int]:
        """Bytes ``[start, end)`` of one column chunk."""
        memo = self._chunk_ranges
        hit = memo.get((rg, column))
        if hit is None:
            hit = memo[(rg, column)] = _chunk_range(self.metadata.row_group(rg).column(column))
        return hit

    def chunk_ranges(self, groups: Iterable[int], columns: Sequence[int]
                     ) -> list[tuple[int, int]]:
        """Byte ranges of ``columns`` in each of ``groups``, group by group."""
        return [self.chunk_range(rg, c) for rg in groups for c in columns]

    def chunk_bytes(self, groups: Iterable[int], columns: Sequence[int]) -> int:
        return sum(e - s for s, e in self.chunk_ranges(groups, columns))

    def row_group(self, rg: int) -> RowGroupInfo:
        """Everything about row group ``rg``, with every column chunk's byte range."""
        return self.row_groups[rg]

    @cached_property
    def row_groups(self) -> tuple[RowGroupInfo, ...]:
        out = []
        for rg, (rows, first) in enumerate(zip(self.group_rows, self.group_starts, strict=True)):
            group = self.metadata.row_group(rg)
            chunks = []
            for c in range(group.num_columns):
                meta = group.column(c)
                start, end = self.chunk_range(rg, c)
                chunks.append(ColumnChunkInfo(c, meta.path_in_schema, start, end,
                                              meta.num_values, meta.has_column_index,
                                              meta.has_offset_index))
            out.append(RowGroupInfo(rg, rows, first, tuple(chunks)))
        return tuple(out)

    @cached_property
    def flat(self) -> bool:
        """Whether every column of the file is a primitive (one leaf each)."""
        return all(not s.children for s in self.leaf_spans.values())

    @cached_property
    def primitive_leaves(self) -> dict[str, int]:
        """The leaf index of each top-level primitive column, by name."""
        return {n: s.first for n, s in self.leaf_spans.items() if not s.children}

    def row_group_stats(self, rg: int, columns: dict[str, pa.DataType]
                        ) -> dict[str, ColumnStats]:
        return row_group_stats(self.metadata, rg, columns, leaves=self.primitive_leaves)

    @cached_property
    def dictionary_chunks(self) -> frozenset[tuple[int, int]]:
        """(row group, column index) of every column chunk whose data pages are all
        dictionary-encoded, by the chunk's page encoding statistics (pyarrow does
        not expose them; a chunk without them is not counted).  A reader may
        decode these as dictionaries cheaply; any other chunk would be re-hashed.

        From the footer's :data:`DICTIONARY_HINT_KEY` entry when it is valid (pyarrow
        has parsed it already); else by decoding the footer's Thrift, in pure Python
        (about 1 ms a KiB of footer)."""
        hint = read_dictionary_hint(self.metadata)
        if hint is not None:
            return hint
        from caslake.format.parquet_thrift import decode_file_metadata

        return chunks_from_encoding_stats(
            decode_file_metadata(self.raw[:-TRAILER_SIZE], what=self.path))


def _chunk_range(c: Any) -> tuple[int, int]:
    start = int(c.data_page_offset)
    if c.has_dictionary_page and c.dictionary_page_offset is not None:
        start = min(start, int(c.dictionary_page_offset))
    return start, start + int(c.total_compressed_size)


# --- the schema tree and its leaf columns -------------------------------------------


@dataclass(frozen=True)
class LeafSpan:
    """A node of a data file's schema (a column, or a field inside one) and its
    leaf columns ``[first, first + count)``: Parquet numbers the leaves depth
    first, so every node's leaves are contiguous.  ``children``: a struct's
    fields, a list's element, a map's key and value."""

    field: pa.Field[Any]
    first: int
    count: int
    children: tuple[LeafSpan, ...] = ()

    @property
    def leaves(self) -> range:
        return range(self.first, self.first + self.count)

    @property
    def field_id(self) -> int | None:
        return field_id_of(self.field)

    def child_by_id(self, field_id: int) -> LeafSpan | None:
        return next((c for c in self.children if c.field_id == field_id), None)


def _span(f: pa.Field[Any], first: int) -> LeafSpan:
    kids = stored_children(f.type)
    if not kids:
        return LeafSpan(f, first, 1)
    spans = []
    at = first
    for k in kids:
        spans.append(_span(k, at))
        at += spans[-1].count
    return LeafSpan(f, first, at - first, tuple(spans))


def leaf_spans(schema: pa.Schema, num_leaves: int, *, path: str) -> list[LeafSpan]:
    """The top-level columns of a Parquet file whose Arrow schema is ``schema`` and
    which has ``num_leaves`` leaf columns, each with its leaves; a schema whose
    leaves do not add up is CorruptMetadata naming ``path``."""
    out = []
    at = 0
    for f in schema:
        out.append(_span(f, at))
        at += out[-1].count
    if at != num_leaves:
        raise CorruptMetadata(path, f"the footer's schema has {at} leaf columns, its row "
                              f"groups {num_leaves}")
    return out


# --- parsing ---------------------------------------------------------------------------


def parse_footer(tail: bytes, *, path: str, file_size: int, etag: str = "") -> FooterInfo:
    """Parse a file's last bytes (the whole footer and trailer) into a :class:`FooterInfo`.

    Checks the trailer, that pyarrow can decode the metadata, and that the row
    groups' row counts are non-negative and add up to the file's.  Every defect
    is CorruptMetadata naming ``path``."""
    if len(tail) < TRAILER_SIZE or tail[-4:] != MAGIC:
        raise CorruptMetadata(path, "the Parquet footer is truncated or the file is not Parquet")
    if footer_size_from_trailer(tail[-TRAILER_SIZE:], path=path) != len(tail):
        raise CorruptMetadata(path, "the Parquet footer's length does not match its trailer")
    try:
        md = pq.read_metadata(pa.BufferReader(tail))
        group_rows = tuple(md.row_group(i).num_rows for i in range(md.num_row_groups))
    except (OSError, ValueError, pa.ArrowException) as e:  # ValueError: non-UTF-8 names
        raise CorruptMetadata(path, f"unreadable Parquet footer ({e})") from None
    if any(n < 0 for n in group_rows) or sum(group_rows) != md.num_rows:
        raise CorruptMetadata(path, f"footer's row groups hold {sum(group_rows)} rows, "
                              f"not its total of {md.num_rows}")
    return FooterInfo(path, file_size, bytes(tail), md, group_rows, etag)


def check_footer(tail: bytes, f: DataFile, *, etag: str = "") -> FooterInfo:
    """Check a data file's footer bytes against its manifest entry, then parse them.

    The CRC comes first: pyarrow can abort the process on some damaged footers,
    and a matching CRC is what proves that a file whose ETag differs from the
    manifest's (a copied table) still holds the bytes that were committed."""
    if len(tail) != f.footer_size or tail[-4:] != MAGIC:
        raise CorruptMetadata(f.path, "the Parquet footer is truncated or the file is not Parquet")
    if f.footer_crc32 is not None and footer_crc32(tail) != f.footer_crc32:
        raise CorruptMetadata(f.path, "the Parquet footer's CRC-32 differs from the manifest "
                              "(the file is damaged or was replaced)")
    info = parse_footer(tail, path=f.path, file_size=f.size, etag=etag)
    if info.num_rows != f.row_count or info.num_row_groups != f.row_group_count:
        raise CorruptMetadata(f.path, f"footer has {info.num_rows} rows in "
                              f"{info.num_row_groups} row groups; the manifest says "
                              f"{f.row_count} in {f.row_group_count}")
    return info


# --- assembling a file from separately encoded row groups --------------------------


class ParquetConcat:
    """Builds one Parquet file from row groups encoded as separate one-group files
    (so they can be encoded in parallel): :meth:`head`, then per group the bytes
    :meth:`add` returns, then :meth:`tail`.  Each group's pages are kept
    verbatim (with their statistics and page CRC-32s); only the offsets in the
    footer move.  Groups must share one schema and carry no page indexes or
    bloom filters (the writer's settings here add none).  Pure: the caller
    writes the bytes.

    :attr:`dictionary_fallbacks` names the columns whose dictionary overflowed
    in some group added so far (the writer fell back to plain pages), so a
    writer can stop trying a dictionary for them."""

    def __init__(self) -> None:
        self._template: Any = None
        self._groups: list[Any] = []  # decoded, offsets moved
        self._undecoded: list[tuple[bytes, int, str]] = []  # (footer, file offset, path)
        self._added = 0
        self._only_footer: bytes | None = None  # the first group's own footer, verbatim
        self._fallbacks: set[str] = set()

    @staticmethod
    def head() -> bytes:
        return MAGIC

    def add(self, encoded: Any, offset: int, *, path: str) -> memoryview:
        """The bytes to write at file ``offset`` for the one row group of the
        complete Parquet file ``encoded`` (bytes or a pyarrow Buffer).  Its
        footer is decoded only when needed: a file of this one group, where the
        encoder put it, is the encoder's own bytes (a small append's fixed cost)."""
        view = memoryview(encoded)
        footer_size = footer_size_from_trailer(bytes(view[-TRAILER_SIZE:]), path=path)
        footer = bytes(view[len(view) - footer_size:])
        if self._added == 0 and offset == len(MAGIC):
            self._only_footer = footer
        self._undecoded.append((footer, offset, path))
        self._added += 1
        return view[len(MAGIC):len(view) - footer_size]

    def _decoded_groups(self) -> list[Any]:
        """Every group added so far, decoded and moved to its offset in the file."""
        from caslake.format.parquet_thrift import decode_file_metadata, shift_row_group

        for footer, offset, path in self._undecoded:
            fmd = decode_file_metadata(footer[:-TRAILER_SIZE], what=path)
            if len(fmd.row_groups) != 1:
                raise CorruptMetadata(path, f"an encoded group holds {len(fmd.row_groups)} "
                                      "row groups, not 1")
            (group,) = fmd.row_groups
            if any(c.column_index_offset is not None or c.offset_index_offset is not None
                   or c.meta_data.bloom_filter_offset is not None for c in group.columns):
                raise CorruptMetadata(path, "an encoded group has page indexes or bloom "
                                      "filters")
            self._fallbacks.update(dictionary_fallbacks(group))
            shift_row_group(group, offset - len(MAGIC))
            group.ordinal = len(self._groups)
            self._groups.append(group)
            if self._template is None:
                self._template = fmd
        self._undecoded.clear()
        return self._groups

    @property
    def dictionary_fallbacks(self) -> set[str]:
        self._decoded_groups()
        return self._fallbacks

    def tail(self) -> bytes:
        """The footer of the file (every group added so far), length and magic."""
        if self._added == 0:
            raise CorruptMetadata("parquet file", "a file needs at least one row group")
        if self._added == 1 and self._only_footer is not None:
            return self._only_footer
        from caslake.format.parquet_thrift import footer_tail

        groups = self._decoded_groups()
        fmd = copy.copy(self._template)  # shallow: only the two fields below change
        fmd.row_groups = groups
        fmd.num_rows = sum(g.num_rows for g in groups)
        with_dictionary_hint(fmd)
        return bytes(footer_tail(fmd))


# --- the dictionary hint -----------------------------------------------------------

#: Key of the footer's key-value entry naming the dictionary-only column chunks
#: (docs/format.md, "Data files"): a JSON array with one lowercase hex string per
#: row group, bit ``c`` set when every data page of column chunk ``c`` is
#: dictionary-encoded.  Advisory: it only chooses how chunks are decoded.
DICTIONARY_HINT_KEY = "caslake.dictionary_chunks"


def chunks_from_encoding_stats(fmd: Any) -> frozenset[tuple[int, int]]:
    """(row group, column index) of the dictionary-only chunks of a Thrift
    ``FileMetaData``, by their page encoding statistics."""
    return frozenset((rg, c) for rg, group in enumerate(fmd.row_groups or ())
                     for c, chunk in enumerate(group.columns)
                     if _plain_data_pages(chunk.meta_data) is False)


def with_dictionary_hint(fmd: Any) -> None:
    """Set ``fmd``'s :data:`DICTIONARY_HINT_KEY` entry from its row groups (any
    earlier entry of that key is replaced; the list is a new one, so a shallow
    copy's template is not changed)."""
    from caslake.format.parquet_thrift import parquet as thrift

    masks = [0] * len(fmd.row_groups or ())
    for rg, c in chunks_from_encoding_stats(fmd):
        masks[rg] |= 1 << c
    entry = thrift.KeyValue(key=DICTIONARY_HINT_KEY,
                            value=json.dumps([format(m, "x") for m in masks]))
    fmd.key_value_metadata = [kv for kv in (fmd.key_value_metadata or [])
                              if kv.key != DICTIONARY_HINT_KEY] + [entry]


def read_dictionary_hint(md: pq.FileMetaData) -> frozenset[tuple[int, int]] | None:
    """The chunks the footer's hint names; None without one, or when it does not
    parse or does not fit the file (one mask per row group, no bit past the last
    column): the caller then decodes the footer."""
    raw = (md.metadata or {}).get(DICTIONARY_HINT_KEY.encode())
    if raw is None:
        return None
    try:
        masks = json.loads(raw)
        if not isinstance(masks, list) or len(masks) != md.num_row_groups or not all(
                isinstance(m, str) for m in masks):
            return None
        bits = [int(m, 16) for m in masks]
    except ValueError:  # not JSON, not hex (json.JSONDecodeError is a ValueError)
        return None
    columns = md.num_columns
    if any(b < 0 or b >> columns for b in bits):
        return None
    return frozenset((rg, c) for rg, b in enumerate(bits) for c in range(columns)
                     if b >> c & 1)


#: Thrift ``PageType`` values of data pages, and ``Encoding`` values of dictionary indexes.
_DATA_PAGES = frozenset({0, 3})  # DATA_PAGE, DATA_PAGE_V2
_DICTIONARY_INDEXES = frozenset({2, 8})  # PLAIN_DICTIONARY, RLE_DICTIONARY


def dictionary_fallbacks(group: Any) -> list[str]:
    """Columns of a Thrift ``RowGroup`` that have a dictionary page yet data pages
    not encoded against it: the dictionary passed the writer's size limit and
    it fell back to plain pages (a column with no page encoding statistics
    counts as not fallen back)."""
    return [".".join(chunk.meta_data.path_in_schema) for chunk in group.columns
            if _plain_data_pages(chunk.meta_data)]


def _plain_data_pages(meta: Any) -> bool | None:
    """Whether a Thrift ``ColumnMetaData`` with a dictionary page has data pages not
    encoded against it; None without a dictionary page or page encoding statistics."""
    if meta is None or meta.dictionary_page_offset is None or not meta.encoding_stats:
        return None
    return any(s.page_type in _DATA_PAGES and s.encoding not in _DICTIONARY_INDEXES
               and s.count > 0 for s in meta.encoding_stats)


# --- statistics -----------------------------------------------------------------------


def _chunk_stats(stats: Any) -> tuple[Any, Any, int | None]:
    if stats is None:
        return None, None, None
    nulls = stats.null_count if stats.has_null_count else None
    if not stats.has_min_max:
        return None, None, nulls
    return stats.min, stats.max, nulls


def top_level_leaves(md: pq.FileMetaData, *, path: str = "parquet file") -> dict[str, int]:
    """The leaf index of each top-level primitive column of a file, by name (a
    nested column's leaves are not listed: their paths can equal a dotted name)."""
    spans = leaf_spans(md.schema.to_arrow_schema(), md.num_columns, path=path)
    return {s.field.name: s.first for s in spans if not s.children}


def row_group_stats(md: pq.FileMetaData, rg: int, columns: dict[str, pa.DataType],
                    *, leaves: dict[str, int] | None = None) -> dict[str, ColumnStats]:
    """Footer statistics of one row group, as pruning values, for the named top-level
    primitive columns (a bound that cannot be recorded, e.g. NaN, is unknown).
    ``leaves``: :func:`top_level_leaves` of ``md``, if the caller has it."""
    group = md.row_group(rg)
    if leaves is None:
        leaves = top_level_leaves(md)
    out: dict[str, ColumnStats] = {}
    for name, t in columns.items():
        i = leaves.get(name)
        if i is None:
            continue
        out[name] = _leaf_stats(group.column(i).statistics, t)
    return out


def _leaf_stats(stats: Any, t: pa.DataType) -> ColumnStats:
    lo, hi, nulls = _chunk_stats(stats)
    lo, hi = footer_value(lo, t), footer_value(hi, t)
    if value_to_json(lo, t) is None or value_to_json(hi, t) is None:
        lo = hi = None
    return ColumnStats(min=lo, max=hi, null_count=nulls)


def file_stats(md: pq.FileMetaData, columns: dict[str, pa.DataType]) -> dict[str, JsonStats]:
    """Whole-file stats, merged over row groups, in their manifest (JSON) form,
    keyed by column name (top-level primitive columns).  A bound unknown in any
    row group is left out."""
    leaves = top_level_leaves(md)
    return _merged_stats(md, {n: (leaves[n], t) for n, t in columns.items() if n in leaves})


def stats_by_field_id(md: pq.FileMetaData, schema: TableSchema) -> dict[int, JsonStats]:
    """A data file's manifest statistics, keyed by field id: every top-level
    primitive column, and every primitive field reached from a column through
    structs only (``dev.geo.lat``; not inside a list or a map, whose footer
    statistics are over elements, not rows).  Fields are matched to the file's
    leaves by the file's field ids; a field whose stats are all unknown is left out."""
    wanted = {fid: f for fid, (path, f) in schema.all_by_id().items() if not f.nested}
    spans = leaf_spans(md.schema.to_arrow_schema(), md.num_columns, path="parquet file")
    leaves: dict[int, tuple[int, pa.DataType]] = {}
    for span in _struct_leaves(spans):
        fid = span.field_id
        if fid is not None and fid in wanted:
            leaves[fid] = (span.first, wanted[fid].arrow_type)
    return {k: v for k, v in _merged_stats(md, leaves).items() if v}


def _struct_leaves(spans: Iterable[LeafSpan]) -> Iterable[LeafSpan]:
    """The primitive nodes of ``spans`` reached through structs only."""
    for span in spans:
        if not span.children:
            yield span
        elif pa.types.is_struct(span.field.type):
            yield from _struct_leaves(span.children)


def _merged_stats(md: pq.FileMetaData, leaves: Mapping[K, tuple[int, pa.DataType]]
                  ) -> dict[K, JsonStats]:
    """Statistics of each leaf ``key -> (leaf index, type)`` merged over the row groups."""
    acc: dict[K, JsonStats] = {}
    known_minmax = dict.fromkeys(leaves, True)
    known_nulls = dict.fromkeys(leaves, True)
    for rg in range(md.num_row_groups):
        group = md.row_group(rg)
        for key, (i, t) in leaves.items():
            cs = _leaf_stats(group.column(i).statistics, t)
            entry = acc.setdefault(key, {})
            if cs.null_count is None:
                known_nulls[key] = False
            else:
                entry["nulls"] = entry.get("nulls", 0) + cs.null_count
            if cs.min is None or cs.max is None:
                if group.num_rows > (cs.null_count or 0) or cs.null_count is None:
                    known_minmax[key] = False
                continue
            lo, hi = value_to_json(cs.min, t), value_to_json(cs.max, t)
            if "min" not in entry or _less(lo, entry["min"], t):
                entry["min"] = lo
            if "max" not in entry or _less(entry["max"], hi, t):
                entry["max"] = hi
    for key in list(acc):
        if not known_minmax[key]:
            acc[key].pop("min", None)
            acc[key].pop("max", None)
        if not known_nulls[key]:
            acc[key].pop("nulls", None)
    return acc


def _less(a: Any, b: Any, t: pa.DataType) -> bool:
    if pa.types.is_decimal(t):
        return Decimal(a) < Decimal(b)
    return bool(a < b)
