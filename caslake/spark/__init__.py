"""PySpark integration: caslake tables as a Spark data source named ``caslake``.

    import caslake.spark
    caslake.spark.register(spark)
    df = spark.read.format("caslake").option("version", "3").load("s3://bucket/t")
    df.write.format("caslake").mode("append").save("s3://bucket/t")
    df.writeStream.format("caslake").option("checkpointLocation", chk).start("s3://bucket/t")
    caslake.spark.delete(spark, uri, "user = 'u1'")      # positions found by Spark tasks
    caslake.spark.upsert(spark, uri, cdc_df, key=["id"])  # one commit
    caslake.spark.read_native(spark, uri, version=3)      # Spark's own Parquet reader
    caslake.spark.write_dataset(df, root, "silver/orders")  # RFC-0008 dataset, one commit
    caslake.spark.read_dataset(spark, root, "silver/orders")

Needs the ``spark`` extra (``pyspark>=4.3,<4.4``).  See
:mod:`caslake.spark.source` for the options and guarantees.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from caslake.spark.dataset import read_dataset, write_dataset
from caslake.spark.dml import delete, upsert
from caslake.spark.native import read_native
from caslake.spark.source import (
    SOURCE_NAME,
    CaslakeDataSource,
    CaslakePartition,
    CaslakeReader,
)
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
    "delete",
    "read_dataset",
    "read_native",
    "register",
    "upsert",
    "write_dataset",
]


def register(spark: SparkSession) -> None:
    """Register the ``caslake`` data source on ``spark`` and enable filter pushdown
    (``spark.sql.python.filterPushdown.enabled``), which the reader implements."""
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(CaslakeDataSource)
