"""Export a caslake snapshot as a Delta table (log only, zero-copy), with deletion vectors.

Owns ``_delta_log/`` at the table root and the deletion-vector files under
``dv/``.  Each export appends one Delta commit (``_delta_log/<20 digits>.json``,
written create-only, which is Delta's own commit rule) holding the
difference between the Delta table's current state and the caslake
snapshot: ``add`` for new files (with statistics), ``remove`` for files gone,
and a ``remove`` + ``add`` pair for a file whose deletes changed.  A commit
carries ``protocol`` (reader 3 / writer 7, features ``deletionVectors`` and
``columnMapping``, plus ``timestampNtz`` when needed) when the log's protocol
lacks a feature, and ``metaData`` when the schema or its column mapping
changed.  It never writes under ``data/``, ``manifest/`` or ``tombstone/``; a
crash before the commit object lands leaves the previous Delta version as it
was.

Every ``export.delta.checkpoint_interval`` versions (a table property, default
10 as in Delta; :func:`checkpoint_interval`) the export also writes a classic
single-file checkpoint of the version it just committed
(``<20 digits>.checkpoint.parquet``, the protocol's checkpoint schema) and then
``_last_checkpoint``, so readers (and :func:`read_log`) replay the checkpoint
and the few commits after it, not every JSON commit since version 0.  The
checkpoint is written after the commit is published: a failure there leaves
the export done, and the next export writes the checkpoint it missed (a
checkpoint is due when ``interval`` versions have passed since the last one).
Old JSON commits are kept (time travel); only the erasure deletes them.

Columns are matched by Delta column mapping, mode ``name``: each field carries
caslake's field id and the Parquet name its data files store it under, and
statistics are keyed by that physical name (:mod:`caslake.export.delta_columns`;
a table whose files disagree is refused).  When the physical names change
(and on the first export after one written without column mapping), every
file is re-added (``dataChange: false``) with statistics under the new names.

:func:`reset_delta` (the exports' erasure, ``purge(expire=True)``) writes one
commit that re-adds the latest caslake version whole with fresh deletion
vectors, a checkpoint at that commit and ``_last_checkpoint``, then deletes
every older log entry, checkpoint and deletion-vector file: no object left
describes an older version.  The log then starts at that checkpoint, which
:func:`read_log` reads.

A partitioned table's export is partitioned where Delta can show the spec
(:mod:`caslake.export.delta_partitions`): identity fields as partition columns,
``day``/``month``/``year``/``truncate`` as generated partition columns, each
``add`` carrying the file's ``partitionValues``; when the partition columns change,
every file is re-added with its values under them.

Deletion vectors use the Delta protocol's on-disk format: a file starting
with the version byte 1, then per vector a big-endian 4-byte size, the data
(little-endian magic 1681511377 and a portable 64-bit roaring bitmap), and a
big-endian CRC-32 of the data.  Descriptors use storage type ``u``
(``dv/deletion_vector_<uuid>.bin``, the UUID in Z85).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import re
import struct
import uuid
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyroaring import BitMap64

from caslake.errors import (
    AlreadyExists,
    CommitConflict,
    CorruptMetadata,
    InvalidArgument,
    NotFound,
    StoreError,
)
from caslake.export import delta_columns as cm
from caslake.export import delta_partitions as dp
from caslake.export.result import ExportResult, Writer
from caslake.export.source import ExportSource, TableHandle, load_source
from caslake.export.types import delta_schema, delta_stat, stat_leaves, uses_timestamp_ntz
from caslake.format.manifest import DataFile
from caslake.store.base import ObjectStore

LOG_PREFIX = "_delta_log/"
LAST_CHECKPOINT_KEY = "_delta_log/_last_checkpoint"
CHECKPOINT_INTERVAL_PROPERTY = "export.delta.checkpoint_interval"
DEFAULT_CHECKPOINT_INTERVAL = 10  # Delta's delta.checkpointInterval default
DV_PREFIX = "dv"
DV_MAGIC = 1681511377
DV_TAG = "caslake.deletes"  # add.tags: which tombstones the file's deletion vector reflects
_COMMIT_RE = re.compile(r"^_delta_log/(\d{20})\.json$")
_CHECKPOINT_RE = re.compile(r"^_delta_log/(\d{20})\.checkpoint\.parquet$")
_B85 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_TO_Z85 = str.maketrans(_B85, _Z85)
_FROM_Z85 = str.maketrans(_Z85, _B85)
ATTEMPTS = 5
READER_VERSION, WRITER_VERSION = 3, 7
MODE_KEY = "delta.columnMapping.mode"
MAX_ID_KEY = "delta.columnMapping.maxColumnId"


def commit_key(version: int) -> str:
    return f"{LOG_PREFIX}{version:020d}.json"


def checkpoint_key(version: int) -> str:
    return f"{LOG_PREFIX}{version:020d}.checkpoint.parquet"


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
    """The Delta table as its log says: the next version, live adds, the protocol
    and metaData in force, and the last caslake version exported (and every one
    exported, for time travel answers)."""

    next_version: int = 0
    adds: dict[str, dict[str, Any]] = field(default_factory=dict)
    schema: str | None = None
    exported: dict[int, int] = field(default_factory=dict)  # caslake version -> delta version
    protocol: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    checkpoint: int | None = None  # the checkpoint replay started from

    def apply(self, action: dict[str, Any], version: int) -> None:
        if "add" in action:
            self.adds[action["add"]["path"]] = action["add"]
        elif "remove" in action:
            self.adds.pop(action["remove"]["path"], None)
        elif "metaData" in action:
            self.metadata = action["metaData"]
            self.schema = action["metaData"].get("schemaString")
        elif "protocol" in action:
            self.protocol = action["protocol"]
        elif "commitInfo" in action and "caslakeVersion" in action["commitInfo"]:
            self.exported[int(action["commitInfo"]["caslakeVersion"])] = version

    def physical_names(self) -> dict[int, str]:
        """Field id -> physical name of the metaData in force, for every struct field
        at any depth (empty without column mapping)."""
        if not self.metadata or not self.schema or \
                (self.metadata.get("configuration") or {}).get(MODE_KEY) is None:
            return {}
        return cm.physical_from_schema(json.loads(self.schema))


def _actions(store: ObjectStore, key: str) -> Iterable[dict[str, Any]]:
    for line in store.get(key).data.splitlines():
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except ValueError as e:
            raise CorruptMetadata(key, f"not valid JSON lines ({e})") from None


def read_log(store: ObjectStore) -> DeltaState:
    """Replay the log: from version 0, or from the newest checkpoint that the
    commits after it continue without a gap (a log :func:`reset_delta` trimmed)."""
    commits: dict[int, str] = {}
    checkpoints: dict[int, str] = {}
    for m in store.list(LOG_PREFIX):
        if (c := _COMMIT_RE.match(m.key)):
            commits[int(c.group(1))] = m.key
        elif (c := _CHECKPOINT_RE.match(m.key)):
            checkpoints[int(c.group(1))] = m.key
    state = DeltaState()
    if not commits and not checkpoints:
        return state
    last = max([*commits, *checkpoints])
    start = 0
    for cp in sorted(checkpoints, reverse=True):
        if all(v in commits for v in range(cp + 1, last + 1)):
            start = cp
            break
    else:
        if not checkpoints and min(commits) != 0:
            raise CorruptMetadata(commit_key(0), "Delta log has a gap: version 0 is missing")
    if start in checkpoints:
        state.checkpoint = start
        for action in read_checkpoint(store, checkpoints[start]):
            state.apply(action, start)
        if start in commits:  # its commitInfo names the caslake version
            for action in _actions(store, commits[start]):
                if "commitInfo" in action:
                    state.apply(action, start)
        state.next_version = start + 1
        first = start + 1
    else:
        first = 0
    for version in range(first, last + 1):
        key = commits.get(version)
        if key is None:
            raise CorruptMetadata(commit_key(version),
                                  f"Delta log has a gap: version {version} is missing")
        for action in _actions(store, key):
            state.apply(action, version)
        state.next_version = version + 1
    return state


# --- checkpoints (every N versions, and by reset_delta) -----------------------------

_STR_MAP = pa.map_(pa.string(), pa.string())
_DV_TYPE = pa.struct([("storageType", pa.string()), ("pathOrInlineDv", pa.string()),
                      ("offset", pa.int32()), ("sizeInBytes", pa.int32()),
                      ("cardinality", pa.int64())])
_CHECKPOINT_SCHEMA = pa.schema([
    ("txn", pa.struct([("appId", pa.string()), ("version", pa.int64()),
                       ("lastUpdated", pa.int64())])),
    ("add", pa.struct([("path", pa.string()), ("partitionValues", _STR_MAP),
                       ("size", pa.int64()), ("modificationTime", pa.int64()),
                       ("dataChange", pa.bool_()), ("stats", pa.string()),
                       ("tags", _STR_MAP), ("deletionVector", _DV_TYPE)])),
    ("remove", pa.struct([("path", pa.string()), ("deletionTimestamp", pa.int64()),
                          ("dataChange", pa.bool_()), ("extendedFileMetadata", pa.bool_()),
                          ("partitionValues", _STR_MAP), ("size", pa.int64()),
                          ("deletionVector", _DV_TYPE)])),
    ("metaData", pa.struct([("id", pa.string()), ("name", pa.string()),
                            ("description", pa.string()),
                            ("format", pa.struct([("provider", pa.string()),
                                                  ("options", _STR_MAP)])),
                            ("schemaString", pa.string()),
                            ("partitionColumns", pa.list_(pa.string())),
                            ("configuration", _STR_MAP), ("createdTime", pa.int64())])),
    ("protocol", pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32()),
                            ("readerFeatures", pa.list_(pa.string())),
                            ("writerFeatures", pa.list_(pa.string()))])),
])
_MAP_FIELDS = ("partitionValues", "tags", "options", "configuration")


def _to_row(value: Any, typ: pa.DataType) -> Any:
    """An action as pyarrow's ``from_pylist`` takes it (maps as key/value pairs)."""
    if value is None:
        return None
    if isinstance(typ, pa.MapType):
        return list(value.items())
    if pa.types.is_struct(typ):
        return {typ.field(i).name: _to_row(value.get(typ.field(i).name), typ.field(i).type)
                for i in range(typ.num_fields)}
    return value


