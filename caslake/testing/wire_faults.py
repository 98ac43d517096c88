"""A fault-injecting HTTP proxy for an S3 endpoint (moto) or any other plain-HTTP store
emulator (fake-gcs-server, Azurite), on loopback: :class:`FaultProxy`.

The proxy sits between a real S3 client (obstore, boto3) and a real server,
so the client's own retries and timeouts meet real wire faults -- something
:class:`caslake.store.faults.FaultyStore`, which wraps caslake's store from
above, cannot show.  Each request is matched against the :class:`WireFault`
rules in order (HTTP method, key prefix, seeded rate); kinds:

``"slowdown"``
    answer ``503 SlowDown`` (S3's XML error body); the request is *not*
    forwarded.
``"throttle"``
    answer ``429 Too Many Requests`` (GCS's rate-limit answer); *not* forwarded.
``"reset"``
    read the request, then reset the client connection (TCP RST); *not*
    forwarded.
``"lost_reply"``
    forward the request (it applies), then reset the client connection
    instead of answering.
``"delay"``
    wait a uniformly random ``0..max_delay_s``, then go on with the request
    (later rules may still fire on it).
``"late"``
    hold the request for ``hold_s`` (set it above the client's timeout, so the
    client gives up and perhaps retries), then forward it anyway: the request
    lands after the client was told it failed.

The first matching rule of any kind but ``"delay"`` decides the request.

``cas_rate_limit`` (per second, None: off) caps how often one key can be
compare-and-swapped, as stores do (S3 ~15/s measured, GCS one write per second
per object name): a conditional PUT (``If-Match``/``If-None-Match``) to a key
that accepted one less than ``1/limit`` seconds ago is answered ``503
SlowDown`` and not forwarded (counted as ``"cas_rate_limit"``).  Each key has
its own window, so create-only PUTs to distinct keys are never limited.
Every fault that fires is counted by kind (:meth:`FaultProxy.fired`), so a
test can assert that each fault it set up really happened.

Bounds: the proxy listens on 127.0.0.1 only, forwards only to the one
upstream it was given, keeps at most ``max_connections`` client connections,
and shuts itself down after ``lifetime_s`` even if nobody stops it.  Rules match
keys in path-style S3 requests (``/bucket/key``), which is what caslake uses with
an explicit endpoint; on other stores' requests, match by method (GCS uploads are
POSTs, Azure's are PUTs) with an empty ``prefix``.  Stdlib only.
"""

from __future__ import annotations

import http.client
import random
import re
import socket
import struct
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from html import unescape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

KINDS = ("slowdown", "throttle", "reset", "lost_reply", "delay", "late")
METHODS = frozenset({"GET", "HEAD", "PUT", "POST", "DELETE"})

_SLOWDOWN_BODY = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
                  b"<Message>Please reduce your request rate.</Message></Error>")
_THROTTLE_BODY = b'{"error": {"code": 429, "message": "rate limit exceeded"}}'
_XML_KEY = re.compile(rb"<Key>(.*?)</Key>", re.DOTALL)
# Hop-by-hop headers: never copied from one connection to the other.
_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te",
                  "trailer", "upgrade", "expect", "content-length"})


@dataclass(frozen=True)
class WireFault:
    """One rule: fire ``kind`` on a ``rate`` share of matching requests."""

    kind: str
    rate: float
    methods: frozenset[str] = METHODS
    prefix: str = ""  # object key prefix (after the bucket); a LIST matches on its prefix
    max_delay_s: float = 0.150  # "delay"
    hold_s: float = 1.0  # "late"
    times: int | None = None  # stop after firing this many times

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown wire fault kind {self.kind!r}; known: {KINDS}")
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"wire fault rate {self.rate!r} is not in [0, 1]")
        unknown = set(self.methods) - METHODS
        if unknown:
            raise ValueError(f"unknown HTTP methods {sorted(unknown)} in wire fault")


def standard_mix(prefix: str = "") -> list[WireFault]:
    """The mix of issue 9: 5% 503 SlowDown, 3% reset before apply, 5% reply lost
    after apply, 10% jittered delay up to 150 ms; every method."""
    return [WireFault("delay", 0.10, prefix=prefix, max_delay_s=0.150),
            WireFault("slowdown", 0.05, prefix=prefix),
            WireFault("reset", 0.03, prefix=prefix),
            WireFault("lost_reply", 0.05, prefix=prefix)]


