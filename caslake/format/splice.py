"""Row-group splice of a Parquet file: the pure planning and byte assembly of a purge.

Owns: the byte span of each row group; decoding one row group from its bytes alone;
re-encoding kept rows with the source file's own codec, encodings, dictionary
settings, statistics, page CRCs and page indexes; rebuilding the footer of the new
file (offsets of every moved row group, column chunk, column/offset index and bloom
filter shifted, row counts updated, the statistics of edited groups recomputed by
the writer); and cutting the new file into multipart parts where every non-final part
is at least ``min_part`` bytes (widening into verbatim neighbour bytes when needed).

Layout of the new file::

    PAR1 | row group spans, in order (verbatim from the source or re-encoded)
         | aux structures of kept groups (column indexes, offset indexes, bloom filters)
         | footer | u32 footer length | PAR1

Verbatim spans keep every byte of the source; only their absolute offsets in the
footer move.  Offset indexes hold absolute page offsets, so they are re-encoded with
the shift; column indexes and bloom filters are copied unchanged.

Pure: bytes and decoded footers in, bytes and plans out.  Never reads or writes the
store (the caller fetches the ranges this module names) and never decides *which*
rows to drop.  Files it cannot splice faithfully (encrypted, external column chunks,
a codec pyarrow cannot write) raise :class:`SpliceUnsupported`; the caller then
rewrites the whole file.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from caslake.errors import CaslakeError, CorruptMetadata
from caslake.format.parquet import with_dictionary_hint
from caslake.format.parquet_thrift import (
    CODEC_NAMES,
    DATA_PAGE_TYPES,
    DICTIONARY_ENCODINGS,
    MAGIC,
    clone,
    decode_file_metadata,
    decode_offset_index,
    decode_page_header,
    encode_offset_index,
    footer_length,
    footer_tail,
    parquet,
    shift_row_group,
)

MiB = 1024 * 1024
#: S3's minimum size of every part but the last of a multipart upload.
MIN_PART_SIZE = 5 * MiB
#: S3's maximum size of one part (an UploadPartCopy range is cut below it).
MAX_PART_SIZE = 5 * 1024 * MiB


class SpliceUnsupported(CaslakeError):
    """This file cannot be spliced faithfully; rewrite it whole instead."""


# --- spans -------------------------------------------------------------------


def chunk_span(chunk: Any) -> tuple[int, int]:
    """``[start, end)`` of one column chunk's pages (dictionary page included)."""
    md = chunk.meta_data
    if md is None:
        raise SpliceUnsupported("a column chunk has no metadata (encrypted file?)")
    start = md.data_page_offset
    if md.dictionary_page_offset is not None and 0 < md.dictionary_page_offset < start:
        start = md.dictionary_page_offset
    if md.index_page_offset is not None and 0 < md.index_page_offset < start:
        start = md.index_page_offset
    return int(start), int(start + md.total_compressed_size)


def row_group_span(rg: Any) -> tuple[int, int]:
    """``[start, end)`` of all of one row group's column chunks."""
    spans = [chunk_span(c) for c in rg.columns]
    if not spans:
        raise SpliceUnsupported("a row group has no columns")
    return min(s for s, _ in spans), max(e for _, e in spans)


def check_spliceable(fmd: Any) -> None:
    """Raise SpliceUnsupported for files whose bytes the splice cannot move safely."""
    if fmd.encryption_algorithm is not None:
        raise SpliceUnsupported("the file is encrypted")
    for rg in fmd.row_groups:
        for c in rg.columns:
            if c.file_path:
                raise SpliceUnsupported("a column chunk lives in another file")
            if c.crypto_metadata is not None or c.encrypted_column_metadata is not None:
                raise SpliceUnsupported("a column chunk is encrypted")


# --- aux structures (page indexes, bloom filters) ----------------------------

# (field holding the offset, field holding the length) on ColumnChunk / ColumnMetaData.
_CHUNK_AUX = (("column_index_offset", "column_index_length"),
              ("offset_index_offset", "offset_index_length"))
_META_AUX = (("bloom_filter_offset", "bloom_filter_length"),)


def aux_ranges(rg: Any) -> list[tuple[int, int]]:
    """Byte ranges of the column/offset indexes and bloom filters of one row group.
    A bloom filter whose length is not recorded is left out (it will be dropped)."""
    out: list[tuple[int, int]] = []
    for c in rg.columns:
        for off, length in _CHUNK_AUX:
            if getattr(c, off) is not None and getattr(c, length):
                out.append((int(getattr(c, off)), int(getattr(c, off) + getattr(c, length))))
        md = c.meta_data
        for off, length in _META_AUX:
            if getattr(md, off) is not None and getattr(md, length):
                out.append((int(getattr(md, off)), int(getattr(md, off) + getattr(md, length))))
    return out


