"""Strict ISO-8601 date and timestamp text, as the predicate dialect accepts it.

Shared by the SQL parser (``DATE '...'``, ``TIMESTAMP '...'``) and the binder
(a string literal compared with a date or timestamp column).  It accepts only
the documented shapes -- never the many extra forms ``datetime.fromisoformat``
tolerates -- and never raises: malformed text gives ``None``.

* date: ``YYYY-MM-DD``
* timestamp: ``YYYY-MM-DD`` optionally followed by ``[ T]HH:MM[:SS[.f{1,6}]]``
  and then optionally ``Z`` or ``+HH:MM`` / ``-HH:MM``.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Final

__all__ = ["parse_date", "parse_timestamp"]

_DATE: Final = re.compile(r"(\d{4})-(\d{2})-(\d{2})", re.ASCII)
_TIMESTAMP: Final = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})"
    r"(?:[ Tt](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,6}))?)?"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))?)?",
    re.ASCII,
)


def parse_date(text: str) -> date | None:
    """The date ``text`` spells as ``YYYY-MM-DD``, or None."""
    match = _DATE.fullmatch(text)
    if match is None:
        return None
    year, month, day = (int(g) for g in match.groups())
    try:
        return date(year, month, day)
    except ValueError:
        return None


def parse_timestamp(text: str) -> datetime | None:
    """The datetime ``text`` spells, or None.

    The result is naive unless the text carries ``Z`` or an offset.
    """
    match = _TIMESTAMP.fullmatch(text)
    if match is None:
        return None
    (year, month, day, hour, minute, second, fraction,
     zulu, sign, off_hours, off_minutes) = match.groups()
    tzinfo: timezone | None = None
    if zulu:
        tzinfo = UTC
    elif sign:
        hours, minutes = int(off_hours), int(off_minutes)
        if hours > 23 or minutes > 59:
            return None
        offset = timedelta(hours=hours, minutes=minutes)
        tzinfo = timezone(-offset if sign == "-" else offset)
    micro = int(fraction.ljust(6, "0")) if fraction else 0
    try:
        return datetime(
            int(year), int(month), int(day),
            int(hour or 0), int(minute or 0), int(second or 0), micro,
            tzinfo=tzinfo,
        )
    except ValueError:
        return None
