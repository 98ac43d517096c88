"""The stores of other tables on the same store as a table (multi-table transactions).

Owns: :func:`base_store` (a table's store without the test and routing wrappers),
:func:`same_store` (are two tables on one store: the same local filesystem, the
same memory store, the same S3 bucket and endpoint), and :func:`store_at`, a
store for another table root on the same store as a given one, built from that
store's own settings (so a reader of one participant of a transaction can read
the decision record under another: docs/protocol.md, "Multi-table
transactions").  Opened stores are kept per process, by URI.  Never writes.
"""

from __future__ import annotations

import threading
from typing import Any

from caslake.errors import StoreCapabilityUnsupported
from caslake.store import LocalStore, MemoryStore
from caslake.store.base import ObjectStore

_lock = threading.Lock()
_opened: dict[tuple[tuple[str, ...], str], ObjectStore] = {}

# S3Settings fields that are storage options of the same name.
_S3_OPTIONS = ("endpoint_url", "region", "access_key_id", "secret_access_key",
               "session_token", "allow_http", "virtual_hosted_style", "max_retries",
               "retry_timeout", "connect_timeout", "request_timeout")


def base_store(store: ObjectStore) -> ObjectStore:
    """``store`` without its wrappers (a clone's routing, test fault injection, retries)."""
    while True:
        inner = getattr(store, "own", None) or getattr(store, "inner", None)
        if not isinstance(inner, ObjectStore):
            return store
        store = inner


def _identity(store: ObjectStore) -> tuple[str, ...]:
    """What two stores must share to be one store."""
    s = base_store(store)
    if isinstance(s, LocalStore):
        return ("local",)
    if isinstance(s, MemoryStore):
        return ("memory",)
    settings: Any = getattr(s, "settings", None)
    if type(s).__name__ == "S3Store" and settings is not None:
        return ("s3", settings.bucket, str(settings.endpoint_url))
    raise StoreCapabilityUnsupported(
        f"multi-table transactions are not supported on {type(s).__name__} stores "
        f"({store.uri}); use a local, memory or S3 store")


def same_store(a: ObjectStore, b: ObjectStore) -> bool:
    """Whether tables at ``a`` and ``b`` are on one store (the scope of a multi-table
    transaction).  Raises StoreCapabilityUnsupported for a backend it does not know."""
    return _identity(a) == _identity(b)


def store_at(store: ObjectStore, uri: str) -> ObjectStore:
    """A store for the table root ``uri`` on the same store as ``store`` (``store``
    itself when ``uri`` is its own root)."""
    if uri.rstrip("/") == store.uri.rstrip("/"):
        return store
    base = base_store(store)
    if uri.rstrip("/") == base.uri.rstrip("/"):
        return base
    key = (_identity(base), uri)
    with _lock:
        found = _opened.get(key)
        if found is None:
            found = _open(base, uri)
            _opened[key] = found
        return found


def _open(base: ObjectStore, uri: str) -> ObjectStore:
    if isinstance(base, LocalStore):
        return LocalStore(uri, fsync=base.fsync)
    if isinstance(base, MemoryStore):
        return MemoryStore(uri)
    settings: Any = getattr(base, "settings", None)
    options = {k: getattr(settings, k) for k in _S3_OPTIONS
               if getattr(settings, k, None) is not None}
    return type(base)(uri, storage_options=options)  # type: ignore[call-arg]
