"""The partition specs of an Iceberg export (docs/interop.md; docs/format.md,
"Partitioning").

Owns: which Iceberg spec each caslake data file is exported under and its
partition record, the specs' JSON for the table metadata, their Avro partition
record for manifests, and the manifest list's partition summaries.

* Each caslake spec whose source columns are all in the exported schema becomes
  the Iceberg spec of the same id, fields, names and transforms (caslake's
  transforms and their values are Iceberg's).  Value types: identity and
  truncate keep the source's type, ``day`` is ``date``, the others ``int``.
* Files without a recorded partition (and files of a spec naming a dropped
  column) go under a spec without fields: spec 0 when it has none (a table that
  was never partitioned, or partitioned later), else :data:`EMPTY_SPEC_ID`.
  Both choices hold for the table's whole life, so an earlier export's
  manifests stay valid.

Never touches storage.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from caslake.export.types import (
    avro_partition_type,
    iceberg_partition_type,
    iceberg_partition_value,
    iceberg_value_bound,
)
from caslake.format.manifest import DataFile
from caslake.format.partition import FIRST_PARTITION_FIELD_ID, Partitioning, PartitionSpec
from caslake.format.schema import Field, TableSchema

EMPTY_SPEC_ID = 1 << 30  # an id no caslake spec reaches: the unpartitioned files' spec
_AVRO_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def avro_name(name: str) -> str:
    """``name`` as an Avro field name, escaped as Iceberg does (``_x2D`` for ``-``)."""
    if _AVRO_NAME.match(name):
        return name
    out = [c if c.isascii() and (c.isalnum() or c == "_") else f"_x{ord(c):X}" for c in name]
    if out and out[0][0].isdigit():
        out[0] = "_" + out[0]
    return "".join(out) or "_"


@dataclass(frozen=True)
class ExportSpec:
    """One Iceberg partition spec of the export."""

    spec_id: int
    spec: PartitionSpec
    sources: tuple[Field, ...]
    types: tuple[str, ...]  # Iceberg result type of each field

    @property
    def partitioned(self) -> bool:
        return bool(self.spec.fields)

    def to_json(self) -> dict[str, Any]:
        return {"spec-id": self.spec_id,
                "fields": [{"name": f.name, "transform": f.transform,
                            "source-id": f.source_id, "field-id": f.field_id}
                           for f in self.spec.fields]}

    def avro_fields(self) -> list[dict[str, Any]]:
        """The fields of the manifest's ``partition`` record (field id = partition id)."""
        return [{"name": avro_name(f.name), "type": ["null", avro_partition_type(t, f.field_id)],
                 "default": None, "field-id": f.field_id}
                for f, t in zip(self.spec.fields, self.types, strict=True)]

    def values(self, raw: Sequence[Any]) -> tuple[Any, ...]:
        """A file's caslake partition values as Iceberg values (Avro's Python form)."""
        return tuple(iceberg_partition_value(f.kind, v, s)
                     for f, v, s in zip(self.spec.fields, raw, self.sources, strict=True))

    def record(self, values: Sequence[Any]) -> dict[str, Any]:
        return {avro_name(f.name): v for f, v in zip(self.spec.fields, values, strict=True)}

    def summaries(self, files: Iterable[tuple[Any, ...]]) -> list[dict[str, Any]] | None:
        """The manifest list's ``partitions``: per field whether a NULL occurs and the
        lowest and highest value, over the manifest's files' values."""
        if not self.partitioned:
            return None
        rows = list(files)
        out = []
        for i, t in enumerate(self.types):
            present = [r[i] for r in rows if r[i] is not None]
            lo = iceberg_value_bound(t, min(present)) if present else None
            hi = iceberg_value_bound(t, max(present)) if present else None
            out.append({"contains_null": len(present) < len(rows), "contains_nan": False,
                        "lower_bound": lo, "upper_bound": hi})
        return out


class ExportPartitioning:
    """Every spec of the export, and the spec each data file goes under."""

    def __init__(self, p: Partitioning | None, schema: TableSchema) -> None:
        columns = {f.id: f for f in schema.fields}
        self.specs: dict[int, ExportSpec] = {}
        for s in (p.specs if p is not None else (PartitionSpec(0, ()),)):
            if all(f.source_id in columns for f in s.fields):
                sources = tuple(columns[f.source_id] for f in s.fields)
                types = tuple(iceberg_partition_type(f.kind, c)
                              for f, c in zip(s.fields, sources, strict=True))
                self.specs[s.spec_id] = ExportSpec(s.spec_id, s, sources, types)
        if 0 in self.specs and not self.specs[0].partitioned:
            self.empty_id = 0
        else:
            self.empty_id = EMPTY_SPEC_ID
            self.specs[EMPTY_SPEC_ID] = ExportSpec(EMPTY_SPEC_ID, PartitionSpec(EMPTY_SPEC_ID),
                                                   (), ())
        self.default_id = p.default_spec_id if p is not None else 0
        self.last_id = p.last_partition_id if p is not None else FIRST_PARTITION_FIELD_ID - 1

    def of(self, f: DataFile) -> tuple[ExportSpec, tuple[Any, ...]]:
        """The spec ``f`` is exported under and its partition values there."""
        part = f.partition
        spec = self.specs.get(part.spec_id) if part is not None else None
        if part is None or spec is None or not spec.partitioned:
            return self.specs[self.empty_id], ()
        return spec, spec.values(part.values)

    def spec(self, spec_id: int) -> ExportSpec:
        return self.specs[spec_id]

    def metadata(self) -> dict[str, Any]:
        """The table metadata's ``default-spec-id``, ``partition-specs`` and
        ``last-partition-id``."""
        return {"default-spec-id": self.default_id,
                "partition-specs": [s.to_json() for _, s in sorted(self.specs.items())],
                "last-partition-id": self.last_id}
