"""float16 columns (top level and inside a struct) through every path that reads
Parquet footer statistics: append (manifest statistics), filtered scans (row
groups pruned by footer statistics), delete, compaction and purge; Parquet
gives a float16 bound as two raw bytes, decoded to the same min/max numpy
computes on the values (NaN left out, an infinite bound unknown).  The exports
refuse float16 with a typed error naming the column."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import caslake
from caslake.errors import ExportUnsupportedType
from caslake.format.parquet import row_group_stats, stats_by_field_id

S = pa.struct([("h", pa.float16()), ("k", pa.int32())])
SCHEMA = pa.schema([("id", pa.int64()), ("h", pa.float16()), ("s", S)])


def _halves(values: list[float | None]) -> pa.Array[Any]:
    mask = np.array([v is None for v in values])
    return pa.array(np.array([0 if v is None else v for v in values], dtype=np.float16),
                    mask=mask)


def _batch(start: int, values: list[float | None]) -> pa.Table:
    ids = list(range(start, start + len(values)))
    h = _halves(values)
    s = pa.StructArray.from_arrays([h, pa.array([i % 3 for i in ids], pa.int32())],
                                   fields=list(S))
    return pa.table({"id": ids, "h": h, "s": s}, schema=SCHEMA)


BATCHES = [
    [0.5, -2.0, None, 3.0],
    [float("nan"), 1.25, None, -0.0],
    [float("inf"), 2.0, 1.0, None],     # an infinite bound: unknown
    [None, None, None, None],          # no bound at all
    [65504.0, -65504.0, 0.099975586, 7.0],
]


def _bounds(values: pa.Array[Any]) -> tuple[float | None, float | None, int]:
    """min/max over the non-NaN values (None if none or one is infinite), nulls."""
    xs = np.array([v for v in values.to_pylist() if v is not None and v == v],
                  dtype=np.float64)
    if not len(xs) or not np.isfinite(xs).all():
        return None, None, values.null_count
    return float(xs.min()), float(xs.max()), values.null_count


def _table(tmp_path: Path) -> tuple[caslake.Table, pa.Table]:
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA)
    parts = []
    for i, values in enumerate(BATCHES):
        part = _batch(i * 10, values)
        t.append(part)
        parts.append(part)
    return t, pa.concat_tables(parts)


def test_footer_and_manifest_statistics_of_float16_equal_numpys(tmp_path: Path) -> None:
    t, _ = _table(tmp_path)
    snap = t.context.refresh()
    schema = snap.manifest.schema
    ids = {"h": schema.field("h").id, "s.h": schema.find_path("s.h").id}  # type: ignore[union-attr]
    files = t.io.live_files(snap)
    assert len(files) == len(BATCHES)
    for f in files:
        path = tmp_path / "t" / f.path
        md = pq.read_metadata(path)
        part = pq.read_table(path)
        lo, hi, nulls = _bounds(part.column("h").combine_chunks())
        footer = row_group_stats(md, 0, {"h": pa.float16()})["h"]
        assert (footer.min, footer.max, footer.null_count) == (lo, hi, nulls)
        want = {"nulls": nulls} | ({} if lo is None else {"min": lo, "max": hi})
        assert dict(f.stats[ids["h"]]) == want
        inner = pc.struct_field(part.column("s").combine_chunks(), "h")
        s_lo, s_hi, _ = _bounds(inner)
        assert stats_by_field_id(md, schema)[ids["s.h"]].get("min") == s_lo
        assert dict(f.stats.get(ids["s.h"], {})).get("max") == s_hi


@pytest.mark.parametrize("where", ["h IS NULL", "h IS NOT NULL", "s.h IS NULL",
                                   "s.h IS NOT NULL and id > 12", "s.k = 1 and h IS NULL"])
def test_filters_on_tables_with_float16_equal_pyarrow(tmp_path: Path, where: str) -> None:
    t, data = _table(tmp_path)
    model = {
        "h IS NULL": pc.is_null(data["h"]),
        "h IS NOT NULL": pc.is_valid(data["h"]),
        "s.h IS NULL": pc.is_null(pc.struct_field(data["s"], "h")),
        "s.h IS NOT NULL and id > 12": pc.and_(pc.is_valid(pc.struct_field(data["s"], "h")),
                                              pc.greater(data["id"], 12)),
        "s.k = 1 and h IS NULL": pc.and_(pc.equal(pc.struct_field(data["s"], "k"), 1),
                                        pc.is_null(data["h"])),
    }[where]
    got = t.scan(where=where).to_arrow().sort_by("id")
    assert got.column("id").to_pylist() == data.filter(model).column("id").to_pylist()


def test_delete_compact_purge_and_exports_of_float16(tmp_path: Path) -> None:
    t, data = _table(tmp_path)
    t.delete("h IS NULL and id < 20")
    t.compact()
    t.purge("s.h IS NULL")
    keep = data.filter(pc.and_(
        pc.invert(pc.and_(pc.is_null(data["h"]), pc.less(data["id"], 20))),
        pc.is_valid(pc.struct_field(data["s"], "h"))))
    got = t.scan().to_arrow().sort_by("id")
    assert got.schema.field("h").type == pa.float16()
    assert str(got.select(["id", "h", "s"]).to_pylist()) == str(keep.to_pylist())  # NaN
    for f in t.io.live_files(t.context.refresh()):
        h = pq.read_table(tmp_path / "t" / f.path).column("h").combine_chunks()
        lo, hi, nulls = _bounds(h)
        stats = dict(f.stats[t.table_schema.field("h").id])
        assert (stats.get("min"), stats.get("max"), stats["nulls"]) == (lo, hi, nulls)
    for export, target in ((t.export_iceberg, "Iceberg"), (t.export_delta, "Delta")):
        with pytest.raises(ExportUnsupportedType) as e:
            export()
        assert e.value.column == "h" and e.value.target == target
