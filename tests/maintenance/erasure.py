"""The erasure check: no object under a table's prefix holds an erased value.

    assert_erased(root, values, storage_options=None)   # raises AssertionError
    find_leaks(root, values, storage_options=None) -> list[str]

``root`` is an :class:`~caslake.store.ObjectStore` (any backend, wrapped or not), a
``caslake.api.Table``, or a table URI / local path.  Every object under the prefix
is read and decoded, never trusting a manifest:

* **What is listed.**  The store's listing; on a local store the whole directory
  tree, hidden ``.caslake-*`` bookkeeping included (a crashed writer's staging
  files live in ``.caslake-tmp/``); on S3 every unfinished multipart upload under
  the prefix is a leak too (its parts hold bytes that no GET can read back, so
  erasure cannot be shown).
* **How each object is decoded** (by content, whatever its name): Parquet with
  pyarrow (every column, nested ones walked to their leaves; string and binary
  leaves read again as dictionaries, so a dictionary page entry no row uses
  counts; every column chunk's min/max statistics; key-value metadata); Arrow
  IPC files and streams; Avro (fastavro: records and header metadata); caslake
  tombstones (the JSON header: key ranges keep deleted values); JSON and JSON
  lines; gzip/zstd bodies decompressed first.  An object whose magic says
  Parquet/Avro/Arrow but that does not decode (a crashed writer's half-written
  staging file) is a leak: its pages may be compressed, so nothing proves it
  clean.
* **Raw bytes** of every object (and of its decompressed body) are searched for
  each ``str`` (UTF-8) and ``bytes`` value too.

Matching: a ``str``/``bytes`` value is found as a *substring* of any decoded
string or bytes anywhere (a predicate text ``user = 'alice'`` leaks ``alice``), so
pick distinctive values.  Other values (ints, floats, dates, decimals...) are
matched by equality, and only in decoded *data*: Parquet column values and
statistics, Arrow and Avro record values (metadata is full of small integers).
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import os
import struct
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from caslake.store.base import ObjectStore

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def assert_erased(root: Any, values: Iterable[Any],
                  storage_options: Mapping[str, str] | None = None) -> None:
    """Raise AssertionError naming every object (and where in it) that still holds
    one of ``values``; see the module docstring."""
    leaks = find_leaks(root, values, storage_options)
    if leaks:
        raise AssertionError(f"{len(leaks)} erased value(s) still stored:\n  "
                             + "\n  ".join(leaks))


def find_leaks(root: Any, values: Iterable[Any],
               storage_options: Mapping[str, str] | None = None) -> list[str]:
    """``"<object>: <where>: <value>"`` for every erased value found (see the module)."""
    wanted = _Values(list(values))
    out: list[str] = []
    for name, read in _objects(root, storage_options, out):
        data = read()
        for where, value in _scan(data, wanted):
            out.append(f"{name}: {where}: {value!r}")
    return out


# --- what is stored -----------------------------------------------------------------


def _as_store(root: Any, storage_options: Mapping[str, str] | None) -> ObjectStore | Path:
    if isinstance(root, ObjectStore):
        return root
    store = getattr(root, "store", None)  # a caslake Table
    if isinstance(store, ObjectStore):
        return store
    if isinstance(root, os.PathLike) or (isinstance(root, str) and "://" not in root):
        return Path(root)
    if isinstance(root, str) and root.startswith("file:"):
        from caslake.store.local import path_from_uri

        return path_from_uri(root)
    from caslake.store import open_store

    return open_store(str(root), dict(storage_options or {}))


def _local_root(store: ObjectStore) -> Path | None:
    """The directory of a local store, through wrappers (faults, retry, routing)."""
    seen: set[int] = set()
    node: Any = store
    while node is not None and id(node) not in seen:
        seen.add(id(node))
        root = getattr(node, "root", None)
        if isinstance(root, Path):
            return root
        node = getattr(node, "inner", None) or getattr(node, "own", None)
    return None


def _objects(root: Any, storage_options: Mapping[str, str] | None, problems: list[str]
             ) -> Iterator[tuple[str, Any]]:
    """(name, read()) for every stored object, hidden staging files included."""
    target = _as_store(root, storage_options)
    base = target if isinstance(target, Path) else _local_root(target)
    if base is not None:
        for dirpath, _dirs, files in os.walk(base):
            for fname in sorted(files):
                path = Path(dirpath) / fname
                if path.is_symlink() or not path.is_file():
                    continue
                yield str(path.relative_to(base)), path.read_bytes
        return
    assert isinstance(target, ObjectStore)
    store = target
    for meta in store.list(""):
        yield meta.key, (lambda key=meta.key: store.get(key).data)
    for upload in store.list_multipart_uploads(""):
        problems.append(f"{upload.key}: unfinished multipart upload {upload.upload_id}: "
                        "its parts cannot be read back, so erasure cannot be shown")


# --- matching -------------------------------------------------------------------------


class _Values:
    def __init__(self, values: list[Any]) -> None:
        if not values:
            raise ValueError("assert_erased needs at least one value")
        self.texts = [v for v in values if isinstance(v, str)]
        self.blobs = [v for v in values if isinstance(v, bytes | bytearray)]
        self.needles = [t.encode("utf-8") for t in self.texts] + [bytes(b) for b in self.blobs]
        self.others = [v for v in values if not isinstance(v, str | bytes | bytearray)]

    def in_text(self, s: str | bytes) -> Iterator[Any]:
        if isinstance(s, str):
            yield from (t for t in self.texts if t in s)
            yield from (b for b in self.blobs if bytes(b) in s.encode("utf-8", "replace"))
        else:
            yield from (v for v, n in zip(self.texts + self.blobs, self.needles, strict=True)
                        if n in s)

    def in_data(self, value: Any) -> Iterator[Any]:
        """Matches of one decoded data value (a leaf of a column or record)."""
        if isinstance(value, str | bytes | bytearray | memoryview):
            yield from self.in_text(value if isinstance(value, str) else bytes(value))
            return
        for other in self.others:
            try:
                if type(value) is not bool and value == other:
                    yield other
            except Exception:  # incomparable types
                continue


def _walk(value: Any) -> Iterator[Any]:
    """Every leaf of a decoded value (dict keys and values, list items)."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from _walk(k)
            yield from _walk(v)
    elif isinstance(value, list | tuple | set | frozenset):
        for v in value:
            yield from _walk(v)
    elif value is not None:
        yield value


