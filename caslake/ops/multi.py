"""Multi-table transactions: the API and the protocol's steps (docs/protocol.md,
"Multi-table transactions").

``with transaction(orders, items) as tx:`` gives one :class:`Part` per table
(``tx[orders]``), a one-table :class:`~caslake.ops.transaction.Transaction`
that also takes ``overwrite`` and ``read_version``.  On a clean exit the block
commits all of it or raises a typed error with nothing visible:

1. each part's data files are already written (``append``/``upsert``);
2. the decision record is created ``pending`` under the coordinator (the table
   whose URI sorts first);
3. each part commits, in URI order, as a *staged* version (its manifest names
   the record) through the normal commit loop;
4. the record is swapped to ``committed``: the commit point.

A failure before step 4 aborts the record (a definite failure: only this code
ever writes ``committed``).  :func:`snapshot` pins one version per table that
holds every transaction whole or not at all.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from caslake.core import (
    Changes,
    CommitResult,
    Requirement,
    Scan,
    Snapshot,
    TableContext,
    abort_pending,
    after_commit,
    committed_or_raise,
    consistent_heads,
    create_txn_record,
    decide,
    noop_result,
    same_store,
    stage,
    txn_applied,
    write_requirements,
)
from caslake.errors import (
    CaslakeError,
    InvalidArgument,
    TableListedTwice,
    TablesOnDifferentStores,
)
from caslake.format.keys import POINTER_KEY, new_token
from caslake.format.manifest import (
    COMMITTED,
    PENDING,
    TransactionRef,
    TxnParticipant,
    TxnRecord,
)
from caslake.ops.transaction import CommitOnExit, Transaction

#: A transaction's deadline after its record is created, unless given.
DEFAULT_TTL_MS = 10_000


class Part(Transaction):
    """One table's work in a multi-table transaction: ``append``, ``delete``,
    ``upsert`` (as :class:`~caslake.ops.transaction.Transaction`), ``overwrite``
    and ``read_version``."""

    # Never the group path: a fold would commit this part's files in a version that
    # is not staged, visible before (or without) the transaction's decision.
    GROUPABLE = False

    def __init__(self, context: TableContext, *, txn: tuple[str, int] | None = None) -> None:
        super().__init__(context, txn=txn)
        self._ref: TransactionRef | None = None
        self._overwrite_base: int | None = None

    def read_version(self, version: int) -> None:
        """Validate this table's deletes and upserts against commits since ``version``
        (the version the change was computed from): ReadValidationFailed otherwise."""
        self._check_open()
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise InvalidArgument(f"read_version must be an integer >= 0, not {version!r}")
        self._read_version = version

    def overwrite(self, data: Any) -> None:
        """Replace the table's rows with ``data`` (the first operation on this table
        in the transaction; a concurrent commit since is a ConcurrentModification)."""
        self._check_open()
        if self._ops:
            raise InvalidArgument("overwrite must be the first operation on a table in a "
                                  "transaction (it replaces everything before it)")
        start = self._ctx.refresh()
        self.append(data)
        self._ops[-1] = "overwrite"
        self._overwrite_base = start.version

    def delete(self, where: Any) -> None:
        self._no_overwrite("delete")
        super().delete(where)

    def upsert(self, data: Any, key: list[str] | str, *, on_duplicate: str = "error") -> None:
        self._no_overwrite("upsert")
        super().upsert(data, key, on_duplicate=on_duplicate)

    def _no_overwrite(self, operation: str) -> None:
        if self._overwrite_base is not None:
            raise InvalidArgument(f"{operation} after overwrite on the same table: the "
                                  "overwrite replaces the rows it would change")

    def _requirements(self) -> tuple[Requirement, ...]:
        schema = self._ctx.snapshot.manifest.schema
        return write_requirements(self._operation() if self._ops else "transaction", schema,
                                  base_version=self._overwrite_base)

    def _finish(self, operation: str, changes: Changes | None) -> Changes | None:
        if self._ref is None:
            return changes
        if changes is None:  # still a staged version: it holds the table until decided
            changes = Changes(operation, params=dict(self._params))
        if self._overwrite_base is not None:
            changes = replace(changes, remove_all=True)
        return stage(changes, self._ref)


def _contexts(tables: Sequence[Any]) -> list[TableContext]:
    """The handles' contexts, checked: at least one, ``main`` branches, no table
    twice, all on one store."""
    if not tables:
        raise InvalidArgument("a multi-table transaction needs at least one table")
    out: list[TableContext] = []
    seen: dict[str, int] = {}
    for i, t in enumerate(tables):
        ctx = getattr(t, "context", None)
        if not isinstance(ctx, TableContext):
            raise InvalidArgument(f"tables[{i}] is not a caslake table ({type(t).__name__})")
        if ctx.pointer_key != POINTER_KEY:
            raise InvalidArgument(f"tables[{i}] ({ctx.store.uri}) is a branch handle: "
                                  "multi-table transactions work on main branches")
        uri = _uri(ctx)
        if uri in seen:
            raise TableListedTwice(f"tables[{i}] is the same table as tables[{seen[uri]}] "
                                   f"({uri})", uri=uri)
        seen[uri] = i
        if out and not same_store(out[0].store, ctx.store):
            raise TablesOnDifferentStores(
                f"tables[{i}] ({uri}) is on another store than tables[0] "
                f"({_uri(out[0])}): a multi-table transaction spans one store",
                uris=[_uri(out[0]), uri])
        out.append(ctx)
    return out


def _uri(ctx: TableContext) -> str:
    return ctx.store.uri.rstrip("/")


class MultiTransaction(CommitOnExit):
    """``with caslake.transaction(t1, t2) as tx: tx[t1].append(...)``; commits on a
    clean exit (see the module docstring).  ``ttl_ms``: the deadline after which
    another writer may abort the transaction (it must commit before).  ``txn``:
    ``(app id, version)`` recorded in every table, so a replay (a streaming
    micro-batch run again after a failure) changes nothing: exactly once into
    several sinks."""

    def __init__(self, tables: Sequence[Any], *, ttl_ms: int = DEFAULT_TTL_MS,
                 txn: tuple[str, int] | None = None) -> None:
        if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or ttl_ms <= 0:
            raise InvalidArgument(f"ttl_ms must be a positive integer, not {ttl_ms!r}")
        self._ttl_ms = ttl_ms
        self._parts = {_uri(ctx): Part(ctx, txn=txn) for ctx in _contexts(tables)}
        self._txn = txn
        self._done = False
        self.txn_id: str | None = None
        self.results: dict[str, CommitResult] = {}
        self._staged: tuple[TxnRecord, str, dict[str, CommitResult]] | None = None
        self._replayed: dict[str, CommitResult] | None = None

    def __getitem__(self, table: Any) -> Part:
        ctx = getattr(table, "context", None)
        uri = _uri(ctx) if isinstance(ctx, TableContext) else str(table).rstrip("/")
        part = self._parts.get(uri)
        if part is None:
            raise InvalidArgument(f"{uri} is not a table of this transaction "
                                  f"({', '.join(sorted(self._parts))})")
        return part

    def commit(self) -> dict[str, CommitResult]:
        """Commit every table's part atomically; the results by table URI."""
        self.stage()
        return self.decide()

    def stage(self) -> None:
        """Steps 2 and 3: create the record (pending), then commit each part as a
        staged version, in URI order.  On a failure the record is aborted (nothing
        becomes visible) and the error raised.  :meth:`commit` = this, then
        :meth:`decide`; separate for tests that stop between them."""
        if self._done:
            raise InvalidArgument("the transaction has already been committed or aborted")
        self._done = True
        parts = sorted(self._parts.items())
        if self._replay(parts):
            return
        coordinator = parts[0][1]._ctx
        self.txn_id = txn_id = new_token()
        now = coordinator.now_ms()
        record = TxnRecord(txn_id, PENDING, now, now + self._ttl_ms, tuple(
            TxnParticipant(uri, p._ctx.snapshot.manifest.table_id, p._ctx.snapshot.version)
            for uri, p in parts))
        try:
            etag = create_txn_record(coordinator.store, record)
        except BaseException:
            self._abort_parts(parts)
            raise
        ref = TransactionRef(txn_id, parts[0][0])
        results: list[CommitResult] = []
        try:
            for _, part in parts:
                part._ref = ref
                results.append(part.commit())
        except Exception:
            abort_pending(coordinator.store, txn_id, coordinator.commit_policy)
            self._abort_parts(parts[len(results) + 1:])
            for _, part in parts[:len(results) + 1]:
                with contextlib.suppress(CaslakeError):
                    part._ctx.refresh()  # the handle must not stay on an aborted version
            raise
        self._staged = (record, etag, {uri: r for (uri, _), r in zip(parts, results,
                                                                     strict=True)})

    def _replay(self, parts: Sequence[tuple[str, Part]]) -> bool:
        """Whether every table already records this transaction's ``txn`` token (a
        replayed micro-batch): then there is nothing to decide -- no record is
        written, the parts' uploads are removed, and each result is a no-op.  A
        token some tables lack goes the normal way (each part's commit checks
        it again on its base)."""
        if self._txn is None:
            return False
        heads = {uri: part._ctx.refresh() for uri, part in parts}
        if not all(txn_applied(h.manifest.txns, self._txn) for h in heads.values()):
            return False
        self._abort_parts(parts)
        self._replayed = {
            uri: noop_result(part._ctx, part._operation() if part._ops else "transaction",
                             heads[uri], started=part._started) for uri, part in parts}
        return True

    def decide(self) -> dict[str, CommitResult]:
        """Step 4, the commit point: swap the record to committed (settled by reading
        it back).  TransactionAborted if a writer aborted it first (after its
        deadline); CommitOutcomeUnknown if the swap stays unclear."""
        if self._replayed is not None:
            self.results, self._replayed = self._replayed, None
            return self.results
        if self._staged is None:
            raise InvalidArgument("the transaction has not been staged")
        record, etag, results = self._staged
        self._staged = None
        coordinator = self._parts[record.participants[0].uri]._ctx
        final = replace(record, state=COMMITTED, participants=tuple(
            replace(p, version=results[p.uri].version) for p in record.participants))
        decided = committed_or_raise(decide(coordinator.store, final, etag,
                                            coordinator.commit_policy))
        self.results = results
        for uri, part in self._parts.items():
            part._ctx.io.remember_decided(decided)
            if not results[uri].noop:  # (a replayed txn token commits nothing)
                after_commit(part._ctx, part._ctx.snapshot)  # e.g. exports on commit
        return results

    @staticmethod
    def _abort_parts(parts: Sequence[tuple[str, Part]]) -> None:
        """Remove the uploads of parts that never began a staging commit."""
        for _, part in parts:
            part.abort()

    def abort(self) -> None:
        """Forget every part's staged work and remove its uploads."""
        if self._done:
            return
        self._done = True
        self._abort_parts(list(self._parts.items()))


