"""The Iceberg export carries the partition specs: pyiceberg and DuckDB's
``iceberg_scan`` read a partitioned export (position deletes included, which Iceberg
applies per partition) equal to caslake's scan, pyiceberg's scan plan prunes data
files by their partition values (planned files counted against the files of the
day), spec evolution exports both specs, and a table partitioned after its first
files keeps those under the unpartitioned spec 0."""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import caslake
from caslake.api import Table
from caslake.format.partition import literal_bucket
from tests.export.readers import caslake_rows, duckdb_iceberg_rows, normal, pyiceberg_rows
from tests.partition.data import SCHEMA, events

DAY = (dt.datetime(2026, 11, 1) - dt.datetime(1970, 1, 1)).days


def planned(metadata: str, row_filter: Any) -> list[str]:
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(metadata)
    return [task.file.file_path for task in table.scan(row_filter=row_filter).plan_files()]


def check_readers(t: Table, metadata: str) -> None:
    want = caslake_rows(t)
    assert pyiceberg_rows(metadata, t.schema).equals(want)
    assert duckdb_iceberg_rows(metadata, t.schema).equals(want)


def test_partitioned_export_reads_and_prunes(tmp_path: Path) -> None:
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA,
                             partition_by=["day(ts)", "region", "bucket(4, user_id)"])
    t.append(events(6000, seed=90, days=4))
    t.delete("amount < 10")  # position deletes in many partitions
    res = t.export_iceberg()
    meta = res.location
    check_readers(t, meta)
    files = t.io.live_files(t.context.refresh())
    assert len(files) == 4 * 3 * 4
    that_day = {t.store.uri.rstrip("/") + "/" + f.path for f in files
                if f.partition.values[0] == DAY}
    got = planned(meta, "ts >= '2026-11-01T00:00:00' and ts < '2026-11-02T00:00:00'")
    assert len(got) == len(that_day) == 12
    assert {p.removeprefix("file://") for p in got} == {
        p.removeprefix("file://") for p in that_day}
    one = planned(meta, "region = 'eu' and user_id = 7")
    bucket = literal_bucket(7, pa.int64(), 4)
    # one bucket of one region, every day (less the files whose user_id bounds miss 7)
    want = [f for f in files if f.partition.values[1:] == ("eu", bucket)
            and f.stats[3]["min"] <= 7 <= f.stats[3]["max"]]
    assert len(want) >= 3 and len(one) == len(want)
    from pyiceberg.table import StaticTable

    st = StaticTable.from_metadata(meta)
    rows = normal(st.scan(row_filter="region = 'eu' and user_id = 7").to_arrow(), t.schema)
    assert rows.equals(normal(t.scan(where="region = 'eu' AND user_id = 7").to_arrow(),
                              t.schema))
    spec = st.spec()
    assert [(f.name, str(f.transform)) for f in spec.fields] == [
        ("ts_day", "day"), ("region", "identity"), ("user_id_bucket", "bucket[4]")]


def test_spec_evolution_and_late_partitioning(tmp_path: Path) -> None:
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(events(500, seed=91, days=2))  # unpartitioned: spec 0, no fields
    t.export_iceberg()
    t.update_spec(["month(ts)"])
    t.append(events(500, seed=92, days=40, first_id=1000))
    t.update_spec(["truncate(2, region)", "hour(ts)"])
    t.append(events(300, seed=93, days=1, first_id=2000))
    t.delete("amount < 15")
    res = t.export_iceberg()
    meta = res.location
    check_readers(t, meta)
    from pyiceberg.table import StaticTable

    st = StaticTable.from_metadata(meta)
    assert sorted(st.specs()) == [0, 1, 2] and st.spec().spec_id == 2
    got = planned(meta, "ts >= '2026-12-01T00:00:00'")
    files = t.io.live_files(t.context.refresh())
    # the month spec's December file, never other months' or the hour spec's; the
    # unpartitioned file only by its own ts bounds
    dec = (2026 - 1970) * 12 + 11
    by_path = {f.path: f for f in files}
    chosen = [by_path[p.split("/t/", 1)[1]] for p in got]
    assert [f.partition.values for f in chosen if f.partition is not None] == [(dec,)]
    assert sum(1 for f in files if f.partition is not None and f.partition.spec_id == 1) == 3


