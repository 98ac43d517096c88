"""The synthetic scan benchmark (``benchmarks/scans.py``) runs end to end at a tiny size.

Checks the code path and its answer checking, never timings: the suite compares
every scan (warm and cold) with DuckDB on the same data after the same deletes,
and a system that returns one row too few must make it fail.
"""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow as pa
import pytest

from benchmarks import scans
from benchmarks.peers import SYSTEMS, IdRange, PyarrowSystem

ROWS = 20_000


def test_synthetic_data_has_the_documented_shape() -> None:
    data = scans.make_data(3000)
    assert data.schema == scans.SCHEMA
    assert data["id"].to_pylist() == list(range(3000))
    lengths = pa.compute.utf8_length(data["payload"]).to_pylist()
    assert set(lengths) == {scans.PAYLOAD_BYTES}
    assert len(pa.compute.unique(data["user"])) <= scans.USERS
    cents = pa.compute.multiply(data["amount"], 100).to_pylist()
    assert all(abs(c - round(c)) < 1e-6 for c in cents)


def test_scan_benchmark_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = scans.main(rows=ROWS, systems=["caslake", "pyarrow"], warm=1, cores=[1, 2],
                    root=tmp_path)
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "every answer (warm and cold) equals DuckDB's" in out
    for row in ("append", "1% range delete", "(warm)", "(cold)", "caslake / best peer",
                "pq.read_table of caslake's files", "speedup 2/1"):
        assert row in out, row
    table = [ln for ln in out.splitlines() if ln.startswith("| full scan of 2 columns")]
    assert len(table) == 4  # warm, warm CPU, cold, and caslake's cold / warm
    for line in table[:3]:
        cells = [c.strip() for c in line.split("|")[2:4]]
        assert all(math.isfinite(float(c)) and float(c) > 0 for c in cells), line


class _DropsARow(PyarrowSystem):
    """Raw Parquet that loses the last row of every read: a wrong answer."""

    name = "drops-a-row"

    def read(self, columns: list[str] | None = None, ids: IdRange | None = None) -> pa.Table:
        t = super().read(columns, ids)
        return t.slice(0, t.num_rows - 1)


def test_a_wrong_answer_fails_the_suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(SYSTEMS, _DropsARow.name, _DropsARow)
    rc = scans.main(rows=ROWS, systems=["caslake", _DropsARow.name], warm=1, cold=False,
                    cores=[1], root=tmp_path)
    out = capsys.readouterr().out
    assert rc == 1
    assert "WRONG ANSWERS" in out and "drops-a-row full scan (warm)" in out
    assert "caslake full scan" not in out.split("WRONG ANSWERS")[1]
