"""Hidden partitioning (format version 5): partition specs, Iceberg's transforms, and
the per-file partition values.

Owns:

* the models -- :class:`PartitionField`, :class:`PartitionSpec`, the table's
  :class:`Partitioning` (every spec it has had, the default one, the highest
  partition field id) and a data file's :class:`FilePartition` -- and their JSON;
* :func:`parse_partition_by`: the user's ``["day(ts)", "bucket(16, user_id)",
  "region"]`` checked against a schema (bad input is :class:`InvalidPartitionSpec`
  naming the item and the column);
* the transforms, vectorised over Arrow arrays (:func:`transform_array`), with
  Iceberg's murmur3 bucket hash, so values equal what Iceberg readers compute;
* :func:`split_by_partition`: a batch's rows grouped by their partition values;
* :func:`implied_stats`: the bounds a partition value puts on its source column,
  in the manifest's statistics encoding, which the scan prunes with.

docs/format.md, "Partitioning", is the specification.  Pure code: no I/O.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import mmh3
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from caslake.errors import InvalidPartitionSpec
from caslake.format.schema import Field, TableSchema

FIRST_PARTITION_FIELD_ID = 1000  # Iceberg's: partition field ids start here
IDENTITY, YEAR, MONTH, DAY, HOUR, BUCKET, TRUNCATE = (
    "identity", "year", "month", "day", "hour", "bucket", "truncate")
_TIME = (YEAR, MONTH, DAY, HOUR)
_ALIASES = {"years": YEAR, "months": MONTH, "days": DAY, "hours": HOUR,
            "identity": IDENTITY, "year": YEAR, "month": MONTH, "day": DAY, "hour": HOUR,
            "bucket": BUCKET, "truncate": TRUNCATE}
_SUFFIX = {YEAR: "year", MONTH: "month", DAY: "day", HOUR: "hour", BUCKET: "bucket",
           TRUNCATE: "trunc"}
_ITEM_RE = re.compile(r"^\s*([A-Za-z_]+)\s*\((.*)\)\s*$", re.S)
_STORED_RE = re.compile(r"^(identity|year|month|day|hour)$|^(bucket|truncate)\[(\d+)\]$")


# --- models -----------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionField:
    field_id: int
    source_id: int
    name: str
    transform: str  # as stored: identity, day, bucket[16], truncate[4], ...

    @property
    def kind(self) -> str:
        return parse_transform(self.transform)[0]

    @property
    def param(self) -> int:
        return parse_transform(self.transform)[1]

    def to_json(self) -> dict[str, Any]:
        return {"field_id": self.field_id, "source_id": self.source_id, "name": self.name,
                "transform": self.transform}


@dataclass(frozen=True)
class PartitionSpec:
    spec_id: int
    fields: tuple[PartitionField, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"spec_id": self.spec_id, "fields": [f.to_json() for f in self.fields]}

    def describe(self, schema: TableSchema) -> list[str]:
        """The spec as ``partition_by`` items (``day(ts)``, ``bucket(16, id)``)."""
        by_id = {f.id: f.name for f in schema.fields}
        out = []
        for f in self.fields:
            col = by_id.get(f.source_id, f"<field {f.source_id}>")
            kind, n = parse_transform(f.transform)
            out.append(col if kind == IDENTITY else
                       f"{kind}({n}, {col})" if kind in (BUCKET, TRUNCATE) else f"{kind}({col})")
        return out


@dataclass(frozen=True)
class Partitioning:
    """Every spec a table has had, the one new files use, the highest field id."""

    specs: tuple[PartitionSpec, ...]
    default_spec_id: int
    last_partition_id: int

    @property
    def default(self) -> PartitionSpec:
        return self.spec(self.default_spec_id)

    def spec(self, spec_id: int) -> PartitionSpec:
        for s in self.specs:
            if s.spec_id == spec_id:
                return s
        raise KeyError(f"no partition spec {spec_id}")

    def has(self, spec_id: int) -> bool:
        return any(s.spec_id == spec_id for s in self.specs)

    def to_json(self) -> dict[str, Any]:
        return {"partition_specs": [s.to_json() for s in self.specs],
                "default_spec_id": self.default_spec_id,
                "last_partition_id": self.last_partition_id}

    def evolve(self, fields: Sequence[tuple[int, str]], schema: TableSchema) -> Partitioning:
        """A new default spec of ``fields`` (source id, stored transform); a field whose
        source and transform an earlier spec had keeps that field's id."""
        known = {(f.source_id, f.transform): f.field_id for s in self.specs for f in s.fields}
        last = self.last_partition_id
        out = []
        for source_id, transform in fields:
            fid = known.get((source_id, transform))
            if fid is None:
                last += 1
                fid = last
            out.append(PartitionField(fid, source_id, field_name(schema, source_id, transform),
                                      transform))
        spec = PartitionSpec(max(s.spec_id for s in self.specs) + 1, tuple(out))
        return Partitioning((*self.specs, spec), spec.spec_id, last)


