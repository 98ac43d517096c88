"""Multi-process stress harness with a history checker: ``python -m caslake.testing.stress``.

Usage::

    python -m caslake.testing.stress [--backend local,s3,gcs,azure|both|all] [--seconds N]
                                     [--writers 1,4,16] [--workloads history,bank]
                                     [--json] [--keep]

For each backend (a local directory; an S3 bucket on a moto server, a GCS bucket
on fake-gcs-server or an Azure container on Azurite, each server started by this
harness, its endpoint passed to the workers in their storage options) and each
writer count ``W`` it runs these workloads, each on a fresh table, with every
client in its own OS process (this module re-run with ``--worker SPEC``):

``history``
    ``W`` writers mix appends of fresh unique ids, deletes by key of ids they
    appended earlier (``id IN (...)``) and upserts of their own ids; ``R``
    readers repeatedly scan the latest version and record
    ``(version, row count, checksum)``.
``bank``
    A table of ``N`` accounts ``(id, balance)`` summing to ``T``.  ``W``
    writers read the latest version and move an amount between two accounts
    with ONE ``Table.upsert(..., read_version=v)`` of both rows, balances
    computed from the version ``v`` they read (read validation: the commit
    fails with CommitConflict if another transfer touched either account since
    ``v``); an auditor reads random versions and checks the sum.
``bank-fenced``
    The same transfers, committed as ``Table.overwrite(all accounts,
    txn=("bank", read_version + 1))``: the idempotency token doubles as a fence
    so a transfer only lands on exactly the version it read (opt-in; shows the
    checker accepts a correct read-modify-write).

Every operation is appended to a per-process history file as one JSON line
``{op, proc, invoke_ts, complete_ts, outcome: ok|fail|unknown, version,
commit_id, attempts, noop, details, error}``.  Afterwards the checker verifies:

* the version chain is linear with no gaps (``history()`` is ``0..V``) and
  commit ids are unique;
* every acknowledged commit (``ok``, not ``noop``) is in the history at exactly
  the version it was told, with its commit id; no two claim one version;
* ``V`` = acknowledged non-noop commits + ``unknown`` outcomes that landed, and
  every version ``1..V`` is claimed by one of them;
* real-time order: an operation invoked after a commit was acknowledged sees
  (or lands at) a later version; readers never go back in time;
* a replay of the claimed operations in version order (a plain dict model)
  gives, at every version, the row count and checksum every reader observed
  there, matches the table read at a sample of those versions, and equals the
  final table row for row; deletes removed exactly the rows the model says;
* bank: the sum is ``T`` and there are ``N`` distinct accounts at every
  version, in the model, in every audit and in the table itself.  A broken
  sum is reported with the number of transfers that landed on a newer
  version than they read and touched an account changed in between.

The run prints, per backend, workload and ``W``: commits/s held, p50/p99
commit latency, retries per commit (``attempts - 1``), failures and the check
verdict (``--json`` prints the same as JSON).  The exit status is 1 if any
check failed.  Tests import :func:`run_history` / :func:`run_bank` and the
``check_*`` functions directly.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import json
import math
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO, cast

import pyarrow as pa

import caslake
from caslake.core import CommitPolicy
from caslake.errors import CaslakeError, CommitConflict, CommitOutcomeUnknown
from caslake.store.options import StorageOptions

HISTORY_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False),
                            pa.field("writer", pa.int64(), nullable=False),
                            pa.field("gen", pa.int64(), nullable=False)])
BANK_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False),
                         pa.field("balance", pa.int64(), nullable=False)])

#: Generous retry budget: under 16 writers a commit may lose many CAS races.
STRESS_POLICY = CommitPolicy(max_attempts=400, base_backoff_s=0.002, max_backoff_s=0.1)
ID_STRIDE = 1_000_000_000  # writer w owns ids [w * ID_STRIDE, (w + 1) * ID_STRIDE)
MASK64 = (1 << 64) - 1
COMMIT_OPS = frozenset({"setup", "append", "delete", "upsert", "transfer"})
BANK_MODES = ("upsert", "fenced")
Record = dict[str, Any]


# --- checksums ----------------------------------------------------------------------


def _mix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def row_hash(values: Sequence[int]) -> int:
    """A 64-bit hash of one row of integers (order-sensitive within the row)."""
    h = 0x243F6A8885A308D3
    for v in values:
        h = _mix64(h ^ (v & MASK64))
    return h


def table_checksum(table: pa.Table, columns: Sequence[str]) -> tuple[int, int]:
    """(row count, order-independent checksum): the sum of row hashes mod 2**64."""
    cols = [table.column(c).to_pylist() for c in columns]
    total = 0
    for row in zip(*cols, strict=True):
        total = (total + row_hash(row)) & MASK64
    return table.num_rows, total


# --- history files --------------------------------------------------------------------


class HistoryLog:
    """Appends one JSON line per operation, flushed at once (a killed process loses
    at most the operation in flight)."""

    def __init__(self, path: str | Path, proc: str) -> None:
        self.proc = proc
        self._seq = 0
        self._fh: TextIO = open(path, "a", encoding="utf-8")  # noqa: SIM115

    def write(self, rec: Record) -> None:
        self._seq += 1
        rec = {"proc": self.proc, "seq": self._seq, **rec}
        self._fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


def load_records(directory: str | Path) -> tuple[list[Record], list[str]]:
    """Every record of every ``*.jsonl`` history file under ``directory``, and a list
    of problems (unreadable lines)."""
    records: list[Record] = []
    problems: list[str] = []
    for path in sorted(Path(directory).glob("*.jsonl")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as e:
                problems.append(f"{path.name}:{n}: unreadable history line ({e})")
    return records, problems


def run_op(log: HistoryLog, op: str, details: dict[str, Any],
           fn: Callable[[], caslake.CommitResult]) -> Record:
    """Run one commit, classify its outcome and log it.

    ``CommitConflict`` is a definite failure (nothing applied); ``CommitOutcomeUnknown``
    is unknown with the commit id to look for; any other error is unknown without an
    id.  An exception outside ``CaslakeError`` is logged with ``untyped: true``."""
    rec: Record = {"op": op, "invoke_ts": time.time(), "details": details,
                   "version": None, "commit_id": None, "attempts": None, "noop": False}
    try:
        res = fn()
    except CommitConflict as e:
        rec.update(outcome="fail", attempts=e.attempts, error=repr(e))
    except CommitOutcomeUnknown as e:
        rec.update(outcome="unknown", commit_id=e.commit_id, error=repr(e))
    except CaslakeError as e:
        rec.update(outcome="unknown", error=repr(e))
    except Exception as e:
        rec.update(outcome="unknown", error=repr(e), untyped=True)
    else:
        rec.update(outcome="ok", version=res.version, commit_id=res.commit_id,
                   attempts=res.attempts, noop=res.noop)
        details["rows_deleted"] = res.rows_deleted
    rec["complete_ts"] = time.time()
    log.write(rec)
    return rec


# --- workers (each one OS process) ----------------------------------------------------


def _wait_for_go(go: Path, timeout: float = 600.0) -> tuple[float, float]:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if go.exists():
            with contextlib.suppress(json.JSONDecodeError, OSError):
                spec = json.loads(go.read_text())
                start, stop = float(spec["start"]), float(spec["stop"])
                time.sleep(max(0.0, start - time.time()))
                return start, stop
        time.sleep(0.01)
    raise SystemExit("no go signal")


def _history_writer(table: caslake.Table, log: HistoryLog, rng: random.Random, index: int,
                    stop: float) -> None:
    owned: list[int] = []
    next_id = index * ID_STRIDE
    gen = 0
    while time.time() < stop:
        gen += 1
        r = rng.random()
        if r < 0.5 or len(owned) < 2:
            ids = list(range(next_id, next_id + rng.randint(1, 4)))
            next_id += len(ids)
            owned.extend(ids)
            rows = [[i, index, gen] for i in ids]
            run_op(log, "append", {"rows": rows}, functools.partial(table.append, _rows(rows)))
        elif r < 0.75:
            ids = sorted(rng.sample(owned, min(len(owned), rng.randint(1, 3))))
            where = f"id IN ({', '.join(map(str, ids))})"
            run_op(log, "delete", {"ids": ids}, functools.partial(table.delete, where))
        else:
            ids = sorted(rng.sample(owned, min(len(owned), rng.randint(1, 3))))
            rows = [[i, index, gen] for i in ids]
            run_op(log, "upsert", {"rows": rows},
                   functools.partial(table.upsert, _rows(rows), key=["id"]))


def _appender(table: caslake.Table, log: HistoryLog, rng: random.Random, index: int,
              stop: float) -> None:
    """Appends only, of 1-100 fresh rows each: the commit-throughput workload."""
    next_id = index * ID_STRIDE
    gen = 0
    while time.time() < stop:
        gen += 1
        ids = range(next_id, next_id + rng.randint(1, 100))
        next_id += len(ids)
        rows = [[i, index, gen] for i in ids]
        run_op(log, "append", {"rows": rows}, functools.partial(table.append, _rows(rows)))


def _rows(rows: list[list[int]]) -> pa.Table:
    return pa.table({"id": pa.array([r[0] for r in rows], pa.int64()),
                     "writer": pa.array([r[1] for r in rows], pa.int64()),
                     "gen": pa.array([r[2] for r in rows], pa.int64())}, schema=HISTORY_SCHEMA)


def _accounts(balances: dict[int, int]) -> pa.Table:
    ids = sorted(balances)
    return pa.table({"id": pa.array(ids, pa.int64()),
                     "balance": pa.array([balances[i] for i in ids], pa.int64())},
                    schema=BANK_SCHEMA)


def _ints(table: pa.Table, column: str) -> list[int]:
    return cast("list[int]", table.column(column).to_pylist())


def _read_latest(table: caslake.Table, columns: Sequence[str]) -> tuple[int, pa.Table]:
    scan = table.scan()
    data = scan.to_arrow()
    return scan.snapshot.version, data.select(list(columns))


def _history_reader(table: caslake.Table, log: HistoryLog, stop: float) -> None:
    while time.time() < stop:
        rec: Record = {"op": "read", "invoke_ts": time.time()}
        try:
            version, data = _read_latest(table, ["id", "writer", "gen"])
            rows, checksum = table_checksum(data, ["id", "writer", "gen"])
            rec.update(outcome="ok", version=version,
                       details={"rows": rows, "checksum": checksum})
        except Exception as e:
            rec.update(outcome="fail", error=repr(e), untyped=not isinstance(e, CaslakeError))
        rec["complete_ts"] = time.time()
        log.write(rec)


def _bank_writer(table: caslake.Table, log: HistoryLog, rng: random.Random, mode: str,
                 stop: float) -> None:
    while time.time() < stop:
        read_ts = time.time()
        try:
            version, data = _read_latest(table, ["id", "balance"])
        except Exception as e:
            log.write({"op": "read", "invoke_ts": read_ts, "complete_ts": time.time(),
                       "outcome": "fail", "error": repr(e),
                       "untyped": not isinstance(e, CaslakeError)})
            continue
        balances = dict(zip(_ints(data, "id"), _ints(data, "balance"), strict=True))
        a, b = rng.sample(sorted(balances), 2)
        amount = rng.randint(1, 10)
        new = dict(balances)
        new[a] -= amount
        new[b] += amount
        details: dict[str, Any] = {"read_version": version, "read_ts": read_ts, "a": a, "b": b,
                                   "amount": amount, "read_sum": sum(balances.values())}
        if mode == "upsert":
            details["write"] = "upsert"
            details["rows"] = [[a, new[a]], [b, new[b]]]
            part = _accounts({a: new[a], b: new[b]})
            run_op(log, "transfer", details,
                   functools.partial(table.upsert, part, key=["id"], read_version=version))
        else:
            details["write"] = "overwrite"
            details["rows"] = sorted([k, v] for k, v in new.items())
            full, txn = _accounts(new), ("bank", version + 1)
            run_op(log, "transfer", details, functools.partial(table.overwrite, full, txn=txn))


def _bank_auditor(table: caslake.Table, log: HistoryLog, rng: random.Random,
                  stop: float) -> None:
    while time.time() < stop:
        rec: Record = {"op": "audit", "invoke_ts": time.time()}
        try:
            head = table.refresh().version
            version = head if rng.random() < 0.3 else rng.randint(1, max(1, head))
            data = table.scan(version=version).to_arrow()
            ids = _ints(data, "id")
            rec.update(outcome="ok", version=version,
                       details={"head": head, "rows": data.num_rows, "distinct": len(set(ids)),
                                "sum": sum(_ints(data, "balance"))})
        except Exception as e:
            rec.update(outcome="fail", error=repr(e), untyped=not isinstance(e, CaslakeError))
        rec["complete_ts"] = time.time()
        log.write(rec)


def worker_main(spec_path: str) -> int:
    """Entry point of one worker process (``--worker SPEC``)."""
    spec = json.loads(Path(spec_path).read_text())
    table = caslake.open_table(spec["uri"], storage_options=spec["opts"] or None)
    if spec.get("policy") == "group":  # group commit on, otherwise as a user runs it
        table.commit_policy = CommitPolicy(group_commit=True)
    elif spec.get("policy") != "default":  # "default": as a user runs it
        table.commit_policy = STRESS_POLICY
    rng = random.Random(spec["seed"])
    log = HistoryLog(spec["history"], spec["name"])
    # Warm up (lazy imports -- pa.table(dict) imports pandas, ~170 ms of CPU -- and
    # connections) before reporting ready: the measured window measures the work.
    table.scan().to_arrow()
    _rows([[0, 0, 0]])
    Path(spec["ready"]).touch()
    _, stop = _wait_for_go(Path(spec["go"]))
    role = spec["role"]
    try:
        if role == "writer":
            _history_writer(table, log, rng, int(spec["index"]), stop)
        elif role == "appender":
            _appender(table, log, rng, int(spec["index"]), stop)
        elif role == "reader":
            _history_reader(table, log, stop)
        elif role == "bank":
            _bank_writer(table, log, rng, str(spec["mode"]), stop)
        elif role == "auditor":
            _bank_auditor(table, log, rng, stop)
        else:
            raise SystemExit(f"unknown role {role!r}")
    finally:
        log.close()
    return 0


# --- checks ---------------------------------------------------------------------------


@dataclass
class CheckReport:
    failures: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    def fail(self, category: str, message: str) -> None:
        self.failures.append(f"{category}: {message}")


def _is_commit(rec: Record) -> bool:
    return bool(rec.get("op") in COMMIT_OPS and rec.get("outcome") == "ok"
                and not rec.get("noop"))


def _chain(table: caslake.Table, records: list[Record], report: CheckReport
           ) -> dict[int, Record]:
    """Linear chain, acknowledged commits at their versions, exact version count.
    Returns the operation that made each version ``1..V``."""
    hist = table.history()
    versions = [h.version for h in reversed(hist)]
    head = table.version
    report.facts["versions"] = head
    if versions != list(range(head + 1)):
        report.fail("chain", f"history versions are not 0..{head}: {versions[:10]}...")
    commit_at = {h.version: h.commit_id for h in hist}
    version_of: dict[str, int] = {}
    for h in hist:
        if h.commit_id in version_of:
            report.fail("chain", f"commit id {h.commit_id} appears at versions "
                        f"{version_of[h.commit_id]} and {h.version}")
        version_of[h.commit_id] = h.version
    claims: dict[int, Record] = {}
    acked = [r for r in records if _is_commit(r)]
    for r in acked:
        v = r["version"]
        if v in claims:
            report.fail("acked", f"{r['proc']}#{r['seq']} and {claims[v]['proc']}#"
                        f"{claims[v]['seq']} were both acknowledged version {v}")
            continue
        if commit_at.get(v) != r["commit_id"]:
            where = version_of.get(r["commit_id"])
            report.fail("acked", f"{r['proc']}#{r['seq']} ({r['op']}) was acknowledged "
                        f"version {v} commit {r['commit_id']}, but history has "
                        f"{commit_at.get(v)} there (its commit is at {where})")
            continue
        claims[v] = r
    unknown = [r for r in records if r.get("op") in COMMIT_OPS and r.get("outcome") == "unknown"]
    landed = 0
    for r in unknown:
        cid = r.get("commit_id")
        if cid and cid in version_of:
            landed += 1
            v = version_of[cid]
            if v in claims:
                report.fail("unknown", f"unknown-outcome {r['proc']}#{r['seq']} landed at "
                            f"version {v}, already claimed")
            r["version"] = v
            claims[v] = r
    report.facts.update(acked=len(acked), unknown=len(unknown), unknown_landed=landed,
                        failed=sum(1 for r in records if r.get("op") in COMMIT_OPS
                                   and r.get("outcome") == "fail"))
    if head != len(acked) + landed:
        report.fail("count", f"{head} versions after create, but {len(acked)} acknowledged "
                    f"commits + {landed} landed unknown outcomes")
    unclaimed = [v for v in range(1, head + 1) if v not in claims]
    if unclaimed:
        report.fail("count", f"{len(unclaimed)} versions are claimed by no acknowledged or "
                    f"unknown-outcome operation (first: {unclaimed[:5]}; "
                    f"{len(unknown) - landed} unknown outcomes carry no commit id)")
    for r in records:
        if r.get("untyped"):
            report.fail("typed-errors", f"{r['proc']}#{r['seq']} {r['op']} raised an "
                        f"exception outside CaslakeError: {r.get('error')}")
        elif r.get("op") in ("read", "audit") and r.get("outcome") != "ok":
            report.fail("reads", f"{r['proc']}#{r['seq']} {r['op']} failed: {r.get('error')}")
        elif (r.get("op") in COMMIT_OPS and r.get("outcome") == "unknown"
              and r.get("commit_id") is None):
            report.fail("errors", f"{r['proc']}#{r['seq']} {r['op']} ended in an "
                        f"error that names no commit: {r.get('error')}")
    return claims


def _real_time(records: list[Record], report: CheckReport) -> None:
    """Acknowledged before invoked => ordered by version; readers never go back."""
    acked = sorted((r for r in records if r.get("outcome") == "ok"
                    and r.get("version") is not None and r.get("op") in COMMIT_OPS),
                   key=lambda r: r["complete_ts"])
    later = sorted((r for r in records if r.get("outcome") == "ok"
                    and r.get("version") is not None), key=lambda r: r["invoke_ts"])
    # An audit reads a random old version on purpose: what it saw of "now" is its head.
    seen = {id(r): r["details"]["head"] if r["op"] == "audit" else r["version"] for r in later}
    bad = 0
    i = 0
    best: Record | None = None
    for r in later:
        while i < len(acked) and acked[i]["complete_ts"] < r["invoke_ts"]:
            if not acked[i].get("noop") and (best is None or acked[i]["version"]
                                             > best["version"]):
                best = acked[i]
            i += 1
        if best is None:
            continue
        strict = _is_commit(r)
        v = seen[id(r)]
        if v < best["version"] or (strict and v == best["version"]):
            bad += 1
            if bad <= 5:
                report.fail("real-time", f"{r['proc']}#{r['seq']} {r['op']} invoked after "
                            f"{best['proc']}#{best['seq']} acknowledged version "
                            f"{best['version']}, but {'landed at' if strict else 'saw'} "
                            f"version {v}")
    if bad > 5:
        report.fail("real-time", f"... {bad - 5} more")
    by_proc: dict[str, list[Record]] = {}
    for r in records:
        if r.get("op") == "read" and r.get("outcome") == "ok":
            by_proc.setdefault(r["proc"], []).append(r)
    for proc, reads in by_proc.items():
        reads.sort(key=lambda r: r["seq"])
        for a, b in itertools.pairwise(reads):
            if b["version"] < a["version"]:
                report.fail("monotonic-reads", f"{proc} saw version {a['version']} then "
                            f"{b['version']}")
                break


def _sample(versions: set[int], cap: int, head: int) -> list[int]:
    """At most ``cap`` of ``versions``, evenly spread, plus ``head`` (``cap <= 0``: all)."""
    ordered = sorted(versions)
    if 0 < cap < len(ordered):
        step = len(ordered) / cap
        ordered = sorted({ordered[int(i * step)] for i in range(cap)})
    return sorted(set(ordered) | {head})


def _limit(report: CheckReport, category: str, messages: list[str]) -> None:
    for m in messages[:5]:
        report.fail(category, m)
    if len(messages) > 5:
        report.fail(category, f"... {len(messages) - 5} more")


def _fmt(state: tuple[int, int] | None) -> str:
    return "nothing" if state is None else f"{state[0]} rows, checksum {state[1]:016x}"


def check_appends_run(uri: str, opts: StorageOptions | None, records: list[Record]
                      ) -> CheckReport:
    """The append-only workload's check, valid whether or not versions were shared
    by group commit: the chain is linear; every acknowledged append is held by the
    version it was told (its commit id there) and its rows are in the table exactly
    once; a failed append's rows are in none; an unknown outcome's rows are all there
    or none; no row comes from nowhere."""
    report = CheckReport()
    table = caslake.open_table(uri, storage_options=opts or None)
    head = table.version
    versions = [h.version for h in reversed(table.history())]
    if versions != list(range(head + 1)):
        report.fail("chain", f"history versions are not 0..{head}: {versions[:10]}...")
    counts: dict[int, int] = {}
    for i in _ints(table.scan(columns=["id"]).to_arrow(), "id"):
        counts[i] = counts.get(i, 0) + 1
    sent: set[int] = set()
    shared = 0
    for r in records:
        if r.get("op") != "append":
            continue
        ids = [row[0] for row in r["details"]["rows"]]
        sent.update(ids)
        present = [counts.get(i, 0) for i in ids]
        where = f"{r['proc']}#{r['seq']} ({r['outcome']})"
        if r["outcome"] == "ok":
            if present != [1] * len(ids):
                report.fail("acked", f"{where}: rows present {present}, not once each")
            m = table.io.at_version(table.snapshot, r["version"]).manifest
            if not m.has_commit(r["commit_id"]):
                report.fail("acked", f"{where}: version {r['version']} does not hold "
                            f"commit {r['commit_id']}")
            shared += len(m.intents) > 1
        elif r["outcome"] == "fail" and any(present):
            report.fail("failed", f"{where}: a failed append's rows are in the table")
        elif r["outcome"] == "unknown" and set(present) - {0} and present != [1] * len(ids):
            report.fail("unknown", f"{where}: rows present {present}, not all-or-nothing")
        if r.get("untyped"):
            report.fail("typed-errors", f"{where}: {r.get('error')}")
    stray = [i for i in counts if i not in sent]
    if stray:
        report.fail("stray", f"{len(stray)} rows no append sent (first: {stray[:5]})")
    report.facts.update(versions=head, acked_in_shared_versions=shared)
    return report


def check_history_run(uri: str, opts: StorageOptions | None, records: list[Record], *,
                      verify_versions: int = 24) -> CheckReport:
    """Every check of the history workload (see the module docstring)."""
    report = CheckReport()
    table = caslake.open_table(uri, storage_options=opts or None)
    claims = _chain(table, records, report)
    _real_time(records, report)
    head = report.facts["versions"]
    state: dict[int, tuple[int, int]] = {}
    checksum = 0
    model: dict[int, tuple[int, int]] = {0: (0, 0)}
    noops: dict[int, list[Record]] = {}
    for r in records:
        if r.get("op") == "delete" and r.get("outcome") == "ok" and r.get("noop"):
            noops.setdefault(r["version"], []).append(r)
    replay: list[str] = []

    def put(row: list[int]) -> None:
        nonlocal checksum
        old = state.get(row[0])
        if old is not None:
            checksum = (checksum - row_hash([row[0], *old])) & MASK64
        state[row[0]] = (row[1], row[2])
        checksum = (checksum + row_hash(row)) & MASK64

    def check_noops(v: int) -> None:
        for r in noops.get(v, []):
            live = [i for i in r["details"]["ids"] if i in state]
            if live:
                replay.append(f"{r['proc']}#{r['seq']} delete was a no-op at version {v}, "
                              f"but ids {live} were live there")

    check_noops(0)
    for v in range(1, head + 1):
        claim = claims.get(v)
        if claim is None:
            break  # reported by _chain; the model cannot go further
        d = claim["details"]
        if claim["op"] == "append":
            for row in d["rows"]:
                if row[0] in state:
                    replay.append(f"version {v}: append of id {row[0]}, which exists")
                put(row)
        elif claim["op"] == "upsert":
            for row in d["rows"]:
                put(row)
        elif claim["op"] == "delete":
            gone = [i for i in d["ids"] if i in state]
            for i in gone:
                w, g = state.pop(i)
                checksum = (checksum - row_hash([i, w, g])) & MASK64
            if claim["outcome"] == "ok" and d.get("rows_deleted") != len(gone):
                replay.append(f"version {v}: delete of {d['ids']} reported "
                              f"{d.get('rows_deleted')} rows deleted, the model {len(gone)}")
        model[v] = (len(state), checksum)
        check_noops(v)
    _limit(report, "replay", replay)
    observed: dict[int, list[Record]] = {}
    mismatches = []
    for r in records:
        if r.get("op") == "read" and r.get("outcome") == "ok":
            v = r["version"]
            observed.setdefault(v, []).append(r)
            got = (r["details"]["rows"], r["details"]["checksum"])
            if model.get(v) != got:
                mismatches.append(f"{r['proc']}#{r['seq']} read version {v} as "
                                  f"{_fmt(got)}; the replay has {_fmt(model.get(v))}")
    _limit(report, "reads", mismatches)
    verified = []
    for v in _sample(set(observed), verify_versions, head):
        data = table.scan(version=v).to_arrow()
        got = table_checksum(data, ["id", "writer", "gen"])
        verified.append(v)
        if model.get(v) != got:
            report.fail("table", f"the table read at version {v} has {_fmt(got)}, the "
                        f"replay {_fmt(model.get(v))}")
        if v == head:
            rows = sorted(zip(*(data.column(c).to_pylist() for c in ("id", "writer", "gen")),
                              strict=True))
            expected = sorted((i, w, g) for i, (w, g) in state.items())
            if rows != expected and len(model) == head + 1:
                missing = sorted(set(expected) - set(rows))[:5]
                extra = sorted(set(rows) - set(expected))[:5]
                report.fail("final", f"final rows differ from the replay: {len(rows)} vs "
                            f"{len(expected)}, missing {missing}, unexpected {extra}")
    report.facts.update(reads=sum(len(x) for x in observed.values()),
                        distinct_versions_read=len(observed), versions_verified=len(verified),
                        final_rows=len(state))
    return report


def check_bank_run(uri: str, opts: StorageOptions | None, records: list[Record], *,
                   accounts: int, total: int, verify_versions: int = 24) -> CheckReport:
    """Chain checks plus conservation: the sum is ``total`` over ``accounts`` distinct
    accounts at every version (model, audits and the table itself)."""
    report = CheckReport()
    table = caslake.open_table(uri, storage_options=opts or None)
    claims = _chain(table, records, report)
    _real_time(records, report)
    head = report.facts["versions"]
    state: dict[int, int] = {}
    model: dict[int, tuple[int, int]] = {0: (0, 0)}
    bad_versions: list[int] = []
    for v in range(1, head + 1):
        claim = claims.get(v)
        if claim is None:
            break
        d = claim["details"]
        if d.get("write") == "overwrite" or claim["op"] == "setup":
            state = {}
        for i, bal in d["rows"]:
            state[i] = bal
        model[v] = (len(state), sum(state.values()))
        if model[v] != (accounts, total):
            bad_versions.append(v)
    # Lost updates: transfers that landed on a newer version than they read, after
    # another transfer changed one of their accounts.
    transfers = sorted((r for r in claims.values() if r["op"] == "transfer"),
                       key=lambda r: r["version"])
    touched = {r["version"]: {r["details"]["a"], r["details"]["b"]} for r in transfers}
    rebased = stale = 0
    for r in transfers:
        rv, v = r["details"]["read_version"], r["version"]
        if v != rv + 1:
            rebased += 1
            mine = touched[v]
            if any(touched.get(u, set()) & mine for u in range(rv + 1, v)):
                stale += 1
    final_sum = model.get(head, (0, 0))[1]
    report.facts.update(transfers=len(transfers), rebased_transfers=rebased,
                        lost_updates=stale, final_sum=final_sum, expected_sum=total,
                        accounts=accounts, bad_versions=len(bad_versions),
                        first_bad_version=bad_versions[0] if bad_versions else None)
    if bad_versions:
        v0 = bad_versions[0]
        report.fail("conservation", f"the sum of balances is not {total} over {accounts} "
                    f"accounts at {len(bad_versions)} of {head} versions (first: version {v0} "
                    f"has {model[v0][1]} over {model[v0][0]}; final sum {final_sum}, drift "
                    f"{final_sum - total:+d}); {stale} of {len(transfers)} transfers landed "
                    f"on a newer version than they read after another transfer changed one "
                    f"of their accounts (lost updates); {rebased} were rebased in all")
    audits = [r for r in records if r.get("op") == "audit" and r.get("outcome") == "ok"]
    mismatches = []
    unconserved = []
    for r in audits:
        d, v = r["details"], r["version"]
        if model.get(v) != (d["rows"], d["sum"]) or d["distinct"] != d["rows"]:
            mismatches.append(f"{r['proc']}#{r['seq']} audited version {v}: {d['rows']} rows "
                              f"({d['distinct']} distinct), sum {d['sum']}; the replay has "
                              f"{model.get(v)}")
        if (d["rows"], d["sum"]) != (accounts, total):
            unconserved.append(v)
    _limit(report, "audits", mismatches)
    if unconserved:
        report.fail("conservation", f"{len(unconserved)} of {len(audits)} audits saw a sum "
                    f"other than {total} (first at version {min(unconserved)})")
    verified = 0
    for v in _sample({r["version"] for r in audits}, verify_versions, head):
        data = table.scan(version=v).to_arrow()
        ids = _ints(data, "id")
        got = (data.num_rows, sum(_ints(data, "balance")))
        verified += 1
        if len(set(ids)) != len(ids):
            report.fail("table", f"version {v} holds duplicate accounts")
        if model.get(v) != got:
            report.fail("table", f"the table read at version {v} has {got}, the replay "
                        f"{model.get(v)}")
    report.facts.update(audits=len(audits), versions_verified=verified)
    return report


# --- running one workload -------------------------------------------------------------


@dataclass
class RunResult:
    backend: str
    workload: str
    writers: int
    seconds: float
    commits: int = 0
    commits_per_s: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    retries_per_commit: float = 0.0
    max_attempts: int = 0
    failed: int = 0
    unknown: int = 0
    noops: int = 0
    reads: int = 0
    failures: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    workdir: str = ""

    @property
    def ok(self) -> bool:
        return not self.failures


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))
    return ordered[k]


def metrics(result: RunResult, records: list[Record], window: float) -> None:
    """Fill throughput, latency and retry figures from the worker records."""
    commits = [r for r in records if _is_commit(r) and r["op"] != "setup"]
    lat = [(r["complete_ts"] - r["invoke_ts"]) * 1000 for r in commits]
    result.commits = len(commits)
    result.commits_per_s = len(commits) / window if window > 0 else 0.0
    result.p50_ms = _percentile(lat, 0.50)
    result.p99_ms = _percentile(lat, 0.99)
    result.retries_per_commit = (sum(r["attempts"] - 1 for r in commits) / len(commits)
                                 if commits else 0.0)
    result.max_attempts = max((r["attempts"] for r in commits), default=0)
    ops = [r for r in records if r.get("op") in COMMIT_OPS - {"setup"}]
    result.failed = sum(1 for r in ops if r["outcome"] == "fail")
    result.unknown = sum(1 for r in ops if r["outcome"] == "unknown")
    result.noops = sum(1 for r in ops if r["outcome"] == "ok" and r.get("noop"))
    result.reads = sum(1 for r in records if r.get("op") in ("read", "audit"))


@dataclass
class Proc:
    """A worker process, the file it touches when ready and its stderr."""

    name: str
    popen: subprocess.Popen[bytes]
    ready: Path
    err: Path


def _spawn(workdir: Path, name: str, spec: dict[str, Any]) -> Proc:
    spec = {**spec, "name": name, "history": str(workdir / f"{name}.jsonl"),
            "ready": str(workdir / f"{name}.ready"), "go": str(workdir / "go.json")}
    spec_path = workdir / f"{name}.spec.json"
    spec_path.write_text(json.dumps(spec))
    err = workdir / f"{name}.stderr"
    with open(err, "wb") as err_fh:
        popen = subprocess.Popen([sys.executable, "-m", "caslake.testing.stress", "--worker",
                                  str(spec_path)], stdout=subprocess.DEVNULL, stderr=err_fh)
    return Proc(name, popen, Path(spec["ready"]), err)


def release(workdir: Path, procs: Sequence[Proc], seconds: float, failures: list[str],
            startup_timeout: float = 300.0) -> float:
    """Wait until every worker of ``procs`` is ready, then release them together
    (``go.json``: start and stop times); the stop time, or 0.0 (with the reason in
    ``failures``) if one died or they did not start in time."""
    deadline = time.time() + startup_timeout
    while not all(p.ready.exists() for p in procs):
        dead = [p for p in procs if p.popen.poll() is not None and not p.ready.exists()]
        if dead or time.time() > deadline:
            failures.extend(f"workers: {p.name} exited with {p.popen.returncode} before "
                            f"starting: {_tail(p.err)}" for p in dead)
            if not dead:
                failures.append("workers: not all workers started in time")
            return 0.0
        time.sleep(0.02)
    start = time.time() + 0.2
    stop = start + seconds
    tmp = workdir / "go.json.tmp"
    tmp.write_text(json.dumps({"start": start, "stop": stop}))
    tmp.replace(workdir / "go.json")
    return stop


def _run_processes(workdir: Path, specs: list[tuple[str, dict[str, Any]]], seconds: float,
                   failures: list[str], startup_timeout: float = 300.0) -> float:
    """Start every worker, release them together, wait; return the measured window."""
    procs: list[Proc] = []
    try:
        for name, spec in specs:
            procs.append(_spawn(workdir, name, spec))
        stop = release(workdir, procs, seconds, failures, startup_timeout)
        if not stop:
            return 0.0
        for p in procs:
            remaining = max(1.0, stop + 120.0 + seconds - time.time())
            try:
                p.popen.wait(timeout=remaining)
            except subprocess.TimeoutExpired:
                failures.append(f"workers: {p.name} still running long after the stop time "
                                "(hang?); killed")
                p.popen.kill()
                p.popen.wait()
                continue
            if p.popen.returncode != 0:
                failures.append(f"workers: {p.name} exited with {p.popen.returncode}: "
                                f"{_tail(p.err)}")
        return seconds
    finally:
        for p in procs:
            if p.popen.poll() is None:
                p.popen.kill()
                p.popen.wait()


def _tail(path: Path, n: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def run_history(uri: str, opts: StorageOptions | None, *, writers: int, readers: int,
                seconds: float, workdir: str | Path, backend: str = "", seed: int = 0,
                verify_versions: int = 24) -> RunResult:
    """Create a table at ``uri``, run the history workload, check it."""
    base = {"uri": uri, "opts": opts or {}}
    specs = [(f"writer{w}", {**base, "role": "writer", "index": w + 1, "seed": seed * 1000 + w})
             for w in range(writers)]
    specs += [(f"reader{i}", {**base, "role": "reader", "seed": seed * 1000 + 500 + i})
              for i in range(readers)]
    return _run_history_checked(uri, opts, "history", writers, specs, seconds, workdir,
                                backend, verify_versions)


def run_appends(uri: str, opts: StorageOptions | None, *, writers: int, seconds: float,
                workdir: str | Path, backend: str = "", seed: int = 0,
                policy: str = "default", verify_versions: int = 24) -> RunResult:
    """Create a table at ``uri``; ``writers`` processes append 1-100-row batches for
    ``seconds`` with ``policy``: ``default`` (as a user runs it), ``group`` (group
    commit on) or ``stress`` (a long retry budget); check the run
    (:func:`check_appends_run`)."""
    base = {"uri": uri, "opts": opts or {}, "policy": policy}
    specs = [(f"appender{w}", {**base, "role": "appender", "index": w + 1,
                               "seed": seed * 1000 + w}) for w in range(writers)]
    return _run_history_checked(uri, opts, "appends", writers, specs, seconds, workdir,
                                backend, verify_versions, check=check_appends_run)


def _run_history_checked(uri: str, opts: StorageOptions | None, workload: str, writers: int,
                         specs: list[tuple[str, dict[str, Any]]], seconds: float,
                         workdir: str | Path, backend: str, verify_versions: int,
                         check: Callable[[str, StorageOptions | None, list[Record]],
                                         CheckReport] | None = None) -> RunResult:
    """Create the history table at ``uri``, run ``specs`` as processes, check the run."""
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    caslake.create_table(uri, HISTORY_SCHEMA, storage_options=opts or None)
    result = RunResult(backend, workload, writers, seconds, workdir=str(work))
    window = _run_processes(work, specs, seconds, result.failures)
    records, problems = load_records(work)
    result.failures.extend(f"history: {p}" for p in problems)
    report = (check(uri, opts, records) if check is not None else
              check_history_run(uri, opts, records, verify_versions=verify_versions))
    result.failures.extend(report.failures)
    result.facts.update(report.facts)
    metrics(result, records, window)
    return result


def run_bank(uri: str, opts: StorageOptions | None, *, writers: int, seconds: float,
             workdir: str | Path, accounts: int = 16, balance: int = 1000,
             mode: str = "upsert", backend: str = "", seed: int = 0,
             verify_versions: int = 24) -> RunResult:
    """Create the accounts table at ``uri``, run transfers plus an auditor, check it."""
    if mode not in BANK_MODES:
        raise ValueError(f"bank mode must be one of {BANK_MODES}")
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    total = accounts * balance
    table = caslake.create_table(uri, BANK_SCHEMA, storage_options=opts or None)
    log = HistoryLog(work / "harness.jsonl", "harness")
    initial = {i: balance for i in range(accounts)}
    rec = run_op(log, "setup", {"rows": sorted([k, v] for k, v in initial.items())},
                 lambda: table.append(_accounts(initial), txn=("bank", 1)))
    log.close()
    workload = "bank" if mode == "upsert" else "bank-fenced"
    result = RunResult(backend, workload, writers, seconds, workdir=str(work))
    if rec["outcome"] != "ok":
        result.failures.append(f"setup: {rec.get('error')}")
        return result
    base = {"uri": uri, "opts": opts or {}}
    specs = [(f"bank{w}", {**base, "role": "bank", "mode": mode, "seed": seed * 1000 + w})
             for w in range(writers)]
    specs.append(("auditor", {**base, "role": "auditor", "seed": seed * 1000 + 999}))
    window = _run_processes(work, specs, seconds, result.failures)
    records, problems = load_records(work)
    result.failures.extend(f"history: {p}" for p in problems)
    report = check_bank_run(uri, opts, records, accounts=accounts, total=total,
                            verify_versions=verify_versions)
    result.failures.extend(report.failures)
    result.facts.update(report.facts)
    result.facts["mode"] = mode
    metrics(result, records, window)
    return result


# --- backends and the command line ----------------------------------------------------


#: Backends ``--backend`` takes (comma-separated); ``both`` is local and s3, ``all`` all four.
BACKENDS = ("local", "s3", "gcs", "azure")
BACKEND_ALIASES = {"both": ("local", "s3"), "all": BACKENDS}


def parse_backends(arg: str) -> list[str]:
    """``--backend`` value -> backend names, in order, each once."""
    names: list[str] = []
    for part in (p.strip() for p in arg.split(",")):
        for name in BACKEND_ALIASES.get(part, (part,)):
            if name not in BACKENDS:
                raise ValueError(f"unknown backend {name!r}: choose from "
                                 f"{', '.join([*BACKENDS, *BACKEND_ALIASES])}")
            if name not in names:
                names.append(name)
    return names


NewTable = Callable[[str], tuple[str, StorageOptions]]


@contextlib.contextmanager
def _backend(name: str, root: Path) -> Iterator[NewTable]:
    """Yields ``new_table(label) -> (uri, storage_options)`` for the backend: a local
    directory, or a fresh bucket/container on a server this harness starts (moto for
    s3, fake-gcs-server for gcs, Azurite for azure).  The storage options carry the
    server's endpoint and credentials; every worker process gets them in its spec."""
    if name == "local":
        yield lambda label: (str(root / "tables" / label), {})
    elif name == "s3":
        with _moto_backend() as new_table:
            yield new_table
    elif name == "gcs":
        from caslake.testing import gcs_emulator

        with gcs_emulator.run_fake_gcs() as endpoint:
            yield _bucket_per_table("gs", lambda b: gcs_emulator.create_bucket(endpoint, b),
                                    gcs_emulator.storage_options(endpoint))
    elif name == "azure":
        from caslake.testing import azurite

        with azurite.run_azurite() as endpoint:
            yield _bucket_per_table("az", lambda c: azurite.create_container(endpoint, c),
                                    azurite.storage_options(endpoint))
    else:
        raise ValueError(f"unknown backend {name!r}")


