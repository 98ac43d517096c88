"""The demos' output and packaging (issue 10, item 15): no negative "written"
figure, a fresh temp dir per run unless a path is given, and an SPDX license."""

from __future__ import annotations

import threading
import tomllib
from pathlib import Path

import pytest

from caslake import demo
from caslake.spark import demo as spark_demo

ROOT = Path(__file__).resolve().parents[1]


def test_object_delta_counts_written_and_deleted_separately(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"x" * 10)
    (tmp_path / "b").write_bytes(b"y" * 20)
    before = spark_demo.objects(tmp_path)
    (tmp_path / "a").unlink()
    (tmp_path / "c").write_bytes(b"z" * 5)
    delta = spark_demo.ObjectDelta.between(before, spark_demo.objects(tmp_path))
    assert (delta.written, delta.written_bytes, delta.deleted, delta.deleted_bytes) == (
        1, 5, 1, 10)
    assert "1 objects (5 bytes) written, 1 (10 bytes) deleted" in delta.describe()


def test_demo_roots_are_fresh_unless_given(tmp_path: Path) -> None:
    for choose in (demo.demo_root, spark_demo.demo_root):
        a, b = choose(None), choose(None)
        try:
            assert a != b and a.is_dir() and b.is_dir() and not any(a.iterdir())
        finally:
            a.rmdir()
            b.rmdir()
        given = tmp_path / "mine"
        assert choose(str(given)) == given


def test_two_core_demos_at_once_do_not_collide(capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo, "ROWS", 2_000)
    codes: list[int] = []
    threads = [threading.Thread(target=lambda: codes.append(demo.main(None)))
               for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    out = capsys.readouterr().out
    assert codes == [0, 0]
    assert out.count("rows visible: 40,000 (expected 40,000)") == 2, out


def test_license_is_an_spdx_string() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"
    requires = project["build-system"]["requires"]
    assert any(r.startswith("setuptools>=77") for r in requires), requires


def test_spark_extra_pins_a_pandas_pyspark_supports() -> None:
    """PySpark 4.3 warns that it does not fully support pandas >= 3 (and
    pandas-on-Spark fails to import under it): the spark extra stays below 3."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    spark = project["project"]["optional-dependencies"]["spark"]
    pandas = [r for r in spark if r.startswith("pandas")]
    assert pandas == ["pandas>=2.2,<3"], spark
