"""Object-store backends and :func:`open_store`, which picks one from a URI.

=====================================  ========================================
URI                                    backend
=====================================  ========================================
``memory://name`` / ``memory://``      :class:`MemoryStore` (shared per name)
``/a/path``, ``rel/path``, ``file://``  :class:`LocalStore`
``s3://bucket/prefix``                 :class:`S3Store` (AWS, MinIO, R2, moto)
``az://container/prefix``              :class:`~caslake.store.azure.AzureBlobStore`
``abfs[s]://container@account.dfs``    the same (``...core.windows.net/path``,
                                       as Spark writes it; docs/azure.md)
``gs://bucket/prefix``                 :class:`~caslake.store.gcs.GcsStore`
                                       (the ``gcs`` extra; docs/gcs.md)
=====================================  ========================================

The contract every backend honours is documented in :mod:`caslake.store.base`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from caslake.errors import StoreConfigError
from caslake.store.base import (
    COMPOSE,
    DELETE,
    GET,
    GET_RANGE,
    HEAD,
    LIST,
    PUT,
    ComposePart,
    CopyFrom,
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
from caslake.store.local import LocalStore
from caslake.store.memory import MemoryStore
from caslake.store.options import StorageOptions

if TYPE_CHECKING:
    from caslake.store.s3 import S3Store


def __getattr__(name: str) -> Any:
    """``S3Store`` on first use: its obstore client takes a noticeable part of
    ``import caslake``, which a local table never needs."""
    if name == "S3Store":
        from caslake.store.s3 import S3Store

        return S3Store
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "COMPOSE",
    "DELETE",
    "GET",
    "GET_RANGE",
    "HEAD",
    "LIST",
    "PUT",
    "ComposePart",
    "CopyFrom",
    "GetResult",
    "IfMatch",
    "LocalStore",
    "MemoryStore",
    "Mode",
    "MultipartUpload",
    "ObjectMeta",
    "ObjectStore",
    "PutMode",
    "S3Store",
    "StorageOptions",
    "StoreCounters",
    "normalize_etag",
    "open_store",
]

_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def open_store(uri: str, storage_options: StorageOptions | None = None
               ) -> ObjectStore:
    """The store for ``uri``: ``memory://``, ``file://`` or a plain path, ``s3://``,
    Azure Blob (``az://``, ``abfs://``, ``abfss://``) or Google Cloud Storage (``gs://``).

    ``storage_options`` (:class:`StorageOptions`) only apply to ``s3://`` (see
    :func:`caslake.store.s3.resolve_s3_settings`), Azure (see
    :func:`caslake.store.azure.resolve_azure_settings`) and ``gs://`` (see
    :func:`caslake.store.gcs.resolve_gcs_settings`); passing any to another
    backend is an error.  Raises StoreConfigError, naming the URI, for an
    unknown scheme or a malformed URI.
    """
    if not isinstance(uri, str) or not uri.strip():
        raise StoreConfigError(f"empty store URI {uri!r}")
    match = _SCHEME_RE.match(uri)
    scheme = match.group(1).lower() if match else ""
    if scheme == "s3":
        from caslake.store.s3 import S3Store

        return S3Store(uri, storage_options)
    if scheme in ("az", "abfs", "abfss"):
        from caslake.store.azure import AzureBlobStore

        return AzureBlobStore(uri, storage_options)
    if scheme == "gs":
        from caslake.store.gcs import GcsStore

        return GcsStore(uri, storage_options)
    if storage_options:
        raise StoreConfigError(
            f"storage options {sorted(storage_options)} do not apply to {uri!r} "
            "(only s3://, Azure and gs:// URIs take storage options)"
        )
    if scheme == "memory":
        return MemoryStore(uri)
    if scheme == "file" or not match:
        return LocalStore(uri)
    raise StoreConfigError(
        f"unsupported URI scheme {scheme!r} in {uri!r} "
        "(use memory://, file://, a local path, s3://, az://, abfss:// or gs://)"
    )
