"""Clustering compaction: ``compact(zorder_by=...)``, ``compact(sort_by=...)`` and the
``clustering.columns`` property.

The acceptance measure: a randomly ordered table of 200,000 rows in tiny files,
where a point read opens every file, is z-ordered by ``(id, ts)``; afterwards a
point read opens at most 2 segments (counted as the scan counts them: segment
summaries that may match) and at most 2 files (the scan plan's), the rows equal
pyarrow's copy of the input, and a second compaction is a no-op.  Files are read
back with pyarrow to check they are disjoint in key space, hold one partition
each, and that deleted rows stay deleted."""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Callable
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import caslake
from caslake.api import Table
from caslake.core import summary_matcher
from caslake.errors import InvalidArgument, UnknownColumn
from caslake.expr import compile_where
from caslake.ops.cluster import column_keys, z_values

N = 200_000
TS = pa.timestamp("ms")
SCHEMA = pa.schema([("id", pa.int64()), ("ts", TS), ("region", pa.string()),
                    ("v", pa.float64())])
TINY = caslake.WriteOptions(target_file_size=48 * 1024, row_group_size=16 * 1024)
START = dt.datetime(2026, 1, 1)


def random_rows(n: int, seed: int, first_id: int = 0) -> pa.Table:
    """Rows in random order: unique ids, timestamps independent of the ids."""
    rng = np.random.default_rng(seed)
    ids = rng.permutation(n) + first_id
    ms = rng.integers(0, 86_400_000 * 365, n) + (first_id * 1000)
    return pa.table({"id": ids, "ts": pa.array(ms, TS),
                     "region": pa.array(np.array(["eu", "us", "ap"])[ids % 3]),
                     "v": rng.random(n)}, schema=SCHEMA)


