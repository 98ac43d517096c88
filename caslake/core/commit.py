"""The commit protocol: the only code that moves a table's pointer after creation.

The pointer is ``_latest_manifest`` for ``main`` (the default); the key is a
parameter so a ref can have its own.

Steps (docs/protocol.md, "Commit"):

1. the caller has uploaded its immutable objects (data files, tombstones);
2. read the pointer and its ETag;
3. validate the commit's requirements against that base (typed conflicts,
   :mod:`caslake.core.requirements`), then build the next manifest
   (``prepare`` may re-plan);
4. write the manifest create-only under a fresh key;
5. swap the pointer, conditional on the ETag it was read with
   (:func:`caslake.core.pointer.swap_record`);
6. on 412/409, or on any error whose outcome is unknown, *settle*: read the
   pointer back and look for our commit id.  Never guess from the error.  If
   we lost, rebase and retry with capped, jittered backoff; after
   ``max_attempts`` raise :class:`RetryBudgetExhausted`.  If the outcome stayed
   open (the pointer had not reached that version), the next attempt first
   checks whether that write landed late, so a commit never applies twice.

Invariant (no false failure): while an attempt's pointer write is unsettled,
every exit from the loop settles it first or raises
:class:`CommitOutcomeUnknown`; an error of a later step (a manifest or
tombstone PUT, a pointer GET, a conflict) is never reported while that write
may still land.

Invariant: a manifest this loop wrote is deleted only when the version slot
it aimed at is provably held by another commit, so nothing a landed commit
references is ever deleted.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar

from caslake.core.changes import Changes, Requirement, apply_changes
from caslake.core.group import (
    FOLDERS,
    STALL_S,
    GroupTrace,
    GroupWrite,
    Intent,
    IntentReader,
    fold_prepare,
    new_intent,
    note_contended,
    publish,
    recently_contended,
    remove_intent,
)
from caslake.core.metadata_io import MetadataIO, Snapshot
from caslake.core.multitable import mark_staged, resolve_base
from caslake.core.pointer import CommitPolicy, backoff, put_new, settle, swap_record
from caslake.core.segments import write_segment
from caslake.errors import (
    CommitConflict,
    CommitOutcomeUnknown,
    NotFound,
    RetryBudgetExhausted,
    StoreError,
    TableNotFound,
    TxnAlreadyApplied,
)
from caslake.format.keys import new_token
from caslake.format.manifest import DataFile, Pointer, SegmentRef

T = TypeVar("T")
#: A watcher's poll interval doubles from ``group_poll_s`` up to 2**this times it,
#: or to WATCH_SHARE_S times the number of live intents, if that is longer.
WATCH_BACKOFF = 3
WATCH_SHARE_S = 0.02


@dataclass(frozen=True)
class CommitOutcome:
    snapshot: Snapshot
    commit_id: str
    attempts: int
    noop: bool = False
    # Versions that an attempt of this commit aimed at and whose pointer write was
    # never settled.  commit_with_retry settles them before it returns, so this is
    # always empty; a non-empty value would mean a write of ours could still land
    # and the caller must not delete the objects the commit would reference.
    unsettled: tuple[int, ...] = ()


def _now_ms() -> int:
    return int(time.time() * 1000)


def landed(io: MetadataIO, commit_id: str, version: int,
           pointer_key: str | None = None) -> Snapshot | bool | None:
    """Did our commit land at ``version``?  The snapshot there if it holds our commit
    (our manifest, or a group fold that applied our intent), False if another commit
    without ours holds it, None if the pointer has not reached ``version`` (our
    write may still be in flight: nothing is provable)."""
    pointer, _ = io.read_pointer(pointer_key)
    head = io.snapshot_for_pointer(pointer)
    if pointer.version < version:
        return None
    snap = io.at_version(head, version)
    return snap if snap.manifest.has_commit(commit_id) else False


def find_commit(io: MetadataIO, commit_id: str, *, after: int,
                aimed: int | None, pointer_key: str | None = None) -> bool | None:
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
            if snap.manifest.has_commit(commit_id):
                return True
    if aimed is not None and head.version >= aimed:
        return False
    return None


def _settle(io: MetadataIO, commit_id: str, version: int, policy: CommitPolicy,
            pointer_key: str) -> Snapshot | bool | None:
    return settle(lambda: landed(io, commit_id, version, pointer_key), commit_id=commit_id,
                  version=version, policy=policy)


def _own_version(io: MetadataIO, pointer: Pointer, commit_id: str,
                 versions: set[int]) -> Snapshot | None:
    """Our snapshot if a write of an earlier, unsettled attempt (aimed at one of
    ``versions``) has landed since; reading the pointer showed it at or past them."""
    head = io.snapshot_for_pointer(pointer)
    for v in sorted(versions):
        if v <= head.version:
            snap = io.at_version(head, v)
            if snap.manifest.has_commit(commit_id):
                return snap
    return None


def _applied_since(io: MetadataIO, pointer: Pointer, commit_id: str,
                   after: int) -> Snapshot | None:
    """Our snapshot if a version after ``after`` holds our commit (a group fold by
    another writer applied our intent), else None."""
    head = io.snapshot_for_pointer(pointer)
    if head.version <= after:
        return None
    for snap in io.history(head, limit=head.version - after):
        if snap.manifest.has_commit(commit_id):
            return snap
    return None


def _settle_open(io: MetadataIO, pointer_key: str, commit_id: str, unsettled: set[int],
                 policy: CommitPolicy, cause: BaseException | None) -> Snapshot | None:
    """Settle the attempts whose pointer writes are still open before the loop exits.

    Our snapshot if one of them landed; None if none can land any more (the
    pointer has reached every version they aimed at without our commit id: each
    was conditional on an older ETag).  Otherwise (the pointer cannot be read, or
    has not reached them) raise :class:`CommitOutcomeUnknown`: reporting
    ``cause`` instead would be a false failure if the write lands later."""
    aimed = max(unsettled)

    def check() -> Snapshot | bool | None:
        pointer, _ = io.read_pointer(pointer_key)
        mine = _own_version(io, pointer, commit_id, unsettled)
        if mine is not None:
            return mine
        return False if pointer.version >= aimed else None

    found = settle(check, commit_id=commit_id, version=aimed, policy=policy)
    if isinstance(found, Snapshot):
        return found
    if found is False:
        return None
    why = f" (then: {cause})" if cause is not None else ""
    raise CommitOutcomeUnknown(
        f"the pointer write of an attempt at version {aimed} was never settled and may "
        f"still land{why}", commit_id=commit_id, version=aimed) from cause


def commit_with_retry(io: MetadataIO, prepare: Callable[[Snapshot], Changes | None], *,
                      requirements: Sequence[Requirement] = (),
                      policy: CommitPolicy = CommitPolicy(),
                      now_ms: Callable[[], int] = _now_ms,
                      on_attempt: Callable[[str, int], None] | None = None,
                      commit_id: str | None = None,
                      pointer_key: str | None = None,
                      group: GroupWrite | None = None) -> CommitOutcome:
    """Commit the changes ``prepare(base)`` returns, rebasing until the pointer CAS wins.

    Before ``prepare`` runs on a base, every one of ``requirements`` is validated
    against it (a typed :class:`CommitConflict` when one fails; a
    :class:`TxnAlreadyApplied` makes the commit a no-op).  ``prepare`` returns
    None for "nothing to do" (no version is created).  ``pointer_key``: the ref
    to commit to (default: ``io.pointer_key``, ``_latest_manifest`` for main).
    ``on_attempt(stage, attempt)`` is a hook for fault-injection tests.

    ``group``: the commit is an append of uploaded files (``prepare``'s changes do
    not depend on the base); with ``policy.group_commit``, after it loses a race it
    publishes an intent and folds with the other writers (:mod:`caslake.core.group`).

    While the pointer write of an attempt is unsettled, no exit from the loop --
    a win, a no-op, an error of a later step, an exhausted budget -- reports
    anything but the truth: it settles that write first (our commit landed: a
    win) or raises :class:`CommitOutcomeUnknown`.
    """
    key = pointer_key or io.pointer_key
    commit_id = commit_id or new_token()
    unsettled: set[int] = set()  # versions aimed at by attempts with an unknown outcome
    joined: _Joined | None = None
    attempt = 0
    trace = GroupTrace(io.store)
    began = (time.perf_counter(), io.store.counters.snapshot()) if trace.path else None
    outcome = "error"
    try:
        if (group is not None and policy.group_commit
                and recently_contended(io.store.uri, key, policy.group_sticky_s)):
            # Contended lately: the classic swap would mostly lose (and spend the
            # key's swap rate); publish the intent at once.
            joined = _join_group(io, key, group, requirements, commit_id, policy, now_ms,
                                 trace)
        while joined is not None or attempt < policy.max_attempts:
            if joined is not None and joined.closing(now_ms()):
                outcome = "deadline"
                return _leave_group(io, key, joined, commit_id, policy, now_ms, attempt)
            if joined is not None and joined.watching():
                # Wait for another writer's fold before folding ourselves.
                mine = _watch(io, key, joined, commit_id, now_ms)
                if mine is not None:
                    outcome = "folded-by-other"
                    return CommitOutcome(mine, commit_id, max(attempt, 1))
                continue
            attempt += 1
            if joined is not None:
                trace.begin()
            else:
                trace.restart()
            try:
                done = _attempt(io, key, joined.prepare if joined else prepare,
                                joined.requirements if joined else requirements, policy,
                                now_ms, on_attempt, commit_id, attempt, unsettled,
                                since=joined.since if joined else None)
                if joined is not None:
                    trace.mark("write")
                    trace.emit("fold", won=done is not None, batch=joined.reader.batch,
                               listed=joined.reader.listed, pending=joined.reader.pending_seen)
                    joined.reader.batch = 0
                else:
                    trace.mark("plain")
                if done is not None:
                    outcome = "group" if joined is not None else "plain"
            except CommitOutcomeUnknown:
                if joined is None:
                    raise
                # On the group path the deadline settles the commit (_leave_group): an
                # unknown here would name a version that later folds may pass.
                _group_pause(policy, joined)
                continue
            except Exception as err:  # not BaseException: a SimulatedCrash is a dead process
                if isinstance(err, CommitConflict) and not err.attempts:
                    err.attempts = attempt  # a requirement failed on this attempt's base
                if joined is not None and not isinstance(err, CommitConflict):
                    # Our intent may still be folded: only the deadline settles it.
                    _group_pause(policy, joined)
                    continue
                if not unsettled:
                    raise
                mine = _settle_open(io, key, commit_id, unsettled, policy, err)
                if mine is not None:
                    return CommitOutcome(mine, commit_id, attempt)
                raise  # provably nothing of ours can land: the error is the outcome
            if done is not None:
                if done.noop and unsettled:
                    mine = _settle_open(io, key, commit_id, unsettled, policy, None)
                    if mine is not None:
                        return CommitOutcome(mine, commit_id, attempt)
                    return CommitOutcome(done.snapshot, commit_id, attempt, noop=True)
                return done
            if joined is None and group is not None and policy.group_commit:
                joined = _join_group(io, key, group, requirements, commit_id, policy, now_ms,
                                     trace)
                continue  # watch, then fold: the version we lost to may not hold us
            if joined is not None:
                _group_pause(policy, joined)
            else:
                backoff(policy, attempt)
    finally:
        if joined is not None:
            remove_intent(io, joined.intent)
            # The window runs from the end of the group commit, not from its join: one
            # that waited longer than the window would else swap alone next, and a
            # plain winner's swaps make every fold lose (seen at 64 writers).
            note_contended(io.store.uri, key)
        if began is not None:
            trace.mark("cleanup")
            now = io.store.counters.snapshot()
            trace.emit("commit", ms=(time.perf_counter() - began[0]) * 1000, outcome=outcome,
                       attempts=attempt, requests={k: n - began[1].get(k, 0)
                                                   for k, n in now.items()
                                                   if not k.startswith("bytes")})
    if unsettled:
        mine = _settle_open(io, key, commit_id, unsettled, policy, None)
        if mine is not None:
            return CommitOutcome(mine, commit_id, policy.max_attempts)
    raise RetryBudgetExhausted(f"gave up after {policy.max_attempts} attempts: other writers "
                               "kept winning the pointer", attempts=policy.max_attempts)


@dataclass
class _Joined:
    """A commit on the group path: its intent, the fold that replaces its
    ``prepare``, and the version after which its commit may appear."""

    intent: Intent
    reader: IntentReader
    prepare: Callable[[Snapshot], Changes | None]
    requirements: tuple[Requirement, ...]
    since: int

    margin_ms: int
    fold_at: float  # monotonic time from which this writer may fold itself
    poll_s: float
    polls: int = 0
    folding: bool = False
    seen: int = -1  # the last version seen that applied intents (group progress)
    moved_at: float = field(default_factory=time.monotonic)  # when that was seen
    ranked: tuple[int, int] = (-1, 0)  # (seen, allowed folders) of the last rank check

    def closing(self, now: int) -> bool:
        return now >= self.intent.deadline_ms - self.margin_ms

    def watching(self) -> bool:
        """Still only waiting for another writer's fold to apply our intent."""
        return not self.folding

    def may_fold(self, head: Snapshot, now_ms: int) -> bool:
        """After a watch round saw ``head``: fold from now on?  Once the fold time
        has passed, if our intent is among the oldest live ones (a LIST, once per
        version that applied intents): the ``FOLDERS`` oldest, one more for every
        ``STALL_S`` without such a version (the writers ahead may have died, or
        keep losing the pointer).  Slowly: every added folder reads every intent,
        and on an overloaded store a herd of folders only makes each fold slower."""
        now = time.monotonic()
        if head.manifest.intents and head.version != self.seen:
            self.seen, self.moved_at = head.version, now
        if now < self.fold_at:
            return False
        allowed = FOLDERS + int((now - self.moved_at) / STALL_S)
        if self.ranked == (self.seen, allowed):
            return False  # ranked since the last progress: wait for the next
        self.ranked = (self.seen, allowed)
        return self.reader.rank(self.intent.key, now_ms) < allowed


