"""Functions on lists and maps, evaluated on Arrow data.

This module owns what the bound functions on nested values compute (binding,
in :mod:`caslake.expr.bind`, has already checked the types and placed every
literal exactly in the element, key or value type):

* ``cardinality(x)`` -- the number of elements of a list or entries of a map,
  as int64; NULL when ``x`` is NULL (as DuckDB's ``len``; Spark's legacy
  ``size`` gives -1 instead);
* ``element_at(list, i)`` -- the element at 1-based position ``i``, counting
  from the end when ``i`` is negative (Spark, DuckDB); NULL when the list is
  NULL or shorter;
* ``element_at(map, k)`` (also ``map[k]``) -- the value for key ``k``; NULL when
  the map is NULL or has no such key;
* ``array_contains(list, v)`` -- TRUE when some element equals ``v``, FALSE
  when none does (NULL elements included, as DuckDB's ``list_contains``; Spark
  gives NULL when an element is NULL), NULL when the list is NULL.

Each function takes an Arrow array or chunked array -- a table's column, or
the zero-length array binding uses to learn the result type -- and gives one
of the same length.  They work on the list offsets with numpy and never raise
for data.  Arrow compute has no kernel for some of them (``array_contains``,
negative positions), so a predicate using any of them is evaluated on the
data, never as a ``pyarrow.compute.Expression``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["array_contains", "cardinality", "element_at", "nested_result_type"]

def _per_chunk(data: Any, out_type: pa.DataType, fn: Callable[[Any], pa.Array[Any]]
               ) -> Any:
    """``fn`` applied to each chunk of ``data`` (or to ``data``, an array)."""
    if isinstance(data, pa.ChunkedArray):
        build: Any = pa.chunked_array  # pyarrow-stubs: no overload for a DataType variable
        return build([fn(chunk) for chunk in data.chunks], type=out_type)
    return fn(data)


def _offsets(lists: Any) -> npt.NDArray[np.int64]:
    """The ``len + 1`` offsets of a list or map array (into ``lists.values``)."""
    offsets: npt.NDArray[np.int64] = np.asarray(lists.offsets, dtype=np.int64)
    return offsets


def _nulls(array: Any) -> npt.NDArray[np.bool_] | None:
    if array.null_count == 0:
        return None
    mask: npt.NDArray[np.bool_] = np.asarray(array.is_null(), dtype=np.bool_)
    return mask


def nested_result_type(name: str, t: pa.DataType) -> pa.DataType:
    """The type of ``name(x)`` for ``x`` of type ``t`` (a list or map)."""
    if name == "cardinality":
        return pa.int64()
    if name == "array_contains":
        return pa.bool_()
    nested: Any = t
    inner: pa.DataType = nested.item_type if pa.types.is_map(t) else nested.value_type
    return inner


def cardinality(data: Any) -> Any:
    """``cardinality(x)`` of every row of a list or map array (int64)."""
    def one(lists: Any) -> pa.Array[Any]:
        lengths = np.diff(_offsets(lists))
        return pa.array(lengths, type=pa.int64(), mask=_nulls(lists))
    return _per_chunk(data, pa.int64(), one)


def element_at(data: Any, key: Any) -> Any:
    """``element_at(x, key)``: a list's element at 1-based position ``key`` (a
    Python int, negative from the end) or a map's value for ``key`` (an Arrow
    scalar of the key type)."""
    t = data.type
    if pa.types.is_map(t):
        return pc.map_lookup(data, key, "first")
    position = int(key)

    def one(lists: Any) -> pa.Array[Any]:
        offsets = _offsets(lists)
        starts, ends = offsets[:-1], offsets[1:]
        at = starts + (position - 1) if position > 0 else ends + position
        present = (at >= starts) & (at < ends)
        nulls = _nulls(lists)
        if nulls is not None:
            present &= ~nulls
        index = pa.array(np.where(present, at, 0), type=pa.int64(), mask=~present)
        taken: pa.Array[Any] = lists.values.take(index)
        return taken
    return _per_chunk(data, nested_result_type("element_at", t), one)


def array_contains(data: Any, value: pa.Scalar[Any]) -> Any:
    """``array_contains(list, value)`` of every row (``value`` an Arrow scalar of
    the element type, never NULL)."""
    def one(lists: Any) -> pa.Array[Any]:
        offsets = _offsets(lists)
        rows = len(lists)
        found = np.zeros(rows, np.bool_)
        if rows and offsets[-1] > offsets[0]:
            first = int(offsets[0])
            elements = lists.values.slice(first, int(offsets[-1]) - first)
            equal = pc.fill_null(pc.equal(elements, value), False)
            hits = np.flatnonzero(np.asarray(equal, dtype=np.bool_)) + first
            # The row whose range [offsets[i], offsets[i + 1]) holds each hit.
            found[np.searchsorted(offsets, hits, side="right") - 1] = True
        return pa.array(found, type=pa.bool_(), mask=_nulls(lists))
    return _per_chunk(data, pa.bool_(), one)
