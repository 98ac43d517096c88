"""The Spark benchmark (``benchmarks/spark.py``) runs end to end at a tiny size.

Checks the outputs are sane, never timings: the suite itself fails unless every
read path returns the table's rows (same count and checksum of every column),
the filters return exactly the rows of their ranges and the append writes every
row; here we check it reports every part with finite, positive numbers.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from benchmarks import spark as spark_bench

pytestmark = [pytest.mark.spark,
              pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]

ROWS = 20_000


def test_spark_benchmark_smoke(spark: SparkSession, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    rows = spark_bench.main(rows=ROWS, repeat=1, spark=spark, root=tmp_path)
    out = capsys.readouterr().out
    names = [r.name for r in rows]
    assert any(n.startswith("full scan, all columns, Python source") for n in names)
    assert any(n.startswith("full scan, all columns, read_native") for n in names)
    assert sum("bytes read from storage" in n for n in names) == 2
    assert any(n.startswith(f"append {ROWS:,} rows") for n in names)
    assert any("scattered delete, Python source" in n for n in names)
    assert any("scattered delete, read_native" in n for n in names)
    for r in rows:
        assert math.isfinite(r.ours) and r.ours > 0, r
        assert math.isfinite(r.peer) and r.peer > 0, r
    # the metered full scan read real column bytes, and the filters read no more
    full = [r for r in rows if "bytes read from storage" in r.name]
    assert all(0 < r.ours <= r.peer for r in full)
    assert "| benchmark | caslake | peer |" in out
    assert spark.catalog is not None and not spark.sparkContext._jsc.sc().isStopped()
