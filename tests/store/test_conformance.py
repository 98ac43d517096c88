"""The storage contract (caslake.store.base), checked identically on every backend.

Each test runs against memory, local, s3 (moto) and azure (Azurite) through the
``any_store`` fixture (``store_kind`` is overridden here with every backend).
Concurrency tests release all writers at once with a barrier.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from caslake.errors import (
    AlreadyExists,
    InvalidArgument,
    NotFound,
    PreconditionFailed,
    PutOutcomeUnknown,
    StoreError,
)
from caslake.store import (
    DELETE,
    GET,
    GET_RANGE,
    HEAD,
    LIST,
    PUT,
    IfMatch,
    LocalStore,
    ObjectStore,
    PutMode,
    S3Store,
)
from caslake.store.faults import Fault, FaultyStore
from caslake.store.ranges import plan_ranges
from caslake.store.retry import RetryingStore
from caslake.store.s3 import ObstoreStore
from tests.conftest import ALL_STORE_KINDS, kind_params


@pytest.fixture(params=kind_params(ALL_STORE_KINDS))
def store_kind(request: pytest.FixtureRequest) -> str:
    """Every backend, the emulators included."""
    return str(request.param)


def run_together(n: int, fn: Callable[[int], Any]) -> list[tuple[str, Any]]:
    """Run ``fn(0..n-1)`` on n threads released together; ("ok", result) or ("err", exc)."""
    barrier = threading.Barrier(n)

    def one(i: int) -> tuple[str, Any]:
        barrier.wait()
        try:
            return "ok", fn(i)
        except Exception as exc:
            return "err", exc

    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(one, range(n)))


def is_s3(store: ObjectStore) -> bool:
    return isinstance(store, S3Store)


def is_remote(store: ObjectStore) -> bool:
    """An obstore-backed store (S3, Azure): same request pattern, coalesced ranges."""
    return isinstance(store, ObstoreStore)


# --- create-only ----------------------------------------------------------------


@pytest.mark.parametrize("writers", [32, 64])
def test_concurrent_create_has_exactly_one_winner(any_store: ObjectStore, writers: int) -> None:
    key = "_log/00000000000000000001.json"

    def create(i: int) -> tuple[int, str]:
        return i, any_store.put(key, f"writer-{i}".encode() * 10, mode=PutMode.CREATE)

    outcomes = run_together(writers, create)
    wins = [value for status, value in outcomes if status == "ok"]
    errors = [value for status, value in outcomes if status == "err"]
    assert len(wins) == 1, f"{len(wins)} creators won"
    assert len(errors) == writers - 1
    assert all(isinstance(e, AlreadyExists) for e in errors), {type(e) for e in errors}
    winner, etag = wins[0]
    got = any_store.get(key)
    assert got.data == f"writer-{winner}".encode() * 10
    assert got.etag == etag == any_store.head(key).etag


def test_create_on_existing_key_is_already_exists_and_keeps_the_object(
        any_store: ObjectStore) -> None:
    etag = any_store.put("k", b"first", mode=PutMode.CREATE)
    with pytest.raises(AlreadyExists) as info:
        any_store.put("k", b"second", mode=PutMode.CREATE)
    assert info.value.key == "k"
    got = any_store.get("k")
    assert (got.data, got.etag) == (b"first", etag)


def test_create_after_delete_succeeds(any_store: ObjectStore) -> None:
    any_store.put("k", b"one", mode=PutMode.CREATE)
    any_store.delete("k")
    any_store.put("k", b"two", mode=PutMode.CREATE)
    assert any_store.get("k").data == b"two"


# --- compare-and-swap -------------------------------------------------------------


def test_concurrent_cas_has_exactly_one_winner_per_round(any_store: ObjectStore) -> None:
    key = "_pointer.json"
    etag = any_store.put(key, b"round-start", mode=PutMode.CREATE)
    writers, rounds = 32, 4
    for rnd in range(rounds):
        base = etag

        def swap(i: int, base: str = base, rnd: int = rnd) -> tuple[int, str]:
            return i, any_store.put(key, f"r{rnd}-w{i}".encode(), mode=IfMatch(base))

        outcomes = run_together(writers, swap)
        wins = [value for status, value in outcomes if status == "ok"]
        errors = [value for status, value in outcomes if status == "err"]
        assert len(wins) == 1, f"round {rnd}: {len(wins)} CAS writers won"
        assert all(isinstance(e, PreconditionFailed) for e in errors), {type(e) for e in errors}
        winner, etag = wins[0]
        got = any_store.get(key)
        assert got.data == f"r{rnd}-w{winner}".encode()
        assert got.etag == etag != base


def test_cas_on_missing_key_is_not_found(any_store: ObjectStore) -> None:
    with pytest.raises(NotFound) as info:
        any_store.put("nope", b"x", mode=IfMatch('"0123456789abcdef"'))
    assert info.value.key == "nope"
    assert not any_store.exists("nope")


def test_cas_with_stale_etag_is_precondition_failed(any_store: ObjectStore) -> None:
    old = any_store.put("k", b"v1")
    new = any_store.put("k", b"v2", mode=IfMatch(old))
    with pytest.raises(PreconditionFailed):
        any_store.put("k", b"v3", mode=IfMatch(old))
    got = any_store.get("k")
    assert (got.data, got.etag) == (b"v2", new)


def test_precondition_failures_are_not_subclasses_of_each_other() -> None:
    # Callers branch on these types; they must stay distinct.
    assert not issubclass(PreconditionFailed, NotFound)
    assert not issubclass(NotFound, PreconditionFailed)
    assert not issubclass(AlreadyExists, PreconditionFailed)


# --- ETags --------------------------------------------------------------------------


def test_etags_round_trip_in_one_quoted_form(any_store: ObjectStore) -> None:
    etag = any_store.put("dir/obj", b"payload")
    assert etag.startswith('"') and etag.endswith('"') and len(etag) > 2
    assert any_store.head("dir/obj").etag == etag
    assert any_store.get("dir/obj").etag == etag
    listed = {m.key: m.etag for m in any_store.list("dir/")}
    assert listed == {"dir/obj": etag}
    # IfMatch accepts the ETag with and without its quotes.
    etag2 = any_store.put("dir/obj", b"payload 2", mode=IfMatch(etag.strip('"')))
    etag3 = any_store.put("dir/obj", b"payload 3", mode=IfMatch(etag2))
    assert len({etag, etag2, etag3}) == 3
    assert any_store.get("dir/obj").data == b"payload 3"


def test_every_write_of_new_content_changes_the_etag(any_store: ObjectStore) -> None:
    seen = set()
    for i in range(20):
        seen.add(any_store.put("k", f"content {i}".encode()))
    assert len(seen) == 20


def test_rewriting_identical_bytes_changes_etag_except_on_s3(any_store: ObjectStore) -> None:
    first = any_store.put("k", b"same")
    second = any_store.put("k", b"same")
    if is_s3(any_store):
        assert first == second  # S3 ETags are content hashes: callers must vary content
    else:
        assert first != second


def test_head_and_get_report_size(any_store: ObjectStore) -> None:
    data = bytes(range(256)) * 40
    any_store.put("k", data)
    assert any_store.head("k").size == len(data)
    got = any_store.get("k")
    assert got.size == len(data) and got.data == data


def test_empty_object(any_store: ObjectStore) -> None:
    etag = any_store.put("empty", b"", mode=PutMode.CREATE)
    got = any_store.get("empty")
    assert got.data == b"" and got.etag == etag
    assert any_store.head("empty").size == 0


def test_large_object_is_one_put(any_store: ObjectStore) -> None:
    data = random.Random(7).randbytes(12 * 1024 * 1024)
    any_store.counters.reset()
    any_store.put("big", data, mode=PutMode.CREATE)
    assert any_store.counters.count(PUT) == 1
    assert any_store.get("big").data == data


# --- reads ---------------------------------------------------------------------------


def test_missing_objects_are_not_found(any_store: ObjectStore) -> None:
    for call in (lambda: any_store.get("a/missing"), lambda: any_store.head("a/missing"),
                 lambda: any_store.get_ranges("a/missing", [(0, 1)])):
        with pytest.raises(NotFound) as info:
            call()
        assert info.value.key == "a/missing"
    assert any_store.exists("a/missing") is False


RANGE_CASES: list[list[tuple[int, int]]] = [
    [(0, 10)],
    [(0, 100_000)],  # the whole object
    [(5, 10), (10, 20)],  # adjacent
    [(0, 50), (25, 75), (30, 40)],  # overlapping and nested
    [(90_000, 90_010), (10, 20), (50_000, 50_001)],  # out of order, far apart
    [(7, 7), (0, 3), (99_999, 100_000), (3, 3)],  # empty ranges and the last byte
    [(1, 2)] * 5,  # duplicates
    [(0, 0)],  # only an empty range: no request at all
    [],
]


@pytest.mark.parametrize("ranges", RANGE_CASES, ids=lambda r: f"{len(r)}ranges")
def test_get_ranges_equals_slicing(any_store: ObjectStore, ranges: list[tuple[int, int]]) -> None:
    data = random.Random(3).randbytes(100_000)
    etag = any_store.put("obj", data)
    any_store.counters.reset()
    got = any_store.get_ranges("obj", ranges)
    assert got == [data[s:e] for s, e in ranges]
    # One request per coalesced range, each counted with its bytes.
    expected = plan_ranges(ranges, max_gap=any_store.max_gap,  # type: ignore[attr-defined]
                           max_request=any_store.max_request)  # type: ignore[attr-defined]
    assert any_store.counters.count(GET_RANGE) == len(expected)
    assert any_store.counters.snapshot()["bytes_in"] == sum(r.length for r in expected)
    assert any_store.get_ranges("obj", ranges, etag=etag) == got
    assert any_store.get_ranges("obj", ranges, etag=etag.strip('"')) == got


def test_get_ranges_random_against_slicing(any_store: ObjectStore) -> None:
    rng = random.Random(11)
    data = rng.randbytes(300_000)
    any_store.put("obj", data)
    for _ in range(10):
        ranges = []
        for _ in range(rng.randint(1, 12)):
            start = rng.randrange(0, len(data))
            ranges.append((start, min(len(data), start + rng.choice([0, 1, 17, 4096, 70_000]))))
        assert any_store.get_ranges("obj", ranges) == [data[s:e] for s, e in ranges]


def test_get_ranges_splits_requests_above_the_size_cap(any_store: ObjectStore) -> None:
    data = random.Random(5).randbytes(1_000_000)
    any_store.put("obj", data)
    any_store.max_request = 100_000  # type: ignore[attr-defined]
    any_store.counters.reset()
    got = any_store.get_ranges("obj", [(0, 1_000_000), (123, 456_789)])
    assert got == [data, data[123:456_789]]
    assert any_store.counters.count(GET_RANGE) == 10


def test_get_ranges_with_stale_etag_is_precondition_failed(any_store: ObjectStore) -> None:
    old = any_store.put("obj", b"0123456789" * 100)
    any_store.put("obj", b"abcdefghij" * 100)
    with pytest.raises(PreconditionFailed):
        any_store.get_ranges("obj", [(0, 10)], etag=old)
    with pytest.raises(PreconditionFailed):  # several (parallel on S3) requests
        any_store.get_ranges("obj", [(0, 10), (500, 510), (990, 1000)], etag=old)


def test_get_ranges_past_the_end_is_an_error(any_store: ObjectStore) -> None:
    any_store.put("obj", b"x" * 100)
    for ranges in ([(90, 101)], [(0, 10), (95, 200)], [(100, 101)], [(500, 600)]):
        with pytest.raises(StoreError) as info:
            any_store.get_ranges("obj", ranges)
        assert not isinstance(info.value, NotFound | PreconditionFailed)
    assert any_store.get_ranges("obj", [(100, 100), (0, 100)]) == [b"", b"x" * 100]


def test_invalid_ranges_and_keys_are_rejected(any_store: ObjectStore) -> None:
    any_store.put("obj", b"abc")
    for bad in ([(-1, 2)], [(3, 2)]):
        with pytest.raises(InvalidArgument):
            any_store.get_ranges("obj", bad)
    for key in ("", "/abs", "a//b", "a/../b", "./a", "trailing/", ".caslake-tmp/x", "a\\b"):
        with pytest.raises(InvalidArgument):
            any_store.put(key, b"x")
        with pytest.raises(InvalidArgument):
            any_store.get(key)


# --- list and delete -----------------------------------------------------------------


def test_list_by_prefix(any_store: ObjectStore) -> None:
    keys = ["a/k", "a/k10", "a/b/c", "a/b/d/e", "ab", "b/x", "z"]
    for key in keys:
        any_store.put(key, key.encode())
    # Leave bookkeeping behind on the local backend (locks from CAS and delete).
    etag = any_store.head("z").etag
    any_store.put("z", b"z2", mode=IfMatch(etag))
    any_store.put("gone", b"x")
    any_store.delete("gone")

    def listed(prefix: str) -> list[str]:
        return sorted(m.key for m in any_store.list(prefix))

    assert listed("") == sorted(keys)
    assert listed("a") == ["a/b/c", "a/b/d/e", "a/k", "a/k10", "ab"]
    assert listed("a/") == ["a/b/c", "a/b/d/e", "a/k", "a/k10"]
    assert listed("a/k") == ["a/k", "a/k10"]
    assert listed("a/k1") == ["a/k10"]
    assert listed("a/b/") == ["a/b/c", "a/b/d/e"]
    assert listed("a/b/d/e") == ["a/b/d/e"]
    assert listed("b/") == ["b/x"]
    assert listed("c") == []
    assert listed("a/zzz/") == []
    sizes = {m.key: m.size for m in any_store.list("a/b/")}
    assert sizes == {"a/b/c": 5, "a/b/d/e": 7}
    if isinstance(any_store, LocalStore):
        hidden = {p.name for p in any_store.root.iterdir() if p.name.startswith(".caslake-")}
        assert hidden == {".caslake-tmp", ".caslake-locks"}


def test_list_many_keys(any_store: ObjectStore) -> None:
    keys = [f"_log/{i:020d}.json" for i in range(120)]
    for key in keys:
        any_store.put(key, b"{}")
    any_store.put("_data/x.parquet", b"PAR1")
    assert sorted(m.key for m in any_store.list("_log/")) == keys
    assert sorted(m.key for m in any_store.list("_log/0000000000000000010")) == keys[100:110]
    assert sorted(m.key for m in any_store.list("_log/" + "0" * 18)) == keys[:100]
    assert sorted(m.key for m in any_store.list("_log/" + "0" * 17 + "1")) == keys[100:]


def test_delete(any_store: ObjectStore) -> None:
    any_store.put("d/k", b"x")
    any_store.delete("d/k")
    with pytest.raises(NotFound):
        any_store.get("d/k")
    assert list(any_store.list("d/")) == []
    any_store.delete("d/k")  # missing: not an error
    any_store.delete("never/existed")


# --- counters -------------------------------------------------------------------------


def test_counters_count_every_request_and_byte(any_store: ObjectStore) -> None:
    c = any_store.counters
    c.reset()
    etag = any_store.put("k", b"12345", mode=PutMode.CREATE)  # PUT 5 out
    with pytest.raises(AlreadyExists):
        any_store.put("k", b"123", mode=PutMode.CREATE)  # PUT 3 out (+ read-back HEAD on s3)
    with pytest.raises(PreconditionFailed):
        any_store.put("k", b"1", mode=IfMatch('"stale"'))  # PUT 1 (+ HEAD on s3)
    with pytest.raises(NotFound):
        any_store.put("missing", b"12", mode=IfMatch(etag))  # PUT 2 (+ HEAD on s3)
    assert any_store.get("k").data == b"12345"  # GET 5 in
    with pytest.raises(NotFound):
        any_store.get("missing")  # GET 0 in
    any_store.head("k")  # HEAD
    assert any_store.get_ranges("k", [(0, 2), (3, 5)]) == [b"12", b"45"]
    list(any_store.list("")) # LIST
    any_store.delete("k")  # DELETE

    classify_heads = 2 if is_remote(any_store) else 0
    # On s3/azure a rejected create is checked with a HEAD (the SHA-256 in its metadata) to
    # tell a re-sent PUT of our own landed object from someone else's: see S3Store.put.
    readback = 1 if is_remote(any_store) else 0
    range_requests = len(plan_ranges([(0, 2), (3, 5)],
                                     max_gap=any_store.max_gap))  # type: ignore[attr-defined]
    range_bytes = 5 if range_requests == 1 else 4
    snap = c.snapshot()
    assert snap == {
        PUT: 4,
        GET: 2,
        HEAD: 1 + classify_heads + readback,
        GET_RANGE: range_requests,
        LIST: 1,
        DELETE: 1,
        "bytes_in": 5 + range_bytes,
        "bytes_out": 5 + 3 + 1 + 2,
        "bytes_copied": 0,
    }
    assert range_requests == (1 if is_remote(any_store) else 2)


# --- retry semantics (caslake.store.retry), on every backend ------------------------------


def _faulty(store: ObjectStore, when: str) -> tuple[RetryingStore, FaultyStore]:
    faulty = FaultyStore(store, [Fault(frozenset({"put"}), when, times=1)])
    return RetryingStore(faulty, sleep=lambda _: None), faulty


@pytest.mark.parametrize("when", ["after", "before"])
def test_create_retried_after_a_lost_reply_or_reset_succeeds(any_store: ObjectStore,
                                                             when: str) -> None:
    store, faulty = _faulty(any_store, when)
    etag = store.put("data/x", b"mine", mode=PutMode.CREATE)
    assert faulty.fired == 1 and store.retries == 1  # (after a lost reply: + a read-back)
    assert any_store.head("data/x").etag == etag and any_store.get("data/x").data == b"mine"


@pytest.mark.parametrize("when", ["after", "before", None])
def test_a_foreign_object_at_the_key_is_already_exists(any_store: ObjectStore,
                                                       when: str | None) -> None:
    any_store.put("data/x", b"theirs", mode=PutMode.CREATE)
    store, faulty = _faulty(any_store, when or "before")
    if when is None:
        faulty.faults.clear()
    with pytest.raises(AlreadyExists):
        store.put("data/x", b"mine", mode=PutMode.CREATE)
    assert faulty.fired == (0 if when is None else 1)
    assert any_store.get("data/x").data == b"theirs"


@pytest.mark.parametrize("when, applied", [("after", True), ("before", False)])
def test_compare_and_swap_is_never_blindly_retried(any_store: ObjectStore, when: str,
                                                   applied: bool) -> None:
    etag = any_store.put("p", b"1")
    store, faulty = _faulty(any_store, when)
    with pytest.raises(PutOutcomeUnknown):
        store.put("p", b"2", mode=IfMatch(etag))
    assert faulty.fired == 1 and faulty.calls == 1 and store.retries == 0
    assert any_store.get("p").data == (b"2" if applied else b"1")


def test_overwrite_and_delete_are_retried(any_store: ObjectStore) -> None:
    store, faulty = _faulty(any_store, "after")
    faulty.faults.append(Fault(frozenset({"delete"}), "after", times=1))
    store.put("k", b"v")
    store.delete("k")  # applied, reply lost, retried: deleting a missing key is a success
    assert faulty.fired == 2 and store.retries == 2
    assert not any_store.exists("k")
