"""The commit protocol: the only code that writes ``_latest_manifest`` after creation.

Steps (docs/protocol.md, "Commit"):

1. the caller has uploaded its immutable objects (data files, tombstones);
2. read the pointer and its ETag;
3. build the next manifest from that base (``prepare`` may re-plan or refuse);
4. write the manifest create-only under a fresh key;
5. CAS the pointer with ``If-Match``;
6. on 412/409, or on any error whose outcome is unknown, *settle*: read the
   pointer back and look for our commit id.  Never guess from the error.  If
   we lost, rebase and retry with capped, jittered backoff; after
   ``max_attempts`` raise :class:`CommitConflict`.  If the outcome stayed
   open (the pointer had not reached that version), the next attempt first
   checks whether that write landed late, so a commit never applies twice.

Invariant: a manifest this loop wrote is deleted only when the version slot
it aimed at is provably held by another commit, so nothing a landed commit
references is ever deleted.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from caslake.errors import (
    CommitConflict,
    CommitOutcomeUnknown,
    CorruptMetadata,
    NotFound,
    PreconditionFailed,
    StoreError,
    TableNotFound,
)
from caslake.format.keys import POINTER_KEY, new_token
from caslake.format.manifest import Pointer
from caslake.store.base import IfMatch, PutMode
from caslake.table.changes import Changes, apply_changes, check_requirements
from caslake.table.metadata_io import MetadataIO, Snapshot
from caslake.table.segments import write_segment


@dataclass(frozen=True)
class CommitPolicy:
    max_attempts: int = 50
    base_backoff_s: float = 0.005
    max_backoff_s: float = 0.5
    settle_attempts: int = 6


@dataclass(frozen=True)
class CommitOutcome:
    snapshot: Snapshot
    commit_id: str
    attempts: int
    noop: bool = False
    # Versions that an attempt of this commit aimed at and whose pointer write was
    # never settled (its outcome unknown, the pointer not yet past it).  Empty after
    # a win.  After a no-op, non-empty means a write of ours could still land, so the
    # caller must not delete the objects the commit would reference.
    unsettled: tuple[int, ...] = ()


def _now_ms() -> int:
    return int(time.time() * 1000)


def _backoff(policy: CommitPolicy, attempt: int) -> None:
    cap = min(policy.max_backoff_s, policy.base_backoff_s * (2 ** min(attempt, 20)))
    time.sleep(random.uniform(0, cap))


def landed(io: MetadataIO, commit_id: str, version: int) -> bool | None:
    """Did our commit land at ``version``?  True, False, or None if the pointer has
    not reached ``version`` (our write may still be in flight: nothing is provable)."""
    pointer, _ = io.read_pointer()
    if pointer.commit_id == commit_id:
        return True
    if pointer.version < version:
        return None
    head = io.snapshot_for_pointer(pointer)
    return io.at_version(head, version).manifest.commit_id == commit_id


def find_commit(io: MetadataIO, commit_id: str, *, after: int,
                aimed: int | None) -> bool | None:
    """Settle a commit from outside its commit loop (e.g. another process, later),
    knowing only its id, the version the table was at before it (``after``) and the
    highest version an attempt aimed at (``aimed``, None if unknown).

    True if some version after ``after`` carries ``commit_id``.  False if none does
    and the pointer has reached ``aimed``: every pointer write of the commit was
    conditional on the ETag of a pointer older than ``aimed``, so none can still
    apply.  None otherwise (a delayed write could still land: nothing is provable).
    """
    pointer, _ = io.read_pointer()
    if pointer.commit_id == commit_id:
        return True
    head = io.snapshot_for_pointer(pointer)
    if head.version > after:
        for snap in io.history(head, limit=head.version - after):
            if snap.manifest.commit_id == commit_id:
                return True
    if aimed is not None and head.version >= aimed:
        return False
    return None


def settle(check: Callable[[], bool | None], *, commit_id: str, version: int | None,
           policy: CommitPolicy = CommitPolicy()) -> bool | None:
    """Run ``check`` (:func:`landed` or :func:`find_commit`), retrying while the
    pointer cannot be read; after ``policy.settle_attempts`` failures raise
    :class:`CommitOutcomeUnknown`.  Never guesses from an error."""
    last: Exception | None = None
    for attempt in range(policy.settle_attempts):
        try:
            return check()
        except (StoreError, CorruptMetadata) as e:
            last = e
            _backoff(policy, attempt + 3)
    at = f"version {version}" if version is not None else "the commit"
    raise CommitOutcomeUnknown(f"could not read the pointer back to settle {at} ({last})",
                               commit_id=commit_id, version=version)


def _settle(io: MetadataIO, commit_id: str, version: int, policy: CommitPolicy) -> bool | None:
    return settle(lambda: landed(io, commit_id, version), commit_id=commit_id,
                  version=version, policy=policy)


def _own_version(io: MetadataIO, pointer: Pointer, commit_id: str,
                 versions: set[int]) -> Snapshot | None:
    """Our snapshot if a write of an earlier, unsettled attempt (aimed at one of
    ``versions``) has landed since; reading the pointer showed it at or past them."""
    head = io.snapshot_for_pointer(pointer)
    for v in sorted(versions):
        if v <= head.version:
            snap = io.at_version(head, v)
            if snap.manifest.commit_id == commit_id:
                return snap
    return None


def commit_with_retry(io: MetadataIO, prepare: Callable[[Snapshot], Changes | None], *,
                      policy: CommitPolicy = CommitPolicy(),
                      now_ms: Callable[[], int] = _now_ms,
                      on_attempt: Callable[[str, int], None] | None = None,
                      commit_id: str | None = None) -> CommitOutcome:
    """Commit the changes ``prepare(base)`` returns, rebasing until the pointer CAS wins.

    ``prepare`` returns None for "nothing to do" (no version is created).
    ``on_attempt(stage, attempt)`` is a hook for fault-injection tests.
    """
    store = io.store
    commit_id = commit_id or new_token()
    unsettled: set[int] = set()  # versions aimed at by attempts with an unknown outcome
    for attempt in range(1, policy.max_attempts + 1):
        try:
            pointer, etag = io.read_pointer()
        except TableNotFound:
            raise
        if unsettled:
            # A write of an earlier attempt may have landed late: committing again on
            # top of it would apply the changes twice.
            mine = _own_version(io, pointer, commit_id, unsettled)
            if mine is not None:
                return CommitOutcome(mine, commit_id, attempt)
            unsettled = {v for v in unsettled if v > pointer.version}
        base = io.snapshot_for_pointer(pointer)
        changes = prepare(base)
        if changes is None:
            return CommitOutcome(base, commit_id, attempt, noop=True,
                                 unsettled=tuple(sorted(unsettled)))
        check_requirements(base, changes)
        key, manifest = apply_changes(
            base, changes, commit_id=commit_id, token=new_token(), created_at_ms=now_ms(),
            load=partial(io.segment_entries, where=base.key),
            write=partial(write_segment, store, schema=base.manifest.schema,
                          version=base.version + 1))
        store.put(key, manifest.to_bytes(), mode=PutMode.CREATE)
        if on_attempt:
            on_attempt("manifest-written", attempt)
        new_pointer = Pointer(manifest.table_id, manifest.version, key, commit_id)
        try:
            store.put(POINTER_KEY, new_pointer.to_bytes(), mode=IfMatch(etag))
            won: bool | None = True
        except NotFound:
            raise TableNotFound(f"the table at {store.uri} was deleted during the commit"
                                ) from None
        except (PreconditionFailed, StoreError):
            # 412/409, or an error after which the write may or may not have applied.
            won = _settle(io, commit_id, manifest.version, policy)
        if won:
            io.remember(key, manifest)
            return CommitOutcome(Snapshot(manifest, key), commit_id, attempt)
        if won is False:
            # Another commit holds this version slot, so this manifest can never be
            # referenced: removing it now saves GC the work.  Best effort.
            with contextlib.suppress(StoreError):
                store.delete(key)
        else:
            unsettled.add(manifest.version)
        _backoff(policy, attempt)
    if unsettled:
        raise CommitOutcomeUnknown(
            f"gave up after {policy.max_attempts} attempts, and the pointer write of an "
            f"attempt at version {max(unsettled)} was never settled",
            commit_id=commit_id, version=max(unsettled))
    raise CommitConflict(f"gave up after {policy.max_attempts} attempts: other writers kept "
                         "winning the pointer", attempts=policy.max_attempts,
                         help="retry later, or lower the commit rate on this table")
