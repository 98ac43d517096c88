"""The test servers' port choice (caslake.testing.moto_server): a server whose port
another process took between the choice and its own bind is never the one used
(pytest-xdist runs one moto and one Azurite per worker)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from caslake.testing import moto_server


def _http_server(port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.fixture
def foreign() -> Iterator[socket.socket]:
    """A socket of this process listening on a loopback port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock


def test_a_port_someone_else_listens_on_is_not_ours(foreign: socket.socket) -> None:
    taken = foreign.getsockname()[1]
    proc = _http_server(moto_server.free_port())
    try:
        assert not moto_server.owns_port(proc, taken)
    finally:
        moto_server.stop_process(proc)


def test_a_taken_port_is_retried_on_a_fresh_one(foreign: socket.socket,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    taken = foreign.getsockname()[1]
    ports = iter([taken])
    real = moto_server.free_port
    monkeypatch.setattr(moto_server, "free_port", lambda: next(ports, None) or real())
    port, proc = moto_server.start_on_free_port(_http_server, "http.server", 30)
    try:
        assert port != taken and proc.poll() is None
        assert moto_server.owns_port(proc, port)
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    finally:
        moto_server.stop_process(proc)
