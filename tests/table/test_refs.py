"""Branches and tags on a table: isolation, fast-forward, merge, tags and gc, bad input."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

import caslake
from caslake.errors import (
    BranchDiverged,
    CommitConflict,
    InvalidArgument,
    InvalidRefName,
    RefAlreadyExists,
    RefInUse,
    RefNotFound,
    UserInputError,
    VersionNotFound,
)
from caslake.format.keys import POINTER_KEY
from caslake.format.refs import BRANCH_PREFIX, TAG_PREFIX
from caslake.ops.verify import verify_table
from caslake.store import open_store

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
FAR_FUTURE = datetime.now(UTC) + timedelta(days=3650)


def rows(start: int, n: int, tag: str = "x") -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "v": [f"{tag}{i}" for i in range(start, start + n)]}, schema=SCHEMA)


def verify(t: caslake.Table):  # type: ignore[no-untyped-def]
    return verify_table(t.store, deep=True, all_versions=True)


def ids(t: caslake.Table, **kw: object) -> list[int]:
    """The ids ``t``'s branch reads, through a fresh handle (cold caches, as
    another process would read)."""
    fresh = caslake.open_table(t.uri)
    if t.ref != "main":
        fresh = fresh.branch(t.ref)
    return sorted(fresh.scan(**kw).to_arrow().column("id").to_pylist())  # type: ignore[arg-type]


def objects(uri: str) -> dict[str, str]:
    """Every object of the table and the SHA-256 of its bytes."""
    store = open_store(uri)
    return {m.key: hashlib.sha256(store.get(m.key).data).hexdigest()
            for m in store.list("") if not m.key.startswith(".")}


@pytest.fixture
def table(tmp_path) -> caslake.Table:  # type: ignore[no-untyped-def]
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(rows(0, 10))  # v1
    t.append(rows(10, 10))  # v2
    return t


def test_a_table_without_refs_is_format_1_and_has_no_refs_objects(table) -> None:  # type: ignore[no-untyped-def]
    store = open_store(table.uri)
    assert json.loads(store.get(POINTER_KEY).data)["format_version"] == 1
    assert not list(store.list("refs/"))
    assert [r.name for r in table.list_refs()] == ["main"]


def test_branch_writes_are_invisible_on_main_until_fast_forward(table) -> None:  # type: ignore[no-untyped-def]
    audit = table.create_branch("audit")
    assert audit.ref == "audit" and audit.version == 2
    r = audit.append(rows(100, 5))
    assert r.version == 3  # continues from the fork point
    audit.delete("id < 5")
    assert ids(audit) == list(range(5, 20)) + list(range(100, 105))
    assert ids(table) == list(range(20))  # main unchanged
    assert table.refresh().version == 2
    assert ids(table, ref="audit") == ids(audit)
    assert ids(audit, version=3) == list(range(20)) + list(range(100, 105))
    assert ids(audit, version=1) == list(range(10))  # the shared history below the fork
    table.fast_forward(target="main", source="audit")
    assert table.refresh().version == 4 and ids(table) == ids(audit)
    assert [h.version for h in table.history()][:3] == [4, 3, 2]
    assert verify(table).ok


def test_branch_versions_are_their_own_chain(table) -> None:  # type: ignore[no-untyped-def]
    audit = table.create_branch("audit", from_version=1)
    assert audit.version == 1 and ids(audit) == list(range(10))
    audit.append(rows(50, 1))  # audit's v2, not main's v2
    assert ids(audit, version=2) == [*list(range(10)), 50]
    assert ids(table, version=2) == list(range(20))
    audit.create_tag("audit-2", version=2)
    assert ids(table, tag="audit-2") == [*list(range(10)), 50]


def test_fast_forward_after_a_divergent_main_commit_is_a_typed_conflict(table) -> None:  # type: ignore[no-untyped-def]
    audit = table.create_branch("audit")
    audit.append(rows(100, 5))
    table.append(rows(200, 1))  # main moved since the fork
    before = open_store(table.uri).get(POINTER_KEY).data
    with pytest.raises(BranchDiverged) as e:
        table.fast_forward(target="main", source="audit")
    assert isinstance(e.value, CommitConflict) and e.value.target == "main"
    assert open_store(table.uri).get(POINTER_KEY).data == before


def test_fast_forward_after_gc_expired_the_fork_names_the_expiry(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Once gc has expired the source's version that the target's head sits at,
    the fork cannot be checked: the fast-forward is refused as diverged (as
    Iceberg refuses when the ancestry walk meets an expired snapshot), with a
    message that says why, and nothing changes."""
    table = caslake.create_table(str(tmp_path / "t"), rows(0, 1).schema)  # main: version 0 only
    audit = table.create_branch("audit")
    audit.append(rows(100, 5))
    table.gc(now=datetime.now(UTC) + timedelta(days=30))
    assert table.refresh().version == 0  # main did not move
    assert audit.refresh().snapshot.manifest.oldest_version > 0
    before = open_store(table.uri).get(POINTER_KEY).data
    with pytest.raises(BranchDiverged) as e:
        table.fast_forward(target="main", source="audit")
    assert "expired" in str(e.value) and "moved since" not in str(e.value)
    assert open_store(table.uri).get(POINTER_KEY).data == before


