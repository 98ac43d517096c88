"""Group commit with idempotency tokens and transactions (docs/protocol.md, "Group
commit"): ``txn`` appends -- what a streaming micro-batch commits -- and
append-only ``Table.transaction()`` blocks fold into shared versions, and every
``(app_id, version)`` is applied exactly once, replays included.  Checked against
pyarrow reading the live data files, not against caslake's own reports."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import caslake
from caslake.core import CommitPolicy, as_reader
from caslake.core.group import GroupWrite, new_intent, parse_intent, publish
from caslake.errors import CorruptMetadata
from caslake.ops.write import write_data_files

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False),
                    pa.field("writer", pa.int64(), nullable=False)])
GROUP = CommitPolicy(group_commit=True, max_attempts=3, group_poll_s=0.005)


def _live_ids(t: caslake.Table) -> list[int]:
    """Every row of the live data files, read by pyarrow (nothing is deleted here)."""
    files = [f["uri"].removeprefix("file://") for f in t.live_files()]
    if not files:
        return []
    return pa.concat_tables([pq.read_table(f) for f in files])["id"].to_pylist()


def _in_threads(target: Callable[[int], None], args: list[int]) -> None:
    """Run ``target(a)`` for each of ``args`` in its own thread, and wait for all."""
    pool = [threading.Thread(target=target, args=(a,)) for a in args]
    for th in pool:
        th.start()
    for th in pool:
        th.join()


def _batch(app: int, seq: int) -> pa.Table:
    ids = [app * 10_000 + seq * 10 + k for k in range(1 + seq % 3)]
    return pa.table({"id": ids, "writer": [app] * len(ids)}, schema=SCHEMA)


def _run_threads(uri: str, apps: int, batches: int, commit: str
                 ) -> list[caslake.CommitResult]:
    """Two writers per app -- a stream and its replay after a restart -- each commit
    the app's batches 0..``batches``-1 in order, tagged ``(stream-<app>, seq)``, as
    ``txn`` appends or as transactions.  (A token counts as applied once the table
    records that app at that version or later: an app's batches go in order.)"""
    results: list[caslake.CommitResult] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    go = threading.Barrier(2 * apps)

    def run(app: int) -> None:
        t = caslake.open_table(uri)
        t.commit_policy = GROUP
        go.wait()
        for seq in range(batches):
            txn = (f"stream-{app}", seq)
            try:
                if commit == "append":
                    r = t.append(_batch(app, seq), txn=txn)
                else:
                    with t.transaction(txn=txn) as tx:
                        tx.append(_batch(app, seq))
                    assert tx.result is not None
                    r = tx.result
            except BaseException as e:  # recorded, asserted below
                errors.append(e)
                continue
            with lock:
                results.append(r)

    _in_threads(run, [w % apps for w in range(2 * apps)])
    assert not errors, errors[:3]
    return results


@pytest.mark.parametrize("commit", ["append", "transaction"])
def test_txn_writes_fold_and_apply_each_token_exactly_once(tmp_path: Path,
                                                           commit: str) -> None:
    uri = str(tmp_path / "t")
    caslake.create_table(uri, SCHEMA)
    work = [(app, seq) for app in range(3) for seq in range(8)]
    results = _run_threads(uri, apps=3, batches=8, commit=commit)
    assert len(results) == 2 * len(work)  # every call returned: applied or a no-op
    t = caslake.open_table(uri)
    expected = sorted(i for app, seq in work for i in _batch(app, seq)["id"].to_pylist())
    assert sorted(_live_ids(t)) == expected  # each token's rows once, replays never
    applied = [r for r in results if not r.noop]
    assert len(applied) == len(work)
    # the group path was taken: some versions applied several writers' commits
    assert any(r.intents_applied > 1 for r in applied)
    assert t.version < len(applied)
    assert t.snapshot.manifest.txns == {f"stream-{app}": 7 for app in range(3)}
    for r in applied:
        assert t.io.at_version(t.snapshot, r.version).manifest.has_commit(r.commit_id)


def _intent(t: caslake.Table, ids: list[int], txn: tuple[str, int] | None,
            commit_id: str) -> None:
    schema = t.snapshot.manifest.schema
    data = pa.table({"id": ids, "writer": [9] * len(ids)}, schema=SCHEMA)
    files = write_data_files(t.store, as_reader(data, SCHEMA), schema, t.write_options)
    intent = new_intent(t.context.pointer_key,
                        GroupWrite("append", tuple(files), schema, None, txn=txn),
                        commit_id=commit_id, table_id=t.snapshot.manifest.table_id,
                        now_ms=int(time.time() * 1000), ttl_ms=20_000)
    assert publish(t.io, intent)


def test_a_fold_skips_applied_and_duplicate_tokens(tmp_path: Path) -> None:
    """Pending intents of other writers: one whose token the table already records,
    two with the same new token, one with a later token.  The fold applies the
    first of the duplicates and the later one, never the stale one."""
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA)
    t.append(pa.table({"id": [1], "writer": [0]}, schema=SCHEMA), txn=("app", 5))
    _intent(t, [50], ("app", 5), "c-stale")     # already applied: never folded
    _intent(t, [70], ("app", 7), "c-dup-a")     # the same token twice: once
    _intent(t, [71], ("app", 7), "c-dup-b")
    _intent(t, [90], ("other", 0), "c-other")   # another app
    _intent(t, [11], None, "c-plain")           # no token
    # a lone group append folds whatever is pending once it joins: lose one race
    rival = caslake.open_table(uri)
    t.commit_policy = GROUP
    hook_fired: list[int] = []

    def lose_once(stage: str, attempt: int) -> None:
        if stage == "manifest-written" and not hook_fired:
            hook_fired.append(attempt)
            rival.append(pa.table({"id": [2], "writer": [0]}, schema=SCHEMA))

    from caslake.core import write_prepare, write_requirements
    from caslake.core.commit import commit_with_retry
    schema = t.snapshot.manifest.schema
    mine = pa.table({"id": [3], "writer": [0]}, schema=SCHEMA)
    files = write_data_files(t.store, as_reader(mine, SCHEMA), schema, t.write_options)
    out = commit_with_retry(t.io, write_prepare("append", files, remove_all=False,
                                                txn=("app", 8)),
                            requirements=write_requirements("append", schema, txn=("app", 8)),
                            policy=GROUP, on_attempt=lose_once,
                            group=GroupWrite("append", tuple(files), schema, None,
                                             txn=("app", 8)))
    assert hook_fired
    m = out.snapshot.manifest
    applied = {a.commit_id for a in m.intents}
    assert "c-stale" not in applied
    assert len(applied & {"c-dup-a", "c-dup-b"}) == 1
    assert {"c-other", "c-plain", out.commit_id} <= applied
    assert m.txns == {"app": 8, "other": 0}
    ids = Counter(_live_ids(caslake.open_table(uri)))
    assert 50 not in ids
    assert ids[70] + ids[71] == 1
    assert all(ids[i] == 1 for i in (1, 2, 3, 11, 90))


