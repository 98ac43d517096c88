"""A bronze -> silver -> gold streaming pipeline on caslake tables (issue 30's demo
and its S3 test).

* **bronze** holds raw events (``event_id``, ``user_id``, ``event_type``,
  ``amount``), appended, corrected (upserts) and erased (deletes) by its owner;
* **silver** (:class:`SilverStage`) streams bronze's change feed and applies each
  micro-batch with ``foreachBatch``: per event, its last change in the batch
  decides -- a ``delete`` / ``update_preimage`` last deletes it, an ``insert`` /
  ``update_postimage`` last upserts it; rows without an amount are dropped
  (the cleaning).  The upsert is :func:`caslake.spark.upsert` with
  ``txn=(app id, batch id)``, so a replayed batch is applied once.  A purge's
  change rows carry no key (all NULL) and are ignored: erase with a delete first
  (it flows through), purge bronze later;
* **gold** (:class:`GoldStage`) streams silver's change feed and, per batch,
  recomputes the per-user aggregates of the users the batch touched from silver
  as of the batch's last version, and upserts them (users with no event left are
  deleted).
"""

from __future__ import annotations

import json
from contextlib import suppress
from dataclasses import dataclass, field

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from caslake.core import txn_applied
from caslake.errors import StreamingQueryFailed
from caslake.spark.dml import upsert
from caslake.store.options import StorageOptions
from caslake.table import open_table

KEY = "event_id"
ORDER = {"delete": 0, "update_preimage": 1, "insert": 2, "update_postimage": 3}


def _sql_list(values: list[object]) -> str:
    return ", ".join(repr(v) if isinstance(v, str) else str(v) for v in values)


@dataclass
class Stage:
    """One streaming stage: ``source``'s change feed into ``target`` via ``apply``."""

    spark: SparkSession
    source: str
    target: str
    checkpoint: str
    app_id: str
    storage_options: StorageOptions = field(default_factory=dict)  # type: ignore[assignment]

    def _options(self) -> dict[str, str]:
        opts = {"readChangeFeed": "true"}
        if self.storage_options:
            opts["storage_options"] = json.dumps(self.storage_options)
        return opts

    def start(self, *, available_now: bool = True) -> StreamingQuery:
        stream = self.spark.readStream.format("caslake").options(**self._options()) \
            .load(self.source)
        writer = stream.writeStream.foreachBatch(self.apply) \
            .option("checkpointLocation", self.checkpoint)
        writer = writer.trigger(availableNow=True) if available_now \
            else writer.trigger(processingTime="1 second")
        return writer.start()

    def run(self) -> None:
        """Process everything the source has now, then stop."""
        await_query(self.start(), f"pipeline stage {self.app_id} ({self.source} -> "
                                  f"{self.target})")

    def applied(self, batch_id: int) -> bool:
        table = open_table(self.target, storage_options=self.storage_options or None)
        return txn_applied(table.snapshot.manifest.txns, (self.app_id, batch_id))

    def apply(self, batch: DataFrame, batch_id: int) -> None:
        raise NotImplementedError

    def _delete_keys(self, column: str, keys: list[object]) -> None:
        if keys:
            table = open_table(self.target, storage_options=self.storage_options or None)
            table.delete(f"{column} IN ({_sql_list(keys)})")

    def _upsert(self, rows: DataFrame, key: str, batch_id: int) -> None:
        upsert(self.spark, self.target, rows, key, storage_options=self.storage_options or None,
               txn=(self.app_id, batch_id))


def await_query(query: StreamingQuery, name: str) -> None:
    """Wait for ``query`` to end; if it failed, raise :class:`StreamingQueryFailed`
    naming it (``name``) rather than PySpark's ``StreamingQueryException``."""
    with suppress(StreamingQueryException):  # raised below as caslake's error, named
        query.awaitTermination()
    failure = query.exception()
    if failure is not None:
        raise StreamingQueryFailed(f"{name} stopped: {failure}", query=name,
                                   cause=str(failure))


def last_changes(batch: DataFrame, key: str) -> DataFrame:
    """Each key's last change in a change-feed batch (rows without a key dropped)."""
    order = F.create_map(*[x for k, v in ORDER.items() for x in (F.lit(k), F.lit(v))])
    w = Window.partitionBy(key).orderBy(F.col("_commit_version").desc(),
                                        order[F.col("_change_type")].desc())
    return (batch.where(F.col(key).isNotNull()).withColumn("_rank", F.row_number().over(w))
            .where("_rank = 1").drop("_rank"))


class SilverStage(Stage):
    """bronze's change feed -> silver (see the module docstring)."""

    def apply(self, batch: DataFrame, batch_id: int) -> None:
        if self.applied(batch_id):
            return  # a replay of a batch already applied
        last = last_changes(batch, KEY).cache()
        try:
            keep = F.col("_change_type").isin("insert", "update_postimage") \
                & F.col("amount").isNotNull()  # never NULL: ~keep is the rest
            gone = [r[KEY] for r in last.where(~keep).select(KEY).collect()]
            self._delete_keys(KEY, gone)
            self._upsert(last.where(keep).drop("_change_type", "_commit_version",
                                               "_commit_timestamp"), KEY, batch_id)
        finally:
            last.unpersist()


class GoldStage(Stage):
    """silver's change feed -> per-user aggregates (see the module docstring)."""

    def apply(self, batch: DataFrame, batch_id: int) -> None:
        if self.applied(batch_id):
            return
        # One pass over the batch: the users it touched and its last version.
        touched = batch.groupBy("user_id").agg(F.max("_commit_version").alias("_v")).cache()
        users = touched.where("user_id IS NOT NULL").select("user_id")
        try:
            last = touched.agg(F.max("_v")).first()[0]  # type: ignore[index]
            if last is None:
                return  # an empty batch (a replay finds nothing either)
            reader = self.spark.read.format("caslake").option("version", str(last))
            if self.storage_options:
                reader = reader.option("storage_options", json.dumps(self.storage_options))
            silver = reader.load(self.source).join(users, "user_id", "left_semi")
            agg = aggregate(silver).cache()
            gone = users.join(agg, "user_id", "left_anti").collect()
            self._delete_keys("user_id", [r["user_id"] for r in gone])
            self._upsert(agg, "user_id", batch_id)
            agg.unpersist()
        finally:
            touched.unpersist()


def aggregate(silver: DataFrame) -> DataFrame:
    """Gold's rows from silver's: events and total amount per user."""
    return silver.groupBy("user_id").agg(F.count(F.lit(1)).alias("events"),
                                         F.round(F.sum("amount"), 2).alias("total"))