def build(uri: str, data: pa.Table, appends: int = 8, **kw: object) -> Table:
    t = caslake.create_table(uri, SCHEMA, write_options=TINY, **kw)  # type: ignore[arg-type]
    step = -(-data.num_rows // appends)
    for lo in range(0, data.num_rows, step):
        t.append(data.slice(lo, step))
    return t


def point_read(t: Table, row: dict[str, object]) -> tuple[int, int, pa.Table]:
    """Segments and files a point read on ``id`` and ``ts`` opens, and its rows."""
    ts = row["ts"]
    assert isinstance(ts, dt.datetime)
    where = f"id = {row['id']} AND ts = TIMESTAMP '{ts.isoformat()}'"
    snap = t.refresh().snapshot
    match = summary_matcher(compile_where(where, t.schema), schema=snap.manifest.schema)
    segments = sum(1 for s in snap.manifest.segments
                   if not s.is_object or match(s.stats or {}, s.row_count, s.manifest))
    scan = t.scan(where=where)
    return segments, len(scan.plan().tasks), scan.to_arrow()


def probes(t: Table, data: pa.Table, k: int = 25) -> list[tuple[int, int]]:
    rng = np.random.default_rng(99)
    out = []
    for i in rng.integers(0, data.num_rows, k).tolist():
        row = data.slice(i, 1).to_pylist()[0]
        segs, files, got = point_read(t, row)
        assert got.to_pylist() == [row]
        out.append((segs, files))
    return out


def same_rows(t: Table, expected: pa.Table) -> None:
    got = t.to_arrow().sort_by("id")
    assert got.equals(expected.sort_by("id"))


def data_files(t: Table) -> list[pa.Table]:
    return [pq.read_table(f["uri"].removeprefix("file://")) for f in t.live_files()]


def test_zorder_makes_a_point_read_open_one_file(tmp_path: object) -> None:
    data = random_rows(N, 1)
    t = build(f"{tmp_path}/t", data)
    before = probes(t, data, 2)
    files_before = len(t.live_files())
    assert files_before >= 40 and min(f for _, f in before) >= files_before * 0.9
    res = t.compact(zorder_by=["id", "ts"])
    assert not res.noop and res.files_removed == files_before
    assert t.snapshot.manifest.operation_params["clustering"] == "zorder(id, ts)"
    after = probes(t, data)
    assert max(s for s, _ in after) <= 2 and max(f for _, f in after) <= 2, after
    same_rows(t, data)
    # every file lies in a z-cell: no two files' (id, ts) boxes intersect
    boxes = [(pc.min(f["id"]).as_py(), pc.max(f["id"]).as_py(), pc.min(f["ts"]).as_py(),
              pc.max(f["ts"]).as_py()) for f in data_files(t)]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert a[1] < b[0] or b[1] < a[0] or a[3] < b[2] or b[3] < a[2], (a, b)
    again = t.compact(zorder_by=["id", "ts"])
    assert again.noop
    # new rows in a new key range: only their own (overlapping) files are rewritten
    kept = {f["path"] for f in t.live_files()}
    more = random_rows(4_000, 2, first_id=N)
    t.append(more.slice(0, 2_000))
    t.append(more.slice(2_000))
    res = t.compact(zorder_by=["id", "ts"])
    assert res.files_removed == 2
    assert kept <= {f["path"] for f in t.live_files()}
    same_rows(t, pa.concat_tables([data, more]))


def test_sort_by_cuts_files_where_the_first_column_changes(tmp_path: object) -> None:
    data = random_rows(40_000, 3)
    t = build(f"{tmp_path}/t", data, appends=2)
    t.delete("id % 10 = 0")
    live = data.filter(pa.array(data["id"].to_numpy() % 10 != 0))
    res = t.compact(sort_by=["region", "id"])
    assert not res.noop
    same_rows(t, live)
    files = data_files(t)
    assert len(files) >= 3
    spans = []
    for f in files:
        key = list(zip(f["region"].to_pylist(), f["id"].to_pylist(), strict=True))
        assert key == sorted(key)  # sorted within the file
        spans.append((key[0], key[-1]))
    spans.sort()
    assert all(a[1] < b[0] for a, b in itertools.pairwise(spans))  # disjoint
    assert t.compact(sort_by=["region", "id"]).noop


def test_the_clustering_property_makes_every_compaction_cluster(tmp_path: object) -> None:
    data = random_rows(20_000, 4)
    t = build(f"{tmp_path}/t", data, appends=2,
              properties={"clustering.columns": "zorder(ts, id)"})
    res = t.compact()
    assert t.snapshot.manifest.operation_params["clustering"] == "zorder(ts, id)"
    assert not res.noop and t.compact().noop
    same_rows(t, data)
    with pytest.raises(InvalidArgument, match=r"clustering\.columns"):  # refused when set
        t.set_properties({"clustering.columns": "order(id)"})


def test_partitions_are_kept_apart(tmp_path: object) -> None:
    data = random_rows(30_000, 5)
    t = build(f"{tmp_path}/t", data, appends=3, partition_by=["region"])
    t.compact(zorder_by=["id", "ts"])
    same_rows(t, data)
    entries = t.io.live_files(t.refresh().snapshot)
    assert all(f.partition is not None for f in entries)
    for f in data_files(t):
        assert len(set(f["region"].to_pylist())) == 1
    assert t.compact(zorder_by=["id", "ts"]).noop


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"sort_by": ["id"], "zorder_by": ["id"]}, InvalidArgument, "not both"),
    ({"zorder_by": []}, InvalidArgument, "non-empty"),
    ({"zorder_by": "id"}, InvalidArgument, "list of column names"),
    ({"sort_by": ["id", "id"]}, InvalidArgument, "twice"),
    ({"zorder_by": ["nope"]}, UnknownColumn, "nope"),
    ({"zorder_by": ["id", "blob"]}, InvalidArgument, "'blob'"),
])
def test_bad_clustering_is_a_typed_error(tmp_path: object, kwargs: dict[str, object],
                                         error: type[Exception], match: str) -> None:
    t = caslake.create_table(f"{tmp_path}/t", pa.schema([("id", pa.int64()),
                                                         ("blob", pa.binary())]))
    t.append(pa.table({"id": [1, 2], "blob": [b"a", b"b"]}))
    with pytest.raises(error, match=match):
        t.compact(**kwargs)  # type: ignore[arg-type]


NULLABLE: list[tuple[pa.DataType, Callable[[np.random.Generator], list[object]]]] = [
    (pa.int64(), lambda r: [int(x) for x in r.integers(-2**62, 2**62, 300)]),
    (pa.int8(), lambda r: [int(x) for x in r.integers(-128, 128, 300)]),
    (pa.uint32(), lambda r: [int(x) for x in r.integers(0, 2**32, 300)]),
    (pa.float64(), lambda r: [float(x) for x in r.normal(0, 1e6, 300)] + [-0.0, float("inf"),
                                                                          float("-inf")]),
    (pa.float32(), lambda r: [float(x) for x in r.normal(0, 10, 300)]),
    (pa.string(), lambda r: ["".join(r.choice(list("abcé\u4e2d"), r.integers(0, 12)))
                             for _ in range(300)]),
    (pa.date32(), lambda r: [dt.date(1970, 1, 1) + dt.timedelta(days=int(x))
                             for x in r.integers(-30000, 30000, 300)]),
    (pa.timestamp("us"), lambda r: [START + dt.timedelta(microseconds=int(x))
                                    for x in r.integers(-10**14, 10**14, 300)]),
    (pa.decimal128(12, 3), lambda r: [None if x % 7 == 0 else
                                      Decimal(int(x)) / 1000
                                      for x in r.integers(-10**11, 10**11, 300)]),
    (pa.bool_(), lambda r: [bool(x) for x in r.integers(0, 2, 300)]),
]