def _from_row(value: Any, name: str = "") -> Any:
    if isinstance(value, dict):
        return {k: _from_row(v, k) for k, v in value.items() if v is not None}
    if name in _MAP_FIELDS and isinstance(value, list):
        return dict(value)
    return value


def write_checkpoint(actions: list[dict[str, Any]]) -> bytes:
    """A classic single-file Delta checkpoint: one row per action."""
    rows = []
    for a in actions:
        ((kind, body),) = a.items()
        row: dict[str, Any] = {f.name: None for f in _CHECKPOINT_SCHEMA}
        row[kind] = _to_row(body, _CHECKPOINT_SCHEMA.field(kind).type)
        rows.append(row)
    # Arrow's own buffers, not io.BytesIO: no Arrow thread calls back into Python
    # (verify.py says why that matters at interpreter shutdown).
    buf = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(rows, schema=_CHECKPOINT_SCHEMA), buf,
                   compression="zstd")
    return bytes(buf.getvalue())


def checkpoint_interval(properties: Mapping[str, str]) -> int:
    """The table property ``export.delta.checkpoint_interval``: a whole number of at
    least 1 (default 10).  Raises InvalidArgument naming the property."""
    raw = properties.get(CHECKPOINT_INTERVAL_PROPERTY)
    if raw is None:
        return DEFAULT_CHECKPOINT_INTERVAL
    if not raw.strip().isdigit() or int(raw) < 1:
        raise InvalidArgument(f"property {CHECKPOINT_INTERVAL_PROPERTY!r} must be a whole "
                              f"number of at least 1 (Delta versions between checkpoints), "
                              f"not {raw!r}")
    return int(raw)


