"""The acceptance bank as a harness (caslake.testing.multibank), in a short slice:
8 transfer processes and a reader for a few seconds on moto S3, every worker
through the wire-fault proxy (standard mix), with SIGKILLs of random processes
(restarted).  The run's checks must pass; then each check is shown to report a
damaged log, a damaged decision record, a damaged read or a missing object.

The full run (8 x 60 s, local and moto) is in ``make stress``.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from caslake.format.manifest import COMMITTED, TxnRecord, parse_txn_record, txn_record_key
from caslake.testing.multibank import (
    NAMES,
    BankResult,
    Version,
    _Check,
    _check_history,
    _check_log,
    _Records,
    check_run,
    run_multibank,
)
from caslake.testing.stress import Record, load_records
from caslake.testing.wire_faults import run_fault_proxy, standard_mix

ACCOUNTS = 16
OPENING = 1_000


@pytest.fixture(scope="module")
def bank_run(moto_server: str, s3_options: dict[str, str], tmp_path_factory: Any
             ) -> tuple[dict[str, str], dict[str, str], BankResult, list[Record]]:
    from caslake.testing.moto_server import storage_options
    from tests.conftest import make_bucket

    bucket = make_bucket(moto_server)
    uris = {n: f"s3://{bucket}/bank/{n}" for n in NAMES}
    work = Path(tmp_path_factory.mktemp("multibank"))
    with run_fault_proxy(moto_server, standard_mix(), seed=35) as px:
        result = run_multibank(uris, s3_options, procs=8, seconds=9, kills=3, workdir=work,
                               worker_opts=storage_options(px.endpoint), proxy=px,
                               accounts=ACCOUNTS, opening=OPENING, seed=35, backend="s3")
    records, problems = load_records(work)
    assert not problems
    return uris, s3_options, result, records


def _check(run: Any, records: list[Record], *, verify: bool = False) -> list[str]:
    uris, opts, _, _ = run
    res = BankResult("s3", 8, 0, True)
    return check_run(uris, opts, records, accounts=ACCOUNTS, opening=OPENING, result=res,
                     verify=verify).failures


def _acked(records: list[Record]) -> list[str]:
    return [r["tid"] for r in records if r.get("op") == "end" and r["outcome"] == "ok"
            and not r["tid"].startswith("final:")]


pytestmark = [pytest.mark.slow, pytest.mark.s3]


def test_the_bank_across_tables_holds_under_kills_and_wire_faults(bank_run: Any) -> None:
    _, _, result, _ = bank_run
    print(result.summary())
    assert result.ok, result.failures
    assert result.kills >= 2
    assert result.acknowledged > 0 and result.snapshot_reads > 0 and result.plain_reads > 0
    for kind in ("slowdown", "reset", "lost_reply", "delay"):
        assert result.fired.get(kind, 0) > 0, result.fired


def test_a_damaged_log_is_reported(bank_run: Any) -> None:
    records = copy.deepcopy(bank_run[3])
    tid = _acked(records)[0]
    begin = next(r for r in records if r.get("op") == "begin" and r["tid"] == tid)
    begin["amount"] += 1  # the tables hold another amount than the log says
    assert any(f.startswith("final:") for f in _check(bank_run, records))

    records = copy.deepcopy(bank_run[3])
    end = next(r for r in records if r.get("op") == "end" and r["tid"] == tid)
    end["outcome"] = "fail"  # told failed, yet applied
    failures = _check(bank_run, records)
    assert any(f"failed transfer {tid} is applied" in f for f in failures), failures

    records = copy.deepcopy(bank_run[3])
    end = next(r for r in records if r.get("op") == "end" and r["tid"] == tid)
    end["outcome"], end["txn_id"] = "unknown", "0" * 32  # its record reads absent
    failures = _check(bank_run, records)
    assert any(f"unknown transfer {tid}" in f for f in failures), failures


def test_damaged_reads_are_reported(bank_run: Any) -> None:
    records = copy.deepcopy(bank_run[3])
    snap = next(r for r in records if r.get("op") == "snapshot")
    snap["balances"][0][0] -= 5  # a debit without its credit
    failures = _check(bank_run, records)
    assert any("summing to" in f for f in failures), failures

    records = copy.deepcopy(bank_run[3])
    snap = next(r for r in records if r.get("op") == "snapshot")
    snap["balances"][0][0] -= 5
    snap["balances"][0][1] += 5  # sums right, but not what the versions hold
    failures = _check(bank_run, records)
    assert any(f.startswith("snapshot:") and "summing" not in f for f in failures), failures

    records = copy.deepcopy(bank_run[3])
    plain = next(r for r in records if r.get("op") == "plain")
    plain["balances"][3] += 7  # as if it showed a transfer that did not commit there
    failures = _check(bank_run, records)
    assert any(f.startswith("plain:") for f in failures), failures


def test_a_damaged_decision_record_is_reported(bank_run: Any) -> None:
    import caslake

    uris, opts, _, records = bank_run
    tid = _acked(records)[0]
    end = next(r for r in records if r.get("op") == "end" and r["tid"] == tid)
    coordinator = caslake.open_table(uris["checking"], storage_options=opts).store
    key = txn_record_key(end["txn_id"])
    original = coordinator.get(key).data
    assert parse_txn_record(original, key).state == COMMITTED
    coordinator.put(key, original.replace(b'"committed"', b'"aborted"'))
    try:
        failures = _check(bank_run, records)
    finally:
        coordinator.put(key, original)
    assert any(f"acknowledged transfer {tid} is not applied" in f for f in failures), failures
    assert not _check(bank_run, records)


def test_a_committed_record_no_version_holds_is_read_back(bank_run: Any) -> None:
    """A transfer told unknown or failed whose decision record (read back from the
    store, though no version names it) says committed is reported: committed
    means applied, and the tables do not hold it."""
    import caslake

    uris, opts, _, records = bank_run
    end = next(r for r in records if r.get("op") == "end" and r["tid"] == _acked(records)[0])
    coordinator = caslake.open_table(uris["checking"], storage_options=opts).store
    planted = "ab" * 16
    coordinator.put(txn_record_key(planted), coordinator.get(txn_record_key(end["txn_id"]))
                    .data.replace(end["txn_id"].encode(), planted.encode()))
    try:
        for outcome in ("unknown", "fail"):
            logged = [*copy.deepcopy(records),
                      {"op": "begin", "proc": "x", "tid": "zz:1", "app": "zz", "n": 1,
                       "from": 0, "to": 0, "amount": 5, "ts": 0.0},
                      {"op": "end", "proc": "x", "tid": "zz:1", "outcome": outcome,
                       "txn_id": planted, "versions": None, "error": "x", "ts": 1.0}]
            failures = _check(bank_run, logged)
            assert any("zz:1: its record reads committed" in f for f in failures), failures
    finally:
        coordinator.delete(txn_record_key(planted))


def test_verify_runs_and_reports_a_missing_object(bank_run: Any) -> None:
    import caslake

    uris, opts, _, records = bank_run
    table = caslake.open_table(uris["savings"], storage_options=opts)
    key = table.snapshot.manifest.files[0].path
    data = table.store.get(key).data
    table.store.delete(key)
    try:
        failures = _check(bank_run, records, verify=True)
    finally:
        table.store.put(key, data)
    assert any(f.startswith("verify:") for f in failures), failures


def test_history_reports_twice_applied_one_sided_and_undecided_transfers() -> None:
    """The history check on hand-made chains (no store): the same transfer committed
    twice in one table, in one table only, and a version whose record is pending."""
    begins = {t: {"op": "begin", "tid": t, "from": 0, "to": 0, "amount": 1}
              for t in ("a:1", "a:2", "a:3")}

    def v(n: int, tid: str, state: str = "committed") -> Version:
        return Version(n, f"{n:032x}", "s3://b/checking", {}, state=state, tid=tid)

    chains = {"checking": [Version(0, None, None, {}), v(1, "a:1"), v(2, "a:1"), v(3, "a:2"),
                           v(4, "a:3", "pending")],
              "savings": [Version(0, None, None, {}), v(1, "a:1")]}
    ck = _Check([])
    applied = _check_history(ck, chains, begins, {}, setup=1)
    joined = "\n".join(ck.failures)
    assert "transfer a:1 applied twice to checking" in joined
    assert "transfer a:2 applied to one table only" in joined
    assert "record is pending after the run" in joined

    # Unknown outcomes are settled by their records: a kill in flight (begun, never
    # ended) that the tables hold committed is fine; an unknown one whose record
    # reads committed while no version holds it is reported.
    begins["a:4"] = {**begins["a:1"], "tid": "a:4"}
    ends: dict[str, Record] = {"a:4": {"op": "end", "tid": "a:4", "outcome": "unknown",
                                       "txn_id": "f" * 32, "versions": None, "error": "x"}}
    decided = {f"{n:032x}": TxnRecord(f"{n:032x}", COMMITTED, 0, 1, ()) for n in (1, 2, 3)}
    decided["f" * 32] = TxnRecord("f" * 32, COMMITTED, 0, 1, ())
    ck = _Check([])
    _check_log(ck, begins, ends, applied, _Records(decided), BankResult("x", 1, 0, False))
    assert not [f for f in ck.failures if "a:1" in f], ck.failures
    assert any("unknown transfer a:4: its record reads committed, yet it is not applied" in f
               for f in ck.failures), ck.failures
