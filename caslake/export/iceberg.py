"""Export a caslake snapshot as an Iceberg v2 table (metadata only, zero-copy).

Owns the objects under ``metadata/`` of the export root (the table root, or
``out``): ``v<N>.metadata.json`` for caslake version N, ``version-hint.text``,
manifest lists ``snap-<N>-<token>.avro``, manifests ``m-<group hash>-<token>.avro``
and position-delete files ``deletes/<tombstone uuid>-<token>.parquet``.  It
never writes under ``data/``, ``manifest/`` or ``tombstone/`` and never
changes an object a published export references (every new object gets a
fresh key), so a crash at any step leaves the previous export readable.

Layout choices (docs/interop.md):

* one data manifest per caslake file group (a segment, minus the files the
  version removed from it, or the inline list), named by a hash of its
  content: the next export reuses every manifest whose group is unchanged,
  so its cost grows with the change, not the table;
* one position-delete file per caslake tombstone reference, holding for each
  data file it names the file's merged deleted positions; reused while the
  reference lives;
* data files have data sequence number 1 and delete files the sequence
  number of the snapshot that first exported them, so every delete applies to
  its data file (caslake deletes only ever grow for a given file);
* snapshot id: from the commit id; sequence number: caslake version + 1;
  timestamp: the commit time.  Snapshots of versions gc expired are dropped.

Publication order: delete files, manifests, manifest list, metadata JSON,
then ``version-hint.text`` (one atomic PUT) -- the hint is what a directory
reader follows; ``v<N>.metadata.json`` is read by path.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from caslake.errors import CorruptMetadata, InvalidArgument, NotFound
from caslake.export import iceberg_avro as avro
from caslake.export.delta_columns import leaf_ids
from caslake.export.iceberg_partition import ExportPartitioning, ExportSpec
from caslake.export.result import ExportResult, Writer
from caslake.export.source import ExportSource, FileGroup, TableHandle, load_source
from caslake.export.types import iceberg_bound, iceberg_schema, stat_leaves
from caslake.format.keys import new_token
from caslake.format.manifest import DataFile, TombstoneRef
from caslake.store.base import ObjectStore
from caslake.store.options import StorageOptions

METADATA_PREFIX = "metadata/"
HINT_KEY = "metadata/version-hint.text"
FILE_PATH_ID, POS_ID = 2147483546, 2147483545  # reserved field ids of position deletes
_GROUP_RE = re.compile(r"^m-([0-9a-f]{32})-[0-9a-f]{8}\.avro$")
_DELETE_RE = re.compile(r"^(.+)-[0-9a-f]{8}\.parquet$")
_OPERATIONS = {"append": "append", "delete": "delete", "compact": "replace",
               "expire": "replace", "create": "append"}
DATA_SEQUENCE = 1
MAX_DELETE_MANIFESTS = 16
MANIFEST_ENTRIES = 1000  # stored entries of a caslake file group per data manifest


def metadata_key(version: int) -> str:
    return f"{METADATA_PREFIX}v{version}.metadata.json"


def snapshot_id(commit_id: str) -> int:
    """A positive 60-bit id derived from the caslake commit id."""
    return int(commit_id[:15], 16) or 1


def _basename(uri: str) -> str:
    return uri.rsplit("/", 1)[-1]


@dataclass
class _Previous:
    """The export ``version-hint.text`` points at, as this exporter needs it."""

    version: int
    metadata: dict[str, Any]
    data_manifests: dict[str, dict[str, Any]]  # group hash -> manifest_file record
    delete_manifests: list[tuple[dict[str, Any], list[dict[str, Any]]]]  # record, entries


def read_metadata(store: ObjectStore, key: str) -> dict[str, Any]:
    try:
        doc = json.loads(store.get(key).data)
    except NotFound:
        raise CorruptMetadata(key, "referenced by version-hint.text but missing") from None
    except ValueError as e:
        raise CorruptMetadata(key, f"not valid JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("format-version") != 2:
        raise CorruptMetadata(key, "not an Iceberg v2 table metadata file")
    return doc


def read_hint(store: ObjectStore) -> int | None:
    try:
        text = store.get(HINT_KEY).data.decode("ascii", "replace").strip()
    except NotFound:
        return None
    if not text.isdigit():
        raise CorruptMetadata(HINT_KEY, f"not a version number: {text[:40]!r}")
    return int(text)


def _key_of(uri: str, root: str) -> str:
    if not uri.startswith(root + "/"):
        raise CorruptMetadata(uri, f"export object outside the export root {root}")
    return uri[len(root) + 1:]


def _current_manifests(store: ObjectStore, root: str, meta: dict[str, Any]
                       ) -> list[dict[str, Any]]:
    current = meta.get("current-snapshot-id")
    for snap in meta.get("snapshots", []):
        if snap.get("snapshot-id") == current:
            key = _key_of(snap["manifest-list"], root)
            return avro.read_records(store.get(key).data, key)
    return []


def _read_previous(store: ObjectStore, root: str) -> _Previous | None:
    version = read_hint(store)
    if version is None:
        return None
    meta = read_metadata(store, metadata_key(version))
    data: dict[str, dict[str, Any]] = {}
    deletes = []
    for rec in _current_manifests(store, root, meta):
        if rec["content"] == avro.MANIFEST_CONTENT_DATA:
            m = _GROUP_RE.match(_basename(rec["manifest_path"]))
            if m:
                data[m.group(1)] = rec
        else:
            key = _key_of(rec["manifest_path"], root)
            deletes.append((rec, avro.read_records(store.get(key).data, key)))
    return _Previous(version, meta, data, deletes)


def _chunks(groups: tuple[FileGroup, ...]) -> list[list[DataFile]]:
    """Each caslake file group cut into slices of MANIFEST_ENTRIES stored entries
    (a segment never changes, so the slices are stable), minus removed files: a
    removal rewrites one slice, not the whole segment."""
    out = []
    for g in groups:
        for k in range(0, len(g.entries), MANIFEST_ENTRIES):
            live = [f for f in g.entries[k:k + MANIFEST_ENTRIES] if f.path not in g.removed]
            if live:
                out.append(live)
    return out


def _chunk_hash(files: list[DataFile], spec: ExportSpec) -> str:
    """By content only: an inline list that later becomes a segment keeps its hash.
    A partitioned spec is part of it (an export made before partitions were
    exported wrote those files unpartitioned; it is not reused)."""
    h = hashlib.sha256()
    if spec.partitioned:
        h.update(f"spec {spec.spec_id}".encode())
    for f in files:
        h.update(b"\n" + f.path.encode() + b"\0" + f.etag.encode())
    return h.hexdigest()[:32]


class IcebergExport:
    def __init__(self, source: ExportSource, store: ObjectStore, root: str) -> None:
        self.src = source
        self.store = store
        self.root = root.rstrip("/")
        self.writer = Writer(store)
        self.schema = source.snapshot.manifest.schema
        self.schema_json = iceberg_schema(self.schema)  # refuses unmappable types first
        self.stat_leaves = stat_leaves(self.schema)
        m = source.snapshot.manifest
        self.parts = ExportPartitioning(m.partitioning, self.schema)
        self._by_path: dict[str, DataFile] | None = None
        self.snapshot_id = snapshot_id(m.commit_id)
        self.sequence = m.version + 1

    def uri(self, key: str) -> str:
        return f"{self.root}/{key}"

    # --- data manifests ------------------------------------------------------------

    def _entry(self, data_file: dict[str, Any], sequence: int) -> dict[str, Any]:
        return {"status": avro.STATUS_ADDED, "snapshot_id": self.snapshot_id,
                "sequence_number": sequence, "file_sequence_number": sequence,
                "data_file": data_file}

    def _data_file(self, f: DataFile, column_sizes: dict[int, int]) -> dict[str, Any]:
        """The manifest's data_file record: metrics by field id for the primitive
        fields at the top level or in structs (value counts, null counts, bounds);
        column sizes for every leaf the file stores."""
        leaves = self.stat_leaves
        nulls = {fid: s["nulls"] for fid, s in f.stats.items()
                 if fid in leaves and "nulls" in s}
        lower, upper = {}, {}
        for fid, s in f.stats.items():
            if fid not in leaves:
                continue
            fld = leaves[fid][1]
            lo, hi = iceberg_bound(s.get("min"), fld), iceberg_bound(s.get("max"), fld)
            if lo is not None and hi is not None:
                lower[fid], upper[fid] = lo, hi
        spec, values = self.parts.of(f)
        return {
            "content": avro.CONTENT_DATA, "file_path": self.src.location(f.path),
            "file_format": "PARQUET", "partition": spec.record(values),
            "record_count": f.row_count,
            "file_size_in_bytes": f.size,
            "column_sizes": avro.int_map(column_sizes),
            "value_counts": avro.int_map({fid: f.row_count for fid in leaves}),
            "null_value_counts": avro.int_map(nulls), "nan_value_counts": None,
            "lower_bounds": avro.int_map(lower), "upper_bounds": avro.int_map(upper),
            "key_metadata": None, "split_offsets": None, "equality_ids": None,
            "sort_order_id": None, "referenced_data_file": None}

    def _column_sizes(self, files: list[DataFile]) -> list[dict[int, int]]:
        table = self.src.table
        fields = self.schema.all_by_id()

        def sizes(f: DataFile) -> dict[int, int]:
            md = table.footers.get(table.store, f).metadata
            # by the field id of each Parquet leaf: after a rename or a drop and
            # re-add, the file's column names are not the schema's
            ids = leaf_ids(md.schema.to_arrow_schema(), self.schema)
            out: dict[int, int] = {}
            for rg in range(md.num_row_groups):
                group = md.row_group(rg)
                for i in range(group.num_columns):
                    fid = ids[i] if i < len(ids) else None
                    if fid is not None and fid in fields:
                        out[fid] = out.get(fid, 0) + group.column(i).total_compressed_size
            return out

        if len(files) <= 1:
            return [sizes(f) for f in files]
        with ThreadPoolExecutor(max_workers=min(16, len(files))) as pool:
            return list(pool.map(sizes, files))

    def _write_group(self, files: list[DataFile], digest: str,
                     known: dict[str, dict[str, Any]], spec: ExportSpec) -> dict[str, Any]:
        fresh = [f for f in files if self.src.location(f.path) not in known]
        sizes = dict(zip((f.path for f in fresh), self._column_sizes(fresh), strict=True))
        entries = [self._entry(self._data_file(f, sizes[f.path]) if f.path in sizes
                               else known[self.src.location(f.path)], DATA_SEQUENCE)
                   for f in files]
        key = f"{METADATA_PREFIX}m-{digest}-{new_token()[:8]}.avro"
        data = self._write_manifest(entries, spec, "data")
        self.writer.put(key, data)
        return self._manifest_record(key, len(data), avro.MANIFEST_CONTENT_DATA,
                                     DATA_SEQUENCE, len(entries),
                                     sum(f.row_count for f in files), spec,
                                     spec.summaries(self.parts.of(f)[1] for f in files))

    def _write_manifest(self, entries: list[dict[str, Any]], spec: ExportSpec,
                        content: str) -> bytes:
        return avro.write_manifest(entries, schema_json=self.schema_json, content=content,
                                   spec_json=spec.to_json(), partition=spec.avro_fields())

    def _manifest_record(self, key: str, length: int, content: int, min_seq: int,
                         files: int, rows: int, spec: ExportSpec,
                         partitions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        return {"manifest_path": self.uri(key), "manifest_length": length,
                "partition_spec_id": spec.spec_id, "content": content,
                "sequence_number": self.sequence, "min_sequence_number": min_seq,
                "added_snapshot_id": self.snapshot_id, "added_files_count": files,
                "existing_files_count": 0, "deleted_files_count": 0,
                "added_rows_count": rows, "existing_rows_count": 0, "deleted_rows_count": 0,
                "partitions": partitions, "key_metadata": None}

    def data_manifests(self, prev: _Previous | None) -> tuple[list[dict[str, Any]], int]:
        groups = [(c, spec, _chunk_hash(c, spec))
                  for chunk in _chunks(self.src.groups) for spec, c in self._by_spec(chunk)]
        old = prev.data_manifests if prev else {}
        known = self._known_entries([r for d, r in old.items()
                                     if d not in {h for _, _, h in groups}])
        out, reused = [], 0
        for group, spec, digest in groups:
            if digest in old:
                out.append(old[digest])
                reused += 1
            else:
                out.append(self._write_group(group, digest, known, spec))
        return out, reused

    def _by_spec(self, files: list[DataFile]) -> list[tuple[ExportSpec, list[DataFile]]]:
        """``files`` split by the spec each is exported under (a manifest has one)."""
        out: dict[int, tuple[ExportSpec, list[DataFile]]] = {}
        for f in files:
            spec = self.parts.of(f)[0]
            out.setdefault(spec.spec_id, (spec, []))[1].append(f)
        return list(out.values())

    def _known_entries(self, records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """data_file records (by data file URI) of previous manifests that are not
        reused: a file moving between groups keeps its metrics without a footer read."""
        out: dict[str, dict[str, Any]] = {}
        for rec in records:
            key = _key_of(rec["manifest_path"], self.root)
            for e in avro.read_records(self.store.get(key).data, key):
                out[e["data_file"]["file_path"]] = e["data_file"]
        return out

    # --- deletes ---------------------------------------------------------------------

    def _delete_files(self, ref: TombstoneRef, tomb_id: str
                      ) -> list[tuple[ExportSpec, dict[str, Any]]]:
        """The position-delete files of one tombstone reference: one per partition
        (Iceberg applies a position delete only to data files of its own spec and
        partition), each with its manifest entry."""
        positions = self.src.deleted_positions(ref.files)
        if not positions:
            return []
        files = self._files_by_path()
        parts: dict[tuple[int, tuple[Any, ...]], list[str]] = {}
        for p in sorted(positions, key=self.src.location):
            spec, values = self.parts.of(files[p])
            parts.setdefault((spec.spec_id, values), []).append(p)
        return [self._delete_file({p: positions[p] for p in paths}, tomb_id,
                                  self.parts.spec(spec_id), values)
                for (spec_id, values), paths in parts.items()]

    def _files_by_path(self) -> dict[str, DataFile]:
        if self._by_path is None:
            self._by_path = {f.path: f for f in self.src.files()}
        return self._by_path

    def _delete_file(self, positions: dict[str, Any], tomb_id: str, spec: ExportSpec,
                     values: tuple[Any, ...]) -> tuple[ExportSpec, dict[str, Any]]:
        paths, pos = [], []
        for p in sorted(positions, key=self.src.location):
            bm = positions[p]
            paths.extend([self.src.location(p)] * len(bm))
            pos.extend(bm.to_array().tolist())
        table = pa.table({"file_path": pa.array(paths, pa.string()),
                          "pos": pa.array(pos, pa.int64())}, schema=_DELETE_SCHEMA)
        buf = io.BytesIO()
        pq.write_table(table, buf, compression="zstd")
        data = buf.getvalue()
        key = f"{METADATA_PREFIX}deletes/{tomb_id}-{new_token()[:8]}.parquet"
        self.writer.put(key, data)
        targets = sorted({self.src.location(p) for p in positions})
        lower = {FILE_PATH_ID: targets[0].encode(), POS_ID: min(pos).to_bytes(8, "little")}
        upper = {FILE_PATH_ID: targets[-1].encode(), POS_ID: max(pos).to_bytes(8, "little")}
        return spec, self._entry({
            "content": avro.CONTENT_POSITION_DELETES, "file_path": self.uri(key),
            "file_format": "PARQUET", "partition": spec.record(values),
            "record_count": len(pos),
            "file_size_in_bytes": len(data), "column_sizes": None,
            "value_counts": avro.int_map({FILE_PATH_ID: len(pos), POS_ID: len(pos)}),
            "null_value_counts": avro.int_map({FILE_PATH_ID: 0, POS_ID: 0}),
            "nan_value_counts": None,
            "lower_bounds": avro.int_map(lower), "upper_bounds": avro.int_map(upper),
            "key_metadata": None, "split_offsets": None, "equality_ids": None,
            "sort_order_id": None,
            "referenced_data_file": targets[0] if len(targets) == 1 else None},
            self.sequence)

    def delete_manifests(self, prev: _Previous | None) -> list[dict[str, Any]]:
        live = {_basename(r.path).removesuffix(".del"): r for r in self.src.tombstones}
        out: list[dict[str, Any]] = []
        # live entries of manifests that must be rewritten, with their spec id
        loose: list[tuple[int, dict[str, Any]]] = []
        have: set[str] = set()
        for rec, entries in prev.delete_manifests if prev else []:
            ids = [_delete_id(e) for e in entries]
            alive = [e for e, i in zip(entries, ids, strict=True) if i in live]
            have.update(i for i in ids if i in live)
            if len(alive) == len(entries):
                out.append(rec)
            else:
                loose.extend((rec["partition_spec_id"], e) for e in alive)
        new = [(spec.spec_id, e) for tid, ref in live.items() if tid not in have
               for spec, e in self._delete_files(ref, tid)]
        if len(out) + len({s for s, _ in loose + new}) > MAX_DELETE_MANIFESTS:
            for rec in out:  # fold every delete manifest into one per spec
                key = _key_of(rec["manifest_path"], self.root)
                loose.extend((rec["partition_spec_id"], e)
                             for e in avro.read_records(self.store.get(key).data, key))
            out = []
        by_spec: dict[int, list[dict[str, Any]]] = {}
        for spec_id, e in loose + new:
            by_spec.setdefault(spec_id, []).append(e)
        for spec_id, entries in by_spec.items():
            spec = self.parts.spec(spec_id)
            key = f"{METADATA_PREFIX}d-{new_token()}.avro"
            data = self._write_manifest(entries, spec, "deletes")
            self.writer.put(key, data)
            out.append(self._manifest_record(
                key, len(data), avro.MANIFEST_CONTENT_DELETES,
                min(e["sequence_number"] for e in entries), len(entries),
                sum(e["data_file"]["record_count"] for e in entries), spec))
        return out

    # --- metadata ----------------------------------------------------------------------

    def metadata(self, prev: _Previous | None, manifest_list: str) -> dict[str, Any]:
        m = self.src.snapshot.manifest
        old = prev.metadata if prev else {}
        kept = [s for s in old.get("snapshots", [])
                if int(s.get("summary", {}).get("caslake.version", -1)) >= m.oldest_version]
        totals = m.totals
        snap = {
            "snapshot-id": self.snapshot_id, "sequence-number": self.sequence,
            "timestamp-ms": m.created_at_ms, "manifest-list": manifest_list,
            "schema-id": self.schema.schema_id,
            "summary": {"operation": _OPERATIONS.get(m.operation, "overwrite"),
                        "caslake.version": str(m.version), "caslake.commit-id": m.commit_id,
                        "caslake.operation": m.operation,
                        "total-data-files": str(totals.files),
                        "total-records": str(totals.rows),
                        "total-position-deletes": str(totals.deleted_rows)}}
        if old.get("current-snapshot-id") is not None:
            snap["parent-snapshot-id"] = old["current-snapshot-id"]
        snapshots = [*kept, snap]
        schemas = [s for s in old.get("schemas", [])
                   if s.get("schema-id") != self.schema.schema_id] + [self.schema_json]
        return {
            "format-version": 2, "table-uuid": str(uuid.UUID(hex=_uuid_hex(m.table_id))),
            "location": self.root, "last-sequence-number": self.sequence,
            "last-updated-ms": m.created_at_ms,
            "last-column-id": max(self.schema.last_field_id,
                                  int(old.get("last-column-id", 0))),
            "current-schema-id": self.schema.schema_id, "schemas": schemas,
            **self.parts.metadata(), "default-sort-order-id": 0,
            "sort-orders": [{"order-id": 0, "fields": []}],
            "properties": {"caslake.table-id": m.table_id, "caslake.version": str(m.version),
                           "caslake.source": self.src.table.store.uri},
            "current-snapshot-id": self.snapshot_id,
            "refs": {"main": {"snapshot-id": self.snapshot_id, "type": "branch"}},
            "snapshots": snapshots,
            "snapshot-log": [{"timestamp-ms": s["timestamp-ms"], "snapshot-id": s["snapshot-id"]}
                             for s in snapshots],
            "metadata-log": [], "statistics": [], "partition-statistics": []}

    def run(self, prev: _Previous | None) -> ExportResult:
        data, reused = self.data_manifests(prev)
        deletes = self.delete_manifests(prev)
        parent = prev.metadata.get("current-snapshot-id") if prev else None
        list_key = f"{METADATA_PREFIX}snap-{self.src.version}-{new_token()}.avro"
        self.writer.put(list_key, avro.write_manifest_list(
            data + deletes, snapshot_id=self.snapshot_id, parent_id=parent,
            sequence_number=self.sequence))
        meta = self.metadata(prev, self.uri(list_key))
        meta_key = metadata_key(self.src.version)
        commit_id = self.src.snapshot.manifest.commit_id
        self.writer.publish(meta_key, json.dumps(meta, indent=1).encode(), overwrite=True,
                            commit_id=commit_id)
        self.writer.publish(HINT_KEY, str(self.src.version).encode(), overwrite=True,
                            commit_id=commit_id)
        return self.writer.result("iceberg", self.src.version, self.uri(meta_key),
                                  reused=reused, written=len(data) - reused)


_DELETE_SCHEMA = pa.schema([  # type: ignore[arg-type]
    pa.field("file_path", pa.string(), nullable=False,
             metadata={b"PARQUET:field_id": str(FILE_PATH_ID).encode()}),
    pa.field("pos", pa.int64(), nullable=False,
             metadata={b"PARQUET:field_id": str(POS_ID).encode()}),
])


def _delete_id(entry: dict[str, Any]) -> str:
    m = _DELETE_RE.match(_basename(entry["data_file"]["file_path"]))
    return m.group(1) if m else ""


def _uuid_hex(table_id: str) -> str:
    h = re.sub(r"[^0-9a-f]", "", table_id.lower())
    return h[:32] if len(h) >= 32 else hashlib.sha256(table_id.encode()).hexdigest()[:32]


def export_iceberg(table: TableHandle, version: int | None = None,
                   out: str | ObjectStore | None = None,
                   storage_options: StorageOptions | None = None) -> ExportResult:
    """Write Iceberg v2 metadata for ``version`` (latest if None) of ``table`` under
    ``<out or the table root>/metadata/``.  See the module docstring."""
    from caslake.store import open_store

    if out is None:
        store = table.store
    elif isinstance(out, str):
        store = open_store(out, storage_options)
    else:
        store = out
    source = load_source(table, version)
    export = IcebergExport(source, store, store.uri)  # checks the schema before any write
    prev = _read_previous(store, export.root)
    if prev is not None and prev.version >= source.version:
        if prev.version == source.version or any(
                s.get("summary", {}).get("caslake.version") == str(source.version)
                for s in prev.metadata.get("snapshots", [])):
            return ExportResult("iceberg", source.version, export.uri(metadata_key(prev.version)),
                                noop=True)
        raise InvalidArgument(f"version {source.version} is older than the latest Iceberg "
                              f"export (version {prev.version}) and not in its snapshot log; "
                              "exports only move forward")
    return export.run(prev)
