"""Segment objects (format version 3): immutable, columnar lists of data-file entries,
and the statistics summaries that let a planner skip them.

A segment object is an Arrow IPC file (docs/format.md, "Segment objects"):

* one record batch per *block* of at most :data:`BLOCK_FILES` entries, columns
  ``path, size, etag, row_count, row_group_count, footer_size, footer_crc32,
  stats`` (``stats``: the entry's statistics object as compact JSON);
* a JSON header in the schema metadata under ``caslake.segment``: the schema
  the entries were written with, the entry/row/byte counts, and for each block
  its counts and its statistics *summary*.

A summary is, per field id, ``min``/``max``/``nulls`` merged over the entries
(:func:`merge_stats`): the lowest min, the highest max, the sum of null
counts; a bound that is unknown for any entry holding a non-NULL value is left
out.  So a summary is a sound bound: a predicate that cannot match the summary
cannot match any entry under it.

This module owns encoding and parsing and the one rule that keeps summaries
honest: a block's summary must *equal* the merge of its entries, and a
segment's summary the merge of its blocks', checked whenever they are decoded
(a mismatch is CorruptMetadata naming the segment, never a skipped file).
Pure code: never performs I/O.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa

from caslake.errors import CorruptMetadata, UnsupportedFormatVersion
from caslake.format import FORMAT_VERSION, PARTITION_FORMAT_VERSION, SEGMENTS_FORMAT_VERSION
from caslake.format.manifest import (
    DataFile,
    parse_data_file,
    parse_partitioning,
    parse_table_schema,
)
from caslake.format.partition import Partitioning
from caslake.format.schema import STRUCT, Field, TableSchema

SEGMENT_FORMAT = "caslake.segment"
HEADER_KEY = b"caslake.segment"
BLOCK_FILES = 64  # a point read decodes one block: few entries, many block summaries

Stats = Mapping[int, Mapping[str, Any]]  # field id -> {"min", "max", "nulls"}

_FIELDS: list[pa.Field[Any]] = [pa.field("path", pa.string()), pa.field("size", pa.int64()),
                      pa.field("etag", pa.string()), pa.field("row_count", pa.int64()),
                      pa.field("row_group_count", pa.int64()),
                      pa.field("footer_size", pa.int64()), pa.field("footer_crc32", pa.int64()),
                      pa.field("stats", pa.string())]
_COLUMNS = pa.schema(_FIELDS)
# Format 5: a ninth column, each entry's ``partition`` as compact JSON (NULL: none).
_PARTITIONED_COLUMNS = pa.schema([*_FIELDS, pa.field("partition", pa.string())])


@dataclass(frozen=True)
class Summary:
    """Counts and merged statistics of a set of entries (a block, a segment)."""

    files: int
    rows: int
    bytes: int
    stats: Stats = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"files": self.files, "rows": self.rows, "bytes": self.bytes,
                "stats": stats_to_json(self.stats)}


def stats_to_json(stats: Stats) -> dict[str, dict[str, Any]]:
    return {str(k): dict(v) for k, v in sorted(stats.items())}


def _order_key(value: Any, decimal: bool) -> Any:
    if decimal:
        try:
            return Decimal(value)
        except (InvalidOperation, TypeError) as e:
            raise ValueError(f"bad decimal statistic {value!r}") from e
    return value


def merge_stats(parts: Iterable[tuple[Stats, int]],
                schema: TableSchema) -> dict[int, dict[str, Any]]:
    """Merge per-entry statistics ``(stats, row_count)`` into one summary (see the
    module docstring).  An entry whose column is all NULL (``nulls == rows``)
    bounds nothing, so its missing min/max does not make the summary's unknown.
    Raises ValueError/TypeError on values that do not compare."""
    fields = stat_fields(schema)
    decimals = {f.id for f in fields if f.type.startswith("decimal")}
    ids = [f.id for f in fields]
    lo: dict[int, Any] = {}
    hi: dict[int, Any] = {}
    nulls: dict[int, int] = dict.fromkeys(ids, 0)
    minmax_known = set(ids)
    nulls_known = set(ids)
    first = True
    for stats, rows in parts:
        first = False
        for fid in ids:
            s = stats.get(fid, {})
            n = s.get("nulls")
            if n is None:
                nulls_known.discard(fid)
            else:
                nulls[fid] += n
            if "min" not in s or "max" not in s:
                if n is None or n < rows:
                    minmax_known.discard(fid)
                continue
            dec = fid in decimals
            if fid not in lo or _order_key(s["min"], dec) < _order_key(lo[fid], dec):
                lo[fid] = s["min"]
            if fid not in hi or _order_key(s["max"], dec) > _order_key(hi[fid], dec):
                hi[fid] = s["max"]
    out: dict[int, dict[str, Any]] = {}
    if first:
        return out
    for fid in ids:
        entry: dict[str, Any] = {}
        if fid in minmax_known and fid in lo:
            entry["min"], entry["max"] = lo[fid], hi[fid]
        if fid in nulls_known:
            entry["nulls"] = nulls[fid]
        if entry:
            out[fid] = entry
    return out


def stat_fields(schema: TableSchema) -> list[Field]:
    """The fields that carry statistics: the top-level columns, and (format 4) the
    primitive fields reached from a column through structs only (``dev.geo.lat``)."""
    out: list[Field] = []

    def walk(f: Field) -> None:
        out.append(f)
        if f.type == STRUCT:
            for c in f.children:
                walk(c)
    for f in schema.fields:
        walk(f)
    return out


def summarize(files: Sequence[DataFile], schema: TableSchema) -> Summary:
    return Summary(len(files), sum(f.row_count for f in files), sum(f.size for f in files),
                   merge_stats(((f.stats, f.row_count) for f in files), schema))


def merge_summaries(parts: Sequence[Summary], schema: TableSchema) -> Summary:
    return Summary(sum(p.files for p in parts), sum(p.rows for p in parts),
                   sum(p.bytes for p in parts),
                   merge_stats(((p.stats, p.rows) for p in parts), schema))


def encode_segment(files: Sequence[DataFile], schema: TableSchema,
                   partitioning: Partitioning | None = None) -> tuple[bytes, Summary]:
    """The bytes of a segment object holding ``files`` (in order), and its summary.
    With ``partitioning`` (the table's specs, format 5) the header carries them and
    the entries' partitions are a ninth column."""
    blocks = [files[i:i + BLOCK_FILES] for i in range(0, len(files), BLOCK_FILES)]
    sums = [summarize(b, schema) for b in blocks]
    total = merge_summaries(sums, schema)
    parted = partitioning is not None
    header = {"format": SEGMENT_FORMAT,
              "format_version": PARTITION_FORMAT_VERSION if parted else SEGMENTS_FORMAT_VERSION,
              "schema": schema.to_json(), **total.to_json(),
              "blocks": [s.to_json() for s in sums],
              **(partitioning.to_json() if partitioning is not None else {})}
    columns = _PARTITIONED_COLUMNS if parted else _COLUMNS
    arrow_schema = columns.with_metadata({HEADER_KEY: json.dumps(header, separators=(",", ":"))})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, arrow_schema) as writer:
        for block in blocks:
            arrays: list[list[Any]] = [
                [f.path for f in block], [f.size for f in block], [f.etag for f in block],
                [f.row_count for f in block], [f.row_group_count for f in block],
                [f.footer_size for f in block], [f.footer_crc32 for f in block],
                [json.dumps(stats_to_json(f.stats), separators=(",", ":")) for f in block]]
            if parted:
                arrays.append([None if f.partition is None else json.dumps(
                    f.partition.to_json(), separators=(",", ":")) for f in block])
            writer.write_batch(pa.record_batch(arrays, schema=arrow_schema))
    return sink.getvalue().to_pybytes(), total


