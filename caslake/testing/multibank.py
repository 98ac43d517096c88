"""The bank across two tables (issue 35's acceptance), as a harness:
``python -m caslake.testing.multibank``.

Usage::

    python -m caslake.testing.multibank [--backend local|s3|both] [--procs 8]
                                        [--seconds 60] [--kills 12] [--no-faults]
                                        [--json] [--keep]

Accounts ``0..N-1`` have a balance in each of two tables, ``checking`` and
``savings`` (``N * 2 * opening`` in all).  ``procs`` OS processes (this module
re-run with ``--worker SPEC``) each loop: take an atomic snapshot of both tables
(:func:`caslake.snapshot`), then move an amount from ``checking[a]`` to
``savings[b]`` in ONE multi-table transaction (:func:`caslake.transaction`) with
``read_version`` on both tables at the snapshot's versions and the idempotency
token ``txn=(app, n)`` (``app``: the process incarnation, ``n``: its transfer
number), which every staged version records: it names the transfer in the
tables' history even when the process died before it learned its transaction
id.  One more process reads: atomic snapshots, and plain one-table scans of the
two tables in alternating order.

The harness SIGKILLs ``kills`` random transfer processes at random times and
restarts each (a new incarnation, a new log).  On the S3 backend (a moto server the
harness starts) every worker talks through a
:class:`~caslake.testing.wire_faults.FaultProxy` with the standard wire-fault
mix; setup and checks go straight to moto.  After the window one more transfer
(no faults) meets whatever the killed processes left, so every staged version in
the history is decided.

Each worker logs every operation as a JSON line before (``begin``: id, app, n,
accounts, amount) and after it (``end``: ``ok`` / ``fail`` / ``unknown``, the
transaction id and staged versions), and every read with the versions and
balances it saw; a SIGKILL leaves at most one transfer begun and not ended.

:func:`check_run` then derives what was applied from the tables themselves --
each staged version's raw manifest names its transaction (whose decision record
says committed or not) and carries its transfer's token -- and checks:

* **history**: every version after the opening one is one transfer's staged
  version; each committed transfer is applied exactly once in each table, at
  the versions its decision record names; every acknowledged transfer is
  applied (at the versions it was told), no failed one is, and every unknown one
  (an ``unknown`` outcome or a kill in flight) is settled by reading back its
  decision record: committed -> applied once, otherwise not at all; no version
  is left pending;
* **model**: replaying the applied transfers' amounts (from the log) over the
  opening balances gives each version's balances; every snapshot read sums to
  the opening total and shows exactly the model at the versions it pinned;
  every plain one-table scan shows exactly the model at the version it read (a
  transfer that later aborted would show as a difference); the final tables
  equal the model;
* ``verify`` (all versions) is clean on both tables.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import pyarrow as pa

import caslake
from caslake.core import CommitPolicy, MetadataIO, read_record
from caslake.errors import CaslakeError, CommitConflict, NotFound
from caslake.ops.multi import MultiSnapshot
from caslake.store.options import StorageOptions
from caslake.testing.stress import (
    HistoryLog,
    Proc,
    Record,
    _backend,
    _percentile,
    _tail,
    _wait_for_go,
    load_records,
    release,
)

SCHEMA = pa.schema([pa.field("account", pa.int64(), nullable=False),
                    pa.field("balance", pa.int64(), nullable=False)])
POLICY = CommitPolicy(max_attempts=400, base_backoff_s=0.002, max_backoff_s=0.1)
NAMES = ("checking", "savings")
FINAL_APP = "final"


# --- the workers (each one OS process) ------------------------------------------------


def _balances(table: pa.Table, accounts: int) -> list[int]:
    out = [0] * accounts
    for a, b in zip(table["account"].to_pylist(), table["balance"].to_pylist(), strict=True):
        out[cast(int, a)] = cast(int, b)
    return out


def _open(spec: dict[str, Any]) -> tuple[caslake.Table, caslake.Table]:
    tables = [caslake.open_table(spec[n], storage_options=spec["opts"] or None) for n in NAMES]
    for t in tables:
        t.commit_policy = POLICY
    return tables[0], tables[1]


def snapshot_read(log: HistoryLog, c: caslake.Table, s: caslake.Table, accounts: int
                  ) -> tuple[MultiSnapshot, list[list[int]]] | None:
    """An atomic snapshot of both tables and the balances it shows, logged
    (``snapshot``); None if it failed (logged as ``read-error``)."""
    t0 = time.time()
    try:
        snap = caslake.snapshot(c, s)
        bal = [_balances(snap.to_arrow(t), accounts) for t in (c, s)]
    except CaslakeError as e:
        log.write({"op": "read-error", "kind": "snapshot", "error": repr(e)[:300]})
        return None
    log.write({"op": "snapshot", "ts": t0, "versions": [snap[c].version, snap[s].version],
               "balances": bal})
    return snap, bal


def transfer(log: HistoryLog, c: caslake.Table, s: caslake.Table,
             read: tuple[MultiSnapshot, list[list[int]]], app: str, n: int,
             rng: random.Random, accounts: int, ttl_ms: int) -> Record:
    """Move a random amount from ``checking[a]`` to ``savings[b]`` (balances from
    the snapshot ``read``) in one multi-table transaction, logged before and after."""
    snap, (cb, sb) = read
    a, b = rng.randrange(accounts), rng.randrange(accounts)
    amount = rng.choice([-1, 1]) * rng.randint(1, 50)
    tid = f"{app}:{n}"
    log.write({"op": "begin", "tid": tid, "app": app, "n": n, "from": a, "to": b,
               "amount": amount, "ts": time.time()})
    tx = caslake.transaction(c, s, ttl_ms=ttl_ms, txn=(app, n))
    end: Record = {"op": "end", "tid": tid, "txn_id": None, "versions": None, "error": None}
    try:
        with tx:
            tx[c].read_version(snap[c].version)
            tx[s].read_version(snap[s].version)
            tx[c].upsert(pa.table({"account": [a], "balance": [cb[a] - amount]}, schema=SCHEMA),
                         key="account")
            tx[s].upsert(pa.table({"account": [b], "balance": [sb[b] + amount]}, schema=SCHEMA),
                         key="account")
    except CommitConflict as e:  # a definite failure: nothing of it applied
        end.update(outcome="fail", error=repr(e)[:300])
    except CaslakeError as e:  # CommitOutcomeUnknown, a store error: settled by read-back
        end.update(outcome="unknown", error=repr(e)[:300])
    except Exception as e:
        end.update(outcome="unknown", error=repr(e)[:300], untyped=True)
    else:
        end.update(outcome="ok", versions=[tx.results[t.uri.rstrip("/")].version
                                           for t in (c, s)])
    end.update(txn_id=tx.txn_id, ts=time.time())
    log.write(end)
    return end


def plain_reads(log: HistoryLog, tables: Sequence[tuple[str, caslake.Table]],
                accounts: int) -> None:
    """One plain scan of each ``(name, table)``, in this order, each logged (``plain``)."""
    for name, t in tables:
        try:
            scan = t.scan()
            bal = _balances(scan.to_arrow(), accounts)
        except CaslakeError as e:
            log.write({"op": "read-error", "kind": "plain", "error": repr(e)[:300]})
            continue
        log.write({"op": "plain", "table": name, "version": scan.source.version,
                   "balances": bal})


def worker_main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    c, s = _open(spec)
    log = HistoryLog(spec["history"], spec["name"])
    Path(spec["ready"]).touch()
    _, stop = _wait_for_go(Path(spec["go"]))
    rng = random.Random(spec["seed"])
    accounts = spec["accounts"]
    n = 0
    while time.time() < stop:
        if spec["role"] == "reader":
            snapshot_read(log, c, s, accounts)
            pairs = list(zip(NAMES, (c, s), strict=True))
            plain_reads(log, pairs if rng.random() < 0.5 else pairs[::-1], accounts)
            continue
        read = snapshot_read(log, c, s, accounts)
        if read is not None:
            n += 1
            transfer(log, c, s, read, spec["app"], n, rng, accounts, spec["ttl_ms"])
    log.close()
    return 0


# --- the harness ------------------------------------------------------------------------


@dataclass
class _Proc(Proc):
    """One incarnation of worker ``index`` (restarted after a kill as the next)."""

    index: int = 0
    incarnation: int = 0


@dataclass
class BankResult:
    backend: str
    procs: int
    seconds: float
    faults: bool
    acknowledged: int = 0
    failed: int = 0
    unknown: int = 0
    unknown_committed: int = 0
    in_flight_at_kill: int = 0
    kills: int = 0
    snapshot_reads: int = 0
    plain_reads: int = 0
    read_errors: int = 0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    versions: int = 0
    fired: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    workdir: str = ""

    @property
    def ok(self) -> bool:
        return not self.failures

    def summary(self) -> str:
        fired = ", ".join(f"{k}={v}" for k, v in sorted(self.fired.items())) or "none"
        return (f"[{self.backend}] {self.procs} procs, {self.seconds:g}s: transfers acknowledged "
                f"{self.acknowledged}, failed {self.failed}, unknown {self.unknown} "
                f"({self.unknown_committed} committed on read-back; {self.in_flight_at_kill} "
                f"in flight at a kill); kills {self.kills}; snapshot reads "
                f"{self.snapshot_reads}, plain reads {self.plain_reads} (read errors "
                f"{self.read_errors}); p50 {self.p50_ms:.0f} ms, p99 {self.p99_ms:.0f} ms; "
                f"versions {self.versions}; faults {fired}; "
                f"{'ok' if self.ok else f'FAIL ({len(self.failures)})'}")


def _spawn(workdir: Path, index: int, incarnation: int, base: dict[str, Any]) -> _Proc:
    role = "reader" if index == base["procs"] else "writer"
    name = f"{role}{index}.{incarnation}"
    spec = {**base, "role": role, "name": name, "app": f"w{index}.{incarnation}",
            "seed": base["seed"] * 10_000 + index * 100 + incarnation,
            "history": str(workdir / f"{name}.jsonl"), "ready": str(workdir / f"{name}.ready"),
            "go": str(workdir / "go.json")}
    path = workdir / f"{name}.spec.json"
    path.write_text(json.dumps(spec))
    err = workdir / f"{name}.stderr"
    with open(err, "wb") as fh:
        popen = subprocess.Popen([sys.executable, "-m", "caslake.testing.multibank", "--worker",
                                  str(path)], stdout=subprocess.DEVNULL, stderr=fh)
    return _Proc(name, popen, Path(spec["ready"]), err, index, incarnation)


def _start(workdir: Path, base: dict[str, Any], seconds: float, failures: list[str]
           ) -> tuple[list[_Proc], float]:
    """Start every process, wait until all are ready, release them; ``(procs, stop)``."""
    procs = [_spawn(workdir, i, 0, base) for i in range(base["procs"] + 1)]
    return procs, release(workdir, procs, seconds, failures)


def _kill_loop(workdir: Path, base: dict[str, Any], procs: list[_Proc], stop: float,
               kills: int, rng: random.Random) -> int:
    """SIGKILL ``kills`` random live transfer processes at random times in the
    window's middle 80%, restarting each; the number of kills made.  (The reader is
    spared: a restart costs seconds of imports, and its reads are the checks'.)"""
    begin = time.time()
    span = stop - begin
    times = sorted(begin + span * rng.uniform(0.1, 0.9) for _ in range(kills))
    done = 0
    for at in times:
        time.sleep(max(0.0, at - time.time()))
        live = [p for p in procs if p.popen.poll() is None and p.index != base["procs"]]
        if not live or time.time() >= stop - 0.5:
            break
        victim = rng.choice(live)
        victim.popen.send_signal(signal.SIGKILL)
        victim.popen.wait()
        done += 1
        procs.append(_spawn(workdir, victim.index, victim.incarnation + 1, base))
    return done


