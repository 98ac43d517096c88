"""Shared pieces of the dataset tests: deterministic data and a recording store."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa

from caslake.store.base import GetResult, Mode, ObjectMeta, ObjectStore, PutMode
from caslake.store.faults import Fault, FaultyStore

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("s", pa.string()),
                    pa.field("f", pa.float64())])


def table(lo: int, hi: int, tag: str = "") -> pa.Table:
    ids = list(range(lo, hi))
    return pa.table({"id": pa.array(ids, pa.int64()),
                     "s": pa.array([None if i % 7 == 0 else f"{tag}s{i % 13}" for i in ids]),
                     "f": pa.array([None if i % 5 == 0 else i * 0.25 for i in ids])},
                    schema=SCHEMA)


class RecordingStore(FaultyStore):
    """A real store that logs every call as ``(op, key)`` and can run a hook before
    chosen puts (to act "during" a write).  Reads never use local paths, so every
    read shows in the log."""

    def __init__(self, inner: ObjectStore, faults: Sequence[Fault] = ()) -> None:
        super().__init__(inner, faults)
        self.log: list[tuple[str, str]] = []
        self.before_put: Callable[[str], None] | None = None

    def _record(self, op: str, key: str) -> None:
        self.log.append((op, key))

    def get(self, key: str) -> GetResult:
        self._record("get", key)
        return super().get(key)

    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]], *,
                   etag: str | None = None) -> list[bytes]:
        self._record("get_ranges", key)
        return super().get_ranges(key, ranges, etag=etag)

    def head(self, key: str) -> ObjectMeta:
        self._record("head", key)
        return super().head(key)

    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        self._record("list", prefix)
        return super().list(prefix)

    def delete(self, key: str) -> None:
        self._record("delete", key)
        super().delete(key)

    def put(self, key: str, data: bytes, *, mode: Mode = PutMode.OVERWRITE) -> str:
        if self.before_put is not None:
            self.before_put(key)
        self._record("put", key)
        return super().put(key, data, mode=mode)

    def put_file(self, key: str, path: str, *, mode: Mode = PutMode.CREATE) -> str:
        if self.before_put is not None:
            self.before_put(key)
        self._record("put", key)
        return super().put_file(key, path, mode=mode)

    def keys(self, op: str) -> list[str]:
        return [k for o, k in self.log if o == op]