def parse_stats(obj: object, where: str, key: str) -> dict[int, dict[str, Any]]:
    """A summary's ``stats`` object (field id -> {min, max, nulls}); shape checks only."""
    if not isinstance(obj, dict):
        raise CorruptMetadata(key, f"{where}: stats must be an object")
    out: dict[int, dict[str, Any]] = {}
    for k, v in obj.items():
        if not isinstance(k, str) or not k.isdigit() or not isinstance(v, dict):
            raise CorruptMetadata(key, f"{where}: bad statistics entry {k!r}")
        n = v.get("nulls")
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
            raise CorruptMetadata(key, f"{where}: nulls must be a non-negative integer")
        for b in ("min", "max"):
            if b in v and (isinstance(v[b], list | dict) or v[b] is None):
                raise CorruptMetadata(key, f"{where}: {b} must be a number or a string")
        out[int(k)] = {b: v[b] for b in ("min", "max", "nulls") if b in v}
    return out


def parse_summary(obj: object, where: str, key: str) -> Summary:
    if not isinstance(obj, dict):
        raise CorruptMetadata(key, f"{where}: expected an object")
    counts = []
    for name in ("files", "rows", "bytes"):
        v = obj.get(name)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**63:
            raise CorruptMetadata(key, f"{where}: {name} must be a non-negative 64-bit integer")
        counts.append(v)
    return Summary(counts[0], counts[1], counts[2], parse_stats(obj.get("stats", {}), where, key))