def _strip_aux(rg: Any) -> None:
    for c in rg.columns:
        for off, length in _CHUNK_AUX:
            setattr(c, off, None)
            setattr(c, length, None)
        for off, length in _META_AUX:
            setattr(c.meta_data, off, None)
            setattr(c.meta_data, length, None)


# --- decoding and re-encoding one row group ----------------------------------


def _single_group_file(fmd: Any, rg: Any, rg_bytes: bytes, span_start: int) -> bytes:
    """A standalone Parquet file holding just ``rg`` (whose bytes start at ``span_start``)."""
    one = clone(fmd)
    group = clone(rg)
    shift_row_group(group, len(MAGIC) - span_start)
    _strip_aux(group)
    one.row_groups = [group]
    one.num_rows = group.num_rows
    return MAGIC + bytes(rg_bytes) + footer_tail(one)


def decode_row_group(fmd: Any, index: int, rg_bytes: bytes, *,
                     what: str = "parquet file") -> pa.Table:
    """The rows of row group ``index``, decoded from that group's span bytes alone.
    Page checksums are verified: a damaged page is never re-encoded into a new file."""
    rg = fmd.row_groups[index]
    start, end = row_group_span(rg)
    if len(rg_bytes) != end - start:
        raise CorruptMetadata(what, f"row group {index} is {end - start} bytes, "
                                    f"got {len(rg_bytes)}")
    data = _single_group_file(fmd, rg, rg_bytes, start)
    try:
        pf = pq.ParquetFile(pa.BufferReader(data), page_checksum_verification=True)
        return pf.read(use_threads=False)
    except (OSError, pa.ArrowException) as exc:
        raise CorruptMetadata(what, f"row group {index} cannot be decoded: {exc}") from exc


@dataclass(frozen=True)
class WriterSettings:
    """How the source wrote a row group, as far as pyarrow can reproduce it."""

    compression: dict[str, str]
    use_dictionary: list[str]
    column_encoding: dict[str, str]
    data_page_version: str
    write_statistics: bool
    write_page_checksum: bool
    write_page_index: bool
    int96: bool


_ENCODING_NAMES = {
    parquet.Encoding.PLAIN: "PLAIN",
    parquet.Encoding.DELTA_BINARY_PACKED: "DELTA_BINARY_PACKED",
    parquet.Encoding.DELTA_LENGTH_BYTE_ARRAY: "DELTA_LENGTH_BYTE_ARRAY",
    parquet.Encoding.DELTA_BYTE_ARRAY: "DELTA_BYTE_ARRAY",
    parquet.Encoding.BYTE_STREAM_SPLIT: "BYTE_STREAM_SPLIT",
    parquet.Encoding.RLE: "RLE",
}


def writer_settings(rg: Any, rg_bytes: bytes, span_start: int) -> WriterSettings:
    """Read the writer settings of one row group off its footer entry and first page."""
    compression: dict[str, str] = {}
    use_dictionary: list[str] = []
    column_encoding: dict[str, str] = {}
    v2 = False
    stats = False
    int96 = False
    for c in rg.columns:
        md = c.meta_data
        name = ".".join(md.path_in_schema)
        codec = CODEC_NAMES.get(md.codec)
        if codec is None:
            raise SpliceUnsupported(f"column {name!r} uses codec {md.codec}, which pyarrow "
                                    "cannot write")
        compression[name] = codec
        if set(md.encodings or ()) & DICTIONARY_ENCODINGS:
            use_dictionary.append(name)
        elif md.encoding_stats:
            data_encodings = {s.encoding for s in md.encoding_stats
                              if s.page_type in DATA_PAGE_TYPES}
            if len(data_encodings) == 1:
                enc = _ENCODING_NAMES.get(next(iter(data_encodings)))
                if enc is not None and enc not in ("PLAIN", "RLE"):
                    column_encoding[name] = enc
        if any(s.page_type == parquet.PageType.DATA_PAGE_V2 for s in md.encoding_stats or ()):
            v2 = True
        stats = stats or md.statistics is not None
        int96 = int96 or md.type == parquet.Type.INT96
    first_start, _ = chunk_span(rg.columns[0])
    header = decode_page_header(rg_bytes[first_start - span_start:], what="first page header")
    return WriterSettings(
        compression=compression, use_dictionary=use_dictionary,
        column_encoding=column_encoding, data_page_version="2.0" if v2 else "1.0",
        write_statistics=stats, write_page_checksum=header.crc is not None,
        write_page_index=any(c.column_index_offset is not None for c in rg.columns),
        int96=int96)