@dataclass
class _State:
    faults: list[WireFault]
    rng: random.Random
    lock: threading.Lock = field(default_factory=threading.Lock)
    fired: dict[str, int] = field(default_factory=dict)
    fired_by_rule: dict[int, int] = field(default_factory=dict)  # index in ``faults``
    requests: dict[str, int] = field(default_factory=dict)
    connections: threading.BoundedSemaphore = field(
        default_factory=lambda: threading.BoundedSemaphore(256))
    cas_rate_limit: float | None = None
    cas_last: dict[str, float] = field(default_factory=dict)  # key -> last accepted CAS


def request_key(path: str) -> tuple[str, str]:
    """``(bucket, key)`` of a path-style request target; a LIST's key is its prefix."""
    parts = urlsplit(path)
    bucket, _, key = unquote(parts.path).lstrip("/").partition("/")
    if not key:
        key = parse_qs(parts.query).get("prefix", [""])[0]
    return bucket, key


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    timeout = 30  # an idle client connection is closed after this

    def log_message(self, format: str, *args: object) -> None:
        return None

    def setup(self) -> None:
        super().setup()
        self._slot = self.server.state.connections.acquire(timeout=10)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            if self._slot:
                self.server.state.connections.release()

    # BaseHTTPRequestHandler dispatches on do_<METHOD>.
    def do_GET(self) -> None:
        self._serve()

    do_HEAD = do_PUT = do_POST = do_DELETE = do_GET

    def _read_body(self) -> bytes:
        length = self.headers.get("Content-Length")
        if length is not None:
            return self.rfile.read(int(length))
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        return b""

    def _serve(self) -> None:
        body = self._read_body()
        _, key = request_key(self.path)
        if not key and self.command == "POST":  # a bulk DELETE names its keys in the body
            found = _XML_KEY.search(body)
            key = unescape(found.group(1).decode("utf-8", "replace")) if found else ""
        if self.command == "PUT" and not self.server.cas_allowed(key, self.headers):
            self._reply(503, [("Content-Type", "application/xml")], _SLOWDOWN_BODY)
            return
        decided = self.server.decide(self.command, key)
        for fault in decided:
            if fault.kind == "delay":
                time.sleep(self.server.uniform(0.0, fault.max_delay_s))
        final = next((f for f in decided if f.kind != "delay"), None)
        if final is None:
            self._reply(*self._forward(body))
        elif final.kind == "slowdown":
            self._reply(503, [("Content-Type", "application/xml")], _SLOWDOWN_BODY)
        elif final.kind == "throttle":
            self._reply(429, [("Content-Type", "application/json")], _THROTTLE_BODY)
        elif final.kind == "reset":
            self._reset()
        elif final.kind == "lost_reply":
            self._forward(body)
            self._reset()
        else:  # "late": the client times out meanwhile; the request lands anyway
            time.sleep(final.hold_s)
            status, headers, payload = self._forward(body)
            try:
                self._reply(status, headers, payload)
            except OSError:
                self.close_connection = True

    def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        host, port = self.server.upstream
        conn = http.client.HTTPConnection(host, port, timeout=60)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            if body or self.command in ("PUT", "POST"):
                headers["Content-Length"] = str(len(body))
            conn.request(self.command, self.path, body=body or None, headers=headers)
            resp = conn.getresponse()
            payload = resp.read()
            out = [(k, v) for k, v in resp.getheaders() if k.lower() not in _HOP]
            if self.command == "HEAD":
                length = resp.getheader("Content-Length")
                if length is not None:
                    out.append(("Content-Length", length))
            return resp.status, out, payload
        finally:
            conn.close()

    def _reply(self, status: int, headers: list[tuple[str, str]], payload: bytes) -> None:
        self.send_response_only(status)  # the upstream's own Date and Server pass through
        for k, v in headers:
            self.send_header(k, v)
        if self.command != "HEAD":
            self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD" and payload:
            self.wfile.write(payload)
        self.wfile.flush()

    def _reset(self) -> None:
        """Abort the client connection with a TCP RST (SO_LINGER 0, then close)."""
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, upstream: tuple[str, int], state: _State) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream = upstream
        self.state = state

    def decide(self, method: str, key: str) -> list[WireFault]:
        """The rules that fire on this request (delays, then at most one other)."""
        out: list[WireFault] = []
        s = self.state
        with s.lock:
            s.requests[method] = s.requests.get(method, 0) + 1
            for index, fault in enumerate(s.faults):
                if method not in fault.methods or not key.startswith(fault.prefix):
                    continue
                count = s.fired_by_rule.get(index, 0)
                if fault.times is not None and count >= fault.times:
                    continue
                if s.rng.random() >= fault.rate:
                    continue
                s.fired_by_rule[index] = count + 1
                s.fired[fault.kind] = s.fired.get(fault.kind, 0) + 1
                out.append(fault)
                if fault.kind != "delay":
                    break
        return out

    def cas_allowed(self, key: str, headers: Any) -> bool:
        """Whether a PUT passes the per-key rate limit on conditional PUTs."""
        s = self.state
        if s.cas_rate_limit is None or not (headers.get("If-Match")
                                            or headers.get("If-None-Match")):
            return True
        now = time.monotonic()
        with s.lock:
            last = s.cas_last.get(key)
            if last is not None and now - last < 1.0 / s.cas_rate_limit:
                s.fired["cas_rate_limit"] = s.fired.get("cas_rate_limit", 0) + 1
                return False
            s.cas_last[key] = now
            return True

    def uniform(self, lo: float, hi: float) -> float:
        with self.state.lock:
            return self.state.rng.uniform(lo, hi)

    def handle_error(self, request: object, client_address: object) -> None:
        return None  # a client that went away mid-request is normal here


