"""Google Cloud Storage (``gs://bucket/prefix``) built on the ``google-cloud-storage``
client (the JSON API; install the ``gcs`` extra).

Owns what differs from S3; the Retrier's rules, range coalescing, counting and the
create/CAS read-back logic are :class:`~caslake.store.s3.ObstoreStore`'s (this class
replaces only its single-request methods, so the contract of :mod:`caslake.store.base`
holds the same way):

* **ETags are generations.**  caslake's ETag of an object is its GCS generation
  (quoted, like every ETag).  A create sends ``ifGenerationMatch=0``, a
  compare-and-swap ``ifGenerationMatch=N``: GCS checks both, never this code.
  Ranged reads are pinned by asking for generation N; a 404 for it is told apart
  (the object changed: PreconditionFailed, or is gone: NotFound) by a HEAD.
* **Retries.**  The client library's own retries are off for every request (it
  would re-send a generation-conditioned write, and a re-sent CAS that had applied
  would read as a lost race); the Retrier retries what is safe, a 429 on a CAS
  (a refusal: nothing applied) is retried too, and any other transient failure
  of a CAS raises PutOutcomeUnknown, settled by read-back.
* **Configuration** (:func:`resolve_gcs_settings`): ``storage_options`` first,
  then ``GOOGLE_APPLICATION_CREDENTIALS`` / ``GOOGLE_CLOUD_PROJECT`` /
  ``STORAGE_EMULATOR_HOST``, then application-default credentials.
* **compose** raises StoreCapabilityUnsupported: GCS compose concatenates whole
  objects and cannot copy byte ranges, so purge writes the whole file (strategy
  ``rewrite``).
"""

from __future__ import annotations

import builtins
import json
import os
import random
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar, cast

from caslake.errors import (
    AlreadyExists,
    CaslakeError,
    NotFound,
    OptionalDependencyMissing,
    PreconditionFailed,
    StoreCapabilityUnsupported,
    StoreConfigError,
    StoreError,
    TransientStoreError,
)
from caslake.store.base import (
    DELETE,
    GET,
    GET_RANGE,
    HEAD,
    LIST,
    PUT,
    ComposePart,
    GetResult,
    IfMatch,
    Mode,
    ObjectMeta,
    PutMode,
    normalize_etag,
)
from caslake.store.options import StorageOptions
from caslake.store.s3 import (
    LIST_PAGE_SIZE,
    ObstoreStore,
    Op,
    _as_bool,
    canonical_options,
    client_numbers,
    split_bucket_uri,
)

SCHEME = "gs://"

_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")

# storage_options keys understood here (documented on StorageOptions).
_OPTION_ALIASES: dict[str, str] = {
    "service_account_path": "service_account_path",
    "google_service_account": "service_account_path",
    "google_application_credentials": "service_account_path",
    "service_account_key": "service_account_key",
    "project_id": "project_id",
    "project": "project_id",
    "endpoint_url": "endpoint_url",
    "endpoint": "endpoint_url",
    "anonymous": "anonymous",
    "max_retries": "max_retries",
    "connect_timeout": "connect_timeout",
    "request_timeout": "request_timeout",
}

NO_CREDENTIALS_HELP = (
    "no Google Cloud credentials were found: set GOOGLE_APPLICATION_CREDENTIALS to a "
    "service-account JSON file, or pass storage option service_account_path=... "
    "(CLI: -o service_account_path=...), or run `gcloud auth application-default login`")

#: A generation no object has (they are positive int64 values below this): a
#: compare-and-swap against an ETag that is not a generation is sent with it, so
#: GCS still decides (412, or 404 on a missing key) and nothing is guessed here.
_NO_GENERATION = 2**63 - 1

_T = TypeVar("_T")


class Throttled(TransientStoreError):
    """GCS answered 429 (rate limit, e.g. more than one write a second to one object):
    the request was refused, so it did not apply."""


@dataclass(frozen=True)
class GcsSettings:
    """Fully resolved connection settings for one ``gs://`` URI."""

    bucket: str
    prefix: str
    project: str | None
    endpoint_url: str | None
    anonymous: bool
    service_account_path: str | None
    service_account_key: str | None
    max_retries: int | None = None  # the Retrier's, when given (the library's are off)
    connect_timeout: float = 5.0
    request_timeout: float = 120.0

    def __repr__(self) -> str:  # never print a key
        return (f"GcsSettings(bucket={self.bucket!r}, prefix={self.prefix!r}, "
                f"project={self.project!r}, endpoint_url={self.endpoint_url!r}, "
                f"anonymous={self.anonymous}, service_account_path="
                f"{self.service_account_path!r}, service_account_key="
                f"{'***' if self.service_account_key else None})")


