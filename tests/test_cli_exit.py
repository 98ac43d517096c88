"""The CLI never aborts at exit (issue 27, item 7): ``verify --deep --all-versions
--json`` on an S3 table of many versions once ended with rc -6 ("terminate called
without an active exception") when a native thread was still running as the
interpreter shut down.  Run it repeatedly, in subprocesses, and require rc 0."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import caslake
from caslake.cli import main


def _opts(options: dict[str, str]) -> list[str]:
    return [arg for k, v in options.items() for arg in ("-o", f"{k}={v}")]


@pytest.mark.s3
def test_verify_deep_all_versions_exits_cleanly_every_time(
        s3_uri: str, s3_options: dict[str, str]) -> None:
    t = caslake.create_table(s3_uri, pa.schema([("a", pa.int64()), ("s", pa.string())]),
                             storage_options=s3_options)
    for i in range(40):
        t.append(pa.table({"a": [i, i + 1], "s": [f"v{i}", None]}))
    argv = [sys.executable, "-m", "caslake.cli", "verify", s3_uri, "--deep",
            "--all-versions", "--json", *_opts(s3_options)]
    for _ in range(12):
        res = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, (res.returncode, res.stderr[-2000:])
        assert json.loads(res.stdout)["ok"] is True
        assert "terminate called" not in res.stderr


def test_no_caslake_or_tqdm_thread_outlives_a_command(tmp_path: Path) -> None:
    """main() joins the pools it used and verify starts no tqdm monitor thread."""
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, pa.schema([("a", pa.int64())]))
    for i in range(5):
        t.append(pa.table({"a": [i]}))
    for argv in (["verify", uri, "--deep", "--all-versions", "--json"],
                 ["scan", uri, "--json"], ["append", uri, str(_parquet(tmp_path))]):
        assert main(argv, out=io.StringIO()) == 0
        alive = [th.name for th in threading.enumerate()
                 if th.name.startswith(("caslake-", "tqdm_monitor"))]
        assert alive == [], (argv, alive)


def _parquet(tmp_path: Path) -> Path:
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"a": [100, 101]}), path)
    return path
