"""Small data and inspection helpers shared by the Spark write and stream tests."""

from __future__ import annotations

import datetime as dt
import os
import sys
from pathlib import Path

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

import caslake
import caslake.spark
from caslake.format.keys import DATA_PREFIX
from caslake.store import open_store

SCHEMA = pa.schema([("id", pa.int64()), ("user", pa.string()),
                    ("ts", pa.timestamp("us", tz="UTC")), ("score", pa.float64())])
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def local_spark() -> SparkSession:
    """The process's local SparkSession for tests (``getOrCreate``: one JVM, shared by
    the Spark tests and the model test), with caslake registered.  Its Python
    workers run this interpreter."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # Workers unpickle functions of the tests package: they need the repository on
    # their path whatever the directory the first caller stood in (the doc-block
    # test starts the session from a temporary directory).
    repo = str(Path(__file__).resolve().parents[2])
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if repo not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([repo, *filter(None, paths)])
    session = (SparkSession.builder.master("local[2]").appName("caslake-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.memory", "512m")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.python.worker.reuse", "true")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    caslake.spark.register(session)
    return session


def rows(lo: int, hi: int) -> pa.Table:
    ids = list(range(lo, hi))
    return pa.table({"id": ids, "user": [f"u{i % 3}" for i in ids],
                     "ts": [T0 + dt.timedelta(hours=i) for i in ids],
                     "score": [i / 2 for i in ids]}, schema=SCHEMA)


def as_df(spark: SparkSession, table: pa.Table) -> DataFrame:
    return spark.createDataFrame(table.to_pandas())


def read(spark: SparkSession, uri: str, **options: str) -> DataFrame:
    return spark.read.format("caslake").options(**options).load(uri)


def data_files(uri: str, options: dict[str, str] | None = None) -> set[str]:
    """Every object under the table's data/ prefix (referenced or not)."""
    return {m.key for m in open_store(uri, options).list(DATA_PREFIX)}


def referenced_files(uri: str) -> set[str]:
    """Data files some version of the table references (all versions, not just the head)."""
    table = caslake.open_table(uri)
    io = table.io
    return {f.path for snap in io.history(io.latest()) for f in io.live_files(snap)}


def ids(uri: str) -> list[int]:
    return sorted(caslake.open_table(uri).scan(columns=["id"]).to_arrow()["id"].to_pylist())
