"""Fault injection (every kind fires and is counted) and the retry rules of RetryingStore."""

from __future__ import annotations

import time
import uuid

import pyarrow as pa
import pytest

import caslake
from caslake.api import Table
from caslake.errors import (
    AlreadyExists,
    CaslakeError,
    CorruptMetadata,
    PutOutcomeUnknown,
    TransientStoreError,
)
from caslake.format.keys import POINTER_KEY
from caslake.store import open_store
from caslake.store.base import IfMatch, PutMode
from caslake.store.faults import Fault, FaultyStore, SimulatedCrash, slowdown_error
from caslake.store.retry import RetryingStore

ALL = frozenset({"get", "get_ranges", "put", "head", "list", "delete"})


def mem() -> FaultyStore:
    return FaultyStore(open_store(f"memory://{uuid.uuid4().hex}"))


def no_sleep(_: float) -> None:
    return None


def test_a_share_of_503s_is_absorbed_by_retries_and_counted() -> None:
    faulty = mem()
    faulty.inner.put("k", b"v")
    faulty.faults.append(Fault(frozenset({"get"}), "before", probability=0.3, seed=4,
                               error=slowdown_error))
    store = RetryingStore(faulty, attempts=8, sleep=no_sleep)
    for _ in range(200):
        assert store.get("k").data == b"v"
    fired = faulty.fired_by_kind()["before"]
    assert 30 < fired < 100  # about 30% of the attempts
    assert store.retries == fired


def test_retry_budget_runs_out_with_a_typed_error() -> None:
    faulty = mem()
    faulty.inner.put("k", b"v")
    faulty.faults.append(Fault(ALL, "before"))
    store = RetryingStore(faulty, attempts=3, sleep=no_sleep)
    with pytest.raises(TransientStoreError):
        store.get("k")
    assert faulty.fired == 3


def test_create_whose_reply_was_lost_is_recognised_as_ours() -> None:
    faulty = mem()
    faulty.faults.append(Fault(frozenset({"put"}), "after", times=1))
    store = RetryingStore(faulty, sleep=no_sleep)
    etag = store.put("data/x", b"mine", mode=PutMode.CREATE)
    assert faulty.fired == 1 and store.head("data/x").etag == etag
    faulty.faults.append(Fault(frozenset({"put"}), "after", times=1))
    with pytest.raises(AlreadyExists):  # someone else's bytes: not ours
        store.put("data/x", b"theirs", mode=PutMode.CREATE)


def test_compare_and_swap_is_never_retried() -> None:
    faulty = mem()
    e1 = faulty.inner.put("p", b"1")
    faulty.faults.append(Fault(frozenset({"put"}), "after", times=1))
    store = RetryingStore(faulty, sleep=no_sleep)
    with pytest.raises(PutOutcomeUnknown) as e:  # outcome unknown: not a retryable error
        store.put("p", b"2", mode=IfMatch(e1))
    assert not isinstance(e.value, TransientStoreError)
    assert faulty.fired == 1 and faulty.calls == 1  # one attempt, then the caller settles
    assert faulty.inner.get("p").data == b"2"  # it had applied


def test_latency_and_crash_faults() -> None:
    faulty = mem()
    faulty.inner.put("k", b"v")
    faulty.faults.append(Fault(frozenset({"get"}), "latency", latency_s=0.05, jitter_s=0.01,
                               times=2))
    t0 = time.perf_counter()
    faulty.get("k")
    faulty.get("k")
    assert time.perf_counter() - t0 >= 0.08 and faulty.fired_by_kind()["latency"] == 2
    faulty.faults.append(Fault(frozenset({"delete"}), "crash"))
    with pytest.raises(SimulatedCrash):
        faulty.delete("k")
    assert faulty.inner.exists("k")  # the crash came before the request


@pytest.mark.parametrize("target", ["manifest/", "data/", POINTER_KEY])
def test_truncated_bodies_are_typed_errors_never_wrong_answers(target: str) -> None:
    uri = f"memory://{uuid.uuid4().hex}"
    t = caslake.create_table(uri, pa.schema([("id", pa.int64())]))
    t.append(pa.table({"id": pa.array(range(1000), pa.int64())}))
    faulty = FaultyStore(open_store(uri), [Fault(frozenset({"get", "get_ranges"}), "truncate",
                                                 prefix=target)])
    with pytest.raises(CaslakeError) as e:
        Table.load(faulty).scan().to_arrow()
    assert faulty.fired >= 1
    assert isinstance(e.value, CorruptMetadata)
