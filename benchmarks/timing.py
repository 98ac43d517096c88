"""Small timing and reporting helpers shared by the benchmark suites."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def best_of(fn: Callable[[], object], repeat: int = 3) -> float:
    """Median wall time of ``repeat`` runs, in seconds."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def interleaved_medians(fns: dict[str, Callable[[], object]], runs: int) -> dict[str, float]:
    """Median wall time of each of ``fns`` over ``runs`` rounds, after one warm call
    each.  Every round times each system once, in rotating order, so load from
    elsewhere on the machine falls on all of them alike rather than on whichever
    happened to run while it lasted."""
    names = list(fns)
    for name in names:
        fns[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(runs):
        for name in names[r % len(names):] + names[:r % len(names)]:
            t0 = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """(wall seconds, result) of one call."""
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def timed_cpu(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """(wall seconds, this process's CPU seconds in every thread, result) of one
    call: CPU time is the steadier measure on a loaded machine."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - t0, time.process_time() - c0, out


def set_cores(n: int) -> None:
    """pyarrow's CPU pool and caslake's scan and encode pools to ``n`` threads."""
    import pyarrow as pa

    from caslake.core import pools

    pa.set_cpu_count(n)
    pools.set_threads(n)


def fresh_process(code: str, timeout: float = 1800, what: str = "") -> dict[str, Any]:
    """Run ``code`` in a new interpreter (this repository first on its path) and
    return the JSON object it printed last on a line of its own: how a cold run
    reports.  A crash at interpreter exit, after that line, is noted (naming
    ``what`` ran), not fatal."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO), os.environ.get("PYTHONPATH", "")]))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=timeout, check=False)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
    last_err = res.stderr.strip().splitlines()[-1] if res.stderr.strip() else ""
    if not lines:
        raise RuntimeError(f"fresh process failed (exit {res.returncode}): {last_err}")
    if res.returncode != 0:
        print(f"note: a fresh process{f' ({what})' if what else ''} exited {res.returncode} "
              f"after reporting: {last_err}")
    out: dict[str, Any] = json.loads(lines[-1])
    return out


def fresh_memory_seconds(nbytes: int, runs: int = 3) -> float:
    """Median over ``runs`` fresh processes of the time to write ``nbytes`` of
    memory just taken from pyarrow's default pool: the floor under any cold run
    that returns that many bytes.  A fresh process faults in every new page (on
    a VM the host may also back each page on its first touch); a warm process
    reuses the pages its pool kept, so this cost falls on the cold run alone."""
    code = ("import json, time, numpy as np, pyarrow as pa\n"
            f"buf = pa.allocate_buffer({int(nbytes)})\n"
            "t0 = time.perf_counter()\n"
            "np.frombuffer(buf, np.uint8)[:] = 1\n"
            "print(json.dumps({'seconds': time.perf_counter() - t0}))")
    return statistics.median(float(fresh_process(code, what="fresh memory")["seconds"])
                             for _ in range(runs))


def _serve(conn: Connection, factory: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """A :class:`Worker`'s process: builds ``factory(*args)``, then runs the method
    calls it is sent, one at a time, answering (True, result) or (False, error)."""
    try:
        obj = factory(*args)
    except Exception as err:
        conn.send((False, failure("setup", err)))
        return
    conn.send((True, None))
    while (call := conn.recv()) is not None:
        method, call_args = call
        try:
            conn.send((True, getattr(obj, method)(*call_args)))
        except Exception as err:
            conn.send((False, failure(method, err)))


class Worker:
    """An object in a process of its own: ``factory(*args)`` (picklable by
    reference) built in a spawned interpreter, its methods called over a pipe.
    A benchmark gives each system one, so no other library's threads, allocator
    or memory churn share the process its timings are taken in, while the
    parent still interleaves the systems run by run."""

    def __init__(self, factory: Callable[..., Any], *args: Any) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, factory, args), daemon=True)
        self.proc.start()
        child.close()
        self._answer()

    def _answer(self) -> Any:
        try:
            ok, got = self.conn.recv()
        except EOFError:
            raise RuntimeError(f"the worker process died (exit {self.proc.exitcode})") from None
        if not ok:
            raise RuntimeError(got)
        return got

    def call(self, method: str, *args: Any) -> Any:
        """``obj.method(*args)`` in the worker; its error as RuntimeError."""
        self.conn.send((method, args))
        return self._answer()

    def close(self) -> None:
        with contextlib.suppress(OSError):  # it may have died already
            self.conn.send(None)
        self.proc.join(timeout=60)
        if self.proc.is_alive():
            self.proc.kill()


def failure(phase: str, err: BaseException) -> str:
    """One line for a system that failed in ``phase``: the error and where it came from."""
    last = traceback.extract_tb(err.__traceback__)[-1]
    first = str(err).splitlines()[0][:160] if str(err) else ""
    return f"{phase}: {type(err).__name__}: {first} ({Path(last.filename).name}:{last.lineno})"


class Check:
    """Answers compared with DuckDB's; every difference is kept for the verdict."""

    def __init__(self) -> None:
        self.failures: list[str] = []

    def eq(self, what: str, got: Any, want: Any) -> None:
        if got != want:
            self.failures.append(f"{what}: got {got}, DuckDB says {want}")

    def verdict(self, failed: list[str], ok: str) -> int:
        """Print the outcome; 1 on a wrong answer or a system that failed (its
        answers unchecked), else 0."""
        if self.failures:
            print("\nWRONG ANSWERS:\n" + "\n".join(f"- {f}" for f in self.failures))
            return 1
        if failed:
            print(f"- answers of {', '.join(failed)} not checked (the system failed)")
            return 1
        print(f"- {ok}")
        return 0


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
