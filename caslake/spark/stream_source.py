"""Structured Streaming reads from a caslake table: ``spark.readStream.format("caslake")``
(docs/protocol.md, "Spark streaming reads"), and the batch change feed
(``spark.read.format("caslake").option("readChangeFeed", "true")``).

Owns the stream's options, its offsets (positions in a branch's versions:
:class:`Position`), what each version gives the stream (the data files it added,
or its change feed), the rate limits (``maxFilesPerTrigger`` /
``maxBytesPerTrigger``, Spark's admission control), ``Trigger.AvailableNow``,
and the partitions executors read.  A version that deletes or updates rows
stops an appends-only stream with :class:`ChangeCommitInStream` unless
``skipChangeCommits`` is set.

The reader is built twice by PySpark (once to ship :meth:`read` to executors,
once in the long-lived worker that answers offset calls), so its constructor
reads nothing; errors surface from ``initialOffset`` / ``latestOffset``.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from caslake.core import MetadataIO, Snapshot
from caslake.errors import InvalidArgument, SchemaMismatch, UserInputError, VersionNotFound
from caslake.expr.bind import resolve_column
from caslake.format.manifest import DataFile
from caslake.format.schema import TableSchema
from caslake.ops.change_feed import (
    META_COLUMNS,
    NO_DATA_CHANGE,
    diff_versions,
    feed_schema,
    resolve_range,
)
from caslake.spark.messages import table_schema_from_json
from caslake.spark.read_plan import (
    MIN_PARTITIONS,
    READ_BATCH_ROWS,
    CaslakePartition,
    default_parallelism,
    file_partitions,
    read_partition,
    slice_batch,
    storage_options_from,
)
from caslake.spark.types import conform_for_read, spark_schema_for
from caslake.store.options import StorageOptions
from caslake.table import Table, open_table

STARTING_VERSION = "startingVersion"
STARTING_TIMESTAMP = "startingTimestamp"
ENDING_VERSION = "endingVersion"
MAX_FILES = "maxFilesPerTrigger"
MAX_BYTES = "maxBytesPerTrigger"
READ_CHANGE_FEED = "readChangeFeed"
SKIP_CHANGE_COMMITS = "skipChangeCommits"
BRANCH = "branch"
LATEST = "latest"
_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)b?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


class ChangeCommitInStream(UserInputError):
    """An appends-only stream reached a version that deletes or updates rows."""

    def __init__(self, version: int, operation: str) -> None:
        super().__init__(
            f"version {version} ({operation}) deletes or updates rows of the streamed table, "
            f"which a stream of appends cannot carry; set option {SKIP_CHANGE_COMMITS}=true "
            f"to skip such versions, or {READ_CHANGE_FEED}=true to stream every change")
        self.version = version
        self.operation = operation


# --- options ------------------------------------------------------------------------


def _bool(options: Mapping[str, str], name: str) -> bool:
    raw = str(options.get(name) or "false").strip().lower()
    if raw not in ("true", "false"):
        raise InvalidArgument(f"option {name} must be true or false, not {options[name]!r}")
    return raw == "true"


def _positive(options: Mapping[str, str], name: str, sizes: bool = False) -> int | None:
    raw = options.get(name)
    if raw in (None, ""):
        return None
    m = _SIZE.match(str(raw)) if sizes else re.match(r"^\s*(\d+)\s*$()", str(raw))
    value = int(m.group(1)) * _UNITS[m.group(2).lower()] if m else 0
    if value < 1:
        kind = "a size in bytes >= 1 (or with k, m, g)" if sizes else "an integer >= 1"
        raise InvalidArgument(f"option {name} must be {kind}, not {raw!r}")
    return value


def _timestamp_ms(raw: str, name: str) -> int:
    text = raw.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise InvalidArgument(f"option {name} must be an ISO-8601 timestamp or epoch "
                              f"milliseconds, not {raw!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def _version_or_tag(raw: str | None, name: str) -> int | str | None:
    """An integer version, ``latest`` (for starts) or a tag name."""
    if raw is None or not str(raw).strip():
        return None
    text = str(raw).strip()
    if text.lstrip("-").isdigit():
        v = int(text)
        if v < 0:
            raise InvalidArgument(f"option {name} must be a version >= 0, not {raw!r}")
        return v
    return text


@dataclass(frozen=True)
class StreamOptions:
    """A streaming (or batch change-feed) read's options, checked."""

    uri: str
    storage_options: StorageOptions
    branch: str | None = None
    start_version: int | str | None = None  # a version, LATEST or a tag name
    start_ms: int | None = None
    end_version: int | str | None = None  # batch change feed only
    max_files: int | None = None
    max_bytes: int | None = None
    change_feed: bool = False
    skip_change_commits: bool = False
    columns: list[str] | None = None
    where: str | None = None
    min_partitions: int | None = None

    @staticmethod
    def parse(options: Mapping[str, str], streaming: bool) -> StreamOptions:
        uri = options.get("path")
        if not uri:
            raise InvalidArgument("caslake needs the table URI: .load(uri) or .option('path', uri)")
        if streaming:
            for opt in ("version", "timestamp"):
                if options.get(opt):
                    raise InvalidArgument(f"option {opt} applies to batch reads; a stream "
                                          f"starts at option {STARTING_VERSION} or "
                                          f"{STARTING_TIMESTAMP}")
        start = _version_or_tag(options.get(STARTING_VERSION), STARTING_VERSION)
        raw_ts = options.get(STARTING_TIMESTAMP)
        start_ms = _timestamp_ms(raw_ts, STARTING_TIMESTAMP) if raw_ts else None
        if start is not None and start_ms is not None:
            raise InvalidArgument(f"give either option {STARTING_VERSION} or "
                                  f"{STARTING_TIMESTAMP}, not both")
        end = _version_or_tag(options.get(ENDING_VERSION), ENDING_VERSION)
        if end is not None and streaming:
            raise InvalidArgument(f"option {ENDING_VERSION} applies to batch change-feed "
                                  "reads; a stream has no end")
        columns = [c.strip() for c in (options.get("columns") or "").split(",") if c.strip()]
        return StreamOptions(
            uri=str(uri), storage_options=storage_options_from(options),
            branch=(options.get(BRANCH) or "").strip() or None, start_version=start,
            start_ms=start_ms, end_version=end,
            max_files=_positive(options, MAX_FILES), max_bytes=_positive(options, MAX_BYTES, True),
            change_feed=_bool(options, READ_CHANGE_FEED),
            skip_change_commits=_bool(options, SKIP_CHANGE_COMMITS),
            columns=columns or None, where=(options.get("where") or "").strip() or None,
            min_partitions=_positive(options, MIN_PARTITIONS))

    def table(self) -> Table:
        """The table handle of the streamed branch (RefNotFound for an unknown one)."""
        table = open_table(self.uri, storage_options=self.storage_options or None)
        return table if self.branch is None else table.branch(self.branch)


