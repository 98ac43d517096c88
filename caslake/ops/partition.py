"""Partition specs on a table: ``update_spec`` (a new default spec, one commit),
``overwrite(data, where=...)`` (Delta's replaceWhere: the rows matching a predicate
replaced by ``data`` in one commit), and the plan of a dynamic partition overwrite
(:func:`plan_partition_replace`: every live row in the partitions the new files
fill, as a delete plan).

Owns the commits; the specs, transforms and values are
:mod:`caslake.format.partition`'s, the splitting of writes :mod:`caslake.ops.write`'s,
deletes :mod:`caslake.ops.delete`'s.  docs/protocol.md, "Hidden partitioning".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

from caslake.core import (
    POSITION,
    Changes,
    CommitResult,
    FooterCache,
    MetadataIO,
    PredicateCondition,
    Scan,
    SchemaConformer,
    Snapshot,
    SnapshotSubset,
    TableContext,
    TombstoneCache,
    run_operation,
)
from caslake.errors import ConcurrentModification, RowsOutsideWhere
from caslake.expr import Expr, compile_where, filter_table
from caslake.format.manifest import DataFile, Manifest
from caslake.format.partition import (
    PartitionSpec,
    json_values,
    new_partitioning,
    parse_partition_by,
    transform_array,
    unpartitioned,
    write_spec,
)
from caslake.format.schema import TableSchema
from caslake.ops import refs
from caslake.ops.delete import DeletePlan, check_where
from caslake.ops.transaction import Transaction
from caslake.ops.write import as_reader, write_data_files

SPEC_OPERATION = "partition_spec"


def default_spec(manifest: Manifest) -> PartitionSpec | None:
    """The spec new files of this version are written with (None: unpartitioned)."""
    return write_spec(manifest.partitioning)


@dataclass(frozen=True)
class SpecUnchanged:
    """The requirement of ``update_spec``: the base's default spec is the one planned
    against (a concurrent spec change is ConcurrentModification)."""

    spec_id: int

    def validate(self, base: Snapshot, io: Any) -> None:
        p = base.manifest.partitioning
        if (p.default_spec_id if p is not None else -1) != self.spec_id:
            raise ConcurrentModification(
                "the table's partition spec changed concurrently; plan the change again")


def update_spec(ctx: TableContext, partition_by: object) -> CommitResult:
    """One ``partition_spec`` commit making ``partition_by`` the default spec; files
    written before keep their spec.  Bad items are InvalidPartitionSpec."""
    started = ctx.meter()
    base = ctx.refresh()
    schema = base.manifest.schema
    fields = parse_partition_by(partition_by, schema)
    current = base.manifest.partitioning
    planned_id = current.default_spec_id if current is not None else -1
    new = (current or unpartitioned()).evolve(fields, schema)
    refs.ensure_format(ctx.io)  # readers must match columns by field id

    def prepare(b: Snapshot) -> Changes:
        return Changes(SPEC_OPERATION, partitioning=new,
                       params={"spec_id": str(new.default_spec_id),
                               "partition_by": ", ".join(new.default.describe(schema))})

    return run_operation(ctx, SPEC_OPERATION, prepare,
                         requirements=(SpecUnchanged(planned_id),), started=started)


def create_partitioning(partition_by: object, schema: TableSchema) -> Any:
    """The partitioning of a table created with ``partition_by`` (None for none)."""
    if partition_by is None:
        return None
    return new_partitioning(parse_partition_by(partition_by, schema), schema)


def check_inside(data: pa.Table, where: str | Expr, schema: pa.Schema) -> None:
    """Every row of ``data`` satisfies ``where`` (TRUE), else RowsOutsideWhere."""
    bound = compile_where(where, schema)
    if bound is None or data.num_rows == 0:
        return
    numbered = data.append_column(_ROW, pa.array(np.arange(data.num_rows), pa.int64()))
    kept = filter_table(numbered, bound).column(_ROW).to_numpy()
    bad = data.num_rows - len(kept)
    if bad:
        missing = np.setdiff1d(np.arange(data.num_rows), kept, assume_unique=True)
        first = data.slice(int(missing[0]), 1).to_pylist()[0]
        raise RowsOutsideWhere(
            f"overwrite(where={str(where)!r}): {bad} row(s) of the data do not match the "
            f"where predicate (it is FALSE or NULL for them), e.g. {first!r}; only rows the "
            "predicate matches can replace the rows it matches", rows=bad, first=first,
            row=int(missing[0]) + 1, where=str(where))


_ROW = "__caslake_row__"


def overwrite_where(ctx: TableContext, data: Any, where: object, *,
                    params: dict[str, str] | None = None) -> CommitResult:
    """Replace the live rows matching ``where`` by ``data`` in one ``overwrite`` commit
    (a delete of the matching rows, with delete's rebase rules, and an append)."""
    where = check_where(where)
    snap = ctx.refresh()
    schema = snap.manifest.schema
    arrow_schema = schema.to_arrow()
    table = as_reader(data, arrow_schema).read_all()
    conformed = pa.Table.from_batches(
        [SchemaConformer(arrow_schema, table.schema)(b) for b in table.to_batches()],
        schema=arrow_schema)
    check_inside(conformed, where, arrow_schema)
    tx = Transaction(ctx)
    files = write_data_files(ctx.store, conformed.to_reader(), schema, ctx.write_options,
                             spec=default_spec(snap.manifest))
    tx.stage("overwrite", files=files, conditions=(PredicateCondition(where),),
             params={"where": str(where), **(params or {})})
    return tx.commit()


def replaced_partitions(files: Sequence[DataFile], spec: PartitionSpec
                        ) -> set[tuple[Any, ...]]:
    """The partitions (values under ``spec``) that new ``files`` hold rows of."""
    return {tuple(f.partition.values) for f in files
            if f.partition is not None and f.partition.spec_id == spec.spec_id and f.row_count}


def plan_partition_replace(io: MetadataIO, footers: FooterCache, tombstones: TombstoneCache,
                           base: Snapshot, spec: PartitionSpec,
                           partitions: set[tuple[Any, ...]]) -> DeletePlan:
    """A dynamic partition overwrite's delete: every live row of ``base`` whose
    partition under ``spec`` is one of ``partitions``.  A file written with ``spec``
    is in one partition: dropped whole (unread) when it is one of them.  The rows of
    other files (unpartitioned, or of an older spec) are read -- only ``spec``'s
    source columns -- and those in the partitions are hidden."""
    plan = DeletePlan(base)
    if not partitions:
        return plan
    others: list[DataFile] = []
    for f in io.live_files(base):
        if f.partition is not None and f.partition.spec_id == spec.spec_id:
            if tuple(f.partition.values) in partitions:
                plan.drop_whole(f)
        else:
            others.append(f)
    if not others:
        return plan
    schema = base.manifest.schema
    by_id = {f.id: f.name for f in schema.fields}
    columns = sorted({by_id[f.source_id] for f in spec.fields})
    scan = Scan(io, footers, SnapshotSubset.of(base, others), columns, None, tombstones)
    for task, rows in scan.matching_rows():
        if not rows.num_rows:
            continue
        values = zip(*(json_values(transform_array(f.kind, f.param,
                                                   rows.column(by_id[f.source_id])))
                       for f in spec.fields), strict=True)
        hit = np.fromiter((v in partitions for v in values), dtype=bool, count=rows.num_rows)
        if hit.any():
            positions = rows.column(POSITION).to_numpy()[hit]
            plan.add(task, BitMap(positions.astype(np.uint32)))
    return plan


__all__ = ["RowsOutsideWhere", "create_partitioning", "default_spec", "overwrite_where",
           "plan_partition_replace", "replaced_partitions", "update_spec"]