def parse_gcs_uri(uri: str) -> tuple[str, str]:
    """``gs://bucket/some/prefix`` -> ``("bucket", "some/prefix")``; StoreConfigError if bad."""
    return split_bucket_uri(uri, SCHEME, "GCS", _BUCKET_RE,
                            "3-222 lowercase letters, digits, '-', '_' and '.'")


def resolve_gcs_settings(uri: str, storage_options: StorageOptions | None = None,
                         environ: Mapping[str, str] | None = None) -> GcsSettings:
    """Resolve the settings for ``uri``.

    Precedence per setting: ``storage_options`` (any alias, case-insensitive),
    then the environment: ``GOOGLE_APPLICATION_CREDENTIALS`` (a service-account
    JSON file), ``GOOGLE_CLOUD_PROJECT``, ``STORAGE_EMULATOR_HOST`` (an emulator;
    it implies ``anonymous`` unless credentials are given).  With no credentials
    anywhere, application-default credentials apply when the store opens.
    """
    env = os.environ if environ is None else environ
    bucket, prefix = parse_gcs_uri(uri)
    opts = canonical_options(uri, storage_options, _OPTION_ALIASES)

    def text(name: str) -> str | None:
        value = opts.get(name)
        return None if value is None else str(value)

    key = text("service_account_key")
    path = None if key else (text("service_account_path")
                             or env.get("GOOGLE_APPLICATION_CREDENTIALS") or None)
    emulator = env.get("STORAGE_EMULATOR_HOST") or None
    endpoint = text("endpoint_url") or emulator
    if endpoint is not None:
        endpoint = endpoint.rstrip("/")
        if "://" not in endpoint:
            endpoint = f"http://{endpoint}"  # STORAGE_EMULATOR_HOST may be host:port
        if not endpoint.startswith(("http://", "https://")):
            raise StoreConfigError(
                f"endpoint_url {endpoint!r} for {uri!r} must start with http:// or https://")
    if "anonymous" in opts:
        anonymous = _as_bool("anonymous", opts["anonymous"], uri)
    else:
        anonymous = emulator is not None and "endpoint_url" not in opts and not (key or path)
    numbers = client_numbers(opts, uri)
    defaults = GcsSettings(bucket, prefix, None, None, False, None, None)
    return GcsSettings(
        bucket=bucket, prefix=prefix,
        project=text("project_id") or env.get("GOOGLE_CLOUD_PROJECT") or None,
        endpoint_url=endpoint, anonymous=anonymous,
        service_account_path=path, service_account_key=key,
        max_retries=int(numbers["max_retries"]) if "max_retries" in numbers else None,
        connect_timeout=numbers.get("connect_timeout", defaults.connect_timeout),
        request_timeout=numbers.get("request_timeout", defaults.request_timeout),
    )


