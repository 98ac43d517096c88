"""Clones of clones, any depth: every level reads right, at every version.

A chain ``t0 <- t1 <- ... <- tN`` (each a clone of the one before it), with
appends and deletes at each level whose deletes touch the files of every
ancestor (so each level's tombstones name data files under several aliases,
and a deeper clone sees them re-keyed once more).  Every level and every
version is compared with a plain model of its ids, and aggregates over the
scan are compared with DuckDB and pyarrow over the expected rows.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import caslake
from caslake.ops.verify import verify_table

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
LATER = datetime.now(UTC) + timedelta(days=3650)
BLOCK = 1_000  # level k appends ids in [k * BLOCK, (k + 1) * BLOCK)


def rows(ids: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"v{i % 13}" for i in ids]},
                    schema=SCHEMA)


class Chain:
    """The tables of a clone chain and the model: uri -> version -> ids."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.uris: list[str] = []
        self.model: dict[str, dict[int, frozenset[int]]] = {}

    def create(self) -> str:
        uri = f"{self.root}/t0"
        caslake.create_table(uri, SCHEMA)
        self.uris.append(uri)
        self.model[uri] = {0: frozenset()}
        return uri

    def clone(self, parent: str, version: int | None = None) -> str:
        uri = f"{self.root}/t{len(self.uris)}"
        caslake.clone(parent, uri, version=version)
        history = self.model[parent]
        self.uris.append(uri)
        self.model[uri] = {0: history[max(history) if version is None else version]}
        return uri

    def head(self, uri: str) -> frozenset[int]:
        return self.model[uri][max(self.model[uri])]

    def _commit(self, uri: str, version: int, ids: frozenset[int]) -> None:
        assert version == max(self.model[uri]) + 1
        self.model[uri][version] = ids

    def append(self, uri: str, ids: list[int]) -> None:
        r = caslake.open_table(uri).append(rows(ids))
        self._commit(uri, r.version, self.head(uri) | set(ids))

    def delete(self, uri: str, ranges: list[tuple[int, int]]) -> None:
        where = " OR ".join(f"id BETWEEN {lo} AND {hi}" for lo, hi in ranges)
        r = caslake.open_table(uri).delete(where)
        gone = {i for i in self.head(uri) if any(lo <= i <= hi for lo, hi in ranges)}
        if r.version is not None and r.version > max(self.model[uri]):
            self._commit(uri, r.version, self.head(uri) - gone)
        else:
            assert not gone


def scan_ids(uri: str, **kw: object) -> list[int]:
    t = caslake.open_table(uri)
    got = t.scan(columns=["id"], **kw).to_arrow()  # type: ignore[arg-type]
    return sorted(got.column("id").to_pylist())


def check_level(chain: Chain, uri: str, *, versions: bool = True) -> None:
    """Every retained version of ``uri`` reads as the model says; at the head also
    through a where predicate and the streaming reader, and aggregates agree with
    DuckDB and pyarrow over the expected rows."""
    for version, ids in sorted(chain.model[uri].items()):
        if versions or version == max(chain.model[uri]):
            assert scan_ids(uri, version=version) == sorted(ids), (uri, version)
    expected = sorted(chain.head(uri))
    t = caslake.open_table(uri)
    got = t.scan().to_arrow()
    assert sorted(got.column("id").to_pylist()) == expected
    assert got.column("v").to_pylist() == [f"v{i % 13}" for i in got.column("id").to_pylist()]
    streamed = pa.Table.from_batches(list(t.scan().to_reader()), schema=got.schema)
    assert sorted(streamed.column("id").to_pylist()) == expected
    lo, hi = BLOCK // 2, BLOCK * 2 + 100
    filtered = t.scan(columns=["id"], where=f"id BETWEEN {lo} AND {hi} AND v <> 'v3'").to_arrow()
    want = rows(expected)
    want_f = want.filter(pc.and_(pc.and_(pc.greater_equal(want["id"], lo),
                                         pc.less_equal(want["id"], hi)),
                                 pc.not_equal(want["v"], "v3")))
    assert sorted(filtered.column("id").to_pylist()) == sorted(want_f.column("id").to_pylist())
    q = "SELECT count(*), sum(id), min(id), max(id), count(DISTINCT v) FROM {}"
    con = duckdb.connect()
    con.register("got", got)
    con.register("want", want)
    assert con.execute(q.format("got")).fetchall() == con.execute(q.format("want")).fetchall()
    if expected:
        assert pc.sum(got["id"]).as_py() == pc.sum(want["id"]).as_py()


def block(level: int, lo: int, hi: int) -> list[int]:
    return list(range(level * BLOCK + lo, level * BLOCK + hi))


