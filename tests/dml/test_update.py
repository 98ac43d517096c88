"""``Table.update``: values as SQL, expressions and literals, the type rule, one
commit (a tombstone and new files), and the change feed's pairs.

Every expected answer comes from DuckDB running the same ``UPDATE`` on the same
rows, or from pyarrow, never from caslake's own output."""

from __future__ import annotations

import uuid
from decimal import Decimal

import duckdb
import pyarrow as pa
import pytest

import caslake
from caslake.errors import CaslakeError, SchemaMismatch, UnknownColumn

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False),
                    pa.field("status", pa.string()),
                    pa.field("amount", pa.float64()),
                    pa.field("price", pa.decimal128(12, 2)),
                    pa.field("qty", pa.int32())])


def rows(n: int = 40) -> pa.Table:
    return pa.table({
        "id": pa.array(range(n), pa.int64()),
        "status": pa.array([["open", "hold", None][i % 3] for i in range(n)]),
        "amount": pa.array([None if i % 7 == 3 else i * 1.5 for i in range(n)]),
        "price": pa.array([Decimal(i * 37 % 1000) / 7 // Decimal("0.01") * Decimal("0.01")
                           for i in range(n)], pa.decimal128(12, 2)),
        "qty": pa.array([i % 11 for i in range(n)], pa.int32()),
    }, schema=SCHEMA)


