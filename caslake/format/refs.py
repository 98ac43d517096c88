"""Refs: branch heads, immutable tags, tag tombstones and clone holds, as objects on storage.

Owns: ref-name validation, the key of every ref object, and the JSON form and
the one parser of each ref record (docs/format.md, "Refs").  Pure: no I/O.
Must never decide *whether* a ref may move (that is the ops layer's
protocol); it only says what a well-formed ref object is.

Key layout under the table root (names are percent-encoded so that a name
with ``/`` is one flat key: ``release/1`` and ``release`` never collide as a
file and a directory on a local store):

    _latest_manifest              branch ``main`` (unchanged from format v1)
    refs/branches/<name>          head of branch <name>: a ``caslake.pointer``, moved by CAS
    refs/tags/<name>              a ``caslake.tag``, created create-only; on drop it is
                                  CASed once into a tombstone and never changes again
    refs/holds/<holder id>.json   a ``caslake.hold``: a clone's pin on this table's version

A table without a ``refs/`` object reads exactly as in format version 1.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from caslake.errors import InvalidRefName
from caslake.format.keys import MANIFEST_PREFIX, POINTER_KEY
from caslake.format.manifest import _check_header, _Doc, _load_json, format_ts, parse_ts

MAIN = "main"
REFS_PREFIX = "refs/"
BRANCH_PREFIX = "refs/branches/"
TAG_PREFIX = "refs/tags/"
HOLD_PREFIX = "refs/holds/"

# Refs exist only in format version 2: a table gets version 2 on its pointer
# before its first ref is written, so a version-1 reader (whose gc does not
# know refs) refuses the table instead of deleting what a ref retains.
REFS_FORMAT_VERSION = 2

TAG_FORMAT = "caslake.tag"
HOLD_FORMAT = "caslake.hold"

MAX_REF_NAME = 200
# Letters, digits and ``. _ - + = @``; ``/`` separates non-empty segments.
_SEGMENT = re.compile(r"^[A-Za-z0-9._+=@-]+$")
_HOLD_ID = re.compile(r"^[0-9a-f]{32}$")


# --- names and keys -------------------------------------------------------------


def validate_ref_name(name: object, *, kind: str = "ref") -> str:
    """Return ``name`` if it is a valid ref name, else raise :class:`InvalidRefName`.

    Refused: a non-string, the empty name, names longer than 200 characters,
    control characters, ``/`` at either end, empty, ``.`` or ``..`` segments,
    and any character outside letters, digits and ``. _ - + = @ /``."""
    if not isinstance(name, str):
        raise InvalidRefName(repr(name), f"a {kind} name must be a string, "
                             f"not {type(name).__name__}")
    if not name:
        raise InvalidRefName(name, f"a {kind} name must not be empty")
    if len(name) > MAX_REF_NAME:
        raise InvalidRefName(name, f"a {kind} name is at most {MAX_REF_NAME} characters")
    if any(unicodedata.category(c) == "Cc" for c in name):
        raise InvalidRefName(name, f"a {kind} name must not contain control characters")
    if name.startswith("/") or name.endswith("/"):
        raise InvalidRefName(name, f"a {kind} name must not start or end with '/'")
    for seg in name.split("/"):
        if seg in ("", ".", ".."):
            raise InvalidRefName(name, f"a {kind} name must not have an empty, '.' or "
                                 "'..' segment")
        if not _SEGMENT.match(seg):
            raise InvalidRefName(name, f"a {kind} name may hold only letters, digits, "
                                 "'/' and . _ - + = @")
    return name


def _encode(name: str) -> str:
    return quote(name, safe="")  # '/' -> %2F; every other allowed character is unreserved


def branch_key(name: str) -> str:
    """The CAS pointer of branch ``name`` (``main`` is the table's own pointer)."""
    validate_ref_name(name, kind="branch")
    return POINTER_KEY if name == MAIN else BRANCH_PREFIX + _encode(name)


def tag_key(name: str) -> str:
    validate_ref_name(name, kind="tag")
    return TAG_PREFIX + _encode(name)


def hold_key(holder_id: str) -> str:
    if not _HOLD_ID.match(holder_id):
        raise InvalidRefName(holder_id, "a hold id is 32 lowercase hex digits")
    return f"{HOLD_PREFIX}{holder_id}.json"


def name_from_key(key: str, prefix: str) -> str | None:
    """The ref name a listed key under ``prefix`` stands for, or None for a key that
    no valid ref name maps to (a stray object is ignored, never guessed at)."""
    if not key.startswith(prefix):
        return None
    name = unquote(key[len(prefix):])
    try:
        validate_ref_name(name)
    except InvalidRefName:
        return None
    return name if _encode(name) == key[len(prefix):] else None


# --- records --------------------------------------------------------------------


@dataclass(frozen=True)
class RefTarget:
    """One committed version of a table: what a tag or a hold points at.  A reader
    loads ``manifest`` and checks its ``version`` and ``commit_id``."""

    version: int
    manifest: str
    commit_id: str

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "manifest": self.manifest, "commit_id": self.commit_id}