def _watch(io: MetadataIO, key: str, joined: _Joined, commit_id: str,
           now_ms: Callable[[], int]) -> Snapshot | None:
    """One watch round: our snapshot if a version holds our commit; else None, at once
    if this writer should now fold (:meth:`_Joined.may_fold`), or after a pause that
    backs off from ``poll_s`` to 8 times it, or to ``WATCH_SHARE_S`` per live intent
    if longer (never past the fold time).  A store
    error is only a round without news: the deadline still settles us."""
    trace = joined.reader.trace
    trace.restart()
    with contextlib.suppress(StoreError):
        pointer, _ = io.read_pointer(key)
        mine = _applied_since(io, pointer, commit_id, joined.since)
        trace.mark("watch")
        if mine is not None:
            return mine
        if joined.may_fold(io.snapshot_for_pointer(pointer), now_ms()):
            joined.folding = True
            return None
    # The cap grows with the live intents the last rank LIST showed: however many
    # writers watch, together they poll the pointer about 1 / WATCH_SHARE_S times a s
    # (at 64 writers and 10 ms each, polls were 14.7 of 24 requests per commit).
    cap = max(joined.poll_s * 2 ** WATCH_BACKOFF, joined.reader.listed * WATCH_SHARE_S)
    wait = min(cap, joined.poll_s * 2 ** min(joined.polls, 16))
    joined.polls += 1
    pause = random.uniform(wait / 2, wait)
    if time.monotonic() < joined.fold_at:
        pause = min(pause, joined.fold_at - time.monotonic())
    time.sleep(max(0.0, pause))
    trace.mark("wait")
    return None


