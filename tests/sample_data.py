"""Small tables that several test modules build the same way, and how they read them back.

Only what is really shared lives here; a test whose data has its own shape keeps it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

import caslake

#: ``id`` (not null) and a string ``v`` naming the batch a row came from.
ID_V_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


def id_v_rows(ids: Iterable[int], tag: str = "r") -> pa.Table:
    """Rows of :data:`ID_V_SCHEMA`: each id with ``v = f"{tag}{id}"``."""
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{tag}{i}" for i in ids]},
                    schema=ID_V_SCHEMA)


def live_ids(t: caslake.Table, **scan: Any) -> list[int]:
    """The sorted ``id`` values a scan of ``t`` returns (``scan``: Table.scan's arguments)."""
    return sorted(t.scan(**scan).to_arrow().column("id").to_pylist())


def wait_out_gc_fence(t: caslake.Table) -> None:
    """Sleep until the wall clock passes gc's fence on ``t``'s head.  A writer that
    starts before it is refused (WriterOutlivedGc), which is right; on S3 the fence is a
    collected object's whole-second Last-Modified + 999 ms, so a test that writes in
    the same second as a gc that pretended to run in the future must wait it out."""
    fence = t.refresh().snapshot.manifest.collected_until_ms
    time.sleep(max(0.0, fence / 1000 - time.time()) + 0.005)
