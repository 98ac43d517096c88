"""Running one operation on a table handle: commit a plan, move the handle, report.

Owns :class:`TableContext` -- what an operation needs of a table handle: its
store, metadata IO, caches, write options, commit policy, the ref it commits to,
a clock, and the snapshot the handle last saw -- and :func:`run_operation`,
the one place that turns a plan into a :class:`CommitResult`: it commits
through :func:`caslake.core.commit.commit_with_retry`, moves the handle's
snapshot, and reports what the commit did (from the manifest that landed) and
what the operation cost in store requests and bytes.

``Table``, transactions, compaction and gc all run through here; modules that
maintain a table (``caslake.ops``) receive a :class:`TableContext`,
never the ``Table`` facade.  This module never plans, never uploads data (a
plan's files are already on storage) and never imports anything above
``core/``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from caslake.core.changes import Changes, Requirement
from caslake.core.commit import commit_with_retry
from caslake.core.footers import FooterCache
from caslake.core.group import GroupWrite
from caslake.core.history import commit_counts
from caslake.core.metadata_io import MetadataIO, Snapshot
from caslake.core.pointer import CommitPolicy
from caslake.core.read.deletion_mask import TombstoneCache
from caslake.core.requirements import UploadsNotCollected
from caslake.core.write_options import WriteOptions
from caslake.errors import CaslakeError
from caslake.format.keys import POINTER_KEY
from caslake.format.properties import group_commit
from caslake.store.base import ObjectStore


@dataclass(frozen=True)
class CommitResult:
    """What one operation did, and what it cost in store requests and bytes.

    ``requests`` is the store's counter delta over the operation (request kinds,
    plus ``bytes_in``/``bytes_out``); ``bytes_in``/``bytes_out`` repeat the byte
    counts as fields.

    Examples:
        >>> import caslake, pyarrow as pa
        >>> t = caslake.create_table('memory://', pa.schema([('id', pa.int64())]))
        >>> res = t.append(pa.table({'id': [1, 2]}))
        >>> (res.version, res.rows_added)
        (1, 2)
    """

    version: int
    commit_id: str
    operation: str
    attempts: int
    files_added: int = 0
    rows_added: int = 0
    files_removed: int = 0
    rows_deleted: int = 0
    tombstones_added: int = 0
    noop: bool = False
    requests: dict[str, int] = field(default_factory=dict)
    bytes_in: int = 0
    bytes_out: int = 0
    # Group commit: how many writers' commits the version applied (0: a plain commit).
    intents_applied: int = 0


_log = logging.getLogger("caslake.table")
#: The key of :meth:`TableContext.meter`'s clock reading (ms since the epoch).
STARTED_AT_MS = "started_at_ms"


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


class TableContext:
    """A table handle's state, as operations below the ``Table`` facade see it.

    ``snapshot`` is the version the handle last saw; only :func:`run_operation`
    (after a commit) and :meth:`refresh` move it."""

    def __init__(self, store: ObjectStore, snapshot: Snapshot, *,
                 io: MetadataIO | None = None, write_options: WriteOptions | None = None,
                 commit_policy: CommitPolicy | None = None,
                 pointer_key: str = POINTER_KEY,
                 now_ms: Callable[[], int] = _wall_clock_ms) -> None:
        self.store = store
        self.pointer_key = pointer_key  # the ref this handle reads and commits to
        self.io = io or MetadataIO(store, pointer_key=pointer_key)
        self.io.remember(snapshot.key, snapshot.manifest)
        self.footers = FooterCache()
        self.tombstones = TombstoneCache()
        self.write_options = write_options or WriteOptions()
        self.commit_policy = commit_policy or CommitPolicy()
        self.now_ms = now_ms
        self._snapshot = snapshot
        # Called with each new version right after an operation commits it, in the
        # same call (e.g. exports registered from a layer above).  A hook's error is
        # logged, never raised: the commit has landed.
        self.on_commit: list[Callable[[Snapshot], None]] = []

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    def _set_snapshot(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot

    def refresh(self) -> Snapshot:
        """Read the ref's pointer; the latest version becomes the handle's snapshot."""
        self._snapshot = self.io.latest(self.pointer_key)
        return self._snapshot

    def meter(self) -> dict[str, int]:
        """The store's counters now, and the clock (``STARTED_AT_MS``): pass as
        ``started`` to :func:`run_operation` so the result counts everything the
        operation did since (planning, uploads), and so its commit is refused if gc
        collected objects uploaded after it began (:class:`UploadsNotCollected`).
        Take it before the operation's first upload."""
        return {**self.store.counters.snapshot(), STARTED_AT_MS: self.now_ms()}


def _cost(ctx: TableContext, started: dict[str, int]) -> dict[str, int]:
    now = ctx.store.counters.snapshot()
    return {k: now.get(k, 0) - started.get(k, 0) for k in now}


