"""Small timing and reporting helpers shared by the benchmark suites."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


def best_of(fn: Callable[[], object], repeat: int = 3) -> float:
    """Median wall time of ``repeat`` runs, in seconds."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


@dataclass
class Row:
    name: str
    ours: float
    peer: float
    peer_name: str
    goal: str
    ok: bool
    unit: str = "s"

    @property
    def ratio(self) -> float:
        return self.ours / self.peer if self.peer else float("nan")


def print_rows(title: str, rows: list[Row]) -> None:
    print(f"\n### {title}\n")
    print("| benchmark | caslake | peer | peer value | ratio (caslake/peer) | goal | met |")
    print("|---|---:|---|---:|---:|---|---|")
    for r in rows:
        print(f"| {r.name} | {r.ours:.4f} {r.unit} | {r.peer_name} | {r.peer:.4f} {r.unit} | "
              f"{r.ratio:.2f} | {r.goal} | {'yes' if r.ok else 'NO'} |")
