"""Deletes racing other writers: the concurrency rules of deletes, on every backend.

Two handles on one table.  The race is forced deterministically, without
sleeps: handle A's store is wrapped in :class:`~tests.deletes.helpers.HookStore`,
which runs handle B's whole operation right before A's pointer CAS.  So B
commits between A's planning and A's CAS, A's CAS fails and A must rebase.

Rules checked (two handles on one table):

* delete || append -> both commit;
* delete || delete of different rows of the same file -> both commit, both
  deletions visible (masks merged, rows counted once);
* delete || delete of the same rows -> the second is a no-op (or deletes 0 new
  rows); no error; rows stay deleted;
* delete || overwrite -> the delete re-plans against the new files or raises
  CommitConflict; a deleted row never comes back;
* a row appended after a delete with the same key stays visible, also when a
  key-range tombstone covers that key in an older file.

Plus a multi-process race on local and moto S3: 4 processes deleting disjoint
ids one by one while 2 processes append fresh ids.
"""

from __future__ import annotations

import collections
import json
import struct
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import caslake
from caslake.api import Table
from caslake.core import WriteOptions
from caslake.core.commit import CommitPolicy
from caslake.errors import ConcurrentModification
from caslake.format.keys import TOMBSTONE_PREFIX
from caslake.store import open_store
from tests.deletes.helpers import HookStore
from tests.sample_data import ID_V_SCHEMA as SCHEMA
from tests.sample_data import id_v_rows as rows

FAST = CommitPolicy(max_attempts=200, base_backoff_s=0.001, max_backoff_s=0.05, settle_attempts=3)
LAYOUT = WriteOptions(row_group_size=300)  # 100 rows -> one file of several row groups
BASE = range(100)
WORKER = Path(__file__).with_name("delete_worker.py")


def ids_at(t: Table, version: int | None = None) -> list[int]:
    return sorted(t.scan(columns=["id"], version=version).to_arrow().column("id").to_pylist())


def handle(uri: str, opts: dict[str, str]) -> Table:
    t = caslake.open_table(uri, storage_options=opts, write_options=LAYOUT)
    t.commit_policy = FAST
    return t


def setup_table(uri: str, opts: dict[str, str]) -> None:
    """Version 1 holds ids 0..99 in one data file with several row groups."""
    t = caslake.create_table(uri, SCHEMA, storage_options=opts, write_options=LAYOUT)
    t.append(rows(BASE))
    files = t.describe()["data_files"]
    assert len(files) == 1 and files[0]["row_groups"] > 1, files  # the layout the tests assume


def racing(uri: str, opts: dict[str, str], other_op) -> tuple[Table, HookStore, list[object]]:  # type: ignore[no-untyped-def]
    """Handle A, whose first pointer CAS is preceded by ``other_op(B)`` on handle B.
    The list receives B's result (or the exception B raised)."""
    other = handle(uri, opts)
    out: list[object] = []

    def hook() -> None:
        try:
            out.append(other_op(other))
        except Exception as e:  # B's failure must fail the test, not hide inside A
            out.append(e)

    store = HookStore(open_store(uri, opts), hook)
    a = Table.load(store, write_options=LAYOUT)
    a.commit_policy = FAST
    return a, store, out


def check_history(uri: str, opts: dict[str, str], version: int) -> Table:
    fresh = handle(uri, opts)
    assert fresh.version == version
    assert [h.version for h in fresh.history()] == list(range(version, -1, -1))
    return fresh


def deleted_rows_total(t: Table) -> int:
    return sum(f["deleted_rows"] for f in t.describe()["data_files"])


# --- delete || append -------------------------------------------------------------------


