"""Input and output checks of the CLI that must fail before anything is written
(QA of issue 27, B3/B4):

* ``create --from`` reads and converts the whole input before it creates the table,
  so a bad input (a format, a cell, a suffix, a ``--schema`` that does not fit)
  leaves no table behind and the corrected command succeeds;
* ``--date-format`` / ``--timestamp-format`` are checked up front, on input and on
  output: a directive Python's ``strptime`` does not know is an
  :class:`InvalidTextFormat` naming the option and the directive, and a failed
  ``scan --output`` leaves no file (nor a partial one);
* CSV type inference gives microsecond timestamps with and without
  ``--timestamp-format``.
"""

from __future__ import annotations

import datetime as dt
import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import caslake
from caslake.cli import input as cli_input
from caslake.cli import main
from caslake.cli.input import InvalidTextFormat, TextOptions


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def _one_line(err: str, *needles: str) -> None:
    assert err.count("\n") == 1 and err.startswith("caslake: error: "), err
    assert "Traceback" not in err
    for n in needles:
        assert n in err, (n, err)


def _big_csv(path: Path, rows: int, last: str) -> Path:
    """``rows`` good rows, then one whose cells are ``last``: past the first block
    once BLOCK_BYTES is small, so only a read of the whole file finds it."""
    lines = ["id,d,n"] + [f"{i},31/12/2020,{i}" for i in range(rows)] + [last]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# --- B3: create --from creates nothing from a bad input -----------------------------------


