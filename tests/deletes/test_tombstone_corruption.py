"""A damaged tombstone is reported as CorruptMetadata naming it, and nothing is written.

After a real delete on a local table, the tombstone object
(``<table>/tombstone/<uuid>.del``, format in docs/format.md "Tombstones") is
damaged in place:

* truncated, or replaced with garbage (the object's size and ETag change);
* garbage of the same size, or one flipped byte, with the file's inode and
  mtime restored so its ETag is unchanged (only the content checks can catch it);
* well-formed (valid magic, header and CRC, same size and ETag) but lying: a
  row position equal to the data file's row count, a data file the snapshot
  does not have, or a row count that differs from the manifest's.

Each must make ``scan().to_arrow()`` (and ``count()``) raise
:class:`~caslake.errors.CorruptMetadata` whose key or message names the
tombstone object, and must write nothing: same pointer, same objects.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from pyroaring import BitMap

import caslake
from caslake.core import WriteOptions
from caslake.errors import CorruptMetadata
from caslake.format.keys import POINTER_KEY
from caslake.store.local import etag_from_stat
from tests.sample_data import ID_V_SCHEMA as SCHEMA
from tests.sample_data import id_v_rows as rows

MAGIC = b"CLTB"


# --- the container (docs/format.md "Tombstone object") ----------------------------------


def split(raw: bytes) -> tuple[dict, bytes, bytes]:  # type: ignore[type-arg]
    """(header, header bytes, blob section) of a valid tombstone; checks magic and CRC."""
    assert raw[:4] == MAGIC
    (h,) = struct.unpack("<I", raw[4:8])
    header_bytes = raw[8:8 + h]
    blobs = raw[8 + h:-4]
    assert struct.unpack("<I", raw[-4:])[0] == zlib.crc32(raw[:-4])
    return json.loads(header_bytes), header_bytes, blobs


def join(header_bytes: bytes, blobs: bytes) -> bytes:
    body = MAGIC + struct.pack("<I", len(header_bytes)) + header_bytes + blobs
    return body + struct.pack("<I", zlib.crc32(body))


def rewrite_keeping_etag(path: Path, data: bytes) -> None:
    """Overwrite in place (same inode) and restore the mtime: with the same size the
    local store's ETag is unchanged, as if a faulty writer had stored these bytes."""
    st = path.stat()
    with open(path, "r+b") as f:
        f.write(data)
        f.truncate()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    if len(data) == st.st_size:
        assert etag_from_stat(path.stat()) == etag_from_stat(st)


# --- corruptions ------------------------------------------------------------------------


