"""Interoperability with remote-store's own ``ParquetDatasetStore`` (PyPI ``remote-store``),
both ways, on one local directory that both libraries address."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from remote_store import Store
from remote_store.backends import LocalBackend
from remote_store.ext.parquet import ParquetDatasetStore as RemoteStorePDS

from caslake.dataset import DatasetIncomplete, ParquetDatasetStore
from caslake.store import LocalStore
from tests.dataset.helpers import table


@pytest.fixture
def both(tmp_path: Path) -> tuple[ParquetDatasetStore, Store]:
    root = tmp_path / "lake"
    root.mkdir()
    return ParquetDatasetStore(LocalStore(root)), Store(LocalBackend(str(root)))


@pytest.mark.parametrize("max_rows", [None, 40])
def test_remote_store_writes_caslake_reads(both: tuple[ParquetDatasetStore, Store],
                                           max_rows: int | None) -> None:
    ours, theirs = both
    data = table(0, 100)
    written = RemoteStorePDS(theirs, max_rows_per_file=max_rows).write_dataset(
        data, "bronze/events", run_id="r1", metadata={"src": "rs"})
    assert len(written.schema_hash) == 16  # remote-store stores a prefix of the hash
    assert ours.dataset_exists("bronze/events")
    m = ours.read_manifest("bronze/events")
    assert (m.parts, m.row_count, m.run_id, m.metadata) == (
        written.parts, 100, "r1", {"src": "rs"})
    assert ours.read_dataset("bronze/events").equals(data)  # verified: prefix hash accepted
    assert ours.read_dataset("bronze/events", columns=["id"]).equals(data.select(["id"]))
    got = ours.read_batches("bronze/events", filter="id >= 90").read_all()
    assert got.equals(data.filter(pa.compute.field("id") >= 90))


@pytest.mark.parametrize("max_rows", [None, 40])
def test_caslake_writes_remote_store_reads(both: tuple[ParquetDatasetStore, Store],
                                           max_rows: int | None) -> None:
    ours, theirs = both
    pds = ParquetDatasetStore(ours.store, max_rows_per_file=max_rows)
    data = table(0, 100)
    m = pds.write_dataset(data, "silver/orders", run_id="r2")
    rs = RemoteStorePDS(theirs)
    assert rs.dataset_exists("silver/orders")
    their_m = rs.read_manifest("silver/orders")
    assert (their_m.parts, their_m.row_count, their_m.schema_hash) == (
        m.parts, 100, m.schema_hash)
    assert rs.read_dataset("silver/orders").equals(data)
    # After an overwrite remote-store reads the new generation only.
    pds.write_dataset(table(500, 530), "silver/orders", overwrite=True)
    assert rs.read_dataset("silver/orders").equals(table(500, 530))


def test_each_overwrites_the_other(both: tuple[ParquetDatasetStore, Store]) -> None:
    ours, theirs = both
    rs = RemoteStorePDS(theirs, max_rows_per_file=30)
    rs.write_dataset(table(0, 70), "k")
    ours.write_dataset(table(100, 110), "k", overwrite=True)  # switches off the legacy parts
    assert ours.read_dataset("k").equals(table(100, 110))
    assert rs.read_dataset("k").equals(table(100, 110))
    rs.write_dataset(table(200, 205), "k", overwrite=True)  # remote-store deletes, then writes
    assert ours.read_dataset("k").equals(table(200, 205))
    # A remote-store write that has not reached _SUCCESS yet is incomplete for us.
    theirs.delete("k/_SUCCESS")
    with pytest.raises(DatasetIncomplete):
        ours.read_dataset("k")
