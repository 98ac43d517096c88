"""Run Azurite (Microsoft's Azure Storage emulator, npm package ``azurite``), blob
service only, in memory, on a free loopback port; create containers on it.

``make install`` puts Azurite under ``build/node`` (the pinned version is
:data:`AZURITE_VERSION`); ``CASLAKE_AZURITE`` may name another ``azurite-blob``
executable.  Used by the test session (tests/conftest.py) like
:mod:`caslake.testing.moto_server`.
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac
import os
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from caslake.store.options import StorageOptions
from caslake.testing.moto_server import start_on_free_port, stop_process

#: The npm package pinned by the Makefile's ``emulators`` step.
AZURITE_VERSION = "3.37.0"
#: Azurite's well-known development account and key (public, documented by Microsoft).
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/"
               "K1SZFPTOtr/KBHBeksoGMGw==")
_API_VERSION = "2021-08-06"


def azurite_binary() -> Path | None:
    """The ``azurite-blob`` executable, or None when it is not installed."""
    named = os.environ.get("CASLAKE_AZURITE")
    if named:
        return Path(named)
    root = Path(__file__).resolve().parents[2]
    candidate = root / "build" / "node" / "node_modules" / ".bin" / "azurite-blob"
    return candidate if candidate.exists() else None


@contextmanager
def run_azurite(timeout: float = 60.0) -> Iterator[str]:
    """Start Azurite's blob service; yield its account endpoint
    (``http://127.0.0.1:PORT/devstoreaccount1``); stop it on exit."""
    binary = azurite_binary()
    if binary is None:
        raise RuntimeError("Azurite is not installed: run `make install` (npm, into build/node)")

    def start(port: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [str(binary), "--blobHost", "127.0.0.1", "--blobPort", str(port),
             "--inMemoryPersistence", "--skipApiVersionCheck", "--loose", "--silent"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )

    port, proc = start_on_free_port(start, "Azurite", timeout)
    try:
        yield f"http://127.0.0.1:{port}/{ACCOUNT}"
    finally:
        # in memory: nothing to flush, and SIGTERM takes Azurite ~10 s
        stop_process(proc, kill=True)


def create_container(endpoint: str, name: str) -> None:
    """Create container ``name`` on the Azurite account at ``endpoint`` (Shared Key auth)."""
    date = email.utils.formatdate(usegmt=True)
    # Shared Key string to sign: verb, 11 empty standard headers, then the x-ms-
    # headers and the resource (Azurite's path-style URLs repeat the account).
    to_sign = ("PUT\n" + "\n" * 11 + f"x-ms-date:{date}\nx-ms-version:{_API_VERSION}\n"
               f"/{ACCOUNT}/{ACCOUNT}/{name}\nrestype:container")
    digest = hmac.new(base64.b64decode(ACCOUNT_KEY), to_sign.encode(), hashlib.sha256).digest()
    request = urllib.request.Request(
        f"{endpoint}/{name}?restype=container", method="PUT", data=None,
        headers={"x-ms-date": date, "x-ms-version": _API_VERSION, "Content-Length": "0",
                 "Authorization": f"SharedKey {ACCOUNT}:{base64.b64encode(digest).decode()}"})
    with urllib.request.urlopen(request, timeout=10) as reply:
        if reply.status != 201:
            raise RuntimeError(f"Azurite did not create container {name!r}: {reply.status}")


def storage_options(endpoint: str) -> StorageOptions:
    """caslake storage options for an Azurite endpoint (the development account)."""
    return {"account_name": ACCOUNT, "account_key": ACCOUNT_KEY, "endpoint_url": endpoint,
            "allow_http": "true"}