def truncate(raw: bytes, path: Path) -> None:
    path.write_bytes(raw[: len(raw) // 2])


def garbage(raw: bytes, path: Path) -> None:
    path.write_bytes(bytes((i * 131 + 7) % 256 for i in range(777)))


def garbage_same_etag(raw: bytes, path: Path) -> None:
    rewrite_keeping_etag(path, bytes((i * 61 + 3) % 256 for i in range(len(raw))))


def flipped_byte_same_etag(raw: bytes, path: Path) -> None:
    _, header_bytes, _ = split(raw)
    i = 8 + len(header_bytes) + 2  # inside the first bitmap; the CRC no longer matches
    rewrite_keeping_etag(path, raw[:i] + bytes([raw[i] ^ 0x10]) + raw[i + 1:])


def position_out_of_range(raw: bytes, path: Path) -> None:
    header, header_bytes, blobs = split(raw)
    (entry,) = header["files"]
    pos = entry["positions"]
    old = BitMap.deserialize(blobs[pos["offset"]:pos["offset"] + pos["length"]])
    assert list(old) == [5, 7]
    new = BitMap([5, entry["row_count"]]).serialize()  # == row_count: one past the end
    assert len(new) == pos["length"]
    blobs = blobs[:pos["offset"]] + new + blobs[pos["offset"] + pos["length"]:]
    rewrite_keeping_etag(path, join(header_bytes, blobs))


def unknown_data_file(raw: bytes, path: Path) -> None:
    header, header_bytes, blobs = split(raw)
    real = header["files"][0]["path"]
    stem, ext = real.rsplit(".", 1)
    fake = stem[:-8] + "deadbeef" + "." + ext  # same length, not in the snapshot
    assert fake != real and len(fake) == len(real)
    new_header = header_bytes.replace(real.encode(), fake.encode())
    assert new_header != header_bytes
    rewrite_keeping_etag(path, join(new_header, blobs))


def wrong_row_count(raw: bytes, path: Path) -> None:
    header, header_bytes, blobs = split(raw)
    n = header["files"][0]["row_count"]
    old = f'"row_count":{n}'.encode()
    assert header_bytes.count(old) == 1, header_bytes
    new_header = header_bytes.replace(old, f'"row_count":{n + 1}'.encode())  # 100 -> 101
    assert len(new_header) == len(header_bytes)
    rewrite_keeping_etag(path, join(new_header, blobs))


CORRUPTIONS: dict[str, Callable[[bytes, Path], None]] = {
    "truncated": truncate,
    "garbage": garbage,
    "garbage-same-etag": garbage_same_etag,
    "flipped-byte-same-etag": flipped_byte_same_etag,
    "position-out-of-range": position_out_of_range,
    "unknown-data-file": unknown_data_file,
    "wrong-row-count": wrong_row_count,
}


# --- fixtures ---------------------------------------------------------------------------


def make_table(root: Path) -> tuple[str, str, Path]:
    """A local table: file A (ids 0..99, several row groups) with ids 5 and 7 deleted
    by one tombstone, and file B (ids 1000..1099) untouched.  Returns the URI, the
    tombstone's key and its path."""
    uri = str(root / "t")
    t = caslake.create_table(uri, SCHEMA, write_options=WriteOptions(row_group_size=300))
    t.append(rows(range(100)))
    t.append(rows(range(1000, 1100)))
    res = t.delete("id IN (5, 7)")
    assert (res.rows_deleted, res.version) == (2, 3)
    (path,) = (root / "t" / "tombstone").glob("*.del")
    key = path.relative_to(root / "t").as_posix()
    header, _, _ = split(path.read_bytes())  # the documented container, valid
    (entry,) = header["files"]
    files = {f["path"]: f for f in t.describe()["data_files"]}
    assert files[entry["path"]]["rows"] == entry["row_count"] == 100
    assert entry["positions"]["cardinality"] == 2
    return uri, key, path


def state(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under the table: path -> (size, mtime_ns)."""
    out = {}
    for p in root.rglob("*"):
        if p.is_file():
            st = p.stat()
            out[p.relative_to(root).as_posix()] = (st.st_size, st.st_mtime_ns)
    return out


def names(err: CorruptMetadata, key: str) -> bool:
    return key in (err.key or "") or key in str(err)


@pytest.mark.parametrize("corrupt", list(CORRUPTIONS.values()), ids=list(CORRUPTIONS))
def test_corrupt_tombstone_is_typed_and_writes_nothing(tmp_path, corrupt) -> None:  # type: ignore[no-untyped-def]
    uri, key, path = make_table(tmp_path)
    corrupt(path.read_bytes(), path)
    before = state(tmp_path / "t")
    pointer = (tmp_path / "t" / POINTER_KEY).read_bytes()

    t = caslake.open_table(uri)
    with pytest.raises(CorruptMetadata) as e:
        t.scan().to_arrow()
    assert names(e.value, key), f"{e.value!r} (key={e.value.key!r}) does not name {key}"
    with pytest.raises(CorruptMetadata) as e2:
        caslake.open_table(uri).scan(columns=["v"]).count()
    assert names(e2.value, key), repr(e2.value)

    assert state(tmp_path / "t") == before
    assert (tmp_path / "t" / POINTER_KEY).read_bytes() == pointer
    assert caslake.open_table(uri).version == 3


@pytest.mark.parametrize("corrupt", [garbage_same_etag, position_out_of_range],
                         ids=["garbage-same-etag", "position-out-of-range"])
def test_delete_on_a_file_with_a_corrupt_tombstone_refuses_and_writes_nothing(  # type: ignore[no-untyped-def]
        tmp_path, corrupt) -> None:
    """Counting the rows a new delete removes needs the file's existing tombstone; a
    writer must not commit on top of one it cannot read."""
    uri, key, path = make_table(tmp_path)
    corrupt(path.read_bytes(), path)
    before = state(tmp_path / "t")
    with pytest.raises(CorruptMetadata) as e:
        caslake.open_table(uri).delete("id = 6")
    assert names(e.value, key), repr(e.value)
    assert state(tmp_path / "t") == before
    assert caslake.open_table(uri).version == 3


def test_scan_that_prunes_the_damaged_files_tombstone_still_reads(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """docs/format.md: a tombstone is loaded only if a file that survives pruning is
    named in its reference, so reading the other file is unaffected."""
    uri, _, path = make_table(tmp_path)
    garbage(path.read_bytes(), path)
    got = caslake.open_table(uri).scan(where="id >= 1000").to_arrow()
    assert sorted(got.column("id").to_pylist()) == list(range(1000, 1100))