def test_an_intent_token_round_trips_and_a_bad_one_is_corrupt(tmp_path: Path) -> None:
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA)
    schema = t.snapshot.manifest.schema
    intent = new_intent("_latest_manifest", GroupWrite("append", (), schema, None,
                                                       txn=("app", 3)),
                        commit_id="c", table_id="tid", now_ms=1_000, ttl_ms=5_000)
    again = parse_intent(intent.to_bytes(), intent.key)
    assert again.write.txn == ("app", 3)
    plain = new_intent("_latest_manifest", GroupWrite("append", (), schema, None),
                       commit_id="c", table_id="tid", now_ms=1_000, ttl_ms=5_000)
    assert b'"format_version":1' in plain.to_bytes()  # readers without txn still fold it
    bad = intent.to_bytes().replace(b'["app",3]', b'["app",-1]')
    with pytest.raises(CorruptMetadata, match="txn"):
        parse_intent(bad, intent.key)


def test_stream_micro_batches_fold_through_the_spark_driver_commit(tmp_path: Path) -> None:
    """Spark's streaming sink commits each micro-batch with ``commit_files`` and the
    txn ``(app id, batch id)``; with ``commit.group = true`` on the table, racing
    streams fold into shared versions and each batch lands once (a replayed batch,
    with the same deterministic commit id as Spark makes it, is a no-op)."""
    from caslake.spark.commit import commit_files
    from caslake.spark.stream import stream_commit_id

    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA)
    t.set_properties({"commit.group": "true"})
    schema = t.snapshot.manifest.schema
    start = t.version
    results: list[caslake.CommitResult] = []
    errors: list[BaseException] = []
    go = threading.Barrier(4)

    def stream(app: int) -> None:
        go.wait()
        for batch in range(6):
            for _ in range(1 + (batch == 2)):  # batch 2 runs twice: a replay uploads anew
                files = write_data_files(t.store, as_reader(_batch(app, batch), SCHEMA),
                                         schema, t.write_options)
                cid = stream_commit_id(f"q{app}", batch, (f.path for f in files))
                try:
                    results.append(commit_files(
                        t.store, uri=uri, storage_options={}, schema=schema, files=files,
                        start_version=start, commit_id=cid, overwrite=False,
                        txn=(f"q{app}", batch), params={}))
                except BaseException as e:  # recorded, asserted below
                    errors.append(e)

    _in_threads(stream, list(range(4)))
    assert not errors, errors[:3]
    assert len(results) == 28 and sum(r.noop for r in results) == 4
    t = caslake.open_table(uri)
    expected = sorted(i for a in range(4) for b in range(6) for i in _batch(a, b)["id"].to_pylist())
    assert sorted(_live_ids(t)) == expected
    assert any(r.intents_applied > 1 for r in results)
