"""The Parquet footer codec (official IDL + thriftpy2): exact round trips, typed errors."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from caslake.errors import CorruptMetadata
from caslake.format.parquet_thrift import (
    clone,
    decode_file_metadata,
    decode_offset_index,
    encode_file_metadata,
    encode_offset_index,
    footer_length,
    footer_tail,
)


def _file(**options: object) -> bytes:
    n = 5000
    table = pa.table({
        "id": pa.array(range(n), pa.int64()),
        "name": pa.array([f"user-{i % 37}" for i in range(n)]),
        "score": pa.array([i / 7 if i % 11 else None for i in range(n)], pa.float64()),
        "tags": pa.array([[str(i), "x"] for i in range(n)], pa.list_(pa.string())),
        "ts": pa.array(range(n), pa.timestamp("us", tz="UTC")),
    })
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=1000, **options)  # type: ignore[arg-type]
    return buf.getvalue()


@pytest.mark.parametrize("options", [
    {},
    {"compression": "zstd", "write_page_checksum": True},
    {"compression": "snappy", "write_page_index": True, "data_page_version": "2.0"},
    {"compression": "none", "use_dictionary": False, "write_statistics": False},
])
def test_pyarrow_footers_round_trip_byte_for_byte(options: dict[str, object]) -> None:
    data = _file(**options)
    n = footer_length(data[-8:])
    body = data[-8 - n:-8]
    fmd = decode_file_metadata(body)
    assert fmd.num_rows == 5000 and len(fmd.row_groups) == 5
    assert encode_file_metadata(fmd) == body
    assert footer_tail(fmd) == data[-8 - n:]
    copy = clone(fmd)
    copy.num_rows = 1
    assert fmd.num_rows == 5000  # a clone never aliases the original


def test_offset_index_round_trips() -> None:
    data = _file(write_page_index=True)
    fmd = decode_file_metadata(data[-8 - footer_length(data[-8:]):-8])
    chunk = fmd.row_groups[1].columns[0]
    blob = data[chunk.offset_index_offset:chunk.offset_index_offset
                + chunk.offset_index_length]
    index = decode_offset_index(blob)
    assert index.page_locations[0].offset == chunk.meta_data.data_page_offset
    assert encode_offset_index(index) == blob


def test_garbage_is_corrupt_metadata() -> None:
    with pytest.raises(CorruptMetadata, match="footer"):
        decode_file_metadata(b"\xff\x00garbage" * 3)
    with pytest.raises(CorruptMetadata, match="magic"):
        footer_length(b"12345678")
