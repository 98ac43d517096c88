"""A table with every exportable type, and the operation history the acceptance
tests export: appends, a one-row delete, a range delete, an upsert, a compaction."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal

import pyarrow as pa

import caslake
from caslake.api import Table

SCHEMA = pa.schema([
    pa.field("id", pa.int64()), pa.field("small", pa.int32()), pa.field("f", pa.float64()),
    pa.field("r", pa.float32()), pa.field("dec", pa.decimal128(12, 3)),
    pa.field("s", pa.string()), pa.field("bin", pa.binary()), pa.field("day", pa.date32()),
    pa.field("ts", pa.timestamp("us")), pa.field("tstz", pa.timestamp("us", tz="UTC")),
    pa.field("ok", pa.bool_()),
])


def rows(lo: int, hi: int, tag: str = "") -> pa.Table:
    """Rows ``lo..hi-1``; every column has nulls (on different rows)."""
    ids = range(lo, hi)

    def col(fn: Callable[[int], object], every: int) -> list[object]:
        return [None if i % every == 3 else fn(i) for i in ids]

    return pa.table({
        "id": list(ids),
        "small": col(lambda i: (i * 7) % 1000 - 500, 5),
        "f": col(lambda i: i / 7 - 100.5, 6),
        "r": col(lambda i: float(i % 50) / 4, 7),
        "dec": col(lambda i: Decimal(i * 1001) / 1000 - 50, 8),
        "s": col(lambda i: f"{tag}s-{i:05d}-é", 9),
        "bin": col(lambda i: bytes([i % 256, (i * 3) % 256]), 10),
        "day": col(lambda i: dt.date(1969, 12, 1) + dt.timedelta(days=i), 11),
        "ts": col(lambda i: dt.datetime(2020, 2, 29, 23, 59) + dt.timedelta(microseconds=i * 997),
                  12),
        "tstz": col(lambda i: dt.datetime(1999, 12, 31, 23, tzinfo=dt.UTC)
                    + dt.timedelta(seconds=i * 61), 13),
        "ok": col(lambda i: i % 3 == 0, 4),
    }, schema=SCHEMA)


def history(t: Table) -> list[tuple[str, Callable[[], object]]]:
    """The operations, in order (each one commit)."""
    return [
        ("append", lambda: t.append(rows(0, 300))),
        ("append", lambda: t.append(rows(300, 600))),
        ("one-row delete", lambda: t.delete("id = 7")),
        ("range delete", lambda: t.delete("id BETWEEN 320 AND 420")),
        ("upsert", lambda: t.upsert(pa.concat_tables([rows(10, 20, "u"), rows(590, 610, "u")]),
                                    key="id")),
        ("compaction", lambda: t.compact(deleted_fraction=0.01)),
        ("append after compaction", lambda: t.append(rows(1000, 1050))),
        ("delete after compaction", lambda: t.delete("id < 5 OR id = 1049")),
    ]


def new_table(uri: str, **kw: object) -> Table:
    return caslake.create_table(uri, SCHEMA, **kw)  # type: ignore[arg-type]