@pytest.mark.parametrize(("arrow_type", "values"), NULLABLE,
                         ids=[str(t) for t, _ in NULLABLE])
def test_z_keys_preserve_pyarrows_order(arrow_type: pa.DataType,
                                        values: Callable[[np.random.Generator], list[object]]
                                        ) -> None:
    """Keys never decrease along pyarrow's own sort (NULLs first), at any width."""
    rng = np.random.default_rng(7)
    vals = values(rng)
    arr = pa.array([None, *vals, None], arrow_type)
    order = pc.sort_indices(pa.table({"a": arr}),
                            sort_keys=[("a", "ascending", "at_start")]).to_numpy()
    for bits in (64, 32, 21, 8):
        keys = column_keys(arr, bits)[order]
        assert bool((keys[1:] >= keys[:-1]).all()), (arrow_type, bits)
        assert int(keys.max()) < 2 ** bits
    # a z-value orders like the first column where the other is constant
    z = z_values([arr, pa.array([1] * len(arr))])
    assert bool((z[order][1:] >= z[order][:-1]).all())


def test_the_clustering_property_names_columns_that_exist_and_follows_renames(
        tmp_path: object) -> None:
    """Delta's rule for clustering columns: the property is checked against the schema
    when set (nothing commits otherwise), a rename rewrites it in the same version,
    and dropping a clustering column is refused until the property changes.  Then a
    plain compact still clusters, checked by reading the written file with pyarrow."""
    from caslake.errors import InvalidSchemaChange

    t = caslake.create_table(f"{tmp_path}/t", pa.schema([("id", pa.int64()),
                                                          ("s", pa.string()),
                                                          ("n", pa.int64())]))
    for odd in (0, 1):  # the two files' id ranges overlap: not clustered yet
        t.append(pa.table({"id": list(range(98 + odd, -1, -2)), "s": ["x"] * 50,
                           "n": list(range(50))}))
    before = t.version
    with pytest.raises(UnknownColumn, match="nope"):
        t.set_properties({"clustering.columns": "zorder(nope)"})
    with pytest.raises(InvalidArgument, match=r"nested|order"):
        caslake.create_table(f"{tmp_path}/u", pa.schema([
            ("p", pa.struct([("q", pa.int64())]))])).set_properties(
                {"clustering.columns": "sort(p)"})
    assert t.version == before  # nothing committed
    t.set_properties({"clustering.columns": "sort(s, id)"})
    t.update_schema().rename_column("s", "s2").commit()
    assert t.snapshot.manifest.properties["clustering.columns"] == "sort(s2, id)"
    with pytest.raises(InvalidSchemaChange, match="clustering"):
        t.update_schema().drop_column("id").commit()
    t.update_schema().drop_column("n").commit()  # not a clustering column
    t.compact()
    files = [f["uri"].removeprefix("file://") for f in t.live_files()]
    runs = [pq.read_table(f)["id"].to_pylist() for f in files]
    assert all(r == sorted(r) for r in runs)  # each file in key order
    assert sorted(i for r in runs for i in r) == list(range(100))
    assert sorted(runs)[0][-1] < sorted(runs)[-1][0] or len(runs) == 1  # one sorted run


NESTED = pa.schema([("id", pa.int64()),
                    ("dev", pa.struct([("os", pa.string()),
                                       ("geo", pa.struct([("lat", pa.float64())]))])),
                    ("tags", pa.list_(pa.struct([("k", pa.string())])))])


def nested_rows(n: int, seed: int) -> pa.Table:
    """Random rows; some ``dev`` and ``dev.geo`` are NULL (their leaves read as NULL)."""
    rng = np.random.default_rng(seed)
    ids = rng.permutation(n)
    lat = rng.normal(0, 40, n)
    dev = [None if i % 97 == 0 else
           {"os": ["ios", "android", "linux", "web"][i % 4],
            "geo": None if i % 31 == 0 else {"lat": float(lat[j])}}
           for j, i in enumerate(ids.tolist())]
    return pa.table({"id": ids, "dev": pa.array(dev, NESTED.field("dev").type),
                     "tags": [[{"k": str(i % 5)}] for i in ids.tolist()]}, schema=NESTED)


