"""Conforming appended data to the table schema: which input types are accepted
for which table types, and the per-batch reorder and cast.

Owns the append rules users meet on day one:

* every table column must be in the data (a missing column is a
  ``SchemaMismatch`` naming all of them; null-filling is an explicit opt-in
  that belongs to schema evolution, not a default);
* a column of another type is accepted when the cast cannot change a value:
  integer and float widenings, integers into floats that hold them exactly,
  large/small/view string and binary variants, dictionary-encoded values,
  coarser timestamp units into finer ones, and finer into coarser when no
  value of the batch loses precision (else the column and the first such value
  are named); lists and structs element by element;
* time zones: naive and aware timestamps are never mixed (the error says which
  side is which); ``UTC``, ``Etc/UTC``, ``+00:00`` and their aliases are one zone.

Never writes anything; never fills, truncates or reinterprets a value.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from caslake.errors import SchemaMismatch

_UTC_NAMES = frozenset({"utc", "etc/utc", "+00:00", "-00:00", "z", "etc/universal", "universal",
                        "etc/zulu", "zulu", "uct", "etc/uct", "gmt", "etc/gmt", "+0000",
                        "00:00"})
_UNITS = {"s": 0, "ms": 1, "us": 2, "ns": 3}
# float mantissa bits: an integer of at most this many bits converts exactly
_MANTISSA = {16: 11, 32: 24, 64: 53}


def same_zone(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return a is b
    return a == b or (a.lower() in _UTC_NAMES and b.lower() in _UTC_NAMES)


def _int_fits(src: pa.DataType, dst: pa.DataType) -> bool:
    s_signed, d_signed = pa.types.is_signed_integer(src), pa.types.is_signed_integer(dst)
    if s_signed and not d_signed:
        return False
    extra = 1 if d_signed and not s_signed else 0  # unsigned into signed needs a sign bit
    return bool(src.bit_width + extra <= dst.bit_width)


def _value_type(t: pa.DataType) -> pa.DataType:
    return t.value_type if pa.types.is_dictionary(t) else t


def cast_problem(src: pa.DataType, dst: pa.DataType) -> str | None:
    """Why data of type ``src`` cannot be appended to a column of type ``dst``
    (None if it can: equal, or a cast that keeps every value)."""
    if src == dst or pa.types.is_null(src):
        return None
    src = _value_type(src)
    if src == dst:
        return None
    strings = (pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view)
    binaries = (pa.types.is_binary, pa.types.is_large_binary, pa.types.is_binary_view)
    for family in (strings, binaries):
        if any(f(src) for f in family) and any(f(dst) for f in family):
            return None
    if pa.types.is_integer(src) and pa.types.is_integer(dst):
        return None if _int_fits(src, dst) else "it could overflow"
    if pa.types.is_integer(src) and pa.types.is_floating(dst):
        bits = src.bit_width - (1 if pa.types.is_signed_integer(src) else 0)
        return None if bits <= _MANTISSA[dst.bit_width] else "the floats cannot hold every value"
    if pa.types.is_floating(src) and pa.types.is_floating(dst):
        return None if src.bit_width <= dst.bit_width else "it would lose precision"
    if pa.types.is_date(src) and pa.types.is_date(dst):
        return None
    if pa.types.is_timestamp(src) and pa.types.is_timestamp(dst):
        if (src.tz is None) != (dst.tz is None):
            if src.tz is None:
                return (f"the data has no time zone but the table's timestamps are in "
                        f"{dst.tz}")
            return f"the data's timestamps are in {src.tz} but the table has no time zone"
        if not same_zone(src.tz, dst.tz):
            return f"the data's time zone is {src.tz}, the table's is {dst.tz}"
        return None  # a finer unit is checked value by value when the batch is cast
    if pa.types.is_decimal(src) and pa.types.is_decimal(dst):
        whole = src.precision - src.scale <= dst.precision - dst.scale
        return None if whole and src.scale <= dst.scale else "it could lose digits"
    if _is_list(src) and _is_list(dst):
        src_list: Any = src
        dst_list: Any = dst
        return cast_problem(src_list.value_type, dst_list.value_type)
    if pa.types.is_struct(src) and pa.types.is_struct(dst):
        names = [src.field(i).name for i in range(src.num_fields)]
        want = [dst.field(i).name for i in range(dst.num_fields)]
        if sorted(names) != sorted(want):
            return f"its fields are {names}, the table's are {want}"
        for i in range(dst.num_fields):
            problem = cast_problem(src.field(dst.field(i).name).type, dst.field(i).type)
            if problem is not None:
                return f"field {dst.field(i).name!r}: {problem}"
        return None
    return "no lossless cast exists"


def _is_list(t: pa.DataType) -> bool:
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t)
                or pa.types.is_list_view(t) or pa.types.is_large_list_view(t))


def _cast(arr: Any, name: str, dst: pa.DataType) -> Any:
    src = arr.type
    if pa.types.is_timestamp(src) and pa.types.is_timestamp(dst):
        if src.tz != dst.tz:
            # the same instants relabelled: UTC under another name (cast_problem checked it)
            arr = arr.cast(pa.timestamp(src.unit, tz=dst.tz))
        if _UNITS[src.unit] > _UNITS[dst.unit]:
            return _narrow_timestamps(arr, name, dst)
    try:
        return arr.cast(dst, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise SchemaMismatch(f"column {name!r} cannot be cast from {src} to {dst}: {e}",
                             column=name, expected=str(dst), actual=str(src)) from None


def _narrow_timestamps(arr: Any, name: str, dst: pa.DataType) -> Any:
    narrowed = arr.cast(dst, safe=False)
    lossy = pc.not_equal(narrowed.cast(arr.type), arr)
    if pc.any(lossy).as_py():
        first = arr.filter(pc.fill_null(lossy, False))[0]
        raise SchemaMismatch(
            f"column {name!r}: {arr.type} value {_timestamp_text(first)} "
            f"would lose precision as {dst} (round or truncate the data first)",
            column=name, expected=str(dst), actual=str(arr.type))
    return narrowed


def _timestamp_text(value: Any) -> str:
    """``2020-01-01 00:00:00.000000001``: the whole seconds (in the value's zone), then
    every digit of the fraction its unit has.  Arrow's ``%S`` already prints the
    fraction for sub-second units, so the seconds are formatted at unit ``s``."""
    unit, tz = value.type.unit, value.type.tz
    digits = {"s": 0, "ms": 3, "us": 6, "ns": 9}[unit]
    raw = value.cast(pa.int64()).as_py()
    seconds, fraction = divmod(raw, 10 ** digits)  # floor: right before 1970 too
    whole = pc.strftime(pa.scalar(seconds, pa.timestamp("s", tz=tz)),
                        format="%Y-%m-%d %H:%M:%S").as_py()
    return f"{whole}.{fraction:0{digits}d}" if digits else str(whole)


class SchemaConformer:
    """Checks an input schema once, then reorders/casts each batch to the table schema."""

    def __init__(self, table_schema: pa.Schema, input_schema: pa.Schema) -> None:
        self.target = table_schema
        names = set(input_schema.names)
        if len(names) != len(input_schema.names):
            raise SchemaMismatch("the data has duplicate column names")
        extra = [f for f in input_schema if f.name not in table_schema.names]
        if extra:
            f = extra[0]
            raise SchemaMismatch(
                f"column {f.name!r} ({f.type}) is not in the table schema "
                f"(columns: {', '.join(table_schema.names)})", column=f.name,
                actual=str(f.type))
        missing = [f for f in table_schema if f.name not in names]
        if missing:
            listed = ", ".join(f"{f.name!r} ({f.type})" for f in missing)
            raise SchemaMismatch(
                f"the data is missing column(s) {listed} of the table; add them (null "
                "where unknown) or select them", column=missing[0].name,
                expected=str(missing[0].type))
        self.plan: list[tuple[pa.Field[Any], pa.Field[Any]]] = []
        for tf in table_schema:
            sf = input_schema.field(tf.name)
            problem = cast_problem(sf.type, tf.type)
            if problem is not None:
                raise SchemaMismatch(
                    f"column {tf.name!r} has type {sf.type} in the data but {tf.type} in the "
                    f"table: {problem}", column=tf.name, expected=str(tf.type),
                    actual=str(sf.type))
            self.plan.append((tf, sf))

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        arrays = []
        for tf, sf in self.plan:
            arr = batch.column(sf.name)
            if arr.type != tf.type:
                arr = _cast(arr, tf.name, tf.type)
            if not tf.nullable and arr.null_count:
                raise SchemaMismatch(f"column {tf.name!r} is not nullable but the data has "
                                     f"{arr.null_count} null(s)", column=tf.name,
                                     expected=str(tf.type), actual=str(arr.type))
            arrays.append(arr)
        return pa.RecordBatch.from_arrays(arrays, schema=self.target)
