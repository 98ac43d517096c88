"""Per-column statistics: capture from Parquet footers, and their JSON form.

JSON encodings, chosen so values round-trip exactly:

* integers, booleans, strings: as themselves;
* floats: as numbers; non-finite values are never written (stats unknown);
* ``date32``: ``"YYYY-MM-DD"``;
* timestamps: the integer count of the column's unit since the epoch;
* ``decimal128``: the decimal's text;
* binary: no min/max is kept (only null counts).

Decoding yields the Python values that ``pyarrow.Scalar.as_py()`` gives for
the column type, which is what the pruning code compares against.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from caslake.expr import ColumnStats

JsonStats = dict[str, Any]  # {"min": v, "max": v, "nulls": n}; keys may be absent


def value_to_json(value: Any, t: pa.DataType) -> Any:
    """None means: do not record (unknown)."""
    if value is None:
        return None
    if pa.types.is_timestamp(t):
        return int(pa.scalar(value, type=t).cast(pa.int64()).as_py())
    if pa.types.is_date32(t):
        return value.isoformat() if isinstance(value, dt.date) else None
    if pa.types.is_decimal(t):
        return str(value)
    if pa.types.is_floating(t):
        f = float(value)
        return f if math.isfinite(f) else None
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return None
    if pa.types.is_boolean(t):
        return bool(value)
    if pa.types.is_integer(t):
        return int(value)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return str(value)
    return None


_UTC_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_NAIVE_EPOCH = dt.datetime(1970, 1, 1)
_MICROS_PER_TICK = {"s": 1_000_000, "ms": 1000, "us": 1, "ns": 1}


def _timestamp_from_ticks(ticks: int, t: pa.TimestampType, upper: bool) -> dt.datetime:
    """Ticks of the column's unit as a datetime (UTC-aware if the column has a zone).

    Nanoseconds are rounded outwards to microseconds (down for a lower bound,
    up for an upper bound) so a decoded bound is still a bound."""
    unit: str = t.unit
    if unit == "ns":
        micros = -((-ticks) // 1000) if upper else ticks // 1000
    else:
        micros = ticks * _MICROS_PER_TICK[unit]
    epoch = _UTC_EPOCH if t.tz is not None else _NAIVE_EPOCH
    return epoch + dt.timedelta(microseconds=micros)


def value_from_json(value: Any, t: pa.DataType, *, upper: bool = False) -> Any:
    """Inverse of the encoding above.  Raises ValueError/TypeError/OverflowError on bad input.

    ``upper`` says the value is an upper bound (only matters where decoding rounds)."""
    if value is None:
        return None
    if pa.types.is_timestamp(t):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError("timestamp stat must be an integer")
        return _timestamp_from_ticks(value, t, upper)  # type: ignore[arg-type]
    if pa.types.is_date32(t):
        return dt.date.fromisoformat(value)
    if pa.types.is_decimal(t):
        return Decimal(value)
    if pa.types.is_floating(t):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError("float stat must be a number")
        return float(value)
    if pa.types.is_boolean(t):
        if not isinstance(value, bool):
            raise TypeError("bool stat must be a boolean")
        return value
    if pa.types.is_integer(t):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError("integer stat must be an integer")
        return value
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        if not isinstance(value, str):
            raise TypeError("string stat must be a string")
        return value
    raise TypeError(f"no statistics are kept for {t}")


def _rg_column_stats(stats: Any) -> tuple[Any, Any, int | None]:
    if stats is None:
        return None, None, None
    nulls = stats.null_count if stats.has_null_count else None
    if not stats.has_min_max:
        return None, None, nulls
    return stats.min, stats.max, nulls


def row_group_stats(md: pq.FileMetaData, rg: int, columns: dict[str, pa.DataType]
                    ) -> dict[str, ColumnStats]:
    """Footer statistics of one row group, as pruning values, for the named top-level columns."""
    group = md.row_group(rg)
    out: dict[str, ColumnStats] = {}
    for i in range(group.num_columns):
        chunk = group.column(i)
        name = chunk.path_in_schema
        t = columns.get(name)
        if t is None:
            continue
        lo, hi, nulls = _rg_column_stats(chunk.statistics)
        if value_to_json(lo, t) is None or value_to_json(hi, t) is None:
            lo = hi = None
        out[name] = ColumnStats(min=lo, max=hi, null_count=nulls)
    return out


def file_stats(md: pq.FileMetaData, columns: dict[str, pa.DataType]) -> dict[str, JsonStats]:
    """Whole-file stats, merged over row groups, in JSON form, keyed by column name."""
    acc: dict[str, JsonStats] = {}
    known_minmax: dict[str, bool] = {name: True for name in columns}
    known_nulls: dict[str, bool] = {name: True for name in columns}
    for rg in range(md.num_row_groups):
        for name, cs in row_group_stats(md, rg, columns).items():
            t = columns[name]
            entry = acc.setdefault(name, {})
            if cs.null_count is None:
                known_nulls[name] = False
            else:
                entry["nulls"] = entry.get("nulls", 0) + cs.null_count
            if cs.min is None or cs.max is None:
                if md.row_group(rg).num_rows > (cs.null_count or 0) or cs.null_count is None:
                    known_minmax[name] = False
                continue
            lo, hi = value_to_json(cs.min, t), value_to_json(cs.max, t)
            if "min" not in entry or _less(lo, entry["min"], t):
                entry["min"] = lo
            if "max" not in entry or _less(entry["max"], hi, t):
                entry["max"] = hi
    for name in list(acc):
        if not known_minmax[name]:
            acc[name].pop("min", None)
            acc[name].pop("max", None)
        if not known_nulls[name]:
            acc[name].pop("nulls", None)
    return acc


def _less(a: Any, b: Any, t: pa.DataType) -> bool:
    if pa.types.is_decimal(t):
        return Decimal(a) < Decimal(b)
    return bool(a < b)


def to_column_stats(js: Mapping[str, Any] | None, t: pa.DataType) -> ColumnStats:
    if not js:
        return ColumnStats(min=None, max=None, null_count=None)
    return ColumnStats(min=value_from_json(js.get("min"), t),
                       max=value_from_json(js.get("max"), t, upper=True),
                       null_count=js.get("nulls"))
