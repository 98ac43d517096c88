"""One local SparkSession for every Spark test (JVM start is the expensive part)."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest

pyspark = pytest.importorskip("pyspark")

from pyspark.sql import SparkSession  # noqa: E402


def _shim_pandas_on_spark() -> None:
    """``assertDataFrameEqual`` imports pandas-on-Spark whenever pandas is installed,
    and pyspark 4.3's pandas-on-Spark does not import under pandas 3.  The tests only
    compare Spark DataFrames, so stand in empty modules when the real import fails."""
    try:
        import pyspark.pandas
        import pyspark.testing.pandasutils  # noqa: F401
    except ImportError:
        ps = types.ModuleType("pyspark.pandas")
        ps.DataFrame = type("DataFrame", (), {})  # type: ignore[attr-defined]
        utils = types.ModuleType("pyspark.testing.pandasutils")
        utils.PandasOnSparkTestUtils = type("PandasOnSparkTestUtils", (), {})  # type: ignore[attr-defined]
        sys.modules["pyspark.pandas"] = ps
        sys.modules["pyspark.testing.pandasutils"] = utils


_shim_pandas_on_spark()


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    from tests.spark.helpers import local_spark

    session = local_spark()
    yield session
    session.stop()