def _bucket_per_table(scheme: str, create: Callable[[str], object],
                      opts: StorageOptions) -> NewTable:
    """``new_table`` that creates a fresh bucket (container) per table with ``create``."""
    def new_table(label: str) -> tuple[str, StorageOptions]:
        bucket = f"caslake-stress-{uuid.uuid4().hex[:12]}"
        create(bucket)
        return f"{scheme}://{bucket}/{label}", opts

    return new_table


@contextlib.contextmanager
def _moto_backend() -> Iterator[NewTable]:
    import boto3

    from caslake.testing.moto_server import (
        DUMMY_KEY_ID,
        DUMMY_SECRET,
        REGION,
        run_moto_server,
        storage_options,
    )

    with run_moto_server() as endpoint:
        client = boto3.client("s3", endpoint_url=endpoint, region_name=REGION,
                              aws_access_key_id=DUMMY_KEY_ID, aws_secret_access_key=DUMMY_SECRET)
        yield _bucket_per_table("s3", lambda b: client.create_bucket(Bucket=b),
                                storage_options(endpoint))


COLUMNS = [("backend", "{:<7}"), ("workload", "{:<11}"), ("writers", "{:>7}"),
           ("commits", "{:>7}"), ("commits/s", "{:>9.1f}"), ("p50 ms", "{:>7.1f}"),
           ("p99 ms", "{:>7.1f}"), ("retries/commit", "{:>14.2f}"), ("max att", "{:>7}"),
           ("failed", "{:>6}"), ("unknown", "{:>7}"), ("noop", "{:>5}"), ("reads", "{:>6}"),
           ("versions", "{:>8}"), ("check", "{:<}")]


