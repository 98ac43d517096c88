"""Acceptance: every exported version reads, in each outside reader, exactly as
``caslake scan`` reads it (sorted content compared), through a history of appends,
a one-row delete, a range delete, an upsert and a compaction; and the snapshot log
gives Iceberg and Delta time travel to every exported version."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from tests.export.data import SCHEMA, history, new_table
from tests.export.readers import (
    caslake_rows,
    deltalake_rows,
    duck,
    duckdb_delta_rows,
    duckdb_iceberg_rows,
    pyiceberg_rows,
)


def same(got: pa.Table, want: pa.Table, where: str) -> None:
    assert got.num_rows == want.num_rows, f"{where}: {got.num_rows} rows, want {want.num_rows}"
    assert got.equals(want), f"{where}: content differs"


def test_every_reader_matches_caslake_at_every_version(tmp_path: Path) -> None:
    t = new_table(str(tmp_path / "t"))
    root = tmp_path / "t"
    ice = duck(("avro", "iceberg"))
    dl = duck(("delta",))
    exported: list[tuple[int, int, int]] = []  # caslake version, iceberg snapshot, delta version
    for step, (name, op) in enumerate(history(t), start=1):
        op()
        version = t.refresh().version
        want = caslake_rows(t, version)
        assert want.num_rows > 0
        ir = t.export_iceberg()
        dr = t.export_delta()
        assert not ir.noop and not dr.noop and ir.version == dr.version == version
        assert ir.location == f"{root.as_uri()}/metadata/v{version}.metadata.json"
        where = f"step {step} ({name}), version {version}"
        same(pyiceberg_rows(ir.location, SCHEMA), want, f"pyiceberg, {where}")
        same(duckdb_iceberg_rows(ir.location, SCHEMA, con=ice), want, f"duckdb iceberg, {where}")
        same(deltalake_rows(str(root), SCHEMA), want, f"deltalake, {where}")
        same(duckdb_delta_rows(str(root), SCHEMA, con=dl), want, f"duckdb delta, {where}")
        from pyiceberg.table import StaticTable

        snap = StaticTable.from_metadata(ir.location).current_snapshot()
        assert snap is not None and snap.summary is not None
        assert snap.summary["caslake.version"] == str(version)
        exported.append((version, snap.snapshot_id, step - 1))
    # Time travel: the latest metadata keeps every exported version's snapshot, the
    # Delta log every exported version.
    latest = f"{root.as_uri()}/metadata/v{exported[-1][0]}.metadata.json"
    for version, snapshot_id, delta_version in exported:
        want = caslake_rows(t, version)
        where = f"time travel to version {version}"
        same(pyiceberg_rows(latest, SCHEMA, snapshot_id), want, f"pyiceberg, {where}")
        same(duckdb_iceberg_rows(latest, SCHEMA, snapshot_id, con=ice), want,
             f"duckdb iceberg, {where}")
        same(deltalake_rows(str(root), SCHEMA, version=delta_version), want,
             f"deltalake, {where}")


def test_exporting_an_older_version_then_newer_ones(tmp_path: Path) -> None:
    """--version N exports that version; re-exporting it is a no-op; a version older
    than the latest export is refused unless it is already in the snapshot log."""
    t = new_table(str(tmp_path / "t"))
    ops = history(t)
    for _, op in ops[:4]:
        op()
    r2 = t.export_iceberg(version=2)
    t.export_delta(version=2)
    same(pyiceberg_rows(r2.location, SCHEMA), caslake_rows(t, 2), "iceberg v2")
    same(deltalake_rows(str(tmp_path / "t"), SCHEMA), caslake_rows(t, 2), "delta v2")
    assert t.export_iceberg(version=2).noop and t.export_delta(version=2).noop
    r4 = t.export_iceberg()
    t.export_delta()
    assert r4.version == 4 and t.export_iceberg(version=2).noop
    from caslake.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="older than the latest"):
        t.export_iceberg(version=3)
    with pytest.raises(InvalidArgument, match="older than the latest"):
        t.export_delta(version=3)
