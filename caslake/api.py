"""The former home of the public facade; it now lives in :mod:`caslake.table`.

Kept so ``from caslake.api import ...`` still works: a re-export, no logic.
"""

from caslake.table import (
    CommitResult,
    HistoryEntry,
    Table,
    clone,
    create_table,
    drop_table,
    open_table,
)

__all__ = ["CommitResult", "HistoryEntry", "Table", "clone", "create_table", "drop_table",
           "open_table"]
