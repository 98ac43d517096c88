"""Scans after deletes equal DuckDB on the same rows: position, key-range and
whole-row-group deletes; no predicate, a simple one (one filter with the mask)
and a computed one (applied after the mask); one and two scan threads; local
and in-memory stores; many small work units."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest

import caslake
from caslake.core import WriteOptions, pools
from caslake.core.read import scan

N = 6000
DELETES = [
    "id IN (3, 17, 18, 19, 2500, 4095, 4096, 5999)",  # scattered positions
    "id BETWEEN 1000 AND 2999",  # a long range: key range and whole row groups
    "grp = 3",  # every 7th row
]
WHERES = [None, "v < 40 AND id >= 10", "CAST(v AS DOUBLE) * 2 < 80 OR id = 5998"]


def _data() -> pa.Table:
    ids = np.arange(N, dtype=np.int64)
    return pa.table({"id": ids, "grp": ids % 7, "v": (ids * 37) % 101,
                     "s": pa.array([f"s{i}" for i in range(N)])})


def _duck(data: pa.Table, deletes: list[str], where: str | None) -> list[tuple[object, ...]]:
    con = duckdb.connect()
    con.register("t", data)
    cond = " AND ".join([f"NOT ({d})" for d in deletes] + ([f"({where})"] if where else []))
    rows = con.execute(f"SELECT id, v, s FROM t {'WHERE ' + cond if cond else ''} "
                       "ORDER BY id").fetchall()
    return [tuple(r) for r in rows]


@pytest.fixture(params=[1, 2])
def scan_threads(request: pytest.FixtureRequest) -> Iterator[int]:
    before = pools.threads()
    pools.set_threads(request.param)
    yield int(request.param)
    pools.set_threads(before)


@pytest.mark.parametrize("store", ["local", "memory"])
def test_scan_after_deletes_equals_duckdb(tmp_path: Path, store: str, scan_threads: int,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scan, "MIN_UNIT_BYTES", 1)  # many units: the parallel path
    uri = str(tmp_path / "t") if store == "local" else f"memory://{tmp_path.name}"
    data = _data()
    t = caslake.create_table(uri, data.schema, write_options=WriteOptions(row_group_size=4096))
    t.append(data.slice(0, 4000))
    t.append(data.slice(4000))
    done: list[str] = []
    for d in DELETES:
        t.delete(d)
        done.append(d)
        for where in WHERES:
            got = t.scan(columns=["id", "v", "s"], where=where).to_arrow().sort_by("id")
            assert [tuple(r.values()) for r in got.to_pylist()] == _duck(data, done, where), \
                (done, where)


def test_set_threads_refuses_zero() -> None:
    from caslake.errors import InvalidArgument

    with pytest.raises(InvalidArgument):
        pools.set_threads(0)
