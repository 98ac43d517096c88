"""`verify` checks every ref: each branch head (and its history), each tag and each
clone hold, and says per ref what it found; a clone verifies through its sources."""

from __future__ import annotations

import io
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa

import caslake
from caslake.cli import EXIT_VERIFY_FAILED, main
from caslake.core.metadata_io import MetadataIO
from caslake.ops import refs
from caslake.ops.verify import verify_table
from caslake.store import open_store

SCHEMA = pa.schema([("id", pa.int64())])
LATER = datetime.now(UTC) + timedelta(days=3650)


def batch(lo: int, hi: int) -> pa.Table:
    return pa.table({"id": pa.array(range(lo, hi), pa.int64())})


def run_verify(*argv: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    out = io.StringIO()
    code = main(["verify", *argv, "--json"], out=out)
    return code, json.loads(out.getvalue())


def files_of(uri: str, *, branch: str | None = None, tag: str | None = None) -> set[str]:
    io = MetadataIO(open_store(uri))
    snap = refs.tag_snapshot(io, tag) if tag else refs.branch_head(io, branch or "main")
    return {f.path for f in io.live_files(snap)}


def make(tmp_path: Path) -> tuple[str, caslake.Table]:
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA)
    t.append(batch(0, 100))  # v1
    t.append(batch(100, 200))  # v2
    t.create_tag("v2", version=2)
    audit = t.create_branch("audit")
    audit.append(batch(500, 510))  # audit's own v3
    t.append(batch(200, 300))  # main's v3
    t.compact(target_file_size=1 << 30)  # main no longer has v1/v2's files
    t.gc(retention=timedelta(0), force=True, now=LATER)
    return uri, t


def by_ref(report: dict) -> dict[tuple[str, str], dict]:  # type: ignore[type-arg]
    return {(r["kind"], r["name"]): r for r in report["refs"]}


def test_every_branch_and_tag_is_checked_and_reported_per_ref(tmp_path: Path) -> None:
    uri, t = make(tmp_path)
    code, report = run_verify(uri, "--deep", "--all-versions")
    assert code == 0 and report["ok"], report["problems"]
    found = by_ref(report)
    assert set(found) == {("branch", "main"), ("branch", "audit"), ("tag", "v2")}
    assert all(r["ok"] and r["problems"] == [] for r in found.values())
    assert found[("branch", "audit")]["version"] == t.branch("audit").version
    assert found[("tag", "v2")]["version"] == 2
    # audit's own file and v2's files are checked, not only main's.
    assert report["data_files_checked"] == 4  # main's compacted file, v1, v2, audit's
    assert report["footers_checked"] == 4


def test_a_file_missing_only_on_a_branch_is_reported_on_that_branch(tmp_path: Path) -> None:
    uri, _ = make(tmp_path)
    only_audit = files_of(uri, branch="audit") - files_of(uri) - files_of(uri, tag="v2")
    assert len(only_audit) == 1
    lost = only_audit.pop()
    os.remove(os.path.join(uri, lost))
    code, report = run_verify(uri)
    assert code == EXIT_VERIFY_FAILED
    assert [p["object"] for p in report["problems"]] == [lost]
    found = by_ref(report)
    assert not found[("branch", "audit")]["ok"] and found[("branch", "main")]["ok"]
    assert found[("branch", "audit")]["problems"] == [{"object": lost, "problem": "missing"}]
    assert found[("tag", "v2")]["ok"]


def test_a_file_missing_only_under_a_tag_is_reported_on_that_tag(tmp_path: Path) -> None:
    uri, t = make(tmp_path)
    tagged, main_files = files_of(uri, tag="v2"), files_of(uri)
    audit_files = files_of(uri, branch="audit")
    only_tag = sorted(tagged - main_files - audit_files)
    assert not only_tag  # audit forked at v2: it shares the tag's files
    t.drop_branch("audit")
    lost = sorted(tagged - main_files)[0]
    os.remove(os.path.join(uri, lost))
    report = verify_table(open_store(uri))
    assert not report.ok and [p.object for p in report.problems] == [lost]
    per_ref = {(r.kind, r.name): r for r in report.refs}
    assert not per_ref[("tag", "v2")].ok and per_ref[("branch", "main")].ok


def test_a_clone_verifies_through_its_source_from_the_cli(tmp_path: Path) -> None:
    uri, _ = make(tmp_path)
    target = str(tmp_path / "clone")
    caslake.clone(uri, target)
    code, report = run_verify(target, "--deep", "--all-versions")
    assert code == 0 and report["ok"], report["problems"]
    code, report = run_verify(uri)  # the source checks the version its hold pins
    holds = [r for r in report["refs"] if r["kind"] == "hold"]
    assert code == 0 and len(holds) == 1 and holds[0]["ok"]
    assert holds[0]["version"] == caslake.open_table(uri).version
