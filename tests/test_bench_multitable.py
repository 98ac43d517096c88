"""The multi-table cost rows (``benchmarks/multitable.py``) run end to end at a tiny
size, so their code cannot rot.  No timing goal is asserted (tiny sizes, a shared
machine); request counts are: a two-table transaction makes at most 2.2x the
requests of two single-table commits, and single-table appends and reads with no
transaction in flight make exactly the requests the code before multi-table
transactions made."""

from __future__ import annotations

import math
import shutil

import pytest

from benchmarks import multitable


def test_multitable_cost_rows_smoke(capsys: pytest.CaptureFixture[str]) -> None:
    rows = multitable.main(rows=500, runs=2, rounds=1)
    out = capsys.readouterr().out
    by_name = {r.name: r for r in rows}
    txn = [r for r in rows if r.name.startswith("two-table transaction")]
    assert len(txn) == 2, out
    for r in rows:
        assert math.isfinite(r.ours) and r.ours > 0 and math.isfinite(r.peer), r
    requests = next(r for r in txn if r.unit == "requests")
    assert requests.ok and requests.ours <= 2.2 * requests.peer, requests
    if shutil.which("git") is None:
        assert "skipped" in out
        return
    if "before multi-table transactions: skipped" in out:  # a clone without that history
        pytest.skip(out.split("before multi-table transactions: skipped", 1)[1].split("\n")[0])
    single = [r for n, r in by_name.items() if n.startswith("single-table")]
    assert len(single) == 4, out
    for r in single:
        if r.unit == "requests":
            assert r.ours == r.peer, f"{r.name}: {r.ours} requests, before: {r.peer}"