def check_summary(claimed: Summary, actual: Summary, key: str, what: str) -> None:
    """A recorded summary must equal the merge of what it summarises."""
    if claimed != actual:
        raise CorruptMetadata(key, f"the summary of {what} does not match its entries "
                              f"(recorded {claimed.to_json()}, entries give {actual.to_json()})")


class SegmentFile:
    """A parsed segment object.  Blocks are decoded on demand; each decoded
    block is checked against its summary.  Thread-safe (blocks are pure data)."""

    def __init__(self, data: bytes, key: str) -> None:
        self.key = key
        self.nbytes = len(data)
        self.crc32 = zlib.crc32(data)
        try:
            self._reader = pa.ipc.open_file(pa.py_buffer(data))
            meta = self._reader.schema.metadata or {}
        except (pa.ArrowException, OSError, ValueError) as e:
            raise CorruptMetadata(key, f"not a readable segment object ({e})") from None
        columns = self._reader.schema.remove_metadata()
        if not (columns.equals(_COLUMNS) or columns.equals(_PARTITIONED_COLUMNS)):
            raise CorruptMetadata(key, "segment columns differ from the format")
        try:
            header = json.loads(meta[HEADER_KEY])
        except (KeyError, ValueError) as e:
            raise CorruptMetadata(key, f"segment header is missing or not JSON ({e})") from None
        if not isinstance(header, dict) or header.get("format") != SEGMENT_FORMAT:
            raise CorruptMetadata(key, "not a caslake segment object")
        fv = header.get("format_version")
        if isinstance(fv, bool) or not isinstance(fv, int) or fv < SEGMENTS_FORMAT_VERSION:
            raise CorruptMetadata(key, f"bad segment format_version {fv!r}")
        if fv > FORMAT_VERSION:
            raise UnsupportedFormatVersion(key, f"format_version {fv} is not supported by "
                                           f"this reader (it reads up to {FORMAT_VERSION})")
        self.schema = parse_table_schema(header.get("schema"), source=key)
        self.partitioning = parse_partitioning(header, self.schema, fv, source=key)
        if (self.partitioning is None) != columns.equals(_COLUMNS):
            raise CorruptMetadata(key, "a segment's partition column and partition specs "
                                  "come together")
        self.summary = parse_summary(header, "header", key)
        raw_blocks = header.get("blocks")
        if not isinstance(raw_blocks, list):
            raise CorruptMetadata(key, "segment header has no block list")
        self.blocks = [parse_summary(b, f"blocks[{i}]", key) for i, b in enumerate(raw_blocks)]
        if len(self.blocks) != self._reader.num_record_batches:
            raise CorruptMetadata(key, f"header lists {len(self.blocks)} blocks, the object "
                                  f"holds {self._reader.num_record_batches}")
        try:
            check_summary(self.summary, merge_summaries(self.blocks, self.schema), key,
                          "the segment")
        except (ValueError, TypeError) as e:
            raise CorruptMetadata(key, f"bad block statistics ({e})") from None

    def block(self, i: int) -> list[DataFile]:
        """The entries of block ``i``, checked against the block's summary."""
        try:
            batch = self._reader.get_batch(i)
            # Arrow IPC does not check buffers on read: damaged offsets would make
            # the decode read out of bounds (a crash, not an error), so validate first.
            batch.validate(full=True)
            rows = batch.to_pylist()
        except (pa.ArrowException, OSError, ValueError) as e:
            raise CorruptMetadata(self.key, f"block {i} is unreadable ({e})") from None
        files = []
        for j, row in enumerate(rows):
            try:
                row["stats"] = json.loads(row["stats"])
            except (TypeError, ValueError):
                raise CorruptMetadata(self.key, f"block {i} entry {j}: stats are not JSON"
                                      ) from None
            if row["footer_crc32"] is None:
                del row["footer_crc32"]
            try:
                if row.get("partition") is not None:
                    row["partition"] = json.loads(row["partition"])
                else:
                    row.pop("partition", None)
            except ValueError:
                raise CorruptMetadata(self.key, f"block {i} entry {j}: partition is not JSON"
                                      ) from None
            try:
                files.append(parse_data_file(row, self.schema, source=self.key,
                                             partitioning=self.partitioning))
            except CorruptMetadata as e:  # named by the segment's key, saying where in it
                raise CorruptMetadata(self.key, f"block {i} entry {j}: {e.reason}") from None
        try:
            actual = summarize(files, self.schema)
        except (ValueError, TypeError) as e:
            raise CorruptMetadata(self.key, f"block {i}: bad statistics ({e})") from None
        check_summary(self.blocks[i], actual, self.key, f"block {i}")
        return files

    def files(self) -> Iterable[DataFile]:
        for i in range(len(self.blocks)):
            yield from self.block(i)
