"""Shared helpers for the delete tests.

* :class:`HookStore` -- an :class:`~caslake.store.base.ObjectStore` wrapper that
  runs a callback exactly once, right before the wrapped handle's first
  pointer compare-and-swap (a ``put`` of ``_latest_manifest`` with
  ``If-Match``).  Running another handle's operation there forces a
  deterministic race: the other commit lands between this handle's planning
  and its CAS, so the CAS fails and the commit loop must rebase.
* :func:`norm_rows` -- rows as sorted, NaN-safe, hashable tuples, so two
  tables (or a table and a plain-Python model) compare as multisets.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from caslake.format.keys import POINTER_KEY
from caslake.store.base import GetResult, IfMatch, Mode, ObjectMeta, ObjectStore, PutMode

NAN = "NaN"  # stands in for float NaN, which never equals itself


class HookStore(ObjectStore):
    """Delegate everything to ``inner``; call ``hook()`` once before the first pointer CAS."""

    def __init__(self, inner: ObjectStore, hook: Callable[[], None] | None = None) -> None:
        self.inner = inner
        self.uri = inner.uri
        self.counters = inner.counters
        self.hook = hook
        self.fired = 0
        self.cas_attempts = 0

    def put(self, key: str, data: bytes, *, mode: Mode = PutMode.OVERWRITE) -> str:
        if key == POINTER_KEY and isinstance(mode, IfMatch):
            self.cas_attempts += 1
            if self.hook is not None and not self.fired:
                self.fired += 1
                self.hook()
        return self.inner.put(key, data, mode=mode)

    def get(self, key: str) -> GetResult:
        return self.inner.get(key)

    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]], *,
                   etag: str | None = None) -> list[bytes]:
        return self.inner.get_ranges(key, ranges, etag=etag)

    def head(self, key: str) -> ObjectMeta:
        return self.inner.head(key)

    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def local_path(self, key: str, *, etag: str | None = None) -> str | None:
        return self.inner.local_path(key, etag=etag)

    def staging_dir(self) -> str | None:
        return self.inner.staging_dir()

    def put_file(self, key: str, path: str, *, mode: Mode = PutMode.CREATE) -> str:
        return self.inner.put_file(key, path, mode=mode)


def _norm(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return NAN
    return value


def _sort_key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    # None and NaN sort before everything else, deterministically, in any column.
    return tuple((0, "") if v is None else (1, "") if v == NAN else (2, v) for v in row)


def norm_rows(rows: Iterable[Sequence[Any]]) -> list[tuple[Any, ...]]:
    """Rows as NaN-safe tuples in a canonical order (a multiset, as a list)."""
    return sorted((tuple(_norm(v) for v in r) for r in rows), key=_sort_key)


def table_rows(table: pa.Table, columns: Sequence[str] | None = None) -> list[tuple[Any, ...]]:
    """The rows of an Arrow table (optionally some columns) as :func:`norm_rows`."""
    names = list(columns) if columns is not None else table.column_names
    cols = [table.column(n).to_pylist() for n in names]
    return norm_rows(zip(*cols, strict=True)) if cols else []