def format_table(results: list[RunResult]) -> str:
    header = "  ".join(f"{{:{'<' if fmt.startswith('{:<') else '>'}{_width(fmt, name)}}}"
                       .format(name) for name, fmt in COLUMNS)
    lines = [header, "-" * len(header)]
    for r in results:
        values = [r.backend, r.workload, r.writers, r.commits, r.commits_per_s, r.p50_ms,
                  r.p99_ms, r.retries_per_commit, r.max_attempts, r.failed, r.unknown, r.noops,
                  r.reads, r.facts.get("versions", 0),
                  "ok" if r.ok else f"FAIL ({len(r.failures)})"]
        cells = []
        for (name, fmt), v in zip(COLUMNS, values, strict=True):
            cell = fmt.format(v)
            w = _width(fmt, name)
            cells.append(cell.ljust(w) if fmt.startswith("{:<") else cell.rjust(w))
        lines.append("  ".join(cells))
    return "\n".join(lines)


def _width(fmt: str, name: str) -> int:
    digits = "".join(ch for ch in fmt.split(".")[0] if ch.isdigit())
    return max(len(name), int(digits) if digits else 0)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m caslake.testing.stress",
                                     description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--backend", default="both",
                        help="comma-separated: local, s3, gcs, azure; both = local,s3; "
                        "all = every backend")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each run")
    parser.add_argument("--writers", default="1,4,16", help="writer counts, comma-separated")
    parser.add_argument("--readers", type=int, default=2, help="readers in the history runs")
    parser.add_argument("--workloads", default="history,bank",
                        help="comma-separated: history, bank, bank-fenced")
    parser.add_argument("--accounts", type=int, default=16, help="accounts in the bank runs")
    parser.add_argument("--verify-versions", type=int, default=24,
                        help="observed versions re-read from the table per run, besides the "
                        "last (0: every observed version; every observation is always "
                        "checked against the replay)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", help="where tables and histories go (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker_main(args.worker)
    writer_counts = [int(x) for x in args.writers.split(",") if x.strip()]
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    for w in workloads:
        if w not in ("history", "bank", "bank-fenced"):
            parser.error(f"unknown workload {w!r}")
    try:
        backends = parse_backends(args.backend)
    except ValueError as e:
        parser.error(str(e))
    root = Path(args.workdir or tempfile.mkdtemp(prefix="caslake-stress-"))
    root.mkdir(parents=True, exist_ok=True)
    results: list[RunResult] = []
    log = sys.stderr if args.json else sys.stdout
    for backend in backends:
        with _backend(backend, root / backend) as new_table:
            for workload in workloads:
                for w in writer_counts:
                    label = f"{workload}-w{w}"
                    uri, opts = new_table(label)
                    work = root / backend / "runs" / label
                    print(f"[{backend}] {workload} with {w} writer(s) for {args.seconds:g}s ...",
                          file=log, flush=True)
                    t0 = time.time()
                    if workload == "history":
                        res = run_history(uri, opts, writers=w, readers=args.readers,
                                          seconds=args.seconds, workdir=work, backend=backend,
                                          seed=args.seed, verify_versions=args.verify_versions)
                    else:
                        res = run_bank(uri, opts, writers=w, seconds=args.seconds, workdir=work,
                                       accounts=args.accounts, backend=backend, seed=args.seed,
                                       mode="upsert" if workload == "bank" else "fenced",
                                       verify_versions=args.verify_versions)
                    res.facts["wall_s"] = round(time.time() - t0, 1)
                    results.append(res)
                    print(f"    {'ok' if res.ok else 'FAIL'}: {res.commits} commits, "
                          f"{res.facts.get('versions')} versions, {res.reads} reads, "
                          f"checked in {res.facts['wall_s']}s", file=log, flush=True)
    failed = [r for r in results if not r.ok]
    if args.json:
        print(json.dumps({"seconds": args.seconds, "results": [asdict(r) for r in results]},
                         indent=2))
    else:
        print()
        print(format_table(results))
        for r in failed:
            print(f"\n{r.backend} {r.workload} W={r.writers}: {len(r.failures)} failed check(s)"
                  f" (histories in {r.workdir})")
            for f in r.failures:
                print(f"  - {f}")
    if not args.keep and not failed and not args.workdir:
        shutil.rmtree(root, ignore_errors=True)
    elif failed:
        print(f"work directory kept: {root}", file=log)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
