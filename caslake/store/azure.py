"""Azure Blob Storage (``az://container/prefix``, ``abfs[s]://container@account.dfs.core.windows.net/path``)
built on obstore's AzureStore.

Owns what differs from S3; the requests themselves, the retry rules and the
error mapping are :class:`~caslake.store.s3.ObstoreStore`'s (the same
contract, see :mod:`caslake.store.base`):

* **Conditional writes** are Azure's own: a create is ``If-None-Match: *``, a
  compare-and-swap ``If-Match`` on the ETag; ranged reads are pinned by
  ``If-Match`` too.  Azure ETags are not content hashes: rewriting the same
  bytes gives a new ETag.
* **Configuration** (:func:`resolve_azure_settings`): ``storage_options`` first,
  then a connection string, then the ``AZURE_STORAGE_*`` environment
  variables; resolved here and passed to obstore explicitly.
* **Metadata names** must be C# identifiers on Azure, so the SHA-256 a create
  keeps is ``caslake_sha256``.
* **compose** copies ranges inside the service with Put Block From URL
  (:mod:`caslake.store.azure_blocks`), so purge splices as on S3.
"""

from __future__ import annotations

import binascii
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import obstore
from obstore.store import AzureStore as _ObstoreAzure

from caslake.errors import CaslakeError, NotFound, StoreConfigError
from caslake.store.base import HEAD, ComposePart, normalize_etag
from caslake.store.options import StorageOptions
from caslake.store.s3 import (
    ObstoreStore,
    Op,
    OptionValue,
    _as_bool,
    canonical_options,
    client_configs,
    client_numbers,
)

if TYPE_CHECKING:
    from obstore.store import AzureConfig

SCHEMES = ("az", "abfs", "abfss")

_CONTAINER_RE = re.compile(r"^[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){2,62}$")
_ACCOUNT_RE = re.compile(r"^[a-z0-9]{3,24}$")

# storage_options keys understood here (documented on StorageOptions).
_OPTION_ALIASES: dict[str, str] = {
    "account_name": "account_name",
    "account_key": "account_key",
    "sas_token": "sas_token",
    "connection_string": "connection_string",
    "endpoint_url": "endpoint_url",
    "endpoint": "endpoint_url",
    "allow_http": "allow_http",
    "max_retries": "max_retries",
    "retry_timeout": "retry_timeout",
    "connect_timeout": "connect_timeout",
    "request_timeout": "request_timeout",
}

NO_CREDENTIALS_HELP = (
    "no usable Azure credentials: set AZURE_STORAGE_ACCOUNT_NAME and "
    "AZURE_STORAGE_ACCOUNT_KEY (or AZURE_STORAGE_SAS_TOKEN, or "
    "AZURE_STORAGE_CONNECTION_STRING), or pass storage options account_name=... with "
    "account_key=... or sas_token=... (CLI: -o account_key=...)")


@dataclass(frozen=True)
class AzureSettings:
    """Fully resolved connection settings for one Azure URI."""

    container: str
    prefix: str
    account: str
    account_key: str | None
    sas_token: str | None
    endpoint_url: str | None
    allow_http: bool
    max_retries: int = 3
    retry_timeout: float = 20.0
    connect_timeout: float = 5.0
    request_timeout: float = 120.0

    def __repr__(self) -> str:  # never print a secret
        return (f"AzureSettings(container={self.container!r}, prefix={self.prefix!r}, "
                f"account={self.account!r}, account_key={'***' if self.account_key else None}, "
                f"sas_token={'***' if self.sas_token else None}, "
                f"endpoint_url={self.endpoint_url!r})")


def parse_azure_uri(uri: str) -> tuple[str, str, str | None]:
    """``az://container/prefix`` or ``abfs[s]://container@account.dfs.core.windows.net/prefix``
    -> ``(container, prefix, account or None)``; StoreConfigError if malformed."""
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme.lower() not in SCHEMES:
        raise StoreConfigError(f"not an Azure URI (az://, abfs://, abfss://): {uri!r}")
    if "?" in rest or "#" in rest:
        raise StoreConfigError(f"Azure URI {uri!r} must not carry a query or fragment")
    head, _, path = rest.partition("/")
    account: str | None = None
    if scheme.lower() == "az":
        container = head
    else:
        container, at, host = head.partition("@")
        if not at or not host:
            raise StoreConfigError(
                f"Azure URI {uri!r} must read {scheme}://container@ACCOUNT.dfs.core.windows.net/path")
        account = host.split(".", 1)[0]
        if not _ACCOUNT_RE.match(account):
            raise StoreConfigError(f"Azure URI {uri!r} has an invalid account name {account!r}")
    if not container:
        raise StoreConfigError(f"Azure URI {uri!r} names no container")
    if not _CONTAINER_RE.match(container):
        raise StoreConfigError(f"Azure URI {uri!r} has an invalid container name {container!r} "
                               "(3-63 lowercase letters, digits and single hyphens)")
    segments = [seg for seg in path.split("/") if seg]
    if any(seg in (".", "..") for seg in segments):
        raise StoreConfigError(f"Azure URI {uri!r} has a '.' or '..' segment in its path")
    return container, "/".join(segments), account


