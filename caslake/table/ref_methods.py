"""The branch and tag methods of a table handle (mixed into ``TableCore``).

Owns the public shape of refs on a handle: ``branch``, ``create_branch``,
``create_tag``, ``list_refs``, ``drop_branch``, ``drop_tag``,
``fast_forward``, ``merge``, and resolving ``scan(ref=..., tag=...)``.  The
protocol itself (what is written, in which order) is
:mod:`caslake.table.refs`; commits on a branch go through the one runner with
the branch's pointer key.  Never writes an object itself.
"""

from __future__ import annotations

from abc import abstractmethod
from datetime import datetime
from typing import Self

from caslake.errors import InvalidArgument, RefNotFound, TableNotFound
from caslake.format.keys import POINTER_KEY
from caslake.format.refs import BRANCH_PREFIX, MAIN, branch_key, name_from_key, validate_ref_name
from caslake.table import refs
from caslake.table.metadata_io import Snapshot
from caslake.table.runner import CommitResult, TableContext, adopt_ref_move, run_operation


class RefMethods:
    """Branches and tags, for a class whose handles have a :class:`TableContext`."""

    context: TableContext

    @abstractmethod
    def _handle_for(self, pointer_key: str, snapshot: Snapshot) -> Self:
        """A new handle of the same class, on the same store, bound to ``pointer_key``."""

    @abstractmethod
    def _resolve(self, version: int | None, as_of: datetime | str | int | None) -> Snapshot:
        ...

    # --- which ref -------------------------------------------------------------------

    @property
    def ref(self) -> str:
        """The branch this handle reads and commits to (``main`` by default)."""
        key = self.context.pointer_key
        return MAIN if key == POINTER_KEY else name_from_key(key, BRANCH_PREFIX) or key

    def branch(self, name: str) -> Self:
        """A handle bound to branch ``name``: its appends, deletes, upserts,
        transactions, compaction and gc marker commit to that branch.  Raises
        RefNotFound."""
        head = refs.branch_head(self.context.io, name)
        return self._handle_for(branch_key(name), head)

    def create_branch(self, name: str, from_version: int | None = None, *,
                      tag: str | None = None) -> Self:
        """Create branch ``name`` at ``from_version`` of this handle's branch (default:
        its latest version) or at tag ``tag``, and return a handle bound to it."""
        validate_ref_name(name, kind="branch")
        io = self.context.io
        if tag is not None:
            if from_version is not None:
                raise InvalidArgument("give either from_version or tag, not both")
            snap = refs.tag_snapshot(io, tag)
            floor = snap.version  # below a tag, nothing is guaranteed to exist
        else:
            head = self._head()
            snap = head if from_version is None else io.at_version(head, from_version)
            floor = head.manifest.oldest_version
        fork = refs.create_branch(io, name, snap, floor=floor)
        return self._handle_for(branch_key(name), fork)

    def create_tag(self, name: str, version: int | None = None) -> refs.RefInfo:
        """Tag ``version`` of this handle's branch (default: its latest) as ``name``;
        tags are immutable, and a dropped tag's name can never be used again."""
        validate_ref_name(name, kind="tag")
        head = self._head()
        snap = head if version is None else self.context.io.at_version(head, version)
        t = refs.create_tag(self.context.io, name, snap, branch=self.ref,
                            now_ms=self.context.now_ms)
        return refs.RefInfo("tag", t.name, t.target.version, t.target.commit_id,
                            t.target.manifest, branch=t.branch)

    def list_refs(self) -> list[refs.RefInfo]:
        """Every branch (``main`` first), live tag and clone hold of the table."""
        return refs.list_refs(self.context.io)

    def drop_branch(self, name: str) -> None:
        """Drop branch ``name``.  Refused (RefInUse, naming them) while a tag or a
        clone still needs a version only this branch has."""
        refs.drop_branch(self.context.io, name)

    def drop_tag(self, name: str) -> None:
        """Drop tag ``name``; its name stays retired (a tombstone)."""
        refs.drop_tag(self.context.io, name, now_ms=self.context.now_ms)

    def fast_forward(self, target: str = MAIN, *, source: str) -> int:
        """Move branch ``target`` to ``source``'s head if ``target`` has not moved since
        the fork (else BranchDiverged).  Returns ``target``'s new version."""
        validate_ref_name(target, kind="branch")
        validate_ref_name(source, kind="branch")
        snap = refs.fast_forward(self.context.io, target, source)
        if target == self.ref:
            # No store call after the move: a failing read now would report a
            # fast-forward that happened as a failure.
            adopt_ref_move(self.context, snap)
        return snap.version

    def merge(self, source: str, *, into: str = MAIN) -> CommitResult:
        """Commit ``source``'s changes since its fork onto branch ``into`` as one
        version, provided ``into`` only appended since the fork (else BranchDiverged)."""
        validate_ref_name(source, kind="branch")
        target = self if into == self.ref else self.branch(into)
        ctx = target.context
        started = ctx.meter()
        refs.branch_head(ctx.io, source)  # RefNotFound before anything else
        return run_operation(ctx, "merge", refs.merge_changes(ctx.io, into, source),
                             started=started)

    # --- reads -----------------------------------------------------------------------

    def _head(self) -> Snapshot:
        try:
            return self.context.refresh()
        except TableNotFound:
            if self.ref != MAIN:
                raise RefNotFound("branch", self.ref) from None
            raise

    def _resolve_ref(self, version: int | None, as_of: datetime | str | int | None,
                     ref: str | None, tag: str | None) -> Snapshot:
        """The snapshot a read names: a tag, a version or time of branch ``ref``, or
        of this handle's branch."""
        if tag is not None:
            if version is not None or as_of is not None or ref is not None:
                raise InvalidArgument("a tag names one version: give tag alone, without "
                                      "ref, version or as_of")
            return refs.tag_snapshot(self.context.io, tag)
        if ref is None or (validate_ref_name(ref, kind="branch") == self.ref):
            return self._resolve(version, as_of)
        return self.branch(ref)._resolve(version, as_of)
