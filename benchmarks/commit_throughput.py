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

Run: ``python -m benchmarks.commit_throughput [--quick] [--writers 1,8,32,64]
[--limits 15,5,1] [--seconds 60]``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import boto3

from benchmarks.timing import Row, print_rows
from caslake.testing.moto_server import run_moto_server, storage_options
from caslake.testing.stress import RunResult, run_appends
from caslake.testing.wire_faults import run_fault_proxy


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


def one_run(endpoint: str, limit: float, writers: int, seconds: float,
            work: Path, policy: str) -> RunResult:
    bucket = f"tput-{uuid.uuid4().hex[:12]}"
    _client(endpoint).create_bucket(Bucket=bucket)
    with run_fault_proxy(endpoint, cas_rate_limit=limit, lifetime_s=seconds + 900) as proxy:
        opts = storage_options(proxy.endpoint)
        return run_appends(f"s3://{bucket}/t", dict(opts), writers=writers, seconds=seconds,
                           workdir=work / f"l{limit:g}-w{writers}-{policy}",
                           backend=f"moto behind {limit:g}/s", policy=policy)


def main(writers: Sequence[int] = (1, 8, 32, 64), limits: Sequence[float] = (15.0, 5.0, 1.0),
         seconds: float = 60.0) -> list[Row]:
    rows: list[Row] = []
    work = Path(tempfile.mkdtemp(prefix="caslake-bench-tput-"))
    with run_moto_server() as endpoint:
        raw = raw_put_rate(endpoint)
        print(f"moto on this machine: {raw:.0f} create-only PUTs/s to distinct keys")
        for limit in limits:
            for w in writers:
                # today's one-CAS-per-commit path, then group commit, same data, same run
                base = one_run(endpoint, limit, w, seconds, work, "default")
                r = one_run(endpoint, limit, w, seconds, work, "group")
                for label, run in (("one CAS per commit", base), ("group commit", r)):
                    verdict = "check ok" if run.ok else f"CHECK FAILED: {run.failures[:3]}"
                    print(f"limit {limit:g}/s, {w} writers, {label}: "
                          f"{run.commits_per_s:.1f} commits/s, p50 {run.p50_ms / 1000:.2f} s, "
                          f"p99 {run.p99_ms / 1000:.2f} s, {run.failed} failed, "
                          f"{run.unknown} unknown, {run.facts.get('versions')} versions; "
                          f"{verdict}")
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
    a = parser.parse_args()
    if a.quick:
        main((1, 8), (15.0,), 20.0)
    else:
        main([int(x) for x in a.writers.split(",")], [float(x) for x in a.limits.split(",")],
             a.seconds)
