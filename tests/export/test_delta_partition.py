"""The Delta export of a partitioned table: identity fields become Delta partition
columns, ``day(ts)`` a generated date column partitioning the table, ``bucket`` is
left out; deltalake and DuckDB's ``delta_scan`` read the export equal to the table
(deletes included), the partition values equal what the readers compute from the
rows, and both prune by partition -- proved by deleting every other partition's data
files from a copy of the table: a filtered read still succeeds, an unfiltered one
fails.  A spec Delta cannot express (only a bucket), or files written before the
spec, export unpartitioned."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable, QueryBuilder

import caslake
from tests.export.readers import caslake_rows, deltalake_rows, duck, duckdb_delta_rows, normal
from tests.partition.data import SCHEMA, events


def last_commit(root: Path) -> list[dict]:  # type: ignore[type-arg]
    key = sorted((root / "_delta_log").glob("*.json"))[-1]
    return [json.loads(line) for line in key.read_text().splitlines()]


@pytest.fixture
def exported(tmp_path: Path) -> tuple[Path, caslake.Table]:
    root = tmp_path / "t"
    t = caslake.create_table(str(root), SCHEMA,
                             partition_by=["region", "day(ts)", "bucket(4, user_id)"])
    t.append(events(900, seed=21, days=3))
    t.append(events(300, seed=22, days=3, first_id=900))
    t.delete("amount < 10")
    t.export_delta()
    return root, t


def test_identity_and_day_are_delta_partitions_read_equal(
        exported: tuple[Path, caslake.Table]) -> None:
    root, t = exported
    meta = next(a["metaData"] for a in last_commit(root) if "metaData" in a)
    assert meta["partitionColumns"] == ["region", "ts_day"]
    generated = next(f for f in json.loads(meta["schemaString"])["fields"]
                     if f["name"] == "ts_day")
    assert generated["type"] == "date"
    assert generated["metadata"]["delta.generationExpression"] == "CAST(`ts` AS DATE)"
    protocol = next(a["protocol"] for a in last_commit(root) if "protocol" in a)
    assert "generatedColumns" in protocol["writerFeatures"]
    want = caslake_rows(t)
    for got in (deltalake_rows(str(root), t.schema), duckdb_delta_rows(str(root), t.schema)):
        assert got.equals(want)
    # The generated column's values are each row's date, as DuckDB computes it.
    con = duck(("delta",))
    bad = con.execute(f"SELECT count(*) FROM delta_scan('{root}') "
                      "WHERE ts_day IS DISTINCT FROM CAST(ts AS DATE)").fetchone()
    assert bad == (0,)
    d = DeltaTable(str(root))
    assert d.metadata().partition_columns == ["region", "ts_day"]
    eu = {f.path for f in t.io.live_files(t.context.refresh())
          if f.partition is not None and f.partition.values[0] == "eu"}
    assert set(d.file_uris(file_pruning_predicate="region = 'eu'")) == \
        {str(root / p) for p in eu}


def test_readers_prune_by_delta_partitions(exported: tuple[Path, caslake.Table],
                                           tmp_path: Path) -> None:
    root, t = exported
    want = caslake_rows(t)
    day = dt.date(2026, 10, 31)
    number = (day - dt.date(1970, 1, 1)).days
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    for f in t.io.live_files(t.context.refresh()):
        region, d, _ = f.partition.values
        if region != "eu" or d != number:
            (copy / f.path).unlink()  # only eu's rows of that day stay readable
    expected = want.filter(pc.and_(pc.equal(want["region"], "eu"), pc.equal(
        want["ts"].cast(pa.date32()), pa.scalar(day))))
    assert 0 < expected.num_rows < want.num_rows // 5
    con = duck(("delta",))
    got = con.execute(f"SELECT * FROM delta_scan('{copy}') WHERE region = 'eu' "
                      f"AND ts_day = DATE '{day}'").fetch_arrow_table()
    assert normal(got, t.schema).equals(expected)
    result = QueryBuilder().register("t", DeltaTable(str(copy))).execute(
        f"SELECT * FROM t WHERE region = 'eu' AND ts_day = DATE '{day}'")
    assert normal(pa.table(result), t.schema).equals(expected)
    with pytest.raises(duckdb.Error):  # the other files are needed without the filter
        con.execute(f"SELECT count(*) FROM delta_scan('{copy}')").fetchall()


def test_specs_delta_cannot_show_export_unpartitioned(tmp_path: Path) -> None:
    bucket = caslake.create_table(str(tmp_path / "b"), SCHEMA, partition_by=["bucket(8, id)"])
    bucket.append(events(200, seed=23))
    late = caslake.create_table(str(tmp_path / "l"), SCHEMA)
    late.append(events(200, seed=24))
    late.update_spec(["region"])  # the first file has no partition
    late.append(events(100, seed=25, first_id=200))
    for t, root in ((bucket, tmp_path / "b"), (late, tmp_path / "l")):
        t.export_delta()
        meta = next(a["metaData"] for a in last_commit(root) if "metaData" in a)
        assert meta["partitionColumns"] == []
        assert deltalake_rows(str(root), t.schema).equals(caslake_rows(t))
    # Once every file holds one region (rewritten under the spec), the next export
    # partitions by it and re-adds every file with its value.
    late.overwrite(late.to_arrow())
    late.refresh().export_delta()
    meta = next(a["metaData"] for a in last_commit(tmp_path / "l") if "metaData" in a)
    assert meta["partitionColumns"] == ["region"]
    adds = [a["add"] for a in last_commit(tmp_path / "l") if "add" in a]
    assert adds and all(a["partitionValues"]["region"] in ("eu", "us", "apac") for a in adds)
    assert duckdb_delta_rows(str(tmp_path / "l"), late.schema).equals(caslake_rows(late))
