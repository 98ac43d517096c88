"""Table properties caslake itself interprets, and their one parser.

Owns the names and value syntax of ``retention.keep_last_versions``,
``retention.max_age``, ``clustering.columns`` and ``commit.group``
(docs/format.md, "Table properties" and "Clustering").  Pure: no I/O.
Every other property is opaque to caslake and passes through unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from caslake.errors import InvalidArgument

KEEP_LAST_VERSIONS = "retention.keep_last_versions"
MAX_AGE = "retention.max_age"
CLUSTERING_COLUMNS = "clustering.columns"
GROUP_COMMIT = "commit.group"
SORT, ZORDER = "sort", "zorder"
MAX_CLUSTERING_COLUMNS = 8  # z-order gives each column 64 / n bits of its key

_CLUSTERING = re.compile(r"^\s*(sort|zorder)\s*\((.*)\)\s*$", re.I | re.S)
_DURATION = re.compile(r"^\s*(\d+)\s*(s|m|h|d|w)?\s*$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, None: 1}


def parse_duration(text: str, *, name: str = MAX_AGE) -> timedelta:
    """``"7d"``, ``"36h"``, ``"90m"``, ``"3600s"`` or ``"3600"`` (seconds)."""
    m = _DURATION.match(text) if isinstance(text, str) else None
    if m is None:
        raise InvalidArgument(f"property {name!r} must be a duration such as '7d', '36h', "
                              f"'90m' or '3600s', not {text!r}")
    seconds = int(m.group(1)) * _UNIT[m.group(2)]
    if seconds > 100 * 365 * 86400:
        raise InvalidArgument(f"property {name!r} is longer than 100 years: {text!r}")
    return timedelta(seconds=seconds)


@dataclass(frozen=True)
class RetentionPolicy:
    """What gc keeps when called without arguments.  ``max_age`` None: the default
    retention; ``keep_last_versions`` None: no cap on the number of versions."""

    max_age: timedelta | None = None
    keep_last_versions: int | None = None


def retention_policy(properties: Mapping[str, str]) -> RetentionPolicy:
    """The retention policy the table properties set (raises InvalidArgument on a
    malformed value, naming the property)."""
    keep: int | None = None
    raw = properties.get(KEEP_LAST_VERSIONS)
    if raw is not None:
        if not isinstance(raw, str) or not raw.strip().isdigit() or int(raw) < 1:
            raise InvalidArgument(f"property {KEEP_LAST_VERSIONS!r} must be a whole number "
                                  f"of at least 1, not {raw!r}")
        keep = int(raw)
    age = properties.get(MAX_AGE)
    return RetentionPolicy(max_age=parse_duration(age) if age is not None else None,
                           keep_last_versions=keep)


@dataclass(frozen=True)
class Clustering:
    """How compaction orders rows: ``sort`` (lexicographic by ``columns``) or
    ``zorder`` (by the interleaved bits of ``columns``).  Written as the
    ``clustering.columns`` value ``"zorder(id, ts)"`` / ``"sort(region, id)"``."""

    kind: str
    columns: tuple[str, ...]

    def __post_init__(self) -> None:
        what = f"{self.kind}_by" if self.kind in (SORT, ZORDER) else "clustering"
        if self.kind not in (SORT, ZORDER):
            raise InvalidArgument(f"clustering is 'sort' or 'zorder', not {self.kind!r}")
        if not self.columns or not all(isinstance(c, str) and c.strip()
                                       for c in self.columns):
            raise InvalidArgument(f"{what} needs a non-empty list of column names, not "
                                  f"{list(self.columns)!r}")
        if len(set(self.columns)) != len(self.columns):
            raise InvalidArgument(f"{what} names a column twice: {list(self.columns)!r}")
        if len(self.columns) > MAX_CLUSTERING_COLUMNS:
            raise InvalidArgument(f"{what} takes at most {MAX_CLUSTERING_COLUMNS} columns, "
                                  f"not {len(self.columns)}")

    def to_property(self) -> str:
        return f"{self.kind}({', '.join(self.columns)})"


def clustering_policy(properties: Mapping[str, str]) -> Clustering | None:
    """The clustering the ``clustering.columns`` property sets (None: not set);
    InvalidArgument naming the property on a malformed value."""
    raw = properties.get(CLUSTERING_COLUMNS)
    if raw is None:
        return None
    m = _CLUSTERING.match(raw) if isinstance(raw, str) else None
    if m is None:
        raise InvalidArgument(f"property {CLUSTERING_COLUMNS!r} must read 'zorder(col, ...)' "
                              f"or 'sort(col, ...)', not {raw!r}")
    columns = tuple(c.strip() for c in m.group(2).split(","))
    try:
        return Clustering(m.group(1).lower(), columns)
    except InvalidArgument as e:
        raise InvalidArgument(f"property {CLUSTERING_COLUMNS!r}: {e}") from None


def group_commit(properties: Mapping[str, str]) -> bool:
    """The table property ``commit.group``: ``"true"`` makes every writer's plain
    appends join group commits (docs/protocol.md, "Group commit"); ``"false"`` or
    absent: only writers whose ``CommitPolicy`` asks for it."""
    raw = properties.get(GROUP_COMMIT)
    if raw is None:
        return False
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise InvalidArgument(f"property {GROUP_COMMIT!r} must be 'true' or 'false', "
                              f"not {raw!r}")
    return value == "true"
