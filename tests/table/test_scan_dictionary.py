"""Dictionary-encoded string chunks are decoded as dictionaries and expanded to
the table's plain type after the deletion mask and the filter: the answers stay
exactly DuckDB's on the same rows, in one file whose string column is
dictionary-only in its first row groups, falls back to plain pages in one,
and is written plain in the later ones (the writer stops dictionary encoding
after an overflow), with NULLs, deletes, predicates, positions, a rename and an
added column.  And a scan after deletes does not make pyarrow import pandas."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import caslake
from caslake.core import WriteOptions
from caslake.core.read import scan
from caslake.errors import CorruptMetadata
from caslake.format import parquet, parquet_thrift
from caslake.format.parquet import FooterInfo, parse_footer

N = 80_000
LOW_ROWS = 15_000  # "s" is low-cardinality in these first rows, then unique
DELETES = ["id IN (3, 17, 18, 2500, 15001, 40000, 79999)",  # scattered positions
           "k = 5",  # 1% scattered
           "id BETWEEN 30000 AND 52000"]  # whole row groups
WHERES = [None, "id < 20000 OR id >= 70000", "flag = 'N'", "s IS NULL AND id > 100"]


@functools.cache
def _data() -> pa.Table:
    rng = np.random.default_rng(1)
    ids = np.arange(N, dtype=np.int64)
    low = pa.array(np.array(["A", "N", "R"])[rng.integers(0, 3, N)])
    # Distinct 96-character hex strings, built from one buffer.
    hexes = np.frombuffer(b"0123456789abcdef", np.uint8)[rng.integers(0, 16, (N, 96))]
    unique = pa.Array.from_buffers(pa.string(), N, [
        None, pa.py_buffer(np.arange(0, 96 * (N + 1), 96, dtype=np.int32)),
        pa.py_buffer(hexes.tobytes())])
    mixed = pc.if_else(pa.array(ids < LOW_ROWS), low, unique)
    return pa.table({"id": ids, "k": (ids * 7919) % 101,
                     "flag": pc.if_else(pa.array(rng.random(N) < 0.1), None, low),
                     "s": pc.if_else(pa.array(rng.random(N) < 0.05), None, mixed),
                     "b": low.cast(pa.binary())})


def _footer(table: caslake.Table, version: int) -> FooterInfo:
    (task,) = table.scan(version=version).plan().tasks
    return task.footer


def _duck(data: pa.Table, deletes: list[str], where: str | None, cols: str) -> pa.Table:
    con = duckdb.connect()
    con.register("t", data)
    cond = " AND ".join([f"NOT ({d})" for d in deletes] + ([f"({where})"] if where else []))
    return con.execute(f"SELECT {cols} FROM t {'WHERE ' + cond if cond else ''} "
                       "ORDER BY id").fetch_arrow_table()


def _same(got: pa.Table, want: pa.Table) -> bool:
    """Equal values, column by column (names, types and values; not nullability)."""
    return got.column_names == want.column_names and all(
        a.type == b.type and a.combine_chunks().equals(b.combine_chunks())
        for a, b in zip(got.columns, want.columns, strict=True))


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> tuple[caslake.Table, list[int]]:
    """The table, and its versions: before the deletes, then after each."""
    data = _data()
    t = caslake.create_table(str(tmp_path_factory.mktemp("dict") / "t"), data.schema,
                             write_options=WriteOptions(row_group_size=64 * 1024))
    t.append(data)
    versions = [t.version]
    for d in DELETES:
        versions.append(t.delete(d).version)
    return t, versions


def test_dictionary_chunks_follow_the_page_encodings(tmp_path: Path) -> None:
    """A chunk counts only if every data page is dictionary-encoded: not one that
    fell back to plain pages, nor one written plain."""
    rows = 4000
    data = pa.table({"low": pa.array(["x", "y"] * (rows // 2)),
                     "high": pa.array(["q"] * (rows // 2)
                                      + [f"{i:040d}" for i in range(rows // 2)]),
                     "plain": pa.array(["z"] * rows)})
    path = tmp_path / "f.parquet"
    # Group 0: "high" is one repeated value (dictionary only); group 1: 2000
    # distinct 40-byte values overflow a 4 KiB dictionary (plain pages follow).
    pq.write_table(data, path, row_group_size=rows // 2, use_dictionary=["low", "high"],
                   dictionary_pagesize_limit=4096, data_page_size=1024)
    raw = path.read_bytes()
    size = int.from_bytes(raw[-8:-4], "little") + 8
    footer = parse_footer(raw[-size:], path=str(path), file_size=len(raw))
    assert footer.dictionary_chunks == frozenset({(0, 0), (1, 0), (0, 1)})


def test_the_test_file_has_every_kind_of_chunk(
        table: tuple[caslake.Table, list[int]]) -> None:
    footer = _footer(table[0], table[1][0])
    s = footer.column_indexes(["s"])[0]
    kinds = set()
    for rg in range(footer.num_row_groups):
        chunk = footer.metadata.row_group(rg).column(s)
        kinds.add("dictionary only" if (rg, s) in footer.dictionary_chunks
                  else "fallback" if chunk.has_dictionary_page else "plain")
    assert kinds == {"dictionary only", "fallback", "plain"}
    flag = footer.column_indexes(["flag"])[0]
    assert all((rg, flag) in footer.dictionary_chunks for rg in range(footer.num_row_groups))


def test_scans_equal_duckdb_with_dictionary_chunks(table: tuple[caslake.Table, list[int]],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scan, "MIN_UNIT_BYTES", 1)  # many work units
    data = _data()
    t, versions = table
    want_schema = data.select(["id", "flag", "s", "b"]).schema
    for i, v in enumerate(versions):
        for where in WHERES:
            got = t.scan(columns=["id", "flag", "s", "b"], where=where, version=v).to_arrow()
            assert got.schema.remove_metadata() == want_schema
            assert _same(got.sort_by("id"), _duck(data, DELETES[:i], where, "id, flag, s, b")), \
                (v, where)


def test_matching_rows_positions_with_dictionary_chunks(
        table: tuple[caslake.Table, list[int]]) -> None:
    data = _data()
    t, versions = table
    sc = t.scan(columns=["flag", "s"], where="id >= 10000 AND id < 30000", version=versions[2])
    got = pa.concat_tables([rows for _, rows in sc.matching_rows()])
    assert got.schema.field("s").type == pa.string()
    want = data.slice(10000, 20000)
    live = set(_duck(data, DELETES[:2], None, "id").column("id").to_pylist())
    keep = [i for i in range(10000, 30000) if i in live]
    assert got.column("__pos").to_pylist() == keep
    rows = np.array(keep) - 10000
    assert got.column("s").to_pylist() == want.column("s").take(rows).to_pylist()
    assert got.column("flag").to_pylist() == want.column("flag").take(rows).to_pylist()


def test_renamed_and_added_columns_with_dictionary_chunks(tmp_path: Path) -> None:
    data = _data()
    t = caslake.create_table(str(tmp_path / "t"), data.schema,
                             write_options=WriteOptions(row_group_size=64 * 1024))
    t.append(data)
    t.delete(DELETES[1])
    t.update_schema().rename_column("flag", "status").add_column("extra", "string").commit()
    got = t.scan(columns=["id", "status", "extra", "s"], where="id < 50000").to_arrow()
    assert got.schema.field("status").type == pa.string()
    assert got.schema.field("extra").type == pa.string()
    want = _duck(data, [DELETES[1]], "id < 50000",
                 "id, flag AS status, CAST(NULL AS VARCHAR) AS extra, s")
    assert _same(got.sort_by("id"), want)


@pytest.mark.parametrize("hinted", [True, False])
def test_a_files_dictionary_chunks_are_found_once_per_process(
        table: tuple[caslake.Table, list[int]], monkeypatch: pytest.MonkeyPatch,
        hinted: bool) -> None:
    """A new table handle (or Spark task) has its own footer cache; the Thrift
    decode of the footer that finds the dictionary-only chunks is not redone.  A
    caslake file of several row groups names them in its footer's key-value
    metadata, so it is never decoded."""
    t, versions = table
    if not hinted:
        monkeypatch.setattr(parquet, "DICTIONARY_HINT_KEY", "no such key")
    # to_arrow, not count(): a count without a predicate answers from the manifest
    want = t.scan(columns=["flag"], version=versions[0]).to_arrow().num_rows
    decodes = []

    def counting(data: bytes, *, what: str = "") -> object:
        decodes.append(what)
        return decode(data, what=what)
    decode = parquet_thrift.decode_file_metadata
    monkeypatch.setattr(parquet_thrift, "decode_file_metadata", counting)
    scan._DICTIONARY_CHUNKS.clear()
    for _ in range(3):
        fresh = caslake.open_table(t.uri)
        assert fresh.scan(columns=["flag"], version=versions[0]).to_arrow().num_rows == want
    assert len(decodes) == (0 if hinted else 1)


@pytest.mark.parametrize("values", [["A", "N", "R"], ["ab", "cd"], ["x", "yy", ""], [""],
                                    ["same", "size", "four"]])
@pytest.mark.parametrize("nulls", [False, True])
@pytest.mark.parametrize("to", [pa.string(), pa.binary()])
def test_expanding_a_dictionary_chunk_equals_pyarrows_cast(values: list[str], nulls: bool,
                                                           to: pa.DataType) -> None:
    rng = np.random.default_rng(3)
    n = 1000
    indices = pa.array(rng.integers(0, len(values), n).astype(np.int32),
                       mask=rng.random(n) < 0.2 if nulls else None)
    chunk = pa.DictionaryArray.from_arrays(indices, pa.array(values).cast(to))
    for part in (chunk, chunk.slice(0, 0), chunk.slice(7, 500), chunk.slice(999)):
        got = scan._expand_chunk(part, to)
        got.validate(full=True)
        assert got.type == to and got.equals(part.cast(to))


def _chunk(raw: list[int], valid: list[bool], values: list[str]) -> pa.DictionaryArray:
    """A dictionary array as a damaged file can decode: indices unchecked."""
    bits = pa.py_buffer(np.packbits(np.array(valid), bitorder="little"))
    indices = pa.Array.from_buffers(pa.int32(), len(raw),
                                    [bits, pa.py_buffer(np.array(raw, dtype=np.int32))])
    return pa.DictionaryArray.from_buffers(pa.dictionary(pa.int32(), pa.string()), len(raw),
                                           indices.buffers(), dictionary=pa.array(values))


@pytest.mark.parametrize("offset", [0, 3])
def test_a_null_slot_may_hold_any_index(offset: int) -> None:
    """A decoder may leave any value in a NULL slot's index, even one past the
    dictionary: the slot expands to NULL, and nothing is read out of bounds."""
    n = 64
    raw = [i % 2 for i in range(n)]
    valid = [True] * n
    for i in range(5, n, 7):
        raw[i], valid[i] = 1_000_000, False
    chunk = _chunk(raw, valid, ["A", "N"]).slice(offset)
    got = scan._expand_chunk(chunk, pa.string())
    got.validate(full=True)
    assert got.to_pylist() == [None if not valid[i] else "AN"[i % 2] for i in range(offset, n)]


# fixed finding (bit-flip fuzzing, seed 441982999): a flipped bit in a page header (which
# page CRCs do not cover) decoded a flag column to indices past its dictionary; the
# expansion raised a raw ArrowIndexError, and the NumPy fast path clipped such an index
# to the last value: a wrong answer.
@pytest.mark.parametrize("values", [["A", "N", "R"], []])
def test_an_index_past_the_dictionary_is_corruption_naming_the_file(values: list[str]) -> None:
    chunk = _chunk([0, 1, 7, 2][:4] if values else [0, 0], [True] * (4 if values else 2),
                   values)
    table = pa.table({"flag": chunk})
    with pytest.raises(CorruptMetadata, match=r"data/part-1\.parquet"):
        scan._expand(table, pa.schema([("flag", pa.string())]), "data/part-1.parquet")


def test_a_scan_after_deletes_does_not_import_pandas(
        table: tuple[caslake.Table, list[int]]) -> None:
    """pyarrow imports pandas (~0.3 s) on its first Python-to-Arrow conversion;
    a scan without a predicate needs none."""
    t, _ = table
    code = ("import sys, caslake\n"
            f"t = caslake.open_table({t.uri!r})\n"
            "n = t.scan(columns=['id', 'flag', 's']).to_arrow().num_rows\n"
            "print(n, 'pandas' in sys.modules)")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True).stdout.split()
    assert out == [str(t.scan(columns=["id"]).count()), "False"]


def _decoded_dictionary_chunks(footer: FooterInfo) -> frozenset[tuple[int, int]]:
    """The dictionary-only chunks as the Thrift page encoding statistics say."""
    return parquet.chunks_from_encoding_stats(parquet_thrift.decode_file_metadata(
        footer.raw[:-parquet.TRAILER_SIZE], what="test"))


def test_caslake_files_carry_their_dictionary_chunks_in_the_footer(
        table: tuple[caslake.Table, list[int]]) -> None:
    """A first scan in a process learns which chunks are dictionary-only from a
    key-value entry pyarrow has already parsed, not from a pure-Python Thrift
    decode of the footer (~1 ms a KiB: 42 ms for TPC-H SF1's lineitem)."""
    footer = _footer(table[0], table[1][0])
    assert footer.num_row_groups > 1
    hint = (footer.metadata.metadata or {}).get(parquet.DICTIONARY_HINT_KEY.encode())
    assert hint is not None
    assert footer.dictionary_chunks == _decoded_dictionary_chunks(footer)
    assert footer.dictionary_chunks  # the test file has some


def test_a_purge_rewrites_the_dictionary_hint(tmp_path: Path) -> None:
    """A splice re-encodes the row groups it edits: the hint it writes describes
    the new file's groups."""
    data = _data()
    t = caslake.create_table(str(tmp_path / "t"), data.schema,
                             write_options=WriteOptions(row_group_size=64 * 1024))
    t.append(data)
    t.purge("id IN (3, 20000, 79999)")
    (task,) = t.scan().plan().tasks
    footer = task.footer
    assert footer.num_row_groups > 1
    assert (footer.metadata.metadata or {}).get(parquet.DICTIONARY_HINT_KEY.encode())
    assert footer.dictionary_chunks == _decoded_dictionary_chunks(footer)


@pytest.mark.parametrize("hint", [b"", b"not json", b'["1"]', b'{"a": 1}', b'["zz", "1"]',
                                  b'[1, 2]', b'["ffffffffffff", "1"]'])
def test_a_bad_dictionary_hint_is_ignored(tmp_path: Path, hint: bytes) -> None:
    """The hint only decides how chunks are decoded (a wrong one costs time, never
    rows); one that does not parse, or does not fit the file, is ignored and the
    footer is decoded instead."""
    data = pa.table({"low": pa.array(["x", "y"] * 2000), "n": pa.array(range(4000))})
    path = tmp_path / "f.parquet"
    pq.write_table(data.replace_schema_metadata({parquet.DICTIONARY_HINT_KEY: hint}), path,
                   row_group_size=2000)
    raw = path.read_bytes()
    size = int.from_bytes(raw[-8:-4], "little") + 8
    footer = parse_footer(raw[-size:], path=str(path), file_size=len(raw))
    assert footer.num_row_groups == 2
    assert footer.dictionary_chunks == _decoded_dictionary_chunks(footer) == frozenset(
        {(0, 0), (1, 0), (0, 1), (1, 1)})
