"""``caslake update URI --set col=EXPR ... --where PRED``: one UPDATE commit equal to
DuckDB's ``UPDATE`` on the same rows, its result printed as text or as JSON that
parses back to the commit (in-process ``main()`` and the installed entry point),
and bad input as a one-line typed error that commits nothing."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import caslake
from caslake.cli import main

DATA = pa.table({"id": pa.array(range(40), pa.int64()),
                 "status": pa.array(["open" if i % 3 else "new" for i in range(40)]),
                 "amount": pa.array([i * 2.5 for i in range(40)], pa.float64())})


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def test_update_in_process_equals_duckdb_and_prints_the_commit(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    caslake.create_table(uri, DATA.schema).append(DATA)
    code, out = run("update", uri, "--set", "status='closed'", "--set",
                    "amount = amount * 1.1", "--where", "id >= 30 OR status = 'new'")
    assert code == 0
    con = duckdb.connect()
    con.execute("create table d as select * from DATA")
    con.execute("update d set status = 'closed', amount = amount * 1.1 "
                "where id >= 30 OR status = 'new'")
    want = con.execute("select * from d order by id").fetch_arrow_table()
    got = caslake.open_table(uri).to_arrow().sort_by("id")
    assert got.equals(want)
    changed = con.execute("select count(*) from d where status = 'closed'").fetchone()[0]
    assert f"updated {changed} rows as version 2" in out
    # Matching nothing: no version.
    code, out = run("update", uri, "--set", "amount=0", "--where", "id < 0")
    assert code == 0 and "no new version" in out and caslake.open_table(uri).version == 2


def test_update_json_round_trips_and_the_entry_point_agrees(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    caslake.create_table(uri, DATA.schema).append(DATA)
    code, out = run("update", uri, "--set", "status=upper(status)", "--where", "id < 5",
                    "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["version"] == 2 and doc["operation"] == "update" and doc["rows_deleted"] == 5
    assert doc["rows_added"] == 5 and doc["noop"] is False
    assert caslake.open_table(uri).history(limit=1)[0].version == doc["version"]
    proc = subprocess.run([sys.executable, "-m", "caslake.cli", "update", uri, "--set",
                           "amount=-1", "--where", "status = 'OPEN'", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["version"] == 3 and doc["rows_deleted"] == 3  # ids 1, 2, 4
    con = duckdb.connect()
    con.register("got", caslake.open_table(uri).to_arrow())
    assert con.sql("select list(id order by id) from got where amount = -1"
                   ).fetchone()[0] == [1, 2, 4]


def test_bad_update_input_is_one_line_naming_the_column(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = str(tmp_path / "t")
    caslake.create_table(uri, DATA.schema).append(DATA)
    proc = subprocess.run([sys.executable, "-m", "caslake.cli", "update", uri, "--set",
                           "amount='lots'", "--where", "id = 1"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("caslake: error:") and "'amount'" in proc.stderr
    assert "Traceback" not in proc.stderr
    for argv, needle in [
        (["--set", "nosuch=1"], "nosuch"),
        (["--set", "amount"], "COLUMN=EXPRESSION"),
        (["--set", "amount=1", "--set", "amount=2"], "twice"),
        (["--set", "amount=1", "--where", "id ==="], "where"),
    ]:
        code, _ = run("update", uri, *argv)
        err = capsys.readouterr().err
        assert code == 1, (argv, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("caslake: error:"), err
        assert needle in lines[0], (argv, lines[0])
    assert caslake.open_table(uri).version == 1
