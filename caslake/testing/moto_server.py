"""Run a local S3-compatible server (moto, with its conditional writes made atomic,
see :mod:`caslake.testing.atomic_moto`) on a free loopback port.

Needs ``moto[server]`` installed (the ``dev`` extra).  Used by the test
session, the benchmarks and anyone who wants a throwaway S3 endpoint.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from caslake.store.options import StorageOptions

DUMMY_KEY_ID = "testing"
DUMMY_SECRET = "testing"
REGION = "us-east-1"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float,
                  name: str = "moto server") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited early with code {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{name} did not accept connections on port {port} in {timeout}s")


def _listening_sockets(port: int) -> set[str] | None:
    """``socket:[inode]`` of every TCP socket listening on ``port`` (Linux /proc/net);
    None where that table cannot be read."""
    found: set[str] = set()
    tables = [Path("/proc/net/tcp"), Path("/proc/net/tcp6")]
    if not any(t.exists() for t in tables):
        return None
    for table in tables:
        with contextlib.suppress(OSError):
            for line in table.read_text().splitlines()[1:]:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":
                    found.add(f"socket:[{fields[9]}]")
    return found


def _process_tree(root: int) -> set[int]:
    """``root`` and its descendants (a launcher may exec a server as its child)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    return tree


def owns_port(proc: subprocess.Popen[bytes], port: int) -> bool:
    """Whether ``proc`` (or a child of it) holds the socket listening on ``port``.
    Between :func:`free_port` and the server's own bind, another process (another
    pytest-xdist worker's server, say) may take the port: a connection then reaches
    that server, not ours.  True where /proc cannot tell."""
    sockets = _listening_sockets(port)
    if sockets is None:
        return True
    for pid in _process_tree(proc.pid):
        with contextlib.suppress(OSError):
            fds = Path(f"/proc/{pid}/fd")
            if any(os.readlink(fd) in sockets for fd in fds.iterdir()):
                return True
    return False


def stop_process(proc: subprocess.Popen[bytes], *, kill: bool = False) -> None:
    """Terminate (or kill) ``proc`` and reap it; kill it if it outlives 10 s."""
    if kill:
        proc.kill()
    else:
        proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def start_on_free_port(start: Callable[[int], subprocess.Popen[bytes]], name: str,
                       timeout: float, attempts: int = 5) -> tuple[int, subprocess.Popen[bytes]]:
    """``start(port)`` a server on a free loopback port and wait until it, and not
    another process, accepts connections there; a fresh port on each retry (the port
    was taken in between: the server exited early, or someone else answers)."""
    problem = ""
    for _ in range(attempts):
        port = free_port()
        proc = start(port)
        try:
            wait_for_port(port, proc, timeout, name)
        except RuntimeError as e:
            exited = proc.poll() is not None
            stop_process(proc, kill=True)
            if not exited:
                raise
            problem = str(e)
            continue
        if owns_port(proc, port):
            return port, proc
        stop_process(proc, kill=True)
        problem = f"port {port} was taken by another process"
    raise RuntimeError(f"{name} did not start in {attempts} attempts: {problem}")


@contextmanager
def run_moto_server(timeout: float = 120.0) -> Iterator[str]:
    """Start the server, yield its endpoint URL, and stop it on exit."""
    env = dict(os.environ)
    env.update({"AWS_ACCESS_KEY_ID": DUMMY_KEY_ID, "AWS_SECRET_ACCESS_KEY": DUMMY_SECRET,
                "AWS_DEFAULT_REGION": REGION})

    def start(port: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "caslake.testing.atomic_moto", "-H", "127.0.0.1",
             "-p", str(port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
        )

    port, proc = start_on_free_port(start, "moto server", timeout)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proc)


def storage_options(endpoint: str) -> StorageOptions:
    """caslake storage options for a moto endpoint (dummy credentials)."""
    return {"endpoint_url": endpoint, "region": REGION, "access_key_id": DUMMY_KEY_ID,
            "secret_access_key": DUMMY_SECRET, "allow_http": "true"}
