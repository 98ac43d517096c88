"""Stateful model test: the real table, transient faults included, against a plain model.

A Hypothesis :class:`RuleBasedStateMachine` drives one table (memory store, its
programs unpartitioned or partitioned by ``bucket(3, id)`` or by ``s`` in turn; a
smaller profile on the moto S3 server) next to a plain-Python model: the list of
rows of every version. Rules append small batches (an int64 ``id`` that repeats, a
string and a float column with NULLs, and nested columns: a struct holding a struct,
a list and a map, NULL at every level), delete by key, by range, by predicate (flat,
struct leaves, list and map functions) and by a predicate on a struct leaf alone
(``dev.os = 'x'``), upsert by key, run a transaction (delete + append), update
(``SET`` literals and expressions ``WHERE`` any of those predicates or none), merge
on ``id`` (four clause sets: matched update/update_all/delete, not-matched
insert/insert_all, by-source update/delete, with conditions on both sides), restore
a retained version (an expired one is ``VersionExpired``; a race makes it
``ConcurrentModification``, nothing applied), read a random retained version, reopen
the table (a new handle, cold caches), compact (same rows, fewer files; under the
same faults and races as writes), cluster (``compact(sort_by=...)``/``zorder_by``
by drawn columns, or the ``clustering.columns`` property and a plain compact: same
rows, and the files it wrote, read with pyarrow, in key order; a struct leaf is
refused, typed), run gc with a clock 30 days ahead (everything but
the newest data version expires, and afterwards exactly the referenced objects
remain), export (on a local store, whose files the outside readers can open: the
Iceberg export read by pyiceberg, every snapshot it keeps, and the Delta export read
by deltalake equal the model's rows at the versions they name, then and after every
later gc), drop an export (every object of it goes, nothing else; the next export
starts afresh), and arm trouble for the next write:

* a transient fault on a ``put`` of the pointer, a manifest, a data file or a
  tombstone, which fails before it is applied or is applied and then loses its
  reply;
* a crash: the writer dies at its n-th store call (:class:`SimulatedCrash`)
  and is replaced by a new handle;
* a race: another writer appends right before the write's pointer CAS, which
  then fails with 412, so the write must settle, find it lost, remove its
  losing manifest and rebase on top.

A write under a fault must either return or raise a :class:`CaslakeError`.
The model is then reconciled with the table's real current version, which must
equal the model before the operation or after it (and, unless the error was
:class:`CommitOutcomeUnknown`, a failed write must have left the old version; a
returned write must have made the new one).

Coverage is proved by an explicit program (``coverage_script``: every rule, every
write rule making a version, faults ending both ways), run through the machine
before its random programs, which then have no coverage checks of their own: a
new rule needs only a step in that script.

Invariants after every step: the latest table equals the model; every
acknowledged commit (``CommitResult.commit_id``) is in the history at the
version it was acknowledged at, and the history has exactly the versions the
model has; every few steps (and at the end, deep and over all versions)
``verify_table`` finds every referenced object.

A second machine (``ReadPathsMachine``, ``test_model_read_paths``; Spark) reads a
local table through every read path of ``tests/reliability/read_paths.py`` -- the
scan, Spark ``load`` (one DataFrame a version, reused across filtered and
unfiltered queries and a temp view), ``read_native``, the Iceberg and Delta exports
with pyiceberg, deltalake and DuckDB, Parquet datasets -- against a model of every
version's columns and rows (a struct column from the start; new columns may be
structs, lists or maps; every path must have compared nested values), under renames,
drop and re-add of a column, new columns, compaction, clustering, gc, ``purge(expire=True)``
with an erasure check that decodes every object, and clone chains three deep;
``test_clone_chain_read_paths`` reads such a chain (a struct field renamed in it)
through every path.

A third machine (``MultiTableMachine``, ``test_model_multitable``; Spark) models a
pair of tables under multi-table transactions (issue 35) mixed with single-table
commits, compaction and gc: committed ones, aborted ones (a read_version conflict,
a schema mismatch in one part, gc collecting a part's uploads mid-transaction), and
abandoned ones left pending, then decided by their owner or aborted by the next
writer after their ttl.  After every step each table and an atomic snapshot of both
equal the model (a pending or aborted part never shows); at the end every retained
version by scan, each head through Spark, ``read_native`` and both exports (with a
transaction pending), and deep verify.
"""

from __future__ import annotations

import io
import itertools
import os
import re
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, Phase, event, given, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import caslake
from caslake.api import CommitResult, Table
from caslake.core.commit import CommitPolicy
from caslake.dataset import (
    DatasetIncomplete,
    DatasetNotFound,
    ParquetDatasetStore,
)
from caslake.errors import (
    BranchDiverged,
    CaslakeError,
    CommitOutcomeUnknown,
    ConcurrentModification,
    InvalidArgument,
    PreconditionFailed,
    RefAlreadyExists,
    RefInUse,
    RefNotFound,
    VersionExpired,
    VersionNotFound,
)
from caslake.format.keys import DATA_PREFIX, MANIFEST_PREFIX, POINTER_KEY, TOMBSTONE_PREFIX
from caslake.format.properties import CLUSTERING_COLUMNS, SORT, ZORDER
from caslake.ops import purge as purge_mod
from caslake.ops.compact import ClusterOrder, cluster_order, plan_compaction
from caslake.ops.merge import MergeBuilder
from caslake.ops.verify import verify_table
from caslake.store import open_store
from caslake.store.faults import Fault, FaultyStore, SimulatedCrash
from caslake.store.memory import forget_memory_space
from tests.export.readers import deltalake_rows
from tests.reliability import read_paths as rp
from tests.reliability.test_crash_every_step import (
    EXPORT_PREFIXES,
    ExportReaders,
    all_keys,
    iceberg_metadata_key,
    list_keys,
    read_iceberg_hint,
    referenced_keys,
)
from tests.sample_data import wait_out_gc_fence

# Flat columns and nested ones (issue 29): a struct with a nested struct, a list and a map.
DEV = pa.struct([pa.field("os", pa.string()),
                 pa.field("hw", pa.struct([pa.field("ram", pa.int64())]))])
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("s", pa.string()),
                    pa.field("f", pa.float64()), pa.field("dev", DEV),
                    pa.field("tags", pa.list_(pa.string())),
                    pa.field("attrs", pa.map_(pa.string(), pa.int64()))])
FAST = CommitPolicy(max_attempts=20, base_backoff_s=0.0001, max_backoff_s=0.002,
                    settle_attempts=3)
# A long deadline: no run here comes near it, so no program depends on timing.
GROUP_FAST = replace(FAST, group_commit=True, group_poll_s=0.001, intent_ttl_ms=120_000)
VERIFY_EVERY = 5
ALL_OPS = frozenset({"get", "get_ranges", "put", "head", "list", "delete", "compose",
                     "list_multipart_uploads", "abort_multipart_upload"})

# (id, s, f, dev, tags, attrs): dev a dict ({"os": ..., "hw": {"ram": ...}}), tags a
# list, attrs a dict (a map's entries), each NULL-able at every level.
Row = tuple[Any, ...]


# --- data and predicates -------------------------------------------------------------

ids = st.integers(0, 12)
DEVS: list[dict[str, Any] | None] = [
    None, {"os": None, "hw": None}, {"os": "x", "hw": None}, {"os": "x", "hw": {"ram": 8}},
    {"os": "y", "hw": {"ram": None}}, {"os": "y", "hw": {"ram": 2}}]
TAG_LISTS: list[list[str | None] | None] = [None, [], ["a"], ["a", None], [None], ["b", "a"]]
ATTRS: list[dict[str, int | None] | None] = [None, {}, {"k": 1}, {"k": None, "j": 2}]
# The nested values of a row in one draw: Hypothesis's budget per program goes to
# steps, not to values (with a draw per nested column, programs ran out early and
# the dataset machine's faults came too rarely).
NESTED_VALUES = list(itertools.product(DEVS, TAG_LISTS, ATTRS))
row_st = st.tuples(ids, st.sampled_from(["a", "b", "c", None]),
                   st.sampled_from([None, -1.5, 0.0, 2.5, 7.0]),
                   st.sampled_from(NESTED_VALUES)).map(lambda r: (*r[:3], *r[3]))
batch_st = st.lists(row_st, min_size=1, max_size=6)


def _lt(v: float | None, x: float) -> bool:
    return v is not None and v < x


def _os(r: Row) -> str | None:
    """``dev.os`` of a row (NULL if ``dev`` is)."""
    return None if r[3] is None else r[3]["os"]


def _ram(r: Row) -> int | None:
    """``dev.hw.ram`` of a row (NULL if ``dev`` or ``dev.hw`` is)."""
    return None if r[3] is None or r[3]["hw"] is None else r[3]["hw"]["ram"]


@dataclass(frozen=True)
class Pred:
    sql: str
    holds: Callable[[Row], bool]  # SQL three-valued logic: NULL never satisfies a comparison

    def __repr__(self) -> str:
        return repr(self.sql)


PREDICATES = [
    Pred("s = 'a'", lambda r: r[1] == "a"),
    Pred("f IS NULL", lambda r: r[2] is None),
    Pred("f > 1.0 AND s IS NOT NULL", lambda r: r[2] is not None and r[2] > 1.0
         and r[1] is not None),
    Pred("s IN ('b', 'c') OR f < 0", lambda r: r[1] in ("b", "c") or _lt(r[2], 0)),
    Pred("NOT (s = 'a')", lambda r: r[1] is not None and r[1] != "a"),
    Pred("id > 8 AND f IS NOT NULL", lambda r: r[0] > 8 and r[2] is not None),
    Pred("dev.os = 'x' OR f < 0", lambda r: _os(r) == "x" or _lt(r[2], 0)),
    Pred("dev.hw.ram > 4 OR dev IS NULL", lambda r: r[3] is None or (_ram(r) or 0) > 4),
    Pred("array_contains(tags, 'a')", lambda r: r[4] is not None and "a" in r[4]),
    Pred("attrs['k'] = 1 OR tags IS NULL", lambda r: r[4] is None
         or (r[5] or {}).get("k") == 1),
]
# Deletes by a predicate on a struct leaf alone (the delete_struct_leaf rule).
STRUCT_PREDICATES = [
    Pred("dev.os = 'x'", lambda r: _os(r) == "x"),
    Pred("dev.os = 'y'", lambda r: _os(r) == "y"),
    Pred("dev.os IS NULL", lambda r: _os(r) is None),
    Pred("dev.hw.ram < 5", lambda r: _lt(_ram(r), 5)),
    Pred("dev.hw.ram IS NOT NULL", lambda r: _ram(r) is not None),
]


@dataclass(frozen=True)
class Update:
    """``update(set=sql, where=...)`` and the model of its SET on one row."""

    sql: dict[str, str]
    apply: Callable[[Row], Row]

    def __repr__(self) -> str:
        return repr(self.sql)


def _times(v: float | None, k: float) -> float | None:
    return None if v is None else v * k


UPDATES = [
    Update({"s": "'u'"}, lambda r: (r[0], "u", *r[2:])),
    # every value sees the old row; SQL NULL arithmetic stays NULL
    Update({"f": "f * 2", "s": "NULL"}, lambda r: (r[0], None, _times(r[2], 2), *r[3:])),
    Update({"tags": "NULL", "f": "0.5"}, lambda r: (*r[:2], 0.5, r[3], None, r[5])),
]
# A where of PREDICATES, STRUCT_PREDICATES, or none (every live row).
UPDATE_WHERE = [*PREDICATES, *STRUCT_PREDICATES, None]

# A merge clause's model: (condition, action); an action maps (source row, target
# row) to the new row, or None to delete the target row.  Conditions are SQL's
# three-valued logic: NULL is not TRUE.
Cond = Callable[[Row | None, Row | None], bool]
Action = Callable[[Row | None, Row | None], Row | None]


