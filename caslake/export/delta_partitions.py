"""Partition columns of the Delta export: which fields of the table's partition spec
Delta can carry, and each file's ``partitionValues``.

Delta partitions by columns whose values every file holds once (``add.partitionValues``,
keyed by physical name under column mapping; readers take the column's values from
there, not from the file, and prune by them).  From the default spec:

* an **identity** field becomes its source column as a partition column;
* a transform Delta can express as a deterministic SQL expression becomes a
  **generated column** (writer feature ``generatedColumns``, the expression in the
  field's ``delta.generationExpression``) partitioning the table, exactly as Delta
  users partition by a date derived from a timestamp:

  - ``day(c)``   -> ``<c's UTC date>``                       (``date``),
  - ``month(c)`` -> ``DATE_FORMAT(<c's UTC date>, 'yyyy-MM')`` (``string``),
  - ``year(c)``  -> ``YEAR(<c's UTC date>)``                  (``integer``),
  - ``truncate(W, c)`` of a string -> ``SUBSTRING(c, 1, W)``, of an integer
    ``c - PMOD(c, W)`` (the column's type);

  where ``<c's UTC date>`` is ``CAST(c AS DATE)`` for a date or a timestamp without
  time zone, and ``DATE_FROM_UNIX_DATE(CAST(FLOOR(UNIX_MICROS(c) / 86400000000) AS
  INT))`` for a timestamp with one (independent of the session time zone);
* ``bucket`` and ``hour`` (and truncate of binary) have no such expression: left
  out.  Files still lie in one partition of the fields kept.

Only when every live file records a partition holding the kept fields (the table
has been written with them since its first file) is the export partitioned;
otherwise (an unpartitioned table, files written before the spec or under a spec
without those fields) it is unpartitioned, as before.  Pure code: no I/O.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa

from caslake.export.delta_columns import ID_KEY, PHYSICAL_KEY
from caslake.format.manifest import DataFile
from caslake.format.partition import (
    DAY,
    IDENTITY,
    MONTH,
    TRUNCATE,
    YEAR,
    PartitionField,
    Partitioning,
)
from caslake.format.schema import Field, TableSchema

GENERATED_KEY = "delta.generationExpression"
GENERATED_FEATURE = "generatedColumns"
# Delta column-mapping ids of generated columns: above any caslake field id.
GENERATED_ID_BASE = 1 << 24
_EPOCH = dt.date(1970, 1, 1)
_TICKS = {"s": 1, "ms": 1000, "us": 1_000_000, "ns": 1_000_000_000}


@dataclass(frozen=True)
class DeltaPartition:
    """One Delta partition column: its logical name, the spec field it shows, the
    source column, and for a generated column its Delta type and expression."""

    name: str
    field: PartitionField
    source: Field
    delta_type: str | None = None  # None: identity (the source column itself)
    expression: str | None = None

    @property
    def generated(self) -> bool:
        return self.expression is not None

    def schema_field(self) -> dict[str, Any]:
        """The generated column's entry in the Delta schemaString."""
        return {"name": self.name, "type": self.delta_type, "nullable": True,
                "metadata": {GENERATED_KEY: self.expression,
                             ID_KEY: GENERATED_ID_BASE + self.field.field_id,
                             PHYSICAL_KEY: self.name}}

    def value(self, stored: Any) -> str | None:
        """The partition value as Delta's partitionValues text."""
        if stored is None:
            return None
        kind = self.field.kind
        t = self.source.arrow_type
        if kind == DAY:
            return (_EPOCH + dt.timedelta(days=int(stored))).isoformat()
        if kind == MONTH:
            y, m = divmod(int(stored), 12)
            return f"{1970 + y:04d}-{m + 1:02d}"
        if kind == YEAR:
            return str(1970 + int(stored))
        if isinstance(stored, bool):
            return "true" if stored else "false"
        if pa.types.is_timestamp(t):
            ticks = _TICKS[t.unit]
            whole, part = divmod(int(stored), ticks)
            instant = dt.datetime(1970, 1, 1) + dt.timedelta(seconds=whole) + \
                dt.timedelta(microseconds=part * 1_000_000 // ticks)
            return instant.strftime("%Y-%m-%d %H:%M:%S.%f")
        if pa.types.is_decimal(t):
            return str(Decimal(str(stored)))
        return str(stored)


def _utc_date(c: str, t: pa.DataType) -> str | None:
    if pa.types.is_date32(t) or (pa.types.is_timestamp(t) and t.tz is None):
        return f"CAST({c} AS DATE)"
    if pa.types.is_timestamp(t):
        return f"DATE_FROM_UNIX_DATE(CAST(FLOOR(UNIX_MICROS({c}) / 86400000000) AS INT))"
    return None


def _generated(f: PartitionField, source: Field) -> tuple[str, str] | None:
    """(Delta type, expression) of a transform Delta can express, else None."""
    c = f"`{source.name.replace('`', '``')}`"
    t = source.arrow_type
    kind, n = f.kind, f.param
    date = _utc_date(c, t)
    if kind == DAY and date:
        return "date", date
    if kind == MONTH and date:
        return "string", f"DATE_FORMAT({date}, 'yyyy-MM')"
    if kind == YEAR and date:
        return "integer", f"YEAR({date})"
    if kind == TRUNCATE and (pa.types.is_string(t) or pa.types.is_large_string(t)):
        return "string", f"SUBSTRING({c}, 1, {n})"
    if kind == TRUNCATE and pa.types.is_integer(t):
        return ("long" if t.bit_width == 64 else "integer"), f"{c} - PMOD({c}, {n})"
    return None


def delta_partitions(p: Partitioning | None, schema: TableSchema,
                     files: Sequence[DataFile]) -> list[DeltaPartition]:
    """The Delta partition columns of an export of ``files`` (see the module
    docstring); empty for an unpartitioned export."""
    if p is None or not p.default.fields:
        return []
    columns = {f.id: f for f in schema.fields}
    taken = {f.name.lower() for f in schema.fields}
    out: list[DeltaPartition] = []
    for f in p.default.fields:
        source = columns.get(f.source_id)
        if source is None or source.nested:
            continue
        if f.kind == IDENTITY:
            if any(d.source.id == source.id and not d.generated for d in out):
                continue
            out.append(DeltaPartition(source.name, f, source))
            continue
        expressed = _generated(f, source)
        if expressed is None or f.name.lower() in taken:
            continue
        taken.add(f.name.lower())
        out.append(DeltaPartition(f.name, f, source, *expressed))
    if not out or not all(_holds(file, p, out) for file in files):
        return []
    return out


def _holds(file: DataFile, p: Partitioning, parts: Sequence[DeltaPartition]) -> bool:
    """Does ``file`` record one value of every partition field in ``parts``?"""
    if file.partition is None or not p.has(file.partition.spec_id):
        return False
    ids = {f.field_id for f in p.spec(file.partition.spec_id).fields}
    return all(d.field.field_id in ids for d in parts)


def partition_values(file: DataFile, p: Partitioning, parts: Sequence[DeltaPartition],
                     physical: dict[int, str]) -> dict[str, str | None]:
    """``add.partitionValues`` of ``file``: each partition column's physical name
    (a source column's, or the generated column's own) and its value text."""
    if not parts or file.partition is None:
        return {}
    spec = p.spec(file.partition.spec_id)
    stored = {f.field_id: v for f, v in zip(spec.fields, file.partition.values, strict=True)}
    return {(d.name if d.generated else physical.get(d.source.id, d.source.name)):
            d.value(stored[d.field.field_id]) for d in parts}
