"""Multi-table transactions (docs/protocol.md, "Multi-table transactions"): all or
nothing across tables, checked against DuckDB running the same statements in one
transaction; readers never see an undecided or aborted part; the atomic snapshot;
conflicts under read_version; bad input; and the cost of single-table work."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import caslake
from caslake.errors import (
    CaslakeError,
    ConcurrentModification,
    InvalidArgument,
    ReadValidationFailed,
    SchemaMismatch,
    TableListedTwice,
    TableNotFound,
    TablesOnDifferentStores,
)
from caslake.ops.multi import MultiTransaction
from tests.multitable.helpers import ITEMS, ORDERS, data_keys, rows, two_tables


def duck_start() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("CREATE TABLE orders (id BIGINT, customer VARCHAR, total DOUBLE)")
    con.execute("CREATE TABLE items (order_id BIGINT, sku VARCHAR, qty BIGINT)")
    con.execute("INSERT INTO orders VALUES (1,'ann',10),(2,'bob',20),(3,'cy',30)")
    con.execute("INSERT INTO items VALUES (1,'a',1),(1,'b',2),(2,'a',3),(3,'c',4)")
    return con


def test_a_transaction_changes_every_table_like_duckdb(tmp_path: Path) -> None:
    orders, items = two_tables(tmp_path)
    con = duck_start()
    con.execute("BEGIN")
    con.execute("DELETE FROM orders WHERE id = 2")
    con.execute("DELETE FROM items WHERE order_id = 2")
    con.execute("INSERT INTO orders VALUES (4,'dee',40)")
    con.execute("INSERT INTO items VALUES (4,'d',5)")
    con.execute("DELETE FROM items WHERE order_id = 1 AND sku = 'b'")
    con.execute("INSERT INTO items VALUES (1,'b',9)")  # the upsert
    con.execute("COMMIT")
    with caslake.transaction(orders, items) as tx:
        tx[orders].delete("id = 2")
        tx[orders].append(pa.table({"id": [4], "customer": ["dee"], "total": [40.0]},
                                   schema=ORDERS))
        tx[items].delete("order_id = 2")
        tx[items].append(pa.table({"order_id": [4], "sku": ["d"], "qty": [5]}, schema=ITEMS))
        tx[items].upsert(pa.table({"order_id": [1], "sku": ["b"], "qty": [9]}, schema=ITEMS),
                         key=["order_id", "sku"])
    assert (orders.version, items.version) == (2, 2)
    snap = caslake.snapshot(orders, items)
    for t, name, order in ((orders, "orders", "id"), (items, "items", "order_id, sku")):
        want = [tuple(r) for r in con.execute(f"SELECT * FROM {name} ORDER BY {order}")
                .fetchall()]
        assert rows(snap.to_arrow(t), order) == want
        assert rows(caslake.open_table(t.uri).to_arrow(), order) == want


def test_overwrite_in_a_transaction(tmp_path: Path) -> None:
    orders, items = two_tables(tmp_path)
    with caslake.transaction(orders, items) as tx:
        tx[orders].overwrite(pa.table({"id": [7], "customer": ["x"], "total": [1.0]},
                                      schema=ORDERS))
        tx[items].delete("order_id <> 7")
        with pytest.raises(InvalidArgument):
            tx[orders].delete("id = 7")
    assert rows(orders.to_arrow(), "id") == [(7, "x", 1.0)]
    assert items.to_arrow().num_rows == 0


def test_an_error_in_the_block_leaves_nothing(tmp_path: Path) -> None:
    orders, items = two_tables(tmp_path)
    before = data_keys(orders) | data_keys(items)
    with pytest.raises(RuntimeError), caslake.transaction(orders, items) as tx:
        tx[orders].append(pa.table({"id": [9], "customer": ["z"], "total": [9.0]},
                                   schema=ORDERS))
        raise RuntimeError("boom")
    assert (orders.refresh().version, items.refresh().version) == (1, 1)
    assert data_keys(orders) | data_keys(items) == before  # its upload was removed


def test_a_schema_mismatch_in_one_part_makes_nothing_visible(tmp_path: Path) -> None:
    orders, items = two_tables(tmp_path)
    with pytest.raises(SchemaMismatch), caslake.transaction(orders, items) as tx:
        tx[orders].append(pa.table({"id": [9], "customer": ["z"], "total": [9.0]},
                                   schema=ORDERS))
        tx[items].append(pa.table({"order_id": ["not a number"]}))
    assert (orders.refresh().version, items.refresh().version) == (1, 1)
    assert orders.to_arrow().num_rows == 3


def test_bad_tables_are_typed_errors(tmp_path: Path) -> None:
    orders, items = two_tables(tmp_path)
    with pytest.raises(TableListedTwice):
        caslake.transaction(orders, caslake.open_table(orders.uri))
    mem = caslake.create_table("memory://multi-other-store", ORDERS)
    with pytest.raises(TablesOnDifferentStores):
        caslake.transaction(orders, mem)
    with pytest.raises(TablesOnDifferentStores):
        caslake.snapshot(orders, mem)
    with pytest.raises(InvalidArgument):
        caslake.transaction()
    with pytest.raises(InvalidArgument):
        caslake.transaction(orders, "not a table")
    with pytest.raises(InvalidArgument):
        caslake.transaction(orders, items)[mem]
    with pytest.raises(InvalidArgument):
        caslake.transaction(orders, items, ttl_ms=0)


def test_a_table_dropped_mid_transaction_aborts_it_all(tmp_path: Path) -> None:
    orders, items = two_tables(tmp_path)
    with pytest.raises(TableNotFound), caslake.transaction(orders, items) as tx:
        tx[orders].append(pa.table({"id": [9], "customer": ["z"], "total": [9.0]},
                                   schema=ORDERS))
        tx[items].append(pa.table({"order_id": [9], "sku": ["z"], "qty": [1]}, schema=ITEMS))
        caslake.drop_table(orders.uri)  # "items" sorts first: it is staged, then this fails
    reopened = caslake.open_table(items.uri)
    assert reopened.to_arrow().num_rows == 4  # the staged part is aborted
    reopened.append(pa.table({"order_id": [5], "sku": ["e"], "qty": [1]}, schema=ITEMS))
    assert sorted(reopened.to_arrow()["order_id"].to_pylist()) == [1, 1, 2, 3, 5]


def test_readers_never_see_an_undecided_or_aborted_part(tmp_path: Path) -> None:
    orders, items = two_tables(tmp_path)
    tx = MultiTransaction([orders, items], ttl_ms=60_000)
    tx[orders].delete("id = 1")
    tx[items].delete("order_id = 1")
    tx.stage()  # both staged, the record pending
    fresh = caslake.open_table(orders.uri)
    assert fresh.version == 1 and fresh.to_arrow().num_rows == 3
    assert caslake.snapshot(orders, items).versions == {orders.uri.rstrip("/"): 1,
                                                       items.uri.rstrip("/"): 1}
    tx.decide()
    assert fresh.refresh().version == 2 and fresh.to_arrow().num_rows == 2
    assert caslake.open_table(items.uri).to_arrow().num_rows == 2

    tx = MultiTransaction([orders, items], ttl_ms=60_000)
    tx[orders].delete("id = 2")
    tx[items].delete("order_id = 2")
    tx.stage()
    from caslake.core import abort_pending
    assert abort_pending(items.store, tx.txn_id or "").state == "aborted"  # type: ignore[union-attr]
    for t, n in ((orders, 2), (items, 2)):
        t2 = caslake.open_table(t.uri)
        assert t2.version == 3 and t2.to_arrow().num_rows == n
        assert t2.to_arrow(version=3).num_rows == n  # time travel reads it as aborted
    with pytest.raises(caslake.errors.TransactionAborted):
        tx.decide()


def test_a_concurrent_commit_under_read_version_is_a_typed_conflict(tmp_path: Path) -> None:
    orders, items = two_tables(tmp_path)
    read_at = orders.version
    caslake.open_table(orders.uri).delete("id = 3")  # a concurrent single-table commit
    with pytest.raises(ReadValidationFailed), caslake.transaction(orders, items) as tx:
        tx[orders].read_version(read_at)
        tx[orders].delete("id >= 3")
        tx[items].delete("order_id >= 3")
    assert caslake.open_table(items.uri).to_arrow().num_rows == 4
    with pytest.raises(ConcurrentModification), caslake.transaction(orders, items) as tx:
        tx[orders].overwrite(pa.table({"id": [1], "customer": ["a"], "total": [1.0]},
                                      schema=ORDERS))
        tx[items].append(pa.table({"order_id": [1], "sku": ["q"], "qty": [1]}, schema=ITEMS))
        caslake.open_table(orders.uri).delete("id = 2")
    assert caslake.open_table(items.uri).to_arrow().num_rows == 4
    assert caslake.open_table(orders.uri).to_arrow().num_rows == 1


def test_a_writer_rolls_an_abandoned_transaction_back_after_its_deadline(
        tmp_path: Path) -> None:
    orders, items = two_tables(tmp_path)
    tx = MultiTransaction([orders, items], ttl_ms=300)
    tx[orders].append(pa.table({"id": [8], "customer": ["h"], "total": [8.0]}, schema=ORDERS))
    tx[items].append(pa.table({"order_id": [8], "sku": ["h"], "qty": [8]}, schema=ITEMS))
    tx.stage()  # then the owner "dies"
    other = caslake.open_table(orders.uri)
    other.append(pa.table({"id": [5], "customer": ["e"], "total": [5.0]}, schema=ORDERS))
    assert sorted(other.to_arrow()["id"].to_pylist()) == [1, 2, 3, 5]
    assert caslake.open_table(items.uri).to_arrow().num_rows == 4
    with pytest.raises(caslake.errors.TransactionAborted):
        tx.decide()


def test_single_table_work_costs_the_same_after_a_transaction(tmp_path: Path) -> None:
    """No transaction in flight: an append and a read pay what they did (no record
    GET), on a table that has had a transaction and on one that never had."""
    plain, plain_items = two_tables(tmp_path / "p")
    plain.delete("id = 1")
    plain_items.delete("order_id = 1")
    orders, items = two_tables(tmp_path / "t")
    with caslake.transaction(orders, items) as tx:
        tx[orders].delete("id = 1")
        tx[items].delete("order_id = 1")
    plain.append(pa.table({"id": [1], "customer": ["a"], "total": [1.0]}, schema=ORDERS))
    orders.append(pa.table({"id": [1], "customer": ["a"], "total": [1.0]}, schema=ORDERS))
    costs = []
    for t in (plain, orders):
        t = caslake.open_table(t.uri)
        r = t.append(pa.table({"id": [2], "customer": ["b"], "total": [2.0]}, schema=ORDERS))
        before = t.store.counters.snapshot()
        t.to_arrow()
        after = t.store.counters.snapshot()
        read = {k: after[k] - before.get(k, 0) for k in after
                if not k.startswith("bytes") and after[k] != before.get(k, 0)}
        costs.append(({k: v for k, v in r.requests.items() if not k.startswith("bytes")},
                      {k: v for k, v in read.items() if k != "get_range"}))
    assert costs[0] == costs[1]


def test_errors_are_caslake_errors() -> None:
    for e in (TableListedTwice, TablesOnDifferentStores, caslake.errors.TransactionAborted):
        assert issubclass(e, CaslakeError)


def test_after_commit_hooks_run_once_the_transaction_commits(tmp_path: Path) -> None:
    orders, items = two_tables(tmp_path)
    seen: list[tuple[str, int]] = []
    for t in (orders, items):
        t.context.on_commit.append(lambda snap, t=t: seen.append((t.uri, snap.version)))
    tx = MultiTransaction([orders, items])
    tx[orders].delete("id = 1")
    tx[items].delete("order_id = 1")
    tx.stage()
    assert seen == []  # an export must not publish a version that may abort
    tx.decide()
    assert sorted(seen) == sorted([(orders.uri, 2), (items.uri, 2)])


def test_a_replayed_txn_token_changes_nothing_exactly_once_into_two_tables(
        tmp_path: Path) -> None:
    orders, items = two_tables(tmp_path)
    seen = []
    for _ in range(2):  # the same micro-batch delivered twice
        with caslake.transaction(orders, items, txn=("stream-1", 7)) as tx:
            tx[orders].append(pa.table({"id": [4], "customer": ["d"], "total": [4.0]},
                                       schema=ORDERS))
            tx[items].append(pa.table({"order_id": [4], "sku": ["d"], "qty": [1]},
                                      schema=ITEMS))
        coordinator = min((orders, items), key=lambda t: t.uri)  # the records' home
        seen.append(({m.key for m in coordinator.store.list("_txn/")},
                     data_keys(orders) | data_keys(items), (orders.version, items.version)))
    # the replay wrote no decision record (it decides nothing), kept none of its
    # uploads and made no version
    assert len(seen[0][0]) == 1 and seen[1] == seen[0], seen
    assert rows(caslake.open_table(orders.uri).to_arrow(), "id") == [
        (1, "ann", 10.0), (2, "bob", 20.0), (3, "cy", 30.0), (4, "d", 4.0)]
    assert caslake.open_table(items.uri).to_arrow().num_rows == 5
    assert all(r.noop for r in tx.results.values())
    with pytest.raises(InvalidArgument):
        caslake.transaction(orders, items, txn=("", 1))


@pytest.mark.s3
def test_tables_in_two_buckets_are_refused(moto_server: str, s3_options: dict[str, str]
                                           ) -> None:
    from tests.conftest import make_bucket

    a, b = (caslake.create_table(f"s3://{make_bucket(moto_server)}/t", ORDERS,
                                 storage_options=s3_options) for _ in range(2))
    with pytest.raises(TablesOnDifferentStores):
        caslake.transaction(a, b)


def test_the_change_feed_and_history_never_show_an_aborted_part(tmp_path: Path) -> None:
    orders, items = two_tables(tmp_path)
    tx = MultiTransaction([orders, items], ttl_ms=60_000)
    tx[orders].delete("id = 1")
    tx[orders].append(pa.table({"id": [8], "customer": ["h"], "total": [8.0]}, schema=ORDERS))
    tx[items].delete("order_id = 1")
    tx.stage()
    from caslake.core import abort_pending
    record = abort_pending(items.store, tx.txn_id or "")  # "items" sorts first: coordinator
    assert record is not None and record.state == "aborted"
    t = caslake.open_table(orders.uri)
    t.append(pa.table({"id": [5], "customer": ["e"], "total": [5.0]}, schema=ORDERS))
    feed = t.changes(2).to_arrow()  # the aborted version 2 and the append at 3
    assert rows(feed.select(["id", "_change_type", "_commit_version"]), "id") == [
        (5, "insert", 3)]
    assert [h.version for h in t.history()] == [3, 2, 1, 0]
    assert t.to_arrow(version=2).num_rows == 3


def test_gc_expiring_the_parent_of_an_aborted_version_leaves_the_table_whole(
        tmp_path: Path) -> None:
    """The oldest version gc would retain by age is an aborted staged one: gc keeps
    its parent too (the rows it shows), so history, time travel to it and verify
    stay right, and later gc runs keep working."""
    import time
    from datetime import timedelta

    from caslake.ops.verify import verify_table

    orders, items = two_tables(tmp_path)
    tx = MultiTransaction([orders, items], ttl_ms=1)
    tx[orders].delete("id = 1")
    tx[items].delete("order_id = 1")
    tx.stage()  # abandoned: the next writer aborts it
    time.sleep(1.2)
    t = caslake.open_table(orders.uri)
    t.append(pa.table({"id": [5], "customer": ["e"], "total": [5.0]}, schema=ORDERS))
    for _ in range(2):
        t.gc(retention=timedelta(seconds=1), force=True)
        assert t.refresh().snapshot.manifest.oldest_version == 1  # the aborted one's parent
        assert verify_table(t.store, deep=True, all_versions=True).ok
    fresh = caslake.open_table(orders.uri)
    assert [h.version for h in fresh.history()] == [4, 3, 2, 1]  # one marker: 4
    assert sorted(fresh.to_arrow()["id"].to_pylist()) == [1, 2, 3, 5]
    assert fresh.to_arrow(version=2).equals(fresh.to_arrow(version=1))  # aborted: as 1


def test_a_part_never_takes_the_group_path(tmp_path: Path) -> None:
    """With group commit on (``commit.group``), a part that loses its race must not
    publish an intent: another writer's fold would commit its rows in a version that
    is not staged, visible whatever the transaction's decision.  Every committed
    part's version is its own staged one."""
    import threading

    from caslake.core import CommitPolicy

    orders, items = two_tables(tmp_path)
    for t in (orders, items):
        t.set_properties({"commit.group": "true"})
    stop = threading.Event()

    def rival(w: int) -> None:
        t = caslake.open_table(orders.uri)
        t.commit_policy = CommitPolicy(group_commit=True, group_poll_s=0.002)
        i = 0
        while not stop.is_set():
            i += 1
            t.append(pa.table({"id": [10_000 * (w + 1) + i], "customer": ["r"],
                               "total": [0.0]}, schema=ORDERS))

    pool = [threading.Thread(target=rival, args=(w,)) for w in range(3)]
    for th in pool:
        th.start()
    try:
        for n in range(8):
            tx = caslake.transaction(orders, items)
            with tx:
                tx[orders].append(pa.table({"id": [100 + n], "customer": ["tx"],
                                            "total": [1.0]}, schema=ORDERS))
                tx[items].append(pa.table({"order_id": [100 + n], "sku": ["t"], "qty": [1]},
                                          schema=ITEMS))
            for t in (orders, items):
                r = tx.results[t.uri.rstrip("/")]
                m = t.io.at_version(caslake.open_table(t.uri).snapshot, r.version).manifest
                assert m.transaction is not None and m.transaction.id == tx.txn_id
                assert not m.intents and m.commit_id == r.commit_id
    finally:
        stop.set()
        for th in pool:
            th.join()
    got = caslake.open_table(orders.uri).to_arrow()["id"].to_pylist()
    assert all(got.count(100 + n) == 1 for n in range(8))
