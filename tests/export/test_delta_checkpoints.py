"""Delta export checkpoints: every ``export.delta.checkpoint_interval`` versions
(default 10, as Delta) the export writes a classic Parquet checkpoint and
``_delta_log/_last_checkpoint``, so readers replay a handful of JSON commits, not
the whole log.  Checked with deltalake and DuckDB's ``delta_scan`` on a copy of
the table whose JSON commits before the checkpoint are deleted: they must read
the table from the checkpoint alone (and caslake's next export too)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import caslake
from caslake.errors import InvalidArgument
from caslake.export.delta import CHECKPOINT_INTERVAL_PROPERTY
from tests.export.data import SCHEMA, new_table, rows
from tests.export.readers import caslake_rows, deltalake_rows, duckdb_delta_rows

LOG = "_delta_log"


def _exports(t: caslake.Table, n: int) -> None:
    """``n`` Delta versions: appends, and a delete every third one."""
    for i in range(n):
        if i % 3 == 2:
            t.delete(f"id = {(i - 1) * 10 + 1}")
        else:
            t.append(rows(i * 10, i * 10 + 10))
        t.export_delta()


def _checkpoints(root: Path) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in (root / LOG).glob("*.checkpoint.parquet"))


def _without_old_commits(root: Path, dest: Path, before: int) -> Path:
    """A copy of the table whose JSON commits below ``before`` are deleted."""
    shutil.copytree(root, dest)
    for p in (dest / LOG).glob("*.json"):
        if int(p.name.split(".")[0]) < before:
            p.unlink()
    return dest


def test_checkpoint_every_ten_versions_by_default_and_readers_start_there(
        tmp_path: Path) -> None:
    root = tmp_path / "t"
    t = new_table(str(root))
    _exports(t, 13)  # Delta versions 0..12
    assert _checkpoints(root) == [10]
    last = json.loads((root / LOG / "_last_checkpoint").read_text())
    assert last["version"] == 10
    # the checkpoint has the protocol's columns and one row per action
    cp = pq.read_table(root / LOG / f"{10:020d}.checkpoint.parquet")
    assert {"add", "remove", "metaData", "protocol", "txn"} <= set(cp.column_names)
    assert last["size"] == cp.num_rows
    assert cp.column("protocol").drop_null().to_pylist()[0]["minReaderVersion"] == 3
    want = caslake_rows(t)
    assert deltalake_rows(str(root), SCHEMA).equals(want)
    assert duckdb_delta_rows(str(root), SCHEMA).equals(want)
    copy = _without_old_commits(root, tmp_path / "copy", 10)
    assert not (copy / LOG / f"{0:020d}.json").exists()
    assert deltalake_rows(str(copy), SCHEMA).equals(want)
    assert duckdb_delta_rows(str(copy), SCHEMA).equals(want)
    # caslake's own next export replays from the checkpoint too
    c = caslake.open_table(str(copy))
    assert c.export_delta().noop
    c.append(rows(500, 520))
    c.delete("id = 505")
    res = c.export_delta()
    assert not res.noop and res.checkpoint is None
    assert deltalake_rows(str(copy), SCHEMA).equals(caslake_rows(c))
    assert duckdb_delta_rows(str(copy), SCHEMA).equals(caslake_rows(c))


def test_interval_property_sets_how_often(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t = new_table(str(root))
    t.set_properties({CHECKPOINT_INTERVAL_PROPERTY: "3"})
    seen = []
    for i in range(8):
        t.append(rows(i * 10, i * 10 + 10))
        if i == 4:
            t.delete("id BETWEEN 12 AND 33")
        seen.append(t.export_delta().checkpoint)
    assert _checkpoints(root) == [3, 6]
    assert seen == [None, None, None, 3, None, None, 6, None]
    assert json.loads((root / LOG / "_last_checkpoint").read_text())["version"] == 6
    copy = _without_old_commits(root, tmp_path / "copy", 6)
    want = caslake_rows(t)
    assert deltalake_rows(str(copy), SCHEMA).equals(want)
    assert duckdb_delta_rows(str(copy), SCHEMA).equals(want)
    # time travel to a version after the checkpoint still works from the copy
    from deltalake import DeltaTable

    assert DeltaTable(str(copy)).version() == 7


def test_a_missed_checkpoint_is_written_by_the_next_export(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t = new_table(str(root))
    t.set_properties({CHECKPOINT_INTERVAL_PROPERTY: "2"})
    for i in range(3):
        t.append(rows(i * 10, i * 10 + 10))
        t.export_delta()
    (root / LOG / f"{2:020d}.checkpoint.parquet").unlink()  # as if it crashed before
    (root / LOG / "_last_checkpoint").unlink()
    t.append(rows(100, 110))
    assert t.export_delta().checkpoint == 3
    assert _checkpoints(root) == [3]
    copy = _without_old_commits(root, tmp_path / "copy", 3)
    assert deltalake_rows(str(copy), SCHEMA).equals(caslake_rows(t))


@pytest.mark.parametrize("bad", ["0", "-2", "ten", "1.5"])
def test_bad_interval_is_refused_naming_the_property(tmp_path: Path, bad: str) -> None:
    t = new_table(str(tmp_path / "t"))
    t.append(rows(0, 10))
    # refused when set (it was refused only at the next export), nothing committed
    with pytest.raises(InvalidArgument, match=CHECKPOINT_INTERVAL_PROPERTY):
        t.set_properties({CHECKPOINT_INTERVAL_PROPERTY: bad})
    assert caslake.open_table(str(tmp_path / "t")).version == 1
    assert not (tmp_path / "t" / LOG).exists()  # nothing written


def test_cli_lists_export_properties_and_reports_the_checkpoint(tmp_path: Path) -> None:
    import io

    from caslake.cli.main import main as cli_main

    def run(*argv: str) -> tuple[int, str]:
        buf = io.StringIO()
        return cli_main(list(argv), out=buf), buf.getvalue()

    uri = str(tmp_path / "t")
    t = new_table(uri)
    code, out = run("properties", uri)
    assert code == 0
    assert "# export.delta.checkpoint_interval=10" in out
    assert "# export.iceberg=false" in out and "# export.delta=false" in out
    assert run("properties", uri, "--set", f"{CHECKPOINT_INTERVAL_PROPERTY}=2")[0] == 0
    code, out = run("properties", uri)
    assert f"{CHECKPOINT_INTERVAL_PROPERTY}=2\n" in out.splitlines(keepends=True)
    assert "# export.delta.checkpoint_interval" not in out
    assert json.loads(run("properties", uri, "--json")[1]) == {CHECKPOINT_INTERVAL_PROPERTY: "2"}
    outs = []
    for i in range(3):
        t.append(rows(i * 10, i * 10 + 10))
        outs.append(run("export", "delta", uri)[1])
    assert "checkpoint" not in outs[0] + outs[1]
    assert "checkpoint at Delta version 2" in outs[2]
    assert json.loads(run("export", "drop", uri, "--format", "delta", "--json")[1])[
        "objects_deleted"] == 5  # three commits, the checkpoint and _last_checkpoint
    assert not list((tmp_path / "t" / LOG).glob("*"))
