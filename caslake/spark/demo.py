"""`make demo`: a PySpark pipeline on a local-filesystem caslake table, no services.

1. ingest a synthetic event stream: several batch appends (2M rows) and one
   Structured Streaming micro-batch query;
2. erase one user (GDPR) with ``caslake.spark.delete``: one tombstone, no rewrite;
3. query a 12-hour window (Spark filters the rows; caslake's planner shows what
   ``Table.scan``/``read_native`` would prune);
4. time-travel to before the erasure;
5. erase physically: compact the files the erasure touched, gc the old ones,
   and check no Parquet file on storage still holds the user;
6. print what each step cost: rows, versions, objects written, time;
7. a bronze -> silver -> gold streaming pipeline (:mod:`caslake.spark.pipeline`):
   streaming reads of the change feed, ``foreachBatch`` upserts into silver made
   idempotent with a txn app id, an erasure in bronze flowing through to silver
   and gold, and gold checked against a batch aggregation over bronze.

Run: ``python -m caslake.spark.demo [table-dir] [--rows N]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import caslake
import caslake.spark
from caslake.errors import DemoCheckFailed
from caslake.spark.pipeline import GoldStage, SilverStage, aggregate, await_query

USERS = 50_000
ERASED_EVENT = 42  # erase the user who made this event
START = 1_790_000_000  # 2026-09-21, seconds since the epoch


@dataclass
class Cost:
    step: str
    rows: int
    version: int
    objects: int  # objects the step created on storage (data, tombstones, manifests)
    bytes: int  # bytes of the objects it created
    seconds: float
    deleted: int = 0  # objects the step removed (gc)
    deleted_bytes: int = 0


@dataclass(frozen=True)
class ObjectDelta:
    """Objects a step wrote and deleted, counted apart (a gc step does both)."""

    written: int
    written_bytes: int
    deleted: int
    deleted_bytes: int

    @classmethod
    def between(cls, before: dict[str, int], after: dict[str, int]) -> ObjectDelta:
        new = [p for p in after if before.get(p) != after[p]]
        gone = [p for p in before if p not in after]
        return cls(len(new), sum(after[p] for p in new), len(gone),
                   sum(before[p] for p in gone))

    def describe(self) -> str:
        text = f"{self.written} objects ({self.written_bytes:,} bytes) written"
        if self.deleted:
            text += f", {self.deleted} ({self.deleted_bytes:,} bytes) deleted"
        return text


def demo_root(path: str | None) -> Path:
    """``path`` if given, else a fresh temporary directory (two runs never collide)."""
    return Path(path) if path else Path(tempfile.mkdtemp(prefix="caslake-spark-demo-"))


# The demo's Spark logs warnings and errors from the JVM's start (the root at WARN,
# Spark's interactive default, so Spark prints no "Setting default log level" notice;
# a config of its own, so no "default log4j profile" notice), and errors only once it
# runs (setLogLevel).  Hadoop's native library is optional: its absence is no warning.
LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n
logger.hadoop.name = org.apache.hadoop.util.NativeCodeLoader
logger.hadoop.level = error
"""


def spark_session(root: Path) -> SparkSession:
    """A local session for the demo whose start prints nothing to wonder about: it
    binds to loopback (no "hostname resolves to a loopback address" warning), has a
    log configuration of its own (:data:`LOG4J2`, written under ``root``), and
    imports PySpark's test helpers, which probe pandas, quietly (see
    :func:`_import_pyspark_pandas_probe`)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # a local[2] demo: loopback
    log4j = root / "_spark" / "log4j2.properties"
    log4j.parent.mkdir(parents=True, exist_ok=True)
    log4j.write_text(LOG4J2)
    _import_pyspark_pandas_probe()
    print("starting a local Spark session (Spark 4's JVM prints \"WARNING: Using "
          "incubator modules: jdk.incubator.vector\" as it starts: the vector API Spark "
          "uses, nothing to act on)", flush=True)
    spark = (SparkSession.builder.master("local[2]").appName("caslake-demo")
             .config("spark.driver.extraJavaOptions",
                     f"-Dlog4j2.configurationFile=file:{log4j}")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.driver.memory", "2g")
             .config("spark.sql.shuffle.partitions", "4")
             .config("spark.python.worker.reuse", "true")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    caslake.spark.register(spark)
    return spark


def _import_pyspark_pandas_probe() -> None:
    """PySpark 4.3 imports its own test helpers (``pyspark.testing.utils``) on the
    first call into the JVM (its numpy converter asks them whether numpy is
    installed), and that module checks the pandas version at import, warning
    "PySpark does not yet fully support pandas >= 3.0.0" when the dev extra's
    pandas 3 is installed.  The demo uses none of PySpark's pandas features (caslake
    exchanges Arrow batches), so that one import runs with that one warning
    ignored; every other warning, and the same warning from any real pandas path
    (``toPandas``, pandas UDFs), still shows."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning,
                                message="PySpark does not yet fully support pandas")
        import pyspark.testing.utils  # noqa: F401


