"""One source of truth for what a commit did: the summary in its manifest.

``HistoryEntry`` (``Table.history()``, ``caslake history``, ``--json``) and
``CommitResult`` (what an operation returns) both take their counts from the
committed manifest's ``summary`` through :func:`commit_counts`, so they cannot
disagree.  The counts are per commit; ``total_rows`` / ``total_files`` are the
table at that version.  ``rows_rewritten`` is the rows a commit wrote again
into new files in place of old ones (compact, purge: the summary's
``added_rows``; 0 for every other operation).  For a compaction, ``rows_added``
is those same rows, as it always was, and ``rows_deleted`` is 0: its summary's
``deleted_rows`` counts them leaving with their old files, and they are all
still in the table.  For a purge, ``rows_added`` is 0 and ``rows_deleted`` is
the live rows it erased (the summary's ``deleted_rows`` minus its ``added_rows``,
as for compact); its ``params.rows_erased`` counts every row physically
removed, rows deleted earlier included.

A summary always has every key of :data:`SUMMARY_KEYS` (0 when nothing
happened), including the create entry's.  Never reads or writes storage.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from caslake.format.manifest import Manifest, format_ts

COMPACT = "compact"  # the operation name of maintenance.compact (a lower layer can't import it)
PURGE = "purge"  # and of maintenance.purge
_REWRITES = (COMPACT, PURGE)  # operations that write old rows again into new files
SUMMARY_KEYS = ("added_files", "added_rows", "added_bytes", "removed_files", "deleted_rows",
                "added_tombstones")
# CommitResult / HistoryEntry field -> summary key
_COUNTS = {"files_added": "added_files", "rows_added": "added_rows",
           "files_removed": "removed_files", "rows_deleted": "deleted_rows",
           "tombstones_added": "added_tombstones"}


def complete_summary(summary: Mapping[str, int]) -> dict[str, int]:
    """``summary`` with every standard key present (0 where it is missing)."""
    return {**dict.fromkeys(SUMMARY_KEYS, 0), **summary}


def commit_counts(manifest: Manifest) -> dict[str, int]:
    """The per-commit counts of ``CommitResult`` and ``HistoryEntry``, from the summary."""
    summary = complete_summary(manifest.summary)
    counts = {name: summary[key] for name, key in _COUNTS.items()}
    if manifest.operation in _REWRITES:  # rewritten rows left with the old files, came back
        counts["rows_deleted"] = max(0, summary["deleted_rows"] - summary["added_rows"])
    if manifest.operation == PURGE:  # a purge adds no row: its new files hold old ones
        counts["rows_added"] = 0
    return counts


def rewritten_rows(manifest: Manifest) -> int:
    """The rows the commit wrote again into new files in place of old ones."""
    if manifest.operation not in _REWRITES:
        return 0
    return complete_summary(manifest.summary)["added_rows"]


@dataclass(frozen=True)
class HistoryEntry:
    """One version of the table.  ``rows_added`` ... ``tombstones_added``: what this
    commit did; ``total_rows`` (live) and ``total_files``: the table at this version.

    Examples:
        >>> import caslake, pyarrow as pa
        >>> t = caslake.create_table('memory://', pa.schema([('id', pa.int64())]))
        >>> _ = t.append(pa.table({'id': [1, 2]}))
        >>> [(e.version, e.operation, e.rows_added) for e in t.history()]
        [(1, 'append', 2), (0, 'create', 0)]
    """

    version: int
    created_at: datetime
    operation: str
    commit_id: str
    manifest: str
    params: dict[str, str]
    summary: dict[str, int]
    total_rows: int
    total_files: int
    rows_added: int = 0
    rows_deleted: int = 0
    files_added: int = 0
    files_removed: int = 0
    tombstones_added: int = 0
    rows_rewritten: int = 0  # compact, purge: old rows written again into new files
    # Group commit: the commit ids of the writers whose intents this version applied
    # (empty for a plain commit).
    intents: tuple[str, ...] = ()

    @classmethod
    def of(cls, manifest: Manifest, key: str) -> HistoryEntry:
        return cls(version=manifest.version,
                   created_at=datetime.fromtimestamp(manifest.created_at_ms / 1000, UTC),
                   operation=manifest.operation, commit_id=manifest.commit_id, manifest=key,
                   params=dict(manifest.operation_params),
                   summary=complete_summary(manifest.summary),
                   total_rows=manifest.totals.live_rows, total_files=manifest.totals.files,
                   rows_rewritten=rewritten_rows(manifest),
                   intents=tuple(i.commit_id for i in manifest.intents),
                   **commit_counts(manifest))

    @property
    def created_at_text(self) -> str:
        """ISO 8601 with a ``T``, milliseconds and ``Z``: the CLI's table and JSON."""
        return format_ts(int(self.created_at.timestamp() * 1000))

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "created_at": self.created_at_text,
                "operation": self.operation, "commit_id": self.commit_id,
                "manifest": self.manifest, "params": dict(self.params),
                "summary": dict(self.summary),
                **{name: getattr(self, name) for name in _COUNTS},
                "rows_rewritten": self.rows_rewritten, "total_rows": self.total_rows,
                "total_files": self.total_files, "intents_applied": len(self.intents),
                "intent_commit_ids": list(self.intents)}
