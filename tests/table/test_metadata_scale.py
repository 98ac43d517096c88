"""Manifests scale: segment references, folding and removals keep the live file set
exact while the root stays small (docs/format.md, "Segments")."""

from __future__ import annotations

import random
import statistics
import uuid

import pyarrow as pa

import caslake
from caslake.core.changes import FANOUT, INLINE_LIMIT, Changes
from caslake.core.commit import commit_with_retry
from caslake.format.manifest import DataFile
from caslake.store.base import PUT

SCHEMA = pa.schema([("id", pa.int64())])


def fake_file(i: int) -> DataFile:
    return DataFile(path=f"data/x/{i:08d}.parquet", size=100 + i, etag=f'"{i:x}"', row_count=10,
                    row_group_count=1, footer_size=50, stats={1: {"min": i, "max": i}})


def commit(t: caslake.Table, add: list[DataFile], remove: list[DataFile] = ()) -> None:  # type: ignore[assignment]
    commit_with_retry(t.io, lambda base: Changes("append", add_files=tuple(add),
                                                 remove_files=tuple(remove)))


def live_paths(t: caslake.Table, version: int | None = None) -> list[str]:
    head = t.io.latest()
    snap = head if version is None else t.io.at_version(head, version)
    return [f.path for f in t.io.live_files(snap)]


def test_many_single_file_commits_keep_a_small_root() -> None:
    t = caslake.create_table(f"memory://{uuid.uuid4().hex}", SCHEMA)
    n = 1500
    root_bytes = []
    for i in range(n):
        before = t.store.counters.snapshot().get("bytes_out", 0)
        commit(t, [fake_file(i)])
        root_bytes.append(t.store.counters.snapshot()["bytes_out"] - before)
    m = t.io.latest().manifest
    assert live_paths(t) == [fake_file(i).path for i in range(n)]  # all files, in order
    assert m.totals.files == n and m.totals.rows == 10 * n
    # The root lists O(FANOUT * log n) segments and a bounded inline list.
    assert len(m.segments) <= FANOUT * 3
    assert any(s.file_count >= INLINE_LIMIT * FANOUT for s in m.segments)  # folds happened
    assert len(m.files) <= INLINE_LIMIT * FANOUT * FANOUT
    # A typical commit writes no more at 1,500 files than at 100 (folds are amortised).
    early, late = statistics.median(root_bytes[50:150]), statistics.median(root_bytes[-100:])
    assert late < 2 * early, (early, late)
    # Time travel through segment references sees exactly the prefix.
    for v in random.Random(1).sample(range(1, n + 1), 25):
        assert live_paths(t, v) == [fake_file(i).path for i in range(v)]


def test_removals_into_segments_are_exact_and_cleaned_by_folds() -> None:
    t = caslake.create_table(f"memory://{uuid.uuid4().hex}", SCHEMA)
    rng = random.Random(7)
    model: dict[str, DataFile] = {}
    nxt = 0
    for step in range(700):
        add = [fake_file(nxt + k) for k in range(rng.choice([1, 1, 1, 5, 40]))]
        nxt += len(add)
        remove = rng.sample(sorted(model.values(), key=lambda f: f.path),
                            k=min(len(model), rng.choice([0, 0, 0, 1, 3, 30])))
        commit(t, add, remove)
        for f in remove:
            del model[f.path]
        model.update({f.path: f for f in add})
        if step % 50 == 0:
            assert sorted(live_paths(t)) == sorted(model)
    m = t.io.latest().manifest
    assert sorted(live_paths(t)) == sorted(model)
    assert m.totals.files == len(model)
    assert m.totals.bytes == sum(f.size for f in model.values())
    # Invariant: `removed` names only files that live in a referenced segment.
    in_segments = {f.path for s in t.io.segment_entries(m.segments, where=t.snapshot.key)
                   for f in s}
    assert m.removed <= in_segments
    assert not (m.removed & {f.path for f in m.files})


def test_appending_real_files_costs_constant_puts_as_metadata_grows() -> None:
    t = caslake.create_table(f"memory://{uuid.uuid4().hex}", SCHEMA)
    commit(t, [fake_file(i) for i in range(5000)])  # a big table's worth of entries
    t.append(pa.table({"id": pa.array([0], pa.int64())}))  # spills them into a segment object
    t.refresh()
    t.store.counters.reset()
    res = t.append(pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
    assert res.requests[PUT] == 3
    assert t.scan(version=res.version).snapshot.manifest.totals.files == 5002


def test_segment_tiers_cascade_with_chunked_commits() -> None:
    """Commits of more than INLINE_LIMIT entries each write their own segment: the
    folds must still cascade to the higher tiers (a rule that looked only at the
    last FANOUT segments stopped one tier up, and the root grew linearly)."""
    from tests.conftest import segment_thresholds
    with segment_thresholds(inline=2, fanout=2, block=2):
        from caslake.core import changes
        t = caslake.create_table(f"memory://{uuid.uuid4().hex}", SCHEMA)
        for c in range(64):
            commit(t, [fake_file(c * 3 + k) for k in range(3)])  # 3 > INLINE_LIMIT (2)
        m = t.refresh().snapshot.manifest
        tiers = [changes._level(s.file_count) for s in m.segments]
        assert m.totals.files == 192
        assert max(tiers) > changes.MAX_FOLD_LEVEL, tiers  # merged up to the top tier
        top = changes.MAX_FOLD_LEVEL + 1
        # below the top tier, fewer than FANOUT of each tier wait for a merge; top-tier
        # segments (never merged further) hold INLINE_LIMIT * FANOUT**top entries or more
        assert sum(x < top for x in tiers) <= (changes.FANOUT - 1) * top + 1, tiers
        assert sum(x >= top for x in tiers) <= 192 // (2 * 2**top), tiers
        assert sorted(live_paths(t)) == sorted(fake_file(i).path for i in range(192))
