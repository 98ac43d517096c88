"""Micro-benchmark: a simple predicate's row mask, numpy on the Arrow buffers
(``predicate_mask``) against Arrow's compute kernels (``kernel_mask``).

Run: ``PYTHONPATH=$PWD python -m benchmarks.predicates [--sf=0.1]``.

TPC-H ``lineitem``'s Q6 columns (three ``decimal(15, 2)`` and a date) are cut
into row groups of 2**18 rows, as a scan sees them, and each predicate's mask
is computed on every group, then the groups filtered: the median of 5 runs,
interleaved.  Both masks must be equal row by row (NULL vs FALSE included),
and Q6's revenue must equal DuckDB's on the same data.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.tpch import Q6_COLUMNS, Q6_SQL, ensure_data, revenue
from caslake.expr import compile_where, predicate_mask
from caslake.expr.arrow import kernel_mask

GROUP = 1 << 18
RUNS = 5
PREDICATES = {
    "Q6": Q6_SQL,
    "decimal BETWEEN": "l_discount BETWEEN 0.05 AND 0.07",
    "date range": "l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1995-01-01'",
    "decimal IN": "l_quantity IN (1, 2, 3, 24)",
    "OR / NOT": "NOT (l_quantity < 24 OR l_discount > 0.05)",
}


def _groups(table: pa.Table) -> list[pa.Table]:
    return [table.slice(start, GROUP).combine_chunks()
            for start in range(0, table.num_rows, GROUP)]


def _run(groups: list[pa.Table], mask: Callable[[pa.Table, Any], Any], bound: Any) -> float:
    start = time.perf_counter()
    for group in groups:
        group.filter(mask(group, bound))
    return time.perf_counter() - start


def main(sf: float = 1.0) -> None:
    table = pq.read_table(ensure_data(sf) / "lineitem.parquet", columns=Q6_COLUMNS)
    groups = _groups(table)
    print(f"\n### Simple predicates: numpy mask vs Arrow kernels (TPC-H SF{sf:g}, "
          f"{table.num_rows:,} rows, {len(groups)} groups)\n")
    print("| predicate | numpy | Arrow kernels | ratio |")
    print("|---|---:|---:|---:|")
    for name, sql in PREDICATES.items():
        bound = compile_where(sql, table.schema)
        for group in groups:
            ours, theirs = predicate_mask(group, bound), kernel_mask(group, bound)
            if ours.to_pylist() != theirs.to_pylist():
                raise SystemExit(f"{name}: the numpy mask differs from Arrow's")
        times: dict[str, list[float]] = {"numpy": [], "kernels": []}
        for _ in range(RUNS):
            times["numpy"].append(_run(groups, predicate_mask, bound))
            times["kernels"].append(_run(groups, kernel_mask, bound))
        ours_s, theirs_s = (statistics.median(times[k]) for k in ("numpy", "kernels"))
        print(f"| {name} | {ours_s:.4f} s | {theirs_s:.4f} s | {ours_s / theirs_s:.2f} |")
    got = revenue(pa.concat_tables(g.filter(predicate_mask(g, compile_where(Q6_SQL, g.schema)))
                                   for g in groups))
    con = duckdb.connect()
    con.register("lineitem", table)
    want = con.execute("SELECT sum(l_extendedprice * l_discount) FROM lineitem WHERE "
                       + Q6_SQL).fetchone()
    if want is None or got != want[0]:
        raise SystemExit(f"Q6 revenue {got} differs from DuckDB's {want}")
    print(f"\nQ6 revenue {got} equals DuckDB's.")


if __name__ == "__main__":
    args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)
    main(float(args.get("sf", "1")))
