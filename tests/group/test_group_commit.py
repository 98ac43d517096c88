"""Group commit (issue 33; docs/protocol.md, "Group commit"): appends that lose
the pointer race publish intents and fold into shared versions.  Checked against
an independent account of what was acknowledged: every acknowledged append's rows
are in the table exactly once (pyarrow reads the data files), at the version its
result names, and that version's manifest lists its commit."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import caslake
from caslake.core import CommitPolicy
from caslake.core.group import INTENT_PREFIX, IntentSkipped, parse_intent
from caslake.errors import CorruptMetadata, InvalidArgument
from caslake.ops.verify import verify_table

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False),
                    pa.field("writer", pa.int64(), nullable=False)])
GROUP = CommitPolicy(group_commit=True, max_attempts=3, group_poll_s=0.005)


def _race(uri: str, writers: int, per_writer: int, policy: CommitPolicy
          ) -> list[tuple[caslake.CommitResult, list[int]]]:
    """``writers`` threads append; each acknowledged append with the ids it sent."""
    results: list[tuple[caslake.CommitResult, list[int]]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    go = threading.Barrier(writers)

    def run(w: int) -> None:
        t = caslake.open_table(uri)
        t.commit_policy = policy
        go.wait()
        for i in range(per_writer):
            ids = [w * 10_000 + i * 10 + k for k in range(1 + (i % 3))]
            try:
                r = t.append(pa.table({"id": ids, "writer": [w] * len(ids)}, schema=SCHEMA))
            except BaseException as e:  # recorded, asserted below
                errors.append(e)
                continue
            with lock:
                results.append((r, ids))

    threads = [threading.Thread(target=run, args=(w,)) for w in range(writers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[:3]
    return results


def test_racing_appends_fold_into_shared_versions_each_exactly_once(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    caslake.create_table(uri, SCHEMA)
    results = _race(uri, writers=8, per_writer=12, policy=GROUP)
    assert len(results) == 96
    t = caslake.open_table(uri)
    # pyarrow over the live data files: every acknowledged row once, nothing else
    files = [f["uri"].removeprefix("file://") for f in t.live_files()]
    ids = sorted(pa.concat_tables([pq.read_table(f) for f in files])["id"].to_pylist())
    assert ids == sorted(i for _, sent in results for i in sent)
    # each result names a version that holds its commit and, by then, its rows
    for r, sent in results:
        assert r.rows_added == len(sent)
        assert t.io.at_version(t.snapshot, r.version).manifest.has_commit(r.commit_id)
        at = t.scan(version=r.version, where=f"id IN ({', '.join(map(str, sent))})")
        assert sorted(at.to_arrow()["id"].to_pylist()) == sorted(sent)
    # fewer versions than commits: some versions applied several writers' intents
    assert t.version < len(results), (t.version, len(results))
    assert any(r.intents_applied > 1 for r, _ in results)
    assert verify_table(t.store, deep=True, all_versions=True).ok
    # settled intents are removed by their owners
    assert list(t.store.list(INTENT_PREFIX)) == []


def test_a_lone_writer_costs_what_it_did(tmp_path: Path) -> None:
    """No race, no intent: the same requests as with group commit off."""
    costs = []
    for policy in (CommitPolicy(), GROUP):
        t = caslake.create_table(str(tmp_path / f"t{len(costs)}"), SCHEMA)
        t.commit_policy = policy
        t.append(pa.table({"id": [1], "writer": [0]}, schema=SCHEMA))
        r = t.append(pa.table({"id": [2], "writer": [0]}, schema=SCHEMA))
        costs.append({k: v for k, v in r.requests.items() if not k.startswith("bytes")})
        assert r.intents_applied == 0
    assert costs[0] == costs[1]


def test_a_corrupt_or_foreign_intent_is_skipped_with_a_typed_warning(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA)
    deadline = 9_999_999_999_999
    t.store.put(f"{INTENT_PREFIX}{deadline:013d}-junk.json", b"{not json")
    with pytest.raises(CorruptMetadata):
        parse_intent(b"{not json", "x")
    with pytest.warns(IntentSkipped):
        results = _race(uri, writers=4, per_writer=6, policy=GROUP)
    assert len(results) == 24
    got = caslake.open_table(uri).scan().to_arrow()["id"].to_pylist()
    assert sorted(got) == sorted(i for _, sent in results for i in sent)


@pytest.mark.s3
def test_group_commit_over_wire_faults_and_a_cas_limit_tells_the_truth(
        moto_server: str, tmp_path: Path) -> None:
    """Four processes append with group commit on, through the fault proxy (the
    standard mix: SlowDown, resets, lost replies, delays) and a 15/s per-key CAS
    limit.  Every acknowledged append is in the table once, at a version that
    holds its commit; no failed append is; unknown outcomes are all-or-nothing."""
    from caslake.testing.moto_server import storage_options
    from caslake.testing.stress import run_appends
    from caslake.testing.wire_faults import run_fault_proxy, standard_mix
    from tests.conftest import make_bucket

    bucket = make_bucket(moto_server)
    with run_fault_proxy(moto_server, seed=7, lifetime_s=300, cas_rate_limit=15.0) as proxy:
        opts = dict(storage_options(proxy.endpoint))
        proxy.set_faults(standard_mix())
        result = run_appends(f"s3://{bucket}/g", opts, writers=4, seconds=8,
                             workdir=tmp_path / "run", policy="group")
        proxy.set_faults([])
        fired = proxy.fired()
    assert result.ok, result.failures[:5]
    assert result.commits >= 4, result.commits  # a loaded machine commits few
    assert fired.get("lost_reply", 0) and fired.get("cas_rate_limit", 0), fired
    assert result.facts["acked_in_shared_versions"] > 0


def test_history_json_shows_how_many_intents_each_version_applied(tmp_path: Path) -> None:
    """``caslake history --json``, run as a user runs it, round-trips and counts
    the commits each group version holds; they add up to every acknowledged append."""
    import json
    import subprocess
    import sys

    uri = str(tmp_path / "t")
    caslake.create_table(uri, SCHEMA)
    results = _race(uri, writers=6, per_writer=8, policy=GROUP)
    out = subprocess.run([sys.executable, "-m", "caslake.cli", "history", uri, "--json"],
                         capture_output=True, text=True, check=True).stdout
    entries = json.loads(out)
    held = {cid for e in entries for cid in e["intent_commit_ids"]}
    plain = {e["commit_id"] for e in entries if e["intents_applied"] == 0}
    assert {r.commit_id for r, _ in results} <= held | plain
    assert sum(e["intents_applied"] or (e["operation"] == "append") for e in entries) == 48
    assert all(e["intents_applied"] == len(e["intent_commit_ids"]) for e in entries)


def test_gc_removes_settled_intents_and_keeps_live_ones(tmp_path: Path) -> None:
    """An intent whose deadline the head has passed is settled (applied or never
    will be) and gc deletes it; one that may still be folded stays."""
    from datetime import timedelta

    from caslake.core.group import GroupWrite, new_intent, publish

    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA)
    t.append(pa.table({"id": [1], "writer": [0]}, schema=SCHEMA))
    write = GroupWrite("append", (), t.snapshot.manifest.schema, None)
    now = t.snapshot.manifest.created_at_ms
    old = new_intent(t.context.pointer_key, write, commit_id="c-old",
                     table_id=t.snapshot.manifest.table_id, now_ms=now - 60_000, ttl_ms=1_000)
    live = new_intent(t.context.pointer_key, write, commit_id="c-live",
                      table_id=t.snapshot.manifest.table_id, now_ms=now, ttl_ms=3_600_000)
    assert publish(t.io, old) and publish(t.io, live)
    t.append(pa.table({"id": [2], "writer": [0]}, schema=SCHEMA))  # head passes old's deadline
    report = t.gc(retention=timedelta(hours=24), dry_run=True)
    assert report.deleted.get("_intents") == [old.key]
    t.gc(retention=timedelta(hours=24))
    assert [m.key for m in t.store.list(INTENT_PREFIX)] == [live.key]
    assert sorted(t.scan().to_arrow()["id"].to_pylist()) == [1, 2]


def _lose_every_race(uri: str, rival_ids: list[int]) -> object:
    """An ``on_attempt`` hook: before each of our pointer writes, a rival (group
    commit off, so it folds nobody) commits first."""
    rival = caslake.open_table(uri)

    def hook(stage: str, attempt: int) -> None:
        if stage == "manifest-written":
            i = 1_000_000 + len(rival_ids)
            rival_ids.append(i)
            rival.append(pa.table({"id": [i], "writer": [99]}, schema=SCHEMA))

    return hook


def test_an_intent_nobody_folds_by_its_deadline_never_lands(tmp_path: Path) -> None:
    """The deadline rule: our folds keep losing and nobody else folds us, so at the
    deadline the commit fails with a definite RetryBudgetExhausted, its rows are in
    no version, and a later fold does not pick the expired intent up."""
    from caslake.core import as_reader, write_prepare, write_requirements
    from caslake.core.commit import commit_with_retry
    from caslake.core.group import GroupWrite
    from caslake.errors import RetryBudgetExhausted
    from caslake.ops.write import write_data_files

    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA)
    schema = t.snapshot.manifest.schema
    mine = pa.table({"id": [7, 8], "writer": [1, 1]}, schema=SCHEMA)
    files = write_data_files(t.store, as_reader(mine, SCHEMA), schema, t.write_options)
    rivals: list[int] = []
    policy = CommitPolicy(group_commit=True, max_attempts=3, intent_ttl_ms=2_600,
                          group_poll_s=0.01)
    with pytest.raises(RetryBudgetExhausted, match="deadline"):
        commit_with_retry(t.io, write_prepare("append", files, remove_all=False),
                          requirements=write_requirements("append", schema), policy=policy,
                          on_attempt=_lose_every_race(uri, rivals),
                          group=GroupWrite("append", tuple(files), schema, None))
    assert rivals  # we did lose races
    # later group folds by others do not apply the expired intent
    _race(uri, writers=3, per_writer=3, policy=GROUP)
    ids = caslake.open_table(uri).scan().to_arrow()["id"].to_pylist()
    assert 7 not in ids and 8 not in ids
    assert set(rivals) <= set(ids)


def test_the_commit_group_property_turns_it_on_for_every_writer(tmp_path: Path) -> None:
    """``commit.group = true`` on the table: writers with the default policy (as the
    CLI, Spark's driver and a plain ``open_table`` have) fold too."""
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA)
    with pytest.raises(InvalidArgument, match=r"commit\.group"):
        t.set_properties({"commit.group": "yes"})
    t.set_properties({"commit.group": "true"})
    results = _race(uri, writers=6, per_writer=10, policy=CommitPolicy())
    t = caslake.open_table(uri)
    assert t.version - 1 < len(results) == 60  # one version was set_properties
    got = sorted(t.scan().to_arrow()["id"].to_pylist())
    assert got == sorted(i for _, sent in results for i in sent)