def test_merge_replays_appends_and_deletes_onto_an_appended_target(table) -> None:  # type: ignore[no-untyped-def]
    audit = table.create_branch("audit")
    audit.append(rows(100, 5))
    audit.delete("id = 3 OR id = 101")
    table.append(rows(200, 2))  # main: only an append since the fork
    res = table.merge("audit", into="main")
    assert res.version == 4 and res.operation == "merge"
    assert ids(table.refresh()) == sorted(
        [i for i in range(20) if i != 3] + [100, 102, 103, 104] + [200, 201])
    assert verify(table).ok


def test_merge_refuses_when_the_target_did_more_than_append(table) -> None:  # type: ignore[no-untyped-def]
    audit = table.create_branch("audit")
    audit.append(rows(100, 5))
    table.delete("id = 0")
    v = table.refresh().version
    with pytest.raises(BranchDiverged):
        table.merge("audit", into="main")
    assert table.refresh().version == v


def test_tagged_version_survives_gc_with_zero_retention_and_force(table) -> None:  # type: ignore[no-untyped-def]
    table.create_tag("2026-q3", version=1)
    table.delete("id < 10")
    table.compact()
    for _ in range(2):
        table.gc(retention=timedelta(0), force=True, now=FAR_FUTURE)
    assert ids(table, tag="2026-q3") == list(range(10))
    with pytest.raises(VersionNotFound):
        table.scan(version=1)
    assert verify(table).ok


def test_dropped_tag_name_cannot_be_recreated(table) -> None:  # type: ignore[no-untyped-def]
    table.create_tag("q3", version=1)
    with pytest.raises(RefAlreadyExists):
        table.create_tag("q3", version=2)
    table.drop_tag("q3")
    with pytest.raises(RefNotFound):
        table.scan(tag="q3")
    with pytest.raises(RefAlreadyExists) as e:
        table.create_tag("q3", version=2)
    assert e.value.retired
    with pytest.raises(RefNotFound):
        table.drop_tag("q3")
    assert "q3" not in [r.name for r in table.list_refs()]
    # The tombstone retains nothing: gc may now expire version 1.
    table.gc(retention=timedelta(0), force=True, now=FAR_FUTURE)
    with pytest.raises(VersionNotFound):
        table.scan(version=1)