@dataclass(frozen=True)
class EncodedGroup:
    """One re-encoded row group: its span bytes (offsets in ``row_group`` are relative
    to the start of ``data``) and its aux structures, by their offset in ``aux_source``."""

    data: bytes
    row_group: Any
    aux_source: bytes  # the whole single-group file the aux offsets point into
    num_rows: int


def encode_row_group(fmd: Any, index: int, kept: pa.Table, rg_bytes: bytes) -> EncodedGroup:
    """Re-encode ``kept`` as row group ``index`` with the source's own settings."""
    source = fmd.row_groups[index]
    span_start, _ = row_group_span(source)
    settings = writer_settings(source, rg_bytes, span_start)
    sink = io.BytesIO()
    try:
        options: dict[str, Any] = {
            "compression": settings.compression,
            "use_dictionary": settings.use_dictionary or False,
            "column_encoding": settings.column_encoding or None,
            "data_page_version": settings.data_page_version}
        options["store_decimal_as_integer"] = _decimal_as_integer(fmd)
        writer = pq.ParquetWriter(
            sink, kept.schema, **options,
            write_statistics=settings.write_statistics,
            write_page_checksum=settings.write_page_checksum,
            write_page_index=settings.write_page_index,
            use_deprecated_int96_timestamps=settings.int96)
        writer.write_table(kept, row_group_size=max(1, kept.num_rows))
        writer.close()
    except (pa.ArrowException, ValueError, TypeError) as exc:
        raise SpliceUnsupported(f"row group {index} cannot be re-encoded: {exc}") from exc
    data = sink.getvalue()
    body_len = footer_length(data[-8:], what="re-encoded row group")
    new_fmd = decode_file_metadata(data[-8 - body_len:-8], what="re-encoded row group")
    if len(new_fmd.row_groups) != 1:
        raise SpliceUnsupported(f"row group {index} re-encoded into "
                                f"{len(new_fmd.row_groups)} row groups")
    rg = new_fmd.row_groups[0]
    _check_same_columns(source, rg, index)
    start, end = row_group_span(rg)
    if start != len(MAGIC):
        raise SpliceUnsupported(f"re-encoded row group {index} does not start after the magic")
    rg.sorting_columns = source.sorting_columns
    return EncodedGroup(data=data[start:end], row_group=rg, aux_source=data,
                        num_rows=int(rg.num_rows))


def _decimal_as_integer(fmd: Any) -> bool:
    """Whether the source stored its decimals as INT32/INT64 (caslake's writer does;
    older files and other writers use FIXED_LEN_BYTE_ARRAY), at any depth: a decimal
    inside a struct, list or map counts as one at the top level does."""
    return any((e.converted_type == parquet.ConvertedType.DECIMAL
                or (e.logicalType is not None and e.logicalType.DECIMAL is not None))
               and e.type in (parquet.Type.INT32, parquet.Type.INT64)
               for e in fmd.schema)


def _check_same_columns(source: Any, new: Any, index: int) -> None:
    if len(source.columns) != len(new.columns):
        raise SpliceUnsupported(f"row group {index} re-encoded with "
                                f"{len(new.columns)} columns, not {len(source.columns)}")
    for old_c, new_c in zip(source.columns, new.columns, strict=True):
        a, b = old_c.meta_data, new_c.meta_data
        if list(a.path_in_schema) != list(b.path_in_schema) or a.type != b.type:
            raise SpliceUnsupported(
                f"row group {index}: column {'.'.join(a.path_in_schema)!r} re-encoded as "
                f"{'.'.join(b.path_in_schema)!r} with physical type {b.type}, not {a.type}")


# --- the new file --------------------------------------------------------------


@dataclass(frozen=True)
class SourceRange:
    """Bytes ``[start, end)`` of the source object, kept verbatim."""

    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


Piece = SourceRange | bytes