def feed_columns(schema: TableSchema, columns: Sequence[str] | None) -> list[str]:
    """The table columns of a change-feed read (``columns``: top-level names)."""
    names = schema.names
    if columns is None:
        return list(names)
    picked = {resolve_column(c, names) for c in columns if c not in META_COLUMNS}
    return [n for n in names if n in picked]


def stream_schema(options: StreamOptions) -> StructType:
    """The DataFrame schema of a stream or change-feed read: the head's (columns
    projected), plus the feed's three columns with ``readChangeFeed``."""
    table = options.table()
    if options.change_feed:
        ts = table.table_schema
        return spark_schema_for(feed_schema(ts, feed_columns(ts, options.columns)))
    return spark_schema_for(table.scan(columns=options.columns).schema)


# --- offsets --------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Position:
    """The point just before unit ``index`` of version ``version`` (of its snapshot
    when ``snapshot``): everything before it has been read."""

    version: int
    index: int = 0
    snapshot: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "index": self.index, "snapshot": self.snapshot}

    @staticmethod
    def from_json(offset: Mapping[str, Any]) -> Position:
        try:
            v, i, s = offset["version"], offset["index"], offset["snapshot"]
        except (KeyError, TypeError):
            raise InvalidArgument(f"not a caslake stream offset: {offset!r}") from None
        if not (isinstance(v, int) and isinstance(i, int) and isinstance(s, bool)):
            raise InvalidArgument(f"not a caslake stream offset: {offset!r}")
        return Position(v, i, s)


