"""Checks shared by the every-write-path partitioning tests (core and Spark): each
live file's rows, read back with pyarrow, lie in one partition of
``["day(ts)", "bucket(4, id)"]`` -- the day computed by pyarrow, the bucket by
pyiceberg's transform -- equal to the values the manifest records; and a one-day
query reads only that day's files (bytes counted by the store's counters) and
answers what DuckDB answers on the expected rows."""

from __future__ import annotations

import datetime as dt

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import LongType

import caslake
from caslake.core import MetadataIO

PARTITION_BY = ["day(ts)", "bucket(4, id)"]
_BUCKET = BucketTransform(4).transform(LongType())
_EPOCH = dt.datetime(1970, 1, 1)


def file_partitions(t: caslake.Table) -> dict[str, tuple[int, int]]:
    """Per live file: its one (day, bucket), computed from its rows (asserted single)
    and equal to the partition the manifest records for it."""
    snap = t.context.refresh()
    out = {}
    for f in t.io.live_files(snap):
        path = t.store.local_path(f.path)
        assert path is not None
        rows = pq.read_table(path, columns=["ts", "id"])
        ts = rows.column("ts").cast(pa.timestamp("us"))
        days = pc.days_between(pa.scalar(_EPOCH, pa.timestamp("us")), ts).to_pylist()
        found = {(d, _BUCKET(i)) for d, i in zip(days, rows.column("id").to_pylist(),
                                                  strict=True)}
        assert len(found) == 1, f"{f.path} spans partitions {sorted(found)}"
        assert f.partition is not None
        assert tuple(f.partition.values) == next(iter(found)), f.path
        out[f.path] = next(iter(found))
    return out


def check_layout(uri: str, expected: pa.Table, day: dt.date) -> None:
    """Every file in one partition; a query for ``day`` reads only its files and
    equals DuckDB's answer over ``expected`` (the rows the table should hold)."""
    t = caslake.open_table(uri)
    parts = file_partitions(t)
    number = (dt.datetime.combine(day, dt.time()) - _EPOCH).days
    sizes = {f.path: f.size for f in t.io.live_files(t.context.refresh())}
    that_day = {p for p, (d, _) in parts.items() if d == number}
    assert that_day and len(that_day) < len(parts)
    cold = caslake.open_table(uri)
    cold.context.io = MetadataIO(cold.store)
    cold.store.counters.reset()
    lo, hi = day.isoformat(), (day + dt.timedelta(days=1)).isoformat()
    where = f"ts >= '{lo}' AND ts < '{hi}'"
    scan = cold.scan(where=where)
    assert {task.file.path for task in scan.plan().tasks} <= that_day
    got = scan.to_arrow()
    read = cold.store.counters.snapshot()["bytes_in"]
    snap = t.context.refresh()
    metadata = sum(t.store.get(k).size for k in [snap.key, "_latest_manifest"]) + \
        sum(ref.size for ref in snap.manifest.tombstones)
    others = sum(sizes.values()) - sum(sizes[p] for p in that_day)
    assert read <= sum(sizes[p] for p in that_day) + metadata, (read, others)
    want = duckdb.sql(f"select * from expected where ts >= TIMESTAMP '{lo}' "
                      f"and ts < TIMESTAMP '{hi}' order by id").fetch_arrow_table()
    assert got.sort_by("id").equals(want.cast(got.schema))
