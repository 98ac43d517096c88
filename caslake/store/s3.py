"""S3-compatible object store (``s3://bucket/prefix``) built on obstore.

Owns everything caslake does over HTTP against AWS S3, MinIO, R2, moto...:

* **Configuration** (:func:`resolve_s3_settings`): ``storage_options`` first,
  then the standard ``AWS_*`` environment variables, resolved here and passed
  to obstore explicitly, so the effective settings do not depend on what
  obstore happens to read by itself.  Static credentials are handed to obstore
  through a credential provider, so a stray ``AWS_SESSION_TOKEN`` in the
  environment can never be mixed with keys from ``storage_options``.
* **Requests** go through obstore (Rust, releases the GIL).  Its retry policy
  is bounded (3 retries, 20 s budget, jittered exponential backoff); it
  retries 5xx answers of every request, but timeouts and connection failures
  (a reset, a lost reply) only of requests it deems idempotent: GET, HEAD,
  LIST and unconditional PUT -- not a create-only or compare-and-swap PUT, nor
  the bulk-delete POST.  So every call here also runs through a
  :class:`~caslake.store.retry.Retrier`, which retries what is safe: creates
  (recognising our own landed object by the SHA-256 kept in its
  ``x-amz-meta-caslake-sha256`` metadata), deletes and reads; and turns an
  ambiguous compare-and-swap into :class:`~caslake.errors.PutOutcomeUnknown`
  instead of retrying it (docs/store-client.md, "Retries").
* **Error mapping**: :func:`map_obstore_error` is the one place where obstore
  exceptions become caslake errors.
* **Counting**: every request issued here is recorded once in ``counters``
  (a request obstore transparently re-sends after a transient failure still
  counts once; a retry by the Retrier counts again).
* A lazily created boto3 client (:meth:`S3Store.boto3_client`) is kept for
  the multipart work obstore does not expose; it is not used on the hot path.
  :meth:`S3Store.prepare_compose` creates it on a store thread ahead of use.

Keys are relative to the URI's prefix.
"""

from __future__ import annotations

import builtins
import hashlib
import math
import os
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, cast

import obstore
import obstore.exceptions as obx
from obstore.store import S3Store as _ObstoreS3

from caslake.errors import (
    AlreadyExists,
    CaslakeError,
    NotFound,
    PreconditionFailed,
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
    MultipartUpload,
    ObjectMeta,
    ObjectStore,
    PutMode,
    StoreCounters,
    normalize_etag,
)
from caslake.store.keys import check_key, check_prefix
from caslake.store.options import StorageOptions
from caslake.store.ranges import DEFAULT_MAX_REQUEST, S3_MAX_GAP, plan_ranges, slice_results
from caslake.store.retry import DEFAULT_RETRY, Retrier, RetryPolicy

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from obstore import GetOptions
    from obstore.store import ClientConfig, RetryConfig, S3Config, S3Credential

SCHEME = "s3://"
#: Keys S3 returns per ListObjectsV2 page (obstore does not change the default).
LIST_PAGE_SIZE = 1000
#: Parallel range requests per store.
DEFAULT_MAX_WORKERS = 16
#: User metadata (``x-amz-meta-caslake-sha256``) holding the SHA-256 of a created
#: object's body, so a retried create can recognise its own landed object by a HEAD.
SHA256_ATTRIBUTE = "caslake-sha256"

_BUCKET_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{1,254}$")

# storage_options keys understood here, with their aliases (documented on StorageOptions).
_OPTION_ALIASES: dict[str, str] = {
    "endpoint_url": "endpoint_url",
    "endpoint": "endpoint_url",
    "aws_endpoint_url": "endpoint_url",
    "region": "region",
    "region_name": "region",
    "aws_region": "region",
    "access_key_id": "access_key_id",
    "aws_access_key_id": "access_key_id",
    "secret_access_key": "secret_access_key",
    "aws_secret_access_key": "secret_access_key",
    "session_token": "session_token",
    "aws_session_token": "session_token",
    "allow_http": "allow_http",
    "virtual_hosted_style": "virtual_hosted_style",
    "virtual_hosted_style_request": "virtual_hosted_style",
    "max_retries": "max_retries",
    "retry_timeout": "retry_timeout",
    "connect_timeout": "connect_timeout",
    "request_timeout": "request_timeout",
}

OptionValue = str | bool | int | float


