"""The erasure check itself (tests/maintenance/erasure.py) must be able to fail: a value
hidden in each kind of object it decodes is found, and clean objects pass."""

from __future__ import annotations

import gzip
import io
import json
import uuid
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from caslake.format.tombstone import FileDeletes, KeyRange, Tombstone
from caslake.store import open_store
from caslake.store.base import PutMode
from tests.maintenance.erasure import assert_erased, find_leaks

SECRET = "bob-91c2e6"
NUMBER = 987_654_321


def _parquet(table: pa.Table, **kw: object) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, **kw)  # type: ignore[arg-type]
    return buf.getvalue()


def _nested(value: str = SECRET) -> pa.Table:
    return pa.table({
        "id": [1, 2],
        "tags": [["x", value], ["y"]],
        "person": [{"name": "a", "aliases": ["b"]}, {"name": value, "aliases": []}],
        "attrs": pa.array([[("k", "v")], [("k", value)]], pa.map_(pa.string(), pa.string())),
    })


def _avro(value: str) -> bytes:
    schema = {"type": "record", "name": "r", "fields": [
        {"name": "id", "type": "long"},
        {"name": "bounds", "type": {"type": "map", "values": "bytes"}}]}
    buf = io.BytesIO()
    fastavro.writer(buf, schema, [{"id": 1, "bounds": {"1": value.encode()}}], codec="deflate")
    return buf.getvalue()


def _arrow(value: str, *, stream: bool = False) -> bytes:
    table = pa.table({"stats": [{"min": value, "max": "z"}]})
    sink = pa.BufferOutputStream()
    options = ipc.IpcWriteOptions(compression="zstd")
    writer = (ipc.new_stream if stream else ipc.new_file)(sink, table.schema, options=options)
    writer.write_table(table)
    writer.close()
    return sink.getvalue().to_pybytes()


def _dictionary_only(value: str) -> bytes:
    """A dictionary-encoded chunk whose dictionary keeps a value no row references:
    what re-encoding a group with a stale dictionary would leave behind."""
    dictionary = pa.array(["a", value, "c"])
    column = pa.DictionaryArray.from_arrays(pa.array([0, 2, 0], pa.int32()), dictionary)
    return _parquet(pa.table({"u": column}), compression="zstd", write_statistics=False)


def _tombstone(value: str) -> bytes:
    deletes = FileDeletes("data/x.parquet", 10, key_ranges=(KeyRange(1, value, value),))
    return Tombstone("t", "delete", (deletes,)).to_bytes()


# name -> make(string value, int value): an object holding both (where it can)
CASES = {
    "parquet nested, zstd": lambda s, n: _parquet(_nested(s), compression="zstd"),
    "parquet int column": lambda s, n: _parquet(pa.table({"n": [1, n]}), compression="zstd"),
    "parquet dictionary entry no row uses": lambda s, n: _dictionary_only(s),
    "parquet half written (a crashed writer)": lambda s, n: _parquet(
        _nested(s), compression="zstd")[:-200],
    "avro deflate": lambda s, n: _avro(s),
    "arrow file, zstd": lambda s, n: _arrow(s),
    "arrow stream, zstd": lambda s, n: _arrow(s, stream=True),
    "json": lambda s, n: json.dumps({"params": {"where": f"user = '{s}'"}}).encode(),
    "json lines": lambda s, n: (b'{"a": 1}\n' + json.dumps({"add": {"stats": json.dumps(
        {"minValues": {"u": s}})}}).encode()),
    "gzip": lambda s, n: gzip.compress(b"prefix " + s.encode()),
    "tombstone key range": lambda s, n: _tombstone(s),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_kind_of_object_holding_the_value_is_found(case: str, tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "t"))
    store.put("data/obj", CASES[case](SECRET, NUMBER), mode=PutMode.CREATE)
    leaks = find_leaks(store, [SECRET, NUMBER])
    assert leaks and all(leak.startswith("data/obj: ") for leak in leaks), leaks
    with pytest.raises(AssertionError, match="data/obj"):
        assert_erased(store, [SECRET, NUMBER])


def test_a_staging_file_hidden_from_the_listing_is_found(tmp_path: Path) -> None:
    root = tmp_path / "t"
    store = open_store(str(root))
    store.put("data/clean.parquet", _parquet(pa.table({"u": ["a"]})), mode=PutMode.CREATE)
    assert_erased(root, [SECRET])
    staged = Path(store.staging_dir()) / f"{uuid.uuid4().hex}.parquet.tmp"
    staged.write_bytes(_parquet(_nested(), compression="zstd"))
    assert [m.key for m in store.list("")] == ["data/clean.parquet"]  # hidden from list
    for root_form in (root, str(root), root.as_uri(), store):
        assert any(".caslake-tmp/" in leak for leak in find_leaks(root_form, [SECRET]))


def test_clean_objects_of_every_kind_pass(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "t"))
    for name, make in CASES.items():
        if "half written" not in name:  # undecodable: never provably clean
            store.put(f"obj/{uuid.uuid4().hex}", make("carol-0000", 5), mode=PutMode.CREATE)
    assert_erased(store, [SECRET, NUMBER])


def test_memory_store_and_int_values(tmp_path: Path) -> None:
    store = open_store(f"memory://{uuid.uuid4().hex}")
    # An int is matched in data only, never in metadata's counts.
    store.put("manifest/m.json", json.dumps({"rows": NUMBER}).encode(), mode=PutMode.CREATE)
    assert_erased(store, [NUMBER])
    store.put("data/d.parquet", _parquet(pa.table({"n": [NUMBER]})), mode=PutMode.CREATE)
    assert find_leaks(store, [NUMBER])


@pytest.mark.s3
def test_an_unfinished_multipart_upload_is_a_leak(s3_uri: str, s3_options: dict[str, str]
                                                  ) -> None:
    from caslake.store.s3 import S3Store

    store = open_store(s3_uri, s3_options)
    assert isinstance(store, S3Store)
    store.put("data/a.json", b"{}", mode=PutMode.CREATE)
    assert_erased(store, [SECRET])
    store.boto3_client().create_multipart_upload(Bucket=store.bucket,
                                                 Key=store.full_key("data/b.parquet"))
    assert any("multipart" in leak for leak in find_leaks(s3_uri, [SECRET], s3_options))
