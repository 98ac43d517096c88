"""Progress bars (issue 32): compact, purge, gc, export, clone and verify draw a
tqdm bar on stderr when it is a terminal -- a pseudo-terminal here (python's
pty module) -- and none when stderr is piped or with ``--json``; no tqdm
monitor thread outlives a command.

Most commands run in-process with ``sys.stderr`` on the pty's slave end (the
CLI asks ``isatty()`` of it, as of a real terminal); one runs as a real
``python -m caslake.cli`` subprocess whose stderr is the pty.
"""

from __future__ import annotations

import fcntl
import io
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pytest

import caslake
from caslake.cli import main

BAR = re.compile(r"[\d.]+[kMG]?(?:/[\d.]+[kMG]?)?\s*\w*\s*\[\d\d:\d\d")  # 3/3 [00:00 or 5.5k/5.5k [


def _openpty() -> tuple[int, int]:
    """A pseudo-terminal of 24 x 100 characters (a fresh pty has no size)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    return master, slave


def _drain(fd: int) -> str:
    out = b""
    while select.select([fd], [], [], 0.05)[0]:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    return out.decode(errors="replace")


@contextmanager
def terminal() -> Iterator[int]:
    """sys.stderr on a pseudo-terminal; yields the master end to read the screen.
    (Set in the test body: pytest's capture resets sys.stderr after fixtures.)"""
    master, slave = _openpty()
    stream = os.fdopen(slave, "w", buffering=1, encoding="utf-8")
    saved, sys.stderr = sys.stderr, stream
    try:
        yield master
    finally:
        sys.stderr = saved
        stream.close()
        os.close(master)


def _table(tmp_path: Path) -> str:
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, pa.schema([("a", pa.int64()), ("s", pa.string())]))
    for i in range(6):
        t.append(pa.table({"a": [2 * i, 2 * i + 1], "s": [f"v{i}", None]}))
    t.delete("a % 3 = 0")
    return uri


def _commands(uri: str, tmp_path: Path) -> list[tuple[list[str], str]]:
    return [
        (["verify", uri, "--deep"], "checking pages"),
        (["purge", uri, "--where", "a = 1"], "purging"),
        (["compact", uri, "--deleted-fraction", "0.01"], "compacting"),
        (["export", "delta", uri], "exporting delta"),
        (["clone", uri, str(tmp_path / "c")], "cloning"),
        (["gc", uri, "--retain-hours", "0", "--force"], "deleting unreferenced objects"),
    ]


def _no_monitor_thread() -> bool:
    return not [th for th in threading.enumerate() if th.name.startswith("tqdm_monitor")]


def test_each_long_command_draws_a_bar_on_a_terminal(tmp_path: Path) -> None:
    uri = _table(tmp_path)
    for argv, desc in _commands(uri, tmp_path):
        out = io.StringIO()
        with terminal() as screen_fd:
            assert main(argv, out=out) == 0, argv
            screen = _drain(screen_fd)
        line = next((x for x in screen.replace("\r", "\n").split("\n") if desc in x), "")
        assert line and BAR.search(line), (argv, screen)
        assert desc not in out.getvalue()  # the bar is on stderr, not in the output
        assert _no_monitor_thread(), argv


def test_no_bar_when_piped_or_with_json(tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    uri = _table(tmp_path)
    for argv in (["verify", uri, "--deep", "--json"], ["gc", uri, "--dry-run", "--json"],
                 ["purge", uri, "--where", "a = 3", "--json"],
                 ["clone", uri, str(tmp_path / "c1"), "--json"],
                 ["export", "delta", uri, "--json"]):
        with terminal() as screen_fd:
            assert main(argv, out=io.StringIO()) == 0, argv
            assert _drain(screen_fd) == "", argv  # a terminal, but --json: no bar
    piped = io.StringIO()
    monkeypatch.setattr(sys, "stderr", piped)  # not a terminal
    for argv, _ in _commands(uri, tmp_path / "piped"):
        assert main(argv, out=io.StringIO()) == 0, argv
    assert piped.getvalue() == ""
    assert _no_monitor_thread()


def test_the_cli_process_draws_the_bar_on_its_terminal(tmp_path: Path) -> None:
    uri = _table(tmp_path)
    master, slave = _openpty()
    try:
        res = subprocess.run([sys.executable, "-m", "caslake.cli", "verify", uri, "--deep"],
                             stdout=subprocess.PIPE, stderr=slave, timeout=120,
                             cwd=Path(__file__).resolve().parents[1])
        screen = _drain(master)
    finally:
        os.close(slave)
        os.close(master)
    assert res.returncode == 0, screen
    assert "checking pages" in screen and BAR.search(screen), screen
    assert b"checking pages" not in res.stdout
    piped = subprocess.run([sys.executable, "-m", "caslake.cli", "verify", uri, "--deep"],
                           capture_output=True, timeout=120,
                           cwd=Path(__file__).resolve().parents[1])
    assert piped.returncode == 0 and piped.stderr == b""
