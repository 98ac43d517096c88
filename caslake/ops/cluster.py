"""Clustering: which data files are out of key order, and rows cut into files in order.

Owns the ordering half of ``compact(sort_by=...)`` / ``compact(zorder_by=...)``
and of the ``clustering.columns`` table property (docs/format.md, "Clustering";
:mod:`caslake.ops.compact` picks, reads, writes and commits).  Pure code over
Arrow tables and manifest entries: no I/O.

* **A file's box.** Per clustering column, the closed range ``[min, max]`` its
  manifest statistics give (NULLs below every value; no statistics: the whole
  range).  Two files *overlap* when their boxes intersect in every column.
* **In order.** A file is in order when its box overlaps no other live file's
  of its partition; out-of-order files (and mostly-deleted ones) are rewritten,
  the rest left alone, so a second clustering with nothing new is a no-op.
* **Z-order.** Each column's values are mapped to order-preserving unsigned
  keys (integers with the sign bit flipped, floats by their IEEE bits, dates and
  timestamps by their ticks, decimals as floats, strings by their first eight
  bytes), rescaled over the rows being rewritten so every column spreads over
  its ``64 // n`` bits (NULL gets a bit below every value when there are any),
  and interleaved bit by bit, most significant first.  Rows are sorted by that
  z-value and cut at *aligned* z-cells (a common z-prefix, halved until a cell
  holds at most a file's rows): a cell is a box in key space, so the written
  files' boxes are disjoint and a point read finds one file.
* **Sort.** Rows sorted by the columns (NULLs first) and cut only where the
  first column changes (a run longer than a file is cut where the next column
  changes, and so on), so again the files' boxes are disjoint.

A run of more than a file's rows with one key in every column cannot be cut
apart: those files overlap and are rewritten by every clustering compaction.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from caslake.errors import InvalidArgument, UnknownColumn, UnknownField
from caslake.expr import resolve_column
from caslake.format.manifest import DataFile
from caslake.format.properties import SORT, ZORDER, Clustering
from caslake.format.schema import STRUCT, Field, TableSchema
from caslake.format.stats import field_stats

# A bound of a box: (rank, value); NULL below every value, an unknown bound above.
NULL, VALUE, TOP = 0, 1, 2
Bound = tuple[int, Any]
Box = tuple[tuple[Bound, Bound], ...]  # per clustering column, its closed [lo, hi]
_UNKNOWN: tuple[Bound, Bound] = ((NULL, None), (TOP, None))
_SIGN = np.uint64(1 << 63)


@dataclass(frozen=True)
class ClusterColumn:
    """A column a clustering orders by: a top-level column, or a field inside
    structs only (``device.os``), by its resolved path."""

    path: tuple[str, ...]
    field: Field

    @property
    def name(self) -> str:
        return ".".join(self.path)

    def values(self, table: pa.Table) -> Any:
        """This column's value in each row of ``table`` (NULL under a NULL struct)."""
        col: Any = table.column(self.path[0])
        for step in self.path[1:]:
            col = pc.struct_field(col, step)
        return col


def cluster_fields(schema: TableSchema, clustering: Clustering) -> list[ClusterColumn]:
    """The columns ``clustering`` names (resolved as a predicate resolves them,
    each step of a dotted path too): each a top-level column or a field inside
    structs, of an orderable primitive type."""
    out = []
    for name in clustering.columns:
        col = _resolve(schema, name)
        t = col.field.arrow_type
        if col.field.nested or not _orderable(t):
            raise InvalidArgument(f"cannot cluster by column {col.name!r}: its type {t} has "
                                  "no order compaction can use (numbers, booleans, dates, "
                                  "times, timestamps, decimals and strings do)")
        out.append(col)
    return out


