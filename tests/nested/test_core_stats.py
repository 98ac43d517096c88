"""Manifest statistics of primitive fields inside structs, keyed by field id,
equal to pyarrow's own min/max/null count of the same values; none for fields
inside lists and maps; they survive the manifest's and the segments' round trip."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pyarrow.compute as pc

import caslake
from caslake.core import WriteOptions
from caslake.format.stats import field_stats
from tests.nested.core_data import SCHEMA, nested_rows


def _leaf(data: pa.Table, *path: str) -> pa.Array:
    """A struct leaf's values, NULL where any struct above it is NULL."""
    arr = data.column(path[0]).combine_chunks()
    for name in path[1:]:
        arr = pc.struct_field(arr, name)
    return arr


def test_struct_leaf_stats_by_field_id_equal_pyarrows() -> None:
    t = caslake.create_table(f"memory://{uuid.uuid4().hex}", SCHEMA,
                             write_options=WriteOptions(row_group_size=4 * 1024))
    data = nested_rows(0, 2000)
    t.append(data)
    reopened = caslake.Table.load(t.store)  # stats as parsed from the stored manifest
    schema = reopened.table_schema
    (f,) = reopened.io.live_files(reopened.snapshot)
    for path in (("dev", "os"), ("dev", "ver"), ("dev", "geo", "lat")):
        fld = schema.find_path(".".join(path))
        assert fld is not None
        st = field_stats(f, fld.id, schema, key="manifest")
        values = _leaf(data, *path)
        assert st is not None, path
        assert st.null_count == values.null_count, path
        mm = pc.min_max(values)
        assert (st.min, st.max) == (mm["min"].as_py(), mm["max"].as_py()), path
    # lon is NULL in every row: no bounds, all NULL
    lon = schema.find_path("dev.geo.lon")
    assert lon is not None
    st = field_stats(f, lon.id, schema, key="manifest")
    assert st is not None and st.min is None and st.null_count == 2000
    # nothing for fields inside a list or a map, nor for a struct itself
    for path in ("items.element.price", "attrs.value", "dev", "dev.geo"):
        fld = schema.find_path(path)
        assert fld is not None
        assert field_stats(f, fld.id, schema, key="manifest") is None, path
    # the top-level primitive column keeps its stats
    id_stats = field_stats(f, schema.field("id").id, schema, key="manifest")
    assert id_stats is not None and (id_stats.min, id_stats.max) == (0, 1999)


def test_segment_summaries_carry_struct_leaf_stats() -> None:
    t = caslake.create_table(f"memory://{uuid.uuid4().hex}", SCHEMA)
    for i in range(5):
        t.append(nested_rows(i * 100, 100))
    reopened = caslake.Table.load(t.store)
    ver = reopened.table_schema.find_path("dev.ver")
    assert ver is not None
    # every file carries the leaf's stats after the manifest's (and segments') parse
    files = reopened.io.live_files(reopened.snapshot)
    assert len(files) == 5
    assert all(ver.id in f.stats for f in files)
    assert reopened.scan().count() == 500
