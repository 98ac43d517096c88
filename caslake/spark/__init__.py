"""PySpark integration: caslake tables as a Spark data source named ``caslake``.

    import caslake.spark
    caslake.spark.register(spark)
    df = spark.read.format("caslake").option("version", "3").load("s3://bucket/t")
    df.write.format("caslake").mode("append").save("s3://bucket/t")
    df.writeStream.format("caslake").option("checkpointLocation", chk).start("s3://bucket/t")
    caslake.spark.delete(spark, uri, "user = 'u1'")      # positions found by Spark tasks
    caslake.spark.upsert(spark, uri, cdc_df, key=["id"])  # one commit
    caslake.spark.update(spark, uri, set={"status": "'closed'"}, where="day < '2024-01-01'")
    caslake.spark.merge(spark, uri, cdc_df, on=["id"]).when_matched_update_all()\
        .when_not_matched_insert_all().execute()          # one commit, Spark joins
    caslake.spark.save(df, uri, mode="overwrite", partitionOverwriteMode="dynamic")
    caslake.spark.read_native(spark, uri, version=3)      # Spark's own Parquet reader
    caslake.spark.write_dataset(df, root, "silver/orders")  # RFC-0008 dataset, one commit
    caslake.spark.read_dataset(spark, root, "silver/orders")
    caslake.spark.save(df, uri, mode="errorifexists")     # every Spark save mode
    caslake.spark.register_table(spark, "orders", uri)    # spark.sql("... FROM orders")
    caslake.spark.write_many({orders_uri: o_df, items_uri: i_df}, keys={orders_uri: "id"},
                             txn=(app_id, batch_id))      # several tables, one transaction

Nested columns (arrays, structs, maps, any depth) and the newer primitive
types read and write as Spark types (the mapping, and what has no Spark type:
:mod:`caslake.spark.types`); ``option("columns", "id,dev.os")`` prunes a read to
nested fields.  Needs the ``spark`` extra (``pyspark>=4.3,<4.4``).  See
:mod:`caslake.spark.source` for the options and guarantees.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from pyspark.sql import SparkSession

from caslake.errors import OptionalDependencyMissing
from caslake.spark.dataset import read_dataset, write_dataset
from caslake.spark.dml import delete, merge, update, upsert
from caslake.spark.multi import write_many
from caslake.spark.native import read_native
from caslake.spark.read_plan import CaslakePartition
from caslake.spark.save import save
from caslake.spark.source import (
    SOURCE_NAME,
    CaslakeDataSource,
    CaslakeReader,
)
from caslake.spark.sql import register_table
from caslake.spark.stream import CaslakeStreamWriter
from caslake.spark.write import CaslakeCommitMessage, CaslakeWriter

__all__ = [
    "SOURCE_NAME",
    "CaslakeCommitMessage",
    "CaslakeDataSource",
    "CaslakePartition",
    "CaslakeReader",
    "CaslakeStreamWriter",
    "CaslakeWriter",
    "check_worker_python",
    "delete",
    "merge",
    "read_dataset",
    "read_native",
    "register",
    "register_table",
    "save",
    "update",
    "upsert",
    "write_dataset",
    "write_many",
]


def register(spark: SparkSession) -> None:
    """Register the ``caslake`` data source on ``spark``.

    The reader takes no pushed filters (PySpark 4.3 would reuse a pushed read for
    other queries of the same DataFrame; see :mod:`caslake.spark.source`), so
    ``spark.sql.python.filterPushdown.enabled`` is left as it is: Spark filters.

    Writes: ``df.write.format("caslake").mode("append" | "overwrite").save(uri)``.
    PySpark 4.3 refuses the other save modes (``errorifexists``, its default,
    ``error`` and ``ignore``) for Python data sources before caslake runs; use
    ``caslake.spark.save(df, uri, mode="errorifexists")`` for those (any of the
    five modes, with Spark's meaning, and caslake errors raised as themselves).

    Examples:
        >>> caslake.spark.register(spark)  # doctest: +SKIP
        >>> spark.read.format('caslake').load('/data/events').show()  # doctest: +SKIP
    """
    try:
        context = spark.sparkContext
        python_exec, master = str(context.pythonExec), str(context.master)
    except Exception:  # Spark Connect: no context here, the server runs the workers
        python_exec = master = ""
    check_worker_python(python_exec, master)
    spark.dataSource.register(CaslakeDataSource)


def check_worker_python(python_exec: str, master: str) -> None:
    """In local mode, refuse a session whose Python workers (``python_exec``: its
    ``PYSPARK_PYTHON``, default ``python3``) cannot import caslake, saying what to set.
    Without this every read fails inside a task with "No module named 'caslake'".
    A cluster's workers are the cluster's business: not checked.

    Examples:
        >>> check_worker_python(sys.executable, 'local[2]')  # doctest: +SKIP
    """
    if not master.startswith("local") or not python_exec:
        return
    exe = shutil.which(python_exec) or python_exec
    if os.path.realpath(exe) == os.path.realpath(sys.executable):
        return
    try:
        probe = subprocess.run([exe, "-c", "import caslake.spark.source"],
                               capture_output=True, text=True, timeout=120)
        ok, why = probe.returncode == 0, (probe.stderr.strip().splitlines() or [""])[-1]
    except (OSError, subprocess.SubprocessError) as e:
        ok, why = False, str(e)
    if not ok:
        raise OptionalDependencyMissing(
            f"Spark's Python workers run {exe!r}, which cannot import caslake ({why}); "
            f"set PYSPARK_PYTHON={sys.executable} (the Python this driver runs) before "
            "the SparkSession is created", package="caslake")
