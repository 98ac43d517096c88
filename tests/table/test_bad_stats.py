"""Manifest statistics that are valid JSON but not values of the column's type are
CorruptMetadata naming the manifest, on every path that decodes them."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

import caslake
from caslake.errors import CorruptMetadata

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False)])


def test_bad_int_stats_of_a_later_file_are_corrupt_metadata_for_read_version(
        tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA)
    t.append(pa.table({"id": pa.array(range(100), pa.int64())}))
    read_at = t.version
    t.append(pa.table({"id": pa.array(range(100, 200), pa.int64())}))  # after read_at
    manifest = Path(uri) / t.snapshot.key
    doc = json.loads(manifest.read_bytes())
    fid = str(t.table_schema.field("id").id)
    entry = next(f for f in doc["files"] if f["stats"][fid]["min"] == 100)
    entry["stats"][fid].update(min="one hundred", max="two hundred")  # strings, not ints
    manifest.write_bytes(json.dumps(doc).encode())

    with pytest.raises(CorruptMetadata) as err:
        caslake.open_table(uri).delete("id = 5", read_version=read_at)
    assert err.value.key == t.snapshot.key and entry["path"] in str(err.value)
    # The same manifest through the other paths that decode statistics.
    for op in (lambda tb: tb.scan(where="id = 5").to_arrow(), lambda tb: tb.delete("id = 5")):
        with pytest.raises(CorruptMetadata) as err:
            op(caslake.open_table(uri))
        assert err.value.key == t.snapshot.key