@dataclass(frozen=True)
class SplicedFile:
    """The new file as a sequence of pieces, and what it took to build it."""

    pieces: tuple[Piece, ...]
    footer: Any  # the new FileMetaData
    size: int
    num_rows: int
    row_group_count: int
    footer_size: int  # footer + 8
    #: source row group index -> new index (None: the group was dropped, all rows gone)
    group_map: Mapping[int, int | None]
    #: source row group index -> first row of it in the new file (kept groups only)
    row_offsets: Mapping[int, int]
    edited: frozenset[int] = field(default_factory=frozenset)


def splice_file(fmd: Any, replacements: Mapping[int, EncodedGroup | None],
                aux_bytes: Mapping[tuple[int, int], bytes]) -> SplicedFile:
    """Lay out the new file: every row group of ``fmd`` verbatim except those in
    ``replacements`` (None drops the group: no rows left).  ``aux_bytes`` holds the
    source bytes of every range :func:`aux_ranges` names for the verbatim groups."""
    check_spliceable(fmd)
    new = clone(fmd)
    pieces: list[Piece] = [MAGIC]
    aux: list[tuple[Any, bytes, int, int]] = []  # (owner, bytes, shift, kind index)
    groups: list[Any] = []
    group_map: dict[int, int | None] = {}
    row_offsets: dict[int, int] = {}
    pos = len(MAGIC)
    rows = 0
    for i, source in enumerate(fmd.row_groups):
        if i in replacements:
            enc = replacements[i]
            if enc is None:
                group_map[i] = None
                continue
            rg = clone(enc.row_group)
            delta = pos - len(MAGIC)
            blobs = {r: enc.aux_source[r[0]:r[1]] for r in aux_ranges(rg)}
            _collect_aux_from(rg, blobs, delta, aux)
            shift_row_group(rg, delta)
            pieces.append(enc.data)
            pos += len(enc.data)
        else:
            rg = clone(source)
            start, end = row_group_span(rg)
            delta = pos - start
            _collect_aux_from(rg, aux_bytes, delta, aux)
            shift_row_group(rg, delta)
            pieces.append(SourceRange(start, end))
            pos += end - start
        _strip_aux(rg)
        if rg.ordinal is not None:
            rg.ordinal = len(groups)
        group_map[i] = len(groups)
        row_offsets[i] = rows
        rows += int(rg.num_rows)
        groups.append(rg)
    # Aux structures go after the last row group; their owners get the new offsets.
    for owner, blob, _, kind in aux:
        name_off, name_len = (_CHUNK_AUX + _META_AUX)[kind]
        target = owner if kind < len(_CHUNK_AUX) else owner.meta_data
        setattr(target, name_off, pos)
        setattr(target, name_len, len(blob))
        pieces.append(blob)
        pos += len(blob)
    new.row_groups = groups
    new.num_rows = rows
    with_dictionary_hint(new)
    tail = footer_tail(new)
    pieces.append(tail)
    pos += len(tail)
    return SplicedFile(pieces=tuple(_merge_pieces(pieces)), footer=new, size=pos,
                       num_rows=rows, row_group_count=len(groups), footer_size=len(tail),
                       group_map=group_map, row_offsets=row_offsets,
                       edited=frozenset(replacements))


def _collect_aux_from(rg: Any, blobs: Mapping[tuple[int, int], bytes], delta: int,
                      out: list[tuple[Any, bytes, int, int]]) -> None:
    kinds = _CHUNK_AUX + _META_AUX
    for c in rg.columns:
        for kind, (off, length) in enumerate(kinds):
            target = c if kind < len(_CHUNK_AUX) else c.meta_data
            start, size = getattr(target, off), getattr(target, length)
            if start is None or not size:
                continue
            blob = blobs.get((int(start), int(start + size)))
            if blob is None:
                continue  # not fetched (e.g. a bloom filter of unknown length): dropped
            if off == "offset_index_offset":
                blob = _shift_offset_index(blob, delta)
            out.append((c, blob, delta, kind))


def _shift_offset_index(blob: bytes, delta: int) -> bytes:
    index = decode_offset_index(blob)
    for loc in index.page_locations:
        loc.offset += delta
    return encode_offset_index(index)


def _merge_pieces(pieces: Sequence[Piece]) -> list[Piece]:
    """Join adjacent byte pieces and contiguous source ranges; fold the leading magic
    into a source range that starts right after the source's own magic."""
    out: list[Piece] = []
    for p in pieces:
        if isinstance(p, bytes) and not p:
            continue
        prev = out[-1] if out else None
        if isinstance(p, bytes) and isinstance(prev, bytes):
            out[-1] = prev + p
        elif (isinstance(p, SourceRange) and isinstance(prev, SourceRange)
              and prev.end == p.start):
            out[-1] = SourceRange(prev.start, p.end)
        elif (isinstance(p, SourceRange) and prev == MAGIC and len(out) == 1
              and p.start == len(MAGIC)):
            out[-1] = SourceRange(0, p.end)
        else:
            out.append(p)
    return out


