"""What segment folding does to summary width (issue 16): how many segment objects a
point read must open, by the order in which files arrive.

Builds one table per arrival order, one small file per append (memory store, the
default fold thresholds), then reads every segment reference's ``id`` summary from the
root manifest.  Width is a segment's id range over the table's whole range; "opened"
is the share of segment objects whose summary can hold a random key (what a point
read on ``id`` must fetch).  ``python -m benchmarks.segment_width [files]``.

Then what clustering compaction (issue 31) does to it: a table whose rows arrive in
random order (ids and timestamps independent), one small file per append, before
and after ``compact(zorder_by=["id", "ts"])``: the segments a point read on ``id``
and ``ts`` opens (summaries that may match, as the scan decides) and the files it
reads (the scan plan's), and the same for a read on ``id`` alone."""

from __future__ import annotations

import random
import statistics
import sys
import time
from datetime import datetime, timedelta

import pyarrow as pa

import caslake
from caslake.core import summary_matcher
from caslake.expr import compile_where

ROWS = 10


def _orders(files: int, rng: random.Random) -> dict[str, list[int]]:
    ordered = list(range(files))
    jitter = list(ordered)
    for lo in range(0, files, 64):  # roughly in time order: shuffled within windows
        window = jitter[lo:lo + 64]
        rng.shuffle(window)
        jitter[lo:lo + 64] = window
    shuffled = list(ordered)
    rng.shuffle(shuffled)
    return {"key order": ordered, "near order (64-file windows)": jitter,
            "random order": shuffled}


def measure(order: list[int], rng: random.Random) -> dict[str, float]:
    t = caslake.create_table("memory://", pa.schema([("id", pa.int64())]))
    field_id = t.snapshot.manifest.schema.fields[0].id
    start = time.perf_counter()
    for f in order:
        t.append(pa.table({"id": pa.array(range(f * ROWS, (f + 1) * ROWS), pa.int64())}))
    built = time.perf_counter() - start
    refs = [s for s in t.refresh().snapshot.manifest.segments if s.is_object]
    total = len(order) * ROWS
    spans = [(s.stats[field_id]["min"], s.stats[field_id]["max"]) for s in refs
             if s.stats is not None]
    widths = [(hi - lo + 1) / total for lo, hi in spans]
    keys = [rng.randrange(total) for _ in range(500)]
    opened = [sum(lo <= k <= hi for lo, hi in spans) for k in keys]
    return {"segments": len(refs), "mean width": statistics.mean(widths) if widths else 0.0,
            "max width": max(widths, default=0.0),
            "opened per point read": statistics.mean(opened),
            "opened share": statistics.mean(opened) / max(len(refs), 1),
            "inline files": sum(1 for s in t.snapshot.manifest.segments if not s.is_object),
            "build s": built}


CLUSTER_ROWS = 200  # rows per appended file of the clustering table
CLUSTER_FILE_BYTES = 32 * 1024  # target size of the clustered files (small: many of them)
TS = pa.timestamp("ms")


def _iso(ms: int) -> str:
    return (datetime(1970, 1, 1) + timedelta(milliseconds=ms)).isoformat()


def _opened(t: caslake.Table, where: str) -> tuple[int, int]:
    """Segment objects and data files a read ``where`` opens."""
    snap = t.snapshot
    match = summary_matcher(compile_where(where, t.schema), schema=snap.manifest.schema)
    segments = sum(1 for s in snap.manifest.segments
                   if s.is_object and match(s.stats or {}, s.row_count, s.manifest))
    return segments, len(t.scan(where=where).plan().tasks)


def clustering(files: int, rng: random.Random, probes: int = 40) -> dict[str, dict[str, float]]:
    """Point reads before and after z-ordering a randomly ordered table."""
    n = files * CLUSTER_ROWS
    ids = list(range(n))
    rng.shuffle(ids)
    ts = [rng.randrange(86_400_000 * 365) for _ in range(n)]
    schema = pa.schema([("id", pa.int64()), ("ts", TS)])
    t = caslake.create_table("memory://", schema)
    for lo in range(0, n, CLUSTER_ROWS):
        t.append(pa.table({"id": ids[lo:lo + CLUSTER_ROWS],
                           "ts": pa.array(ts[lo:lo + CLUSTER_ROWS], TS)}, schema=schema))
    picks = [rng.randrange(n) for _ in range(probes)]

    def measure() -> dict[str, float]:
        t.refresh()
        both = [_opened(t, f"id = {ids[i]} AND ts = TIMESTAMP '{_iso(ts[i])}'") for i in picks]
        alone = [_opened(t, f"id = {ids[i]}") for i in picks]
        return {"files": len(t.live_files()),
                "segments": sum(1 for s in t.snapshot.manifest.segments if s.is_object),
                "point segs": statistics.mean(s for s, _ in both),
                "point segs max": max(s for s, _ in both),
                "point files": statistics.mean(f for _, f in both),
                "point files max": max(f for _, f in both),
                "id-only files": statistics.mean(f for _, f in alone)}
    before = measure()
    start = time.perf_counter()
    t.compact(zorder_by=["id", "ts"], target_file_size=CLUSTER_FILE_BYTES)
    took = time.perf_counter() - start
    after = measure()
    after["compact s"] = took
    return {"random order": before, "after zorder(id, ts)": after}


def main(files: int = 3000) -> None:
    rng = random.Random(7)
    print(f"segment summary width, {files} files of {ROWS} rows, default fold thresholds")
    print(f"{'arrival':30} {'segments':>8} {'mean width':>11} {'max width':>10} "
          f"{'opened/read':>12} {'share':>6}")
    for name, order in _orders(files, rng).items():
        r = measure(order, rng)
        print(f"{name:30} {r['segments']:8.0f} {r['mean width']:11.3f} {r['max width']:10.3f} "
              f"{r['opened per point read']:12.2f} {r['opened share']:6.2f}")
    cluster_files = max(50, files // 6)
    print(f"\nclustering: {cluster_files} files of {CLUSTER_ROWS} rows in random order, "
          "point reads on id AND ts (mean / max), and on id alone (mean)")
    print(f"{'layout':22} {'files':>6} {'segments':>8} {'segs/read':>10} {'files/read':>11} "
          f"{'id-only files':>14}")
    for name, c in clustering(cluster_files, rng).items():
        print(f"{name:22} {c['files']:6.0f} {c['segments']:8.0f} "
              f"{c['point segs']:5.2f}/{c['point segs max']:<4.0f} "
              f"{c['point files']:6.2f}/{c['point files max']:<4.0f} {c['id-only files']:14.2f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3000)
