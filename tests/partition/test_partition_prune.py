"""Pruning by partition values from predicates on the source column: a one-day query
reads only that day's files (bytes counted by the store's counters), a range prunes
the days before it, and bucket pruning skips files whose statistics cover the key.
Every answer equals pyarrow's filter of the same rows."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import caslake
from caslake.core import MetadataIO
from tests.partition.data import SCHEMA, events, sort


def cold(uri: str) -> caslake.Table:
    t = caslake.open_table(uri)
    t.context.io = MetadataIO(t.store)
    t.store.counters.reset()
    return t


def test_a_one_day_query_reads_only_that_days_files(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA, partition_by=["day(ts)"])
    data = events(20_000, seed=4, days=5)
    t.append(data)
    t.append(events(5000, seed=5, days=5, first_id=20_000))
    data = pa.concat_tables([data, events(5000, seed=5, days=5, first_id=20_000)])
    files = t.io.live_files(t.context.refresh())
    day = (dt.datetime(2026, 11, 1) - dt.datetime(1970, 1, 1)).days
    that_day = [f for f in files if list(f.partition.values) == [day]]
    assert len(that_day) == 2 and len(files) == 10
    c = cold(uri)
    where = "ts >= '2026-11-01' AND ts < '2026-11-02'"
    scan = c.scan(where=where)
    plan = scan.plan()
    got = scan.to_arrow()
    assert {tk.file.path for tk in plan.tasks} == {f.path for f in that_day}
    want = data.filter(pc.and_(pc.greater_equal(data["ts"], pa.scalar(dt.datetime(2026, 11, 1))),
                               pc.less(data["ts"], pa.scalar(dt.datetime(2026, 11, 2)))))
    assert sort(got).equals(sort(want.cast(got.schema)))
    counters = c.store.counters.snapshot()
    metadata = sum(c.store.get(k).size for k in [c.context.refresh().key, "_latest_manifest"])
    assert counters["bytes_in"] <= sum(f.size for f in that_day) + metadata
    # A lower bound on the source column prunes every day before it.
    later = c.scan(where="ts >= '2026-11-02'").plan()
    assert len(later.tasks) == 2 * 2  # 2026-11-02 and -03, two appends each
    assert all(tk.file.partition.values[0] >= day + 1 for tk in later.tasks)


def test_bucket_pruning_skips_files_their_statistics_cannot(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA, partition_by=["bucket(8, user_id)"])
    data = events(20_000, seed=6)
    t.append(data)
    files = t.io.live_files(t.context.refresh())
    assert len(files) == 8
    # Every file's user_id statistics cover 500: statistics alone prune nothing.
    assert all(f.stats[3]["min"] <= 500 <= f.stats[3]["max"] for f in files)
    from pyiceberg.transforms import BucketTransform
    from pyiceberg.types import LongType

    bucket = BucketTransform(8).transform(LongType())
    for where, keys in [("user_id = 500", {500}), ("user_id IN (500, 701)", {500, 701}),
                        ("user_id = 500 AND amount > 50", {500})]:
        scan = cold(uri).scan(where=where)
        plan = scan.plan()
        assert {tk.file.partition.values[0] for tk in plan.tasks} == {bucket(k) for k in keys}
        got = scan.to_arrow()
        want = data.filter(pc.is_in(data["user_id"], pa.array(sorted(keys), pa.int64())))
        if "amount" in where:
            want = want.filter(pc.greater(want["amount"], 50))
        assert sort(got).equals(sort(want.cast(got.schema))), where
    # Predicates bucket values cannot decide read every file, and answer right.
    for where in ["user_id != 5", "NOT (user_id = 5)", "user_id > 5", "user_id = 5 OR amount < 1"]:
        scan = cold(uri).scan(where=where)
        assert len(scan.plan().tasks) == 8, where
        n = scan.to_arrow().num_rows
        import duckdb

        assert n == duckdb.sql(f"select count(*) from data where {where}").fetchone()[0], where


@pytest.mark.parametrize(("spec", "where", "want_files"), [
    (["identity(region)"], "region = 'eu'", 1),
    (["identity(region)"], "region IN ('eu', 'us')", 2),
    (["identity(region)"], "region IS NULL", 0),
    (["truncate(100, user_id)"], "user_id BETWEEN 150 AND 260", 2),
    (["month(ts)"], "ts < '2026-11-01'", 1),
    (["year(ts)"], "ts >= '2027-01-01'", 0),
])
def test_other_transforms_prune_by_their_source_bounds(
        tmp_path: Path, spec: list[str], where: str, want_files: int) -> None:
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA, partition_by=spec)
    data = events(5000, seed=7)
    t.append(data)
    scan = cold(uri).scan(where=where)
    assert len(scan.plan().tasks) == want_files
    import duckdb

    want = duckdb.sql(f"select * from data where {where}").fetch_arrow_table()
    got = scan.to_arrow()
    assert sort(got).equals(sort(want.cast(got.schema)))
