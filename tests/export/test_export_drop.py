"""Dropping an export: ``Table.drop_export`` / ``caslake export drop`` delete every
object of it (and nothing else); refused, naming the property, while the table's
export-on-commit property would write it again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import caslake
from caslake.cli import main as cli_main
from caslake.errors import ExportOnCommitEnabled, InvalidArgument
from caslake.export.hook import DELTA_PROPERTY, ICEBERG_PROPERTY
from tests.export.data import SCHEMA, new_table, rows
from tests.export.readers import caslake_rows, pyiceberg_rows


def keys(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_drop_export_deletes_every_object_of_that_export_only(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t = new_table(str(root))
    t.append(rows(0, 100))
    t.delete("id < 10")
    before = keys(root)
    t.export_iceberg()
    t.export_delta()
    t.append(rows(100, 120))
    t.export_iceberg()
    t.export_delta()
    iceberg = {k for k in keys(root) if k.startswith("metadata/")}
    delta = {k for k in keys(root) if k.startswith(("_delta_log/", "dv/"))}
    assert iceberg and delta
    assert t.drop_export("delta") == len(delta)
    assert not {k for k in keys(root) if k.startswith(("_delta_log/", "dv/"))}
    from deltalake.exceptions import TableNotFoundError

    with pytest.raises(TableNotFoundError):
        from deltalake import DeltaTable

        DeltaTable(str(root))
    # the Iceberg export is untouched and still reads
    assert {k for k in keys(root) if k.startswith("metadata/")} == iceberg
    loc = f"{root.as_uri()}/metadata/v{t.version}.metadata.json"
    assert pyiceberg_rows(loc, SCHEMA).equals(caslake_rows(t))
    assert t.drop_export("iceberg") == len(iceberg)
    assert t.drop_export("iceberg") == 0  # idempotent
    left = keys(root)
    assert not any(k.startswith(("metadata/", "_delta_log/", "dv/")) for k in left)
    assert {k for k in before if k.startswith(("data/", "tombstone/"))} <= left
    assert t.refresh().to_arrow().num_rows == 110  # the table itself is untouched
    # exporting again starts afresh
    t.export_delta()
    from tests.export.readers import deltalake_rows

    assert deltalake_rows(str(root), SCHEMA).equals(caslake_rows(t))


@pytest.mark.parametrize(("fmt", "prop"), [("iceberg", ICEBERG_PROPERTY),
                                           ("delta", DELTA_PROPERTY)])
def test_drop_is_refused_while_export_on_commit_is_set(tmp_path: Path, fmt: str,
                                                        prop: str) -> None:
    root = tmp_path / "t"
    t = new_table(str(root), properties={prop: "true"})
    t.append(rows(0, 10))
    before = keys(root)
    with pytest.raises(ExportOnCommitEnabled) as e:
        t.drop_export(fmt)
    assert e.value.property == prop and prop in str(e.value)
    assert keys(root) == before
    t.set_properties({prop: "false"})
    assert t.drop_export(fmt) > 0
    assert not any(k.startswith(("metadata/", "_delta_log/", "dv/")) for k in keys(root))


def test_drop_rejects_an_unknown_format(tmp_path: Path) -> None:
    t = new_table(str(tmp_path / "t"))
    with pytest.raises(InvalidArgument, match="'iceberg' or 'delta'"):
        t.drop_export("hudi")
    with pytest.raises(InvalidArgument, match="only an Iceberg export"):
        t.drop_export("delta", out=str(tmp_path / "x"))


def test_cli_export_drop(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "t"
    t = new_table(str(root))
    t.append(rows(0, 40))
    out = tmp_path / "elsewhere"
    assert cli_main(["export", "iceberg", str(root), "--out", str(out)]) == 0
    assert cli_main(["export", "delta", str(root)]) == 0
    capsys.readouterr()
    assert cli_main(["export", "drop", str(root), "--format", "delta"]) == 0
    assert "deleted" in capsys.readouterr().out
    assert not (root / "_delta_log").exists() or not any((root / "_delta_log").iterdir())
    assert cli_main(["export", "drop", str(root), "--format", "iceberg", "--out", str(out),
                     "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["format"] == "iceberg" and doc["objects_deleted"] > 0
    assert not any((out / "metadata").rglob("*.*"))
    t2 = caslake.create_table(str(tmp_path / "t2"), SCHEMA, properties={DELTA_PROPERTY: "true"})
    t2.append(rows(0, 5))
    capsys.readouterr()
    assert cli_main(["export", "drop", str(tmp_path / "t2"), "--format", "delta"]) != 0
    err = capsys.readouterr().err
    assert DELTA_PROPERTY in err and "false" in err
