"""Restore's row of the crash-at-every-step suite (docs/protocol.md, "Restore").

Reuses the machinery of ``tests/reliability/test_crash_every_step.py`` by import
(``op_with_faults``: its base table, model, faulty store, the fault loop of
crash_harness.py and the check after every fault): for each store call of
``restore(version=1)`` on that table, a crash, a lost reply or a failure before
the call leaves the old version or exactly the restored one, verifying deep with
every referenced object present and only orphans of the restore in its own
version slot; a later append then works.
"""

from __future__ import annotations

import pytest

from caslake.api import CommitResult, Table
from tests.reliability.crash_harness import MODES
from tests.reliability.test_crash_every_step import (
    Op,
    Row,
    Tables,
    op_with_faults,
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
    op_with_faults(tables, "restore", RESTORE, mode)