def test_identity_values_of_every_type(tmp_path: Path) -> None:
    """Identity on date, decimal, timestamp and bool, truncate on integers: the
    partition record holds Iceberg's physical values (pyiceberg prunes with them)."""
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("d", pa.date32()),
                        pa.field("price", pa.decimal128(10, 2)),
                        pa.field("at", pa.timestamp("us", tz="UTC")),
                        pa.field("ok", pa.bool_())])
    t = caslake.create_table(str(tmp_path / "t"), schema,
                             partition_by=["d", "price", "at", "ok", "truncate(100, id)",
                                           "day(at)"])
    n = 400
    rng = np.random.default_rng(94)
    data = pa.table({
        "id": pa.array(np.arange(n), pa.int64()),
        "d": pa.array([dt.date(2026, 1, 1) + dt.timedelta(days=int(i))
                       for i in rng.integers(0, 2, n)], pa.date32()),
        "price": pa.array([decimal.Decimal(v) for v in ["1.50", "-2.25"] * (n // 2)],
                          pa.decimal128(10, 2)),
        "at": pa.array([dt.datetime(2026, 1, 1, tzinfo=dt.UTC)] * n,
                       pa.timestamp("us", tz="UTC")),
        "ok": pa.array([bool(i % 3) for i in range(n)], pa.bool_())}, schema=schema)
    t.append(data)
    res = t.export_iceberg()
    meta = res.location
    check_readers(t, meta)
    files = t.io.live_files(t.context.refresh())
    n_files = len(files)
    # Each file's partition record holds Iceberg's values: days for dates and day(),
    # the decimal, micros for timestamps, the truncated integer.
    from pyiceberg.table import StaticTable

    epoch = dt.date(1970, 1, 1)
    want = sorted(((dt.date.fromisoformat(v[0]) - epoch).days, decimal.Decimal(v[1]), *v[2:])
                  for v in (f.partition.values for f in files))
    recs = [task.file.partition for task in StaticTable.from_metadata(meta).scan().plan_files()]
    assert sorted(tuple(r[i] for i in range(len(r))) for r in recs) == want
    assert {(r[0], r[5]) for r in recs} == {(20454, 20454), (20455, 20454)}
    from pyiceberg.expressions import EqualTo

    for flt in ["d = '2026-01-02'", EqualTo("price", decimal.Decimal("1.50")), "ok = false",
                "id >= 300"]:
        got = planned(meta, flt)
        assert 0 < len(got) < n_files, flt


@pytest.mark.parametrize("again", [False, True])
def test_incremental_export_stays_readable(tmp_path: Path, again: bool) -> None:
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["day(ts)"])
    t.append(events(2000, seed=95, days=3))
    t.export_iceberg()
    t.append(events(1000, seed=96, days=3, first_id=5000))
    if again:
        t.delete("region = 'us'")
        t.compact()
    res = t.export_iceberg()
    meta = res.location
    check_readers(t, meta)


def test_unpartitioned_files_of_a_partitioned_table(tmp_path: Path) -> None:
    """A file without a recorded partition (a writer that does not split) is exported
    under a fieldless spec next to spec 0; deletes reach it and the others."""
    from pyiceberg.table import StaticTable

    from caslake.core import Changes, run_operation
    from caslake.ops.write import write_data_files

    t = caslake.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["day(ts)"])
    t.append(events(1000, seed=97, days=3))
    ctx = t.context
    base = ctx.refresh()
    loose = write_data_files(ctx.store, events(300, seed=98, days=3, first_id=5000).to_reader(),
                             base.manifest.schema, ctx.write_options)
    run_operation(ctx, "append", lambda b: Changes("append", add_files=tuple(loose)),
                  started=ctx.meter())
    t.delete("amount < 20")
    meta = t.refresh().export_iceberg().location
    check_readers(t, meta)
    st = StaticTable.from_metadata(meta)
    assert sorted(st.specs()) == [0, 1 << 30] and st.spec().spec_id == 0
    got = planned(meta, "ts >= '2026-11-01T00:00:00' and ts < '2026-11-02T00:00:00'")
    assert len(got) == 2  # that day's file and the unpartitioned one
