"""Export rules: refused types write nothing, exports write no data objects and
never touch caslake's own keys, incremental exports reuse unchanged manifests, the
Delta deletion-vector bytes follow the protocol, and the CLI."""

from __future__ import annotations

import io
import json
import struct
import zlib
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from pyroaring import BitMap64

import caslake
from caslake.cli import main as cli_main
from caslake.errors import ExportUnsupportedType
from caslake.export.delta import DV_MAGIC, dv_key, read_log, z85
from caslake.export.iceberg import HINT_KEY
from caslake.store import ObjectStore
from tests.export.data import SCHEMA, new_table, rows
from tests.export.readers import caslake_rows, deltalake_rows, pyiceberg_rows

CASLAKE_PREFIXES = ("data/", "manifest/", "tombstone/", "_latest_manifest")


def snapshot_keys(store: ObjectStore) -> dict[str, str]:
    return {m.key: m.etag for m in store.list("")}


@pytest.mark.parametrize("arrow_type", [pa.uint64(), pa.uint8(), pa.timestamp("ns"),
                                        pa.timestamp("ms", tz="UTC")])
def test_unmappable_type_is_refused_and_nothing_is_written(tmp_path: Path,
                                                           arrow_type: pa.DataType) -> None:
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("bad", arrow_type)])
    t = caslake.create_table(str(tmp_path / "t"), schema)
    t.append(pa.table({"id": [1, 2], "bad": pa.array([1, 2]).cast(arrow_type)}))
    before = snapshot_keys(t.store)
    for export in (t.export_iceberg, t.export_delta):
        with pytest.raises(ExportUnsupportedType) as err:
            export()
        assert err.value.column == "bad" and isinstance(err.value, caslake.CaslakeError)
    assert snapshot_keys(t.store) == before
    code = cli_main(["export", "iceberg", str(tmp_path / "t")])
    assert code == 1 and snapshot_keys(t.store) == before


def test_export_writes_no_data_objects_and_leaves_caslake_keys_alone(tmp_path: Path) -> None:
    t = new_table(str(tmp_path / "t"))
    t.append(rows(0, 100))
    t.delete("id BETWEEN 3 AND 9")
    before = {k: e for k, e in snapshot_keys(t.store).items() if k.startswith(CASLAKE_PREFIXES)}
    t.export_iceberg()
    t.export_delta()
    after = snapshot_keys(t.store)
    assert {k: e for k, e in after.items() if k.startswith(CASLAKE_PREFIXES)} == before
    new = set(after) - set(before)
    assert new and all(k.startswith(("metadata/", "_delta_log/", "dv/")) for k in new), new
    assert not any(k.endswith(".parquet") and not k.startswith("metadata/deletes/")
                   for k in new)


def test_incremental_export_reuses_unchanged_manifests(tmp_path: Path) -> None:
    """Exporting N+1 after N rewrites only the manifests of changed file groups: the
    bytes written stay flat as the table grows."""
    t = new_table(str(tmp_path / "t"))
    for i in range(200):  # enough commits for caslake to make segments
        t.append(rows(i * 5, i * 5 + 5))
    full = t.export_iceberg()
    assert full.manifests_reused == 0 and full.manifests_written >= 2
    t.append(rows(5000, 5005))
    step = t.export_iceberg()
    assert step.manifests_reused >= 1 and step.manifests_written == 1
    assert step.bytes_written < full.bytes_written / 3
    d_full = t.export_delta()
    t.append(rows(6000, 6005))
    d_step = t.export_delta()
    assert d_step.bytes_written < d_full.bytes_written / 20
    same = pyiceberg_rows(step.location, SCHEMA).equals(caslake_rows(t, step.version))
    assert same


def test_iceberg_manifests_carry_spec_field_ids_and_metrics(tmp_path: Path) -> None:
    t = new_table(str(tmp_path / "t"))
    t.append(rows(0, 50))
    t.delete("id = 7")
    res = t.export_iceberg()
    meta = json.loads(t.store.get("metadata/v2.metadata.json").data)
    assert meta["format-version"] == 2 and t.store.get(HINT_KEY).data == b"2"
    assert [f["id"] for f in meta["schemas"][0]["fields"]] == \
        [f.id for f in t.table_schema.fields]
    root = (tmp_path / "t").as_uri() + "/"

    def avro(uri: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        reader = fastavro.reader(io.BytesIO(t.store.get(uri.removeprefix(root)).data))
        return dict(reader.writer_schema or {}), [dict(r) for r in reader]  # type: ignore[call-overload]

    schema, records = avro(meta["snapshots"][-1]["manifest-list"])
    ids = {f["name"]: f["field-id"] for f in schema["fields"]}
    assert ids["manifest_path"] == 500 and ids["content"] == 517
    data = [r for r in records if r["content"] == 0]
    _, entries = avro(data[0]["manifest_path"])
    df = entries[0]["data_file"]
    assert df["record_count"] == 50
    bounds = {kv["key"]: kv["value"] for kv in df["lower_bounds"]}
    assert struct.unpack("<q", bounds[1])[0] == 0  # id: long, little-endian
    nulls = {kv["key"]: kv["value"] for kv in df["null_value_counts"]}
    assert nulls[2] == 10  # "small" is null on every 5th row
    sizes = {kv["key"]: kv["value"] for kv in df["column_sizes"]}
    assert set(sizes) == {f.id for f in t.table_schema.fields} and all(sizes.values())
    # delete file, data and delete manifests, manifest list, metadata JSON, hint
    assert res.objects_written == 6


def test_delta_deletion_vector_bytes_follow_the_protocol(tmp_path: Path) -> None:
    t = new_table(str(tmp_path / "t"))
    t.append(rows(0, 100))
    t.delete("id IN (3, 4, 99)")
    t.export_delta()
    state = read_log(t.store)
    (add,) = state.adds.values()
    dv = add["deletionVector"]
    assert dv["storageType"] == "u" and dv["cardinality"] == 3
    raw = t.store.get(dv_key(dv["pathOrInlineDv"])).data
    assert raw[0] == 1  # format version
    off = dv["offset"]
    size = struct.unpack(">I", raw[off:off + 4])[0]
    assert size == dv["sizeInBytes"]
    data = raw[off + 4:off + 4 + size]
    assert struct.unpack(">I", raw[off + 4 + size:off + 8 + size])[0] == zlib.crc32(data)
    assert struct.unpack("<I", data[:4])[0] == DV_MAGIC
    assert list(BitMap64.deserialize(data[4:])) == [3, 4, 99]
    stats = json.loads(add["stats"])
    assert stats["numRecords"] == 100 and stats["tightBounds"] is False
    assert z85(bytes(range(16)))[:5] == "009c6"  # Z85 of 00 01 02 03 (RFC 32 alphabet)


def test_cli_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    t = new_table(str(tmp_path / "t"))
    t.append(rows(0, 40))
    t.append(rows(40, 80))
    t.delete("id < 10")
    out = tmp_path / "elsewhere"
    assert cli_main(["export", "iceberg", str(tmp_path / "t"), "--version", "2",
                     "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "v2.metadata.json" in printed
    got = pyiceberg_rows(f"{out.as_uri()}/metadata/v2.metadata.json", SCHEMA)
    assert got.equals(caslake_rows(t, 2))
    assert not (tmp_path / "t" / "metadata").exists()
    assert cli_main(["export", "delta", str(tmp_path / "t")]) == 0
    assert deltalake_rows(str(tmp_path / "t"), SCHEMA).equals(caslake_rows(t))
    capsys.readouterr()
    assert cli_main(["export", "delta", str(tmp_path / "t"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["noop"] is True
