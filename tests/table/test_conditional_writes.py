"""The one module of conditional writes (caslake.core.pointer): what each call reports
after a clean answer, a lost reply, a refused condition and an unreadable store.

Runs over the real in-memory and local backends with injected faults; nothing of the
store layer is mocked."""

from __future__ import annotations

from pathlib import Path

import pytest

from caslake.core import (
    CommitPolicy,
    Swap,
    create_record,
    put_new,
    record_holds,
    settle,
    swap_record,
)
from caslake.errors import AlreadyExists, CommitOutcomeUnknown, NotFound, StoreError
from caslake.store.base import ObjectStore
from caslake.store.faults import Fault, FaultyStore
from caslake.store.local import LocalStore
from caslake.store.memory import MemoryStore

FAST = CommitPolicy(settle_attempts=3, base_backoff_s=0.0001, max_backoff_s=0.001)


@pytest.fixture(params=["memory", "local"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "memory":
        return MemoryStore()
    return LocalStore(str(tmp_path / "t"))


def faulty(inner: ObjectStore, *faults: Fault) -> FaultyStore:
    return FaultyStore(inner, faults)


def test_put_new_refuses_to_overwrite(store: ObjectStore) -> None:
    put_new(store, "m/a", b"1")
    with pytest.raises(AlreadyExists):
        put_new(store, "m/a", b"2")
    assert store.get("m/a").data == b"1"


def test_create_record_is_ours_once(store: ObjectStore) -> None:
    assert create_record(store, "refs/t", b"x", what="tag") is True
    # A clean refusal is someone else's record, even with our very bytes.
    assert create_record(store, "refs/t", b"x", what="tag") is False
    assert create_record(store, "refs/t", b"y", what="tag") is False
    assert store.get("refs/t").data == b"x"


def test_create_record_whose_reply_was_lost_is_ours(store: ObjectStore) -> None:
    s = faulty(store, Fault(frozenset({"put"}), "after", times=1))
    assert create_record(s, "refs/t", b"x", what="tag") is True
    assert s.fired == 1


def test_create_record_that_failed_before_applying_is_sent_again(store: ObjectStore) -> None:
    s = faulty(store, Fault(frozenset({"put"}), "before", times=2))
    assert create_record(s, "refs/t", b"x", what="tag") is True
    assert s.fired == 2 and store.get("refs/t").data == b"x"


def test_create_record_lost_to_another_writer_after_an_unclear_try(
        store: ObjectStore) -> None:
    # Our try fails before applying; by the read-back another writer's record is there.
    s = faulty(store, Fault(frozenset({"put"}), "before", times=1))
    real_get = s.get

    def racing_get(key: str):  # type: ignore[no-untyped-def]
        if not store.exists(key):
            store.put(key, b"theirs")
        return real_get(key)

    s.get = racing_get  # type: ignore[method-assign]
    assert create_record(s, "refs/t", b"ours", what="tag") is False
    assert store.get("refs/t").data == b"theirs"


def test_create_record_that_cannot_be_settled_is_outcome_unknown(store: ObjectStore) -> None:
    s = faulty(store, Fault(frozenset({"put"}), "after"), Fault(frozenset({"get"}), "before"))
    with pytest.raises(CommitOutcomeUnknown) as info:
        create_record(s, "refs/t", b"x", what="tag 't'", commit_id="c1", version=3)
    assert "tag 't'" in str(info.value)
    assert info.value.commit_id == "c1" and info.value.version == 3


def test_swap_record_outcomes(store: ObjectStore) -> None:
    etag = store.put("p", b"v1")
    done = swap_record(store, "p", b"v2", etag)
    assert done and done.outcome is Swap.SWAPPED and done.etag
    lost = swap_record(store, "p", b"v3", etag)  # the ETag is stale now
    assert not lost and lost.outcome is Swap.LOST
    assert store.get("p").data == b"v2"
    with pytest.raises(NotFound):
        swap_record(store, "missing", b"x", etag)


def test_swap_record_with_a_lost_reply_is_unclear_and_applied(store: ObjectStore) -> None:
    etag = store.put("p", b"v1")
    s = faulty(store, Fault(frozenset({"put"}), "after", times=1))
    unclear = swap_record(s, "p", b"v2", etag)
    assert unclear.outcome is Swap.UNCLEAR and isinstance(unclear.error, StoreError)
    # Never guessed: the caller reads back, and here the write did apply.
    assert record_holds(store, "p", b"v2") is True


def test_record_holds_says_none_when_unreadable(store: ObjectStore) -> None:
    store.put("p", b"v1")
    assert record_holds(store, "p", b"v1") is True
    assert record_holds(store, "p", b"v2") is False
    assert record_holds(store, "gone", b"v1") is False
    s = faulty(store, Fault(frozenset({"get"}), "before"))
    assert record_holds(s, "p", b"v1") is None


def test_settle_retries_reads_then_reports_outcome_unknown() -> None:
    calls = []

    def flaky() -> bool:
        calls.append(1)
        if len(calls) < 3:
            raise StoreError("unreadable")
        return True

    assert settle(flaky, commit_id="c", version=1, policy=FAST) is True

    def never() -> bool:
        raise StoreError("unreadable")

    with pytest.raises(CommitOutcomeUnknown):
        settle(never, commit_id="c", version=1, policy=FAST)
