"""GDPR across three tables: one transaction deletes a person from every table
that holds them (all or nothing), then ``purge(expire=True)`` on each erases them
physically.  Afterwards no object under any of the three prefixes holds their
value, found by decoding every object (tests/maintenance/erasure.py), and the
other rows are intact (read with pyarrow from the tables' live files)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import caslake
from caslake.ops.verify import verify_table
from tests.maintenance.erasure import assert_erased, find_leaks

SECRET = "mallory-5d1e22b7"
WHERE = f"user = '{SECRET}'"
USERS = pa.schema([("user", pa.string()), ("email", pa.string())])
ORDERS = pa.schema([("id", pa.int64()), ("user", pa.string())])
EVENTS = pa.schema([("id", pa.int64()), ("user", pa.string()), ("what", pa.string())])


def build(root: Path) -> list[caslake.Table]:
    users = caslake.create_table(str(root / "users"), USERS)
    orders = caslake.create_table(str(root / "orders"), ORDERS)
    events = caslake.create_table(str(root / "events"), EVENTS)
    names = ["ann", SECRET, "bob", "cy"]
    users.append(pa.table({"user": names, "email": [f"{n}@x.org" for n in names]},
                          schema=USERS))
    orders.append(pa.table({"id": list(range(8)), "user": names * 2}, schema=ORDERS))
    events.append(pa.table({"id": list(range(12)), "user": names * 3,
                            "what": ["login"] * 12}, schema=EVENTS))
    return [users, orders, events]


def test_one_transaction_erases_a_person_from_three_tables(tmp_path: Path) -> None:
    tables = build(tmp_path)
    assert all(find_leaks(t, [SECRET]) for t in tables)
    with caslake.transaction(*tables) as tx:
        for t in tables:
            tx[t].delete(WHERE)
    snap = caslake.snapshot(*tables)
    assert [snap.to_arrow(t).num_rows for t in tables] == [3, 6, 9]
    for t in tables:
        t.purge(WHERE, expire=True)
    for t in tables:
        assert_erased(t, [SECRET])  # every object decoded: data, manifests, records
        assert verify_table(t.store, deep=True, all_versions=True).ok
        live = pa.concat_tables(
            [pq.read_table(f["uri"].removeprefix("file://")) for f in t.live_files()])
        assert SECRET not in live.column("user").to_pylist()
    assert sorted(caslake.open_table(tables[0].uri).to_arrow()["user"].to_pylist()) == [
        "ann", "bob", "cy"]