def test_delete_rebases_over_a_concurrent_append(any_store_uri) -> None:  # type: ignore[no-untyped-def]
    uri, opts = any_store_uri
    setup_table(uri, opts)
    a, store, b_out = racing(uri, opts, lambda b: b.append(rows(range(1000, 1010), "b")))
    res = a.delete("id BETWEEN 10 AND 19")
    assert store.fired == 1 and store.cas_attempts >= 2  # the race really happened
    (b_res,) = b_out
    assert not isinstance(b_res, Exception), b_res
    assert b_res.version == 2 and res.version == 3 and not res.noop  # type: ignore[attr-defined]
    assert res.rows_deleted == 10
    fresh = check_history(uri, opts, 3)
    want = sorted(set(BASE) - set(range(10, 20)) | set(range(1000, 1010)))
    assert ids_at(fresh) == want
    assert ids_at(fresh, 2) == sorted([*BASE, *range(1000, 1010)])
    assert deleted_rows_total(fresh) == 10


def test_append_rebases_over_a_concurrent_delete(any_store_uri) -> None:  # type: ignore[no-untyped-def]
    uri, opts = any_store_uri
    setup_table(uri, opts)
    a, store, b_out = racing(uri, opts, lambda b: b.delete("id BETWEEN 10 AND 19"))
    res = a.append(rows(range(1000, 1010), "a"))
    assert store.fired == 1 and store.cas_attempts >= 2
    (b_res,) = b_out
    assert not isinstance(b_res, Exception), b_res
    assert (b_res.version, b_res.rows_deleted, b_res.noop) == (2, 10, False)  # type: ignore[attr-defined]
    assert res.version == 3
    fresh = check_history(uri, opts, 3)
    assert ids_at(fresh) == sorted(set(BASE) - set(range(10, 20)) | set(range(1000, 1010)))
    assert ids_at(fresh, 2) == sorted(set(BASE) - set(range(10, 20)))


def test_transaction_rebases_over_a_concurrent_append(any_store_uri) -> None:  # type: ignore[no-untyped-def]
    uri, opts = any_store_uri
    setup_table(uri, opts)
    a, store, b_out = racing(uri, opts, lambda b: b.append(rows(range(1000, 1010), "b")))
    with a.transaction() as tx:
        tx.delete("id BETWEEN 10 AND 19")
        tx.append(rows(range(2000, 2005), "tx"))
        tx.upsert(rows([30, 31, 2100], "up"), key=["id"])
    res = tx.result
    assert store.fired == 1 and store.cas_attempts >= 2
    (b_res,) = b_out
    assert not isinstance(b_res, Exception), b_res
    assert (res.version, res.rows_deleted, res.rows_added) == (3, 12, 8)
    fresh = check_history(uri, opts, 3)
    want = (set(BASE) - set(range(10, 20))) | set(range(1000, 1010)) | set(range(2000, 2005))
    assert ids_at(fresh) == sorted(want | {2100})
    got = fresh.scan(where="id IN (30, 31, 2100)").to_arrow().to_pylist()
    assert sorted((r["id"], r["v"]) for r in got) == [(30, "up30"), (31, "up31"), (2100, "up2100")]


# --- delete || delete -------------------------------------------------------------------

# (A's predicate, B's predicate, ids A matches, ids B matches); the last pair overlaps.
DELETE_PAIRS = [
    ("id = 3", "id = 7", {3}, {7}),
    ("v = 'r3'", "v IN ('r77', 'r78')", {3}, {77, 78}),
    ("id BETWEEN 0 AND 9", "v IN ('r50', 'r51')", set(range(10)), {50, 51}),
    ("id BETWEEN 0 AND 30", "id BETWEEN 20 AND 50", set(range(31)), set(range(20, 51))),
]


@pytest.mark.parametrize(("pred_a", "pred_b", "ids_a", "ids_b"), DELETE_PAIRS,
                         ids=["keys", "values", "range-and-values", "overlapping-ranges"])
