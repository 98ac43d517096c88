"""UPDATE's and MERGE's rows of the crash-at-every-step suite (docs/protocol.md,
"Update" and "Merge").

Reuses the machinery of ``tests/reliability/test_crash_every_step.py`` by import
(its base table with nested columns, model, faulty store, fault kinds and the
check after every fault): for each store call of the update or merge, a crash,
a lost reply or a failure before the call leaves the old version or exactly the
new one, verifying deep with every referenced object present and only orphans of
the operation in its own version slot; a later append then works."""

from __future__ import annotations

import pytest

from caslake.api import CommitResult, Table
from caslake.errors import CaslakeError, CommitOutcomeUnknown
from caslake.store.faults import SimulatedCrash
from tests.reliability.test_crash_every_step import (
    MODES,
    Op,
    Row,
    Tables,
    arrow,
    check_after,
    count_calls,
    fault_at,
    faulty_table,
    os_is,
    prepare,
    rows,
    tables,
)

__all__ = ["tables"]  # the suite's backend fixture (memory, local), used here by name


def _update(t: Table) -> CommitResult:
    return t.update(set={"s": "'upd'", "f": "f * 2"},
                    where="id BETWEEN 500 AND 700 OR dev.os = 'os2'")


def _updated(rs: list[Row]) -> list[Row]:
    def hit(r: Row) -> bool:
        return 500 <= r[0] <= 700 or os_is(r, "os2")

    return [(r[0], "upd", None if r[2] is None else r[2] * 2, *r[3:]) if hit(r) else r
            for r in rs]


SOURCE = rows(2900, 3100, tag="m")


def _merge(t: Table) -> CommitResult:
    return t.merge(arrow(SOURCE), on=["id"]) \
        .when_matched_delete(condition="source.id < 2920") \
        .when_matched_update_all() \
        .when_not_matched_insert_all(condition="source.id < 3050").execute()


def _merged(rs: list[Row]) -> list[Row]:
    by_id = {r[0]: r for r in SOURCE}
    out = [by_id.get(r[0], r) for r in rs if not 2900 <= r[0] < 2920]
    return out + [r for r in SOURCE if 3000 <= r[0] < 3050]


DML = {"update": Op(_update, _updated), "merge": Op(_merge, _merged)}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(DML))
def test_dml_fault_at_every_store_call(tables: Tables, mode: str, name: str) -> None:
    op = DML[name]
    n = count_calls(tables, op)
    assert n >= 5, f"{name} made only {n} store calls"
    outcomes: dict[str, int] = {}
    for i in range(1, n + 1):
        uri, model, before_keys, base_manifests = prepare(tables)
        t, store = faulty_table(uri)
        where = f"{name}/{tables.kind}/{mode} at call {i} of {n}"
        fault = fault_at(mode, i)
        store.faults.append(fault)
        must_be: str | None = None
        commit_id: str | None = None
        if mode == "crash":
            with pytest.raises(SimulatedCrash):
                op.run(t)
            outcome = "crash"
        else:
            try:
                res = op.run(t)
            except CaslakeError as e:
                outcome = type(e).__name__
                if isinstance(e, CommitOutcomeUnknown):
                    commit_id = e.commit_id
                else:
                    must_be = "old"
            else:
                outcome, must_be, commit_id = "ok", "new", res.commit_id
                assert res.version == len(model) and not res.noop, where
            assert fault.fired == 1, f"{where}: the fault did not fire"
        state = check_after(uri, model, op.model(model[-1]), before_keys, base_manifests,
                            must_be=must_be, commit_id=commit_id, where=where)
        label = f"{outcome}->{state}"
        outcomes[label] = outcomes.get(label, 0) + 1
    print(f"\n{name} [{tables.kind}, {mode}]: {n} fault points tested; outcomes {outcomes}")
