"""The Parquet footer's Thrift codec: decode and encode ``FileMetaData`` and friends.

Owns the one binding between caslake and the Parquet Thrift structures.  The
structures come from the official ``parquet.thrift`` IDL of apache/parquet-format,
shipped unchanged beside this module (its header names the upstream commit), loaded
with ``thriftpy2``; bytes are read and written with thriftpy2's Thrift *compact*
protocol, the one Parquet uses.  Nothing here hand-encodes Thrift.

Decoded objects are thriftpy2 structs: plain mutable attribute bags named as in the
IDL (``fmd.row_groups[0].columns[0].meta_data.data_page_offset``).  Callers that
change one must work on a :func:`clone`, so a cached footer is never edited.

Pure: bytes in, objects out, and back.  Never does I/O beyond loading the IDL file
once at import; never interprets statistics (see :mod:`caslake.format.stats`).
Malformed input raises :class:`~caslake.errors.CorruptMetadata` naming the object.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import thriftpy2
from thriftpy2.protocol import TCompactProtocolFactory
from thriftpy2.utils import deserialize, serialize

from caslake.errors import CorruptMetadata

IDL_PATH = Path(__file__).with_name("parquet.thrift")

#: The generated module: ``parquet.FileMetaData``, ``parquet.RowGroup``, enums...
parquet: Any = thriftpy2.load(str(IDL_PATH), module_name="caslake_parquet_thrift")

MAGIC = b"PAR1"
#: Bytes after the footer: 4-byte little-endian footer length, then ``PAR1``.
TAIL_SIZE = 8

_PROTOCOL: Any = TCompactProtocolFactory()  # type: ignore[no-untyped-call]

# Enum values used by the splice (from the IDL, named for readability).
CODEC_NAMES: dict[int, str] = {
    parquet.CompressionCodec.UNCOMPRESSED: "NONE",
    parquet.CompressionCodec.SNAPPY: "SNAPPY",
    parquet.CompressionCodec.GZIP: "GZIP",
    parquet.CompressionCodec.BROTLI: "BROTLI",
    parquet.CompressionCodec.ZSTD: "ZSTD",
    parquet.CompressionCodec.LZ4_RAW: "LZ4",  # pyarrow's "lz4" writes LZ4_RAW
}
DICTIONARY_ENCODINGS = frozenset({parquet.Encoding.PLAIN_DICTIONARY,
                                  parquet.Encoding.RLE_DICTIONARY})
DATA_PAGE_TYPES = frozenset({parquet.PageType.DATA_PAGE, parquet.PageType.DATA_PAGE_V2})


def _decode(struct_type: Any, data: bytes, what: str) -> Any:
    try:
        return deserialize(struct_type(), bytes(data), _PROTOCOL)
    except Exception as exc:  # thriftpy2 raises assorted errors on garbage
        raise CorruptMetadata(what, f"cannot decode Parquet {struct_type.__name__}: "
                                    f"{exc}") from exc


def _encode(obj: Any) -> bytes:
    return bytes(serialize(obj, _PROTOCOL))


def decode_file_metadata(data: bytes, *, what: str = "parquet footer") -> Any:
    """A ``FileMetaData`` from the footer's Thrift bytes (without length and magic)."""
    return _decode(parquet.FileMetaData, data, what)


def encode_file_metadata(fmd: Any) -> bytes:
    """The Thrift compact bytes of ``fmd`` (without length and magic)."""
    return _encode(fmd)


def footer_tail(fmd: Any) -> bytes:
    """Everything a Parquet file ends with: footer bytes, their length, ``PAR1``."""
    body = encode_file_metadata(fmd)
    return body + struct.pack("<I", len(body)) + MAGIC


def footer_length(tail: bytes, *, what: str = "parquet file") -> int:
    """The footer's Thrift length from a file's last 8 (or more) bytes."""
    if len(tail) < TAIL_SIZE or tail[-4:] != MAGIC:
        raise CorruptMetadata(what, "no Parquet magic at the end of the file")
    return int(struct.unpack("<I", tail[-8:-4])[0])


def decode_offset_index(data: bytes, *, what: str = "offset index") -> Any:
    return _decode(parquet.OffsetIndex, data, what)


def encode_offset_index(index: Any) -> bytes:
    return _encode(index)


def decode_page_header(data: bytes, *, what: str = "page header") -> Any:
    """The ``PageHeader`` at the start of ``data`` (trailing page bytes are ignored)."""
    return _decode(parquet.PageHeader, data, what)


def clone(obj: Any) -> Any:
    """A deep copy of a decoded struct (by a Thrift round trip: exact and cheap)."""
    return deserialize(type(obj)(), serialize(obj, _PROTOCOL), _PROTOCOL)


def shift_row_group(rg: Any, delta: int) -> None:
    """Move a row group's pages by ``delta`` bytes (its aux structures untouched)."""
    if rg.file_offset:
        rg.file_offset += delta
    for c in rg.columns:
        if c.file_offset:  # deprecated field; 0 means "not set" (offset 0 is the magic)
            c.file_offset += delta
        md = c.meta_data
        md.data_page_offset += delta
        if md.dictionary_page_offset:
            md.dictionary_page_offset += delta
        if md.index_page_offset:
            md.index_page_offset += delta