def transaction(*tables: Any, ttl_ms: int = DEFAULT_TTL_MS,
                txn: tuple[str, int] | None = None) -> MultiTransaction:
    """Change several tables of one store atomically (``txn``: an idempotency token
    recorded in every table, see :class:`MultiTransaction`).

    Examples:
        >>> import caslake, pyarrow as pa
        >>> schema = pa.schema([('id', pa.int64())])
        >>> a = caslake.create_table('memory://doc-multi-a', schema)
        >>> b = caslake.create_table('memory://doc-multi-b', schema)
        >>> with caslake.transaction(a, b) as tx:
        ...     tx[a].append(pa.table({'id': [1]}))
        ...     tx[b].append(pa.table({'id': [2]}))
        >>> snap = caslake.snapshot(a, b)
        >>> snap.to_arrow(a).num_rows, snap.to_arrow(b).num_rows
        (1, 1)
    """
    return MultiTransaction(tables, ttl_ms=ttl_ms, txn=txn)


@dataclass(frozen=True)
class MultiSnapshot:
    """One pinned version per table that holds every multi-table transaction whole
    or not at all (:func:`snapshot`)."""

    contexts: dict[str, TableContext]
    snapshots: dict[str, Snapshot]

    def _key(self, table: Any) -> str:
        ctx = getattr(table, "context", None)
        uri = _uri(ctx) if isinstance(ctx, TableContext) else str(table).rstrip("/")
        if uri not in self.snapshots:
            raise InvalidArgument(f"{uri} is not a table of this snapshot")
        return uri

    @property
    def versions(self) -> dict[str, int]:
        """The pinned version of each table, by URI."""
        return {uri: s.version for uri, s in self.snapshots.items()}

    def __getitem__(self, table: Any) -> Snapshot:
        return self.snapshots[self._key(table)]

    def scan(self, table: Any, columns: Sequence[str] | None = None,
             where: Any = None) -> Scan:
        """A scan of ``table`` at its pinned version."""
        uri = self._key(table)
        ctx = self.contexts[uri]
        return Scan(ctx.io, ctx.footers, self.snapshots[uri], columns, where, ctx.tombstones)

    def to_arrow(self, table: Any, **kwargs: Any) -> pa.Table:
        """``table`` at its pinned version, read into one ``pyarrow.Table``."""
        return self.scan(table, **kwargs).to_arrow()


def snapshot(*tables: Any) -> MultiSnapshot:
    """Pin one version of each table (on one store) that never shows part of a
    multi-table transaction (docs/protocol.md, "Multi-table transactions").

    Examples:
        >>> import caslake, pyarrow as pa
        >>> schema = pa.schema([('id', pa.int64())])
        >>> a = caslake.create_table('memory://doc-snap-a', schema)
        >>> b = caslake.create_table('memory://doc-snap-b', schema)
        >>> _ = a.append(pa.table({'id': [1, 2]}))
        >>> snap = caslake.snapshot(a, b)
        >>> sorted(snap.versions.values()), snap.to_arrow(a).num_rows
        ([0, 1], 2)
    """
    ctxs = _contexts(tables)
    heads = consistent_heads([ctx.io for ctx in ctxs])
    return MultiSnapshot({_uri(c): c for c in ctxs},
                         {_uri(c): h for c, h in zip(ctxs, heads, strict=True)})
