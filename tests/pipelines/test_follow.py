"""Following a table (docs/protocol.md, "Change feed", "Following a table"): each new
version's changes once, in order, polling with a delay that backs off while idle."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

from caslake.errors import InvalidArgument
from caslake.ops.change_feed import follow
from tests.pipelines.helpers import arrow, feed_rows, new_table, rows, with_version


def test_follow_yields_each_version_once_as_it_lands() -> None:
    t = new_table()
    t.append(arrow(rows(0, 10)))
    t.append(arrow(rows(10, 20)))  # the first read covers two versions
    seen: list[pa.RecordBatch] = []

    def writer() -> None:
        for lo in (20, 30):
            time.sleep(0.05)
            t.append(arrow(rows(lo, lo + 10)))
        t.delete("id < 5")

    th = threading.Thread(target=writer)
    th.start()
    for batch in t.follow(1, poll_initial_s=0.01, poll_max_s=0.02,
                          stop=lambda: sum(b.num_rows for b in seen) >= 45):
        seen.append(batch)
    th.join()
    feed = pa.Table.from_batches(seen)
    assert feed.column("_commit_version").to_pylist() == sorted(
        feed.column("_commit_version").to_pylist())
    assert feed_rows(feed) == {
        "insert": sorted(with_version(rows(0, 10), 1) + with_version(rows(10, 20), 2)
                         + with_version(rows(20, 30), 3) + with_version(rows(30, 40), 4)),
        "delete": with_version(rows(0, 5), 5)}


def test_follow_backs_off_while_idle_and_resets_when_a_version_lands() -> None:
    t = new_table()
    t.append(arrow(rows(0, 10)))
    sleeps: list[float] = []
    got: list[int] = []

    def sleep(s: float) -> None:
        sleeps.append(s)
        if len(sleeps) == 5:
            t.append(arrow(rows(10, 12)))

    def feed(lo: int, hi: int) -> object:
        return t.changes(lo, hi)

    it = follow(t.refresh, feed, 2, poll_initial_s=0.1, poll_max_s=0.5,  # type: ignore[arg-type]
                stop=lambda: len(sleeps) >= 8, sleep=sleep)
    for b in it:
        got.extend(b.column("id").to_pylist())
    assert got == [10, 11]
    assert sleeps == [0.1, 0.2, 0.4, 0.5, 0.5, 0.1, 0.2, 0.4]


def test_follow_from_now_sees_only_new_versions() -> None:
    t = new_table()
    t.append(arrow(rows(0, 10)))
    it = t.follow(poll_initial_s=0.001, poll_max_s=0.002)
    t.append(arrow(rows(10, 13)))
    first = next(it)
    assert first.column("id").to_pylist() == [10, 11, 12]
    it.close()


def test_follow_refuses_bad_polling() -> None:
    t = new_table()
    with pytest.raises(InvalidArgument):
        next(t.follow(0, poll_initial_s=0, poll_max_s=1))
    with pytest.raises(InvalidArgument):
        next(t.follow(0, poll_initial_s=2, poll_max_s=1))
    with pytest.raises(InvalidArgument):
        t.follow(-1)