def _scan(data: bytes, wanted: _Values) -> Iterator[tuple[str, Any]]:
    found: set[tuple[str, str]] = set()

    def report(where: str, hits: Iterable[Any]) -> Iterator[tuple[str, Any]]:
        for hit in hits:
            if (where, repr(hit)) not in found:
                found.add((where, repr(hit)))
                yield where, hit

    yield from report("raw bytes", wanted.in_text(data))
    body = _decompressed(data)
    if body is not data:
        yield from report("decompressed bytes", wanted.in_text(body))
        data = body
    for where, hits in _decoded(data, wanted):
        yield from report(where, hits)


def _decompressed(data: bytes) -> bytes:
    try:
        if data[:2] == b"\x1f\x8b":
            return gzip.decompress(data)
        if data[:4] == _ZSTD_MAGIC:
            import zstandard

            return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    except Exception:
        return data
    return data


def _decoded(data: bytes, wanted: _Values) -> Iterator[tuple[str, Iterable[Any]]]:
    if data[:4] == b"PAR1":
        yield from _parquet(data, wanted)
    elif data[:6] == b"ARROW1" or data[:4] == b"\xff\xff\xff\xff":
        yield from _arrow(data, wanted)
    elif data[:4] == b"Obj\x01":
        yield from _avro(data, wanted)
    elif data[:4] == b"CLTB" and len(data) >= 8:
        (length,) = struct.unpack("<I", data[4:8])
        yield from _json_text(data[8:8 + length], wanted, "tombstone header")
    else:
        yield from _json_text(data, wanted, "JSON")


