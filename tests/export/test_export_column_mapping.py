"""Schema evolution through the exports: a renamed column keeps its values and a
dropped-then-re-added name never shows the dropped column's values, in every
outside reader, for files written before and after each change, with and without
deletes; statistics (used to skip files) name the right column."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

import caslake
from caslake.api import Table
from caslake.errors import ExportColumnsDiverged
from tests.export.readers import (
    caslake_rows,
    deltalake_rows,
    duck,
    duckdb_delta_rows,
    duckdb_iceberg_rows,
    pyiceberg_rows,
)

BASE = pa.schema([pa.field("id", pa.int64()), pa.field("email", pa.string()),
                  pa.field("n", pa.int64())])


def batch(lo: int, hi: int, schema: pa.Schema) -> pa.Table:
    cols: dict[str, list[object]] = {}
    for f in schema:
        if f.name == "id":
            cols["id"] = list(range(lo, hi))
        elif pa.types.is_string(f.type):
            cols[f.name] = [f"{f.name}-{i}@x" for i in range(lo, hi)]
        else:
            cols[f.name] = [i * 10 + len(f.name) for i in range(lo, hi)]
    return pa.table(cols, schema=schema)


def arrow_schema(t: Table) -> pa.Schema:
    return pa.schema([pa.field(f.name, f.type) for f in t.schema])


def check_all(t: Table, root: Path, where: str, *, delta: bool = True) -> None:
    """Every reader shows exactly caslake's rows.  ``delta`` False: the data files
    store a column under two names (or a name under two columns), which no Delta
    physical name can cover: the Delta export must refuse, writing nothing."""
    want = caslake_rows(t)
    schema = arrow_schema(t)
    ir = t.export_iceberg()
    readers = [("pyiceberg", lambda: pyiceberg_rows(ir.location, schema)),
               ("duckdb iceberg", lambda: duckdb_iceberg_rows(ir.location, schema))]
    if delta:
        t.export_delta()
        readers += [("deltalake", lambda: deltalake_rows(str(root), schema)),
                    ("duckdb delta", lambda: duckdb_delta_rows(str(root), schema))]
    else:
        log = sorted(p.name for p in (root / "_delta_log").iterdir())
        with pytest.raises(ExportColumnsDiverged) as e:
            t.export_delta()
        assert e.value.files and e.value.target == "Delta", where
        assert sorted(p.name for p in (root / "_delta_log").iterdir()) == log, where
    for name, read in readers:
        got = read()
        assert got.num_rows == want.num_rows, f"{name}, {where}: row count"
        for col in schema.names:
            g, w = got.column(col).to_pylist(), want.column(col).to_pylist()
            assert g == w, f"{name}, {where}: column {col!r} reads {g[:3]}..., want {w[:3]}..."


def evolve(t: Table, root: Path) -> None:
    t.append(batch(0, 10, arrow_schema(t)))
    t.delete("id = 3")
    check_all(t, root, "before any change")
    t.update_schema().rename_column("email", "mail").commit()
    check_all(t, root, "after rename, old files only")
    t.append(batch(10, 20, arrow_schema(t)))
    t.delete("id = 12 OR id = 4")
    check_all(t, root, "after rename, files before and after", delta=False)
    t.compact(target_file_size=1 << 30, deleted_fraction=0.01)
    check_all(t, root, "after rename, all files rewritten")
    t.append(batch(20, 30, arrow_schema(t)))
    t.update_schema().drop_column("n").commit()
    check_all(t, root, "after drop")
    t.update_schema().add_column("n", "int64").commit()
    check_all(t, root, "after re-adding the dropped name, old files hold the dropped one")
    t.delete("id = 21")
    check_all(t, root, "after re-adding the dropped name, and a delete")
    t.append(batch(30, 40, arrow_schema(t)))
    check_all(t, root, "after re-adding the dropped name, new files", delta=False)
    t.compact(target_file_size=1 << 30, deleted_fraction=0.01)
    check_all(t, root, "after re-adding the dropped name, all files rewritten")
    t.update_schema().rename_column("mail", "email").commit()
    check_all(t, root, "after renaming back")
    t.update_schema().rename_column("email", "n2").rename_column("n", "email").commit()
    check_all(t, root, "after swapping names")


def test_rename_and_drop_readd_read_right_everywhere(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t = caslake.create_table(str(root), BASE)
    evolve(t, root)


def test_delta_statistics_skip_files_by_the_right_column(tmp_path: Path) -> None:
    """Statistics are keyed by physical name: a filter on a renamed column finds the
    rows of files written before the rename, a re-added name never matches the
    dropped column's values -- before and after compaction changes the physical
    names (every file re-added with re-keyed statistics)."""
    from deltalake import DeltaTable, QueryBuilder

    root = tmp_path / "t"
    t = caslake.create_table(str(root), BASE)
    t.append(batch(0, 10, BASE))
    t.append(batch(100, 110, BASE))
    t.update_schema().rename_column("email", "mail").commit()
    t.update_schema().drop_column("n").commit()
    t.update_schema().add_column("n", "int64").commit()
    queries = (("SELECT id FROM t WHERE mail = 'email-105@x'", [105]),
               ("SELECT id FROM t WHERE mail IN ('email-109@x', 'email-5@x')", [5, 109]),
               ("SELECT id FROM t WHERE n = 1051", []),  # the dropped n's value
               ("SELECT count(*) FROM t WHERE n IS NULL", [20]))
    for step in ("before compaction", "after compaction"):
        t.export_delta()
        dt = DeltaTable(str(root))
        for sql, want in queries:
            got = pa.table(QueryBuilder().register("t", dt).execute(sql)).column(0).to_pylist()
            assert sorted(got) == want, f"deltalake {sql}, {step}"
            got = duck(("delta",)).execute(
                sql.replace("FROM t", f"FROM delta_scan('{root}')")).fetchall()
            assert sorted(r[0] for r in got) == want, f"duckdb delta {sql}, {step}"
        t.compact(target_file_size=1 << 30, deleted_fraction=0.01)
    stats = [json.loads(a["add"]["stats"]) for a in _log_actions(root) if "add" in a]
    assert {"id", "mail"} <= set(stats[-1]["minValues"])  # keyed by the new physical names


def _log_actions(root: Path) -> list[dict[str, object]]:
    return [json.loads(line) for p in sorted((root / "_delta_log").glob("*.json"))
            for line in p.read_text().splitlines() if line.strip()]


def _strip_column_mapping(root: Path) -> None:
    """Make the Delta log look like one written before column mapping (the exporter
    of caslake < this change): names as physical names, protocol without it."""
    for p in sorted((root / "_delta_log").glob("*.json")):
        out = []
        for line in p.read_text().splitlines():
            a = json.loads(line)
            if "protocol" in a:
                for k in ("readerFeatures", "writerFeatures"):
                    a["protocol"][k] = [f for f in a["protocol"][k] if f != "columnMapping"]
            if "metaData" in a:
                md = a["metaData"]
                md["configuration"] = {k: v for k, v in md["configuration"].items()
                                       if not k.startswith("delta.columnMapping")}
                schema = json.loads(md["schemaString"])
                for f in schema["fields"]:
                    f["metadata"] = {}
                md["schemaString"] = json.dumps(schema)
            if "add" in a and a["add"].get("stats"):
                stats = json.loads(a["add"]["stats"])
                a["add"]["stats"] = json.dumps(stats)
            out.append(json.dumps(a))
        p.write_text("\n".join(out) + "\n")


def test_an_export_without_column_mapping_upgrades(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t = caslake.create_table(str(root), BASE)
    t.append(batch(0, 10, BASE))
    t.export_delta()
    _strip_column_mapping(root)
    assert deltalake_rows(str(root), BASE).equals(caslake_rows(t))
    t.update_schema().rename_column("email", "mail").commit()
    check_all(t, root, "after the upgrade")
    actions = _log_actions(root)
    protocol = [a["protocol"] for a in actions if "protocol" in a][-1]
    assert "columnMapping" in protocol["readerFeatures"]  # type: ignore[index]
    assert "columnMapping" in protocol["writerFeatures"]  # type: ignore[index]


def test_upgraded_export_survives_the_whole_evolution(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t = caslake.create_table(str(root), BASE)
    t.append(batch(100, 105, BASE))
    t.export_delta()
    _strip_column_mapping(root)
    evolve(t, root)


def test_iceberg_column_sizes_follow_field_ids(tmp_path: Path) -> None:
    """column_sizes are keyed by field id: a file written before a drop and re-add
    of ``n`` reports no size for the new ``n``, and a renamed column keeps its size."""
    import fastavro

    root = tmp_path / "t"
    t = caslake.create_table(str(root), BASE)
    t.append(batch(0, 10, BASE))
    t.update_schema().rename_column("email", "mail").commit()
    t.update_schema().drop_column("n").commit()
    t.update_schema().add_column("n", "int64").commit()
    ir = t.export_iceberg()
    meta = json.loads(Path(ir.location.removeprefix("file://")).read_text())
    with open(meta["snapshots"][-1]["manifest-list"].removeprefix("file://"), "rb") as fh:
        (rec,) = [r for r in fastavro.reader(fh) if r["content"] == 0]  # type: ignore[index]
    with open(rec["manifest_path"].removeprefix("file://"), "rb") as fh:  # type: ignore[index]
        (entry,) = list(fastavro.reader(fh))
    sizes = {kv["key"] for kv in entry["data_file"]["column_sizes"]}  # type: ignore[index]
    assert sizes == {1, 2}  # id, mail (stored as 'email'); not the new n (id 4)
