"""`caslake verify` finds missing, changed and corrupt objects, and exits for monitoring."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pyarrow as pa

import caslake
from caslake.cli import EXIT_VERIFY_FAILED, main
from caslake.ops.verify import verify_table
from caslake.store import open_store

SCHEMA = pa.schema([("id", pa.int64())])


def make(tmp_path: Path) -> tuple[str, caslake.Table]:
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA)
    for i in range(3):
        t.append(pa.table({"id": pa.array(range(i * 100, i * 100 + 100), pa.int64())}))
    t.delete("id = 5")
    return uri, t


def run_verify(*argv: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    out = io.StringIO()
    code = main(["verify", *argv, "--json"], out=out)
    return code, json.loads(out.getvalue())


def test_healthy_table_verifies(tmp_path: Path) -> None:
    uri, _ = make(tmp_path)
    code, report = run_verify(uri, "--deep", "--all-versions")
    assert code == 0 and report["ok"] and report["problems"] == []
    assert report["versions_checked"] == 5
    assert report["data_files_checked"] == 3 and report["footers_checked"] == 3
    assert report["tombstones_checked"] == 1


def test_missing_and_changed_data_files_are_reported(tmp_path: Path) -> None:
    uri, t = make(tmp_path)
    files = [f["path"] for f in t.describe()["data_files"]]
    (Path(uri) / files[0]).unlink()
    changed = Path(uri) / files[1]
    changed.write_bytes(changed.read_bytes() + b"x")
    code, report = run_verify(uri)
    assert code == EXIT_VERIFY_FAILED and not report["ok"]
    problems = {p["object"]: p["problem"] for p in report["problems"]}
    assert problems[files[0]] == "missing"
    assert "size" in problems[files[1]]


def test_corrupt_tombstone_and_manifest_are_reported(tmp_path: Path) -> None:
    uri, t = make(tmp_path)
    tomb = t.snapshot.manifest.tombstones[0].path
    (Path(uri) / tomb).write_bytes(b"CLTB garbage")
    report = verify_table(open_store(uri))
    assert not report.ok
    assert any(p.object == tomb for p in report.problems)
    parent = t.snapshot.manifest.parent
    assert parent is not None
    (Path(uri) / parent).write_text("{not json")
    report = verify_table(open_store(uri), all_versions=True)
    assert any(p.object == parent for p in report.problems)


def test_deep_checks_footers(tmp_path: Path) -> None:
    uri, t = make(tmp_path)
    path = Path(uri) / t.describe()["data_files"][2]["path"]
    raw = path.read_bytes()
    st = path.stat()
    # Silent bit rot: same inode, size and mtime (so the same ETag), damaged footer.
    path.write_bytes(raw[:-12] + b"\0" * 8 + raw[-4:])
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert verify_table(open_store(uri)).ok  # a shallow check cannot see it
    report = verify_table(open_store(uri), deep=True)
    assert any(p.object == t.describe()["data_files"][2]["path"] and "footer" in p.problem.lower()
               for p in report.problems), report.problems
