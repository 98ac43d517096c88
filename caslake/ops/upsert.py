"""Duplicate keys in an upsert's input; the upsert as a case of MERGE.

``upsert(data, key)`` is ``merge(data, on=key).when_matched_update_all()
.when_not_matched_insert_all()`` (:mod:`caslake.ops.merge`) on a table holding
each key at most once: both hide the matched rows and add every input row.  It
keeps its own path (deletes planned at commit time, staged in a transaction,
used by Spark's executors), and its contract differs in two ways: a key the table
holds several times is replaced by one row, and a key twice in the input is
refused even when it matches nothing (docs/protocol.md, "Merge").

An upsert replaces the table's rows with the input's row for each key, so two
input rows with one key have no single meaning.  By default that is a
``DuplicateKey`` error naming one such key and how often it occurs (as Delta's
MERGE refuses a source row matching a target row twice).  ``on_duplicate``
makes the choice explicit: ``"last"`` or ``"first"`` keeps that row of each key,
in input order.  Never reorders the kept rows.
"""

from __future__ import annotations

from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc

from caslake.errors import DuplicateKey, InvalidArgument

OnDuplicate = Literal["error", "last", "first"]
CHOICES = ("error", "last", "first")
_ROW = "__caslake_row"


def duplicate_key(key: dict[str, object], count: int, keys_duplicated: int | None,
                  remedy: str, *, subject: str = "the upsert's data has key") -> DuplicateKey:
    """The error for an upsert input holding ``key`` ``count`` times (and, with
    ``subject``, for a MERGE whose source matches one target row ``count`` times)."""
    shown = ", ".join(f"{k}={v!r}" for k, v in key.items())
    in_all = f" ({keys_duplicated} duplicated key(s) in all)" if keys_duplicated else ""
    return DuplicateKey(f"{subject} ({shown}) {count} times{in_all}; make "
                        f"the keys unique or {remedy}", key=key, count=count)


def resolve_duplicate_keys(table: pa.Table, keys: list[str], on_duplicate: str) -> pa.Table:
    """``table`` with one row per key (per ``on_duplicate``), or DuplicateKey."""
    if on_duplicate not in CHOICES:
        raise InvalidArgument(f"on_duplicate must be one of {', '.join(CHOICES)}, "
                              f"not {on_duplicate!r}")
    if table.num_rows < 2:
        return table
    numbered = table.select(keys).append_column(_ROW, pa.array(range(table.num_rows),
                                                                pa.int64()))
    groups = numbered.group_by(keys, use_threads=False).aggregate(
        [(_ROW, "count"), (_ROW, "min"), (_ROW, "max")])
    if groups.num_rows == table.num_rows:
        return table
    if on_duplicate == "error":
        dup = groups.filter(pc.greater(groups[f"{_ROW}_count"], pa.scalar(1)))
        first = dup.sort_by(f"{_ROW}_min").slice(0, 1).to_pylist()[0]
        raise duplicate_key({k: first[k] for k in keys}, int(first[f"{_ROW}_count"]),
                            dup.num_rows, "choose on_duplicate='last' or 'first'")
    kept = groups[f"{_ROW}_max" if on_duplicate == "last" else f"{_ROW}_min"]
    return table.take(pc.take(kept, pc.sort_indices(kept)))  # input order