def new_partitioning(fields: Sequence[tuple[int, str]], schema: TableSchema) -> Partitioning:
    """Spec 0 of a table created with ``fields`` (source id, stored transform)."""
    out = tuple(PartitionField(FIRST_PARTITION_FIELD_ID + i, sid,
                               field_name(schema, sid, tr), tr)
                for i, (sid, tr) in enumerate(fields))
    return Partitioning((PartitionSpec(0, out),), 0, FIRST_PARTITION_FIELD_ID - 1 + len(out))


def unpartitioned() -> Partitioning:
    """What a table without ``partition_specs`` has: spec 0 with no fields."""
    return Partitioning((PartitionSpec(0, ()),), 0, FIRST_PARTITION_FIELD_ID - 1)


def write_spec(p: Partitioning | None) -> PartitionSpec | None:
    """The spec new data files are written with: ``p``'s default spec, or None when
    the table is unpartitioned (no specs, or a default spec without fields).  Every
    writer passes it on: ``write_data_files(..., spec=write_spec(base.manifest.partitioning))``
    with ``base`` the snapshot the write is planned against."""
    return None if p is None or not p.default.fields else p.default


def field_name(schema: TableSchema, source_id: int, transform: str) -> str:
    col = next((f.name for f in schema.fields if f.id == source_id), f"field{source_id}")
    kind = parse_transform(transform)[0]
    return col if kind == IDENTITY else f"{col}_{_SUFFIX[kind]}"


@dataclass(frozen=True)
class FilePartition:
    """A data file's partition: its spec id and one JSON value per spec field."""

    spec_id: int
    values: tuple[Any, ...]

    def to_json(self) -> dict[str, Any]:
        return {"spec_id": self.spec_id, "values": list(self.values)}


def parse_transform(text: str) -> tuple[str, int]:
    """A stored transform (``day``, ``bucket[16]``) as (kind, parameter; 0 if none).
    Raises ValueError for anything else."""
    m = _STORED_RE.match(text)
    if m is None:
        raise ValueError(f"unknown partition transform {text!r}")
    if m.group(1):
        return m.group(1), 0
    n = int(m.group(3))
    if n < 1 or n > 2**31 - 1:
        raise ValueError(f"partition transform {text!r} needs a parameter of at least 1")
    return m.group(2), n