def test_concurrent_deletes_in_one_file_both_land(any_store_uri, pred_a, pred_b, ids_a,  # type: ignore[no-untyped-def]
                                                  ids_b) -> None:
    uri, opts = any_store_uri
    setup_table(uri, opts)
    a, store, b_out = racing(uri, opts, lambda b: b.delete(pred_b))
    res = a.delete(pred_a)
    assert store.fired == 1 and store.cas_attempts >= 2
    (b_res,) = b_out
    assert not isinstance(b_res, Exception), b_res
    assert (b_res.version, b_res.rows_deleted) == (2, len(ids_b))  # type: ignore[attr-defined]
    new = ids_a - ids_b
    assert (res.version, res.noop) == (3, False)
    fresh = check_history(uri, opts, 3)
    # rows_deleted is what this commit removed from the table it landed on.
    assert res.rows_deleted == len(ids_at(fresh, 2)) - len(ids_at(fresh, 3)) == len(new)
    assert ids_at(fresh) == sorted(set(BASE) - ids_a - ids_b)
    assert ids_at(fresh, 2) == sorted(set(BASE) - ids_b)
    assert deleted_rows_total(fresh) == len(ids_a | ids_b)  # one merged mask, no double count


def test_concurrent_delete_of_the_same_rows_is_idempotent(any_store_uri) -> None:  # type: ignore[no-untyped-def]
    uri, opts = any_store_uri
    setup_table(uri, opts)
    a, store, b_out = racing(uri, opts, lambda b: b.delete("id BETWEEN 10 AND 19"))
    res = a.delete("id BETWEEN 10 AND 19")  # must not raise
    assert store.fired == 1
    (b_res,) = b_out
    assert not isinstance(b_res, Exception), b_res
    assert (b_res.version, b_res.rows_deleted) == (2, 10)  # type: ignore[attr-defined]
    assert res.rows_deleted == 0
    want = sorted(set(BASE) - set(range(10, 20)))
    if res.noop:
        assert res.version == 2
        fresh = check_history(uri, opts, 2)
    else:
        assert res.version == 3
        fresh = check_history(uri, opts, 3)
        assert ids_at(fresh, 3) == want
    assert ids_at(fresh) == want
    assert deleted_rows_total(fresh) == 10


def test_repeating_a_delete_is_a_noop(any_store_uri) -> None:  # type: ignore[no-untyped-def]
    uri, opts = any_store_uri
    setup_table(uri, opts)
    t = handle(uri, opts)
    first = t.delete("id = 5")
    again = t.delete("id = 5")
    nothing = t.delete("id = 12345")
    assert (first.version, first.rows_deleted, first.noop) == (2, 1, False)
    assert (again.version, again.rows_deleted, again.noop) == (2, 0, True)
    assert (nothing.version, nothing.rows_deleted, nothing.noop) == (2, 0, True)
    assert check_history(uri, opts, 2).scan().count() == 99


# --- delete || overwrite ----------------------------------------------------------------


def test_delete_racing_an_overwrite_replans_or_conflicts(any_store_uri) -> None:  # type: ignore[no-untyped-def]
    uri, opts = any_store_uri
    setup_table(uri, opts)
    new_data = rows(range(50), "new")
    a, store, b_out = racing(uri, opts, lambda b: b.overwrite(new_data))
    try:
        res = a.delete("id BETWEEN 10 AND 19")
    except ConcurrentModification:
        res = None
    assert store.fired == 1
    (b_res,) = b_out
    assert not isinstance(b_res, Exception), b_res
    assert b_res.version == 2  # type: ignore[attr-defined]
    if res is None:
        fresh = check_history(uri, opts, 2)
        assert ids_at(fresh) == list(range(50))
    else:
        # Re-planned against the overwrite's files: ids 10..19 of the new data go too.
        assert (res.version, res.rows_deleted, res.noop) == (3, 10, False)
        fresh = check_history(uri, opts, 3)
        assert ids_at(fresh) == sorted(set(range(50)) - set(range(10, 20)))
    vs = {r["v"] for r in fresh.scan().to_arrow().to_pylist()}
    assert all(v.startswith("new") for v in vs), vs  # no old row came back
    assert ids_at(fresh, 1) == list(BASE)


def test_overwrite_racing_a_delete_conflicts_or_replaces_everything(any_store_uri) -> None:  # type: ignore[no-untyped-def]
    uri, opts = any_store_uri
    setup_table(uri, opts)
    a, store, b_out = racing(uri, opts, lambda b: b.delete("id BETWEEN 10 AND 19"))
    try:
        res = a.overwrite(rows(range(50), "new"))
    except ConcurrentModification:
        res = None
    assert store.fired == 1
    (b_res,) = b_out
    assert not isinstance(b_res, Exception), b_res
    if res is None:
        assert ids_at(check_history(uri, opts, 2)) == sorted(set(BASE) - set(range(10, 20)))
    else:
        assert ids_at(check_history(uri, opts, 3)) == list(range(50))