def events(spark: SparkSession, first: int, n: int, partitions: int = 4) -> DataFrame:
    """``n`` synthetic events with ids ``first..first+n``: deterministic."""
    ids = spark.range(first, first + n, numPartitions=partitions)
    kind = F.element_at(F.array(*[F.lit(k) for k in ("view", "click", "cart", "purchase")]),
                        (F.col("id") % 4 + 1).cast("int"))
    user = F.format_string("user-%05d", F.pmod(F.xxhash64("id"), F.lit(USERS)))
    return ids.select(
        F.col("id").alias("event_id"),
        user.alias("user_id"),
        F.timestamp_seconds(F.lit(START) + F.col("id") * 3).alias("event_time"),
        kind.alias("event_type"),
        F.round(F.pmod(F.xxhash64("id", F.lit(7)), F.lit(10_000)) / 100.0, 2).alias("amount"),
    )


def objects(root: Path) -> dict[str, int]:
    """Every object under ``root`` (path -> size)."""
    return {str(p): p.stat().st_size for p in root.rglob("*") if p.is_file()}


class Pipeline:
    def __init__(self, spark: SparkSession, root: Path) -> None:
        self.spark = spark
        self.root = root
        self.uri = str(root / "events")
        self.costs: list[Cost] = []
        self.erased_user = ""

    def table(self) -> caslake.Table:
        return caslake.open_table(self.uri)

    @contextmanager
    def step(self, title: str) -> Iterator[Callable[[int], None]]:
        print(f"\n== {title}", flush=True)
        table_dir = Path(self.uri)
        before = objects(table_dir) if table_dir.exists() else {}
        rows = [0]
        start = time.perf_counter()

        def set_rows(n: int) -> None:
            rows[0] = n

        yield set_rows
        elapsed = time.perf_counter() - start
        delta = ObjectDelta.between(before, objects(table_dir))
        version = self.table().version if table_dir.exists() else -1
        cost = Cost(title, rows[0], version, delta.written, delta.written_bytes, elapsed,
                    delta.deleted, delta.deleted_bytes)
        self.costs.append(cost)
        print(f"   -> {cost.rows:,} rows, table version {cost.version}, {delta.describe()}, "
              f"{cost.seconds:.2f} s", flush=True)

    def read(self, **options: str) -> DataFrame:
        reader = self.spark.read.format("caslake")
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load(self.uri)

    # --- the steps ------------------------------------------------------------------

    def ingest_batches(self, rows: int, appends: int) -> None:
        per = rows // appends
        for i in range(appends):
            with self.step(f"batch append {i + 1}/{appends}: {per:,} events") as done:
                events(self.spark, i * per, per).write.format("caslake") \
                    .mode("append").save(self.uri)
                done(per)

    def ingest_stream(self, first: int, rows: int) -> None:
        landing = self.root / "landing"
        events(self.spark, first, rows, partitions=2).write.mode("overwrite").parquet(
            str(landing))
        with self.step(f"streaming micro-batch query: {rows:,} events") as done:
            schema = self.spark.read.parquet(str(landing)).schema
            query = (self.spark.readStream.schema(schema).parquet(str(landing))
                     .writeStream.format("caslake")
                     .option("checkpointLocation", str(self.root / "checkpoint"))
                     .trigger(availableNow=True).start(self.uri))
            await_query(query, "the demo's streaming ingest")
            done(rows)

    def erase_user(self) -> int:
        # collect(), not first(): PySpark 4.3 prints a BrokenPipeError traceback from
        # its worker daemon when a read of a Python data source ends early (first,
        # limit, show); the where option plans the read with caslake's pruning.
        rows = self.read(where=f"event_id = {ERASED_EVENT}").select("user_id").collect()
        if not rows:
            raise DemoCheckFailed(f"event {ERASED_EVENT} is not in the table",
                                  check="ingested events")
        user = self.erased_user = str(rows[0]["user_id"])
        before = self.table().version
        found = self.read().filter(F.col("user_id") == user).count()
        with self.step(f"GDPR erasure of {user} with caslake.spark.delete") as done:
            res = caslake.spark.delete(self.spark, self.uri, f"user_id = '{user}'")
            done(res.rows_deleted)
        left = self.read().filter(F.col("user_id") == user).count()
        print(f"   {user}: {found} rows before, {left} after; one tombstone "
              f"({res.tombstones_added}), no data file rewritten "
              f"({res.files_removed} removed); version {before} -> {res.version}")
        if left:
            raise DemoCheckFailed(f"erasure left {left} rows of {user}", check="erasure")
        return before

    def query(self) -> None:
        where = ("event_type = 'purchase' AND event_time >= TIMESTAMP '2026-09-21 12:00:00' "
                 "AND event_time < TIMESTAMP '2026-09-22 00:00:00'")
        with self.step("query: purchases in a 12-hour window") as done:
            df = self.read().filter(where).groupBy("event_type").agg(
                F.count("*").alias("events"), F.round(F.sum("amount"), 2).alias("revenue"))
            result = df.collect()
            done(sum(r["events"] for r in result))
        for r in result:
            print(f"   {r['event_type']}: {r['events']:,} events, revenue {r['revenue']:,}")
        plan = self.table().scan(where=where).plan()
        print(f"   pruning (caslake's planner, same predicate): "
              f"{plan.files_pruned}/{plan.files_total} files and "
              f"{plan.row_groups_pruned}/{plan.row_groups_total} row groups skipped; "
              f"{plan.bytes_to_read:,} bytes of column chunks to read")

    def time_travel(self, version: int, user: str) -> None:
        with self.step(f"time travel to version {version}, before the erasure") as done:
            n = self.read(version=str(version)).filter(F.col("user_id") == user).count()
            done(n)
        print(f"   {user} has {n} rows at version {version} (the erasure is version "
              f"{version + 1}; the bytes are still on storage until step 6)")

    def physical_erasure(self, user: str) -> None:
        """Rewrite the files the erasure touched, then gc the old ones: the user's
        bytes leave storage.  (Retention is forced to 0 for the demo; in production
        it is at least 24 hours.)"""
        with self.step("physical erasure: compact touched files, then gc") as done:
            table = self.table()
            res = table.compact(deleted_fraction=1e-9)  # every file with a deleted row
            report = table.gc(retention=timedelta(0), force=True,
                              now=datetime.now(UTC) + timedelta(seconds=1))
            done(res.rows_added)
        found = 0
        for path in (Path(self.uri) / "data").rglob("*.parquet"):
            users = pq.read_table(path, columns=["user_id"]).column("user_id")
            found += users.filter(pc.equal(users, pa.scalar(user))).length()
        print(f"   compacted {res.files_removed} file(s) into {res.files_added}; gc deleted "
              f"{report.deleted_count} objects ({report.bytes_deleted:,} bytes); rows of "
              f"{user} left in any Parquet file on storage: {found}")
        if found:
            raise DemoCheckFailed(f"{found} rows of {user} are still on storage",
                                  check="physical erasure")

    def report(self) -> None:
        print("\n== history")
        history = self.table().history()
        for h in history:
            print(f"   v{h.version:<3} {h.operation:<10} {h.total_rows:>12,} rows "
                  f"{h.total_files:>5} files  {h.created_at:%H:%M:%S}")
        if history and history[-1].version > 0:
            print(f"   (gc expired versions before v{history[-1].version}: retention 0 for "
                  "the demo; time travel reaches only the versions listed)")
        print("\n== what each step cost")
        print(f"   {'step':<54} {'rows':>11} {'version':>7} {'written':>7} {'deleted':>7} "
              f"{'seconds':>8}")
        for c in self.costs:
            print(f"   {c.step[:54]:<54} {c.rows:>11,} {c.version:>7} {c.objects:>7} "
                  f"{c.deleted:>7} {c.seconds:>8.2f}")
        report = caslake.open_table(self.uri).describe()
        print(f"\n   table {self.uri}: version {report['version']}, {report['rows']:,} rows in "
              f"{report['files']} files")


