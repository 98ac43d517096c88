"""The commit core and the read path: the one import point for the layers above.

Owns the table's metadata IO and time travel (``metadata_io``, ``segments``,
``history``), every conditional write -- create-only objects and records, the
swaps of mutable records and how an unclear outcome is settled (``pointer``) --,
the commit loop (``commit``), multi-table transactions' records, staged
versions and atomic snapshots (``multitable``, ``siblings``), the progress
bars of long work (``progress``), the typed changes a commit applies
(``changes``) and the requirements it validates against its base
(``requirements``), what conflicts with what (``conflicts``), the operation runner
every write goes through (``runner``), the caches and pools (``cache``,
``footers``, ``pools``), the write options and input conversion an operation
hands the writer (``write_options``, ``arrow_input``, ``coerce``), where a cloned
table's files live (``routing``), and the read path (``read/``: scan planning and
execution, deletion masks, Arrow export).

Every commit from above goes through the operation runner (``run_operation``):
the commit loop itself (``commit.commit_with_retry``) is not exported here.

It never imports ``caslake.ops``, ``caslake.dataset``, ``caslake.export``,
``caslake.spark`` or ``caslake.cli``; those import this package, never its
modules (``tests/test_architecture.py``).
"""

from caslake.core.arrow_input import as_reader
from caslake.core.changes import Changes, Requirement, check_txn, txn_applied, write_prepare
from caslake.core.coerce import SchemaConformer
from caslake.core.commit import find_commit
from caslake.core.conflicts import (
    Condition,
    KeyCondition,
    PredicateCondition,
    changed_since,
    key_scan_where,
    touched_since,
)
from caslake.core.footers import FooterCache, read_footer
from caslake.core.group import INTENT_PREFIX, GroupWrite, IntentSkipped
from caslake.core.group import deadline_of as intent_deadline
from caslake.core.history import COMPACT, HistoryEntry, complete_summary
from caslake.core.metadata_io import MetadataIO, Snapshot
from caslake.core.multitable import (
    StagedChanges,
    abort_pending,
    committed_or_raise,
    consistent_heads,
    create_txn_record,
    decide,
    names_table,
    read_record,
    record_collectable,
    retained_txn_ids,
    stage,
)
from caslake.core.pointer import (
    CommitPolicy,
    Swap,
    SwapResult,
    backoff,
    create_record,
    put_new,
    put_new_file,
    record_holds,
    settle,
    swap_record,
)
from caslake.core.pools import shared_pool, shutdown_all, threads
from caslake.core.progress import advance as progress_advance
from caslake.core.progress import set_total as progress_total
from caslake.core.progress import shown as progress_shown
from caslake.core.progress import stage_callback as progress_stage
from caslake.core.progress import task as progress_task
from caslake.core.read.deletion_mask import DeletionMask, TombstoneCache, load_masks
from caslake.core.read.interop import ArrowExport, live_file_list
from caslake.core.read.partition_prune import partition_covers
from caslake.core.read.pyarrow_dataset import Translation, pyarrow_dataset, translate_filter
from caslake.core.read.scan import POSITION, FileTask, Scan, SnapshotSubset, summary_matcher
from caslake.core.requirements import (
    FilesUntouchedSince,
    ReadSetUnchanged,
    SchemaUnchanged,
    TxnNotApplied,
    UploadsNotCollected,
    write_requirements,
)
from caslake.core.routing import RoutingStore, external_uris, key_at, resolve, route
from caslake.core.runner import (
    STARTED_AT_MS,
    CommitResult,
    TableContext,
    adopt_ref_move,
    after_commit,
    noop_result,
    run_operation,
)
from caslake.core.siblings import same_store, store_at
from caslake.core.write_options import MiB, WriteOptions

__all__ = [
    "COMPACT",
    "INTENT_PREFIX",
    "POSITION",
    "STARTED_AT_MS",
    "ArrowExport",
    "Changes",
    "CommitPolicy",
    "CommitResult",
    "Condition",
    "DeletionMask",
    "FileTask",
    "FilesUntouchedSince",
    "FooterCache",
    "GroupWrite",
    "HistoryEntry",
    "IntentSkipped",
    "KeyCondition",
    "MetadataIO",
    "MiB",
    "PredicateCondition",
    "ReadSetUnchanged",
    "Requirement",
    "RoutingStore",
    "Scan",
    "SchemaConformer",
    "SchemaUnchanged",
    "Snapshot",
    "SnapshotSubset",
    "StagedChanges",
    "Swap",
    "SwapResult",
    "TableContext",
    "TombstoneCache",
    "Translation",
    "TxnNotApplied",
    "UploadsNotCollected",
    "WriteOptions",
    "abort_pending",
    "adopt_ref_move",
    "after_commit",
    "as_reader",
    "backoff",
    "changed_since",
    "check_txn",
    "committed_or_raise",
    "complete_summary",
    "consistent_heads",
    "create_record",
    "create_txn_record",
    "decide",
    "external_uris",
    "find_commit",
    "intent_deadline",
    "key_at",
    "key_scan_where",
    "live_file_list",
    "load_masks",
    "names_table",
    "noop_result",
    "partition_covers",
    "progress_advance",
    "progress_shown",
    "progress_stage",
    "progress_task",
    "progress_total",
    "put_new",
    "put_new_file",
    "pyarrow_dataset",
    "read_footer",
    "read_record",
    "record_collectable",
    "record_holds",
    "resolve",
    "retained_txn_ids",
    "route",
    "run_operation",
    "same_store",
    "settle",
    "shared_pool",
    "shutdown_all",
    "stage",
    "store_at",
    "summary_matcher",
    "swap_record",
    "threads",
    "touched_since",
    "translate_filter",
    "txn_applied",
    "write_prepare",
    "write_requirements",
]
