"""RFC-0008 conformance: one test group per spec ID (PDS-001 ... PDS-011, except 009,
which is in test_dagster.py), each on the memory, local and moto S3 backends."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from caslake.dataset import (
    DatasetAlreadyExists,
    DatasetConflict,
    DatasetIncomplete,
    DatasetManifest,
    DatasetNotFound,
    ManifestCorrupted,
    ParquetDatasetStore,
)
from caslake.errors import (
    AlreadyExists,
    CaslakeError,
    CommitConflict,
    CorruptMetadata,
    InvalidArgument,
    NotFound,
    UnknownColumn,
)
from caslake.store import LocalStore, ObjectStore
from caslake.store.base import PutMode
from tests.dataset.helpers import SCHEMA, RecordingStore, table

KEY = "silver/orders"


@pytest.fixture
def rec(any_store: ObjectStore) -> RecordingStore:
    return RecordingStore(any_store)


# --- PDS-001: constructor and defaults ------------------------------------------------


def test_pds_001_defaults_and_no_io(any_store: ObjectStore) -> None:
    before = any_store.counters.snapshot()
    pds = ParquetDatasetStore(any_store)
    assert (pds.compression, pds.row_group_size, pds.max_rows_per_file) == ("zstd", None, None)
    assert pds.store is any_store
    assert any_store.counters.snapshot() == before  # construction does no I/O


def test_pds_001_uri_and_bad_arguments(tmp_path: Path) -> None:
    pds = ParquetDatasetStore(str(tmp_path / "lake"), compression="snappy",
                              row_group_size=10, max_rows_per_file=20)
    assert isinstance(pds.store, LocalStore)
    assert not (tmp_path / "lake").exists()  # no I/O
    assert (pds.compression, pds.row_group_size, pds.max_rows_per_file) == ("snappy", 10, 20)
    for kwargs in ({"compression": "zip"}, {"row_group_size": 0},
                   {"max_rows_per_file": -1}, {"max_bytes_per_file": 1.5}):
        with pytest.raises(InvalidArgument):
            ParquetDatasetStore("memory://x", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        ParquetDatasetStore(42)  # type: ignore[arg-type]


# --- PDS-002: write layout and order --------------------------------------------------


def test_pds_002_layout_and_write_order(rec: RecordingStore, any_store: ObjectStore) -> None:
    pds = ParquetDatasetStore(rec)
    data = table(0, 500)
    m = pds.write_dataset(data, KEY, run_id="run-1", metadata={"team": "a"})
    (part,) = m.parts
    gen = part.split("/")[0]
    assert part == f"{gen}/data.parquet" and gen.startswith("_gen-")
    puts = rec.keys("put")
    assert puts == [f"{KEY}/{part}", f"{KEY}/manifest.json", f"{KEY}/_SUCCESS",
                    f"{KEY}/{gen}/_COMMITTED"]
    assert any_store.get(f"{KEY}/_SUCCESS").data == b""
    raw = any_store.get(f"{KEY}/manifest.json").data.decode()
    assert list(json.loads(raw)) == sorted(json.loads(raw))
    assert DatasetManifest.from_json(raw) == m
    # The part is plain Parquet: pyarrow reads it (and DuckDB on a local store).
    got = pq.read_table(pa.BufferReader(any_store.get(f"{KEY}/{part}").data))
    assert got.equals(data)
    local = any_store.local_path(f"{KEY}/{part}")
    if local is not None:
        n = duckdb.sql(f"SELECT count(*), sum(id) FROM read_parquet('{local}')").fetchone()
        assert n == (500, sum(range(500)))


# --- PDS-003: read checks _SUCCESS, then every part, before reading any ------------------


def test_pds_003_read_checks_success_then_all_parts_first(rec: RecordingStore,
                                                         any_store: ObjectStore) -> None:
    pds = ParquetDatasetStore(rec, max_rows_per_file=100)
    m = pds.write_dataset(table(0, 350), KEY)
    assert len(m.parts) == 4
    rec.log.clear()
    assert pds.read_dataset(KEY).sort_by("id").equals(table(0, 350))
    assert rec.log[0] == ("head", f"{KEY}/_SUCCESS")
    assert rec.log[1] == ("get", f"{KEY}/manifest.json")
    heads = rec.log[2:6]
    assert sorted(heads) == sorted(("head", f"{KEY}/{p}") for p in m.parts)
    any_store.delete(f"{KEY}/{m.parts[2]}")
    rec.log.clear()
    with pytest.raises(DatasetIncomplete) as ei:
        pds.read_dataset(KEY)
    assert ei.value.part == m.parts[2] and ei.value.dataset_key == KEY
    assert not [k for op, k in rec.log if op in ("get", "get_ranges") and k.endswith(".parquet")]
    any_store.delete(f"{KEY}/_SUCCESS")
    with pytest.raises(DatasetIncomplete, match="_SUCCESS"):
        pds.read_dataset(KEY)
    with pytest.raises(DatasetIncomplete):
        pds.read_dataset("never/written")


# --- PDS-004: manifest schema and round trip --------------------------------------------


def test_pds_004_manifest_round_trip(any_store: ObjectStore) -> None:
    pds = ParquetDatasetStore(any_store)
    data = table(0, 10)
    m = pds.write_dataset(data, KEY)
    assert [f.name for f in dataclasses.fields(DatasetManifest)] == [
        "dataset_key", "parts", "row_count", "schema_hash", "compression", "created_at_utc",
        "run_id", "metadata"]
    assert m.schema_hash == hashlib.sha256(SCHEMA.to_string().encode()).hexdigest()
    assert (m.dataset_key, m.row_count, m.compression) == (KEY, 10, "zstd")
    js = json.loads(m.to_json())
    assert "run_id" not in js and "metadata" not in js
    assert pds.read_manifest(KEY) == m
    assert DatasetManifest.from_json(m.to_json()) == m
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.row_count = 3  # type: ignore[misc]
    m2 = pds.write_dataset(data, "other", run_id="r", metadata={"k": "v"})
    assert pds.read_manifest("other") == m2 and m2.run_id == "r" and m2.metadata == {"k": "v"}
    with pytest.raises(DatasetNotFound) as ei:
        pds.read_manifest("missing")
    assert isinstance(ei.value, NotFound)


@pytest.mark.parametrize("text, why", [
    ("{not json", "JSON"),
    ("[1, 2]", "object"),
    ('{"dataset_key": "k"}', "missing"),
    ('{"dataset_key": 1, "parts": [], "row_count": 0, "schema_hash": "", "compression": "z",'
     ' "created_at_utc": ""}', "dataset_key"),
    ('{"dataset_key": "k", "parts": [1], "row_count": 0, "schema_hash": "", '
     '"compression": "z", "created_at_utc": ""}', "parts"),
    ('{"dataset_key": "k", "parts": [], "row_count": true, "schema_hash": "", '
     '"compression": "z", "created_at_utc": ""}', "row_count"),
    ('{"dataset_key": "k", "parts": [], "row_count": 1, "schema_hash": "", '
     '"compression": "z", "created_at_utc": "", "metadata": {"a": 1}}', "metadata"),
    ('{"dataset_key": "k", "parts": [], "row_count": 1, "schema_hash": "", '
     '"compression": "z", "created_at_utc": "", "run_id": 5}', "run_id"),
])
def test_pds_004_from_json_rejects(text: str, why: str) -> None:
    with pytest.raises(ManifestCorrupted, match=why):
        DatasetManifest.from_json(text)


# --- PDS-005: single vs multi-part ------------------------------------------------------


def test_pds_005_single_and_multi_part(any_store: ObjectStore) -> None:
    single = ParquetDatasetStore(any_store).write_dataset(table(0, 250), "one")
    assert [p.split("/")[1] for p in single.parts] == ["data.parquet"]
    pds = ParquetDatasetStore(any_store, max_rows_per_file=100)
    multi = pds.write_dataset(table(0, 250), "many")
    assert [p.split("/")[1] for p in multi.parts] == [
        "part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    rows = [pq.read_metadata(pa.BufferReader(any_store.get(f"many/{p}").data)).num_rows
            for p in multi.parts]
    assert rows == [100, 100, 50]
    exact = pds.write_dataset(table(0, 100), "exact")
    assert [p.split("/")[1] for p in exact.parts] == ["data.parquet"]
    by_bytes = ParquetDatasetStore(any_store, max_bytes_per_file=2_000, row_group_size=100)
    cut = by_bytes.write_dataset(table(0, 1000), "bytes")
    assert len(cut.parts) > 1
    assert by_bytes.read_dataset("bytes").equals(table(0, 1000))


# --- PDS-006: column projection ---------------------------------------------------------


def test_pds_006_projection(any_store: ObjectStore) -> None:
    pds = ParquetDatasetStore(any_store, max_rows_per_file=40)
    pds.write_dataset(table(0, 100), KEY)
    got = pds.read_dataset(KEY, columns=["f", "id"])
    assert got.column_names == ["f", "id"]
    assert got.equals(table(0, 100).select(["f", "id"]))
    with pytest.raises(UnknownColumn):
        pds.read_dataset(KEY, columns=["nope"])
    streamed = pds.read_batches(KEY, columns=["s"]).read_all()
    assert streamed.equals(table(0, 100).select(["s"]))


# --- PDS-007: dataset_exists means _SUCCESS exists --------------------------------------


def test_pds_007_exists_is_success(any_store: ObjectStore) -> None:
    pds = ParquetDatasetStore(any_store)
    assert not pds.dataset_exists(KEY)
    pds.write_dataset(table(0, 5), KEY)
    assert pds.dataset_exists(KEY)
    any_store.delete(f"{KEY}/_SUCCESS")
    assert not pds.dataset_exists(KEY)  # the manifest alone does not make it exist
    assert pds.read_manifest(KEY).row_count == 5


# --- PDS-008: errors --------------------------------------------------------------------


def test_pds_008_error_types(any_store: ObjectStore) -> None:
    for cls in (DatasetIncomplete, ManifestCorrupted, DatasetAlreadyExists, DatasetNotFound,
                DatasetConflict):
        assert issubclass(cls, CaslakeError)
    assert issubclass(ManifestCorrupted, CorruptMetadata)
    assert issubclass(DatasetAlreadyExists, AlreadyExists)
    assert issubclass(DatasetConflict, CommitConflict)
    pds = ParquetDatasetStore(any_store, max_rows_per_file=30)
    m = pds.write_dataset(table(0, 100), KEY)
    with pytest.raises(DatasetAlreadyExists):
        pds.write_dataset(table(0, 1), KEY)
    for bad in ("", "/", "a//b", "../x", 3):
        with pytest.raises(InvalidArgument):
            pds.write_dataset(table(0, 1), bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        pds.write_dataset({"id": [1]}, "x")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        pds.write_dataset(table(0, 1), "x", metadata={"a": 1})  # type: ignore[dict-item]
    # Damaged manifests.
    mkey = f"{KEY}/manifest.json"
    good = any_store.get(mkey).data
    any_store.put(mkey, b"{oops", mode=PutMode.OVERWRITE)
    with pytest.raises(ManifestCorrupted):
        pds.read_dataset(KEY)
    with pytest.raises(ManifestCorrupted):
        pds.read_manifest(KEY)
    wrong_rows = dataclasses.replace(m, row_count=99)
    any_store.put(mkey, wrong_rows.to_json().encode(), mode=PutMode.OVERWRITE)
    with pytest.raises(ManifestCorrupted, match="100 rows"):
        pds.read_dataset(KEY)
    assert pds.read_dataset(KEY, verify=False).num_rows == 100  # the opt-out
    wrong_hash = dataclasses.replace(m, schema_hash="abcdef")
    any_store.put(mkey, wrong_hash.to_json().encode(), mode=PutMode.OVERWRITE)
    with pytest.raises(ManifestCorrupted) as ei:
        pds.read_batches(KEY)
    assert ei.value.part == m.parts[0]
    escaping = dataclasses.replace(m, parts=["../elsewhere/data.parquet"])
    any_store.put(mkey, escaping.to_json().encode(), mode=PutMode.OVERWRITE)
    with pytest.raises(ManifestCorrupted, match="illegal"):
        pds.read_dataset(KEY)
    any_store.put(mkey, good, mode=PutMode.OVERWRITE)
    any_store.put(f"{KEY}/{m.parts[1]}", b"not parquet at all", mode=PutMode.OVERWRITE)
    with pytest.raises(CorruptMetadata):
        pds.read_dataset(KEY)


# --- PDS-010: delete_dataset ------------------------------------------------------------


def test_pds_010_delete(any_store: ObjectStore) -> None:
    pds = ParquetDatasetStore(any_store, max_rows_per_file=10)
    pds.write_dataset(table(0, 30), KEY)
    pds.write_dataset(table(0, 30), KEY, overwrite=True)
    pds.write_dataset(table(0, 3), KEY + "x")  # a sibling whose key extends ours
    pds.delete_dataset(KEY)
    assert not pds.dataset_exists(KEY)
    assert list(any_store.list(KEY + "/")) == []
    with pytest.raises(DatasetIncomplete):
        pds.read_dataset(KEY)
    with pytest.raises(DatasetNotFound):
        pds.delete_dataset(KEY)
    assert pds.read_dataset(KEY + "x").num_rows == 3


# --- PDS-011: overwrite -----------------------------------------------------------------


def test_pds_011_overwrite_switches_atomically(rec: RecordingStore) -> None:
    pds = ParquetDatasetStore(rec, max_rows_per_file=50)
    old = pds.write_dataset(table(0, 120), KEY)
    seen: list[int] = []

    def read_during(key: str) -> None:
        # Every moment of the overwrite, a reader sees the whole old dataset.
        if key.startswith(KEY) and not key.endswith("_COMMITTED"):
            hook, rec.before_put = rec.before_put, None
            try:
                seen.append(pds.read_dataset(KEY).num_rows)
            finally:
                rec.before_put = hook

    rec.before_put = read_during
    new = pds.write_dataset(table(1000, 1010, tag="n"), KEY, overwrite=True)
    rec.before_put = None
    # Before the manifest switch (at each part upload and at the manifest PUT) the
    # old dataset, whole; after it (at the _SUCCESS PUT) the new one, whole.
    assert seen == [120, 120, 10]
    assert pds.read_dataset(KEY).equals(table(1000, 1010, tag="n"))
    assert new.parts != old.parts
    # The old generation is still there for readers that resolved it earlier.
    assert all(rec.exists(f"{KEY}/{p}") for p in old.parts)


def test_pds_011_overwrite_conflict_and_no_overwrite(rec: RecordingStore) -> None:
    pds = ParquetDatasetStore(rec)
    pds.write_dataset(table(0, 10), KEY)
    before = sorted(m.key for m in rec.list(""))
    with pytest.raises(DatasetAlreadyExists):
        pds.write_dataset(table(0, 20), KEY)
    assert sorted(m.key for m in rec.list("")) == before  # nothing uploaded

    other = ParquetDatasetStore(rec.inner)

    def race(key: str) -> None:
        if key.endswith(".parquet"):
            rec.before_put = None
            other.write_dataset(table(500, 505), KEY, overwrite=True)

    rec.before_put = race
    with pytest.raises(DatasetConflict):
        pds.write_dataset(table(0, 30), KEY, overwrite=True)
    assert pds.read_dataset(KEY).equals(table(500, 505))
    # The loser removed its own parts; only the two committed generations remain.
    gens = {m.key.split("/")[2] for m in rec.list(KEY + "/_gen-")}
    assert len(gens) == 2
    # overwrite=True also creates a dataset that does not exist.
    assert pds.write_dataset(table(0, 3), "fresh", overwrite=True).row_count == 3
