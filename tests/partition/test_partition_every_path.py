"""Every write path splits its files by partition on a partitioned table: a
transaction's append and upsert, ``Table.upsert``, and the rows UPDATE and MERGE
append.  Each file's rows lie in one partition (pyarrow and pyiceberg recompute it
from the file) and a one-day query reads only that day's files and equals DuckDB
over the expected rows (:mod:`tests.partition.layout`)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import pyarrow as pa

import caslake
from tests.partition.data import SCHEMA, events
from tests.partition.layout import PARTITION_BY, check_layout, file_partitions

DAY = dt.date(2026, 10, 31)


def table(tmp_path: Path) -> tuple[str, caslake.Table]:
    uri = str(tmp_path / "t")
    return uri, caslake.create_table(uri, SCHEMA, partition_by=PARTITION_BY)


def test_transaction_append_and_upsert_split_by_partition(tmp_path: Path) -> None:
    uri, t = table(tmp_path)
    first, second = events(600, seed=1, days=3), events(300, seed=2, days=3, first_id=600)
    with t.transaction() as tx:
        tx.append(first)
        tx.append(second)
    assert len(file_partitions(t)) > 8
    # An upsert in a transaction: new values for ids 0..199, and new ids.
    changed = events(300, seed=3, days=3, first_id=0).set_column(
        4, "amount", pa.array([-1.0] * 300))
    changed = pa.concat_tables([changed.slice(0, 200), events(100, seed=4, days=3,
                                                              first_id=5000)])
    with t.transaction() as tx:
        tx.upsert(changed, key="id")
    kept = pa.concat_tables([first, second]).filter(
        pa.compute.invert(pa.compute.is_in(pa.concat_tables([first, second])["id"],
                                           changed["id"])))
    check_layout(uri, pa.concat_tables([kept, changed]), DAY)


def test_table_upsert_splits_by_partition(tmp_path: Path) -> None:
    uri, t = table(tmp_path)
    base = events(500, seed=5, days=3)
    t.append(base)
    change = events(200, seed=6, days=3, first_id=400)  # 100 updates, 100 new
    t.upsert(change, key="id")
    expected = pa.concat_tables([base.slice(0, 400), change])
    check_layout(uri, expected, DAY)


def test_update_and_merge_append_rows_split_by_partition(tmp_path: Path) -> None:
    uri, t = table(tmp_path)
    base = events(600, seed=7, days=3)
    t.append(base)
    # UPDATE moves rows across days and buckets (ts and id change).
    t.update(set={"ts": "ts + INTERVAL 1 DAY", "id": "id + 10000"}, where="amount < 30")
    source = events(300, seed=8, days=3, first_id=450)  # 150 matched, 150 new
    (t.merge(source, on="id").when_matched_update_all()
     .when_not_matched_insert_all().execute())
    con = duckdb.connect()
    con.register("base", base)
    con.register("source", source)
    con.execute("create table e as select * from base")
    con.execute("update e set ts = ts + INTERVAL 1 DAY, id = id + 10000 where amount < 30")
    con.execute("merge into e using source on e.id = source.id "
                "when matched then update set * when not matched then insert *")
    expected = con.execute("select * from e").fetch_arrow_table()
    check_layout(uri, expected, DAY)