def make(n: int = 40, files: int = 3) -> caslake.Table:
    t = caslake.create_table(f"memory://{uuid.uuid4().hex}", SCHEMA)
    data = rows(n)
    step = -(-n // files)
    for i in range(0, n, step):
        t.append(data.slice(i, step))
    return t


def duck_update(data: pa.Table, sql: str) -> pa.Table:
    con = duckdb.connect()
    con.register("src", data)
    con.execute("CREATE TABLE t AS SELECT * FROM src")
    con.execute(sql)
    return con.execute("SELECT * FROM t ORDER BY id").fetch_arrow_table()


def ours(t: caslake.Table) -> pa.Table:
    return t.to_arrow().sort_by("id")


def same(got: pa.Table, want: pa.Table) -> None:
    assert got.num_rows == want.num_rows
    for name in got.column_names:
        a = got.column(name).to_pylist()
        b = want.column(name).cast(got.schema.field(name).type).to_pylist()
        assert a == b, name


@pytest.mark.parametrize(("set_", "where", "sql"), [
    ({"status": "'closed'"}, "qty > 5", "UPDATE t SET status = 'closed' WHERE qty > 5"),
    ({"amount": "amount * 1.1", "qty": "qty + 1"}, "status = 'open'",
     "UPDATE t SET amount = amount * 1.1, qty = qty + 1 WHERE status = 'open'"),
    ({"amount": "amount * 1.7 + 2.3"}, None, "UPDATE t SET amount = amount * 1.7 + 2.3"),
    ({"price": "price * 1.1"}, "id < 30",
     "UPDATE t SET price = price * 1.1 WHERE id < 30"),
    ({"status": "NULL", "amount": "NULL"}, "amount IS NULL OR id = 4",
     "UPDATE t SET status = NULL, amount = NULL WHERE amount IS NULL OR id = 4"),
    ({"amount": "qty", "qty": "id"}, "id BETWEEN 10 AND 20",
     "UPDATE t SET amount = qty, qty = id WHERE id BETWEEN 10 AND 20"),
    ({"status": "upper(status)"}, None, "UPDATE t SET status = upper(status)"),
    ({"qty": "amount"}, "amount IS NOT NULL AND id < 9",
     "UPDATE t SET qty = amount WHERE amount IS NOT NULL AND id < 9"),
])
def test_update_equals_duckdb(set_: dict[str, str], where: str | None, sql: str) -> None:
    t = make()
    before = t.version
    res = t.update(set=set_, where=where)
    assert t.version == before + 1 and not res.noop
    same(ours(t), duck_update(rows(), sql))
    assert t.history(limit=1)[0].operation == "update"


def test_update_with_expressions_and_literals() -> None:
    t = make()
    t.update(set={"status": caslake.lit("closed"), "amount": caslake.col("amount") * 1.1,
                  "qty": 0},
             where=caslake.col("id") >= 35)
    want = duck_update(rows(), "UPDATE t SET status = 'closed', amount = amount * 1.1, "
                               "qty = 0 WHERE id >= 35")
    same(ours(t), want)


def test_update_matching_nothing_is_a_noop() -> None:
    t = make()
    v = t.version
    res = t.update(set={"status": "'x'"}, where="id > 1000")
    assert res.noop and t.version == v


def test_update_is_one_commit_of_a_tombstone_and_new_files() -> None:
    t = make(n=40, files=2)
    res = t.update(set={"qty": "qty * 2"}, where="id < 10")
    m = t.snapshot.manifest
    assert m.summary["added_tombstones"] == 1
    assert m.summary["added_rows"] == 10 and m.summary["deleted_rows"] == 10
    assert not res.noop
    assert t.to_arrow().num_rows == 40


@pytest.mark.parametrize(("set_", "column"), [
    ({"qty": "'many'"}, "qty"),
    ({"amount": "status"}, "amount"),
    ({"status": "qty + 1"}, "status"),
    ({"id": "NULL"}, "id"),
    ({"qty": "id * 100000000000"}, "qty"),
    ({"price": "'1.5'"}, "price"),
])
def test_a_value_of_the_wrong_type_names_the_column_and_commits_nothing(
        set_: dict[str, str], column: str) -> None:
    t = make()
    v, keys = t.version, set(t.store.list(""))
    with pytest.raises(SchemaMismatch) as info:
        t.update(set=set_, where="id < 30")
    assert info.value.column == column
    assert t.refresh().version == v
    assert set(t.store.list("")) == keys  # nothing uploaded


def test_unknown_column_and_bad_arguments_are_typed() -> None:
    t = make()
    with pytest.raises(UnknownColumn):
        t.update(set={"nope": "1"})
    with pytest.raises(UnknownColumn):
        t.update(set={"qty": "nope + 1"})
    with pytest.raises(CaslakeError):
        t.update(set={})
    with pytest.raises(CaslakeError):
        t.update(set={"qty": object()})


def test_values_see_the_old_row() -> None:
    t = make()
    t.update(set={"amount": "qty", "qty": "amount"}, where="amount IS NOT NULL")
    want = duck_update(rows(), "UPDATE t SET amount = qty, qty = amount "
                               "WHERE amount IS NOT NULL")
    same(ours(t), want)


def test_change_feed_of_an_update_pairs_old_and_new_rows() -> None:
    t = make(n=60, files=4)
    fives = ", ".join(str(i) for i in range(0, 60, 5))
    t.delete(f"id IN ({fives})")  # earlier deletion masks on the files the update touches
    v = t.version + 1
    t.update(set={"status": "'done'", "qty": "qty * 3"}, where="qty > 4 OR id > 50")
    feed = t.changes(v, v).to_arrow()
    pre = feed.filter(pa.compute.equal(feed["_change_type"], "update_preimage"))
    post = feed.filter(pa.compute.equal(feed["_change_type"], "update_postimage"))
    base = duck_update(rows(60), "DELETE FROM t WHERE id % 5 = 0")
    con = duckdb.connect()
    con.register("b", base)
    old = con.execute("SELECT * FROM b WHERE qty > 4 OR id > 50").fetch_arrow_table()
    assert pre.num_rows == post.num_rows == old.num_rows
    assert feed.num_rows == 2 * old.num_rows  # nothing but pairs
    pairs = list(zip(pre.to_pylist(), post.to_pylist(), strict=True))
    for a, b in pairs:
        assert a["id"] == b["id"]
        assert b["status"] == "done" and b["qty"] == a["qty"] * 3
        assert b["amount"] == a["amount"] and b["price"] == a["price"]
    assert sorted(a["id"] for a, _ in pairs) == sorted(old.column("id").to_pylist())
    for a, _ in pairs:
        src = old.filter(pa.compute.equal(old["id"], a["id"])).to_pylist()[0]
        assert {k: a[k] for k in src} == src
