"""Commit throughput under a store's per-key compare-and-swap limit (issue 33).

Writer processes append 1-100-row batches to one table on moto S3 for a fixed
time, behind the fault proxy's per-key rate limit on conditional PUTs
(:class:`caslake.testing.wire_faults.FaultProxy`, ``cas_rate_limit``): above the
limit a conditional PUT to the pointer is answered ``503 SlowDown``, as S3 (~15
swaps/s of one key, measured) and GCS (one write/s per object name) do.  Every
run's history is checked (:func:`caslake.testing.stress.run_appends`): every
acknowledged append is in exactly one version, no failed append in any.

Reported per limit and writer count: acknowledged commits per second, p50 and
p99 latency, failures and unknown outcomes -- and beside them the raw rate of
create-only PUTs to distinct keys this moto takes on this machine (the ceiling
any protocol built on such PUTs can reach here).

Each configuration runs twice in the same run: with the default commit policy
(one pointer swap per commit) and with ``CommitPolicy(group_commit=True)``.
Goals (issue 33): 64 writers >= 150 commits/s behind 15/s (or >= 50/s behind 5/s
where moto cannot carry 150), >= 10/s behind 1/s, p50 <= 1 s and p99 <= 5 s.

Each run also accounts for its cost: store requests per acknowledged commit
(every writer's, the waiters' polling included, as the proxy saw them), CPU
seconds of moto, of this process (the proxy) and of the writers within the
window, and -- with ``--probe`` -- moto's raw create-only PUT rate measured
*while* the writers run.  ``--trace DIR`` turns on
:data:`caslake.core.group.TRACE_ENV` in the writers and summarises a fold:
time and requests by phase, intents folded per fold.

Run: ``python -m benchmarks.commit_throughput [--quick] [--writers 1,8,32,64]
[--limits 15,5,1] [--seconds 60] [--policies default,group] [--probe] [--trace DIR]``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import boto3

from benchmarks.timing import Row, print_rows
from caslake.core.group import TRACE_ENV
from caslake.testing.moto_server import run_moto_server, storage_options
from caslake.testing.stress import RunResult, run_appends
from caslake.testing.wire_faults import FaultProxy, run_fault_proxy

_TICK = os.sysconf("SC_CLK_TCK")


def _client(endpoint: str):  # type: ignore[no-untyped-def]
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing")


def raw_put_rate(endpoint: str, seconds: float = 3.0, threads: int = 16) -> float:
    """Create-only PUTs of small objects to distinct keys per second, from
    ``threads`` threads: what this moto takes on this machine."""
    client = _client(endpoint)
    bucket = f"raw-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    stop = time.monotonic() + seconds

    def loop(n: int) -> int:
        done = 0
        while time.monotonic() < stop:
            client.put_object(Bucket=bucket, Key=f"k/{n}/{done}", Body=b"{}",
                              IfNoneMatch="*")
            done += 1
        return done

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        total = sum(pool.map(loop, range(threads)))
    return total / seconds


def _cpu_by_pid() -> dict[int, tuple[int, str, float]]:
    """Every process's (parent pid, command, CPU seconds so far), from /proc."""
    out: dict[int, tuple[int, str, float]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            raw = stat.read_text()
            cmd = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2:].split()
        out[int(stat.parent.name)] = (int(fields[1]), cmd,
                                      (int(fields[11]) + int(fields[12])) / _TICK)
    return out


def _cpu_split(before: dict[int, tuple[int, str, float]],
               after: dict[int, tuple[int, str, float]]) -> dict[str, float]:
    """CPU seconds between two samples of this process's tree: moto, this process
    (the proxy), the writers."""
    me = os.getpid()
    tree, grew = {me}, True
    while grew:
        kids = {pid for pid, (ppid, _, _) in after.items() if ppid in tree} - tree
        tree |= kids
        grew = bool(kids)
    split = {"moto": 0.0, "proxy": 0.0, "writers": 0.0}
    for pid in tree:
        _, cmd, cpu = after[pid] if pid in after else before[pid]
        used = cpu - before.get(pid, (0, "", 0.0))[2]
        who = "proxy" if pid == me else "moto" if "moto" in cmd else "writers"
        split[who] += used
    return split


def _machine_cpu() -> float:
    """Busy CPU seconds of the whole machine so far (all cores)."""
    parts = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    busy = sum(int(x) for i, x in enumerate(parts) if i not in (3, 4))  # minus idle, iowait
    return busy / _TICK


