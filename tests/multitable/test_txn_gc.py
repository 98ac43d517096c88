"""gc of decided multi-table transaction records and verify's checks of them
(docs/protocol.md, "Multi-table transactions": "gc of decision records",
"verify of staged versions").  Reads are compared with DuckDB over the same
rows; what is on storage with the store's own listing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import caslake
from caslake.core import abort_pending, create_txn_record
from caslake.errors import VersionNotFound
from caslake.format.manifest import PENDING, TxnParticipant, TxnRecord
from caslake.ops.multi import MultiTransaction
from caslake.ops.verify import verify_table
from caslake.store import LocalStore
from caslake.store.base import ObjectStore
from caslake.table import Table
from tests.multitable.helpers import ITEMS, ORDERS, rows, two_tables
from tests.reliability.crash_harness import MODES, Point, Template, fault_each_call

LATER = datetime.now(UTC) + timedelta(days=2)  # every object is older than the cutoff
RETAIN = timedelta(hours=1)


def transfer(orders: Table, items: Table) -> None:
    with caslake.transaction(orders, items) as tx:
        tx[orders].delete("id = 2")
        tx[items].delete("order_id = 2")


def records(t: Table) -> list[str]:
    return [m.key for m in t.store.list("_txn/")]


def coordinator(orders: Table, items: Table) -> tuple[Table, Table]:
    """(the table holding the record, the other participant)."""
    return (items, orders) if records(items) else (orders, items)


def committed_pair(root: Path) -> tuple[Table, Table, int, int]:
    """Two tables after one transaction and a later append to each: (coordinator,
    other, the coordinator's staged version, the other's staged version)."""
    orders, items = two_tables(root)
    transfer(orders, items)
    coord, other = coordinator(orders, items)
    staged = coord.version, other.version
    orders.append(pa.table({"id": [5], "customer": ["eve"], "total": [5.0]}, schema=ORDERS))
    items.append(pa.table({"order_id": [5], "sku": ["e"], "qty": [5]}, schema=ITEMS))
    return coord, other, *staged


def gc(t: Table) -> list[str]:
    return t.gc(retention=RETAIN, force=True, now=LATER).deleted.get("_txn", [])


def duck(t: Table, version: int | None = None) -> list[tuple[object, ...]]:
    """The key column of ``t`` at ``version`` as DuckDB reads it from the version's
    live Parquet files, with the transaction's delete (key 2) applied by DuckDB."""
    paths = [f["uri"].removeprefix("file://") for f in t.live_files(version=version)]
    col = t.schema.names[0]
    return [tuple(r) for r in duckdb.sql(
        f"SELECT {col} FROM read_parquet({paths!r}) WHERE {col} <> 2 ORDER BY 1").fetchall()]


def keys(t: Table, version: int | None = None) -> list[tuple[object, ...]]:
    return rows(t.to_arrow(version=version).select([0]), "1")


def test_gc_keeps_a_record_while_a_retained_version_needs_it(tmp_path: Path) -> None:
    coord, other, coord_staged, other_staged = committed_pair(tmp_path)
    key = records(coord)
    assert len(key) == 1
    # The coordinator's own staged version expires, the other's is still retained:
    # time travel to it resolves the record.
    assert gc(coord) == []
    assert records(coord) == key
    again = Table.load(LocalStore(other.uri))
    assert keys(again, other_staged) == duck(again, other_staged) != []
    with pytest.raises(VersionNotFound):
        Table.load(LocalStore(coord.uri)).to_arrow(version=coord_staged)
    # Once the other participant's gc expires its staged version nothing needs it.
    assert gc(other) == []  # a participant never deletes another table's record
    assert records(coord) == key
    assert gc(coord) == key
    assert records(coord) == []
    for t in (coord, other):
        fresh = Table.load(LocalStore(t.uri))
        assert keys(fresh) == duck(fresh) and (5,) in keys(fresh)
        assert verify_table(fresh.store, all_versions=True).ok
    with pytest.raises(VersionNotFound):
        Table.load(LocalStore(other.uri)).to_arrow(version=other_staged)


def test_gc_keeps_an_aborted_record_until_its_staged_versions_expire(tmp_path: Path) -> None:
    orders, items = two_tables(tmp_path)
    tx = MultiTransaction([orders, items])
    tx[orders].delete("id = 2")
    tx[items].delete("order_id = 2")
    tx.stage()  # its owner died before the commit point; a writer aborts it
    coord, other = coordinator(orders, items)
    assert tx.txn_id is not None and abort_pending(coord.store, tx.txn_id) is not None
    key = records(coord)
    assert len(key) == 1 and b'"aborted"' in coord.store.get(key[0]).data
    assert gc(coord) == []  # both staged versions are the heads: retained
    for t in (orders, items):
        t.append(pa.table({"id": [5], "customer": ["e"], "total": [5.0]}, schema=ORDERS)
                 if t is orders else
                 pa.table({"order_id": [5], "sku": ["e"], "qty": [5]}, schema=ITEMS))
    gc(other)
    assert gc(coord) == key
    assert records(coord) == []
    for t in (orders, items):  # the aborted delete shows nowhere
        fresh = Table.load(LocalStore(t.uri))
        assert (2,) in keys(fresh) and verify_table(fresh.store, all_versions=True).ok