def _wait_all(procs: list[_Proc], stop: float, killed: set[str], failures: list[str]) -> None:
    for p in procs:
        try:
            p.popen.wait(timeout=max(1.0, stop + 180.0 - time.time()))
        except subprocess.TimeoutExpired:
            failures.append(f"workers: {p.name} still running long after the stop time; killed")
            p.popen.kill()
            p.popen.wait()
            continue
        if p.popen.returncode != 0 and p.name not in killed:
            failures.append(f"workers: {p.name} exited with {p.popen.returncode}: "
                            f"{_tail(p.err)}")


def create_tables(uris: dict[str, str], opts: StorageOptions | None, accounts: int,
                  opening: int) -> None:
    """Both tables, account ``a`` at ``opening`` appended as version ``a + 1`` (one
    file per account, so a transfer's read validation meets only the files of the
    accounts it touches)."""
    for n in NAMES:
        t = caslake.create_table(uris[n], SCHEMA, storage_options=opts or None)
        for a in range(accounts):
            t.append(pa.table({"account": [a], "balance": [opening]}, schema=SCHEMA))


def final_transfer(uris: dict[str, str], opts: StorageOptions | None, workdir: Path,
                   accounts: int) -> None:
    """One more transfer, straight to the store, logged like the workers'; it meets
    (and decides) whatever staged version the killed processes left."""
    c, s = _open({**uris, "opts": opts or {}})
    log = HistoryLog(workdir / "final.jsonl", "final")
    rng = random.Random(7)
    for n in range(1, 20):
        read = snapshot_read(log, c, s, accounts)
        if read is not None and transfer(log, c, s, read, FINAL_APP, n, rng, accounts,
                                         30_000)["outcome"] == "ok":
            break
    log.close()


