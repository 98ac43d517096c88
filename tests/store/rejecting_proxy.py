"""An HTTP proxy in front of an S3 endpoint that answers UploadPartCopy with 501.

Stands in for S3-compatible servers without UploadPartCopy: every other request
is forwarded unchanged (moto does not check signatures, so the changed Host is fine).
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_NOT_IMPLEMENTED = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>NotImplemented</Code>'
                    b"<Message>UploadPartCopy is not implemented</Message></Error>")


@contextmanager
def rejecting_upload_part_copy(endpoint: str) -> Iterator[str]:
    """Yield the URL of a proxy to ``endpoint`` that rejects UploadPartCopy."""
    target = urlsplit(endpoint)
    hits = {"rejected": 0}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if (self.command == "PUT" and "x-amz-copy-source" in self.headers
                    and "partNumber=" in self.path):
                hits["rejected"] += 1
                self.send_response(501)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(_NOT_IMPLEMENTED)))
                self.end_headers()
                self.wfile.write(_NOT_IMPLEMENTED)
                return
            conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
            headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            payload = resp.read()
            self.send_response(resp.status)
            upstream_length = resp.getheader("Content-Length")
            for k, v in resp.getheaders():
                if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(k, v)
            # A HEAD has no body but announces the object's length.
            length = upstream_length if self.command == "HEAD" else str(len(payload))
            self.send_header("Content-Length", length or "0")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)
            conn.close()

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
