"""Table properties caslake itself interprets, and their one parser.

Owns the names and value syntax of ``retention.keep_last_versions`` and
``retention.max_age`` (docs/format.md, "Table properties").  Pure: no I/O.
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
