"""ParquetConcat: one Parquet file from row groups encoded as separate files.

A file of one group is the encoder's own bytes (its footer is not re-encoded);
a file of several keeps every group's pages verbatim and moves only offsets.
Either way pyarrow reads it back with page-CRC verification, and building the
footer twice gives the same bytes (it changes nothing it was given)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from caslake.format.parquet import VERIFY_PAGE_CHECKSUMS, WRITE_PAGE_CHECKSUMS, ParquetConcat


def encoded(start: int, n: int) -> bytes:
    t = pa.table({"id": pa.array(np.arange(start, start + n)),
                  "s": pa.array([f"v{i % 7}" for i in range(start, start + n)])})
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, t.schema, compression="zstd", **WRITE_PAGE_CHECKSUMS) as w:
        w.write_table(t, row_group_size=n)
    return bytes(sink.getvalue().to_pybytes())


def assemble(parts: list[bytes]) -> tuple[bytes, ParquetConcat]:
    c = ParquetConcat()
    out = bytearray(c.head())
    for p in parts:
        out += c.add(p, len(out), path="t.parquet")
    out += c.tail()
    return bytes(out), c


def test_a_single_group_file_is_the_encoders_bytes() -> None:
    one = encoded(0, 1000)
    built, _ = assemble([one])
    assert built == one


@pytest.mark.parametrize("groups", [1, 2, 3])
def test_assembled_files_read_back_and_tail_is_repeatable(groups: int) -> None:
    parts = [encoded(i * 1000, 1000) for i in range(groups)]
    built, concat = assemble(parts)
    assert concat.tail() == built[-len(concat.tail()):]  # a second call: same footer
    t = pq.read_table(pa.BufferReader(built), **VERIFY_PAGE_CHECKSUMS)
    assert t.column("id").to_pylist() == list(range(groups * 1000))
    md = pq.read_metadata(pa.BufferReader(built))
    assert md.num_row_groups == groups
    assert [md.row_group(g).num_rows for g in range(groups)] == [1000] * groups
