"""Conditional writes: the one module above ``store/`` that sends a create-only or
compare-and-swap put (docs/protocol.md, "Conditional writes").

Every object caslake writes is one of three kinds, and each kind has one call:

* **A new immutable object** under a key no other writer uses (a fresh token in
  its name): data files, manifests, segments, tombstones, dataset parts and
  markers.  :func:`put_new` / :func:`put_new_file` write it create-only, so a
  clash is :class:`~caslake.errors.AlreadyExists`, never a silent overwrite.
  The store retries a transient failure and recognises a copy of its own that
  landed (``store/retry.py``).  An error that escapes leaves at most an object
  nothing names, which gc collects.
* **A named record** that other writers may race to create: the table pointer
  at creation, a clone's pointer, branch heads, tags, clone holds, export
  publications, a dataset's first ``manifest.json``.  :func:`create_record` returns
  whether the record is ours.  A clean refusal is never ours, even with equal
  bytes (the same tag on the same version in the same millisecond has them);
  only after an unclear failure of our own is the key read back, and our bytes
  there mean ours.  If that cannot be settled: :class:`CommitOutcomeUnknown`.
* **A swap** of a mutable record, conditional on the ETag it was read with:
  the table pointer, branch heads, a tag turning into its tombstone, the
  format upgrade, a dataset's ``manifest.json``.  :func:`swap_record` reports
  ``SWAPPED``, ``LOST`` (the record moved: 412) or ``UNCLEAR`` (the put may
  have applied, or may still apply).  What "ours" means after ``LOST`` or
  ``UNCLEAR`` depends on the record (a commit looks for its commit id in the
  history; a tag drop looks for the tombstone), so the caller settles it, with
  :func:`settle` retrying its read-back while the store cannot be read, and
  :func:`record_holds` for records whose bytes identify the writer.

Invariant: no outcome is ever guessed from an error.  A caller learns SWAPPED,
a provable loss, or :class:`CommitOutcomeUnknown`.
"""

from __future__ import annotations

import enum
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from caslake.errors import (
    AlreadyExists,
    CommitOutcomeUnknown,
    CorruptMetadata,
    NotFound,
    PreconditionFailed,
    StoreError,
)
from caslake.store.base import IfMatch, ObjectStore, PutMode

T = TypeVar("T")

#: Attempts of :func:`create_record` after unclear failures before CommitOutcomeUnknown.
CREATE_ATTEMPTS = 4


@dataclass(frozen=True)
class CommitPolicy:
    """How hard a writer tries: attempts at the pointer, their jittered backoff, and
    the read-backs that settle an unclear outcome.

    Examples:
        >>> import caslake
        >>> caslake.CommitPolicy(max_attempts=10).max_attempts
        10
    """

    max_attempts: int = 50
    base_backoff_s: float = 0.005
    max_backoff_s: float = 0.5
    settle_attempts: int = 6
    # Group commit (docs/protocol.md, "Group commit"): an append that loses a race
    # publishes an intent and folds with the other writers.  Off by default while
    # it is new; ``intent_ttl_ms`` is an intent's deadline after its publication,
    # ``intent_margin_ms`` how close to it a folder stops applying it (liveness: room
    # for the writes; the deadline rule itself is on commit times), ``group_poll_s``
    # the base wait between polls and folds, ``group_fold_after_s`` how long a
    # writer only watches for a fold by others before it folds itself, and
    # ``group_sticky_s`` how long after a commit took the group path the process's
    # next appends to that table publish their intents at once.
    group_commit: bool = False
    intent_ttl_ms: int = 20_000
    intent_margin_ms: int = 2_000
    group_poll_s: float = 0.02
    group_fold_after_s: float = 0.25
    group_sticky_s: float = 5.0


def backoff(policy: CommitPolicy, attempt: int) -> None:
    """Sleep a capped, jittered, exponentially growing time before ``attempt``."""
    cap = min(policy.max_backoff_s, policy.base_backoff_s * (2 ** min(attempt, 20)))
    time.sleep(random.uniform(0, cap))