def state_after(state: DeltaState, actions: list[dict[str, Any]], version: int) -> DeltaState:
    """``state`` with one more commit's ``actions`` applied (``state`` is left as is)."""
    after = DeltaState(adds=dict(state.adds), protocol=state.protocol,
                       metadata=state.metadata, schema=state.schema,
                       exported=dict(state.exported), next_version=version + 1)
    for action in actions:
        after.apply(action, version)
    return after


def put_checkpoint(writer: Writer, state: DeltaState, version: int) -> None:
    """Write the checkpoint of ``state`` (the table at Delta ``version``), then point
    ``_last_checkpoint`` at it.  The checkpoint is create-only: one already there
    (another exporter's, of the same version) is kept."""
    snapshot: list[dict[str, Any]] = [
        {"protocol": state.protocol}, {"metaData": state.metadata},
        *({"add": {**a, "dataChange": False}} for a in state.adds.values())]
    with contextlib.suppress(AlreadyExists):
        writer.put(checkpoint_key(version), write_checkpoint(snapshot))
    writer.put(LAST_CHECKPOINT_KEY, json.dumps({"version": version, "size": len(snapshot)})
               .encode(), overwrite=True)


def read_checkpoint(store: ObjectStore, key: str) -> list[dict[str, Any]]:
    try:
        table = pq.read_table(pa.BufferReader(store.get(key).data))
    except NotFound:
        raise
    except (OSError, ValueError, pa.ArrowException) as e:
        raise CorruptMetadata(key, f"not a readable Delta checkpoint ({e})") from None
    out = []
    for row in table.to_pylist():
        for kind in ("protocol", "metaData", "add", "remove", "txn"):
            if row.get(kind) is not None:
                out.append({kind: _from_row(row[kind])})
    return out


