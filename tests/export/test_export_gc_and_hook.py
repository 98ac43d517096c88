"""gc keeps what the latest exports reference -- data files too, even after
compaction -- and collects superseded export objects; ``export.iceberg`` /
``export.delta`` table properties export on every commit, and an export error
never fails the commit."""

from __future__ import annotations

import logging
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import caslake
from caslake.api import Table
from caslake.export.hook import DELTA_PROPERTY, ICEBERG_PROPERTY
from caslake.export.iceberg import metadata_key, read_hint
from caslake.store import open_store
from caslake.store.faults import Fault, FaultyStore
from tests.export.data import SCHEMA, new_table, rows
from tests.export.readers import caslake_rows, deltalake_rows, pyiceberg_rows

LATER = datetime.now(UTC) + timedelta(days=30)


def keys(t: Table, prefix: str = "") -> set[str]:
    return {m.key for m in t.store.list(prefix)}


def test_gc_keeps_what_exports_reference_and_collects_superseded_exports(
        tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = new_table(uri)
    t.append(rows(0, 100))
    t.append(rows(100, 200))
    t.delete("id BETWEEN 10 AND 20")
    first_ice = t.export_iceberg()
    t.export_delta()
    exported = caslake_rows(t)
    old_data = {k for k in keys(t, "data/")}
    dv_files = keys(t, "dv/")
    t.compact(deleted_fraction=0.01)  # rewrites both files: caslake drops them
    t.gc(retention=timedelta(0), force=True, now=LATER)
    # caslake itself no longer references the old files, the exports do: kept.
    assert old_data <= keys(t, "data/")
    assert pyiceberg_rows(first_ice.location, SCHEMA).equals(exported)
    assert deltalake_rows(uri, SCHEMA).equals(exported)
    # A newer export supersedes the old one: gc now collects it and the old files.
    ice = t.export_iceberg()
    t.export_delta()
    t.gc(retention=timedelta(0), force=True, now=LATER)
    assert not old_data & keys(t, "data/")
    assert not dv_files & keys(t, "dv/")
    assert metadata_key(first_ice.version) not in keys(t, "metadata/")
    assert read_hint(t.store) == ice.version
    assert pyiceberg_rows(ice.location, SCHEMA).equals(caslake_rows(t))
    assert deltalake_rows(uri, SCHEMA).equals(caslake_rows(t))


def test_export_properties_export_on_every_commit(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = new_table(uri, properties={ICEBERG_PROPERTY: "true", DELTA_PROPERTY: "true"})
    t.append(rows(0, 50))
    t.delete("id = 3")
    assert read_hint(t.store) == t.version == 2
    assert pyiceberg_rows(f"{t.store.uri}/{metadata_key(2)}", SCHEMA).equals(caslake_rows(t))
    assert deltalake_rows(uri, SCHEMA).equals(caslake_rows(t))
    plain = new_table(str(tmp_path / "plain"))
    plain.append(rows(0, 5))
    assert not keys(plain, "metadata/") and not keys(plain, "_delta_log/")


def test_an_export_error_never_fails_the_commit(tmp_path: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:
    uri = str(tmp_path / "t")
    new_table(uri, properties={ICEBERG_PROPERTY: "true", DELTA_PROPERTY: "true"})
    store = FaultyStore(open_store(uri), [Fault(frozenset({"put"}), "before",
                                                prefix="metadata/")])
    t = Table.load(store)
    with caplog.at_level(logging.ERROR):
        res = t.append(rows(0, 50))  # the Iceberg export fails; the commit stands
    assert res.version == 1 and caslake.open_table(uri).version == 1
    assert any("export" in r.getMessage().lower() for r in caplog.records)
    assert read_hint(t.store) is None
    assert deltalake_rows(uri, SCHEMA).equals(caslake_rows(t))  # the other format ran
    store.faults.clear()
    t.append(rows(50, 60))  # the next commit's export catches up
    assert read_hint(t.store) == 2
    assert pyiceberg_rows(f"{t.store.uri}/{metadata_key(2)}", SCHEMA).equals(caslake_rows(t))


def test_unexportable_table_with_export_property_still_commits(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("u", pa.uint64())])
    t = caslake.create_table(str(tmp_path / "t"), schema,
                             properties={ICEBERG_PROPERTY: "true"})
    with caplog.at_level(logging.ERROR):
        res = t.append(pa.table({"id": [1], "u": pa.array([1], pa.uint64())}))
    assert res.version == 1 and not res.noop
    assert any("ExportUnsupportedType" in (r.exc_text or "") + r.getMessage()
               for r in caplog.records)
    assert not keys(t, "metadata/")


def test_an_export_on_commit_refusal_is_one_line_naming_the_cause_and_the_remedy(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A typed export error after a commit (here: a rename, then an append, which no
    Delta physical name can cover) is reported as one line -- the export, the version,
    the error's class and message -- with no traceback, through the library's logger
    and on the CLI's stderr; the commit stands.  An unexpected exception in a hook
    (a bug) keeps its traceback."""
    uri = str(tmp_path / "t")
    t = new_table(uri, properties={DELTA_PROPERTY: "true"})
    t.append(rows(0, 5))
    t.update_schema().rename_column("s", "label").commit()
    with caplog.at_level(logging.ERROR):
        res = caslake.open_table(uri).append(_renamed(rows(5, 8)))
    assert res.version == caslake.open_table(uri).version
    [rec] = [r for r in caplog.records if "export" in r.getMessage().lower()]
    msg = rec.getMessage()
    assert rec.exc_info is None and "\n" not in msg, msg
    assert "ExportColumnsDiverged" in msg and f"version {res.version}" in msg, msg
    assert "the commit stands" in msg, msg
    # The CLI: exit 0 (the append landed), one line on stderr, no traceback.
    src = tmp_path / "more.parquet"
    pq.write_table(_renamed(rows(8, 9)), src)
    res_cli = subprocess.run([sys.executable, "-m", "caslake.cli", "append", uri, str(src)],
                             capture_output=True, text=True, timeout=120)
    assert res_cli.returncode == 0, res_cli.stderr
    err = res_cli.stderr
    assert "Traceback" not in err and "ExportColumnsDiverged" in err, err
    assert len([ln for ln in err.splitlines() if ln.strip()]) == 1, err


def _renamed(data: pa.Table) -> pa.Table:
    return data.rename_columns(["label" if n == "s" else n for n in data.column_names])


def test_a_bug_in_an_after_commit_hook_keeps_its_traceback(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    t = new_table(str(tmp_path / "t"))

    def broken(snapshot: object) -> None:
        raise KeyError("oops")

    t.context.on_commit.append(broken)
    with caplog.at_level(logging.ERROR):
        t.append(rows(0, 1))
    [rec] = [r for r in caplog.records if "broken" in r.getMessage()]
    assert rec.exc_info is not None
