"""What history says a purge did (issue 27): ``rows_deleted`` is the live rows it
erased, ``rows_added`` 0, and ``rows_rewritten`` the rows it wrote again into its new
files -- the field compact reports its rewritten rows in too (there ``rows_added``
keeps counting them, as it always has)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import caslake
from caslake.cli import main as cli_main
from caslake.testing.parquet_files import add_parquet_file

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("user", pa.string())])


def table(uri: str) -> caslake.Table:
    """One file of 10,000 rows in 10 groups; id 42 (group 0) deleted."""
    t = caslake.create_table(uri, SCHEMA)
    add_parquet_file(t, pa.table({"id": np.arange(10_000),
                                  "user": [f"u{i}" for i in range(10_000)]}, schema=SCHEMA),
                     row_group_rows=1000)
    t.delete("id = 42")
    return t


@pytest.mark.parametrize(("where", "deleted", "rewritten"), [
    ("id = 5000", 1, 9_999),  # group 0 (with the deleted row) copied verbatim: 9,999 stored
    ("id = 43", 1, 9_998),  # group 0 re-encoded: the deleted row 42 goes too
    ("id = 42", 0, 9_999),  # only an already-deleted row: nothing live is erased
    ("id >= 9000", 1_000, 9_000),  # a whole group dropped; group 0 (row 42 hidden) kept
])
def test_history_of_a_purge_counts_erased_and_rewritten_rows(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str, deleted: int,
        rewritten: int) -> None:
    uri = str(tmp_path / uuid.uuid4().hex)
    t = table(uri)
    before = t.history()[0].total_rows
    t.purge(where)
    entry = t.history()[0]
    assert entry.operation == "purge"
    assert (entry.rows_added, entry.rows_deleted, entry.rows_rewritten) == (0, deleted, rewritten)
    assert entry.total_rows == before - deleted
    assert cli_main(["history", uri, "--json", "--limit", "1"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["rows_added"], row["rows_deleted"], row["rows_rewritten"]) == (
        0, deleted, rewritten)
    assert cli_main(["history", uri]) == 0  # the table form: purge shows 0 added
    assert "purge" in capsys.readouterr().out


def test_compact_and_plain_commits_report_rows_rewritten_consistently(tmp_path: Path) -> None:
    t = table(str(tmp_path / "t"))
    t.append(pa.table({"id": [20_000], "user": ["x"]}, schema=SCHEMA))
    t.compact()
    compact, append, delete = t.history()[:3]
    assert compact.operation == "compact"
    assert compact.rows_rewritten == compact.rows_added == 10_000 and compact.rows_deleted == 0
    assert (append.rows_added, append.rows_rewritten) == (1, 0)
    assert (delete.rows_deleted, delete.rows_rewritten) == (1, 0)
    assert all("rows_rewritten" in e.to_json() for e in t.history())