def check_partitioning(p: Partitioning, schema: TableSchema) -> None:
    """Shape rules of a parsed ``partition_specs`` (ValueError for a defect)."""
    ids = [s.spec_id for s in p.specs]
    if len(set(ids)) != len(ids) or min(ids) < 0:
        raise ValueError("partition spec ids must be unique and non-negative")
    if not p.has(p.default_spec_id):
        raise ValueError(f"default_spec_id {p.default_spec_id} is not a listed spec")
    if p.last_partition_id < FIRST_PARTITION_FIELD_ID - 1:
        raise ValueError("last_partition_id is below 999")
    columns = {f.id: f for f in schema.fields}
    for s in p.specs:
        names = [f.name for f in s.fields]
        fids = [f.field_id for f in s.fields]
        if len(set(names)) != len(names) or len(set(fids)) != len(fids):
            raise ValueError(f"partition spec {s.spec_id} repeats a field name or id")
        for f in s.fields:
            parse_transform(f.transform)
            if not FIRST_PARTITION_FIELD_ID <= f.field_id <= p.last_partition_id:
                raise ValueError(f"partition field id {f.field_id} is outside "
                                 f"[1000, last_partition_id]")
            if not 1 <= f.source_id <= schema.last_field_id:
                raise ValueError(f"partition field {f.name!r} names no field id")
            if s.spec_id == p.default_spec_id and f.source_id not in columns:
                raise ValueError(f"the default spec's field {f.name!r} names no column")


def check_file_partition(fp: FilePartition, p: Partitioning | None) -> None:
    """A data file's ``partition`` against the manifest's specs (ValueError)."""
    if p is None or not p.has(fp.spec_id):
        raise ValueError(f"partition spec {fp.spec_id} is not in the manifest")
    spec = p.spec(fp.spec_id)
    if len(fp.values) != len(spec.fields):
        raise ValueError(f"partition has {len(fp.values)} values, spec {fp.spec_id} "
                         f"has {len(spec.fields)} fields")
    for f, v in zip(spec.fields, fp.values, strict=True):
        kind = f.kind
        if v is None:
            continue
        if kind in _TIME or kind == BUCKET:
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"partition value of {f.name!r} must be an integer")
        elif not isinstance(v, int | str | bool | float):
            raise ValueError(f"partition value of {f.name!r} must be a JSON scalar")


# --- partition_by ------------------------------------------------------------------


def parse_partition_by(items: object, schema: TableSchema) -> list[tuple[int, str]]:
    """``["day(ts)", "bucket(16, user_id)", "region"]`` as (source field id, stored
    transform) pairs, checked against ``schema``.  Raises InvalidPartitionSpec."""
    if isinstance(items, str) or not isinstance(items, Sequence):
        raise InvalidPartitionSpec(
            f"partition_by must be a list of strings such as ['day(ts)', 'region'], "
            f"not {type(items).__name__}")
    out: list[tuple[int, str]] = []
    for item in items:
        if not isinstance(item, str):
            raise InvalidPartitionSpec(f"a partition_by item must be a string, not "
                                       f"{type(item).__name__}", item=repr(item))
        column, kind, param = _parse_item(item)
        f = _resolve(schema, column, item)
        _check_fits(kind, f, item)
        stored = f"{kind}[{param}]" if kind in (BUCKET, TRUNCATE) else kind
        if (f.id, stored) in out:
            raise InvalidPartitionSpec(f"partition field {item!r} is given twice",
                                       item=item, column=f.name)
        if any(fid == f.id and tr.split("[")[0] in _TIME and kind in _TIME
               for fid, tr in out):
            raise InvalidPartitionSpec(
                f"partition field {item!r}: column {f.name!r} already has a time "
                "transform (one of year/month/day/hour per column)", item=item, column=f.name)
        out.append((f.id, stored))
    return out


def _parse_item(item: str) -> tuple[str, str, int]:
    m = _ITEM_RE.match(item)
    if m is None:
        if not item.strip() or any(c in item for c in "(),[]"):
            raise InvalidPartitionSpec(f"partition field {item!r} is not 'column' or "
                                       "'transform(column)'", item=item)
        return item.strip(), IDENTITY, 0
    name = m.group(1).lower()
    kind = _ALIASES.get(name)
    if kind is None:
        raise InvalidPartitionSpec(
            f"unknown partition transform {m.group(1)!r} in {item!r} (transforms: identity, "
            "year, month, day, hour, bucket(N, col), truncate(W, col))", item=item)
    args = [a.strip() for a in m.group(2).split(",")]
    if kind in (BUCKET, TRUNCATE):
        if len(args) != 2 or not args[1]:
            raise InvalidPartitionSpec(f"{kind} takes a width and a column: "
                                       f"'{kind}(16, col)', not {item!r}", item=item)
        try:
            param = int(args[0])
        except ValueError:
            raise InvalidPartitionSpec(f"{kind} width {args[0]!r} in {item!r} is not an "
                                       "integer", item=item, column=args[1]) from None
        if param < 1 or param > 2**31 - 1:
            raise InvalidPartitionSpec(f"{kind} width must be at least 1 (and fit 32 bits), "
                                       f"not {param} in {item!r}", item=item, column=args[1])
        return args[1], kind, param
    if len(args) != 1 or not args[0]:
        raise InvalidPartitionSpec(f"{kind} takes one column: '{kind}(col)', not {item!r}",
                                   item=item)
    return args[0], kind, 0