def test_a_writer_contended_lately_publishes_at_once_and_a_lone_one_never(
        tmp_path: Path) -> None:
    """Sticky contention: within ``group_sticky_s`` of a commit that took the group
    path, the process's next append to that table publishes its intent at once (its
    version applies it as an intent); a table never contended keeps the classic
    swap, and so does the same table once the window has passed."""
    from caslake.core.group import note_contended

    quiet = caslake.create_table(str(tmp_path / "quiet"), SCHEMA)
    busy = caslake.create_table(str(tmp_path / "busy"), SCHEMA)
    for t in (quiet, busy):
        t.commit_policy = CommitPolicy(group_commit=True, group_fold_after_s=0.0,
                                       group_sticky_s=0.5)
    note_contended(busy.store.uri, busy.context.pointer_key)
    rows = pa.table({"id": [1], "writer": [0]}, schema=SCHEMA)
    r = busy.append(rows)
    assert r.intents_applied == 1  # its own intent, folded by itself
    assert busy.snapshot.manifest.intents[0].commit_id == r.commit_id
    r = quiet.append(rows)
    assert r.intents_applied == 0 and not quiet.snapshot.manifest.intents

    time.sleep(0.6)  # the window has passed (the last join was the busy append)
    r = busy.append(rows)
    assert r.intents_applied == 0
    assert sorted(busy.scan().to_arrow()["id"].to_pylist()) == [1, 1]