@dataclass(frozen=True)
class _OwnWrite:
    """Our own intent's checks, as a commit requirement of every fold."""

    write: GroupWrite

    def validate(self, base: Snapshot, io: MetadataIO) -> None:
        self.write.check(base, io)


def _join_group(io: MetadataIO, key: str, group: GroupWrite,
                requirements: Sequence[Requirement], commit_id: str, policy: CommitPolicy,
                now_ms: Callable[[], int], trace: GroupTrace) -> _Joined:
    """Publish our intent and switch to folding.  An intent whose PUT failed may
    still have landed, so the commit stays on the group path either way (its own
    folds carry it; others may too)."""
    pointer, _ = io.read_pointer(key)
    reader = IntentReader(io, key, policy.intent_margin_ms, trace)
    intent = new_intent(key, group, commit_id=commit_id, table_id=pointer.table_id,
                        now_ms=now_ms(), ttl_ms=policy.intent_ttl_ms)
    publish(io, intent)
    trace.mark("join")
    note_contended(io.store.uri, key)
    # Writers whose intents waited longest fold first; a fold applies the others'.
    fold_at = time.monotonic() + policy.group_fold_after_s * random.uniform(1.0, 1.5)
    return _Joined(intent, reader, fold_prepare(io, intent, reader, now_ms),
                   (*requirements, _OwnWrite(group)), pointer.version, policy.intent_margin_ms,
                   fold_at, policy.group_poll_s)


