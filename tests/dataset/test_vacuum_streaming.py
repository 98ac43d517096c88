"""Vacuum (age rule, dry run, injected clock) and streaming writes and reads (batches in,
batches out, predicate pruning), on memory, local and moto S3."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import caslake
from caslake.dataset import DatasetIncomplete, ParquetDatasetStore
from caslake.errors import InvalidArgument, SchemaMismatch
from caslake.store import ObjectStore
from caslake.store.base import PutMode
from tests.dataset.helpers import SCHEMA, table

KEY = "v/ds"


def _later(hours: float) -> datetime:
    return datetime.now(UTC) + timedelta(hours=hours)


def test_vacuum_age_rule_and_dry_run(any_store: ObjectStore) -> None:
    pds = ParquetDatasetStore(any_store, max_rows_per_file=30)
    first = pds.write_dataset(table(0, 70), KEY)
    second = pds.write_dataset(table(0, 10), KEY, overwrite=True)
    # A write still uploading (or one that died): a generation with no commit.
    any_store.put(f"{KEY}/_gen-{'a' * 32}/part-00000.parquet", b"x", mode=PutMode.CREATE)
    young = pds.vacuum(KEY)  # default: one hour
    assert young.deleted == [] and len(young.kept_young) == len(first.parts) + 2
    dry = pds.vacuum(KEY, now=lambda: _later(2), dry_run=True)
    assert dry.dry_run and sorted(dry.deleted) == sorted(
        [f"{KEY}/{p}" for p in first.parts] + [f"{KEY}/{first.parts[0].split('/')[0]}/_COMMITTED",
                                                f"{KEY}/_gen-{'a' * 32}/part-00000.parquet"])
    assert all(any_store.exists(k) for k in dry.deleted)  # a dry run deletes nothing
    done = pds.vacuum(KEY, now=lambda: _later(2))
    assert sorted(done.deleted) == sorted(dry.deleted) and done.bytes_deleted > 0
    assert not any(any_store.exists(k) for k in done.deleted)
    assert pds.read_dataset(KEY).equals(table(0, 10))
    assert all(any_store.exists(f"{KEY}/{p}") for p in second.parts)
    with pytest.raises(InvalidArgument):
        pds.vacuum(KEY, older_than=timedelta(hours=-1))


def test_vacuum_all_datasets_and_superseded_time(any_store: ObjectStore) -> None:
    pds = ParquetDatasetStore(any_store)
    pds.write_dataset(table(0, 5), "a")
    pds.write_dataset(table(0, 6), "a", overwrite=True)
    pds.write_dataset(table(0, 7), "b/c")
    pds.write_dataset(table(0, 8), "b/c", overwrite=True)
    report = pds.vacuum(older_than=timedelta(0))
    assert report.datasets == ["a", "b/c"] and len(report.deleted) == 4
    # A generation superseded just now is young even though it was written long ago:
    # measured from the switch, not from its upload.  (The clock says the switch, at
    # the new manifest's time, was 30 minutes ago; the rule is one hour.)
    pds.write_dataset(table(0, 9), "a", overwrite=True)
    r = pds.vacuum("a", now=lambda: _later(0.5))
    assert r.deleted == [] and len(r.kept_young) == 2
    assert pds.list_datasets() == ["a", "b/c"]


def test_streaming_write_from_reader_and_iterables(any_store: ObjectStore) -> None:
    pds = ParquetDatasetStore(any_store, max_rows_per_file=1000, row_group_size=250)

    def batches() -> Iterator[pa.RecordBatch]:
        for i in range(40):
            yield from table(i * 97, (i + 1) * 97).to_batches()

    reader = pa.RecordBatchReader.from_batches(SCHEMA, batches())
    m = pds.write_dataset(reader, KEY)
    assert m.row_count == 40 * 97 and len(m.parts) == 4
    assert pds.read_dataset(KEY).equals(table(0, 40 * 97))
    pds.write_dataset(batches(), "iter")
    assert pds.read_dataset("iter").equals(table(0, 40 * 97))
    with pytest.raises(SchemaMismatch):
        pds.write_dataset(iter([*table(0, 5).to_batches(),
                                pa.record_batch({"x": [1]})]), "bad")
    assert not pds.dataset_exists("bad") and list(any_store.list("bad/")) == []
    with pytest.raises(InvalidArgument):
        pds.write_dataset(iter([]), "empty-iter")
    empty = pds.write_dataset(table(0, 0), "empty")
    assert empty.row_count == 0 and pds.read_dataset("empty").schema == SCHEMA


@pytest.mark.parametrize("where", [
    "id >= 2500", "id < 100 OR id > 3900", "s = 's3' AND f > 100", "s IS NULL",
    "id BETWEEN 1000 AND 1010", caslake.col("id") == 7, "f IS NOT NULL AND id < 0",
])
def test_streaming_read_filter_matches_pyarrow_and_prunes(any_store: ObjectStore,
                                                          where: object) -> None:
    pds = ParquetDatasetStore(any_store, max_rows_per_file=1000, row_group_size=200)
    data = table(0, 4000)
    pds.write_dataset(data, KEY)
    got = pds.read_batches(KEY, columns=["id", "s"], filter=where).read_all()  # type: ignore[arg-type]
    schema = data.schema
    bound = caslake.expr.compile_where(where, schema)  # type: ignore[arg-type]
    assert bound is not None
    want = data.filter(caslake.expr.to_arrow(bound)).select(["id", "s"])
    assert got.equals(want)
    assert pds.read_dataset(KEY, filter=where).num_rows == want.num_rows  # type: ignore[arg-type]
    plan, _ = pds.plan_read(KEY, filter=where)  # type: ignore[arg-type]
    if isinstance(where, str) and where.startswith("id"):
        assert plan.row_groups_pruned > 0
    if where == "id >= 2500":
        assert plan.parts_pruned == 2


def test_streaming_read_sees_one_generation(any_store: ObjectStore) -> None:
    pds = ParquetDatasetStore(any_store, max_rows_per_file=100, row_group_size=50)
    pds.write_dataset(table(0, 400), KEY)
    reader = pds.read_batches(KEY)
    first = reader.read_next_batch()
    pds.write_dataset(table(0, 5), KEY, overwrite=True)  # the old generation stays
    rest = reader.read_all()
    assert pa.concat_tables([pa.Table.from_batches([first]), rest]).equals(table(0, 400))
    reader = pds.read_batches(KEY)
    pds.vacuum(KEY, older_than=timedelta(0))
    pds.write_dataset(table(0, 6), KEY, overwrite=True)
    pds.vacuum(KEY, older_than=timedelta(0))  # deletes what the reader resolved
    try:
        # A local reader holds its parts open (POSIX keeps unlinked files readable).
        assert reader.read_all().equals(table(0, 5))
    except DatasetIncomplete:
        assert any_store.local_path("x") is None  # elsewhere: a clean, typed failure
    assert pc.sum(pds.read_dataset(KEY).column("id")).as_py() == 15
