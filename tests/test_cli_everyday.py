"""The command line a first-day user expects (issue 10, items 8-10): missing
commands, help on every option, CLI flags in error text, streaming scans, one
history, and a one-line error for S3 without credentials."""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import caslake
from caslake.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def cli(*argv: str, env: dict[str, str] | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "caslake.cli", *argv], capture_output=True,
                          text=True, timeout=timeout, env=env)


def _table(tmp_path: Path, rows: int = 100) -> str:
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, pa.schema([("a", pa.int64()), ("b", pa.string()),
                                             ("v", pa.float64())]))
    t.append(pa.table({"a": list(range(rows)), "b": [f"k{i % 3}" for i in range(rows)],
                       "v": [float(i) for i in range(rows)]}))
    return uri


# --- 9. missing commands --------------------------------------------------------------------


def test_upsert_command_with_compound_key(tmp_path: Path) -> None:
    uri = _table(tmp_path, 6)
    src = tmp_path / "cdc.parquet"
    pq.write_table(pa.table({"a": [0, 1, 50], "b": ["k0", "nomatch", "k2"],
                             "v": [-1.0, -2.0, -3.0]}), src)
    code, out = run("upsert", uri, str(src), "--key", "a,b")
    assert code == 0 and "upserted 3 rows" in out and "replaced 1" in out, out
    got = caslake.open_table(uri).to_arrow()
    own = duckdb.connect()  # a connection of its own: the view "got" dies with it
    rel = own.from_arrow(got)
    assert rel.query("got", "select count(*), sum(v) from got").fetchone() == (8, 9.0)


def test_upsert_command_duplicate_keys_names_the_flag(tmp_path: Path) -> None:
    uri = _table(tmp_path, 6)
    src = tmp_path / "cdc.parquet"
    pq.write_table(pa.table({"a": [0, 0], "b": ["k0", "k0"], "v": [1.0, 2.0]}), src)
    proc = cli("upsert", uri, str(src), "--key", "a,b")
    assert proc.returncode == 1 and "a=0" in proc.stderr and "--on-duplicate" in proc.stderr
    assert "on_duplicate=" not in proc.stderr
    code, _ = run("upsert", uri, str(src), "--key", "a,b", "--on-duplicate", "last")
    assert code == 0 and caslake.open_table(uri).scan(where="a = 0").to_arrow()["v"][0].as_py() == 2


def test_overwrite_command(tmp_path: Path) -> None:
    uri = _table(tmp_path)
    src = tmp_path / "new.csv"
    src.write_text("a,b,v\n7,x,1.5\n")
    code, out = run("overwrite", uri, str(src))
    assert code == 0 and "overwrote" in out and "version 2" in out
    assert caslake.open_table(uri).to_arrow().to_pylist() == [{"a": 7, "b": "x", "v": 1.5}]


@pytest.mark.parametrize("suffix", ["parquet", "csv"])
def test_scan_output_file(tmp_path: Path, suffix: str) -> None:
    uri = _table(tmp_path, 1000)
    dest = tmp_path / f"out.{suffix}"
    code, out = run("scan", uri, "--where", "b = 'k1'", "--columns", "a,v",
                    "--output", str(dest))
    assert code == 0 and "333 rows" in out and str(dest) in out
    reader = "read_parquet" if suffix == "parquet" else "read_csv"
    assert duckdb.sql(f"select count(*), sum(a) from {reader}('{dest}')").fetchone() == (
        333, sum(i for i in range(1000) if i % 3 == 1))


