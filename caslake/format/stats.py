"""Per-column statistics: :class:`ColumnStats`, their JSON form in manifests, and decoding.

Capturing statistics from Parquet footers is :mod:`caslake.format.parquet`'s
job; this module owns the values.  :func:`column_stats` is the one place that
turns manifest statistics into :class:`ColumnStats` (a bad value is
CorruptMetadata naming the manifest).

JSON encodings, chosen so values round-trip exactly:

* integers, booleans, strings: as themselves;
* floats (float16 too, decoded from its footer bytes): as numbers; non-finite
  values are never written (stats unknown);
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
import numbers
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa

from caslake.errors import CorruptMetadata
from caslake.format.manifest import DataFile
from caslake.format.schema import Field, TableSchema

JsonStats = dict[str, Any]  # {"min": v, "max": v, "nulls": n}; keys may be absent


@dataclass(frozen=True)
class ColumnStats:
    """Statistics of one column over one chunk (file or row group).

    Values are Python values as ``pa.scalar(v, type).as_py()`` returns them;
    ``None`` means unknown.  ``min``/``max`` exclude NULLs (and, for floats,
    may or may not exclude NaN -- a NaN bound is treated as unknown).
    This is what :func:`caslake.expr.might_match` prunes with.
    """

    min: Any | None
    max: Any | None
    null_count: int | None


def footer_value(value: Any, t: pa.DataType) -> Any:
    """A Parquet footer's min/max as the Python value of column type ``t``: pyarrow
    gives a ``float16`` bound as its two little-endian bytes (any other length is
    unknown).  Every reader of footer bounds decodes through here
    (:func:`caslake.format.parquet.row_group_stats`, ``file_stats``,
    ``stats_by_field_id``); a float16 bound is then a float like any other."""
    if pa.types.is_float16(t) and isinstance(value, bytes):
        return struct.unpack("<e", value)[0] if len(value) == 2 else None
    return value


def value_to_json(value: Any, t: pa.DataType) -> Any:
    """None means: do not record (unknown)."""
    value = footer_value(value, t)
    if value is None:
        return None
    if pa.types.is_timestamp(t):
        return int(pa.scalar(value, type=t).cast(pa.int64()).as_py())
    if pa.types.is_date32(t):
        return value.isoformat() if isinstance(value, dt.date) else None
    if pa.types.is_decimal(t):
        return str(value)
    if pa.types.is_floating(t):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return None  # e.g. an undecodable float16 bound: unknown, never an error
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


def column_stats(js: Mapping[str, Any] | None, t: pa.DataType, *, key: str, path: str,
                 column: str) -> ColumnStats:
    """Manifest statistics of one column of data file ``path`` as pruning values.

    The one decoder of manifest statistics: any value that does not decode as the
    column's type is CorruptMetadata naming ``key`` (the manifest holding them)."""
    if not js:
        return ColumnStats(min=None, max=None, null_count=None)
    try:
        return ColumnStats(min=value_from_json(js.get("min"), t),
                           max=value_from_json(js.get("max"), t, upper=True),
                           null_count=js.get("nulls"))
    except (TypeError, ValueError, OverflowError, ArithmeticError) as e:
        raise CorruptMetadata(key, f"statistics of {column!r} for {path} are not valid ({e})"
                              ) from None


def field_stats(f: DataFile, field_id: int, schema: TableSchema, *, key: str
                ) -> ColumnStats | None:
    """Pruning statistics of one field of data file ``f`` (listed in manifest
    ``key``) by its **field id**: a top-level column, or a primitive field inside
    structs only (``dev.geo.lat``, format 4).  None when the manifest keeps none
    for it (a field inside a list or map, an unknown id, a file written before).
    A bad value is CorruptMetadata naming ``key``."""
    js = f.stats.get(field_id)
    hit = schema.all_by_id().get(field_id)
    if js is None or hit is None or hit[1].nested:
        return None
    path, fld = hit
    return column_stats(js, fld.arrow_type, key=key, path=f.path, column=path)


def data_file_stats(f: DataFile, fields: Iterable[Field], *, key: str
                    ) -> dict[str, ColumnStats]:
    """Pruning statistics of ``fields`` (those the manifest has stats for) of data
    file ``f``, listed in manifest ``key``; a bad value is CorruptMetadata."""
    return {fld.name: column_stats(f.stats[fld.id], fld.arrow_type, key=key, path=f.path,
                                   column=fld.name)
            for fld in fields if fld.id in f.stats}