def _window_meter(go: Path, probe_endpoint: str | None, found: dict[str, Any],
                  proxy: FaultProxy) -> None:
    """Sample CPU at the run's start and stop (read from ``go``), and probe moto's raw
    create-only PUT rate mid-run (in a separate process) if asked."""
    while not go.exists():
        time.sleep(0.02)
    time.sleep(0.05)
    spec = json.loads(go.read_text())
    time.sleep(max(0.0, spec["start"] - time.time()))
    before, m0, t0, r0 = _cpu_by_pid(), _machine_cpu(), time.time(), proxy.requests()
    if probe_endpoint is not None:
        time.sleep(max(0.0, (spec["stop"] - spec["start"]) / 2 - 1.5))
        out = subprocess.run([sys.executable, "-m", "benchmarks.commit_throughput",
                              "--raw-put", probe_endpoint], capture_output=True, text=True,
                             check=False)
        found["raw_put_during"] = float(out.stdout.strip() or "nan")
    time.sleep(max(0.0, spec["stop"] - time.time()))
    found["cpu"] = _cpu_split(before, _cpu_by_pid())
    found["proxy_requests"] = {k: n - r0.get(k, 0) for k, n in proxy.requests().items()}
    found["machine_busy"] = (_machine_cpu() - m0) / (time.time() - t0)  # cores busy
    found["load"] = os.getloadavg()[0]


def one_run(endpoint: str, limit: float, writers: int, seconds: float,
            work: Path, policy: str, *, probe: bool = False,
            trace: Path | None = None) -> RunResult:
    bucket = f"tput-{uuid.uuid4().hex[:12]}"
    _client(endpoint).create_bucket(Bucket=bucket)
    workdir = work / f"l{limit:g}-w{writers}-{policy}-{uuid.uuid4().hex[:6]}"
    found: dict[str, Any] = {}
    if trace is not None:
        tdir = trace / workdir.name
        tdir.mkdir(parents=True, exist_ok=True)
        os.environ[TRACE_ENV] = str(tdir)
    try:
        with run_fault_proxy(endpoint, cas_rate_limit=limit,
                             lifetime_s=seconds + 900) as proxy:
            meter = threading.Thread(target=_window_meter, daemon=True,
                                     args=(workdir / "go.json", endpoint if probe else None,
                                           found, proxy))
            meter.start()
            opts = storage_options(proxy.endpoint)
            run = run_appends(f"s3://{bucket}/t", opts, writers=writers,
                              seconds=seconds, workdir=workdir,
                              backend=f"moto behind {limit:g}/s", policy=policy)
            slowdowns = proxy.fired().get("cas_rate_limit", 0)
    finally:
        os.environ.pop(TRACE_ENV, None)
    meter.join(timeout=5)
    run.facts.update(found)
    run.facts["slowdowns"] = slowdowns
    if trace is not None:
        run.facts["trace"] = summarize_trace(trace / workdir.name)
    return run


def summarize_trace(tdir: Path) -> dict[str, Any]:
    """Folds and commits of a traced run: per fold, mean time (ms) and requests by
    phase and intents folded; per commit, requests by kind and how it ended."""
    folds: list[dict[str, Any]] = []
    commits: list[dict[str, Any]] = []
    other: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for path in tdir.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec["event"] == "fold":
                folds.append(rec)
            elif rec["event"] == "commit":
                commits.append(rec)
                for ph, acc in rec["phases"].items():  # watch/wait/join, outside folds
                    for k, v in acc.items():
                        other[ph][k] += v
    out: dict[str, Any] = {"folds": len(folds), "won": sum(f["won"] for f in folds)}
    if folds:
        phases: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for f in folds:
            for ph, acc in f["phases"].items():
                for k, v in acc.items():
                    phases[ph][k] += v / len(folds)
        out["per_fold"] = {ph: {k: round(v, 2) for k, v in acc.items()}
                           for ph, acc in phases.items()}
        won = [f for f in folds if f["won"]]
        out["batch_won_mean"] = sum(f["batch"] for f in won) / max(1, len(won))
        out["listed_mean"] = sum(f["listed"] for f in folds) / len(folds)
    if commits:
        n = len(commits)
        ends: dict[str, int] = defaultdict(int)
        reqs: dict[str, float] = defaultdict(float)
        for c in commits:
            ends[c["outcome"]] += 1
            for k, v in c["requests"].items():
                reqs[k] += v / n
        out["commits"] = n
        out["ends"] = dict(ends)
        out["requests_per_commit"] = {k: round(v, 2) for k, v in reqs.items()}
        out["outside_folds_per_commit"] = {ph: {k: round(v / n, 2) for k, v in acc.items()}
                                           for ph, acc in other.items()}
    return out


