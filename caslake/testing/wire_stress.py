"""Writers against a moto-backed table through the fault proxy, and an audit of every outcome.

``python -m caslake.testing.wire_stress [--writers 6] [--ops 40 | --seconds N] [--json]``

Starts a moto server and a :class:`~caslake.testing.wire_faults.FaultProxy` in
front of it, creates a table (directly on moto, no faults), then runs
``writers`` threads, each with its own ``Table`` (its own obstore client)
talking through the proxy under :func:`~caslake.testing.wire_faults.standard_mix`
(5% 503 SlowDown, 3% reset before apply, 5% reply lost after apply, 10%
jittered delay up to 150 ms, on every request).  Each writer appends rows with
ids no one else uses and deletes, by ``id IN (...)``, rows of its own earlier
acknowledged appends (each row is the target of at most one delete).

Afterwards, with the faults off and straight from moto, the audit reads the
final table and its history and classifies every operation:

* a **false outcome** is an operation reported failed whose change is visible
  (an append whose rows are there, a delete whose rows are gone), or reported
  successful whose change is not (rows missing, rows still there, or its
  commit id not at the version it was told), or applied twice (a row present
  more than once);
* ``CommitOutcomeUnknown`` is neither success nor a false outcome: the caller
  was told the truth (it may or may not have landed).

The report gives operations attempted, succeeded, failed by error type, false
outcomes (with details), the faults that fired by kind, and the success rate.
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import boto3
import pyarrow as pa

import caslake
from caslake.errors import CommitOutcomeUnknown
from caslake.table import HistoryEntry
from caslake.testing.moto_server import (
    DUMMY_KEY_ID,
    DUMMY_SECRET,
    REGION,
    run_moto_server,
    storage_options,
)
from caslake.testing.wire_faults import FaultProxy, WireFault, run_fault_proxy, standard_mix

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False),
                    pa.field("writer", pa.int64(), nullable=False)])
ID_STRIDE = 1_000_000_000  # writer w owns ids [w * ID_STRIDE, (w + 1) * ID_STRIDE)


@dataclass
class OpRecord:
    op: str  # "append" | "delete"
    writer: int
    ids: list[int]
    outcome: str = ""  # "ok" or the error's type name
    version: int | None = None
    commit_id: str | None = None
    noop: bool = False
    error: str = ""


@dataclass
class WireReport:
    writers: int
    seconds: float
    attempted: int
    succeeded: int
    failed_by_type: dict[str, int]
    false_outcomes: list[str]
    fired: dict[str, int]
    requests: dict[str, int]
    final_version: int
    unexplained_versions: list[int] = field(default_factory=list)

    @property
    def success_rate(self) -> float:
        return self.succeeded / self.attempted if self.attempted else 0.0

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["success_rate"] = round(self.success_rate, 4)
        return out

    def summary(self) -> str:
        failed = ", ".join(f"{k}={v}" for k, v in sorted(self.failed_by_type.items())) or "none"
        fired = ", ".join(f"{k}={v}" for k, v in sorted(self.fired.items())) or "none"
        return (f"{self.writers} writers, {self.seconds:.1f}s: attempted {self.attempted}, "
                f"succeeded {self.succeeded} ({100 * self.success_rate:.1f}%), failed: {failed}; "
                f"false outcomes: {len(self.false_outcomes)}; unexplained versions: "
                f"{len(self.unexplained_versions)}; faults fired: {fired}; "
                f"requests: {sum(self.requests.values())}")


def _rows(ids: Sequence[int], writer: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()),
                     "writer": pa.array([writer] * len(ids), pa.int64())}, schema=SCHEMA)


def _writer(table: caslake.Table, index: int, rng: random.Random, ops: int | None,
            stop_at: float, out: list[OpRecord]) -> None:
    appended: list[list[int]] = []  # ids of acknowledged appends not yet targeted by a delete
    next_id = index * ID_STRIDE
    done = 0
    while (ops is None or done < ops) and time.monotonic() < stop_at:
        done += 1
        if appended and rng.random() < 0.35:
            group = appended.pop(rng.randrange(len(appended)))
            ids = sorted(rng.sample(group, rng.randint(1, len(group))))
            rec = OpRecord("delete", index, ids)
        else:
            ids = list(range(next_id, next_id + rng.randint(1, 4)))
            next_id += len(ids)
            rec = OpRecord("append", index, ids)
        try:
            if rec.op == "delete":
                res = table.delete(f"id IN ({', '.join(map(str, ids))})")
            else:
                res = table.append(_rows(ids, index))
        except CommitOutcomeUnknown as e:
            rec.outcome, rec.commit_id, rec.error = type(e).__name__, e.commit_id, str(e)[:300]
        except Exception as e:  # every failure is recorded by type, typed or not
            rec.outcome, rec.error = type(e).__name__, str(e)[:300]
        else:
            rec.outcome, rec.version, rec.commit_id, rec.noop = ("ok", res.version,
                                                                 res.commit_id, res.noop)
            if rec.op == "append":
                appended.append(ids)
        out.append(rec)


def audit(records: list[OpRecord], final: pa.Table,
          history: list[HistoryEntry]) -> tuple[list[str], list[int]]:
    """False outcomes, and versions no acknowledged or unknown operation explains."""
    seen = Counter(final.column("id").to_pylist())
    by_version = {h.version: h.commit_id for h in history}
    false: list[str] = []
    targeted = {i for rec in records if rec.op == "delete" for i in rec.ids}
    claimed: set[int] = set()
    for rec in records:
        tag = f"{rec.op} by writer {rec.writer} of ids {rec.ids[:4]}"
        dup = [i for i in rec.ids if seen[i] > 1]
        if rec.op == "append" and dup:
            false.append(f"{tag}: applied twice (ids {dup[:4]} appear more than once)")
        if rec.outcome == "ok" and not rec.noop:
            claimed.add(rec.version or 0)
            if by_version.get(rec.version or -1) != rec.commit_id:
                false.append(f"{tag}: acknowledged at v{rec.version} as {rec.commit_id}, but "
                             f"v{rec.version} is {by_version.get(rec.version or -1)}")
        visible = [i for i in rec.ids if seen[i] > 0]
        if rec.op == "append":
            if rec.outcome == "ok":
                lost = [i for i in rec.ids if seen[i] == 0 and i not in targeted]
                if lost:
                    false.append(f"{tag}: acknowledged, but ids {lost[:4]} are not visible")
            elif rec.outcome != "CommitOutcomeUnknown" and visible:
                false.append(f"{tag}: reported {rec.outcome}, but its rows are visible")
        else:
            if rec.outcome == "ok" and visible:
                false.append(f"{tag}: acknowledged, but ids {visible[:4]} are still visible")
            elif rec.outcome not in ("ok", "CommitOutcomeUnknown") \
                    and len(visible) < len(rec.ids):
                false.append(f"{tag}: reported {rec.outcome}, but its rows are gone")
    unknown_ids = {r.commit_id for r in records if r.outcome == "CommitOutcomeUnknown"}
    unexplained = [v for v, cid in sorted(by_version.items())
                   if v > 0 and v not in claimed and cid not in unknown_ids]
    return false, unexplained


def _make_bucket(endpoint: str) -> str:
    name = f"caslake-wire-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=endpoint, region_name=REGION,
                 aws_access_key_id=DUMMY_KEY_ID,
                 aws_secret_access_key=DUMMY_SECRET).create_bucket(Bucket=name)
    return name


def run_wire_workload(moto_endpoint: str, *, writers: int = 6, ops_per_writer: int | None = 20,
                      seconds: float = 600.0, faults: Sequence[WireFault] | None = None,
                      seed: int = 0, proxy: FaultProxy | None = None) -> WireReport:
    """Run the workload against a fresh bucket on ``moto_endpoint`` and audit it."""
    uri = f"s3://{_make_bucket(moto_endpoint)}/tables/wire"
    direct = storage_options(moto_endpoint)
    caslake.create_table(uri, SCHEMA, storage_options=direct)
    mix = standard_mix() if faults is None else list(faults)
    with run_fault_proxy(moto_endpoint, seed=seed) if proxy is None else _same(proxy) as px:
        tables = [caslake.open_table(uri, storage_options=storage_options(px.endpoint))
                  for _ in range(writers)]
        before_fired, before_requests = px.fired(), px.requests()
        px.set_faults(mix)
        records: list[list[OpRecord]] = [[] for _ in range(writers)]
        started = time.monotonic()
        threads = [threading.Thread(target=_writer, name=f"wire-writer-{w}",
                                    args=(tables[w], w, random.Random(seed * 1000 + w),
                                          ops_per_writer, started + seconds, records[w]))
                   for w in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - started
        px.set_faults([])
        fired = {k: v - before_fired.get(k, 0) for k, v in px.fired().items()}
        requests = {k: v - before_requests.get(k, 0) for k, v in px.requests().items()}
    table = caslake.open_table(uri, storage_options=direct)
    all_records = [r for rs in records for r in rs]
    false, unexplained = audit(all_records, table.to_arrow(columns=["id"]), table.history())
    failed = Counter(r.outcome for r in all_records if r.outcome != "ok")
    return WireReport(writers=writers, seconds=elapsed, attempted=len(all_records),
                      succeeded=sum(r.outcome == "ok" for r in all_records),
                      failed_by_type=dict(failed), false_outcomes=false, fired=fired,
                      requests=requests, final_version=table.version,
                      unexplained_versions=unexplained)


class _same:
    """A context manager that yields an already running proxy and leaves it running."""

    def __init__(self, proxy: FaultProxy) -> None:
        self.proxy = proxy

    def __enter__(self) -> FaultProxy:
        return self.proxy

    def __exit__(self, *exc: object) -> None:
        return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m caslake.testing.wire_stress",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", type=int, default=6)
    parser.add_argument("--ops", type=int, default=None,
                        help="operations per writer (default: run for --seconds)")
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-success", type=float, default=0.97,
                        help="exit 1 below this success rate (or on any false outcome)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with run_moto_server() as endpoint:
        report = run_wire_workload(endpoint, writers=args.writers, ops_per_writer=args.ops,
                                   seconds=args.seconds, seed=args.seed)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(report.summary())
        for line in report.false_outcomes[:20]:
            print("  FALSE OUTCOME:", line)
    ok = not report.false_outcomes and report.success_rate >= args.min_success
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
