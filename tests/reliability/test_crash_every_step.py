"""Crash (and fail) at every store call of every write operation, and of gc.

For each operation -- append, delete (one of its terms on a struct leaf, ``dev.os``),
upsert, a transaction (delete + append), compaction, purge -- on a small table with
several files, row groups and an existing tombstone, whose columns are flat and nested
(a struct holding a struct, a list, a map; NULLs at every level, compared whole):

1. run the operation once through a :class:`FaultyStore` without faults to
   count its store calls ``N``;
2. for every call index ``i`` in ``1..N``, put the base table back as it was
   built (crash_harness.py's loop and templates: built once per test, restored by
   hard links or shared memory entries; S3 rows build afresh), inject one fault
   at call ``i`` and run the operation again:

   * ``crash``: the process dies at call ``i`` (:class:`SimulatedCrash`); the
     process stays dead, so every later call -- from any thread, including a
     transaction's abort clean-up -- crashes too;
   * ``lost-reply``: call ``i`` is applied, then its reply is lost
     (``TransientStoreError``);
   * ``fail-before``: call ``i`` fails before it reaches the store
     (``TransientStoreError``).

3. then, without faults, the table must: be at the old or the new version and
   hold exactly the old or the new rows (never anything in between), with the
   earlier history unchanged (same manifests; the old version still reads the
   same) and gap-free; pass ``verify_table(deep, all_versions)``; have every
   object a retained version references and, since there is no GC yet, only
   orphans the failed operation wrote itself (nothing that existed before is
   deleted; an orphan manifest only ever sits in the version slot the operation
   aimed at and never shows up in the history); and accept a later append that
   is then visible.

For the fault kinds that are not a crash the operation must either return (and
then its commit is visible exactly once, at the version it reported, under the
commit id it reported) or raise a :class:`CaslakeError`.  A typed error other
than :class:`CommitOutcomeUnknown` claims the commit did not happen, so the
table must then still be at the old version.

gc gets the same three faults at each of its store calls, on a table with an
overwrite (files to collect) and an orphan data file, with a clock 30 days
ahead: the table is then at the old version or at gc's marker with the same
rows, verify passes, nothing referenced is missing, a later commit works, and a
second gc leaves exactly the referenced objects (what the fault left is gone).

Budget: a fault point costs the operation and its check (verify deep, a later
commit), not a rebuild of the base table, which was about half of its time; the
three fault kinds stay separate runs (each leaves other states to check).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import caslake
from caslake.api import CommitResult, Table
from caslake.core.commit import CommitPolicy
from caslake.core.metadata_io import MetadataIO
from caslake.dataset import DatasetIncomplete, ParquetDatasetStore
from caslake.errors import (
    CommitOutcomeUnknown,
    RefAlreadyExists,
    RefNotFound,
    TableNotFound,
)
from caslake.export.delta import DV_PREFIX, LOG_PREFIX
from caslake.export.iceberg import HINT_KEY as ICEBERG_HINT
from caslake.export.iceberg import METADATA_PREFIX
from caslake.export.iceberg import metadata_key as iceberg_metadata_key
from caslake.export.iceberg import read_hint as read_iceberg_hint
from caslake.format.keys import DATA_PREFIX, MANIFEST_PREFIX, SEGMENT_PREFIX, data_file_key
from caslake.format.refs import HOLD_PREFIX
from caslake.ops import clone as clone_module
from caslake.ops.verify import verify_table
from caslake.store import ObjectStore, open_store
from caslake.store.base import PutMode
from caslake.store.faults import Fault, FaultyStore
from caslake.store.memory import forget_memory_space
from caslake.testing.moto_server import DUMMY_KEY_ID, DUMMY_SECRET, REGION
from tests.conftest import make_bucket
from tests.export.readers import (
    caslake_rows,
    deltalake_rows,
    duckdb_delta_rows,
    duckdb_iceberg_rows,
    pyiceberg_rows,
)
from tests.reliability.crash_harness import (
    MODES,
    Point,
    Template,
    fault_each_call,
)

# The loop over the fault points, the fault kinds and the templates are
# tests/reliability/crash_harness.py's.  The flat columns (test_crash_new_ops.py
# builds its own tables with them) ...
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("s", pa.string()),
                    pa.field("f", pa.float64())])
# ... and this suite's table: those plus nested columns -- a struct with a nested
# struct, a list and a map -- whose values have NULLs at every level (issue 29).
GEO = pa.struct([pa.field("lat", pa.float64())])
TABLE_SCHEMA = pa.schema([*SCHEMA, pa.field("dev", pa.struct([pa.field("os", pa.string()),
                                                              pa.field("geo", GEO)])),
                          pa.field("tags", pa.list_(pa.string())),
                          pa.field("attrs", pa.map_(pa.string(), pa.int64()))])
# Small files with several row groups, so every append writes several files and
# deletes address files, row groups and positions (the base: 6 files of 2-3 row groups).
WRITE = caslake.WriteOptions(target_file_size=7_000, row_group_size=3_500)
FAST = CommitPolicy(max_attempts=20, base_backoff_s=0.0001, max_backoff_s=0.001,
                    settle_attempts=3)
PREFIXES = ("data/", "tombstone/", MANIFEST_PREFIX, SEGMENT_PREFIX)

Dev = dict[str, Any]  # {"os": str | None, "geo": {"lat": float | None} | None}
Attrs = list[tuple[str, int | None]]  # a map's entries, as pyarrow lists them
Row = tuple[int, str | None, float | None, Dev | None, list[str | None] | None, Attrs | None]


# --- deterministic data and the model -----------------------------------------------


def _dev(i: int, tag: str) -> Dev | None:
    """NULL struct, NULL leaf, NULL nested struct, NULL nested leaf, or all set."""
    if i % 11 == 0:
        return None
    return {"os": None if i % 3 == 0 else f"{tag}os{i % 4}",
            "geo": None if i % 7 == 1 else {"lat": None if i % 5 == 2 else i * 0.5}}


def _tags(i: int) -> list[str | None] | None:
    """NULL list, empty list, a NULL element, or plain elements."""
    if i % 9 == 0:
        return None
    if i % 9 == 1:
        return []
    return [f"t{i % 5}", None] if i % 2 else [f"t{i % 6}"]


def _attrs(i: int) -> Attrs | None:
    """NULL map, empty map, or two entries (the second's value NULL every third row)."""
    if i % 8 == 0:
        return None
    return [] if i % 8 == 1 else [("k", i), ("n", None if i % 3 else -i)]


def rows(lo: int, hi: int, tag: str = "") -> list[Row]:
    return [(i, None if i % 7 == 0 else f"{tag}s{i % 13}", None if i % 5 == 0 else i * 0.25,
             _dev(i, tag), _tags(i), _attrs(i)) for i in range(lo, hi)]


def arrow(rs: list[Row]) -> pa.Table:
    return pa.table([pa.array([r[k] for r in rs], f.type) for k, f in enumerate(TABLE_SCHEMA)],
                    schema=TABLE_SCHEMA)


def os_is(r: Row, value: str) -> bool:
    """The model of ``dev.os = value`` (a NULL struct or leaf never matches)."""
    return r[3] is not None and r[3]["os"] == value


def same_rows(table: Table, expected: list[Row], version: int | None = None) -> bool:
    """Does the table (at ``version``) hold exactly ``expected`` (ids are unique here)?"""
    got = table.scan(version=version).to_arrow().sort_by("id")
    want = arrow(sorted(expected, key=lambda r: r[0]))
    return got.num_rows == want.num_rows and all(
        got.column(n).equals(want.column(n)) for n in TABLE_SCHEMA.names)


def build(uri: str) -> list[list[Row]]:
    """Create the base table at ``uri``; return the model: rows per version."""
    t = caslake.create_table(uri, TABLE_SCHEMA, write_options=WRITE)
    versions: list[list[Row]] = [[]]
    cur: list[Row] = []
    for lo, hi in ((0, 2000), (2000, 3000)):
        t.append(arrow(rows(lo, hi)))
        cur = cur + rows(lo, hi)
        versions.append(cur)
    t.delete("id BETWEEN 10 AND 20")  # the base already has a tombstone to merge with
    cur = [r for r in cur if not 10 <= r[0] <= 20]
    versions.append(cur)
    return versions


# --- the operations under test ------------------------------------------------------


@dataclass(frozen=True)
class Op:
    run: Callable[[Table], CommitResult]
    model: Callable[[list[Row]], list[Row]]


def _append(t: Table) -> CommitResult:
    return t.append(arrow(rows(3000, 4000)))


def _delete(t: Table) -> CommitResult:
    return t.delete("id >= 100 AND id < 1200 OR s = 's3' OR dev.os = 'os1'")


UPSERT = rows(2900, 3100, tag="u")


def _upsert(t: Table) -> CommitResult:
    return t.upsert(arrow(UPSERT), key=["id"])


def _transaction(t: Table) -> CommitResult:
    with t.transaction() as tx:
        tx.delete("f IS NULL OR id BETWEEN 2500 AND 2600")
        tx.append(arrow(rows(5000, 5300)))
    assert tx.result is not None
    return tx.result


def _upsert_model(rs: list[Row]) -> list[Row]:
    keys = {r[0] for r in UPSERT}
    return [r for r in rs if r[0] not in keys] + UPSERT


def _compact(t: Table) -> CommitResult:
    return t.compact(target_file_size=1 << 20)  # every file of the base is small


def _purge(t: Table) -> CommitResult:
    t.store.min_part_size = 512  # the 5 MiB rule scaled to these small files: real splices
    # a few row groups of two files: the rest of them is copied (compose); id 15 is
    # deleted already and is erased all the same
    r = t.purge("id BETWEEN 500 AND 520 OR id BETWEEN 2500 AND 2510 OR id = 15")
    return CommitResult(r.version, r.commit_id or "", "purge", r.attempts, noop=r.noop)


OPS: dict[str, Op] = {
    "purge": Op(_purge, lambda rs: [r for r in rs
                                    if not (500 <= r[0] <= 520 or 2500 <= r[0] <= 2510)]),
    "compact": Op(_compact, lambda rs: rs),
    "append": Op(_append, lambda rs: rs + rows(3000, 4000)),
    "delete": Op(_delete, lambda rs: [r for r in rs
                                      if not (100 <= r[0] < 1200 or r[1] == "s3"
                                              or os_is(r, "os1"))]),
    "upsert": Op(_upsert, _upsert_model),
    "transaction": Op(_transaction, lambda rs: [r for r in rs if not (
        r[2] is None or 2500 <= r[0] <= 2600)] + rows(5000, 5300)),
}


# --- store helpers -------------------------------------------------------------------


class Tables:
    """Fresh table locations of one backend kind."""

    def __init__(self, kind: str, root: Path, bucket: str | None = None) -> None:
        self.kind = kind
        self.root = root
        self.bucket = bucket  # kind "s3": a moto bucket, reached through AWS_* variables
        self.memory_names: list[str] = []
        self.templates: list[Template[Any]] = []

    def new_uri(self) -> str:
        name = uuid.uuid4().hex
        if self.bucket is not None:
            return f"s3://{self.bucket}/{name}"
        if self.kind == "memory":
            self.memory_names.append(name)
            return f"memory://{name}"
        return str(self.root / name)

    def template(self, make: Callable[[str], Any]) -> Template[Any]:
        """A template of what ``make(uri)`` builds (crash_harness.Template), put back
        before every fault point instead of built again; closed with the tables."""
        root = self.root / uuid.uuid4().hex
        root.mkdir()
        t: Template[Any] = Template(self.kind, make, root)
        self.templates.append(t)
        return t

    def close(self) -> None:
        for name in self.memory_names:
            forget_memory_space(name)
        for t in self.templates:
            t.close()


def list_keys(store: ObjectStore) -> set[str]:
    return {m.key for p in PREFIXES for m in store.list(p)}


def referenced_keys(store: ObjectStore) -> tuple[set[str], list[str]]:
    """Every object any retained version references, and the manifests of the history."""
    io = MetadataIO(store)
    chain = io.history(io.latest())
    oldest = chain[0].manifest.oldest_version  # gc expired the versions below it
    refs: set[str] = set()
    for snap in chain:
        m = snap.manifest
        refs.add(snap.key)
        refs.update(s.manifest for s in m.segments)
        refs.update(a.manifest for a in m.ancestors if a.version >= oldest)
        refs.update(f.path for f in io.live_files(snap))
        refs.update(t.path for t in m.tombstones)
    return refs, [s.key for s in reversed(chain)]


def faulty_table(uri: str) -> tuple[Table, FaultyStore]:
    store = FaultyStore(open_store(uri), [])
    t = Table.load(store, write_options=WRITE)
    t.commit_policy = FAST
    return t, store


# --- the check after every fault -----------------------------------------------------


def check_after(uri: str, model: list[list[Row]], new_rows: list[Row], before_keys: set[str],
                base_manifests: list[str], *, must_be: str | None = None,
                commit_id: str | None = None, where: str = "") -> str:
    """Check the table after a failed or faulted operation; return "old" or "new"."""
    old_version = len(model) - 1
    store = open_store(uri)
    t = caslake.open_table(uri)
    assert t.version in (old_version, old_version + 1), where
    state = "old" if t.version == old_version else "new"
    if must_be is not None:
        assert state == must_be, f"{where}: table is at the {state} version, expected {must_be}"
    expected = model[-1] if state == "old" else new_rows
    assert same_rows(t, expected), f"{where}: rows are neither exactly old nor exactly new"
    if state == "new":  # the version before still reads as it did
        assert same_rows(t, model[-1], version=old_version), where
    hist = t.history()
    assert [h.version for h in hist] == list(range(t.version, -1, -1)), where
    assert len({h.commit_id for h in hist}) == len(hist), f"{where}: duplicate commit id"
    if state == "new" and commit_id is not None:
        assert hist[0].commit_id == commit_id, f"{where}: the new version is not our commit"
    report = verify_table(store, deep=True, all_versions=True)
    assert report.ok, f"{where}: verify found {report.problems}"
    # No GC yet: what the failure leaves behind is only unreferenced new objects.
    after_keys = list_keys(store)
    refs, chain = referenced_keys(store)
    assert chain[: len(base_manifests)] == base_manifests, f"{where}: history rewritten"
    assert refs <= after_keys, f"{where}: referenced but missing: {sorted(refs - after_keys)}"
    assert before_keys <= after_keys, (
        f"{where}: pre-existing objects deleted: {sorted(before_keys - after_keys)}")
    orphans = after_keys - refs
    assert not orphans & before_keys, where
    slot = f"{MANIFEST_PREFIX}v{old_version + 1:020d}-"
    stray = [k for k in orphans if k.startswith(MANIFEST_PREFIX) and not k.startswith(slot)]
    assert not stray, f"{where}: orphan manifests outside the slot it aimed at: {stray}"
    # A later commit succeeds on top of whatever is there, and is visible.
    later = caslake.open_table(uri)
    later.commit_policy = FAST
    res = later.append(arrow(rows(9000, 9010)))
    assert res.version == t.version + 1 and not res.noop, where
    again = caslake.open_table(uri)
    assert again.version == t.version + 1, where
    assert same_rows(again, expected + rows(9000, 9010)), where
    return state


def prepare(tables: Tables) -> tuple[str, list[list[Row]], set[str], list[str]]:
    uri = tables.new_uri()
    return (uri, *_made(uri))


def _made(uri: str) -> tuple[list[list[Row]], set[str], list[str]]:
    """Build the base table at ``uri``: its model, its objects, its history."""
    model = build(uri)
    store = open_store(uri)
    keys = list_keys(store)
    refs, chain = referenced_keys(store)
    assert keys == refs, "the base table must have no orphans"
    return model, keys, chain


class BaseTable:
    """The base table (:func:`build`, then ``extra(uri)``) for every fault point of a
    test, and what a point checks against: the model, the base's objects and its
    history (before ``extra``).  On a memory or local store it is built once and put
    back before each point (a :class:`Template`; a rebuild took two thirds of a
    point's time); on S3 it is built afresh at a new location each time."""

    def __init__(self, tables: Tables, extra: Callable[[str], object] | None = None) -> None:
        self.tables = tables
        self.extra = extra
        self.template: Template[Any] | None = None
        self.first: str | None = None
        if tables.kind in ("memory", "local"):
            self.template = tables.template(self._make)
            self.model, self.keys, self.manifests = self.template.made
        else:
            self.first = self.tables.new_uri()
            self.model, self.keys, self.manifests = self._make(self.first)

    def _make(self, uri: str) -> tuple[list[list[Row]], set[str], list[str]]:
        made = _made(uri)
        if self.extra is not None:
            self.extra(uri)
        return made

    def fresh(self) -> str:
        """The base table, as built, at the URI a fault point uses."""
        if self.template is not None:
            return self.template.fresh()
        uri, self.first = self.first, None
        if uri is None:
            uri = self.tables.new_uri()
            self.model, self.keys, self.manifests = self._make(uri)
        return uri


# --- the tests -------------------------------------------------------------------------


@pytest.fixture(params=["memory", "local"])
def tables(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Tables]:
    t = Tables(str(request.param), tmp_path)
    yield t
    t.close()


def op_with_faults(tables: Tables, name: str, op: Op, mode: str) -> dict[str, int]:
    """Fault every store call of ``op`` on the base table: the fault-free run makes the
    model's rows, and after each point :func:`check_after` holds, with a returned
    commit at the version it reported under its commit id, and a typed error other
    than CommitOutcomeUnknown leaving the old version.  A lost reply of the pointer
    CAS itself must be settled as a success (some point ends "ok->new")."""
    base = BaseTable(tables)
    new_rows = op.model(base.model[-1])

    def counted(uri: str, res: object) -> None:
        assert isinstance(res, CommitResult) and not res.noop, res
        assert res.version == len(base.model), res
        fresh = caslake.open_table(uri)
        assert same_rows(fresh, new_rows)
        for v, want in enumerate(base.model):
            assert same_rows(fresh, want, version=v)

    def check(p: Point) -> str:
        must_be: str | None = None
        commit_id: str | None = None
        if isinstance(p.error, CommitOutcomeUnknown):
            commit_id = p.error.commit_id
        elif p.error is not None:
            must_be = "old"  # a typed failure other than "unknown" must mean "not done"
        elif isinstance(p.returned, CommitResult):
            must_be, commit_id = "new", p.returned.commit_id
            assert p.returned.version == len(base.model), f"{p.where}: {p.returned}"
            assert not p.returned.noop, p.where
        return check_after(p.uri, base.model, new_rows, base.keys, base.manifests,
                           must_be=must_be, commit_id=commit_id, where=p.where)

    outcomes = fault_each_call(name, tables.kind, mode, base.fresh, faulty_table, op.run,
                               check, 5, counted=counted)
    if mode == "lost-reply":
        assert outcomes.get("ok->new", 0) >= 1, outcomes
    return outcomes


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("op_name", list(OPS))
def test_fault_at_every_store_call(tables: Tables, op_name: str, mode: str) -> None:
    op_with_faults(tables, op_name, OPS[op_name], mode)


# --- gc -------------------------------------------------------------------------------

GC_LATER = timedelta(days=30)  # gc's clock: every object and version is old
OVERWRITE = rows(0, 500, tag="o")


def _gc_extra(uri: str) -> None:
    """On the base table: an overwrite (the files before it become garbage once their
    versions expire) and an orphan data file a crashed writer left."""
    caslake.open_table(uri).overwrite(arrow(OVERWRITE))
    open_store(uri).put(data_file_key(), b"orphan", mode=PutMode.CREATE)


def _gc(t: Table) -> None:
    t.gc(now=datetime.now(UTC) + GC_LATER)


def check_after_gc(uri: str, where: str) -> str:
    """After a faulted gc: the old version or the marker, the same rows, verify ok,
    nothing referenced missing; a later commit works, and gc finishes the job."""
    store = open_store(uri)
    t = caslake.open_table(uri)
    old = 4  # build()'s versions 0..3, then the overwrite
    assert t.version in (old, old + 1), where
    state = "old" if t.version == old else "new"
    assert same_rows(t, OVERWRITE), where
    report = verify_table(store, deep=True, all_versions=True)
    assert report.ok, f"{where}: verify found {report.problems}"
    refs, _ = referenced_keys(store)
    keys = list_keys(store)
    assert refs <= keys, f"{where}: referenced but missing: {sorted(refs - keys)}"
    later = caslake.open_table(uri)
    later.commit_policy = FAST
    later.append(arrow(rows(9000, 9010)))
    later.gc(now=datetime.now(UTC) + GC_LATER)
    refs, _ = referenced_keys(store)
    assert list_keys(store) == refs, f"{where}: gc left garbage behind"
    assert same_rows(caslake.open_table(uri), OVERWRITE + rows(9000, 9010)), where
    return state


def fault_every_call(name: str, kind: str, mode: str, setup: Callable[[], str],
                     run: Callable[[Table], object], check: Callable[[str, str], str],
                     min_calls: int) -> dict[str, int]:
    """:func:`fault_each_call` for an operation of a table opened by
    :func:`faulty_table`, with a ``check(uri, where)`` (the maintenance rows of
    tests/maintenance and tests/partition use it)."""
    return fault_each_call(name, kind, mode, setup, faulty_table, run,
                           lambda p: check(p.uri, p.where), min_calls)


@pytest.mark.parametrize("mode", MODES)
def test_gc_fault_at_every_store_call(tables: Tables, mode: str) -> None:
    base = BaseTable(tables, _gc_extra)
    fault_each_call("gc", tables.kind, mode, base.fresh, faulty_table, _gc,
                    lambda p: check_after_gc(p.uri, p.where), 5)


# --- purge(expire=True) ----------------------------------------------------------------

ERASE = "id BETWEEN 500 AND 520 OR id BETWEEN 2500 AND 2510 OR id = 15"


def _erase(t: Table) -> None:
    t.store.min_part_size = 512  # real splices on these small files
    t.purge(ERASE, expire=True)


def _erased(rs: list[Row]) -> list[Row]:
    return [r for r in rs if not (500 <= r[0] <= 520 or 2500 <= r[0] <= 2510)]


def matching_data_objects(store: ObjectStore) -> list[str]:
    """Data objects holding a row the erasure matches (decoded, not trusted)."""
    out = []
    for meta in store.list(DATA_PREFIX):
        data = store.get(meta.key).data
        try:
            ids = pq.read_table(pa.BufferReader(data), columns=["id"]).column("id").to_pylist()
        except pa.ArrowInvalid:
            continue  # the orphan's bytes are not Parquet (and hold no row)
        if any(500 <= i <= 520 or 2500 <= i <= 2510 or i == 15 for i in ids):
            out.append(meta.key)
    return out


def check_after_erase(uri: str, model: list[list[Row]], where: str) -> str:
    """After a faulted purge(expire=True): the old version, the purge, or the purge and
    its expiry marker; rows old or erased; verify ok.  Running it again on a healthy
    store finishes the erasure: no data object holds a matching row and only the
    referenced objects remain."""
    store = open_store(uri)
    t = caslake.open_table(uri)
    old = len(model) - 1
    assert t.version in (old, old + 1, old + 2), where
    state = ["old", "purged", "expired"][t.version - old]
    assert same_rows(t, model[-1] if state == "old" else _erased(model[-1])), where
    report = verify_table(store, deep=True, all_versions=True)
    assert report.ok, f"{where}: verify found {report.problems}"
    again = caslake.open_table(uri)
    again.commit_policy = FAST
    _erase(again)
    assert same_rows(caslake.open_table(uri), _erased(model[-1])), where
    assert matching_data_objects(store) == [], f"{where}: erased rows survive"
    refs, _ = referenced_keys(store)
    assert list_keys(store) == refs, f"{where}: objects left behind"
    return state


@pytest.mark.parametrize("mode", MODES)
def test_purge_expire_fault_at_every_store_call(local_tables: Tables, mode: str) -> None:
    # Local only (58 fault points a mode): the memory store adds no fault kind the
    # local one lacks, and the suite's time budget is better spent elsewhere.
    def orphan(uri: str) -> None:
        key = data_file_key()
        open_store(uri).put(key, b"orphan", mode=PutMode.CREATE)
        # A crashed writer's orphan from an hour ago: gc's cutoff is the purge's "now",
        # and an orphan written within the same milliseconds is rightly kept as too
        # young, which made the count of store calls (and the last fault point) vary.
        an_hour_ago = (datetime.now(UTC) - timedelta(hours=1)).timestamp()
        os.utime(Path(uri) / key, (an_hour_ago, an_hour_ago))

    base = BaseTable(local_tables, orphan)
    fault_each_call("purge-expire", local_tables.kind, mode, base.fresh, faulty_table, _erase,
                    lambda p: check_after_erase(p.uri, base.model, p.where), 10)


# --- refs: branch, tag, fast-forward, drop -------------------------------------------


@dataclass(frozen=True)
class RefOp:
    setup: Callable[[Table], None]  # on the base table, before the fault run
    run: Callable[[Table], object]
    state: Callable[[Table, list[list[Row]]], str]  # "old" or "new" (asserts the rest)


def _ff_setup(t: Table) -> None:
    t.create_branch("audit").append(arrow(rows(7000, 7100)))


def _ff_state(t: Table, model: list[list[Row]]) -> str:
    audit_rows = model[-1] + rows(7000, 7100)
    assert same_rows(t.branch("audit"), audit_rows)
    if t.version == len(model) - 1:
        assert same_rows(t, model[-1])
        return "old"
    assert t.version == len(model) and same_rows(t, audit_rows)
    return "new"


def _branch_state(t: Table, model: list[list[Row]]) -> str:
    assert same_rows(t, model[-1]) and t.version == len(model) - 1
    try:
        b = t.branch("b")
    except RefNotFound:
        return "old"
    assert b.version == 2 and same_rows(b, model[2])
    return "new"


def _tag_state(t: Table, model: list[list[Row]]) -> str:
    assert same_rows(t, model[-1]) and t.version == len(model) - 1
    try:
        scan = t.scan(tag="t")
    except RefNotFound:
        state = "old"
    else:
        got = scan.to_arrow().sort_by("id")
        assert got.equals(arrow(sorted(model[1], key=lambda r: r[0])))
        state = "new"
    return state


def _dropped_tag_state(t: Table, model: list[list[Row]]) -> str:
    state = "new" if _tag_state(t, model) == "old" else "old"
    if state == "new":
        with pytest.raises(RefAlreadyExists):
            t.create_tag("t", version=1)  # the name stays retired
    return state


REF_OPS: dict[str, RefOp] = {
    "fast_forward": RefOp(_ff_setup, lambda t: t.fast_forward("main", source="audit"),
                          _ff_state),
    "create_branch": RefOp(lambda t: None, lambda t: t.create_branch("b", from_version=2),
                           _branch_state),
    "drop_branch": RefOp(lambda t: t.create_branch("b", from_version=2),
                         lambda t: t.drop_branch("b"),
                         lambda t, m: "new" if _branch_state(t, m) == "old" else "old"),
    "create_tag": RefOp(lambda t: None, lambda t: t.create_tag("t", version=1), _tag_state),
    "drop_tag": RefOp(lambda t: t.create_tag("t", version=1), lambda t: t.drop_tag("t"),
                      _dropped_tag_state),
}


def check_after_ref(uri: str, op: RefOp, model: list[list[Row]], where: str) -> str:
    """Old or new ref state, nothing in between; every ref reads; verify passes; a
    later commit works; gc a month later keeps every ref readable."""
    t = caslake.open_table(uri)
    state = op.state(t, model)
    report = verify_table(open_store(uri), deep=True, all_versions=True)
    assert report.ok, f"{where}: verify found {report.problems}"
    later = caslake.open_table(uri)
    later.commit_policy = FAST
    expected = later.scan().to_arrow().num_rows + 10
    later.append(arrow(rows(9000, 9010)))
    later.gc(now=datetime.now(UTC) + GC_LATER)
    t = caslake.open_table(uri)
    assert t.scan().to_arrow().num_rows == expected, where
    for ref in t.list_refs():
        if ref.kind == "branch":
            t.branch(ref.name).scan().to_arrow()
        elif ref.kind == "tag":
            t.scan(tag=ref.name).to_arrow()
    return state


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("op_name", list(REF_OPS))
def test_ref_op_fault_at_every_store_call(tables: Tables, op_name: str, mode: str) -> None:
    _ref_op_with_faults(tables, op_name, mode)


def _ref_op_with_faults(tables: Tables, op_name: str, mode: str) -> None:
    op = REF_OPS[op_name]
    base = BaseTable(tables, lambda uri: op.setup(caslake.open_table(uri)))

    def counted(uri: str, _: object) -> None:
        assert op.state(caslake.open_table(uri), base.model) == "new", op_name

    fault_each_call(op_name, tables.kind, mode, base.fresh, faulty_table, op.run,
                    lambda p: check_after_ref(p.uri, op, base.model, p.where), 2,
                    truthful=True, counted=counted)


# --- clone and drop_table: faults in every store call, across both tables -------------


class SharedFaults:
    """Stand-in for one FaultyStore across every store the clone module opens (its
    ``open_store``, patched by :meth:`patched` while an operation runs): they share
    one call count and one list of faults (so a fault's calls run across the
    source's and the target's calls)."""

    def __init__(self) -> None:
        self.calls = 0
        self.faults: list[Fault] = []

    def opener(self, uri: str, options: dict[str, str] | None = None) -> ObjectStore:
        store = FaultyStore(open_store(uri, options))
        store.faults = self.faults
        original = store._pick

        def pick(op: str, key: str) -> Fault | None:
            self.calls += 1
            return original(op, key)

        store._pick = pick  # type: ignore[method-assign]
        return store

    def armed(self, uri: str) -> tuple[str, SharedFaults]:
        """For fault_each_call's ``open_faulty``: no fault yet (it arms one)."""
        self.faults.clear()
        return uri, self

    def patched(self, run: Callable[[str, str], object]) -> Callable[[str], object]:
        """``run(source, target)`` on ``source`` and its clone's location, with every
        store the clone module opens sharing these faults."""
        def faulted(uri: str) -> object:
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(clone_module, "open_store", self.opener)
                return run(uri, uri + "-c")
        return faulted


def _holds(uri: str) -> list[str]:
    return [m.key for m in open_store(uri).list(HOLD_PREFIX)]


def _check_clone_after(src: str, target: str, model: list[list[Row]], where: str) -> str:
    """The clone exists and reads the source's rows, or it does not exist; either
    way the source is unchanged and, after drop_table, holds nothing."""
    src_t = caslake.open_table(src)
    assert same_rows(src_t, model[-1]), where
    assert verify_table(open_store(src), deep=True, all_versions=True).ok, where
    try:
        c = caslake.open_table(target)
    except TableNotFound:
        state = "old"
    else:
        state = "new"
        assert same_rows(c, model[-1]), where
        src_t.gc(now=datetime.now(UTC) + GC_LATER)  # the hold keeps the clone readable
        assert same_rows(caslake.open_table(target), model[-1]), where
    with contextlib.suppress(TableNotFound):
        caslake.drop_table(target)
    assert not _holds(src), f"{where}: a hold was left behind"
    return state


def _compacted_clone(src: str, target: str) -> None:
    """A clone that, once compacted, references nothing of its source."""
    clone_module.clone(src, target)
    caslake.open_table(target).compact(target_file_size=1 << 30, deleted_fraction=0.01)


def _gc_clone(target: str) -> None:
    """gc of the clone, every store (its own and its source's) opened through the
    patched opener."""
    own = clone_module.open_store(target)
    store = clone_module.with_externals(own, MetadataIO(own).latest().manifest, None)
    t = Table.load(store)
    t.commit_policy = FAST
    t.gc(retention=timedelta(0), force=True, now=datetime.now(UTC) + GC_LATER)


def _check_clone_gc_after(src: str, target: str, model: list[list[Row]], where: str) -> str:
    """The clone reads its rows and verifies, its hold is there or released, and a
    second gc releases it; then the source's gc (which may now collect the
    shared files) leaves the clone reading the same rows."""
    state = "held" if _holds(src) else "released"
    c = caslake.open_table(target)
    assert same_rows(c, model[-1]), where
    assert verify_table(c.store, deep=True, all_versions=True).ok, where
    c.gc(retention=timedelta(0), force=True, now=datetime.now(UTC) + GC_LATER)
    assert not _holds(src), f"{where}: a second gc did not release the hold"
    caslake.open_table(src).gc(now=datetime.now(UTC) + GC_LATER)
    assert same_rows(caslake.open_table(target), model[-1]), where
    assert same_rows(caslake.open_table(src), model[-1]), where
    return state


def _run_with_faults(tables: Tables, mode: str, run: Callable[[str, str], object],
                     setup: Callable[[str, str], None], name: str) -> None:
    base = BaseTable(tables, lambda uri: setup(uri, uri + "-c"))
    shared = SharedFaults()

    def check(p: Point) -> str:
        target = p.uri + "-c"
        if name == "clone":
            state = _check_clone_after(p.uri, target, base.model, p.where)
            assert p.outcome != "ok" or state == "new", p.where
        elif name == "clone_gc":
            state = _check_clone_gc_after(p.uri, target, base.model, p.where)
            assert p.outcome != "ok" or state == "released", p.where
        else:  # drop_table: finishing the drop must always be possible
            with contextlib.suppress(TableNotFound):
                caslake.drop_table(target)
            state = "dropped"
            with pytest.raises(TableNotFound):
                caslake.open_table(target)
            assert not _holds(p.uri), f"{p.where}: a hold was left behind"
            assert same_rows(caslake.open_table(p.uri), base.model[-1]), p.where
        return state

    fault_each_call(name, tables.kind, mode, base.fresh, shared.armed, shared.patched(run),
                    check, 5)


@pytest.fixture
def s3_tables(request: pytest.FixtureRequest, tmp_path: Path,
              monkeypatch: pytest.MonkeyPatch) -> Iterator[Tables]:
    """Tables in one moto bucket.  The tests open stores by URI alone, so the
    endpoint and credentials come from the standard ``AWS_*`` variables."""
    endpoint = request.getfixturevalue("moto_server")
    for name, value in {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": DUMMY_KEY_ID,
                        "AWS_SECRET_ACCESS_KEY": DUMMY_SECRET, "AWS_REGION": REGION}.items():
        monkeypatch.setenv(name, value)
    yield Tables("s3", tmp_path, bucket=make_bucket(endpoint))


@pytest.fixture(params=["local"])
def local_tables(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Tables]:
    t = Tables(str(request.param), tmp_path)
    yield t
    t.close()


@pytest.mark.parametrize("mode", MODES)
def test_clone_fault_at_every_store_call(local_tables: Tables, mode: str) -> None:
    _run_with_faults(local_tables, mode, lambda s, t: clone_module.clone(s, t),
                     lambda s, t: None, "clone")


@pytest.mark.parametrize("mode", MODES)
def test_drop_table_fault_at_every_store_call(local_tables: Tables, mode: str) -> None:
    _run_with_faults(local_tables, mode, lambda s, t: clone_module.drop_table(t),
                     lambda s, t: clone_module.clone(s, t) and None, "drop_table")


@pytest.mark.parametrize("mode", MODES)
def test_clone_gc_releasing_its_hold_fault_at_every_store_call(local_tables: Tables,
                                                              mode: str) -> None:
    _run_with_faults(local_tables, mode, lambda s, t: _gc_clone(t), _compacted_clone,
                     "clone_gc")


@pytest.mark.s3
@pytest.mark.parametrize("op", ["clone", "drop_table", "fast_forward", "export_delta"])
def test_lost_reply_at_every_store_call_on_s3(s3_tables: Tables, op: str,
                                              moto_server: str) -> None:
    """The same rows on moto S3, for the fault whose recovery depends on the real
    store's answers (a create-only or If-Match PUT that applied, retried: 412 or
    409 must be read back as ours).  Crash and fail-before are injected before the
    store is reached or stop the process, so they behave alike on every backend;
    with them, the S3 rows would cost three times as long (about 2.5 minutes).  The
    Delta export's commit is such a create-only PUT; the Iceberg export publishes by
    plain overwrites, which behave alike on every backend (and would cost ~10 s more)."""
    mode = "lost-reply"
    if op == "clone":
        _run_with_faults(s3_tables, mode, lambda s, t: clone_module.clone(s, t),
                         lambda s, t: None, "clone")
    elif op == "drop_table":
        _run_with_faults(s3_tables, mode, lambda s, t: clone_module.drop_table(t),
                         lambda s, t: clone_module.clone(s, t) and None, "drop_table")
    elif op.startswith("export_"):
        run_export_with_faults(s3_tables, op.removeprefix("export_"), mode,
                               ExportReaders.moto(moto_server))
    else:
        _ref_op_with_faults(s3_tables, op, mode)


# --- export: Iceberg metadata and the Delta log ------------------------------------------

EXPORT_PREFIXES = {"iceberg": (METADATA_PREFIX,), "delta": (LOG_PREFIX, f"{DV_PREFIX}/")}


def all_keys(store: ObjectStore) -> set[str]:
    return {m.key for m in store.list("")}


@dataclass(frozen=True)
class ExportReaders:
    """Storage options of the outside readers (None for local files)."""

    iceberg: dict[str, str] | None = None
    delta: dict[str, str] | None = None

    @classmethod
    def moto(cls, endpoint: str) -> ExportReaders:
        """pyiceberg's and deltalake's options for the moto server at ``endpoint``."""
        return cls(iceberg={"s3.endpoint": endpoint, "s3.access-key-id": DUMMY_KEY_ID,
                            "s3.secret-access-key": DUMMY_SECRET, "s3.region": REGION},
                   delta={"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": DUMMY_KEY_ID,
                          "AWS_SECRET_ACCESS_KEY": DUMMY_SECRET, "AWS_REGION": REGION,
                          "AWS_ALLOW_HTTP": "true"})


@dataclass(frozen=True)
class ExportBase:
    """A table exported (both formats) at ``old`` and then moved on to ``new`` by a
    transaction (a delete merged with the base's tombstone, and an append): the
    faulted export publishes ``new``.  Exports never change the table, so each
    fault point starts from this one table with the later exports taken away."""

    uri: str
    old: int
    new: int
    keys: set[str]  # every object of the store, exports at ``old`` included
    hint: bytes
    rows: dict[int, pa.Table]  # caslake's rows at old and new, as the readers return them
    readers: ExportReaders

    def shown(self, target: str) -> int:
        """The caslake version the ``target`` export shows: an outside reader's rows
        (pyiceberg from the version hint; deltalake from the log) equal caslake's at
        ``old`` or ``new``, content compared."""
        if target == "iceberg":
            version = read_iceberg_hint(open_store(self.uri))
            assert version in self.rows, f"the version hint names {version}"
            meta = f"{open_store(self.uri).uri}/{iceberg_metadata_key(version)}"
            got = pyiceberg_rows(meta, TABLE_SCHEMA, properties=self.readers.iceberg)
            assert got.equals(self.rows[version]), f"Iceberg export of {version} differs"
            return version
        got = deltalake_rows(self.uri, TABLE_SCHEMA, storage_options=self.readers.delta)
        shown = [v for v, want in self.rows.items() if got.equals(want)]
        assert shown, "the Delta export reads as neither caslake version"
        return shown[0]


def prepare_export(tables: Tables, readers: ExportReaders) -> ExportBase:
    uri, model, _, _ = prepare(tables)
    t = caslake.open_table(uri)
    t.export_iceberg()
    t.export_delta()
    _transaction(t)
    old, new = len(model) - 1, len(model)
    base = ExportBase(uri, old, new, all_keys(t.store), t.store.get(ICEBERG_HINT).data,
                      {v: caslake_rows(t, v) for v in (old, new)}, readers)
    assert base.shown("iceberg") == base.shown("delta") == old
    return base


def reset_export(base: ExportBase) -> str:
    """Back to the exports at ``base.old``: what later exports added goes, the hint
    is put back."""
    store = open_store(base.uri)
    for key in all_keys(store) - base.keys:
        store.delete(key)
    store.put(ICEBERG_HINT, base.hint)
    return base.uri


def check_after_export(base: ExportBase, target: str, where: str) -> str:
    """After a faulted export: nothing was deleted and nothing added outside the
    target format's prefixes (the table and the other format's export are as they
    were); the export reads as exactly caslake's rows at ``old`` or ``new``; the
    next export publishes ``new`` (a no-op if the faulted one did) and reads so."""
    keys = all_keys(open_store(base.uri))
    assert base.keys <= keys, f"{where}: objects deleted: {sorted(base.keys - keys)}"
    outside = [k for k in keys - base.keys if not k.startswith(EXPORT_PREFIXES[target])]
    assert not outside, f"{where}: the {target} export wrote outside its prefixes: {outside}"
    shown = base.shown(target)
    state = "old" if shown == base.old else "new"
    res = getattr(caslake.open_table(base.uri), f"export_{target}")()
    assert res.version == base.new and res.noop == (state == "new"), f"{where}: {res}"
    assert base.shown(target) == base.new, where
    return state


def run_export_with_faults(tables: Tables, target: str, mode: str,
                           readers: ExportReaders = ExportReaders()) -> ExportBase:
    base = prepare_export(tables, readers)
    outcomes = fault_each_call(
        f"export_{target}", tables.kind, mode, lambda: reset_export(base), faulty_table,
        lambda t: getattr(t, f"export_{target}")(),
        lambda p: check_after_export(base, target, p.where), 6, truthful=True)
    if mode == "lost-reply":
        # The lost reply of a publishing put must be settled as a success.
        assert outcomes.get("ok->new", 0) >= 1, outcomes
    if mode == "crash":  # a process that dies before its publishing put never published
        assert set(outcomes) == {"crash->old"}, outcomes
    other = "delta" if target == "iceberg" else "iceberg"
    assert base.shown(other) == base.old, f"the {other} export moved"
    return base


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("target", ["iceberg", "delta"])
def test_export_fault_at_every_store_call(local_tables: Tables, target: str, mode: str) -> None:
    # Local only: the outside readers (pyiceberg, deltalake) cannot read a memory store.
    base = run_export_with_faults(local_tables, target, mode)
    # DuckDB, the third reader, on what the last fault point left (exported at new).
    if target == "delta":
        got = duckdb_delta_rows(base.uri, TABLE_SCHEMA)
    else:
        got = duckdb_iceberg_rows(f"{open_store(base.uri).uri}/"
                                  f"{iceberg_metadata_key(base.new)}", TABLE_SCHEMA)
    assert got.equals(base.rows[base.new])


# --- dataset writes: ParquetDatasetStore (RFC-0008 manifest.json, _SUCCESS) ---------------

DS_KEY = "k/ds"
DS_BASE = arrow(rows(0, 70))
DS_NEW = arrow(rows(1000, 1055, tag="n"))


def _pds(store: ObjectStore) -> ParquetDatasetStore:
    return ParquetDatasetStore(store, max_rows_per_file=20)  # several parts a write


def prepare_dataset(tables: Tables, overwrite: bool) -> str:
    uri = tables.new_uri()
    if overwrite:
        _pds(open_store(uri)).write_dataset(DS_BASE, DS_KEY)
    return uri


def faulty_pds(uri: str) -> tuple[ParquetDatasetStore, FaultyStore]:
    store = FaultyStore(open_store(uri), [])
    return _pds(store), store


def pyarrow_parts(store: ObjectStore, parts: list[str]) -> pa.Table:
    """The parts a manifest lists, read by pyarrow alone, in order."""
    return pa.concat_tables(pq.read_table(pa.BufferReader(store.get(f"{DS_KEY}/{p}").data))
                            for p in parts)


def check_after_dataset(uri: str, overwrite: bool, where: str) -> str:
    """After a faulted write: a reader sees the previous dataset (the base, or on a
    new key none: DatasetIncomplete) or the new one, whole (pyarrow reads the
    manifest's parts as the same rows); never a part of one.  Then the key takes an
    overwrite, and vacuum leaves exactly the current generation."""
    store = open_store(uri)
    pds = _pds(store)
    try:
        got: pa.Table | None = pds.read_dataset(DS_KEY)
    except DatasetIncomplete:
        got = None
    assert pds.dataset_exists(DS_KEY) == (got is not None), where
    if got is not None and got.equals(DS_NEW):
        state = "new"
        assert pyarrow_parts(store, pds.read_manifest(DS_KEY).parts).equals(DS_NEW), where
    else:
        whole = got is not None and got.equals(DS_BASE) if overwrite else got is None
        assert whole, f"{where}: neither the old nor the new dataset, whole"
        state = "old"
    pds.write_dataset(DS_BASE, DS_KEY, overwrite=True)
    assert pds.read_dataset(DS_KEY).equals(DS_BASE), where
    pds.vacuum(DS_KEY, older_than=timedelta(0))
    m = pds.read_manifest(DS_KEY)
    gen = m.parts[0].split("/")[0]
    left = sorted(o.key[len(DS_KEY) + 1:] for o in store.list(DS_KEY + "/"))
    assert left == sorted(["_SUCCESS", "manifest.json", f"{gen}/_COMMITTED", *m.parts]), where
    return state


@pytest.fixture(params=["memory", "local", pytest.param("s3", marks=pytest.mark.s3)])
def ds_tables(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Tables]:
    """Dataset locations on every backend.  The S3 rows cost ~15 s of the three modes'
    ~20; they moved here from tests/dataset/test_crash_steps.py, which had them."""
    if request.param == "s3":
        yield request.getfixturevalue("s3_tables")
        return
    t = Tables(str(request.param), tmp_path)
    yield t
    t.close()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("overwrite", [False, True], ids=["new-key", "overwrite"])
def test_dataset_write_fault_at_every_store_call(ds_tables: Tables, overwrite: bool,
                                                 mode: str) -> None:
    name = "dataset_overwrite" if overwrite else "dataset_write"
    outcomes = fault_each_call(
        name, ds_tables.kind, mode, lambda: prepare_dataset(ds_tables, overwrite), faulty_pds,
        lambda pds: pds.write_dataset(DS_NEW, DS_KEY, overwrite=overwrite),
        lambda p: check_after_dataset(p.uri, overwrite, p.where),
        7, truthful=True)  # HEAD, 3 parts, manifest, _SUCCESS, _COMMITTED
    if mode == "lost-reply":  # the lost reply of the manifest's conditional PUT: settled
        assert outcomes.get("ok->new", 0) >= 1, outcomes
