"""The change feed is exact (issue 30's acceptance): a seeded random walk of appends,
deletes, upserts, overwrites, compactions, purges and restores on a table and on a
plain-Python model of its rows.  Afterwards, for every version, the feed's rows equal
what the model says the commit changed (pairs by key for upserts, nothing for
compaction, all-NULL deletes for a purge), and for random ``a < b`` replaying
``changes(a + 1, b)`` onto the model of version ``a`` gives the model of version ``b``
(the model's rows, built with pyarrow, never caslake's own scan)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pytest

from tests.pipelines.helpers import arrow, new_table

Row = tuple[int, str | None, float | None]
State = dict[int, Row]


def key(r: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((x is None, x) for x in r)


@dataclass
class Expected:
    """What one committed version changed, by change type (sorted rows)."""

    op: str
    kinds: dict[str, list[Row]] = field(default_factory=dict)
    erased: int = 0  # a purge's all-NULL deletes
    purge: Callable[[Row], bool] | None = None  # a purge's predicate, for the replay

    def add(self, kind: str, rs: list[Row]) -> None:
        if rs:
            self.kinds[kind] = sorted(self.kinds.get(kind, []) + rs, key=key)


class Walk:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.t = new_table()
        self.states: list[State] = [{}]
        self.expected: list[Expected] = [Expected("create")]
        self.next_id = 0
        self.step = 0

    @property
    def cur(self) -> State:
        return self.states[-1]

    def fresh_rows(self, n: int, tag: str) -> list[Row]:
        out = []
        for _ in range(n):
            i = self.next_id
            self.next_id += 1
            out.append(self.row(i, tag))
        return out

    def row(self, i: int, tag: str) -> Row:
        r = self.rng
        return (i, None if r.random() < 0.1 else f"{tag}{r.randrange(6)}",
                None if r.random() < 0.1 else r.randrange(10_000) / 8)

    def commit(self, res: Any, new: State, exp: Expected) -> None:
        if res.noop:
            assert new == self.cur, f"step {self.step}: {exp.op} was a no-op but changed rows"
            return
        assert res.version == len(self.states), (res.version, len(self.states))
        self.states.append(new)
        self.expected.append(exp)

    def id_range(self) -> tuple[int, int]:
        ids = sorted(self.cur) or [0]
        a = self.rng.choice(ids)
        return a, a + self.rng.randrange(1, 60)

    # --- operations ---------------------------------------------------------------

    def append(self) -> None:
        rs = self.fresh_rows(self.rng.randrange(1, 300), "a")
        exp = Expected("append")
        exp.add("insert", rs)
        self.commit(self.t.append(arrow(rs)), {**self.cur, **{r[0]: r for r in rs}}, exp)

    def delete(self) -> None:
        if self.rng.random() < 0.5:
            lo, hi = self.id_range()
            where, pred = f"id BETWEEN {lo} AND {hi}", (lambda r: lo <= r[0] <= hi)
        else:
            tag = f"a{self.rng.randrange(6)}"
            where, pred = f"s = '{tag}'", (lambda r: r[1] == tag)
        gone = [r for r in self.cur.values() if pred(r)]
        exp = Expected("delete")
        exp.add("delete", gone)
        self.commit(self.t.delete(where), {i: r for i, r in self.cur.items() if not pred(r)},
                    exp)

    def upsert(self) -> None:
        ids = self.rng.sample(sorted(self.cur), min(len(self.cur), self.rng.randrange(0, 25)))
        data = [self.row(i, "u") for i in ids] + self.fresh_rows(self.rng.randrange(0, 10), "u")
        if not data:
            return
        exp = Expected("upsert")
        exp.add("update_preimage", [self.cur[i] for i in ids])
        exp.add("update_postimage", data[:len(ids)])
        exp.add("insert", data[len(ids):])
        self.commit(self.t.upsert(arrow(data), key="id"),
                    {**self.cur, **{r[0]: r for r in data}}, exp)

    def overwrite(self) -> None:
        kept = self.rng.sample(sorted(self.cur), min(len(self.cur), self.rng.randrange(0, 50)))
        data = [self.row(i, "o") for i in kept] + self.fresh_rows(self.rng.randrange(0, 200), "o")
        exp = Expected("overwrite")
        exp.add("delete", list(self.cur.values()))
        exp.add("insert", data)
        self.commit(self.t.overwrite(arrow(data)), {r[0]: r for r in data}, exp)

    def compact(self) -> None:
        self.commit(self.t.compact(target_file_size=1 << 20), dict(self.cur), Expected("compact"))

    def purge(self) -> None:
        lo, hi = self.id_range()

        def pred(r: Row) -> bool:
            return lo <= r[0] <= hi

        new = {i: r for i, r in self.cur.items() if not pred(r)}
        exp = Expected("purge", erased=len(self.cur) - len(new), purge=pred)
        rep = self.t.purge(f"id BETWEEN {lo} AND {hi}")
        self.t.refresh()
        self.commit(rep, new, exp)

    def restore(self) -> None:
        v = self.rng.randrange(0, len(self.states))
        target = self.states[v]
        exp = Expected("restore")
        exp.add("delete", [r for i, r in self.cur.items() if target.get(i) != r])
        exp.add("insert", [r for i, r in target.items() if self.cur.get(i) != r])
        self.commit(self.t.restore(version=v), dict(target), exp)

    def run(self, steps: int) -> None:
        ops = [self.append] * 4 + [self.delete] * 3 + [self.upsert] * 3 + [
            self.overwrite, self.compact, self.compact, self.purge, self.restore, self.restore]
        self.append()
        for self.step in range(steps):
            self.rng.choice(ops)()


def feed_by_version(feed: pa.Table) -> dict[int, Expected]:
    out: dict[int, Expected] = {}
    cols = [feed.column(c).to_pylist() for c in
            ("_commit_version", "_change_type", "id", "s", "f")]
    for v, kind, *row in zip(*cols, strict=True):
        e = out.setdefault(v, Expected(""))
        if row == [None, None, None]:
            assert kind == "delete"
            e.erased += 1
        else:
            e.add(kind, [tuple(row)])  # type: ignore[list-item]
    return out


def replay(state: State, feed: pa.Table, walk: Walk) -> State:
    """Apply the feed's rows onto ``state``, as a consumer would; a purge's all-NULL
    deletes are applied with the purge's own predicate (the feed cannot carry it)."""
    out = dict(state)
    by_v = feed_by_version(feed)
    for v in sorted(by_v):
        e = by_v[v]
        for kind in ("delete", "update_preimage"):
            for r in e.kinds.get(kind, []):
                assert out.pop(r[0]) == r, f"version {v}: {kind} of a row the state lacks"
        for kind in ("insert", "update_postimage"):
            for r in e.kinds.get(kind, []):
                assert r[0] not in out, f"version {v}: {kind} of a row already there"
                out[r[0]] = r
        if e.erased:
            pred = walk.expected[v].purge
            assert pred is not None
            erased = [i for i, r in out.items() if pred(r)]
            assert len(erased) == e.erased
            for i in erased:
                del out[i]
    return out


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_the_feed_equals_the_model(seed: int) -> None:
    walk = Walk(seed)
    walk.run(40)
    head = len(walk.states) - 1
    ops = {e.op for e in walk.expected}
    assert {"append", "delete", "upsert", "compact", "restore"} <= ops, ops
    got = feed_by_version(walk.t.changes(0, head).to_arrow())
    for v in range(head + 1):
        want, have = walk.expected[v], got.get(v, Expected(""))
        assert have.kinds == want.kinds, f"version {v} ({want.op})"
        assert have.erased == want.erased, f"version {v} ({want.op})"
    rng = random.Random(seed)
    for _ in range(12):
        a = rng.randrange(0, head)
        b = rng.randrange(a + 1, head + 1)
        feed = walk.t.changes(a + 1, b).to_arrow()
        assert set(feed.column("_commit_version").to_pylist()) <= set(range(a + 1, b + 1))
        assert replay(walk.states[a], feed, walk) == walk.states[b], (a, b)
        # the range's versions only, each as the whole feed had it
        part = feed_by_version(walk.t.changes(a, b).to_arrow())
        assert {v: (e.kinds, e.erased) for v, e in part.items()} == {
            v: (got[v].kinds, got[v].erased) for v in range(a, b + 1) if v in got}


def test_the_walk_covers_every_operation() -> None:
    seen: set[str] = set()
    for seed in (1, 2, 3, 4):
        walk = Walk(seed)
        walk.run(40)
        seen |= {e.op for e in walk.expected}
    assert seen >= {"append", "delete", "upsert", "overwrite", "compact", "purge", "restore"}