# --- re-appended keys stay visible ------------------------------------------------------


def test_row_appended_after_delete_with_same_key_is_visible(any_store_uri) -> None:  # type: ignore[no-untyped-def]
    uri, opts = any_store_uri
    setup_table(uri, opts)
    t = handle(uri, opts)
    assert t.delete("id = 5").rows_deleted == 1
    t.append(rows([5], "again"))
    t.delete("id = 6")  # a later delete must not re-apply the old one to the new row
    fresh = check_history(uri, opts, 4)
    got = fresh.scan(where="id = 5").to_arrow().to_pylist()
    assert got == [{"id": 5, "v": "again5"}]
    assert ids_at(fresh) == sorted(set(BASE) - {6})
    # Deleting the key again removes exactly the new row.
    res = fresh.delete("id = 5")
    assert (res.rows_deleted, res.noop) == (1, False)
    assert 5 not in ids_at(fresh)


def test_range_delete_does_not_hide_later_rows_in_other_files(any_store_uri) -> None:  # type: ignore[no-untyped-def]
    uri, opts = any_store_uri
    setup_table(uri, opts)
    t = handle(uri, opts)
    assert t.delete("id BETWEEN 10 AND 20").rows_deleted == 11
    t.append(rows(range(10, 21), "later"))  # a new file with the same keys
    assert len(t.describe()["data_files"]) == 2
    assert t.delete("id = 50").rows_deleted == 1  # may rewrite / merge tombstones
    fresh = check_history(uri, opts, 4)
    want = sorted(set(BASE) - {50})
    assert ids_at(fresh) == want
    later = fresh.scan(where="id BETWEEN 10 AND 20").to_arrow().to_pylist()
    assert sorted((r["id"], r["v"]) for r in later) == [(i, f"later{i}") for i in range(10, 21)]
    assert fresh.scan(columns=["v"]).count() == 99
    assert ids_at(fresh, 2) == sorted(set(BASE) - set(range(10, 21)))
    # The same range deleted again now hits only the new file's rows.
    res = fresh.delete("id BETWEEN 10 AND 20")
    assert res.rows_deleted == 11
    assert ids_at(fresh) == sorted(set(BASE) - set(range(10, 21)) - {50})


def tombstone_headers(uri: str, opts: dict[str, str]) -> list[dict]:  # type: ignore[type-arg]
    """The JSON headers of every tombstone object (docs/format.md "Tombstone object")."""
    store = open_store(uri, opts)
    out = []
    for meta in store.list(TOMBSTONE_PREFIX):
        raw = store.get(meta.key).data
        assert raw[:4] == b"CLTB"
        (h,) = struct.unpack("<I", raw[4:8])
        out.append(json.loads(raw[8:8 + h]))
    return out


