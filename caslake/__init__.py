"""caslake: transactional, columnar tables on object storage.

Immutable Parquet data files and manifests, one compare-and-swap pointer
(``_latest_manifest``), no catalog, no lock service.
"""

from caslake.core import CommitPolicy, WriteOptions
from caslake.errors import CaslakeError
from caslake.expr import col, lit
from caslake.ops.multi import snapshot, transaction
from caslake.store.options import StorageOptions
from caslake.table import (
    CommitResult,
    HistoryEntry,
    Table,
    clone,
    create_table,
    drop_table,
    open_table,
)

__all__ = [
    "CaslakeError",
    "CommitPolicy",
    "CommitResult",
    "HistoryEntry",
    "StorageOptions",
    "Table",
    "WriteOptions",
    "clone",
    "col",
    "create_table",
    "drop_table",
    "lit",
    "open_table",
    "snapshot",
    "transaction",
]
__version__ = "0.1.0"