# --- the export ---------------------------------------------------------------------


class DeltaExport:
    def __init__(self, source: ExportSource) -> None:
        self.src = source
        self.schema = source.snapshot.manifest.schema
        delta_schema(self.schema)  # refuses unmappable types before any read or write
        self.ntz = uses_timestamp_ntz(self.schema)
        self.physical: dict[int, str] = {}
        self.columns: dict[str, cm.Columns] = {}
        # The Delta partition columns (empty: unpartitioned; delta_partitions.py).
        self.partitioning = source.snapshot.manifest.partitioning
        self.parts = dp.delta_partitions(self.partitioning, self.schema, source.files())

    def delta_path(self, key: str) -> str:
        """A data file's ``add.path``: its key, relative to the table root, or for a
        clone's file of another table, where it lies (the clone's alias key is
        caslake's own): its absolute URI, or for a local file the URI's absolute
        path (``/srv/t/data/...``), which deltalake and DuckDB's ``delta_scan``
        both read (DuckDB's ``delta_scan`` reads no ``file://`` or ``s3://`` path
        in the log)."""
        if self.src.is_own(key):
            return key
        location = self.src.location(key)
        return location[len("file://"):] if location.startswith("file:///") else location

    def plan(self, state: DeltaState) -> None:
        """The physical names for ``state``'s next commit: each live file's Parquet
        names (from the tag of its add, else its footer).  Raises ExportColumnsDiverged."""
        table = self.src.table
        for f in self.src.files():
            if f.path in self.columns:
                continue
            old = state.adds.get(self.delta_path(f.path))
            cols = cm.decode_columns(((old or {}).get("tags") or {}).get(cm.COLUMNS_TAG))
            self.columns[f.path] = cols if cols is not None else cm.file_columns(
                table.store, table.footers, f, self.schema)
        live = {f.path: self.columns[f.path] for f in self.src.files()}
        self.physical = cm.physical_names(self.schema, live, state.physical_names())

    def _stats(self, f: DataFile, has_dv: bool) -> str:
        """The add's statistics, keyed by physical names (a field inside a struct
        nested under its struct's physical names), for the primitive fields at the
        top level or in structs that this file stores."""
        leaves = stat_leaves(self.schema)
        mins: dict[str, Any] = {}
        maxs: dict[str, Any] = {}
        nulls: dict[str, Any] = {}
        stored = self.columns[f.path]
        for fid, s in f.stats.items():
            if fid not in leaves or fid not in stored:
                continue
            _, fld, along = leaves[fid]
            keys = [self.physical[i] for i in along]
            if "nulls" in s:
                _put(nulls, keys, s["nulls"])
            lo, hi = delta_stat(s.get("min"), fld), delta_stat(s.get("max"), fld)
            if lo is not None and hi is not None:
                _put(mins, keys, lo)
                _put(maxs, keys, hi)
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

    def schema_string(self) -> str:
        doc = delta_schema(self.schema, self.physical)
        doc["fields"] = [*doc["fields"], *(d.schema_field() for d in self.parts if d.generated)]
        return json.dumps(doc)

    def partition_values(self, f: DataFile) -> dict[str, str | None]:
        if not self.parts or self.partitioning is None:
            return {}
        return dp.partition_values(f, self.partitioning, self.parts, self.physical)

    def actions(self, state: DeltaState, writer: Writer, *, restate: bool = False,
                fresh: bool = False) -> list[dict[str, Any]]:
        """``restate``: re-add unchanged files too (statistics under new physical
        names); ``fresh``: also give every file with deletes a new deletion vector
        (nothing of the old deletion-vector files stays referenced)."""
        m = self.src.snapshot.manifest
        now = m.created_at_ms
        # Keyed by Delta path (add.path); tags and deletes are found by caslake key.
        files = {self.delta_path(f.path): f for f in self.src.files()}
        tags = {self.delta_path(p): t for p, t in self._delete_tags().items()}
        changed = [p for p in files
                   if p not in state.adds
                   or (state.adds[p].get("tags") or {}).get(DV_TAG) != tags.get(p)
                   or (fresh and p in tags)]
        positions = self.src.deleted_positions(files[p].path for p in changed if p in tags)
        dvs = self._write_dvs({self.delta_path(k): v for k, v in positions.items()}, writer)
        moved = set(changed)
        out: list[dict[str, Any]] = []
        for path, old in state.adds.items():
            if path not in files or path in moved:
                remove: dict[str, Any] = {
                    "path": path, "deletionTimestamp": now, "dataChange": True,
                    "extendedFileMetadata": True,
                    "partitionValues": old.get("partitionValues") or {},
                    "size": old.get("size")}
                if old.get("deletionVector"):
                    remove["deletionVector"] = old["deletionVector"]
                out.append({"remove": remove})
        readd = [p for p in files if p not in moved] if restate else []
        for path in [*changed, *readd]:
            f = files[path]
            dv = dvs.get(path) if path in moved else state.adds[path].get("deletionVector")
            file_tags = {cm.COLUMNS_TAG: cm.encode_columns(self.columns[f.path])}
            if path in tags:
                file_tags[DV_TAG] = tags[path]
            add: dict[str, Any] = {
                "path": path, "partitionValues": self.partition_values(f), "size": f.size,
                "modificationTime": now,
                "dataChange": path in moved, "stats": self._stats(f, dv is not None),
                "tags": file_tags}
            if dv is not None:
                add["deletionVector"] = dv
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

    def protocol(self, state: DeltaState) -> dict[str, Any] | None:
        """The protocol action, when the log's lacks a feature this export needs
        (features are never taken away)."""
        need = ["deletionVectors", "columnMapping", *(["timestampNtz"] if self.ntz else [])]
        writer_only = [dp.GENERATED_FEATURE] if any(d.generated for d in self.parts) else []
        old = state.protocol or {}
        reader = list(old.get("readerFeatures") or [])
        writer = list(old.get("writerFeatures") or [])
        if state.protocol is not None and all(f in reader and f in writer for f in need) \
                and all(f in writer for f in writer_only) \
                and old.get("minReaderVersion") == READER_VERSION \
                and old.get("minWriterVersion") == WRITER_VERSION:
            return None
        return {"minReaderVersion": READER_VERSION, "minWriterVersion": WRITER_VERSION,
                "readerFeatures": reader + [f for f in need if f not in reader],
                "writerFeatures": writer + [f for f in [*need, *writer_only]
                                            if f not in writer]}

    def metadata(self, state: DeltaState) -> dict[str, Any]:
        m = self.src.snapshot.manifest
        old_conf = (state.metadata or {}).get("configuration") or {}
        max_id = max(self.schema.last_field_id, *self.physical, int(old_conf.get(MAX_ID_KEY, 0)),
                     *(dp.GENERATED_ID_BASE + d.field.field_id for d in self.parts))
        return {
            "id": str(uuid.UUID(hex=hashlib.sha256(m.table_id.encode()).hexdigest()[:32])),
            "format": {"provider": "parquet", "options": {}},
            "schemaString": self.schema_string(),
            "partitionColumns": [d.name for d in self.parts],
            "configuration": {"delta.enableDeletionVectors": "true", MODE_KEY: cm.MODE,
                              MAX_ID_KEY: str(max_id)},
            "createdTime": m.created_at_ms}

    def commit_info(self) -> dict[str, Any]:
        m = self.src.snapshot.manifest
        return {"commitInfo": {
            "timestamp": m.created_at_ms, "operation": "CASLAKE EXPORT",
            "operationParameters": {"caslakeVersion": str(m.version),
                                    "caslakeOperation": m.operation},
            "caslakeVersion": m.version, "caslakeCommitId": m.commit_id,
            "engineInfo": "caslake", "isBlindAppend": False}}

    def commit_actions(self, state: DeltaState, writer: Writer, *, fresh: bool = False
                       ) -> list[dict[str, Any]]:
        """Every action of the next commit (``fresh``: restate the whole table, for
        a commit a checkpoint follows)."""
        self.plan(state)
        lines: list[dict[str, Any]] = [self.commit_info()]
        protocol = self.protocol(state)
        if protocol is not None or fresh:
            lines.append({"protocol": protocol or state.protocol})
        metadata = self.metadata(state)
        old_conf = (state.metadata or {}).get("configuration") or {}
        moved = state.physical_names() != {i: p for i, p in self.physical.items()
                                           if i in state.physical_names()} \
            or old_conf.get(MODE_KEY) != cm.MODE
        # Partition columns changed (the spec, or files that cannot be shown under it):
        # every file is re-added with its partitionValues under the new columns.
        reparted = (state.metadata or {}).get("partitionColumns", []) != \
            metadata["partitionColumns"]
        if fresh or moved or reparted or state.schema != metadata["schemaString"] \
                or old_conf != metadata["configuration"]:
            lines.append({"metaData": metadata})
        restate = fresh or (bool(state.adds) and (moved or reparted))
        lines.extend(self.actions(state, writer, restate=restate, fresh=fresh))
        return lines


