"""Exactly once across restarts (issue 30 acceptance): a stream from a caslake table
into a caslake table, while another process appends, is stopped and restarted
three times; the sink then holds every source row exactly once, compared with
Spark's batch read of the source."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import caslake
from tests.spark.helpers import rows

pytestmark = [pytest.mark.spark]

APPENDER = textwrap.dedent("""
    import sys, time
    import caslake
    from tests.spark.helpers import rows
    uri, seconds = sys.argv[1], float(sys.argv[2])
    t = caslake.open_table(uri)
    end, i = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        t.append(rows(1000 + i * 20, 1000 + i * 20 + 20))  # 20 rows a version
        i += 1
        time.sleep(0.15)
    print(i)
""")


def test_stream_restarted_three_times_while_appending_holds_every_row_once(
        spark: SparkSession, tmp_path: Path) -> None:
    src = caslake.create_table(str(tmp_path / "src"), rows(0, 0).schema)
    src.append(rows(0, 500))
    sink, chk = str(tmp_path / "sink"), str(tmp_path / "chk")
    root = Path(__file__).resolve().parents[2]
    appender = subprocess.Popen([sys.executable, "-c", APPENDER, src.uri, "30"], cwd=root,
                                stdout=subprocess.PIPE, text=True)

    def start(trigger: dict[str, object]) -> object:
        return (spark.readStream.format("caslake").option("maxFilesPerTrigger", "3")
                .load(src.uri).writeStream.format("caslake")
                .option("checkpointLocation", chk).trigger(**trigger).start(sink))

    try:
        for run in range(4):  # three stops and restarts while the appender runs
            query = start({"processingTime": "500 milliseconds"})
            time.sleep(4 + 2 * run)
            query.stop()  # interrupts whatever batch is running
            assert query.exception() is None
        appended = int(appender.communicate(timeout=120)[0].strip())
    finally:
        appender.kill()
    assert appended > 50
    drain = start({"availableNow": True})
    drain.awaitTermination(180)
    assert drain.exception() is None
    want = Counter(r["id"] for r in spark.read.format("caslake").load(src.uri)
                   .select("id").collect())
    got = Counter(r["id"] for r in spark.read.format("caslake").load(sink)
                  .select("id").collect())
    assert sum(want.values()) == 500 + 20 * appended
    assert got == want  # every row once: none lost, none repeated
    batches = [h for h in caslake.open_table(sink).history() if h.operation == "append"]
    assert len(batches) > 4  # the stream really ran in many micro-batches
