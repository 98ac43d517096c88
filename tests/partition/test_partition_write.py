"""Partition specs at create: files never span partitions, each file's recorded values
equal what pyiceberg's transforms compute for every row of it (bucket by Iceberg's
murmur3), and bad partition_by items are typed errors that create nothing."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    TruncateTransform,
    YearTransform,
)
from pyiceberg.types import LongType, StringType, TimestampType

import caslake
from caslake.errors import CaslakeError, InvalidArgument, TableNotFound
from tests.partition.data import SCHEMA, events, sort

EPOCH = dt.datetime(1970, 1, 1)
ICEBERG = {"day": DayTransform(), "year": YearTransform(), "month": MonthTransform(),
           "hour": HourTransform(), "identity": IdentityTransform()}


def iceberg_value(transform: str, value: object, source: str) -> object:
    """pyiceberg's transform of one source value (timestamps as microseconds)."""
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        value = (value - EPOCH) // dt.timedelta(microseconds=1)
    kind = transform.split("[")[0]
    typ = {"ts": TimestampType(), "user_id": LongType(), "region": StringType(),
           "id": LongType()}[source]
    if kind == "bucket":
        fn = BucketTransform(int(transform[7:-1])).transform(typ)
    elif kind == "truncate":
        fn = TruncateTransform(int(transform[9:-1])).transform(typ)
    else:
        fn = ICEBERG[kind].transform(typ)
    return fn(value)


def live_files(t: caslake.Table) -> list:  # type: ignore[type-arg]
    snap = t.context.refresh()
    return t.io.live_files(snap)


@pytest.mark.parametrize("partition_by", [
    ["day(ts)", "bucket(16, user_id)", "region"],
    ["month(ts)", "truncate(100, user_id)"],
    ["hours(ts)"],
    ["year(ts)", "truncate(1, region)"],
])
def test_files_never_span_partitions_and_values_equal_pyiceberg(
        tmp_path: Path, partition_by: list[str]) -> None:
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA, partition_by=partition_by)
    data = events(3000, seed=1, days=3)
    data = data.set_column(2, "user_id", pa.array(
        [None if i % 97 == 0 else v for i, v in enumerate(data.column("user_id").to_pylist())],
        pa.int64()))
    t.append(data)
    m = t.context.refresh().manifest
    assert m.format_version == 5
    spec = m.partitioning.default
    by_id = {f.id: f.name for f in m.schema.fields}
    files = live_files(t)
    assert len(files) > 1
    seen = set()
    for f in files:
        assert f.partition is not None and f.partition.spec_id == spec.spec_id
        rows = pq.read_table(str(tmp_path / "t" / f.path)).to_pylist()
        for pf, value in zip(spec.fields, f.partition.values, strict=True):
            source = by_id[pf.source_id]
            got = {iceberg_value(pf.transform, r[source], source) for r in rows}
            assert got == {value}, (f.path, pf.name, got, value)
        seen.add(tuple(f.partition.values))
    assert len(seen) == len(files)  # one file per partition (small data)
    got = sort(t.scan().to_arrow())
    assert got.equals(sort(data.cast(got.schema)))


def test_reopened_table_keeps_spec_and_appends_split(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    caslake.create_table(uri, SCHEMA, partition_by=["region"])
    t = caslake.open_table(uri)
    t.append(events(500, seed=2))
    t.append(events(500, seed=3, first_id=500))
    files = live_files(t)
    regions = sorted(str(f.partition.values[0]) for f in files)
    assert regions == ["apac", "apac", "eu", "eu", "us", "us"]
    assert t.scan(where="region = 'eu'").to_arrow().num_rows == sum(
        1 for r in pa.concat_tables([events(500, seed=2), events(500, seed=3)])
        .column("region").to_pylist() if r == "eu")


@pytest.mark.parametrize(("item", "column", "words"), [
    ("week(ts)", None, "unknown partition transform"),
    ("bucket(0, user_id)", "user_id", "at least 1"),
    ("truncate(0, region)", "region", "at least 1"),
    ("day(nope)", "nope", "not a column"),
    ("nope", "nope", "not a column"),
    ("day(region)", "region", "does not fit"),
    ("hour(amount)", "amount", "does not fit"),
    ("bucket(4, amount)", "amount", "does not fit"),
    ("bucket(x, user_id)", "user_id", "not an integer"),
])
def test_bad_partition_by_is_a_typed_error_and_creates_nothing(
        tmp_path: Path, item: str, column: str | None, words: str) -> None:
    from caslake.format.partition import InvalidPartitionSpec

    uri = str(tmp_path / "t")
    with pytest.raises(InvalidPartitionSpec) as err:
        caslake.create_table(uri, SCHEMA, partition_by=["region", item])
    assert isinstance(err.value, InvalidArgument) and isinstance(err.value, CaslakeError)
    assert words in str(err.value) and err.value.column == column
    with pytest.raises(TableNotFound):
        caslake.open_table(uri)


def test_an_unpartitioned_table_stays_at_its_format_version(tmp_path: Path) -> None:
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(events(100))
    m = t.context.refresh().manifest
    assert m.format_version == 1 and m.partitioning is None
    assert all(f.partition is None for f in live_files(t))


def test_partitions_survive_segment_objects(tmp_path: Path) -> None:
    """Past 64 entries they go to segment objects (with a partition column); a fresh
    reader still sees every file's partition and prunes by it."""
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA, partition_by=["region"])
    for i in range(30):
        t.append(events(30, seed=i, first_id=i * 30))
    fresh = caslake.open_table(uri)
    snap = fresh.context.refresh()
    assert any(s.is_object for s in snap.manifest.segments)
    files = fresh.io.live_files(snap)
    assert len(files) == 90 and all(f.partition is not None for f in files)
    plan = fresh.scan(where="region = 'eu'").plan()
    assert len(plan.tasks) == 30
    assert {tk.file.partition.values[0] for tk in plan.tasks} == {"eu"}