def run_multibank(uris: dict[str, str], opts: StorageOptions | None, *, procs: int = 8,
                  seconds: float = 60.0, kills: int = 12, workdir: str | Path,
                  worker_opts: StorageOptions | None = None, accounts: int = 16,
                  opening: int = 1_000, ttl_ms: int = 3_000, seed: int = 0,
                  backend: str = "", proxy: Any = None) -> BankResult:
    """Create the two tables (``uris``: ``{"checking": ..., "savings": ...}``), run
    ``procs`` transfer processes and one reader for ``seconds`` with ``kills``
    SIGKILLs (workers use ``worker_opts``: e.g. through a fault proxy, whose
    counters ``proxy`` gives), then check the run (:func:`check_run`)."""
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    create_tables(uris, opts, accounts, opening)
    result = BankResult(backend, procs, seconds, proxy is not None, workdir=str(work))
    base = {**uris, "opts": (worker_opts if worker_opts is not None else opts) or {},
            "procs": procs, "accounts": accounts, "ttl_ms": ttl_ms, "seed": seed}
    before = proxy.fired() if proxy is not None else {}
    procs_, stop = _start(work, base, seconds, result.failures)
    try:
        if stop:
            result.kills = _kill_loop(work, base, procs_, stop, kills, random.Random(seed))
            killed = {p.name for p in procs_ if p.popen.returncode == -signal.SIGKILL}
            _wait_all(procs_, stop, killed, result.failures)
    finally:
        for p in procs_:
            if p.popen.poll() is None:
                p.popen.kill()
                p.popen.wait()
    if proxy is not None:
        result.fired = {k: v - before.get(k, 0) for k, v in proxy.fired().items()}
    if not stop:
        return result
    final_transfer(uris, opts, work, accounts)
    records, problems = load_records(work)
    result.failures.extend(f"log: {p}" for p in problems)
    check_run(uris, opts, records, accounts=accounts, opening=opening, result=result)
    return result


