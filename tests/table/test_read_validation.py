"""Optimistic read validation: a read-modify-write with ``read_version`` never
commits over a concurrent change to the rows it read (no lost updates)."""

from __future__ import annotations

import random
import threading
import uuid

import pyarrow as pa
import pytest

import caslake
from caslake.core.commit import CommitPolicy
from caslake.errors import ReadValidationFailed

SCHEMA = pa.schema([("id", pa.int64()), ("balance", pa.int64())])


def accounts(ids: list[int], balances: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "balance": pa.array(balances, pa.int64())})


def balance(t: caslake.Table, account: int, version: int | None = None) -> int:
    rows = t.scan(where=f"id = {account}", version=version).to_arrow()
    assert rows.num_rows == 1
    return int(rows.column("balance")[0].as_py())


def test_without_read_version_an_update_is_lost_with_it_a_conflict() -> None:
    uri = f"memory://{uuid.uuid4().hex}"
    t0 = caslake.create_table(uri, SCHEMA)
    t0.append(accounts([1, 2], [100, 100]))
    for use_read_version in (False, True):
        a, b = caslake.open_table(uri), caslake.open_table(uri)
        v = a.version
        seen_a, seen_b = balance(a, 1, v), balance(b, 1, v)  # both read version v
        b.upsert(accounts([1], [seen_b + 10]), key=["id"])  # b deposits 10 first
        if not use_read_version:
            a.upsert(accounts([1], [seen_a + 5]), key=["id"])  # a deposits 5: b's 10 is lost
            assert balance(a.refresh(), 1) == seen_a + 5
        else:
            with pytest.raises(ReadValidationFailed):
                a.upsert(accounts([1], [seen_a + 5]), key=["id"], read_version=v)
            assert balance(a.refresh(), 1) == seen_b + 10  # b's deposit survives
    # a concurrent change to *other* keys does not conflict
    a, b = caslake.open_table(uri), caslake.open_table(uri)
    v = a.version
    b.append(accounts([50], [0]))
    assert not a.upsert(accounts([2], [99]), key=["id"], read_version=v).noop


def test_concurrent_transfers_conserve_the_total() -> None:
    uri = f"memory://{uuid.uuid4().hex}"
    n, start = 6, 1000
    caslake.create_table(uri, SCHEMA).append(accounts(list(range(n)), [start] * n))
    done = {"transfers": 0, "conflicts": 0}
    lock = threading.Lock()

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        t = caslake.open_table(uri)
        t.commit_policy = CommitPolicy(max_attempts=500, base_backoff_s=0.0005,
                                       max_backoff_s=0.01)
        for _ in range(15):
            while True:
                t.refresh()
                v = t.version
                x, y = rng.sample(range(n), 2)
                rows = t.scan(where=f"id IN ({x}, {y})", version=v).to_arrow().to_pylist()
                bal = {r["id"]: r["balance"] for r in rows}
                amount = rng.randint(1, 50)
                try:
                    t.upsert(accounts([x, y], [bal[x] - amount, bal[y] + amount]), key=["id"],
                             read_version=v)
                except ReadValidationFailed:
                    with lock:
                        done["conflicts"] += 1
                    continue
                with lock:
                    done["transfers"] += 1
                break

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    t = caslake.open_table(uri)
    assert done["transfers"] == 60 and done["conflicts"] > 0
    for v in range(1, t.version + 1):  # every version conserves the total
        got = t.scan(version=v).to_arrow()
        assert got.num_rows == n and sum(got.column("balance").to_pylist()) == n * start