def _resolve(schema: TableSchema, column: str, item: str) -> Field:
    exact = [f for f in schema.fields if f.name == column]
    found = exact or [f for f in schema.fields if f.name.lower() == column.lower()]
    if len(found) != 1:
        raise InvalidPartitionSpec(
            f"partition column {column!r} (in {item!r}) is not a column of the table "
            f"(columns: {', '.join(schema.names)})", item=item, column=column)
    return found[0]


def _fits(kind: str, t: pa.DataType) -> bool:
    if kind == IDENTITY:
        return (pa.types.is_integer(t) or pa.types.is_boolean(t) or _is_string(t)
                or pa.types.is_date32(t) or pa.types.is_timestamp(t)
                or pa.types.is_decimal128(t))
    if kind in (YEAR, MONTH, DAY):
        return pa.types.is_date32(t) or pa.types.is_timestamp(t)
    if kind == HOUR:
        return pa.types.is_timestamp(t)
    if kind == BUCKET:
        return (pa.types.is_integer(t) or pa.types.is_date32(t) or pa.types.is_timestamp(t)
                or _is_string(t) or _is_binary(t))
    return pa.types.is_integer(t) or _is_string(t) or _is_binary(t)  # truncate


def _check_fits(kind: str, f: Field, item: str) -> None:
    t = None if f.nested else f.arrow_type
    if t is None or not _fits(kind, t):
        raise InvalidPartitionSpec(
            f"partition transform {kind} does not fit column {f.name!r} of type "
            f"{f.type} (in {item!r})", item=item, column=f.name)


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _is_binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t)


# --- transforms ---------------------------------------------------------------------

_TICKS_PER_SECOND = {"s": 1, "ms": 1000, "us": 1_000_000, "ns": 1_000_000_000}
_SECONDS = {DAY: 86_400, HOUR: 3_600}


def _ints(arr: Any) -> np.ndarray:
    """The array's values as int64 (timestamps as ticks, dates as days), nulls as 0."""
    t = arr.type
    if pa.types.is_timestamp(t) or pa.types.is_date32(t):
        arr = arr.cast(pa.int64() if pa.types.is_timestamp(t) else pa.int32())
    return np.asarray(pc.fill_null(arr.cast(pa.int64()), 0).to_numpy(zero_copy_only=False),
                      dtype=np.int64)