CASES = {
    # name: (bad extra args, file line after the good rows, corrected args, fixed line)
    "invalid date directive": (["--date-format", "%Q"], "99,31/12/2020,99",
                               ["--date-format", "%d/%m/%Y"], "99,31/12/2020,99"),
    "invalid timestamp directive": (["--timestamp-format", "%Y %Q %H"], "99,31/12/2020,99",
                                    [], "99,31/12/2020,99"),
    "date not in the format": (["--date-format", "%d/%m/%Y"], "99,2020-12-31,99",
                               ["--date-format", "%d/%m/%Y"], "99,31/12/2020,99"),
    "unparsable number": (["--date-format", "%d/%m/%Y"], "99,31/12/2020,abc",
                          ["--date-format", "%d/%m/%Y"], "99,31/12/2020,99"),
    "schema type does not fit": (["--schema", "id:int64,d:string,n:int32"],
                                 "99,31/12/2020,99999999999",
                                 ["--schema", "id:int64,d:string,n:int64"],
                                 "99,31/12/2020,99999999999"),
    "schema lacks a column": (["--schema", "id:int64,d:string"], "99,31/12/2020,99",
                              ["--schema", "id:int64,d:string,n:int64"], "99,31/12/2020,99"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_create_from_a_bad_csv_creates_nothing_and_a_retry_succeeds(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        case: str) -> None:
    monkeypatch.setattr(cli_input, "BLOCK_BYTES", 256)  # the bad row is past the first block
    bad_args, bad_line, good_args, good_line = CASES[case]
    uri = str(tmp_path / "t")
    src = _big_csv(tmp_path / "a.csv", 200, bad_line)
    code, out = run("create", uri, "--from", str(src), *bad_args)
    assert code != 0 and "created" not in out, out
    _one_line(capsys.readouterr().err)
    assert not (tmp_path / "t").exists()
    _big_csv(src, 200, good_line)
    code, out = run("create", uri, "--from", str(src), *good_args)
    assert code == 0 and "appended 201 rows" in out, out
    assert caslake.open_table(uri).to_arrow().num_rows == 201


def test_create_from_an_unknown_suffix_creates_nothing_and_a_retry_succeeds(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "a.txt"
    src.write_text("id,s\n1,x\n", encoding="utf-8")
    uri = str(tmp_path / "t")
    code, out = run("create", uri, "--from", str(src))
    assert code != 0 and out == ""
    _one_line(capsys.readouterr().err, "--format")
    assert not (tmp_path / "t").exists()
    code, out = run("create", uri, "--from", str(src), "--format", "csv")
    assert code == 0 and "appended 1 rows" in out


def test_create_from_parquet_with_sub_microsecond_values_creates_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A conversion the append refuses (nanoseconds into a timestamp[us] --schema) is
    found before the table is created."""
    src = tmp_path / "a.parquet"
    pq.write_table(pa.table({"t": pa.array([0, 1], pa.timestamp("ns"))}), src,
                   row_group_size=1)
    uri = str(tmp_path / "t")
    code, _ = run("create", uri, "--from", str(src), "--schema", "t:timestamp[us]")
    assert code != 0
    _one_line(capsys.readouterr().err, "'t'")
    assert not (tmp_path / "t").exists()
    code, out = run("create", uri, "--from", str(src), "--schema", "t:timestamp[ns]")
    assert code == 0 and "appended 2 rows" in out


def test_create_from_onto_an_existing_table_refuses_before_reading(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = str(tmp_path / "t")
    caslake.create_table(uri, pa.schema([("id", pa.int64())]))
    src = tmp_path / "a.csv"
    src.write_text("id,d\n1,2020-01-01\n", encoding="utf-8")
    code, _ = run("create", uri, "--from", str(src), "--date-format", "%d/%m/%Y")
    assert code != 0
    _one_line(capsys.readouterr().err, "already exists")


# --- B4: format strings are checked up front ----------------------------------------------


@pytest.mark.parametrize(("flag", "fmt", "directive"), [
    ("--date-format", "%Q", "%Q"),
    ("--timestamp-format", "%Y %Q %H", "%Q"),
    ("--date-format", "%Y-%m-%e", "%e"),
    ("--timestamp-format", "%Y-%m-%d %T", "%T"),
    ("--date-format", "%Y-%m-%d %", "%"),
])
def test_scan_output_with_an_unknown_directive_writes_no_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, fmt: str,
        directive: str) -> None:
    uri = str(tmp_path / "t")
    caslake.create_table(uri, pa.schema([("d", pa.date32()), ("t", pa.timestamp("us"))])
                         ).append(pa.table({"d": [dt.date(2020, 1, 2)],
                                            "t": [dt.datetime(2020, 1, 2, 3, 4, 5)]}))
    target = tmp_path / "x.csv"
    code, out = run("scan", uri, "--output", str(target), flag, fmt)
    assert code != 0 and out == ""
    _one_line(capsys.readouterr().err, flag, repr(fmt), directive)
    assert list(tmp_path.iterdir()) == [tmp_path / "t"]


@pytest.mark.parametrize("command", ["create", "append"])
def test_input_with_an_unknown_directive_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    uri = str(tmp_path / "t")
    src = tmp_path / "a.csv"
    src.write_text("id,d\n1,02/01/2020\n", encoding="utf-8")
    if command == "append":
        caslake.create_table(uri, pa.schema([("id", pa.int64()), ("d", pa.date32())]))
        argv = ["append", uri, str(src)]
    else:
        argv = ["create", uri, "--from", str(src)]
    code, _ = run(*argv, "--date-format", "%d/%m/%Q")
    assert code != 0
    _one_line(capsys.readouterr().err, "--date-format", "%Q")
    if command == "append":
        assert caslake.open_table(uri).version == 0
    else:
        assert not (tmp_path / "t").exists()


def test_the_error_is_typed_and_names_option_and_directive() -> None:
    with pytest.raises(InvalidTextFormat) as e:
        TextOptions(timestamp_format="%Y %Q").check()
    assert e.value.option == "--timestamp-format" and e.value.directive == "%Q"
    assert isinstance(e.value, caslake.errors.InvalidArgument)


def test_a_combination_strptime_refuses_is_refused() -> None:
    """Known directives that strptime refuses together (%G needs %V and a weekday)."""
    with pytest.raises(InvalidTextFormat, match="--date-format"):
        TextOptions(date_format="%G-%V").check()


@pytest.mark.parametrize("fmt", ["%d/%m/%Y", "%Y-%m-%dT%H:%M:%S.%f%z", "%a %d %b %Y %I%p",
                                 "%G-W%V-%u", "%j/%Y", "%Y%%%m"])
def test_valid_formats_pass(fmt: str) -> None:
    TextOptions(date_format=fmt, timestamp_format=fmt).check()


def test_a_scan_that_fails_midway_leaves_no_partial_output(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, pa.schema([("id", pa.int64())]))
    t.append(pa.table({"id": list(range(100))}))
    t.append(pa.table({"id": list(range(100, 200))}))
    files = sorted((tmp_path / "t").rglob("*.parquet"), key=lambda p: p.stat().st_mtime_ns)
    files[-1].unlink()  # the scan fails when it reaches this file
    target = tmp_path / "x.csv"
    target.write_text("old\n", encoding="utf-8")
    code, _ = run("scan", uri, "--output", str(target))
    assert code != 0
    _one_line(capsys.readouterr().err)
    assert target.read_text(encoding="utf-8") == "old\n"  # untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t", "x.csv"]


# --- inference: microsecond timestamps with and without --timestamp-format ----------------


def test_csv_timestamps_are_inferred_in_microseconds(tmp_path: Path) -> None:
    plain = tmp_path / "p.csv"
    plain.write_text("id,t,z,s\n1,2024-01-01 00:00:00.123456,2024-01-01T00:00:00Z,"
                     "2024-01-01 10:00:00\n", encoding="utf-8")
    formatted = tmp_path / "f.csv"
    formatted.write_text("id,t\n1,01/01/2024 00:00:00.123456\n", encoding="utf-8")
    assert run("create", str(tmp_path / "a"), "--from", str(plain))[0] == 0
    assert run("create", str(tmp_path / "b"), "--from", str(formatted),
               "--timestamp-format", "%d/%m/%Y %H:%M:%S.%f")[0] == 0
    a = caslake.open_table(str(tmp_path / "a")).schema
    b = caslake.open_table(str(tmp_path / "b")).schema
    assert a.field("t").type == b.field("t").type == pa.timestamp("us")
    assert a.field("s").type == pa.timestamp("us")
    assert a.field("z").type == pa.timestamp("us", tz="UTC")
    assert caslake.open_table(str(tmp_path / "a")).to_arrow().column("t")[0].as_py() == \
        dt.datetime(2024, 1, 1, 0, 0, 0, 123456)


def test_csv_sub_microsecond_timestamps_stay_nanoseconds(tmp_path: Path) -> None:
    """Microseconds unless a value in the first block needs nanoseconds: never lossy."""
    src = tmp_path / "n.csv"
    src.write_text("id,t\n1,2024-01-01 00:00:00.123456789\n2,2024-01-01 00:00:00\n",
                   encoding="utf-8")
    assert run("create", str(tmp_path / "a"), "--from", str(src))[0] == 0
    t = caslake.open_table(str(tmp_path / "a"))
    assert t.schema.field("t").type == pa.timestamp("ns")
    assert t.to_arrow().column("t").cast(pa.int64())[0].as_py() % 1000 == 789