def _credentials(s: GcsSettings, uri: str) -> tuple[Any, str | None]:
    """(google-auth credentials, their project) for ``s``; StoreConfigError naming what to
    set when none can be loaded."""
    import google.auth
    import google.auth.exceptions as gax
    from google.auth.credentials import AnonymousCredentials

    if s.anonymous:
        return AnonymousCredentials(), None  # type: ignore[no-untyped-call]
    if s.service_account_key is not None:
        try:
            return _from_info(json.loads(s.service_account_key))
        except (ValueError, TypeError, KeyError, gax.GoogleAuthError) as exc:
            raise StoreConfigError(
                f"storage option service_account_key for {uri!r} is not a service-account "
                f"JSON key ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
            ) from None
    if s.service_account_path is not None:
        try:
            with open(s.service_account_path, encoding="utf-8") as f:
                info = json.load(f)
            creds, project = _from_info(info)
        except (OSError, ValueError, TypeError, KeyError, gax.GoogleAuthError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise StoreConfigError(
                f"cannot load Google credentials for {uri!r} from {s.service_account_path!r} "
                f"(storage option service_account_path or GOOGLE_APPLICATION_CREDENTIALS): "
                f"{first}") from None
        return creds, project
    try:
        creds, project = google.auth.default()
    except gax.DefaultCredentialsError:
        raise StoreConfigError(f"opening {uri!r}: {NO_CREDENTIALS_HELP}") from None
    return creds, project


def _from_info(info: Any) -> tuple[Any, str | None]:
    """Credentials from the parsed JSON of a service-account key (or of an
    ``authorized_user`` file, as ``gcloud auth application-default login`` writes)."""
    from google.oauth2 import credentials as user_credentials
    from google.oauth2 import service_account

    kind = info.get("type") if isinstance(info, dict) else None
    if kind == "service_account":
        creds = service_account.Credentials.from_service_account_info(  # type: ignore[no-untyped-call]
            info, scopes=["https://www.googleapis.com/auth/devstorage.read_write"])
        return creds, info.get("project_id")
    if kind == "authorized_user":
        user = user_credentials.Credentials.from_authorized_user_info(info)  # type: ignore[no-untyped-call]
        return user, info.get("quota_project_id")
    raise ValueError(f"type {kind!r} is neither 'service_account' nor 'authorized_user'")


def _is_transport_failure(exc: BaseException) -> bool:
    """A connection failure, timeout or cut body (no answer, or half of one)."""
    import google.auth.exceptions as gax
    import requests

    return isinstance(exc, requests.exceptions.ConnectionError | requests.exceptions.Timeout
                      | requests.exceptions.ChunkedEncodingError | gax.TransportError
                      | ConnectionError | TimeoutError)


def map_gcs_error(exc: BaseException, *, op: Op, key: str | None, where: str,
                  bucket: str) -> CaslakeError:
    """The caslake error for an exception raised by a google-cloud-storage call.

    412 is AlreadyExists on a create and PreconditionFailed elsewhere; 404 on a
    write or a listing is the bucket's (keys are never missing there); 429 is
    :class:`Throttled`; 5xx, connection failures and timeouts are transient;
    401/403 and unusable credentials are one-line StoreConfigErrors.
    """
    import google.api_core.exceptions as gx
    import google.auth.exceptions as gax
    from google.resumable_media import DataCorruption

    if isinstance(exc, CaslakeError):
        return exc
    detail = f"{op} {key!r} on {where}" if key is not None else f"{op} on {where}"
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    message = f"{detail}: {first}"
    if isinstance(exc, gax.DefaultCredentialsError):
        return StoreConfigError(f"{detail}: {NO_CREDENTIALS_HELP}", key=key)
    if isinstance(exc, gax.RefreshError | gx.Unauthorized | gx.Forbidden):
        return StoreConfigError(
            f"{detail}: GCS refused the credentials ({first}): check storage option "
            "service_account_path/service_account_key or GOOGLE_APPLICATION_CREDENTIALS, "
            f"and that they may use bucket {bucket!r}", key=key)
    if isinstance(exc, gx.NotFound):
        if op in ("put", "put_create", "put_cas", "list"):
            return StoreConfigError(
                f"{detail}: bucket {bucket!r} does not exist or is not reachable "
                "(create it, or check the URI)", key=key)
        return NotFound(message, key=key)
    if isinstance(exc, gx.PreconditionFailed | gx.Conflict):
        if op == "put_create":
            return AlreadyExists(message, key=key)
        return PreconditionFailed(message, key=key)
    if isinstance(exc, gx.TooManyRequests):
        return Throttled(message, key=key)
    if isinstance(exc, gx.ServerError | DataCorruption) or (
            isinstance(exc, gx.GoogleAPICallError) and exc.code == 408):
        return TransientStoreError(message, key=key)
    if _is_transport_failure(exc):
        return TransientStoreError(message, key=key)
    return StoreError(message, key=key)


class GcsStore(ObstoreStore):
    """A ``gs://bucket/prefix`` table root on Google Cloud Storage (or an emulator)."""

    sha256_attribute = "caslake_sha256"
    credentials_help = NO_CREDENTIALS_HELP

    settings: GcsSettings

    def _configure(self, uri: str, storage_options: StorageOptions | None,
                   environ: Mapping[str, str] | None) -> None:
        self.settings = resolve_gcs_settings(uri, storage_options, environ)
        self.bucket = self.settings.bucket
        self.prefix = self.settings.prefix
        self.uri = f"{SCHEME}{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")

    def __repr__(self) -> str:
        return f"GcsStore({self.uri!r}, endpoint={self.settings.endpoint_url!r})"

    def reopen_options(self) -> StorageOptions:
        """(Application-default credentials are not passed: each process finds its own.)"""
        s = self.settings
        found = {"endpoint_url": s.endpoint_url, "project_id": s.project,
                 "service_account_path": s.service_account_path,
                 "service_account_key": s.service_account_key,
                 "anonymous": "true" if s.anonymous else None}
        return cast(StorageOptions, {k: v for k, v in found.items() if v is not None})

    def _make_obstore(self) -> Any:
        """The google-cloud-storage bucket every request goes to (the name is the base
        class's: this store does not use obstore)."""
        try:
            from google.auth.transport.requests import AuthorizedSession
            from google.cloud import storage
            from requests.adapters import HTTPAdapter
        except ImportError:
            raise OptionalDependencyMissing(
                "gs:// tables need the google-cloud-storage client: "
                "pip install 'caslake[gcs]'", package="google-cloud-storage") from None
        s = self.settings
        creds, creds_project = _credentials(s, self.uri)
        session = AuthorizedSession(creds)  # type: ignore[no-untyped-call]
        # One pooled connection per range thread, and no retries below the library.
        adapter = HTTPAdapter(pool_connections=4, pool_maxsize=self.max_workers * 4,
                              max_retries=0)
        session.mount("https://", adapter)
        session.mount("http://", adapter)
        options = {"api_endpoint": s.endpoint_url} if s.endpoint_url else None
        try:
            self._client = storage.Client(
                project=s.project or creds_project or "caslake-unset", credentials=creds,
                _http=session, client_options=options)
        except Exception as exc:
            raise StoreConfigError(
                f"cannot configure GCS store for {self.uri!r}: {exc}") from exc
        self._timeout = (s.connect_timeout, s.request_timeout)
        if s.max_retries is not None:
            self.retrier.policy = replace(self.retrier.policy, attempts=s.max_retries + 1)
        return self._client.bucket(s.bucket)

    def _map(self, exc: BaseException, op: Op, key: str | None) -> CaslakeError:
        return map_gcs_error(exc, op=op, key=key, where=self.uri, bucket=self.bucket)

    def _name(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    @staticmethod
    def _etag(generation: int | None, key: str, where: str) -> str:
        if not generation:
            raise StoreError(f"{where} returned no generation for {key!r}", key=key)
        return normalize_etag(str(generation))

    # --- reads ------------------------------------------------------------------

    def _get_once(self, key: str) -> GetResult:
        blob = self._store.blob(self._name(key))
        received = 0
        try:
            data: bytes = self._call("get", key, lambda: blob.download_as_bytes(
                retry=None, timeout=self._timeout))
            received = len(data)
        finally:
            self.counters.record(GET, bytes_in=received)
        return GetResult(data, self._etag(blob.generation, key, self.uri))

    def _get_range(self, key: str, start: int, end: int,
                   etag: str | None) -> tuple[memoryview, str | None]:
        generation = _generation(etag) if etag is not None else None
        if etag is not None and generation is None:
            raise PreconditionFailed(
                f"{etag} is not a generation of {key!r} in {self.uri}", key=key)
        blob = self._store.blob(self._name(key), generation=generation)
        received = 0
        try:
            data: bytes = self._call("get_range", key, lambda: blob.download_as_bytes(
                start=start, end=end - 1, checksum=None, retry=None, timeout=self._timeout))
            received = len(data)
        except NotFound:
            if generation is None:
                raise
            # That generation is gone: the object changed, or was deleted.
            self._head_once(key)
            raise PreconditionFailed(
                f"object {key!r} in {self.uri} is no longer generation {generation}",
                key=key) from None
        finally:
            self.counters.record(GET_RANGE, bytes_in=received)
        return memoryview(data), self._etag(blob.generation, key, self.uri)

    def _head_once(self, key: str) -> ObjectMeta:
        self.counters.record(HEAD)
        blob = self._call("head", key, lambda: self._store.get_blob(
            self._name(key), retry=None, timeout=self._timeout))
        if blob is None:
            raise NotFound(f"head {key!r} on {self.uri}: no such object", key=key)
        return ObjectMeta(key, int(blob.size), self._etag(blob.generation, key, self.uri),
                          blob.updated)

    def _list_once(self, prefix: str) -> builtins.list[ObjectMeta]:
        """Every object under the root whose key starts with ``prefix`` (GCS lists by
        plain prefix); one LIST per page of up to 1000 objects."""
        root = f"{self.prefix}/" if self.prefix else ""
        pages = 0
        found: list[ObjectMeta] = []
        try:
            listing = self._client.list_blobs(
                self._store, prefix=root + prefix, page_size=LIST_PAGE_SIZE, retry=None,
                timeout=self._timeout)
            for page in listing.pages:  # each page is one request, sent as it is reached
                pages += 1
                found.extend(ObjectMeta(blob.name[len(root):], int(blob.size),
                                        normalize_etag(str(blob.generation)), blob.updated)
                             for blob in page)
        except Exception as exc:
            raise self._map(exc, "list", prefix) from exc
        finally:
            self.counters.record(LIST, count=max(1, pages))
        return found

    # --- writes -----------------------------------------------------------------

    def _put_once(self, key: str, data: bytes, mode: Mode, digest: str | None) -> str:
        op: Op
        match: int | None
        if mode is PutMode.CREATE:
            op, match = "put_create", 0
        elif isinstance(mode, IfMatch):
            op, match = "put_cas", _generation(mode.etag) or _NO_GENERATION
        else:
            op, match = "put", None
        if op == "put_cas":  # a 429 refused it: safe to send again
            return self.retry_throttled(lambda: self._send(key, data, op, match, None))
        return self._send(key, data, op, match, digest)

    def _send(self, key: str, data: bytes, op: Op, match: int | None,
              digest: str | None) -> str:
        """One upload request (the library's retries off)."""
        blob = self._store.blob(self._name(key))
        if digest:
            blob.metadata = {self.sha256_attribute: digest}
        self.counters.record(PUT, bytes_out=len(data))
        try:
            blob.upload_from_string(data, content_type="application/octet-stream",
                                    if_generation_match=match, retry=None,
                                    timeout=self._timeout)
        except Exception as exc:
            err = self._map(exc, op, key)
            if op == "put_cas" and isinstance(err, PreconditionFailed):
                err = self._classify_failed_cas(key, err)
            raise err from exc
        return self._etag(blob.generation, key, self.uri)

    def retry_throttled(self, fn: Callable[[], _T]) -> _T:
        """``fn()``, sent again with jittered backoff while GCS answers 429."""
        policy = self.retrier.policy
        for attempt in range(1, max(1, policy.attempts) + 1):
            try:
                return fn()
            except Throttled:
                if attempt == policy.attempts:
                    raise
                time.sleep(random.uniform(0, min(policy.cap_s, policy.base_s * 2 ** attempt)))
        raise AssertionError("unreachable")

    def _own_landed_create(self, key: str, data: bytes, digest: str) -> str | None:
        """The ETag of the object at ``key`` if ``data`` created it (its metadata holds
        our SHA-256), else None."""
        self.counters.record(HEAD)
        blob = self._call("head", key, lambda: self._store.get_blob(
            self._name(key), retry=None, timeout=self._timeout))
        if blob is None:
            return None
        theirs = (blob.metadata or {}).get(self.sha256_attribute)
        if theirs is not None:
            return self._etag(blob.generation, key, self.uri) if theirs == digest else None
        if int(blob.size) != len(data):
            return None
        current = self._get_once(key)
        return current.etag if current.data == data else None

    def _delete_once(self, key: str) -> None:
        self.counters.record(DELETE)
        try:
            self._store.blob(self._name(key)).delete(retry=None, timeout=self._timeout)
        except Exception as exc:
            err = self._map(exc, "delete", key)
            if isinstance(err, NotFound):
                return
            raise err from exc

    @property
    def range_copy(self) -> str:
        return "none"

    def compose(self, dest: str, parts: Sequence[ComposePart]) -> str:
        """GCS compose joins whole objects and cannot copy byte ranges: purge then
        uploads the whole new file (strategy ``rewrite``)."""
        raise StoreCapabilityUnsupported(
            f"compose of {dest!r} on {self.uri}: GCS cannot copy byte ranges server-side",
            key=dest)


def _generation(etag: str) -> int | None:
    """The generation an ETag names, or None if it names none."""
    text = etag.strip().strip('"')
    return int(text) if text.isdigit() and 0 < int(text) < _NO_GENERATION else None
