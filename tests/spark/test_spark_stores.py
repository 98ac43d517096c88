"""Spark on the cloud stores' emulators (Azurite, fake-gcs-server): the ``caslake``
data source writes and reads an ``az://`` and a ``gs://`` table, Spark's distributed
delete removes rows from it, a dataset is written
by executors handed the store object (its URI and reopen options), and
``read_native``, whose Hadoop connectors are not bundled, refuses in one typed line.
Results are compared with pyarrow reading the objects the table references."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

import caslake
import caslake.spark
from caslake.dataset.store import ParquetDatasetStore
from caslake.spark.native import NativeReadUnsupported
from caslake.store import open_store
from tests.conftest import kind_params
from tests.spark.helpers import as_df, rows

pytestmark = [pytest.mark.spark]


@pytest.fixture(params=kind_params(["azure", "gcs"]))
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_data_source_and_dataset_round_trip(
        spark: SparkSession, any_store_uri: tuple[str, dict[str, str]]) -> None:
    uri, options = any_store_uri
    opts = {"storage_options": json.dumps(options)}
    for lo, hi in ((0, 40), (40, 60)):
        as_df(spark, rows(lo, hi)).coalesce(1).write.format("caslake").options(
            **opts).mode("append").save(uri)
    deleted = caslake.spark.delete(spark, uri, "id < 5",
                                   storage_options=options)  # type: ignore[arg-type]
    assert deleted.rows_deleted == 5
    got = spark.read.format("caslake").options(**opts).load(uri).toPandas()

    # pyarrow reads the referenced files from the store, less the deleted rows.
    table = caslake.open_table(uri, storage_options=options)  # type: ignore[arg-type]
    store = open_store(uri, options)  # type: ignore[arg-type]
    read = pa.concat_tables([pq.read_table(io.BytesIO(store.get(f["path"]).data))
                             for f in table.live_files()])
    expected = read.filter(pc.greater_equal(read["id"], 5)).sort_by("id")
    assert expected["id"].to_pylist() == list(range(5, 60))
    assert sorted(got["id"]) == expected["id"].to_pylist()
    assert sorted(got["score"]) == sorted(expected["score"].to_pylist())

    # A dataset written by tasks handed the store object itself.
    caslake.spark.write_dataset(spark.range(30, numPartitions=2), store, "gold/ids")
    ds = ParquetDatasetStore(uri, storage_options=options)  # type: ignore[arg-type]
    assert sorted(ds.read_dataset("gold/ids")["id"].to_pylist()) == list(range(30))

    with pytest.raises(NativeReadUnsupported) as info:
        caslake.spark.read_native(spark, uri, storage_options=options)  # type: ignore[arg-type]
    assert "connector" in str(info.value) and "format('caslake')" in str(info.value)
    assert "\n" not in str(info.value)
