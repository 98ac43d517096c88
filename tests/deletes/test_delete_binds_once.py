"""A delete parses and binds its ``where`` once, although it checks the
predicate, plans the delete and scans for the rows with it: binding a long
``IN`` list (TPC-H RF2 deletes 1,500 orders) is a visible share of the delete.
A scan builds an ``IN`` list's Arrow values (unsorted data) or its sorted
keys (data in key order) once, not once per row group.
The answer stays exact, and a bad predicate still fails on every call."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import caslake
import caslake.expr as expr_mod
from caslake.errors import InvalidPredicate

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.float64())])


def test_a_delete_binds_its_sql_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(pa.table({"k": np.arange(10_000), "v": np.arange(10_000) * 0.5}, schema=SCHEMA))
    calls: list[object] = []
    real = expr_mod.bind

    def counting(e: object, schema: pa.Schema) -> object:
        calls.append(e)
        return real(e, schema)  # type: ignore[arg-type]

    monkeypatch.setattr(expr_mod, "bind", counting)
    expr_mod._compile_sql.cache_clear()
    keys = list(range(0, 10_000, 7))
    t.delete(f"k IN ({', '.join(map(str, keys))})")
    assert len(calls) == 1
    left = t.scan(columns=["k"]).to_arrow().column("k").to_pylist()
    assert sorted(left) == sorted(set(range(10_000)) - set(keys))


def test_a_bad_predicate_fails_every_time(tmp_path: Path) -> None:
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA)
    for _ in range(2):
        with pytest.raises(InvalidPredicate):
            t.delete("nope = 1")


def _keyed_table(tmp_path: Path, keys: np.ndarray) -> caslake.Table:
    from caslake.core import WriteOptions

    t = caslake.create_table(str(tmp_path / "t"), SCHEMA,
                             write_options=WriteOptions(row_group_size=64 * 1024))
    t.append(pa.table({"k": keys, "v": keys * 0.5}, schema=SCHEMA))
    assert t.describe()["data_files"][0]["row_groups"] > 2
    return t


def test_an_in_list_is_built_once_for_every_row_group(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from caslake.expr import arrow as arrow_mod

    # Keys out of order: the list goes to Arrow's hash lookup.
    t = _keyed_table(tmp_path, np.random.default_rng(5).permutation(200_000))
    built: list[int] = []
    real = arrow_mod.literal_array

    def counting(values: list[object], arrow_type: pa.DataType) -> object:
        built.append(len(values))
        return real(values, arrow_type)  # type: ignore[arg-type]

    monkeypatch.setattr(arrow_mod, "literal_array", counting)
    arrow_mod._value_set.cache_clear()
    keys = list(range(5, 200_000, 997))
    got = t.scan(columns=["k"], where=f"k IN ({', '.join(map(str, keys))})").to_arrow()
    assert sorted(got.column("k").to_pylist()) == keys
    assert built == [len(keys)]


def test_an_in_list_on_keys_in_order_is_placed_once_and_never_hashed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from caslake.expr import arrow as arrow_mod
    from caslake.expr import vector

    t = _keyed_table(tmp_path, np.arange(200_000))

    def refuse(values: list[object], arrow_type: pa.DataType) -> object:
        raise AssertionError("an IN list on keys in order went to Arrow's hash lookup")

    monkeypatch.setattr(arrow_mod, "literal_array", refuse)
    arrow_mod._value_set.cache_clear()
    vector._keys.cache_clear()
    keys = list(range(5, 200_000, 997))
    got = t.scan(columns=["k"], where=f"k IN ({', '.join(map(str, keys))})").to_arrow()
    assert got.column("k").to_pylist() == keys
    assert vector._keys.cache_info().misses == 1
    assert vector._keys.cache_info().hits >= 2
