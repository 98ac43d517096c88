"""`make demo` runs caslake.spark.demo; this runs the same pipeline at a small size."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import caslake
from caslake.spark import demo

pytestmark = pytest.mark.spark


def test_demo_pipeline_end_to_end(spark: SparkSession, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    p = demo.run(tmp_path, rows=8_000, appends=2, stream_rows=2_000, spark=spark,
                 pipeline_rows=2_000)
    out = capsys.readouterr().out
    t = caslake.open_table(p.uri)
    history = [h.operation for h in reversed(t.history())]
    assert history == ["compact", "expire"]  # gc (retention 0) expired the rest
    assert t.scan(where=f"user_id = '{p.erased_user}'").count() == 0
    erasure = p.costs[3]
    assert erasure.step.startswith("GDPR erasure") and erasure.rows > 0
    assert t.describe()["rows"] == 10_000 - erasure.rows
    assert [c.step.split(":")[0] for c in p.costs][:3] == [
        "batch append 1/2", "batch append 2/2", "streaming micro-batch query"]
    assert "what each step cost" in out and "pruning" in out
    assert "gc expired versions before" in out and "bytes) written, -" not in out
    assert f"rows of {p.erased_user} left in any Parquet file on storage: 0" in out
    # Step 7: the streaming pipeline; gold checked against Spark's own aggregation.
    assert "streaming pipeline: bronze -> silver -> gold" in out
    assert "gold equals a batch aggregation over bronze: True" in out
    assert "(its txn is recorded: nothing applied)" in out
    gold = caslake.open_table(str(tmp_path / "pipeline" / "gold")).to_arrow()
    bronze = caslake.open_table(str(tmp_path / "pipeline" / "bronze")).to_arrow()
    import pyarrow.compute as pc
    live = bronze.filter(pc.is_valid(bronze["amount"]))
    want = live.group_by("user_id").aggregate([("event_id", "count")])
    assert dict(zip(gold["user_id"].to_pylist(), gold["events"].to_pylist(), strict=True)) == \
        dict(zip(want["user_id"].to_pylist(), want["event_id_count"].to_pylist(), strict=True))
