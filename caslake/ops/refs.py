"""The ref protocol: creating, reading, moving and dropping branches, tags and holds.

Owns every write under ``refs/`` and the one non-commit move of a branch
pointer (fast-forward), plus the upgrade of ``_latest_manifest`` to format
version 2 that must precede the first ref (docs/protocol.md, "Refs").  Commits
*on* a branch go through the ordinary commit loop with the branch's pointer
key; this module never builds manifests except the fork copy (an existing
version with a raised ``oldest_version``, see docs/format.md).

Invariant: a ref object is written only after the manifest it names is on
storage, and names only versions that exist (resolved through the source
branch, which refuses expired versions).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from caslake.core import Changes, MetadataIO, Snapshot, create_record, swap_record
from caslake.errors import (
    BranchDiverged,
    CommitConflict,
    InvalidArgument,
    NotFound,
    RefAlreadyExists,
    RefInUse,
    RefNotFound,
    StoreError,
    VersionNotFound,
)
from caslake.format.keys import POINTER_KEY, manifest_key, new_token
from caslake.format.manifest import Pointer, parse_pointer
from caslake.format.refs import (
    BRANCH_PREFIX,
    HOLD_PREFIX,
    MAIN,
    REFS_FORMAT_VERSION,
    TAG_PREFIX,
    Hold,
    RefTarget,
    Tag,
    branch_key,
    name_from_key,
    parse_hold,
    parse_tag,
    tag_key,
    validate_ref_name,
)

_MOVE_ATTEMPTS = 20
_DELETE_ATTEMPTS = 4


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class RefInfo:
    """One entry of :func:`list_refs`."""

    kind: str  # "branch", "tag" or "hold"
    name: str  # branch or tag name; for a hold, the holder's table id
    version: int
    commit_id: str
    manifest: str
    branch: str | None = None  # tag/hold: the branch it was taken on
    holder_uri: str | None = None

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"kind": self.kind, "name": self.name, "version": self.version,
                                  "commit_id": self.commit_id, "manifest": self.manifest}
        if self.branch is not None:
            out["branch"] = self.branch
        if self.holder_uri is not None:
            out["holder_uri"] = self.holder_uri
        return out


def delete_object(io: MetadataIO, key: str) -> None:
    """Delete ``key``; a missing key is success, so a failure is simply retried."""
    for attempt in range(_DELETE_ATTEMPTS):
        try:
            io.store.delete(key)
            return
        except StoreError:
            if attempt == _DELETE_ATTEMPTS - 1:
                raise


# --- reading ---------------------------------------------------------------------


def read_branch(io: MetadataIO, name: str) -> tuple[Pointer, str]:
    """Branch ``name``'s head pointer and its ETag; ``RefNotFound`` if there is none
    (``main`` is the table's pointer: TableNotFound if the table is missing)."""
    key = branch_key(name)
    if key == POINTER_KEY:
        return io.read_pointer(POINTER_KEY)
    try:
        res = io.store.get(key)
    except NotFound:
        raise RefNotFound("branch", name) from None
    return parse_pointer(res.data, key), res.etag


def branch_head(io: MetadataIO, name: str) -> Snapshot:
    pointer, _ = read_branch(io, name)
    return io.snapshot_for_pointer(pointer)


def read_tag(io: MetadataIO, name: str) -> tuple[Tag, str] | None:
    """The tag record (live or tombstone) and its ETag, or None if the name was never used."""
    key = tag_key(name)
    try:
        res = io.store.get(key)
    except NotFound:
        return None
    return parse_tag(res.data, key), res.etag


def target_snapshot(io: MetadataIO, target: RefTarget, *, where: str) -> Snapshot:
    """Load the manifest a tag or hold names and check it is that version."""
    m = io.load_manifest(target.manifest)
    if m.version != target.version or m.commit_id != target.commit_id:
        from caslake.errors import CorruptMetadata

        raise CorruptMetadata(where, f"names version {target.version} commit "
                              f"{target.commit_id}, but {target.manifest} disagrees")
    return Snapshot(m, target.manifest)


def tag_snapshot(io: MetadataIO, name: str) -> Snapshot:
    found = read_tag(io, name)
    if found is None or found[0].dropped:
        raise RefNotFound("tag", name)
    return target_snapshot(io, found[0].target, where=tag_key(name))


def _target_of(snap: Snapshot) -> RefTarget:
    return RefTarget(snap.version, snap.key, snap.manifest.commit_id)


def list_tags(io: MetadataIO, *, include_dropped: bool = False) -> list[Tag]:
    out = []
    for meta in io.store.list(TAG_PREFIX):
        name = name_from_key(meta.key, TAG_PREFIX)
        if name is None:
            continue
        found = read_tag(io, name)
        if found is not None and (include_dropped or not found[0].dropped):
            out.append(found[0])
    return sorted(out, key=lambda t: t.name)


def list_branches(io: MetadataIO) -> list[str]:
    names = [n for m in io.store.list(BRANCH_PREFIX)
             if (n := name_from_key(m.key, BRANCH_PREFIX)) is not None]
    return [MAIN, *sorted(names)]


def list_holds(io: MetadataIO) -> list[Hold]:
    out = []
    for meta in io.store.list(HOLD_PREFIX):
        try:
            res = io.store.get(meta.key)
        except NotFound:
            continue  # released while we listed
        out.append(parse_hold(res.data, meta.key))
    return sorted(out, key=lambda h: h.holder_id)


def list_refs(io: MetadataIO) -> list[RefInfo]:
    """Every branch (``main`` first), live tag and hold of the table."""
    out: list[RefInfo] = []
    for name in list_branches(io):
        try:
            p, _ = read_branch(io, name)
        except RefNotFound:
            continue  # dropped while we listed
        out.append(RefInfo("branch", name, p.version, p.commit_id, p.manifest))
    for t in list_tags(io):
        out.append(RefInfo("tag", t.name, t.target.version, t.target.commit_id,
                           t.target.manifest, branch=t.branch))
    for h in list_holds(io):
        out.append(RefInfo("hold", h.holder_id, h.target.version, h.target.commit_id,
                           h.target.manifest, branch=h.branch, holder_uri=h.holder_uri))
    return out


# --- format upgrade ----------------------------------------------------------------


def ensure_format(io: MetadataIO, version: int = REFS_FORMAT_VERSION) -> None:
    """Make ``_latest_manifest`` carry at least ``version`` (same content otherwise),
    so readers that do not know refs refuse the table before any ref exists."""
    for _ in range(_MOVE_ATTEMPTS):
        pointer, etag = io.read_pointer(POINTER_KEY)
        if pointer.format_version >= version:
            return
        with contextlib.suppress(NotFound):  # gone: the next read says TableNotFound
            if swap_record(io.store, POINTER_KEY,
                           replace(pointer, format_version=version).to_bytes(), etag):
                return
        # moved (or unknown): read it again; the rewrite is idempotent
    raise CommitConflict("could not upgrade the table pointer to format version "
                         f"{version}: other writers kept moving it",
                         help="retry later")


# --- tags ---------------------------------------------------------------------------


def create_tag(io: MetadataIO, name: str, snap: Snapshot, *, branch: str,
               now_ms: Callable[[], int] = _now_ms) -> Tag:
    """Create tag ``name`` on ``snap`` (a version resolved on ``branch``), create-only."""
    validate_ref_name(name, kind="tag")
    ensure_format(io)
    tag = Tag(name, snap.manifest.table_id, _target_of(snap), branch, now_ms())
    if not create_record(io.store, tag_key(name), tag.to_bytes(), what=f"tag {name!r}"):
        found = read_tag(io, name)
        raise RefAlreadyExists("tag", name, retired=found is not None and found[0].dropped)
    return tag


def drop_tag(io: MetadataIO, name: str, *, now_ms: Callable[[], int] = _now_ms) -> Tag:
    """Turn tag ``name`` into its tombstone (one CAS).  ``RefNotFound`` if there is no
    live tag of that name.  Idempotent in effect: a retried drop finds the tombstone."""
    validate_ref_name(name, kind="tag")
    for _ in range(_MOVE_ATTEMPTS):
        found = read_tag(io, name)
        if found is None or found[0].dropped:
            raise RefNotFound("tag", name)
        tag, etag = found
        dead = tag.tombstone(now_ms())
        with contextlib.suppress(NotFound):  # gone: the next read says RefNotFound
            if swap_record(io.store, tag_key(name), dead.to_bytes(), etag):
                return dead
        again = read_tag(io, name)
        if again is not None and again[0].dropped:
            return again[0]  # ours landed (reply lost), or a concurrent drop did
    raise CommitConflict(f"could not drop tag {name!r}", help="retry")


# --- branches -----------------------------------------------------------------------


def fork_snapshot(io: MetadataIO, snap: Snapshot, floor: int) -> Snapshot:
    """The manifest a new branch forked at ``snap`` points at: ``snap`` itself when
    every version from its ``oldest_version`` up is guaranteed to exist, else a copy
    with ``oldest_version`` raised to ``floor`` (docs/format.md, "Fork manifest")."""
    if snap.manifest.oldest_version >= floor:
        return snap
    m = replace(snap.manifest, oldest_version=min(floor, snap.version))
    key = manifest_key(m.version, new_token())
    create_record(io.store, key, m.to_bytes(), what=f"fork manifest {key}")  # a fresh key: ours
    io.remember(key, m)
    return Snapshot(m, key)


def create_branch(io: MetadataIO, name: str, snap: Snapshot, *, floor: int) -> Snapshot:
    """Create branch ``name`` with head ``snap`` (create-only).  ``floor``: the oldest
    version the source guarantees (its head's ``oldest_version``; a tag's version)."""
    validate_ref_name(name, kind="branch")
    if name == MAIN:
        raise RefAlreadyExists("branch", name)
    ensure_format(io)
    key = branch_key(name)
    if io.store.exists(key):
        raise RefAlreadyExists("branch", name)
    fork = fork_snapshot(io, snap, floor)
    pointer = Pointer(fork.manifest.table_id, fork.version, fork.key,
                      fork.manifest.commit_id,
                      format_version=max(REFS_FORMAT_VERSION, fork.manifest.format_version))
    if not create_record(io.store, key, pointer.to_bytes(), what=f"branch {name!r}"):
        if fork.key != snap.key:
            with contextlib.suppress(StoreError):
                io.store.delete(fork.key)  # our copy: provably referenced by nothing
        raise RefAlreadyExists("branch", name)
    return fork


def _reachable_from(io: MetadataIO, branch: str, target: RefTarget) -> bool:
    try:
        head = branch_head(io, branch)
        return io.at_version(head, target.version).manifest.commit_id == target.commit_id
    except (RefNotFound, VersionNotFound):
        return False


def holders_of(io: MetadataIO, name: str) -> list[str]:
    """Tags and holds taken on branch ``name`` whose version no other branch has."""
    others = [b for b in list_branches(io) if b != name]
    out = []
    for t in list_tags(io):
        if t.branch == name and not any(_reachable_from(io, b, t.target) for b in others):
            out.append(f"tag {t.name!r}")
    for h in list_holds(io):
        if h.branch == name and not any(_reachable_from(io, b, h.target) for b in others):
            out.append(f"clone {h.holder_uri} (hold {h.holder_id})")
    return out


def drop_branch(io: MetadataIO, name: str) -> None:
    """Delete branch ``name``'s head.  Refused for ``main``, for an unknown branch
    (``RefNotFound``) and while a tag or clone still needs a version only this
    branch has (``RefInUse`` naming them).  What only the branch referenced
    becomes garbage for gc."""
    validate_ref_name(name, kind="branch")
    if name == MAIN:
        raise InvalidArgument("branch 'main' cannot be dropped (drop the table instead)")
    read_branch(io, name)  # RefNotFound
    holders = holders_of(io, name)
    if holders:
        raise RefInUse("branch", name, holders)
    delete_object(io, branch_key(name))


def common_version(io: MetadataIO, a: Snapshot, b: Snapshot) -> int | None:
    """The highest version the chains of ``a`` and ``b`` share (same commit id), or
    None if none of their retained versions agree."""
    low, high = (a, b) if a.version <= b.version else (b, a)
    v = low.version
    while v >= low.manifest.oldest_version and v >= high.manifest.oldest_version:
        try:
            x = io.at_version(low, v).manifest.commit_id
            y = io.at_version(high, v).manifest.commit_id
        except VersionNotFound:
            return None
        if x == y:
            return v
        v -= 1
    return None


def fast_forward(io: MetadataIO, target: str, source: str) -> Snapshot:
    """Move branch ``target`` to ``source``'s head, provided ``target`` has not moved
    since ``source`` forked from it (its head is a version of ``source``'s chain);
    otherwise :class:`BranchDiverged`.  A no-op if they are equal."""
    for _ in range(_MOVE_ATTEMPTS):
        t_ptr, t_etag = read_branch(io, target)
        s_ptr, _ = read_branch(io, source)
        s_head = io.snapshot_for_pointer(s_ptr)
        if s_ptr.commit_id == t_ptr.commit_id and s_ptr.version == t_ptr.version:
            return s_head
        ok = s_ptr.version >= t_ptr.version
        why = "it moved since the fork"
        if ok:
            try:
                ok = io.at_version(s_head, t_ptr.version).manifest.commit_id == t_ptr.commit_id
            except VersionNotFound:  # expired by gc: the fork can no longer be checked
                ok = False
                why = (f"gc has expired that version of {source!r}, so the fork cannot be "
                       "checked")
        if not ok:
            raise BranchDiverged(
                f"cannot fast-forward {target!r} to {source!r}: {target!r} is at version "
                f"{t_ptr.version}, which is not in {source!r}'s history ({why})",
                target=target, source=source)
        moved = Pointer(t_ptr.table_id, s_ptr.version, s_ptr.manifest, s_ptr.commit_id,
                        format_version=max(t_ptr.format_version, s_ptr.format_version))
        try:
            swapped = swap_record(io.store, branch_key(target), moved.to_bytes(), t_etag)
        except NotFound:
            raise RefNotFound("branch", target) from None
        if swapped:
            io.remember(s_head.key, s_head.manifest)
            return s_head
        # re-read: done if ours (or an equal move) landed, else re-check
    raise CommitConflict(f"could not fast-forward {target!r}: other writers kept moving it",
                         help="retry later")


# --- merge -------------------------------------------------------------------------

# Operations that only add rows (or change nothing): a target whose commits since
# the fork are all of these can take the source's changes on top.
_APPEND_ONLY = frozenset({"append", "expire"})


def merge_changes(io: MetadataIO, target: str, source: str) -> Callable[[Snapshot], Changes | None]:
    """The ``prepare`` of a merge of branch ``source`` into ``target``: on each base
    (a head of ``target``) it finds the fork point, checks every target commit
    since then only appended (else :class:`BranchDiverged`), and returns the
    source's changes since the fork -- new data files, removed data files, and its
    tombstones on files the merged version keeps -- as one commit (None if the
    source has no change since the fork)."""

    def prepare(base: Snapshot) -> Changes | None:
        src = branch_head(io, source)
        fork = common_version(io, base, src)
        if fork is None:
            raise BranchDiverged(f"{target!r} and {source!r} share no retained version",
                                 target=target, source=source)
        for snap in io.history(base, limit=base.version - fork):
            if snap.version > fork and snap.manifest.operation not in _APPEND_ONLY:
                raise BranchDiverged(
                    f"cannot merge {source!r} into {target!r}: {target!r} version "
                    f"{snap.version} is a {snap.manifest.operation!r} since the fork at "
                    f"version {fork} (only appends can be merged over)",
                    target=target, source=source)
        if src.version == fork:
            return None
        a, b = src.manifest.schema, base.manifest.schema
        if (a.schema_id, a.fields) != (b.schema_id, b.fields):
            raise BranchDiverged(f"cannot merge {source!r} into {target!r}: their schemas "
                                 "differ (fast-forward, or apply the schema change to "
                                 f"{target!r} first)", target=target, source=source)
        at_fork = io.at_version(src, fork)
        before = {f.path: f for f in io.live_files(at_fork)}
        after = {f.path: f for f in io.live_files(src)}
        added = tuple(f for p, f in after.items() if p not in before)
        removed = tuple(f for p, f in before.items() if p not in after)
        old_refs = {t.path for t in at_fork.manifest.tombstones}
        new_refs = tuple(t for t in src.manifest.tombstones if t.path not in old_refs)
        was_deleted = base.manifest.deleted_rows_per_file()
        rows = sum(n - was_deleted.get(p, 0) for t in new_refs for p, n in t.files.items())
        return Changes("merge", add_files=added, remove_files=removed,
                       add_tombstones=new_refs, rows_deleted=max(rows, 0),
                       params={"source": source, "fork_version": str(fork),
                               "source_version": str(src.version)})

    return prepare
