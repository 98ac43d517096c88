"""Transactions: several appends, deletes and upserts committed as one version;
and :func:`commit_rewrite`, the commit of an UPDATE or a MERGE (rows hidden by one
tombstone, their new values and inserted rows appended, planned from the base).

Appended data is written to data files as soon as ``append``/``upsert`` is
called; deletes are planned when the transaction commits, against the table's
latest committed version, so a transaction's deletes never touch the rows it
appends itself.  On a lost CAS race the commit rebases: if no concurrent
commit touched the files the deletes target, the same tombstone is reused;
otherwise the deletes are planned again on the new version (never resurrecting
a row another commit deleted, never deleting a row twice).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any, Self

import pyarrow as pa

from caslake.core import (
    Changes,
    CommitResult,
    Condition,
    FilesUntouchedSince,
    GroupWrite,
    KeyCondition,
    PredicateCondition,
    ReadSetUnchanged,
    Requirement,
    Snapshot,
    TableContext,
    TxnNotApplied,
    check_txn,
    run_operation,
)
from caslake.errors import InvalidArgument, SchemaMismatch, StoreError
from caslake.expr import compile_where
from caslake.format.keys import new_token
from caslake.format.manifest import DataFile, TombstoneRef
from caslake.format.partition import PartitionSpec, write_spec
from caslake.ops.delete import (
    DeletePlan,
    Planner,
    changes_for,
    check_where,
    plan_delete,
    write_delete,
)
from caslake.ops.upsert import resolve_duplicate_keys
from caslake.ops.write import SchemaConformer, as_reader, write_data_files


def upsert_keys(key: Sequence[str] | str, data_columns: Iterable[str],
                table_columns: Iterable[str]) -> list[str]:
    """The key columns of an upsert: at least one, each in the data and in the table.
    Raises InvalidArgument / SchemaMismatch naming the column."""
    keys = [key] if isinstance(key, str) else list(key)
    if not keys:
        raise InvalidArgument("upsert needs at least one key column")
    data, table = set(data_columns), set(table_columns)
    for k in keys:
        if k not in data:
            raise SchemaMismatch(f"upsert key column {k!r} is not in the data", column=k)
        if k not in table:
            raise SchemaMismatch(f"upsert key column {k!r} is not in the table", column=k)
    return keys


class CommitOnExit:
    """A ``with`` block that commits on a clean exit and aborts when it raises."""

    def commit(self) -> object:
        raise NotImplementedError

    def abort(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()


class Transaction(CommitOnExit):
    """Use as ``with table.transaction() as tx: ...``; commits on a clean exit.

    Works on a table handle's :class:`TableContext` (``table.context``); the
    requests and bytes it reports count from its creation, uploads included."""

    #: An append-only commit may join a group commit, whose fold puts its files in
    #: another writer's version (a multi-table part must not: its version is staged).
    GROUPABLE = True

    def __init__(self, context: TableContext, *, read_version: int | None = None,
                 planner: Planner | None = None, started: dict[str, int] | None = None,
                 txn: tuple[str, int] | None = None) -> None:
        self._ctx = context
        # Idempotent commits: ``(app id, version)`` recorded with this commit; a
        # base that already records it makes the commit a no-op (docs/protocol.md,
        # "Transactions and upsert").
        self._txn = check_txn(txn) if txn is not None else None
        # ``started``: ``context.meter()`` taken before files staged here were uploaded
        # elsewhere (Spark's upsert), so the gc fence and the costs count from then.
        self._started = started if started is not None else context.meter()
        # How deletes are planned on a base version (``plan_delete``; the Spark
        # delete plugs in one that computes the matching positions on executors).
        self._planner: Planner = planner or plan_delete
        # Optimistic read validation: the change was computed from this version,
        # so it must not commit over a concurrent change to rows it could match.
        self._read_version = read_version
        self._files: list[DataFile] = []
        self._conditions: list[Condition] = []
        self._ops: list[str] = []
        self._params: dict[str, str] = {}
        self._done = False
        self.result: CommitResult | None = None

    # --- staging -----------------------------------------------------------------

    def _check_open(self) -> None:
        if self._done:
            raise InvalidArgument("the transaction has already been committed or aborted")

    def _schema(self) -> pa.Schema:
        return self._ctx.snapshot.manifest.schema.to_arrow()

    def _spec(self) -> PartitionSpec | None:
        """The spec staged files are written with: the handle's version's default
        (each file records its spec id, and specs are never removed, so a spec
        changed concurrently leaves the file's partition valid)."""
        return write_spec(self._ctx.snapshot.manifest.partitioning)

    def append(self, data: Any) -> None:
        self._check_open()
        files = write_data_files(self._ctx.store, as_reader(data, self._schema()),
                                 self._ctx.snapshot.manifest.schema,
                                 self._ctx.write_options, spec=self._spec())
        self._files.extend(files)
        self._ops.append("append")

    def delete(self, where: Any) -> None:
        self._check_open()
        where = check_where(where)
        compile_where(where, self._schema())  # fail now on a bad predicate
        self._conditions.append(PredicateCondition(where))
        self._ops.append("delete")
        self._params.setdefault("where", str(where))

    def upsert(self, data: Any, key: list[str] | str, *, on_duplicate: str = "error") -> None:
        """Delete current rows whose ``key`` equals a key in ``data``; append ``data``.
        A key twice in ``data`` is a DuplicateKey error unless ``on_duplicate`` is
        "last" or "first" (see :mod:`caslake.ops.upsert`)."""
        self._check_open()
        schema = self._schema()
        table = as_reader(data, schema).read_all()
        keys = upsert_keys(key, table.column_names, schema.names)
        conformed = resolve_duplicate_keys(pa.Table.from_batches(
            [SchemaConformer(schema, table.schema)(b) for b in table.to_batches()],
            schema=schema), keys, on_duplicate)
        key_table = conformed.select(keys).group_by(keys).aggregate([])
        self._conditions.append(KeyCondition(key_table))
        self._files.extend(write_data_files(self._ctx.store, conformed.to_reader(),
                                            self._ctx.snapshot.manifest.schema,
                                            self._ctx.write_options, spec=self._spec()))
        self._ops.append("upsert")
        self._params.setdefault("key", ",".join(keys))

    def stage(self, operation: str, *, files: Sequence[DataFile] = (),
              conditions: Sequence[Condition] = (),
              params: Mapping[str, str] | None = None) -> None:
        """Stage data files already uploaded (e.g. by Spark executors, with the
        table's schema) and delete conditions as one ``operation`` of this
        transaction.  ``abort`` removes the files like those of ``append``."""
        self._check_open()
        self._files.extend(files)
        self._conditions.extend(conditions)
        self._ops.append(operation)
        for k, v in (params or {}).items():
            self._params.setdefault(k, v)

    # --- commit ----------------------------------------------------------------------

    def _operation(self) -> str:
        kinds = set(self._ops)
        return self._ops[0] if len(kinds) == 1 else "transaction"

    def commit(self) -> CommitResult:
        self._check_open()
        self._done = True
        ctx = self._ctx
        io = ctx.io
        files = tuple(self._files)
        conditions = tuple(self._conditions)
        operation = self._operation() if self._ops else "transaction"
        state: dict[str, Any] = {"plan": None, "refs": (), "dropped": (), "hidden": 0}
        commit_id = new_token()
        requirements: tuple[Requirement, ...] = ()
        if self._txn is not None:
            requirements = (TxnNotApplied(self._txn),)  # checked first: a replay is a no-op
        if self._read_version is not None:
            requirements += (ReadSetUnchanged(self._read_version, conditions, operation),)
        requirements += self._requirements()

        def plan_on(base: Snapshot) -> None:
            plan = self._planner(io, ctx.footers, ctx.tombstones, base, conditions)
            refs, dropped, hidden = write_delete(io, plan, commit_id=commit_id,
                                                 conditions=conditions)
            state.update(plan=plan, refs=refs, dropped=dropped, hidden=hidden)

        def prepare(base: Snapshot) -> Changes | None:
            # Deletes are not a requirement that fails: when a concurrent commit
            # touched their files they are planned again on the new base.
            plan: DeletePlan | None = state["plan"]
            if conditions and (plan is None or not FilesUntouchedSince(
                    plan.base, frozenset(plan.target_paths | {f.path for f in state["dropped"]}),
                    operation).holds(base, io)):
                plan_on(base)
            refs: tuple[TombstoneRef, ...] = state["refs"]
            dropped: tuple[DataFile, ...] = state["dropped"]
            changes = changes_for(operation, refs, dropped, files, dict(self._params),
                                  state["hidden"])
            if changes is None and self._txn is not None:  # nothing to change: still
                changes = Changes(operation, params=dict(self._params))  # record the txn
            return self._finish(operation, None if changes is None
                                else replace(changes, txn=self._txn))

        # Appends only: the commit does not depend on the base, so it may join a
        # group commit (deletes and upserts re-plan on each base: classic loop).
        group = (GroupWrite(operation, files, ctx.snapshot.manifest.schema, None, self._txn)
                 if self.GROUPABLE and files and not conditions and self._read_version is None
                 else None)
        self.result = run_operation(ctx, operation, prepare, requirements=requirements,
                                    started=self._started, commit_id=commit_id, group=group)
        return self.result

    def _requirements(self) -> tuple[Requirement, ...]:
        """More requirements of the commit (a multi-table part adds its own)."""
        return ()

    def _finish(self, operation: str, changes: Changes | None) -> Changes | None:
        """The changes to commit on a base, from what was planned on it (a
        multi-table part marks them staged)."""
        return changes

    def abort(self) -> None:
        """Forget the staged work and remove the data files it uploaded (never
        referenced by any manifest, so removing them is safe)."""
        if self._done:
            return
        self._done = True
        for f in self._files:
            with contextlib.suppress(StoreError):
                self._ctx.store.delete(f.path)



@dataclass(frozen=True)
class Rewrite:
    """What an UPDATE or MERGE planned on a base version: the live rows it hides
    (``plan``, positions per file, as a delete's) and the rows it appends (in the
    table's schema, in the order they are to be written)."""

    plan: DeletePlan
    rows: pa.Table
    # Data files already uploaded with the rows to append (Spark's tasks write them,
    # with the base's partition spec); committed with the files ``rows`` become.
    files: tuple[DataFile, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.plan.per_file and not self.rows.num_rows and not self.files


def commit_rewrite(ctx: TableContext, operation: str, plan: Callable[[Snapshot], Rewrite], *,
                   params: Mapping[str, str], requirements: Sequence[Requirement] = (),
                   in_order: Mapping[str, str] | None = None) -> CommitResult:
    """Commit ``plan(base)`` as one version: one tombstone and the new data files
    (docs/protocol.md, "Update" and "Merge").  On a lost race the same objects are
    committed on the new base when no commit since removed or tombstoned a file
    whose rows it hides and the schema is the same; otherwise ``plan`` runs again
    on the new base (the earlier attempt's uploads are orphans for gc).  A plan
    that changes nothing commits nothing (``noop``).  New files are written with
    the base's partition spec; ``in_order`` params are recorded only when the rows
    land in the order planned (an unpartitioned table: a partitioned write groups
    them by partition)."""
    io = ctx.io
    started = ctx.meter()
    commit_id = new_token()
    state: dict[str, Any] = {}

    def planned_on(base: Snapshot) -> None:
        rewrite = plan(base)  # typed errors of the values raise before any upload
        files: tuple[DataFile, ...] = ()
        refs: tuple[TombstoneRef, ...] = ()
        dropped: tuple[DataFile, ...] = ()
        hidden = 0
        spec = write_spec(base.manifest.partitioning)
        if not rewrite.empty:
            files = rewrite.files
            if rewrite.rows.num_rows:
                files += tuple(write_data_files(ctx.store, rewrite.rows.to_reader(),
                                                base.manifest.schema, ctx.write_options,
                                                spec=spec))
            refs, dropped, hidden = write_delete(io, rewrite.plan, commit_id=commit_id,
                                                 conditions=())
        ordered = spec is None and not rewrite.files
        state.update(rewrite=rewrite, files=files, refs=refs, dropped=dropped, hidden=hidden,
                     params={**params, **(in_order or {})} if ordered else dict(params))

    def prepare(base: Snapshot) -> Changes | None:
        rewrite: Rewrite | None = state.get("rewrite")
        if rewrite is None or rewrite.plan.base.manifest.schema != base.manifest.schema or \
                not FilesUntouchedSince(rewrite.plan.base, frozenset(
                    rewrite.plan.target_paths | {f.path for f in state["dropped"]}),
                    operation).holds(base, io):
            planned_on(base)
        return changes_for(operation, state["refs"], state["dropped"], state["files"],
                           state["params"], state["hidden"])

    return run_operation(ctx, operation, prepare, requirements=requirements,
                         started=started, commit_id=commit_id)
