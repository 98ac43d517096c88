"""Adapters that give caslake and its peers one small interface for the benchmarks.

Each adapter builds its own copy of a table from the same Arrow batches (one
append per batch), deletes by an inclusive ``id`` range (``lo == hi`` is a
one-row delete) and reads chosen columns, optionally of an ``id`` range only,
back to Arrow from a freshly opened table.  Systems:

* ``caslake``: ``create_table`` + ``append``, ``Table.delete(expr)`` (a tombstone;
  the expression API, as the scans use: SQL text would count sqlglot's import,
  ~0.17 s that a process pays once, on its first SQL string, and that the
  scans suite reports in its own row);
* ``pyarrow`` (raw Parquet files, the baseline): ``pq.write_table`` per batch,
  a delete rewrites every file that holds a deleted row, reads are
  ``pq.read_table(files, columns, filters)``;
* ``deltalake`` (delta-rs): ``write_deltalake`` appends, ``DeltaTable.delete(sql)``
  (copy-on-write: the matching files are rewritten without the rows);
* ``pyiceberg``: a ``SqlCatalog`` on SQLite with a local warehouse, ``append``,
  ``Table.delete(expr)`` (copy-on-write in pyiceberg 0.12);
* Lance (``pylance``): ``lance.write_dataset``, ``LanceDataset.delete(sql)``
  (writes a deletion file per touched fragment, like a tombstone).

``defaults=True`` writes with each library's own defaults (codec, file size);
without it, deltalake writes zstd like caslake and Lance one file per batch,
so every system starts from the same file layout (the delete benchmark).

The packages are imported lazily, so a missing or broken peer fails only its
own adapter; the benchmarks report such a failure instead of a number.
``IMPORTS`` names the modules a fresh process imports before its clock starts.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
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


def _id_range(lo: int, hi: int) -> Any:
    """:func:`sql_range` in caslake's expression API."""
    from caslake import col

    return col("id") == lo if lo == hi else col("id").between(lo, hi)


@dataclass
class Ran:
    """What a benchmark records of one system: it failed (``error``) or it ran."""

    name: str
    version: str = "?"
    error: str | None = None
    files: int = 0


IdRange = tuple[int, int]  # inclusive ``(lo, hi)`` of ``id``


class System:
    """One table format under test.  ``root`` is the directory it owns."""

    name = "?"
    IMPORTS: tuple[str, ...] = ()

    def __init__(self, root: Path, *, defaults: bool = False) -> None:
        self.root = root
        self.defaults = defaults
        self.version = "?"

    def build(self, batches: list[pa.Table]) -> None:
        raise NotImplementedError

    def delete(self, lo: int, hi: int) -> int:
        """Delete rows with ``lo <= id <= hi``; return how many rows the system says it deleted."""
        raise NotImplementedError

    def read(self, columns: list[str] | None = None, ids: IdRange | None = None) -> pa.Table:
        """Open the table afresh and read ``columns`` (every column if None) of the
        rows with ``lo <= id <= hi`` (every row if ``ids`` is None) to Arrow."""
        raise NotImplementedError

    def scan(self) -> pa.Table:
        """Open the table afresh and read every row and column to Arrow."""
        return self.read()

    def data_files(self) -> int:
        raise NotImplementedError

    def size(self) -> int:
        return dir_bytes(self.root)


class CaslakeSystem(System):
    name = "caslake"
    IMPORTS = ("caslake",)

    def __init__(self, root: Path, *, defaults: bool = False) -> None:
        super().__init__(root, defaults=defaults)
        import caslake

        self.version = caslake.__version__
        self.table: Any = None
        self.requests: list[dict[str, int]] = []

    def build(self, batches: list[pa.Table]) -> None:
        import caslake

        self.table = caslake.create_table(str(self.root), batches[0].schema)
        for batch in batches:
            self.table.append(batch)

    def delete(self, lo: int, hi: int) -> int:
        result = self.table.delete(_id_range(lo, hi))
        self.requests.append(dict(result.requests))
        return int(result.rows_deleted)

    def read(self, columns: list[str] | None = None, ids: IdRange | None = None, *,
             sql: bool = False) -> pa.Table:
        """``where`` is caslake's expression API (``col("id").between(lo, hi)``), as
        pyarrow, deltalake and pyiceberg get structured filters; ``sql`` passes SQL text
        instead (parsed by sqlglot, imported on the first SQL string in a process)."""
        import caslake

        where: Any = None
        if ids is not None:
            lo, hi = ids
            where = sql_range(lo, hi) if sql else _id_range(lo, hi)
        return caslake.open_table(str(self.root)).scan(columns=columns, where=where).to_arrow()

    def data_files(self) -> int:
        return len(self.table.describe()["data_files"])