def _resolve(schema: TableSchema, name: str) -> ClusterColumn:
    """Column ``name``: a top-level name (dots and all) wins; else the longest
    top-level prefix of its dotted steps, then one struct field per step."""
    try:
        top = resolve_column(name, schema.names)
        return ClusterColumn((top,), schema.field(top))
    except UnknownColumn:
        parts = name.split(".")
        if len(parts) == 1:
            raise
        unknown = sys.exc_info()[1]
    for i in range(len(parts) - 1, 0, -1):
        try:
            top = resolve_column(".".join(parts[:i]), schema.names)
        except UnknownColumn:
            continue
        node, path = schema.field(top), [top]
        for step in parts[i:]:
            if node.type != STRUCT:
                raise InvalidArgument(
                    f"cannot cluster by {name!r}: {'.'.join(path)} is a {node.type}, and "
                    "clustering takes top-level columns or fields inside structs only "
                    "(a list or map holds many values per row)")
            fields = [c.name for c in node.children]
            try:
                child = resolve_column(step, fields)
            except UnknownColumn:
                raise UnknownField(name, ".".join(path), fields) from None
            node = next(c for c in node.children if c.name == child)
            path.append(child)
        return ClusterColumn(tuple(path), node)
    assert unknown is not None
    raise unknown


def column_by_id(schema: TableSchema, field_id: int) -> ClusterColumn | None:
    """The clustering column of field ``field_id`` in ``schema`` (its path as
    renamed there), or None when no top-level column or struct field has it."""
    def walk(fields: Sequence[Field], path: tuple[str, ...]) -> ClusterColumn | None:
        for f in fields:
            if f.id == field_id:
                return ClusterColumn((*path, f.name), f)
            if f.type == STRUCT:
                hit = walk(f.children, (*path, f.name))
                if hit is not None:
                    return hit
        return None
    return walk(schema.fields, ())


def _orderable(t: pa.DataType) -> bool:
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
            or pa.types.is_temporal(t) or pa.types.is_decimal(t) or pa.types.is_string(t)
            or pa.types.is_large_string(t))


# --- boxes and the in-order rule --------------------------------------------------------


def file_box(f: DataFile, columns: Sequence[ClusterColumn], schema: TableSchema, key: str
             ) -> Box:
    """The box of data file ``f`` (listed in manifest ``key``) from its statistics."""
    out = []
    for col in columns:
        cs = field_stats(f, col.field.id, schema, key=key)
        if cs is None or cs.null_count is None:
            out.append(_UNKNOWN)
            continue
        if cs.null_count >= f.row_count:
            out.append(((NULL, None), (NULL, None)))
            continue
        if cs.min is None or cs.max is None:
            out.append(_UNKNOWN)
            continue
        lo: Bound = (NULL, None) if cs.null_count else (VALUE, cs.min)
        out.append((lo, (VALUE, cs.max)))
    return tuple(out)


def table_box(table: pa.Table, columns: Sequence[ClusterColumn]) -> Box:
    """The box of rows ``table`` holds (by the same rules as :func:`file_box`)."""
    out = []
    for key in columns:
        col = key.values(table)
        nulls = col.null_count
        if nulls == len(col):
            out.append(((NULL, None), (NULL, None)))
            continue
        mm = pc.min_max(col)
        lo: Bound = (NULL, None) if nulls else (VALUE, mm["min"].as_py())
        out.append((lo, (VALUE, mm["max"].as_py())))
    return tuple(out)


def overlaps(a: Box, b: Box) -> bool:
    """Whether two boxes intersect in every column."""
    return all(alo <= bhi and blo <= ahi for (alo, ahi), (blo, bhi) in zip(a, b, strict=True))


def out_of_order(boxes: Sequence[Box]) -> set[int]:
    """The indexes of the boxes that overlap another one: a sweep over the first
    column's ranges, so boxes apart there are never compared."""
    order = sorted(range(len(boxes)), key=lambda i: boxes[i][0][0])
    hit: set[int] = set()
    for n, i in enumerate(order):
        hi = boxes[i][0][1]
        for j in order[n + 1:]:
            if boxes[j][0][0] > hi:
                break
            if overlaps(boxes[i], boxes[j]):
                hit.update((i, j))
    return hit


