"""``spark.readStream.format("caslake")`` is not supported yet (issue 27): it must
fail at start with a message saying so, as a caslake error, never PySpark's
``UnboundLocalError`` from a reader that was never made."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

import caslake
from caslake.errors import InvalidArgument
from caslake.spark.source import CaslakeDataSource

pytestmark = [pytest.mark.spark]

MESSAGE = r"streaming reads from caslake are not supported yet"


def _table(tmp_path: Path) -> str:
    uri = str(tmp_path / "t")
    caslake.create_table(uri, pa.schema([("id", pa.int64())])).append(
        pa.table({"id": [1, 2]}))
    return uri


@pytest.mark.parametrize("trigger", ["availableNow", "processingTime"])
def test_read_stream_fails_at_start_saying_it_is_not_supported(
        spark: SparkSession, tmp_path: Path, trigger: str) -> None:
    uri = _table(tmp_path)
    stream = spark.readStream.format("caslake").load(uri)
    writer = (stream.writeStream.format("noop")
              .option("checkpointLocation", str(tmp_path / "ckpt")))
    writer = (writer.trigger(availableNow=True) if trigger == "availableNow"
              else writer.trigger(processingTime="1 second"))
    query = None
    with pytest.raises(Exception) as err:  # Spark wraps it: StreamingQueryException
        query = writer.start()
        query.awaitTermination(120)
    if query is not None:
        query.stop()
    text = str(err.value)
    assert "InvalidArgument: " + MESSAGE.replace("\\", "") in text, text[:2000]
    assert "UnboundLocalError" not in text, text[:2000]


def test_stream_reader_of_the_source_raises_the_caslake_error(tmp_path: Path) -> None:
    uri = _table(tmp_path)
    source = CaslakeDataSource({"path": uri})
    schema = source.schema()
    for make in (source.streamReader, source.simpleStreamReader):
        with pytest.raises(InvalidArgument, match=MESSAGE):
            reader = make(schema)
            reader.initialOffset()
