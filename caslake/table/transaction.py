"""Transactions: several appends, deletes and upserts committed as one version.

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
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from caslake.errors import CommitConflict, InvalidArgument, SchemaMismatch, StoreError
from caslake.expr import compile_where
from caslake.format.keys import new_token
from caslake.format.manifest import DataFile, TombstoneRef
from caslake.table.changes import Changes
from caslake.table.commit import commit_with_retry
from caslake.table.delete import (
    Condition,
    DeletePlan,
    KeyCondition,
    Planner,
    PredicateCondition,
    changed_since,
    changes_for,
    check_where,
    plan_delete,
    touched_since,
    write_delete,
)
from caslake.table.history import commit_counts
from caslake.table.metadata_io import Snapshot
from caslake.table.upsert_keys import resolve_duplicate_keys
from caslake.table.write import SchemaConformer, as_reader, write_data_files

if TYPE_CHECKING:
    from caslake.table.table import CommitResult, Table


class Transaction:
    """Use as ``with table.transaction() as tx: ...``; commits on a clean exit."""

    def __init__(self, table: Table, *, read_version: int | None = None,
                 planner: Planner | None = None) -> None:
        self._table = table
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

    def append(self, data: Any) -> None:
        self._check_open()
        files = write_data_files(self._table.store, as_reader(data),
                                 self._table.table_schema, self._table.write_options)
        self._files.extend(files)
        self._ops.append("append")

    def delete(self, where: Any) -> None:
        self._check_open()
        where = check_where(where)
        compile_where(where, self._table.schema)  # fail now on a bad predicate
        self._conditions.append(PredicateCondition(where))
        self._ops.append("delete")
        self._params.setdefault("where", str(where))

    def upsert(self, data: Any, key: list[str] | str, *, on_duplicate: str = "error") -> None:
        """Delete current rows whose ``key`` equals a key in ``data``; append ``data``.
        A key twice in ``data`` is a DuplicateKey error unless ``on_duplicate`` is
        "last" or "first" (see :mod:`caslake.table.upsert_keys`)."""
        self._check_open()
        keys = [key] if isinstance(key, str) else list(key)
        if not keys:
            raise InvalidArgument("upsert needs at least one key column")
        table = as_reader(data).read_all()
        schema = self._table.schema
        for k in keys:
            if k not in table.column_names:
                raise SchemaMismatch(f"upsert key column {k!r} is not in the data", column=k)
            if k not in schema.names:
                raise SchemaMismatch(f"upsert key column {k!r} is not in the table", column=k)
        conformed = resolve_duplicate_keys(pa.Table.from_batches(
            [SchemaConformer(schema, table.schema)(b) for b in table.to_batches()],
            schema=schema), keys, on_duplicate)
        key_table = conformed.select(keys).group_by(keys).aggregate([])
        self._conditions.append(KeyCondition(key_table))
        self._files.extend(write_data_files(self._table.store, conformed.to_reader(),
                                            self._table.table_schema,
                                            self._table.write_options))
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
        from caslake.table.table import CommitResult

        self._check_open()
        self._done = True
        table = self._table
        io = table.io
        before = table.store.counters.snapshot()
        files = tuple(self._files)
        conditions = tuple(self._conditions)
        operation = self._operation() if self._ops else "transaction"
        state: dict[str, Any] = {"plan": None, "refs": (), "dropped": (), "hidden": 0}

        commit_id = new_token()

        def plan_on(base: Snapshot) -> None:
            plan = self._planner(io, table.footers, table.tombstones, base, conditions)
            refs, dropped, hidden = write_delete(io, plan, commit_id=commit_id,
                                                 conditions=conditions)
            state.update(plan=plan, refs=refs, dropped=dropped, hidden=hidden)

        def prepare(base: Snapshot) -> Changes | None:
            if self._read_version is not None:
                if self._read_version > base.version:
                    raise InvalidArgument(f"read_version {self._read_version} is newer than "
                                          f"the table (version {base.version})")
                reason = changed_since(io, io.at_version(base, self._read_version), base,
                                       conditions)
                if reason is not None:
                    raise CommitConflict(
                        f"{reason} after version {self._read_version}, which this "
                        f"{operation} was computed from",
                        help="read the table again and recompute the change")
            plan: DeletePlan | None = state["plan"]
            if conditions and (plan is None or touched_since(
                    io, plan.base, base, plan.target_paths | {f.path for f in state["dropped"]})):
                plan_on(base)
            refs: tuple[TombstoneRef, ...] = state["refs"]
            dropped: tuple[DataFile, ...] = state["dropped"]
            return changes_for(operation, refs, dropped, files, dict(self._params),
                               state["hidden"])

        outcome = commit_with_retry(io, prepare, policy=table.commit_policy,
                                    commit_id=commit_id)
        table._set_snapshot(outcome.snapshot)
        after = table.store.counters.snapshot()
        m = outcome.snapshot.manifest
        self.result = CommitResult(
            version=m.version, commit_id=outcome.commit_id, operation=operation,
            attempts=outcome.attempts, noop=outcome.noop,
            **({} if outcome.noop else commit_counts(m)),
            requests={k: after.get(k, 0) - before.get(k, 0) for k in after})
        return self.result

    def abort(self) -> None:
        """Forget the staged work and remove the data files it uploaded (never
        referenced by any manifest, so removing them is safe)."""
        if self._done:
            return
        self._done = True
        for f in self._files:
            with contextlib.suppress(StoreError):
                self._table.store.delete(f.path)

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()
