"""Group commit's rows of the crash-at-every-step suite (docs/protocol.md, "Group
commit"): publishing an intent, folding, and settling it.

The operation: an append with group commit on that loses its first race (a rival
commits between its manifest and pointer writes), so it publishes its intent and
folds it, with a pending intent of another writer, into the next version.  For
each of its store calls, a crash, a lost reply or a failure before the call
(tests/reliability/crash_harness.py) must leave:

* our rows in the table once or not at all, the other writer's intent's rows once
  or not at all, the rival's once, and a table that verifies deep;
* an outcome that tells the truth: a returned append is in the table (at the
  version it names, which holds its commit id); a typed error other than
  ``CommitOutcomeUnknown`` means it is not -- and a later writer that folds the
  pending intents must not apply it either;
* a later folding append that works and applies what is still pending at most once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pyarrow as pa
import pytest

import caslake
from caslake.core import (
    CommitPolicy,
    GroupWrite,
    MetadataIO,
    as_reader,
    write_prepare,
    write_requirements,
)
from caslake.core.commit import CommitOutcome, commit_with_retry
from caslake.core.group import new_intent, publish
from caslake.ops.verify import verify_table
from caslake.ops.write import write_data_files
from caslake.store import ObjectStore, open_store
from caslake.store.faults import FaultyStore
from tests.reliability.crash_harness import MODES, Point, Template, fault_each_call

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False),
                    pa.field("writer", pa.int64(), nullable=False)])
# No watching before the fold and no stickiness: the number of watch polls depends on
# timing, and every fault point must replay the calls the harness counted first.
# (A watch round only reads; test_group_commit covers it.)
GROUP = CommitPolicy(group_commit=True, max_attempts=4, group_poll_s=0.002,
                     base_backoff_s=0.001, settle_attempts=3, group_fold_after_s=0,
                     group_sticky_s=0)
OURS, FOREIGN, BASE = [7, 8], [50, 51], [1, 2]


def _batch(ids: list[int], writer: int) -> pa.Table:
    return pa.table({"id": ids, "writer": [writer] * len(ids)}, schema=SCHEMA)


def _make(uri: str, tagged: bool = False) -> None:
    """The base table, and another writer's intent still pending (far deadline);
    ``tagged``: the intent carries a txn, as a stream's micro-batch does."""
    t = caslake.create_table(uri, SCHEMA)
    t.append(_batch(BASE, 0))
    schema = t.snapshot.manifest.schema
    files = write_data_files(t.store, as_reader(_batch(FOREIGN, 5), SCHEMA), schema,
                             t.write_options)
    intent = new_intent(t.context.pointer_key,
                        GroupWrite("append", tuple(files), schema, None,
                                   ("foreign", 1) if tagged else None),
                        commit_id="foreign-commit", table_id=t.snapshot.manifest.table_id,
                        now_ms=t.context.now_ms(), ttl_ms=3_600_000)
    assert publish(t.io, intent)


def _folding_append(store: ObjectStore, uri: str, ids: list[int], writer: int,
                    rival_id: int, txn: tuple[str, int] | None = None) -> CommitOutcome:
    """An append (tagged ``txn``) with group commit that loses its first race to a
    rival (group commit off, so the rival folds nobody) and therefore folds what is
    pending."""
    io = MetadataIO(store)
    schema = io.latest().manifest.schema
    files = write_data_files(io.store, as_reader(_batch(ids, writer), SCHEMA), schema,
                             caslake.WriteOptions())
    rival = caslake.open_table(uri)

    def lose_once(stage: str, attempt: int) -> None:
        if stage == "manifest-written" and attempt == 1:
            rival.append(_batch([rival_id], 9))

    return commit_with_retry(io, write_prepare("append", files, remove_all=False, txn=txn),
                             requirements=write_requirements("append", schema, txn=txn),
                             policy=GROUP, on_attempt=lose_once,
                             group=GroupWrite("append", tuple(files), schema, None, txn))


