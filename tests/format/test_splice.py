"""The row-group splice (pure): decode one group from its bytes, re-encode it with the
file's own settings, rebuild the footer, cut the file into valid multipart parts."""

from __future__ import annotations

import io
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caslake.format import splice as sp
from caslake.format.parquet_thrift import (
    decode_file_metadata,
    decode_offset_index,
    decode_page_header,
    footer_length,
)

GROUP = 4000
GROUPS = 8


def _table() -> pa.Table:
    n = GROUP * GROUPS
    rng = np.random.default_rng(7)
    return pa.table({
        "id": pa.array(np.arange(n), pa.int64()),
        "user": pa.array([f"u{i % 500}" for i in range(n)]),
        "x": pa.array(rng.random(n)),
        "maybe": pa.array([None if i % 13 == 0 else i % 100 for i in range(n)], pa.int32()),
    })


def _write(table: pa.Table, **options: Any) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=GROUP, **options)
    return buf.getvalue()


def _footer(data: bytes) -> Any:
    return decode_file_metadata(data[-8 - footer_length(data[-8:]):-8])


def _purge(data: bytes, drop: dict[int, pa.Array]) -> tuple[sp.SplicedFile, bytes]:
    """Drop rows (boolean masks of rows to remove) from the given groups."""
    fmd = _footer(data)
    replacements: dict[int, sp.EncodedGroup | None] = {}
    for i, mask in drop.items():
        start, end = sp.row_group_span(fmd.row_groups[i])
        rows = sp.decode_row_group(fmd, i, data[start:end])
        kept = rows.filter(pc.invert(mask))
        replacements[i] = (sp.encode_row_group(fmd, i, kept, data[start:end])
                           if kept.num_rows else None)
    aux = {r: data[r[0]:r[1]] for i, rg in enumerate(fmd.row_groups) if i not in drop
           for r in sp.aux_ranges(rg)}
    out = sp.splice_file(fmd, replacements, aux)
    return out, sp.assemble(out.pieces, data)


def _expected(table: pa.Table, drop: dict[int, pa.Array]) -> pa.Table:
    parts = []
    for i in range(GROUPS):
        group = table.slice(i * GROUP, GROUP)
        parts.append(group.filter(pc.invert(drop[i])) if i in drop else group)
    return pa.concat_tables(parts)


def _user_mask(table: pa.Table, group: int, user: str) -> pa.Array:
    return pc.equal(table.slice(group * GROUP, GROUP)["user"], user).combine_chunks()


WRITERS = [
    {"compression": "zstd", "write_page_checksum": True},
    {"compression": "snappy", "write_page_index": True, "write_page_checksum": True},
    {"compression": "gzip", "data_page_version": "2.0", "use_dictionary": ["user"]},
    {"compression": "none", "use_dictionary": False,
     "column_encoding": {"id": "DELTA_BINARY_PACKED", "x": "BYTE_STREAM_SPLIT"}},
]


@pytest.mark.parametrize("options", WRITERS)
def test_spliced_file_is_the_old_file_minus_the_rows(options: dict[str, Any],
                                                    tmp_path: Any) -> None:
    table = _table()
    data = _write(table, **options)
    drop = {2: _user_mask(table, 2, "u7"), 5: _user_mask(table, 5, "u9")}
    out, new = _purge(data, drop)
    expected = _expected(table, drop)

    assert len(new) == out.size and new[:4] == b"PAR1" and new[-4:] == b"PAR1"
    pf = pq.ParquetFile(pa.BufferReader(new), page_checksum_verification=True)
    assert pf.read().equals(expected)
    assert pf.metadata.num_rows == expected.num_rows == out.num_rows
    path = tmp_path / "new.parquet"
    path.write_bytes(new)
    assert duckdb.sql(f"select * from read_parquet('{path}')").arrow().read_all().equals(
        expected)

    # Unedited groups are byte-for-byte the source's.
    old_fmd, new_fmd = _footer(data), _footer(new)
    for i, rg in enumerate(old_fmd.row_groups):
        if i in drop:
            continue
        s, e = sp.row_group_span(rg)
        ns, ne = sp.row_group_span(new_fmd.row_groups[out.group_map[i]])
        assert new[ns:ne] == data[s:e]
    # Every column chunk's offsets point at real page headers.
    for rg in new_fmd.row_groups:
        for c in rg.columns:
            header = decode_page_header(new[c.meta_data.data_page_offset:])
            assert header.type in (0, 3)  # DATA_PAGE or DATA_PAGE_V2
            if c.offset_index_offset is not None:
                index = decode_offset_index(new[c.offset_index_offset:c.offset_index_offset
                                                + c.offset_index_length])
                for loc in index.page_locations:
                    assert decode_page_header(new[loc.offset:]).type in (0, 3)