# --- ordering rows and cutting them into files -------------------------------------------


def cluster_pieces(table: pa.Table, clustering: Clustering, columns: Sequence[ClusterColumn],
                   rows_per_file: int) -> list[pa.Table]:
    """``table``'s rows in clustering order, cut into pieces of at most
    ``rows_per_file`` rows (see the module doc) whose boxes are disjoint."""
    if table.num_rows == 0:
        return []
    cap = max(1, rows_per_file)
    keys = [c.values(table) for c in columns]
    if clustering.kind == ZORDER:
        z = z_values(keys)
        order = np.argsort(z, kind="stable")
        cuts = z_cells(z[order], 64 // len(keys) * len(keys), cap)
        return [table.take(order[lo:hi]) for lo, hi in cuts]
    assert clustering.kind == SORT
    names = [f"k{i}" for i in range(len(keys))]  # the keys alone: a path is no column name
    by = pa.table(dict(zip(names, keys, strict=True)))
    sort_keys: Any = [(n, "ascending", "at_start") for n in names]
    indices = pc.sort_indices(by, sort_keys=sort_keys)
    ordered = table.take(indices)
    runs = [_run_ids(k.take(indices)) for k in keys]
    return [ordered.slice(lo, hi - lo) for lo, hi in sort_cuts(runs, 0, len(ordered), 0, cap)]


def z_values(columns: Sequence[Any]) -> np.ndarray:
    """Each row's z-value: the columns' keys (:func:`column_keys`, ``64 // n`` bits
    each) interleaved bit by bit, most significant first, as uint64."""
    bits = 64 // len(columns)
    keys = [column_keys(c, bits) for c in columns]
    z = np.zeros(len(keys[0]), dtype=np.uint64)
    one = np.uint64(1)
    for bit in range(bits - 1, -1, -1):
        shift = np.uint64(bit)
        for k in keys:
            z = (z << one) | ((k >> shift) & one)
    return z


def column_keys(col: Any, bits: int) -> np.ndarray:
    """Order-preserving ``bits``-bit keys of a column's values (uint64), spread
    over the column's range in these rows; NULL, when there is any, below all."""
    arr: Any = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    raw = _raw_keys(arr)
    has_nulls = not bool(valid.all())
    width = bits - 1 if has_nulls else bits
    out = np.zeros(len(raw), dtype=np.uint64)
    if width <= 0 or not valid.any():
        return out
    live = raw[valid]
    lo = live.min()
    span = int(live.max() - lo)
    d = live - lo
    used = span.bit_length()
    if used > width:
        d = d >> np.uint64(used - width)
    elif used:
        d = d << np.uint64(width - used)
    if has_nulls:
        d = d | np.uint64(1 << width)
    out[valid] = d
    return out


def _raw_keys(arr: Any) -> np.ndarray:
    """Order-preserving 64-bit unsigned keys of every slot (NULL slots arbitrary)."""
    t = arr.type
    if pa.types.is_decimal(t):
        return _float_keys(pc.cast(arr, pa.float64()))
    if pa.types.is_floating(t):
        return _float_keys(arr if t == pa.float64() else pc.cast(arr, pa.float64()))
    if pa.types.is_boolean(t):
        return np.asarray(pc.fill_null(arr, False).to_numpy(zero_copy_only=False),
                          dtype=np.uint64)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _prefix_keys(pc.cast(arr, pa.large_binary()))
    if pa.types.is_temporal(t):
        arr = arr.view(pa.int32() if t.bit_width == 32 else pa.int64())
        t = arr.type
    if pa.types.is_unsigned_integer(t):
        return np.asarray(pc.fill_null(pc.cast(arr, pa.uint64()), 0).to_numpy(),
                          dtype=np.uint64)
    ints = np.asarray(pc.fill_null(pc.cast(arr, pa.int64()), 0).to_numpy(), dtype=np.int64)
    return ints.view(np.uint64) ^ _SIGN


def _float_keys(arr: Any) -> np.ndarray:
    """IEEE-754 doubles as unsigned keys in numeric order (negatives' bits flipped,
    positives' sign bit set; -0.0 as 0.0, NaN above +inf)."""
    values = np.asarray(pc.fill_null(arr, 0.0).to_numpy(zero_copy_only=False), dtype=np.float64)
    values = np.where(values == 0, 0.0, values)  # -0.0 is 0.0
    bits = np.where(np.isnan(values), np.nan, values).view(np.uint64)  # one NaN, above +inf
    negative = (bits & _SIGN) != 0
    return np.where(negative, ~bits, bits | _SIGN)


def _prefix_keys(arr: Any) -> np.ndarray:
    """A binary column's first eight bytes, big-endian (shorter values padded with
    zero bytes): byte order is string order for UTF-8."""
    n = len(arr)
    buffers: list[Any] = arr.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int64, count=n + 1, offset=arr.offset * 8)
    raw = (np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None
           else np.zeros(0, np.uint8))
    starts, lengths = offsets[:-1], np.diff(offsets)
    out = np.zeros(n, dtype=np.uint64)
    for j in range(8):
        has = lengths > j
        byte = np.zeros(n, dtype=np.uint64)
        byte[has] = raw[starts[has] + j]
        out = (out << np.uint64(8)) | byte
    return out