@dataclass
class Case:
    template: Template[None]
    tagged: bool

    def setup(self) -> str:
        return self.template.fresh()


def _open_faulty(uri: str) -> tuple[tuple[FaultyStore, str], FaultyStore]:
    store = FaultyStore(open_store(uri))
    return (store, uri), store


def _runner(tagged: bool) -> Callable[[tuple[FaultyStore, str]], CommitOutcome]:
    def run(handle: tuple[FaultyStore, str]) -> CommitOutcome:
        store, uri = handle
        return _folding_append(store, uri, OURS, 1, 900, ("ours", 1) if tagged else None)
    return run


def _counts(uri: str) -> dict[int, int]:
    out: dict[int, int] = {}
    for i in caslake.open_table(uri).scan().to_arrow()["id"].to_pylist():
        out[i] = out.get(i, 0) + 1
    return out


def _once_or_never(counts: dict[int, int], ids: list[int], what: str, where: str) -> bool:
    seen = [counts.get(i, 0) for i in ids]
    assert seen in ([0] * len(ids), [1] * len(ids)), f"{where}: {what} rows {seen}"
    return seen[0] == 1


def _tokens_match(uri: str, ours: bool, foreign: bool, where: str) -> None:
    """A tagged write's txn is recorded exactly when its rows are in the table."""
    txns = caslake.open_table(uri).snapshot.manifest.txns
    assert ("ours" in txns) == ours and ("foreign" in txns) == foreign, (where, txns)


def _checker(tagged: bool) -> Callable[[Point], str]:
    return partial(_check, tagged=tagged)


def _check(p: Point, tagged: bool) -> str:
    counts = _counts(p.uri)
    ours = _once_or_never(counts, OURS, "our", p.where)
    foreign = _once_or_never(counts, FOREIGN, "the other intent's", p.where)
    if tagged:
        _tokens_match(p.uri, ours, foreign, p.where)
    assert counts.get(900, 0) in (0, 1), p.where  # the rival, if our run got that far
    assert verify_table(open_store(p.uri), deep=True, all_versions=True).ok, p.where
    if p.outcome == "ok":
        assert isinstance(p.returned, CommitOutcome)
        t = caslake.open_table(p.uri)
        assert t.io.at_version(t.snapshot, p.returned.snapshot.version
                               ).manifest.has_commit(p.returned.commit_id), p.where
    # A later writer folds whatever is still pending: ours only if the outcome allows.
    _folding_append(open_store(p.uri), p.uri, [300], 3, 901)
    after = _counts(p.uri)
    ours_after = _once_or_never(after, OURS, "our (after a later fold)", p.where)
    foreign_after = _once_or_never(after, FOREIGN, "the other intent's (after a later fold)",
                                   p.where)
    assert after.get(300) == 1 and after.get(901) == 1, p.where
    if p.outcome not in ("ok", "crash", "CommitOutcomeUnknown"):
        assert not ours_after, f"{p.where}: a definite {p.outcome} was applied later"
    if tagged:
        _tokens_match(p.uri, ours_after, foreign_after, p.where)
        # the writer retries with the same token (a stream's replay): applied once
        _folding_append(open_store(p.uri), p.uri, OURS, 1, 902, ("ours", 1))
        assert _counts(p.uri).get(OURS[0]) == 1, f"{p.where}: the replay applied twice"
    return "new" if ours else "old"


@pytest.fixture(params=["plain", "txn"])
def case(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Case]:
    tagged = request.param == "txn"
    template: Template[None] = Template("memory", partial(_make, tagged=tagged), tmp_path)
    yield Case(template, tagged)
    template.close()


@pytest.mark.parametrize("mode", MODES)
def test_group_append_fault_at_every_store_call(case: Case, mode: str) -> None:
    outcomes = fault_each_call("group-append", "memory", mode, case.setup, _open_faulty,
                               _runner(case.tagged), _checker(case.tagged), min_calls=8,
                               truthful=True)
    assert sum(outcomes.values()) >= 8
