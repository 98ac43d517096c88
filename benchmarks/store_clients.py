"""obstore vs boto3 on the same objects of one moto S3 server, in one run.

Measures, for each client:

* small-object (1 KiB) GET and PUT latency, p50/p90 over N requests;
* conditional writes: create-only (If-None-Match: *) and compare-and-swap
  (If-Match: <etag>) latency;
* 16 parallel 1 MiB range GETs of a 64 MiB object (aggregate MB/s), plus
  one 64 MiB GET;
* client CPU per request (process CPU time / requests), which is what the
  client library itself costs independent of the server.

The obstore side goes through :class:`caslake.store.S3Store` (the shipped
code path, including its thread pool for parallel ranges); the boto3 side is
a plain boto3 client with a 16-thread pool.  Usage::

    python -m benchmarks.store_clients [--n 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config

from caslake.store import IfMatch, PutMode, S3Store
from caslake.testing.moto_server import run_moto_server

KIB = 1024
MIB = 1024 * KIB
RANGE_COUNT = 16
RANGE_SIZE = 1 * MIB
BIG_SIZE = 64 * MIB


@dataclass
class Result:
    name: str
    client: str
    p50_ms: float
    p90_ms: float
    cpu_us: float  # client CPU per request
    throughput: float | None = None  # MB/s, for bulk reads


def _lat(name: str, client: str, fn: Callable[[int], Any], n: int) -> Result:
    for i in range(min(10, n)):  # warm up connections
        fn(-1 - i)
    samples = []
    cpu0 = time.process_time()
    for i in range(n):
        t0 = time.perf_counter()
        fn(i)
        samples.append((time.perf_counter() - t0) * 1000)
    cpu = (time.process_time() - cpu0) / n * 1e6
    q = statistics.quantiles(samples, n=10)
    return Result(name, client, statistics.median(samples), q[8], cpu)


def _bulk(name: str, client: str, fn: Callable[[], int], rounds: int) -> Result:
    fn()  # warm up
    times = []
    moved = 0
    cpu0 = time.process_time()
    for _ in range(rounds):
        t0 = time.perf_counter()
        moved = fn()
        times.append(time.perf_counter() - t0)
    cpu = (time.process_time() - cpu0) / rounds * 1e6
    best = statistics.median(times)
    return Result(name, client, best * 1000, max(times) * 1000, cpu, moved / best / 1e6)


def run(n: int, rounds: int) -> list[Result]:
    with run_moto_server() as endpoint:
        b3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="bench", aws_secret_access_key="bench",
                          config=Config(max_pool_connections=32,
                                        s3={"addressing_style": "path"}))
        bucket = f"bench-{uuid.uuid4().hex[:12]}"
        b3.create_bucket(Bucket=bucket)
        obs = S3Store(f"s3://{bucket}", {"endpoint_url": endpoint, "region": "us-east-1",
                                         "access_key_id": "bench",
                                         "secret_access_key": "bench"})
        small = os.urandom(KIB)
        obs.put("small", small)
        big = os.urandom(BIG_SIZE)
        obs.put("big", big)
        results: list[Result] = []

        # --- small GET / PUT --------------------------------------------------------
        results.append(_lat("GET 1 KiB", "obstore", lambda i: obs.get("small"), n))
        results.append(_lat("GET 1 KiB", "boto3", lambda i: b3.get_object(
            Bucket=bucket, Key="small")["Body"].read(), n))
        results.append(_lat("PUT 1 KiB", "obstore", lambda i: obs.put("p-obs", small), n))
        results.append(_lat("PUT 1 KiB", "boto3", lambda i: b3.put_object(
            Bucket=bucket, Key="p-b3", Body=small), n))

        # --- conditional writes -------------------------------------------------------
        run_id = uuid.uuid4().hex[:6]
        results.append(_lat("PUT If-None-Match", "obstore", lambda i: obs.put(
            f"c-obs-{run_id}/{i}", small, mode=PutMode.CREATE), n))
        results.append(_lat("PUT If-None-Match", "boto3", lambda i: b3.put_object(
            Bucket=bucket, Key=f"c-b3-{run_id}/{i}", Body=small, IfNoneMatch="*"), n))

        state = {"obs": obs.put("cas-obs", small)}
        state["b3"] = b3.put_object(Bucket=bucket, Key="cas-b3", Body=small)["ETag"]

        def cas_obs(i: int) -> None:
            state["obs"] = obs.put("cas-obs", small + str(i).encode(),
                                   mode=IfMatch(state["obs"]))

        def cas_b3(i: int) -> None:
            state["b3"] = b3.put_object(Bucket=bucket, Key="cas-b3",
                                        Body=small + str(i).encode(),
                                        IfMatch=state["b3"])["ETag"]

        results.append(_lat("PUT If-Match (CAS)", "obstore", cas_obs, n))
        results.append(_lat("PUT If-Match (CAS)", "boto3", cas_b3, n))

        # --- parallel ranges --------------------------------------------------------
        stride = BIG_SIZE // RANGE_COUNT
        ranges = [(i * stride, i * stride + RANGE_SIZE) for i in range(RANGE_COUNT)]

        def ranges_obs() -> int:
            parts = obs.get_ranges("big", ranges)
            assert parts[3] == big[ranges[3][0]:ranges[3][1]]
            return sum(len(p) for p in parts)

        pool = ThreadPoolExecutor(max_workers=RANGE_COUNT)

        def one_b3(r: tuple[int, int]) -> bytes:
            out: bytes = b3.get_object(Bucket=bucket, Key="big",
                                       Range=f"bytes={r[0]}-{r[1] - 1}")["Body"].read()
            return out

        def ranges_b3() -> int:
            parts = list(pool.map(one_b3, ranges))
            assert parts[3] == big[ranges[3][0]:ranges[3][1]]
            return sum(len(p) for p in parts)

        results.append(_bulk("16 x 1 MiB ranges, parallel", "obstore", ranges_obs, rounds))
        results.append(_bulk("16 x 1 MiB ranges, parallel", "boto3", ranges_b3, rounds))
        results.append(_bulk("GET 64 MiB", "obstore", lambda: len(obs.get("big").data), rounds))
        results.append(_bulk("GET 64 MiB", "boto3", lambda: len(b3.get_object(
            Bucket=bucket, Key="big")["Body"].read()), rounds))
        pool.shutdown()
        obs.close()
        return results


def print_table(results: list[Result]) -> None:
    header = (f"{'operation':<30} {'client':<8} {'p50 ms':>8} {'p90 ms':>8} "
              f"{'client CPU/op':>14} {'MB/s':>8}")
    print(header)
    print("-" * len(header))
    for r in results:
        mbs = f"{r.throughput:8.0f}" if r.throughput is not None else f"{'':>8}"
        cpu = f"{r.cpu_us / 1000:.2f} ms" if r.cpu_us >= 1000 else f"{r.cpu_us:.0f} us"
        print(f"{r.name:<30} {r.client:<8} {r.p50_ms:8.2f} {r.p90_ms:8.2f} {cpu:>14} {mbs}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=200, help="requests per latency figure")
    parser.add_argument("--rounds", type=int, default=7, help="rounds per bulk figure")
    args = parser.parse_args()
    print(f"moto server on loopback, {os.cpu_count()} CPUs; n={args.n}, rounds={args.rounds}")
    print("(p90 column for bulk rows is the slowest round; MB/s from the median round)")
    print_table(run(args.n, args.rounds))


if __name__ == "__main__":
    main()
