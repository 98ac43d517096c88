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
   ``max_attempts`` raise :class:`CommitConflict`.

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


def _settle(io: MetadataIO, commit_id: str, version: int, policy: CommitPolicy) -> bool | None:
    last: Exception | None = None
    for attempt in range(policy.settle_attempts):
        try:
            return landed(io, commit_id, version)
        except (StoreError, CorruptMetadata) as e:
            last = e
            _backoff(policy, attempt + 3)
    raise CommitOutcomeUnknown(
        f"could not read the pointer back to settle version {version} ({last})",
        commit_id=commit_id)


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
    for attempt in range(1, policy.max_attempts + 1):
        try:
            pointer, etag = io.read_pointer()
        except TableNotFound:
            raise
        base = io.snapshot_for_pointer(pointer)
        changes = prepare(base)
        if changes is None:
            return CommitOutcome(base, commit_id, attempt, noop=True)
        check_requirements(base, changes)
        key, manifest = apply_changes(base, changes, commit_id=commit_id, token=new_token(),
                                      created_at_ms=now_ms(), load=io.load_manifests)
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
        _backoff(policy, attempt)
    raise CommitConflict(f"gave up after {policy.max_attempts} attempts: other writers kept "
                         "winning the pointer", attempts=policy.max_attempts,
                         help="retry later, or lower the commit rate on this table")
