"""Streaming Arrow data into the Parquet parts of one dataset generation.

Owns: turning a Table, RecordBatch, RecordBatchReader, iterable of batches or
pandas DataFrame into one stream of batches with one schema; cutting that
stream into row groups (``row_group_size`` rows, or a byte bound) and into
parts (``max_rows_per_file`` rows, or ``max_bytes_per_file`` compressed
bytes); building each part in a local staging file and uploading it
create-only under the generation directory.

Memory holds one row group of pending rows plus the Parquet writer's buffers;
disk holds at most two finished parts (the last one waits until it is known
whether another part follows, which decides ``data.parquet`` vs
``part-NNNNN.parquet``).  Nothing written here is visible to readers: only the
manifest commit in :mod:`caslake.dataset.store` makes a generation visible.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from caslake.core import put_new_file
from caslake.errors import InvalidArgument, SchemaMismatch
from caslake.ops.write import split_batches
from caslake.store.base import ObjectStore

MiB = 1024 * 1024
#: Arrow bytes of pending rows that close a row group when ``row_group_size`` is not set.
ROW_GROUP_BYTES = 64 * MiB
#: pyarrow's own default maximum rows per row group.
DEFAULT_ROW_GROUP_ROWS = 1024 * 1024


@dataclass(frozen=True)
class PartLayout:
    compression: str
    row_group_size: int | None  # rows per row group; None: pyarrow's default, bounded by bytes
    max_rows_per_file: int | None
    max_bytes_per_file: int | None


@dataclass(frozen=True)
class WrittenPart:
    name: str  # relative to the dataset key, e.g. "_gen-<hex>/data.parquet"
    rows: int
    size: int


def batch_stream(data: Any) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """The schema and batches of anything ``write_dataset`` accepts.  Raises
    InvalidArgument for other types, SchemaMismatch for a batch of another schema."""
    if isinstance(data, pa.Table):
        return data.schema, iter(data.to_batches())
    if isinstance(data, pa.RecordBatch):
        return data.schema, iter([data])
    if isinstance(data, pa.RecordBatchReader):
        return data.schema, iter(data)
    if type(data).__module__.startswith("pandas"):
        table = pa.Table.from_pandas(data)
        return table.schema, iter(table.to_batches())
    if isinstance(data, Iterable) and not isinstance(data, (str, bytes, dict)):
        it = iter(data)
        first = next(it, None)
        if first is None:
            raise InvalidArgument("cannot write an empty iterable of batches: there is no "
                                  "schema (pass a pyarrow Table or RecordBatchReader)")
        if not isinstance(first, pa.RecordBatch):
            raise InvalidArgument(f"an iterable of batches must yield pyarrow RecordBatch, "
                                  f"got {type(first).__name__}")
        schema = first.schema
        return schema, _checked(schema, itertools.chain([first], it))
    raise InvalidArgument(f"cannot write {type(data).__name__}: pass a pyarrow Table, "
                          "RecordBatch, RecordBatchReader, an iterable of RecordBatch or a "
                          "pandas DataFrame")


def _checked(schema: pa.Schema, batches: Iterator[Any]) -> Iterator[pa.RecordBatch]:
    for i, b in enumerate(batches):
        if not isinstance(b, pa.RecordBatch):
            raise InvalidArgument(f"batch {i} is a {type(b).__name__}, not a RecordBatch")
        if not b.schema.equals(schema):
            diff = next((f.name for f in b.schema if f.name not in schema.names
                         or schema.field(f.name).type != f.type), None)
            raise SchemaMismatch(f"batch {i} has schema {b.schema.names} unlike the first "
                                 f"batch {schema.names}", column=diff)
        yield b


class _PartBuilder:
    """One part being written to a local staging file."""

    def __init__(self, schema: pa.Schema, layout: PartLayout, staging_dir: str | None) -> None:
        fd, self.path = tempfile.mkstemp(suffix=".parquet.tmp", dir=staging_dir)
        os.close(fd)
        self.sink = pa.OSFile(self.path, "wb")
        codec: Any = layout.compression  # validated by ParquetDatasetStore
        self.writer = pq.ParquetWriter(self.sink, schema, compression=codec,
                                       write_statistics=True)
        self.rows = 0
        self.size = 0

    def write(self, table: pa.Table) -> None:
        self.writer.write_table(table, row_group_size=max(1, table.num_rows))
        self.rows += table.num_rows

    def written_bytes(self) -> int:
        return int(self.sink.tell())

    def finish(self) -> None:
        self.writer.close()
        self.size = int(self.sink.tell())
        self.sink.close()

    def discard(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()
        with contextlib.suppress(Exception):
            self.sink.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


def write_parts(store: ObjectStore, dataset_key: str, generation: str, schema: pa.Schema,
                batches: Iterator[pa.RecordBatch], layout: PartLayout,
                uploaded: list[str]) -> list[WrittenPart]:
    """Write the batches as the parts of ``generation``; return them in order.

    Every uploaded key is appended to ``uploaded`` as soon as it lands, so the
    caller can remove them if the write fails before its commit.  At least one
    part is written (an empty input gives an empty ``data.parquet``)."""
    staging = store.staging_dir()
    max_rows = layout.max_rows_per_file
    max_bytes = layout.max_bytes_per_file
    out: list[WrittenPart] = []
    held: _PartBuilder | None = None  # finished, not yet named
    current: _PartBuilder | None = None
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    pending_bytes = 0

    def upload(builder: _PartBuilder, name: str) -> None:
        rel = f"{generation}/{name}"
        key = f"{dataset_key}/{rel}"
        try:
            put_new_file(store, key, builder.path)
            uploaded.append(key)
        finally:
            builder.discard()
        out.append(WrittenPart(rel, builder.rows, builder.size))

    def close_current() -> None:
        nonlocal current, held
        if current is None:
            return
        current.finish()
        if held is not None:
            upload(held, f"part-{len(out):05d}.parquet")
        held, current = current, None

    def room_in_part() -> int | None:
        if max_rows is None:
            return None
        return max_rows - (current.rows if current is not None else 0)

    def write_group(group: list[pa.RecordBatch]) -> None:
        nonlocal current
        if current is None:
            current = _PartBuilder(schema, layout, staging)
        current.write(pa.Table.from_batches(group, schema=schema))
        full_rows = max_rows is not None and current.rows >= max_rows
        full_bytes = max_bytes is not None and current.written_bytes() >= max_bytes
        if full_rows or full_bytes:
            close_current()

    group_rows = layout.row_group_size or DEFAULT_ROW_GROUP_ROWS
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            pending.append(batch)
            pending_rows += batch.num_rows
            pending_bytes += batch.nbytes
            while pending_rows:
                room = room_in_part()
                limit = group_rows if room is None else min(group_rows, room)
                by_bytes = layout.row_group_size is None and pending_bytes >= ROW_GROUP_BYTES
                if pending_rows < limit and not by_bytes:
                    break
                group, pending = split_batches(pending, min(limit, pending_rows))
                taken = sum(b.num_rows for b in group)
                pending_rows -= taken
                pending_bytes = sum(b.nbytes for b in pending)
                write_group(group)
        while pending_rows:
            room = room_in_part()
            limit = group_rows if room is None else min(group_rows, room)
            group, pending = split_batches(pending, min(limit, pending_rows))
            pending_rows -= sum(b.num_rows for b in group)
            write_group(group)
        if current is None and held is None:
            current = _PartBuilder(schema, layout, staging)  # no rows: one empty part
        close_current()
        if held is not None:
            last, held = held, None
            upload(last, "data.parquet" if not out else f"part-{len(out):05d}.parquet")
    finally:
        for b in (current, held):
            if b is not None:
                b.discard()
    return out