class FaultProxy:
    """The proxy; use :func:`run_fault_proxy` (a context manager) to run one."""

    def __init__(self, upstream_url: str, faults: Sequence[WireFault] = (), *,
                 seed: int = 0, lifetime_s: float = 900.0, max_connections: int = 256,
                 cas_rate_limit: float | None = None) -> None:
        parts = urlsplit(upstream_url)
        if parts.scheme != "http" or parts.hostname not in ("127.0.0.1", "localhost"):
            raise ValueError(f"the fault proxy forwards to a loopback http:// server only, "
                             f"not {upstream_url!r}")
        self._state = _State(list(faults), random.Random(seed))
        self._state.connections = threading.BoundedSemaphore(max_connections)
        if cas_rate_limit is not None and cas_rate_limit <= 0:
            raise ValueError(f"cas_rate_limit must be > 0, not {cas_rate_limit!r}")
        self._state.cas_rate_limit = cas_rate_limit
        self._server = _Server((parts.hostname, parts.port or 80), self._state)
        self.port = int(self._server.server_address[1])
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True,
                                        name="caslake-fault-proxy")
        self._timer = threading.Timer(lifetime_s, self.stop)
        self._timer.daemon = True
        self._stopped = False

    def start(self) -> FaultProxy:
        self._thread.start()
        self._timer.start()
        return self

    def stop(self) -> None:
        with self._state.lock:
            if self._stopped:
                return
            self._stopped = True
        self._timer.cancel()
        self._server.shutdown()
        self._server.server_close()

    def set_faults(self, faults: Sequence[WireFault]) -> None:
        """Replace the rules (e.g. none while a test sets up, the mix during the run)."""
        with self._state.lock:
            self._state.faults = list(faults)
            self._state.fired_by_rule.clear()

    def fired(self) -> dict[str, int]:
        """Faults injected so far, by kind."""
        with self._state.lock:
            return dict(self._state.fired)

    def requests(self) -> dict[str, int]:
        """Requests received so far, by HTTP method."""
        with self._state.lock:
            return dict(self._state.requests)


@contextmanager
def run_fault_proxy(upstream_url: str, faults: Sequence[WireFault] = (), *, seed: int = 0,
                    lifetime_s: float = 900.0, cas_rate_limit: float | None = None
                    ) -> Iterator[FaultProxy]:
    """Start a proxy in front of ``upstream_url`` on a free loopback port; stop it on exit."""
    proxy = FaultProxy(upstream_url, faults, seed=seed, lifetime_s=lifetime_s,
                       cas_rate_limit=cas_rate_limit).start()
    try:
        yield proxy
    finally:
        proxy.stop()
