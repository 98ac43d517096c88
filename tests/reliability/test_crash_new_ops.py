"""Crash (and fail) at every store call of three newer operations, as
test_crash_every_step.py does for the others (crash_harness.py's ``fault_each_call``:
count the calls, then one fault -- crash, lost reply, fail-before -- at each call in
turn on a fresh table, check what is left, then re-run the operation without faults):

* **purge(expire=True) with exports** (caslake/export/erase.py ``erase_export_history``):
  afterwards the table is at the old version, the purge or its expiry marker, with
  the old or the erased rows; both exports read (deltalake, pyiceberg) as caslake's
  old or erased rows; a re-run leaves no erased value anywhere (exports included)
  and both exports showing the erased rows;
* **drop_export** ("delta", "iceberg"): afterwards the export reads exactly as before
  or not at all (a reader's clean error, or no export) -- never as other rows, not
  even an older export's; a re-run removes every object of it, and the table and
  the other export are untouched;
* **gc of a crashed writer's staging file** (``.caslake-tmp/``, ``list_staged`` /
  ``delete_staged``) with a clock 30 days ahead: afterwards the table reads and
  verifies; a re-run removes the staging file.

Local store only: the outside readers cannot read a memory store, and the local
store is the one with a staging area.  The tables are small (three data files) and
each fault point starts from a hard-linked copy of one table (crash_harness.Template), so
the rows cost about 45 s of CPU together (the erasure's 3 x 125 points nearly all).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake.exceptions import DeltaError, TableNotFoundError

import caslake
from caslake.api import Table
from caslake.export.iceberg import METADATA_PREFIX, metadata_key, read_hint
from caslake.ops.verify import verify_table
from caslake.store import open_store
from caslake.store.local import TMP_DIR
from tests.export.readers import caslake_rows, deltalake_rows, pyiceberg_rows
from tests.maintenance.erasure import assert_erased, find_leaks
from tests.reliability.crash_harness import MODES, Point, Template, fault_each_call
from tests.reliability.test_crash_every_step import (
    EXPORT_PREFIXES,
    FAST,
    GC_LATER,
    SCHEMA,
    all_keys,
    faulty_table,
    list_keys,
    referenced_keys,
)

SECRET = "zq-erased-4f1c"  # only the erased rows hold it (in ``s``)
ERASE = "id BETWEEN 100 AND 110 OR id = 15"  # id 15 is deleted already: erased all the same
ABSENT = "absent"  # an export no reader finds
# A reader's clean refusal of a (partly) deleted export: typed, never wrong rows.
READ_ERRORS = (DeltaError, OSError)


def erased(i: int) -> bool:
    return 100 <= i <= 110 or i == 15


def rows(lo: int, hi: int) -> pa.Table:
    return pa.table({
        "id": pa.array(range(lo, hi), pa.int64()),
        "s": pa.array([f"{SECRET}-{i}" if erased(i) else f"s{i % 13}" for i in range(lo, hi)],
                      pa.string()),
        "f": pa.array([None if i % 5 == 0 else i * 0.25 for i in range(lo, hi)], pa.float64()),
    }, schema=SCHEMA)


def build(uri: str) -> Table:
    """Three data files, two tombstones (one deletes an erased row) and both exports
    written twice (at versions 2 and 4), so each has history to erase: Delta two
    commits with deletion vectors, Iceberg two metadata files."""
    t = caslake.create_table(uri, SCHEMA)
    t.commit_policy = FAST
    t.append(rows(0, 300))
    t.delete("id BETWEEN 10 AND 20")
    t.export_iceberg()
    t.export_delta()
    t.append(rows(300, 400))
    t.delete("id = 150")
    t.export_iceberg()
    t.export_delta()
    assert t.version == 4
    return t


def without_erased(table: pa.Table) -> pa.Table:
    ids = table.column("id").to_pylist()
    return table.filter(pa.array([not erased(i) for i in ids]))


# --- what the outside readers see ------------------------------------------------------


def delta_rows(uri: str) -> pa.Table | str:
    """The Delta export's rows (deltalake), or ABSENT."""
    try:
        return deltalake_rows(uri, SCHEMA)
    except TableNotFoundError:
        return ABSENT


