"""Garbage collection: expire old versions and delete objects nothing retained references.

The rules (docs/protocol.md, "GC"):

* **Retention.** Versions committed within ``retention`` of ``now`` are kept,
  plus the newest version committed before that cutoff (it was the table as of
  the cutoff, so ``as_of(cutoff)`` still works), plus the head.  A retention
  below 24 hours is refused unless ``force=True``: a writer still uploading
  files it has not committed yet is only protected by their age.
* **Marker and fence first.** Before deleting anything, GC commits on each
  branch that needs it an ``expire`` version whose ``oldest_version`` says which
  versions may be gone (readers then answer ``VersionNotFound`` for them instead
  of meeting missing manifests) and whose ``collected_until`` fences off the
  commit of any operation that began before the newest object it deletes (a
  writer that outlived the retention: its uploads may be among them; see
  :class:`caslake.core.requirements.UploadsNotCollected`).  It then computes
  what is referenced again from the new heads.
* **Every ref.** Each branch is expired by its own history (and the table's
  ``retention.keep_last_versions`` cap); every live tag's and clone hold's
  version is retained whole.  Refs are listed again before deleting, and the
  computation starts over if one was created or dropped meanwhile.
* **Only the unreferenced and the old.** An object under ``manifest/``,
  ``data/`` or ``tombstone/`` is deleted only if no retained version references
  it (its manifest, the segments it reads, its data files, its tombstones) and
  it was last modified before the cutoff.  The pointer is never deleted.
* **What no listing shows.**  The store's staging files (the local store's
  ``.caslake-tmp/``: a writer killed mid-append leaves its half-built data file
  there) and unfinished multipart uploads anywhere under the table's prefix are
  collected by the same rule: older than the cutoff (a staging file's mtime
  moves with every write to it, so a live writer's is young) and behind the
  same fence.  A staging file is checked again right before its unlink.
* **Transaction records.** A decided multi-table transaction record under
  ``_txn/`` older than the cutoff is deleted once no version any participant
  retains names it (every branch, tag and hold of each participant, read through
  :func:`caslake.core.store_at`); a pending one never is.  Reported under
  ``deleted["_txn"]``.
* **Holds on sources.** A clone's gc then releases its hold on every table
  that nothing it retains references any more
  (:func:`caslake.ops.clone.release_unused_holds`).
* **Lock files.** Then the store's unused lock files are collected
  (``ObjectStore.collect_stale_locks``: the local store's per-key flock files,
  removed only while held exclusively; see :mod:`caslake.store.local`).

A crash at any point leaves a valid table: the marker is an ordinary commit,
and every deletion removes an object no retained version can reach.  Running GC
again finishes the job.  ``dry_run=True`` reports without committing or deleting.
Works on a :class:`TableContext`, never on the ``Table`` facade; the marker
commits only through :func:`caslake.core.runner.run_operation`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from caslake.core import (
    INTENT_PREFIX,
    Changes,
    MetadataIO,
    Snapshot,
    TableContext,
    intent_deadline,
    progress_advance,
    progress_total,
    record_collectable,
    retained_txn_ids,
    run_operation,
    store_at,
)
from caslake.errors import CaslakeError, InvalidArgument, RefNotFound, RetryBudgetExhausted
from caslake.format.keys import DATA_PREFIX, MANIFEST_PREFIX, SEGMENT_PREFIX, TOMBSTONE_PREFIX
from caslake.format.manifest import COMMITTED, TXN_PREFIX, SegmentRef, parse_txn_record
from caslake.format.properties import retention_policy
from caslake.format.refs import BRANCH_PREFIX, REFS_PREFIX, branch_key
from caslake.ops import refs
from caslake.ops.clone import release_unused_holds
from caslake.store.base import MultipartUpload, ObjectMeta, ObjectStore, StagedFile

MIN_RETENTION = timedelta(hours=24)
DEFAULT_RETENTION = timedelta(days=7)
_PREFIXES = (MANIFEST_PREFIX, SEGMENT_PREFIX, DATA_PREFIX, TOMBSTONE_PREFIX)
EXPIRE = "expire"  # the operation of GC's marker commit
STAGING = "staging"  # GcReport.deleted's name for the store's staging files
TXN = TXN_PREFIX.rstrip("/")  # GcReport.deleted's name for multi-table transaction records


class ExtraRoots(Protocol):
    """What another feature stored next to the table needs kept (e.g. an export):
    ``keep`` -- keys gc must not delete (its own objects, and caslake data files it
    points at); ``prefixes`` -- where its objects live, so gc collects the ones
    ``keep`` does not name (by the same age rule as caslake's own)."""

    @property
    def prefixes(self) -> tuple[str, ...]: ...

    @property
    def keep(self) -> frozenset[str]: ...


RootsProvider = Callable[[ObjectStore], ExtraRoots]


@dataclass
class GcReport:
    """What one GC run found and did (or, with ``dry_run``, would do)."""

    dry_run: bool
    cutoff: datetime
    head_version: int  # the table's version after the expiry marker
    oldest_version: int  # versions below this one are expired
    retained_versions: int
    deleted: dict[str, list[str]] = field(default_factory=dict)  # prefix -> keys
    bytes_deleted: int = 0
    kept_too_young: int = 0  # unreferenced, but modified after the cutoff
    multipart_aborted: int = 0  # unfinished uploads under the table begun before the cutoff
    lock_files_deleted: int = 0  # the store's unused lock files (local store only)
    holds_released: list[str] = field(default_factory=list)  # a clone's holds on its sources

    @property
    def deleted_count(self) -> int:
        return sum(len(v) for v in self.deleted.values())

    def to_json(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, "cutoff": self.cutoff.isoformat(),
                "head_version": self.head_version, "oldest_version": self.oldest_version,
                "retained_versions": self.retained_versions,
                "deleted": {k: len(v) for k, v in sorted(self.deleted.items())},
                "deleted_keys": {k: sorted(v) for k, v in sorted(self.deleted.items())},
                "bytes_deleted": self.bytes_deleted, "kept_too_young": self.kept_too_young,
                "multipart_aborted": self.multipart_aborted,
                "lock_files_deleted": self.lock_files_deleted,
                "holds_released": self.holds_released}


def check_retention(retention: timedelta, force: bool) -> None:
    hours = f"{retention.total_seconds() / 3600:g} h"
    if retention < timedelta(0):
        raise InvalidArgument(f"gc retention must not be negative, not {hours}")
    if retention < MIN_RETENTION and not force:
        raise InvalidArgument(
            f"gc retention {hours} is below the 24 h minimum: objects a "
            "running writer has uploaded but not committed yet could be deleted. Pass "
            "force=True (--force) only if no writer can be running that long")


def collect_garbage(ctx: TableContext, *, retention: timedelta | None = None,
                    dry_run: bool = False, now: datetime | None = None,
                    force: bool = False, extra_roots: Sequence[RootsProvider] = (),
                    erase_below: int | None = None) -> GcReport:
    """Expire versions older than ``retention`` on every branch and delete what no
    retained version, tag or hold references, nor any of ``extra_roots`` keeps.
    ``retention`` None: the table's retention policy (``retention.max_age``,
    default 7 days, and ``retention.keep_last_versions``).  ``now`` is injectable
    for tests; it defaults to the handle's clock.

    ``erase_below`` (``purge(expire=True)``): expire exactly the versions of the
    handle's branch below it, whatever their age, leave every other branch's
    history alone, and delete what the expired versions referenced (no retained
    version, tag or hold referencing it) at once, whatever its age."""
    head = ctx.refresh()
    policy = retention_policy(head.manifest.properties)
    if retention is None:
        retention = policy.max_age if policy.max_age is not None else DEFAULT_RETENTION
    check_retention(retention, force)
    now = now or datetime.fromtimestamp(ctx.now_ms() / 1000, UTC)
    if now.tzinfo is None:
        raise InvalidArgument("gc 'now' must be timezone-aware")
    cutoff = now - retention
    cutoff_ms = int(cutoff.timestamp() * 1000)
    prefixes = list(_PREFIXES)
    io = ctx.io
    committed = False  # markers of this run landed: later rounds only read
    erased: set[str] = set()  # what the versions erase_below expires referenced
    for _ in range(_REF_ROUNDS):
        refs_seen = _ref_keys(ctx)
        retained: list[Snapshot] = []
        own: tuple[Snapshot, int, int] | None = None
        branches: list[tuple[str, Snapshot, int]] = []  # name, head, oldest to keep
        for name in refs.list_branches(io):
            try:
                bhead = refs.branch_head(io, name)
            except RefNotFound:
                continue  # dropped while we listed
            floor = bhead.manifest.oldest_version
            if committed:
                oldest = floor
            elif erase_below is None:
                oldest = _oldest_to_keep(io, bhead, cutoff_ms, policy.keep_last_versions)
            elif branch_key(name) == ctx.pointer_key:
                oldest = max(floor, min(erase_below, bhead.version))
                erased |= _referenced(io, (s for s in io.history(bhead)
                                           if floor <= s.version < oldest))
            else:
                oldest = floor
            kept = _retained(io, bhead, oldest)
            retained.extend(kept)
            branches.append((name, bhead, oldest))
            if branch_key(name) == ctx.pointer_key:
                own = (bhead, oldest, len(kept))
        retained.extend(refs.tag_snapshot(io, t.name) for t in refs.list_tags(io))
        retained.extend(refs.target_snapshot(io, h.target, where=h.key)
                        for h in refs.list_holds(io))
        referenced = _referenced(io, retained)
        # A ref created while we computed may name what we were about to delete.
        if _ref_keys(ctx) != refs_seen:
            continue
        if own is None:
            raise RefNotFound("branch", ctx.pointer_key)
        for provider in extra_roots:  # read after the markers: what exports reference now
            roots = provider(ctx.store)
            referenced |= roots.keep
            prefixes += [p for p in roots.prefixes if p not in prefixes]
        doomed, young = _collectable(ctx.store, prefixes, referenced, cutoff, erased)
        staged, young_staged = _stale_staged(ctx.store, cutoff)
        aborts = _stale_uploads(ctx.store, cutoff)
        if dry_run:
            break
        # The fence: a commit of an operation that began before the newest object
        # we delete may reference it, so every branch records (in the marker, before
        # anything is deleted) that such commits must refuse.  Its CAS moves the
        # pointer, so a commit that validated an older base fails its own CAS and
        # meets the fence on the rebase.
        fenced = min(h.manifest.collected_until_ms for _, h, _ in branches)
        # (Objects of erased versions are committed ones, no writer's pending upload.)
        uploads = [m for m in doomed if m.key not in erased]
        want = max([_upload_bound(m) for m in uploads]
                   + [_bound(s.last_modified) for s in staged]
                   + [_bound(u.initiated) for u in aborts], default=0)
        if committed:
            young += [m for m in uploads if _upload_bound(m) > fenced]
            doomed = [m for m in doomed if m.key in erased or _upload_bound(m) <= fenced]
            young_staged += [s for s in staged if _bound(s.last_modified) > fenced]
            staged = [s for s in staged if _bound(s.last_modified) <= fenced]
            aborts = [u for u in aborts if _bound(u.initiated) <= fenced]
            break
        needs = [(name, bhead, oldest) for name, bhead, oldest in branches
                 if oldest > bhead.manifest.oldest_version
                 or want > bhead.manifest.collected_until_ms]
        if not needs:
            break
        for name, bhead, oldest in needs:
            _commit_marker(_branch_context(ctx, name, bhead), oldest, want)
        committed = True  # go round again: what the new heads retain
    else:
        raise RetryBudgetExhausted("gc: refs kept being created or dropped while it ran",
                                   attempts=_REF_ROUNDS)
    head, oldest, n_kept = own
    report = GcReport(dry_run=dry_run, cutoff=cutoff, head_version=head.version,
                      oldest_version=oldest, retained_versions=n_kept,
                      kept_too_young=len(young) + len(young_staged))
    # Group-commit intents whose deadline every branch head has passed are settled
    # (applied, or never will be: docs/protocol.md, "Group commit"); none that may
    # still be folded is touched.
    settled_at = min(h.manifest.created_at_ms for _, h, _ in branches)
    settled = [m for m in ctx.store.list(INTENT_PREFIX)
               if (d := intent_deadline(m.key)) is not None and d <= settled_at]
    # Decided transaction records no participant's retained version names any more.
    records = _collectable_records(io, cutoff)
    doomed = [*doomed, *settled, *records]
    prefixes = [*prefixes, INTENT_PREFIX, TXN_PREFIX]
    for meta in doomed:
        prefix = next(p for p in prefixes if meta.key.startswith(p))
        report.deleted.setdefault(prefix.rstrip("/"), []).append(meta.key)
        report.bytes_deleted += meta.size
    if not dry_run:
        _delete_all(ctx, (m.key for m in doomed))
        # Behind the fence: a staging file written to after it was listed is kept.
        limit = datetime.fromtimestamp(fenced / 1000, UTC)
        staged = [s for s in staged if ctx.store.delete_staged(s, not_after=limit)]
        for upload in aborts:
            ctx.store.abort_multipart_upload(upload)
        report.lock_files_deleted = ctx.store.collect_stale_locks()
    for sf in staged:
        report.deleted.setdefault(STAGING, []).append(sf.name)
        report.bytes_deleted += sf.size
    report.multipart_aborted = len(aborts)
    # A clone that references nothing of a source any more releases its hold there.
    report.holds_released = release_unused_holds(
        ctx.store, (s.manifest for s in retained), referenced, dry_run=dry_run)
    ctx.refresh()
    return report


_REF_ROUNDS = 5


def _ref_keys(ctx: TableContext) -> list[tuple[str, str]]:
    """Every ref object's key, with the ETag of tags and holds (a branch head moves
    with every commit, which never needs a new gc round: a commit references only
    retained or new objects)."""
    out = []
    for meta in ctx.store.list(REFS_PREFIX):
        out.append((meta.key, "" if meta.key.startswith(BRANCH_PREFIX) else meta.etag))
    return sorted(out)


def _branch_context(ctx: TableContext, name: str, head: Snapshot) -> TableContext:
    key = branch_key(name)
    if key == ctx.pointer_key:
        return ctx
    return TableContext(ctx.store, head, io=ctx.io, commit_policy=ctx.commit_policy,
                        pointer_key=key, now_ms=ctx.now_ms)


def _oldest_to_keep(io: MetadataIO, head: Snapshot, cutoff_ms: int,
                    keep_last: int | None = None) -> int:
    """The newest version committed at or before the cutoff (it was the table as of
    the cutoff), raised to keep at most ``keep_last`` versions, never below what an
    earlier GC already expired.  Expiry markers change no data, so they are passed
    over: a second GC right after the first finds nothing to expire instead of
    expiring the first one's marker."""
    floor = head.manifest.oldest_version
    by_age = floor
    for snap in io.history(head):
        if snap.manifest.created_at_ms <= cutoff_ms and snap.manifest.operation != EXPIRE:
            by_age = max(floor, snap.version)
            break
    if keep_last is not None:
        by_age = max(by_age, head.version - keep_last + 1)
    return _not_staged(io, head, min(by_age, head.version), floor)


def _not_staged(io: MetadataIO, head: Snapshot, oldest: int, floor: int) -> int:
    """``oldest``, lowered past staged versions whose transaction did not commit:
    such a version reads as its parent (pending or aborted: docs/protocol.md,
    "Multi-table transactions"), so the oldest version gc keeps is never one --
    it keeps the parent whose contents it shows."""
    cur = head
    while cur.version > oldest:
        cur = io.parent(cur)
    while cur.version > floor and cur.manifest.transaction is not None \
            and io.txn_record(cur.manifest.transaction)[0].state != COMMITTED:
        cur = io.parent(cur)
    return cur.version


def _collectable(store: ObjectStore, prefixes: Sequence[str], referenced: set[str],
                 cutoff: datetime, erased: set[str]
                 ) -> tuple[list[ObjectMeta], list[ObjectMeta]]:
    """(unreferenced objects last modified before the cutoff or in ``erased``,
    unreferenced younger ones)."""
    doomed: list[ObjectMeta] = []
    young: list[ObjectMeta] = []
    for prefix in prefixes:
        for meta in store.list(prefix):
            if meta.key in referenced:
                continue
            if meta.key not in erased and (meta.last_modified is None
                                           or meta.last_modified >= cutoff):
                young.append(meta)
            else:
                doomed.append(meta)
    return doomed, young


def _stale_staged(store: ObjectStore, cutoff: datetime
                  ) -> tuple[list[StagedFile], list[StagedFile]]:
    """(staging files last written before the cutoff, younger ones: a live writer's)."""
    old: list[StagedFile] = []
    young: list[StagedFile] = []
    for sf in store.list_staged():
        fresh = sf.last_modified is None or sf.last_modified >= cutoff
        (young if fresh else old).append(sf)
    return old, young


def _stale_uploads(store: ObjectStore, cutoff: datetime) -> list[MultipartUpload]:
    """Unfinished multipart uploads anywhere under the table's prefix (not only caslake's
    own prefixes: every one holds bytes) begun before the cutoff.  An upload of
    unknown age is kept, as a young object is."""
    return [u for u in store.list_multipart_uploads("")
            if u.initiated is not None and u.initiated < cutoff]


def _upload_bound(meta: ObjectMeta) -> int:
    return _bound(meta.last_modified)


def _bound(ts: datetime | None) -> int:
    """The latest time (ms, the store's clock) at which something stamped ``ts`` can
    have been written.  Stores that keep whole seconds only (S3's Last-Modified)
    truncate: a timestamp on a whole second may be up to 999 ms early."""
    if ts is None:
        return 0
    ms = int(ts.timestamp() * 1000)
    return ms + 999 if ts.microsecond == 0 else ms


def _commit_marker(ctx: TableContext, oldest: int, fence: int) -> Snapshot:
    def prepare(base: Snapshot) -> Changes | None:
        m = base.manifest
        if m.oldest_version >= oldest and m.collected_until_ms >= fence:
            return None
        params = {"oldest_version": str(max(oldest, m.oldest_version))}
        if fence > m.collected_until_ms:
            params["collected_until"] = str(fence)
        return Changes(EXPIRE, oldest_version=oldest, collected_until_ms=fence,
                       params=params)

    run_operation(ctx, EXPIRE, prepare, started=ctx.meter())
    return ctx.snapshot


def _retained(io: MetadataIO, head: Snapshot, oldest: int) -> list[Snapshot]:
    return [s for s in io.history(head) if s.version >= oldest]


def _referenced(io: MetadataIO, versions: Iterable[Snapshot]) -> set[str]:
    """Every key the retained versions reference.  Versions share segments, so
    each segment is walked once (streamed per block), not once per version: an
    entry of segment ``s`` is live in some retained version unless every version
    that references ``s`` lists it in ``removed``."""
    keys: set[str] = set()
    # segment key -> (its reference, a manifest naming it, entries removed in every
    # retained version that references it)
    shared: dict[str, tuple[SegmentRef, str, frozenset[str]]] = {}
    for snap in versions:
        m = snap.manifest
        keys.add(snap.key)
        keys.update(t.path for t in m.tombstones)
        keys.update(f.path for f in m.files)
        for ref in m.segments:
            seen = shared.get(ref.manifest)
            gone = m.removed if seen is None else seen[2] & m.removed
            shared[ref.manifest] = (ref, snap.key, frozenset(gone))
    for ref, where, gone in shared.values():
        keys.add(ref.manifest)
        keys.update(f.path for f in io.iter_segment(ref, where) if f.path not in gone)
    return keys


def _collectable_records(io: MetadataIO, cutoff: datetime) -> list[ObjectMeta]:
    """The records under ``_txn/`` gc may delete (docs/protocol.md, "gc of decision
    records"): last modified before the cutoff, decided, and named by no version
    any participant retains.  An unreadable record is kept (verify reports it).
    ``io``: the table's own (its manifests are cached from gc's walk)."""
    store = io.store
    old = [m for m in store.list(TXN_PREFIX)
           if m.last_modified is not None and m.last_modified < cutoff]
    retained: dict[str, set[str] | None] = {}

    def named(uri: str) -> set[str] | None:
        key = uri.rstrip("/")
        if key not in retained:
            other = store_at(store, uri)
            retained[key] = _txns_retained(io if other is store else MetadataIO(other))
        return retained[key]

    out = []
    for meta in old:
        try:
            record = parse_txn_record(store.get(meta.key).data, meta.key)
        except CaslakeError:
            continue
        if record_collectable(record, named):
            out.append(meta)
    return out


def _txns_retained(io: MetadataIO) -> set[str] | None:
    """The transactions the participant read through ``io`` still needs a record
    of: those its retained versions (every branch's history, every tag and hold)
    name; None if it cannot be read."""
    try:
        heads: list[tuple[Snapshot, bool]] = []
        for name in refs.list_branches(io):
            try:
                heads.append((refs.branch_head(io, name), True))
            except RefNotFound:
                continue  # dropped while we listed
        heads += [(refs.tag_snapshot(io, t.name), False) for t in refs.list_tags(io)]
        heads += [(refs.target_snapshot(io, h.target, where=h.key), False)
                  for h in refs.list_holds(io)]
        if not heads:
            return None  # no table there: keep the record
        return retained_txn_ids(io, heads)
    except CaslakeError:
        return None


def _delete_all(ctx: TableContext, keys: Iterable[str]) -> None:
    keys = list(keys)
    if not keys:
        return
    with ThreadPoolExecutor(max_workers=min(16, len(keys))) as pool:
        progress_total(len(keys))
        for _ in pool.map(ctx.store.delete, keys):
            progress_advance()
