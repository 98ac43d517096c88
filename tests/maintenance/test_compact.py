"""Compaction: same rows, fewer files, tombstones folded in; concurrent deletes are
never lost and deleted rows never come back."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import caslake
from caslake.api import Table
from caslake.cli import main as cli_main
from caslake.core.commit import CommitPolicy
from caslake.errors import (
    CaslakeError,
    InvalidArgument,
    PreconditionFailed,
    RetryBudgetExhausted,
)
from caslake.ops.verify import verify_table
from caslake.store.faults import Fault, FaultyStore
from tests.sample_data import live_ids as ids

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string())])


def rows(lo: int, hi: int) -> pa.Table:
    return pa.table({"id": list(range(lo, hi)), "v": [f"v{i % 97}" for i in range(lo, hi)]},
                    schema=SCHEMA)


@pytest.fixture(params=["memory", "local", pytest.param("s3", marks=pytest.mark.s3)])
def table(request: pytest.FixtureRequest, tmp_path: Path) -> Table:
    from tests.conftest import _store_uri

    uri, opts = _store_uri(str(request.param), request, tmp_path)
    t = caslake.create_table(uri, SCHEMA, storage_options=opts or None)
    t.storage_options = opts or None  # type: ignore[attr-defined]  # for reopening
    for i in range(6):  # six small files
        t.append(rows(i * 1000, (i + 1) * 1000))
    t.delete("v IN ('v3', 'v50')")  # a tombstone on every file
    t.delete("id >= 5000")  # the last file entirely
    return t


def test_compaction_keeps_rows_and_folds_files_and_tombstones(table: Table) -> None:
    before = ids(table)
    v = table.version
    res = table.compact()
    assert not res.noop and res.version == v + 1
    assert res.files_removed == 5 and res.files_added == 1  # the delete dropped the 6th
    assert res.rows_added == len(before) == len([i for i in range(5000) if i % 97 not in (3, 50)])
    m = table.snapshot.manifest
    assert m.operation == "compact" and not m.tombstones and m.totals.files == 1
    assert m.totals.deleted_rows == 0 and m.totals.live_rows == len(before)
    fresh = caslake.open_table(table.uri, storage_options=table.storage_options)  # type: ignore[attr-defined]
    assert ids(fresh) == before
    assert ids(fresh, version=v) == before  # time travel still reads the old files
    assert ids(fresh, where="id BETWEEN 100 AND 120") == [i for i in before if 100 <= i <= 120]
    assert verify_table(table.store, deep=True, all_versions=True).ok
    assert table.compact().noop  # one clean file: nothing left to do


def test_nothing_to_do_is_a_noop(tmp_path: Path) -> None:
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(rows(0, 100))
    assert t.compact().noop and t.version == 1
    t.delete("id = 5")  # 1% deleted: below the default 10%
    assert t.compact().noop
    assert t.compact(deleted_fraction=0.01).files_removed == 1
    assert ids(t) == [i for i in range(100) if i != 5]
    with pytest.raises(InvalidArgument):
        t.compact(deleted_fraction=0)


def test_a_large_clean_file_is_left_alone(tmp_path: Path) -> None:
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(rows(0, 50_000))  # one file
    t.append(rows(50_000, 50_010))
    t.append(rows(50_010, 50_020))
    big = max(t.io.live_files(t.snapshot), key=lambda f: f.size)
    res = t.compact(target_file_size=big.size)  # the big one is not "small"
    assert res.files_removed == 2
    assert big.path in {f.path for f in t.io.live_files(t.snapshot)}
    assert ids(t) == list(range(50_020))


def test_a_delete_racing_compaction_is_never_lost(tmp_path: Path) -> None:
    """A delete lands between compaction's read and its commit: compaction must
    re-plan (or conflict), never commit files that resurrect the deleted rows."""
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA)
    for i in range(4):
        t.append(rows(i * 100, (i + 1) * 100))
    store = FaultyStore(t.store, [])
    compactor = Table.load(store)
    other = caslake.open_table(uri)

    def other_deletes_first(key: str) -> CaslakeError:
        other.delete("id IN (7, 150, 399)")
        return PreconditionFailed(f"{key} changed", key=key)

    # The concurrent delete commits right before compaction's first pointer write,
    # which then fails with 412 as it would on S3.
    race = Fault(frozenset({"put"}), "before", prefix="_latest_manifest", times=1,
                 error=other_deletes_first)
    store.faults.append(race)
    res = compactor.compact()
    assert race.fired == 1
    assert not res.noop and res.version == 6  # 4 appends, the delete, then compact
    assert ids(caslake.open_table(uri)) == [i for i in range(400) if i not in (7, 150, 399)]
    assert verify_table(t.store, deep=True, all_versions=True).ok


def test_compaction_replans_on_a_concurrent_change_but_not_when_the_budget_ran_out(
        tmp_path: Path) -> None:
    """A concurrent change of a picked file is a ConcurrentModification: plan again.
    A retry budget that ran out is RetryBudgetExhausted: planning again would not
    help, so it is raised after one round (one rewrite, one pointer attempt)."""
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA)
    for i in range(4):
        t.append(rows(i * 100, (i + 1) * 100))
    other = caslake.open_table(uri)
    store = FaultyStore(t.store, [])
    compactor = Table.load(store)
    compactor.commit_policy = CommitPolicy(max_attempts=1, base_backoff_s=0.0,
                                           max_backoff_s=0.0)

    def other_appends_first(key: str) -> CaslakeError:
        other.append(rows(1000, 1001))  # touches no picked file: only the race is lost
        return PreconditionFailed(f"{key} changed", key=key)

    race = Fault(frozenset({"put"}), "before", prefix="_latest_manifest",
                 error=other_appends_first)
    store.faults.append(race)
    with pytest.raises(RetryBudgetExhausted):
        compactor.compact()
    assert race.fired == 1  # old code re-planned (rewrote the files) up to 3 more times
    assert ids(caslake.open_table(uri)) == [*range(400), 1000]

    # A delete of a picked file is a ConcurrentModification: the compaction plans again.
    race.times = race.fired + 1

    def other_deletes_first(key: str) -> CaslakeError:
        other.delete("id = 5")
        return PreconditionFailed(f"{key} changed", key=key)

    race.error = other_deletes_first
    compactor.commit_policy = CommitPolicy(max_attempts=2, base_backoff_s=0.0,
                                           max_backoff_s=0.0)
    res = compactor.compact()
    # round 1: the lost race, then the requirement fails on the new base; round 2 wins
    assert race.fired == 2 and not res.noop and res.attempts == 3
    assert ids(caslake.open_table(uri)) == [i for i in [*range(400), 1000] if i != 5]

    # A delete that leaves nothing to compact: the re-plan is a no-op, and the report
    # still counts the attempts of the lost round (found by the stateful model).
    other.append(rows(2000, 2010))  # a second small file: something to compact
    race.times = race.fired + 1

    def other_deletes_everything(key: str) -> CaslakeError:
        other.delete("id >= 0")
        return PreconditionFailed(f"{key} changed", key=key)

    race.error = other_deletes_everything
    res = compactor.compact()
    assert race.fired == 3 and res.noop and res.attempts == 2
    assert ids(caslake.open_table(uri)) == []


def test_a_delete_planned_before_compaction_lands_after_it(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA)
    for i in range(4):
        t.append(rows(i * 100, (i + 1) * 100))
    stale = caslake.open_table(uri)  # plans its delete on the pre-compaction files
    caslake.open_table(uri).compact()
    stale.delete("id BETWEEN 10 AND 19")
    assert ids(caslake.open_table(uri)) == [i for i in range(400) if not 10 <= i <= 19]


def test_cli_compact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA)
    t.append(rows(0, 10))
    t.append(rows(10, 20))
    assert cli_main(["compact", uri]) == 0
    assert "compacted 2 file(s) into 1" in capsys.readouterr().out
    assert ids(caslake.open_table(uri)) == list(range(20))
