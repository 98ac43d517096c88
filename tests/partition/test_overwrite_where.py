"""``overwrite(data, where=...)`` (Delta's replaceWhere) replaces exactly the rows the
predicate matches (checked against DuckDB running the same replacement); rows of
``data`` outside it are a typed error; and a delete covering whole partitions drops
their files without reading them."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import caslake
from caslake.core import MetadataIO
from caslake.errors import CaslakeError
from tests.partition.data import SCHEMA, events, sort

DAY = "ts >= '2026-11-01' AND ts < '2026-11-02'"


def replaced(old: pa.Table, new: pa.Table, where: str) -> pa.Table:
    """DuckDB's answer: the old rows the predicate does not match, plus the new rows."""
    return duckdb.sql(f"select * from old where not coalesce({where}, false) "
                      f"union all select * from new").fetch_arrow_table()


@pytest.mark.parametrize("partition_by", [["day(ts)"], None])
def test_overwrite_where_replaces_exactly_one_day(tmp_path: Path,
                                                  partition_by: list[str] | None) -> None:
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA, partition_by=partition_by)
    old = events(6000, seed=10, days=4)
    t.append(old)
    new = events(500, seed=11, days=1, first_id=10_000, start=__import__("datetime").datetime(
        2026, 11, 1))
    res = t.overwrite(new, where=DAY)
    assert res.operation == "overwrite" and res.rows_added == 500
    got = t.scan().to_arrow()
    assert sort(got).equals(sort(replaced(old, new, DAY).cast(got.schema)))
    if partition_by:
        m = t.context.refresh().manifest
        assert not m.tombstones  # the day's old files were dropped whole
        files = t.io.live_files(t.context.refresh())
        assert len(files) == 4 and all(f.partition is not None for f in files)


def test_rows_outside_the_predicate_are_a_typed_error(tmp_path: Path) -> None:
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["day(ts)"])
    t.append(events(1000, seed=12))
    version = t.refresh().version
    bad = events(100, seed=13, days=3, first_id=5000)
    with pytest.raises(CaslakeError) as err:
        t.overwrite(bad, where=DAY)
    assert "where" in str(err.value) and "row" in str(err.value)
    assert t.refresh().version == version
    nulls = events(10, seed=14, days=1).set_column(1, "ts", pa.nulls(10, pa.timestamp("us")))
    with pytest.raises(CaslakeError):
        t.overwrite(nulls, where=DAY)


def test_a_delete_of_whole_partitions_drops_files_unread(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA, partition_by=["day(ts)", "region"])
    data = events(9000, seed=15, days=3)
    t.append(data)
    before = t.io.live_files(t.context.refresh())
    t2 = caslake.open_table(uri)
    t2.context.io = MetadataIO(t2.store)
    t2.store.counters.reset()
    res = t2.delete("ts >= '2026-10-31' AND ts < '2026-11-01' AND region IN ('eu', 'us')")
    c = t2.store.counters.snapshot()
    assert res.files_removed == 2 and res.rows_deleted > 0
    assert c.get("get_range", 0) == 0  # no footer, no column chunk was read
    assert not t2.context.refresh().manifest.tombstones
    assert len(t2.io.live_files(t2.context.refresh())) == len(before) - 2
    want = duckdb.sql("select * from data where not (ts >= '2026-10-31' AND ts < '2026-11-01' "
                      "AND region IN ('eu', 'us'))").fetch_arrow_table()
    got = t2.scan().to_arrow()
    assert sort(got).equals(sort(want.cast(got.schema)))
    # A delete inside one partition still tombstones rows, as before.
    res = t2.delete("ts >= '2026-11-01' AND amount < 10")
    assert res.files_removed == 0 and res.rows_deleted > 0
