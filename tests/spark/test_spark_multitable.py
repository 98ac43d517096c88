"""Spark ``foreachBatch`` into two tables in one transaction, exactly once
(``caslake.spark.write_many(..., txn=(app id, batch id))``): a real streaming query
over a file source writes each micro-batch to ``orders`` and ``items`` atomically;
it crashes once after its first batch committed and before Spark checkpointed it, and the
restarted query runs that batch again, which changes neither table.  The final
contents are compared with Spark's own read of the source."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

import caslake
import caslake.spark
from caslake.errors import DuplicateKey, InvalidArgument, SchemaMismatch, TableNotFound
from caslake.store import open_store
from tests.spark.helpers import data_files

pytestmark = [pytest.mark.spark,
              pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]

SOURCE = "order_id BIGINT, customer STRING, sku STRING, qty BIGINT"
ORDERS = pa.schema([("order_id", pa.int64()), ("customer", pa.string())])
ITEMS = pa.schema([("order_id", pa.int64()), ("sku", pa.string()), ("qty", pa.int64())])
APP = "orders-ingest"


def add_source_file(src: Path, n: int, orders: range) -> None:
    """One JSON-lines file: two item lines per order, renamed into place."""
    src.mkdir(exist_ok=True)
    tmp = src.parent / f".tmp-{n}.json"
    tmp.write_text("".join(json.dumps({"order_id": o, "customer": f"c{o % 4}",
                                       "sku": f"s{k}", "qty": o * 10 + k}) + "\n"
                           for o in orders for k in (1, 2)))
    os.replace(tmp, src / f"part-{n:03d}.json")


def run_query(spark: SparkSession, src: Path, ckpt: Path, sink: Any) -> None:
    stream = spark.readStream.schema(SOURCE).option("maxFilesPerTrigger", 1).json(str(src))
    query = (stream.writeStream.foreachBatch(sink).option("checkpointLocation", str(ckpt))
             .trigger(availableNow=True).start())
    try:
        query.awaitTermination(180)
    finally:
        query.stop()


def records(uri: str) -> set[str]:
    """The decision records under the table (its ``_txn/``)."""
    return {m.key for m in open_store(uri).list("_txn/")}


def split(batch: DataFrame) -> tuple[DataFrame, DataFrame]:
    return (batch.select("order_id", "customer").distinct(),
            batch.select("order_id", "sku", "qty"))


def sorted_rows(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted(rows)


def caslake_rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted_rows(list(zip(*(table[c].to_pylist() for c in table.column_names),
                                strict=True)))


def test_foreach_batch_into_two_tables_is_atomic_and_exactly_once(spark: SparkSession,
                                                                  tmp_path: Path) -> None:
    src, ckpt, crashed = tmp_path / "src", tmp_path / "ckpt", tmp_path / "crashed"
    o_uri, i_uri = str(tmp_path / "orders"), str(tmp_path / "items")
    caslake.create_table(o_uri, ORDERS)
    caslake.create_table(i_uri, ITEMS)
    for n in range(2):
        add_source_file(src, n, range(n * 3, n * 3 + 3))
    seen: list[tuple[int, bool, bool]] = []
    contents: list[tuple[int, set[int]]] = []  # each batch's orders, as Spark gave them

    def sink(batch: DataFrame, batch_id: int) -> None:
        contents.append((batch_id, {r[0] for r in batch.select("order_id").collect()}))
        orders, items = split(batch)
        res = caslake.spark.write_many({o_uri: orders, i_uri: items}, txn=(APP, batch_id))
        seen.append((batch_id, res[o_uri].noop, res[i_uri].noop))
        if batch_id == 0 and not crashed.exists():
            crashed.touch()
            raise RuntimeError("crash after the commit, before Spark's checkpoint")

    with pytest.raises(StreamingQueryException, match="crash after the commit"):
        run_query(spark, src, ckpt, sink)
    files = (data_files(o_uri), data_files(i_uri))
    run_query(spark, src, ckpt, sink)  # the restart runs batch 0 again, then batch 1
    assert seen == [(0, False, False), (0, True, True), (1, False, False)]
    orders, items = caslake.open_table(o_uri), caslake.open_table(i_uri)
    # create + one version per batch in each table; the replay added no files
    assert orders.version == items.version == 2
    assert orders.snapshot.manifest.txns == items.snapshot.manifest.txns == {APP: 1}
    assert files[0] <= data_files(o_uri) and files[1] <= data_files(i_uri)

    # Spark's own read of the source: every row once, nothing more.
    source = spark.read.schema(SOURCE).json(str(src))
    want_o, want_i = split(source)
    assert caslake_rows(orders.to_arrow()) == sorted_rows([tuple(r) for r in want_o.collect()])
    assert caslake_rows(items.to_arrow()) == sorted_rows([tuple(r) for r in want_i.collect()])
    # Each batch landed in both tables together: version k of each holds batches < k
    # (the file source picks its files in its own order; the replay saw the same rows).
    assert contents[0] == contents[1]
    firsts = [c for i, c in enumerate(contents) if i != 1]
    assert [b for b, _ in firsts] == [0, 1]
    for k in range(3):
        want = set().union(*(ids for _, ids in firsts[:k]))
        assert set(orders.to_arrow(version=k)["order_id"].to_pylist()) == want
        assert set(items.to_arrow(version=k)["order_id"].to_pylist()) == want
    assert sorted(caslake.snapshot(orders, items).versions.values()) == [2, 2]

    # A replay outside the stream: nothing changes, no job writes a file, no
    # decision record is written.
    before = (data_files(o_uri), data_files(i_uri), records(o_uri), records(i_uri))
    batch = source.where("order_id < 3")
    res = caslake.spark.write_many(dict(zip((o_uri, i_uri), split(batch), strict=True)),
                                   txn=(APP, 0))
    assert all(r.noop for r in res.values())
    assert (data_files(o_uri), data_files(i_uri), records(o_uri), records(i_uri)) == before
    assert orders.refresh().version == items.refresh().version == 2


def _merged(old: list[tuple[Any, ...]], new: list[tuple[Any, ...]], width: int
            ) -> list[tuple[Any, ...]]:
    """``old`` with every row whose first ``width`` values are a key of ``new``
    replaced by ``new``'s rows (a keyed upsert, in plain Python)."""
    keys = {r[:width] for r in new}
    return sorted([r for r in old if r[:width] not in keys] + new)


