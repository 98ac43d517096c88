"""Block-blob assembly for :meth:`AzureBlobStore.compose` (purge's splice on Azure).

obstore does not expose Azure's block calls, so this module sends them itself (stdlib
HTTP, Shared Key or SAS auth):

* **Put Block From URL** copies bytes ``[start, end)`` of the source blob inside
  the service (``x-ms-source-range``), pinned by ``x-ms-source-if-match`` to the
  ETag the caller named: a changed source fails with 412 (PreconditionFailed), a
  deleted one with 404 (NotFound).  The service reads the source through its URL,
  so the URL carries a short-lived read-only service SAS signed with the account
  key (or the caller's own SAS token);
* **Put Block** uploads the parts the client sends;
* **Put Block List** commits the blocks create-only (``If-None-Match: *``); the
  commit carries a random token in metadata ``caslake_compose``, so a commit whose
  reply was lost and that is then refused as existing is recognised as ours.

Blocks are staged in parallel on the store's threads, each retried by the store's
Retrier (staging a block again under the same id is harmless).  Uncommitted blocks
of a failed compose stay invisible and Azure drops them after a week.  Without an
account key or SAS token (managed identity, Azure CLI) compose raises
StoreCapabilityUnsupported and purge rewrites the file.
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING

from caslake.errors import (
    AlreadyExists,
    CaslakeError,
    NotFound,
    PreconditionFailed,
    StoreCapabilityUnsupported,
    StoreConfigError,
    StoreError,
    TransientStoreError,
)
from caslake.store.base import COMPOSE, ComposePart, CopyFrom, check_compose_parts, normalize_etag

if TYPE_CHECKING:
    from caslake.store.azure import AzureBlobStore

API_VERSION = "2021-08-06"
#: Metadata naming the compose that committed a blob (a lost reply is recognised by it).
TOKEN_ATTRIBUTE = "caslake_compose"
#: How long the source SAS stays valid.
SAS_LIFETIME = timedelta(hours=1)
#: The largest range one Put Block From URL copies; longer copies take several blocks.
MAX_COPY_BLOCK = 100 * 1024 * 1024


class _Client:
    """Signed requests to one Azure Blob container of one store."""

    def __init__(self, store: AzureBlobStore) -> None:
        s = store.settings
        if not (s.account_key or s.sas_token):
            raise StoreCapabilityUnsupported(
                f"compose on {store.uri}: copying ranges server-side needs the account key "
                "or a SAS token (to let the service read the source)")
        self.store = store
        self.account = s.account
        self.key = base64.b64decode(s.account_key) if s.account_key else None
        self.sas = s.sas_token
        endpoint = s.endpoint_url or f"https://{s.account}.blob.core.windows.net"
        self.base = f"{endpoint.rstrip('/')}/{s.container}"
        self.timeout = s.request_timeout

    def path(self, key: str) -> str:
        full = f"{self.store.prefix}/{key}" if self.store.prefix else key
        return urllib.parse.quote(full, safe="/")

    def url(self, key: str, query: dict[str, str]) -> str:
        """The blob's URL with ``query`` (and the SAS token when there is no key)."""
        text = urllib.parse.urlencode(sorted(query.items()))
        if self.key is None and self.sas:
            text = f"{text}&{self.sas}" if text else self.sas
        return f"{self.base}/{self.path(key)}" + (f"?{text}" if text else "")

    def source_url(self, key: str) -> str:
        """A URL the service can read ``key`` from: a read-only SAS for one hour."""
        plain = f"{self.base}/{self.path(key)}"
        if self.key is None:
            return f"{plain}?{self.sas}"
        expiry = (datetime.now(UTC) + SAS_LIFETIME).strftime("%Y-%m-%dT%H:%M:%SZ")
        full = urllib.parse.unquote(self.path(key))
        resource = f"/blob/{self.account}/{self.store.container}/{full}"
        # Service SAS, version 2020-12-06 and later: 16 fields.
        to_sign = "\n".join(["r", "", expiry, resource, "", "", "", API_VERSION, "b",
                             "", "", "", "", "", "", ""])
        sig = base64.b64encode(hmac.new(self.key, to_sign.encode(), hashlib.sha256).digest())
        query = urllib.parse.urlencode({"sv": API_VERSION, "sr": "b", "sp": "r",
                                        "se": expiry, "sig": sig.decode()})
        return f"{plain}?{query}"

    def _sign(self, method: str, url: str, headers: dict[str, str], length: int) -> None:
        """Add the Shared Key ``Authorization`` header (no-op with a SAS token)."""
        if self.key is None:
            return
        parts = urllib.parse.urlsplit(url)
        standard = [headers.get(h, "") for h in (
            "Content-Encoding", "Content-Language")] + [str(length) if length else ""] + [
            headers.get(h, "") for h in ("Content-MD5", "Content-Type", "Date",
                                         "If-Modified-Since", "If-Match", "If-None-Match",
                                         "If-Unmodified-Since", "Range")]
        ms = sorted((k.lower(), v.strip()) for k, v in headers.items()
                    if k.lower().startswith("x-ms-"))
        resource = f"/{self.account}{parts.path}"
        for name, values in sorted(urllib.parse.parse_qs(parts.query).items()):
            resource += f"\n{name.lower()}:{','.join(sorted(values))}"
        to_sign = "\n".join([method, *standard]) + "\n" + "".join(
            f"{k}:{v}\n" for k, v in ms) + resource
        assert self.key is not None
        sig = base64.b64encode(hmac.new(self.key, to_sign.encode(), hashlib.sha256).digest())
        headers["Authorization"] = f"SharedKey {self.account}:{sig.decode()}"

    def request(self, method: str, url: str, headers: dict[str, str], body: bytes,
                op: str, key: str) -> dict[str, str]:
        """Send one request; its response headers, or the caslake error for it."""
        headers = {"Content-Type": "application/octet-stream", **headers,
                   "x-ms-date": email.utils.formatdate(usegmt=True),
                   "x-ms-version": API_VERSION, "Content-Length": str(len(body))}
        self._sign(method, url, headers, len(body))
        request = urllib.request.Request(url, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as reply:
                reply.read()
                return {k.lower(): v for k, v in reply.headers.items()}
        except urllib.error.HTTPError as exc:
            code = exc.headers.get("x-ms-error-code", "") if exc.headers else ""
            raise _error(exc.code, code, op, key, self.store.uri) from None
        except (OSError, TimeoutError) as exc:  # URLError, resets, timeouts
            raise TransientStoreError(f"{op} {key!r} on {self.store.uri}: {exc}",
                                      key=key) from exc


def _error(status: int, code: str, op: str, key: str, where: str) -> CaslakeError:
    detail = f"{op} {key!r} on {where}: {status} {code}".rstrip()
    if status in (409, 412) and op == "commit":
        return AlreadyExists(detail, key=key)
    if status in (304, 412):
        return PreconditionFailed(detail, key=key)
    if status == 404:
        return NotFound(detail, key=key)
    if status in (401, 403):
        return StoreConfigError(f"{detail}: Azure refused the credentials", key=key)
    if status == 408 or status == 429 or status >= 500:
        return TransientStoreError(detail, key=key)
    return StoreError(detail, key=key)


def _split(part: ComposePart) -> list[ComposePart]:
    """A copy longer than :data:`MAX_COPY_BLOCK` as several copies."""
    if not isinstance(part, CopyFrom) or part.size <= MAX_COPY_BLOCK:
        return [part]
    return [CopyFrom(part.key, start, min(start + MAX_COPY_BLOCK, part.end), part.etag)
            for start in range(part.start, part.end, MAX_COPY_BLOCK)]


def _block_id(token: str, index: int) -> str:
    return base64.b64encode(f"{token}-{index:06d}".encode()).decode()


def _stage(client: _Client, dest: str, block: str, part: ComposePart) -> None:
    """Stage one block: copied from its source range, or uploaded."""
    query = {"comp": "block", "blockid": block}
    if isinstance(part, CopyFrom):
        headers = {"x-ms-copy-source": client.source_url(part.key),
                   "x-ms-source-range": f"bytes={part.start}-{part.end - 1}",
                   "x-ms-source-if-match": normalize_etag(part.etag)}
        try:
            client.request("PUT", client.url(dest, query), headers, b"", "copy block",
                           part.key)
        except PreconditionFailed:
            if not client.store.exists(part.key):  # If-Match on a deleted source: 412
                raise NotFound(f"compose of {dest!r}: source {part.key!r} is gone from "
                               f"{client.store.uri}", key=part.key) from None
            raise
        client.store.counters.record(COMPOSE, count=0, bytes_copied=part.size)
    else:
        client.request("PUT", client.url(dest, query), {}, part, "put block", dest)
        client.store.counters.record(COMPOSE, count=0, bytes_out=len(part))


def _commit(client: _Client, dest: str, blocks: list[str], token: str) -> str:
    body = ('<?xml version="1.0" encoding="utf-8"?><BlockList>'
            + "".join(f"<Latest>{b}</Latest>" for b in blocks) + "</BlockList>").encode()
    headers = {"If-None-Match": "*", f"x-ms-meta-{TOKEN_ATTRIBUTE}": token,
               "Content-Type": "application/xml"}
    reply = client.request("PUT", client.url(dest, {"comp": "blocklist"}), headers, body,
                           "commit", dest)
    etag = reply.get("etag")
    if not etag:
        raise StoreError(f"{client.store.uri} returned no ETag for the commit of {dest!r}",
                         key=dest)
    return normalize_etag(etag)


def compose(store: AzureBlobStore, dest: str, parts: Sequence[ComposePart]) -> str:
    """Create ``dest`` (create-only) from ``parts``; see :meth:`ObjectStore.compose`."""
    check_compose_parts(dest, parts, store.min_part_size)
    client = _Client(store)
    token = uuid.uuid4().hex
    pieces = [piece for part in parts for piece in _split(part)]
    blocks = [_block_id(token, i) for i in range(len(pieces))]
    store.counters.record(COMPOSE)
    _, errors = store.run_parallel([
        partial(store.retrier.call, partial(_stage, client, dest, block, piece))
        for block, piece in zip(blocks, pieces, strict=True)])
    if errors:
        for err in errors:  # a changed or vanished source explains the rest
            if isinstance(err, PreconditionFailed | NotFound):
                raise err
        raise errors[0]
    sent = False

    def commit() -> str:
        nonlocal sent
        try:
            return _commit(client, dest, blocks, token)
        except TransientStoreError:
            sent = True  # it may have landed
            raise
        except AlreadyExists:
            if sent:
                landed = store.landed_attribute(dest, TOKEN_ATTRIBUTE)
                if landed is not None and landed[0] == token:
                    return landed[1]
            raise

    return store.retrier.call(commit)
