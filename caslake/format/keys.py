"""The key layout of a table, relative to the table root.

    _latest_manifest                       the only mutable object (CAS pointer)
    manifest/v<20-digit version>-<token>.json   immutable manifests
    data/<yyyy>/<mm>/<dd>/<uuid>.parquet   immutable Parquet data files
    tombstone/<uuid>.del                   immutable tombstones (deletes)
    segment/v<version>-<token>.arrow       immutable segment objects (format 3)

Keys stored inside metadata are always relative to the table root and must
pass :func:`check_relative_key` -- the store's key rules
(:mod:`caslake.store.keys`) plus a prefix and a safe character set -- so a
manifest can never point outside its table (no ``..``, no absolute paths, no
other buckets or schemes).
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime

from caslake.store.keys import key_problem

POINTER_KEY = "_latest_manifest"
MANIFEST_PREFIX = "manifest/"
DATA_PREFIX = "data/"
TOMBSTONE_PREFIX = "tombstone/"
SEGMENT_PREFIX = "segment/"

_MANIFEST_RE = re.compile(r"^manifest/v(\d{20})-([0-9a-f]{32})\.json$")
_SAFE_SEGMENT = re.compile(r"^[A-Za-z0-9._=-]+$")


def new_token() -> str:
    return uuid.uuid4().hex


def manifest_key(version: int, token: str) -> str:
    """Each commit attempt gets a fresh token, so a crashed or losing writer's
    manifest never collides with the next attempt at the same version."""
    return f"{MANIFEST_PREFIX}v{version:020d}-{token}.json"


def parse_manifest_key(key: str) -> tuple[int, str] | None:
    m = _MANIFEST_RE.match(key)
    if m is None:
        return None
    return int(m.group(1)), m.group(2)


def data_file_key(now: datetime | None = None) -> str:
    now = now or datetime.now(UTC)
    return f"{DATA_PREFIX}{now:%Y/%m/%d}/{uuid.uuid4().hex}.parquet"


def segment_key(version: int, token: str) -> str:
    """A segment object written by the commit attempt of ``version`` (format 3)."""
    return f"{SEGMENT_PREFIX}v{version:020d}-{token}.arrow"


def tombstone_key() -> str:
    return f"{TOMBSTONE_PREFIX}{uuid.uuid4().hex}.del"


def check_relative_key(key: object, *, prefix: str) -> str | None:
    """Return a reason the key is unsafe, or None if it is a well-formed table key.

    A table key is a valid object key (:func:`caslake.store.keys.key_problem`:
    relative, '/'-separated, no empty, '.' or '..' segment) that starts with
    ``prefix`` and whose segments use only ``A-Z a-z 0-9 . _ = -`` (so no
    scheme, no absolute path, no other bucket)."""
    problem = key_problem(key)
    if problem is not None or not isinstance(key, str):
        return problem or "key must be a string"
    if not key.startswith(prefix):
        return f"key {key!r} must start with {prefix!r}"
    for part in key.split("/"):
        if not _SAFE_SEGMENT.match(part):
            return f"key {key!r} has an illegal path segment {part!r}"
    return None


# --- external (cloned) objects ----------------------------------------------------
#
# A zero-copy clone references objects of another table (docs/format.md, "Clones"):
# ``data/x=<alias>/<rest>`` names ``data/<rest>`` of the table the manifest's
# ``external[<alias>]`` locates (and likewise under ``tombstone/``).  The key stays
# relative and safe; only the store resolves it elsewhere.

EXTERNAL_MARK = "x="
_ALIAS_RE = re.compile(r"^[a-z0-9]{1,16}$")


def valid_alias(alias: str) -> bool:
    return bool(_ALIAS_RE.match(alias))


def external_key(key: str, alias: str) -> str:
    """``data/2026/...`` of the table under ``alias`` as a key of the referencing table."""
    prefix, rest = key.split("/", 1)
    return f"{prefix}/{EXTERNAL_MARK}{alias}/{rest}"


def split_external(key: str) -> tuple[str | None, str]:
    """``(alias, key in that table)`` for an external key, else ``(None, key)``."""
    parts = key.split("/", 2)
    if len(parts) == 3 and parts[1].startswith(EXTERNAL_MARK):
        return parts[1][len(EXTERNAL_MARK):], f"{parts[0]}/{parts[2]}"
    return None, key