def _put(tree: dict[str, Any], keys: list[str], value: Any) -> None:
    for k in keys[:-1]:
        tree = tree.setdefault(k, {})
    tree[keys[-1]] = value


def encode(actions: Iterable[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(a, separators=(",", ":")).encode() + b"\n" for a in actions)


def export_delta(table: TableHandle, version: int | None = None) -> ExportResult:
    """Append one Delta commit to ``<table>/_delta_log/`` making the Delta table show
    ``version`` (latest if None).  See the module docstring."""
    source = load_source(table, version)
    export = DeltaExport(source)  # checks the schema before any write
    interval = checkpoint_interval(source.snapshot.manifest.properties)
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
        version = state.next_version
        actions = export.commit_actions(state, writer)
        try:
            writer.publish(commit_key(version), encode(actions),
                           commit_id=source.snapshot.manifest.commit_id)
        except AlreadyExists:
            continue  # another exporter took this Delta version: replay and diff again
        done = _checkpoint_if_due(writer, state, actions, version, interval)
        return replace(writer.result("delta", source.version, table.store.uri),
                       checkpoint=done)
    raise CommitConflict(f"gave up after {ATTEMPTS} attempts: other exporters kept taking "
                         "the next Delta version")


def _checkpoint_if_due(writer: Writer, state: DeltaState, actions: list[dict[str, Any]],
                       version: int, interval: int) -> int | None:
    """Checkpoint Delta ``version`` (just published) when ``interval`` versions have
    passed since the checkpoint replay started from (or version 0).  The commit
    stands whatever happens here: a store failure leaves the checkpoint to the
    next export.  Returns the checkpoint's version, or None."""
    if version - (state.checkpoint or 0) < interval:
        return None
    try:
        put_checkpoint(writer, state_after(state, actions, version), version)
    except StoreError:
        return None
    return version


def reset_delta(table: TableHandle) -> ExportResult | None:
    """Rewrite the Delta export at ``table``'s root so that it describes the latest
    caslake version only (None when there is no Delta export): one commit
    restating the whole table (fresh deletion vectors), a checkpoint at it and
    ``_last_checkpoint``, then every older log entry, checkpoint and
    deletion-vector file deleted, oldest first.  At every step the log on storage
    is a valid Delta table (old, or old plus the restating commit, or the
    checkpoint and what follows it).  Raises ExportColumnsDiverged (nothing
    written) when the table cannot be shown."""
    store = table.store
    source = load_source(table, None)
    export = DeltaExport(source)
    old_dvs = {m.key for m in store.list(f"{DV_PREFIX}/")}
    for _ in range(ATTEMPTS):
        state = read_log(store)
        if state.next_version == 0:
            return None
        writer = Writer(store)
        version = state.next_version
        actions = export.commit_actions(state, writer, fresh=True)
        try:
            writer.publish(commit_key(version), encode(actions),
                           commit_id=source.snapshot.manifest.commit_id)
        except AlreadyExists:
            continue  # another exporter took this Delta version: restate on top of it
        break
    else:
        raise CommitConflict(f"gave up after {ATTEMPTS} attempts: other exporters kept "
                             "taking the next Delta version")
    put_checkpoint(writer, state_after(state, actions, version), version)
    doomed = []
    for m in store.list(LOG_PREFIX):
        c = _COMMIT_RE.match(m.key) or _CHECKPOINT_RE.match(m.key)
        if m.key != LAST_CHECKPOINT_KEY and (c is None or int(c.group(1)) < version):
            doomed.append(m.key)
    for key in sorted(doomed):  # oldest first: what is left stays a valid log suffix
        store.delete(key)
    live = read_log(store)  # what now references deletion vectors (ours, and any later)
    keep = {dv_key(a["deletionVector"]["pathOrInlineDv"]) for a in live.adds.values()
            if (a.get("deletionVector") or {}).get("storageType") == "u"}
    for key in sorted(old_dvs - keep):
        store.delete(key)
    return writer.result("delta", source.version, table.store.uri)