class StreamingPipeline:
    """Step 7: bronze -> silver -> gold, each stage a streaming read of the stage
    before's change feed (``Trigger.AvailableNow`` here; ``processingTime`` in
    production)."""

    def __init__(self, spark: SparkSession, root: Path, events_per_batch: int) -> None:
        self.spark = spark
        self.n = events_per_batch
        self.uris = {name: str(root / "pipeline" / name) for name in ("bronze", "silver", "gold")}
        chk = root / "pipeline" / "_checkpoints"
        self.silver = SilverStage(spark, self.uris["bronze"], self.uris["silver"],
                                  str(chk / "silver"), "demo-silver")
        self.gold = GoldStage(spark, self.uris["silver"], self.uris["gold"], str(chk / "gold"),
                              "demo-gold")

    def bronze_rows(self, first: int) -> DataFrame:
        return events(self.spark, first, self.n, partitions=2).drop("event_time")

    def table(self, name: str) -> caslake.Table:
        return caslake.open_table(self.uris[name])

    def advance(self, title: str) -> None:
        start = time.perf_counter()
        self.silver.run()
        self.gold.run()
        silver, gold = self.table("silver"), self.table("gold")
        print(f"   {title}: silver {silver.describe()['rows']:,} rows (v{silver.version}), "
              f"gold {gold.describe()['rows']:,} users (v{gold.version}), "
              f"{time.perf_counter() - start:.1f} s", flush=True)

    def run(self) -> None:
        print("\n== streaming pipeline: bronze -> silver -> gold (change feed, foreachBatch "
              "upserts with txnAppId)", flush=True)
        bronze_schema = self.bronze_rows(0).schema
        caslake.spark.save(self.spark.createDataFrame([], bronze_schema), self.uris["bronze"],
                           mode="append")
        for name, schema in (("silver", bronze_schema),
                             ("gold", "user_id string, events long, total double")):
            caslake.spark.save(self.spark.createDataFrame([], schema), self.uris[name],
                               mode="append")
        for i in range(2):
            self.bronze_rows(i * self.n).write.format("caslake").mode("append") \
                .save(self.uris["bronze"])
        self.advance("2 bronze appends streamed")
        bronze = self.table("bronze")
        user = str(bronze.scan(where=f"event_id = {ERASED_EVENT}").to_arrow()
                   .column("user_id")[0])
        fixes = self.bronze_rows(0).where(F.col("event_id") < 50) \
            .withColumn("amount", F.col("amount") + 1)
        caslake.spark.upsert(self.spark, self.uris["bronze"], fixes, "event_id")
        erased = bronze.refresh().delete(f"user_id = '{user}'")
        bronze.purge(f"user_id = '{user}'")  # the bytes go too (the delete flows downstream)
        self.bronze_rows(2 * self.n).write.format("caslake").mode("append") \
            .save(self.uris["bronze"])
        print(f"   bronze: 50 corrections (upsert), erasure of {user} ({erased.rows_deleted} "
              "rows: delete, then purge), 1 more append", flush=True)
        self.advance("changes streamed")
        self.check(user)

    def check(self, user: str) -> None:
        left = self.table("silver").scan(where=f"user_id = '{user}'").count()
        in_gold = self.table("gold").scan(where=f"user_id = '{user}'").count()
        bronze = self.spark.read.format("caslake").load(self.uris["bronze"])
        want = sorted(aggregate(bronze.where("amount IS NOT NULL")).collect())
        got = sorted(self.spark.read.format("caslake").load(self.uris["gold"]).collect())
        print(f"   {user} in silver: {left} rows, in gold: {in_gold}; gold equals a batch "
              f"aggregation over bronze: {got == want}")
        head = self.table("silver").version
        replay = self.spark.read.format("caslake").option("readChangeFeed", "true") \
            .option("startingVersion", "0").load(self.uris["bronze"])
        self.silver.apply(replay, 0)  # Spark replaying batch 0 after a crash
        print(f"   batch 0 replayed into silver: version {head} -> "
              f"{self.table('silver').version} (its txn is recorded: nothing applied)")
        if left or in_gold or got != want or self.table("silver").version != head:
            raise DemoCheckFailed("the streaming pipeline's tables disagree with bronze",
                                  check="streaming pipeline")


