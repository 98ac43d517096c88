"""Arrow arrays between caslake's column types and the Arrow types Spark exchanges,
at any depth (structs, lists, maps).

Owns the value conversions only (which type maps to which is
:mod:`caslake.spark.types`): :func:`to_spark` presents a decoded table array as
the Arrow type Spark expects for the column's Spark type (``uuid`` as its text,
``float16`` widened, nanoseconds truncated to microseconds, ...);
:func:`to_table` converts Spark's array to the table's type with checked casts,
raising :class:`~caslake.errors.SchemaMismatch` that names the full dotted path
of the field (``payload.items.element.price``) and a value that does not fit.

Both rebuild a nested array level by level around its converted leaves
(:class:`Rebuild`), keeping every level's nulls; struct fields are matched by
name, so a target struct may list its fields in another order (Spark's) or leave
some out.  Writes also check every NOT NULL nested field (a NULL where its
parents are valid is a SchemaMismatch naming its path).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from caslake.errors import SchemaMismatch

ELEMENT, KEY, VALUE = "element", "key", "value"
Leaf = Callable[[Any, Any, str], Any]

_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
# where the 32 hex digits go in the 36 characters of a canonical UUID
_UUID_DIGITS = np.array([i for i in range(36) if i not in (8, 13, 18, 23)])
_UUID_TEXT = r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$"


def child_path(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _mask(arr: Any) -> Any:
    return arr.is_null() if arr.null_count else None


def _everything(t: Any) -> bool:
    return True


@dataclass(frozen=True)
class Rebuild:
    """Rebuilds a nested array level by level around ``leaf(array, type, path)`` of
    each primitive node.  A node already of the wanted type is kept as it is if
    ``keep(type)``.  ``strict`` (writes): a NOT NULL nested field holding a NULL
    where its parents are valid is a SchemaMismatch naming its path, and its
    validity bitmap is dropped (the NULLs under NULL parents are not values; the
    Parquet writer refuses a NOT NULL field with any)."""

    leaf: Leaf
    keep: Callable[[Any], bool] = _everything
    strict: bool = False

    def node(self, arr: Any, want: Any, path: str, valid: Any = None) -> Any:
        """``arr`` as type ``want``; ``valid``: where its parent structs are valid."""
        if arr.type == want and self.keep(want):
            return arr
        if pa.types.is_struct(want):
            scope = valid
            if arr.null_count:
                scope = arr.is_valid() if valid is None else pc.and_(valid, arr.is_valid())
            children = [self.child(arr.field(f.name), f, child_path(path, f.name), scope)
                        for f in want]
            return pa.StructArray.from_arrays(children, fields=list(want), mask=_mask(arr))
        if pa.types.is_map(want):
            offsets, (keys, items) = _own_children(arr, arr.keys, arr.items)
            keys = self.child(keys, want.key_field, child_path(path, KEY))
            items = self.child(items, want.item_field, child_path(path, VALUE))
            map_array: Any = pa.MapArray
            return map_array.from_arrays(offsets, keys, items, type=want, mask=_mask(arr))
        if pa.types.is_list(want):
            offsets, (values,) = _own_children(arr, arr.values)
            values = self.child(values, want.value_field, child_path(path, ELEMENT))
            return pa.ListArray.from_arrays(offsets, values, type=want, mask=_mask(arr))
        return self.leaf(arr, want, path)

    def child(self, arr: Any, field: Any, path: str, valid: Any = None) -> Any:
        out = self.node(arr, field.type, path, valid)
        if not self.strict or field.nullable or not out.null_count:
            return out
        nulls = out.is_null() if valid is None else pc.and_(out.is_null(), valid)
        count = pc.sum(nulls.cast(pa.int64())).as_py() or 0
        if count:
            raise SchemaMismatch(f"column {path!r} is not nullable but the data has "
                                 f"{count} null(s)", column=path, expected=str(field.type),
                                 actual=str(arr.type))
        return without_validity(out)


def without_validity(arr: Any) -> Any:
    """``arr`` with no validity bitmap of its own (its children keep theirs): for a
    NOT NULL field whose only NULLs lie under NULL parents."""
    t = arr.type
    if isinstance(arr, pa.ExtensionArray):
        return pa.ExtensionArray.from_storage(t, without_validity(arr.storage))
    if pa.types.is_struct(t):
        return pa.StructArray.from_arrays([arr.field(i) for i in range(t.num_fields)],
                                          fields=list(t))
    if pa.types.is_map(t):
        offsets, (keys, items) = _own_children(arr, arr.keys, arr.items)
        map_array: Any = pa.MapArray
        return map_array.from_arrays(offsets, keys, items, type=t)
    if pa.types.is_list(t):
        offsets, (values,) = _own_children(arr, arr.values)
        return pa.ListArray.from_arrays(offsets, values, type=t)
    return pa.Array.from_buffers(t, len(arr), [None, *arr.buffers()[1:]], offset=arr.offset)


def _own_children(arr: Any, *children: Any) -> tuple[Any, list[Any]]:
    """A (possibly sliced) list or map array's offsets from 0 and the part of its
    child arrays they cover: only the values this array holds are converted."""
    offsets = arr.offsets
    first, last = offsets[0].as_py(), offsets[-1].as_py()
    rebased = pc.subtract(offsets, pa.scalar(first, offsets.type))
    return rebased, [c.slice(first, last - first) for c in children]


# --- reads: table types -> Spark's Arrow types ------------------------------------------


def to_spark(arr: Any, want: pa.DataType, path: str) -> Any:
    """A decoded table array presented as the Arrow type Spark expects (``want``)."""
    return Rebuild(_spark_leaf, _no_nanosecond_times).node(arr, want, path)


def _no_nanosecond_times(t: Any) -> bool:
    """Spark's Arrow type for TIME is ``time64[ns]`` but its values have microseconds:
    a ``time64[ns]`` node is never passed through as it is."""
    if t == pa.time64("ns"):
        return False
    if pa.types.is_struct(t):
        return all(_no_nanosecond_times(f.type) for f in t)
    if pa.types.is_map(t):
        return _no_nanosecond_times(t.key_type) and _no_nanosecond_times(t.item_type)
    if pa.types.is_list(t):
        return _no_nanosecond_times(t.value_type)
    return True


def _spark_leaf(arr: Any, want: Any, path: str) -> Any:
    if arr.type == pa.uuid():
        return uuid_text(arr)
    if pa.types.is_time(arr.type) and arr.type.unit == "ns":
        arr = arr.cast(pa.time64("us"), safe=False)  # Spark's TIME has microseconds
    lossy = pa.types.is_timestamp(arr.type) and pa.types.is_timestamp(want)
    return arr.cast(want, safe=not lossy)


def uuid_text(arr: Any) -> Any:
    """A ``uuid`` (or ``fixed_size_binary[16]``) array as canonical lowercase text."""
    storage = arr.storage if isinstance(arr, pa.ExtensionArray) else arr
    n = len(storage)
    if n == 0:
        return pa.array([], pa.string())
    data = storage.buffers()[1]
    raw = np.frombuffer(data, dtype=np.uint8, count=16 * (storage.offset + n),
                        offset=0)[16 * storage.offset:].reshape(n, 16)
    digits = np.stack([_HEX[raw >> 4], _HEX[raw & 0x0F]], axis=2).reshape(n, 32)
    text = np.full((n, 36), ord("-"), dtype=np.uint8)
    text[:, _UUID_DIGITS] = digits
    offsets = np.arange(0, 36 * (n + 1), 36, dtype=np.int32)
    strings = pa.StringArray.from_buffers(n, pa.py_buffer(offsets.tobytes()),
                                          pa.py_buffer(text.tobytes()))
    if storage.null_count:
        return pc.if_else(storage.is_valid(), strings, pa.scalar(None, pa.string()))
    return strings


# --- writes: Spark's Arrow types -> table types ----------------------------------------


def to_table(arr: Any, want: pa.DataType, path: str) -> Any:
    """Spark's array converted to the table type ``want`` (checked: SchemaMismatch
    naming ``path``, or the nested field's path, for a value that does not fit)."""
    return Rebuild(_table_leaf, nullable_inside, strict=True).node(arr, want, path)