def _gt(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and a > b


@dataclass(frozen=True)
class Merge:
    """A MERGE on ``id``: its builder's clauses, and their model by kind."""

    name: str
    build: Callable[[MergeBuilder], MergeBuilder]
    matched: tuple[tuple[Cond, Action], ...] = ()
    not_matched: tuple[tuple[Cond, Action], ...] = ()
    by_source: tuple[tuple[Cond, Action], ...] = ()

    def __repr__(self) -> str:
        return self.name

    def effect(self, base: list[Row], source: list[Row]) -> tuple[list[Row], int, int]:
        """The rows after merging ``source`` (one row a key) into ``base``, how many
        target rows a clause updated or deleted, and how many rows it inserted.  The
        first clause of its kind whose condition is TRUE applies; a row no clause
        applies to stays as it is."""
        by_id = {r[0]: r for r in source}
        out: list[Row] = []
        changed = 0
        for t in base:
            src = by_id.get(t[0])
            clauses = self.by_source if src is None else self.matched
            hit = next((act for cond, act in clauses if cond(src, t)), None)
            if hit is None:
                out.append(t)
                continue
            changed += 1
            new = hit(src, t)
            if new is not None:
                out.append(new)
        targets = {t[0] for t in base}
        inserted = 0
        for src in source:
            if src[0] in targets:
                continue
            hit = next((act for cond, act in self.not_matched if cond(src, None)), None)
            if hit is not None:
                new = hit(src, None)
                assert new is not None
                out.append(new)
                inserted += 1
        return out, changed, inserted


def _always(s: Row | None, t: Row | None) -> bool:
    return True


def _source(s: Row | None, t: Row | None) -> Row | None:
    return s


def _delete(s: Row | None, t: Row | None) -> Row | None:
    return None


def _s_from_source(s: Row | None, t: Row | None) -> Row | None:
    assert s is not None and t is not None
    return (t[0], s[1], *t[2:])


def _inserted_new(s: Row | None, t: Row | None) -> Row | None:
    assert s is not None  # the given columns; NULL for the rest
    return (s[0], "new", None, None, None, None)


def _gone(s: Row | None, t: Row | None) -> Row | None:
    assert t is not None
    return (t[0], "gone", *t[2:])


MERGES = [
    Merge("update_all + insert_all",
          lambda b: b.when_matched_update_all().when_not_matched_insert_all(),
          matched=((_always, _source),), not_matched=((_always, _source),)),
    Merge("delete if source.f IS NULL, else set s; insert if source.f > 0",
          lambda b: b.when_matched_delete(condition="source.f IS NULL")
          .when_matched_update(set={"s": "source.s"})
          .when_not_matched_insert_all(condition="source.f > 0"),
          matched=((lambda s, t: s is not None and s[2] is None, _delete),
                   (_always, _s_from_source)),
          not_matched=((lambda s, t: s is not None and _gt(s[2], 0.0), _source),)),
    Merge("update_all if newer; delete by source id > 4; insert id and s",
          lambda b: b.when_matched_update_all(
              condition="target.s IS NULL OR source.f > target.f")
          .when_not_matched_by_source_delete(condition="target.id > 4")
          .when_not_matched_insert(values={"id": "source.id", "s": "'new'"}),
          matched=((lambda s, t: s is not None and t is not None and (
              t[1] is None or _gt(s[2], t[2])), _source),),
          by_source=((lambda s, t: t is not None and t[0] > 4, _delete),),
          not_matched=((_always, _inserted_new),)),
    Merge("sync: update_all, insert_all, delete by source; mark by source on dev.os",
          lambda b: b.when_matched_update_all().when_not_matched_insert_all()
          .when_not_matched_by_source_update(set={"s": "'gone'"},
                                             condition="target.dev.os = 'x'")
          .when_not_matched_by_source_delete(),
          matched=((_always, _source),), not_matched=((_always, _source),),
          by_source=((lambda s, t: t is not None and _os(t) == "x", _gone),
                     (_always, _delete))),
]


# Prefixes of the puts a fault can hit: the commit's own writes (every write that
# creates a version makes both), and the immutable objects it uploads first.
COMMIT_FAULTS = [(p, w) for p in (POINTER_KEY, MANIFEST_PREFIX) for w in ("before", "after")]
OBJECT_FAULTS = [(p, w) for p in (DATA_PREFIX, TOMBSTONE_PREFIX) for w in ("before", "after")]


def arrow(rs: list[Row]) -> pa.Table:
    return pa.table([pa.array([r[k] for r in rs], f.type) for k, f in enumerate(SCHEMA)],
                    schema=SCHEMA)


canon = rp.canon


def table_rows(t: pa.Table) -> list[Row]:
    """The rows of a table read by anyone, nested values plain (rp.arrow_values)."""
    return rp.arrow_rows(t, SCHEMA.names, "table_rows")


def files_of(v: int, markers: set[int], restored: dict[int, int]) -> int:
    """The version whose files, tombstones and schema version ``v`` has: a marker
    (gc's, an expiry's) has those of the version before it, a restore those of the
    version it restored; any other version its own.  Restoring a version of the
    same files is a no-op (protocol.md, "Restore", step 2)."""
    while v in markers or v in restored:
        v = v - 1 if v in markers else restored[v]
    return v


@dataclass(frozen=True)
class Effect:
    rows: list[Row]  # the model's rows after the operation
    deleted: int  # live rows the operation deletes
    new_version: bool  # does the operation create a version?
    # ... or may it be a no-op as well (a restore of the same rows, whose files the
    # model does not know: a delete dropping a file whole can leave an earlier set)
    maybe_noop: bool = False


# What an operation does to the rows of the version it commits on.
EffectOf = Callable[[list[Row]], Effect]


@dataclass(frozen=True)
class Race:
    """Another writer's commit that lands right before our pointer CAS."""

    append: list[Row] | None = None  # it appends these rows ...
    delete: Pred | None = None  # ... or deletes by this predicate


# A clustering compaction's columns: the top-level orderable ones, with a struct leaf
# one draw in three; one draw in four adds a column clustering refuses (a struct, a
# list element, a map: no order, or many values per row).
CLUSTER_COLUMNS = ("id", "s", "f")
CLUSTER_LEAVES = (None, None, None, None, "dev.os", "dev.hw.ram")
CLUSTER_REFUSED = (None, None, None, None, None, None, "dev", "tags.element", "attrs.key")
CLUSTER_HOW = ("sort", "zorder", "property")


def _order_key(v: Any) -> tuple[int, Any]:
    """A value's place in a clustering order: NULL below every value."""
    return (0, 0) if v is None else (1, v)


def _leaf(data: pa.Table, name: str) -> Any:
    """Column ``name`` of ``data``, a dotted struct path read step by step with
    pyarrow (NULL under a NULL struct)."""
    top, *steps = name.split(".")
    col: Any = data[top]
    for step in steps:
        col = pc.struct_field(col, step)
    return col


def check_clustered(t: Table, kind: str, names: list[str]) -> int:
    """The files the head version (a clustering compaction) added, read back with
    pyarrow, per partition: by ``sort``, each file's rows in key order and the files
    one sorted run (each file's last key at most the next file's first); by
    ``zorder``, the files' key boxes pairwise disjoint in some column, unless both
    hold one and the same key (a run of one key longer than a file cannot be cut
    apart).  Returns how many files it read."""
    mio = t.io
    head = t.refresh().snapshot
    before = {f.path for f in mio.live_files(mio.at_version(head, head.version - 1))}
    parts: dict[Any, list[list[tuple[tuple[int, Any], ...]]]] = {}
    for f in mio.live_files(head):
        if f.path in before:
            continue
        data = pq.read_table(io.BytesIO(t.store.get(f.path).data),
                             columns=sorted({n.split(".")[0] for n in names}))
        keys = list(zip(*([_order_key(v) for v in _leaf(data, n).to_pylist()]
                          for n in names), strict=True))
        assert keys, f"clustering wrote an empty file {f.path}"
        parts.setdefault(f.partition, []).append(keys)
    for files in parts.values():
        if kind == SORT:
            assert all(keys == sorted(keys) for keys in files), f"a file out of {names} order"
            run = sorted(files)
            assert all(a[-1] <= b[0] for a, b in itertools.pairwise(run)), (
                f"sorted files overlap in {names}: {[(k[0], k[-1]) for k in run]}")
        else:
            boxes = [tuple((min(c), max(c)) for c in zip(*keys, strict=True))
                     for keys in files]
            for a, b in itertools.combinations(boxes, 2):
                apart = any(x[1] < y[0] or y[1] < x[0] for x, y in zip(a, b, strict=True))
                point = all(lo == hi for lo, hi in a)
                assert apart or (point and a == b), f"z-ordered files overlap: {a} {b}"
    return sum(len(files) for files in parts.values())


class Stats:
    """What happened over a whole run, to prove the faults really fired."""

    def __init__(self) -> None:
        self.outcomes: dict[str, int] = {}
        self.segment_versions = 0  # checks made on a version with 2+ segment objects
        self.export_checks = 0  # exports read back by the outside readers
        self.export_drops = 0  # exports dropped (objects deleted), to be exported afresh
        self.struct_leaf_deletes = 0  # versions made by a delete on a struct leaf alone
        self.versions: Counter[str] = Counter()  # versions each write rule made
        self.runs: Counter[str] = Counter()  # times each write rule ran
        self.clustered: Counter[str] = Counter()  # clustering versions checked, by kind

    def add(self, label: str) -> None:
        self.outcomes[label] = self.outcomes.get(label, 0) + 1


# --- the machine -----------------------------------------------------------------------


class TableMachine(RuleBasedStateMachine):
    # Set by the test function that runs the machine (see ``machine_for``).
    new_uri: ClassVar[Callable[[], str]]
    options: ClassVar[dict[str, str] | None] = None
    write_options: ClassVar[caslake.WriteOptions] = caslake.WriteOptions()
    stats: ClassVar[Stats]
    # The outside readers' options; None: no export rule (they cannot open a memory store).
    exports: ClassVar[ExportReaders | None] = None
    partition_specs: ClassVar[tuple[list[str] | None, ...]] = (None,)

    def __init__(self) -> None:
        super().__init__()
        self.uri = self.new_uri()
        self.steps = 0
        self.model: list[list[Row]] = [[]]  # rows per version
        self.acked: dict[int, str] = {}  # version -> commit id acknowledged by a CommitResult
        self.oldest = 0  # gc expired the versions below this one
        self.markers: set[int] = set()  # versions that are gc's expiry markers
        self.restored: dict[int, int] = {}  # a restore's version -> the version it restored
        self.armed: Fault | None = None  # a transient fault for the next write
        self.race: Race | None = None  # another writer's commit right before our CAS
        self.exported: dict[str, list[int]] = {"iceberg": [], "delta": []}  # versions
        self.iceberg_from = 0  # the Iceberg export keeps the snapshots from this version
        # The table is created by ``start``, with the partition spec it draws.
        self.partitioned = False
        self.plain = open_store(self.uri, self.options)
        self.store = FaultyStore(open_store(self.uri, self.options), [])

    def _load(self) -> Table:
        t = Table.load(self.store, write_options=self.write_options)
        t.commit_policy = FAST
        return t

    def _fresh(self) -> Table:
        """A new handle (cold caches) on a plain, fault-free store."""
        return Table.load(self.plain)

    @property
    def current(self) -> list[Row]:
        return self.model[-1]

    # --- running one write and reconciling the model ----------------------------------

    def _arm_race(self, race: Race) -> tuple[Fault, list[CommitResult]]:
        """Another writer commits just before our next pointer CAS, so the CAS fails
        with 412 and the commit must settle (lost), clean up and rebase."""
        landed: list[CommitResult] = []

        def other_wins(key: str) -> CaslakeError:
            other = Table.load(self.plain)
            other.commit_policy = FAST
            if race.append is not None:
                landed.append(other.append(arrow(race.append)))
            else:
                assert race.delete is not None
                landed.append(other.delete(race.delete.sql))
            # Even if the other delete was a no-op, a 412 must be settled, not trusted.
            return PreconditionFailed("another writer moved the pointer", key=key)

        return Fault(frozenset({"put"}), "before", prefix=POINTER_KEY, times=1,
                     error=other_wins), landed

    def _manifests(self) -> set[str]:
        return {m.key for m in self.plain.list(MANIFEST_PREFIX)}

    def _adopt_race(self, race: Race, other: CommitResult, effect_of: EffectOf,
                    manifests_before: set[str]) -> Effect:
        """Put the other writer's commit into the model; what our write must do now."""
        old_version = len(self.model) - 1
        if other.noop:
            assert race.delete is not None and other.version == old_version, other
            return effect_of(self.current)
        assert other.version == old_version + 1, other
        self.acked[other.version] = other.commit_id
        # Our manifest that lost this version slot was removed (protocol.md, step 7);
        # only the winner's is new there (orphans of earlier failed writes may remain).
        new = self._manifests() - manifests_before
        slot = sorted(k for k in new if k.startswith(f"{MANIFEST_PREFIX}v{other.version:020d}-"))
        assert len(slot) == 1, f"the losing manifest of version {other.version} is left: {slot}"
        if race.append is not None:
            mine = effect_of(self.current)
            self.model.append(canon(self.current + race.append))
            # The concurrent append touched none of the files our delete targets, so the
            # delete keeps its plan: rows the other writer appended all survive.
            return Effect(mine.rows + race.append, mine.deleted, mine.new_version)
        assert race.delete is not None
        holds = race.delete.holds
        self.model.append(canon([r for r in self.current if not holds(r)]))
        # Our delete is planned again (or kept, if the other touched other files) on the
        # new version: rows already deleted are neither deleted nor counted twice.
        return effect_of(self.current)

    def _files_of(self, v: int) -> int:
        return files_of(v, self.markers, self.restored)

    def _write(self, name: str, run: Callable[[Table], CommitResult],
               effect_of: EffectOf, *, rebases: bool = True) -> bool:
        """Run one write (under the fault or race armed) and reconcile the model; did
        its commit land?  ``rebases=False``: a write that must land on the version it
        planned on (a restore): a commit landing first makes it ConcurrentModification,
        and nothing of it applies."""
        old_version = len(self.model) - 1
        self.stats.runs[name] += 1
        fault, race = self.armed, self.race
        self.armed = self.race = None
        race_results: list[CommitResult] = []
        manifests_before: set[str] = set()
        if race is not None:
            fault, race_results = self._arm_race(race)
            manifests_before = self._manifests()
        if fault is not None:
            self.store.faults.append(fault)
        crashed = False
        try:
            res: CommitResult | None = run(self.table)
            error: CaslakeError | None = None
        except CaslakeError as e:  # anything else (a bare Exception) fails the test
            res, error = None, e
        except SimulatedCrash:
            res, error, crashed = None, None, True
        finally:
            if fault is not None:
                self.store.faults.remove(fault)
        fired = fault is not None and fault.fired > 0
        if not fired:
            # No fault applied to this operation (none armed, or not one it makes).
            assert error is None and not crashed, f"{name} failed without a fault: {error!r}"
        if crashed:
            # The writer process died; the table lives on with a new writer.
            self.table = self._load()
        what = ("no fault" if fault is None or not fired else
                f"race ({'append' if race.append is not None else 'delete'})"
                if race is not None else "crash" if crashed else f"{fault.when} {fault.prefix}")
        outcome = ("died" if crashed else type(error).__name__ if error is not None
                   else "noop" if res is not None and res.noop else "ok")
        label = f"{name}: {what} -> {outcome}"
        event(label)
        self.stats.add(label if fired else "no fault")
        note(f"{label}; error={error!r}")

        if race is not None and fired and not rebases and not race_results[0].noop:
            assert isinstance(error, ConcurrentModification), f"{name} under a race: {error!r}"
            self._adopt_race(race, race_results[0], effect_of, manifests_before)
            assert self.observer.refresh().version == len(self.model) - 1, (
                f"{name} was refused, yet it committed")
            assert table_rows(self.observer.scan().to_arrow()) == self.current
            return False
        if race is not None and fired:
            assert res is not None, f"{name} lost a plain race: {error!r}"
            # It lost one CAS; then it either committed again, or re-planned on the new
            # version and found nothing left to do (a purge whose file the race emptied).
            assert res.attempts >= (1 if res.noop else 2), res
            (other,) = race_results
            effect = self._adopt_race(race, other, effect_of, manifests_before)
            old_version = len(self.model) - 1
        else:
            effect = effect_of(self.current)
        if effect.maybe_noop and res is not None and res.noop:
            effect = Effect(effect.rows, 0, False)

        if not effect.new_version:
            # Nothing to do: no version may be created, fault or not.
            if res is not None:
                assert res.noop and res.rows_deleted == 0, res
            assert self.observer.refresh().version == old_version
            return False

        real = self.observer.refresh()
        assert real.version in (old_version, old_version + 1), (
            f"{name}: table is at version {real.version}, expected {old_version} or "
            f"{old_version + 1}")
        landed = real.version == old_version + 1
        got = table_rows(real.scan().to_arrow())
        if res is not None:
            assert landed, f"{name} returned version {res.version} but did not land"
            assert not res.noop and res.version == old_version + 1, res
            assert res.rows_deleted == effect.deleted, (res, effect.deleted)
            assert self.table.version == res.version, "the handle did not move to its commit"
            self.acked[res.version] = res.commit_id
        elif not crashed and not isinstance(error, CommitOutcomeUnknown):
            assert not landed, f"{name} raised {error!r} but its commit landed"
        if landed:
            assert got == canon(effect.rows), f"{name}: the new version is not the model's"
            self.model.append(canon(effect.rows))
            self.stats.versions[name] += 1
            self.stats.versions["partitioned"] += self.partitioned
        else:
            assert got == self.current, f"{name}: the old version changed"
        return landed

    # --- rules -----------------------------------------------------------------------------

    @initialize(data=st.data())
    def start(self, data: st.DataObject) -> None:
        """Create the table, with a partition spec the program draws (hidden
        partitioning changes where rows are written, never which rows a version
        holds).  A draw, not a rotation kept outside Hypothesis: the same choices
        must replay the same program, or Hypothesis reports its data as flaky."""
        spec = data.draw(st.sampled_from(self.partition_specs), label="partition_by")
        caslake.create_table(self.uri, SCHEMA, storage_options=self.options,
                             write_options=self.write_options, partition_by=spec)
        self.partitioned = spec is not None
        self.table = self._load()
        # A reader on a plain, fault-free store (manifests are immutable, so its cache
        # stays valid; every read still starts from the pointer).
        self.observer = Table.load(self.plain)
        note(f"table at {self.uri}, partition_by={spec}")

    @rule(batch=batch_st)
    def append(self, batch: list[Row]) -> None:
        self._write("append", lambda t: t.append(arrow(batch)),
                    lambda base: Effect(base + batch, 0, True))

    @rule(batch=batch_st)
    def group_append(self, batch: list[Row]) -> None:
        """An append with group commit on (docs/protocol.md, "Group commit"): alone it
        commits as ``append`` does; after losing a race it publishes an intent and folds
        it into the next version.  Either way the version its result names holds its
        commit id (its own, or in the manifest's ``intents``), and the model is the
        same as an append's."""
        if self.armed is not None and self.armed.when == "crash":
            # A dead writer's published intent stays foldable until its deadline, so a
            # later fold may apply it or not depending on timing: a program here would
            # not be repeatable.  tests/group/test_group_crash.py crashes every call.
            self.armed = None

        def run(t: Table) -> CommitResult:
            t.commit_policy = GROUP_FAST
            try:
                res = t.append(arrow(batch))
            finally:
                t.commit_policy = FAST
            head = self.observer.refresh().snapshot
            assert self.observer.io.at_version(head, res.version).manifest.has_commit(
                res.commit_id), res
            return res

        self._write("group_append", run, lambda base: Effect(base + batch, 0, True))

    def _delete(self, name: str, where: str, holds: Callable[[Row], bool]) -> None:
        def effect(base: list[Row]) -> Effect:
            kept = [r for r in base if not holds(r)]
            return Effect(kept, len(base) - len(kept), len(kept) < len(base))

        self._write(name, lambda t: t.delete(where), effect)

    @rule(k=ids)
    def delete_key(self, k: int) -> None:
        self._delete("delete_key", f"id = {k}", lambda r: r[0] == k)

    @rule(data=st.data())
    def delete_range(self, data: st.DataObject) -> None:
        # Ends drawn from the ids the table holds (when it holds any), so a range
        # usually deletes rows: drawn from 0..12, the fixed (derandomized) programs
        # never made a delete_range version.
        present = sorted({r[0] for r in self.current if r[0] is not None})
        ends = st.sampled_from(present) if present else ids
        a, b = data.draw(ends, label="a"), data.draw(ends, label="b")
        lo, hi = min(a, b), max(a, b)
        self._delete("delete_range", f"id BETWEEN {lo} AND {hi}", lambda r: lo <= r[0] <= hi)

    @rule(pred=st.sampled_from(PREDICATES))
    def delete_predicate(self, pred: Pred) -> None:
        self._delete("delete_predicate", pred.sql, pred.holds)

    @rule(pred=st.sampled_from(STRUCT_PREDICATES))
    def delete_struct_leaf(self, pred: Pred) -> None:
        before = len(self.model)
        self._delete("delete_struct_leaf", pred.sql, pred.holds)
        self.stats.struct_leaf_deletes += len(self.model) - before

    @rule(batch=batch_st)
    def upsert(self, batch: list[Row]) -> None:
        keys = {r[0] for r in batch}
        # A key twice in the input is refused by default (DuplicateKey, tested in
        # tests/table/test_append_input.py); the model keeps the last row per key.
        last = {r[0]: i for i, r in enumerate(batch)}
        rows = [r for i, r in enumerate(batch) if last[r[0]] == i]

        def effect(base: list[Row]) -> Effect:
            kept = [r for r in base if r[0] not in keys]
            return Effect(kept + rows, len(base) - len(kept), True)

        self._write("upsert", lambda t: t.upsert(arrow(batch), key=["id"], on_duplicate="last"),
                    effect)

    @rule(pred=st.sampled_from(PREDICATES), batch=batch_st)
    def transaction(self, pred: Pred, batch: list[Row]) -> None:
        def run(t: Table) -> CommitResult:
            with t.transaction() as tx:
                tx.delete(pred.sql)
                tx.append(arrow(batch))
            assert tx.result is not None
            return tx.result

        def effect(base: list[Row]) -> Effect:
            kept = [r for r in base if not pred.holds(r)]
            return Effect(kept + batch, len(base) - len(kept), True)

        self._write("transaction", run, effect)

    @rule(update=st.sampled_from(UPDATES), where=st.sampled_from(UPDATE_WHERE))
    def update(self, update: Update, where: Pred | None) -> None:
        """UPDATE ... SET ... WHERE: the matching live rows get the new values (each
        value computed from the row as it was); none matching makes no version.  A
        concurrent append's rows are not updated (it rebases as a delete does)."""
        def effect(base: list[Row]) -> Effect:
            hit = [where is None or where.holds(r) for r in base]
            rows = [update.apply(r) if h else r for r, h in zip(base, hit, strict=True)]
            return Effect(rows, sum(hit), any(hit))

        self._write("update", lambda t: t.update(set=dict(update.sql), where=where and where.sql),
                    effect)

    # Not under a concurrent delete: a merge whose plan a concurrent delete does not
    # conflict with keeps it, so a source row matched (but left alone) by a target
    # row the delete removed stays uninserted -- snapshot isolation, which a model
    # replaying the delete first cannot tell from a re-plan (test_dml_concurrency.py
    # covers merge against deletes).  Concurrent appends it must ignore.
    @precondition(lambda self: self.race is None or self.race.append is not None)
    @rule(merge=st.sampled_from(MERGES), batch=batch_st)
    def merge(self, merge: Merge, batch: list[Row]) -> None:
        """MERGE a source (one row a key: a target row two source rows match is
        refused, tested in tests/dml/test_merge_model.py) on ``id``."""
        last = {r[0]: i for i, r in enumerate(batch)}
        source = [r for i, r in enumerate(batch) if last[r[0]] == i]

        def effect(base: list[Row]) -> Effect:
            rows, changed, inserted = merge.effect(base, source)
            return Effect(rows, changed, changed + inserted > 0)

        self._write("merge", lambda t: merge.build(t.merge(arrow(source), on=["id"])).execute(),
                    effect)

    @rule(data=st.data())
    def restore(self, data: st.DataObject) -> None:
        """Restore a version: the new version has its rows.  None is made when the head
        has that version's files already (it is the head, or a marker or restore of
        it); a version gc expired is VersionExpired, and nothing changes."""
        head = len(self.model) - 1
        if self.oldest and data.draw(st.integers(0, 9), label="expired") == 0:
            v = data.draw(st.integers(0, self.oldest - 1), label="expired version")
            with pytest.raises(VersionExpired):
                self._fresh().restore(version=v)
            assert self.observer.refresh().version == head
            return
        # gc and purge(expire) keep few versions: one whose files differ, if any.
        differ = [v for v in range(self.oldest, head)
                  if self._files_of(v) != self._files_of(head)]
        v = data.draw(st.sampled_from(differ or [head]), label="restore version")

        def effect(base: list[Row]) -> Effect:
            # The same files as the head's: a no-op.  Other rows: a version.  The
            # same rows in other files: either.
            if self._files_of(head) == self._files_of(v):
                return Effect(base, 0, False)
            return Effect(self.model[v], len(base), True, maybe_noop=self.model[v] == base)

        if self._write("restore", lambda t: t.restore(version=v), effect, rebases=False):
            self.restored[len(self.model) - 1] = v

    @rule(data=st.data())
    def read_version(self, data: st.DataObject) -> None:
        v = data.draw(st.integers(self.oldest, len(self.model) - 1), label="version")
        got = table_rows(self.table.scan(version=v).to_arrow())
        assert got == self.model[v], f"version {v} differs from the model"

    @rule()
    def reopen(self) -> None:
        self.table = self._load()

    @rule()
    def compact(self) -> None:
        """Same rows, fewer files (or, with the ``clustering.columns`` property set by
        the cluster rule, a clustering)."""
        self._compact("compact", 1 << 20, None, None)

    def _compact(self, name: str, target: int, sort_by: list[str] | None,
                 zorder_by: list[str] | None) -> None:
        """A compaction: the same rows.  Whether there is anything to compact is
        decided on the version it commits on (after any race), as compact() itself
        decides; a clustering one (by the arguments or the table's property) is
        checked on the files it wrote (:func:`check_clustered`)."""
        def order_at(v: int) -> ClusterOrder | None:
            io = self.observer.io
            snap = io.at_version(io.latest(), v)
            return cluster_order(self.observer.context, snap, sort_by, zorder_by)

        def effect(base: list[Row]) -> Effect:
            io = self.observer.io
            snap = io.at_version(io.latest(), len(self.model) - 1)
            work = plan_compaction(self.observer.context, snap, target_file_size=target,
                                   deleted_fraction=0.1, order=order_at(len(self.model) - 1))
            return Effect(base, 0, work is not None)

        if self._write(name, lambda t: t.compact(target_file_size=target, sort_by=sort_by,
                                                 zorder_by=zorder_by), effect):
            order = order_at(len(self.model) - 2)  # the version it committed on
            if order is not None:
                kind = order.clustering.kind
                files = check_clustered(self.observer, kind,
                                        [c.name for c in order.columns])
                self.stats.clustered[kind] += 1
                event(f"{name}: {order.clustering.to_property()}, {files} files checked")

    @rule(data=st.data())
    def cluster(self, data: st.DataObject) -> None:
        """A clustering compaction, ``compact(sort_by=...)`` or ``compact(zorder_by=...)``
        by drawn columns, or the ``clustering.columns`` property set (a version of its
        own) and then a plain ``compact()``: the same rows (it reorders them), time
        travel unchanged, and the files it wrote in key order (:func:`check_clustered`).
        The property stays set, so later compactions (the compact rule's) cluster too.
        Struct leaves (``dev.hw.ram``) cluster like columns (docs/format.md); a struct,
        a list element or a map among the columns is refused, typed and naming it, and
        changes nothing."""
        how = data.draw(st.sampled_from(CLUSTER_HOW), label="how")
        cols = data.draw(st.lists(st.sampled_from(CLUSTER_COLUMNS), min_size=1, max_size=3,
                                  unique=True), label="columns")
        leaf = data.draw(st.sampled_from(CLUSTER_LEAVES), label="struct leaf")
        cols += [leaf] if leaf is not None else []
        if how != "property":
            bad = data.draw(st.sampled_from(CLUSTER_REFUSED), label="refused column")
            if bad is not None:
                self._cluster_refused(how, [*cols, bad], bad)
                return
        # a few files a clustering, so the check compares files
        target = 4 * self.write_options.target_file_size
        if how == "property":
            kind = data.draw(st.sampled_from([SORT, ZORDER]), label="kind")
            prop = {CLUSTERING_COLUMNS: f"{kind}({', '.join(cols)})"}
            self._write("set_clustering", lambda t: t.set_properties(prop),
                        lambda base: Effect(base, 0, True))
            self._compact("cluster", target, None, None)
        else:
            by = (cols, None) if how == "sort" else (None, cols)
            self._compact("cluster", target, *by)

    def _cluster_refused(self, how: str, cols: list[str], leaf: str) -> None:
        head = len(self.model) - 1
        with pytest.raises(CaslakeError, match=re.escape(repr(leaf))):
            self._fresh().compact(**{f"{how}_by": cols})  # type: ignore[arg-type]
        assert self.observer.refresh().version == head, "a refused clustering committed"
        self.stats.runs["cluster refused"] += 1
        event(f"cluster: {how}_by {leaf} -> refused")

    # Not with exports: there purge(expire=True) is refused (ErasureHeld) while an export
    # names a file holding a matching row, which this rule does not model yet
    # (tests/maintenance/test_purge_expire.py covers refusal and what expiry keeps).
    @precondition(lambda self: self.exports is None)
    @rule(pred=st.sampled_from(PREDICATES))
    def purge(self, pred: Pred) -> None:
        """Physical erasure: the live rows matching go; a version is made whenever any
        stored row (live or already deleted) matches.  Then ``purge(expire=True)``
        expires the versions before it: no object on storage holds a matching row
        (every data object is decoded, the manifests are not trusted) and only the
        referenced objects remain."""
        def run(t: Table) -> CommitResult:
            if self.options is None:  # S3 enforces its 5 MiB; elsewhere splice tiny files
                t.store.min_part_size = 64
            r = t.purge(pred.sql)
            m = t.snapshot.manifest
            # live rows the purge erased: those of the files it removed, less those of
            # the files it added (the summary counts both)
            gone = 0 if r.noop else m.summary["deleted_rows"] - m.summary["added_rows"]
            return CommitResult(r.version, r.commit_id or "", "purge", r.attempts,
                                rows_deleted=gone, noop=r.noop)

        def effect(base: list[Row]) -> Effect:
            io = self.observer.io
            snap = io.at_version(io.latest(), len(self.model) - 1)
            kept = [r for r in base if not pred.holds(r)]
            stored = bool(purge_mod._plan(self.observer.context, snap, pred.sql).files)
            return Effect(kept, len(base) - len(kept), stored)

        version = len(self.model)
        # Rows a racing writer appends are committed before the purge but never seen by
        # it: they survive, as with a delete (protocol.md, "Purge").
        raced = self.race is not None and self.race.append is not None
        self._write("purge", run, effect)
        if len(self.model) <= version or raced:
            return  # no version (nothing stored matched, or a fault), or new rows raced in
        # Erasure: purge again with expire (nothing live matches now; the versions
        # before hold the rows), which expires them and deletes their objects at once.
        head = len(self.model) - 1
        report = self._fresh().purge(pred.sql, expire=True)
        assert report.noop and report.expired_below == head, report
        self._wait_out_fence()
        self.model.append(self.current)  # the expiry marker
        self.markers.add(len(self.model) - 1)
        self.oldest = head
        assert self.observer.refresh().version == len(self.model) - 1
        for meta in self.plain.list(DATA_PREFIX):
            data = pq.read_table(io.BytesIO(self.plain.get(meta.key).data))
            assert not any(pred.holds(r) for r in table_rows(data)), (
                f"{meta.key} still holds a row matching {pred.sql!r} after purge(expire)")
        refs, _ = referenced_keys(self.plain)
        assert list_keys(self.plain) == refs, "purge(expire) left unreferenced objects"
        with pytest.raises(VersionNotFound):
            self._fresh().scan(version=head - 1).to_arrow()

    @precondition(lambda self: self.armed is None and self.race is None)
    @rule()
    def gc(self) -> None:
        """gc with a clock 30 days ahead: every version but the newest data version
        expires (a marker commit records it) and every unreferenced object goes."""
        keep = max(v for v in range(len(self.model)) if v not in self.markers)
        report = self._fresh().gc(now=datetime.now(UTC) + timedelta(days=30))
        # A marker version: the expiry (whenever it expires versions), or gc's fence
        # alone (it collected objects written after the last fence).
        assert report.head_version in (len(self.model) - 1, len(self.model))
        assert keep <= self.oldest or report.head_version == len(self.model)
        if report.head_version == len(self.model):
            self.model.append(self.current)
            self.markers.add(len(self.model) - 1)
            self.oldest = max(self.oldest, keep)
        assert (report.oldest_version, report.head_version) == (self.oldest, len(self.model) - 1)
        refs, _ = referenced_keys(self.plain)
        # gc keeps what the latest exports reference (as their own readers list it)
        assert list_keys(self.plain) == refs | self._check_exports(), (
            "gc left unreferenced objects")
        if self.oldest:
            with pytest.raises(VersionNotFound):
                self._fresh().scan(version=self.oldest - 1).to_arrow()
        self._wait_out_fence()

    def _export(self, *fmts: str) -> None:
        """Export the head version (a no-op where it is exported already); the
        exports read as the model's rows at the versions they name."""
        head = len(self.model) - 1
        for fmt in fmts:
            done = self.exported[fmt]
            res = getattr(self._fresh(), f"export_{fmt}")()
            assert res.version == head and res.noop == (done[-1:] == [head]), (res, done)
            if not res.noop:
                done.append(head)
                if fmt == "iceberg":
                    self.iceberg_from = self.oldest
            event(f"export {fmt}{' (no-op)' if res.noop else ''}")
        self._check_exports()

    # Three rules, so that exports come often enough to follow one another across
    # compactions, deletes that drop files, and gc.
    @precondition(lambda self: self.exports is not None)
    @rule()
    def export_iceberg(self) -> None:
        self._export("iceberg")

    @precondition(lambda self: self.exports is not None)
    @rule()
    def export_delta(self) -> None:
        self._export("delta")

    @precondition(lambda self: self.exports is not None)
    @rule()
    def export_both(self) -> None:
        self._export("iceberg", "delta")

    @precondition(lambda self: self.exports is not None)
    @rule(fmt=st.sampled_from(["iceberg", "delta"]))
    def drop_export(self, fmt: str) -> None:
        """Drop one export: every object of it goes and nothing else (the table and
        the other export read as before); its readers find no table; the next export
        of it starts afresh (its first snapshot or log entry is the head then)."""
        before = all_keys(self.plain)
        ours = {k for k in before if k.startswith(EXPORT_PREFIXES[fmt])}
        assert bool(ours) == bool(self.exported[fmt]), (fmt, self.exported[fmt])
        assert self._fresh().drop_export(fmt) == len(ours)
        assert all_keys(self.plain) == before - ours, f"drop_export({fmt}) deleted others"
        if fmt == "iceberg":
            assert read_iceberg_hint(self.plain) is None
        else:
            from deltalake.exceptions import TableNotFoundError

            with pytest.raises(TableNotFoundError):
                deltalake_rows(self.uri, SCHEMA, storage_options=self.exports.delta
                               if self.exports is not None else None)
        self.stats.export_drops += bool(ours)
        event(f"drop_export {fmt}{'' if ours else ' (none)'}")
        self.exported[fmt] = []
        self._check_exports()

    def _check_exports(self) -> set[str]:
        """Read the exports with the outside readers: the Iceberg export's current
        snapshot is the last Iceberg export, it keeps the snapshot of every export
        since the oldest version retained then, and each reads as the model's rows
        at its version; the Delta export reads as the model's rows at the last Delta
        export.  Returns the data keys they reference (what gc must keep)."""
        if self.exports is None:
            return set()
        from pyiceberg.table import StaticTable

        root = f"{self.plain.uri.rstrip('/')}/"

        def key(path: str) -> str:  # readers list paths with or without file://
            return path.removeprefix("file://").removeprefix(root.removeprefix("file://"))

        files: set[str] = set()
        if self.exported["iceberg"]:
            version = read_iceberg_hint(self.plain)
            assert version == self.exported["iceberg"][-1], version
            t = StaticTable.from_metadata(root + iceberg_metadata_key(version),
                                          properties=self.exports.iceberg or {})
            current = t.current_snapshot()
            assert current is not None and current.summary is not None
            assert current.summary["caslake.version"] == str(version)
            shown = []
            for snap in t.metadata.snapshots:
                assert snap.summary is not None
                v = int(str(snap.summary["caslake.version"]))
                scan = t.scan(snapshot_id=snap.snapshot_id)
                assert table_rows(scan.to_arrow()) == self.model[v], f"Iceberg export of {v}"
                files |= {key(task.file.file_path) for task in scan.plan_files()}
                shown.append(v)
            assert shown == [v for v in self.exported["iceberg"] if v >= self.iceberg_from], (
                shown, self.exported["iceberg"], self.iceberg_from)
        if self.exported["delta"]:
            from deltalake import DeltaTable

            v = self.exported["delta"][-1]
            got = deltalake_rows(self.uri, SCHEMA, storage_options=self.exports.delta)
            assert table_rows(got) == self.model[v], f"Delta export of {v}"
            dt = DeltaTable(self.uri, storage_options=self.exports.delta)
            files |= {key(u) for u in dt.file_uris()}
        self.stats.export_checks += 1
        return {f for f in files if f.startswith(DATA_PREFIX)}

    def _wait_out_fence(self) -> None:
        """Writers that start before gc's fence are refused (WriterOutlivedGc).  A fault
        can leave an orphan seconds before gc runs, and on S3 (whole-second
        Last-Modified) the fence may then be up to a second ahead of now."""
        wait_out_gc_fence(self.observer)

    # Two rules, so that about one step in five arms a fault for the next write.
    @precondition(lambda self: self.armed is None and self.race is None)
    @rule(spec=st.sampled_from(COMMIT_FAULTS))
    def inject_commit_fault(self, spec: tuple[str, str]) -> None:
        self.armed = Fault(frozenset({"put"}), spec[1], prefix=spec[0], times=1)

    @precondition(lambda self: self.armed is None and self.race is None)
    @rule(spec=st.sampled_from(OBJECT_FAULTS))
    def inject_object_fault(self, spec: tuple[str, str]) -> None:
        self.armed = Fault(frozenset({"put"}), spec[1], prefix=spec[0], times=1)

    @precondition(lambda self: self.armed is None and self.race is None)
    @rule(call=st.integers(1, 14))
    def inject_crash(self, call: int) -> None:
        """The writer dies at its ``call``-th store call of the next write (and stays
        dead: every later call of that write crashes too)."""
        self.armed = Fault(ALL_OPS, "crash", calls=frozenset(range(call, call + 1_000)))

    @precondition(lambda self: self.armed is None and self.race is None)
    @rule(batch=batch_st)
    def concurrent_append(self, batch: list[Row]) -> None:
        self.race = Race(append=batch)

    @precondition(lambda self: self.armed is None and self.race is None)
    @rule(pred=st.sampled_from(PREDICATES))
    def concurrent_delete(self, pred: Pred) -> None:
        self.race = Race(delete=pred)

    # --- invariants ------------------------------------------------------------------------

    @invariant()
    def latest_equals_model(self) -> None:
        rows = table_rows(self.observer.scan().to_arrow())
        assert self.observer.version == len(self.model) - 1
        assert rows == self.current
        segments = self.observer.snapshot.manifest.segments
        if sum(s.is_object for s in segments) >= 2:
            self.stats.segment_versions += 1  # segment statistics really were in play

    @invariant()
    def acknowledged_commits_are_visible(self) -> None:
        hist = self.observer.history()
        assert [h.version for h in hist] == list(range(len(self.model) - 1, self.oldest - 1, -1)), (
            "the history has versions the model does not")
        by_version = {h.version: h.commit_id for h in hist}
        assert len(set(by_version.values())) == len(hist), "a commit id appears twice"
        for v, cid in self.acked.items():
            if v < self.oldest:
                continue  # expired by gc
            assert by_version.get(v) == cid, f"acknowledged commit {cid} is not version {v}"

    @invariant()
    def referenced_objects_exist(self) -> None:
        self.steps += 1
        if self.steps % VERIFY_EVERY == 0:
            report = verify_table(self.plain)
            assert report.ok, report.problems

    def teardown(self) -> None:
        try:
            report = verify_table(self.plain, deep=True, all_versions=True)
            assert report.ok, report.problems
            t = self._fresh()
            for v, want in enumerate(self.model):
                if v >= self.oldest:
                    assert table_rows(t.scan(version=v).to_arrow()) == want, f"version {v}"
            self._check_exports()
        finally:
            if self.uri.startswith("memory://"):
                forget_memory_space(self.uri[len("memory://"):])


def machine_for(new_uri: Callable[[], str], options: dict[str, str] | None,
                write_options: caslake.WriteOptions, exports: ExportReaders | None = None,
                partition_specs: tuple[list[str] | None, ...] = (None,)
                ) -> tuple[type[TableMachine], Stats]:
    stats = Stats()
    attrs: dict[str, Any] = {"new_uri": staticmethod(new_uri), "options": options,
                             "write_options": write_options, "stats": stats,
                             "exports": exports, "partition_specs": partition_specs}
    return type("Machine", (TableMachine,), attrs), stats


def check_faults_fired(stats: Stats) -> None:
    """The armed faults really fired, both ways: a write settled or rebased, and a
    write failed with a typed error."""
    fired = {k: v for k, v in stats.outcomes.items() if k != "no fault"}
    print(f"\nfault outcomes: {dict(sorted(fired.items()))}")
    assert any(k.endswith("-> ok") for k in fired), fired  # settled or rebased
    assert any(k.endswith("Error") for k in fired), fired  # failed, typed


def check_rules_made_versions(stats: Stats) -> None:
    """Every write rule made versions (update, merge, restore and clustering among them)."""
    print(f"versions by rule: {dict(sorted(stats.versions.items()))} "
          f"of runs {dict(sorted(stats.runs.items()))}")
    missing = [r for r in WRITE_RULES if stats.versions[r] == 0]
    assert not missing, f"no version made by {missing}: {stats.versions}"


WRITE_RULES = ("append", "group_append", "delete_key", "delete_range", "delete_predicate",
               "delete_struct_leaf", "upsert", "transaction", "update", "merge", "restore",
               "compact", "cluster", "set_clustering")


# --- the coverage script -----------------------------------------------------------------
#
# Random programs leave rules out and reach some outcomes (a typed failure under a
# fault, a version of each rule) only in most runs, and a fixed (derandomized) set of
# programs changes whenever a rule is added.  So coverage is proved by an explicit
# program instead: run_script drives the machine through coverage_script's steps,
# with the machine's own rules, preconditions, invariants and teardown, and the
# checks that every rule ran, every write rule made a version and a fault ended each
# way look at that program alone.  A new rule fails them until it is added to the
# script; the random programs then explore without coverage checks of their own.


@dataclass(frozen=True)
class Step:
    """One step of a scripted program: a rule of the machine (or its initializer
    ``start``) and its arguments; a ``data`` argument is a :class:`Draws`."""

    rule: str
    args: dict[str, Any]

    def __repr__(self) -> str:
        return f"{self.rule}({', '.join(f'{k}={v!r}' for k, v in self.args.items())})"


def step(rule: str, **args: Any) -> Step:
    return Step(rule, args)


class Draws:
    """What a scripted rule's ``data.draw(strategy, label=...)`` returns, by label; a
    draw the script names no value for fails the script."""

    def __init__(self, values: dict[str, Any] | None = None, **more: Any) -> None:
        self.values = {**(values or {}), **more}

    def draw(self, strategy: st.SearchStrategy[Any], label: str | None = None) -> Any:
        assert label in self.values, f"the script names no value for the draw {label!r}"
        return self.values[label]

    def __repr__(self) -> str:
        return f"Draws({self.values!r})"


def run_script(machine: type[RuleBasedStateMachine], script: Sequence[Step]) -> set[str]:
    """Run one scripted program through ``machine``, inside a Hypothesis test (so its
    notes and events work, and a failure prints the steps): each step's rule must
    be enabled there (its preconditions hold: a program Hypothesis could draw),
    every invariant is checked after each step, teardown runs at the end.  Returns
    the rules that were never enabled along the program."""
    never: set[str] = set()

    @settings(max_examples=1, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(st.none())
    def program(_: None) -> None:
        m = machine()
        rules = {r.function.__name__: r for r in m.rules}
        never.clear()
        never.update(rules)

        def enabled(name: str) -> bool:
            return all(p(m) for p in rules[name].preconditions)

        try:
            for i, s in enumerate(script):
                note(f"step {i}: {s!r}")
                assert s.rule == "start" or enabled(s.rule), f"step {i}: {s!r} is not enabled"
                getattr(m, s.rule)(**s.args)
                for inv in m.invariants:
                    inv.function(m)
                never.difference_update([r for r in never if enabled(r)])
        finally:
            m.teardown()

    program()
    return never


def check_script_covers(machine: type[RuleBasedStateMachine], script: Sequence[Step],
                        never: set[str], not_here: set[str]) -> None:
    """Every rule of the machine ran in the script, but ``not_here`` (the rules this
    configuration disables, which must have been disabled at every step)."""
    rules = {r.function.__name__ for r in machine.setup_state().rules}
    missing = rules - {s.rule for s in script} - not_here
    assert not missing, f"the coverage script never runs {sorted(missing)}: add them to it"
    assert never == not_here, f"rules disabled throughout: {sorted(never)}, not {not_here}"


def _row(k: int, s: str | None, f: float | None, nested: int) -> Row:
    """A row whose nested values are NESTED_VALUES[nested]."""
    return (k, s, f, *NESTED_VALUES[nested])


def coverage_script(spec: list[str] | None, *, exports: bool) -> list[Step]:
    """A program that runs every rule of TableMachine at least once, each write
    rule making a version, under an armed fault of each kind (a lost reply settled,
    a failed data upload, a crash, a race of each kind): the export rules with
    ``exports``, purge without (it is disabled there).  Add a new rule here."""
    b1 = [_row(1, "a", 2.5, 1), _row(5, "b", None, 23), _row(9, None, -1.5, 62),
          _row(3, "c", 7.0, 95)]
    b2 = [_row(2, "a", 0.0, 30), _row(7, "c", 2.5, 44), _row(11, "b", 7.0, 50),
          _row(12, None, None, 0)]
    b3 = [_row(4, "b", 7.0, 66), _row(12, "a", None, 71), _row(0, "c", -1.5, 14)]
    b4 = [_row(6, None, 2.5, 88), _row(10, "a", 0.0, 7), _row(1, "b", 7.0, 100)]
    b5 = [_row(8, "c", -1.5, 36), _row(3, "a", 2.5, 19)]
    exports_only = [step("export_iceberg"), step("export_delta"),
                    step("drop_export", fmt="delta")] if exports else []
    out = [
        step("start", data=Draws(partition_by=spec)),
        step("append", batch=b1),
        step("append", batch=b2),
        step("group_append", batch=b3),
        step("inject_commit_fault", spec=(POINTER_KEY, "after")),
        step("append", batch=b4),  # a lost reply: settled, "-> ok"
        step("inject_object_fault", spec=(DATA_PREFIX, "before")),
        step("upsert", batch=b5),  # a failed upload: a typed error, nothing applied
        step("upsert", batch=b5),
        step("concurrent_append", batch=b3[:1]),
        step("delete_key", k=5),  # loses the race, rebases
        step("concurrent_delete", pred=PREDICATES[5]),
        step("update", update=UPDATES[0], where=PREDICATES[1]),
        step("inject_crash", call=4),
        step("transaction", pred=PREDICATES[8], batch=b2[:2]),  # the writer dies
        step("transaction", pred=PREDICATES[8], batch=b2[:2]),
        step("delete_range", data=Draws(a=2, b=4)),
        step("delete_predicate", pred=PREDICATES[3]),
        step("delete_struct_leaf", pred=STRUCT_PREDICATES[0]),
        *exports_only,
        step("merge", merge=MERGES[3], batch=b4 + b5[:1]),
        step("read_version", data=Draws(version=2)),
        step("reopen"),
        step("append", batch=b1),
        step("inject_commit_fault", spec=(POINTER_KEY, "after")),  # settled
        step("cluster", data=Draws({"how": "zorder", "columns": ["id", "f"],
                                    "struct leaf": None, "refused column": None})),
        step("cluster", data=Draws({"how": "sort", "columns": ["s"], "struct leaf": "dev.os",
                                    "refused column": "tags.element"})),
        step("cluster", data=Draws({"how": "zorder", "columns": ["id"],
                                    "struct leaf": "dev.hw.ram", "refused column": None})),
        step("append", batch=b2),
        step("inject_crash", call=5),  # the clustering writer dies
        step("cluster", data=Draws({"how": "sort", "columns": ["s", "id"],
                                    "struct leaf": None, "refused column": None})),
        step("cluster", data=Draws({"how": "sort", "columns": ["s", "id"],
                                    "struct leaf": "dev.os", "refused column": None})),
        step("append", batch=b3),
        step("cluster", data=Draws({"how": "property", "columns": ["f", "s", "id"],
                                    "struct leaf": "dev.hw.ram", "kind": "zorder"})),
        step("append", batch=b5),
        step("compact"),  # clusters, by the property
        step("restore", data=Draws({"restore version": 3})),
        *([step("purge", pred=PREDICATES[0])] if not exports else
          [step("export_both"), step("drop_export", fmt="iceberg"), step("export_iceberg")]),
        step("append", batch=b4),
        step("gc"),
        step("restore", data=Draws({"expired": 0, "expired version": 1})),
    ]
    return out


def run_coverage_script(new_uri: Callable[[], str], options: dict[str, str] | None,
                        write_options: caslake.WriteOptions, spec: list[str] | None,
                        exports: ExportReaders | None = None) -> Stats:
    """The coverage script on one store: every rule ran (the export rules only with
    ``exports``; purge only without), every write rule made a version, and armed
    faults ended both ways.  Returns its stats for the test's own checks."""
    machine, stats = machine_for(new_uri, options, write_options, exports, (spec,))
    script = coverage_script(spec, exports=exports is not None)
    never = run_script(machine, script)
    not_here = ({"purge"} if exports is not None else
                {"export_iceberg", "export_delta", "export_both", "drop_export"})
    check_script_covers(machine, script, never, not_here)
    check_faults_fired(stats)
    check_rules_made_versions(stats)
    assert stats.struct_leaf_deletes > 0 and stats.runs["cluster refused"] > 0
    assert stats.clustered[SORT] > 0 and stats.clustered[ZORDER] > 0, stats.clustered
    assert {"cluster: crash -> died", f"cluster: after {POINTER_KEY} -> ok"} <= set(
        stats.outcomes), "the clustering steps under a fault did not end as scripted"
    assert stats.versions["partitioned"] > 0 or spec is None
    return stats


# --- the tests ---------------------------------------------------------------------------

# ``make test`` runs the CI-sized example counts; CASLAKE_LONG_TESTS=1 runs the long ones
# (only the number of random programs differs; the coverage script runs in both).
LONG_TESTS = os.environ.get("CASLAKE_LONG_TESTS") == "1"


def examples(ci: int, long: int) -> int:
    """Hypothesis ``max_examples``: ``ci`` in ``make test``, ``long`` with CASLAKE_LONG_TESTS=1."""
    return long if LONG_TESTS else ci


# Small files with one-row row groups: appends write several files, deletes address
# row groups and positions.
MEMORY_LAYOUT = caslake.WriteOptions(target_file_size=2_500, row_group_size=1)
# test_model_memory's programs draw one: unpartitioned, by a bucket of id, by s (NULLs too)
PARTITION_SPECS: tuple[list[str] | None, ...] = (None, ["bucket(3, id)"], ["s"])
S3_LAYOUT = caslake.WriteOptions(target_file_size=3_000, row_group_size=50)
RANDOM = {"stateful_step_count": 25, "deadline": None, "database": None,
          "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much]}


def memory_uri() -> str:
    return f"memory://{uuid.uuid4().hex}"


# A folder that skips another writer's valid intent (it once could not read a
# partitioned one) is a defect here, not a warning.
@pytest.mark.filterwarnings("error::caslake.core.IntentSkipped")
def test_model_memory(small_segments: None) -> None:
    """The coverage script on a table partitioned by a bucket of id, then random
    programs (each drawing its partition spec).  With fold thresholds lowered, so
    versions hold several segment objects whose statistics summaries the reads
    prune by."""
    stats = run_coverage_script(memory_uri, None, MEMORY_LAYOUT, ["bucket(3, id)"])
    assert stats.segment_versions > 0
    machine, stats = machine_for(memory_uri, None, MEMORY_LAYOUT,
                                 partition_specs=PARTITION_SPECS)
    run_state_machine_as_test(machine, settings=settings(max_examples=examples(50, 100),
                                                         **RANDOM))
    print(f"random programs: {dict(sorted(stats.outcomes.items()))}, "
          f"versions {dict(sorted(stats.versions.items()))}")


def test_model_local_with_exports(tmp_path: Path) -> None:
    """A local store, so the outside readers can open the exports: the export rules,
    and gc keeping what the exports reference, among all the other rules."""
    def new_uri() -> str:
        return str(tmp_path / uuid.uuid4().hex)

    stats = run_coverage_script(new_uri, None, MEMORY_LAYOUT, None, ExportReaders())
    print(f"exports read back: {stats.export_checks}, dropped: {stats.export_drops}")
    assert stats.export_checks > 0 and stats.export_drops > 0
    machine, _ = machine_for(new_uri, None, MEMORY_LAYOUT, ExportReaders())
    # Six programs: with the script, about the time eight fixed programs took.
    run_state_machine_as_test(machine, settings=settings(max_examples=examples(6, 30),
                                                         **RANDOM))


@pytest.mark.s3
def test_model_s3(s3_uri: str, s3_options: dict[str, str]) -> None:
    def new_uri() -> str:
        return f"{s3_uri}-{uuid.uuid4().hex[:12]}"

    run_coverage_script(new_uri, s3_options, S3_LAYOUT, None)
    machine, _ = machine_for(new_uri, s3_options, S3_LAYOUT)
    run_state_machine_as_test(machine, settings=settings(max_examples=examples(8, 30),
                                                         **RANDOM))


# --- refs: branches, tags, fast-forward, compact and gc against a model of refs ---------

REF_SCHEMA = pa.schema([pa.field("id", pa.int64())])
BRANCHES = ["main", "b1", "b2", "b3"]
TAGS = ["t1", "t2", "t3"]


@dataclass
class RefVersion:
    commit_id: str
    rows: list[int]


class RefsMachine(RuleBasedStateMachine):
    """Every ref always reads exactly its model contents.  The model of a branch is
    its chain of versions (commit id, rows), shared prefix included; a tag is a
    (branch, version, commit id, rows); a dropped tag's name stays taken."""

    def __init__(self) -> None:
        super().__init__()
        self.space = uuid.uuid4().hex
        self.table = caslake.create_table(f"memory://{self.space}", REF_SCHEMA,
                                          write_options=MEMORY_LAYOUT)
        self.chains: dict[str, list[RefVersion]] = {
            "main": [RefVersion(self.table.snapshot.manifest.commit_id, [])]}
        self.tags: dict[str, tuple[str, int, RefVersion]] = {}
        self.dropped: set[str] = set()
        self.next_id = 0

    def _handle(self, branch: str) -> Table:
        return self.table if branch == "main" else self.table.branch(branch)

    def _rows(self, scan: Any) -> list[int]:
        return sorted(scan.to_arrow().column("id").to_pylist())

    def _committed(self, branch: str, res: CommitResult, rows: list[int]) -> None:
        chain = self.chains[branch]
        if res.noop:
            return
        assert res.version == len(chain), (branch, res.version, len(chain))
        chain.append(RefVersion(res.commit_id, sorted(rows)))

    @rule(branch=st.sampled_from(BRANCHES), n=st.integers(1, 3))
    def append(self, branch: str, n: int) -> None:
        if branch not in self.chains:
            return
        new = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        res = self._handle(branch).append(pa.table({"id": pa.array(new, pa.int64())}))
        self._committed(branch, res, self.chains[branch][-1].rows + new)

    @rule(branch=st.sampled_from(BRANCHES), k=st.integers(0, 30))
    def delete(self, branch: str, k: int) -> None:
        if branch not in self.chains:
            return
        res = self._handle(branch).delete(f"id BETWEEN {k} AND {k + 2}")
        rows = [r for r in self.chains[branch][-1].rows if not k <= r <= k + 2]
        assert res.noop == (rows == self.chains[branch][-1].rows)
        self._committed(branch, res, rows)

    @rule(branch=st.sampled_from(BRANCHES))
    def compact(self, branch: str) -> None:
        if branch not in self.chains:
            return
        res = self._handle(branch).compact(target_file_size=1 << 20)
        self._committed(branch, res, self.chains[branch][-1].rows)

    @rule(name=st.sampled_from(BRANCHES), source=st.sampled_from(BRANCHES),
          data=st.data())
    def create_branch(self, name: str, source: str, data: st.DataObject) -> None:
        if source not in self.chains:
            return
        src = self._handle(source)
        oldest = src.refresh().snapshot.manifest.oldest_version
        v = data.draw(st.integers(oldest, len(self.chains[source]) - 1), label="from")
        if name in self.chains:
            with pytest.raises(RefAlreadyExists):
                src.create_branch(name, from_version=v)
            return
        b = src.create_branch(name, from_version=v)
        assert b.version == v
        self.chains[name] = list(self.chains[source][: v + 1])

    @rule(name=st.sampled_from(TAGS), branch=st.sampled_from(BRANCHES), data=st.data())
    def create_tag(self, name: str, branch: str, data: st.DataObject) -> None:
        if branch not in self.chains:
            return
        h = self._handle(branch)
        oldest = h.refresh().snapshot.manifest.oldest_version
        v = data.draw(st.integers(oldest, len(self.chains[branch]) - 1), label="version")
        if name in self.tags or name in self.dropped:
            with pytest.raises(RefAlreadyExists):
                h.create_tag(name, version=v)
            return
        h.create_tag(name, version=v)
        self.tags[name] = (branch, v, self.chains[branch][v])

    @rule(name=st.sampled_from(TAGS))
    def drop_tag(self, name: str) -> None:
        if name not in self.tags:
            with pytest.raises(RefNotFound):
                self.table.drop_tag(name)
            return
        self.table.drop_tag(name)
        del self.tags[name]
        self.dropped.add(name)

    @rule(name=st.sampled_from(BRANCHES))
    def drop_branch(self, name: str) -> None:
        if name == "main":
            with pytest.raises(InvalidArgument):
                self.table.drop_branch(name)
            return
        if name not in self.chains:
            with pytest.raises(RefNotFound):
                self.table.drop_branch(name)
            return

        def reachable(b: str, v: int, cid: str) -> bool:
            # Only versions gc has not expired on b (as read_version: the oldest one
            # still readable is the table's own record) keep a tag's version alive.
            chain = self.chains[b]
            oldest = self._handle(b).refresh().snapshot.manifest.oldest_version
            return oldest <= v < len(chain) and chain[v].commit_id == cid

        held = [t for t, (b, v, rv) in self.tags.items() if b == name and not any(
            reachable(o, v, rv.commit_id) for o in self.chains if o != name)]
        if held:
            with pytest.raises(RefInUse) as e:
                self.table.drop_branch(name)
            assert all(t in str(e.value) for t in held)
            return
        self.table.drop_branch(name)
        del self.chains[name]

    @rule(into=st.sampled_from(BRANCHES), source=st.sampled_from(BRANCHES))
    def fast_forward(self, into: str, source: str) -> None:
        target = into
        if target not in self.chains or source not in self.chains:
            return
        t, s = self.chains[target], self.chains[source]
        ok = len(t) <= len(s) and s[len(t) - 1].commit_id == t[-1].commit_id
        # A fork gc has expired on the source cannot be checked: refused as diverged.
        ok = ok and len(t) - 1 >= self._handle(source).refresh().snapshot.manifest.oldest_version
        if not ok:
            with pytest.raises(BranchDiverged):
                self.table.fast_forward(target, source=source)
            return
        assert self.table.fast_forward(target, source=source) == len(s) - 1
        self.chains[target] = list(s)

    @rule()
    def gc(self) -> None:
        self.table.gc(now=datetime.now(UTC) + timedelta(days=30))
        for name, chain in self.chains.items():
            head = self._handle(name).refresh()
            if head.version == len(chain):  # gc's expiry marker on this branch
                chain.append(RefVersion(head.snapshot.manifest.commit_id, chain[-1].rows))
            assert head.version == len(chain) - 1, name

    @rule(branch=st.sampled_from(BRANCHES), data=st.data())
    def read_version(self, branch: str, data: st.DataObject) -> None:
        if branch not in self.chains:
            return
        h = self._handle(branch)
        oldest = h.refresh().snapshot.manifest.oldest_version
        v = data.draw(st.integers(oldest, len(self.chains[branch]) - 1), label="version")
        assert self._rows(h.scan(version=v)) == self.chains[branch][v].rows

    @invariant()
    def every_ref_reads_its_model(self) -> None:
        refs = {(r.kind, r.name) for r in self.table.list_refs()}
        assert refs == ({("branch", b) for b in self.chains}
                        | {("tag", t) for t in self.tags}), refs
        fresh = Table.load(open_store(f"memory://{self.space}"))  # cold caches
        for name, chain in self.chains.items():
            h = fresh if name == "main" else fresh.branch(name)
            assert h.version == len(chain) - 1, name
            assert h.snapshot.manifest.commit_id == chain[-1].commit_id, name
            assert self._rows(h.scan()) == chain[-1].rows, name
        for name, (_, _, rv) in self.tags.items():
            assert self._rows(fresh.scan(tag=name)) == rv.rows, name

    def teardown(self) -> None:
        try:
            report = verify_table(self.table.store, deep=True, all_versions=True)
            assert report.ok, report.problems
        finally:
            forget_memory_space(self.space)


def test_refs_model_memory() -> None:
    run_state_machine_as_test(RefsMachine, settings=settings(
        max_examples=40, stateful_step_count=30, deadline=None, database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))


# --- datasets: ParquetDatasetStore writes against a dict of key -> rows ---------------------

DS_KEYS = ["a/x", "a/y", "b"]


class DatasetMachine(RuleBasedStateMachine):
    """Writes (new key or overwrite), deletes and vacuum of ParquetDatasetStore on one
    memory store, next to a dict model (key -> rows).  A write may meet an armed
    fault on its ``manifest.json`` put (applied or not, reply lost) or another
    writer's commit right before it (a race): it must then return (and be visible),
    raise a typed error that means "not written" (and the previous dataset stays),
    or raise CommitOutcomeUnknown (either).  Every dataset reads as its model, whole;
    no other key is a dataset; vacuum leaves each key's current generation readable."""

    def __init__(self) -> None:
        super().__init__()
        self.space = uuid.uuid4().hex
        self.plain = open_store(f"memory://{self.space}")
        self.store = FaultyStore(self.plain, [])
        self.model: dict[str, list[Row]] = {}
        self.armed: Fault | None = None
        self.race: list[Row] | None = None
        self.stats: dict[str, int] = {}

    def _pds(self, store: Any) -> ParquetDatasetStore:
        return ParquetDatasetStore(store, max_rows_per_file=3)  # several parts a write

    def _arm_race(self, key: str, theirs: list[Row]) -> Fault:
        def other_wins(k: str) -> CaslakeError:
            self._pds(self.plain).write_dataset(arrow(theirs), key, overwrite=True)
            self.model[key] = canon(theirs)
            return PreconditionFailed("another writer committed first", key=k)

        return Fault(frozenset({"put"}), "before", prefix=f"{key}/manifest.json", times=1,
                     error=other_wins)

    @rule(key=st.sampled_from(DS_KEYS), batch=batch_st, overwrite=st.booleans())
    def write(self, key: str, batch: list[Row], overwrite: bool) -> None:
        fault, raced = self.armed, self.race is not None
        if self.race is not None:
            fault = self._arm_race(key, self.race)
        elif fault is not None:
            fault.prefix = f"{key}/manifest.json"
        self.armed = self.race = None
        if fault is not None:
            self.store.faults.append(fault)
        existed = key in self.model
        try:
            self._pds(self.store).write_dataset(arrow(batch), key, overwrite=overwrite)
            outcome = "ok"
        except CaslakeError as e:  # anything else fails the test
            outcome = type(e).__name__
        finally:
            if fault is not None:
                self.store.faults.remove(fault)
        fired = fault is not None and fault.fired > 0
        what = "no fault" if fault is None or not fired else "race" if raced else fault.when
        label = f"{what} -> {outcome}"
        self.stats[label] = self.stats.get(label, 0) + 1
        event(label)
        before = self.model.get(key)  # a race's write is in the model already
        try:
            got: list[Row] | None = table_rows(self._pds(self.plain).read_dataset(key))
        except DatasetIncomplete:
            got = None
        ours = canon(batch)
        if outcome == "ok":
            assert got == ours, f"{label}: returned, but the dataset is not ours"
        elif outcome == "CommitOutcomeUnknown":
            assert got in (before, ours), f"{label}: neither ours nor the previous one"
        else:
            assert got == before, f"{label}: failed, but the dataset changed"
            assert outcome != "DatasetAlreadyExists" or existed or raced, label
        if not fired and existed and not overwrite:
            assert outcome == "DatasetAlreadyExists", label
        if got is None:
            self.model.pop(key, None)
        else:
            self.model[key] = got

    @precondition(lambda self: self.armed is None and self.race is None)
    @rule(when=st.sampled_from(["before", "after"]))
    def inject_manifest_fault(self, when: str) -> None:
        self.armed = Fault(frozenset({"put"}), when, times=1)

    @precondition(lambda self: self.armed is None and self.race is None)
    @rule(batch=batch_st)
    def concurrent_write(self, batch: list[Row]) -> None:
        self.race = batch

    @rule(key=st.sampled_from(DS_KEYS))
    def delete(self, key: str) -> None:
        pds = self._pds(self.plain)
        if key not in self.model and not any(self.plain.list(key + "/")):
            with pytest.raises(DatasetNotFound):
                pds.delete_dataset(key)
            return
        pds.delete_dataset(key)
        self.model.pop(key, None)

    @rule()
    def vacuum(self) -> None:
        self._pds(self.plain).vacuum(older_than=timedelta(0))

    @invariant()
    def datasets_equal_the_model(self) -> None:
        pds = self._pds(self.plain)
        for key in DS_KEYS:
            if key in self.model:
                assert table_rows(pds.read_dataset(key)) == self.model[key], key
                parts = pds.read_manifest(key).parts  # pyarrow alone reads the same rows
                got = pa.concat_tables(pq.read_table(io.BytesIO(
                    self.plain.get(f"{key}/{p}").data)) for p in parts)
                assert table_rows(got) == self.model[key], key
            else:
                assert not pds.dataset_exists(key), key

    def teardown(self) -> None:
        forget_memory_space(self.space)


def test_dataset_model_memory() -> None:
    stats: dict[str, int] = {}

    class Machine(DatasetMachine):
        def teardown(self) -> None:
            for k, v in self.stats.items():
                stats[k] = stats.get(k, 0) + v
            super().teardown()

    run_state_machine_as_test(Machine, settings=settings(
        max_examples=25, stateful_step_count=20, deadline=None, database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
    print(f"\ndataset outcomes: {dict(sorted(stats.items()))}")
    assert {"race -> DatasetConflict", "race -> DatasetAlreadyExists"} & set(stats), stats
    assert any(k.startswith("after -> ok") for k in stats), stats  # a lost reply, settled


# --- read paths: schema changes, clones and purge, read through every reader ---------------

# One local table (so Spark and the outside readers can open it) next to a model of
# every version's columns and rows.  Every step reads the head with caslake's scan;
# every CHECKPOINT_EVERY steps and at the end, versions are read through every other
# path of tests/reliability/read_paths.py (Spark is the slow part: ~1-3 s a version).

WORDS = ("amber", "basalt", "cobalt")
COLUMN_NAMES = ("s", "f", "g", "h", "s2", "f2")
ARROW_TYPES = {"string": pa.string(), "float64": pa.float64(), "int64": pa.int64(),
               # nested (issue 29): every read path compares their values too
               "struct": pa.struct([pa.field("os", pa.string()), pa.field("n", pa.int64())]),
               "list": pa.list_(pa.string()), "map": pa.map_(pa.string(), pa.int64())}
NESTED = ("struct", "list", "map")
READ_PATHS_LAYOUT = caslake.WriteOptions(target_file_size=2_500, row_group_size=2)
CHECKPOINT_EVERY = 7  # steps; a checkpoint reads two versions through Spark (the budget)
MAX_COLUMNS = 6
READ_PATHS_RULES = ("append", "delete", "upsert", "rename", "drop_readd", "drop_column",
                    "add_column", "compact", "gc", "purge", "clone_chain", "update", "merge",
                    "restore", "cluster")
# Operations that must have made a version somewhere in the run.
READ_PATHS_VERSIONS = ("delete", "rename", "drop_readd", "add_column", "compact", "purge",
                       "update", "merge", "restore", "cluster")
ORDERABLE = ("string", "float64", "int64")  # the types clustering may order by
REWRITES = ("update", "merge", "restore")


@dataclass(frozen=True)
class Col:
    """A column of the model: ``slot`` is its identity (a field id: a rename keeps it,
    a drop and re-add under the same name makes a new one), and every string value
    names its slot, so an erased value is found nowhere else."""

    name: str
    slot: int
    type: str

    def values(self) -> list[Any]:
        """The values a row may hold here (nested ones NULL at every level)."""
        if self.slot == 0:
            return list(range(13))  # id: never NULL
        amber, basalt, cobalt = (f"{w}-{self.slot}z" for w in WORDS)
        if self.type == "string":
            return [None, amber, basalt, cobalt]
        if self.type == "float64":
            return [None, -1.5, 0.0, 2.5, 7.0]
        if self.type == "struct":
            return [None, {"os": None, "n": None}, {"os": amber, "n": 4},
                    {"os": basalt, "n": None}, {"os": None, "n": -3}]
        if self.type == "list":
            return [None, [], [amber, None], [cobalt], [None]]
        if self.type == "map":
            return [None, {}, {"k": 4}, {"k": None, "j": -3}]
        return [None, -3, 0, 4, 9]

    def preds(self, i: int) -> list[rp.Pred]:
        """Predicates on this column (at position ``i`` of a row)."""
        name, v = self.name, f"{WORDS[0]}-{self.slot}z"
        null = rp.Pred(f"{name} IS NULL", lambda r: r[i] is None)
        if self.type == "string":
            return [rp.Pred(f"{name} = '{v}'", lambda r: r[i] == v), null]
        if self.type == "struct":  # struct leaves: dev.os = '...', dev.n > 1
            return [rp.Pred(f"{name}.os = '{v}'", lambda r: r[i] is not None
                            and r[i]["os"] == v),
                    rp.Pred(f"{name}.n > 1", lambda r: r[i] is not None
                            and (r[i]["n"] or 0) > 1), null]
        if self.type == "list":
            return [rp.Pred(f"array_contains({name}, '{v}')", lambda r: r[i] is not None
                            and v in r[i]), null]
        if self.type == "map":
            return [rp.Pred(f"{name}['k'] > 1", lambda r: r[i] is not None
                            and (r[i].get("k") or 0) > 1), null]
        return [rp.Pred(f"{name} > 1", lambda r: r[i] is not None and r[i] > 1), null]


ID = Col("id", 0, "int64")
FIRST_COLS = (ID, Col("s", 1, "string"), Col("f", 2, "float64"), Col("dev", 3, "struct"))


@dataclass(frozen=True)
class ModelVersion:
    cols: tuple[Col, ...]
    rows: tuple[rp.Row, ...]  # canonical order

    @property
    def expected(self) -> rp.Expected:
        return rp.Expected(tuple(c.name for c in self.cols), self.rows)

    @property
    def evolved(self) -> bool:
        """A column of the first version renamed, or dropped (and added again)."""
        return self.cols[1:len(FIRST_COLS)] != FIRST_COLS[1:]

    def spark_preds(self, v: int) -> list[rp.Pred]:
        """Turn by turn (by version), an id range or a predicate on another column
        (one a version: each costs Spark six jobs)."""
        lo = v % 6
        preds = [rp.Pred(f"id BETWEEN {lo} AND {lo + 5}", lambda r: lo <= r[0] <= lo + 5)]
        preds += [p for i, c in enumerate(self.cols) if i > 0 for p in c.preds(i)]
        return [preds[0] if v % 2 == 0 else preds[(v // 2) % len(preds)]]


def model_arrow(cols: tuple[Col, ...], rows: list[rp.Row]) -> pa.Table:
    return pa.table({c.name: pa.array([r[i] for r in rows], ARROW_TYPES[c.type])
                     for i, c in enumerate(cols)})


def rows_st(cols: tuple[Col, ...]) -> st.SearchStrategy[list[rp.Row]]:
    return st.lists(st.tuples(*(st.sampled_from(c.values()) for c in cols)),
                    min_size=1, max_size=5)


class ReadPathsMachine(RuleBasedStateMachine):
    """Appends, deletes, upserts, renames, drop and re-add of a column (one commit or
    two), new columns, compaction, gc, purge with erasure and chains of clones, on a
    local table; after each step the head reads as the model (caslake's scan), and
    at checkpoints and at the end the versions read as the model through Spark
    (one reused DataFrame a version, a temp view, read_native), the Iceberg and
    Delta exports (pyiceberg, deltalake and DuckDB) and Parquet datasets."""

    # Set by the test function.
    new_root: ClassVar[Callable[[], Path]]
    spark: ClassVar[Any]
    reads: ClassVar[Counter[str]]

    def __init__(self) -> None:
        super().__init__()
        self.root = self.new_root()
        self.uri = str(self.root / "table")
        self.datasets = str(self.root / "datasets")  # outside the table's prefix
        cols = FIRST_COLS
        self.next_slot = len(cols)
        self.model: list[ModelVersion] = [ModelVersion(cols, ())]
        self.oldest = 0
        self.markers: set[int] = set()
        self.restored: dict[int, int] = {}  # a restore's version -> the version it restored
        self.steps = 0
        self.spark_checked: set[int] = set()
        self.clustered: set[int] = set()  # versions a clustering compaction made
        self.delta_at: int | None = None  # the version the Delta export shows, if known
        self.cloned = False
        caslake.create_table(self.uri, pa.schema([(c.name, ARROW_TYPES[c.type]) for c in cols]),
                             write_options=READ_PATHS_LAYOUT)
        self.table = caslake.open_table(self.uri, write_options=READ_PATHS_LAYOUT)

    @property
    def current(self) -> ModelVersion:
        return self.model[-1]

    def _fresh(self) -> Table:
        return caslake.open_table(self.uri)

    def _committed(self, rule: str, res: CommitResult, cols: tuple[Col, ...],
                   rows: list[rp.Row], deleted: int | None = None) -> None:
        new = ModelVersion(cols, tuple(rp.canon(rows)))
        self.reads[f"rule.{rule}"] += 1
        if deleted is not None:
            assert res.rows_deleted == deleted, (rule, res, deleted)
        if res.noop:
            assert new == self.current, f"{rule} was a no-op but the model changed"
            return
        assert res.version == len(self.model), (rule, res.version, len(self.model))
        self.model.append(new)
        self.reads[f"version.{rule}"] += 1
        note(f"v{res.version} {rule}: {new.expected.names} {len(rows)} rows")

    # --- rules -----------------------------------------------------------------------------

    # Few rules (Hypothesis leaves a random subset of the rules out of each program,
    # and this test runs few programs): each one draws which variant it runs.

    @initialize(data=st.data())
    def seed(self, data: st.DataObject) -> None:
        self.append(data)

    @rule(data=st.data())
    def append(self, data: st.DataObject) -> None:
        cols = self.current.cols
        batch = data.draw(rows_st(cols), label="rows")
        res = self.table.append(model_arrow(cols, batch))
        self._committed("append", res, cols, [*self.current.rows, *batch])

    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        """By an id range, or by a predicate on any other column."""
        cols = self.current.cols
        a, b = data.draw(ids, label="from"), data.draw(ids, label="to")
        lo, hi = min(a, b), max(a, b)
        preds = [rp.Pred(f"id BETWEEN {lo} AND {hi}", lambda r: lo <= r[0] <= hi)]
        preds += [p for i, c in enumerate(cols) if i > 0 for p in c.preds(i)]
        self._delete_where(data.draw(st.sampled_from(preds), label="where"))

    def _delete_where(self, pred: rp.Pred) -> None:
        kept = [r for r in self.current.rows if not pred.holds(r)]
        res = self.table.delete(pred.sql)
        self._committed("delete", res, self.current.cols, kept,
                        deleted=len(self.current.rows) - len(kept))

    @rule(data=st.data())
    def upsert(self, data: st.DataObject) -> None:
        self._upsert(data.draw(rows_st(self.current.cols), label="rows"))

    def _upsert(self, batch: list[rp.Row]) -> None:
        cols = self.current.cols
        last = {r[0]: r for r in batch}
        kept = [r for r in self.current.rows if r[0] not in last]
        res = self.table.upsert(model_arrow(cols, batch), key=["id"], on_duplicate="last")
        self._committed("upsert", res, cols, kept + list(last.values()))

    @rule(data=st.data(), kind=st.sampled_from(REWRITES))
    def rewrite(self, data: st.DataObject, kind: str) -> None:
        """UPDATE, MERGE or restore (one rule: this test runs few programs)."""
        cols = self.current.cols
        if kind == "update":
            i = data.draw(st.integers(1, len(cols) - 1), label="column")
            values = [None] if cols[i].type in NESTED else cols[i].values()
            self._update(i, data.draw(st.sampled_from(values), label="value"),
                         data.draw(ids, label="from"))
        elif kind == "merge":
            self._merge(data.draw(rows_st(cols), label="source"),
                        data.draw(ids, label="delete by source above"))
        else:
            self._restore(data.draw(st.sampled_from(self._restorable()), label="version"))

    def _update(self, i: int, value: Any, lo: int) -> None:
        """``update(set={column i: literal}, where="id BETWEEN lo AND lo + 4")``."""
        cols = self.current.cols
        col = cols[i]
        sql = "NULL" if value is None else f"'{value}'" if col.type == "string" else str(value)
        hit = [lo <= r[0] <= lo + 4 for r in self.current.rows]
        res = self.table.update(set={col.name: sql}, where=f"id BETWEEN {lo} AND {lo + 4}")
        rows = [(*r[:i], value, *r[i + 1:]) if h else r
                for r, h in zip(self.current.rows, hit, strict=True)]
        self._committed("update", res, cols, rows, deleted=sum(hit))

    def _merge(self, batch: list[rp.Row], above: int) -> None:
        """MERGE on id: matched rows take the source's (the last of a key), unmatched
        source rows are inserted, unmatched target rows with an id above ``above``
        are deleted."""
        cols = self.current.cols
        source = {r[0]: r for r in batch}
        kept: list[rp.Row] = []
        for r in self.current.rows:
            if r[0] in source:
                kept.append(source[r[0]])
            elif r[0] <= above:
                kept.append(r)
        targets = {r[0] for r in self.current.rows}
        inserted = [r for k, r in source.items() if k not in targets]
        res = (self.table.merge(model_arrow(cols, list(source.values())), on=["id"])
               .when_matched_update_all().when_not_matched_insert_all()
               .when_not_matched_by_source_delete(condition=f"target.id > {above}").execute())
        # updated (matched) plus deleted target rows
        changed = len(self.current.rows) - sum(r[0] not in source for r in kept)
        self._committed("merge", res, cols, kept + inserted, deleted=changed)

    def _restorable(self) -> list[int]:
        """Retained versions whose files or schema differ from the head's, or else the
        head (whose restore is a no-op)."""
        head = len(self.model) - 1
        mine = files_of(head, self.markers, self.restored)
        return [v for v in range(self.oldest, head)
                if files_of(v, self.markers, self.restored) != mine] or [head]

    def _restore(self, v: int) -> None:
        """Restore version ``v``: its columns and rows come back."""
        res = self.table.restore(version=v)
        target = self.model[v]
        self._committed("restore", res, target.cols, list(target.rows),
                        deleted=0 if res.noop else len(self.current.rows))
        if not res.noop:
            self.restored[res.version] = v

    # Schema changes: two rules, so that they come often enough.
    @rule(data=st.data(), kind=st.sampled_from(["rename", "drop_readd"]))
    def rename_or_readd(self, data: st.DataObject, kind: str) -> None:
        self._schema_change(data, kind)

    @rule(data=st.data(), kind=st.sampled_from(["add_column", "drop_column"]))
    def add_or_drop(self, data: st.DataObject, kind: str) -> None:
        self._schema_change(data, kind)

    def _schema_change(self, data: st.DataObject, kind: str) -> None:
        cols = self.current.cols
        if len(cols) == 1 or (kind == "drop_column" and len(cols) == 2):
            kind = "add_column"
        if kind == "add_column" and len(cols) >= MAX_COLUMNS:
            kind = "drop_column"
        getattr(self, f"_{kind}")(data)

    def _other_column(self, data: st.DataObject) -> tuple[int, Col]:
        cols = self.current.cols
        i = data.draw(st.integers(1, len(cols) - 1), label="column")
        return i, cols[i]

    def _free_names(self) -> list[str]:
        taken = {c.name for c in self.current.cols}
        return [n for n in COLUMN_NAMES if n not in taken]

    def _free_name(self, data: st.DataObject) -> str:
        return data.draw(st.sampled_from(self._free_names()), label="name")

    def _new_col(self, name: str, data: st.DataObject | None) -> Col:
        """A new column (a new slot) of a drawn type (without ``data``: a struct)."""
        self.next_slot += 1
        kind = "struct" if data is None else data.draw(st.sampled_from(sorted(ARROW_TYPES)),
                                                       label="type")
        return Col(name, self.next_slot - 1, kind)

    def _rename(self, data: st.DataObject) -> None:
        i, _ = self._other_column(data)
        self._rename_to(i, self._free_name(data))

    def _rename_to(self, i: int, new: str) -> None:
        col = self.current.cols[i]
        res = self.table.update_schema().rename_column(col.name, new).commit()
        cols = list(self.current.cols)
        cols[i] = Col(new, col.slot, col.type)
        self._committed("rename", res, tuple(cols), list(self.current.rows))

    def _drop_readd(self, data: st.DataObject | None) -> None:
        """Drop a column and add one with the same name, in one commit or two (a new
        column: rows written before read NULL there, never the dropped values).
        Without ``data``: the first other column, as a struct, in one commit."""
        i, col = self._other_column(data) if data else (1, self.current.cols[1])
        kept = tuple(c for c in self.current.cols if c is not col)
        rows = [r[:i] + r[i + 1:] for r in self.current.rows]
        new = self._new_col(col.name, data)
        if data is None or data.draw(st.booleans(), label="one commit"):
            res = (self.table.update_schema().drop_column(col.name)
                   .add_column(col.name, ARROW_TYPES[new.type]).commit())
        else:
            res = self.table.update_schema().drop_column(col.name).commit()
            self._committed("drop_column", res, kept, rows)
            res = self.table.update_schema().add_column(col.name,
                                                        ARROW_TYPES[new.type]).commit()
        self._committed("drop_readd", res, (*kept, new), [(*r, None) for r in rows])

    def _drop_column(self, data: st.DataObject) -> None:
        i, col = self._other_column(data)
        res = self.table.update_schema().drop_column(col.name).commit()
        self._committed("drop_column", res, tuple(c for c in self.current.cols if c is not col),
                        [r[:i] + r[i + 1:] for r in self.current.rows])

    def _add_column(self, data: st.DataObject | None) -> None:
        """A new column (without ``data``: the first free name, a struct)."""
        name = self._free_name(data) if data else self._free_names()[0]
        new = self._new_col(name, data)
        res = self.table.update_schema().add_column(new.name, ARROW_TYPES[new.type]).commit()
        self._committed("add_column", res, (*self.current.cols, new),
                        [(*r, None) for r in self.current.rows])

    @rule(kind=st.sampled_from(["gc", "compact", "cluster"]), data=st.data())
    def maintain(self, kind: str, data: st.DataObject) -> None:
        if kind == "gc":
            self._gc()
        elif kind == "compact":
            self._compact()
        else:
            names = [c.name for c in self.current.cols if c.type in ORDERABLE]
            self._cluster(data.draw(st.sampled_from([SORT, ZORDER]), label="kind"),
                          data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=3,
                                             unique=True), label="columns"))

    def _cluster(self, kind: str, names: list[str]) -> None:
        """``compact(sort_by=names)`` or ``compact(zorder_by=names)`` (renamed and
        re-added columns among them): the same rows, the files it wrote in key order
        (:func:`check_clustered`); the versions it made are read through every path
        like any other (``spark.clustered`` counts those read through Spark)."""
        res = self.table.compact(**{f"{kind}_by": names})  # type: ignore[arg-type]
        self._committed("cluster", res, self.current.cols, list(self.current.rows))
        if not res.noop:
            self.clustered.add(res.version)
            self.reads[f"cluster.{kind}.files"] += check_clustered(self._fresh(), kind, names)

    def _compact(self) -> None:
        res = self.table.compact(target_file_size=1 << 20)
        self._committed("compact", res, self.current.cols, list(self.current.rows))

    def _gc(self) -> None:
        """gc 30 days ahead: every version but the newest data version expires."""
        keep = max(v for v in range(len(self.model)) if v not in self.markers)
        report = self._fresh().gc(now=datetime.now(UTC) + timedelta(days=30))
        if report.head_version == len(self.model):  # its expiry marker
            self.model.append(self.current)
            self.markers.add(report.head_version)
        assert report.head_version == len(self.model) - 1, report
        self.oldest = max(self.oldest, keep)
        assert report.oldest_version == self.oldest, (report, self.oldest)
        self.reads["rule.gc"] += 1
        if self.oldest:
            with pytest.raises(VersionNotFound):
                self._fresh().scan(version=self.oldest - 1).to_arrow()
        wait_out_gc_fence(self._fresh())

    @precondition(lambda self: any(c.type == "string" for c in self.current.cols))
    @rule(data=st.data())
    def purge(self, data: st.DataObject) -> None:
        """``purge(where, expire=True)``: the matching rows leave the head, every
        version before it expires, and no object under the table's prefix (exports,
        staging and all, decoded by tests/maintenance/erasure.py) holds the value."""
        cols, rows = self.current.cols, self.current.rows
        i, col = data.draw(st.sampled_from([(i, c) for i, c in enumerate(cols)
                                            if c.type == "string"]), label="column")
        present = sorted({r[i] for r in rows if r[i] is not None})
        self._purge(i, data.draw(st.sampled_from(present or col.values()[1:]), label="value"))

    def _purge(self, i: int, value: str) -> None:
        from tests.maintenance.erasure import assert_erased

        cols, rows = self.current.cols, self.current.rows
        col = cols[i]
        self.reads["rule.purge"] += 1
        store = open_store(self.uri)
        exported = [p for p in ("metadata/", "_delta_log/") if any(store.list(p))]
        report = self._fresh().purge(f"{col.name} = '{value}'", expire=True)
        note(f"purge {col.name} = {value!r}: {report}")
        if not report.noop:  # a stored row (live or deleted) matched
            assert report.version == len(self.model), report
            self.model.append(ModelVersion(cols, tuple(r for r in rows if r[i] != value)))
            self.reads["version.purge"] += 1
        else:
            assert not any(r[i] == value for r in rows)
        head = self._fresh().version
        assert head - (len(self.model) - 1) in (0, 1), (head, len(self.model))
        if head == len(self.model):  # the expiry's marker
            self.model.append(self.current)
            self.markers.add(head)
        assert report.expired_below is not None and report.expired_below >= self.oldest
        self.oldest = report.expired_below
        wait_out_gc_fence(self._fresh())
        assert_erased(self.uri, [value])  # every object, decoded, exports included
        # The exports were rewritten to show the head alone (or dropped): they read
        # as the model's head, with both their readers.
        exps = [m.expected for m in self.model]
        if rp.check_iceberg(self.uri, store, exps, self.reads) is not None:
            assert "metadata/" in exported
        self.delta_at = None
        if any(store.list("_delta_log/")):
            assert "_delta_log/" in exported
            rp.check_delta(self.uri, self.current.expected, head, self.reads)
            self.delta_at = head
        if exported and not report.noop:
            self.reads["purge.exports"] += 1  # exports under the table were erased too
        if self.oldest:
            with pytest.raises(VersionNotFound):
                self._fresh().scan(version=self.oldest - 1).to_arrow()

    @precondition(lambda self: not self.cloned and len({r[0] for r in self.current.rows}) >= 3)
    @rule(data=st.data())
    def clone_chain(self, data: st.DataObject) -> None:
        self._clone_chain(lambda level, keys: data.draw(
            st.sampled_from(keys), label=f"key deleted at level {level}"))

    def _clone_chain(self, pick: Callable[[int, list[int]], int]) -> None:
        """A clone of the head, a clone of that clone and a clone of that one, each
        deleting a key (``pick``): every level reads as its model at both its
        versions (caslake's scan) and at its head through Spark load, read_native,
        its own Iceberg and Delta exports and as a Parquet dataset, and passes
        verify; then the chain is dropped, releasing the holds that would otherwise
        keep gc and purge from erasing.  (test_clone_chain_read_paths reads a fixed
        chain the same ways and reports every failing reader at once.)"""
        self.cloned = True  # once a program
        names = self.current.expected.names
        rows = list(self.current.rows)
        src, made = self.uri, []
        try:
            for level in (1, 2, 3):
                dst = str(self.root / f"clone{level}-{uuid.uuid4().hex[:6]}")
                clone = caslake.clone(src, dst)
                made.append(dst)
                before = rp.Expected(names, tuple(rows))
                assert clone.version == 0
                rp.check_scan(clone, 0, before, self.reads)
                k = pick(level, sorted({r[0] for r in rows}))
                res = clone.delete(f"id = {k}")
                kept = [r for r in rows if r[0] != k]
                assert (res.version, res.rows_deleted) == (1, len(rows) - len(kept)), res
                rows = kept
                after = rp.Expected(names, tuple(rows))
                fresh = caslake.open_table(dst)
                rp.check_scan(fresh, 1, after, self.reads)
                rp.check_scan(fresh, 0, before, self.reads)
                rp.check_dataset(None, self.datasets, f"clone{level}",
                                 fresh.scan(version=1).to_arrow(), after, self.reads)
                preds = ModelVersion(self.current.cols, after.rows).spark_preds(level)
                rp.check_spark_load(self.spark, dst, 1, after, preds, self.reads)
                rp.check_native(self.spark, dst, 1, after, self.reads)
                fresh.export_iceberg()
                rp.check_iceberg(dst, fresh.store, [before, after], self.reads)
                if rp.export_delta(fresh, self.reads):
                    rp.check_delta(dst, after, 1, self.reads)
                report = verify_table(fresh.store, deep=True, all_versions=True)
                assert report.ok, (level, report.problems)
                self.reads[f"clone.level{level}"] += 1
                src = dst
        finally:
            for dst in reversed(made):
                caslake.drop_table(dst)
        self.reads["rule.clone_chain"] += 1

    # --- checks ----------------------------------------------------------------------------

    def _check_version(self, v: int, dataset: bool) -> None:
        """Version ``v`` through Spark (one reused DataFrame, a temp view), read_native,
        and (``dataset``) as Parquet datasets written from the scan and from Spark."""
        mv = self.model[v]
        exp = mv.expected
        key = f"v{v}-{uuid.uuid4().hex[:6]}"
        rp.check_spark_load(self.spark, self.uri, v, exp, mv.spark_preds(v), self.reads,
                            dataset=(self.datasets, f"spark/{key}") if dataset else None)
        rp.check_native(self.spark, self.uri, v, exp, self.reads)
        if dataset:
            rows = self._fresh().scan(version=v).to_arrow()
            rp.check_dataset(self.spark, self.datasets, f"scan/{key}", rows, exp, self.reads)
        self.spark_checked.add(v)
        self.reads["spark.clustered"] += v in self.clustered

    def _check_exports(self) -> None:
        """The exports as they are (after whatever ran since they were made), then
        exported again at the head and read again."""
        store = self._fresh().store
        exps = [m.expected for m in self.model]
        rp.check_iceberg(self.uri, store, exps, self.reads)
        if self.delta_at is not None:
            rp.check_delta(self.uri, exps[self.delta_at], self.delta_at, self.reads)
        head = len(self.model) - 1
        t = self._fresh()
        assert t.export_iceberg().version == head
        rp.check_iceberg(self.uri, store, exps, self.reads)
        if rp.export_delta(t, self.reads):
            self.delta_at = head
            if self.current.evolved:
                self.reads["delta.evolved"] += 1  # column mapping in play
        if self.delta_at is not None:
            rp.check_delta(self.uri, exps[self.delta_at], self.delta_at, self.reads)

    def _checkpoint(self) -> None:
        head = len(self.model) - 1
        self._check_version(head, dataset=True)
        older = [v for v in range(self.oldest, head) if v not in self.spark_checked]
        if older:
            self._check_version(older[-1], dataset=False)
        self._check_exports()

    @invariant()
    def head_reads_as_model(self) -> None:
        t = self._fresh()
        head = len(self.model) - 1
        assert t.version == head, (t.version, head)
        rp.check_scan(t, head, self.current.expected, self.reads)
        assert [h.version for h in t.history()] == list(range(head, self.oldest - 1, -1))
        self.steps += 1
        if self.steps % CHECKPOINT_EVERY == 0:
            self._checkpoint()

    def _fixed_rows(self, keys: tuple[int, ...]) -> list[rp.Row]:
        """Rows of the head's columns with these ids, a value of each column's own."""
        return [tuple(k if i == 0 else c.values()[k % len(c.values())]
                      for i, c in enumerate(self.current.cols)) for k in keys]

    def _append_fixed(self, keys: tuple[int, ...]) -> None:
        cols, batch = self.current.cols, self._fixed_rows(keys)
        res = self.table.append(model_arrow(cols, batch))
        self._committed("append", res, cols, [*self.current.rows, *batch])

    def _cover_the_rest(self) -> None:
        """Hypothesis leaves a random subset of the rules out of each program, and this
        test runs few (two, for its time budget): each operation the run has not made
        a version of yet is made here, with fixed choices, before the last checkpoint
        reads everything through every path."""
        if self.reads["version.delete"] == 0 and self.current.rows:
            k = self.current.rows[0][0]
            self._delete_where(rp.Pred(f"id = {k}", lambda r: r[0] == k))
        if self.reads["rule.gc"] == 0:
            self._gc()
        if self.reads["rule.upsert"] == 0:
            self._upsert(self._fixed_rows((0, 11)))
        if self.reads["version.update"] == 0 and self.current.rows:
            self._update(1, None, min(r[0] for r in self.current.rows))
        if self.reads["version.merge"] == 0:
            self._merge(self._fixed_rows((0, 5)), 12)
        if self.reads["version.restore"] == 0:
            self._restore(self._restorable()[0])
        if self.reads["version.rename"] == 0 and len(self.current.cols) > 1:
            self._rename_to(1, self._free_names()[0])
        if self.reads["version.add_column"] == 0 and len(self.current.cols) < MAX_COLUMNS:
            self._add_column(None)
        if self.reads["version.drop_readd"] == 0 and len(self.current.cols) > 1:
            self._drop_readd(None)
        if self.reads["rule.drop_column"] == 0 and len(self.current.cols) > 2:
            i = len(self.current.cols) - 1
            res = self.table.update_schema().drop_column(self.current.cols[i].name).commit()
            self._committed("drop_column", res, self.current.cols[:i],
                            [r[:i] for r in self.current.rows])
        if self.reads["version.purge"] == 0 or self.reads["purge.exports"] == 0:
            self._purge_exported()
        if self.reads["version.compact"] == 0 or self.reads["delta.evolved"] == 0:
            # An evolved head whose files a compaction rewrites under its names: the
            # last checkpoint's Delta export of it is not refused.
            if not self.current.evolved and len(self.current.cols) > 1:
                self._rename_to(1, self._free_names()[0])
            self._append_fixed((1,))
            self._append_fixed((2,))  # two more small files, at least: something to compact
            self._compact()
        if self.reads["rule.clone_chain"] == 0:
            self._append_fixed((0, 5, 9))  # three keys at least
            self._clone_chain(lambda level, keys: keys[level % len(keys)])
        if self.reads["spark.clustered"] == 0:
            # Two files that span the ids, so they overlap: the clustering's version is
            # the head the last checkpoint reads through every path.
            self._append_fixed((0, 12))
            self._append_fixed((1, 11))
            self._cluster(ZORDER if self.reads["cluster.zorder.files"] == 0 else SORT, ["id"])

    def _purge_exported(self) -> None:
        """Export the head (both formats), then purge a value a string column holds."""
        strings = [i for i, c in enumerate(self.current.cols) if c.type == "string"]
        if not strings:  # a string column to purge a value of
            self.next_slot += 1
            new = Col(self._free_names()[0], self.next_slot - 1, "string")
            res = self.table.update_schema().add_column(new.name, pa.string()).commit()
            self._committed("add_column", res, (*self.current.cols, new),
                            [(*r, None) for r in self.current.rows])
            strings = [len(self.current.cols) - 1]
        i = strings[0]
        self._append_fixed((3,))
        self._check_exports()
        value = next(r[i] for r in self.current.rows if r[i] is not None)
        self._purge(i, value)

    def teardown(self) -> None:
        self._cover_the_rest()
        report = verify_table(open_store(self.uri), deep=True, all_versions=True)
        assert report.ok, report.problems
        t = self._fresh()
        for v in range(self.oldest, len(self.model)):
            rp.check_scan(t, v, self.model[v].expected, self.reads)
        self._checkpoint()


@pytest.fixture(scope="module")
def model_spark() -> Iterator[Any]:
    """The shared local SparkSession (left running for the Spark tests), without the
    session setting ``read_native`` turns on for evolved schemas."""
    pytest.importorskip("pyspark")
    spark = rp.shared_spark()
    yield spark
    spark.conf.unset("spark.sql.parquet.fieldId.read.enabled")


def run_fixed_programs(base: type[RuleBasedStateMachine], tmp_path: Path, spark: Any,
                       programs: int, steps: int) -> Counter[str]:
    """Run a machine that takes ``new_root``, ``spark`` and ``reads`` over a few fixed
    (derandomized, unshrunk: slow) programs; what it counted."""
    reads: Counter[str] = Counter()
    count = iter(range(1_000_000))

    def new_root() -> Path:
        root = tmp_path / f"m{next(count)}"
        root.mkdir()
        return root

    machine = type("Machine", (base,), {
        "new_root": staticmethod(new_root), "spark": spark, "reads": reads})
    run_state_machine_as_test(machine, settings=settings(
        max_examples=programs, stateful_step_count=steps, deadline=None, database=None,
        derandomize=True, phases=[Phase.explicit, Phase.generate],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
    return reads


@pytest.mark.spark
def test_model_read_paths(tmp_path: Path, model_spark: Any) -> None:
    """Every read path (tests/reliability/read_paths.py) and every rule of the
    read-paths machine really ran, over few, fixed programs (Spark is slow).
    Budget: two programs of up to 20 steps, a Spark checkpoint every 7 steps and at
    the end (about 15 versions read through Spark, clones included); what the
    programs leave out is made at the end (ReadPathsMachine._cover_the_rest)."""
    reads = run_fixed_programs(ReadPathsMachine, tmp_path, model_spark, examples(2, 12), 20)
    print(f"\nread paths: {dict(sorted(reads.items()))}")
    missing = [p for p in (*rp.READ_PATHS, *(f"{p}.nested" for p in rp.READ_PATHS),
                           *(f"rule.{r}" for r in READ_PATHS_RULES),
                           *(f"version.{r}" for r in READ_PATHS_VERSIONS), "clone.level3",
                           "spark.clustered",
                           "delta.evolved", "purge.exports")
               if reads[p] == 0]
    assert not missing, f"never exercised: {missing}"


def read_everywhere(spark: Any, uri: str, version: int, exp: rp.Expected,
                    preds: list[rp.Pred], reads: Counter[str], what: str) -> list[str]:
    """Version ``version`` of ``uri`` through every read path, exporting the head
    first; returns one line per path that fails (so one run shows them all)."""
    t = caslake.open_table(uri)
    store = t.store
    failures: list[str] = []
    checks: list[tuple[str, Callable[[], Any]]] = [
        ("scan", lambda: rp.check_scan(t, version, exp, reads)),
        ("Spark load", lambda: rp.check_spark_load(spark, uri, version, exp, preds, reads)),
        ("read_native", lambda: rp.check_native(spark, uri, version, exp, reads)),
        ("Iceberg export", lambda: (t.export_iceberg(), rp.check_iceberg(
            uri, store, {version: exp}, reads, max_snapshots=1))),
        ("Delta export", lambda: rp.export_delta(t, reads) and rp.check_delta(
            uri, exp, version, reads)),
    ]
    for name, check in checks:
        try:
            check()
        except Exception as e:
            text = str(e).strip().splitlines()
            detail = next((ln for ln in reversed(text) if "caslake.errors" in ln),
                          text[0] if text else "")
            failures.append(f"{what}: {name}: {type(e).__name__}: {detail.strip()[:300]}")
    return failures


@pytest.mark.spark
def test_clone_chain_read_paths(tmp_path: Path, model_spark: Any) -> None:
    """A table with a delete, a rename (of a column and of a struct's field) and a
    column dropped and added again, then a clone of it, a clone of that clone and a
    clone of that one, each with its own delete: the table and every level read as
    the model, nested values included, through every read path (scan, Spark load
    with a reused DataFrame, read_native, the Iceberg and Delta exports with both
    their readers).  Every failing (level, path) is reported."""
    reads: Counter[str] = Counter()
    uri = str(tmp_path / "table")
    dev = ARROW_TYPES["struct"]
    t = caslake.create_table(uri, pa.schema([("id", pa.int64()), ("s", pa.string()),
                                             ("f", pa.float64()), ("dev", dev)]),
                             write_options=READ_PATHS_LAYOUT)
    t.append(pa.table({"id": pa.array([0, 1, 2, 3], pa.int64()),
                       "s": ["amber-1z", None, "basalt-1z", "cobalt-1z"],
                       "f": [2.5, None, -1.5, 7.0],
                       "dev": pa.array([{"os": "amber-3z", "n": 1}, None,
                                        {"os": None, "n": None}, {"os": "cobalt-3z", "n": 4}],
                                       dev)}))
    t.delete("id = 1")
    t.update_schema().rename_column("s", "s2").rename_column("dev.os", "os2").commit()
    t.update_schema().drop_column("f").add_column("f", "int64").commit()
    dev2 = pa.struct([("os2", pa.string()), ("n", pa.int64())])
    t.append(pa.table({"id": pa.array([4, 5, 6], pa.int64()),
                       "s2": ["amber-1z", "basalt-1z", None],
                       "f": pa.array([4, None, 9], pa.int64()),
                       "dev": pa.array([None, {"os2": "basalt-3z", "n": None},
                                        {"os2": None, "n": 7}], dev2)}))
    t.compact(target_file_size=1 << 20)  # every file names its columns alike (Delta)

    def d(os2: str | None, n: int | None) -> dict[str, Any]:
        return {"os2": os2, "n": n}

    rows = [(0, "amber-1z", d("amber-3z", 1), None), (2, "basalt-1z", d(None, None), None),
            (3, "cobalt-1z", d("cobalt-3z", 4), None), (4, "amber-1z", None, 4),
            (5, "basalt-1z", d("basalt-3z", None), None), (6, None, d(None, 7), 9)]
    names = ("id", "s2", "dev", "f")  # f, added again, comes last
    preds = [rp.Pred("id BETWEEN 2 AND 5", lambda r: 2 <= r[0] <= 5),
             rp.Pred("f IS NULL", lambda r: r[3] is None),
             rp.Pred("dev.n > 1", lambda r: r[2] is not None and (r[2]["n"] or 0) > 1),
             rp.Pred("dev.os2 = 'basalt-3z'", lambda r: r[2] is not None
                     and r[2]["os2"] == "basalt-3z")]
    failures = read_everywhere(model_spark, uri, t.version,
                               rp.Expected(names, tuple(rp.canon(rows))), preds, reads,
                               "table")
    src = uri
    for level, key in ((1, 0), (2, 4), (3, 6)):
        dst = str(tmp_path / f"clone{level}")
        caslake.clone(src, dst).delete(f"id = {key}")
        rows = [r for r in rows if r[0] != key]
        failures += read_everywhere(model_spark, dst, 1,
                                    rp.Expected(names, tuple(rp.canon(rows))), preds, reads,
                                    f"clone level {level}")
        src = dst
    print(f"\nclone chain reads: {dict(sorted(reads.items()))}")
    assert not failures, "\n".join(failures)


# --- multi-table transactions (issue 35) -------------------------------------------------
#
# A sibling pair of tables on one local store, "a" and "b" ("a" sorts first: the
# coordinator, staged first), each modelled as its rows per version, under
# single-table commits, compaction, gc and multi-table transactions (docs/protocol.md,
# "Multi-table transactions"): committed ones (append/delete/upsert on each table),
# aborted ones (a read_version conflict on "b" after "a" is staged; a schema mismatch
# in one part; gc collecting a part's uploads mid-transaction), and an abandoned one
# (staged, its record left pending, ttl 1 ms) that its owner decides later or the next
# writer of either table aborts.  An aborted staged version keeps its number and reads
# as its parent; a pending one is not visible at all.

MT_SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("s", pa.string()),
                       pa.field("f", pa.float64())])
MT_NAMES = tuple(MT_SCHEMA.names)
MT_TABLES = ("a", "b")
MT_LAYOUT = caslake.WriteOptions(target_file_size=2_500, row_group_size=2)
MT_PREDS = [rp.Pred("id < 3", lambda r: r[0] < 3),
            rp.Pred("s = 'x'", lambda r: r[1] == "x"),
            rp.Pred("f IS NULL", lambda r: r[2] is None),
            rp.Pred("id BETWEEN 4 AND 6", lambda r: 4 <= r[0] <= 6)]
MT_KINDS = ("append", "delete", "upsert")
MT_RULES = ("single", "txn", "conflict", "mismatch", "gc_midway", "abandon", "decide",
            "aborted_by_writer", "compact", "gc", "read_version")
mt_batch_st = st.lists(st.tuples(st.integers(0, 9), st.sampled_from(["x", "y", None]),
                                 st.sampled_from([None, -1.0, 2.5])), min_size=1, max_size=4)


def mt_arrow(rows: Sequence[rp.Row]) -> pa.Table:
    return pa.table([pa.array([r[k] for r in rows], f.type) for k, f in enumerate(MT_SCHEMA)],
                    schema=MT_SCHEMA)


@dataclass(frozen=True)
class MtOp:
    """One table's operation (``append``, ``delete`` or ``upsert`` on ``id``), run on a
    table or on a transaction's part, and its effect on the model's rows."""

    kind: str
    batch: tuple[rp.Row, ...] = ()
    pred: rp.Pred | None = None

    def __repr__(self) -> str:
        return f"{self.kind}({self.pred!r})" if self.pred else f"{self.kind}({list(self.batch)})"

    def run(self, target: Any) -> Any:
        if self.kind == "delete":
            assert self.pred is not None
            return target.delete(self.pred.sql)
        if self.kind == "upsert":
            return target.upsert(mt_arrow(self.batch), key=["id"], on_duplicate="last")
        return target.append(mt_arrow(self.batch))

    def effect(self, rows: list[rp.Row]) -> list[rp.Row]:
        if self.kind == "delete":
            assert self.pred is not None
            return canon([r for r in rows if not self.pred.holds(r)])
        if self.kind == "upsert":
            last = {r[0]: r for r in self.batch}  # the last row of each key
            return canon([r for r in rows if r[0] not in last] + list(last.values()))
        return canon([*rows, *self.batch])


mt_op_st = st.one_of(
    st.builds(MtOp, st.just("append"), mt_batch_st.map(tuple)),
    st.builds(MtOp, st.just("delete"), pred=st.sampled_from(MT_PREDS)),
    st.builds(MtOp, st.just("upsert"), mt_batch_st.map(tuple)))


@dataclass
class Pending:
    """A staged transaction whose owner went away: its record is pending."""

    tx: Any  # MultiTransaction
    after: dict[str, list[rp.Row]]  # each table's rows if it commits


class MultiTableMachine(RuleBasedStateMachine):
    new_root: ClassVar[Callable[[], Path]]
    spark: ClassVar[Any]  # None: no Spark read paths
    reads: ClassVar[Counter[str]]

    def __init__(self) -> None:
        super().__init__()
        root = self.new_root()
        self.uris = {n: str(root / n) for n in MT_TABLES}
        for uri in self.uris.values():
            caslake.create_table(uri, MT_SCHEMA, write_options=MT_LAYOUT)
        self.model: dict[str, list[list[rp.Row]]] = {n: [[]] for n in MT_TABLES}
        self.oldest = dict.fromkeys(MT_TABLES, 0)
        self.aborted: dict[str, set[int]] = {n: set() for n in MT_TABLES}
        self.pending: Pending | None = None
        self.steps = 0

    def _fresh(self, name: str) -> Table:
        return caslake.open_table(self.uris[name], write_options=MT_LAYOUT)

    def _rows(self, name: str) -> list[rp.Row]:
        return self.model[name][-1]

    def _commit(self, name: str, rows: list[rp.Row], version: int) -> None:
        self.model[name].append(canon(rows))
        assert version == len(self.model[name]) - 1, (name, version, len(self.model[name]))

    def _marker(self, name: str, aborted: bool = True) -> None:
        """A version of its parent's rows: an aborted staged one, or gc's marker."""
        self.model[name].append(self._rows(name))
        if aborted:
            self.aborted[name].add(len(self.model[name]) - 1)

    def _readable(self, name: str, v: int) -> bool:
        """gc may keep an aborted version as the oldest, its parent expired: it has
        no contents left (VersionNotFound, test_multitable.py)."""
        return not (v == self.oldest[name] and v in self.aborted[name])

    def _settle(self) -> None:
        """After any write: the pending transaction, if a writer aborted it (its ttl
        passed), is an aborted version in both tables.  Only its owner commits it."""
        if self.pending is None:
            return
        from caslake.core.multitable import read_record

        tx = self.pending.tx
        record, _ = read_record(self._fresh(MT_TABLES[0]).store, tx.txn_id)
        assert record.state != "committed", "a writer committed another's transaction"
        if record.state == "aborted":
            for n in MT_TABLES:
                self._marker(n)
            self.pending = None
            self.reads["rule.aborted_by_writer"] += 1

    def _after_abort(self, staged: tuple[str, ...]) -> None:
        """A transaction failed: each table in ``staged`` holds an aborted staged
        version, the others nothing new; no row of it is visible (the invariant)."""
        for n in MT_TABLES:
            v = self._fresh(n).version
            if n in staged:
                self._marker(n)
            assert v == len(self.model[n]) - 1, (n, v, len(self.model[n]) - 1, staged)

    def _tables(self) -> tuple[Table, Table]:
        a, b = (self._fresh(n) for n in MT_TABLES)
        return a, b

    # --- rules ---------------------------------------------------------------------------

    @rule(name=st.sampled_from(MT_TABLES), op=mt_op_st)
    def single(self, name: str, op: MtOp) -> None:
        """A plain one-table commit (it aborts an expired pending transaction first)."""
        res = op.run(self._fresh(name))
        self._settle()
        after = op.effect(self._rows(name))
        if res.noop:
            assert after == self._rows(name), f"{op} was a no-op yet changes rows"
        else:
            self._commit(name, after, res.version)
        self.reads["rule.single"] += 1

    @rule(op_a=mt_op_st, op_b=mt_op_st)
    def txn(self, op_a: MtOp, op_b: MtOp) -> None:
        """A multi-table transaction that commits: a version in each table."""
        a, b = self._tables()
        with caslake.transaction(a, b) as tx:
            op_a.run(tx[a])
            op_b.run(tx[b])
        self._settle()
        for n, op, t in (("a", op_a, a), ("b", op_b, b)):
            self._commit(n, op.effect(self._rows(n)), tx.results[_key(t)].version)
        self.reads["rule.txn"] += 1

    @precondition(lambda self: bool(self.model["b"][-1]))
    @rule(op_a=mt_op_st, data=st.data())
    def conflict(self, op_a: MtOp, data: st.DataObject) -> None:
        """A transaction reading "b" at its version, and a single-table delete of the
        same key landing on "b" before it commits: "a" is staged, then "b"'s part
        fails validation -- a typed CommitConflict, the record aborted, "a"'s staged
        version aborted, nothing of the transaction visible."""
        k = data.draw(st.sampled_from(sorted({r[0] for r in self._rows("b")})), label="key")
        self._conflict(op_a, k)

    def _conflict(self, op_a: MtOp, k: int) -> None:
        a, b = self._tables()
        read_at = b.version
        with pytest.raises(caslake.errors.CommitConflict), caslake.transaction(a, b) as tx:
            op_a.run(tx[a])
            tx[b].read_version(read_at)
            tx[b].delete(f"id = {k}")
            res = self._fresh("b").delete(f"id = {k}")  # another writer, first
            self._settle()
            self._commit("b", [r for r in self._rows("b") if r[0] != k], res.version)
        self._after_abort(("a",))
        self.reads["rule.conflict"] += 1

    @rule(op=mt_op_st, bad=st.sampled_from(MT_TABLES))
    def mismatch(self, op: MtOp, bad: str) -> None:
        """A schema mismatch in one table's part: typed, nothing visible in either."""
        a, b = self._tables()
        good = "b" if bad == "a" else "a"
        with pytest.raises(caslake.errors.SchemaMismatch), caslake.transaction(a, b) as tx:
            op.run(tx[dict(zip(MT_TABLES, (a, b), strict=True))[good]])
            tx[dict(zip(MT_TABLES, (a, b), strict=True))[bad]].append(
                pa.table({"id": ["not a number"]}))
        self._after_abort(())
        self.reads["rule.mismatch"] += 1

    @rule(op_a=mt_op_st, op_b=mt_op_st, gc_on=st.sampled_from(MT_TABLES))
    def gc_midway(self, op_a: MtOp, op_b: MtOp, gc_on: str) -> None:
        """gc (a clock 30 days ahead) runs while a transaction's parts are uploaded but
        not committed: it may collect them, so the transaction must then fail typed
        (the writer outlived gc), or commit with every file it names in place."""
        a, b = self._tables()
        try:
            with caslake.transaction(a, b) as tx:
                op_a.run(tx[a])
                op_b.run(tx[b])
                self._gc(gc_on)
        except caslake.errors.CaslakeError as e:
            note(f"gc_midway: {e!r}")
            self._settle()
            self._after_abort(tuple(n for n in MT_TABLES
                                    if self._fresh(n).version == len(self.model[n])))
            self.reads["gc_midway.refused"] += 1
        else:
            self._settle()
            for n, op, t in (("a", op_a, a), ("b", op_b, b)):
                self._commit(n, op.effect(self._rows(n)), tx.results[_key(t)].version)
            self.reads["gc_midway.committed"] += 1
        for n in MT_TABLES:
            assert verify_table(self._fresh(n).store, deep=True).ok
        self.reads["rule.gc_midway"] += 1

    @precondition(lambda self: self.pending is None)
    @rule(op_a=mt_op_st, op_b=mt_op_st)
    def abandon(self, op_a: MtOp, op_b: MtOp) -> None:
        """Stage a transaction (ttl 1 ms) and walk away: its record stays pending."""
        from caslake.ops.multi import MultiTransaction

        a, b = self._tables()
        tx = MultiTransaction([a, b], ttl_ms=1)
        op_a.run(tx[a])
        op_b.run(tx[b])
        tx.stage()
        self.pending = Pending(tx, {"a": op_a.effect(self._rows("a")),
                                    "b": op_b.effect(self._rows("b"))})
        self.reads["rule.abandon"] += 1

    @precondition(lambda self: self.pending is not None)
    @rule()
    def decide(self) -> None:
        """The owner comes back before any writer met its staged versions: the
        record swaps to committed, and both versions appear at once."""
        assert self.pending is not None
        pending, self.pending = self.pending, None
        results = pending.tx.decide()
        for n in MT_TABLES:
            self._commit(n, pending.after[n], results[_key(self._fresh(n))].version)
        self.reads["rule.decide"] += 1

    @rule(name=st.sampled_from(MT_TABLES))
    def compact(self, name: str) -> None:
        res = self._fresh(name).compact(target_file_size=1 << 20)
        self._settle()
        if not res.noop:
            self._commit(name, self._rows(name), res.version)
            self.reads["rule.compact"] += 1

    @rule(name=st.sampled_from(MT_TABLES))
    def gc(self, name: str) -> None:
        self._gc(name)
        self._settle()
        self.reads["rule.gc"] += 1

    def _gc(self, name: str) -> None:
        """gc with a clock 30 days ahead (a marker version when it expires some).
        It never keeps an aborted staged version without its parent (whose rows it
        shows): test_gc_twice_over_an_aborted_oldest_version."""
        t = self._fresh(name)
        report = t.gc(now=datetime.now(UTC) + timedelta(days=30))
        self._settle()  # its marker commit aborts an expired pending transaction
        if report.head_version == len(self.model[name]):
            self._marker(name, aborted=False)
        assert report.head_version == len(self.model[name]) - 1, (report, name)
        self.oldest[name] = report.oldest_version
        wait_out_gc_fence(t)

    @rule(name=st.sampled_from(MT_TABLES), data=st.data())
    def read_version(self, name: str, data: st.DataObject) -> None:
        """A retained version (aborted staged ones read as their parent)."""
        v = data.draw(st.integers(self.oldest[name], len(self.model[name]) - 1),
                      label="version")
        self._read_version(name, v)

    def _read_version(self, name: str, v: int) -> None:
        if self._readable(name, v):
            rp.check_scan(self._fresh(name), v,
                          rp.Expected(MT_NAMES, tuple(self.model[name][v])), self.reads)
            self.reads["rule.read_version"] += 1

    # --- invariants ------------------------------------------------------------------------

    @invariant()
    def tables_and_snapshot_equal_the_model(self) -> None:
        """Each table's head (a plain one-table read) and an atomic snapshot of both
        equal the model; a pending transaction shows nowhere."""
        a, b = self._tables()
        for n, t in (("a", a), ("b", b)):
            assert t.version == len(self.model[n]) - 1, (n, t.version, len(self.model[n]) - 1)
            rp.same(rp.arrow_rows(t.to_arrow(), MT_NAMES, n), self._rows(n),
                    f"table {n} differs from the model")
        snap = caslake.snapshot(b, a)
        for n, t in (("a", a), ("b", b)):
            # An aborted staged head is pinned under its own number, as plain reads
            # show it (its parent's rows); a pending one as its parent.
            pinned, head = snap.versions[_key(t)], len(self.model[n]) - 1
            assert pinned <= head and all(v in self.aborted[n] for v in range(pinned + 1,
                                                                                head + 1)), (
                f"the snapshot pins {n} at {pinned}, the table is at {head}")
            assert head not in self.aborted[n] or pinned == head, (n, pinned, head)
            self.reads["snapshot.parent_of_aborted"] += pinned < head
            rp.same(rp.arrow_rows(snap.to_arrow(t), MT_NAMES, n), self._rows(n),
                    f"the snapshot's {n} differs from the model")
        self.reads["snapshot"] += 1
        self.reads["pending.checked"] += self.pending is not None
        self.steps += 1
        if self.steps % VERIFY_EVERY == 0:
            for t in (a, b):
                assert verify_table(t.store).ok

    def _read_paths(self) -> None:
        """Every table's head through Spark (load, latest and at its version),
        read_native, and both exports read by their own readers."""
        for n in MT_TABLES:
            uri, t = self.uris[n], self._fresh(n)
            head = len(self.model[n]) - 1
            exp = rp.Expected(MT_NAMES, tuple(self._rows(n)))
            if self.spark is not None:
                df = self.spark.read.format("caslake").load(uri)
                rp.same(rp.spark_rows(df.collect(), MT_NAMES, df.columns), exp.rows,
                        f"Spark load of {n}'s latest")
                rp.check_spark_load(self.spark, uri, head, exp, MT_PREDS[:1], self.reads)
                rp.check_native(self.spark, uri, head, exp, self.reads)
                import caslake.spark

                df = caslake.spark.read_native(self.spark, uri)
                rp.same(rp.spark_rows(df.collect(), MT_NAMES, df.columns), exp.rows,
                        f"read_native of {n}'s latest")
            assert t.export_iceberg().version == head
            retained = {v: rp.Expected(MT_NAMES, tuple(rows))
                        for v, rows in enumerate(self.model[n]) if v >= self.oldest[n]}
            assert rp.check_iceberg(uri, t.store, retained, self.reads, max_snapshots=2) == head
            t.export_delta()
            rp.check_delta(uri, exp, head, self.reads)
        self.reads["pending.read_paths"] += self.pending is not None

    def _cover_the_rest(self) -> None:
        """What the few programs left out, made here with fixed choices."""
        one = MtOp("append", ((1, "x", None), (5, "y", 2.5)))
        if self.reads["rule.txn"] == 0:
            self.txn(one, MtOp("delete", pred=MT_PREDS[0]))
        if self.reads["rule.conflict"] == 0:
            if not self._rows("b"):
                self.single("b", one)
            self._conflict(one, self._rows("b")[0][0])
        if self.reads["rule.mismatch"] == 0:
            self.mismatch(one, "b")
        if self.reads["rule.gc_midway"] == 0:
            self.gc_midway(one, one, "a")
        if self.reads["rule.decide"] == 0:
            if self.pending is None:
                self.abandon(one, one)
            self.decide()
        if self.reads["rule.aborted_by_writer"] == 0:
            if self.pending is None:
                self.abandon(one, MtOp("upsert", ((5, "z", 0.5),)))
            self.single("b", MtOp("delete", pred=MT_PREDS[2]))
        if self.reads["rule.compact"] == 0:
            self.single("a", one)
            self.compact("a")
        if self.reads["rule.gc"] == 0:
            self.gc("b")
        if self.reads["rule.read_version"] == 0:
            self._read_version("a", len(self.model["a"]) - 1)
        # The read paths then see a pending transaction.
        if self.pending is None and self.reads["pending.read_paths"] == 0:
            self.abandon(one, one)

    def teardown(self) -> None:
        self._cover_the_rest()
        self.tables_and_snapshot_equal_the_model()
        for n in MT_TABLES:
            t = self._fresh(n)
            assert verify_table(t.store, deep=True, all_versions=True).ok
            for v in range(self.oldest[n], len(self.model[n])):
                if self._readable(n, v):
                    rp.check_scan(t, v, rp.Expected(MT_NAMES, tuple(self.model[n][v])),
                                  self.reads)
        self._read_paths()


def _key(t: Table) -> str:
    """A table's key in a transaction's results and a snapshot's versions."""
    return str(t.store.uri).rstrip("/")


@pytest.mark.spark
def test_model_multitable(tmp_path: Path, model_spark: Any) -> None:
    """Multi-table transactions (committed, aborted three ways, abandoned and then
    decided or aborted by the next writer) mixed with single-table commits,
    compaction and gc on a pair of tables: after every step each table and an
    atomic snapshot of both equal the model; at the end every retained version by
    scan and each head through Spark, read_native and both exports (a pending
    transaction in flight), and verify finds every object."""
    reads = run_fixed_programs(MultiTableMachine, tmp_path, model_spark, examples(2, 25), 15)
    print(f"\nmulti-table model: {dict(sorted(reads.items()))}")
    missing = [k for k in (*(f"rule.{r}" for r in MT_RULES), "pending.checked",
                           "pending.read_paths", "spark.load", "spark.native",
                           "iceberg.pyiceberg", "iceberg.duckdb", "delta.deltalake",
                           "delta.duckdb") if reads[k] == 0]
    assert not missing, f"never exercised: {missing}"


def test_gc_twice_over_an_aborted_oldest_version(tmp_path: Path) -> None:
    """Found by MultiTableMachine: an abandoned transaction over two tables, aborted by
    gc (a clock 30 days ahead) on one of them, which keeps that aborted version as its
    oldest; gc again, then once more: the table stays whole and gc keeps working."""
    from caslake.ops.multi import MultiTransaction

    schema = pa.schema([pa.field("id", pa.int64())])
    a, b = (caslake.create_table(str(tmp_path / n), schema) for n in MT_TABLES)
    tx = MultiTransaction([a, b], ttl_ms=1)
    tx[a].delete("id = 1")
    tx[b].delete("id = 1")
    tx.stage()  # then abandoned
    reports = []
    for _ in range(3):
        t = caslake.open_table(b.uri)
        reports.append(t.gc(now=datetime.now(UTC) + timedelta(days=30)))
        wait_out_gc_fence(t)
        assert verify_table(t.store, deep=True, all_versions=True).ok
    # the aborted version 1 reads as its parent: gc keeps version 0 too (it once kept
    # 1 alone, then deleted 1's manifest once 0 was gone, and every gc after failed)
    assert [r.oldest_version for r in reports] == [0, 0, 0]
    assert caslake.open_table(b.uri).to_arrow().num_rows == 0