@dataclass(frozen=True)
class Tag:
    """An immutable name for one version.  ``branch`` is the branch it was taken on.
    ``dropped_at_ms`` set: the tag was dropped and this is its tombstone; the name
    stays taken forever, so no reader can ever see other data under it."""

    name: str
    table_id: str
    target: RefTarget
    branch: str
    created_at_ms: int
    dropped_at_ms: int | None = None
    format_version: int = REFS_FORMAT_VERSION

    @property
    def dropped(self) -> bool:
        return self.dropped_at_ms is not None

    def tombstone(self, now_ms: int) -> Tag:
        return Tag(self.name, self.table_id, self.target, self.branch, self.created_at_ms,
                   dropped_at_ms=max(now_ms, self.created_at_ms),
                   format_version=self.format_version)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "format": TAG_FORMAT, "format_version": self.format_version, "name": self.name,
            "table_id": self.table_id, **self.target.to_json(), "branch": self.branch,
            "created_at": format_ts(self.created_at_ms)}
        if self.dropped_at_ms is not None:
            out["dropped_at"] = format_ts(self.dropped_at_ms)
        return out

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_json(), separators=(",", ":")).encode()


@dataclass(frozen=True)
class Hold:
    """A clone's pin on a version of this table: while the hold exists, gc keeps
    every object that version references.  ``holder_id`` is the clone's table id
    (one hold per clone and owner, so releasing it is exact); ``holder_uri`` says
    where the clone lives, for people and ``caslake refs``."""

    holder_id: str
    holder_uri: str
    table_id: str
    target: RefTarget
    branch: str  # the branch of this table the version was taken from
    created_at_ms: int
    format_version: int = REFS_FORMAT_VERSION

    @property
    def key(self) -> str:
        return hold_key(self.holder_id)

    def to_json(self) -> dict[str, Any]:
        return {"format": HOLD_FORMAT, "format_version": self.format_version,
                "holder_id": self.holder_id, "holder_uri": self.holder_uri,
                "table_id": self.table_id, **self.target.to_json(), "branch": self.branch,
                "created_at": format_ts(self.created_at_ms)}

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_json(), separators=(",", ":")).encode()


# --- parsing --------------------------------------------------------------------


def _target(doc: _Doc) -> RefTarget:
    commit_id: str = doc.get("commit_id", str)
    if not re.fullmatch(r"[0-9a-f]{32}", commit_id):
        raise doc.error("commit_id must be 32 lowercase hex digits")
    return RefTarget(version=doc.nonneg("version"),
                     manifest=doc.safe_key("manifest", MANIFEST_PREFIX), commit_id=commit_id)


def _ts(doc: _Doc, name: str) -> int:
    text: str = doc.get(name, str)
    try:
        return parse_ts(text)
    except (ValueError, OverflowError) as e:
        raise doc.error(f"field {name!r}: {e}") from None


def _branch(doc: _Doc) -> str:
    branch: str = doc.get("branch", str)
    try:
        return validate_ref_name(branch, kind="branch")
    except InvalidRefName as e:
        raise doc.error(str(e)) from None


def parse_tag(data: bytes, key: str) -> Tag:
    """Parse ``refs/tags/<name>``; its name must be the one the key encodes."""
    doc = _Doc(key, _load_json(data, key))
    fv = _check_header(doc, TAG_FORMAT)
    name: str = doc.get("name", str)
    if not key.startswith(TAG_PREFIX) or name_from_key(key, TAG_PREFIX) != name:
        raise doc.error(f"tag name {name!r} does not match its key")
    branch = _branch(doc)
    created = _ts(doc, "created_at")
    dropped = _ts(doc, "dropped_at") if doc.obj.get("dropped_at") is not None else None
    if dropped is not None and dropped < created:
        raise doc.error("dropped_at is before created_at")
    return Tag(name=name, table_id=doc.get("table_id", str), target=_target(doc),
               branch=branch, created_at_ms=created, dropped_at_ms=dropped, format_version=fv)


def parse_hold(data: bytes, key: str) -> Hold:
    doc = _Doc(key, _load_json(data, key))
    fv = _check_header(doc, HOLD_FORMAT)
    holder_id: str = doc.get("holder_id", str)
    if not _HOLD_ID.match(holder_id) or key != hold_key(holder_id):
        raise doc.error("holder_id does not match the hold's key")
    return Hold(holder_id=holder_id, holder_uri=doc.get("holder_uri", str),
                table_id=doc.get("table_id", str), target=_target(doc), branch=_branch(doc),
                created_at_ms=_ts(doc, "created_at"), format_version=fv)