def test_few_writers_fold_so_each_intent_is_read_by_about_two(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the writers of the oldest live intents fold; the rest watch the pointer.
    Counted from the group trace (caslake.core.group.TRACE_ENV): the GETs of intent
    objects over all folds stay near two per intent published, where every waiting
    writer folding would read each pending intent once per writer."""
    import json

    from caslake.core.group import TRACE_ENV

    trace = tmp_path / "trace"
    trace.mkdir()
    monkeypatch.setenv(TRACE_ENV, str(trace))
    uri = str(tmp_path / "t")
    caslake.create_table(uri, SCHEMA)
    policy = CommitPolicy(group_commit=True, group_poll_s=0.005, group_fold_after_s=0.02)
    results = _race(uri, writers=12, per_writer=5, policy=policy)
    assert len(results) == 60
    lines = [json.loads(x) for p in trace.glob("*.jsonl") for x in p.read_text().splitlines()]
    grouped = [c for c in lines if c["event"] == "commit" and c["outcome"] != "plain"]
    folds = [f for f in lines if f["event"] == "fold"]
    reads = sum(f["phases"].get("read", {}).get("get", 0) for f in folds)
    assert len(grouped) >= 12, len(grouped)  # the race did take the group path
    assert reads <= 3 * len(grouped), (reads, len(grouped), len(folds))
    # pyarrow over the live data files: every acknowledged row once
    files = [f["uri"].removeprefix("file://") for f in caslake.open_table(uri).live_files()]
    ids = sorted(pa.concat_tables([pq.read_table(f) for f in files])["id"].to_pylist())
    assert ids == sorted(i for _, sent in results for i in sent)