def test_clustering_by_struct_fields_orders_files_as_duckdb_sorts_them(tmp_path: object) -> None:
    """``sort_by``/``zorder_by`` and the property take fields inside structs
    (``dev.os``, ``dev.geo.lat``; NULL under a NULL struct, first).  Each written
    file is read by DuckDB: sorted by the key as DuckDB sorts it, and the files'
    key ranges are disjoint; the rows equal the input; a second compaction is a
    no-op (the nested leaves' statistics give each file's box)."""
    duckdb = pytest.importorskip("duckdb")
    data = nested_rows(30_000, 5)
    t = caslake.create_table(f"{tmp_path}/t", NESTED, write_options=TINY)
    for lo in range(0, data.num_rows, 7_500):
        t.append(data.slice(lo, 7_500))
    res = t.compact(sort_by=["DEV.os", "id"])  # resolved per step as a predicate is
    assert not res.noop and t.snapshot.manifest.operation_params["clustering"] == \
        "sort(dev.os, id)"
    assert t.to_arrow().sort_by("id").equals(data.sort_by("id"))
    files = [f["uri"].removeprefix("file://") for f in t.live_files()]
    assert len(files) >= 3
    con = duckdb.connect()
    spans = []
    for f in files:
        got = con.execute(f"SELECT dev.os, id FROM read_parquet('{f}')").fetchall()
        want = con.execute(f"SELECT dev.os, id FROM read_parquet('{f}') "
                           "ORDER BY dev.os NULLS FIRST, id").fetchall()
        assert got == want  # in key order within the file
        spans.append((got[0], got[-1]))
    key = [((a is not None, a or ""), i) for (a, i), _ in spans]  # NULL first
    order = sorted(range(len(spans)), key=lambda j: key[j])
    for a, b in itertools.pairwise(order):  # cut only where dev.os changes
        assert spans[a][1][0] != spans[b][0][0] or spans[a][1][1] < spans[b][0][1]
    assert t.compact(sort_by=["dev.os", "id"]).noop

    res = t.compact(zorder_by=["dev.geo.lat", "id"])
    assert not res.noop
    assert t.to_arrow().sort_by("id").equals(data.sort_by("id"))
    assert t.compact(zorder_by=["dev.geo.lat", "id"]).noop
    point = data.slice(123, 1).to_pylist()[0]
    lat = point["dev"]["geo"]["lat"]
    scan = t.scan(where=f"dev.geo.lat = {lat!r} AND id = {point['id']}")
    assert scan.to_arrow().to_pylist() == [point]
    assert len(scan.plan().tasks) <= 2  # the boxes are disjoint: the point is in one file


def test_struct_field_clustering_follows_renames_and_refuses_lists(tmp_path: object) -> None:
    from caslake.errors import InvalidSchemaChange, UnknownField

    t = caslake.create_table(f"{tmp_path}/t", NESTED)
    t.append(nested_rows(100, 1))
    before = t.version
    with pytest.raises(UnknownField, match=r"'dev\.nope'.*'dev' has fields os, geo"):
        t.set_properties({"clustering.columns": "sort(dev.nope)"})
    with pytest.raises(InvalidArgument, match=r"tags\.element\.k.*tags is a list"):
        t.compact(sort_by=["tags.element.k"])
    with pytest.raises(InvalidArgument, match=r"'dev\.geo'.*struct"):
        t.compact(zorder_by=["dev.geo", "id"])
    assert t.version == before
    t.set_properties({"clustering.columns": "zorder(dev.geo.lat, id)"})
    t.update_schema().rename_column("dev.geo", "place").commit()
    assert t.snapshot.manifest.properties["clustering.columns"] == "zorder(dev.place.lat, id)"
    with pytest.raises(InvalidSchemaChange, match=r"dev\.place\.lat.*clustering"):
        t.update_schema().drop_column("dev.place").commit()
    t.append(t.to_arrow())  # a second file over the same key range: out of order
    res = t.compact()  # by the property, under the field's new name
    assert not res.noop
    assert t.snapshot.manifest.operation_params["clustering"] == "zorder(dev.place.lat, id)"
    assert t.to_arrow().num_rows == 200
