"""``caslake txn SPEC``: a JSON list of operations applied to several tables at
once, all or nothing; defects in the spec are typed errors naming their path."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import caslake
from caslake.cli.main import main
from tests.multitable.helpers import ITEMS, rows, two_tables


def run(spec: object, tmp_path: Path, *extra: str) -> tuple[int, str]:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    out = io.StringIO()
    return main(["txn", str(path), *extra], out), out.getvalue()


def test_txn_applies_every_operation_atomically(tmp_path: Path) -> None:
    orders, items = two_tables(tmp_path)
    src = tmp_path / "items.parquet"
    pq.write_table(pa.table({"order_id": [1], "sku": ["b"], "qty": [7]}, schema=ITEMS), src)
    code, out = run({"operations": [
        {"table": orders.uri, "op": "read_version", "version": 1},
        {"table": orders.uri, "op": "delete", "where": "id = 2"},
        {"table": orders.uri, "op": "append",
         "rows": [{"id": 4, "customer": "dee", "total": 40.0}]},
        {"table": items.uri, "op": "delete", "where": "order_id = 2"},
        {"table": items.uri, "op": "upsert", "key": ["order_id", "sku"], "source": str(src)},
    ]}, tmp_path, "--json")
    assert code == 0, out
    result = json.loads(out)
    assert set(result["versions"].values()) == {2}
    snap = caslake.snapshot(orders, items)
    assert rows(snap.to_arrow(orders), "id") == [(1, "ann", 10.0), (3, "cy", 30.0),
                                                 (4, "dee", 40.0)]
    assert rows(snap.to_arrow(items), "order_id, sku") == [(1, "a", 1), (1, "b", 7),
                                                          (3, "c", 4)]


@pytest.mark.parametrize(("op", "needle"), [
    ({"op": "delete"}, "operations[1].where"),
    ({"op": "explode"}, "operations[1].op"),
    ({"op": "append", "rows": [{"order_id": "x"}]}, "operations[1].rows[*].order_id"),
    ({"op": "append", "rows": [{"nope": 1}]}, "operations[1].rows[0].nope"),
    ({"op": "upsert", "key": [], "rows": []}, "operations[1].key"),
])
def test_a_bad_spec_is_a_typed_error_and_changes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], op: dict[str, object],
        needle: str) -> None:
    orders, items = two_tables(tmp_path)
    code, _ = run({"operations": [
        {"table": orders.uri, "op": "delete", "where": "id = 1"},
        {"table": items.uri, **op}]}, tmp_path)
    assert code == 1
    assert needle in capsys.readouterr().err
    assert (orders.refresh().version, items.refresh().version) == (1, 1)
