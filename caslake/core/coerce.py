"""Conforming appended data to the table schema: which input types are accepted
for which table types, and the per-batch reorder and cast.

Owns the append rules users meet on day one:

* every table column must be in the data (a missing column is a
  ``SchemaMismatch`` naming all of them; null-filling is an explicit opt-in
  that belongs to schema evolution, not a default);
* a column of another type is accepted when the cast changes no value:
  large/small/view string and binary variants, dictionary-encoded values and
  coarser timestamp units into finer ones always; numbers into numbers
  (integers, floats and decimals, any width: a DuckDB ``HUGEINT`` into
  ``int64``, ``decimal(18,3)`` into ``decimal(10,2)``, a pandas ``float64``
  holding NULLs as NaN into ``int64``) and finer timestamp units into coarser
  ones when *every value of the batch* converts and converts back unchanged --
  else a SchemaMismatch names the column (full path) and the first value that
  would change (:func:`checked_numeric_cast`; docs/interop.md, "Casts");
* nested columns convert at every level: any list encoding (``large_list``,
  ``fixed_size_list``, list views) into the table's list, a struct's fields
  matched **by name** in any order (a nullable field the data lacks is NULL; a
  non-nullable one, or a field the table lacks, is refused), maps key by key and
  value by value; every refusal names the full path (``items.element.price``);
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


def _plain(t: pa.DataType) -> pa.DataType:
    """The value type of a dictionary or run-end encoded type (else ``t``)."""
    if pa.types.is_dictionary(t) or pa.types.is_run_end_encoded(t):
        return _plain(t.value_type)
    return t


def nested_problem(src: Any, dst: Any, path: str) -> tuple[str, str] | None:
    """Where and why data of type ``src`` cannot be appended to a column (or nested
    field, at ``path``) of type ``dst``; None if it can.  Nested types are
    checked at every level (see the module docstring)."""
    src = _plain(src)
    if pa.types.is_null(src):
        return None
    kind = _kind(dst)
    if kind is None:
        if _kind(src) is not None:
            return path, f"it is {src} in the data, {dst} in the table"
        problem = cast_problem(src, dst)
        return None if problem is None else (path, problem)
    if _kind(src) != kind:
        return path, f"it is {src} in the data, a {kind} in the table"
    if kind == "struct":
        return _struct_problem(src, dst, path)
    if kind == "list":
        return nested_problem(src.value_type, dst.value_type, f"{path}.element")
    return (nested_problem(src.key_type, dst.key_type, f"{path}.key")
            or nested_problem(src.item_type, dst.item_type, f"{path}.value"))


def _struct_problem(src: pa.DataType, dst: pa.DataType, path: str) -> tuple[str, str] | None:
    names = {dst.field(i).name for i in range(dst.num_fields)}
    for i in range(src.num_fields):
        name = src.field(i).name
        if name not in names:
            return (f"{path}.{name}", f"the table's struct {path!r} has no field {name!r} "
                    f"(fields: {', '.join(sorted(names))})")
    have = {src.field(i).name: src.field(i) for i in range(src.num_fields)}
    for i in range(dst.num_fields):
        f = dst.field(i)
        if f.name not in have:
            if not f.nullable:
                return (f"{path}.{f.name}", "the data lacks this field and the table's "
                        "field is not nullable")
            continue
        problem = nested_problem(have[f.name].type, f.type, f"{path}.{f.name}")
        if problem is not None:
            return problem
    return None


def _kind(t: pa.DataType) -> str | None:
    """``struct``, ``list`` (any list encoding) or ``map`` for a nested type, else None."""
    if pa.types.is_struct(t):
        return "struct"
    if _is_list(t) or pa.types.is_fixed_size_list(t):
        return "list"
    if pa.types.is_map(t):
        return "map"
    return None


def cast_problem(src: pa.DataType, dst: pa.DataType) -> str | None:
    """Why data of (primitive) type ``src`` cannot be appended to a column of type
    ``dst`` (None if it can: equal, or a cast that keeps every value)."""
    if src == dst or pa.types.is_null(src):
        return None
    src = _plain(src)
    if src == dst:
        return None
    strings = (pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view)
    binaries = (pa.types.is_binary, pa.types.is_large_binary, pa.types.is_binary_view)
    for family in (strings, binaries):
        if any(f(src) for f in family) and any(f(dst) for f in family):
            return None
    if _is_number(src) and _is_number(dst):
        return None  # checked value by value when the batch is cast
    if pa.types.is_date(src) and pa.types.is_date(dst):
        return None  # a date64 that is not a whole day is refused by the checked cast
    if pa.types.is_time(src) and pa.types.is_time(dst):
        return None  # a finer unit is checked value by value when the batch is cast
    if isinstance(dst, pa.ExtensionType) and src == dst.storage_type:
        return None  # e.g. 16-byte fixed_size_binary into uuid
    if pa.types.is_timestamp(src) and pa.types.is_timestamp(dst):
        if (src.tz is None) != (dst.tz is None):
            if src.tz is None:
                return (f"the data has no time zone but the table's timestamps are in "
                        f"{dst.tz}")
            return f"the data's timestamps are in {src.tz} but the table has no time zone"
        if not same_zone(src.tz, dst.tz):
            return f"the data's time zone is {src.tz}, the table's is {dst.tz}"
        return None  # a finer unit is checked value by value when the batch is cast
    if _kind(src) is not None or _kind(dst) is not None:
        problem = nested_problem(src, dst, "")
        return None if problem is None else f"{problem[0].lstrip('.') or 'value'}: {problem[1]}"
    return "no lossless cast exists"


def _is_list(t: pa.DataType) -> bool:
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t)
                or pa.types.is_list_view(t) or pa.types.is_large_list_view(t))


def convert(arr: Any, dst: pa.Field[Any], path: str) -> Any:
    """``arr`` (one batch's column or nested values) as type ``dst.type``, at every
    level (see the module docstring); a value that does not fit, or a NULL where
    the table's field is not nullable, is a SchemaMismatch naming ``path``."""
    t = dst.type
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if pa.types.is_run_end_encoded(arr.type):
        arr = _pc.run_end_decode(arr)
    if arr.type == t and not _has_required_child(t):
        return arr
    if pa.types.is_null(arr.type):
        return _pa.nulls(len(arr), t)
    problem = nested_problem(arr.type, t, path)
    if problem is not None:
        raise SchemaMismatch(f"field {problem[0]!r} cannot take the data: {problem[1]}",
                             column=problem[0], expected=str(t), actual=str(arr.type))
    kind = _kind(t)
    if kind == "struct":
        return _convert_struct(arr, t, path)
    if kind == "list":
        return _convert_list(arr, t, path)
    if kind == "map":
        return _convert_map(arr, t, path)
    return _cast(arr, path, t)


def _check_nulls(arr: Any, f: pa.Field[Any], path: str, where: Any = None) -> None:
    """A non-nullable field holds no NULL (``where``: only rows where it is true count)."""
    if f.nullable or not arr.null_count:
        return
    nulls = arr.null_count if where is None else pc.sum(
        pc.and_(arr.is_null(), where)).as_py() or 0
    if nulls:
        raise SchemaMismatch(f"field {path!r} is not nullable but the data has {nulls} "
                             "null(s)", column=path, expected=str(f.type), actual=str(arr.type))


def _has_required_child(t: Any) -> bool:
    """Whether a non-nullable field lies anywhere below ``t`` (a map's key aside,
    which Arrow itself keeps non-null)."""
    kind = _kind(t)
    if kind == "struct":
        return any(not f.nullable or _has_required_child(f.type) for f in t)
    if kind == "list":
        f = t.value_field
        return not f.nullable or _has_required_child(f.type)
    if kind == "map":
        f = t.item_field
        return not f.nullable or _has_required_child(f.type) or _has_required_child(t.key_type)
    return False


def _without_validity(arr: Any) -> Any:
    """``arr`` with no NULLs: its slots that were NULL keep whatever value lies
    under them.  Only for a non-nullable field whose NULLs all lie under a NULL
    parent (so no reader ever sees those slots), as Spark sends such rows."""
    kind = _kind(arr.type)
    if kind == "struct":
        kids = [arr.field(i) for i in range(arr.type.num_fields)]
        return pa.StructArray.from_arrays(kids, fields=list(arr.type))
    if kind == "list":
        offsets, _, (values,) = _offsets_values(arr, arr.values)
        return pa.ListArray.from_arrays(offsets, values, type=arr.type)
    if kind == "map":
        offsets, _, (keys, items) = _offsets_values(arr, arr.keys, arr.items)
        return _pa.MapArray.from_arrays(offsets, keys, items, type=arr.type)
    return pa.Array.from_buffers(arr.type, len(arr), [None, *arr.buffers()[1:]],
                                 offset=arr.offset)


def _convert_struct(arr: Any, t: pa.DataType, path: str) -> Any:
    index = {arr.type.field(i).name: i for i in range(arr.type.num_fields)}
    valid = arr.is_valid() if arr.null_count else None
    kids = []
    fields = [t.field(i) for i in range(t.num_fields)]
    for f in fields:
        where = f"{path}.{f.name}"
        if f.name in index:
            kid = convert(arr.field(index[f.name]), f, where)  # sliced like its parent
            _check_nulls(kid, f, where, valid)
            if not f.nullable and kid.null_count:  # NULLs only under NULL parents
                kid = _without_validity(kid)
        else:
            kid = _pa.nulls(len(arr), f.type)
        kids.append(kid)
    mask = None if valid is None else pc.invert(valid)
    return pa.StructArray.from_arrays(kids, fields=fields, mask=mask)


def _offsets_values(arr: Any, *children: Any) -> tuple[Any, Any, list[Any]]:
    """A list or map array's offsets from 0 (int32), its null mask (None: no NULL),
    and the part of each of ``children`` (its child values) the offsets cover."""
    offsets = arr.offsets
    start, end = offsets[0].as_py(), offsets[-1].as_py()
    if end - start >= 2**31:
        raise SchemaMismatch("a list column holds more than 2**31 values in one batch; "
                             "append smaller batches")
    mask = arr.is_null() if arr.null_count else None
    return (pc.subtract(offsets, start).cast(pa.int32()), mask,
            [c.slice(start, end - start) for c in children])


def _convert_list(arr: Any, t: Any, path: str) -> Any:
    src = arr.type
    if pa.types.is_list(src) or pa.types.is_large_list(src):
        offsets, mask, (values,) = _offsets_values(arr, arr.values)
    else:  # fixed-size lists and list views: values in list order, and the lengths
        # (pyarrow's cast of a list view with NULLs to a list gives short offsets)
        values = pc.list_flatten(arr)
        lengths = pc.fill_null(pc.list_value_length(arr), 0).cast(pa.int64())
        ends = pc.cumulative_sum(lengths)
        if len(values) >= 2**31:
            raise SchemaMismatch(f"field {path!r} holds more than 2**31 values in one batch; "
                                 "append smaller batches", column=path)
        offsets = pa.concat_arrays([pa.array([0], pa.int64()), ends]).cast(pa.int32())
        mask = arr.is_null() if arr.null_count else None
    element = t.value_field
    where = f"{path}.element"
    values = convert(values, element, where)
    _check_nulls(values, element, where)
    return pa.ListArray.from_arrays(offsets, values, type=t, mask=mask)


def _convert_map(arr: Any, t: Any, path: str) -> Any:
    offsets, mask, (keys, items) = _offsets_values(arr, arr.keys, arr.items)
    key, item = t.key_field, t.item_field
    keys = convert(keys, key, f"{path}.key")
    items = convert(items, item, f"{path}.value")
    _check_nulls(items, item, f"{path}.value")
    return _pa.MapArray.from_arrays(offsets, keys, items, type=t, mask=mask)


def _cast(arr: Any, name: str, dst: pa.DataType) -> Any:
    src = arr.type
    if pa.types.is_timestamp(src) and pa.types.is_timestamp(dst):
        if src.tz != dst.tz:
            # the same instants relabelled: UTC under another name (cast_problem checked it)
            arr = arr.cast(pa.timestamp(src.unit, tz=dst.tz))
        if _UNITS[src.unit] > _UNITS[dst.unit]:
            return _narrow_timestamps(arr, name, dst)
    if _is_number(src) and _is_number(dst) and not _always_exact(src, dst):
        return checked_numeric_cast(arr, name, dst)
    try:
        return arr.cast(dst, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise SchemaMismatch(f"column {name!r} cannot be cast from {src} to {dst}: {e}",
                             column=name, expected=str(dst), actual=str(src)) from None


def _is_number(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t))


def _always_exact(src: pa.DataType, dst: pa.DataType) -> bool:
    """Whether every value of ``src`` is one of ``dst`` (a widening: no check needed)."""
    if pa.types.is_integer(src) and pa.types.is_integer(dst):
        return _int_fits(src, dst)
    if pa.types.is_integer(src) and pa.types.is_floating(dst):
        bits = src.bit_width - (1 if pa.types.is_signed_integer(src) else 0)
        return bits <= _MANTISSA[dst.bit_width]
    if pa.types.is_floating(src) and pa.types.is_floating(dst):
        return bool(src.bit_width <= dst.bit_width)
    if pa.types.is_decimal(src) and pa.types.is_decimal(dst):
        return bool(src.precision - src.scale <= dst.precision - dst.scale
                    and src.scale <= dst.scale)
    return False


def checked_numeric_cast(arr: Any, path: str, dst: pa.DataType) -> Any:
    """``arr`` (integers, floats or decimals) as the number type ``dst`` when every
    value converts and reads back unchanged; else a SchemaMismatch naming ``path``
    and the first value that would change.  NULLs stay NULL.  A float becomes the
    shortest decimal that reads back as the same float (``0.1`` -> ``0.10``), so
    it fits a decimal when that text has at most its scale's digits."""
    try:
        return _exact_cast(arr, dst)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    first = _first_misfit(arr, dst)
    raise SchemaMismatch(
        f"column {path!r}: the {arr.type} value {_number_text(first)} does not fit "
        f"{dst} without changing (cast or round the data first)",
        column=path, expected=str(dst), actual=str(arr.type))


def _exact_cast(arr: Any, dst: pa.DataType) -> Any:
    """``arr`` cast to ``dst``; ArrowInvalid if a non-NULL value would change."""
    src = arr.type
    if pa.types.is_floating(src) and pa.types.is_decimal(dst):
        # the shortest text that reads back as the same float, then its exact digits;
        # read back through text too (Arrow parses "1e-311" as 0.00 without a word)
        out = pc.cast(pc.cast(arr, pa.string()), dst, safe=True)
        _same(pc.cast(pc.cast(out, pa.string()), src), arr)
        return out
    if pa.types.is_integer(src) and pa.types.is_decimal(dst):
        arr = arr.cast(pa.decimal128(20, 0))  # every 64-bit integer, exactly
    out = arr.cast(dst, safe=True)
    if pa.types.is_floating(dst) and not pa.types.is_integer(src):
        _same(_exact_cast(out, src) if pa.types.is_decimal(src) else out.cast(src), arr)
    return out


def _same(back: Any, arr: Any) -> None:
    """ArrowInvalid unless ``back`` (a value read back) equals ``arr`` (NULLs aside)."""
    if not pc.all(pc.fill_null(pc.equal(back, arr), True)).as_py():
        raise pa.ArrowInvalid("a value changed")


def _first_misfit(arr: Any, dst: pa.DataType) -> Any:
    """The first value of ``arr`` (which does not cast exactly) that does not: the
    shortest failing prefix, found by halving."""
    lo, hi = 1, len(arr)
    while lo < hi:
        mid = (lo + hi) // 2
        try:
            _exact_cast(arr.slice(0, mid), dst)
            lo = mid + 1
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            hi = mid
    return arr[lo - 1].as_py()


def _number_text(v: Any) -> str:
    return repr(v) if isinstance(v, float) else str(v)


# pyarrow-stubs type the nested constructors narrower than pyarrow accepts.
_pa: Any = pa
_pc: Any = pc


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
            found = nested_problem(sf.type, tf.type, tf.name)
            if found is not None:
                where, problem = found
                what = (f"column {tf.name!r}" if where == tf.name else
                        f"field {where!r} of column {tf.name!r}")
                raise SchemaMismatch(
                    f"{what} has type {_type_at(sf.type, where[len(tf.name):])} in the data "
                    f"but {_type_at(tf.type, where[len(tf.name):])} in the table: {problem}",
                    column=where,
                    expected=str(tf.type), actual=str(sf.type))
            self.plan.append((tf, sf))

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        arrays = []
        for tf, sf in self.plan:
            arr = batch.column(sf.name)
            if _kind(tf.type) is not None:
                arr = convert(arr, tf, tf.name)
            elif arr.type != tf.type:
                arr = _cast(arr, tf.name, tf.type)
            if not tf.nullable and arr.null_count:
                raise SchemaMismatch(f"column {tf.name!r} is not nullable but the data has "
                                     f"{arr.null_count} null(s)", column=tf.name,
                                     expected=str(tf.type), actual=str(arr.type))
            arrays.append(arr)
        return pa.RecordBatch.from_arrays(arrays, schema=self.target)


def _type_at(t: Any, path: str) -> str:
    """The type at ``path`` (``.geo.lat``; empty: ``t`` itself) below a column of
    type ``t`` (``?`` where the type has no such field)."""
    for part in path.split(".")[1:]:
        t = _plain(t)
        if pa.types.is_struct(t):
            i = t.get_field_index(part)
            if i < 0:
                return "?"
            t = t.field(i).type
        elif _kind(t) == "list" and part == "element":
            t = t.value_type
        elif pa.types.is_map(t) and part in ("key", "value"):
            t = t.key_type if part == "key" else t.item_type
        else:
            return "?"
    return str(t)