def z_cells(z: np.ndarray, bits: int, cap: int) -> list[tuple[int, int]]:
    """Ranges ``[lo, hi)`` of sorted z-values ``z`` (``bits`` significant bits), each
    an aligned z-cell (one z-prefix) of at most ``cap`` rows, halving a cell until
    it fits (a cell of one z-value stays whole), in z order."""
    out: list[tuple[int, int]] = []
    stack = [(0, len(z), bits - 1)]
    while stack:
        lo, hi, bit = stack.pop()
        if hi - lo <= cap or bit < 0:
            out.append((lo, hi))
            continue
        prefix = int(z[lo]) >> (bit + 1)
        boundary = np.uint64((prefix << (bit + 1)) | (1 << bit))
        mid = lo + int(np.searchsorted(z[lo:hi], boundary))
        for a, b in ((mid, hi), (lo, mid)):  # popped low half first
            if b > a:
                stack.append((a, b, bit - 1))
    return out


def _run_ids(col: Any) -> np.ndarray:
    """An id per row, equal exactly where the (sorted) column's values are equal
    (NULLs equal to each other)."""
    enc: Any = pc.dictionary_encode(col.combine_chunks(), null_encoding="encode")
    return np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64)


def sort_cuts(keys: Sequence[np.ndarray], lo: int, hi: int, level: int, cap: int
              ) -> list[tuple[int, int]]:
    """Cut sorted rows ``[lo, hi)`` into ranges of at most ``cap`` rows at changes of
    the column ``keys[level]`` (run ids); a longer run is cut by the next column."""
    if hi - lo <= cap:
        return [(lo, hi)]
    if level == len(keys):  # one key in every column: cut anywhere
        return [(a, min(a + cap, hi)) for a in range(lo, hi, cap)]
    ids = keys[level][lo:hi]
    starts = [lo, *(lo + 1 + np.flatnonzero(ids[1:] != ids[:-1])).tolist(), hi]
    out: list[tuple[int, int]] = []
    begin = lo
    for a, b in itertools.pairwise(starts):
        if b - a > cap:  # a run longer than a file
            if a > begin:
                out.append((begin, a))
            out.extend(sort_cuts(keys, a, b, level + 1, cap))
            begin = b
        elif b - begin > cap:
            out.append((begin, a))
            begin = a
    if hi > begin:
        out.append((begin, hi))
    return out