def test_dropping_a_branch_a_tag_needs_is_refused_naming_the_tag(table) -> None:  # type: ignore[no-untyped-def]
    audit = table.create_branch("audit")
    audit.append(rows(100, 5))
    audit.create_tag("candidate")
    with pytest.raises(RefInUse) as e:
        table.drop_branch("audit")
    assert "candidate" in str(e.value)
    assert ids(table, ref="audit")[-1] == 104
    table.drop_tag("candidate")
    table.drop_branch("audit")
    with pytest.raises(RefNotFound):
        table.branch("audit")
    before = objects(table.uri)
    report = table.gc(retention=timedelta(0), force=True, now=FAR_FUTURE)
    assert report.deleted.get("data")  # the branch-only data file is reclaimed
    assert verify(table).ok
    data = {k for k in objects(table.uri) if k.startswith("data/")}
    assert data < {k for k in before if k.startswith("data/")}


def test_a_tag_on_a_version_main_also_has_does_not_hold_the_branch(table) -> None:  # type: ignore[no-untyped-def]
    table.create_branch("audit").create_tag("shared", version=2)
    table.drop_branch("audit")
    assert ids(table, tag="shared") == list(range(20))


def test_gc_keeps_every_branch_readable(table) -> None:  # type: ignore[no-untyped-def]
    audit = table.create_branch("audit", from_version=1)
    audit.append(rows(100, 1))
    table.delete("id < 15")
    table.compact()
    table.gc(retention=timedelta(0), force=True, now=FAR_FUTURE)
    assert ids(audit) == [*list(range(10)), 100]
    assert ids(table) == list(range(15, 20))
    assert verify(table).ok


@pytest.mark.parametrize("name", ["", "..", "a/../b", "/x", "x/", "a\x07", "a b"])
def test_bad_ref_names_are_typed_errors_and_leave_nothing(table, name) -> None:  # type: ignore[no-untyped-def]
    before = objects(table.uri)
    for call in (lambda: table.create_branch(name), lambda: table.create_tag(name),
                 lambda: table.branch(name), lambda: table.drop_tag(name),
                 lambda: table.drop_branch(name), lambda: table.scan(tag=name),
                 lambda: table.scan(ref=name)):
        with pytest.raises(InvalidRefName):
            call()
    assert objects(table.uri) == before


def test_unknown_refs_and_bad_arguments_are_typed_errors(table) -> None:  # type: ignore[no-untyped-def]
    before = objects(table.uri)
    for call, err in [
        (lambda: table.branch("nope"), RefNotFound),
        (lambda: table.drop_branch("nope"), RefNotFound),
        (lambda: table.drop_tag("nope"), RefNotFound),
        (lambda: table.scan(tag="nope"), RefNotFound),
        (lambda: table.scan(ref="nope"), RefNotFound),
        (lambda: table.fast_forward(target="main", source="nope"), RefNotFound),
        (lambda: table.merge("nope"), RefNotFound),
        (lambda: table.create_branch("b", from_version=99), VersionNotFound),
        (lambda: table.create_branch("b", tag="nope"), RefNotFound),
        (lambda: table.create_branch("b", from_version=1, tag="x"), InvalidArgument),
        (lambda: table.create_tag("t", version=99), VersionNotFound),
        (lambda: table.create_tag("t", version=-1), VersionNotFound),
        (lambda: table.scan(tag="x", version=1), InvalidArgument),
        (lambda: table.drop_branch("main"), InvalidArgument),
        (lambda: table.create_branch("main"), RefAlreadyExists),
    ]:
        with pytest.raises(err) as e:
            call()
        assert isinstance(e.value, UserInputError), call
    assert objects(table.uri) == before


def test_refs_upgrade_the_table_to_format_2_and_are_listed(table) -> None:  # type: ignore[no-untyped-def]
    table.create_branch("release/1")
    table.create_tag("v1", version=1)
    store = open_store(table.uri)
    assert json.loads(store.get(POINTER_KEY).data)["format_version"] == 2
    assert [m.key for m in store.list(BRANCH_PREFIX)] == [BRANCH_PREFIX + "release%2F1"]
    assert [m.key for m in store.list(TAG_PREFIX)] == [TAG_PREFIX + "v1"]
    refs = {(r.kind, r.name): r.version for r in table.list_refs()}
    assert refs == {("branch", "main"): 2, ("branch", "release/1"): 2, ("tag", "v1"): 1}
    table.append(rows(300, 1))  # a commit carries format 2 forward
    assert json.loads(store.get(POINTER_KEY).data)["format_version"] == 2
    with pytest.raises(RefAlreadyExists):
        table.create_branch("release/1")


