"""The bank across two tables (issue 35's acceptance, small): accounts have a
``checking`` and a ``savings`` balance in two tables; threads move money between
them with multi-table transactions (``read_version`` on both: serializable)
while a reader takes atomic snapshots.

* Every snapshot sums to the opening total (never a debit without its credit).
* History check: the final balances equal the opening ones plus exactly the
  acknowledged transfers (none twice, no failed one); each acknowledged
  transfer's staged versions name its transaction, whose record says committed;
  a failed one's record is absent or aborted.

On the local store and on moto S3; a few seconds each.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest

import caslake
from caslake.core import read_record
from caslake.errors import CommitConflict, NotFound

SCHEMA = pa.schema([("account", pa.int64()), ("balance", pa.int64())])
ACCOUNTS = 4
OPENING = 1_000
RUN_S = 3.0
WRITERS = 4
POLICY = caslake.CommitPolicy(base_backoff_s=0.002, max_backoff_s=0.05)


@dataclass
class Transfer:
    account: int
    amount: int  # > 0: checking -> savings; < 0: savings -> checking
    txn_id: str | None = None
    versions: dict[str, int] | None = None


def balances(table: pa.Table) -> dict[int, int]:
    return dict(zip(table["account"].to_pylist(), table["balance"].to_pylist(), strict=True))


def open_pair(uris: tuple[str, str], options: dict[str, str] | None
              ) -> tuple[caslake.Table, caslake.Table]:
    pair = tuple(caslake.open_table(u, storage_options=options) for u in uris)
    for t in pair:
        t.commit_policy = POLICY
    return pair  # type: ignore[return-value]


def transfer(checking: caslake.Table, savings: caslake.Table, rng: random.Random
             ) -> Transfer:
    snap = caslake.snapshot(checking, savings)
    c, s = balances(snap.to_arrow(checking)), balances(snap.to_arrow(savings))
    t = Transfer(rng.randrange(ACCOUNTS), rng.choice([-1, 1]) * rng.randint(1, 40))
    tx = caslake.transaction(checking, savings, ttl_ms=5_000)
    with tx:
        tx[checking].read_version(snap[checking].version)
        tx[savings].read_version(snap[savings].version)
        tx[checking].upsert(pa.table({"account": [t.account],
                                      "balance": [c[t.account] - t.amount]}, schema=SCHEMA),
                            key="account")
        tx[savings].upsert(pa.table({"account": [t.account],
                                     "balance": [s[t.account] + t.amount]}, schema=SCHEMA),
                           key="account")
    t.txn_id = tx.txn_id
    t.versions = {uri: r.version for uri, r in tx.results.items()}
    return t


def run_bank(uris: tuple[str, str], options: dict[str, str] | None) -> None:
    opening = pa.table({"account": list(range(ACCOUNTS)), "balance": [OPENING] * ACCOUNTS},
                       schema=SCHEMA)
    for u in uris:
        caslake.create_table(u, SCHEMA, storage_options=options).append(opening)
    total = 2 * OPENING * ACCOUNTS
    done: list[Transfer] = []
    sums: list[int] = []
    errors: list[BaseException] = []
    stop = time.monotonic() + RUN_S
    lock = threading.Lock()

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        checking, savings = open_pair(uris, options)
        try:
            while time.monotonic() < stop:
                try:
                    t = transfer(checking, savings, rng)
                except CommitConflict:
                    continue  # nothing of it applied (checked below by the totals)
                with lock:
                    done.append(t)
        except BaseException as e:  # a failed thread fails the test
            errors.append(e)

    def reader() -> None:
        checking, savings = open_pair(uris, options)
        try:
            while time.monotonic() < stop:
                snap = caslake.snapshot(checking, savings)
                sums.append(sum(balances(snap.to_arrow(checking)).values())
                            + sum(balances(snap.to_arrow(savings)).values()))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(WRITERS)]
    threads.append(threading.Thread(target=reader))
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    assert done, "no transfer committed"
    assert sums and set(sums) == {total}, sorted(set(sums))

    checking, savings = open_pair(uris, options)
    want_c = dict.fromkeys(range(ACCOUNTS), OPENING)
    want_s = dict.fromkeys(range(ACCOUNTS), OPENING)
    for t in done:
        want_c[t.account] -= t.amount
        want_s[t.account] += t.amount
    assert balances(checking.to_arrow()) == want_c
    assert balances(savings.to_arrow()) == want_s
    # Each acknowledged transfer: its staged versions name it, its record is committed.
    by_version = {t.uri.rstrip("/"): {s.version: s.manifest for s in t.io.history(t.io.latest())}
                  for t in (checking, savings)}
    for t in done:
        assert t.versions is not None and t.txn_id is not None
        for uri, v in t.versions.items():
            ref = by_version[uri][v].transaction
            assert ref is not None and ref.id == t.txn_id
        assert read_record(checking.store, t.txn_id)[0].state == "committed"
    # Every other transaction this run left behind was aborted, never committed.
    ids = {t.txn_id for t in done}
    for m in by_version[checking.uri.rstrip("/")].values():
        if m.transaction is not None and m.transaction.id not in ids:
            try:
                state = read_record(checking.store, m.transaction.id)[0].state
            except NotFound:
                state = "absent"
            assert state == "aborted", (m.version, state)


def test_bank_across_two_tables_local(tmp_path: Any) -> None:
    run_bank((str(tmp_path / "bank/checking"), str(tmp_path / "bank/savings")), None)


@pytest.mark.s3
def test_bank_across_two_tables_s3(moto_server: str, s3_options: dict[str, str]) -> None:
    from tests.conftest import make_bucket

    bucket = make_bucket(moto_server)
    run_bank((f"s3://{bucket}/bank/checking", f"s3://{bucket}/bank/savings"), s3_options)