def parse_connection_string(text: str, where: str) -> dict[str, str]:
    """``Key=Value;...`` -> dict (keys as Azure spells them); StoreConfigError if malformed."""
    fields: dict[str, str] = {}
    for item in text.split(";"):
        if not item.strip():
            continue
        name, eq, value = item.partition("=")
        if not eq:
            raise StoreConfigError(f"Azure connection string for {where!r} has a field "
                                   f"without '=': {name.strip()!r}")
        fields[name.strip()] = value.strip()
    return fields


def _credentials(opts: Mapping[str, OptionValue], conn: Mapping[str, str],
                 env: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(account_key, sas_token): the storage options' pair if they give either, else
    the connection string's, else the environment's."""
    def opt(name: str) -> str | None:
        value = opts.get(name)
        return None if value is None else str(value)

    for key, sas in ((opt("account_key"), opt("sas_token")),
                     (conn.get("AccountKey"), conn.get("SharedAccessSignature")),
                     (env.get("AZURE_STORAGE_ACCOUNT_KEY"), env.get("AZURE_STORAGE_SAS_TOKEN"))):
        if key or sas:
            return key or None, (sas or "").lstrip("?") or None
    return None, None


def resolve_azure_settings(uri: str, storage_options: StorageOptions | None = None,
                           environ: Mapping[str, str] | None = None) -> AzureSettings:
    """Resolve the settings for ``uri``.

    Precedence per setting: ``storage_options`` (any alias, case-insensitive),
    then the URI's account (``abfs[s]://``), then the connection string
    (``connection_string`` option, else ``AZURE_STORAGE_CONNECTION_STRING``),
    then ``AZURE_STORAGE_ACCOUNT_NAME`` / ``AZURE_STORAGE_ACCOUNT_KEY`` /
    ``AZURE_STORAGE_SAS_TOKEN`` / ``AZURE_STORAGE_ENDPOINT``.  Credentials are
    taken as a pair (key, SAS) from the first of those that gives one; with
    none, obstore's chain (managed identity, Azure CLI) applies.
    """
    env = os.environ if environ is None else environ
    container, prefix, uri_account = parse_azure_uri(uri)
    opts = canonical_options(uri, storage_options, _OPTION_ALIASES)
    conn_text = (str(opts["connection_string"]) if "connection_string" in opts
                 else env.get("AZURE_STORAGE_CONNECTION_STRING", ""))
    conn = parse_connection_string(conn_text, uri) if conn_text else {}
    account = (str(opts.get("account_name") or "") or uri_account or conn.get("AccountName")
               or env.get("AZURE_STORAGE_ACCOUNT_NAME") or None)
    if not account:
        raise StoreConfigError(
            f"no Azure storage account for {uri!r}: set AZURE_STORAGE_ACCOUNT_NAME or pass "
            "storage option account_name=... (or write abfss://CONTAINER@ACCOUNT"
            ".dfs.core.windows.net/path)")
    key, sas = _credentials(opts, conn, env)
    if key is not None:
        try:
            binascii.a2b_base64(key.encode())
        except (binascii.Error, ValueError):
            raise StoreConfigError(
                f"the Azure account key for {uri!r} is not base64: check storage option "
                "account_key or AZURE_STORAGE_ACCOUNT_KEY") from None
    endpoint = (str(opts.get("endpoint_url") or "") or conn.get("BlobEndpoint")
                or env.get("AZURE_STORAGE_ENDPOINT") or None)
    if endpoint is not None:
        endpoint = endpoint.rstrip("/")
        if not endpoint.startswith(("http://", "https://")):
            raise StoreConfigError(
                f"endpoint_url {endpoint!r} for {uri!r} must start with http:// or https://")
    allow_http = (_as_bool("allow_http", opts["allow_http"], uri) if "allow_http" in opts
                  else bool(endpoint and endpoint.startswith("http://")))
    numbers = client_numbers(opts, uri)
    defaults = AzureSettings(container, prefix, account, None, None, None, False)
    return AzureSettings(
        container=container, prefix=prefix, account=account, account_key=key,
        sas_token=sas, endpoint_url=endpoint, allow_http=allow_http,
        max_retries=int(numbers.get("max_retries", defaults.max_retries)),
        retry_timeout=numbers.get("retry_timeout", defaults.retry_timeout),
        connect_timeout=numbers.get("connect_timeout", defaults.connect_timeout),
        request_timeout=numbers.get("request_timeout", defaults.request_timeout),
    )


# An answer that means the credentials were refused (Shared Key signature, SAS).
_REFUSED = re.compile(r"status code: 40[13]\b|AuthenticationFailed|AuthorizationFailure",
                      re.IGNORECASE)


_NOT_FOUND = re.compile(r"status code: 404\b")


class AzureBlobStore(ObstoreStore):
    """An Azure Blob container (and prefix) as a table root."""

    sha256_attribute = "caslake_sha256"
    credentials_help = NO_CREDENTIALS_HELP
    container_word = "container"

    settings: AzureSettings

    def _configure(self, uri: str, storage_options: StorageOptions | None,
                   environ: Mapping[str, str] | None) -> None:
        self.settings = resolve_azure_settings(uri, storage_options, environ)
        self.container = self.settings.container
        self.prefix = self.settings.prefix
        self.uri = f"az://{self.container}" + (f"/{self.prefix}" if self.prefix else "")

    def __repr__(self) -> str:
        return f"AzureBlobStore({self.uri!r}, account={self.settings.account!r})"

    def reopen_options(self) -> StorageOptions:
        s = self.settings
        found = {"account_name": s.account, "account_key": s.account_key,
                 "sas_token": s.sas_token, "endpoint_url": s.endpoint_url,
                 "allow_http": "true" if s.allow_http else None}
        return cast(StorageOptions, {k: v for k, v in found.items() if v is not None})

    def _make_obstore(self) -> _ObstoreAzure:
        s = self.settings
        config: AzureConfig = {"account_name": s.account, "container_name": s.container}
        if s.account_key:
            config["account_key"] = s.account_key
        if s.sas_token:
            config["sas_key"] = s.sas_token
        if s.endpoint_url:
            config["endpoint"] = s.endpoint_url
        client, retry = client_configs(s)
        try:
            return _ObstoreAzure(prefix=s.prefix or None, config=config,
                                 client_options=client, retry_config=retry)
        except Exception as exc:
            raise StoreConfigError(
                f"cannot configure Azure store for {self.uri!r}: {exc}") from exc

    def _map(self, exc: BaseException, op: Op, key: str | None) -> CaslakeError:
        """The shared mapping, with one-line errors for refused credentials and a
        missing container or account."""
        err = super()._map(exc, op, key)
        text = str(exc)
        if _REFUSED.search(text):
            return StoreConfigError(
                f"{op} {key!r} on {self.uri}: Azure refused the credentials of account "
                f"{self.settings.account!r}: check storage option account_key/sas_token "
                "or AZURE_STORAGE_ACCOUNT_KEY / AZURE_STORAGE_SAS_TOKEN", key=key)
        # A listing's 404 is the container's (or the account's): keys are never missing.
        if "ContainerNotFound" in text or (op == "list" and _NOT_FOUND.search(text)) or (
                isinstance(err, StoreConfigError) and "does not exist" in str(err)):
            return StoreConfigError(
                f"{op} {key!r} on {self.uri}: container {self.container!r} does not exist "
                f"in account {self.settings.account!r} (create it, or check the URI)", key=key)
        return err

    def compose(self, dest: str, parts: Sequence[ComposePart]) -> str:
        """Put Block From URL for the copied ranges, Put Block for the rest, one
        create-only Put Block List (see :mod:`caslake.store.azure_blocks`)."""
        from caslake.store import azure_blocks

        return azure_blocks.compose(self, dest, parts)

    def landed_attribute(self, key: str, name: str) -> tuple[str, str] | None:
        """(the metadata value ``name`` of the blob at ``key``, its ETag), or None if
        the blob is missing or has no such metadata.  One HEAD."""
        self.counters.record(HEAD)
        try:
            meta = self._call("head", key, lambda: obstore.get(
                self._store, key, options={"head": True}))
        except NotFound:
            return None
        value, tag = meta.attributes.get(name), meta.meta["e_tag"]
        return (str(value), normalize_etag(tag)) if value is not None and tag else None