def test_merge_refuses_a_source_whose_schema_changed(table) -> None:  # type: ignore[no-untyped-def]
    audit = table.create_branch("audit")
    audit.update_schema().rename_column("v", "w").commit()
    audit.append(pa.table({"id": pa.array([500], pa.int64()), "w": ["x"]}))
    with pytest.raises(BranchDiverged):
        table.merge("audit", into="main")
    assert ids(table) == list(range(20))


def test_every_write_operation_on_a_branch_commits_there_only(table) -> None:  # type: ignore[no-untyped-def]
    main_before = objects(table.uri)
    audit = table.create_branch("audit")
    main_ptr = open_store(table.uri).get(POINTER_KEY).data
    results = [audit.upsert(rows(5, 3, tag="u"), key="id")]  # v3: ids 5..7 replaced
    with audit.transaction() as tx:  # v4
        tx.delete("id = 0")
        tx.append(rows(300, 2))
    results.append(audit.compact(target_file_size=1 << 30))  # v5
    audit.purge("id = 1")  # v6
    results.append(audit.append(rows(500, 1)))
    assert [r.version for r in results] == [3, 5, 7]
    assert audit.refresh().version == 7
    assert [h.version for h in audit.history()] == list(range(7, -1, -1))
    assert ids(audit) == sorted([*range(2, 20), 300, 301, 500])
    got = caslake.open_table(table.uri).branch("audit").scan(where="id = 5").to_arrow()
    assert got.column("v").to_pylist() == ["u5"]
    # main: the same pointer, the same rows, and none of its objects changed
    assert open_store(table.uri).get(POINTER_KEY).data == main_ptr
    assert ids(table) == list(range(20)) and table.refresh().version == 2
    after = objects(table.uri)
    assert all(after[k] == h for k, h in main_before.items() if k != POINTER_KEY)
    assert verify(table).ok


def test_a_branch_from_a_tag_survives_the_expiry_of_everything_else(table) -> None:  # type: ignore[no-untyped-def]
    table.create_tag("v1", version=1)
    table.delete("id < 5")
    table.compact()
    table.gc(retention=timedelta(0), force=True, now=FAR_FUTURE)  # version 1 expired on main
    fix = table.create_branch("fix", tag="v1")
    assert fix.version == 1 and ids(fix) == list(range(10))
    assert fix.append(rows(900, 1)).version == 2  # continues from the tag's version
    assert ids(fix) == [*range(10), 900] and ids(table) == list(range(5, 20))
    table.drop_tag("v1")  # the branch keeps its own history
    table.gc(retention=timedelta(0), force=True, now=FAR_FUTURE)
    assert ids(fix) == [*range(10), 900]
    assert verify(table).ok



def test_a_second_create_of_a_ref_in_the_same_millisecond_is_refused(
        table) -> None:  # type: ignore[no-untyped-def]
    """A create-only ref write that meets a clean 'already exists' is someone else's,
    even when that record's bytes equal ours: the same tag on the same version
    created in the same millisecond.  Only a create whose own attempt failed
    ambiguously (the reply lost) may settle by reading the record back.  (It used
    to compare bytes after any AlreadyExists, so a second create_tag within one
    millisecond 'succeeded'; the refs model test failed about 1 run in 10.)"""
    from caslake.ops import refs as refs_module

    io = table.context.io
    frozen = lambda: 1_700_000_000_000  # noqa: E731  one millisecond for both creates
    refs_module.create_tag(io, "same-ms", table.snapshot, branch="main", now_ms=frozen)
    with pytest.raises(RefAlreadyExists):
        refs_module.create_tag(io, "same-ms", table.snapshot, branch="main", now_ms=frozen)