def test_key_range_tombstone_does_not_hide_later_rows_in_other_files(any_store_uri) -> None:  # type: ignore[no-untyped-def]
    """Every key appears 20 times scattered over one 20,000-row file, so deleting a
    key range hits 4,000 scattered positions and is stored as a key range (the
    bitmap would exceed 4 KiB).  The range names that file only."""
    uri, opts = any_store_uri
    t = caslake.create_table(uri, SCHEMA, storage_options=opts)
    t.commit_policy = FAST
    n = 20_000
    # id = i * 919 mod 1000: a permutation of 0..999 in every block of 1000 rows, so
    # each key occurs 20 times and a key range is scattered (no long runs).
    t.append(pa.table({"id": pa.array([i * 919 % 1000 for i in range(n)], pa.int64()),
                       "v": [f"r{i}" for i in range(n)]}, schema=SCHEMA))
    assert t.delete("id BETWEEN 100 AND 299").rows_deleted == 4_000
    (header,) = tombstone_headers(uri, opts)
    (entry,) = header["files"]
    assert entry.get("key_ranges"), entry  # the case this test is about
    t.append(rows(range(100, 300), "later"))  # the same keys, in a new file
    # More deletes on the first file: masks merge with the key range, and rows the
    # range already deleted are not counted again.
    assert t.delete("id = 700").rows_deleted == 20
    assert t.delete("id = 150").rows_deleted == 1  # only the later row
    fresh = check_history(uri, opts, 5)
    later = fresh.scan(where="id BETWEEN 100 AND 299").to_arrow().to_pylist()
    assert sorted((r["id"], r["v"]) for r in later) == [
        (i, f"later{i}") for i in range(100, 300) if i != 150]
    want = {k: 20 for k in range(1000) if not 100 <= k <= 299 and k != 700}
    want.update({k: 1 for k in range(100, 300) if k != 150})
    got_ids = fresh.scan(columns=["id"]).to_arrow().column("id").to_pylist()
    assert collections.Counter(got_ids) == want
    # A projection without the key column must still apply the key range.
    assert fresh.scan(columns=["v"]).count() == sum(want.values())
    assert fresh.scan(version=3).count() == n - 4_000 + 200
    assert sum(f["rows"] - f["deleted_rows"] for f in fresh.describe()["data_files"]) == sum(
        want.values())


# --- processes --------------------------------------------------------------------------


@pytest.mark.slow
def test_processes_delete_and_append_concurrently(any_store_uri) -> None:  # type: ignore[no-untyped-def]
    """4 deleter processes (disjoint ids, one delete per id, all hitting the same
    files) race 2 appender processes.  Every acknowledged operation is exactly
    one version, with no gaps, and every version holds exactly the rows the
    operations acknowledged up to it."""
    uri, opts = any_store_uri
    if uri.startswith("memory://"):
        pytest.skip("a memory:// table is private to one process")
    deleters, per_deleter, appenders, per_appender = 4, 6, 2, 6
    t = caslake.create_table(uri, SCHEMA, storage_options=opts, write_options=LAYOUT)
    for k in range(4):  # version 4: ids 0..399 in 4 files of several row groups
        t.append(rows(range(100 * k, 100 * (k + 1))))
    start = t.version
    # Deleter w takes ids congruent to w mod 4 (disjoint), spread over all four files.
    jobs = [("delete", sorted({w + deleters * (j * 17 % 100) for j in range(per_deleter)}))
            for w in range(deleters)]
    jobs += [("append", [[100_000 * (a + 1) + 10 * i, 5] for i in range(per_appender)])
             for a in range(appenders)]
    procs = [subprocess.Popen([sys.executable, str(WORKER), uri, json.dumps(opts or {}), role,
                               json.dumps(payload)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for role, payload in jobs]
    acked: list[dict] = []  # type: ignore[type-arg]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
        acked.extend(json.loads(out.strip().splitlines()[-1]))

    deletes = [r for r in acked if r["op"] == "delete"]
    appends = [r for r in acked if r["op"] == "append"]
    assert len(deletes) == deleters * per_deleter and len(appends) == appenders * per_appender
    assert all(r["rows_deleted"] == 1 and not r["noop"] for r in deletes), deletes
    versions = sorted(r["version"] for r in acked)
    n_ops = len(acked)
    assert versions == list(range(start + 1, start + 1 + n_ops)), versions  # one each, no gaps
    fresh = check_history(uri, opts, start + n_ops)

    # Replay the acknowledged operations in version order: every version must hold
    # exactly the rows they imply.
    live = set(range(400))
    by_version = {r["version"]: r for r in acked}
    for v in range(start + 1, start + 1 + n_ops):
        r = by_version[v]
        if r["op"] == "delete":
            assert r["id"] in live
            live.discard(r["id"])
        else:
            live |= set(r["ids"])
        got = ids_at(fresh, v)
        assert len(got) == len(set(got)), f"duplicate rows at version {v}"
        assert set(got) == live, f"version {v}"
    assert deleted_rows_total(fresh) == len(deletes)
