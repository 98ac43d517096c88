"""`make demo`: the main job on an embedded local-filesystem table, no services.

Creates a table, appends from several concurrent writers, runs a filtered scan,
lists the history and time-travels, printing what each step did and cost.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import caslake

TS_UTC: pa.DataType = pa.timestamp("us", tz="UTC")
FIELDS: list[pa.Field[Any]] = [
    pa.field("event_id", pa.int64()), pa.field("user_id", pa.string()),
    pa.field("event_time", TS_UTC), pa.field("amount", pa.float64())]
SCHEMA = pa.schema(FIELDS)


def events(writer: int, batch: int, n: int) -> pa.Table:
    rng = np.random.default_rng(writer * 1000 + batch)
    first = (writer * 1000 + batch) * n
    start = datetime(2026, 11, 1, tzinfo=UTC) + timedelta(hours=batch)
    return pa.table({
        "event_id": pa.array(np.arange(first, first + n), pa.int64()),
        "user_id": pa.array([f"user-{u:05d}" for u in rng.integers(0, 5_000, n)]),
        "event_time": pa.array([start + timedelta(seconds=int(s))
                                for s in np.sort(rng.integers(0, 3600, n))],
                               pa.timestamp("us", tz="UTC")),
        "amount": pa.array(rng.gamma(2.0, 20.0, n).round(2), pa.float64()),
    }, schema=SCHEMA)


def step(title: str) -> None:
    print(f"\n== {title}")


ROWS = 50_000  # per append


def demo_root(path: str | None) -> Path:
    """``path`` if given, else a fresh temporary directory (two runs never collide)."""
    return Path(path) if path else Path(tempfile.mkdtemp(prefix="caslake-demo-"))


def main(path: str | None = None) -> int:
    root = demo_root(path)
    if path is not None and root.exists():
        shutil.rmtree(root)  # a path given again: start afresh
    uri = str(root / "events") if path is None else str(root)

    step(f"create table at {uri}")
    table = caslake.create_table(uri, SCHEMA)
    print(f"version {table.version}, schema: "
          + ", ".join(f"{f.name}:{f.type}" for f in table.schema))

    writers, batches, rows = 4, 5, ROWS
    step(f"{writers} concurrent writers x {batches} appends x {rows:,} rows")
    results: list[caslake.CommitResult] = []
    lock = threading.Lock()

    def writer(w: int) -> None:
        t = caslake.open_table(uri)
        for b in range(batches):
            r = t.append(events(w, b, rows))
            with lock:
                results.append(r)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    elapsed = time.perf_counter() - t0
    table.refresh()
    retries = sum(r.attempts - 1 for r in results)
    puts = sum(r.requests.get("put", 0) for r in results)
    print(f"{len(results)} commits in {elapsed:.2f}s -> version {table.version}; "
          f"{retries} CAS retries; {puts} PUTs ({puts / len(results):.1f} per append)")
    total = table.scan(columns=["event_id"]).count()
    print(f"rows visible: {total:,} (expected {writers * batches * rows:,})")

    step("filtered scan: one user's large purchases")
    where = "user_id = 'user-00042' AND amount > 50"
    table.store.counters.reset()
    t0 = time.perf_counter()
    scan = table.scan(columns=["event_id", "event_time", "amount"], where=where)
    plan = scan.plan()
    got = scan.to_arrow()
    c = table.store.counters.snapshot()
    print(f"where {where!r}: {got.num_rows} rows in {time.perf_counter() - t0:.3f}s")
    print(f"plan: files {plan.files_total - plan.files_pruned}/{plan.files_total}, row groups "
          f"{plan.row_groups_total - plan.row_groups_pruned}/{plan.row_groups_total}, "
          f"{plan.bytes_to_read:,} bytes of column chunks; requests {c}")
    for row in got.slice(0, 3).to_pylist():
        print("  ", row)

    step("history (newest 5)")
    for h in table.history(limit=5):
        print(f"v{h.version:<3} {h.created_at:%H:%M:%S.%f} {h.operation:<7} "
              f"+{h.summary.get('added_rows', 0):,} rows -> {h.total_rows:,} rows")

    step("time travel")
    v = table.version // 2
    print(f"version {v}: {table.scan(columns=['event_id'], version=v).count():,} rows")
    first = table.history()[-2]
    print(f"as of {first.created_at:%H:%M:%S.%f} (first append): "
          f"{table.scan(columns=['event_id'], as_of=first.created_at).count():,} rows")
    print(f"latest (version {table.version}): {table.scan(columns=['event_id']).count():,} rows")
    print(f"\ndone: inspect it with `caslake show {uri}` or `caslake history {uri}`")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else None))