def iceberg_rows(uri: str) -> pa.Table | str:
    """The Iceberg export's rows (pyiceberg, from the metadata file the version hint
    names, as tests/export reads it), or ABSENT when there is no hint."""
    version = read_hint(open_store(uri))
    if version is None:
        return ABSENT
    return pyiceberg_rows(f"{open_store(uri).uri}/{metadata_key(version)}", SCHEMA)


def export_rows(uri: str, fmt: str) -> pa.Table | str:
    return delta_rows(uri) if fmt == "delta" else iceberg_rows(uri)


def shown(got: pa.Table | str, states: dict[str, pa.Table]) -> str:
    """Which of ``states`` (name -> rows) ``got`` equals, content compared."""
    if isinstance(got, str):
        return got
    names = [name for name, want in states.items() if got.equals(want)]
    assert names, f"reads as none of {sorted(states)} ({got.num_rows} rows)"
    return names[0]


# --- 1. purge(expire=True) erasing the exports --------------------------------------------


class EraseCase:
    """The erasure row's table (see :func:`build`), its old and its erased rows."""

    def __init__(self, tmp_path: Path) -> None:
        self.template = Template("local", build, tmp_path)
        uri = self.template.fresh()
        old = caslake_rows(caslake.open_table(uri))
        self.states = {"old": old, "erased": without_erased(old)}
        assert self.states["erased"].num_rows == old.num_rows - 11
        for fmt in ("delta", "iceberg"):
            assert shown(export_rows(uri, fmt), self.states) == "old"
        leaks = find_leaks(uri, [SECRET])
        for prefix in ("data/", "metadata/", "_delta_log/"):  # the exports' stats too
            assert any(leak.startswith(prefix) for leak in leaks), (prefix, leaks)

    def run(self, t: Table) -> None:
        t.purge(ERASE, expire=True)

    def check(self, p: Point) -> str:
        """The table: old, purged or expired, with old or erased rows; verify ok; each
        export reads as old or erased (never erased while the table is old).  Then
        a re-run finishes: no erased value stored anywhere, exports erased too."""
        states, uri, where = self.states, p.uri, p.where
        store = open_store(uri)
        t = caslake.open_table(uri)
        assert t.version in (4, 5, 6), f"{where}: version {t.version}"
        state = ["old", "purged", "expired"][t.version - 4]
        want = "old" if state == "old" else "erased"
        assert caslake_rows(t).equals(states[want]), f"{where}: table rows are not {want}"
        report = verify_table(store, deep=True, all_versions=True)
        assert report.ok, f"{where}: verify found {report.problems}"
        seen = []
        for fmt in ("delta", "iceberg"):
            try:
                got = shown(export_rows(uri, fmt), states)
            except AssertionError as e:
                raise AssertionError(f"{where}: the {fmt} export {e}") from None
            assert got != ABSENT, f"{where}: the {fmt} export is gone"
            assert state != "old" or got == "old", f"{where}: {fmt} erased before the table"
            seen.append(f"{fmt}={got}")
        if p.outcome == "ok":  # a purge that returned finished everything
            assert state == "expired" and seen == ["delta=erased", "iceberg=erased"], (
                f"{where}: returned, but table {state}, {seen}")
            assert_erased(uri, [SECRET])
        again = caslake.open_table(uri)
        again.commit_policy = FAST
        again.purge(ERASE, expire=True)
        assert caslake_rows(caslake.open_table(uri)).equals(states["erased"]), where
        try:
            assert_erased(uri, [SECRET])
        except AssertionError as e:
            raise AssertionError(f"{where}: after the re-run: {e}") from None
        for fmt in ("delta", "iceberg"):
            assert shown(export_rows(uri, fmt), states) == "erased", f"{where}: {fmt}"
        refs, _ = referenced_keys(store)
        assert list_keys(store) == refs, f"{where}: objects left behind"
        assert verify_table(store, deep=True, all_versions=True).ok, where
        return f"{state},{','.join(seen)}"


