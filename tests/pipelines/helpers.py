"""Shared helpers of the pipeline tests (change feed, restore, follow).

* :func:`new_table` -- a small table (``id``, ``s``, ``f``) in a fresh memory store,
  with small files so appends write several row groups.
* :func:`rows` / :func:`arrow` -- deterministic rows and their Arrow table.
* :func:`feed_rows` -- a change feed read as plain tuples, grouped by change type,
  so a test compares it with rows pyarrow computed.
* :class:`ByteCounter` -- a store wrapper that counts the bytes read per key (the
  change feed benchmark's).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

import caslake
from benchmarks.change_feed import ByteCounter

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("s", pa.string()),
                    pa.field("f", pa.float64())])
WRITE = caslake.WriteOptions(target_file_size=6_000, row_group_size=500)
META = ("_change_type", "_commit_version", "_commit_timestamp")
Row = tuple[int, str | None, float | None]


def rows(lo: int, hi: int, tag: str = "") -> list[Row]:
    return [(i, None if i % 7 == 0 else f"{tag}s{i % 13}", None if i % 5 == 0 else i * 0.5)
            for i in range(lo, hi)]


def arrow(rs: Sequence[Row], schema: pa.Schema = SCHEMA) -> pa.Table:
    return pa.table({"id": pa.array([r[0] for r in rs], pa.int64()),
                     "s": pa.array([r[1] for r in rs], pa.string()),
                     "f": pa.array([r[2] for r in rs], pa.float64())}, schema=schema)


def new_table(uri: str | None = None, **kwargs: Any) -> caslake.Table:
    return caslake.create_table(uri or f"memory://{uuid.uuid4().hex}", SCHEMA,
                                write_options=WRITE, **kwargs)


def feed_rows(feed: pa.Table, columns: Sequence[str] = ("id", "s", "f")
              ) -> dict[str, list[tuple[Any, ...]]]:
    """``{change type: sorted rows (columns, then _commit_version)}``."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    cols = [feed.column(c).to_pylist() for c in (*columns, "_commit_version")]
    for kind, *values in zip(feed.column("_change_type").to_pylist(), *cols, strict=True):
        out.setdefault(kind, []).append(tuple(values))
    return {k: sorted(v, key=lambda r: tuple((x is None, x) for x in r)) for k, v in out.items()}


def with_version(rs: Sequence[Row], version: int) -> list[tuple[Any, ...]]:
    return sorted(((*r, version) for r in rs), key=lambda r: tuple((x is None, x) for x in r))

__all__ = ["ByteCounter"]