def _expiry_marker(intent: Intent, base: Snapshot) -> Changes:
    """A version that changes no rows and records that ``intent`` expired unapplied."""
    return Changes("intent_expired", params={"intent": intent.id})


def _group_pause(policy: CommitPolicy, joined: _Joined) -> None:
    """A short jittered wait between folds, longer when more intents are pending
    (so few writers fold at once and the store's LIST/GET load stays bounded)."""
    cap = min(policy.max_backoff_s, policy.group_poll_s * (1 + joined.reader.pending_seen / 4))
    joined.reader.trace.restart()
    time.sleep(random.uniform(policy.group_poll_s / 4, cap))
    joined.reader.trace.mark("wait")


def _leave_group(io: MetadataIO, key: str, joined: _Joined, commit_id: str,
                 policy: CommitPolicy, now_ms: Callable[[], int], attempt: int) -> CommitOutcome:
    """Our intent's deadline is near and no version holds it yet: settle it by the
    deadline rule.  Once the pointer shows a version created at or after the
    deadline, no later version can apply it; if nobody moves the pointer, we move
    it ourselves with a version that changes no rows."""
    deadline = joined.intent.deadline_ms
    failures = 0
    while True:
        try:
            pointer, _ = io.read_pointer(key)
            folded = _applied_since(io, pointer, commit_id, joined.since)
        except StoreError as e:
            failures += 1
            if failures >= policy.settle_attempts:
                raise CommitOutcomeUnknown(
                    f"could not read the pointer back to settle group-commit intent "
                    f"{joined.intent.id} ({e})", commit_id=commit_id, version=None) from e
            backoff(policy, failures + 3)
            continue
        if folded is not None:
            return CommitOutcome(folded, commit_id, attempt)
        head = io.snapshot_for_pointer(pointer)
        if head.manifest.created_at_ms >= deadline:
            raise RetryBudgetExhausted(
                "no version applied this commit's group intent before its deadline "
                "(other writers kept the pointer busy); nothing was committed",
                attempts=attempt)
        now = now_ms()
        if now < deadline:
            time.sleep(min(0.05, (deadline - now) / 1000))
            continue
        # The marker's own outcome does not matter: the loop reads the pointer again.
        with contextlib.suppress(CommitConflict, CommitOutcomeUnknown, StoreError):
            _attempt(io, key, partial(_expiry_marker, joined.intent), (), policy, now_ms,
                     None, new_token(), attempt, set())
        attempt += 1