# A new stream's first offset, the same whenever Spark asks for it (it asks again
# when it replays a first batch that never committed): the version is chosen by the
# first latestOffset, and the first batch's end names it.
UNPLANNED_SNAPSHOT = Position(-1, 0, True)  # the snapshot of the head, then what follows
UNPLANNED_LATEST = Position(-1, 0, False)  # only versions after the head


@dataclass(frozen=True)
class Unit:
    """What a stream admits at once: data files of one version (one file, or every
    file a version's change feed reads)."""

    files: tuple[DataFile, ...]

    @property
    def nbytes(self) -> int:
        return sum(f.size for f in self.files)


@dataclass(frozen=True)
class VersionUnits:
    """What one version gives the stream; ``blocked``: a change commit the stream
    cannot carry (its operation)."""

    snapshot: Snapshot
    units: tuple[Unit, ...]
    feed: bool = False  # the units are the version's change feed (read whole)
    blocked: str | None = None


@dataclass
class Budget:
    """A micro-batch's admission: at least one unit, then while under the limits."""

    max_files: int | None
    max_bytes: int | None
    files: int = 0
    nbytes: int = 0
    units: int = 0

    def admits(self, unit: Unit) -> bool:
        if self.units == 0:
            return True
        if self.max_files is not None and self.files + max(1, len(unit.files)) > self.max_files:
            return False
        return self.max_bytes is None or self.nbytes < self.max_bytes

    def take(self, unit: Unit) -> None:
        self.units += 1
        self.files += max(1, len(unit.files))
        self.nbytes += unit.nbytes


def budget_for(limit: ReadLimit, options: StreamOptions) -> Budget:
    """Spark's limit for this call: none for ReadAllAvailable (or a row limit, which
    caslake does not count), else it and the other option's limit."""
    if isinstance(limit, ReadMaxFiles):
        return Budget(limit.max_files, options.max_bytes)
    if isinstance(limit, ReadMaxBytes):
        return Budget(options.max_files, limit.max_bytes)
    return Budget(None, None)


# --- partitions ------------------------------------------------------------------------


@dataclass
class FilesPartition(InputPartition):
    """Rows of data files as of one version; with ``insert_at`` (version, commit ms)
    presented as change-feed inserts (the snapshot phase of a change-feed stream)."""

    part: CaslakePartition
    insert_at: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        super().__init__(self.part.path)


@dataclass
class FeedPartition(InputPartition):
    """The change feed of one version (``Table.changes(v, v)``), read on an executor."""

    uri: str
    storage_options: StorageOptions
    branch: str | None
    version: int
    columns: list[str]
    where: str | None = None
    extra: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(self.version)

    def batches(self) -> Iterator[pa.RecordBatch]:
        table = open_table(self.uri, storage_options=self.storage_options or None)
        return table.changes(self.version, self.version, columns=self.columns,
                             where=self.where, ref=self.branch).to_batches()


def _with_inserts(batch: pa.RecordBatch, version: int, ms: int) -> pa.RecordBatch:
    n = batch.num_rows
    meta: list[Any] = [pa.repeat(pa.scalar("insert"), n),
                       pa.repeat(pa.scalar(version, pa.int64()), n),
                       pa.repeat(pa.scalar(ms, pa.timestamp("ms", tz="UTC")), n)]
    return pa.RecordBatch.from_arrays([*batch.columns, *meta],
                                      names=[*batch.schema.names, *META_COLUMNS])


def fit(batch: pa.RecordBatch, expected: pa.Schema) -> Iterator[pa.RecordBatch]:
    """``batch`` under the stream's Spark schema: a column the version lacks (added
    since) is NULL; sliced as the batch source slices."""
    names = batch.schema.names
    missing = [f for f in expected if f.name not in names]
    for f in missing:
        if not f.nullable:
            raise SchemaMismatch(f"column {f.name!r} of the stream is not in this version of "
                                 "the table and cannot be NULL", column=f.name)
    if missing:
        batch = pa.RecordBatch.from_arrays(
            [*batch.columns, *(pa.nulls(batch.num_rows, f.type) for f in missing)],
            names=[*names, *(f.name for f in missing)])
    for piece in slice_batch(batch, READ_BATCH_ROWS):
        yield conform_for_read(piece, expected)


