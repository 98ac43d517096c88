"""Shared helpers of the pipeline tests (change feed, restore, follow).

* :func:`new_table` -- a small table (``id``, ``s``, ``f``) in a fresh memory store,
  with small files so appends write several row groups.
* :func:`rows` / :func:`arrow` -- deterministic rows and their Arrow table.
* :func:`feed_rows` -- a change feed read as plain tuples, grouped by change type,
  so a test compares it with rows pyarrow computed.
* :class:`ByteCounter` -- a store wrapper that counts the bytes read per key.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

import caslake
from caslake.store.base import GetResult, Mode, ObjectMeta, ObjectStore, PutMode

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


class ByteCounter(ObjectStore):
    """Delegates to ``inner``; counts the bytes each key's GETs returned.  Never hands
    out local paths, so every read goes through the counted calls."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.uri = inner.uri
        self.counters = inner.counters
        self.read: dict[str, int] = {}
        self._lock = threading.Lock()

    def _count(self, key: str, n: int) -> None:
        with self._lock:
            self.read[key] = self.read.get(key, 0) + n

    def reset(self) -> None:
        with self._lock:
            self.read.clear()

    def get(self, key: str) -> GetResult:
        res = self.inner.get(key)
        self._count(key, len(res.data))
        return res

    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]], *,
                   etag: str | None = None) -> list[bytes]:
        out = self.inner.get_ranges(key, ranges, etag=etag)
        self._count(key, sum(len(b) for b in out))
        return out

    def head(self, key: str) -> ObjectMeta:
        return self.inner.head(key)

    def put(self, key: str, data: bytes, *, mode: Mode = PutMode.OVERWRITE) -> str:
        return self.inner.put(key, data, mode=mode)

    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def local_path(self, key: str, *, etag: str | None = None) -> str | None:
        return None

    def staging_dir(self) -> str | None:
        return self.inner.staging_dir()

    def put_file(self, key: str, path: str, *, mode: Mode = PutMode.CREATE) -> str:
        return self.inner.put_file(key, path, mode=mode)

    def data_bytes(self) -> dict[str, int]:
        return {k: n for k, n in self.read.items() if k.startswith("data/")}