def test_a_cdc_batch_upserts_two_tables_at_once_and_bad_input_leaves_nothing(spark: SparkSession,
                                                           tmp_path: Path) -> None:
    o_uri, i_uri = str(tmp_path / "orders"), str(tmp_path / "items")
    o_rows = [(1, "a"), (2, "b"), (3, "c")]
    i_rows = [(1, "x", 1), (1, "y", 2), (2, "x", 3)]
    orders = caslake.create_table(o_uri, ORDERS)
    items = caslake.create_table(i_uri, ITEMS)
    orders.append(pa.Table.from_pylist([dict(zip(ORDERS.names, r, strict=True))
                                        for r in o_rows], schema=ORDERS))
    items.append(pa.Table.from_pylist([dict(zip(ITEMS.names, r, strict=True))
                                       for r in i_rows], schema=ITEMS))
    o_new, i_new = [(2, "B"), (4, "d")], [(1, "y", 20), (4, "z", 5)]
    o_cdc = spark.createDataFrame(o_new, "order_id long, customer string")
    i_cdc = spark.createDataFrame(i_new, "order_id long, sku string, qty long")
    keys = {o_uri: "order_id", i_uri: ["order_id", "sku"]}
    res = caslake.spark.write_many({o_uri: o_cdc, i_uri: i_cdc}, keys=keys, txn=("cdc", 0))
    assert [r.version for r in res.values()] == [2, 2]
    snap = caslake.snapshot(orders, items)
    assert caslake_rows(snap.to_arrow(orders)) == _merged(o_rows, o_new, 1)
    assert caslake_rows(snap.to_arrow(items)) == _merged(i_rows, i_new, 2)
    # replayed: nothing changes; a key twice in one table's batch: nothing anywhere
    again = caslake.spark.write_many({o_uri: o_cdc, i_uri: i_cdc}, keys=keys, txn=("cdc", 0))
    assert all(r.noop for r in again.values())
    twice = spark.createDataFrame([(1, "y", 7), (1, "y", 8)], "order_id long, sku string, qty long")
    with pytest.raises(DuplicateKey):
        caslake.spark.write_many({o_uri: o_cdc, i_uri: twice}, keys=keys, txn=("cdc", 1))
    bad = spark.createDataFrame([(1, "s1", "many")], "order_id long, sku string, qty string")
    files = (data_files(o_uri), data_files(i_uri))
    with pytest.raises(SchemaMismatch, match="qty"):
        caslake.spark.write_many({o_uri: o_cdc, i_uri: bad}, txn=("cdc", 1))
    # the first table's files (Spark wrote them before the second failed) are removed
    assert (data_files(o_uri), data_files(i_uri)) == files
    assert orders.refresh().version == items.refresh().version == 2
    with pytest.raises(TableNotFound):
        caslake.spark.write_many({o_uri: o_cdc, str(tmp_path / "nope"): o_cdc})
    with pytest.raises(InvalidArgument, match="writes"):
        caslake.spark.write_many({})
    with pytest.raises(InvalidArgument, match=r"writes\[.*orders.*\]"):
        caslake.spark.write_many({o_uri: [1, 2]})  # type: ignore[dict-item]
    with pytest.raises(InvalidArgument, match="txn"):
        caslake.spark.write_many({o_uri: o_cdc}, txn=("cdc", -1))
    with pytest.raises(InvalidArgument, match="keys"):
        caslake.spark.write_many({o_uri: o_cdc}, keys={i_uri: "order_id"})
