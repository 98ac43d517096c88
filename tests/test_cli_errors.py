"""Errors the CLI user meets are one typed line, never a traceback (issue 27, items 3, 6).

Item 3 uses real conditions, not mocks: a read-only bind mount of a table, a tiny
tmpfs that fills up, and a table whose directory is a file.  Mounting needs root
and a container that allows it; those tests skip otherwise.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import caslake
from caslake.cli import main
from caslake.errors import SchemaMismatch, StoreError


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "caslake.cli", *argv], capture_output=True,
                          text=True, timeout=120)


def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


@contextlib.contextmanager
def read_only_view(src: Path, where: Path) -> Iterator[Path]:
    """``src`` seen read-only at ``where`` (a read-only bind mount)."""
    where.mkdir()
    if os.geteuid() != 0 or not _mount("--bind", "-o", "ro", str(src), str(where)):
        pytest.skip("needs root and bind mounts")
    try:
        if os.access(where, os.W_OK) and _probe_writable(where):
            pytest.skip("the bind mount is not read-only here")
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)


def _probe_writable(d: Path) -> bool:
    try:
        (d / ".probe").write_bytes(b"")
    except OSError:
        return False
    (d / ".probe").unlink()
    return True


def _assert_one_line_error(res: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert res.returncode == 1, (res.returncode, res.stderr)
    assert "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("caslake: error: "), res.stderr
    for n in needles:
        assert n.lower() in lines[0].lower(), lines[0]


def _csv(tmp_path: Path, rows: int = 3) -> Path:
    src = tmp_path / "in.csv"
    src.write_text("a\n" + "".join(f"{i}\n" for i in range(rows)), encoding="utf-8")
    return src


def test_every_write_to_a_read_only_table_is_one_typed_line(tmp_path: Path) -> None:
    uri = tmp_path / "t"
    caslake.create_table(str(uri), pa.schema([("a", pa.int64())])).append(
        pa.table({"a": [1, 2, 3]}))
    src = _csv(tmp_path)
    with read_only_view(uri, tmp_path / "ro") as ro:
        for argv in (["append", str(ro), str(src)],
                     ["delete", str(ro), "--where", "a = 1"],
                     ["overwrite", str(ro), str(src)],
                     ["upsert", str(ro), str(src), "--key", "a"],
                     ["compact", str(ro), "--deleted-fraction", "1"],
                     ["properties", str(ro), "--set", "k=v"],
                     ["create", str(ro / "sub"), "--schema", "a:int64"]):
            res = cli(*argv)
            if argv[0] == "compact" and res.returncode == 0:
                continue  # nothing to compact: nothing written
            _assert_one_line_error(res, "read-only")
            assert "nothing was" in res.stderr or "not written" in res.stderr, res.stderr
        # reads still work
        assert cli("scan", str(ro), "--json").returncode == 0


def test_read_only_append_raises_a_store_error_in_the_library(tmp_path: Path) -> None:
    uri = tmp_path / "t"
    caslake.create_table(str(uri), pa.schema([("a", pa.int64())]))
    with read_only_view(uri, tmp_path / "ro") as ro, pytest.raises(StoreError,
                                                                   match="read-only"):
        caslake.open_table(str(ro)).append(pa.table({"a": [1]}))


def test_a_full_file_system_is_one_typed_line(tmp_path: Path) -> None:
    small = tmp_path / "small"
    small.mkdir()
    if os.geteuid() != 0 or not _mount("-t", "tmpfs", "-o", "size=256k", "tmpfs", str(small)):
        pytest.skip("needs root and tmpfs mounts")
    try:
        uri = small / "t"
        caslake.create_table(str(uri), pa.schema([("s", pa.string())]))
        src = tmp_path / "big.csv"
        src.write_text("s\n" + "".join(f"{os.urandom(24).hex()}\n" for _ in range(40_000)),
                       encoding="utf-8")
        res = cli("append", str(uri), str(src))
        _assert_one_line_error(res, "no space")
        assert caslake.open_table(str(uri)).version == 0
    finally:
        subprocess.run(["umount", str(small)], check=False)


def test_a_table_path_under_a_file_is_one_typed_line(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    res = cli("create", str(tmp_path / "f" / "t"), "--schema", "a:int64")
    _assert_one_line_error(res, "f")


def test_an_unreadable_input_file_is_one_typed_line(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    caslake.create_table(uri, pa.schema([("a", pa.int64())]))
    res = cli("append", uri, str(tmp_path))  # a directory, not a file
    _assert_one_line_error(res, str(tmp_path))


# --- 6. the sub-microsecond timestamp message -------------------------------------------------


@pytest.mark.parametrize(("unit", "table_unit", "value", "shown"), [
    ("ns", "us", 1, "2020-01-01 00:00:00.000000001"),
    ("ns", "ms", 1_500_000, "2020-01-01 00:00:00.001500000"),
    ("us", "s", 999_999, "2020-01-01 00:00:00.999999"),
    ("ms", "s", 5, "2020-01-01 00:00:00.005"),
])
def test_lossy_timestamp_message_shows_the_value_once(unit: str, table_unit: str, value: int,
                                                      shown: str) -> None:
    t = caslake.create_table("memory://", pa.schema([("t", pa.timestamp(table_unit))]))
    base = 1577836800  # 2020-01-01 00:00:00 UTC
    per_s = {"s": 1, "ms": 1000, "us": 10**6, "ns": 10**9}[unit]
    arr = pa.array([base * per_s + value], pa.timestamp(unit))
    with pytest.raises(SchemaMismatch) as e:
        t.append(pa.table({"t": arr}))
    assert str(e.value) == (f"column 't': timestamp[{unit}] value {shown} would lose precision "
                            f"as timestamp[{table_unit}] (round or truncate the data first)")


def test_lossy_timestamp_message_with_a_time_zone_and_before_1970() -> None:
    t = caslake.create_table("memory://", pa.schema([("t", pa.timestamp("us", "UTC"))]))
    arr = pa.array([-1], pa.timestamp("ns", "UTC"))  # 1969-12-31 23:59:59.999999999
    with pytest.raises(SchemaMismatch) as e:
        t.append(pa.table({"t": arr}))
    assert "value 1969-12-31 23:59:59.999999999 would lose precision" in str(e.value)
