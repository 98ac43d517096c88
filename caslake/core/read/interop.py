"""Handing a table's current rows to other tools.

* :class:`ArrowExport` gives ``Scan`` and ``Table`` the Arrow PyCapsule stream
  interface (``__arrow_c_stream__``), so ``duckdb.sql("select ... from scan")``,
  ``pl.DataFrame(scan)`` and ``pa.table(scan)`` read exactly the rows caslake
  would return (deleted rows dropped, one pinned version), streamed; plus
  ``to_pandas()`` and ``to_polars()`` (Polars stays an optional import).
* :func:`live_file_list` lists the live data files of a snapshot by full URI
  with their row and deleted-row counts, for users who hand the files to another
  engine themselves: reading them directly shows deleted rows.

Never writes.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from caslake.core.metadata_io import MetadataIO, Snapshot
from caslake.errors import OptionalDependencyMissing
from caslake.store.base import ObjectStore


class ArrowExport:
    """Mixin: everything here is built on ``_export_reader()``, a fresh stream each call."""

    def _export_reader(self) -> pa.RecordBatchReader:
        raise NotImplementedError

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        reader: Any = self._export_reader()
        return reader.__arrow_c_stream__(requested_schema)

    def to_pandas(self, **kwargs: Any) -> Any:
        """A pandas DataFrame (``kwargs`` go to ``pyarrow.Table.to_pandas``).

        Examples:
            >>> t.to_pandas()['city'].tolist()  # doctest: +SKIP
            ['Oslo', 'Lima', 'Pune']
        """
        return self._export_reader().read_all().to_pandas(**kwargs)

    def to_polars(self) -> Any:
        """A Polars DataFrame; OptionalDependencyMissing if Polars is not installed.

        Examples:
            >>> t.to_polars().height  # doctest: +SKIP
            3
        """
        try:
            import polars
        except ImportError:
            raise OptionalDependencyMissing("to_polars() needs Polars: pip install polars",
                                            package="polars") from None
        return polars.DataFrame(self._export_reader().read_all())


def live_file_list(store: ObjectStore, io: MetadataIO, snap: Snapshot) -> list[dict[str, Any]]:
    """``{"uri", "path", "rows", "deleted_rows", "bytes"}`` for each live data file."""
    deleted = snap.manifest.deleted_rows_per_file()
    root = store.uri.rstrip("/")
    return [{"uri": f"{root}/{f.path}", "path": f.path, "rows": f.row_count,
             "deleted_rows": deleted.get(f.path, 0), "bytes": f.size}
            for f in io.live_files(snap)]
