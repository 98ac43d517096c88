"""Iceberg v2 manifest and manifest-list files: the spec's Avro schemas (with field
ids) and reading/writing them with fastavro.

Owns: the ``manifest_entry`` and ``manifest_file`` Avro schemas of the Iceberg
table spec (format version 2; a manifest's ``partition`` record has the fields of
its partition spec), encoding records through
fastavro, and decoding the files this exporter wrote earlier.  Never touches
storage: callers pass and receive bytes.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Mapping
from typing import Any

import fastavro

from caslake.errors import CorruptMetadata

STATUS_EXISTING, STATUS_ADDED, STATUS_DELETED = 0, 1, 2
CONTENT_DATA, CONTENT_POSITION_DELETES = 0, 1
MANIFEST_CONTENT_DATA, MANIFEST_CONTENT_DELETES = 0, 1


def _opt(name: str, typ: Any, field_id: int) -> dict[str, Any]:
    return {"name": name, "type": ["null", typ], "default": None, "field-id": field_id}


def _req(name: str, typ: Any, field_id: int) -> dict[str, Any]:
    return {"name": name, "type": typ, "field-id": field_id}


def _int_map(name: str, field_id: int, key_id: int, value_id: int, value: str
             ) -> dict[str, Any]:
    """Iceberg writes map<int, V> as an Avro array of key/value records."""
    return _opt(name, {"type": "array", "logicalType": "map", "items": {
        "type": "record", "name": f"k{key_id}_v{value_id}",
        "fields": [_req("key", "int", key_id), _req("value", value, value_id)]}}, field_id)


def _data_file(partition: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "type": "record", "name": "r2", "fields": [
            _req("content", "int", 134),
            _req("file_path", "string", 100),
            _req("file_format", "string", 101),
            _req("partition", {"type": "record", "name": "r102", "fields": partition}, 102),
            _req("record_count", "long", 103),
            _req("file_size_in_bytes", "long", 104),
            _int_map("column_sizes", 108, 117, 118, "long"),
            _int_map("value_counts", 109, 119, 120, "long"),
            _int_map("null_value_counts", 110, 121, 122, "long"),
            _int_map("nan_value_counts", 137, 138, 139, "long"),
            _int_map("lower_bounds", 125, 126, 127, "bytes"),
            _int_map("upper_bounds", 128, 129, 130, "bytes"),
            _opt("key_metadata", "bytes", 131),
            _opt("split_offsets", {"type": "array", "items": "long", "element-id": 133}, 132),
            _opt("equality_ids", {"type": "array", "items": "int", "element-id": 136}, 135),
            _opt("sort_order_id", "int", 140),
            _opt("referenced_data_file", "string", 143),
        ]}


def manifest_entry_schema(partition: list[dict[str, Any]]) -> Any:
    """The ``manifest_entry`` Avro schema whose ``partition`` record has ``partition``
    (Avro fields with ``field-id``s; empty for an unpartitioned spec)."""
    return fastavro.parse_schema({
        "type": "record", "name": "manifest_entry", "fields": [
            _req("status", "int", 0),
            _opt("snapshot_id", "long", 1),
            _opt("sequence_number", "long", 3),
            _opt("file_sequence_number", "long", 4),
            _req("data_file", _data_file(partition), 2),
        ]})


MANIFEST_ENTRY_SCHEMA = manifest_entry_schema([])

MANIFEST_FILE_SCHEMA = fastavro.parse_schema({
    "type": "record", "name": "manifest_file", "fields": [
        _req("manifest_path", "string", 500),
        _req("manifest_length", "long", 501),
        _req("partition_spec_id", "int", 502),
        _req("content", "int", 517),
        _req("sequence_number", "long", 515),
        _req("min_sequence_number", "long", 516),
        _req("added_snapshot_id", "long", 503),
        _req("added_files_count", "int", 504),
        _req("existing_files_count", "int", 505),
        _req("deleted_files_count", "int", 506),
        _req("added_rows_count", "long", 512),
        _req("existing_rows_count", "long", 513),
        _req("deleted_rows_count", "long", 514),
        _opt("partitions", {"type": "array", "element-id": 508, "items": {
            "type": "record", "name": "r508", "fields": [
                _req("contains_null", "boolean", 509),
                _opt("contains_nan", "boolean", 518),
                _opt("lower_bound", "bytes", 510),
                _opt("upper_bound", "bytes", 511)]}}, 507),
        _opt("key_metadata", "bytes", 519),
    ]})


def int_map(values: Mapping[int, Any]) -> list[dict[str, Any]] | None:
    """A map<int, V> in Iceberg's Avro form (None when empty)."""
    if not values:
        return None
    return [{"key": k, "value": v} for k, v in sorted(values.items())]


def write_manifest(entries: Iterable[dict[str, Any]], *, schema_json: dict[str, Any],
                   content: str, spec_json: dict[str, Any] | None = None,
                   partition: list[dict[str, Any]] | None = None) -> bytes:
    """A manifest file: ``content`` is "data" or "deletes"; ``spec_json`` the
    partition spec of every entry (default: spec 0 without fields) and ``partition``
    its Avro partition record fields."""
    spec_json = spec_json or {"spec-id": 0, "fields": []}
    meta = {"schema": json.dumps(schema_json), "schema-id": str(schema_json["schema-id"]),
            "partition-spec": json.dumps(spec_json["fields"]),
            "partition-spec-id": str(spec_json["spec-id"]), "format-version": "2",
            "content": content}
    schema = manifest_entry_schema(partition) if partition else MANIFEST_ENTRY_SCHEMA
    return _write(schema, entries, meta)


def write_manifest_list(manifests: Iterable[dict[str, Any]], *, snapshot_id: int,
                        parent_id: int | None, sequence_number: int) -> bytes:
    meta = {"snapshot-id": str(snapshot_id), "sequence-number": str(sequence_number),
            "format-version": "2",
            "parent-snapshot-id": "null" if parent_id is None else str(parent_id)}
    return _write(MANIFEST_FILE_SCHEMA, manifests, meta)


def _write(schema: Any, records: Iterable[dict[str, Any]], meta: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    fastavro.writer(buf, schema, list(records), codec="deflate", metadata=meta)
    return buf.getvalue()


def read_records(data: bytes, key: str) -> list[dict[str, Any]]:
    """The records of an Avro file this exporter wrote; damage is CorruptMetadata."""
    try:
        return [dict(r) for r in fastavro.reader(io.BytesIO(data))]  # type: ignore[arg-type]
    except (ValueError, EOFError, KeyError, TypeError, OSError) as e:
        raise CorruptMetadata(key, f"unreadable Avro file ({e})") from None