@pytest.mark.parametrize("mode", MODES)
def test_purge_expire_with_exports_fault_at_every_store_call(tmp_path: Path,
                                                              mode: str) -> None:
    case = EraseCase(tmp_path)
    outcomes = fault_each_call("purge-expire-exports", "local", mode, case.template.fresh,
                               faulty_table, case.run, case.check, 60)
    # The middles were reached: purged, with an export not erased yet.
    assert any("->purged," in k and "=old" in k for k in outcomes), outcomes


# --- 2. drop_export -----------------------------------------------------------------------


def guessed_iceberg_rows(uri: str) -> pa.Table | str:
    """A reader that finds no hint and lists ``metadata/`` for the highest
    ``v<N>.metadata.json`` (the Hadoop convention; DuckDB's version guessing)."""
    names = (re.fullmatch(r"metadata/v(\d+)\.metadata\.json", m.key)
             for m in open_store(uri).list(METADATA_PREFIX))
    versions = [int(n.group(1)) for n in names if n]
    if not versions:
        return ABSENT
    return pyiceberg_rows(f"{open_store(uri).uri}/{metadata_key(max(versions))}", SCHEMA)


class DropCase:
    """The drop row's table (see :func:`build`: both exports, at version 4, with
    history) and what it holds before the drop."""

    def __init__(self, tmp_path: Path, fmt: str) -> None:
        self.fmt = fmt
        self.other = "iceberg" if fmt == "delta" else "delta"
        self.template = Template("local", build, tmp_path)
        uri = self.template.fresh()
        self.before = caslake_rows(caslake.open_table(uri))
        for name in ("delta", "iceberg"):
            assert shown(export_rows(uri, name), {"before": self.before}) == "before"
        self.keys = all_keys(open_store(uri))
        self.own = {k for k in self.keys if k.startswith(EXPORT_PREFIXES[fmt])}
        assert self.own

    def run(self, t: Table) -> None:
        t.drop_export(self.fmt)

    def readers(self, uri: str) -> list[tuple[str, Callable[[], pa.Table | str]]]:
        if self.fmt == "delta":
            return [("deltalake", lambda: delta_rows(uri))]
        pinned = f"{open_store(uri).uri}/{metadata_key(4)}"  # a reader holding the pointer
        return [("pyiceberg via the hint", lambda: iceberg_rows(uri)),
                ("pyiceberg pinned to v4", lambda: pyiceberg_rows(pinned, SCHEMA)),
                ("pyiceberg guessing the version", lambda: guessed_iceberg_rows(uri))]

    def check(self, p: Point) -> str:
        """Each reader sees the export as before, or fails cleanly, or finds none;
        nothing but the export's own objects went; a re-run removes them all, and
        the table and the other export are as they were."""
        before, keys_before, own, uri, where = self.before, self.keys, self.own, p.uri, p.where
        store = open_store(uri)
        keys = all_keys(store)
        assert keys_before - keys <= own, f"{where}: deleted {sorted(keys_before - keys - own)}"
        assert keys <= keys_before, f"{where}: wrote {sorted(keys - keys_before)}"
        seen = []
        for name, read in self.readers(uri):
            try:
                got = shown(read(), {"before": before})
            except READ_ERRORS:
                got = "error"
            except AssertionError as e:
                raise AssertionError(f"{where}: {name} {e}") from None
            seen.append(got)
        left = own & keys
        state = "old" if left == own else "dropped" if not left else "partial"
        if p.outcome == "ok":
            assert state == "dropped", f"{where}: drop_export returned, {len(left)} left"
        assert shown(export_rows(uri, self.other), {"before": before}) == "before", where
        t = caslake.open_table(uri)
        t.drop_export(self.fmt)
        left = [k for k in all_keys(store) if k.startswith(EXPORT_PREFIXES[self.fmt])]
        assert not left, f"{where}: the re-run left {left}"
        assert export_rows(uri, self.fmt) == ABSENT, where
        assert all_keys(store) == keys_before - own, where
        assert caslake_rows(caslake.open_table(uri)).equals(before), where
        assert verify_table(store, deep=True, all_versions=True).ok, where
        assert shown(export_rows(uri, self.other), {"before": before}) == "before", where
        return f"{state}:{'/'.join(seen)}"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_drop_export_fault_at_every_store_call(tmp_path: Path, fmt: str, mode: str) -> None:
    case = DropCase(tmp_path, fmt)
    outcomes = fault_each_call(f"drop_export_{fmt}", "local", mode, case.template.fresh,
                               faulty_table, case.run, case.check, 4)
    # Some fault points left the export partly deleted (the states a reader must survive).
    assert any(k.split("->")[1].startswith("partial") for k in outcomes), outcomes


