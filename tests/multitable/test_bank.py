"""The bank across two tables (issue 35's acceptance, small): accounts have a
``checking`` and a ``savings`` balance in two tables; threads move money between
them with multi-table transactions (``read_version`` on both: serializable)
while a reader takes atomic snapshots.

* Every snapshot sums to the opening total (never a debit without its credit).
* History check: the final balances equal the opening ones plus exactly the
  acknowledged transfers (none twice, no failed one); each acknowledged
  transfer's staged versions name its transaction, whose record says committed;
  a failed one's record is absent or aborted.

On the local store and on moto S3; a few seconds each.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pyarrow as pa
import pytest

import caslake
from caslake.core import read_record
from caslake.errors import CommitConflict, NotFound
from tests.multitable.bank import (
    ACCOUNTS,
    OPENING,
    SCHEMA,
    Transfer,
    balances,
    open_pair,
    transfer,
)

RUN_S = 2.0
WRITERS = 4

def run_bank(uris: tuple[str, str], options: dict[str, str] | None) -> None:
    opening = pa.table({"account": list(range(ACCOUNTS)), "balance": [OPENING] * ACCOUNTS},
                       schema=SCHEMA)
    for u in uris:
        caslake.create_table(u, SCHEMA, storage_options=options).append(opening)
    total = 2 * OPENING * ACCOUNTS
    done: list[Transfer] = []
    sums: list[int] = []
    errors: list[BaseException] = []
    stop = time.monotonic() + RUN_S
    lock = threading.Lock()

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        checking, savings = open_pair(uris, options)
        try:
            while time.monotonic() < stop:
                try:
                    t = transfer(checking, savings, rng)
                except CommitConflict:
                    continue  # nothing of it applied (checked below by the totals)
                with lock:
                    done.append(t)
        except BaseException as e:  # a failed thread fails the test
            errors.append(e)

    plain: list[Any] = []  # manifests plain one-table reads were served from

    def reader() -> None:
        checking, savings = open_pair(uris, options)
        try:
            while time.monotonic() < stop:
                snap = caslake.snapshot(checking, savings)
                sums.append(sum(balances(snap.to_arrow(checking)).values())
                            + sum(balances(snap.to_arrow(savings)).values()))
                for t in (checking, savings) if len(sums) % 2 else (savings, checking):
                    t.to_arrow()  # a plain one-table read, in either order
                    plain.append(t.snapshot.manifest)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(WRITERS)]
    threads.append(threading.Thread(target=reader))
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    assert done, "no transfer committed"
    assert sums and set(sums) == {total}, sorted(set(sums))

    checking, savings = open_pair(uris, options)
    want_c = dict.fromkeys(range(ACCOUNTS), OPENING)
    want_s = dict.fromkeys(range(ACCOUNTS), OPENING)
    for t in done:
        want_c[t.account] -= t.amount
        want_s[t.account] += t.amount
    assert balances(checking.to_arrow()) == want_c
    assert balances(savings.to_arrow()) == want_s
    # Each acknowledged transfer: its staged versions name it, its record is committed.
    by_version = {t.uri.rstrip("/"): {s.version: s.manifest for s in t.io.history(t.io.latest())}
                  for t in (checking, savings)}
    for t in done:
        assert t.versions is not None and t.txn_id is not None
        for uri, v in t.versions.items():
            ref = by_version[uri][v].transaction
            assert ref is not None and ref.id == t.txn_id
        assert read_record(checking.store, t.txn_id)[0].state == "committed"
    # No plain read was served from a staged version that did not commit.
    for m in plain:
        if m.transaction is not None:
            assert read_record(checking.store, m.transaction.id)[0].state == "committed"
    assert plain
    # Every other transaction this run left behind was aborted, never committed.
    ids = {t.txn_id for t in done}
    for m in by_version[checking.uri.rstrip("/")].values():
        if m.transaction is not None and m.transaction.id not in ids:
            try:
                state = read_record(checking.store, m.transaction.id)[0].state
            except NotFound:
                state = "absent"
            assert state == "aborted", (m.version, state)


def test_bank_across_two_tables_local(tmp_path: Any) -> None:
    run_bank((str(tmp_path / "bank/checking"), str(tmp_path / "bank/savings")), None)


@pytest.mark.s3
def test_bank_across_two_tables_s3(moto_server: str, s3_options: dict[str, str]) -> None:
    from tests.conftest import make_bucket

    bucket = make_bucket(moto_server)
    run_bank((f"s3://{bucket}/bank/checking", f"s3://{bucket}/bank/savings"), s3_options)


def test_bank_across_processes_with_a_sigkill(tmp_path: Any) -> None:
    """Three processes transfer while the test takes atomic snapshots and SIGKILLs
    one of them: every snapshot sums to the total; the final balances are the
    acknowledged transfers plus, at most, the killed process's one transfer in
    flight (all or nothing); a later transfer rolls whatever it left forward or back."""
    import os
    import signal
    import subprocess
    import sys

    uris = (str(tmp_path / "checking"), str(tmp_path / "savings"))
    opening = pa.table({"account": list(range(ACCOUNTS)), "balance": [OPENING] * ACCOUNTS},
                       schema=SCHEMA)
    for u in uris:
        caslake.create_table(u, SCHEMA).append(opening)
    logs = [tmp_path / f"w{i}.log" for i in range(3)]
    procs = [subprocess.Popen([sys.executable, "-m", "tests.multitable.bank_worker", *uris,
                               str(i), "3", str(log)], cwd=os.getcwd())
             for i, log in enumerate(logs)]
    checking, savings = open_pair(uris, None)
    sums: list[int] = []
    killed: subprocess.Popen[bytes] | None = None
    deadline = time.monotonic() + 30
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        snap = caslake.snapshot(checking, savings)
        sums.append(sum(balances(snap.to_arrow(checking)).values())
                    + sum(balances(snap.to_arrow(savings)).values()))
        for p, log in zip(procs, logs, strict=True):
            if killed is None and log.exists() and "ok " in log.read_text():
                p.send_signal(signal.SIGKILL)  # mid-run, after its first acknowledgement
                killed = p
    for p in procs:
        p.wait(timeout=30)
    assert killed is not None and killed.returncode == -signal.SIGKILL
    assert all(p.returncode == 0 for p in procs if p is not killed)
    assert sums and set(sums) == {2 * OPENING * ACCOUNTS}, sorted(set(sums))

    acked: list[Transfer] = []
    open_: list[Transfer] = []
    for log in logs:
        begun: dict[str, Transfer] = {}
        for line in (log.read_text() if log.exists() else "").splitlines():
            word, tid, *rest = line.split()
            if word == "begin":
                begun[tid] = Transfer(int(rest[0]), int(rest[1]))
            elif word == "ok":
                acked.append(begun.pop(tid))
            else:
                begun.pop(tid)
        open_ += begun.values()
    assert len(open_) <= 1 and acked
    # A later transfer meets whatever the killed one left (after its deadline).
    rng = random.Random(99)
    later = transfer(checking, savings, rng, Transfer(0, 1), ttl_ms=5_000)
    got = (balances(checking.to_arrow()), balances(savings.to_arrow()))
    outcomes = []
    for applied in ([], open_):
        want_c = dict.fromkeys(range(ACCOUNTS), OPENING)
        want_s = dict.fromkeys(range(ACCOUNTS), OPENING)
        for t in [*acked, *applied, later]:
            want_c[t.account] -= t.amount
            want_s[t.account] += t.amount
        outcomes.append((want_c, want_s))
    assert got in outcomes, (got, outcomes)
