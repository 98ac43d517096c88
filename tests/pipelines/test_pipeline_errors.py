"""A pipeline stage that cannot run raises caslake's typed error naming the stage,
its source and its target -- not PySpark's StreamingQueryException."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

import caslake
from caslake.errors import StreamingQueryFailed
from caslake.spark.pipeline import SilverStage

pytestmark = [pytest.mark.spark]

BRONZE = pa.schema([("event_id", pa.int64()), ("user_id", pa.string()),
                    ("event_type", pa.string()), ("amount", pa.float64())])


@pytest.fixture(scope="module")
def spark() -> SparkSession:
    from tests.spark.helpers import local_spark

    return local_spark()


def test_a_stage_whose_target_is_missing_names_stage_and_target(
        spark: SparkSession, tmp_path: Path) -> None:
    bronze = caslake.create_table(str(tmp_path / "bronze"), BRONZE)
    bronze.append(pa.table({"event_id": [1, 2], "user_id": ["u1", "u2"],
                            "event_type": ["buy", "view"], "amount": [1.5, 2.5]},
                           schema=BRONZE))
    target = str(tmp_path / "silver")  # never created
    stage = SilverStage(spark, bronze.uri, target, str(tmp_path / "chk"), "silver-app")
    with pytest.raises(StreamingQueryFailed) as info:
        stage.run()
    err = info.value
    assert err.query == f"pipeline stage silver-app ({bronze.uri} -> {target})"
    assert "TableNotFound" in err.cause and target in err.cause
    assert str(err).startswith(f"pipeline stage silver-app ({bronze.uri} -> {target}) stopped")