def _guarded(prepare: Callable[[Snapshot], Changes | None], io: MetadataIO,
             guard: UploadsNotCollected | None) -> Callable[[Snapshot], Changes | None]:
    """``prepare``, refusing (before the manifest and pointer writes) a commit that adds
    objects once gc may have collected uploads of this operation.  A commit adding
    nothing (gc's marker, properties, a schema change) references no upload."""
    if guard is None:
        return prepare

    def checked(base: Snapshot) -> Changes | None:
        changes = prepare(base)
        if changes is not None and (changes.add_files or changes.add_tombstones):
            guard.validate(base, io)
        return changes

    return checked


def after_commit(ctx: TableContext, snapshot: Snapshot) -> None:
    """Run the handle's after-commit hooks on a version that has just committed."""
    for hook in ctx.on_commit:
        name = getattr(hook, "__name__", hook)
        try:
            hook(snapshot)
        except CaslakeError as e:
            # The commit stands whatever a hook does; say so and go on.  A typed
            # error is an expected refusal (an export the table cannot take now):
            # one line naming it and its remedy, no traceback.
            _log.error("%s failed after version %s of %s (the commit stands): %s: %s",
                       name, snapshot.version, ctx.store.uri, type(e).__name__,
                       " ".join(str(e).split()))
        except Exception:  # a bug in the hook: keep its traceback
            _log.exception("after-commit hook %s failed on version %s of %s (the commit "
                           "stands)", name, snapshot.version, ctx.store.uri)


def run_operation(ctx: TableContext, operation: str,
                  prepare: Callable[[Snapshot], Changes | None], *,
                  requirements: Sequence[Requirement] = (), started: dict[str, int],
                  commit_id: str | None = None, group: GroupWrite | None = None
                  ) -> CommitResult:
    """Commit ``prepare`` (files already uploaded) under ``requirements``, move the
    handle to the version it landed as (or the base, for a no-op) and report.

    What the commit did comes from the summary of the manifest that landed, so
    the report is right even when an earlier attempt's late-landing pointer
    write is the one that won.  ``group``: the commit may join a group commit
    (:mod:`caslake.core.group`); its report is then its own files and rows, and
    ``intents_applied`` how many commits the version held."""
    at = started.get(STARTED_AT_MS)
    guard = UploadsNotCollected(at, operation) if at is not None else None
    policy = ctx.commit_policy
    if group is not None:
        if at is not None:
            group = replace(group, started_at_ms=at)
        if not policy.group_commit and group_commit(ctx.snapshot.manifest.properties):
            policy = replace(policy, group_commit=True)  # the table asks every writer
    outcome = commit_with_retry(ctx.io, _guarded(prepare, ctx.io, guard),
                                requirements=requirements,
                                policy=policy, now_ms=ctx.now_ms,
                                commit_id=commit_id, pointer_key=ctx.pointer_key,
                                group=group)
    ctx._set_snapshot(outcome.snapshot)
    if not outcome.noop and outcome.snapshot.manifest.transaction is None:
        # (A multi-table transaction's staged version runs them once committed.)
        after_commit(ctx, outcome.snapshot)
    m = outcome.snapshot.manifest
    requests = _cost(ctx, started)
    counts = {} if outcome.noop else commit_counts(m)
    if m.intents and not outcome.noop:  # a group version: report our own part of it
        own = next(i for i in m.intents if i.commit_id == outcome.commit_id)
        counts = {"files_added": own.files, "rows_added": own.rows}
    return CommitResult(
        version=m.version, commit_id=outcome.commit_id, operation=operation,
        attempts=outcome.attempts, **counts, noop=outcome.noop,
        intents_applied=len(m.intents),
        requests=requests, bytes_in=requests.get("bytes_in", 0),
        bytes_out=requests.get("bytes_out", 0))


def adopt_ref_move(ctx: TableContext, snapshot: Snapshot) -> None:
    """The handle's ref was moved by a ref operation that commits no manifest of its
    own (a fast-forward): make ``snapshot`` the handle's, without a store call (a
    read failing after the move would report a move that happened as a failure)."""
    ctx._set_snapshot(snapshot)


def noop_result(ctx: TableContext, operation: str, snapshot: Snapshot, *,
                started: dict[str, int], commit_id: str | None = None,
                attempts: int = 0) -> CommitResult:
    """The report of an operation that found nothing to commit on ``snapshot`` (which
    becomes the handle's), after ``attempts`` commit attempts (rounds it lost)."""
    ctx._set_snapshot(snapshot)
    requests = _cost(ctx, started)
    return CommitResult(snapshot.version,
                        snapshot.manifest.commit_id if commit_id is None else commit_id,
                        operation, attempts, noop=True, requests=requests,
                        bytes_in=requests.get("bytes_in", 0),
                        bytes_out=requests.get("bytes_out", 0))
