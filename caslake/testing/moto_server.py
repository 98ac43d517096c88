"""Run a local S3-compatible server (moto, with its conditional writes made atomic,
see :mod:`caslake.testing.atomic_moto`) on a free loopback port.

Needs ``moto[server]`` installed (the ``dev`` extra).  Used by the test
session, the benchmarks and anyone who wants a throwaway S3 endpoint.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from caslake.store.options import StorageOptions

DUMMY_KEY_ID = "testing"
DUMMY_SECRET = "testing"
REGION = "us-east-1"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"moto server exited early with code {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"moto server did not accept connections on port {port} in {timeout}s")


@contextmanager
def run_moto_server(timeout: float = 120.0) -> Iterator[str]:
    """Start the server, yield its endpoint URL, and stop it on exit."""
    port = free_port()
    env = dict(os.environ)
    env.update({"AWS_ACCESS_KEY_ID": DUMMY_KEY_ID, "AWS_SECRET_ACCESS_KEY": DUMMY_SECRET,
                "AWS_DEFAULT_REGION": REGION})
    proc = subprocess.Popen(
        [sys.executable, "-m", "caslake.testing.atomic_moto", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )
    try:
        wait_for_port(port, proc, timeout)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def storage_options(endpoint: str) -> StorageOptions:
    """caslake storage options for a moto endpoint (dummy credentials)."""
    return {"endpoint_url": endpoint, "region": REGION, "access_key_id": DUMMY_KEY_ID,
            "secret_access_key": DUMMY_SECRET, "allow_http": "true"}