class PyarrowSystem(System):
    """Raw Parquet files written by ``pq.write_table`` at its defaults; a delete
    rewrites every file holding a deleted row (write to a temporary name, rename)."""

    name = "pyarrow"
    IMPORTS = ("pyarrow.parquet",)

    def __init__(self, root: Path, *, defaults: bool = False) -> None:
        super().__init__(root, defaults=defaults)
        self.version = pa.__version__

    def files(self) -> list[str]:
        return sorted(str(p) for p in self.root.glob("*.parquet"))

    def build(self, batches: list[pa.Table]) -> None:
        import pyarrow.parquet as pq

        self.root.mkdir(parents=True, exist_ok=True)
        for i, batch in enumerate(batches):
            pq.write_table(batch, self.root / f"part-{i:05d}.parquet")

    def delete(self, lo: int, hi: int) -> int:
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        deleted = 0
        for f in self.files():
            t = pq.read_table(f)
            hit = pc.and_(pc.greater_equal(t["id"], lo), pc.less_equal(t["id"], hi))
            n = pc.sum(hit).as_py() or 0
            if n:
                pq.write_table(t.filter(pc.invert(hit)), f + ".tmp")
                os.replace(f + ".tmp", f)
                deleted += n
        return deleted

    def read(self, columns: list[str] | None = None, ids: IdRange | None = None) -> pa.Table:
        import pyarrow.parquet as pq

        filters = None if ids is None else [("id", ">=", ids[0]), ("id", "<=", ids[1])]
        return pq.read_table(self.files(), columns=columns, filters=filters)

    def data_files(self) -> int:
        return len(self.files())


class DeltaSystem(System):
    name = "deltalake"
    IMPORTS = ("deltalake",)

    def __init__(self, root: Path, *, defaults: bool = False) -> None:
        super().__init__(root, defaults=defaults)
        import deltalake

        self.version = deltalake.__version__
        # Unless at defaults: zstd like caslake and pyiceberg (delta-rs writes snappy
        # by default), for both the initial files and the files a delete rewrites.
        self.props = None if defaults else deltalake.WriterProperties(compression="ZSTD")
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

    def read(self, columns: list[str] | None = None, ids: IdRange | None = None) -> pa.Table:
        from deltalake import DeltaTable

        filters = None if ids is None else [("id", ">=", ids[0]), ("id", "<=", ids[1])]
        return DeltaTable(str(self.root)).to_pyarrow_table(columns=columns, filters=filters)

    def data_files(self) -> int:
        return len(self.dt.file_uris())


def _iceberg_range(lo: int, hi: int) -> Any:
    from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, LessThanOrEqual

    return EqualTo("id", lo) if lo == hi else And(GreaterThanOrEqual("id", lo),
                                                   LessThanOrEqual("id", hi))


class IcebergSystem(System):
    name = "pyiceberg"
    IMPORTS = ("pyiceberg.catalog.sql", "pyiceberg.expressions")

    def __init__(self, root: Path, *, defaults: bool = False) -> None:
        super().__init__(root, defaults=defaults)
        import pyiceberg

        self.version = pyiceberg.__version__
        self.table: Any = None

    def _catalog(self) -> Any:
        from pyiceberg.catalog.sql import SqlCatalog

        return SqlCatalog("bench", uri=f"sqlite:///{self.root / 'catalog.db'}",
                          warehouse=(self.root / "warehouse").as_uri())

    def build(self, batches: list[pa.Table]) -> None:
        (self.root / "warehouse").mkdir(parents=True)
        catalog = self._catalog()
        catalog.create_namespace("bench")
        self.table = catalog.create_table("bench.t", schema=batches[0].schema)
        for batch in batches:
            self.table.append(batch)

    def _total_rows(self) -> int:
        return int(self.table.current_snapshot().summary["total-records"])

    def delete(self, lo: int, hi: int) -> int:
        before = self._total_rows()
        self.table.delete(_iceberg_range(lo, hi))
        # pyiceberg returns nothing: the snapshot summary's row total is the record.
        return before - self._total_rows()

    def read(self, columns: list[str] | None = None, ids: IdRange | None = None) -> pa.Table:
        from pyiceberg.expressions import AlwaysTrue

        scan = self._catalog().load_table("bench.t").scan(
            row_filter=AlwaysTrue() if ids is None else _iceberg_range(*ids),
            selected_fields=("*",) if columns is None else tuple(columns))
        return scan.to_arrow()

    def data_files(self) -> int:
        return int(self.table.current_snapshot().summary["total-data-files"])


class LanceSystem(System):
    name = "lance"
    IMPORTS = ("lance",)

    def __init__(self, root: Path, *, defaults: bool = False) -> None:
        super().__init__(root, defaults=defaults)
        import lance

        self.version = lance.__version__
        self.ds: Any = None

    def build(self, batches: list[pa.Table]) -> None:
        import lance

        layout = {} if self.defaults else {"max_rows_per_file": max(b.num_rows for b in batches)}
        for i, batch in enumerate(batches):
            self.ds = lance.write_dataset(batch, str(self.root),
                                          mode="create" if i == 0 else "append", **layout)

    def delete(self, lo: int, hi: int) -> int:
        result = self.ds.delete(sql_range(lo, hi))
        return int(result["num_deleted_rows"])

    def read(self, columns: list[str] | None = None, ids: IdRange | None = None) -> pa.Table:
        import lance

        return lance.dataset(str(self.root)).to_table(
            columns=columns, filter=None if ids is None else sql_range(*ids))

    def data_files(self) -> int:
        return len(self.ds.get_fragments())


PEERS: tuple[type[System], ...] = (DeltaSystem, IcebergSystem, LanceSystem)
SYSTEMS: dict[str, type[System]] = {c.name: c for c in (
    PyarrowSystem, CaslakeSystem, DeltaSystem, IcebergSystem, LanceSystem)}
