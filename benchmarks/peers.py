"""Adapters that give caslake's peers one small interface for the delete benchmark.

Each adapter builds its own copy of a table from the same Arrow batches (one
data file per batch, so every system starts from the same file layout), then
deletes by an inclusive ``id`` range (``lo == hi`` is a one-row delete) and
reads the whole table back to Arrow.  Peers:

* ``deltalake`` (delta-rs): ``write_deltalake`` appends, ``DeltaTable.delete(sql)``
  (copy-on-write: the matching files are rewritten without the rows);
* ``pyiceberg``: a ``SqlCatalog`` on SQLite with a local warehouse, ``append``,
  ``Table.delete(expr)`` (copy-on-write in pyiceberg 0.12);
* Lance (``pylance``): ``lance.write_dataset``, ``LanceDataset.delete(sql)``
  (writes a deletion file per touched fragment, like a tombstone).

The packages are imported lazily, so a missing or broken peer fails only its
own adapter; the benchmark reports such a failure instead of a number.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import pyarrow as pa


def dir_bytes(path: Path) -> int:
    """Total size of every file under ``path`` (0 if it does not exist)."""
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(FileNotFoundError):  # removed while we walked
                total += os.stat(os.path.join(dirpath, name)).st_size
    return total


def sql_range(lo: int, hi: int) -> str:
    return f"id = {lo}" if lo == hi else f"id BETWEEN {lo} AND {hi}"


class System:
    """One table format under test.  ``root`` is the directory it owns."""

    name = "?"

    def __init__(self, root: Path) -> None:
        self.root = root

    def build(self, batches: list[pa.Table]) -> None:
        raise NotImplementedError

    def delete(self, lo: int, hi: int) -> int:
        """Delete rows with ``lo <= id <= hi``; return how many rows the system says it deleted."""
        raise NotImplementedError

    def scan(self) -> pa.Table:
        """Open the table afresh and read every row and column to Arrow."""
        raise NotImplementedError

    def data_files(self) -> int:
        raise NotImplementedError

    def size(self) -> int:
        return dir_bytes(self.root)


class DeltaSystem(System):
    name = "deltalake"

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        import deltalake

        self.version = deltalake.__version__
        # zstd like caslake and pyiceberg (delta-rs writes snappy by default), for
        # both the initial files and the files a delete rewrites.
        self.props = deltalake.WriterProperties(compression="ZSTD")
        self.dt: Any = None

    def build(self, batches: list[pa.Table]) -> None:
        from deltalake import DeltaTable, write_deltalake

        for i, batch in enumerate(batches):
            write_deltalake(str(self.root), batch, mode="error" if i == 0 else "append",
                            writer_properties=self.props)
        self.dt = DeltaTable(str(self.root))

    def delete(self, lo: int, hi: int) -> int:
        metrics = self.dt.delete(sql_range(lo, hi), writer_properties=self.props)
        return int(metrics["num_deleted_rows"])

    def scan(self) -> pa.Table:
        from deltalake import DeltaTable

        return DeltaTable(str(self.root)).to_pyarrow_table()

    def data_files(self) -> int:
        return len(self.dt.file_uris())


class IcebergSystem(System):
    name = "pyiceberg"

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        import pyiceberg

        self.version = pyiceberg.__version__
        self.table: Any = None
        self.catalog: Any = None

    def build(self, batches: list[pa.Table]) -> None:
        from pyiceberg.catalog.sql import SqlCatalog

        warehouse = self.root / "warehouse"
        warehouse.mkdir(parents=True)
        self.catalog = SqlCatalog("bench", uri=f"sqlite:///{self.root / 'catalog.db'}",
                                  warehouse=warehouse.as_uri())
        self.catalog.create_namespace("bench")
        self.table = self.catalog.create_table("bench.deletes", schema=batches[0].schema)
        for batch in batches:
            self.table.append(batch)

    def _total_rows(self) -> int:
        return int(self.table.current_snapshot().summary["total-records"])

    def delete(self, lo: int, hi: int) -> int:
        from pyiceberg.expressions import (
            And,
            EqualTo,
            GreaterThanOrEqual,
            LessThanOrEqual,
        )

        expr = EqualTo("id", lo) if lo == hi else And(GreaterThanOrEqual("id", lo),
                                                       LessThanOrEqual("id", hi))
        before = self._total_rows()
        self.table.delete(expr)
        # pyiceberg returns nothing: the snapshot summary's row total is the record.
        return before - self._total_rows()

    def scan(self) -> pa.Table:
        return self.catalog.load_table("bench.deletes").scan().to_arrow()

    def data_files(self) -> int:
        return int(self.table.current_snapshot().summary["total-data-files"])


class LanceSystem(System):
    name = "lance"

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        import lance

        self.version = lance.__version__
        self.ds: Any = None

    def build(self, batches: list[pa.Table]) -> None:
        import lance

        rows_per_file = max(b.num_rows for b in batches)
        for i, batch in enumerate(batches):
            self.ds = lance.write_dataset(batch, str(self.root),
                                          mode="create" if i == 0 else "append",
                                          max_rows_per_file=rows_per_file)

    def delete(self, lo: int, hi: int) -> int:
        result = self.ds.delete(sql_range(lo, hi))
        return int(result["num_deleted_rows"])

    def scan(self) -> pa.Table:
        import lance

        return lance.dataset(str(self.root)).to_table()

    def data_files(self) -> int:
        return len(self.ds.get_fragments())


PEERS: tuple[type[System], ...] = (DeltaSystem, IcebergSystem, LanceSystem)