# --- new immutable objects ----------------------------------------------------------


def put_new(store: ObjectStore, key: str, data: bytes) -> str:
    """Write a new immutable object create-only and return its ETag."""
    return store.put(key, data, mode=PutMode.CREATE)


def put_new_file(store: ObjectStore, key: str, path: str) -> str:
    """Upload a finished local file as a new immutable object (create-only; the store
    may consume ``path``) and return its ETag."""
    return store.put_file(key, path, mode=PutMode.CREATE)


# --- named records ------------------------------------------------------------------


def record_holds(store: ObjectStore, key: str, data: bytes) -> bool | None:
    """Does ``key`` hold exactly ``data``?  None when it cannot be read (nothing is
    provable); a missing key is False."""
    try:
        return store.get(key).data == data
    except NotFound:
        return False
    except StoreError:
        return None


def create_record(store: ObjectStore, key: str, data: bytes, *, what: str,
                  attempts: int = CREATE_ATTEMPTS, commit_id: str | None = None,
                  version: int | None = None) -> bool:
    """Create the record ``key`` with ``data``: True if we created it, False if
    another writer's record is there.  Raises CommitOutcomeUnknown (naming
    ``commit_id`` and ``version`` when the record belongs to a commit, else the
    key) when an unclear failure cannot be settled within ``attempts``."""
    last: Exception | None = None
    for _ in range(attempts):
        try:
            store.put(key, data, mode=PutMode.CREATE)
            return True
        except AlreadyExists:
            # A clean refusal is someone else's record, however alike.  Only after
            # an unclear attempt of ours may the record be ours.
            if last is None:
                return False
        except StoreError as e:  # the create may or may not have applied
            last = e
        try:
            return store.get(key).data == data
        except NotFound:
            continue  # it did not apply: create again (a late landing is ours too)
        except StoreError as e:
            last = e
    raise CommitOutcomeUnknown(f"could not settle the creation of {what} ({last})",
                               commit_id=commit_id or key, version=version)


# --- swaps --------------------------------------------------------------------------


class Swap(enum.Enum):
    SWAPPED = "swapped"  # the record now holds our bytes
    LOST = "lost"  # the record had moved (412); an unclear earlier try may still be ours
    UNCLEAR = "unclear"  # the put may have applied, or may still apply


@dataclass(frozen=True)
class SwapResult:
    outcome: Swap
    etag: str | None = None  # the new ETag when SWAPPED
    error: StoreError | None = None  # why, when not SWAPPED

    def __bool__(self) -> bool:
        return self.outcome is Swap.SWAPPED


def swap_record(store: ObjectStore, key: str, data: bytes, etag: str) -> SwapResult:
    """Replace the record ``key`` with ``data`` if its ETag is still ``etag``.
    Raises NotFound if the record is gone."""
    try:
        return SwapResult(Swap.SWAPPED, store.put(key, data, mode=IfMatch(etag)))
    except NotFound:
        raise
    except PreconditionFailed as e:
        return SwapResult(Swap.LOST, error=e)
    except StoreError as e:  # PutOutcomeUnknown, or a reply that never came
        return SwapResult(Swap.UNCLEAR, error=e)


def settle(check: Callable[[], T], *, commit_id: str, version: int | None,
           policy: CommitPolicy = CommitPolicy()) -> T:
    """Run ``check`` (a read-back that says whether a write of ours landed),
    retrying while the store cannot be read; after ``policy.settle_attempts``
    failures raise CommitOutcomeUnknown.  Never guesses from an error."""
    last: Exception | None = None
    for attempt in range(policy.settle_attempts):
        try:
            return check()
        except (StoreError, CorruptMetadata) as e:
            last = e
            backoff(policy, attempt + 3)
    at = f"version {version}" if version is not None else "the commit"
    raise CommitOutcomeUnknown(f"could not read the pointer back to settle {at} ({last})",
                               commit_id=commit_id, version=version)
