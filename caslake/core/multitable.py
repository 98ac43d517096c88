"""Multi-table transactions, the core's part (docs/protocol.md, "Multi-table
transactions"): the decision record's writes, what a writer builds on when the
head it meets is a staged version, and the atomic snapshot of several tables.

Owns:

* :func:`create_txn_record` / :func:`decide` -- the record ``_txn/<id>.json``
  under the coordinator table: created ``pending`` create-only, then one
  conditional swap to ``committed`` or ``aborted`` (through
  :mod:`caslake.core.pointer`), an unclear reply settled by reading it back;
* :func:`resolve_base` -- the commit loop's hook: a staged head is built on if
  committed, replaced by its parent's contents if aborted, and waited for while
  pending until its deadline, after which the writer aborts it;
* :func:`consistent_heads` -- one version per table that holds every
  transaction whole or not at all.

What readers see of one table (:meth:`MetadataIO.visible`) lives with the read
path in :mod:`caslake.core.metadata_io`; the API is :mod:`caslake.ops.multi`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields, replace

from caslake.core.changes import Changes
from caslake.core.metadata_io import MetadataIO, Snapshot
from caslake.core.pointer import CommitPolicy, Swap, backoff, put_new, swap_record
from caslake.core.siblings import store_at
from caslake.errors import CommitOutcomeUnknown, NotFound, StoreError, TransactionAborted
from caslake.format.manifest import (
    ABORTED,
    COMMITTED,
    PENDING,
    Manifest,
    TransactionRef,
    TxnRecord,
    parse_txn_record,
    txn_record_key,
)
from caslake.store.base import ObjectStore

#: Longest sleep between two reads of a pending record by a waiting writer.
WAIT_POLL_S = 0.05
#: Unclear swaps of a writer aborting an expired transaction before it gives up.
ABORT_ATTEMPTS = 8
#: Rounds of pointer reads :func:`consistent_heads` tries before it settles for
#: one round checked against the records alone.
CUT_ROUNDS = 8


def _now_ms() -> int:
    return int(time.time() * 1000)


# --- the record ------------------------------------------------------------------


def read_record(store: ObjectStore, txn_id: str) -> tuple[TxnRecord, str]:
    """The record of ``txn_id`` under ``store``'s table, and its ETag."""
    key = txn_record_key(txn_id)
    res = store.get(key)
    return parse_txn_record(res.data, key), res.etag


def create_txn_record(store: ObjectStore, record: TxnRecord) -> str:
    """Create ``record`` (pending) create-only under the coordinator; its ETag.  The
    id is a fresh token, so a clash is an error, never another writer's record."""
    return put_new(store, txn_record_key(record.id), record.to_bytes())


def decide(store: ObjectStore, record: TxnRecord, etag: str,
           policy: CommitPolicy = CommitPolicy()) -> TxnRecord:
    """Swap the pending record (read with ``etag``) to ``record`` (committed or
    aborted) and return the decided record: ours, or the other decision that won
    (an abort by a writer after the deadline, when we commit).  An unclear reply
    is settled by reading the record back; still pending means our swap has not
    applied, so it is sent again with the same ETag (a late landing of the first
    try writes the same bytes).  Raises CommitOutcomeUnknown if it stays open."""
    last: Exception | None = None
    for attempt in range(policy.settle_attempts):
        try:
            res = swap_record(store, txn_record_key(record.id), record.to_bytes(), etag)
        except NotFound as e:
            last = e  # the record is gone (gc never removes a pending one): re-read
            res = None
        if res is not None and res.outcome is Swap.SWAPPED:
            return record
        try:
            now, etag = read_record(store, record.id)
        except (StoreError, NotFound) as e:
            last = e
            backoff(policy, attempt + 3)
            continue
        if now.state != PENDING:
            return now
    raise CommitOutcomeUnknown(
        f"could not settle the {record.state} decision of multi-table transaction "
        f"{record.id} ({last}); read its record to learn the outcome",
        commit_id=record.id)


def abort_pending(store: ObjectStore, txn_id: str, policy: CommitPolicy = CommitPolicy()
                  ) -> TxnRecord | None:
    """Abort ``txn_id`` if it is still pending: the decided record, or None if the
    record could not be read or swapped (it stays pending; the next writer after
    its deadline aborts it).  Never raises a store error."""
    try:
        record, etag = read_record(store, txn_id)
        if record.state != PENDING:
            return record
        return decide(store, replace(record, state=ABORTED), etag, policy)
    except (StoreError, CommitOutcomeUnknown):
        return None


def committed_or_raise(decided: TxnRecord) -> TxnRecord:
    """``decided`` if committed; TransactionAborted if a writer aborted it first."""
    if decided.state == COMMITTED:
        return decided
    raise TransactionAborted(
        f"multi-table transaction {decided.id} passed its deadline and another writer "
        "aborted it before it committed; nothing of it is visible",
        help="run the transaction again (with a longer ttl_ms if it is slow)")


# --- writers meeting a staged head -----------------------------------------------


