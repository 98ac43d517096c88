"""Object-key rules shared by every backend.

A key is a relative, '/'-separated path: no leading or trailing '/', no empty,
'.' or '..' segments, no backslashes or NUL bytes, and it may not start with a
segment reserved for the local backend's bookkeeping directories (any first
segment beginning with ``.caslake-``).  Checking keys the same way in every
backend keeps a table portable between them.
"""

from __future__ import annotations

from caslake.errors import InvalidArgument

#: First-segment prefix reserved for backend bookkeeping (temp files, locks).
RESERVED_PREFIX = ".caslake-"


def key_problem(key: object) -> str | None:
    """Why ``key`` is not a valid object key, or None if it is.  The one statement
    of these rules: :func:`check_key` raises with it, and the format layer's
    stricter table-key check (:func:`caslake.format.keys.check_relative_key`)
    starts from it."""
    if not isinstance(key, str) or not key:
        return f"object key must be a non-empty string, got {key!r}"
    if "\\" in key or "\x00" in key:
        return f"object key {key!r} contains a backslash or NUL byte"
    segments = key.split("/")
    if any(seg in ("", ".", "..") for seg in segments):
        return (f"object key {key!r} has an empty, '.' or '..' segment "
                "(keys are relative '/'-separated paths)")
    if segments[0].startswith(RESERVED_PREFIX):
        return f"object key {key!r} uses the reserved prefix {RESERVED_PREFIX!r}"
    return None


def check_key(key: str) -> str:
    """Return ``key`` unchanged if it is a valid object key; else raise InvalidArgument."""
    problem = key_problem(key)
    if problem is not None:
        raise InvalidArgument(problem)
    return key


def check_prefix(prefix: str) -> str:
    """Return ``prefix`` if usable as a list prefix (may be empty or end with '/')."""
    if not isinstance(prefix, str):
        raise InvalidArgument(f"list prefix must be a string, got {prefix!r}")
    if prefix.startswith("/") or "\\" in prefix or "\x00" in prefix:
        raise InvalidArgument(f"list prefix {prefix!r} must be relative and '/'-separated")
    return prefix