# --- the checks ---------------------------------------------------------------------------


@dataclass
class Version:
    """One version of a table as the check sees it: from its raw manifest."""

    version: int
    txn_id: str | None  # the multi-table transaction of a staged version
    record_uri: str | None
    tokens: dict[str, int]  # the raw manifest's txn tokens
    state: str = "plain"  # plain | committed | aborted | pending | missing
    tid: str | None = None  # the transfer (its token) of a staged version


def table_versions(uri: str, opts: StorageOptions | None) -> list[Version]:
    """Every version of the table at ``uri``, oldest first, from the raw manifests
    (an aborted staged version keeps its own, naming its transaction)."""
    table = caslake.open_table(uri, storage_options=opts or None)
    io = MetadataIO(table.store)
    pointer, _ = io.read_pointer()
    cur = io.snapshot_for_pointer(pointer)
    out = []
    while True:
        raw = io.load_manifest(cur.key)
        ref = raw.transaction
        out.append(Version(raw.version, ref.id if ref else None, ref.record if ref else None,
                           dict(raw.txns)))
        if raw.parent is None:
            break
        cur = io.parent(cur)
    return out[::-1]


def settle(versions: list[Version], stores: dict[str, Any]) -> dict[str, Any]:
    """Fill each staged version's decision (read back from its record) and transfer
    (the token its raw manifest adds to what its visible parent holds); the
    records read, by transaction id."""
    records: dict[str, Any] = {}
    visible: dict[str, int] = {}
    for v in versions:
        if v.txn_id is not None and v.record_uri is not None:
            if v.txn_id not in records:
                try:
                    records[v.txn_id] = read_record(stores[v.record_uri.rstrip("/")],
                                                    v.txn_id)[0]
                except NotFound:
                    records[v.txn_id] = None
            rec = records[v.txn_id]
            v.state = "missing" if rec is None else rec.state
            new = {f"{app}:{n}" for app, n in v.tokens.items() if visible.get(app) != n}
            v.tid = next(iter(new)) if len(new) == 1 else None
        if v.state in ("plain", "committed"):
            visible = v.tokens
    return records