def test_scan_output_streams_in_bounded_batches(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """--output and --json never build the whole result: they must not call to_arrow
    or read_all, and the JSON lines are written as batches arrive."""
    uri = _table(tmp_path, 50)
    from caslake.core.read.scan import Scan

    def boom(self: Scan) -> pa.Table:
        raise AssertionError("materialised the whole scan")

    monkeypatch.setattr(Scan, "to_arrow", boom)
    code, out = run("scan", uri, "--json")
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert len(rows) == 50 and rows[0] == {"a": 0, "b": "k0", "v": 0.0}
    assert run("scan", uri, "--output", str(tmp_path / "o.parquet"))[0] == 0


def test_scan_json_into_head_stops_early(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, pa.schema([("a", pa.int64())]))
    for _ in range(4):
        t.append(pa.table({"a": pa.array(range(1_000_000), pa.int64())}))
    start = time.monotonic()
    assert cli("scan", uri, "--json", "--limit", "3").returncode == 0
    baseline = time.monotonic() - start  # start-up and the first rows (a loaded machine)
    start = time.monotonic()
    proc = subprocess.run(f"{sys.executable} -m caslake.cli scan {uri} --json | head -3",
                          shell=True, capture_output=True, text=True, timeout=300)
    took = time.monotonic() - start
    assert proc.stdout.splitlines() == ['{"a": 0}', '{"a": 1}', '{"a": 2}'], proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr
    # materialising 4M rows as Python objects takes far longer than the first rows
    assert took < 2 * baseline + 3, (took, baseline)


def test_compact_dry_run_with_target_file_size(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, pa.schema([("a", pa.int64())]))
    for i in range(4):
        t.append(pa.table({"a": [i]}))
    code, out = run("compact", uri, "--dry-run", "--target-file-size", "1MB")
    assert code == 0 and "would rewrite 4 file(s)" in out, out
    assert caslake.open_table(uri).version == 4
    code, out = run("compact", uri, "--target-file-size", "1048576")
    assert code == 0 and "compacted 4 file(s) into 1" in out
    with pytest.raises(SystemExit) as ei:
        run("compact", uri, "--target-file-size", "lots")
    assert ei.value.code == 2


def test_version_flag() -> None:
    proc = cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"caslake {caslake.__version__}"


def test_properties_command_and_api(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    caslake.create_table(uri, pa.schema([("a", pa.int64())]), properties={"owner": "me"})
    t = caslake.open_table(uri)
    assert t.properties == {"owner": "me"}
    code, out = run("properties", uri)
    assert code == 0 and "owner" in out and "me" in out
    code, out = run("properties", uri, "--set", "retention=30d", "--set", "owner=you")
    assert code == 0 and "version 1" in out
    assert caslake.open_table(uri).properties == {"owner": "you", "retention": "30d"}
    res = t.set_properties({"x": "1"})
    assert res.version == 2 and res.operation == "set_properties"
    assert t.properties == {"owner": "you", "retention": "30d", "x": "1"}
    code, out = run("properties", uri, "--json")
    assert json.loads(out) == {"owner": "you", "retention": "30d", "x": "1"}
    assert run("properties", uri, "--set", "novalue")[0] == 1
    assert caslake.open_table(uri).history()[0].operation == "set_properties"


def _options(parser: argparse.ArgumentParser, path: str) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += _options(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction):
            out.append((f"{path} {'/'.join(action.option_strings) or action.dest}",
                        action.help))
    return out


def test_every_option_has_help() -> None:
    options = _options(build_parser(), "caslake")
    missing = [name for name, help in options if not help]
    assert not missing, missing
    assert len(options) > 50


def test_error_text_names_cli_flags(tmp_path: Path) -> None:
    uri = _table(tmp_path)
    proc = cli("gc", uri, "--retain-hours", "1")
    assert proc.returncode == 1 and "--force" in proc.stderr and "force=True" not in proc.stderr
    proc = cli("compact", uri, "--deleted-fraction", "2")
    assert proc.returncode == 1 and "--deleted-fraction" in proc.stderr
    assert "max_replans" not in proc.stderr and "deleted_fraction" not in proc.stderr


# --- 10. one history ---------------------------------------------------------------------


def test_history_json_agrees_with_python_and_commit_results(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, pa.schema([("a", pa.int64())]))
    results = [t.append(pa.table({"a": list(range(i * 10, i * 10 + 10))})) for i in range(3)]
    results.append(t.delete("a < 15"))
    results.append(t.compact(deleted_fraction=0.1))
    results.append(t.upsert(pa.table({"a": [20, 99]}), key="a"))
    history = t.history()
    code, out = run("history", uri, "--json")
    assert code == 0
    assert json.loads(out) == [h.to_json() for h in history]
    by_version = {h.version: h for h in history}
    for r in results:
        h = by_version[r.version]
        assert h.operation == r.operation and h.commit_id == r.commit_id
        assert (r.rows_added, r.rows_deleted, r.files_added, r.files_removed,
                r.tombstones_added) == (h.rows_added, h.rows_deleted, h.files_added,
                                        h.files_removed, h.tombstones_added), (r, h)
    compaction = by_version[results[4].version]
    assert compaction.operation == "compact" and compaction.rows_deleted == results[4].rows_deleted
    # JSON timestamps are ISO with a T, exactly as the table output prints them
    text = run("history", uri)[1]
    for entry in json.loads(out):
        assert "T" in entry["created_at"] and entry["created_at"] in text
    create = history[-1]
    assert create.operation == "create" and create.summary["added_rows"] == 0
    assert set(create.summary) == set(history[0].summary)


def test_counts_say_their_scope(tmp_path: Path) -> None:
    uri = _table(tmp_path)
    t = caslake.open_table(uri)
    for w in ("a < 5", "a > 90", "a = 50"):
        t.delete(w)
    show = run("show", uri)[1]
    assert "tombstones 1 (current version)" in show, show
    verify = run("verify", uri, "--all-versions")[1]
    assert "3 tombstones" in verify and "across all 5 versions" in verify, verify
    verify = run("verify", uri)[1]
    assert "1 tombstones" in verify and "in the current version" in verify, verify
    info = json.loads(run("verify", uri, "--all-versions", "--json")[1])
    assert info["scope"] == "all versions"


# --- 8. S3 without credentials ------------------------------------------------------------


def test_s3_without_credentials_is_one_line(moto_server: str, tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": str(ROOT),
           "AWS_CONFIG_FILE": str(tmp_path / "none"),
           "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none")}
    proc = cli("show", "s3://some-bucket/t", "-o", f"endpoint_url={moto_server}", env=env)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert "no AWS credentials were found" in lines[0]
    assert "AWS_ACCESS_KEY_ID" in lines[0] and "access_key_id=" in lines[0]
    assert "169.254" not in lines[0] and "Debug" not in proc.stderr


def test_readme_quickstart_with_s3_runs_as_written(moto_server: str, tmp_path: Path) -> None:
    """The README's Quickstart block, run as written against moto with only the
    environment variables it names (its paths and bucket pointed at this test's)."""
    from tests.conftest import make_bucket

    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Quickstart", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    bucket = make_bucket(moto_server)
    code = (block.replace("s3://bucket/", f"s3://{bucket}/")
            .replace("http://127.0.0.1:9000", moto_server)
            .replace("/tmp/events", str(tmp_path / "events")))
    assert "s3://" in code and "upsert" in code
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": str(ROOT),
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_REGION": "us-east-1"}
    proc = subprocess.run([sys.executable, "-c", code + "\nprint(s3.version, t.version)\n"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, (code, proc.stderr)
    # create, append, upsert, delete, then the restore the README ends with
    assert proc.stdout.split() == ["0", "4"]


def test_csv_output_round_trips_strings_with_commas(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, pa.schema([("s", pa.string())]))
    t.append(pa.table({"s": ["a,b", 'q"t']}))
    dest = tmp_path / "o.csv"
    assert run("scan", uri, "--output", str(dest))[0] == 0
    with open(dest, newline="") as f:
        assert [r["s"] for r in csv.DictReader(f)] == ["a,b", 'q"t']