def _with_nulls(values: np.ndarray, like: Any, t: pa.DataType) -> Any:
    mask = None if like.null_count == 0 else np.asarray(
        like.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    return pa.array(values, type=t, mask=mask)


def _time(kind: str, arr: Any) -> np.ndarray:
    t = arr.type
    v = _ints(arr)
    days = v.astype("datetime64[D]" if pa.types.is_date32(t) else f"datetime64[{t.unit}]")
    unit = {YEAR: "Y", MONTH: "M", DAY: "D", HOUR: "h"}[kind]
    if pa.types.is_timestamp(t) and kind in (DAY, HOUR):
        return np.asarray(np.floor_divide(v, _SECONDS[kind] * _TICKS_PER_SECOND[t.unit]))
    return np.asarray(days.astype(f"datetime64[{unit}]").astype(np.int64))


_C1, _C2 = np.uint32(0xCC9E2D51), np.uint32(0x1B873593)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def murmur3_longs(values: np.ndarray) -> np.ndarray:
    """Iceberg's ``hashLong``: murmur3_x86_32 (seed 0) of each int64 as 8 little-endian
    bytes, as uint32, vectorised (equal to ``mmh3.hash(v.to_bytes(8, 'little'))``)."""
    u = values.astype("<i8").view("<u4").reshape(-1, 2)
    h = np.zeros(len(values), dtype=np.uint32)
    with np.errstate(over="ignore"):
        for k in (u[:, 0].copy(), u[:, 1].copy()):
            k = _rotl(k * _C1, 15) * _C2
            h = _rotl(h ^ k, 13) * np.uint32(5) + np.uint32(0xE6546B64)
        h ^= np.uint32(8)
        h ^= h >> np.uint32(16)
        h *= np.uint32(0x85EBCA6B)
        h ^= h >> np.uint32(13)
        h *= np.uint32(0xC2B2AE35)
        h ^= h >> np.uint32(16)
    return h


def _bucket(arr: Any, n: int) -> np.ndarray:
    t = arr.type
    if _is_string(t) or _is_binary(t):
        enc = arr.dictionary_encode()
        words = enc.dictionary.to_pylist()
        hashes = np.array([mmh3.hash(w.encode() if isinstance(w, str) else w, 0, signed=False)
                           for w in words], dtype=np.uint32)
        idx = np.asarray(pc.fill_null(enc.indices, 0).to_numpy(zero_copy_only=False),
                         dtype=np.int64)
        h = hashes[idx] if len(hashes) else np.zeros(len(arr), dtype=np.uint32)
    else:
        v = _ints(arr)
        if pa.types.is_timestamp(t):
            tick = _TICKS_PER_SECOND[t.unit]
            v = v * (1_000_000 // tick) if tick <= 1_000_000 else np.floor_divide(v, 1000)
        h = murmur3_longs(v)
    return (h & np.uint32(0x7FFFFFFF)).astype(np.int64) % n


def transform_array(kind: str, param: int, arr: Any) -> Any:
    """The transform of every value of ``arr`` (NULL stays NULL): int32 for the time
    transforms and bucket, the source type for identity and truncate."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    t = arr.type
    if kind == IDENTITY:
        return arr
    if kind in _TIME:
        return _with_nulls(_time(kind, arr).astype(np.int32), arr, pa.int32())
    if kind == BUCKET:
        return _with_nulls(_bucket(arr, param).astype(np.int32), arr, pa.int32())
    if _is_string(t):
        return pc.utf8_slice_codeunits(arr, 0, param)
    if _is_binary(t):
        return pc.binary_slice(arr, 0, param)
    v = _ints(arr)
    return _with_nulls(v - np.mod(v, param), arr, t)


def json_values(arr: Any) -> list[Any]:
    """Partition values as stored in a manifest: integers, text, ``date32`` as
    ``YYYY-MM-DD``, timestamps as integer ticks, decimals as text, NULL as None."""
    t = arr.type
    if pa.types.is_timestamp(t):
        return list(arr.cast(pa.int64()).to_pylist())
    py = arr.to_pylist()
    if pa.types.is_date32(t):
        return [None if d is None else d.isoformat() for d in py]
    if pa.types.is_decimal(t):
        return [None if d is None else str(d) for d in py]
    if _is_binary(t):
        return [None if b is None else b.hex() for b in py]
    return list(py)


def split_by_partition(spec: PartitionSpec, schema: TableSchema, batch: pa.RecordBatch
                       ) -> list[tuple[tuple[Any, ...], pa.RecordBatch]]:
    """The batch's rows grouped by their partition values under ``spec`` (values as
    :func:`json_values` gives them), in order of first appearance."""
    if not spec.fields or batch.num_rows == 0:
        return [((), batch)] if batch.num_rows else []
    by_id = {f.id: f.name for f in schema.fields}
    parts = [transform_array(f.kind, f.param, batch.column(by_id[f.source_id]))
             for f in spec.fields]
    code = np.zeros(batch.num_rows, dtype=np.int64)
    for p in parts:
        enc = p.dictionary_encode(null_encoding="encode")
        idx = np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
        code = code * (len(enc.dictionary) + 1) + idx
    uniq, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    if len(uniq) == 1:
        return [(tuple(json_values(p.slice(0, 1))[0] for p in parts), batch)]
    order = np.argsort(inverse, kind="stable")
    bounds = np.cumsum(np.bincount(inverse, minlength=len(uniq)))[:-1]
    groups = np.split(order, bounds)
    reps = pa.array(first)
    values = list(zip(*(json_values(p.take(reps)) for p in parts), strict=True))
    return [(tuple(values[g]), batch.take(pa.array(groups[g])))
            for g in np.argsort(first, kind="stable")]


# --- pruning bounds -----------------------------------------------------------------


def implied_stats(f: PartitionField, value: Any, source: Field, rows: int
                  ) -> dict[str, Any] | None:
    """The statistics (``min``/``max``/``nulls``, manifest encoding) that partition
    value ``value`` of field ``f`` implies for its source column over a file of
    ``rows`` rows; None when it implies nothing usable (bucket, binary truncate)."""
    if value is None:
        return {"nulls": rows}
    kind, n = parse_transform(f.transform)
    t = source.arrow_type
    try:
        lo_hi = _bounds(kind, n, value, t)
    except (ValueError, TypeError, OverflowError):
        return None
    if lo_hi is None:
        return None
    out: dict[str, Any] = {"nulls": 0}
    if lo_hi[0] is not None:
        out["min"] = lo_hi[0]
    if lo_hi[1] is not None:
        out["max"] = lo_hi[1]
    return out


def _bounds(kind: str, n: int, value: Any, t: pa.DataType) -> tuple[Any, Any] | None:
    if kind == IDENTITY:
        return None if _is_binary(t) else (value, value)
    if kind == BUCKET:
        return None
    if kind == TRUNCATE:
        if pa.types.is_integer(t):
            return value, value + n - 1
        return (value, None) if _is_string(t) else None
    first, after = _period(kind, int(value))
    if pa.types.is_date32(t):
        return first.date().isoformat(), (after.date() - dt.timedelta(days=1)).isoformat()
    tick = _TICKS_PER_SECOND[getattr(t, "unit", "us")]
    epoch = dt.datetime(1970, 1, 1)
    lo = _ticks(first - epoch, tick)
    return lo, _ticks(after - epoch, tick) - 1


def _period(kind: str, v: int) -> tuple[dt.datetime, dt.datetime]:
    """The first instant of period ``v`` of ``kind`` and of the next one (naive UTC)."""
    epoch = dt.datetime(1970, 1, 1)
    if kind == YEAR:
        return dt.datetime(1970 + v, 1, 1), dt.datetime(1971 + v, 1, 1)
    if kind == MONTH:
        y, m = divmod(v, 12)
        ny, nm = divmod(v + 1, 12)
        return dt.datetime(1970 + y, m + 1, 1), dt.datetime(1970 + ny, nm + 1, 1)
    step = dt.timedelta(days=1) if kind == DAY else dt.timedelta(hours=1)
    return epoch + step * v, epoch + step * (v + 1)


def _ticks(delta: dt.timedelta, tick: int) -> int:
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return micros * tick // 1_000_000


def literal_bucket(value: Any, t: pa.DataType, n: int) -> int | None:
    """The bucket of a predicate literal for a column of type ``t``; None when the
    literal does not convert to the column's type (then nothing is pruned)."""
    try:
        arr = pa.array([value], type=t)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None
    if arr.null_count:
        return None
    return int(_bucket(arr, n)[0])


def source_fields(spec: PartitionSpec, schema: TableSchema) -> Mapping[int, Field]:
    """The spec's source columns present in ``schema``, by field id."""
    ids = {f.source_id for f in spec.fields}
    return {f.id: f for f in schema.fields if f.id in ids}
