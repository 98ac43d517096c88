"""Partitioning survives compaction and cloning: compaction rewrites files within one
partition (every output file has one partition and still prunes), a clone keeps each
file's partition and the table's specs (a one-day query on a clone, and on a clone of
a clone, reads only that day's files, bytes counted).  Rows are checked against
DuckDB and pyarrow running the same query on the same data."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

import caslake
from caslake.core import MetadataIO
from caslake.format import PARTITION_FORMAT_VERSION
from caslake.format.manifest import DataFile
from caslake.format.partition import transform_array
from tests.partition.data import SCHEMA, events, sort

ONE_DAY = "ts >= '2026-11-01' AND ts < '2026-11-02'"
DAY = (dt.datetime(2026, 11, 1) - dt.datetime(1970, 1, 1)).days


def duck(data: pa.Table, where: str = "true") -> pa.Table:
    return duckdb.sql(f"select * from data where {where}").fetch_arrow_table()


def live(t: caslake.Table) -> list[DataFile]:
    return t.io.live_files(t.context.refresh())


def values_of(t: caslake.Table, f: DataFile, transforms: list[tuple[str, int, str]]
              ) -> set[tuple[object, ...]]:
    """The distinct partition tuples of the rows stored in ``f`` (read with pyarrow)."""
    import pyarrow.parquet as pq

    path = t.store.local_path(f.path)
    assert path is not None
    rows = pq.read_table(path)
    cols = [transform_array(kind, n, rows.column(col)).to_pylist()
            for kind, n, col in transforms]
    return set(zip(*cols, strict=True))


def cold(uri: str) -> caslake.Table:
    t = caslake.open_table(uri)
    t.context.io = MetadataIO(t.store)
    for s in [t.store, *getattr(t.store, "external", {}).values()]:
        s.counters.reset()
    return t


def bytes_in(t: caslake.Table) -> int:
    return sum(s.counters.snapshot().get("bytes_in", 0)
               for s in [t.store, *getattr(t.store, "external", {}).values()])


def test_compaction_keeps_every_file_in_one_partition(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA, partition_by=["day(ts)", "region"])
    parts = [events(400, seed=30 + i, days=3, first_id=i * 1000) for i in range(4)]
    for p in parts:
        t.append(p)  # 4 appends x 3 days x 3 regions: 36 small files
    data = pa.concat_tables(parts)
    t.delete("amount < 20")
    before = live(t)
    assert len(before) == 36
    res = t.compact()
    assert res.operation == "compact" and res.files_removed == 36
    after = live(t)
    assert len(after) == 9  # one file per (day, region)
    transforms = [("day", 0, "ts"), ("identity", 0, "region")]
    for f in after:
        assert f.partition is not None and f.partition.spec_id == 0
        assert values_of(t, f, transforms) == {tuple(f.partition.values)}
    assert len({f.partition for f in after}) == 9
    want = duck(data, "not (amount < 20)")
    got = t.scan().to_arrow()
    assert sort(got).equals(sort(want.cast(got.schema)))
    # Pruning still works on the compacted files: one day, one region -> one file.
    c = cold(uri)
    where = f"{ONE_DAY} AND region = 'eu'"
    plan = c.scan(where=where).plan()
    assert [tk.file.partition.values for tk in plan.tasks] == [(DAY, "eu")]
    got = c.scan(where=where).to_arrow()
    assert sort(got).equals(sort(duck(data, f"not (amount < 20) AND {where}").cast(got.schema)))


def test_compaction_keeps_each_spec_apart(tmp_path: Path) -> None:
    """Files of an old spec and of the new one are compacted separately, each keeping
    its spec; a partition with one small file is left alone."""
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA, partition_by=["day(ts)"])
    old = [events(300, seed=40 + i, days=2, first_id=i * 1000) for i in range(2)]
    for p in old:
        t.append(p)
    t.update_spec(["bucket(4, user_id)"])
    new = [events(300, seed=50 + i, days=2, first_id=10_000 + i * 1000) for i in range(2)]
    for p in new:
        t.append(p)
    lone = events(5, seed=60, days=1, first_id=50_000, start=dt.datetime(2027, 1, 1))
    t.update_spec(["day(ts)"])
    t.append(lone)  # a day of spec 2 with one small file: nothing to gain
    t.compact()
    after = live(t)
    by_spec: dict[int, list[DataFile]] = {}
    for f in after:
        assert f.partition is not None
        by_spec.setdefault(f.partition.spec_id, []).append(f)
    assert len(by_spec[0]) == 2 and len(by_spec[1]) == 4 and len(by_spec[2]) == 1
    for f in by_spec[0]:
        assert values_of(t, f, [("day", 0, "ts")]) == {tuple(f.partition.values)}
    for f in by_spec[1]:
        assert values_of(t, f, [("bucket", 4, "user_id")]) == {tuple(f.partition.values)}
    data = pa.concat_tables([*old, *new, lone])
    got = t.scan().to_arrow()
    assert sort(got).equals(sort(duck(data).cast(got.schema)))
    got = t.scan(where="user_id = 7").to_arrow()
    assert sort(got).equals(sort(duck(data, "user_id = 7").cast(got.schema)))


def _one_day_reads_one_day(uri: str, data: pa.Table) -> None:
    c = cold(uri)
    m = c.context.refresh().manifest
    assert m.format_version >= PARTITION_FORMAT_VERSION
    assert m.partitioning is not None and m.partitioning.default.describe(m.schema) == [
        "day(ts)"]
    files = live(c)
    assert all(f.partition is not None for f in files)
    that_day = [f for f in files if list(f.partition.values) == [DAY]]
    assert len(that_day) == 1 and len(files) == 5
    for s in [c.store, *getattr(c.store, "external", {}).values()]:
        s.counters.reset()
    scan = c.scan(where=ONE_DAY)
    assert [tk.file.path for tk in scan.plan().tasks] == [that_day[0].path]
    got = scan.to_arrow()
    want = data.filter(pc.and_(pc.greater_equal(data["ts"], pa.scalar(dt.datetime(2026, 11, 1))),
                               pc.less(data["ts"], pa.scalar(dt.datetime(2026, 11, 2)))))
    assert sort(got).equals(sort(want.cast(got.schema)))
    others = sum(f.size for f in files if f is not that_day[0])
    assert bytes_in(c) < that_day[0].size + others // 4  # nothing of the other days


def test_a_clone_keeps_partitions_and_prunes(tmp_path: Path) -> None:
    src = str(tmp_path / "src")
    t = caslake.create_table(src, SCHEMA, partition_by=["day(ts)"])
    data = events(20_000, seed=70, days=5)
    t.append(data)
    caslake.clone(src, str(tmp_path / "c1"))
    _one_day_reads_one_day(str(tmp_path / "c1"), data)
    caslake.clone(str(tmp_path / "c1"), str(tmp_path / "c2"))
    _one_day_reads_one_day(str(tmp_path / "c2"), data)
    # The clone writes with the spec too: an append there splits by day.
    c2 = caslake.open_table(str(tmp_path / "c2"))
    more = events(1000, seed=71, days=5, first_id=100_000)
    c2.append(more)
    assert all(f.partition is not None for f in live(c2))
    got = c2.scan(where=ONE_DAY).to_arrow()
    both = pa.concat_tables([data, more])
    assert sort(got).equals(sort(duck(both, ONE_DAY).cast(got.schema)))
