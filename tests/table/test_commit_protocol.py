"""Protocol invariants of the commit loop (docs/protocol.md, "Commit")."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

import caslake
from caslake.api import Table
from caslake.core.commit import CommitPolicy
from caslake.errors import (
    CommitOutcomeUnknown,
    ConcurrentModification,
    PreconditionFailed,
    RetryBudgetExhausted,
    TransientStoreError,
)
from caslake.format.keys import MANIFEST_PREFIX, POINTER_KEY, manifest_key, new_token
from caslake.store import open_store
from caslake.store.faults import Fault, FaultyStore, SimulatedCrash

SCHEMA = pa.schema([("id", pa.int64()), ("writer", pa.string())])
FAST = CommitPolicy(max_attempts=200, base_backoff_s=0.001, max_backoff_s=0.05, settle_attempts=3)


def batch(start: int, n: int, writer: str = "w") -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "writer": pa.array([writer] * n)})


def manifests(store) -> list[str]:  # type: ignore[no-untyped-def]
    return sorted(m.key for m in store.list(MANIFEST_PREFIX))


def test_racing_threads_each_commit_once(any_store_uri) -> None:  # type: ignore[no-untyped-def]
    uri, opts = any_store_uri
    caslake.create_table(uri, SCHEMA, storage_options=opts)
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        t = caslake.open_table(uri, storage_options=opts)
        t.commit_policy = FAST
        try:
            for i in range(10):
                t.append(batch(w * 1000 + i * 10, 10, f"w{w}"))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    t = caslake.open_table(uri, storage_options=opts)
    assert t.version == 80
    hist = t.history()
    assert [h.version for h in hist] == list(range(80, -1, -1))
    assert len({h.commit_id for h in hist}) == 81
    ids = t.scan().to_arrow().column("id").to_pylist()
    assert len(ids) == 800 and len(set(ids)) == 800


def _faulty(uri: str, opts, faults) -> tuple[Table, FaultyStore]:  # type: ignore[no-untyped-def]
    store = FaultyStore(open_store(uri, opts), faults)
    t = Table.load(store)
    t.commit_policy = FAST
    return t, store


def test_reply_lost_after_pointer_applied_is_settled_by_reading_back(any_store_uri) -> None:  # type: ignore[no-untyped-def]
    uri, opts = any_store_uri
    caslake.create_table(uri, SCHEMA, storage_options=opts)
    t, store = _faulty(uri, opts, [Fault(frozenset({"put"}), "after", prefix=POINTER_KEY,
                                         times=1)])
    res = t.append(batch(0, 5))
    assert store.fired == 1
    assert res.version == 1 and res.attempts == 1
    fresh = caslake.open_table(uri, storage_options=opts)
    assert fresh.version == 1  # landed exactly once: no duplicate version 2
    assert fresh.scan().count() == 5


def test_false_412_after_internal_retry_is_recognised_as_ours(any_store_uri) -> None:  # type: ignore[no-untyped-def]
    """A retried CAS gets 412 although the first try applied: still our commit."""
    uri, opts = any_store_uri
    caslake.create_table(uri, SCHEMA, storage_options=opts)
    t, store = _faulty(uri, opts, [Fault(frozenset({"put"}), "after", prefix=POINTER_KEY,
                                         times=1, error=lambda k: PreconditionFailed(
                                             "412 on retry", key=k))])
    res = t.append(batch(0, 5))
    assert store.fired == 1
    fresh = caslake.open_table(uri, storage_options=opts)
    assert (res.version, fresh.version, fresh.scan().count()) == (1, 1, 5)


def test_reply_lost_then_others_commit_still_recognised(any_store_uri) -> None:  # type: ignore[no-untyped-def]
    """Our pointer write applied, then another writer committed on top before we
    read back: the chain at our version still names our commit id."""
    uri, opts = any_store_uri
    caslake.create_table(uri, SCHEMA, storage_options=opts)
    other = caslake.open_table(uri, storage_options=opts)

    def lost_reply(key: str) -> PreconditionFailed:
        other.append(batch(100, 1, "other"))  # lands on top of ours before we settle
        return PreconditionFailed("reply lost", key=key)

    t, store = _faulty(uri, opts, [Fault(frozenset({"put"}), "after", prefix=POINTER_KEY,
                                         times=1, error=lost_reply)])
    res = t.append(batch(0, 5))
    assert store.fired == 1
    fresh = caslake.open_table(uri, storage_options=opts)
    assert res.version == 1 and fresh.version == 2
    assert fresh.scan().count() == 6


def test_unreadable_pointer_after_ambiguous_write_is_outcome_unknown(tmp_path) -> None:  # type: ignore[no-untyped-def]
    uri = str(tmp_path / "t")
    caslake.create_table(uri, SCHEMA)
    t, store = _faulty(uri, None, [
        Fault(frozenset({"put"}), "after", prefix=POINTER_KEY, times=1),
    ])
    # Every pointer read after the ambiguous write fails.
    store.faults.append(Fault(frozenset({"get"}), "before", prefix=POINTER_KEY, calls=None))
    store.faults[1].seen = 0
    orig_matches = store.faults[1].matches
    armed = {"on": False}

    def matches(op: str, key: str) -> bool:
        return armed["on"] and orig_matches(op, key)

    store.faults[1].matches = matches  # type: ignore[method-assign]
    orig_put = store.inner.put

    def put(key, data, *, mode=None):  # type: ignore[no-untyped-def]
        etag = orig_put(key, data, mode=mode)
        if key == POINTER_KEY:
            armed["on"] = True
        return etag

    store.inner.put = put  # type: ignore[method-assign]
    before = manifests(store.inner)
    with pytest.raises(CommitOutcomeUnknown) as e:
        t.append(batch(0, 5))
    assert e.value.commit_id
    armed["on"] = False
    # Nothing was deleted: the manifest the pointer now names exists and the table reads.
    fresh = caslake.open_table(uri)
    assert fresh.version == 1 and fresh.scan().count() == 5
    assert len(manifests(store.inner)) == len(before) + 1


@pytest.mark.parametrize("crash_at", range(1, 4))
def test_crash_at_any_put_leaves_last_version_and_orphans_do_not_block(tmp_path, crash_at) -> None:  # type: ignore[no-untyped-def]
    uri = str(tmp_path / "t")
    caslake.create_table(uri, SCHEMA).append(batch(0, 3))
    t, store = _faulty(uri, None, [Fault(frozenset({"put"}), "crash", calls=frozenset({crash_at}))])
    with pytest.raises(SimulatedCrash):
        t.append(batch(10, 3))
    assert store.fired == 1
    fresh = caslake.open_table(uri)
    assert fresh.version == 1 and fresh.scan().count() == 3
    fresh.append(batch(20, 3))
    assert caslake.open_table(uri).scan().count() == 6


def test_orphan_manifest_at_next_version_never_blocks_or_shows(tmp_path) -> None:  # type: ignore[no-untyped-def]
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA)
    t.append(batch(0, 3))
    store = open_store(uri)
    # A crashed writer's manifest for version 2, never made current.
    orphan = manifest_key(2, new_token())
    src = store.get(caslake.open_table(uri).snapshot.key).data
    store.put(orphan, src)
    t.append(batch(10, 3))
    fresh = caslake.open_table(uri)
    assert fresh.version == 2 and fresh.snapshot.key != orphan
    assert fresh.scan().count() == 6


def test_zombie_writer_cas_fails_and_rebases(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A writer that read the pointer, stalled while others committed, must not
    overwrite them: its CAS fails, it rebases, and nothing is lost."""
    uri = str(tmp_path / "t")
    caslake.create_table(uri, SCHEMA)
    other = caslake.open_table(uri)
    state = {"done": False}

    def stall(key: str) -> Exception:
        raise AssertionError("unused")

    t, store = _faulty(uri, None, [])
    real_put = store.inner.put

    def put(key, data, *, mode=None):  # type: ignore[no-untyped-def]
        if key.startswith(MANIFEST_PREFIX) and not state["done"]:
            state["done"] = True
            for i in range(3):
                other.append(batch(100 + i, 1, "other"))
        return real_put(key, data, mode=mode)

    store.inner.put = put  # type: ignore[method-assign]
    res = t.append(batch(0, 5))
    assert res.attempts == 2 and res.version == 4
    fresh = caslake.open_table(uri)
    assert fresh.scan().count() == 8
    # The losing round's manifest (version 1 slot, provably taken) was cleaned up.
    versions = sorted(int(k.split("/v")[1][:20]) for k in manifests(open_store(uri)))
    assert versions == [0, 1, 2, 3, 4]
    del stall


