"""``caslake dataset ls | show | read | rm | vacuum`` on a real local store and moto S3."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from caslake.cli import main
from caslake.dataset import ParquetDatasetStore
from tests.dataset.helpers import table

ROOT = Path(__file__).resolve().parents[2]


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


@pytest.mark.parametrize("kind", ["local", pytest.param("s3", marks=pytest.mark.s3)])
def test_dataset_commands(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    from tests.conftest import _store_uri

    uri, options = _store_uri(kind, request, tmp_path)
    opts = [a for k, v in options.items() for a in ("-o", f"{k}={v}")]
    pds = ParquetDatasetStore(uri, max_rows_per_file=40, storage_options=options or None)
    pds.write_dataset(table(0, 100), "silver/orders", run_id="r7", metadata={"team": "x"})
    pds.write_dataset(table(0, 3), "bronze/raw")
    code, out = run("dataset", "ls", uri, *opts, "--json")
    assert code == 0
    listed = json.loads(out)
    assert [(d["dataset_key"], d["rows"], d["complete"]) for d in listed] == [
        ("bronze/raw", 3, True), ("silver/orders", 100, True)]
    code, out = run("dataset", "ls", uri, *opts)
    assert code == 0 and "silver/orders" in out
    code, out = run("dataset", "show", uri, "silver/orders", *opts, "--json")
    info = json.loads(out)
    assert info["complete"] and info["manifest"]["run_id"] == "r7"
    assert info["manifest"]["metadata"] == {"team": "x"} and len(info["manifest"]["parts"]) == 3
    code, out = run("dataset", "show", uri, "silver/orders", *opts)
    assert code == 0 and "complete" in out and "team = x" in out
    code, out = run("dataset", "read", uri, "silver/orders", *opts, "--where", "id >= 95",
                    "--columns", "id", "--json")
    assert code == 0 and json.loads(out) == [{"id": i} for i in range(95, 100)]
    code, out = run("dataset", "read", uri, "silver/orders", *opts, "--limit", "2")
    assert code == 0 and "(2 rows, limited)" in out
    pds.write_dataset(table(0, 4), "silver/orders", overwrite=True)
    code, out = run("dataset", "vacuum", uri, *opts, "--older-than-hours", "0", "--dry-run",
                    "--json")
    assert code == 0 and len(json.loads(out)["deleted"]) == 4  # 3 parts + marker
    code, out = run("dataset", "rm", uri, "silver/orders", *opts, "--json")
    assert code == 0 and json.loads(out) == {"deleted": "silver/orders"}
    assert not pds.dataset_exists("silver/orders")


def test_dataset_errors_are_one_line(tmp_path: Path) -> None:
    uri = str(tmp_path / "lake")
    proc = subprocess.run([sys.executable, "-m", "caslake.cli", "dataset", "read", uri, "nope"],
                          cwd=ROOT, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 1
    assert proc.stderr.startswith("caslake: error:") and "incomplete" in proc.stderr
    assert "Traceback" not in proc.stderr
    code, _ = run("dataset", "show", uri, "nope")
    assert code == 1
    code, _ = run("dataset", "rm", uri, "nope")
    assert code == 1