def _attempt(io: MetadataIO, key: str, prepare: Callable[[Snapshot], Changes | None],
             requirements: Sequence[Requirement], policy: CommitPolicy,
             now_ms: Callable[[], int], on_attempt: Callable[[str, int], None] | None,
             commit_id: str, attempt: int, unsettled: set[int],
             since: int | None = None) -> CommitOutcome | None:
    """One attempt: the outcome if it is final, None if it lost the race (``unsettled``
    gains the version it aimed at when its pointer write stayed open).  ``since``
    (group commit): a version after it may already hold our commit, folded by
    another writer."""
    store = io.store
    pointer, etag = io.read_pointer(key)
    if since is not None:
        folded = _applied_since(io, pointer, commit_id, since)
        if folded is not None:
            return CommitOutcome(folded, commit_id, attempt)
    if unsettled:
        # A write of an earlier attempt may have landed late: committing again on
        # top of it would apply the changes twice.
        mine = _own_version(io, pointer, commit_id, unsettled)
        if mine is not None:
            return CommitOutcome(mine, commit_id, attempt)
        unsettled.intersection_update(v for v in set(unsettled) if v > pointer.version)
    # A staged head of a multi-table transaction: build on it once decided.
    base = resolve_base(io, io.snapshot_for_pointer(pointer), now_ms=now_ms)
    if (policy.group_commit and len(base.manifest.intents) > 1
            and now_ms() - base.manifest.created_at_ms < policy.group_sticky_s * 1000):
        # Others are group-committing here now: this process's next appends join
        # them at once rather than swap alone (a plain winner's swaps make folds
        # lose).  One intent may be a lone sticky writer's own: not contention.
        note_contended(store.uri, key)
    try:
        for requirement in requirements:
            requirement.validate(base, io)
    except TxnAlreadyApplied:
        return CommitOutcome(base, commit_id, attempt, noop=True)
    changes = prepare(base)
    if changes is None:
        return CommitOutcome(base, commit_id, attempt, noop=True)
    written: list[SegmentRef] = []

    def write(files: Sequence[DataFile]) -> SegmentRef:
        ref = write_segment(store, files, schema=base.manifest.schema, version=base.version + 1,
                            partitioning=changes.partitioning or base.manifest.partitioning)
        written.append(ref)
        return ref

    manifest_key, manifest = apply_changes(
        base, changes, commit_id=commit_id, token=new_token(), created_at_ms=now_ms(),
        load=partial(io.segment_entries, where=base.key), write=write)
    manifest = mark_staged(manifest, changes)  # a multi-table transaction's part
    # A segment this attempt wrote and then folded into a bigger one in the same
    # call was never referenced by any manifest: remove it now (best effort; gc
    # would otherwise keep it until it is older than its fence).
    kept = {s.manifest for s in manifest.segments}
    for ref in written:
        if ref.manifest not in kept:
            with contextlib.suppress(StoreError):
                store.delete(ref.manifest)
    put_new(store, manifest_key, manifest.to_bytes())
    if on_attempt:
        on_attempt("manifest-written", attempt)
    # The table's format version is its pointer's: carried forward, never lowered.
    new_pointer = Pointer(manifest.table_id, manifest.version, manifest_key, commit_id,
                          format_version=max(pointer.format_version, manifest.format_version))
    try:
        swapped = swap_record(store, key, new_pointer.to_bytes(), etag)
    except NotFound:
        raise TableNotFound(f"the table at {store.uri} was deleted during the commit"
                            ) from None
    # LOST (412/409) is settled too: an unclear try of the store's own may have landed.
    won = True if swapped else _settle(io, commit_id, manifest.version, policy, key)
    if won is True or (isinstance(won, Snapshot) and won.key == manifest_key):
        io.remember(manifest_key, manifest)
        return CommitOutcome(Snapshot(manifest, manifest_key), commit_id, attempt)
    if isinstance(won, Snapshot) or won is False:
        # Another commit holds this version slot (a group fold there may have applied
        # our intent), so this manifest can never be referenced: removing it now
        # saves GC the work.  Best effort.
        with contextlib.suppress(StoreError):
            store.delete(manifest_key)
        if isinstance(won, Snapshot):
            return CommitOutcome(won, commit_id, attempt)
    else:
        unsettled.add(manifest.version)
    return None