@dataclass
class _Check:
    failures: list[str]

    def fail(self, category: str, message: str) -> None:
        if sum(f.startswith(category) for f in self.failures) < 20:
            self.failures.append(f"{category}: {message}")


def check_run(uris: dict[str, str], opts: StorageOptions | None, records: list[Record], *,
              accounts: int, opening: int, result: BankResult, verify: bool = True
              ) -> BankResult:
    """Check a finished run (see the module docstring) into ``result`` (``verify``:
    also run ``verify`` over all versions of both tables)."""
    ck = _Check(result.failures)
    tables = {n: caslake.open_table(uris[n], storage_options=opts or None) for n in NAMES}
    stores = {t.uri.rstrip("/"): t.store for t in tables.values()}
    chains = {n: table_versions(uris[n], opts) for n in NAMES}
    decisions: dict[str, Any] = {}
    for n in NAMES:
        decisions.update(settle(chains[n], stores))
    result.versions = sum(len(c) for c in chains.values())
    begins = {r["tid"]: r for r in records if r.get("op") == "begin"}
    ends = {r["tid"]: r for r in records if r.get("op") == "end"}
    applied = _check_history(ck, chains, begins, decisions, accounts + 1)
    coordinator = stores[min(stores)]  # the URI that sorts first keeps the records
    _check_log(ck, begins, ends, applied, _Records(decisions, coordinator), result)
    models = {n: _model(n, chains[n], begins, accounts, opening) for n in NAMES}
    _check_reads(ck, records, models, total=2 * accounts * opening, result=result)
    for n in NAMES:
        try:
            got = _balances(tables[n].to_arrow(), accounts)
        except CaslakeError as e:
            ck.fail("final", f"{n} cannot be read: {e!r}"[:500])
            continue
        if got != models[n][-1]:
            ck.fail("final", f"{n} reads {got}, the replay of applied transfers gives "
                    f"{models[n][-1]}")
    if verify:
        _check_verify(ck, tables, opts)
    return result


def _check_history(ck: _Check, chains: dict[str, list[Version]], begins: dict[str, Record],
                   decisions: dict[str, Any], setup: int) -> dict[str, dict[str, Version]]:
    """Each table's applied transfers (tid -> version), checked: every version after
    the opening ones is a staged version of a logged transfer, decided, each
    committed one once per table, in both tables, at the versions its record names."""
    applied: dict[str, dict[str, Version]] = {n: {} for n in NAMES}
    for n, chain in chains.items():
        for v in chain[setup:]:
            where = f"{n} v{v.version}"
            if v.txn_id is None:
                ck.fail("history", f"{where} is not a staged version of a transfer")
                continue
            if v.state in ("pending", "missing"):
                ck.fail("history", f"{where}: transaction {v.txn_id}'s record is {v.state} "
                        "after the run")
            if v.tid is None or v.tid not in begins:
                ck.fail("history", f"{where}: transaction {v.txn_id} is no logged transfer "
                        f"(token {v.tid})")
                continue
            if v.state != "committed":
                continue
            if v.tid in applied[n]:
                ck.fail("history", f"transfer {v.tid} applied twice to {n} (v"
                        f"{applied[n][v.tid].version} and v{v.version})")
            applied[n][v.tid] = v
    for tid in set(applied["checking"]) ^ set(applied["savings"]):
        ck.fail("history", f"transfer {tid} applied to one table only")
    for tid, v in applied["checking"].items():
        other = applied["savings"].get(tid)
        rec = decisions.get(v.txn_id or "")
        if other is None or rec is None:
            continue
        want = sorted(p.version for p in rec.participants)
        if other.txn_id != v.txn_id or want != sorted([v.version, other.version]):
            ck.fail("records", f"transfer {tid}: staged at checking v{v.version} / savings "
                    f"v{other.version}, its record {v.txn_id} names versions {want}")
    return applied


