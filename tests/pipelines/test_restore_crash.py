"""Restore's row of the crash-at-every-step suite (docs/protocol.md, "Restore").

Reuses the machinery of ``tests/reliability/test_crash_every_step.py`` by import
(its base table, model, faulty store, fault kinds and the check after every
fault): for each store call of ``restore(version=1)`` on that table, a crash, a
lost reply or a failure before the call leaves the old version or exactly the
restored one, verifying deep with every referenced object present and only
orphans of the restore in its own version slot; a later append then works.
"""

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
    check_after,
    count_calls,
    fault_at,
    faulty_table,
    prepare,
    rows,
    tables,
)

__all__ = ["tables"]  # the suite's backend fixture (memory, local), used here by name


def _restore(t: Table) -> CommitResult:
    return t.restore(version=1)  # the first append: the second one and the delete go


def _restored(rs: list[Row]) -> list[Row]:
    return rows(0, 2000)


RESTORE = Op(_restore, _restored)


@pytest.mark.parametrize("mode", MODES)
def test_restore_fault_at_every_store_call(tables: Tables, mode: str) -> None:
    n = count_calls(tables, RESTORE)
    assert n >= 5, f"restore made only {n} store calls"
    outcomes: dict[str, int] = {}
    for i in range(1, n + 1):
        uri, model, before_keys, base_manifests = prepare(tables)
        t, store = faulty_table(uri)
        where = f"restore/{tables.kind}/{mode} at call {i} of {n}"
        fault = fault_at(mode, i)
        store.faults.append(fault)
        must_be: str | None = None
        commit_id: str | None = None
        if mode == "crash":
            with pytest.raises(SimulatedCrash):
                RESTORE.run(t)
            outcome = "crash"
        else:
            try:
                res = RESTORE.run(t)
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
        state = check_after(uri, model, RESTORE.model(model[-1]), before_keys, base_manifests,
                            must_be=must_be, commit_id=commit_id, where=where)
        label = f"{outcome}->{state}"
        outcomes[label] = outcomes.get(label, 0) + 1
    print(f"\nrestore [{tables.kind}, {mode}]: {n} fault points tested; outcomes {outcomes}")
    if mode == "lost-reply":
        assert outcomes.get("ok->new", 0) >= 1, outcomes
