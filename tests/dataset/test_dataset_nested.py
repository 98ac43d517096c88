"""Datasets (RFC-0008) with nested columns and issue 29's newer primitive types:
a round trip returns the input (values and types), projections and filters on a
top-level column work beside nested ones, one part or several, and remote-store's
``ParquetDatasetStore`` reads what caslake writes and the other way round."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from caslake.dataset import ParquetDatasetStore
from caslake.store import LocalStore

SCHEMA = pa.schema([
    pa.field("id", pa.int64()),
    pa.field("payload", pa.struct([
        pa.field("device", pa.struct([pa.field("os", pa.string()),
                                      pa.field("ver", pa.int32())])),
        pa.field("items", pa.list_(pa.struct([
            pa.field("price", pa.decimal128(10, 2)),
            pa.field("attrs", pa.map_(pa.string(), pa.int64()))]))),
    ])),
    pa.field("tags", pa.large_list(pa.string())),
    pa.field("pair", pa.list_(pa.int16(), 2)),
    pa.field("scores", pa.map_(pa.string(), pa.float64())),
    pa.field("t", pa.time64("us")),
    pa.field("fx", pa.binary(4)),
    pa.field("d64", pa.date64()),
    pa.field("dec", pa.decimal64(12, 3)),
    pa.field("half", pa.float16()),
])


def nested(lo: int, hi: int) -> pa.Table:
    """Rows with NULL at every level (struct, field, list, element, map, value)."""
    out: list[dict[str, Any]] = []
    for i in range(lo, hi):
        items = None if i % 6 == 4 else [] if i % 6 == 5 else [
            {"price": Decimal(i) / 4, "attrs": None if i % 3 == 0 else [("k", i), ("z", None)]},
            None]
        out.append({
            "id": i,
            "payload": None if i % 11 == 3 else {
                "device": None if i % 7 == 2 else {"os": None if i % 5 == 1 else f"os{i % 3}",
                                                   "ver": i},
                "items": items},
            "tags": None if i % 9 == 1 else [f"t{i}", None],
            "pair": None if i % 8 == 6 else [i, None],
            "scores": None if i % 10 == 7 else [("a", i / 2)],
            "t": None if i % 4 == 3 else dt.time(i % 24, 1, 2, i),
            "fx": None if i % 5 == 4 else bytes([i % 256, 0, 1, 2]),
            "d64": None if i % 12 == 11 else dt.date(1999, 1, 1) + dt.timedelta(days=i),
            "dec": None if i % 13 == 0 else Decimal(i * 1001) / 1000,
        })
    table = pa.Table.from_pylist(out, schema=SCHEMA.remove(SCHEMA.get_field_index("half")))
    half = pa.array(np.array([i / 8 for i in range(lo, hi)], dtype=np.float16))
    return table.append_column(SCHEMA.field("half"), half)


def same(got: pa.Table, want: pa.Table, where: str) -> None:
    assert got.num_rows == want.num_rows, where
    assert got.equals(want), f"{where}: values differ"
    for g, w in zip(got.schema, want.schema, strict=True):
        assert g.type == w.type, f"{where}: column {w.name} reads as {g.type}, want {w.type}"
    assert got.to_pylist() == want.to_pylist(), where


@pytest.mark.parametrize("max_rows", [None, 35])
def test_nested_round_trip(tmp_path: Path, max_rows: int | None) -> None:
    pds = ParquetDatasetStore(LocalStore(tmp_path), max_rows_per_file=max_rows,
                              row_group_size=20)
    data = nested(0, 100)
    m = pds.write_dataset(data, "silver/events")
    assert m.row_count == 100 and len(m.parts) == (1 if max_rows is None else 3)
    same(pds.read_dataset("silver/events"), data, "read_dataset")
    same(pds.read_dataset("silver/events", columns=["payload", "scores"]),
         data.select(["payload", "scores"]), "projection")
    got = pds.read_batches("silver/events", filter="id >= 90").read_all()
    same(got, data.filter(pc.field("id") >= 90), "filtered read")
    plan, _ = pds.plan_read("silver/events", None, filter="id < 10")
    assert plan.row_groups_pruned > 0, "statistics of id prune row groups beside nested columns"


def test_remote_store_reads_caslake_nested_and_back(tmp_path: Path) -> None:
    rs_mod = pytest.importorskip("remote_store.ext.parquet")
    from remote_store import Store
    from remote_store.backends import LocalBackend

    ours = ParquetDatasetStore(LocalStore(tmp_path), max_rows_per_file=30)
    theirs = rs_mod.ParquetDatasetStore(Store(LocalBackend(str(tmp_path))))
    data = nested(0, 70)
    ours.write_dataset(data, "silver/mine")
    # remote-store returns what Parquet reads (a list's item named 'element', date64
    # as date32): the same values, compared in the written schema
    same(theirs.read_dataset("silver/mine").cast(data.schema), data,
         "remote-store reads caslake's")
    theirs.write_dataset(data, "silver/theirs")
    same(ours.read_dataset("silver/theirs"), data, "caslake reads remote-store's")
    got = ours.read_batches("silver/theirs", filter="id BETWEEN 5 AND 9").read_all()
    same(got, data.filter((pc.field("id") >= 5) & (pc.field("id") <= 9)), "filtered")
