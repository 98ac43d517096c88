"""Append and scan round trips, schema checks, pruning, time travel and bad input."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import caslake
from caslake import col
from caslake.core import WriteOptions
from caslake.errors import (
    CaslakeError,
    CorruptMetadata,
    InvalidArgument,
    InvalidPredicate,
    SchemaMismatch,
    TableAlreadyExists,
    TableNotFound,
    UnknownColumn,
    UnsupportedFormatVersion,
    VersionNotFound,
)
from caslake.format.keys import POINTER_KEY

SCHEMA = pa.schema([("id", pa.int64()), ("user", pa.string()), ("score", pa.float64()),
                    ("day", pa.date32()), ("ts", pa.timestamp("us", tz="UTC"))])


def rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "user": pa.array([f"u{i % 7}" for i in ids]),
        "score": pa.array([i * 0.5 if i % 11 else None for i in ids], pa.float64()),
        "day": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=i % 30) for i in ids]),
        "ts": pa.array([dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i)
                        for i in ids], pa.timestamp("us", tz="UTC")),
    })


def test_create_append_scan_round_trip(any_store_uri: tuple[str, dict[str, str]]) -> None:
    uri, opts = any_store_uri
    t = caslake.create_table(uri, SCHEMA, storage_options=opts)
    assert t.version == 0
    assert t.scan().to_arrow().num_rows == 0
    r1 = t.append(rows(0, 100))
    r2 = t.append(rows(100, 50))
    assert (r1.version, r2.version) == (1, 2)
    again = caslake.open_table(uri, storage_options=opts)
    assert again.version == 2
    got = again.scan().to_arrow()
    assert got.schema.equals(SCHEMA)
    assert got.sort_by("id").equals(rows(0, 150))


def test_every_input_kind_is_accepted(tmp_path) -> None:  # type: ignore[no-untyped-def]
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA)
    data = rows(0, 30)
    t.append(data)
    t.append(data.to_batches()[0])
    t.append(pa.RecordBatchReader.from_batches(data.schema, data.to_batches()))
    t.append(data.to_pandas())
    assert t.scan().to_arrow().num_rows == 120
    assert t.version == 4


def test_one_call_is_one_commit_however_many_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA,
                             write_options=WriteOptions(target_file_size=20_000,
                                                        row_group_size=4_000))
    res = t.append(rows(0, 20_000))
    assert res.files_added > 3
    assert res.version == 1
    snap = t.describe()
    assert snap["files"] == res.files_added
    assert all(f["row_groups"] >= 1 for f in snap["data_files"])
    assert sum(f["row_groups"] for f in snap["data_files"]) > res.files_added
    assert t.scan().to_arrow().sort_by("id").equals(rows(0, 20_000))


def test_parquet_is_readable_by_pyarrow_and_duckdb(tmp_path) -> None:  # type: ignore[no-untyped-def]
    duckdb = pytest.importorskip("duckdb")
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(rows(0, 1000))
    path = tmp_path / "t" / t.describe()["data_files"][0]["path"]
    assert pq.read_table(path).num_rows == 1000
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).compression == "ZSTD"
    n = duckdb.sql(f"select count(*), sum(id) from read_parquet('{path}')").fetchall()[0]
    assert n == (1000, sum(range(1000)))


def test_streaming_append_does_not_materialise_the_reader(tmp_path) -> None:  # type: ignore[no-untyped-def]
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA,
                             write_options=WriteOptions(target_file_size=50_000,
                                                        row_group_size=10_000))
    produced = []
    files_seen_at = []
    data_dir = tmp_path / "t" / "data"

    def gen():  # type: ignore[no-untyped-def]
        for i in range(40):
            produced.append(i)
            files_seen_at.append(len(list(data_dir.rglob("*.parquet"))) if data_dir.exists()
                                 else 0)
            yield from rows(i * 1000, 1000).to_batches()

    t.append(pa.RecordBatchReader.from_batches(SCHEMA, gen()))
    # Files were uploaded while the generator was still producing batches.
    assert files_seen_at[-1] > 0
    assert files_seen_at.index(next(x for x in files_seen_at if x > 0)) < 39
    assert t.scan().count() == 40_000


def test_schema_mismatch_names_column_and_types_and_leaves_nothing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA)
    bad = rows(0, 5).set_column(0, "id", pa.array(["a"] * 5))
    with pytest.raises(SchemaMismatch) as e:
        t.append(bad)
    msg = str(e.value)
    assert "'id'" in msg and "string" in msg and "int64" in msg
    assert e.value.column == "id"
    with pytest.raises(SchemaMismatch, match="'extra'"):
        t.append(rows(0, 5).append_column("extra", pa.array([1] * 5)))
    assert caslake.open_table(str(tmp_path / "t")).version == 0
    assert not (tmp_path / "t" / "data").exists() or not list((tmp_path / "t" / "data").rglob("*"))


def test_lossless_promotions_and_missing_columns_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA)
    data = rows(0, 5).set_column(0, "id", pa.array(range(5), pa.int32())).drop_columns(["score"])
    with pytest.raises(SchemaMismatch, match=r"missing column.*'score'"):
        t.append(data)  # a missing column is refused, not filled with nulls (issue 10)
    t.append(data.append_column("score", pa.nulls(5)))  # explicit nulls are fine
    got = t.scan().to_arrow()
    assert got.schema.field("id").type == pa.int64()
    assert got.column("score").null_count == 5


def test_where_equals_pyarrow_filter(tmp_path) -> None:  # type: ignore[no-untyped-def]
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA,
                             write_options=WriteOptions(row_group_size=2_000))
    data = rows(0, 5_000)
    t.append(data)
    cases = [
        ("id BETWEEN 1 AND 5 AND user = 'u1'",
         (pc.field("id") >= 1) & (pc.field("id") <= 5) & (pc.field("user") == "u1")),
        ("score IS NULL", pc.field("score").is_null()),
        ("user IN ('u2', 'u3') OR id < 10",
         pc.field("user").isin(["u2", "u3"]) | (pc.field("id") < 10)),
        ("day >= DATE '2024-01-20'", pc.field("day") >= pa.scalar(dt.date(2024, 1, 20))),
        ("ts < TIMESTAMP '2024-01-01 00:00:10'",
         pc.field("ts") < pa.scalar(dt.datetime(2024, 1, 1, 0, 0, 10, tzinfo=dt.UTC),
                                    pa.timestamp("us", tz="UTC"))),
    ]
    for sql, expr in cases:
        got = t.scan(where=sql).to_arrow().sort_by("id")
        assert got.equals(data.filter(expr).sort_by("id")), sql
    got = t.scan(columns=["id"], where=(col("id") >= 4990) & col("user").isin(["u0"])).to_arrow()
    assert got.column_names == ["id"]
    assert sorted(got.column("id").to_pylist()) == [i for i in range(4990, 5000) if i % 7 == 0]


def test_plan_prunes_files_row_groups_and_columns(tmp_path) -> None:  # type: ignore[no-untyped-def]
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA,
                             write_options=WriteOptions(row_group_size=20_000))
    for i in range(4):
        t.append(rows(i * 10_000, 10_000))
    full = t.scan(columns=["id", "user"]).plan()
    one = t.scan(columns=["id"], where="id BETWEEN 25000 AND 25010").plan()
    assert full.files_total == 4 and full.files_pruned == 0
    assert one.files_pruned == 3 and len(one.tasks) == 1
    assert one.row_groups_pruned >= one.row_groups_total - 1 - 1
    assert 0 < one.bytes_to_read < full.bytes_to_read / 4
    narrow = t.scan(columns=["id"]).plan()
    assert narrow.bytes_to_read < full.bytes_to_read
    d = one.describe()
    assert d["files"]["read"] == 1 and d["bytes_to_read"] == one.bytes_to_read


def test_reader_streams_batches(tmp_path) -> None:  # type: ignore[no-untyped-def]
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA,
                             write_options=WriteOptions(row_group_size=4_000))
    for i in range(5):
        t.append(rows(i * 2_000, 2_000))
    reader = t.scan(columns=["id"]).to_reader()
    assert isinstance(reader, pa.RecordBatchReader)
    first = reader.read_next_batch()
    assert 0 < first.num_rows <= 2_000
    rest = sum(b.num_rows for b in reader)
    assert first.num_rows + rest == 10_000


def test_time_travel_by_version_and_timestamp(tmp_path) -> None:  # type: ignore[no-untyped-def]
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA)
    stamps = []
    for i in range(12):
        t.append(rows(i * 10, 10))
        stamps.append(t.history(limit=1)[0].created_at)
    for v in range(13):
        assert t.scan(version=v).count() == v * 10
    assert t.scan(as_of=stamps[4]).count() == 50
    assert t.scan(as_of=stamps[4] + dt.timedelta(microseconds=500)).count() == 50
    assert t.scan(as_of=stamps[-1] + dt.timedelta(days=1)).count() == 120
    with pytest.raises(VersionNotFound):
        t.scan(version=13)
    with pytest.raises(VersionNotFound):
        t.scan(as_of=dt.datetime(2000, 1, 1))
    hist = t.history()
    assert [h.version for h in hist] == list(range(12, -1, -1))
    assert hist[0].operation == "append" and hist[-1].operation == "create"
    assert hist[0].summary["added_rows"] == 10 and hist[0].total_rows == 120


def test_overwrite_replaces_rows(tmp_path) -> None:  # type: ignore[no-untyped-def]
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(rows(0, 10))
    r = t.overwrite(rows(100, 3))
    assert r.version == 2
    assert t.scan().to_arrow().column("id").to_pylist() == [100, 101, 102]
    assert t.scan(version=1).count() == 10


def test_idempotent_txn_append(tmp_path) -> None:  # type: ignore[no-untyped-def]
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA)
    assert not t.append(rows(0, 5), txn=("app", 1)).noop
    assert t.append(rows(0, 5), txn=("app", 1)).noop
    assert t.scan().count() == 5 and t.version == 1


def test_table_exists_and_not_found(tmp_path) -> None:  # type: ignore[no-untyped-def]
    uri = str(tmp_path / "t")
    with pytest.raises(TableNotFound):
        caslake.open_table(uri)
    caslake.create_table(uri, SCHEMA)
    with pytest.raises(TableAlreadyExists):
        caslake.create_table(uri, SCHEMA)
    assert issubclass(TableAlreadyExists, CaslakeError)


def test_bad_predicates_are_typed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA)
    with pytest.raises(UnknownColumn, match="nope"):
        t.scan(where="nope = 1")
    with pytest.raises(UnknownColumn, match="nope"):
        t.scan(columns=["nope"])
    with pytest.raises(InvalidPredicate):
        t.scan(where="id = = 1")
    with pytest.raises(InvalidArgument):
        t.append({"id": [1]})


def _pointer(tmp_path) -> dict:  # type: ignore[no-untyped-def,type-arg]
    return json.loads((tmp_path / "t" / POINTER_KEY).read_bytes())


def test_corrupt_manifest_is_typed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(rows(0, 5))
    key = _pointer(tmp_path)["manifest"]
    path = tmp_path / "t" / key
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(CorruptMetadata) as e:
        caslake.open_table(str(tmp_path / "t"))
    assert key in str(e.value)


def test_manifest_with_unknown_format_version_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA)
    key = _pointer(tmp_path)["manifest"]
    path = tmp_path / "t" / key
    doc = json.loads(path.read_bytes())
    doc["format_version"] = 99
    path.write_text(json.dumps(doc))
    with pytest.raises(UnsupportedFormatVersion, match="99"):
        caslake.open_table(str(tmp_path / "t"))
    del t


def test_pointer_to_missing_manifest_is_typed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    caslake.create_table(str(tmp_path / "t"), SCHEMA)
    key = _pointer(tmp_path)["manifest"]
    (tmp_path / "t" / key).unlink()
    with pytest.raises(CorruptMetadata, match="missing"):
        caslake.open_table(str(tmp_path / "t"))


def test_manifest_path_escaping_the_table_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(rows(0, 5))
    key = _pointer(tmp_path)["manifest"]
    path = tmp_path / "t" / key
    doc = json.loads(path.read_bytes())
    for bad in ("../x.parquet", "/etc/passwd", "s3://other/data/x.parquet", "data/../../x"):
        doc["files"][0]["path"] = bad
        path.write_text(json.dumps(doc))
        with pytest.raises(CorruptMetadata):
            caslake.open_table(str(tmp_path / "t"))
