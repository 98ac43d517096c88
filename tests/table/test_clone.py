"""Zero-copy clones: independence, holds against the source's gc, drop, clone of a clone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

import caslake
from caslake.errors import (
    InvalidArgument,
    InvalidRefName,
    RefInUse,
    RefNotFound,
    TableAlreadyExists,
    TableNotFound,
    UserInputError,
    VersionNotFound,
)
from caslake.format.refs import HOLD_PREFIX
from caslake.ops.verify import verify_table
from caslake.store import open_store
from tests.table.test_refs import objects

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
LATER = datetime.now(UTC) + timedelta(days=3650)


def rows(lo: int, hi: int) -> pa.Table:
    return pa.table({"id": pa.array(range(lo, hi), pa.int64()),
                     "v": [f"v{i % 97}" for i in range(lo, hi)]}, schema=SCHEMA)


def ids(uri: str, **kw: object) -> list[int]:
    t = caslake.open_table(uri)
    return sorted(t.scan(columns=["id"], **kw).to_arrow().column("id").to_pylist())  # type: ignore[arg-type]


def churn(uri: str, times: int) -> None:
    """Rewrite the source's files and collect everything old, ``times`` times."""
    t = caslake.open_table(uri)
    for i in range(times):
        t.append(rows(10_000 + i, 10_001 + i))
        t.compact(target_file_size=1 << 20)
        t.gc(retention=timedelta(0), force=True, now=LATER)


@pytest.fixture
def source(tmp_path) -> str:  # type: ignore[no-untyped-def]
    uri = str(tmp_path / "src")
    t = caslake.create_table(uri, SCHEMA)
    t.append(rows(0, 100))  # v1
    t.append(rows(100, 200))  # v2
    t.delete("id < 10")  # v3: a tombstone the clone references too
    return uri


def test_writing_to_a_clone_leaves_the_source_byte_for_byte_unchanged(source, tmp_path) -> None:  # type: ignore[no-untyped-def]
    target = str(tmp_path / "clone")
    c = caslake.clone(source, target)
    before = objects(source)
    assert ids(target) == list(range(10, 200))
    c.append(pa.table({"id": pa.array(range(1_000_000, 2_000_000), pa.int64()),
                       "v": pa.array(["x"] * 1_000_000)}))
    c.delete("id < 50 OR id = 1999999")
    c.upsert(rows(150, 160), key=["id"])
    c.compact(target_file_size=1 << 30, deleted_fraction=0.01)
    assert objects(source) == before
    assert ids(source) == list(range(10, 200))
    got = ids(target)
    assert len(got) == 150 + 999_999 and got[0] == 50 and got[-1] == 1_999_998
    assert verify_table(caslake.open_table(target).store, deep=True, all_versions=True).ok


def test_the_clone_reads_after_the_source_is_compacted_and_gcd_many_times(source, tmp_path) -> None:  # type: ignore[no-untyped-def]
    target = str(tmp_path / "clone")
    caslake.clone(source, target, version=2)
    churn(source, 5)
    assert ids(target) == list(range(200))
    c = caslake.open_table(target)
    assert verify_table(c.store, deep=True, all_versions=True).ok
    c.delete("id >= 100")  # a delete on a source file, tombstone in the clone
    assert ids(target) == list(range(100))


def test_after_the_clone_is_dropped_the_source_gc_reclaims_shared_files(source, tmp_path) -> None:  # type: ignore[no-untyped-def]
    target = str(tmp_path / "clone")
    caslake.clone(source, target)
    shared = {k for k in objects(source) if k.startswith(("data/", "tombstone/"))}
    churn(source, 2)
    assert shared <= set(objects(source))  # held
    caslake.drop_table(target)
    assert not list(open_store(source).list(HOLD_PREFIX))
    with pytest.raises(TableNotFound):  # nothing left: a typed error, nothing changes
        caslake.drop_table(target)
    churn(source, 1)
    assert not shared & set(objects(source))
    with pytest.raises(TableNotFound):
        caslake.open_table(target)
    assert ids(source) == sorted([*range(10, 200), 10_000, 10_001, 10_000])


def test_a_clone_of_a_clone_holds_every_owner(source, tmp_path) -> None:  # type: ignore[no-untyped-def]
    first, second = str(tmp_path / "c1"), str(tmp_path / "c2")
    c1 = caslake.clone(source, first)
    c1.append(rows(500, 510))
    caslake.clone(first, second)
    assert ids(second) == [*range(10, 200), *range(500, 510)]
    assert len(list(open_store(source).list(HOLD_PREFIX))) == 2  # c1's and c2's
    with pytest.raises(RefInUse) as e:  # c2 still reads c1's own files
        caslake.drop_table(first)
    assert "c2" in str(e.value)
    assert ids(first) == ids(second)
    churn(source, 2)
    churn(first, 2)
    assert ids(second) == [*range(10, 200), *range(500, 510)]
    caslake.drop_table(second)
    assert len(list(open_store(source).list(HOLD_PREFIX))) == 1  # c1's
    caslake.drop_table(first)
    assert not list(open_store(source).list(HOLD_PREFIX))


def test_clone_at_a_tag_and_bad_targets(source, tmp_path) -> None:  # type: ignore[no-untyped-def]
    caslake.open_table(source).create_tag("v1", version=1)
    target = str(tmp_path / "clone")
    caslake.clone(source, target, tag="v1")
    assert ids(target) == list(range(100))
    with pytest.raises(TableAlreadyExists):
        caslake.clone(source, target)
    with pytest.raises(TableNotFound):
        caslake.clone(str(tmp_path / "nothing"), str(tmp_path / "x"))