def build_chain(tmp_path, depth: int) -> Chain:  # type: ignore[no-untyped-def]
    """t0 .. t<depth>: each level appends two files of its own block, then deletes
    a few ids from the block of every level up to itself (every ancestor's files,
    its own, and ids its ancestors already deleted)."""
    chain = Chain(str(tmp_path))
    uri = chain.create()
    for level in range(depth + 1):
        if level:
            uri = chain.clone(uri)
        chain.append(uri, block(level, 0, 300))
        chain.append(uri, block(level, 300, 600))
        chain.delete(uri, [(b * BLOCK + 10 * level, b * BLOCK + 10 * level + 4)
                           for b in range(level + 1)]
                     + [(b * BLOCK + 400 + level, b * BLOCK + 400 + level)
                        for b in range(level + 1)])
    return chain


@pytest.mark.parametrize("depth", [2, 3, 5])
def test_every_level_of_a_clone_chain_reads_at_every_version(tmp_path, depth) -> None:  # type: ignore[no-untyped-def]
    chain = build_chain(tmp_path, depth)
    for uri in chain.uris:
        check_level(chain, uri)
    assert verify_table(caslake.open_table(chain.uris[-1]).store, deep=True,
                        all_versions=True).ok


def test_a_clone_of_a_clone_with_its_own_deletes_reads(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The issue's case: the middle table deletes from its source's files."""
    chain = Chain(str(tmp_path))
    src = chain.create()
    chain.append(src, list(range(0, 20_000)))
    mid = chain.clone(src)
    chain.append(mid, list(range(20_000, 21_000)))
    chain.delete(mid, [(10_000, 10_999), (20_100, 20_109)])
    leaf = chain.clone(mid)
    check_level(chain, leaf)


def test_a_clone_at_an_older_version_of_a_clone(tmp_path) -> None:  # type: ignore[no-untyped-def]
    chain = build_chain(tmp_path, 2)
    t2 = chain.uris[2]
    old = chain.clone(t2, version=2)  # before t2's own delete
    chain.delete(old, [(5, 5), (BLOCK + 7, BLOCK + 9), (2 * BLOCK + 599, 2 * BLOCK + 599)])
    deeper = chain.clone(old, version=0)
    chain.delete(deeper, [(0, 2 * BLOCK + 50)])
    for uri in (old, deeper):
        check_level(chain, uri)


def test_compacting_and_gc_at_the_middle_of_a_chain(tmp_path) -> None:  # type: ignore[no-untyped-def]
    chain = build_chain(tmp_path, 4)
    mid = chain.uris[2]
    t = caslake.open_table(mid)
    r = t.compact(target_file_size=1 << 30, deleted_fraction=0.0001)
    chain._commit(mid, r.version, chain.head(mid))
    t.gc(retention=timedelta(0), force=True, now=LATER)
    chain.model[mid] = {r.version: chain.head(mid)}  # older versions expired
    # The children still read every version (their holds keep what they use).
    for uri in chain.uris:
        check_level(chain, uri)
    # And a child keeps writing over the compacted middle.
    leaf = chain.uris[3]
    chain.delete(leaf, [(b * BLOCK + 100, b * BLOCK + 110) for b in range(4)])
    chain.append(leaf, block(3, 700, 710))
    check_level(chain, leaf)
    check_level(chain, chain.clone(leaf))


def test_purge_at_the_middle_of_a_chain(tmp_path) -> None:  # type: ignore[no-untyped-def]
    chain = build_chain(tmp_path, 3)
    mid = chain.uris[2]
    ranges = [(b * BLOCK + 200, b * BLOCK + 219) for b in range(3)]
    report = caslake.open_table(mid).purge(" OR ".join(f"id BETWEEN {lo} AND {hi}"
                                                     for lo, hi in ranges))
    gone = {i for i in chain.head(mid) if any(lo <= i <= hi for lo, hi in ranges)}
    chain._commit(mid, report.version, chain.head(mid) - gone)  # type: ignore[arg-type]
    for uri in chain.uris:
        check_level(chain, uri)
    check_level(chain, chain.clone(mid))


def test_branches_and_tags_on_a_clone_of_a_clone(tmp_path) -> None:  # type: ignore[no-untyped-def]
    chain = build_chain(tmp_path, 2)
    leaf = chain.uris[2]
    t = caslake.open_table(leaf)
    t.create_tag("before")
    head = chain.head(leaf)
    t.create_branch("dev")
    dev = t.branch("dev")
    dev.delete("id BETWEEN 50 AND 1060 OR id = 2001")
    dev_ids = {i for i in head if not (50 <= i <= 1060 or i == 2001)}
    assert scan_ids(leaf, ref="dev") == sorted(dev_ids)
    assert scan_ids(leaf, tag="before") == sorted(head)
    assert scan_ids(leaf) == sorted(head)
    tagged = f"{tmp_path}/from_tag"
    caslake.clone(leaf, tagged, tag="before")
    assert scan_ids(tagged) == sorted(head)
    branched = f"{tmp_path}/from_branch"
    caslake.clone(leaf, branched, branch="dev")
    assert scan_ids(branched) == sorted(dev_ids)


# --- property: random chains ---------------------------------------------------------

op = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 40)),
    st.tuples(st.just("delete"), st.lists(st.tuples(st.integers(0, 5), st.integers(0, 60),
                                                    st.integers(0, 30)),
                                          min_size=1, max_size=3)),
)
level_ops = st.lists(op, min_size=0, max_size=3)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(levels=st.lists(st.tuples(st.booleans(), level_ops), min_size=2, max_size=5),
       data=st.data())
def test_random_clone_chains_read_like_the_model(tmp_path_factory, levels, data) -> None:  # type: ignore[no-untyped-def]
    """Random chains: each level is a clone (of the head or of a random older
    version) of the one before, then random appends and deletes whose ranges
    fall in any level's block."""
    chain = Chain(str(tmp_path_factory.mktemp("chain")))
    uri = chain.create()
    chain.append(uri, block(0, 0, 50))
    for level, (at_old, ops) in enumerate(levels):
        if level:
            versions = sorted(chain.model[uri])
            version = data.draw(st.sampled_from(versions)) if at_old else None
            note(f"level {level}: clone of t{level - 1} at {version}")
            uri = chain.clone(uri, version)
        used = 50 if level == 0 else 0
        for kind, arg in ops:
            note(f"t{level}: {kind} {arg}")
            if kind == "append":
                chain.append(uri, block(level, used, used + arg))  # type: ignore[operator]
                used += arg  # type: ignore[operator]
            else:
                chain.delete(uri, [(b * BLOCK + s, b * BLOCK + s + n)
                                   for b, s, n in arg])  # type: ignore[union-attr]
    for uri in chain.uris:
        for version, ids in sorted(chain.model[uri].items()):
            assert scan_ids(uri, version=version) == sorted(ids), (uri, version)
    check_level(chain, chain.uris[-1], versions=False)


# --- the renaming is checked ---------------------------------------------------------

def _mapping(ref_path: str, ref_files: list[str], entries: list[str]):  # type: ignore[no-untyped-def]
    from pyroaring import BitMap

    from caslake.core.read.deletion_mask import _entries_as_keys_of_this_table
    from caslake.format.manifest import TombstoneRef
    from caslake.format.tombstone import FileDeletes, Tombstone

    tomb = Tombstone("t", "c", tuple(FileDeletes(p, 10, positions=BitMap([1]))
                                     for p in entries))
    ref = TombstoneRef(ref_path, 1, "e", dict.fromkeys(ref_files, 1))
    return {k: v.path for k, v in _entries_as_keys_of_this_table(ref, tomb).items()}


def test_a_tombstone_of_a_clone_is_read_by_one_consistent_renaming() -> None:
    from caslake.errors import CorruptMetadata

    # Written by a clone (here s0) whose own s0 and s1 are our s1 and s2.
    got = _mapping("tombstone/x=s0/t.del",
                   ["data/x=s0/a.parquet", "data/x=s1/b.parquet", "data/x=s2/c.parquet"],
                   ["data/a.parquet", "data/x=s0/b.parquet", "data/x=s1/c.parquet",
                    "data/x=s0/gone.parquet"])
    assert got == {"data/x=s0/a.parquet": "data/a.parquet",
                   "data/x=s1/b.parquet": "data/x=s0/b.parquet",
                   "data/x=s2/c.parquet": "data/x=s1/c.parquet"}
    bad = [
        # the writer's own file is not under the tombstone's alias here
        ("tombstone/x=s0/t.del", ["data/x=s1/a.parquet"], ["data/a.parquet"]),
        # the writer's external file cannot be one of our own, nor the writer's own
        ("tombstone/x=s0/t.del", ["data/b.parquet"], ["data/x=s0/b.parquet"]),
        ("tombstone/x=s0/t.del", ["data/x=s0/b.parquet"], ["data/x=s0/b.parquet"]),
        # one alias of the writer renamed two ways, or two onto one
        ("tombstone/x=s0/t.del", ["data/x=s1/b.parquet", "data/x=s2/c.parquet"],
         ["data/x=s0/b.parquet", "data/x=s0/c.parquet"]),
        ("tombstone/x=s0/t.del", ["data/x=s1/b.parquet", "data/x=s1/c.parquet"],
         ["data/x=s0/b.parquet", "data/x=s3/c.parquet"]),
        # our own tombstone names our keys exactly
        ("tombstone/t.del", ["data/x=s1/b.parquet"], ["data/x=s0/b.parquet"]),
        ("tombstone/x=s0/t.del", ["data/x=s0/missing.parquet"], ["data/a.parquet"]),
    ]
    for ref_path, files, entries in bad:
        with pytest.raises(CorruptMetadata):
            _mapping(ref_path, files, entries)