def test_retry_budget_exhaustion_is_a_typed_conflict(tmp_path) -> None:  # type: ignore[no-untyped-def]
    uri = str(tmp_path / "t")
    caslake.create_table(uri, SCHEMA)
    other = caslake.open_table(uri)
    t = caslake.open_table(uri)
    t.commit_policy = CommitPolicy(max_attempts=3, base_backoff_s=0.0, max_backoff_s=0.0)
    real_put = t.store.put

    def put(key, data, *, mode=None):  # type: ignore[no-untyped-def]
        if key == POINTER_KEY:
            other.append(batch(0, 1))  # someone always gets in first
        return real_put(key, data, mode=mode)

    t.store.put = put  # type: ignore[method-assign]
    with pytest.raises(RetryBudgetExhausted) as e:
        t.append(batch(10, 1))
    assert e.value.attempts == 3 and e.value.help == RetryBudgetExhausted.default_help
    t.store.put = real_put  # type: ignore[method-assign]
    fresh = caslake.open_table(uri)
    assert fresh.version == 3 and fresh.scan().count() == 3


def test_late_landing_of_an_unsettled_pointer_write_is_not_committed_twice(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A pointer PUT times out, the read-back still shows the old pointer (nothing
    provable), and the delayed PUT lands before the retry reads the pointer: the
    retry must recognise its own commit instead of applying the append again."""
    uri = str(tmp_path / "t")
    caslake.create_table(uri, SCHEMA)
    t = caslake.open_table(uri)
    t.commit_policy = FAST
    real_put, real_get = t.store.put, t.store.get
    delayed: list[tuple[bytes, object]] = []
    pointer_reads = {"n": 0}

    def put(key, data, *, mode=None):  # type: ignore[no-untyped-def]
        if key == POINTER_KEY and not delayed:
            delayed.append((data, mode))  # in flight: applied later, reply lost now
            raise TransientStoreError("injected timeout", key=key)
        return real_put(key, data, mode=mode)

    def get(key):  # type: ignore[no-untyped-def]
        if key == POINTER_KEY and delayed:
            pointer_reads["n"] += 1
            if pointer_reads["n"] == 2:  # after the settle read, before the retry's read
                data, mode = delayed[0]
                real_put(key, data, mode=mode)
        return real_get(key)

    t.store.put, t.store.get = put, get  # type: ignore[method-assign]
    res = t.append(batch(0, 5))
    t.store.put, t.store.get = real_put, real_get  # type: ignore[method-assign]
    assert delayed and pointer_reads["n"] >= 2  # the late landing really happened
    fresh = caslake.open_table(uri)
    assert res.version == fresh.version == 1
    assert fresh.scan().count() == 5


def test_overwrite_conflicts_with_a_concurrent_commit(tmp_path) -> None:  # type: ignore[no-untyped-def]
    uri = str(tmp_path / "t")
    caslake.create_table(uri, SCHEMA).append(batch(0, 2))
    a = caslake.open_table(uri)
    b = caslake.open_table(uri)
    real_put = a.store.put
    fired = {"n": 0}

    def put(key, data, *, mode=None):  # type: ignore[no-untyped-def]
        if key.startswith(MANIFEST_PREFIX) and not fired["n"]:
            fired["n"] += 1
            b.overwrite(batch(50, 1))
        return real_put(key, data, mode=mode)

    a.store.put = put  # type: ignore[method-assign]
    with pytest.raises(ConcurrentModification):
        a.overwrite(batch(100, 1))
    assert fired["n"] == 1
    assert caslake.open_table(uri).scan().to_arrow().column("id").to_pylist() == [50]


@pytest.mark.parametrize("writers", [2, 8, 64])
def test_racing_writers_200_commits_one_winner_per_version(tmp_path, writers) -> None:  # type: ignore[no-untyped-def]
    """RELIABILITY 1: 2, 8 and 64 writers, ~200 commits in total, one pointer."""
    uri = str(tmp_path / "t")
    caslake.create_table(uri, SCHEMA)
    per_writer = max(1, 200 // writers)
    acked: list[tuple[int, str]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def writer(w: int) -> None:
        t = caslake.open_table(uri)
        t.commit_policy = CommitPolicy(max_attempts=2000, base_backoff_s=0.0005,
                                       max_backoff_s=0.02)
        try:
            for i in range(per_writer):
                r = t.append(batch(w * 10_000 + i, 1, f"w{w}"))
                with lock:
                    acked.append((r.version, r.commit_id))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    total = writers * per_writer
    hist = {h.version: h.commit_id for h in caslake.open_table(uri).history()}
    assert sorted(v for v, _ in acked) == list(range(1, total + 1))  # one winner each, no gap
    assert all(hist[v] == c for v, c in acked)  # each acknowledged commit is where it was told
    assert caslake.open_table(uri).scan().count() == total


def test_write_that_never_happened_is_not_reported_as_done(any_store_uri) -> None:  # type: ignore[no-untyped-def]
    """RELIABILITY 3 (false success): the pointer PUT fails before it applies; the
    commit must not claim success from that attempt, and lands exactly once."""
    uri, opts = any_store_uri
    caslake.create_table(uri, SCHEMA, storage_options=opts)
    t, store = _faulty(uri, opts, [Fault(frozenset({"put"}), "before", prefix=POINTER_KEY,
                                         times=2)])
    res = t.append(batch(0, 5))
    assert store.fired == 2 and res.attempts == 3
    fresh = caslake.open_table(uri, storage_options=opts)
    assert (res.version, fresh.version, fresh.scan().count()) == (1, 1, 5)
    assert fresh.history()[0].commit_id == res.commit_id
