"""What a dataset looks like on storage: its manifest and its key layout (pure, no I/O).

Owns :class:`DatasetManifest` (exactly the fields of RFC-0008, with
``to_json``/``from_json``), the schema hash, and the names of the objects under
a dataset key::

    {dataset_key}/manifest.json             the one authoritative manifest (moved by CAS)
    {dataset_key}/_SUCCESS                  empty; the dataset is complete
    {dataset_key}/_gen-<32 hex>/data.parquet          parts of one write attempt, or
    {dataset_key}/_gen-<32 hex>/part-00000.parquet    ... several parts
    {dataset_key}/_gen-<32 hex>/_COMMITTED  empty; this attempt's manifest landed
    {dataset_key}/data.parquet              parts written by remote-store (legacy layout)

A part path in the manifest is relative to the dataset key.  This module must
never touch storage; :mod:`caslake.dataset.store` does.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import uuid
from typing import Any

import pyarrow as pa

from caslake.errors import ManifestCorrupted

MANIFEST = "manifest.json"
SUCCESS = "_SUCCESS"
COMMITTED = "_COMMITTED"
GENERATION_PREFIX = "_gen-"
SINGLE_PART = "data.parquet"

_GENERATION_RE = re.compile(r"^_gen-[0-9a-f]{32}$")
_LEGACY_PART_RE = re.compile(r"^(data|part-\d{5,})\.parquet$")
_SAFE_SEGMENT = re.compile(r"^[A-Za-z0-9._=+-]+$")


def new_generation() -> str:
    """A fresh generation directory name: one per write attempt, never reused."""
    return f"{GENERATION_PREFIX}{uuid.uuid4().hex}"


def is_generation(segment: str) -> bool:
    return _GENERATION_RE.match(segment) is not None


def is_legacy_part(name: str) -> bool:
    """A part name remote-store writes directly under the dataset key."""
    return _LEGACY_PART_RE.match(name) is not None


def part_name(index: int, total: int) -> str:
    """``data.parquet`` for a single part, ``part-NNNNN.parquet`` otherwise (RFC PDS-005)."""
    return SINGLE_PART if total == 1 else f"part-{index:05d}.parquet"


def schema_hash(schema: pa.Schema) -> str:
    """SHA-256 (hex) of ``schema.to_string()``, as RFC-0008 specifies."""
    return hashlib.sha256(schema.to_string().encode("utf-8")).hexdigest()


def schema_hash_matches(stored: str, schema: pa.Schema) -> bool:
    """Does a stored hash describe ``schema``?  Any non-empty prefix of the full hash
    matches: remote-store stores the first 16 hex characters."""
    return bool(stored) and schema_hash(schema).startswith(stored.lower())


def check_part_path(dataset_key: str, part: object) -> str | None:
    """A reason the manifest's part path is unsafe, or None.  A part must stay
    inside its dataset key: relative, no ``..``, no scheme, plain segments."""
    if not isinstance(part, str) or not part:
        return "a part path must be a non-empty string"
    if "://" in part or part.startswith("/") or "\\" in part:
        return f"part {part!r} is not relative to the dataset key"
    for seg in part.split("/"):
        if seg in ("", ".", "..") or not _SAFE_SEGMENT.match(seg):
            return f"part {part!r} has an illegal path segment {seg!r}"
    return None


_REQUIRED: tuple[tuple[str, type], ...] = (
    ("dataset_key", str), ("parts", list), ("row_count", int), ("schema_hash", str),
    ("compression", str), ("created_at_utc", str),
)


@dataclasses.dataclass(frozen=True)
class DatasetManifest:
    """The manifest of one dataset snapshot: exactly the fields of RFC-0008."""

    dataset_key: str
    parts: list[str]
    row_count: int
    schema_hash: str
    compression: str
    created_at_utc: str
    run_id: str | None = None
    metadata: dict[str, str] | None = None

    def to_json(self) -> str:
        """JSON with sorted keys; ``run_id`` and ``metadata`` are left out when None."""
        data = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        return json.dumps(data, sort_keys=True, indent=2)

    @classmethod
    def from_json(cls, text: str | bytes, *, key: str = MANIFEST) -> DatasetManifest:
        """Parse a manifest.  Raises ManifestCorrupted (naming ``key``) on invalid
        JSON, a missing field or a field of the wrong type."""
        try:
            data: Any = json.loads(text)
        except (ValueError, TypeError) as exc:
            raise ManifestCorrupted(key, f"not valid JSON ({exc})") from None
        if not isinstance(data, dict):
            raise ManifestCorrupted(key, f"expected a JSON object, got {type(data).__name__}")
        missing = [name for name, _ in _REQUIRED if name not in data]
        if missing:
            raise ManifestCorrupted(key, f"missing field(s): {', '.join(missing)}")
        for name, typ in _REQUIRED:
            value = data[name]
            if not isinstance(value, typ) or isinstance(value, bool):
                raise ManifestCorrupted(key, f"field {name!r} must be {typ.__name__}, "
                                        f"got {type(value).__name__}")
        if not all(isinstance(p, str) for p in data["parts"]):
            raise ManifestCorrupted(key, "field 'parts' must be a list of strings")
        if data["row_count"] < 0:
            raise ManifestCorrupted(key, f"field 'row_count' is negative ({data['row_count']})")
        run_id = data.get("run_id")
        if run_id is not None and not isinstance(run_id, str):
            raise ManifestCorrupted(key, f"field 'run_id' must be a string, "
                                    f"got {type(run_id).__name__}")
        metadata = data.get("metadata")
        if metadata is not None and not (
                isinstance(metadata, dict)
                and all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
            raise ManifestCorrupted(key, "field 'metadata' must map strings to strings")
        return cls(dataset_key=data["dataset_key"], parts=list(data["parts"]),
                   row_count=data["row_count"], schema_hash=data["schema_hash"],
                   compression=data["compression"], created_at_utc=data["created_at_utc"],
                   run_id=run_id, metadata=dict(metadata) if metadata is not None else None)
