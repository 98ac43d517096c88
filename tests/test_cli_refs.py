"""The refs, branch, tag, clone and schema commands, with --json."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa

import caslake
from caslake.cli import main


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def test_branch_tag_refs_clone_and_schema_commands(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, pa.schema([("id", pa.int32()), ("name", pa.string())]))
    t.append(pa.table({"id": pa.array([1, 2], pa.int32()), "name": ["a", "b"]}))
    code, out = run("branch", uri, "create", "audit", "--json")
    assert code == 0 and json.loads(out) == {"branch": "audit", "version": 1}
    t.branch("audit").append(pa.table({"id": pa.array([3], pa.int32()), "name": ["c"]}))
    code, out = run("tag", uri, "create", "v1", "--version", "1", "--json")
    assert code == 0 and json.loads(out)["version"] == 1
    code, out = run("branch", uri, "fast-forward", "audit", "--json")
    assert code == 0 and json.loads(out)["version"] == 2
    code, out = run("refs", uri, "--json")
    assert {(r["kind"], r["name"], r["version"]) for r in json.loads(out)} == {
        ("branch", "main", 2), ("branch", "audit", 2), ("tag", "v1", 1)}
    code, out = run("refs", uri)
    assert code == 0 and "audit" in out and "v1" in out
    code, out = run("schema", uri, "--rename", "name:label", "--widen", "id:int64",
                    "--add", "extra:string", "--json")
    hist = json.loads(out)
    assert [h["schema_id"] for h in hist] == [0, 1]
    assert "rename name -> label" in hist[1]["changes"]
    assert [f["name"] for f in hist[1]["fields"]] == ["id", "label", "extra"]
    code, out = run("schema", uri)
    assert code == 0 and "schema 1" in out and "label:string#2" in out
    target = str(tmp_path / "c")
    code, out = run("clone", uri, target, "--tag", "v1", "--json")
    assert code == 0 and json.loads(out)["rows"] == 2
    code, out = run("tag", uri, "drop", "v1")
    assert code == 0
    assert run("tag", uri, "create", "v1")[0] != 0  # the name is retired
    assert run("branch", uri, "drop", "nope")[0] != 0
    assert run("branch", uri, "create", "a/../b")[0] != 0
    assert run("schema", uri, "--widen", "label:int64")[0] != 0
    code, out = run("branch", uri, "drop", "audit", "--json")
    assert code == 0 and json.loads(out) == {"dropped_branch": "audit"}


def test_gc_of_a_compacted_clone_releases_its_hold(tmp_path: Path) -> None:
    uri, target = str(tmp_path / "t"), str(tmp_path / "c")
    t = caslake.create_table(uri, pa.schema([("id", pa.int32())]))
    t.append(pa.table({"id": pa.array([1, 2], pa.int32())}))
    t.append(pa.table({"id": pa.array([3], pa.int32())}))
    assert run("clone", uri, target)[0] == 0
    code, out = run("gc", target, "--retain-hours", "0", "--force", "--json")
    assert code == 0 and json.loads(out)["holds_released"] == []  # the head reads the source
    assert run("compact", target)[0] == 0  # two small source files -> one of its own
    code, out = run("gc", target, "--retain-hours", "0", "--force", "--dry-run")
    assert code == 0 and "would release hold" in out
    code, out = run("refs", uri, "--json")
    assert [r["kind"] for r in json.loads(out)] == ["branch", "hold"]
    code, out = run("gc", target, "--retain-hours", "0", "--force")
    assert code == 0 and "released hold" in out
    code, out = run("refs", uri, "--json")
    assert [r["kind"] for r in json.loads(out)] == ["branch"]
    assert caslake.open_table(target).scan().count() == 3
