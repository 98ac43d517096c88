"""caslake: transactional, columnar tables on object storage.

Immutable Parquet data files and manifests, one compare-and-swap pointer
(``_latest_manifest``), no catalog, no lock service.
"""

from caslake.errors import CaslakeError
from caslake.expr import col, lit
from caslake.table.commit import CommitPolicy
from caslake.table.history import HistoryEntry
from caslake.table.table import CommitResult, Table, create_table, open_table
from caslake.table.write import WriteOptions

__all__ = [
    "CaslakeError",
    "CommitPolicy",
    "CommitResult",
    "HistoryEntry",
    "Table",
    "WriteOptions",
    "col",
    "create_table",
    "lit",
    "open_table",
]
__version__ = "0.1.0"