def test_statistics_of_edited_groups_are_recomputed_and_prune_correctly() -> None:
    table = _table()
    data = _write(table, compression="zstd")
    # Remove the largest ids of group 3: its max must shrink.
    ids = table.slice(3 * GROUP, GROUP)["id"]
    drop = {3: pc.greater_equal(ids, 3 * GROUP + 100).combine_chunks()}
    _, new = _purge(data, drop)
    md = pq.ParquetFile(pa.BufferReader(new)).metadata
    stats = md.row_group(3).column(0).statistics
    assert (stats.min, stats.max) == (3 * GROUP, 3 * GROUP + 99)
    assert md.row_group(3).num_rows == 100
    for i in range(md.num_row_groups):  # every group's stats match its data
        got = pq.ParquetFile(pa.BufferReader(new)).read_row_group(i)
        st_ = md.row_group(i).column(0).statistics
        assert (st_.min, st_.max) == (pc.min(got["id"]).as_py(), pc.max(got["id"]).as_py())
    flt = [("id", ">", 3 * GROUP + 50), ("id", "<", 4 * GROUP + 3)]
    pruned = pq.read_table(pa.BufferReader(new), filters=flt)
    assert pruned["id"].to_pylist() == [*range(3 * GROUP + 51, 3 * GROUP + 100),
                                        *range(4 * GROUP, 4 * GROUP + 3)]


def test_a_group_left_empty_is_dropped_and_later_groups_renumbered() -> None:
    table = _table()
    data = _write(table, compression="zstd", write_page_index=True)
    everything = pa.array([True] * GROUP)
    drop = {0: everything, 6: _user_mask(table, 6, "u1")}
    out, new = _purge(data, drop)
    assert out.group_map[0] is None and out.group_map[1] == 0
    assert out.row_offsets[1] == 0 and out.row_offsets[7] == 5 * GROUP + (GROUP - GROUP // 500)
    assert pq.read_table(pa.BufferReader(new)).equals(_expected(table, drop))
    assert out.row_group_count == GROUPS - 1


def test_bad_group_bytes_are_corrupt_not_reencoded() -> None:
    data = _write(_table(), compression="zstd", write_page_checksum=True)
    fmd = _footer(data)
    s, e = sp.row_group_span(fmd.row_groups[1])
    damaged = bytearray(data[s:e])
    damaged[len(damaged) // 2] ^= 0xFF
    from caslake.errors import CorruptMetadata

    with pytest.raises(CorruptMetadata):
        sp.decode_row_group(fmd, 1, bytes(damaged))
    with pytest.raises(CorruptMetadata):
        sp.decode_row_group(fmd, 1, data[s:e - 1])


# --- multipart parts ---------------------------------------------------------------


pieces_strategy = st.lists(
    st.one_of(st.integers(1, 40).map(lambda n: b"n" * n),
              st.tuples(st.integers(0, 1000), st.integers(1, 60))),
    min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(pieces_strategy, st.integers(1, 30))
def test_parts_obey_the_size_rule_and_reproduce_the_file(raw: list[Any], min_part: int) -> None:
    pieces: list[sp.Piece] = []
    for p in raw:
        pieces.append(p if isinstance(p, bytes) else sp.SourceRange(p[0], p[0] + p[1]))
    pieces.append(b"footer")
    source = bytes(i % 251 for i in range(1100))
    parts = sp.plan_parts(pieces, min_part=min_part, max_part=max(2 * min_part, 50))
    for part in parts[:-1]:
        assert part.size >= min_part
    assert isinstance(parts[-1], sp.UploadPart)
    rebuilt = b"".join(source[p.start:p.end] if isinstance(p, sp.CopyPart)
                       else sp.assemble(p.segments, source) for p in parts)
    assert rebuilt == sp.assemble(pieces, source)
    # Only new bytes and (widening) verbatim source ranges are uploaded.
    new_bytes = sum(len(p) for p in pieces if isinstance(p, bytes))
    uploaded = sum(p.size for p in parts if isinstance(p, sp.UploadPart))
    widened = sum(p.widened_bytes for p in parts if isinstance(p, sp.UploadPart))
    assert uploaded == new_bytes + widened


def test_widening_takes_only_what_the_part_needs() -> None:
    pieces: list[sp.Piece] = [sp.SourceRange(0, 100), b"e" * 3, sp.SourceRange(100, 200),
                              b"footer"]
    parts = sp.plan_parts(pieces, min_part=10)
    assert parts == [sp.CopyPart(0, 100), sp.UploadPart((b"e" * 3, sp.SourceRange(100, 107))),
                     sp.CopyPart(107, 200), sp.UploadPart((b"footer",))]
