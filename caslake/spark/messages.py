"""What Spark tasks and the driver pass each other as JSON: table schemas and
data-file entries of commit messages and read partitions.

Owns only the decoding back into caslake's types; it never reads or writes
storage and imports no other ``caslake.spark`` module, so the reader
(``source``) and the writers (``write``, ``stream``, ``dml``) can all use it
without importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from caslake.format.manifest import DataFile, parse_data_file, parse_table_schema
from caslake.format.schema import TableSchema


def table_schema_from_json(obj: Mapping[str, Any]) -> TableSchema:
    """Parse a ``TableSchema.to_json()`` dict back, validated by the manifest codec
    (the one schema parser: a bad message is ``CorruptMetadata``, never a KeyError)."""
    return parse_table_schema(dict(obj), source="spark commit message")


def data_file_from_json(obj: Mapping[str, Any], schema: TableSchema) -> DataFile:
    """Parse a ``DataFile.to_json()`` dict back, validated by the manifest codec."""
    return parse_data_file(dict(obj), schema, source="spark commit message")
