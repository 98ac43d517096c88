"""What segment folding does to summary width (issue 16): how many segment objects a
point read must open, by the order in which files arrive.

Builds one table per arrival order, one small file per append (memory store, the
default fold thresholds), then reads every segment reference's ``id`` summary from the
root manifest.  Width is a segment's id range over the table's whole range; "opened"
is the share of segment objects whose summary can hold a random key (what a point
read on ``id`` must fetch).  ``python -m benchmarks.segment_width [files]``."""

from __future__ import annotations

import random
import statistics
import sys
import time

import pyarrow as pa

import caslake

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


def main(files: int = 3000) -> None:
    rng = random.Random(7)
    print(f"segment summary width, {files} files of {ROWS} rows, default fold thresholds")
    print(f"{'arrival':30} {'segments':>8} {'mean width':>11} {'max width':>10} "
          f"{'opened/read':>12} {'share':>6}")
    for name, order in _orders(files, rng).items():
        r = measure(order, rng)
        print(f"{name:30} {r['segments']:8.0f} {r['mean width']:11.3f} {r['max width']:10.3f} "
              f"{r['opened per point read']:12.2f} {r['opened share']:6.2f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3000)