def test_gc_never_deletes_a_pending_record(tmp_path: Path) -> None:
    orders, _ = two_tables(tmp_path)
    record = TxnRecord("ab" * 16, PENDING, 0, 1, (
        TxnParticipant(orders.uri, "x", orders.version),))
    create_txn_record(orders.store, record)
    assert gc(orders) == []
    assert records(orders) == [f"_txn/{'ab' * 16}.json"]


def _rewrite(store: ObjectStore, key: str, change: dict[str, object]) -> None:
    doc = json.loads(store.get(key).data)
    doc.update(change)
    store.put(key, json.dumps(doc).encode())


def test_verify_flags_a_record_that_does_not_name_the_table(tmp_path: Path) -> None:
    coord, other, _, _ = committed_pair(tmp_path)
    key = records(coord)[0]
    doc = json.loads(coord.store.get(key).data)
    _rewrite(coord.store, key, {"participants": [
        p for p in doc["participants"] if p["uri"].rstrip("/") != other.uri.rstrip("/")]})
    report = verify_table(LocalStore(other.uri), all_versions=True)
    assert [p.object for p in report.problems] == [f"{coord.uri.rstrip('/')}/{key}"]
    assert "does not name" in report.problems[0].problem
    assert verify_table(LocalStore(coord.uri), all_versions=True).ok


def test_verify_flags_a_missing_record_and_a_missing_staged_version(tmp_path: Path) -> None:
    coord, other, _, other_staged = committed_pair(tmp_path)
    key = records(coord)[0]
    doc = json.loads(coord.store.get(key).data)
    for p in doc["participants"]:
        if p["uri"].rstrip("/") == other.uri.rstrip("/"):
            p["version"] = other_staged + 50  # a version the table never had
    _rewrite(coord.store, key, {"participants": doc["participants"]})
    report = verify_table(LocalStore(coord.uri), all_versions=True)
    assert report.problems and all("version" in p.problem for p in report.problems)
    coord.store.delete(key)
    report = verify_table(LocalStore(other.uri), all_versions=True)
    where = f"{coord.uri.rstrip('/')}/{key}"
    assert where in {p.object for p in report.problems}
    assert any("missing" in p.problem for p in report.problems if p.object == where)


def test_verify_flags_a_pending_record_below_the_head(tmp_path: Path) -> None:
    """Nothing is ever built on an undecided version, so a pending record under a
    version with later ones above it is a problem, as is another transaction's."""
    coord, _, _, _ = committed_pair(tmp_path)
    key = records(coord)[0]
    where = f"{coord.uri.rstrip('/')}/{key}"
    _rewrite(coord.store, key, {"state": "pending", "deadline_ms": 1})
    got = verify_table(LocalStore(coord.uri), all_versions=True).problems
    assert [(p.object, "pending past its deadline" in p.problem) for p in got] == [(where, True)]
    _rewrite(coord.store, key, {"state": "committed", "id": "cd" * 16})
    got = verify_table(LocalStore(coord.uri), all_versions=True).problems
    # (history() meets it first and names the key relative to the coordinator)
    assert len(got) == 1 and where.endswith(got[0].object) and "cd" * 16 in got[0].problem


# --- crash at every store call of gc deleting a record ----------------------------------

ITEMS_SUFFIX = "-items"


def make(uri: str) -> None:
    """Orders (the coordinator: its URI sorts first) and items after a transaction,
    a later append to each, and both gcs, the coordinator's first: the next gc of
    the coordinator has nothing to do but delete the record."""
    orders, items = two_tables(Path(uri).parent)
    Path(orders.uri.removeprefix("file://")).rename(uri)
    Path(items.uri.removeprefix("file://")).rename(uri + ITEMS_SUFFIX)
    orders, items = Table.load(LocalStore(uri)), Table.load(LocalStore(uri + ITEMS_SUFFIX))
    transfer(orders, items)
    assert records(orders)
    orders.append(pa.table({"id": [5], "customer": ["eve"], "total": [5.0]}, schema=ORDERS))
    items.append(pa.table({"order_id": [5], "sku": ["e"], "qty": [5]}, schema=ITEMS))
    assert gc(orders) == [] and gc(items) == []  # items still needed it, then expired it


def open_faulty(uri: str) -> tuple[Table, object]:
    from caslake.store.faults import FaultyStore
    store = FaultyStore(LocalStore(uri, fsync=False))
    return Table.load(store), store


def check(point: Point) -> str:
    t = Table.load(LocalStore(point.uri))
    assert keys(t) == duck(t) == [(1,), (3,), (5,)], point.where
    assert verify_table(t.store, all_versions=True).ok, point.where
    return "old" if records(t) else "new"


@pytest.mark.parametrize("mode", MODES)
def test_gc_deleting_a_record_fault_at_every_store_call(tmp_path: Path, mode: str) -> None:
    template = Template("local", make, root=tmp_path)
    outcomes = fault_each_call("gc-txn", "local", mode, template.fresh, open_faulty,
                               gc, check, min_calls=5)
    assert any(k.endswith("->new") for k in outcomes), outcomes
    if mode != "crash":  # a read that fails keeps the record (gc never guesses)
        assert any(k.endswith("->old") for k in outcomes), outcomes