def _holds(uri: str) -> list[str]:
    return [m.key for m in open_store(uri).list(HOLD_PREFIX)]


def test_compacting_the_clone_off_the_source_releases_its_hold(source, tmp_path) -> None:  # type: ignore[no-untyped-def]
    target = str(tmp_path / "clone")
    c = caslake.clone(source, target)
    c.append(rows(300, 310))
    shared = {k for k in objects(source) if k.startswith(("data/", "tombstone/"))}
    assert len(_holds(source)) == 1
    # While a retained version of the clone references the source, gc keeps the hold.
    report = c.gc(retention=timedelta(0), force=True, now=LATER)
    assert report.holds_released == [] and len(_holds(source)) == 1
    c.compact(target_file_size=1 << 30, deleted_fraction=0.01)  # nothing of the source live
    c.gc(dry_run=True, retention=timedelta(0), force=True, now=LATER)
    assert len(_holds(source)) == 1  # a dry run releases nothing
    report = c.gc(retention=timedelta(0), force=True, now=LATER)
    assert len(report.holds_released) == 1 and not _holds(source)
    again = c.gc(retention=timedelta(0), force=True, now=LATER)  # idempotent
    assert again.holds_released == [] and not _holds(source)
    churn(source, 1)
    assert not shared & set(objects(source))  # the source's gc reclaimed the shared files
    expected = [*range(10, 200), *range(300, 310)]
    assert ids(target) == expected
    assert verify_table(caslake.open_table(target).store, deep=True, all_versions=True).ok
    c = caslake.open_table(target)
    c.append(rows(400, 401))
    assert ids(target) == [*expected, 400]
    caslake.clone(target, str(tmp_path / "c2"))  # a clone of it holds only the clone
    assert not _holds(source) and len(_holds(target)) == 1
    assert ids(str(tmp_path / "c2")) == [*expected, 400]
    caslake.drop_table(str(tmp_path / "c2"))
    caslake.drop_table(target)  # releasing an already released hold is success


@pytest.mark.parametrize("keeper", ["tag", "branch", "clone"])
def test_a_ref_of_the_clone_on_a_source_version_keeps_the_hold(source, tmp_path, keeper) -> None:  # type: ignore[no-untyped-def]
    target = str(tmp_path / "clone")
    c = caslake.clone(source, target)
    if keeper == "tag":
        c.create_tag("before", version=0)
    elif keeper == "branch":
        c.create_branch("old", from_version=0)
    else:
        caslake.clone(target, str(tmp_path / "c2"))  # c2 holds the clone's version 0
    c.compact(target_file_size=1 << 30, deleted_fraction=0.01)
    c.gc(retention=timedelta(0), force=True, now=LATER)
    held = [h for h in _holds(source)]
    assert len(held) == (2 if keeper == "clone" else 1)
    churn(source, 2)
    if keeper == "tag":
        got = caslake.open_table(target).scan(tag="before").to_arrow()
    elif keeper == "branch":
        got = caslake.open_table(target).branch("old").scan().to_arrow()
    else:
        got = caslake.open_table(str(tmp_path / "c2")).scan().to_arrow()
    assert sorted(got.column("id").to_pylist()) == list(range(10, 200))


def test_dropping_a_branch_a_clone_needs_is_refused_naming_the_clone(source, tmp_path) -> None:  # type: ignore[no-untyped-def]
    audit = caslake.open_table(source).create_branch("audit")
    audit.append(rows(700, 710))  # a version only audit has
    target = str(tmp_path / "clone")
    caslake.clone(source, target, branch="audit")
    assert ids(target) == [*range(10, 200), *range(700, 710)]
    with pytest.raises(RefInUse) as e:
        caslake.open_table(source).drop_branch("audit")
    assert target in str(e.value)
    caslake.drop_table(target)
    caslake.open_table(source).drop_branch("audit")  # nothing needs it any more


@pytest.mark.parametrize(("kw", "err"), [
    ({"tag": "nope"}, RefNotFound),
    ({"branch": "nope"}, RefNotFound),
    ({"branch": "a/../b"}, InvalidRefName),
    ({"tag": ""}, InvalidRefName),
    ({"version": 99}, VersionNotFound),
    ({"version": 1, "tag": "x"}, InvalidArgument),
])
def test_bad_clone_arguments_are_typed_errors_and_leave_nothing(source, tmp_path, kw, err) -> None:  # type: ignore[no-untyped-def]
    before = objects(source)
    target = str(tmp_path / "clone")
    with pytest.raises(err) as e:
        caslake.clone(source, target, **kw)
    assert isinstance(e.value, UserInputError)
    assert objects(source) == before
    assert not list(open_store(target).list(""))


def test_a_compacted_clone_of_a_clone_releases_exactly_its_own_holds(source, tmp_path) -> None:  # type: ignore[no-untyped-def]
    first, second = str(tmp_path / "c1"), str(tmp_path / "c2")
    c1 = caslake.clone(source, first)
    c1.append(rows(500, 510))
    c2 = caslake.clone(first, second)
    assert len(_holds(source)) == 2 and len(_holds(first)) == 1
    c2.compact(target_file_size=1 << 30, deleted_fraction=0.01)
    report = c2.gc(retention=timedelta(0), force=True, now=LATER)
    assert len(report.holds_released) == 2  # its holds on c1 and on the source
    assert len(_holds(source)) == 1 and not _holds(first)  # c1's own hold stays
    caslake.drop_table(first)  # nothing holds c1 any more
    assert not _holds(source)
    churn(source, 1)
    assert ids(second) == [*range(10, 200), *range(500, 510)]