@dataclass(frozen=True)
class S3Settings:
    """Fully resolved connection settings for one ``s3://`` URI."""

    bucket: str
    prefix: str
    endpoint_url: str | None
    region: str
    access_key_id: str | None
    secret_access_key: str | None
    session_token: str | None
    allow_http: bool
    virtual_hosted_style: bool
    max_retries: int = 3
    retry_timeout: float = 20.0  # seconds, whole retry budget of one request
    connect_timeout: float = 5.0
    request_timeout: float = 120.0  # whole request incl. body (64 MiB ranges)

    def __repr__(self) -> str:  # never print the secret
        secret = "***" if self.secret_access_key else None
        return (f"S3Settings(bucket={self.bucket!r}, prefix={self.prefix!r}, "
                f"endpoint_url={self.endpoint_url!r}, region={self.region!r}, "
                f"access_key_id={self.access_key_id!r}, secret_access_key={secret!r}, "
                f"allow_http={self.allow_http}, virtual_hosted_style={self.virtual_hosted_style})")


def split_bucket_uri(uri: str, scheme: str, name: str, bucket_re: re.Pattern[str],
                     rule: str = "") -> tuple[str, str]:
    """``{scheme}bucket/some/prefix`` -> ``("bucket", "some/prefix")`` for a store
    called ``name`` ("S3", "GCS") whose bucket names match ``bucket_re`` (``rule``
    says how, in the error); StoreConfigError naming the URI if it is malformed."""
    if not uri.startswith(scheme):
        raise StoreConfigError(f"not an {scheme} URI: {uri!r}" if name == "S3"
                               else f"not a {scheme} URI: {uri!r}")
    rest = uri[len(scheme):]
    if "?" in rest or "#" in rest:
        raise StoreConfigError(f"{name} URI {uri!r} must not carry a query or fragment")
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise StoreConfigError(
            f"{name} URI {uri!r} names no bucket (expected {scheme}bucket/prefix)")
    if not bucket_re.match(bucket):
        raise StoreConfigError(f"{name} URI {uri!r} has an invalid bucket name {bucket!r}"
                               + (f" ({rule})" if rule else ""))
    segments = [seg for seg in prefix.split("/") if seg]
    if any(seg in (".", "..") for seg in segments):
        raise StoreConfigError(f"{name} URI {uri!r} has a '.' or '..' segment in its prefix")
    return bucket, "/".join(segments)


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` -> ``("bucket", "some/prefix")``; StoreConfigError if bad."""
    return split_bucket_uri(uri, SCHEME, "S3", _BUCKET_RE)


def _as_bool(name: str, value: OptionValue, uri: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise StoreConfigError(f"storage option {name}={value!r} for {uri!r} is not a boolean")


def _as_number(name: str, value: OptionValue, uri: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise StoreConfigError(
            f"storage option {name}={value!r} for {uri!r} is not a number") from None
    if number < 0 or math.isnan(number):
        raise StoreConfigError(f"storage option {name}={value!r} for {uri!r} must be >= 0")
    return number


def canonical_options(uri: str, storage_options: StorageOptions | None,
                      aliases: Mapping[str, str]) -> dict[str, OptionValue]:
    """``storage_options`` under their canonical names (keys matched case-insensitively
    through ``aliases``); a value of None or "" is left out.  StoreConfigError names
    an unknown key and lists the known ones."""
    opts: dict[str, OptionValue] = {}
    given: Mapping[str, OptionValue | None] = cast(
        "Mapping[str, OptionValue | None]", storage_options or {})
    for raw_name, value in given.items():
        canonical = aliases.get(raw_name.lower())
        if canonical is None:
            raise StoreConfigError(
                f"unknown storage option {raw_name!r} for {uri!r}; known: "
                f"{', '.join(sorted(set(aliases)))}"
            )
        if value is None or value == "":
            continue
        opts[canonical] = value
    return opts


#: The client settings every obstore-backed store takes (storage option -> number).
CLIENT_NUMBERS = ("max_retries", "retry_timeout", "connect_timeout", "request_timeout")


def client_numbers(opts: Mapping[str, OptionValue], uri: str) -> dict[str, float]:
    """The :data:`CLIENT_NUMBERS` given in ``opts``, checked (>= 0)."""
    return {name: _as_number(name, opts[name], uri) for name in CLIENT_NUMBERS if name in opts}


class ClientSettings(Protocol):
    """The HTTP client settings every obstore-backed store's settings carry."""

    @property
    def allow_http(self) -> bool: ...
    @property
    def max_retries(self) -> int: ...
    @property
    def retry_timeout(self) -> float: ...
    @property
    def connect_timeout(self) -> float: ...
    @property
    def request_timeout(self) -> float: ...


def client_configs(s: ClientSettings) -> tuple[ClientConfig, RetryConfig]:
    """obstore's client options and retry policy for ``s`` (bounded, jittered)."""
    client: ClientConfig = {
        "allow_http": s.allow_http,
        "connect_timeout": timedelta(seconds=s.connect_timeout),
        "timeout": timedelta(seconds=s.request_timeout),
    }
    retry: RetryConfig = {
        "max_retries": s.max_retries,
        "retry_timeout": timedelta(seconds=s.retry_timeout),
        "backoff": {
            "init_backoff": timedelta(milliseconds=100),
            "max_backoff": timedelta(seconds=2),
            "base": 2,
        },
    }
    return client, retry


def resolve_s3_settings(uri: str, storage_options: StorageOptions | None = None,
                        environ: Mapping[str, str] | None = None) -> S3Settings:
    """Resolve the settings for ``uri`` from ``storage_options``, then the environment.

    Precedence per setting: ``storage_options`` (any alias, case-insensitive
    keys), then the environment: ``AWS_ENDPOINT_URL_S3``/``AWS_ENDPOINT_URL``,
    ``AWS_REGION``/``AWS_DEFAULT_REGION`` (else ``us-east-1``).  Credentials
    are taken as a group: if ``storage_options`` gives an access key, the
    secret and token come from ``storage_options`` only; otherwise all three
    come from ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/
    ``AWS_SESSION_TOKEN``; with none, obstore's own credential chain
    (instance profile, web identity, ECS) applies.  ``allow_http`` defaults
    to whether the endpoint is ``http://``; ``virtual_hosted_style`` defaults
    to False with an explicit endpoint and True on AWS itself.
    Unknown option keys raise StoreConfigError.
    """
    env = os.environ if environ is None else environ
    bucket, prefix = parse_s3_uri(uri)
    opts = canonical_options(uri, storage_options, _OPTION_ALIASES)

    def text(name: str) -> str | None:
        value = opts.get(name)
        return None if value is None else str(value)

    endpoint = (text("endpoint_url") or env.get("AWS_ENDPOINT_URL_S3")
                or env.get("AWS_ENDPOINT_URL") or None)
    if endpoint is not None:
        endpoint = endpoint.rstrip("/")
        if not endpoint.startswith(("http://", "https://")):
            raise StoreConfigError(
                f"endpoint_url {endpoint!r} for {uri!r} must start with http:// or https://")
    region = (text("region") or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
              or "us-east-1")

    if "access_key_id" in opts:
        key_id, secret, token = (text("access_key_id"), text("secret_access_key"),
                                 text("session_token"))
    else:
        if "secret_access_key" in opts:
            raise StoreConfigError(
                f"storage options for {uri!r} give secret_access_key without access_key_id")
        key_id = env.get("AWS_ACCESS_KEY_ID") or None
        secret = env.get("AWS_SECRET_ACCESS_KEY") or None
        token = (env.get("AWS_SESSION_TOKEN") or None) if key_id else None
        if "session_token" in opts:
            token = text("session_token")
    if (key_id is None) != (secret is None):
        raise StoreConfigError(
            f"incomplete S3 credentials for {uri!r}: need both access key id and secret")

    allow_http = (_as_bool("allow_http", opts["allow_http"], uri) if "allow_http" in opts
                  else bool(endpoint and endpoint.startswith("http://")))
    if endpoint and endpoint.startswith("http://") and not allow_http:
        raise StoreConfigError(
            f"endpoint {endpoint!r} for {uri!r} is plain http but allow_http is false")
    if "virtual_hosted_style" in opts:
        virtual = _as_bool("virtual_hosted_style", opts["virtual_hosted_style"], uri)
    else:
        virtual = endpoint is None and "." not in bucket

    numbers = client_numbers(opts, uri)
    defaults = S3Settings(bucket, prefix, None, region, None, None, None, False, False)
    return S3Settings(
        bucket=bucket,
        prefix=prefix,
        endpoint_url=endpoint,
        region=region,
        access_key_id=key_id,
        secret_access_key=secret,
        session_token=token,
        allow_http=allow_http,
        virtual_hosted_style=virtual,
        max_retries=int(numbers.get("max_retries", defaults.max_retries)),
        retry_timeout=numbers.get("retry_timeout", defaults.retry_timeout),
        connect_timeout=numbers.get("connect_timeout", defaults.connect_timeout),
        request_timeout=numbers.get("request_timeout", defaults.request_timeout),
    )


# --- error mapping ------------------------------------------------------------

# obstore reports every failure it could not classify as GenericError; these
# markers in its report identify the transient ones it has already retried
# (5xx answers, throttling, timeouts, connection failures).
_TRANSIENT_MARKERS = re.compile(
    r"status code: 5\d\d|SlowDown|RequestTimeout|after \d+ retries|"
    r"kind: (?:Timeout|Connect|Request|Interrupted|Decode|Body)\b|"
    r"error sending request|timed out|connection (?:reset|refused|closed|aborted)|broken pipe",
    re.IGNORECASE,
)

# obstore's credential chain ends at the EC2 instance metadata service; when it
# fails there, no credentials were configured anywhere (its report is a 20-line
# debug dump, so the user gets one line saying what to set instead).
_NO_CREDENTIALS = re.compile(r"169\.254\.169\.254|/latest/api/token|"
                             r"(?:no|missing|failed to (?:load|get|fetch)) credentials",
                             re.IGNORECASE)
NO_CREDENTIALS_HELP = (
    "no AWS credentials were found: pass storage options access_key_id=... and "
    "secret_access_key=... (CLI: -o access_key_id=... -o secret_access_key=...), or set "
    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (plus AWS_SESSION_TOKEN for temporary "
    "keys), or AWS_PROFILE / AWS_WEB_IDENTITY_TOKEN_FILE for a profile or role")

Op = Literal["get", "get_range", "head", "list", "delete", "put", "put_create", "put_cas"]


def map_obstore_error(exc: BaseException, *, op: Op, key: str | None,
                      where: str, credentials_help: str = NO_CREDENTIALS_HELP,
                      container: str = "bucket") -> CaslakeError:
    """The caslake error for an exception raised by an obstore call.

    ``op`` says which call failed, because the same obstore error means
    different things in different calls: a 409/AlreadyExists on a
    compare-and-swap is a lost race (PreconditionFailed); a NotFound on an
    unconditional put means the bucket is missing (StoreConfigError).  A
    PreconditionError on ``put_cas`` is returned as PreconditionFailed; the
    caller settles "changed" versus "missing" with a HEAD.  ``credentials_help``
    and ``container`` word the one-line errors for the backend (S3 by default).
    """
    if isinstance(exc, CaslakeError):
        return exc
    detail = f"{op} {key!r} on {where}" if key is not None else f"{op} on {where}"
    if _NO_CREDENTIALS.search(str(exc)):
        return StoreConfigError(f"{detail}: {credentials_help}", key=key)
    message = f"{detail}: {exc}"
    if isinstance(exc, FileNotFoundError | obx.NotFoundError):
        if op in ("put", "put_create"):
            return StoreConfigError(
                f"{detail}: the {container} does not exist or is not reachable ({exc})",
                key=key)
        return NotFound(message, key=key)
    if isinstance(exc, obx.AlreadyExistsError):
        if op == "put_cas":
            return PreconditionFailed(message, key=key)
        return AlreadyExists(message, key=key)
    if isinstance(exc, obx.PreconditionError):
        if op == "put_create":  # If-None-Match answered 412
            return AlreadyExists(message, key=key)
        return PreconditionFailed(message, key=key)
    if isinstance(exc, obx.PermissionDeniedError | obx.UnauthenticatedError
                  | obx.UnknownConfigurationKeyError | obx.NotSupportedError | PermissionError):
        return StoreConfigError(message, key=key)
    if isinstance(exc, obx.InvalidPathError):
        return StoreError(message, key=key)
    if isinstance(exc, TimeoutError | ConnectionError):
        return TransientStoreError(message, key=key)
    if isinstance(exc, obx.BaseError | OSError):
        if _TRANSIENT_MARKERS.search(str(exc)):
            return TransientStoreError(message, key=key)
        return StoreError(message, key=key)
    if isinstance(exc, ValueError | TypeError):
        return StoreConfigError(message, key=key)
    return StoreError(message, key=key)


_T = TypeVar("_T")

# One boto3 session for the process: a session loads botocore's S3 model (~0.2 s
# of JSON parsing) and keeps it, so only the first store's client pays for it.
# Sessions are not thread-safe; clients made from one are, so creation is locked.
# (See _new_boto3_client for stores whose credentials are not explicit.)
_BOTO3_SESSION: Any = None
_BOTO3_LOCK = threading.Lock()


def _static_credentials(settings: S3Settings) -> Callable[[], S3Credential]:
    credential: S3Credential = {
        "access_key_id": settings.access_key_id or "",
        "secret_access_key": settings.secret_access_key or "",
        "token": settings.session_token,
        "expires_at": None,
    }

    def provide() -> S3Credential:
        return credential

    return provide


class ObstoreStore(ObjectStore):
    """What every obstore-backed store shares (S3 here, Azure Blob in
    :mod:`caslake.store.azure`): reads pinned by ETag, create-only and
    compare-and-swap puts, listing, deletes, the Retrier's rules and the
    counting described in the module docstring.  A subclass resolves its
    settings and sets :attr:`uri` in :meth:`_configure` and builds the obstore
    store in :meth:`_make_obstore`."""

    #: User-metadata name of the SHA-256 a create keeps (see ``_own_landed_create``).
    sha256_attribute = SHA256_ATTRIBUTE
    #: One line saying which credentials to set, for an error that found none.
    credentials_help = NO_CREDENTIALS_HELP
    #: What the store's top-level namespace is called ("bucket", "container").
    container_word = "bucket"
    _store: Any

    def __init__(self, uri: str, storage_options: StorageOptions | None = None, *,
                 environ: Mapping[str, str] | None = None, max_gap: int = S3_MAX_GAP,
                 max_request: int = DEFAULT_MAX_REQUEST,
                 max_workers: int = DEFAULT_MAX_WORKERS,
                 retry_policy: RetryPolicy = DEFAULT_RETRY,
                 sleep: Callable[[float], None] | None = None) -> None:
        self._configure(uri, storage_options, environ)
        self.counters = StoreCounters()
        self.max_gap = max_gap
        self.max_request = max_request
        self.max_workers = max_workers
        self.retrier = (Retrier(retry_policy) if sleep is None
                        else Retrier(retry_policy, sleep=sleep))
        self._pool: ThreadPoolExecutor | None = None
        self._lazy_lock = threading.Lock()
        self._store = self._make_obstore()

    def _configure(self, uri: str, storage_options: StorageOptions | None,
                   environ: Mapping[str, str] | None) -> None:
        """Resolve the settings for ``uri``; set ``uri`` and ``prefix``."""
        raise NotImplementedError

    def _make_obstore(self) -> Any:
        """The obstore store every request goes to."""
        raise NotImplementedError

    def _where(self) -> str:
        return self.uri

    def reopen_options(self) -> StorageOptions:
        """Storage options that open this store again from :attr:`uri` in another
        process (Spark executors): the settings it resolved, secrets included."""
        raise NotImplementedError

    def _map(self, exc: BaseException, op: Op, key: str | None) -> CaslakeError:
        return map_obstore_error(exc, op=op, key=key, where=self._where(),
                                 credentials_help=self.credentials_help,
                                 container=self.container_word)

    def _call(self, op: Op, key: str | None, fn: Callable[[], _T]) -> _T:
        try:
            return fn()
        except Exception as exc:
            raise self._map(exc, op, key) from exc

    def _executor(self) -> ThreadPoolExecutor:
        with self._lazy_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.max_workers,
                                                thread_name_prefix="caslake-store")
            return self._pool

    def close(self) -> None:
        """Stop the range-request threads (the store stays usable; they restart lazily)."""
        with self._lazy_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def run_parallel(self, calls: Sequence[Callable[[], _T]]
                     ) -> tuple[list[_T], list[BaseException]]:
        """Run ``calls`` on the store's threads; their results in order, and every error
        (all calls finish before this returns, so none is left running)."""
        futures = [self._executor().submit(call) for call in calls]
        results: list[_T] = []
        errors: list[BaseException] = []
        for fut in futures:
            try:
                results.append(fut.result())
            except BaseException as exc:
                errors.append(exc)
        return results, errors

    # --- reads ------------------------------------------------------------------

    def get(self, key: str) -> GetResult:
        check_key(key)
        return self.retrier.call(lambda: self._get_once(key))

    def _get_once(self, key: str) -> GetResult:
        received = 0
        try:
            result = self._call("get", key, lambda: obstore.get(self._store, key))
            data = self._call("get", key, lambda: bytes(result.bytes()))
            received = len(data)
        finally:
            self.counters.record(GET, bytes_in=received)
        etag = result.meta["e_tag"]
        if not etag:
            raise StoreError(f"{self.uri} returned no ETag for {key!r}", key=key)
        return GetResult(data, normalize_etag(etag))

    def _get_range(self, key: str, start: int, end: int,
                   etag: str | None) -> tuple[memoryview, str | None]:
        received = 0
        try:
            options: GetOptions = {"range": (start, end)}
            if etag is not None:
                options["if_match"] = etag
            result = self._call("get_range", key,
                                lambda: obstore.get(self._store, key, options=options))
            payload = self._call("get_range", key, lambda: memoryview(result.bytes()))
            received = len(payload)
        finally:
            self.counters.record(GET_RANGE, bytes_in=received)
        tag = result.meta["e_tag"]
        return payload, normalize_etag(tag) if tag else None

    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]], *,
                   etag: str | None = None) -> list[bytes]:
        check_key(key)
        requests = plan_ranges(ranges, max_gap=self.max_gap, max_request=self.max_request)
        if not requests:
            return [b""] * len(ranges)
        pinned = normalize_etag(etag) if etag is not None else None
        def one(start: int, end: int) -> tuple[memoryview, str | None]:
            return self.retrier.call(lambda: self._get_range(key, start, end, pinned))

        if len(requests) == 1:
            answers = [one(requests[0].start, requests[0].end)]
        else:
            answers, errors = self.run_parallel(
                [partial(one, r.start, r.end) for r in requests])
            if errors:
                # A version change explains every other failure; report it first.
                for err in errors:
                    if isinstance(err, PreconditionFailed | NotFound):
                        raise err
                raise errors[0]
        seen = {tag for _, tag in answers if tag is not None}
        if len(seen) > 1:
            raise PreconditionFailed(
                f"object {key!r} changed between range requests (ETags {sorted(seen)})", key=key)
        return slice_results(ranges, requests, [payload for payload, _ in answers], key=key)

    def head(self, key: str) -> ObjectMeta:
        check_key(key)
        return self.retrier.call(lambda: self._head_once(key))

    def _head_once(self, key: str) -> ObjectMeta:
        self.counters.record(HEAD)
        meta = self._call("head", key, lambda: obstore.head(self._store, key))
        tag = meta["e_tag"]
        if not tag:
            raise StoreError(f"{self.uri} returned no ETag for {key!r}", key=key)
        return ObjectMeta(key, meta["size"], normalize_etag(tag), meta["last_modified"])

    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        """Every object whose key starts with ``prefix`` (a plain string prefix).

        obstore lists whole path segments, so this lists the prefix's parent
        "directory" starting just before ``prefix`` (S3 StartAfter) and stops
        at the first key past the matching block (keys come in byte order).
        One LIST is counted per page of up to 1000 keys S3 returned.
        """
        check_prefix(prefix)
        return iter(self.retrier.call(lambda: self._list_once(prefix)))

    def _list_once(self, prefix: str) -> builtins.list[ObjectMeta]:
        parent = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        offset = prefix[:-1] if prefix and not prefix.endswith("/") and prefix[:-1] else None
        found: list[ObjectMeta] = []
        consumed = 0
        try:
            stream = self._call("list", prefix, lambda: obstore.list(
                self._store, parent or None, offset=offset, chunk_size=LIST_PAGE_SIZE))
            done = False
            while not done:
                chunk = self._call("list", prefix, lambda: next(stream, None))
                if chunk is None:
                    break
                for meta in chunk:
                    consumed += 1
                    path = meta["path"]
                    if path.startswith(prefix):
                        tag = meta["e_tag"]
                        found.append(ObjectMeta(path, meta["size"],
                                                normalize_etag(tag) if tag else "",
                                                meta["last_modified"]))
                    elif path > prefix:
                        done = True  # past the block of matching keys
                        break
        finally:
            self.counters.record(LIST, count=max(1, math.ceil(consumed / LIST_PAGE_SIZE)))
        return found

    # --- writes -----------------------------------------------------------------

    def put(self, key: str, data: bytes, *, mode: Mode = PutMode.OVERWRITE) -> str:
        """One logical put, retried by the Retrier's rules (module docstring)."""
        check_key(key)
        if not (mode is PutMode.CREATE or mode is PutMode.OVERWRITE or isinstance(mode, IfMatch)):
            raise TypeError(f"unknown put mode {mode!r}")
        digest = hashlib.sha256(data).hexdigest() if mode is PutMode.CREATE else None
        return self.retrier.put(key, mode, lambda: self._put_once(key, data, mode, digest),
                                lambda: self._own_landed_create(key, data, digest or ""),
                                client_resends=True)

    def _put_once(self, key: str, data: bytes, mode: Mode, digest: str | None) -> str:
        op: Op
        obs_mode: Any
        if mode is PutMode.CREATE:
            op, obs_mode = "put_create", "create"
        elif isinstance(mode, IfMatch):
            op, obs_mode = "put_cas", {"e_tag": normalize_etag(mode.etag)}
        else:
            op, obs_mode = "put", "overwrite"
        self.counters.record(PUT, bytes_out=len(data))
        try:
            result = obstore.put(self._store, key, data, mode=obs_mode, use_multipart=False,
                                 attributes={self.sha256_attribute: digest} if digest else None)
        except Exception as exc:
            err = self._map(exc, op, key)
            if op == "put_cas" and isinstance(err, PreconditionFailed):
                err = self._classify_failed_cas(key, err)
            raise err from exc
        etag = result["e_tag"]
        if not etag:
            raise StoreError(f"{self.uri} returned no ETag for the put of {key!r}", key=key)
        return normalize_etag(etag)

    def _own_landed_create(self, key: str, data: bytes, digest: str) -> str | None:
        """The ETag of the object at ``key`` if it is the one ``data`` created, else None.

        A create whose reply was lost (or that obstore re-sent after a 5xx) meets
        its own landed object.  caslake creates unique keys only, so the object
        is ours exactly when its content is: compared by the SHA-256 kept in its
        metadata (one HEAD); an object without that metadata was not written by
        this code, unless it has our size and our bytes (then a GET decides).
        """
        self.counters.record(HEAD)
        meta = self._call("head", key, lambda: obstore.get(
            self._store, key, options={"head": True}))
        tag = meta.meta["e_tag"]
        if not tag:
            raise StoreError(f"{self.uri} returned no ETag for {key!r}", key=key)
        theirs = meta.attributes.get(self.sha256_attribute)
        if theirs is not None:
            return normalize_etag(tag) if theirs == digest else None
        if meta.meta["size"] != len(data):
            return None
        current = self._get_once(key)
        return current.etag if current.data == data else None

    def _classify_failed_cas(self, key: str, err: PreconditionFailed) -> StoreError:
        """A compare-and-swap failed: NotFound if the key is missing, else ``err``.

        Some servers answer If-Match on a missing key with 404, others with
        412, and obstore reports both as a precondition failure, so ask.  If
        the HEAD itself fails, the CAS still did not apply: keep ``err``.
        """
        try:
            self.head(key)
        except NotFound:
            return NotFound(f"no object {key!r} to compare-and-swap in {self.uri}", key=key)
        except StoreError:
            return err
        return err

    def delete(self, key: str) -> None:
        check_key(key)
        self.retrier.call(lambda: self._delete_once(key))

    def _delete_once(self, key: str) -> None:
        self.counters.record(DELETE)
        try:
            obstore.delete(self._store, key)
        except Exception as exc:
            err = self._map(exc, "delete", key)
            if isinstance(err, NotFound):
                return  # some S3-compatible servers answer 404 for a missing key
            raise err from exc


class S3Store(ObstoreStore):
    """An ``s3://bucket/prefix`` table root on any S3-compatible endpoint."""

    settings: S3Settings

    def _configure(self, uri: str, storage_options: StorageOptions | None,
                   environ: Mapping[str, str] | None) -> None:
        self.settings = resolve_s3_settings(uri, storage_options, environ)
        self.bucket = self.settings.bucket
        self.prefix = self.settings.prefix
        self.uri = f"{SCHEME}{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")
        self._boto3: S3Client | None = None
        self._boto3_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"S3Store({self.uri!r}, endpoint={self.settings.endpoint_url!r})"

    def reopen_options(self) -> StorageOptions:
        s = self.settings
        found = {"endpoint_url": s.endpoint_url, "region": s.region,
                 "access_key_id": s.access_key_id, "secret_access_key": s.secret_access_key,
                 "session_token": s.session_token,
                 "allow_http": "true" if s.allow_http else None}
        return cast(StorageOptions, {k: v for k, v in found.items() if v is not None})

    def _make_obstore(self) -> _ObstoreS3:
        s = self.settings
        config: S3Config = {
            "region": s.region,
            "virtual_hosted_style_request": s.virtual_hosted_style,
            "conditional_put": "etag",
        }
        if s.endpoint_url:
            # Both names: AWS_ENDPOINT_URL_S3 would otherwise take precedence.
            config["endpoint"] = s.endpoint_url
            config["aws_endpoint_url_s3"] = s.endpoint_url
        client, retry = client_configs(s)
        provider = _static_credentials(s) if s.access_key_id else None
        try:
            return _ObstoreS3(s.bucket, prefix=s.prefix or None, config=config,
                              client_options=client, retry_config=retry,
                              credential_provider=provider)
        except Exception as exc:
            raise StoreConfigError(f"cannot configure S3 store for {self.uri!r}: {exc}") from exc

    def boto3_client(self) -> S3Client:
        """A boto3 S3 client for this endpoint, created on first use.

        For operations obstore does not expose (multipart upload with
        UploadPartCopy).  Not used for ordinary reads and writes.  Requests
        made with it are not counted automatically: callers must record them
        in :attr:`counters`.
        """
        # Its own lock: creating a client can take a while, and must not hold up
        # the range-request threads (``_executor`` takes ``_lazy_lock``).
        with self._boto3_lock:
            if self._boto3 is None:
                from botocore.config import Config

                s = self.settings
                cfg = Config(
                    region_name=s.region,
                    s3={"addressing_style": "virtual" if s.virtual_hosted_style else "path"},
                    retries={"max_attempts": s.max_retries + 1, "mode": "standard"},
                    connect_timeout=s.connect_timeout,
                    read_timeout=s.request_timeout,
                )
                kwargs: dict[str, Any] = {"config": cfg}
                if s.endpoint_url:
                    kwargs["endpoint_url"] = s.endpoint_url
                if s.access_key_id:
                    kwargs["aws_access_key_id"] = s.access_key_id
                    kwargs["aws_secret_access_key"] = s.secret_access_key
                    kwargs["aws_session_token"] = s.session_token
                self._boto3 = _new_boto3_client(kwargs)
            return self._boto3

    def prepare_compose(self) -> None:
        """Create the multipart client on a store thread (importing boto3 and loading
        its S3 model take a few hundred ms the first time) while the caller works."""
        if self._boto3 is None:
            self._executor().submit(self.boto3_client)  # an error resurfaces on use

    def full_key(self, key: str) -> str:
        """The bucket key of ``key`` (prefix joined), for boto3 calls."""
        return f"{self.prefix}/{key}" if self.prefix else key

    # --- multipart (boto3; see caslake.store.s3_multipart) -----------------------

    def compose(self, dest: str, parts: Sequence[ComposePart]) -> str:
        """Multipart upload with UploadPartCopy (see ObjectStore.compose)."""
        from caslake.store import s3_multipart

        return s3_multipart.compose(self, dest, parts)

    def list_multipart_uploads(self, prefix: str = "") -> Sequence[MultipartUpload]:
        from caslake.store import s3_multipart

        return s3_multipart.list_uploads(self, prefix)

    def abort_multipart_upload(self, upload: MultipartUpload) -> None:
        from caslake.store import s3_multipart

        s3_multipart.abort_upload(self, upload)


def _new_boto3_client(kwargs: dict[str, Any]) -> S3Client:
    """A client from the shared session when the credentials are explicit; a session
    resolves ambient credentials (environment, profile, instance role) once and
    keeps them, so without explicit ones each store gets a session of its own."""
    global _BOTO3_SESSION
    import boto3

    with _BOTO3_LOCK:
        if "aws_access_key_id" not in kwargs:
            own: S3Client = boto3.session.Session().client("s3", **kwargs)
            return own
        if _BOTO3_SESSION is None:
            _BOTO3_SESSION = boto3.session.Session()
        client: S3Client = _BOTO3_SESSION.client("s3", **kwargs)
        return client
