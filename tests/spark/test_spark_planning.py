"""Read planning of the ``caslake`` data source: how many Spark tasks, and what each reads.

Runs the reader's driver-side planning and each partition's executor-side read
in this process (no SparkSession: the planning is plain Python), on real tables,
and checks the rows against pyarrow's read of the same data files.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import caslake
from caslake.core import WriteOptions
from caslake.errors import InvalidArgument
from caslake.spark.read_plan import CaslakePartition, plan_partitions, read_partition, split_bytes
from caslake.spark.source import CaslakeDataSource, CaslakeReader

pytestmark = pytest.mark.spark

_COLUMNS: list[tuple[str, pa.DataType]] = [("id", pa.int64()), ("s", pa.string())]
SCHEMA = pa.schema(_COLUMNS)


def _rows(lo: int, hi: int) -> pa.Table:
    ids = list(range(lo, hi))
    return pa.table({"id": ids, "s": [f"row-{i:08d}-{'x' * (i % 23)}" for i in ids]},
                    schema=SCHEMA)


def _reader(uri: str, cores: int) -> CaslakeReader:
    ds = CaslakeDataSource({"path": uri, "minPartitions": str(cores)})
    return ds.reader(ds.schema())


def _parts(reader: CaslakeReader) -> list[CaslakePartition]:
    parts = reader.partitions()
    assert all(isinstance(p, CaslakePartition) for p in parts)
    return [p for p in parts if isinstance(p, CaslakePartition)]


def _read_all(parts: list[CaslakePartition]) -> pa.Table:
    batches = [b for p in parts for b in read_partition(p)]
    return pa.Table.from_batches(batches).sort_by("id")


def _groups_once(uri: str, parts: list[CaslakePartition]) -> None:
    """Every row group of every live file is read by exactly one partition."""
    want = sorted((f["path"], rg) for f in caslake.open_table(uri).describe()["data_files"]
                  for rg in range(pq.ParquetFile(str(Path(uri) / f["path"])).num_row_groups))
    got = sorted((path, rg) for p in parts for path, groups in p.row_groups.items()
                 for rg in groups)
    assert got == want


def test_small_files_pack_into_one_task_per_core(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = caslake.create_table(uri, SCHEMA)
    for k in range(12):
        table.append(_rows(k * 100, (k + 1) * 100))
    parts = _parts(_reader(uri, cores=2))
    assert len(parts) == 2  # not one task per file
    _groups_once(uri, parts)
    files = [str(Path(uri) / f["path"]) for f in table.describe()["data_files"]]
    assert _read_all(parts).equals(pq.read_table(files, schema=SCHEMA).sort_by("id"))


def test_one_file_of_several_row_groups_is_read_by_every_core(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    # ~6 MiB of incompressible strings in ~1 MiB row groups: more than Spark's 4 MiB
    # open cost, so worth a task per core
    table = caslake.create_table(uri, SCHEMA, write_options=WriteOptions(row_group_size=1 << 20))
    table.append(pa.table({"id": range(200_000),
                           "s": [os.urandom(32).hex() for _ in range(200_000)]}, schema=SCHEMA))
    (f,) = table.describe()["data_files"]
    path = str(Path(uri) / f["path"])
    assert pq.ParquetFile(path).num_row_groups >= 4
    parts = _parts(_reader(uri, cores=2))
    assert len(parts) == 2 and all(len(p.paths) == 1 for p in parts)
    _groups_once(uri, parts)
    assert _read_all(parts).equals(pq.read_table(path).sort_by("id"))


def test_partitions_apply_deletes_and_filters(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = caslake.create_table(uri, SCHEMA)
    for k in range(5):
        table.append(_rows(k * 1000, (k + 1) * 1000))
    table.delete("id IN (3, 1500, 2999, 4000) OR (id BETWEEN 3100 AND 3399)")
    files = [str(Path(uri) / f["path"]) for f in table.describe()["data_files"]]
    everything = pq.read_table(files, schema=SCHEMA)
    gone = {3, 1500, 2999, 4000, *range(3100, 3400)}
    live = everything.filter(pa.array([i not in gone for i in everything["id"].to_pylist()]))
    parts = _parts(_reader(uri, cores=3))
    assert 1 < len(parts) <= 3
    assert _read_all(parts).equals(live.sort_by("id"))


def test_split_bytes_follows_spark_file_partitioning() -> None:
    mib = 1024 * 1024
    # small data: spread over the cores, but never below the open cost
    assert split_bytes(12 * mib, 1, cores=2) == 8 * mib
    assert split_bytes(100, 1, cores=8) == 4 * mib
    # large data: capped at the maximum partition size
    assert split_bytes(10_000 * mib, 1, cores=2) == 128 * mib
    assert split_bytes(10 * mib, 1, cores=2, max_bytes=3 * mib, open_cost=mib) == 3 * mib


def test_plan_partitions_needs_tasks() -> None:
    assert plan_partitions([], cores=2) == []


@pytest.mark.parametrize("bad", ["0", "-2", "two", "1.5"])
def test_min_partitions_must_be_a_positive_integer(tmp_path: Path, bad: str) -> None:
    uri = str(tmp_path / "t")
    caslake.create_table(uri, SCHEMA)
    with pytest.raises(InvalidArgument, match="minPartitions"):
        CaslakeDataSource({"path": uri, "minPartitions": bad}).reader(
            CaslakeDataSource({"path": uri}).schema())
