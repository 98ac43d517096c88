"""Codec benchmark: which compression caslake writes by default.

For each codec (zstd at levels 1 and 3, lz4, snappy), one caslake append of
the same data into a new table (local filesystem), then scans of it: data
bytes on storage, append CPU seconds and scan CPU seconds (median of
``--repeat``).  CPU seconds rather than wall time because the machine this
runs on is shared; both are printed.  Data: TPC-H SF1 ``lineitem`` (from the
``benchmarks.tpch`` cache; Q1's 7 columns and a full scan) and the 5M-row
synthetic table of ``benchmarks.append`` (full scan).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import caslake
from benchmarks.append import make_rows
from benchmarks.peers import dir_bytes
from caslake.core import WriteOptions

CODECS: dict[str, WriteOptions] = {
    "zstd-1": WriteOptions(compression="zstd", compression_level=1),
    "zstd-3": WriteOptions(compression="zstd", compression_level=3),
    "lz4": WriteOptions(compression="lz4"),
    "snappy": WriteOptions(compression="snappy"),
}
Q1_COLUMNS = ["l_returnflag", "l_linestatus", "l_quantity", "l_extendedprice", "l_discount",
              "l_tax", "l_shipdate"]


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def bench(name: str, data: pa.Table, scans: dict[str, list[str] | None], repeat: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="caslake-codecs-"))
    try:
        print(f"\n### {name}: {data.num_rows:,} rows, {data.nbytes / 1e6:.0f} MB Arrow; "
              f"load average {os.getloadavg()[0]:.2f}\n")
        head = " | ".join(f"{s} scan CPU s (wall)" for s in scans)
        print(f"| codec | data MB | append CPU s (wall) | {head} |")
        print("|---|---:|---:|" + "---:|" * len(scans))
        for codec, options in CODECS.items():
            uri = str(root / codec)
            wall, cpu = timed(lambda uri=uri, options=options: caslake.create_table(
                uri, data.schema, write_options=options).append(data))
            cells = [f"{dir_bytes(Path(uri) / 'data') / 1e6:.1f}", f"{cpu:.2f} ({wall:.2f})"]
            for cols in scans.values():
                runs = [timed(lambda uri=uri, cols=cols: caslake.open_table(uri).scan(
                    columns=cols).to_arrow()) for _ in range(repeat)]
                cells.append(f"{statistics.median(c for _, c in runs):.2f} "
                             f"({statistics.median(w for w, _ in runs):.2f})")
            print(f"| {codec} | " + " | ".join(cells) + " |")
            shutil.rmtree(uri)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sf", type=float, default=1.0)
    args = ap.parse_args()
    from benchmarks.tpch import _plain_strings, ensure_data

    lineitem = _plain_strings(pq.read_table(ensure_data(args.sf) / "lineitem.parquet"))
    bench(f"TPC-H SF{args.sf:g} lineitem", lineitem, {"Q1 columns": Q1_COLUMNS, "full": None},
          args.repeat)
    bench("synthetic (benchmarks.append)", make_rows(5_000_000), {"full": None}, args.repeat)


if __name__ == "__main__":
    main()