# --- multipart parts -------------------------------------------------------------


#: A part copied server-side from the source: a verbatim source range.
CopyPart = SourceRange


@dataclass(frozen=True)
class UploadPart:
    """A part uploaded by the client: new bytes and verbatim source ranges (widening),
    in order.  The source ranges must be downloaded first."""

    segments: tuple[Piece, ...]

    @property
    def size(self) -> int:
        return sum(s.size if isinstance(s, SourceRange) else len(s) for s in self.segments)

    @property
    def widened_bytes(self) -> int:
        return sum(s.size for s in self.segments if isinstance(s, SourceRange))


Part = CopyPart | UploadPart


def plan_parts(pieces: Sequence[Piece], *, min_part: int = MIN_PART_SIZE,
               max_part: int = MAX_PART_SIZE) -> list[Part]:
    """Cut the new file into multipart parts, every one but the last ``>= min_part``.

    Source ranges are copied server-side when they can stand as a part of their own;
    an upload part that is too small is widened with the next source bytes, taken
    verbatim (downloaded and re-uploaded, never re-encoded), leaving the rest of that
    range a copy when it is still large enough.  The last piece is always the footer,
    so the final part is an upload part.
    """
    if min_part <= 0 or max_part < 2 * min_part:
        raise ValueError("need 0 < 2 * min_part <= max_part")
    parts: list[Part] = []
    pending: list[Piece] = []

    def pending_size() -> int:
        return UploadPart(tuple(pending)).size

    def emit_copy(start: int, end: int) -> None:
        while end - start > max_part:
            # Leave at least min_part for the rest, so no copy part is too small.
            cut = min(max_part, end - start - min_part)
            parts.append(CopyPart(start, start + cut))
            start += cut
        parts.append(CopyPart(start, end))

    for piece in pieces:
        if isinstance(piece, bytes):
            pending.append(piece)
            continue
        start, end = piece.start, piece.end
        if pending:
            need = max(0, min_part - pending_size())
            if need and end - start - need < min_part:
                pending.append(piece)  # too small to split: all of it is widening
                continue
            if need:
                pending.append(SourceRange(start, start + need))
                start += need
            parts.append(UploadPart(tuple(pending)))
            pending = []
        if end - start >= min_part:
            emit_copy(start, end)
        else:
            pending.append(SourceRange(start, end))
    if pending:
        parts.append(UploadPart(tuple(pending)))
    return _split_large_uploads(parts, min_part, max_part)


def _split_large_uploads(parts: list[Part], min_part: int, max_part: int) -> list[Part]:
    """Upload parts above ``max_part`` (only with gigantic re-encoded groups) are cut into
    equal slices, each between ``max_part / 2`` and ``max_part`` (so above ``min_part``)."""
    out: list[Part] = []
    for part in parts:
        if isinstance(part, CopyPart) or part.size <= max_part:
            out.append(part)
            continue
        count = -(-part.size // max_part)
        target = -(-part.size // count)
        current: list[Piece] = []
        size = 0
        for seg in part.segments:
            while True:
                seg_size = seg.size if isinstance(seg, SourceRange) else len(seg)
                room = target - size
                if seg_size <= room:
                    current.append(seg)
                    size += seg_size
                    break
                head, seg = _split_piece(seg, room)
                current.append(head)
                out.append(UploadPart(tuple(current)))
                current, size = [], 0
        if current:
            out.append(UploadPart(tuple(current)))
    return out


def _split_piece(piece: Piece, at: int) -> tuple[Piece, Piece]:
    if isinstance(piece, SourceRange):
        return SourceRange(piece.start, piece.start + at), SourceRange(piece.start + at,
                                                                       piece.end)
    return piece[:at], piece[at:]


def assemble(pieces: Sequence[Piece], source: bytes | Mapping[tuple[int, int], bytes]) -> bytes:
    """The new file's bytes, given the source (whole, or the bytes of each range)."""
    out = bytearray()
    for p in pieces:
        if isinstance(p, bytes):
            out += p
        elif isinstance(source, bytes | bytearray | memoryview):
            out += source[p.start:p.end]
        else:
            out += source[(p.start, p.end)]
    return bytes(out)
