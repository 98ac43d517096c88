"""A short slice of the stress harness (``caslake/testing/stress.py``) for ``make test``.

* history workload, 4 writer processes + 1 reader process for a few seconds, on a
  local table and on moto S3: the full history check must pass (linear chain,
  every acknowledged commit at its version, exact version count, real-time order,
  reads and final rows equal the replay);
* the checker itself is shown to fail: the local run's records are damaged in
  several ways (wrong version, lost acknowledgement, wrong checksum, wrong delete
  count, reads going back in time, wrong appended rows) and each must be reported;
* bank workload on a local table (transfers as ONE ``upsert(...,
  read_version=v)`` of both accounts, 4 writers, 4 accounts): the sum must be
  conserved.  (This test found the lost-update gap that read validation now
  closes: without ``read_version`` an upsert re-plans its delete on the latest
  version and appends balances computed from an older read.)
* the fenced bank (``overwrite(all accounts, txn=("bank", read_version + 1))``)
  conserves the sum, which shows the conservation check passes correct runs.

Figures (commits/s, p50/p99 latency, retries) are printed at the end of the module.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from caslake.testing import stress

HISTORY_SECONDS = 6.0
BANK_SECONDS = 5.0
WRITERS = 4

pytestmark = pytest.mark.slow

_RESULTS: list[stress.RunResult] = []


@pytest.fixture(scope="module", autouse=True)
def print_figures(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if not _RESULTS:
        return
    capman = request.config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled():
        print("\n\nstress slice (tests/reliability/test_stress.py):")
        print(stress.format_table(_RESULTS))


def _history(uri: str, opts: dict[str, str] | None, tmp: Path, backend: str
             ) -> stress.RunResult:
    result = stress.run_history(uri, opts, writers=WRITERS, readers=1,
                                seconds=HISTORY_SECONDS, workdir=tmp / "work", backend=backend,
                                verify_versions=8)
    _RESULTS.append(result)
    return result


def _assert_clean(result: stress.RunResult) -> None:
    assert not result.failures, "\n".join(result.failures)
    assert result.commits > WRITERS, "the writers barely committed anything"
    assert result.reads > 0 and result.facts["reads"] > 0
    assert result.facts["versions"] == result.commits + result.facts["unknown_landed"]
    assert result.facts["versions_verified"] >= 1


@pytest.fixture(scope="module")
def local_history(tmp_path_factory: pytest.TempPathFactory
                  ) -> tuple[stress.RunResult, str, list[stress.Record]]:
    tmp = tmp_path_factory.mktemp("stress-local")
    uri = str(tmp / "table")
    result = _history(uri, None, tmp, "local")
    records, problems = stress.load_records(tmp / "work")
    assert not problems
    return result, uri, records


def test_history_local(local_history: tuple[stress.RunResult, str, list[stress.Record]]
                       ) -> None:
    _assert_clean(local_history[0])


@pytest.mark.s3
def test_history_s3(s3_uri: str, s3_options: dict[str, str], tmp_path: Path) -> None:
    _assert_clean(_history(s3_uri, s3_options, tmp_path, "s3"))


# --- the checker must be able to fail -------------------------------------------------------


def _first(records: list[stress.Record], op: str, **extra: Any) -> stress.Record:
    for r in records:
        if r.get("op") == op and r.get("outcome") == "ok" and all(
                r.get(k) == v for k, v in extra.items()):
            return r
    pytest.skip(f"the run produced no acknowledged {op} {extra}")


def _damage_version(records: list[stress.Record]) -> None:
    a, b = [r for r in records if stress._is_commit(r)][:2]
    a["version"] = b["version"]


def _lose_ack(records: list[stress.Record]) -> None:
    records.remove(_first(records, "append", noop=False))


def _wrong_checksum(records: list[stress.Record]) -> None:
    _first(records, "read")["details"]["checksum"] ^= 1


def _wrong_rows_deleted(records: list[stress.Record]) -> None:
    _first(records, "delete", noop=False)["details"]["rows_deleted"] += 1


def _read_goes_back(records: list[stress.Record]) -> None:
    reads = [r for r in records if r.get("op") == "read" and r.get("outcome") == "ok"
             and r["version"] > 0]
    if not reads:
        pytest.skip("no read saw a version above 0")
    reads[-1]["version"] = 0
    reads[-1]["details"].update(rows=0, checksum=0)


def _wrong_append(records: list[stress.Record]) -> None:
    """Change the row of an append that no later delete or upsert touches (so the row
    must still be in the final table)."""
    touched = {i for r in records if r.get("op") == "delete" for i in r["details"]["ids"]}
    touched |= {row[0] for r in records if r.get("op") == "upsert"
                for row in r["details"]["rows"]}
    for r in records:
        if (stress._is_commit(r) and r["op"] == "append"
                and r["details"]["rows"][0][0] not in touched):
            r["details"]["rows"][0][2] += 1
            return
    pytest.skip("every appended row was touched again")


def _fake_commit_id(records: list[stress.Record]) -> None:
    _first(records, "upsert", noop=False)["commit_id"] = "0" * 32


@pytest.mark.parametrize(("damage", "category"), [
    (_damage_version, "acked"),
    (_lose_ack, "count"),
    (_wrong_checksum, "reads"),
    (_wrong_rows_deleted, "replay"),
    (_read_goes_back, "real-time"),
    (_wrong_append, "final"),
    (_fake_commit_id, "acked"),
])
def test_checker_reports_damaged_histories(
        local_history: tuple[stress.RunResult, str, list[stress.Record]],
        damage: Any, category: str) -> None:
    _, uri, records = local_history
    damaged = copy.deepcopy(records)
    damage(damaged)
    report = stress.check_history_run(uri, None, damaged, verify_versions=1)
    assert any(f.startswith(f"{category}:") for f in report.failures), report.failures


# --- conservation -----------------------------------------------------------------------------


def _bank(uri: str, opts: dict[str, str] | None, tmp: Path, backend: str, mode: str,
          seconds: float) -> stress.RunResult:
    result = stress.run_bank(uri, opts, writers=WRITERS, seconds=seconds, workdir=tmp / "bank",
                             accounts=4, mode=mode, backend=backend, verify_versions=6)
    _RESULTS.append(result)
    others = [f for f in result.failures if not f.startswith("conservation:")]
    assert not others, "\n".join(others)
    assert result.commits >= 2, "the transfers barely ran"
    return result


def test_bank_upsert_transfers_conserve_the_sum(tmp_path: Path) -> None:
    """Read-validated upserts: concurrent transfers conflict instead of losing updates."""
    result = _bank(str(tmp_path / "bank"), None, tmp_path, "local", "upsert", BANK_SECONDS)
    assert not result.failures, "\n".join(result.failures)
    assert result.facts["lost_updates"] == 0
    assert result.facts["final_sum"] == result.facts["expected_sum"]


def test_bank_fenced_transfers_conserve_the_sum(tmp_path: Path) -> None:
    result = _bank(str(tmp_path / "bank"), None, tmp_path, "local", "fenced", 3.0)
    assert not result.failures, "\n".join(result.failures)
    assert result.facts["lost_updates"] == 0
    assert result.facts["final_sum"] == result.facts["expected_sum"]
