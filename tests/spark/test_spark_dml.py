"""Distributed delete and upsert (``caslake.spark.delete`` / ``upsert``) against the
core ``Table.delete`` / ``Table.upsert`` on twin tables built by the same history."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession

import caslake
import caslake.spark
from caslake.errors import DuplicateKey, ReadValidationFailed, SchemaMismatch, UnknownColumn
from caslake.format.keys import DATA_PREFIX
from caslake.spark import dml

pytestmark = [pytest.mark.spark,
              pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]

SCHEMA = pa.schema([("id", pa.int64()), ("user", pa.string()), ("amount", pa.float64()),
                    ("day", pa.date32())])
D0 = dt.date(2024, 1, 1)


def rows(ids: list[int], tag: str = "") -> pa.Table:
    return pa.table({"id": ids, "user": [f"u{i % 4}{tag}" for i in ids],
                     "amount": [i * 1.5 for i in ids],
                     "day": [D0 + dt.timedelta(days=i % 10) for i in ids]}, schema=SCHEMA)


def build(uri: str) -> caslake.Table:
    """Four files with disjoint id ranges; files 0 and 1 already carry tombstones."""
    t = caslake.create_table(uri, SCHEMA)
    for lo in (0, 100, 200, 300):
        t.append(rows(list(range(lo, lo + 100))))
    t.delete("user = 'u1' AND id < 150")
    t.delete("id = 7")
    return t


def as_df(spark: SparkSession, table: pa.Table) -> DataFrame:
    return spark.createDataFrame(table.to_pandas(), schema="id long, user string, "
                                 "amount double, day date")


def shape(t: caslake.Table) -> list[tuple[int, int]]:
    """Per live file (in order): stored rows and rows its tombstones delete."""
    return [(f["rows"], f["deleted_rows"]) for f in t.describe()["data_files"]]


def same_rows(a: caslake.Table, b: caslake.Table) -> bool:
    """The latest versions of ``a`` and ``b`` hold the same rows (as multisets)."""
    def rows_of(t: caslake.Table) -> pa.Table:
        return t.scan().to_arrow().sort_by([(n, "ascending") for n in SCHEMA.names])
    return rows_of(a).equals(rows_of(b))


def twins(tmp_path: Path, name: str) -> tuple[caslake.Table, caslake.Table]:
    return build(str(tmp_path / f"{name}-local")), build(str(tmp_path / f"{name}-spark"))


def assert_same_commit(local: caslake.Table, distributed: caslake.Table, before: int,
                       operation: str, added: tuple[int, int] = (0, 0)) -> None:
    """One commit each, recording the same deletes.  (Spark may split appended rows
    into more files than the local write: ``added`` files, last in the list, are
    compared by rows only.)"""
    local.refresh()
    distributed.refresh()
    assert distributed.version == local.version == before + 1  # exactly one commit
    ours, theirs = distributed.history()[0], local.history()[0]
    assert ours.operation == theirs.operation == operation
    assert ours.params.get("engine") == "spark"
    per_file = ("added_files", "added_bytes")
    assert ({k: v for k, v in ours.summary.items() if k not in per_file}
            == {k: v for k, v in theirs.summary.items() if k not in per_file})
    mine, theirs_shape = shape(distributed), shape(local)
    assert mine[:len(mine) - added[1]] == theirs_shape[:len(theirs_shape) - added[0]]
    assert sum(r for r, _ in mine[len(mine) - added[1]:]) == sum(
        r for r, _ in theirs_shape[len(theirs_shape) - added[0]:])
    assert distributed.describe()["deleted_rows"] == local.describe()["deleted_rows"]


@pytest.mark.parametrize("where", [
    "id = 123",                               # one key, one file
    "id BETWEEN 90 AND 260",                  # a range across three files, some rows deleted
    "user = 'u2' AND day >= DATE '2024-01-05'",  # strings and dates, every file
    "id >= 300",                              # a whole file: dropped, no tombstone entry
])
def test_distributed_delete_equals_table_delete(spark: SparkSession, tmp_path: Path,
                                                where: str) -> None:
    local, distributed = twins(tmp_path, "t")
    before = local.version
    spark.sparkContext.setJobGroup("caslake-delete-test", "distributed delete")
    try:
        got = caslake.spark.delete(spark, distributed.uri, where)
    finally:
        spark.sparkContext.setJobGroup("", "")
    # The positions were computed by Spark tasks, not on the driver.
    assert spark.sparkContext.statusTracker().getJobIdsForGroup("caslake-delete-test")
    want = local.delete(where)
    assert got.rows_deleted == want.rows_deleted > 0
    assert (got.files_removed, got.tombstones_added) == (want.files_removed,
                                                        want.tombstones_added)
    assert got.version == before + 1 and not got.noop
    assert_same_commit(local, distributed, before, "delete")
    assert same_rows(distributed, local)
    assert distributed.scan(where=where).count() == 0


def test_distributed_delete_of_deleted_rows_is_a_noop(spark: SparkSession,
                                                      tmp_path: Path) -> None:
    t = build(str(tmp_path / "t"))
    before = t.version
    got = caslake.spark.delete(spark, t.uri, "id = 7 OR (user = 'u1' AND id < 120)")
    assert got.noop and got.rows_deleted == 0
    assert t.refresh().version == before
    with pytest.raises(UnknownColumn, match="nope"):
        caslake.spark.delete(spark, t.uri, "nope = 1")


def test_distributed_delete_read_version_refuses_a_concurrent_change(
        spark: SparkSession, tmp_path: Path) -> None:
    t = build(str(tmp_path / "t"))
    read_at = t.version
    t.append(rows([150]))  # another writer adds a row the delete's predicate matches
    with pytest.raises(ReadValidationFailed):
        caslake.spark.delete(spark, t.uri, "id BETWEEN 140 AND 160", read_version=read_at)
    assert t.refresh().version == read_at + 1
    # Rows the predicate cannot match do not conflict.
    got = caslake.spark.delete(spark, t.uri, "id = 333", read_version=read_at)
    assert got.rows_deleted == 1 and got.version == read_at + 2


def test_distributed_delete_replans_when_a_concurrent_delete_touched_its_files(
        spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = build(str(tmp_path / "t"))
    before = t.version
    runs: list[int] = []
    real = dml.run_match_job

    def racing(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        if not runs:  # a Python delete lands on the same file while the job runs
            caslake.open_table(t.uri).delete("id IN (210, 211)")
        runs.append(1)
        return out

    monkeypatch.setattr(dml, "run_match_job", racing)
    got = caslake.spark.delete(spark, t.uri, "id BETWEEN 205 AND 215")
    assert len(runs) == 2  # the lost CAS found its file touched and planned again
    assert got.rows_deleted == 9 and got.version == before + 2
    ids = set(t.refresh().scan(columns=["id"]).to_arrow()["id"].to_pylist())
    assert not ids & set(range(205, 216)) and 204 in ids and 216 in ids


def cdc_batch() -> pa.Table:
    """Updates of live keys (6, 250, 399), keys whose rows are already deleted (7,
    113), new keys and a NULL key.  (No key twice: ``Table.upsert`` refuses input
    with a duplicated key since issue 10.)"""
    ids: list[int | None] = [6, 7, 113, 250, 399, 1000, 1001, None]
    table = pa.table({"id": ids, "user": [f"new{i}" for i in range(len(ids))],
                      "amount": [float(i) for i in range(len(ids))],
                      "day": [D0] * len(ids)}, schema=SCHEMA)
    return table


@pytest.mark.parametrize("limit", [None, 0], ids=["broadcast-keys", "semi-join"])
def test_distributed_upsert_equals_table_upsert(spark: SparkSession, tmp_path: Path,
                                                limit: int | None) -> None:
    local, distributed = twins(tmp_path, "t")
    before = local.version
    batch = cdc_batch()
    kwargs: dict[str, Any] = {} if limit is None else {"broadcast_keys_limit": limit}
    got = caslake.spark.upsert(spark, distributed.uri, as_df(spark, batch).repartition(3),
                               key=["id"], **kwargs)
    want = local.upsert(batch, key=["id"])
    assert got.rows_deleted == want.rows_deleted == 3
    assert got.rows_added == want.rows_added == batch.num_rows
    assert got.version == before + 1
    assert_same_commit(local, distributed, before, "upsert", (want.files_added,
                                                             got.files_added))
    assert same_rows(distributed, local)


def test_distributed_upsert_composite_key_semi_join(spark: SparkSession,
                                                    tmp_path: Path) -> None:
    local, distributed = twins(tmp_path, "t")
    before = local.version
    # (user, id) of five live rows, a new key, and a live id under another user (no match)
    batch = rows([2, 3, 102, 204, 205, 500, 6])
    batch = batch.set_column(1, "user", pa.array([*batch["user"].to_pylist()[:-1], "zz"]))
    batch = batch.set_column(2, "amount", pa.array([-1.0] * batch.num_rows))
    third = build(str(tmp_path / "third"))
    got = {limit: caslake.spark.upsert(spark, target.uri, as_df(spark, batch),
                                       key=["user", "id"], broadcast_keys_limit=limit)
           for limit, target in ((0, distributed), (1000, third))}
    assert [r.rows_deleted for r in got.values()] == [5, 5]
    want = local.upsert(batch, key=["user", "id"])
    assert want.rows_deleted == 5
    assert_same_commit(local, distributed, before, "upsert", (want.files_added,
                                                             got[0].files_added))
    assert same_rows(distributed, local) and same_rows(third, local)


def stored_data_files(t: caslake.Table) -> set[str]:
    return {m.key for m in t.store.list(DATA_PREFIX)}


def test_distributed_upsert_rejects_bad_input_and_leaves_nothing(
        spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = build(str(tmp_path / "t"))
    before = t.version
    files = stored_data_files(t)
    df = as_df(spark, rows([1, 2]))
    with pytest.raises(SchemaMismatch, match="'nope'"):
        caslake.spark.upsert(spark, t.uri, df, key=["nope"])
    with pytest.raises(SchemaMismatch, match="'extra'"):
        caslake.spark.upsert(spark, t.uri, df.withColumnRenamed("user", "extra"), key="id")
    # A key twice in the batch has no single meaning (as Table.upsert and Delta's MERGE).
    twice = as_df(spark, rows([5, 250, 5]))
    with pytest.raises(DuplicateKey, match=r"id=5\) 2 times") as dup:
        caslake.spark.upsert(spark, t.uri, twice, key="id")
    assert dup.value.key == {"id": 5} and dup.value.count == 2
    assert t.refresh().version == before and stored_data_files(t) == files
    empty = caslake.spark.upsert(spark, t.uri, df.limit(0), key="id")  # nothing to do
    assert empty.noop and empty.rows_deleted == 0

    def lost_executors(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the matching job failed")

    monkeypatch.setattr(dml, "run_match_job", lost_executors)
    with pytest.raises(RuntimeError, match="matching job failed"):
        caslake.spark.upsert(spark, t.uri, df, key="id")  # its files were written first
    assert t.refresh().version == before
    assert stored_data_files(t) == files  # and removed again: nothing can reference them
