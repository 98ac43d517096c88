"""`make demo` runs ``python -m caslake.spark.demo``; this runs the same command at a
small size, in its own process as a user would (its own SparkSession), and checks
what it prints -- including that stderr holds no warning a user would wonder about
(issue 32) -- and the tables it leaves, against pyarrow's computation."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pyarrow.compute as pc
import pytest

import caslake

pytestmark = [pytest.mark.spark, pytest.mark.slow]  # its own process and JVM

ROOT = Path(__file__).resolve().parents[2]
# The one line Spark 4's JVM always prints at start; the demo says what it is first.
JVM_INCUBATOR = "WARNING: Using incubator modules: jdk.incubator.vector"


def test_demo_pipeline_end_to_end_prints_no_warning(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "caslake.spark.demo", str(tmp_path), "--rows", "8000",
         "--appends", "2", "--stream-rows", "2000", "--pipeline-rows", "2000"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    out, err = proc.stdout, proc.stderr
    assert proc.returncode == 0, err[-3000:]
    noise = [line for line in err.splitlines() if line.strip() and line != JVM_INCUBATOR]
    assert noise == [], "\n".join(noise)  # no warning, log line or traceback on stderr
    assert out.index(JVM_INCUBATOR.split(": ", 1)[1]) < out.index("== batch append 1/2")

    erased = re.search(r"(user-\d+): (\d+) rows before, 0 after", out)
    assert erased, out
    user, erased_rows = erased.group(1), int(erased.group(2))
    t = caslake.open_table(str(tmp_path / "events"))
    history = [h.operation for h in reversed(t.history())]
    assert history == ["compact", "expire"]  # gc (retention 0) expired the rest
    assert erased_rows > 0 and t.scan(where=f"user_id = '{user}'").count() == 0
    assert t.describe()["rows"] == 10_000 - erased_rows
    steps = re.findall(r"^== (batch append \d/2|streaming micro-batch query)", out, re.M)
    assert steps == ["batch append 1/2", "batch append 2/2", "streaming micro-batch query"]
    assert "what each step cost" in out and "pruning" in out
    assert "gc expired versions before" in out and "bytes) written, -" not in out
    assert f"rows of {user} left in any Parquet file on storage: 0" in out
    # Step 7: the streaming pipeline; gold checked against pyarrow's aggregation.
    assert "streaming pipeline: bronze -> silver -> gold" in out
    assert "gold equals a batch aggregation over bronze: True" in out
    assert "(its txn is recorded: nothing applied)" in out
    gold = caslake.open_table(str(tmp_path / "pipeline" / "gold")).to_arrow()
    bronze = caslake.open_table(str(tmp_path / "pipeline" / "bronze")).to_arrow()
    live = bronze.filter(pc.is_valid(bronze["amount"]))
    want = live.group_by("user_id").aggregate([("event_id", "count")])
    assert dict(zip(gold["user_id"].to_pylist(), gold["events"].to_pylist(), strict=True)) == \
        dict(zip(want["user_id"].to_pylist(), want["event_id_count"].to_pylist(), strict=True))
