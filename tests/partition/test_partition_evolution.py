"""Spec evolution: ``update_spec`` makes a new default spec; files written before keep
their spec and values, and both kinds read and prune right (answers vs pyarrow)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import caslake
from caslake.errors import InvalidSchemaChange
from caslake.format.partition import InvalidPartitionSpec
from tests.partition.data import SCHEMA, events, sort


def test_old_files_keep_their_spec_and_both_read_and_prune(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA, partition_by=["day(ts)"])
    old = events(4000, seed=8, days=4)
    t.append(old)
    v_old = t.refresh().version
    res = t.update_spec(["bucket(4, user_id)", "day(ts)"])
    assert not res.noop
    new = events(4000, seed=9, days=4, first_id=4000)
    t.append(new)
    m = t.context.refresh().manifest
    assert [s.spec_id for s in m.partitioning.specs] == [0, 1]
    assert m.partitioning.default_spec_id == 1
    day_field = m.partitioning.specs[0].fields[0]
    assert m.partitioning.specs[1].fields[1].field_id == day_field.field_id  # kept
    files = t.io.live_files(t.context.refresh())
    assert {f.partition.spec_id for f in files} == {0, 1}
    assert sum(f.partition.spec_id == 0 for f in files) == 4
    assert sum(f.partition.spec_id == 1 for f in files) == 16
    rows = pa.concat_tables([old, new])
    assert sort(t.scan().to_arrow()).equals(sort(rows))
    for where, want_old, want_new in [("ts >= '2026-11-01' AND ts < '2026-11-02'", 1, 4),
                                      ("user_id = 17", 4, 4),
                                      ("user_id = 17 AND ts < '2026-10-31'", 1, 1)]:
        plan = t.scan(where=where).plan()
        specs = [tk.file.partition.spec_id for tk in plan.tasks]
        assert (specs.count(0), specs.count(1)) == (want_old, want_new), where
        want = duckdb.sql(f"select * from rows where {where}").fetch_arrow_table()
        got = t.scan(where=where).to_arrow()
        assert sort(got).equals(sort(want.cast(got.schema))), where
    # The version before the change reads as it did.
    assert sort(t.scan(version=v_old).to_arrow()).equals(sort(old))
    assert caslake.open_table(uri).describe()["version"] == m.version


def test_update_spec_to_unpartitioned_and_from_unpartitioned(tmp_path: Path) -> None:
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(events(300, seed=1))
    assert t.context.refresh().manifest.format_version == 1
    t.update_spec(["region"])
    assert t.context.refresh().manifest.format_version == 5
    t.append(events(300, seed=2, first_id=300))
    files = t.io.live_files(t.context.refresh())
    assert sorted(str(f.partition and list(f.partition.values)) for f in files) == [
        "None", "['apac']", "['eu']", "['us']"]
    t.update_spec([])
    t.append(events(300, seed=3, first_id=600))
    assert t.scan().to_arrow().num_rows == 900
    assert t.scan(where="region = 'eu'").to_arrow().num_rows == sum(
        1 for r in pa.concat_tables([events(300, seed=s) for s in (1, 2, 3)])
        .column("region").to_pylist() if r == "eu")


def test_bad_spec_changes_are_typed_errors(tmp_path: Path) -> None:
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["day(ts)"])
    version = t.refresh().version
    with pytest.raises(InvalidPartitionSpec):
        t.update_spec(["bucket(0, user_id)"])
    with pytest.raises(InvalidPartitionSpec):
        t.update_spec(["day(missing)"])
    assert t.refresh().version == version
    with pytest.raises(InvalidSchemaChange):
        t.update_schema().drop_column("ts").commit()
    t.update_schema().rename_column("ts", "event_time").commit()
    t.append(events(200).rename_columns(["id", "event_time", "user_id", "region", "amount"]))
    plan = t.scan(where="event_time >= '2026-11-01' AND event_time < '2026-11-02'").plan()
    assert len(plan.tasks) == 1