def run(root: Path, rows: int, appends: int, stream_rows: int,
        spark: SparkSession | None = None, pipeline_rows: int = 5_000) -> Pipeline:
    """The pipeline; on ``spark`` if given (left running), else on its own session."""
    own = spark is None
    spark = spark or spark_session(root)
    try:
        p = Pipeline(spark, root)
        p.ingest_batches(rows, appends)
        p.ingest_stream(rows, stream_rows)
        before_erasure = p.erase_user()
        p.query()
        p.time_travel(before_erasure, p.erased_user)
        p.physical_erasure(p.erased_user)
        p.report()
        StreamingPipeline(spark, root, pipeline_rows).run()
        return p
    finally:
        if own:
            spark.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m caslake.spark.demo")
    ap.add_argument("path", nargs="?", help="where to put the table (default: a temp dir)")
    ap.add_argument("--rows", type=int, default=2_000_000, help="events ingested by batch")
    ap.add_argument("--appends", type=int, default=4)
    ap.add_argument("--stream-rows", type=int, default=100_000)
    ap.add_argument("--pipeline-rows", type=int, default=5_000,
                    help="events per bronze append of the streaming pipeline (step 7)")
    args = ap.parse_args(argv)
    root = demo_root(args.path)
    if (root / "events").exists():
        shutil.rmtree(root / "events")  # a path given again: start the story afresh
    root.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    run(root, args.rows, args.appends, args.stream_rows, pipeline_rows=args.pipeline_rows)
    print(f"\ndone in {time.perf_counter() - start:.1f} s; the table is at {root / 'events'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
