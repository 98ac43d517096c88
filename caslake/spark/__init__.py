"""PySpark integration: caslake tables as a Spark data source named ``caslake``.

    import caslake.spark
    caslake.spark.register(spark)
    df = spark.read.format("caslake").option("version", "3").load("s3://bucket/t")
    df.write.format("caslake").mode("append").save("s3://bucket/t")

Needs the ``spark`` extra (``pyspark>=4.3,<4.4``).  See
:mod:`caslake.spark.source` for the options and guarantees.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from caslake.spark.source import (
    SOURCE_NAME,
    CaslakeCommitMessage,
    CaslakeDataSource,
    CaslakePartition,
    CaslakeReader,
    CaslakeWriter,
)

__all__ = [
    "SOURCE_NAME",
    "CaslakeCommitMessage",
    "CaslakeDataSource",
    "CaslakePartition",
    "CaslakeReader",
    "CaslakeWriter",
    "register",
]


def register(spark: SparkSession) -> None:
    """Register the ``caslake`` data source on ``spark`` and enable filter pushdown
    (``spark.sql.python.filterPushdown.enabled``), which the reader implements."""
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(CaslakeDataSource)
