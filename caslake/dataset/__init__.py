"""Parquet datasets (RFC-0008): parts + ``manifest.json`` + ``_SUCCESS`` on a caslake store.

    from caslake.dataset import ParquetDatasetStore
    pds = ParquetDatasetStore("s3://bucket/lake", storage_options={...})
    pds.write_dataset(table, "silver/orders", run_id="run-42")
    pds.read_dataset("silver/orders", columns=["id"])
    pds.read_batches("silver/orders", filter="day = DATE '2026-03-28'")

The on-storage layout reads and writes datasets of remote-store's
``remote_store.ext.parquet``; concurrent writers are safe (one conditional
write of ``manifest.json`` commits a write).  See ``docs/dataset.md``.
This package sits beside :mod:`caslake.export` and never imports
:mod:`caslake.table`.
"""

from __future__ import annotations

from caslake.dataset.manifest import DatasetManifest, schema_hash
from caslake.dataset.read import ReadPlan
from caslake.dataset.store import ParquetDatasetStore, WriteIntent
from caslake.dataset.vacuum import VacuumReport
from caslake.errors import (
    DatasetAlreadyExists,
    DatasetConflict,
    DatasetIncomplete,
    DatasetNotFound,
    ManifestCorrupted,
)

__all__ = [
    "DatasetAlreadyExists",
    "DatasetConflict",
    "DatasetIncomplete",
    "DatasetManifest",
    "DatasetNotFound",
    "ManifestCorrupted",
    "ParquetDatasetStore",
    "ReadPlan",
    "VacuumReport",
    "WriteIntent",
    "schema_hash",
]