def resolve_base(io: MetadataIO, base: Snapshot, *,
                 now_ms: Callable[[], int] = _now_ms) -> Snapshot:
    """What a commit builds on when the head it read is ``base`` (the commit loop's
    hook): ``base`` unless it is a staged version of a transaction that is not
    committed.  Aborted: ``base``'s number with its parent's contents
    (:meth:`MetadataIO.rolled_back`).  Pending: wait, polling the record, until it
    is decided or its deadline passes, then abort it ourselves (the swap's loser
    obeys the winner).  Free for a head without ``transaction``."""
    ref = base.manifest.transaction
    if ref is None:
        return base
    store = store_at(io.store, ref.record)
    failed = 0
    while True:
        record, etag = io.txn_record(ref)
        if record.state == COMMITTED:
            return base
        if record.state == ABORTED:
            return io.rolled_back(base)
        now = now_ms()
        if now < record.deadline_ms:
            time.sleep(random.uniform(0.2, 1.0) * min(WAIT_POLL_S,
                                                       (record.deadline_ms - now) / 1000))
            continue
        if etag is None:
            continue
        # Any outcome is fine: the loop reads the record again.
        res = swap_record(store, txn_record_key(ref.id),
                          replace(record, state=ABORTED).to_bytes(), etag)
        if res.outcome is Swap.UNCLEAR:
            failed += 1
            if failed >= ABORT_ATTEMPTS and res.error is not None:
                raise res.error  # the store keeps failing: this commit fails, typed
            time.sleep(random.uniform(0.2, 1.0) * WAIT_POLL_S)


# --- the atomic snapshot ---------------------------------------------------------


def _read_heads(ios: Sequence[MetadataIO]) -> list[Snapshot]:
    out = []
    for io in ios:
        pointer, _ = io.read_pointer()
        out.append(io.snapshot_for_pointer(pointer))
    return out


def consistent_heads(ios: Sequence[MetadataIO]) -> list[Snapshot]:
    """One version per table (``ios``: each table's metadata IO, ``main``) showing
    every multi-table transaction whole or not at all.

    Reads every pointer until two rounds agree (a double collect: the heads held
    together at one instant), then shows a staged head only if its record says
    committed and every one of these tables the record names is at or past its
    staged version; any other staged head reads as its parent (recursively).
    Without a staged head this costs two pointer GETs per table."""
    heads = _read_heads(ios)
    for _ in range(CUT_ROUNDS):
        again = _read_heads(ios)
        if [h.key for h in again] == [h.key for h in heads]:
            break
        heads = again
    else:
        heads = again
    uris = [io.store.uri.rstrip("/") for io in ios]
    at = {u: h.version for u, h in zip(uris, heads, strict=True)}
    shown: dict[str, bool] = {}
    states: dict[str, str] = {}
    out = []
    for io, head in zip(ios, heads, strict=True):
        ref = head.manifest.transaction
        if ref is not None:
            if ref.id not in shown:
                record, _ = io.txn_record(ref)
                states[ref.id] = record.state
                shown[ref.id] = record.state == COMMITTED and all(
                    p.version is None or at.get(p.uri.rstrip("/"), p.version) >= p.version
                    for p in record.participants)
            if states[ref.id] == ABORTED:
                head = io.visible(head)  # rolled back: its number, its parent's rows
            elif not shown[ref.id]:
                # Below a staged head every transaction is decided, and a committed
                # one was whole before anything was built on it.
                head = io.visible(io.parent(head))
        out.append(head)
    return out


# --- staged changes --------------------------------------------------------------


@dataclass(frozen=True)
class StagedChanges(Changes):
    """A commit's changes as a staged version of multi-table transaction
    ``transaction`` (its manifest carries the reference)."""

    transaction: TransactionRef | None = None


def stage(changes: Changes, ref: TransactionRef) -> StagedChanges:
    """``changes`` to be committed as a staged version of ``ref``'s transaction."""
    return StagedChanges(**{f.name: getattr(changes, f.name) for f in fields(Changes)},
                         transaction=ref)


def mark_staged(manifest: Manifest, changes: Changes) -> Manifest:
    """The manifest a commit of ``changes`` writes: a staged one for StagedChanges
    (the commit loop's hook, after ``apply_changes``)."""
    if isinstance(changes, StagedChanges) and changes.transaction is not None:
        return replace(manifest, transaction=changes.transaction)
    return manifest


# --- gc and verify of records ----------------------------------------------------


def retained_txn_ids(io: MetadataIO, refs: Iterable[tuple[Snapshot, bool]]) -> set[str]:
    """The transactions the raw manifests of ``refs`` name (docs/protocol.md, "gc of
    decision records"): each ``(snapshot, whole)``, with ``whole`` every version
    from it down to its ``oldest_version`` (a branch), else that version alone (a
    tag, a hold).  An aborted staged version reads as its parent's contents, so
    the raw manifest under its key is what names the transaction."""
    ids: set[str] = set()
    for snap, whole in refs:
        cur = snap
        oldest = snap.manifest.oldest_version
        while True:
            ref = io.load_manifest(cur.key).transaction
            if ref is not None:
                ids.add(ref.id)
            if not whole or cur.version <= oldest or cur.manifest.parent is None:
                break
            cur = io.parent(cur)
    return ids


def record_collectable(record: TxnRecord, retained: Callable[[str], set[str] | None]) -> bool:
    """Whether gc may delete ``record``: it is decided, and no participant retains a
    version naming it (``retained(uri)``: the ids a participant's retained versions
    name, None if it cannot be read -- then the record stays)."""
    if record.state == PENDING:
        return False
    for p in record.participants:
        ids = retained(p.uri)
        if ids is None or record.id in ids:
            return False
    return True


def names_table(record: TxnRecord, uri: str, table_id: str) -> bool:
    """Whether ``record`` names the table at ``uri`` (or with ``table_id``: a copy)."""
    return any(p.table_id == table_id or p.uri.rstrip("/") == uri.rstrip("/")
               for p in record.participants)