class _Records:
    """Decision records by transaction id: those the history named (read already),
    others read from the coordinator's ``_txn/`` on demand (None: absent)."""

    def __init__(self, known: dict[str, Any], store: Any = None) -> None:
        self.known = dict(known)
        self.store = store

    def state(self, txn_id: str | None) -> str:
        if txn_id is None:
            return "absent"
        if txn_id not in self.known and self.store is not None:
            try:
                self.known[txn_id] = read_record(self.store, txn_id)[0]
            except NotFound:
                self.known[txn_id] = None
        rec = self.known.get(txn_id)
        return rec.state if rec is not None else "absent"


def _check_log(ck: _Check, begins: dict[str, Record], ends: dict[str, Record],
               applied: dict[str, dict[str, Version]], records: _Records,
               result: BankResult) -> None:
    """Every acknowledged transfer applied (at the versions it was told), no failed
    one, every unknown one as its decision record says."""
    lat = []
    done = applied["checking"]
    for tid, begin in begins.items():
        end = ends.get(tid)
        outcome = end["outcome"] if end else "killed"
        if end and end.get("untyped"):
            ck.fail("errors", f"transfer {tid} raised an untyped error: {end['error']}")
        if outcome == "ok":
            result.acknowledged += tid.split(":")[0] != FINAL_APP
            lat.append((end["ts"] - begin["ts"]) * 1000)  # type: ignore[index]
            v = done.get(tid)
            if v is None:
                ck.fail("history", f"acknowledged transfer {tid} is not applied")
            elif (v.txn_id != end["txn_id"]  # type: ignore[index]
                  or [v.version, applied["savings"][tid].version] != end["versions"]):  # type: ignore[index]
                ck.fail("history", f"acknowledged transfer {tid} was told {end}, the tables "
                        f"hold it as {v.txn_id} at checking v{v.version}")
        elif outcome == "fail":
            result.failed += 1
            if records.state(end.get("txn_id")) == "committed":  # type: ignore[union-attr]
                ck.fail("history", f"failed transfer {tid}: its record reads committed")
            if tid in done:
                ck.fail("history", f"failed transfer {tid} is applied (checking "
                        f"v{done[tid].version})")
        else:
            result.unknown += outcome == "unknown"
            result.in_flight_at_kill += outcome == "killed"
            txn_id = end.get("txn_id") if end else None
            if txn_id is None and tid in done:  # killed: the id its token names
                txn_id = done[tid].txn_id
            state = records.state(txn_id)
            result.unknown_committed += state == "committed"
            if (state == "committed") != (tid in done):
                ck.fail("history", f"unknown transfer {tid}: its record reads {state}, yet "
                        f"it is {'' if tid in done else 'not '}applied")
    result.p50_ms, result.p99_ms = _percentile(lat, 0.5), _percentile(lat, 0.99)


def _model(name: str, chain: list[Version], begins: dict[str, Record], accounts: int,
           opening: int) -> list[list[int]]:
    """Each version's balances of table ``name``: the opening ones (version ``a + 1``
    opens account ``a``), plus the amount of every committed staged version's
    transfer (the log says which)."""
    out = [[opening if a < k else 0 for a in range(accounts)] for k in range(accounts + 1)]
    for v in chain[accounts + 1:]:
        cur = list(out[-1])
        if v.state == "committed" and v.tid in begins:
            t = begins[v.tid]
            if name == "checking":
                cur[t["from"]] -= t["amount"]
            else:
                cur[t["to"]] += t["amount"]
        out.append(cur)
    return out


