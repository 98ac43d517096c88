"""``verify --deep`` reads every page of every live file and checks its CRC-32
(issue 10, item 11): silent bit rot inside a data page fails verification, and
the report says how many bytes were checked."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import caslake
from caslake.cli import EXIT_VERIFY_FAILED, main
from caslake.ops.verify import verify_table
from caslake.store import open_store


def _table(tmp_path: Path) -> tuple[str, caslake.Table]:
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, pa.schema([("id", pa.int64()), ("s", pa.string())]))
    for i in range(2):
        t.append(pa.table({"id": pa.array(range(i * 5000, i * 5000 + 5000), pa.int64()),
                           "s": [f"row-{j}" for j in range(5000)]}))
    return uri, t


def _rot_a_data_page(path: Path) -> None:
    """Flip a byte in the middle of the first column chunk's data, keeping inode,
    size and mtime (so the ETag and the footer are unchanged)."""
    md = pq.ParquetFile(path).metadata
    col = md.row_group(0).column(0)
    start = col.data_page_offset
    middle = start + col.total_compressed_size // 2
    st = path.stat()
    with open(path, "r+b") as f:
        f.seek(middle)
        b = f.read(1)
        f.seek(middle)
        f.write(bytes([b[0] ^ 0xFF]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_deep_verify_checks_every_page_crc(tmp_path: Path) -> None:
    uri, t = _table(tmp_path)
    report = verify_table(open_store(uri), deep=True)
    assert report.ok and report.column_chunks_checked >= 4
    sizes = sum(f["bytes"] for f in t.describe()["data_files"])
    assert 0 < report.bytes_checked <= sizes
    victim = t.describe()["data_files"][1]["path"]
    _rot_a_data_page(Path(uri) / victim)
    assert verify_table(open_store(uri)).ok  # only the deep check reads pages
    assert verify_table(open_store(uri), deep=True, ).ok is False
    report = verify_table(open_store(uri), deep=True)
    [problem] = report.problems
    assert problem.object == victim and "crc" in problem.problem.lower(), problem


def test_deep_verify_cli_progress_and_summary(tmp_path: Path) -> None:
    uri, t = _table(tmp_path)
    out = io.StringIO()
    assert main(["verify", uri, "--deep"], out=out) == 0
    assert "bytes of data pages checked" in out.getvalue() and "page CRC" in out.getvalue()
    proc = subprocess.run([sys.executable, "-m", "caslake.cli", "verify", uri, "--deep",
                           "--progress"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "checking pages" in proc.stderr, proc.stderr
    _rot_a_data_page(Path(uri) / t.describe()["data_files"][0]["path"])
    out = io.StringIO()
    assert main(["verify", uri, "--deep", "--json"], out=out) == EXIT_VERIFY_FAILED
    doc = json.loads(out.getvalue())
    assert doc["bytes_checked"] > 0 and not doc["ok"]