def describe(run: RunResult) -> str:
    """One line of a run's cost: requests per acknowledged commit, CPU split."""
    f = run.facts
    total = sum(f.get("proxy_requests", {}).values())
    cpu = f.get("cpu", {})
    used = sum(cpu.values()) or 1.0
    raw = f.get("raw_put_during")
    return (f"  {total / max(1, run.commits):.1f} requests/commit (at the proxy, in the window) "
            f"{f.get('proxy_requests')}; {f.get('slowdowns')} SlowDowns; CPU s in window: "
            + ", ".join(f"{k} {v:.1f} ({v / used:.0%})" for k, v in cpu.items())
            + f"; machine {f.get('machine_busy', 0):.2f} cores busy, load {f.get('load', 0):.1f}"
            + (f"; raw PUT during run {raw:.0f}/s" if raw is not None else ""))


def main(writers: Sequence[int] = (1, 8, 32, 64), limits: Sequence[float] = (15.0, 5.0, 1.0),
         seconds: float = 60.0, policies: Sequence[str] = ("default", "group"),
         probe: bool = False, trace: Path | None = None) -> list[Row]:
    rows: list[Row] = []
    work = Path(tempfile.mkdtemp(prefix="caslake-bench-tput-"))
    with run_moto_server() as endpoint:
        raw = raw_put_rate(endpoint)
        print(f"moto on this machine: {raw:.0f} create-only PUTs/s to distinct keys "
              f"(load {os.getloadavg()[0]:.1f})")
        for limit in limits:
            for w in writers:
                # today's one-CAS-per-commit path, then group commit, same data, same run
                runs = {p: one_run(endpoint, limit, w, seconds, work, p, probe=probe,
                                   trace=trace) for p in policies}
                for policy, run in runs.items():
                    label = "group commit" if policy == "group" else "one CAS per commit"
                    verdict = "check ok" if run.ok else f"CHECK FAILED: {run.failures[:3]}"
                    print(f"limit {limit:g}/s, {w} writers, {label}: "
                          f"{run.commits_per_s:.1f} commits/s, p50 {run.p50_ms / 1000:.2f} s, "
                          f"p99 {run.p99_ms / 1000:.2f} s, {run.failed} failed, "
                          f"{run.unknown} unknown, {run.facts.get('versions')} versions; "
                          f"{verdict}")
                    print(describe(run))
                    if "trace" in run.facts:
                        print("  trace: " + json.dumps(run.facts["trace"]))
                if "group" not in runs or "default" not in runs:
                    continue
                r, base = runs["group"], runs["default"]
                goal = 10.0 * limit if w == max(writers) else None
                rows.append(Row(
                    f"commit-throughput: {w} writer processes, CAS limit {limit:g}/s, "
                    f"{seconds:g} s, group commit vs one CAS per commit (group p50 "
                    f"{r.p50_ms / 1000:.2f} s, p99 {r.p99_ms / 1000:.2f} s; moto {raw:.0f} PUT/s"
                    f"{f'; goal >= {goal:g}/s' if goal else ''})", r.commits_per_s,
                    base.commits_per_s, "one CAS per commit", "higher is better",
                    r.ok and base.ok and (goal is None or r.commits_per_s >= goal),
                    unit="commits/s"))
    print_rows("commit throughput behind a per-key CAS limit (moto S3)", rows)
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="8 writers, 15/s, 20 s")
    parser.add_argument("--writers", default="1,8,32,64")
    parser.add_argument("--limits", default="15,5,1")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--policies", default="default,group")
    parser.add_argument("--probe", action="store_true",
                        help="measure moto's raw PUT rate mid-run, while the writers run")
    parser.add_argument("--trace", type=Path, default=None,
                        help="a directory: trace the writers' group path (phases, requests)")
    parser.add_argument("--raw-put", default=None, help=argparse.SUPPRESS)
    a = parser.parse_args()
    if a.raw_put:
        print(raw_put_rate(a.raw_put))
    elif a.quick:
        main((1, 8), (15.0,), 20.0)
    else:
        main([int(x) for x in a.writers.split(",")], [float(x) for x in a.limits.split(",")],
             a.seconds, a.policies.split(","), a.probe, a.trace)