# --- 3. gc of a crashed writer's staging file ----------------------------------------------

STAGED_NAME = "0f3c9a.parquet.tmp"


def make_staged(uri: str) -> None:
    """A small table with an overwrite (files to collect) and a staging file as a
    writer killed mid-upload leaves it: half a Parquet file, written 2 days ago."""
    t = caslake.create_table(uri, SCHEMA)
    t.append(rows(0, 200))
    t.delete("id < 10")
    t.overwrite(rows(200, 300))
    tmp = Path(uri) / TMP_DIR
    tmp.mkdir(exist_ok=True)
    path = tmp / STAGED_NAME
    sink = pa.BufferOutputStream()
    pq.write_table(rows(0, 120), sink)
    path.write_bytes(sink.getvalue().to_pybytes()[:1500])
    past = time.time() - 2 * 86_400
    os.utime(path, (past, past))
    assert [s.name for s in open_store(uri).list_staged()] == [f"{TMP_DIR}/{STAGED_NAME}"]


class StagedCase:
    def __init__(self, tmp_path: Path) -> None:
        self.template = Template("local", make_staged, tmp_path)

    def run(self, t: Table) -> None:
        t.gc(now=datetime.now(UTC) + GC_LATER)

    def check(self, p: Point) -> str:
        """The table reads the overwrite's rows and verifies, nothing referenced is
        missing; a gc that returned took the staging file; gc again (30 days
        ahead) removes it and every orphan."""
        uri, where = p.uri, p.where
        store = open_store(uri)
        t = caslake.open_table(uri)
        assert t.version in (3, 4), f"{where}: version {t.version}"
        state = "old" if t.version == 3 else "marker"
        assert caslake_rows(t).column("id").to_pylist() == list(range(200, 300)), where
        report = verify_table(store, deep=True, all_versions=True)
        assert report.ok, f"{where}: verify found {report.problems}"
        refs, _ = referenced_keys(store)
        assert refs <= list_keys(store), f"{where}: referenced but missing"
        staged = (Path(uri) / TMP_DIR / STAGED_NAME).exists()
        assert not (p.outcome == "ok" and staged), f"{where}: gc returned, the file is there"
        again = caslake.open_table(uri)
        again.commit_policy = FAST
        again.gc(now=datetime.now(UTC) + GC_LATER)
        assert list(store.list_staged()) == [], f"{where}: the staging file survived a re-run"
        assert not (Path(uri) / TMP_DIR / STAGED_NAME).exists(), where
        refs, _ = referenced_keys(store)
        assert list_keys(store) == refs, f"{where}: gc left garbage behind"
        assert caslake.open_table(uri).to_arrow().num_rows == 100, where
        return f"{state},{'staged' if staged else 'collected'}"


@pytest.mark.parametrize("mode", MODES)
def test_gc_staging_fault_at_every_store_call(tmp_path: Path, mode: str) -> None:
    case = StagedCase(tmp_path)
    outcomes = fault_each_call("gc-staging", "local", mode, case.template.fresh, faulty_table,
                               case.run, case.check, 5)
    # Points before gc's delete_staged left the file (then a re-run took it).
    assert any(k.endswith(",staged") for k in outcomes), outcomes