def _undecodable(kind: str, exc: Exception) -> Iterator[tuple[str, Iterable[Any]]]:
    yield (f"{kind} that does not decode ({type(exc).__name__}: {exc}); its pages may "
           "be compressed, so erasure cannot be shown", ["<unverifiable>"])


def _column_hits(table: pa.Table, wanted: _Values, what: str
                 ) -> Iterator[tuple[str, Iterable[Any]]]:
    for name, column in zip(table.column_names, table.columns, strict=True):
        for chunk in column.chunks:
            if pa.types.is_dictionary(chunk.type):
                leaves = chunk.dictionary.to_pylist()  # type: ignore[attr-defined]
                label = f"{what} column {name!r} (dictionary)"
            else:
                leaves = chunk.to_pylist()
                label = f"{what} column {name!r}"
            yield label, (hit for leaf in _walk(leaves) for hit in wanted.in_data(leaf))


def _parquet(data: bytes, wanted: _Values) -> Iterator[tuple[str, Iterable[Any]]]:
    try:
        pf = pq.ParquetFile(io.BytesIO(data))
        table = pf.read()
    except Exception as exc:
        yield from _undecodable("Parquet", exc)
        return
    yield from _column_hits(table, wanted, "Parquet")
    md = pf.metadata
    textual = [pf.schema.column(i).path for i in range(md.num_columns)
               if pf.schema.column(i).physical_type == "BYTE_ARRAY"]
    if textual:
        try:  # dictionary entries that no remaining row uses
            dicts = pq.read_table(io.BytesIO(data), read_dictionary=textual)
            yield from _column_hits(dicts, wanted, "Parquet")
        except Exception as exc:
            if not any(pa.types.is_nested(f.type) for f in table.schema):
                yield from _undecodable("Parquet dictionary", exc)
    for g in range(md.num_row_groups):
        for c in range(md.num_columns):
            stats = md.row_group(g).column(c).statistics
            if stats is not None and stats.has_min_max:
                yield (f"Parquet statistics of {md.row_group(g).column(c).path_in_schema!r}",
                       (h for v in (stats.min, stats.max) for h in wanted.in_data(v)))
    for k, v in (md.metadata or {}).items():
        if k == b"ARROW:schema":
            v = base64.b64decode(v)
        yield "Parquet key-value metadata", list(wanted.in_text(k)) + list(wanted.in_text(v))


def _arrow(data: bytes, wanted: _Values) -> Iterator[tuple[str, Iterable[Any]]]:
    try:
        if data[:6] == b"ARROW1":
            table = ipc.open_file(pa.BufferReader(data)).read_all()
        else:
            table = ipc.open_stream(pa.BufferReader(data)).read_all()
    except Exception as exc:
        yield from _undecodable("Arrow IPC", exc)
        return
    yield from _column_hits(table, wanted, "Arrow")
    for k, v in (table.schema.metadata or {}).items():
        yield "Arrow schema metadata", list(wanted.in_text(k)) + list(wanted.in_text(v))


def _avro(data: bytes, wanted: _Values) -> Iterator[tuple[str, Iterable[Any]]]:
    import fastavro

    try:
        reader = fastavro.reader(io.BytesIO(data))
        records = list(reader)
        metadata = dict(reader.metadata)
    except Exception as exc:
        yield from _undecodable("Avro", exc)
        return
    yield "Avro records", (h for leaf in _walk(records) for h in wanted.in_data(leaf))
    yield "Avro metadata", (h for leaf in _walk(metadata) for h in wanted.in_text(
        leaf if isinstance(leaf, str | bytes) else str(leaf)))


def _json_text(data: bytes, wanted: _Values, kind: str) -> Iterator[tuple[str, Iterable[Any]]]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return
    docs: list[Any] = []
    try:
        docs.append(json.loads(text))
    except ValueError:
        for line in text.splitlines():  # JSON lines (a Delta log)
            try:
                docs.append(json.loads(line))
            except ValueError:
                continue
    texts = (leaf if isinstance(leaf, str) else str(leaf) for leaf in _walk(docs))
    yield kind, (h for s in texts for h in wanted.in_text(s))
