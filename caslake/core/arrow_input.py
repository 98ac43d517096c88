"""What an append, overwrite or upsert accepts as data, turned into one
``pyarrow.RecordBatchReader``.

Accepted: pyarrow Tables, RecordBatches and RecordBatchReaders, pandas
DataFrames (the index is dropped), and any object that exports the Arrow
PyCapsule stream interface ``__arrow_c_stream__`` (Polars DataFrames, DuckDB
relations, Arrow objects of other libraries) or a single array
(``__arrow_c_array__``).  Streams are consumed lazily, batch by batch.
Never copies data it does not have to, never guesses a schema.

pandas *object* columns (Python lists, dicts, ints, Decimals, bytes) have no
Arrow type of their own: given the table's schema, such a column is read
straight into the table's types where Python values convert exactly
(:func:`python_type_hint`): Python ints into any integer width (range-checked),
into float32/float64 (exactness-checked) or decimals, Decimals into any decimal
(digits checked), bytes into fixed-size binary and uuid, dicts into maps; every
other value keeps the type pyarrow infers (a Python float is a float64, a
datetime a timestamp[us]) and the append's conform step decides.  A value that
does not fit, or values of no common type, is a SchemaMismatch naming the full
path (``dev.v``, ``items.element.qty``) and the value.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from caslake.errors import InvalidArgument, SchemaMismatch

ACCEPTED = ("a pyarrow Table, RecordBatch or RecordBatchReader, a pandas DataFrame, or any "
            "object with __arrow_c_stream__ (a Polars DataFrame, a DuckDB relation, ...)")

# what pyarrow raises when Python values do not convert
_FAILS = (pa.ArrowException, TypeError, ValueError, OverflowError)


def as_reader(data: Any, schema: pa.Schema | None = None) -> pa.RecordBatchReader:
    """One streaming reader over ``data``; InvalidArgument lists what is accepted.
    ``schema``: the table's Arrow schema, which pandas object columns are read
    by (see the module docstring)."""
    if isinstance(data, pa.RecordBatchReader):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.RecordBatchReader.from_batches(data.schema, [data])
    if isinstance(data, pa.Table):
        return data.to_reader()
    if type(data).__module__.startswith("pandas"):
        # before __arrow_c_stream__: pandas' own export would keep the index as a column
        return from_pandas(data, schema).to_reader()
    if hasattr(data, "__arrow_c_stream__"):
        try:
            return pa.RecordBatchReader.from_stream(data)
        except (TypeError, pa.ArrowException) as e:
            raise InvalidArgument(f"cannot read {type(data).__name__} through "
                                  f"__arrow_c_stream__: {e}") from None
    if hasattr(data, "__arrow_c_array__"):
        batch = pa.record_batch(data)
        return pa.RecordBatchReader.from_batches(batch.schema, [batch])
    raise InvalidArgument(f"cannot append {type(data).__name__}: pass {ACCEPTED}")


def from_pandas(df: Any, schema: pa.Schema | None) -> pa.Table:
    """A pandas DataFrame as a pyarrow Table without its index; object columns
    are read by the type of the table column of their name (if any)."""
    if not hasattr(df, "columns"):
        return pa.Table.from_pandas(df, preserve_index=False)
    objects = [i for i, dtype in enumerate(df.dtypes) if dtype.kind == "O"]
    if not objects:
        return pa.Table.from_pandas(df, preserve_index=False)
    others = [i for i in range(df.shape[1]) if i not in set(objects)]
    rest = (pa.Table.from_pandas(df.iloc[:, others], preserve_index=False) if others
            else None)
    names: list[str] = []
    arrays: list[Any] = []
    for i, name in enumerate(df.columns):
        names.append(str(name))
        if i in objects:
            want = (schema.field(name).type if schema is not None and isinstance(name, str)
                    and name in schema.names else None)
            arrays.append(object_array(df.iloc[:, i], want, str(name)))
        else:
            assert rest is not None
            arrays.append(rest.column(others.index(i)))
    return pa.Table.from_arrays(arrays, names=names)


def object_array(values: Any, want: pa.DataType | None, name: str) -> pa.Array[Any]:
    """A pandas object column (or any sequence of Python values) as an Arrow array,
    read by the table's type ``want`` where that is exact (None: pyarrow's
    inference); SchemaMismatch naming the full path of a value that does not fit."""
    try:
        inferred: pa.Array[Any] | None = pa.array(values, from_pandas=True)
    except _FAILS:
        inferred = None
    if want is None and inferred is not None:
        return inferred
    hint = None if inferred is None or want is None else python_type_hint(inferred.type, want)
    if hint is None:
        hint = _values_hint(list(values), want, name)  # names where inference fails
    if inferred is not None and hint == inferred.type:
        return inferred
    try:
        return pa.array(values, type=hint, from_pandas=True)
    except _FAILS as e:
        raise _misfit(list(values), hint, name, e) from None


# --- which type Python values are read as -------------------------------------------


def python_type_hint(inferred: Any, want: Any) -> pa.DataType | None:
    """The type to read Python values as, given pyarrow's inference ``inferred`` and
    the table's type ``want``: the table's type at every level where the values
    convert exactly (see the module docstring), the inferred one elsewhere;
    struct fields follow the data (a field the table lacks keeps its inferred
    type, one the data lacks stays absent).  None: undecidable from the types (a
    map read from dicts whose values pyarrow inferred as several types)."""
    if pa.types.is_null(inferred):
        return want  # type: ignore[no-any-return]
    if pa.types.is_struct(inferred) and pa.types.is_struct(want):
        fields = []
        for f in inferred:
            i = want.get_field_index(f.name)
            t = f.type if i < 0 else python_type_hint(f.type, want.field(i).type)
            if t is None:
                return None
            fields.append(pa.field(f.name, t))
        return pa.struct(fields)
    if _is_list(inferred) and _is_list(want):
        element = python_type_hint(inferred.value_type, want.value_type)
        return None if element is None else pa.list_(pa.field(want.value_field.name, element))
    if pa.types.is_struct(inferred) and pa.types.is_map(want):
        values = {f.type for f in inferred if not pa.types.is_null(f.type)}
        if len(values) > 1:
            return None
        item = python_type_hint(values.pop(), want.item_type) if values else want.item_type
        key = python_type_hint(pa.string(), want.key_type)
        return None if item is None or key is None else pa.map_(key, item)
    return _leaf_hint(inferred, want)


def _leaf_hint(src: pa.DataType, want: pa.DataType) -> pa.DataType:
    if pa.types.is_integer(src) and (pa.types.is_integer(want) or pa.types.is_decimal(want)
                                     or pa.types.is_float32(want)
                                     or pa.types.is_float64(want)):
        return want  # pyarrow checks the range / the exactness of every value
    if pa.types.is_decimal(src) and pa.types.is_decimal(want):
        return want  # pyarrow refuses a value with more digits
    if pa.types.is_binary(src) and pa.types.is_fixed_size_binary(_storage(want)):
        return want  # pyarrow checks every value's length
    return src


def _storage(t: pa.DataType) -> pa.DataType:
    return t.storage_type if isinstance(t, pa.ExtensionType) else t


def _is_list(t: pa.DataType) -> bool:
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t)
                or pa.types.is_fixed_size_list(t))


def _values_hint(values: list[Any], want: Any, path: str) -> pa.DataType:
    """:func:`python_type_hint` level by level over the values themselves, for data
    pyarrow cannot infer as a whole (a map from dicts with int keys, or values of
    mixed types, which are refused here naming their path)."""
    if want is not None and _all(values, dict) and (pa.types.is_struct(want)
                                                    or pa.types.is_map(want)):
        if pa.types.is_map(want):
            pairs = [p for v in values if v is not None for p in v.items()]
            key = _values_hint([k for k, _ in pairs], want.key_type, f"{path}.key")
            item = _values_hint([v for _, v in pairs], want.item_type, f"{path}.value")
            return pa.map_(key, item)
        dicts = [v for v in values if v is not None]
        names = list(dict.fromkeys(k for d in dicts for k in d))
        odd = [n for n in names if not isinstance(n, str)]
        if odd:
            raise SchemaMismatch(f"field {path!r} is a struct, whose field names are text; "
                                 f"the data has the key {odd[0]!r}", column=path,
                                 expected=str(want), actual=type(odd[0]).__name__)
        fields = []
        for n in names:
            i = want.get_field_index(n)
            fields.append(pa.field(n, _values_hint(
                [d.get(n) for d in dicts], None if i < 0 else want.field(i).type,
                f"{path}.{n}")))
        return pa.struct(fields)
    if want is not None and _is_list(want) and _all(values, _SEQUENCES):
        flat = [x for v in values if v is not None for x in v]
        element = _values_hint(flat, want.value_type, f"{path}.element")
        return pa.list_(pa.field(want.value_field.name, element))
    try:
        inferred: pa.DataType = pa.array(values, from_pandas=True).type
    except _FAILS as e:
        if want is not None and pa.types.is_decimal(want):
            return want  # ints and Decimals: pyarrow reads both exactly, or refuses
        raise SchemaMismatch(f"field {path!r}: the data's values have no common type ({e})",
                             column=path, expected=None if want is None else str(want),
                             actual=_kinds(values)) from None
    if want is None:
        return inferred
    return python_type_hint(inferred, want) or inferred


def _sequences() -> tuple[type, ...]:
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - pandas needs numpy
        return (list, tuple)
    return (list, tuple, np.ndarray)


_SEQUENCES: tuple[type, ...] = _sequences()


def _is_sequence(v: Any) -> bool:
    return isinstance(v, _SEQUENCES)


def _all(values: list[Any], kind: type | tuple[type, ...]) -> bool:
    """Whether every value that is not missing is a ``kind`` (and one is)."""
    present = [v for v in values if not _missing(v)]
    return bool(present) and all(isinstance(v, kind) for v in present)


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and v != v)  # None or NaN: a pandas NULL


def _kinds(values: list[Any]) -> str:
    return ", ".join(sorted({type(v).__name__ for v in values if not _missing(v)}))


def _misfit(values: list[Any], t: pa.DataType, path: str, error: Exception) -> SchemaMismatch:
    """The SchemaMismatch for values pyarrow could not read as ``t``: the deepest
    path whose values fail, and the first value there that does."""
    for sub, st, sp in _children(values, t, path):
        try:
            pa.array(sub, type=st, from_pandas=True)
        except _FAILS as e:
            return _misfit(sub, st, sp, e)
    for v in values:
        try:
            pa.array([v], type=t, from_pandas=True)
        except _FAILS as e:
            return SchemaMismatch(f"field {path!r} cannot hold the value {v!r} of the data "
                                  f"as {t} ({e})", column=path, expected=str(t),
                                  actual=type(v).__name__)
    return SchemaMismatch(f"field {path!r}: the data cannot be read as {t} ({error})",
                          column=path, expected=str(t), actual=_kinds(values))


def _children(values: list[Any], t: Any, path: str
              ) -> Iterator[tuple[list[Any], pa.DataType, str]]:
    """The values at each child of ``t`` (a struct's fields, a list's elements, a
    map's keys and values), with the child's type and path."""
    if pa.types.is_struct(t):
        dicts = [v for v in values if isinstance(v, dict)]
        for f in t:
            yield [d.get(f.name) for d in dicts], f.type, f"{path}.{f.name}"
    elif _is_list(t):
        flat = [x for v in values if _is_sequence(v) for x in v]
        yield flat, t.value_type, f"{path}.element"
    elif pa.types.is_map(t):
        pairs = [p for v in values if isinstance(v, dict) for p in v.items()]
        yield [k for k, _ in pairs], t.key_type, f"{path}.key"
        yield [v for _, v in pairs], t.item_type, f"{path}.value"
