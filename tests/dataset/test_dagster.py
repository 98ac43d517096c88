"""RFC-0008 PDS-009: the Dagster IO manager, run in process with ``dagster.materialize``
(no daemon, no webserver) on a local store and moto S3."""

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

dagster = pytest.importorskip("dagster")  # the dev extra installs it

from dagster import AssetExecutionContext  # noqa: E402

from caslake.dataset import ParquetDatasetStore  # noqa: E402
from caslake.dataset.dagster import DatasetIOManager  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DAYS = dagster.StaticPartitionsDefinition(["2026-03-27", "2026-03-28"])


@dagster.asset(partitions_def=DAYS)
def orders(context: AssetExecutionContext) -> pa.Table:
    day = context.partition_key
    n = 10 if day.endswith("27") else 20
    return pa.table({"day": [day] * n, "amount": pa.array(range(n), pa.int64())})


@dagster.asset(partitions_def=DAYS)
def order_totals(orders: pd.DataFrame) -> pd.DataFrame:
    return orders.groupby("day", as_index=False)["amount"].sum()


@dagster.asset(ins={"orders": dagster.AssetIn(partition_mapping=dagster.AllPartitionMapping())})
def all_orders(orders: pa.Table) -> pa.Table:
    return orders


@pytest.mark.parametrize("kind", ["local", pytest.param("s3", marks=pytest.mark.s3)])
def test_pds_009_dagster_io_manager_round_trips_partitioned_assets(
        kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    from tests.conftest import _store_uri

    uri, options = _store_uri(kind, request, tmp_path)
    io = DatasetIOManager(uri=uri, storage_options=options, prefix="lake")
    for day in DAYS.get_partition_keys():
        result = dagster.materialize([orders, order_totals], partition_key=day,
                                     resources={"io_manager": io})
        assert result.success
    pds = ParquetDatasetStore(uri, storage_options=options or None)
    m = pds.read_manifest("lake/orders/2026-03-28")
    assert m.row_count == 20 and m.metadata == {"asset_key": "orders",
                                                "partition_key": "2026-03-28"}
    assert m.run_id is not None and len(m.run_id) > 8
    totals = pds.read_dataset("lake/order_totals/2026-03-27")
    assert totals.to_pylist() == [{"day": "2026-03-27", "amount": sum(range(10))}]
    # A downstream asset over every partition loads them all, in order.
    result = dagster.materialize([orders, all_orders], selection=[all_orders],
                                 resources={"io_manager": io})
    assert result.success
    assert pds.read_dataset("lake/all_orders").num_rows == 30
    # Re-materializing replaces the partition atomically.
    assert dagster.materialize([orders], partition_key="2026-03-27",
                               resources={"io_manager": io}).success
    assert pds.read_dataset("lake/orders/2026-03-27").num_rows == 10


def test_without_dagster_the_import_says_what_to_install() -> None:
    code = ("import sys; sys.modules['dagster'] = None\n"
            "from caslake.errors import MissingDependency\n"
            "try:\n    import caslake.dataset.dagster\n"
            "except MissingDependency as e:\n    print(e)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, env={"PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert "pip install 'caslake[dagster]'" in proc.stdout


def test_missing_dependency_is_the_one_optional_dependency_class() -> None:
    from caslake.errors import MissingDependency, OptionalDependencyMissing, UserInputError

    assert MissingDependency is OptionalDependencyMissing
    assert issubclass(OptionalDependencyMissing, UserInputError)
