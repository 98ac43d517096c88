"""Turning Arrow data into immutable Parquet data files on the store.

Owns: streaming a RecordBatchReader into zstd Parquet files
of a target size with row groups of a target size, uploading each finished
file create-only, and taking each file's statistics from its footer (the
data is never read back).  Row groups are encoded in parallel (one pyarrow
writer each, on the encode pool) and assembled into the file in order.  Each
batch is conformed to the table schema first (:mod:`caslake.core.coerce`).
Memory is bounded by one row group of pending rows plus the groups in flight
(``threads() + 1``, raw and encoded); the file itself is staged on disk.
A column whose dictionary overflowed in the write's first row group is
written without one in the later groups.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from caslake.core import (
    MiB,
    SchemaConformer,
    WriteOptions,
    as_reader,
    put_new_file,
    shared_pool,
    threads,
)
from caslake.errors import StoreError
from caslake.format.keys import data_file_key
from caslake.format.manifest import DataFile
from caslake.format.parquet import (
    DECIMALS_AS_INTEGERS,
    TRAILER_SIZE,
    WRITE_PAGE_CHECKSUMS,
    ParquetConcat,
    footer_crc32,
    footer_size_from_trailer,
    stats_by_field_id,
)
from caslake.format.partition import FilePartition, PartitionSpec, split_by_partition
from caslake.format.schema import TableSchema
from caslake.store.base import ObjectStore

__all__ = ["MiB", "SchemaConformer", "WriteOptions", "as_reader", "write_data_files"]

def split_batches(pending: list[pa.RecordBatch], n: int
                  ) -> tuple[list[pa.RecordBatch], list[pa.RecordBatch]]:
    """The first ``n`` rows of ``pending`` and the rest, slicing one batch if needed."""
    taken: list[pa.RecordBatch] = []
    rest: list[pa.RecordBatch] = []
    need = n
    for b in pending:
        if need <= 0:
            rest.append(b)
        elif b.num_rows <= need:
            taken.append(b)
            need -= b.num_rows
        else:
            taken.append(b.slice(0, need))
            rest.append(b.slice(need))
            need = 0
    return taken, rest


def _take_rows(pending: list[pa.RecordBatch], n: int) -> tuple[pa.Table, list[pa.RecordBatch]]:
    taken, rest = split_batches(pending, n)
    return pa.Table.from_batches(taken, schema=pending[0].schema), rest


def file_schema(schema: pa.Schema) -> pa.Schema:
    """The Arrow schema data files are written with: ``schema`` with every
    ``decimal32``/``decimal64``, and every ``decimal256`` of at most 38 digits, as
    ``decimal128`` of the same precision and scale, at any depth (field ids,
    names and nullability kept).  The Parquet bytes and logical type are the same
    (``store_decimal_as_integer``: INT32 up to 9 digits, INT64 up to 18); only the
    Arrow schema stored in the footer differs, which readers such as pyiceberg
    refuse for the other widths.  A scan presents the column as the table's type
    again (:func:`caslake.format.schema_evolution.conform_column`)."""
    return pa.schema([_decimal128_field(f) for f in schema])


def _decimal128_field(f: pa.Field[Any]) -> pa.Field[Any]:
    return pa.field(f.name, _decimal128_type(f.type), f.nullable, metadata=f.metadata)


def _decimal128_type(t: Any) -> Any:
    if pa.types.is_struct(t):
        return pa.struct([_decimal128_field(c) for c in t])
    if pa.types.is_list(t):
        return pa.list_(_decimal128_field(t.value_field))
    if pa.types.is_map(t):
        return pa.map_(_decimal128_field(t.key_field), _decimal128_field(t.item_field))
    if pa.types.is_decimal(t) and t.precision <= 38:
        return pa.decimal128(t.precision, t.scale)
    return t


def _encode_group(table: pa.Table, schema: pa.Schema, options: WriteOptions,
                  use_dictionary: bool | list[str] = True) -> pa.Buffer:
    """One row group, encoded on its own as a complete one-group Parquet file
    (statistics and page CRCs included) with Arrow schema ``schema`` (see
    :func:`file_schema`).  Runs on the encode pool: pyarrow releases the GIL
    while it encodes and compresses.  ``use_dictionary``: the columns to try
    dictionary encoding on (True: all)."""
    if not table.schema.equals(schema, check_metadata=True):
        table = table.cast(schema)
    sink = pa.BufferOutputStream()
    dictionary: dict[str, Any] = {"use_dictionary": use_dictionary}  # stubs say bool only
    with pq.ParquetWriter(sink, schema, compression=options.compression,
                          compression_level=options.level(), write_statistics=True,
                          **WRITE_PAGE_CHECKSUMS, **DECIMALS_AS_INTEGERS,
                          **dictionary) as writer:
        writer.write_table(table, row_group_size=max(1, table.num_rows))
    return sink.getvalue()


class _FileBuilder:
    """One Parquet file being assembled in a local staging file (bounded memory)
    from row groups encoded separately (:func:`_encode_group`): each group's
    pages are copied verbatim, so their statistics and CRC-32s stay, and only
    their offsets in the footer move (:func:`caslake.format.parquet.concat_row_groups`)."""

    def __init__(self, staging_dir: str | None) -> None:
        self.staging_dir = staging_dir
        with self._disk_errors():
            fd, self.path = tempfile.mkstemp(suffix=".parquet.tmp", dir=staging_dir)
            self.sink = os.fdopen(fd, "wb")
            self.concat = ParquetConcat()
            self.sink.write(self.concat.head())
        self.rows = 0

    @contextlib.contextmanager
    def _disk_errors(self) -> Iterator[None]:
        """A full or read-only staging disk is a StoreError, not a raw OSError."""
        try:
            yield
        except OSError as exc:
            raise StoreError(f"cannot stage a data file in {self.staging_dir!r}: "
                             f"{exc.strerror or exc}; nothing was committed") from exc

    def add(self, encoded: pa.Buffer, rows: int) -> int:
        """Append one encoded group; return the bytes it added to the file."""
        pages = self.concat.add(encoded, self.sink.tell(), path=self.path)
        with self._disk_errors():
            self.sink.write(pages)
        self.rows += rows
        return len(pages)

    def size(self) -> int:
        return int(self.sink.tell())

    def finish(self) -> tuple[int, int, int, pq.FileMetaData]:
        """Close the file; return its size, footer size, footer CRC-32 and metadata."""
        tail = self.concat.tail()
        with self._disk_errors():
            self.sink.write(tail)
            size = self.sink.tell()
            self.sink.close()
        footer_size = footer_size_from_trailer(tail[-TRAILER_SIZE:], path=self.path)
        return size, footer_size, footer_crc32(tail), pq.read_metadata(pa.BufferReader(tail))

    def discard(self) -> None:
        with contextlib.suppress(Exception):
            self.sink.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


# A partitioned write holds each partition's rows until they make a file's worth
# (assuming ~2x compression) or all partitions together hold this many Arrow bytes;
# then the biggest partition is written out.
PARTITION_BUFFER_BYTES = 512 * MiB


def write_data_files(store: ObjectStore, data: Iterable[pa.RecordBatch] | pa.RecordBatchReader,
                     schema: TableSchema, options: WriteOptions,
                     spec: PartitionSpec | None = None) -> list[DataFile]:
    """Write the batches as one or more Parquet files; return their manifest entries.

    Each file is built in a local staging file and uploaded create-only when it
    reaches the target size, so memory holds at most one row group of rows.
    If anything fails, files already uploaded stay as unreferenced orphans for
    GC; they are never visible.  With a partition ``spec`` (that has fields) each
    file holds the rows of one partition and its entry records the partition
    (:func:`write_partitioned`).
    """
    if spec is not None and spec.fields:
        return write_partitioned(store, data, schema, options, spec)
    return _write_files(store, data, schema, options)


def write_partitioned(store: ObjectStore,
                      data: Iterable[pa.RecordBatch] | pa.RecordBatchReader,
                      schema: TableSchema, options: WriteOptions,
                      spec: PartitionSpec) -> list[DataFile]:
    """Split the conformed rows by their partition values under ``spec`` and write
    each partition's rows to files of their own (docs/format.md, "Partitioning").
    Memory: each partition's pending rows, at most :data:`PARTITION_BUFFER_BYTES`
    in all (then the biggest is written out, so a partition may get several files)."""
    arrow_schema = schema.to_arrow()
    reader = data if isinstance(data, pa.RecordBatchReader) else None
    conform = SchemaConformer(arrow_schema, reader.schema) if reader is not None else None
    pending: dict[tuple[Any, ...], list[pa.RecordBatch]] = {}
    sizes: dict[tuple[Any, ...], int] = {}
    out: list[DataFile] = []
    per_file = 2 * options.target_file_size

    def flush(key: tuple[Any, ...]) -> None:
        batches = pending.pop(key)
        sizes.pop(key)
        part = FilePartition(spec.spec_id, key)
        out.extend(replace(f, partition=part)
                   for f in _write_files(store, batches, schema, options))

    for batch in (reader if reader is not None else data):
        if conform is None:
            conform = SchemaConformer(arrow_schema, batch.schema)
        for key, rows in split_by_partition(spec, schema, conform(batch)):
            pending.setdefault(key, []).append(rows)
            sizes[key] = sizes.get(key, 0) + rows.nbytes
            if sizes[key] >= per_file:
                flush(key)
        while sizes and sum(sizes.values()) > PARTITION_BUFFER_BYTES:
            flush(max(sizes, key=lambda k: sizes[k]))
    for key in list(pending):
        flush(key)
    return out


def _write_files(store: ObjectStore, data: Iterable[pa.RecordBatch] | pa.RecordBatchReader,
                 schema: TableSchema, options: WriteOptions) -> list[DataFile]:
    """:func:`write_data_files` without partitioning."""
    arrow_schema = schema.to_arrow()
    stored = file_schema(arrow_schema)
    reader = data if isinstance(data, pa.RecordBatchReader) else None
    conform = SchemaConformer(arrow_schema, reader.schema) if reader is not None else None
    staging = store.staging_dir()
    out: list[DataFile] = []
    builder: _FileBuilder | None = None
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    rows_per_group = 0
    # Columns whose dictionary overflowed in an earlier group of this write
    # (pyarrow then falls back to plain pages): later groups skip the attempt,
    # which saves the CPU of building a dictionary only to drop it, and with
    # zstd the plain pages are no larger.  Learnt from the first group's footer.
    plain: set[str] = set()
    learn_from: list[ParquetConcat] = []  # files whose groups ``plain`` has not seen yet

    def flush_file() -> None:
        nonlocal builder
        if builder is None:
            return
        done, builder = builder, None
        if done.rows == 0:
            done.discard()
            return
        try:
            size, footer_size, footer_crc, md = done.finish()
            key = data_file_key()
            etag = put_new_file(store, key, done.path)
        finally:
            done.discard()
        stats = stats_by_field_id(md, schema)
        out.append(DataFile(path=key, size=size, etag=etag, row_count=md.num_rows,
                            row_group_count=md.num_row_groups, footer_size=footer_size,
                            footer_crc32=footer_crc, stats=stats))

    def add_group(encoded: pa.Buffer, rows: int) -> None:
        nonlocal builder, rows_per_group
        if builder is None:
            builder = _FileBuilder(staging)
        written = builder.add(encoded, rows)
        if builder.concat not in learn_from:
            learn_from.append(builder.concat)
        # Size row groups by their *compressed* bytes, learnt from what was written.
        per_row = max(written / rows, 1e-3)
        rows_per_group = max(1, int(options.row_group_size / per_row))
        if builder.size() >= options.target_file_size:
            flush_file()

    # Row groups are encoded in parallel on the encode pool and added to the
    # file in order; at most ``threads() + 1`` are in flight (memory bound).
    pool = shared_pool("encode", threads())
    inflight: deque[tuple[Future[pa.Buffer], int]] = deque()

    def drain(limit: int) -> None:
        while len(inflight) > limit:
            future, rows = inflight.popleft()
            add_group(future.result(), rows)

    def write_group(table: pa.Table) -> None:
        use_dictionary: bool | list[str] = True
        for concat in learn_from:  # read only when another group follows
            plain.update(concat.dictionary_fallbacks)
        del learn_from[:-1]  # the open file's later groups are still to be learnt
        if plain:
            use_dictionary = [n for n in arrow_schema.names if n not in plain] or False
        inflight.append((pool.submit(_encode_group, table, stored, options,
                                     use_dictionary), table.num_rows))
        # The write's first group is waited for alone, so that every later group
        # is encoded knowing which dictionaries overflow (measured: 1M rows
        # 0.79 -> 0.63 CPU s; at 5M rows no worse).
        drain(threads() if builder is not None or out else 0)

    try:
        batches: Iterator[pa.RecordBatch] = iter(reader if reader is not None else data)
        for batch in batches:
            if conform is None:
                conform = SchemaConformer(arrow_schema, batch.schema)
            batch = conform(batch)
            if batch.num_rows == 0:
                continue
            if rows_per_group == 0:
                # First guess from the Arrow size, assuming ~2x compression.
                per_row_arrow = max(1, batch.nbytes // batch.num_rows)
                rows_per_group = max(1, 2 * options.row_group_size // per_row_arrow)
            pending.append(batch)
            pending_rows += batch.num_rows
            while pending_rows >= rows_per_group:
                group, pending = _take_rows(pending, rows_per_group)
                pending_rows -= group.num_rows
                write_group(group)
        if pending_rows:
            group, pending = _take_rows(pending, pending_rows)
            write_group(group)
        drain(0)
        flush_file()
    finally:
        for future, _ in inflight:
            future.cancel()
        if builder is not None:
            builder.discard()
    return out
