"""The bank across two tables, shared by the thread and the process runs: the
schema, the opening balances and one transfer (a multi-table transaction with
``read_version`` on both tables, computed from an atomic snapshot)."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pyarrow as pa

import caslake

SCHEMA = pa.schema([("account", pa.int64()), ("balance", pa.int64())])
ACCOUNTS = 4
OPENING = 1_000
POLICY = caslake.CommitPolicy(base_backoff_s=0.002, max_backoff_s=0.05)


@dataclass
class Transfer:
    """``amount`` moved from the account's checking to its savings balance."""

    account: int
    amount: int  # > 0: checking -> savings; < 0: savings -> checking
    txn_id: str | None = None
    versions: dict[str, int] | None = None


def random_transfer(rng: random.Random) -> Transfer:
    return Transfer(rng.randrange(ACCOUNTS), rng.choice([-1, 1]) * rng.randint(1, 40))


def balances(table: pa.Table) -> dict[int, int]:
    return dict(zip(table["account"].to_pylist(), table["balance"].to_pylist(), strict=True))


def open_pair(uris: tuple[str, str], options: dict[str, str] | None
              ) -> tuple[caslake.Table, caslake.Table]:
    pair = tuple(caslake.open_table(u, storage_options=options) for u in uris)
    for t in pair:
        t.commit_policy = POLICY
    return pair  # type: ignore[return-value]


def transfer(checking: caslake.Table, savings: caslake.Table, rng: random.Random,
             t: Transfer | None = None, *, ttl_ms: int = 5_000) -> Transfer:
    """Move ``t`` (a random transfer if None) from an atomic snapshot, in one
    multi-table transaction; CommitConflict when a concurrent one got there first."""
    snap = caslake.snapshot(checking, savings)
    c, s = balances(snap.to_arrow(checking)), balances(snap.to_arrow(savings))
    t = t or random_transfer(rng)
    tx = caslake.transaction(checking, savings, ttl_ms=ttl_ms)
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