def _check_reads(ck: _Check, records: list[Record], models: dict[str, list[list[int]]], *,
                 total: int, result: BankResult) -> None:
    """Snapshot reads sum to ``total`` and match the model; plain reads match it."""
    for r in records:
        op = r.get("op")
        if op == "snapshot":
            result.snapshot_reads += 1
            if sum(map(sum, r["balances"])) != total:
                ck.fail("snapshot", f"{r['proc']} read a snapshot at versions {r['versions']} "
                        f"summing to {sum(map(sum, r['balances']))}, not {total}")
            for n, v, bal in zip(NAMES, r["versions"], r["balances"], strict=True):
                if not v < len(models[n]) or models[n][v] != bal:
                    ck.fail("snapshot", f"{r['proc']} read {n} v{v} as {bal} in a snapshot; "
                            f"the applied transfers give {_at(models[n], v)}")
        elif op == "plain":
            result.plain_reads += 1
            n, v = r["table"], r["version"]
            if not v < len(models[n]) or models[n][v] != r["balances"]:
                ck.fail("plain", f"{r['proc']} scanned {n} v{v} as {r['balances']}; the "
                        f"applied transfers give {_at(models[n], v)}")
        elif op == "read-error":
            result.read_errors += 1


def _at(model: list[list[int]], v: int) -> object:
    return model[v] if v < len(model) else "no such version"


def _check_verify(ck: _Check, tables: dict[str, caslake.Table], opts: StorageOptions | None
                  ) -> None:
    from caslake.ops.verify import verify_table

    for n, t in tables.items():
        report = verify_table(t.store, all_versions=True, storage_options=opts)
        for p in report.problems[:10]:
            ck.fail("verify", f"{n}: {p}")


# --- the command line ----------------------------------------------------------------------


@contextlib.contextmanager
def _faulty(backend: str, endpoint_opts: StorageOptions, faults: bool, seed: int
            ) -> Iterator[tuple[StorageOptions | None, Any]]:
    """Worker storage options (through a fault proxy on s3 when ``faults``) and the proxy."""
    if backend != "s3" or not faults:
        yield None, None
        return
    from caslake.testing.moto_server import storage_options
    from caslake.testing.wire_faults import run_fault_proxy, standard_mix

    with run_fault_proxy(endpoint_opts["endpoint_url"], standard_mix(), seed=seed,
                         lifetime_s=3600.0) as px:
        yield storage_options(px.endpoint), px


def run_backend(backend: str, root: Path, *, faults: bool = True, **kwargs: Any) -> BankResult:
    """One run on ``backend`` (``local`` or ``s3``: a moto server started here)."""
    with _backend(backend, root) as new_table:
        uri, opts = new_table("bank")
        uris = {n: f"{uri}/{n}" for n in NAMES}
        with _faulty(backend, opts, faults, kwargs.get("seed", 0)) as (worker_opts, proxy):
            return run_multibank(uris, opts, workdir=root / "runs", backend=backend,
                                 worker_opts=worker_opts, proxy=proxy, **kwargs)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m caslake.testing.multibank",
                                     description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--backend", choices=["local", "s3", "both"], default="both")
    parser.add_argument("--procs", type=int, default=8, help="transfer processes")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--kills", type=int, default=12, help="SIGKILLs during the run")
    parser.add_argument("--accounts", type=int, default=16)
    parser.add_argument("--ttl-ms", type=int, default=3_000)
    parser.add_argument("--no-faults", action="store_true", help="no wire faults on s3")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker_main(args.worker)
    root = Path(args.workdir or tempfile.mkdtemp(prefix="caslake-multibank-"))
    results = []
    for backend in ["local", "s3"] if args.backend == "both" else [args.backend]:
        print(f"[{backend}] {args.procs} processes for {args.seconds:g}s ...",
              file=sys.stderr, flush=True)
        res = run_backend(backend, root / backend, faults=not args.no_faults,
                          procs=args.procs, seconds=args.seconds, kills=args.kills,
                          accounts=args.accounts, ttl_ms=args.ttl_ms, seed=args.seed)
        results.append(res)
        print(res.summary(), file=sys.stderr, flush=True)
        for f in res.failures:
            print(f"  - {f}", file=sys.stderr)
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
    failed = any(not r.ok for r in results)
    if not args.keep and not failed and not args.workdir:
        shutil.rmtree(root, ignore_errors=True)
    elif failed:
        print(f"work directory kept: {root}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
