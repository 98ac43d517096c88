"""A Dagster IO manager that stores asset outputs as caslake datasets (RFC-0008 PDS-009).

Needs the ``dagster`` extra (``pip install 'caslake[dagster]'``); importing this
module without it raises :class:`~caslake.errors.OptionalDependencyMissing`.

Each output is written with :meth:`ParquetDatasetStore.write_dataset` (with
``overwrite=True``: re-materializing replaces the dataset atomically) at
``{prefix}/{asset key path}[/{partition key}]``, with the run id and the asset
and partition keys in the manifest.  Inputs load the dataset back as a pyarrow
Table, or as a pandas DataFrame when the input is annotated as one; several
upstream partitions are concatenated in order.  This module owns only the
mapping between Dagster contexts and dataset keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast
from urllib.parse import quote

import pyarrow as pa

from caslake.errors import InvalidArgument, OptionalDependencyMissing
from caslake.store.options import StorageOptions

try:
    from dagster import ConfigurableIOManager, InputContext, OutputContext
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise OptionalDependencyMissing(
        "caslake.dataset.dagster needs Dagster: pip install 'caslake[dagster]'",
        package="caslake[dagster]") from exc

from caslake.dataset.store import ParquetDatasetStore


def _segment(text: str) -> str:
    """A key segment for an asset-key part or partition key (no '/', '..' or spaces)."""
    seg = quote(text, safe="-_.=+")
    return seg if seg not in ("", ".", "..") else quote(text, safe="") or "_"


class DatasetIOManager(ConfigurableIOManager):  # type: ignore[misc]
    """Stores pyarrow Tables (or pandas DataFrames, through pyarrow) as datasets."""

    uri: str
    storage_options: dict[str, str] = {}  # noqa: RUF012 (pydantic copies the default)
    prefix: str = ""
    compression: str = "zstd"
    max_rows_per_file: int | None = None

    def _pds(self) -> ParquetDatasetStore:
        options = cast(StorageOptions, self.storage_options) or None
        return ParquetDatasetStore(self.uri, storage_options=options,
                                   compression=self.compression,
                                   max_rows_per_file=self.max_rows_per_file)

    def _base(self, path: Sequence[str]) -> str:
        parts = [p for p in self.prefix.split("/") if p] + [_segment(p) for p in path]
        return "/".join(parts)

    def handle_output(self, context: OutputContext, obj: Any) -> None:
        if obj is None:
            return
        if type(obj).__module__.startswith("pandas"):
            obj = pa.Table.from_pandas(obj, preserve_index=False)
        if not isinstance(obj, (pa.Table, pa.RecordBatchReader)):
            raise InvalidArgument(f"DatasetIOManager stores pyarrow Tables or pandas "
                                  f"DataFrames, not {type(obj).__name__}")
        asset = context.asset_key.path
        key = self._base(asset)
        meta = {"asset_key": "/".join(asset)}
        if context.has_asset_partitions:
            key += "/" + _segment(context.asset_partition_key)
            meta["partition_key"] = context.asset_partition_key
        manifest = self._pds().write_dataset(obj, key, overwrite=True, run_id=context.run_id,
                                             metadata=meta)
        context.add_output_metadata({"dataset_key": key, "rows": manifest.row_count,
                                     "parts": len(manifest.parts)})

    def load_input(self, context: InputContext) -> Any:
        key = self._base(context.asset_key.path)
        pds = self._pds()
        if context.has_asset_partitions:
            tables = [pds.read_dataset(f"{key}/{_segment(pk)}")
                      for pk in context.asset_partition_keys]
            table = pa.concat_tables(tables) if len(tables) != 1 else tables[0]
        else:
            table = pds.read_dataset(key)
        typ = getattr(context.dagster_type, "typing_type", None)
        if getattr(typ, "__module__", "").startswith("pandas"):
            return table.to_pandas()
        return table
