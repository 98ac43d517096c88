"""Typed commit requirements (caslake/core/requirements.py), the operation
runner's report, and the pointer key as a parameter."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

import caslake
from caslake.api import Table
from caslake.core.conflicts import PredicateCondition
from caslake.core.requirements import (
    BaseVersionIs,
    FilesUntouchedSince,
    ReadSetUnchanged,
    RefAtVersion,
    SchemaUnchanged,
    TxnNotApplied,
    write_requirements,
)
from caslake.errors import (
    CommitConflict,
    ConcurrentModification,
    InvalidArgument,
    ReadValidationFailed,
    RetryBudgetExhausted,
    TxnAlreadyApplied,
)
from caslake.format.keys import POINTER_KEY
from caslake.format.schema import TableSchema
from caslake.store import open_store

SCHEMA = pa.schema([("id", pa.int64())])


def batch(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64())})


def table() -> Table:
    t = caslake.create_table(f"memory://{uuid.uuid4().hex}", SCHEMA)
    t.append(batch(1, 2, 3), txn=("app", 7))
    return t


def test_each_requirement_holds_on_its_base_and_raises_its_type_when_not() -> None:
    t = table()
    io, v1 = t.io, t.snapshot
    path = io.live_files(v1)[0].path
    held = [BaseVersionIs(1, "overwrite"), SchemaUnchanged(v1.manifest.schema),
            FilesUntouchedSince(v1, frozenset({path}), "compact"),
            ReadSetUnchanged(1, (PredicateCondition("id = 2"),), "upsert"),
            TxnNotApplied(("app", 8)), RefAtVersion(POINTER_KEY, 1)]
    for r in held:
        r.validate(v1, io)  # nothing raised
    t.delete("id = 2")  # version 2: a tombstone on the file, a change to id = 2
    v2 = t.snapshot
    broken: list[tuple[object, type[CommitConflict]]] = [
        (BaseVersionIs(1, "overwrite"), ConcurrentModification),
        (SchemaUnchanged(TableSchema.from_arrow(pa.schema([("x", pa.string())]))),
         ConcurrentModification),
        (FilesUntouchedSince(v1, frozenset({path}), "compact"), ConcurrentModification),
        (ReadSetUnchanged(1, (PredicateCondition("id = 2"),), "upsert"), ReadValidationFailed),
        (TxnNotApplied(("app", 7)), TxnAlreadyApplied),
        (RefAtVersion(POINTER_KEY, 1), ConcurrentModification),
    ]
    for r, kind in broken:
        with pytest.raises(kind) as e:
            r.validate(v2, io)  # type: ignore[attr-defined]
        assert type(e.value) is kind and e.value.help
    # A change to rows the read set cannot match is no conflict.
    ReadSetUnchanged(1, (PredicateCondition("id = 3000"),), "upsert").validate(v2, io)
    with pytest.raises(InvalidArgument):
        ReadSetUnchanged(5, (), "upsert").validate(v2, io)


def test_conflict_kinds_say_what_to_do_and_are_commit_conflicts() -> None:
    helps = {k: k.default_help for k in (ConcurrentModification, ReadValidationFailed,
                                         RetryBudgetExhausted, TxnAlreadyApplied)}
    assert len(set(helps.values())) == 4
    for kind, text in helps.items():
        assert issubclass(kind, CommitConflict)
        assert kind("x").help == text and f"(help: {text})" in str(kind("x"))


def test_write_requirements_check_the_txn_first() -> None:
    schema = TableSchema.from_arrow(SCHEMA)
    reqs = write_requirements("overwrite", schema, txn=("a", 1), base_version=3)
    assert [type(r) for r in reqs] == [TxnNotApplied, SchemaUnchanged, BaseVersionIs]
    assert [type(r) for r in write_requirements("append", schema)] == [SchemaUnchanged]


def test_a_replayed_txn_is_a_noop_through_the_commit_loop() -> None:
    t = table()
    res = t.append(batch(4), txn=("app", 7))
    assert res.noop and t.scan().count() == 3


def test_commit_result_reports_requests_and_bytes_of_the_operation() -> None:
    t = table()
    before = t.store.counters.snapshot()
    res = t.append(batch(10, 11))
    after = t.store.counters.snapshot()
    assert res.requests == {k: after.get(k, 0) - before.get(k, 0) for k in after}
    assert res.bytes_out == after["bytes_out"] - before["bytes_out"] > 0
    assert res.bytes_in == after["bytes_in"] - before["bytes_in"]
    assert (res.files_added, res.rows_added, res.noop) == (1, 2, False)


def test_the_pointer_key_is_a_parameter() -> None:
    """A handle on another pointer key commits there and leaves main's pointer alone
    (the slot the refs feature builds on; no behaviour change for main)."""
    t = table()
    store = open_store(t.uri)
    store.put("_ref_test", store.get(POINTER_KEY).data)
    branch = Table.load(store, pointer_key="_ref_test")
    res = branch.append(batch(99))
    assert res.version == 2 and branch.scan().count() == 4
    main = caslake.open_table(t.uri)
    assert main.version == 1 and main.scan().count() == 3
    assert branch.refresh().version == 2
