"""Append benchmark: one append of N synthetic rows (``id, ts, user, amount,
payload``; default 5M) into a new caslake table on the local filesystem, against
the same data written by its peers in the same run:

* ``pq.write_table`` with caslake's settings (its zstd level, statistics, page
  CRC-32s, the same row-group size as caslake's file), the issue's yardstick;
* ``pq.write_table`` at pyarrow's defaults (snappy, 1M-row groups), for reference;
* Lance (``lance.write_dataset``) and deltalake (``write_deltalake``), at their defaults.

Rounds are interleaved (each round runs every system once, the order rotating)
and the median of ``--repeat`` rounds (default 5) is reported with the ratio to
each peer and the load average.  ``--profile`` instead runs caslake's append
under py-spy (``--profile=out.txt``, raw stacks with thread ids).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import caslake
from benchmarks.peers import dir_bytes
from caslake.core.write_options import ZSTD_DEFAULT_LEVEL
from caslake.format.parquet import WRITE_PAGE_CHECKSUMS

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", tz="UTC")),
                    ("user", pa.string()), ("amount", pa.float64()), ("payload", pa.string())])


ALPHABET = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789-_=&", np.uint8)


def random_text(rng: np.random.Generator, lengths: np.ndarray) -> pa.StringArray:
    """Strings of the given lengths, of characters drawn uniformly from ALPHABET."""
    offsets = np.concatenate([np.zeros(1, np.int32), np.cumsum(lengths, dtype=np.int32)])
    text = ALPHABET[rng.integers(0, len(ALPHABET), int(offsets[-1]))]
    return pa.StringArray.from_buffers(len(lengths), pa.py_buffer(offsets), pa.py_buffer(text))


def make_rows(n: int, seed: int = 0) -> pa.Table:
    """``n`` rows: ``id`` 0..n-1, ``ts`` rising 1 ms apart with jitter, ``user`` one
    of 100,000 names, ``amount`` gamma-distributed cents, ``payload`` 20-40
    random characters."""
    rng = np.random.default_rng(seed)
    payload = random_text(rng, rng.integers(20, 41, n, dtype=np.int32))
    names = pa.array([f"user-{i:05d}" for i in range(100_000)])
    user = names.take(pa.array(rng.integers(0, 100_000, n)))
    ts = (np.int64(1_767_225_600_000_000) + np.arange(n, dtype=np.int64) * 1000
          + rng.integers(0, 1000, n))
    return pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
        "user": user,
        "amount": pa.array(np.round(rng.gamma(2.0, 20.0, n), 2)),
        "payload": payload,
    }, schema=SCHEMA)


def systems(data: pa.Table, root: Path) -> dict[str, Callable[[], None]]:
    """Each system's append of ``data`` into a fresh location under ``root``."""
    counter = [0]

    def fresh(name: str) -> Path:
        counter[0] += 1
        p = root / f"{name}-{counter[0]}"
        shutil.rmtree(p, ignore_errors=True)
        return p

    def ours() -> None:
        caslake.create_table(str(fresh("caslake")), SCHEMA).append(data)

    # caslake's row-group size in rows, read from a file it wrote (set on first run).
    rg_rows = [0]
    probe = fresh("probe")
    t = caslake.create_table(str(probe), SCHEMA)
    t.append(data)
    md = pq.ParquetFile(probe / t.describe()["data_files"][0]["path"]).metadata
    rg_rows[0] = md.row_group(0).num_rows
    print(f"caslake file: {md.num_row_groups} row groups of {rg_rows[0]:,} rows, "
          f"{dir_bytes(probe / 'data') / 1e6:.1f} MB")
    shutil.rmtree(probe)

    def raw_same() -> None:
        pq.write_table(data, str(root / "raw.parquet"),
                       compression="zstd", compression_level=ZSTD_DEFAULT_LEVEL,
                       row_group_size=rg_rows[0], write_statistics=True,
                       **WRITE_PAGE_CHECKSUMS)

    def raw_default() -> None:
        pq.write_table(data, str(root / "raw-default.parquet"))

    def lance_() -> None:
        import lance

        lance.write_dataset(data, str(fresh("lance")))

    def delta() -> None:
        from deltalake import write_deltalake

        write_deltalake(str(fresh("delta")), data)

    return {"caslake": ours, "pq.write_table (same settings)": raw_same,
            "pq.write_table (defaults)": raw_default, "lance": lance_, "deltalake": delta}


def run(rows: int, repeat: int, only: list[str] | None) -> dict[str, float]:
    data = make_rows(rows)
    root = Path(tempfile.mkdtemp(prefix="caslake-append-"))
    try:
        fns = systems(data, root)
        if only:
            fns = {k: v for k, v in fns.items() if any(o in k for o in only)}
        names = list(fns)
        times: dict[str, list[float]] = {n: [] for n in names}
        cpu: dict[str, list[float]] = {n: [] for n in names}
        for fn in fns.values():  # warm-up: imports, pools, page cache
            fn()
        for r in range(repeat):
            order = names[r % len(names):] + names[:r % len(names)]
            for n in order:
                c0, t0 = time.process_time(), time.perf_counter()
                fns[n]()
                times[n].append(time.perf_counter() - t0)
                cpu[n].append(time.process_time() - c0)
        med = {n: statistics.median(v) for n, v in times.items()}
        load = os.getloadavg()
        print(f"\n### append {rows:,} rows ({data.nbytes / 1e6:.0f} MB Arrow), seconds, "
              f"median of {repeat} interleaved; load average {load[0]:.2f} {load[1]:.2f} "
              f"{load[2]:.2f}\n")
        mcpu = {n: statistics.median(v) for n, v in cpu.items()}
        print("| system | seconds | all runs | caslake / system | CPU s | caslake CPU / system |"
              "\n|---|---:|---|---:|---:|---:|")
        for n in names:
            runs = " ".join(f"{x:.3f}" for x in times[n])
            ratio = f"{med['caslake'] / med[n]:.2f}" if "caslake" in med else ""
            cratio = f"{mcpu['caslake'] / mcpu[n]:.2f}" if "caslake" in med else ""
            print(f"| {n} | {med[n]:.3f} | {runs} | {ratio} | {mcpu[n]:.2f} | {cratio} |")
        return med
    finally:
        shutil.rmtree(root, ignore_errors=True)


def profile(rows: int, out: str) -> None:
    """Record caslake's append under py-spy (raw stacks, thread ids, native frames off)."""
    pyspy = Path(sys.executable).with_name("py-spy")
    code = ("import sys, caslake, tempfile; from benchmarks.append import make_rows, SCHEMA; "
            f"d = make_rows({rows}); import time; "
            "[caslake.create_table(tempfile.mkdtemp(), SCHEMA).append(d) for _ in range(3)]")
    subprocess.run([str(pyspy), "record", "-r", "200", "--threads", "--idle", "-f", "raw",
                    "-o", out, "--", sys.executable, "-c", code], check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--only", nargs="*", help="substrings of system names to run")
    ap.add_argument("--profile", metavar="OUT", help="py-spy raw profile of caslake's append")
    args = ap.parse_args()
    if args.profile:
        profile(args.rows, args.profile)
    else:
        run(args.rows, args.repeat, args.only)


if __name__ == "__main__":
    main()