def nullable_inside(t: Any) -> bool:
    """Whether every node inside ``t`` (struct fields, elements, values) is nullable."""
    if pa.types.is_struct(t):
        return all(f.nullable and nullable_inside(f.type) for f in t)
    if pa.types.is_map(t):
        return bool(t.item_field.nullable) and nullable_inside(t.key_type) \
            and nullable_inside(t.item_type)
    if pa.types.is_list(t):
        return bool(t.value_field.nullable) and nullable_inside(t.value_type)
    return True


def _misfit(path: str, want: Any, arr: Any, detail: str) -> SchemaMismatch:
    return SchemaMismatch(f"column {path!r}: {detail} does not fit the table type {want}",
                          column=path, expected=str(want), actual=str(arr.type))


def _table_leaf(arr: Any, want: Any, path: str) -> Any:
    if want == pa.uuid():
        return uuids_from_text(arr, path)
    if want == pa.float16() and arr.type != want:
        return _to_float16(arr, path)
    try:
        return arr.cast(want, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise _misfit(path, want, arr, f"a value ({e})") from None


def uuids_from_text(arr: Any, path: str) -> Any:
    """UUID text (``8-4-4-4-12`` or 32 hex digits, any case) as a ``uuid`` array."""
    text = arr.cast(pa.string())
    ok = pc.match_substring_regex(text, _UUID_TEXT)
    bad = pc.invert(pc.fill_null(ok, True))
    if pc.any(bad).as_py():
        value = text.filter(bad)[0].as_py()
        raise _misfit(path, pa.uuid(), arr, f"value {value!r} is not a UUID and")
    digits = pc.utf8_lower(pc.replace_substring(text, "-", "")).to_pylist()
    raw = bytes.fromhex("".join(d if d is not None else "0" * 32 for d in digits))
    storage = pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), len(digits),
                                                   [None, pa.py_buffer(raw)])
    if text.null_count:
        storage = pc.if_else(text.is_valid(), storage, pa.scalar(None, pa.binary(16)))
    return pa.ExtensionArray.from_storage(pa.uuid(), storage)


def _to_float16(arr: Any, path: str) -> Any:
    """Floats into ``float16``: only values it holds exactly (NaN and infinities too)."""
    half = arr.cast(pa.float16(), safe=False)
    back = half.cast(arr.type)
    same = pc.or_(pc.equal(back, arr), pc.and_(pc.is_nan(back), pc.is_nan(arr)))
    lossy = pc.invert(pc.fill_null(same, True))
    if pc.any(lossy).as_py():
        value = arr.filter(lossy)[0].as_py()
        raise _misfit(path, pa.float16(), arr, f"value {value!r} (not exact as float16)")
    return half
