"""Byte-range planning for ``get_ranges``: coalescing and slicing back.

This module owns the pure arithmetic shared by every backend:

* :func:`plan_ranges` turns the caller's ``[start, end)`` ranges into a short
  list of non-overlapping requests, merging ranges whose gap is at most
  ``max_gap`` bytes and never letting one request exceed ``max_request``
  bytes (a single range larger than that is split into several requests).
* :func:`slice_results` cuts the downloaded request payloads back into one
  ``bytes`` per requested range, in the caller's order.

Nothing here performs I/O.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from caslake.errors import InvalidArgument, StoreError

MiB = 1024 * 1024

#: Gap below which two ranges are fetched by one request on S3: a round trip
#: costs far more than downloading a megabyte of unwanted bytes.
S3_MAX_GAP = 1 * MiB
#: Local files and memory merge only touching or overlapping ranges.
LOCAL_MAX_GAP = 0
#: Upper bound on the bytes one request may ask for.
DEFAULT_MAX_REQUEST = 64 * MiB


@dataclass(frozen=True)
class RangeRequest:
    """One request to issue: bytes ``[start, end)`` of the object."""

    start: int
    end: int

    @property
    def length(self) -> int:
        return self.end - self.start


def validate_ranges(ranges: Sequence[tuple[int, int]]) -> None:
    """Raise InvalidArgument unless every range has ``0 <= start <= end``."""
    for item in ranges:
        if len(item) != 2:
            raise InvalidArgument(f"a byte range is a (start, end) pair, got {item!r}")
        start, end = item
        if not isinstance(start, int) or not isinstance(end, int):
            raise InvalidArgument(f"byte range bounds must be integers, got {item!r}")
        if start < 0 or end < start:
            raise InvalidArgument(f"invalid byte range [{start}, {end}): need 0 <= start <= end")


def plan_ranges(ranges: Sequence[tuple[int, int]], *, max_gap: int = 0,
                max_request: int = DEFAULT_MAX_REQUEST) -> list[RangeRequest]:
    """Coalesce ``ranges`` into requests sorted by start, pairwise disjoint.

    Overlapping and touching ranges are united first.  Requests are then
    packed greedily in offset order: the open request is extended over the
    next wanted bytes when the gap to them is ``<= max_gap``, up to
    ``max_request`` bytes; what does not fit starts the next request.  So a
    range longer than ``max_request`` is split, a range may straddle two
    requests, and no request ever exceeds ``max_request``.  Empty ranges need
    no bytes and produce no request.
    """
    validate_ranges(ranges)
    if max_gap < 0:
        raise InvalidArgument(f"max_gap must be >= 0, got {max_gap}")
    if max_request <= 0:
        raise InvalidArgument(f"max_request must be > 0, got {max_request}")

    # 1. The union of the wanted bytes, as disjoint sorted intervals.
    wanted: list[tuple[int, int]] = []
    for start, end in sorted((s, e) for s, e in ranges if e > s):
        if wanted and start <= wanted[-1][1]:
            if end > wanted[-1][1]:
                wanted[-1] = (wanted[-1][0], end)
        else:
            wanted.append((start, end))

    # 2. Greedy packing: extend the open request over the next interval while
    #    the gap allows, filling it up to max_request; spill the rest over.
    requests: list[RangeRequest] = []
    cur_start = cur_end = -1
    for start, end in wanted:
        pos = start
        while pos < end:
            if cur_start >= 0 and pos - cur_end <= max_gap and pos < cur_start + max_request:
                cur_end = min(end, cur_start + max_request)
            else:
                if cur_start >= 0:
                    requests.append(RangeRequest(cur_start, cur_end))
                cur_start, cur_end = pos, min(end, pos + max_request)
            pos = cur_end
    if cur_start >= 0:
        requests.append(RangeRequest(cur_start, cur_end))
    return requests


def slice_results(ranges: Sequence[tuple[int, int]], requests: Sequence[RangeRequest],
                  payloads: Sequence[bytes | memoryview], *, key: str | None = None) -> list[bytes]:
    """Bytes for each of ``ranges`` (in order) cut out of the request payloads.

    ``requests`` must be what :func:`plan_ranges` returned for ``ranges`` and
    ``payloads[i]`` the bytes received for ``requests[i]``.  A payload shorter
    than its request means the object ended early: some range reaches past
    the end of the object, which raises StoreError naming the object size.
    """
    if len(requests) != len(payloads):
        raise ValueError(f"{len(requests)} requests but {len(payloads)} payloads")
    for req, payload in zip(requests, payloads, strict=True):
        if len(payload) != req.length:
            size = req.start + len(payload)
            raise StoreError(
                f"byte range reaches past the end of the object: requested up to {req.end}, "
                f"object size is {size}",
                key=key,
            )

    starts = [req.start for req in requests]
    out: list[bytes] = []
    for start, end in ranges:
        if end <= start:
            out.append(b"")
            continue
        # The request holding byte `start` is the last one starting at or before it.
        idx = bisect.bisect_right(starts, start) - 1
        pieces: list[bytes] = []
        pos = start
        while pos < end:
            if idx < 0 or idx >= len(requests) or not (
                requests[idx].start <= pos < requests[idx].end
            ):
                raise ValueError(f"range [{start}, {end}) is not covered by the planned requests")
            req = requests[idx]
            take_end = min(end, req.end)
            pieces.append(bytes(payloads[idx][pos - req.start:take_end - req.start]))
            pos = take_end
            idx += 1
        out.append(pieces[0] if len(pieces) == 1 else b"".join(pieces))
    return out
