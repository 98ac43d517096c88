"""Tombstone objects: ``tombstone/<uuid>.del``, one per delete commit.

Binary container (all integers little-endian)::

    b"CLTB"                     magic
    u32 H                       length of the JSON header
    H bytes                     JSON header (UTF-8)
    blob section                portable-format roaring bitmaps, back to back
    u32 CRC-32                  of every byte before it

The header lists, per data file, what is deleted in it: whole row groups,
inclusive key ranges on one column, and row positions (0-based, counted over
the whole file) as a roaring bitmap stored in the blob section.  See
docs/format.md, "Tombstones".  Parsing validates everything that can be
checked without the snapshot; :func:`caslake.core.read.deletion_mask.load_masks`
validates the rest against the snapshot that references it.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyroaring import BitMap

from caslake.errors import CorruptMetadata, UnsupportedFormatVersion
from caslake.format import BASE_FORMAT_VERSION, FORMAT_VERSION, MAX_INT64
from caslake.format.keys import DATA_PREFIX, check_relative_key

MAGIC = b"CLTB"
TOMBSTONE_FORMAT = "caslake.tombstone"


@dataclass(frozen=True)
class KeyRange:
    """Rows of the file whose column ``field_id`` lies in [min, max] (JSON-encoded values)."""

    field_id: int
    min: Any
    max: Any

    def to_json(self) -> dict[str, Any]:
        return {"field_id": self.field_id, "min": self.min, "max": self.max}


@dataclass(frozen=True)
class FileDeletes:
    path: str
    row_count: int  # rows in the data file, for validation
    row_groups: frozenset[int] = frozenset()
    key_ranges: tuple[KeyRange, ...] = ()
    positions: BitMap = field(default_factory=BitMap)

    @property
    def is_empty(self) -> bool:
        return not self.row_groups and not self.key_ranges and not self.positions


@dataclass(frozen=True)
class Tombstone:
    table_id: str
    commit_id: str
    files: tuple[FileDeletes, ...]

    def to_bytes(self) -> bytes:
        blobs: list[bytes] = []
        offset = 0
        entries = []
        for f in self.files:
            entry: dict[str, Any] = {"path": f.path, "row_count": f.row_count}
            if f.row_groups:
                entry["row_groups"] = sorted(f.row_groups)
            if f.key_ranges:
                entry["key_ranges"] = [k.to_json() for k in f.key_ranges]
            if f.positions:
                bm = BitMap(f.positions)
                bm.run_optimize()
                blob = bm.serialize()
                entry["positions"] = {"offset": offset, "length": len(blob),
                                      "cardinality": len(bm)}
                blobs.append(blob)
                offset += len(blob)
            entries.append(entry)
        header = json.dumps({"format": TOMBSTONE_FORMAT, "format_version": BASE_FORMAT_VERSION,
                             "table_id": self.table_id, "commit_id": self.commit_id,
                             "files": entries}, separators=(",", ":")).encode()
        body = MAGIC + struct.pack("<I", len(header)) + header + b"".join(blobs)
        return body + struct.pack("<I", zlib.crc32(body))


def _fail(key: str, reason: str) -> CorruptMetadata:
    return CorruptMetadata(key, reason)


def _int(obj: Mapping[str, Any], name: str, key: str, where: str) -> int:
    v = obj.get(name)
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= MAX_INT64:
        raise _fail(key, f"{where}: {name!r} must be a non-negative 64-bit integer")
    return v


def parse_tombstone(data: bytes, key: str) -> Tombstone:
    """Decode and validate a tombstone object.  Every defect is CorruptMetadata(key)."""
    if len(data) < 12 or data[:4] != MAGIC:
        raise _fail(key, "not a caslake tombstone (bad magic or too short)")
    (crc,) = struct.unpack("<I", data[-4:])
    if zlib.crc32(data[:-4]) != crc:
        raise _fail(key, "checksum mismatch: the tombstone is truncated or damaged")
    (hlen,) = struct.unpack("<I", data[4:8])
    if 8 + hlen > len(data) - 4:
        raise _fail(key, "header length runs past the end of the object")
    try:
        header = json.loads(data[8:8 + hlen])
    except (ValueError, RecursionError) as e:  # incl. ints past int_max_str_digits
        raise _fail(key, f"header is not valid JSON ({e})") from None
    if not isinstance(header, dict) or header.get("format") != TOMBSTONE_FORMAT:
        raise _fail(key, "header is not a caslake.tombstone object")
    fv = header.get("format_version")
    if not isinstance(fv, int) or isinstance(fv, bool) or fv < 1:
        raise _fail(key, "format_version must be a positive integer")
    if fv > FORMAT_VERSION:
        raise UnsupportedFormatVersion(key, f"format_version {fv} is newer than this reader "
                                       f"({FORMAT_VERSION}); upgrade caslake")
    blob_start, blob_end = 8 + hlen, len(data) - 4
    files_raw = header.get("files")
    if not isinstance(files_raw, list):
        raise _fail(key, "'files' must be a list")
    seen: set[str] = set()
    files = []
    for i, raw in enumerate(files_raw):
        where = f"files[{i}]"
        if not isinstance(raw, dict):
            raise _fail(key, f"{where} must be an object")
        path = raw.get("path")
        reason = check_relative_key(path, prefix=DATA_PREFIX)
        if reason:
            raise _fail(key, f"{where}: {reason}")
        assert isinstance(path, str)
        if path in seen:
            raise _fail(key, f"{where}: data file {path!r} is listed twice")
        seen.add(path)
        row_count = _int(raw, "row_count", key, where)
        groups_raw = raw.get("row_groups", [])
        if not isinstance(groups_raw, list) or any(
                not isinstance(g, int) or isinstance(g, bool) or g < 0 for g in groups_raw):
            raise _fail(key, f"{where}: row_groups must be non-negative integers")
        if len(set(groups_raw)) != len(groups_raw):
            raise _fail(key, f"{where}: duplicate row groups")
        ranges = []
        ranges_raw = raw.get("key_ranges", [])
        if not isinstance(ranges_raw, list):
            raise _fail(key, f"{where}.key_ranges must be a list")
        for j, kr in enumerate(ranges_raw):
            if not isinstance(kr, dict) or "min" not in kr or "max" not in kr:
                raise _fail(key, f"{where}.key_ranges[{j}] must have field_id, min and max")
            ranges.append(KeyRange(_int(kr, "field_id", key, f"{where}.key_ranges[{j}]"),
                                   kr["min"], kr["max"]))
        positions = BitMap()
        if "positions" in raw:
            p = raw["positions"]
            if not isinstance(p, dict):
                raise _fail(key, f"{where}.positions must be an object")
            off = _int(p, "offset", key, f"{where}.positions")
            length = _int(p, "length", key, f"{where}.positions")
            card = _int(p, "cardinality", key, f"{where}.positions")
            if length == 0 or blob_start + off + length > blob_end:
                raise _fail(key, f"{where}.positions: empty bitmap or it runs past the blobs")
            try:
                positions = BitMap.deserialize(data[blob_start + off:blob_start + off + length])
            except (ValueError, TypeError) as e:
                raise _fail(key, f"{where}.positions: unreadable roaring bitmap ({e})") from None
            if len(positions) != card or card == 0:
                raise _fail(key, f"{where}.positions: cardinality {len(positions)} does not "
                            f"match the header ({card})")
            if positions.max() >= row_count:
                raise _fail(key, f"{where}.positions: position {positions.max()} is at or "
                            f"beyond the file's {row_count} rows")
        fd = FileDeletes(path, row_count, frozenset(groups_raw), tuple(ranges), positions)
        if fd.is_empty:
            raise _fail(key, f"{where}: deletes nothing")
        files.append(fd)
    table_id, commit_id = header.get("table_id"), header.get("commit_id")
    if not isinstance(table_id, str) or not isinstance(commit_id, str):
        raise _fail(key, "table_id and commit_id must be strings")
    return Tombstone(table_id, commit_id, tuple(files))
