"""Change feed benchmark: the feed of one small append on a big table reads only that
append's file (issue 30; docs/protocol.md, "Change feed", "Cost").

TPC-H ``lineitem`` (SF1: 6,001,215 rows, generated once by tpchgen-cli through
:func:`benchmarks.tpch.ensure_data`) is loaded into a caslake table on the local
filesystem; 100 of its rows are appended again as one small commit; then
``changes(v)`` of that commit is read through a store wrapper that counts the
bytes every GET and ranged GET returns, per key.  The goal: the data bytes read
are those of the appended file only, at most its size; the rest is metadata
(pointer, two manifests).  Also checked: the feed of a one-row delete reads one
file, at most one row group and its footer (pyarrow decodes whole row groups);
and the feeds' wall times are reported.

``python -m benchmarks.change_feed [--quick]`` (``--quick``: SF0.1).
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pyarrow.parquet as pq

import caslake
from benchmarks.tpch import _plain_strings, ensure_data
from caslake.store import open_store
from caslake.store.base import GetResult, Mode, ObjectMeta, ObjectStore, PutMode

SMALL_APPEND = 100


class ByteCounter(ObjectStore):
    """Delegates to ``inner``; counts the bytes each key's GETs returned.  Hands out no
    local paths, so every read goes through the counted calls."""

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

    def data_bytes(self) -> dict[str, int]:
        """Bytes read per data file since the last :meth:`reset`."""
        return {k: n for k, n in self.read.items() if k.startswith("data/")}

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


def _feed(t: caslake.Table, store: ByteCounter, version: int) -> tuple[int, float, int]:
    """Rows, seconds, and every byte read by the feed of ``version`` (store reset first)."""
    store.reset()
    t0 = time.perf_counter()
    n = t.changes(version).to_arrow().num_rows
    return n, time.perf_counter() - t0, sum(store.read.values())


def main(quick: bool = False) -> int:
    sf = 0.1 if quick else 1.0
    data = _plain_strings(pq.read_table(ensure_data(sf) / "lineitem.parquet"))
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="caslake-cf-") as tmp:
        root = str(Path(tmp) / "lineitem")
        t0 = time.perf_counter()
        caslake.create_table(root, data.schema).append(data)
        load_s = time.perf_counter() - t0
        store = ByteCounter(open_store(root))
        t = caslake.Table.load(store)
        before = {f["path"] for f in t.live_files()}
        res = t.append(data.slice(1000, SMALL_APPEND))
        added = [f for f in t.live_files() if f["path"] not in before]
        rows, secs, total = _feed(t, store, res.version)
        read = store.data_bytes()
        table_bytes = sum(f["bytes"] for f in t.live_files())
        print(f"\nchange feed of a {SMALL_APPEND}-row append on TPC-H SF{sf:g} lineitem "
              f"({data.num_rows:,} rows, {len(before)} file(s), {table_bytes:,} bytes; "
              f"loaded in {load_s:.1f}s)")
        print(f"  feed rows {rows}, {secs * 1000:.1f} ms; bytes read: data {sum(read.values()):,}"
              f" of the appended file's {added[0]['bytes']:,}, all objects {total:,}")
        if rows != SMALL_APPEND:
            failures.append(f"the feed has {rows} rows, not {SMALL_APPEND}")
        if set(read) != {added[0]["path"]} or read[added[0]["path"]] > added[0]["bytes"]:
            failures.append(f"the feed read data files {sorted(read)} ({read}), not only the "
                            f"appended {added[0]['path']}")
        key = data.column("l_orderkey")[len(data) // 2].as_py()
        line = data.column("l_linenumber")[len(data) // 2].as_py()
        d = t.delete(f"l_orderkey = {key} AND l_linenumber = {line}")
        rows, secs, total = _feed(t, store, d.version)
        read = store.data_bytes()
        meta = pq.ParquetFile(str(Path(root) / next(iter(read)))).metadata if read else None
        groups = [sum(meta.row_group(i).column(c).total_compressed_size
                      for c in range(meta.num_columns)) for i in range(meta.num_row_groups)
                  ] if meta is not None else [0]
        bound = max(groups) + (meta.serialized_size + 8 if meta is not None else 0)
        print(f"  one-row delete: feed rows {rows}, {secs * 1000:.1f} ms; data bytes read "
              f"{sum(read.values()):,} in {len(read)} file(s) of {len(groups)} row group(s), "
              f"the largest {max(groups):,} bytes (the table: {table_bytes:,}); all objects "
              f"{total:,}")
        if rows != d.rows_deleted or len(read) != 1 or sum(read.values()) > bound:
            failures.append(f"the one-row delete's feed read {read}, more than one row "
                            f"group and the footer ({bound:,} bytes)")
    for f in failures:
        print(f"  GOAL MISSED: {f}")
    print("  goal: only the changed file's bytes of data: " + ("met" if not failures
                                                                else "MISSED"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(quick="--quick" in sys.argv))
