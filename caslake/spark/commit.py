"""The driver side of a Spark write: one table commit per job, and abort.

Shared by the batch writer (:mod:`caslake.spark.write`) and the streaming
writer (:mod:`caslake.spark.stream`).  Tasks have already uploaded their data
files; nothing references them until the commit below lands.

Spark runs ``commit`` and ``abort`` in separate Python workers, each on a fresh
copy of the writer, so ``commit`` leaves a small state file on the driver's
disk (keyed by the commit id) while its outcome is open; ``abort`` reads it.

Abort rules (docs/protocol.md, "Spark writes"):

* If ``commit`` never ran, or ended in a provable failure (conflict, bad input),
  nothing of the job can be referenced: abort deletes its files.
* If ``commit`` raised :class:`CommitOutcomeUnknown` (or died half way),
  abort settles the outcome first, as the commit loop does, by reading the
  pointer back (:func:`caslake.core.commit.find_commit`): the commit id
  landed -> keep everything; the table passed the version the commit aimed at
  without it -> delete; not provable either way -> keep (orphans for GC).
  Abort never deletes a file of a commit that may have landed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from caslake.core import (
    STARTED_AT_MS,
    Changes,
    CommitResult,
    GroupWrite,
    MetadataIO,
    Snapshot,
    TableContext,
    find_commit,
    run_operation,
    settle,
    txn_applied,
    write_prepare,
    write_requirements,
)
from caslake.errors import (
    CommitConflict,
    CommitOutcomeUnknown,
    ConcurrentModification,
    StoreError,
    TableAlreadyExists,
    TableNotFound,
    UserInputError,
    VersionNotFound,
)
from caslake.format.manifest import DataFile
from caslake.format.partition import write_spec
from caslake.format.schema import TableSchema
from caslake.ops.delete import changes_for, write_delete
from caslake.ops.partition import plan_partition_replace, replaced_partitions
from caslake.store.base import ObjectStore
from caslake.store.options import StorageOptions
from caslake.table import create_table

log = logging.getLogger(__name__)


# --- the open-outcome record ------------------------------------------------------


@dataclass(frozen=True)
class OpenCommit:
    """What abort needs to settle a commit it did not run."""

    after: int  # the table version before the commit (-1: there was no table)
    aimed: int | None  # the highest version an attempt aimed at; None: not known


def _state_path(commit_id: str) -> str:
    return os.path.join(tempfile.gettempdir(), f"caslake-spark-commit-{commit_id}.json")


def _record(commit_id: str, state: OpenCommit | None) -> None:
    path = _state_path(commit_id)
    if state is None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump({"after": state.after, "aimed": state.aimed}, f)
    os.replace(tmp, path)


def open_commit(commit_id: str) -> OpenCommit | None:
    """The open outcome ``commit`` left for ``commit_id``, or None if it left none."""
    try:
        with open(_state_path(commit_id)) as f:
            doc = json.load(f)
        return OpenCommit(int(doc["after"]),
                          None if doc.get("aimed") is None else int(doc["aimed"]))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        return OpenCommit(-1, None)  # unreadable: treat as open, never as "never ran"


def forget_commit(commit_id: str) -> None:
    """Drop the record of ``commit_id`` (done: the outcome is settled)."""
    _record(commit_id, None)


# --- commit and abort ---------------------------------------------------------------


def stream_commit_id(app_id: str, batch_id: int, files: Iterable[str]) -> str:
    """A commit id that the commit and the abort of one micro-batch attempt derive
    alike (each runs on a fresh writer): the task files are fresh keys, so the id
    differs between attempts of the same batch."""
    h = hashlib.sha256(f"{app_id}\0{batch_id}\0".encode())
    for path in sorted(files):
        h.update(path.encode() + b"\0")
    return h.hexdigest()[:32]


def _delete(store: ObjectStore, files: Sequence[DataFile]) -> None:
    for f in files:
        with contextlib.suppress(StoreError):  # best effort: leftovers are orphans for GC
            store.delete(f.path)


def replace_partitions_prepare(ctx: TableContext, files: Sequence[DataFile], *,
                               commit_id: str, txn: tuple[str, int] | None,
                               params: dict[str, str]
                               ) -> Callable[[Snapshot], Changes | None] | None:
    """The ``prepare`` of a dynamic partition overwrite (Spark's
    ``partitionOverwriteMode=dynamic``): add ``files`` and delete every live row in
    the partitions they fill (:func:`caslake.ops.partition.plan_partition_replace`),
    other partitions untouched.  None when the table is unpartitioned: then, as in
    Delta, the overwrite replaces every row."""
    spec = write_spec(ctx.snapshot.manifest.partitioning)
    if spec is None:
        return None
    added = tuple(files)
    filled = replaced_partitions(added, spec)

    def prepare(base: Snapshot) -> Changes | None:
        plan = plan_partition_replace(ctx.io, ctx.footers, ctx.tombstones, base, spec, filled)
        refs, dropped, hidden = write_delete(ctx.io, plan, commit_id=commit_id, conditions=())
        changes = changes_for("overwrite", refs, dropped, added, dict(params), hidden)
        return None if changes is None else replace(changes, txn=txn)

    return prepare


def commit_files(store: ObjectStore, *, uri: str, storage_options: StorageOptions,
                 schema: TableSchema, files: Sequence[DataFile], start_version: int | None,
                 commit_id: str, overwrite: bool, txn: tuple[str, int] | None,
                 params: dict[str, str], started_at_ms: int | None = None,
                 dynamic: bool = False) -> CommitResult:
    """Commit ``files`` (written with ``schema``) as exactly one version, through the
    one operation runner (:func:`caslake.core.run_operation`) as every other write.

    ``start_version``: the version the write was planned against (None: there was
    no table; it is created first).  An overwrite conflicts with any commit since.
    ``txn``: if it already landed, no version is created and ``files`` are deleted
    (nothing can reference them).  ``started_at_ms``: when the first task began
    uploading; the commit is refused (``WriterOutlivedGc``) if gc has since collected
    objects uploaded after it.  ``dynamic`` (with ``overwrite``): replace only the
    partitions the files fill (:func:`replace_partitions_prepare`; any commit since
    ``start_version`` is a conflict, as for a full overwrite).  See the module
    docstring for the state kept for ``abort``."""
    after = -1 if start_version is None else start_version
    _record(commit_id, OpenCommit(after, None))
    operation = "overwrite" if overwrite else "append"
    try:
        required = start_version
        if start_version is None:
            try:
                create_table(uri, schema.to_arrow(), storage_options=storage_options or None)
                required = 0
            except TableAlreadyExists:
                if overwrite:
                    raise ConcurrentModification(
                        "the table was created by another writer during this overwrite",
                        help="re-run the overwrite") from None
        requirements = write_requirements(operation, schema, txn=txn,
                                          base_version=required if overwrite else None)
        io = MetadataIO(store)
        ctx = TableContext(store, io.latest(), io=io)
        prepare = (replace_partitions_prepare(ctx, files, commit_id=commit_id, txn=txn,
                                              params=params) if overwrite and dynamic else None)
        if prepare is None:
            prepare = write_prepare(operation, files, remove_all=overwrite, txn=txn,
                                    params=params)
        # The runner refuses the commit if gc collected uploads made after the first
        # task began (only when it adds files, as the requirement did here before).
        started = {} if started_at_ms is None else {STARTED_AT_MS: started_at_ms}
        # An append -- a stream's micro-batch with its txn too -- may join a group
        # commit (the table's commit.group property).
        group = (GroupWrite(operation, tuple(files), schema, None, txn)
                 if not overwrite else None)
        result = run_operation(ctx, operation, prepare, requirements=requirements,
                               started=started, commit_id=commit_id, group=group)
    except CommitOutcomeUnknown as e:
        _record(commit_id, OpenCommit(after, e.version))
        raise
    except (CommitConflict, UserInputError, TableNotFound, TableAlreadyExists):
        forget_commit(commit_id)  # provably not committed: abort may delete the files
        raise
    # Any other error leaves the record open with no known version: abort will keep
    # the files unless it finds the commit id.
    if result.noop:
        # Nothing to do (the txn already landed, or an append of nothing): no manifest
        # of ours is referenced, and the runner settled every pointer write of ours.
        _delete(store, files)
    forget_commit(commit_id)
    return result


def _recorded_by(io: MetadataIO, commit_id: str, txn: tuple[str, int]) -> bool | None:
    """Is ``commit_id`` the commit that recorded ``txn`` (the first version whose txns
    have it; txns only grow, so a binary search over versions finds it)?  None if
    the answer lies in versions no longer retained (expired by GC)."""
    head = io.latest()
    if not txn_applied(head.manifest.txns, txn):
        return False
    lo, hi = -1, head.version  # txn not applied at lo (or lo < 0), applied at hi
    expired = False
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            applied = txn_applied(io.at_version(head, mid).manifest.txns, txn)
        except VersionNotFound:
            applied, expired = False, True  # not retained: search the retained ones
        if applied:
            hi = mid
        else:
            lo = mid
    if io.at_version(head, hi).manifest.commit_id == commit_id:
        return True
    return None if expired else False


def abort_files(store: ObjectStore, files: Sequence[DataFile], *, commit_id: str,
                start_version: int | None, txn: tuple[str, int] | None = None) -> bool:
    """Delete the uploaded ``files`` of a failed job unless its commit may have landed.
    Returns True if they were deleted.

    ``start_version``: the version the write was planned against.  ``txn``: the
    job's txn, if any; it settles a commit that left no open record without
    trusting ``start_version`` (a streaming abort runs on a writer built later)."""
    state = open_commit(commit_id)
    io = MetadataIO(store)

    def check() -> bool | None:
        if state is not None:  # commit() ran and its outcome is open: settle it
            return find_commit(io, commit_id, after=state.after, aimed=state.aimed)
        # commit() never ran, or ended provably (committed, or not at all).
        if txn is not None:
            return _recorded_by(io, commit_id, txn)
        after = -1 if start_version is None else start_version
        return bool(find_commit(io, commit_id, after=after, aimed=None))

    landed: bool | None
    try:
        landed = settle(check, commit_id=commit_id,
                        version=state.aimed if state is not None else None)
    except TableNotFound:
        landed = False  # no table: no pointer, nothing of ours is referenced
    except CommitOutcomeUnknown as e:
        log.warning("caslake: keeping the data files of commit %s: cannot read the table "
                    "to settle its outcome (%s); they are orphans for GC if it did not land",
                    commit_id, e)
        return False
    if landed is None:
        log.warning("caslake: keeping the data files of commit %s: its pointer write may "
                    "still land (the table has not reached version %s); they are orphans "
                    "for GC if it does not", commit_id, state.aimed if state else None)
        return False
    forget_commit(commit_id)
    if landed:
        return False  # the commit is in the table: its files are data now
    _delete(store, files)
    return True
