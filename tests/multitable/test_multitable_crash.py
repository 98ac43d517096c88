"""Crash-at-every-step rows for a two-table transaction (docs/protocol.md,
"Multi-table transactions", "Recovery and crashes").

Both tables' stores count their calls on one :class:`FaultyStore`, so "call i"
walks every step of the protocol: the uploads, the record's creation, each
table's staged commit (pointer reads, manifest and pointer writes, settling),
and the record's swap to committed.  At each call the process crashes, the reply
is lost, or the call fails before the store.  Afterwards both tables read as
before (old) or with the whole transaction (new), never one without the other;
the outcome tells the truth; and the next writer on each table (the deadline is
past) rolls an abandoned transaction back or builds on a committed one, leaving
that state as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

import caslake
from caslake.core import CommitPolicy
from caslake.ops.multi import MultiTransaction
from caslake.store import LocalStore
from caslake.store.base import ObjectStore
from caslake.store.faults import Fault, FaultyStore
from caslake.table import Table
from tests.multitable.helpers import ITEMS, ORDERS, two_tables
from tests.reliability.crash_harness import MODES, Point, Template, fault_each_call

FAST = CommitPolicy(max_attempts=6, base_backoff_s=0.0005, max_backoff_s=0.002,
                    settle_attempts=3)
ITEMS_SUFFIX = "-items"


class SharedFaults(FaultyStore):
    """A second table's faulty store that counts its calls, and fires its faults, on
    ``hub`` (so one numbering covers both tables)."""

    def __init__(self, inner: ObjectStore, hub: FaultyStore) -> None:
        super().__init__(inner)
        self.hub = hub

    def _pick(self, op: str, key: str) -> Fault | None:
        return self.hub._pick(op, key)


def make(uri: str) -> None:
    orders, items = two_tables(Path(uri).parent)
    Path(orders.uri.removeprefix("file://")).rename(uri)
    Path(items.uri.removeprefix("file://")).rename(uri + ITEMS_SUFFIX)


def table(uri: str) -> Table:
    return Table.load(LocalStore(uri, fsync=False))  # no fsync: fast fault points


def open_faulty(uri: str) -> tuple[tuple[Table, Table], FaultyStore]:
    hub = FaultyStore(LocalStore(uri, fsync=False))
    orders = Table.load(hub)
    items = Table.load(SharedFaults(LocalStore(uri + ITEMS_SUFFIX, fsync=False), hub))
    for t in (orders, items):
        t.commit_policy = FAST
    return (orders, items), hub


def run(tables: tuple[Table, Table]) -> object:
    orders, items = tables
    # ttl 1 ms: the check's writers find any abandoned transaction past its deadline
    with caslake.transaction(orders, items, ttl_ms=1) as tx:
        tx[orders].delete("id = 2")
        tx[orders].append(pa.table({"id": [4], "customer": ["dee"], "total": [40.0]},
                                   schema=ORDERS))
        tx[items].delete("order_id = 2")
    return tx.results


OLD = ([1, 2, 3], [1, 1, 2, 3])
NEW = ([1, 3, 4], [1, 1, 3])


def state_of(uri: str, extra: int | None = None) -> str:
    got = (sorted(x for x in table(uri).to_arrow()["id"].to_pylist()
                  if x != extra),
           sorted(x for x in table(uri + ITEMS_SUFFIX).to_arrow()["order_id"]
                  .to_pylist() if x != extra))
    return "old" if got == OLD else "new" if got == NEW else f"torn {got}"


def check(point: Point) -> str:
    state = state_of(point.uri)
    assert not state.startswith("torn"), f"{point.where}: {state}"
    # The next writers roll an abandoned transaction back (or build on a committed
    # one): the state stays what readers saw.
    table(point.uri).append(
        pa.table({"id": [99], "customer": ["w"], "total": [0.0]}, schema=ORDERS))
    table(point.uri + ITEMS_SUFFIX).append(
        pa.table({"order_id": [99], "sku": ["w"], "qty": [0]}, schema=ITEMS))
    after = state_of(point.uri, extra=99)
    assert after == state, f"{point.where}: {state} before the next writers, {after} after"
    return state


@pytest.mark.parametrize("mode", MODES)
def test_two_table_transaction_fault_at_every_store_call(tmp_path: Path, mode: str) -> None:
    template = Template("local", make, root=tmp_path)
    counted: Callable[[str, object], None] = lambda uri, _: None  # noqa: E731
    outcomes = fault_each_call("transaction", "local", mode, template.fresh, open_faulty, run,
                               check, min_calls=12, truthful=True, counted=counted)
    assert any(k.endswith("->old") for k in outcomes), outcomes
    if mode == "crash":  # a crash stops before its call: the record is never committed
        assert set(outcomes) == {"crash->old"}, outcomes
    else:  # a failure anywhere before the commit point is a definite failure
        assert "ok->new" in outcomes, outcomes
        assert not any(k.startswith("CommitOutcomeUnknown") for k in outcomes), outcomes


# --- the recovery step: a writer meets an abandoned transaction -----------------------


def make_abandoned(uri: str) -> None:
    """Both tables with a transaction staged on each and never decided (its owner
    died), its deadline already past."""
    make(uri)
    orders, items = table(uri), table(uri + ITEMS_SUFFIX)
    tx = MultiTransaction([orders, items], ttl_ms=1)
    tx[orders].delete("id = 2")
    tx[items].delete("order_id = 2")
    tx.stage()


def append_over_it(tables: tuple[Table, Table]) -> object:
    return tables[0].append(pa.table({"id": [7], "customer": ["g"], "total": [7.0]},
                                     schema=ORDERS))


def check_rolled_back(point: Point) -> str:
    ids = sorted(table(point.uri).to_arrow()["id"].to_pylist())
    assert ids in ([1, 2, 3], [1, 2, 3, 7]), f"{point.where}: {ids}"
    items = table(point.uri + ITEMS_SUFFIX)
    items.append(pa.table({"order_id": [99], "sku": ["w"], "qty": [0]}, schema=ITEMS))
    assert sorted(items.to_arrow()["order_id"].to_pylist()) == [1, 1, 2, 3, 99], point.where
    return "new" if 7 in ids else "old"


@pytest.mark.parametrize("mode", MODES)
def test_a_writer_aborting_an_abandoned_transaction_fault_at_every_store_call(
        tmp_path: Path, mode: str) -> None:
    """The writer reads the staged head, the record, swaps it to aborted, then
    commits on the rolled-back contents: a fault at any of those calls leaves the
    abandoned transaction invisible in both tables and the append's outcome true."""
    template = Template("local", make_abandoned, root=tmp_path)
    outcomes = fault_each_call("abort-abandoned", "local", mode, template.fresh, open_faulty,
                               append_over_it, check_rolled_back, min_calls=4, truthful=True)
    assert any(k.endswith("->old") for k in outcomes), outcomes
