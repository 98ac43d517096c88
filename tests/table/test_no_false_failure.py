"""Defect 1 of issue 9: no false failure while a pointer write is unsettled.

A pointer PUT times out (its reply lost, the request still in flight); the
read-back still shows the old pointer, so the commit loop tries again.  Then a
later step of the next attempt fails with a store error -- the manifest PUT,
the pointer GET, or a write inside ``prepare`` (a tombstone).  Meanwhile the
first PUT lands (its If-Match still matches).  Reporting that store error
would tell the caller "failed, retry" about a commit that is in the table; a
retry then appends twice.  The rule (docs/protocol.md, "Commit"): every exit
from the loop settles the open write first, or raises CommitOutcomeUnknown.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import caslake
from caslake.api import Table
from caslake.core.changes import Changes
from caslake.core.commit import CommitPolicy, commit_with_retry
from caslake.core.metadata_io import MetadataIO, Snapshot
from caslake.errors import CommitOutcomeUnknown, TransientStoreError
from caslake.format.keys import MANIFEST_PREFIX, POINTER_KEY
from caslake.ops.write import WriteOptions, write_data_files
from caslake.store import open_store
from tests.table.late_landing import LateLandingStore, fail_after_the_settle_read

SCHEMA = pa.schema([("id", pa.int64())])
FAST = CommitPolicy(max_attempts=20, base_backoff_s=0.0, max_backoff_s=0.0, settle_attempts=3)


def batch(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64())})


def _setup(uri: str, opts: dict[str, str]) -> tuple[Table, LateLandingStore]:
    caslake.create_table(uri, SCHEMA, storage_options=opts).append(batch(0, 3))
    store = LateLandingStore(open_store(uri, opts))
    t = Table.load(store)
    t.commit_policy = FAST
    return t, store


def _count(uri: str, opts: dict[str, str]) -> tuple[int, int]:
    fresh = caslake.open_table(uri, storage_options=opts)
    return fresh.version, fresh.scan().count()


# After the first attempt's pointer PUT is held, the settle read (1 pointer GET)
# shows the old pointer; the second attempt's first request is its pointer GET,
# then the manifest PUT.  The skipped GET makes the failure hit attempt 2's read.
STEPS: dict[str, tuple[str, str]] = {
    "manifest-put": ("put", MANIFEST_PREFIX),
    "pointer-get": ("get", POINTER_KEY),
}


@pytest.mark.parametrize("step", sorted(STEPS))
def test_a_later_failure_after_the_open_write_landed_reports_the_commit(
        any_store_uri, step: str) -> None:  # type: ignore[no-untyped-def]
    uri, opts = any_store_uri
    t, store = _setup(uri, opts)
    fail_after_the_settle_read(store, *STEPS[step], land_first=True)
    res = t.append(batch(10, 5))  # old code: TransientStoreError, yet the rows land
    assert store.failed == 1 and store.landed
    assert (res.version, res.noop, res.rows_added) == (2, False, 5)
    assert _count(uri, opts) == (2, 8)


@pytest.mark.parametrize("step", sorted(STEPS))
def test_a_later_failure_while_the_write_may_still_land_is_outcome_unknown(
        any_store_uri, step: str) -> None:  # type: ignore[no-untyped-def]
    uri, opts = any_store_uri
    t, store = _setup(uri, opts)
    fail_after_the_settle_read(store, *STEPS[step], land_first=False)
    with pytest.raises(CommitOutcomeUnknown) as e:
        t.append(batch(10, 5))
    assert store.failed == 1 and e.value.version == 2
    # Nothing of the commit was deleted: when the write lands late, the table is whole.
    store.land()
    assert _count(uri, opts) == (2, 8)


def test_a_store_error_in_prepare_is_never_a_false_failure(any_store_uri) -> None:  # type: ignore[no-untyped-def]
    """``prepare`` writes an object (as a delete's re-plan writes its tombstone) and
    that write fails on the second attempt, after the first attempt's pointer PUT
    landed late."""
    uri, opts = any_store_uri
    t, store = _setup(uri, opts)
    io = MetadataIO(store)
    files = write_data_files(store.inner, batch(100, 2).to_reader(), t.table_schema,
                             WriteOptions())
    calls = {"n": 0}

    def prepare(base: Snapshot) -> Changes | None:
        calls["n"] += 1
        if calls["n"] == 2:
            store.land()
            raise TransientStoreError("injected failure of a tombstone PUT in prepare")
        return Changes("append", add_files=tuple(files))

    outcome = commit_with_retry(io, prepare, policy=FAST)
    assert calls["n"] == 2 and store.landed
    assert outcome.snapshot.version == 2 and not outcome.noop
    assert _count(uri, opts) == (2, 5)


def test_budget_exhaustion_with_an_open_write_settles_it(any_store_uri) -> None:  # type: ignore[no-untyped-def]
    """The last attempt ends with the pointer write open: before giving up, the loop
    reads the pointer back; the write has landed, so the commit is reported."""
    uri, opts = any_store_uri
    t, store = _setup(uri, opts)
    t.commit_policy = CommitPolicy(max_attempts=1, base_backoff_s=0.0, max_backoff_s=0.0,
                                   settle_attempts=2)
    orig_get = store.get
    reads = {"n": 0}

    def get(key: str):  # type: ignore[no-untyped-def]
        if key == POINTER_KEY and store.held is not None and not store.landed:
            reads["n"] += 1
            if reads["n"] == 2:  # after the in-attempt settle, before the final one
                store.land()
        return orig_get(key)

    store.get = get  # type: ignore[method-assign]
    res = t.append(batch(10, 5))
    assert store.landed and (res.version, res.noop) == (2, False)
    assert _count(uri, opts) == (2, 8)

