"""Spark SQL over caslake tables: :func:`register_table` names a table for
``spark.sql``.

PySpark 4.3 gives Python data sources no catalog: ``CREATE TABLE ... USING
caslake`` is accepted but the source then receives none of its options (not even
the path), and ``SELECT ... FROM caslake.`uri``` is refused for Python sources.
So a table is registered as a temporary view over
``spark.read.format("caslake").option("version", v).load(uri)``, pinned to the
version current when it is registered (PySpark plans a Python source's read once
per DataFrame, so a view would not see later versions anyway; pinning makes that
explicit).  Register again to read a newer version.

What works through the view is every query: ``SELECT`` with joins, aggregates,
window functions, CTEs, ``DESCRIBE``.  Writes are the Python calls
(``df.write.format("caslake")`` / :func:`caslake.spark.save`,
:func:`caslake.spark.delete`, :func:`caslake.spark.upsert`); Spark refuses
``INSERT``, ``UPDATE``, ``DELETE`` and ``MERGE`` on a view.
"""

from __future__ import annotations

import json
import re

from pyspark.sql import SparkSession

from caslake.errors import InvalidArgument
from caslake.store.options import StorageOptions
from caslake.table import open_table

_VIEW_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def register_table(spark: SparkSession, name: str, uri: str, *, version: int | None = None,
                   storage_options: StorageOptions | None = None) -> int:
    """Make the table at ``uri`` queryable as ``name`` in ``spark.sql``, at
    ``version`` (default: the current one); returns the version the view reads.

        v = caslake.spark.register_table(spark, "orders", "s3://bucket/orders")
        spark.sql("SELECT customer, sum(amount) FROM orders GROUP BY customer")

    Registering the same name again replaces the view (e.g. after new writes).
    ``name`` must be a plain SQL identifier (:class:`InvalidArgument` otherwise); a
    missing table or version raises caslake's own error, before Spark is asked.

    Examples:
        >>> caslake.spark.register_table(spark, "orders", "/data/orders")  # doctest: +SKIP
        >>> spark.sql("select count(*) from orders").collect()  # doctest: +SKIP
    """
    if not isinstance(name, str) or not _VIEW_NAME.match(name):
        raise InvalidArgument(f"view name {name!r} is not a plain SQL identifier "
                              "(letters, digits and _, not starting with a digit)")
    table = open_table(uri, storage_options=storage_options or None)
    pinned = table.version if version is None else table.scan(version=version).version
    reader = spark.read.format("caslake").option("version", str(pinned))
    if storage_options:
        reader = reader.option("storage_options", json.dumps(dict(storage_options)))
    reader.load(uri).createOrReplaceTempView(name)
    return pinned
