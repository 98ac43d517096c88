"""UPDATE's and MERGE's rows of the crash-at-every-step suite (docs/protocol.md,
"Update" and "Merge").

Reuses the machinery of ``tests/reliability/test_crash_every_step.py`` by import
(``op_with_faults``: its base table with nested columns, model, faulty store, the
fault loop of crash_harness.py and the check after every fault): for each store
call of the update or merge, a crash, a lost reply or a failure before the call
leaves the old version or exactly the new one, verifying deep with every
referenced object present and only orphans of the operation in its own version
slot; a later append then works."""

from __future__ import annotations

import pytest

from caslake.api import CommitResult, Table
from tests.reliability.crash_harness import MODES
from tests.reliability.test_crash_every_step import (
    Op,
    Row,
    Tables,
    arrow,
    op_with_faults,
    os_is,
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
    op_with_faults(tables, name, DML[name], mode)
