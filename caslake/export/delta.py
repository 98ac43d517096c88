"""Export a caslake snapshot as a Delta table (log only, zero-copy), with deletion vectors.

Owns ``_delta_log/`` at the table root and the deletion-vector files under
``dv/``.  Each export appends one Delta commit (``_delta_log/<20 digits>.json``,
written create-only, which is Delta's own commit rule) holding the
difference between the Delta table's current state and the caslake
snapshot: ``add`` for new files (with statistics), ``remove`` for files gone,
and a ``remove`` + ``add`` pair for a file whose deletes changed.  The first
commit also carries ``protocol`` (reader 3 / writer 7, feature
``deletionVectors``) and ``metaData``.  It never writes under ``data/``,
``manifest/`` or ``tombstone/``; a crash before the commit object lands
leaves the previous Delta version as it was.

Deletion vectors use the Delta protocol's on-disk format: a file starting
with the version byte 1, then per vector a big-endian 4-byte size, the data
(little-endian magic 1681511377 and a portable 64-bit roaring bitmap), and a
big-endian CRC-32 of the data.  Descriptors use storage type ``u``
(``dv/deletion_vector_<uuid>.bin``, the UUID in Z85).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import struct
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any

from pyroaring import BitMap64

from caslake.errors import AlreadyExists, CommitConflict, CorruptMetadata, InvalidArgument
from caslake.export.result import ExportResult, Writer
from caslake.export.source import ExportSource, TableHandle, load_source
from caslake.export.types import delta_schema, delta_stat, delta_type
from caslake.format.manifest import DataFile
from caslake.store.base import ObjectStore

LOG_PREFIX = "_delta_log/"
DV_PREFIX = "dv"
DV_MAGIC = 1681511377
DV_TAG = "caslake.deletes"  # add.tags: which tombstones the file's deletion vector reflects
_COMMIT_RE = re.compile(r"^_delta_log/(\d{20})\.json$")
_B85 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_TO_Z85 = str.maketrans(_B85, _Z85)
_FROM_Z85 = str.maketrans(_Z85, _B85)
ATTEMPTS = 5


def commit_key(version: int) -> str:
    return f"{LOG_PREFIX}{version:020d}.json"


def z85(data: bytes) -> str:
    """Z85 (the Delta protocol's base85): the same base-85 code as RFC 1924, another alphabet."""
    return base64.b85encode(data).decode().translate(_TO_Z85)


def dv_key(path_or_inline: str) -> str:
    """The key of a ``u`` deletion vector file, relative to the table root."""
    prefix, encoded = path_or_inline[:-20], path_or_inline[-20:]
    raw = base64.b85decode(encoded.translate(_FROM_Z85))
    name = f"deletion_vector_{uuid.UUID(bytes=raw)}.bin"
    return f"{prefix}/{name}" if prefix else name


def serialize_dv(positions: BitMap64) -> bytes:
    """One deletion vector's data: magic and the portable 64-bit roaring bitmap."""
    return struct.pack("<I", DV_MAGIC) + positions.serialize()


@dataclass
class DeltaState:
    """The Delta table as its log says: the next version, live adds, and the last
    caslake version exported (and every one exported, for time travel answers)."""

    next_version: int = 0
    adds: dict[str, dict[str, Any]] = field(default_factory=dict)
    schema: str | None = None
    exported: dict[int, int] = field(default_factory=dict)  # caslake version -> delta version


def read_log(store: ObjectStore) -> DeltaState:
    keys = sorted(m.key for m in store.list(LOG_PREFIX) if _COMMIT_RE.match(m.key))
    state = DeltaState()
    for expected, key in enumerate(keys):
        version = int(_COMMIT_RE.match(key).group(1))  # type: ignore[union-attr]
        if version != expected:
            raise CorruptMetadata(key, f"Delta log has a gap: version {expected} is missing")
        for line in store.get(key).data.splitlines():
            if not line.strip():
                continue
            try:
                action = json.loads(line)
            except ValueError as e:
                raise CorruptMetadata(key, f"not valid JSON lines ({e})") from None
            if "add" in action:
                state.adds[action["add"]["path"]] = action["add"]
            elif "remove" in action:
                state.adds.pop(action["remove"]["path"], None)
            elif "metaData" in action:
                state.schema = action["metaData"].get("schemaString")
            elif "commitInfo" in action and "caslakeVersion" in action["commitInfo"]:
                state.exported[int(action["commitInfo"]["caslakeVersion"])] = version
        state.next_version = version + 1
    return state


class DeltaExport:
    def __init__(self, source: ExportSource) -> None:
        self.src = source
        self.schema = source.snapshot.manifest.schema
        self.schema_string = json.dumps(delta_schema(self.schema))  # refuses before writing
        self.ntz = any(delta_type(f) == "timestamp_ntz" for f in self.schema.fields)

    def _stats(self, f: DataFile, has_dv: bool) -> str:
        by_id = self.schema.by_id()
        mins, maxs, nulls = {}, {}, {}
        for fid, s in f.stats.items():
            fld = by_id.get(fid)
            if fld is None:
                continue
            if "nulls" in s:
                nulls[fld.name] = s["nulls"]
            lo, hi = delta_stat(s.get("min"), fld), delta_stat(s.get("max"), fld)
            if lo is not None and hi is not None:
                mins[fld.name], maxs[fld.name] = lo, hi
        stats: dict[str, Any] = {"numRecords": f.row_count, "minValues": mins,
                                 "maxValues": maxs, "nullCount": nulls}
        if has_dv:
            stats["tightBounds"] = False
        return json.dumps(stats, separators=(",", ":"))

    def _delete_tags(self) -> dict[str, str]:
        """Per data file with deletes: a digest of the tombstones that name it."""
        names: dict[str, list[str]] = {}
        for ref in self.src.tombstones:
            for p in ref.files:
                names.setdefault(p, []).append(ref.path)
        return {p: hashlib.sha256("\n".join(sorted(t)).encode()).hexdigest()[:32]
                for p, t in names.items()}

    def actions(self, state: DeltaState, writer: Writer) -> list[dict[str, Any]]:
        m = self.src.snapshot.manifest
        now = m.created_at_ms
        tags = self._delete_tags()
        files = {f.path: f for f in self.src.files()}
        changed = [p for p in files
                   if p not in state.adds
                   or (state.adds[p].get("tags") or {}).get(DV_TAG) != tags.get(p)]
        dvs = self._write_dvs(self.src.deleted_positions(p for p in changed if p in tags),
                              writer)
        out: list[dict[str, Any]] = []
        for path, old in state.adds.items():
            if path not in files or path in changed:
                remove: dict[str, Any] = {
                    "path": path, "deletionTimestamp": now, "dataChange": True,
                    "extendedFileMetadata": True, "partitionValues": {}, "size": old.get("size")}
                if old.get("deletionVector"):
                    remove["deletionVector"] = old["deletionVector"]
                out.append({"remove": remove})
        for path in changed:
            f = files[path]
            add: dict[str, Any] = {
                "path": path, "partitionValues": {}, "size": f.size, "modificationTime": now,
                "dataChange": True, "stats": self._stats(f, path in dvs),
                "tags": {DV_TAG: tags[path]} if path in tags else {}}
            if path in dvs:
                add["deletionVector"] = dvs[path]
            out.append({"add": add})
        return out

    def _write_dvs(self, positions: dict[str, Any], writer: Writer) -> dict[str, dict[str, Any]]:
        if not positions:
            return {}
        ident = uuid.uuid4()
        encoded = DV_PREFIX + z85(ident.bytes)
        body = bytearray(b"\x01")
        descriptors = {}
        for path in sorted(positions):
            bm = BitMap64(positions[path])
            data = serialize_dv(bm)
            descriptors[path] = {"storageType": "u", "pathOrInlineDv": encoded,
                                 "offset": len(body), "sizeInBytes": len(data),
                                 "cardinality": len(bm)}
            body += struct.pack(">I", len(data)) + data + struct.pack(">I", zlib.crc32(data))
        writer.put(dv_key(encoded), bytes(body))
        return descriptors

    def commit(self, state: DeltaState, writer: Writer) -> bytes:
        m = self.src.snapshot.manifest
        lines: list[dict[str, Any]] = [{"commitInfo": {
            "timestamp": m.created_at_ms, "operation": "CASLAKE EXPORT",
            "operationParameters": {"caslakeVersion": str(m.version),
                                    "caslakeOperation": m.operation},
            "caslakeVersion": m.version, "caslakeCommitId": m.commit_id,
            "engineInfo": "caslake", "isBlindAppend": False}}]
        if state.next_version == 0:
            features = ["deletionVectors", *(["timestampNtz"] if self.ntz else [])]
            lines.append({"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                                       "readerFeatures": features, "writerFeatures": features}})
        if state.schema != self.schema_string:
            lines.append({"metaData": {
                "id": str(uuid.UUID(hex=hashlib.sha256(m.table_id.encode()).hexdigest()[:32])),
                "format": {"provider": "parquet", "options": {}},
                "schemaString": self.schema_string, "partitionColumns": [],
                "configuration": {"delta.enableDeletionVectors": "true"},
                "createdTime": m.created_at_ms}})
        lines.extend(self.actions(state, writer))
        return b"".join(json.dumps(a, separators=(",", ":")).encode() + b"\n" for a in lines)


def export_delta(table: TableHandle, version: int | None = None) -> ExportResult:
    """Append one Delta commit to ``<table>/_delta_log/`` making the Delta table show
    ``version`` (latest if None).  See the module docstring."""
    source = load_source(table, version)
    export = DeltaExport(source)  # checks the schema before any write
    store = table.store
    for _ in range(ATTEMPTS):
        state = read_log(store)
        if state.exported:
            last = max(state.exported)
            if source.version in state.exported or source.version == last:
                return ExportResult("delta", source.version, table.store.uri, noop=True)
            if source.version < last:
                raise InvalidArgument(f"version {source.version} is older than the latest "
                                      f"Delta export (version {last}); exports only move "
                                      "forward")
        writer = Writer(store)
        body = export.commit(state, writer)
        try:
            writer.publish(commit_key(state.next_version), body,
                           commit_id=source.snapshot.manifest.commit_id)
        except AlreadyExists:
            continue  # another exporter took this Delta version: replay and diff again
        return writer.result("delta", source.version, table.store.uri)
    raise CommitConflict(f"gave up after {ATTEMPTS} attempts: other exporters kept taking "
                         "the next Delta version")
