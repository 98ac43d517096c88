"""Arrow-only Spark jobs: ``mapInArrow`` / ``applyInArrow`` without PySpark's pandas probe.

PySpark 4.3 builds these on its pandas UDF machinery and, with pandas 3 installed,
warns at every call that it "does not yet fully support pandas" -- although no
pandas object is made: the functions here take and give Arrow record batches only.
Every caslake Spark job goes through :func:`map_in_arrow` / :func:`apply_in_arrow`,
which ignore exactly that warning, for that call, so a user's own pandas UDFs still
warn as PySpark means them to.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

#: The text of PySpark's pandas-version warning (a FutureWarning).
PANDAS_PROBE = "PySpark does not yet fully support pandas"


@contextlib.contextmanager
def _no_pandas_probe() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=PANDAS_PROBE, category=FutureWarning)
        yield


def map_in_arrow(df: DataFrame, fn: Callable[..., Any], schema: StructType | str) -> DataFrame:
    """``df.mapInArrow(fn, schema)``, without the pandas probe's warning."""
    with _no_pandas_probe():
        return df.mapInArrow(fn, schema)


def apply_in_arrow(grouped: Any, fn: Callable[..., Any], schema: StructType | str) -> DataFrame:
    """``grouped.applyInArrow(fn, schema)`` (a ``GroupedData``), without the warning."""
    with _no_pandas_probe():
        out: DataFrame = grouped.applyInArrow(fn, schema)
        return out