def read_stream_partition(partition: InputPartition, expected: pa.Schema
                          ) -> Iterator[pa.RecordBatch]:
    """One task's rows (stateless: everything is in the partition)."""
    if isinstance(partition, FeedPartition):
        source = partition.batches()
    elif isinstance(partition, FilesPartition):
        source = read_partition(partition.part)
        if partition.insert_at is not None:
            v, ms = partition.insert_at
            source = (_with_inserts(b, v, ms) for b in source)
    else:
        return  # Spark's placeholder partition for an empty plan
    for batch in source:
        yield from fit(batch, expected)


# --- the stream reader -------------------------------------------------------------------


class CaslakeStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("caslake")``; see the module docstring."""

    def __init__(self, options: StreamOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.columns = [n for n in schema.fieldNames() if n not in META_COLUMNS] \
            if options.change_feed else (options.columns or list(schema.fieldNames()))
        self._target: int | None = None  # Trigger.AvailableNow: the last version to read
        self._cache: dict[tuple[int, bool], VersionUnits] = {}
        self._schema_json: dict[str, Any] | None = None
        self._handle: Table | None = None

    # --- the table ---------------------------------------------------------------

    def _table(self) -> Table:
        if self._handle is None:
            self._handle = self.options.table()
        return self._handle

    def _head(self) -> Snapshot:
        return self._table().refresh().snapshot

    def _io(self) -> MetadataIO:
        return self._table().io

    def _tag(self, name: str) -> Snapshot:
        return self._table().scan(tag=name).snapshot

    def _read_schema(self) -> TableSchema:
        """The table schema rows are read under: the head's when first planned."""
        if self._schema_json is None:
            self._schema_json = self._table().table_schema.to_json()
        return table_schema_from_json(self._schema_json)

    # --- offsets ----------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        o, head = self.options, self._head()
        if o.start_version == LATEST:
            return UNPLANNED_LATEST.to_json()
        if o.start_version is not None:
            pairs = resolve_range(self._io(), head, o.start_version, o.start_version, self._tag)
            return Position(pairs[0][1].version).to_json()
        if o.start_ms is not None:
            return Position(self._first_at(head, o.start_ms)).to_json()
        self._io().at_version(head, head.version)  # the branch exists and is readable
        return UNPLANNED_SNAPSHOT.to_json()

    def _first_at(self, head: Snapshot, ms: int) -> int:
        """The first version committed at or after ``ms`` (readable, else typed errors)."""
        if ms > head.manifest.created_at_ms:
            raise VersionNotFound(f"option {STARTING_TIMESTAMP} is after the last commit "
                                  f"(version {head.version})")
        try:
            snap = self._io().as_of(head, ms)
            v = snap.version if snap.manifest.created_at_ms == ms else snap.version + 1
        except VersionNotFound:  # before the first version: start at it
            v = 0
        resolve_range(self._io(), head, v, v, self._tag)  # VersionExpired if gc took it
        return v

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_files is not None:
            return ReadMaxFiles(self.options.max_files)
        if self.options.max_bytes is not None:
            return ReadMaxBytes(self.options.max_bytes)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._head().version

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        head = self._head()
        cap = head.version if self._target is None else min(head.version, self._target)
        end = self._advance(Position.from_json(start), head, cap,
                            budget_for(limit, self.options))
        return end.to_json()

    def _advance(self, pos: Position, head: Snapshot, cap: int, budget: Budget) -> Position:
        """The furthest position from ``pos`` the budget admits, up to version ``cap``.
        A batch ends where the snapshot phase ends (so its version is the end's - 1)."""
        if pos == UNPLANNED_LATEST:
            return Position(cap + 1)
        if pos == UNPLANNED_SNAPSHOT:
            pos = Position(cap, 0, True)
        while pos.snapshot or pos.version <= cap:
            vu = self._units(pos, head, cap)
            if vu.blocked is not None:
                if budget.units == 0:
                    raise ChangeCommitInStream(pos.version, vu.blocked)
                return pos
            while pos.index < len(vu.units) and budget.admits(vu.units[pos.index]):
                budget.take(vu.units[pos.index])
                pos = replace(pos, index=pos.index + 1)
            if pos.index < len(vu.units):
                return pos
            done_snapshot = pos.snapshot
            pos = Position(pos.version + 1)
            if done_snapshot:
                return pos
        return pos

    def _units(self, pos: Position, head: Snapshot, cap: int) -> VersionUnits:
        key = (pos.version, pos.snapshot)
        if key not in self._cache:
            io = self._io()
            if pos.snapshot:
                snap = io.at_version(head, pos.version)
                files = sorted(io.live_files(snap), key=lambda f: f.path)
                self._cache[key] = VersionUnits(snap, tuple(Unit((f,)) for f in files))
            else:
                for old, new in resolve_range(io, head, pos.version, cap, self._tag):
                    self._cache.setdefault((new.version, False), self._version(old, new))
        return self._cache[key]

    def _version(self, old: Snapshot | None, new: Snapshot) -> VersionUnits:
        """What version ``new`` gives the stream (``old``: the version before it)."""
        op = new.manifest.operation
        if op in NO_DATA_CHANGE:
            return VersionUnits(new, ())
        diff = diff_versions(self._io(), old, new)
        if self.options.change_feed:
            files = (*diff.added, *diff.removed, *diff.changed)
            return VersionUnits(new, (Unit(files),), feed=True)
        if diff.removed or diff.changed:
            if self.options.skip_change_commits:
                return VersionUnits(new, ())
            return VersionUnits(new, (), blocked=op)
        added = sorted(diff.added, key=lambda f: f.path)
        return VersionUnits(new, tuple(Unit((f,)) for f in added))

    def commit(self, end: dict[str, Any]) -> None:
        done = Position.from_json(end)
        for key in [k for k in self._cache if k[0] < done.version]:
            del self._cache[key]

    # --- planning and reading ------------------------------------------------------

    def partitions(self, start: dict[str, Any], end: dict[str, Any]
                   ) -> Sequence[InputPartition]:
        lo, hi = Position.from_json(start), Position.from_json(end)
        if lo == UNPLANNED_SNAPSHOT:  # the first batch: the snapshot its end names
            lo = Position(hi.version if hi.snapshot else hi.version - 1, 0, True)
        if lo in (hi, UNPLANNED_LATEST):
            return []
        head = self._head()
        cap = hi.version if hi.index > 0 or hi.snapshot else hi.version - 1
        out: list[InputPartition] = []
        pos = lo
        while pos < hi:
            vu = self._units(pos, head, max(cap, pos.version))
            stop = hi.index if (pos.version, pos.snapshot) == (hi.version, hi.snapshot) \
                else len(vu.units)
            out.extend(self._plan(vu, vu.units[pos.index:stop], pos.snapshot))
            pos = Position(pos.version + 1)
        return out

    def _plan(self, vu: VersionUnits, units: Sequence[Unit], snapshot: bool
              ) -> list[InputPartition]:
        if not units:
            return []
        o, snap = self.options, vu.snapshot
        if vu.feed:
            have = set(snap.manifest.schema.names)
            return [FeedPartition(o.uri, o.storage_options, o.branch, snap.version,
                                  [c for c in self.columns if c in have], o.where)]
        files = [f for u in units for f in u.files]
        insert_at = (snap.version, snap.manifest.created_at_ms) \
            if o.change_feed and snapshot else None
        parts = file_partitions(self._io(), snap, files, self._read_schema(), self.columns,
                                o.where, o.min_partitions or default_parallelism(), o.uri,
                                o.storage_options)
        return [FilesPartition(p, insert_at) for p in parts]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_stream_partition(partition, to_arrow_schema(self.schema, timezone="UTC"))


# --- the batch change feed ------------------------------------------------------------------


class CaslakeFeedReader(DataSourceReader):
    """``spark.read.format("caslake").option("readChangeFeed", "true")``: the change
    feed of ``startingVersion`` .. ``endingVersion`` as a DataFrame, one partition
    per version; the range is resolved (and checked) once, here."""

    def __init__(self, options: StreamOptions, schema: StructType) -> None:
        if options.start_version is None or options.start_version == LATEST:
            raise InvalidArgument(f"a batch change-feed read needs option {STARTING_VERSION} "
                                  "(a version or a tag)")
        self.options = options
        self.schema = schema
        self.columns = [n for n in schema.fieldNames() if n not in META_COLUMNS]
        feed = options.table().changes(options.start_version, options.end_version,
                                       columns=self.columns)
        self.versions = [new.version for _, new in feed.versions
                         if new.manifest.operation not in NO_DATA_CHANGE]

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        return [FeedPartition(o.uri, o.storage_options, o.branch, v, self.columns, o.where)
                for v in self.versions]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_stream_partition(partition, to_arrow_schema(self.schema, timezone="UTC"))
