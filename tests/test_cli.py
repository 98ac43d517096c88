"""The caslake command line: real files, real tables, one-line errors."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

import caslake
from caslake.cli import main

DATA = pa.table({"id": pa.array(range(100), pa.int64()),
                 "user": pa.array([f"u{i % 5}" for i in range(100)])})


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


@pytest.fixture
def parquet_file(tmp_path: Path) -> Path:
    p = tmp_path / "in.parquet"
    pq.write_table(DATA, p)
    return p


def test_create_from_parquet_then_append_csv_scan_history_show(tmp_path: Path,
                                                                parquet_file: Path) -> None:
    uri = str(tmp_path / "t")
    code, out = run("create", uri, "--from", str(parquet_file))
    assert code == 0 and "version 0" in out and "appended 100 rows" in out
    csv = tmp_path / "more.csv"
    pcsv.write_csv(pa.table({"id": [1000, 1001], "user": ["z", "z"]}), csv)
    code, out = run("append", uri, str(csv))
    assert code == 0 and "version 2" in out and "PUT" in out
    code, out = run("scan", uri, "--where", "user = 'z'", "--json")
    assert code == 0 and [json.loads(line) for line in out.splitlines()] == [
        {"id": 1000, "user": "z"}, {"id": 1001, "user": "z"}]  # JSON lines, streamed
    code, out = run("scan", uri, "--columns", "id", "--version", "1", "--limit", "3")
    assert code == 0 and "(3 rows, limited)" in out and "user" not in out
    code, out = run("scan", uri, "--where", "id < 3", "--plan")
    assert code == 0 and json.loads(out)["files"]["total"] == 2
    code, out = run("history", uri, "--json")
    assert [h["version"] for h in json.loads(out)] == [2, 1, 0]
    code, out = run("show", uri)
    assert code == 0 and "rows       102" in out and "tombstones 0" in out
    assert caslake.open_table(uri).scan().count() == 102
    code, out = run("delete", uri, "--where", "user = 'u1' AND id < 50")
    assert code == 0 and "deleted 10 rows as version 3" in out and "PUT" in out
    code, out = run("delete", uri, "--where", "id = 123456")
    assert code == 0 and "deleted 0 rows; no new version" in out
    code, out = run("show", uri)
    assert "rows       92 (10 deleted rows still stored)" in out and "tombstones 1" in out
    assert "10.0%" in out  # share of deleted rows in the first file
    assert caslake.open_table(uri).scan().count() == 92


def test_create_with_explicit_schema(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    code, out = run("create", uri, "--schema",
                    "id:int64, ts:timestamp[us, tz=UTC], p:decimal128(10, 2)")
    # commas inside a type are not column separators
    assert code == 0 and "created" in out
    assert caslake.open_table(uri).schema == pa.schema([
        ("id", pa.int64()), ("ts", pa.timestamp("us", tz="UTC")), ("p", pa.decimal128(10, 2))])
    proc = subprocess.run([sys.executable, "-m", "caslake.cli", "create", str(tmp_path / "u"),
                           "--schema", "id:int65"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "unknown type 'int65' for column 'id'" in proc.stderr


def test_errors_are_one_line_without_traceback(tmp_path: Path, parquet_file: Path) -> None:
    uri = str(tmp_path / "t")
    cases = [
        (["scan", uri], "no table at"),
        (["create", uri, "--from", str(tmp_path / "missing.parquet")], "does not exist"),
    ]
    run("create", str(tmp_path / "u"), "--from", str(parquet_file))
    other = str(tmp_path / "u")
    cases += [
        (["create", other, "--from", str(parquet_file)], "already exists"),
        (["scan", other, "--where", "nope = 1"], "unknown column 'nope'"),
        (["scan", other, "--where", "id = = 1"], "malformed"),
        (["scan", other, "--version", "99"], "version 99"),
        (["append", other, str(tmp_path / "bad.csv")], "does not exist"),
    ]
    for argv, expected in cases:
        proc = subprocess.run([sys.executable, "-m", "caslake.cli", *argv], capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 1, (argv, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("caslake: error:"), proc.stderr
        assert expected in lines[0], (argv, lines[0])
        assert "Traceback" not in proc.stderr


def test_schema_mismatch_on_append_is_reported(tmp_path: Path, parquet_file: Path) -> None:
    uri = str(tmp_path / "t")
    run("create", uri, "--from", str(parquet_file))
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"id": ["x"], "user": ["y"]}), bad)
    proc = subprocess.run([sys.executable, "-m", "caslake.cli", "append", uri, str(bad)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "'id'" in proc.stderr and "int64" in proc.stderr
    assert caslake.open_table(uri).version == 1


def test_progress_is_shown_on_request(tmp_path: Path, parquet_file: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "caslake.cli", "create", str(tmp_path / "t"),
                           "--from", str(parquet_file), "--progress"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    assert "appending: 100 rows" in proc.stderr
