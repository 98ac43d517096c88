"""Shared data for the partitioning tests: events over a few days, many users, three
regions, rows in random order (so file statistics alone cannot prune by user)."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False),
                    pa.field("ts", pa.timestamp("us")),
                    pa.field("user_id", pa.int64()),
                    pa.field("region", pa.string()),
                    pa.field("amount", pa.float64())])
START = dt.datetime(2026, 10, 30)


def events(n: int, *, seed: int = 0, first_id: int = 0, days: int = 5,
           start: dt.datetime = START) -> pa.Table:
    rng = np.random.default_rng(seed)
    micros = rng.integers(0, days * 86_400_000_000, n)
    ts = pa.array(np.datetime64(start, "us") + micros.astype("timedelta64[us]"),
                  pa.timestamp("us"))
    regions = np.array(["eu", "us", "apac"])[rng.integers(0, 3, n)]
    return pa.table({"id": pa.array(np.arange(first_id, first_id + n), pa.int64()),
                     "ts": ts,
                     "user_id": pa.array(rng.integers(0, 1000, n), pa.int64()),
                     "region": pa.array(regions, pa.string()),
                     "amount": pa.array(rng.random(n) * 100, pa.float64())}, schema=SCHEMA)


def sort(t: pa.Table) -> pa.Table:
    return t.sort_by("id")
