"""How a caslake read is cut into Spark partitions, and how a partition is read.

Shared by the batch source (:mod:`caslake.spark.source`) and the streaming source
(:mod:`caslake.spark.stream_source`): the read options, Spark's file-source
sizing rules (a partition holds at most a split of column-chunk bytes), and the
executor side that reads one partition's files and row groups.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import cast

import pyarrow as pa
from pyspark.sql.datasource import (
    InputPartition,
)

from caslake.core import (
    FileTask,
    FooterCache,
    MetadataIO,
    Scan,
    Snapshot,
    SnapshotSubset,
    external_uris,
    route,
)
from caslake.errors import (
    InvalidArgument,
)
from caslake.format.manifest import DataFile
from caslake.format.schema import TableSchema
from caslake.store import open_store
from caslake.store.base import ObjectStore
from caslake.store.options import StorageOptions

log = logging.getLogger(__name__)

# Read planning follows Spark's own file sources (FilePartition): a partition holds
# at most ``split`` bytes of column chunks, where ``split`` is the data's bytes
# spread over the cores (so every core gets work) but at most MAX_SPLIT_BYTES
# (Spark's spark.sql.files.maxPartitionBytes) and at least OPEN_COST_BYTES (its
# spark.sql.files.openCostInBytes, also charged per piece so that many small files
# pack into few tasks: a task's fixed cost is far above a small file's read).  A
# large file's row groups are cut into contiguous runs of about ``split`` bytes, so
# it is read by several tasks at once.  Batches go to Spark in slices of at most
# READ_BATCH_ROWS rows, so the JVM never holds a whole decoded unit (up to ~64 MiB
# compressed) as one Arrow batch.
MAX_SPLIT_BYTES = 128 * 1024 * 1024
OPEN_COST_BYTES = 4 * 1024 * 1024
READ_BATCH_ROWS = 65_536
MIN_PARTITIONS = "minPartitions"  # read option: the cores to spread a read over


def default_parallelism() -> int:
    """The cores this process may run on: the default number of read partitions
    (Spark's ``defaultParallelism`` in local mode; the planner cannot ask Spark)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


# --- options ----------------------------------------------------------------------


def storage_options_from(options: Mapping[str, str]) -> StorageOptions:
    """``storage_options`` (a JSON object) merged with every ``storage.<key>`` option."""
    out: dict[str, str] = {}
    raw = options.get("storage_options")
    if raw:
        try:
            parsed = json.loads(raw)
        except ValueError as e:
            raise InvalidArgument(f"option storage_options is not valid JSON ({e})") from None
        if not isinstance(parsed, dict):
            raise InvalidArgument("option storage_options must be a JSON object")
        out.update({str(k): str(v) for k, v in parsed.items()})
    for k, v in options.items():
        if k.lower().startswith("storage.") and len(k) > len("storage."):
            out[k[len("storage."):]] = str(v)
    return cast(StorageOptions, out)  # unknown keys are refused by the store


@dataclass(frozen=True)
class ReadOptions:
    uri: str
    storage_options: StorageOptions
    version: int | None = None
    timestamp: str | int | None = None
    columns: list[str] | None = None
    min_partitions: int | None = None  # None: default_parallelism() of the planner
    where: str | None = None  # the DataFrame's own predicate (SQL text)

    @staticmethod
    def parse(options: Mapping[str, str]) -> ReadOptions:
        uri = options.get("path")
        if not uri:
            raise InvalidArgument("caslake needs the table URI: .load(uri) or .option('path', uri)")
        version: int | None = None
        if options.get("version") not in (None, ""):
            try:
                version = int(options["version"])
            except ValueError:
                raise InvalidArgument(f"option version must be an integer, not "
                                      f"{options['version']!r}") from None
        ts: str | int | None = options.get("timestamp") or None
        if isinstance(ts, str) and ts.strip().lstrip("-").isdigit():
            ts = int(ts)
        if version is not None and ts is not None:
            raise InvalidArgument("give either option version or option timestamp, not both")
        columns = None
        if options.get("columns"):
            columns = [c.strip() for c in options["columns"].split(",") if c.strip()]
        min_partitions: int | None = None
        raw = options.get(MIN_PARTITIONS)
        if raw not in (None, ""):
            try:
                min_partitions = int(str(raw))
            except ValueError:
                min_partitions = 0
            if min_partitions < 1:
                raise InvalidArgument(f"option {MIN_PARTITIONS} must be an integer >= 1, "
                                      f"not {raw!r}")
        where = (options.get("where") or "").strip() or None
        return ReadOptions(uri, storage_options_from(options), version, ts, columns,
                           min_partitions, where)


# --- reading ----------------------------------------------------------------------


@dataclass
class CaslakePartition(InputPartition):
    """Row groups of one or more planned data files of the pinned snapshot (picklable).

    Examples:
        >>> df = spark.read.format('caslake').load('/data/events')  # doctest: +SKIP
        >>> df.rdd.getNumPartitions()  # one CaslakePartition per task  # doctest: +SKIP
    """

    uri: str
    storage_options: StorageOptions
    subset: SnapshotSubset  # its files, their tombstones, the row groups to read
    columns: list[str]
    where: str | None = None  # the read option ``where``: the DataFrame's own predicate
    # A clone's referenced tables (alias -> URI): its files and tombstones there are
    # read through the same routing as Table.open (caslake.core.routing).
    external: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(self.path)

    @property
    def path(self) -> str:
        """The first file's path (the partition's name in Spark's plan)."""
        return self.subset.files[0].path

    @property
    def paths(self) -> list[str]:
        return [f.path for f in self.subset.files]

    @property
    def row_groups(self) -> dict[str, list[int]]:
        """The row groups to read, by file path."""
        return {p: sorted(self.subset.row_groups.get(p, ())) for p in self.paths}


def split_row_groups(groups: Sequence[int], nbytes: int, target: int) -> list[list[int]]:
    """A file's surviving row groups (``nbytes`` of column chunks to read) cut into
    contiguous runs of about ``target`` bytes, as even in length as possible: one
    piece of a Spark partition each, so one large file is read by several tasks."""
    if not groups:
        return []
    n = max(1, min(len(groups), -(-nbytes // max(target, 1))))
    size, extra = divmod(len(groups), n)
    out: list[list[int]] = []
    i = 0
    for k in range(n):
        j = i + size + (1 if k < extra else 0)
        out.append(list(groups[i:j]))
        i = j
    return out


def split_bytes(total: int, pieces: int, cores: int, max_bytes: int = MAX_SPLIT_BYTES,
                open_cost: int = OPEN_COST_BYTES) -> int:
    """The bytes a read partition may hold (Spark's ``FilePartition.maxSplitBytes``):
    the data (``total`` bytes in ``pieces`` files, each charged ``open_cost``) spread
    over ``cores``, within ``[open_cost, max_bytes]``."""
    per_core = -(-(total + pieces * open_cost) // max(cores, 1))
    return min(max_bytes, max(open_cost, per_core))


def plan_partitions(tasks: Sequence[FileTask], cores: int, max_bytes: int = MAX_SPLIT_BYTES,
                    open_cost: int = OPEN_COST_BYTES) -> list[dict[int, list[int]]]:
    """Group a scan plan's file tasks into Spark partitions.

    Each partition maps task indexes (into ``tasks``) to the row groups it reads
    of that file; every surviving row group is in exactly one partition.  A file
    larger than the split is cut into runs of row groups; the pieces are then
    packed, largest first, into partitions of about the split, as Spark packs
    files: a piece is added while the partition's size (every piece's bytes plus
    ``open_cost``) plus the piece's bytes stays within the split."""
    split = split_bytes(sum(t.bytes_to_read for t in tasks), len(tasks), cores, max_bytes,
                        open_cost)
    pieces: list[tuple[int, int, list[int]]] = []  # (bytes, task index, row groups)
    for i, t in enumerate(tasks):
        col_idx = t.column_indexes
        for groups in split_row_groups(t.row_groups, t.bytes_to_read, split):
            pieces.append((t.footer.chunk_bytes(groups, col_idx), i, groups))
    pieces.sort(key=lambda p: (-p[0], p[1], p[2][0]))
    out: list[dict[int, list[int]]] = []
    current: dict[int, list[int]] = {}
    size = 0
    for nbytes, i, groups in pieces:
        if current and size + nbytes > split:
            out.append(current)
            current, size = {}, 0
        current.setdefault(i, []).extend(groups)
        size += nbytes + open_cost
    if current:
        out.append(current)
    return [{i: sorted(g) for i, g in sorted(p.items())} for p in out]


def slice_batch(batch: pa.RecordBatch, rows: int) -> Iterator[pa.RecordBatch]:
    """``batch`` as zero-copy slices of at most ``rows`` rows."""
    if batch.num_rows <= rows:
        yield batch
        return
    for start in range(0, batch.num_rows, rows):
        yield batch.slice(start, rows)


def file_partitions(io: MetadataIO, snapshot: Snapshot, files: Sequence[DataFile] | None,
                    schema: TableSchema | None, columns: list[str], where: str | None,
                    parallelism: int, uri: str, storage_options: StorageOptions
                    ) -> list[CaslakePartition]:
    """Spark partitions reading ``files`` of ``snapshot`` (None: all its live files)
    as of that version, under ``schema`` (None: the snapshot's; another one is read
    by field id), planned by :func:`plan_partitions`."""
    source: Snapshot | SnapshotSubset = snapshot
    if files is not None or schema is not None:
        chosen = io.live_files(snapshot) if files is None else files
        source = SnapshotSubset.of(snapshot, chosen)
        if schema is not None:
            source = replace(source, schema=schema)
    tasks = Scan(io, FooterCache(), source, columns, where).plan().tasks
    external = external_uris(snapshot.manifest)
    out: list[CaslakePartition] = []
    for part in plan_partitions(tasks, parallelism):
        subset = SnapshotSubset.of(snapshot, [tasks[i].file for i in part],
                                   {tasks[i].file.path: g for i, g in part.items()})
        if schema is not None:
            subset = replace(subset, schema=schema)
        out.append(CaslakePartition(uri=uri, storage_options=storage_options, subset=subset,
                                    columns=columns, where=where, external=external))
    return out


def read_partition(p: CaslakePartition, store: ObjectStore | None = None
                   ) -> Iterator[pa.RecordBatch]:
    """Live, matching rows of one partition, as caslake's Scan produces them.

    ``store``: the store to read through (default: opened from the partition's URI
    and options), e.g. to observe its request counters."""
    if store is None:
        options = p.storage_options or None
        store = route(open_store(p.uri, options), p.external, options)
    yield from Scan(MetadataIO(store), FooterCache(), p.subset, p.columns, p.where).to_batches()
