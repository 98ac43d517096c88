"""Binding: check an unbound predicate against a table schema and normalise it.

This module owns the meaning of a literal next to a column: which literals a
column type accepts, how they are converted, and how a literal the column
type cannot hold exactly (``id < 1.5`` on an integer column) is rewritten into
an *exactly* equivalent predicate.  It never reads data or statistics and
never raises anything but :class:`~caslake.errors.InvalidPredicate` (or its
subclass :class:`~caslake.errors.UnknownColumn`) for a bad predicate.

Columns resolve as in Spark and DuckDB: an exact name wins, else a unique
case-insensitive match; several case-insensitive matches raise
:class:`~caslake.errors.AmbiguousColumn`.  The bound tree uses the schema's
spelling.

Nested values: struct fields (``device.os``, ``device['os']``, and
``col("device.os")`` when no column is called ``device.os``) resolve the same
way at every level, and a field the struct lacks raises :class:`UnknownField`
naming the full path and the struct's fields.  ``x[key]`` is a struct's
field or a map's value (``element_at``); lists are not subscripted (use
``element_at``, 1-based).  ``element_at``, ``array_contains`` and
``cardinality`` (also ``length`` of a list or map) check their list or map
argument, and their literal key or value is placed exactly in the key or
element type (one no value of that type equals is refused); what they compute
is :mod:`caslake.expr.nested`.

Representation
--------------
:func:`bind` returns a :class:`BoundExpr`: the schema it was bound against, the
original unbound tree (``source``) and ``expr``, a tree of the *same node
classes* as :mod:`caslake.expr.nodes`, restricted and normalised so that
evaluators (:mod:`~caslake.expr.arrow`, :mod:`~caslake.expr.prune`) have few
cases and no type questions left.  It has exactly the SQL value (TRUE, FALSE
or NULL, row by row) of the source predicate, and:

* uses only :class:`Compare`, :class:`In`, :class:`IsNull`, :class:`Like`,
  :class:`Not`, :class:`And`, :class:`Or` and :class:`Const` -- ``BETWEEN``
  becomes ``>= AND <=``;
* a leaf is *simple* when its tested value is a :class:`Column` -- or a field
  of a struct column, at any depth (``GetField`` chains: ``device.os``) --
  and the other side a literal (``Compare(col, Literal)``, ``In(col, ...)``,
  ``IsNull(col)``): only simple leaves are pruned with statistics.  Any other
  leaf is *computed* -- column against column, arithmetic, functions, CAST,
  CASE (whose conditions are bound, each on its own, into this same normal
  form), LIKE -- and is evaluated exactly after reading; a literal compared with a
  computed value is placed in that value's Arrow type the same way as with a
  column;
* ``LIKE 'abc%...'`` (case-sensitive, with a literal prefix) gains the range
  ``>= 'abc' AND < 'abd'``, which prunes; ``LIKE 'abc%'`` is only the range
  and ``LIKE 'abc'`` is ``= 'abc'``;
* is in negation normal form: ``Not`` wraps only a leaf -- ``Not(IsNull)`` (IS
  NOT NULL), ``Not(In)`` (NOT IN), or ``Not(Compare)`` with an ordering operator
  on a *float* column (where ``NOT x < 5`` is not ``x >= 5``: it also holds for
  NaN).  Every other negated comparison is flipped (``NOT x < 5`` -> ``x >=
  5``), and De Morgan pushes NOT through AND/OR;
* every literal is a Python value *exactly representable* in its column's
  type -- ``int`` for integer columns, ``float`` for float columns, ``bool``,
  ``str``, ``datetime.date`` for date32, and ``datetime.datetime`` for
  timestamps (tz-aware in UTC when the column has a time zone, naive
  otherwise) -- never NULL and never NaN;
* ``In`` has at least two distinct values;
* a predicate that cannot be true or false except through NULLs becomes
  ``Const(value, unless_null=column)`` (``id = 1.5`` on an integer column is
  FALSE, or NULL where ``id`` is NULL), and constants are folded: a bare
  :data:`TRUE`/:data:`FALSE` appears only as the whole tree;
* long AND/OR chains are rebuilt as balanced trees, so depth is logarithmic.

Literal rules
-------------
* Integer columns take integers, decimals and floats; floats take integers,
  floats and decimals (a decimal literal becomes the nearest float, as a cast
  in DuckDB does); decimal columns take integers, decimals and floats (a
  Python float stands for its shortest decimal spelling, ``0.05``), compared
  exactly -- never through float.
  Comparisons are exact in mathematical value: ``id < 1.5`` is ``id <= 1``,
  ``id = 1.5`` never holds, ``f = 9007199254740993`` on a float64 column never
  holds.  Booleans and strings are not numbers.
* NaN literals follow IEEE rules: ``x op NaN`` is FALSE except ``!=`` (TRUE),
  NULL where ``x`` is NULL.  NaN column values behave the same way; NaN is not
  NULL.
* bool columns take TRUE/FALSE; string columns take strings.
* date32 columns take dates, ISO ``'YYYY-MM-DD'`` strings and timestamps (a
  timestamp is compared with the date's midnight).
* timestamp columns (any unit) take timestamps, dates (midnight) and ISO
  timestamp strings.  On a column with a time zone a naive literal is taken as
  UTC; on a naive column an aware literal is converted to UTC and its zone
  dropped.  Tz-aware literals compared with date columns are converted the
  same way.
* binary and every other type support IS NULL / IS NOT NULL only.
* two non-literal values compare when both are numbers (Arrow's implicit
  casts widen them) or both have the same kind (string, bool, date,
  timestamp).
"""

from __future__ import annotations

import math
import struct
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import ROUND_FLOOR, Context, Decimal
from fractions import Fraction
from typing import Any, Final, cast

import pyarrow as pa
import pyarrow.compute as pc

from caslake.errors import (
    AmbiguousColumn,
    InvalidArgument,
    InvalidPredicate,
    UnknownColumn,
    UnknownField,
)
from caslake.expr._iso import parse_date, parse_timestamp
from caslake.expr.functions import (
    ValueBuilder,
    describe_typed,
    literal_type,
    match_like_literal,
    type_family,
)
from caslake.expr.nodes import (
    FALSE,
    NESTED_FUNCTIONS,
    TRUE,
    And,
    Arith,
    Between,
    Case,
    Cast,
    Column,
    Compare,
    Const,
    Expr,
    Func,
    GetField,
    In,
    IsNull,
    Like,
    Literal,
    LiteralValue,
    Not,
    Or,
    Subscript,
    Value,
    describe_value,
    iter_chain,
    referenced_columns,
    render_literal,
    to_sql,
    value_path,
)

__all__ = [
    "BoundExpr", "UnknownField", "bind", "is_float_type", "path_type", "resolve_column",
    "stats_key", "string_successor",
]

_NEGATE_OP: Final[dict[str, str]] = {
    "=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<",
}
_ORDERING_OPS: Final = frozenset({"<", "<=", ">", ">="})
_F32_MAX: Final = struct.unpack("<f", struct.pack("<I", 0x7F7FFFFF))[0]
_NAIVE_EPOCH: Final = datetime(1970, 1, 1)
_UTC_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MICROSECOND: Final = timedelta(microseconds=1)
_TICKS_PER_SECOND: Final = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


@dataclass(frozen=True, eq=False)
class BoundExpr:
    """A predicate checked against ``schema``.

    ``expr`` is the normalised tree described in the module docstring,
    ``schema`` the full schema it was bound against and ``source`` the unbound
    predicate it came from (kept so it can be re-bound to another schema).
    """

    expr: Expr
    schema: pa.Schema
    source: Expr

    @property
    def columns(self) -> frozenset[str]:
        """Names of the columns the bound predicate reads."""
        return frozenset(referenced_columns(self.expr))

    @property
    def always_true(self) -> bool:
        """True when the predicate keeps every row (it folded to TRUE)."""
        return self.expr == TRUE

    @property
    def always_false(self) -> bool:
        """True when the predicate keeps no row (it folded to FALSE)."""
        return self.expr == FALSE

    def field(self, name: str) -> pa.Field[Any]:
        """The schema field of column ``name``."""
        return self.schema.field(name)

    def __str__(self) -> str:
        return to_sql(self.expr)

    def __repr__(self) -> str:
        return f"BoundExpr({to_sql(self.expr)!r})"


def is_float_type(arrow_type: pa.DataType) -> bool:
    """True for the float types a predicate may compare (float32, float64)."""
    return bool(pa.types.is_float32(arrow_type) or pa.types.is_float64(arrow_type))


def path_type(schema: pa.Schema, path: Sequence[str]) -> pa.DataType | None:
    """The Arrow type at ``path`` (a column, then struct field names), or None
    when the schema has no such struct path (exact names, as in a bound tree)."""
    if path[0] not in schema.names:
        return None
    t: pa.DataType = schema.field(path[0]).type
    for name in path[1:]:
        if not pa.types.is_struct(t):
            return None
        index = t.get_field_index(name)
        if index < 0:
            return None
        t = t.field(index).type
    return t


def stats_key(value: Value) -> str | tuple[str, ...] | None:
    """The key of ``value``'s statistics in what :func:`~caslake.expr.might_match`
    reads: a column's name, the tuple of names of a struct leaf (``("device",
    "os")``), or None for a value without statistics."""
    path = value_path(value)
    if path is None:
        return None
    return path[0] if len(path) == 1 else path


# --- literal coercion -------------------------------------------------------
#
# Each _place_* function places a literal on its column type's ordered domain:
#   _Exact(v)  -- the domain holds the literal exactly, as Python value v;
#   _Gap(lo)   -- it falls strictly between lo (the largest domain value below
#                 it) and the next domain value;
#   _BELOW / _ABOVE -- it is below / above every domain value;
#   _NAN       -- a float NaN, unordered.


@dataclass(frozen=True)
class _Exact:
    value: LiteralValue


@dataclass(frozen=True)
class _Gap:
    lo: LiteralValue


class _Outside:
    def __init__(self, name: str) -> None:
        self.name = name


_BELOW: Final = _Outside("below")
_ABOVE: Final = _Outside("above")
_NAN: Final = _Outside("nan")

_Placement = _Exact | _Gap | _Outside


class _Mismatch(Exception):
    """Internal: the literal's type does not fit the column; carries a hint."""

    def __init__(self, hint: str = "") -> None:
        super().__init__(hint)
        self.hint = hint


def _int_bounds(arrow_type: pa.DataType) -> tuple[int, int]:
    bits = int(arrow_type.bit_width)
    if pa.types.is_signed_integer(arrow_type):
        return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return 0, 2**bits - 1


def _place_int(value: LiteralValue, arrow_type: pa.DataType) -> _Placement:
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        raise _Mismatch("integer columns compare with numbers")
    low, high = _int_bounds(arrow_type)
    if isinstance(value, float):
        if math.isnan(value):
            return _NAN
        if math.isinf(value):
            return _ABOVE if value > 0 else _BELOW
    if not isinstance(value, int):
        exact = Fraction(value)
        if exact.denominator != 1:
            floor = math.floor(exact)
            if floor < low:
                return _BELOW
            if floor >= high:
                return _ABOVE
            return _Gap(floor)
        value = int(exact)
    if value < low:
        return _BELOW
    if value > high:
        return _ABOVE
    return _Exact(value)


def _f32(value: float) -> float:
    result: float = struct.unpack("<f", struct.pack("<f", value))[0]
    return result


def _f32_below(value: float) -> float:
    """The largest float32 strictly below the finite float32 ``value``."""
    if value == 0.0:
        return -_f32(1e-45)  # the smallest subnormal, negated
    (bits,) = struct.unpack("<I", struct.pack("<f", value))
    bits = bits - 1 if value > 0 else bits + 1
    result: float = struct.unpack("<f", struct.pack("<I", bits))[0]
    return result


def _place_float(value: LiteralValue, arrow_type: pa.DataType) -> _Placement:
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        raise _Mismatch("float columns compare with numbers")
    if isinstance(value, Decimal):
        # A decimal literal next to a float column is cast to the column's type
        # (as DuckDB does), so ``f = 0.1`` holds for the float nearest 0.1.
        try:
            value = float(value)
        except OverflowError:
            return _ABOVE if value > 0 else _BELOW
        if math.isinf(value):
            return _ABOVE if value > 0 else _BELOW
        if pa.types.is_float32(arrow_type) and abs(value) <= _F32_MAX:
            value = _f32(value)
    if isinstance(value, float):
        if math.isnan(value):
            return _NAN
        if math.isinf(value):
            return _Exact(value)
    exact = Fraction(value)
    single = pa.types.is_float32(arrow_type)
    top = _F32_MAX if single else sys.float_info.max
    try:
        nearest = float(exact)
        if single:
            if abs(nearest) > _F32_MAX:
                raise OverflowError
            nearest = _f32(nearest)
    except OverflowError:
        return _Gap(top) if exact > 0 else _Gap(-math.inf)
    if Fraction(nearest) == exact:
        return _Exact(nearest)
    if Fraction(nearest) < exact:
        return _Gap(nearest)
    below = _f32_below(nearest) if single else math.nextafter(nearest, -math.inf)
    return _Gap(below)


def _as_utc(value: datetime) -> datetime:
    try:
        return value.astimezone(UTC)
    except OverflowError:  # e.g. 9999-12-31 23:00-05:00 is in year 10000 in UTC
        raise _Mismatch("in UTC the timestamp falls outside years 1-9999") from None


def _as_naive_utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        return value
    return _as_utc(value).replace(tzinfo=None)


def _place_date(value: LiteralValue, arrow_type: pa.DataType) -> _Placement:
    if isinstance(value, str):
        parsed: date | datetime | None = parse_date(value) or parse_timestamp(value)
        if parsed is None:
            raise _Mismatch("expected an ISO date 'YYYY-MM-DD'")
        value = parsed
    if isinstance(value, datetime):
        naive = _as_naive_utc(value)
        if naive.time() == time(0):
            return _Exact(naive.date())
        return _Gap(naive.date())
    if isinstance(value, date):
        return _Exact(value)
    raise _Mismatch("date columns compare with dates, timestamps or ISO date strings")


def _place_timestamp(value: LiteralValue, arrow_type: pa.DataType) -> _Placement:
    if isinstance(value, str):
        parsed = parse_timestamp(value)
        if parsed is None:
            raise _Mismatch("expected an ISO timestamp 'YYYY-MM-DD HH:MM:SS[.ffffff][+HH:MM]'")
        value = parsed
    if isinstance(value, date) and not isinstance(value, datetime):
        value = datetime.combine(value, time(0))
    if not isinstance(value, datetime):
        raise _Mismatch("timestamp columns compare with timestamps, dates or ISO strings")
    ts_type = cast(pa.TimestampType, arrow_type)
    if ts_type.tz is not None:
        instant = value.replace(tzinfo=UTC) if value.tzinfo is None else _as_utc(value)
        epoch = _UTC_EPOCH
    else:
        instant = _as_naive_utc(value)
        epoch = _NAIVE_EPOCH
    micros = (instant - epoch) // _ONE_MICROSECOND
    per_second = _TICKS_PER_SECOND[ts_type.unit]
    if per_second >= 1_000_000:
        ticks = micros * (per_second // 1_000_000)
        if ticks > _INT64_MAX:
            return _ABOVE
        if ticks < _INT64_MIN:
            return _BELOW
        return _Exact(instant)
    micros_per_tick = 1_000_000 // per_second
    whole, rest = divmod(micros, micros_per_tick)
    if rest == 0:
        return _Exact(instant)
    return _Gap(epoch + timedelta(microseconds=whole * micros_per_tick))


_DECIMAL_CONTEXT: Final = Context(prec=400, Emax=999_999, Emin=-999_999)


def _place_decimal(value: LiteralValue, arrow_type: pa.DataType) -> _Placement:
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        raise _Mismatch("decimal columns compare with numbers")
    if isinstance(value, float):
        if math.isnan(value):
            return _NAN
        if math.isinf(value):
            return _ABOVE if value > 0 else _BELOW
        # A Python float stands for its shortest decimal spelling: 0.05 is 0.05.
        value = Decimal(repr(value))
    exact = Decimal(value)
    dec_type = cast(pa.Decimal128Type, arrow_type)
    quantum = Decimal(1).scaleb(-dec_type.scale)
    top = (Decimal(10) ** dec_type.precision - 1).scaleb(-dec_type.scale)
    if exact > top:
        return _ABOVE
    if exact < -top:
        return _BELOW
    floor = exact.quantize(quantum, rounding=ROUND_FLOOR, context=_DECIMAL_CONTEXT)
    if floor == exact:
        return _Exact(floor)
    return _Gap(floor)


def _place_bool(value: LiteralValue, arrow_type: pa.DataType) -> _Placement:
    if not isinstance(value, bool):
        raise _Mismatch("boolean columns compare with TRUE or FALSE")
    return _Exact(value)


def _place_string(value: LiteralValue, arrow_type: pa.DataType) -> _Placement:
    if not isinstance(value, str):
        raise _Mismatch("string columns compare with strings")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _Mismatch("the string is not valid Unicode (it has a lone surrogate)") from None
    return _Exact(value)


_Placer = Callable[[LiteralValue, pa.DataType], _Placement]


def _placer(arrow_type: pa.DataType) -> _Placer | None:
    types = pa.types
    if types.is_integer(arrow_type):
        return _place_int
    if is_float_type(arrow_type):
        return _place_float
    if types.is_boolean(arrow_type):
        return _place_bool
    if types.is_string(arrow_type) or types.is_large_string(arrow_type):
        return _place_string
    if types.is_date32(arrow_type):
        return _place_date
    if types.is_timestamp(arrow_type):
        return _place_timestamp
    if types.is_decimal(arrow_type):
        return _place_decimal
    return None


# --- the binder --------------------------------------------------------------


def _balanced(kind: type[And] | type[Or], items: Sequence[Expr]) -> Expr:
    if len(items) == 1:
        return items[0]
    middle = len(items) // 2
    return kind(_balanced(kind, items[:middle]), _balanced(kind, items[middle:]))


def resolve_column(name: str, names: Sequence[str]) -> str:
    """The schema's name for column ``name``, as Spark and DuckDB resolve it.

    An exact match wins; otherwise a unique case-insensitive match.  Raises
    :class:`~caslake.errors.UnknownColumn` when nothing matches and
    :class:`~caslake.errors.AmbiguousColumn` when several columns match
    ignoring case (or the schema repeats the exact name).
    """
    exact = sum(1 for n in names if n == name)
    if exact == 1:
        return name
    if exact > 1:
        raise AmbiguousColumn(name, [name] * exact)
    folded = name.casefold()
    matches = [n for n in names if n.casefold() == folded]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise UnknownColumn(name, list(names))
    raise AmbiguousColumn(name, matches)


def _resolve_field(name: str, struct: pa.StructType, parent: Value) -> str:
    """The struct's name for field ``name`` of ``parent`` (resolved as columns are);
    UnknownField / AmbiguousColumn name the full path."""
    names = [struct.field(i).name for i in range(struct.num_fields)]
    path = str(GetField(parent, name))
    try:
        return resolve_column(name, names)
    except AmbiguousColumn as exc:
        raise AmbiguousColumn(path, [str(GetField(parent, n)) for n in exc.candidates]) from None
    except UnknownColumn:
        raise UnknownField(path, str(parent), names) from None


def _like_prefix(pattern: str, escape: str | None) -> tuple[str, str]:
    """(the literal text before the first wildcard, the rest of the pattern)."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if escape is not None and ch == escape and i + 1 < len(pattern):
            out.append(pattern[i + 1])
            i += 2
            continue
        if ch in "%_":
            break
        out.append(ch)
        i += 1
    return "".join(out), pattern[i:]


def string_successor(prefix: str) -> str | None:
    """The smallest string above every string that starts with ``prefix``
    (None if there is none): the exclusive end of LIKE 'prefix%' as a range.
    Code point order is UTF-8 byte order, which is how Arrow and Parquet
    order strings."""
    chars = list(prefix)
    while chars:
        code = ord(chars[-1]) + 1
        if code > 0x10FFFF:
            chars.pop()
            continue
        if 0xD800 <= code <= 0xDFFF:  # surrogates are not characters
            code = 0xE000
        chars[-1] = chr(code)
        return "".join(chars)
    return None


class _Binder:
    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.names = list(schema.names)
        self.values = ValueBuilder(schema, for_filter=False)

    def resolve(self, column: Column) -> tuple[Value, pa.DataType]:
        """The column (or, for ``col("device.os")`` when no column has that name,
        the struct field it names) under the schema's names, and its type."""
        try:
            name = resolve_column(column.name, self.names)
        except UnknownColumn:
            dotted = self.resolve_dotted(column.name)
            if dotted is None:
                raise
            return dotted, self.type_of(dotted)
        resolved = column if name == column.name else Column(name)
        return resolved, self.schema.field(name).type

    def resolve_dotted(self, name: str) -> Value | None:
        """``a.b.c`` as field ``b.c`` of column ``a`` (the longest leading part that
        names a column wins, as in the table schema's ``find_path``); None when no
        leading part names a column."""
        parts = name.split(".")
        for i in range(len(parts) - 1, 0, -1):
            try:
                top = resolve_column(".".join(parts[:i]), self.names)
            except UnknownColumn:
                continue
            value: Value = Column(top)
            for part in parts[i:]:
                value = self.resolve_inside(GetField(value, part))
            return value
        return None

    def type_of(self, value: Value) -> pa.DataType:
        """The Arrow type of an already resolved value."""
        t: pa.DataType = self.schema.field(value.name).type if isinstance(value, Column) \
            else self.values.build(value)[1]
        return t

    def resolve_field(self, value: Value, name: str) -> Value:
        """Field ``name`` of the resolved ``value``, which must be a struct."""
        t = self.type_of(value)
        if not pa.types.is_struct(t):
            hint = ""
            if pa.types.is_map(t):
                hint = f"; a map's value is {value}[{render_literal(name)}] or element_at"
            elif pa.types.is_list(t) or pa.types.is_large_list(t):
                hint = "; take an element first: element_at(list, position)"
            raise InvalidPredicate(
                f"cannot read field {name!r} of {value}: it is {t}, not a struct{hint}")
        return GetField(value, _resolve_field(name, t, value))

    def resolve_subscript(self, value: Value, key: Literal) -> Value:
        """``value[key]``: a struct's field or a map's value for ``key``."""
        t = self.type_of(value)
        if pa.types.is_struct(t):
            if not isinstance(key.value, str):
                raise InvalidPredicate(
                    f"a field of struct {value} is named by a string, got "
                    f"{describe_value(key.value)}")
            return self.resolve_field(value, key.value)
        if pa.types.is_map(t):
            return self.nested_function(Func("element_at", (value, key)))
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            raise InvalidPredicate(
                f"{value}[{render_literal(key.value)}]: lists are not subscripted (Spark counts "
                f"from 0, DuckDB from 1); use element_at({value}, position), counting from 1")
        raise InvalidPredicate(f"cannot subscript {value} of type {t}: it is not a struct or map")

    def nested_function(self, func: Func) -> Value:
        """A function on lists and maps with resolved arguments: its literal key or
        value placed exactly in the element, key or value type."""
        base = func.args[0]
        t = self.type_of(base)
        name = func.name
        is_list = pa.types.is_list(t) or pa.types.is_large_list(t)
        if name == "length" and (is_list or pa.types.is_map(t)):
            name = "cardinality"
        if name == "cardinality" or name == "length":
            if not (is_list or pa.types.is_map(t)):
                if name == "length":
                    return func
                raise InvalidPredicate(
                    f"cardinality() takes a list or a map, got {describe_typed(base, t)}")
            return Func("cardinality", (base,))
        arg = func.args[1]
        if not isinstance(arg, Literal):
            raise InvalidPredicate(f"{name}() needs a literal as its second argument, got {arg}")
        if name == "element_at" and is_list:
            position = arg.value
            if not isinstance(position, int) or isinstance(position, bool) or position == 0 \
                    or not _INT64_MIN < position <= _INT64_MAX:
                raise InvalidPredicate(
                    f"element_at({base}, {arg}): a list position is a non-zero integer "
                    "(1 is the first element, -1 the last)")
            return Func(name, (base, arg))
        if name == "element_at" and pa.types.is_map(t):
            key_type: pa.DataType = cast(Any, t).key_type
            return Func(name, (base, self.exact_literal(key_type, arg, f"key of map {base}")))
        if name == "array_contains" and is_list:
            element_type: pa.DataType = cast(Any, t).value_type
            return Func(name, (base, self.exact_literal(
                element_type, arg, f"element of list {base}")))
        takes = "a list or a map" if name == "element_at" else "a list"
        raise InvalidPredicate(f"{name}() takes {takes}, got {describe_typed(base, t)}")

    def exact_literal(self, t: pa.DataType, literal: Literal, what: str) -> Literal:
        """``literal`` as a value of type ``t``; InvalidPredicate when no value of
        ``t`` equals it."""
        placer = _placer(t)
        if placer is None:
            raise InvalidPredicate(f"a {what} of type {t} cannot be compared with a literal")
        try:
            place = placer(literal.value, t)
        except _Mismatch as exc:
            hint = f": {exc.hint}" if exc.hint else ""
            raise InvalidPredicate(
                f"{describe_value(literal.value)} cannot be the {what} of type {t}{hint}") from None
        if not isinstance(place, _Exact):
            raise InvalidPredicate(
                f"{describe_value(literal.value)} cannot be a {what}: no value of type {t} "
                "equals it")
        return Literal(place.value)

    def resolve_inside(self, value: Value) -> Value:
        """``value`` with every column renamed to its schema name, field accesses
        and subscripts resolved against the struct and map types."""
        if isinstance(value, Column):
            return self.resolve(value)[0]
        if isinstance(value, GetField):
            return self.resolve_field(self.resolve_inside(value.value), value.name)
        if isinstance(value, Subscript):
            return self.resolve_subscript(self.resolve_inside(value.value), value.key)
        if isinstance(value, Func):
            resolved = Func(value.name, tuple(self.resolve_inside(a) for a in value.args))
            if resolved.name in NESTED_FUNCTIONS or resolved.name == "length":
                return self.nested_function(resolved)
            return resolved
        if isinstance(value, Arith):
            return Arith(value.op, self.resolve_inside(value.left),
                         self.resolve_inside(value.right))
        if isinstance(value, Cast):
            return Cast(self.resolve_inside(value.value), value.to)
        if isinstance(value, Case):
            # Each condition is bound as a predicate of its own (normalised, its
            # literals placed); the branch values are resolved like any value.
            whens = tuple((self.bind(c, False), self.resolve_inside(v)) for c, v in value.whens)
            return Case(whens, self.resolve_inside(value.default))
        return value

    def bind_value(self, value: Value) -> tuple[Value, pa.DataType]:
        """The resolved value and its Arrow type (type errors raise here)."""
        if isinstance(value, Column):
            return self.resolve(value)
        if isinstance(value, Literal):
            return value, literal_type(value.value)
        resolved = self.resolve_inside(value)
        return resolved, self.values.build(resolved)[1]

    def placement(self, value: Value, arrow_type: pa.DataType, literal: Literal,
                  what: str) -> _Placement:
        placer = _placer(arrow_type)
        shown = f"column {value.name!r}" if isinstance(value, Column) else \
            f"field {str(value)!r}" if isinstance(value, GetField) else f"{value}"
        if placer is None:
            raise InvalidPredicate(
                f"{shown} of type {arrow_type} supports only IS NULL and "
                f"IS NOT NULL, not {what}"
            )
        try:
            return placer(literal.value, arrow_type)
        except _Mismatch as exc:
            hint = f": {exc.hint}" if exc.hint else ""
            raise InvalidPredicate(
                f"cannot compare {shown} of type {arrow_type} with "
                f"{describe_value(literal.value)}{hint}"
            ) from None

    def bind(self, expr: Expr, negate: bool) -> Expr:
        while isinstance(expr, Not):  # a loop, so ~~~...~x needs no stack
            expr, negate = expr.expr, not negate
        if isinstance(expr, (And, Or)):
            return self.bind_chain(expr, negate)
        if isinstance(expr, Const):
            guard = None
            if expr.unless_null is not None:
                guard = self.bind_value(expr.unless_null)[0]
            return Const(expr.value != negate, guard)
        if isinstance(expr, Compare):
            return self.bind_compare(expr.op, expr.left, expr.right, negate)
        if isinstance(expr, Between):
            both = And(Compare(">=", expr.column, expr.low), Compare("<=", expr.column, expr.high))
            return self.bind(both, negate)
        if isinstance(expr, In):
            return self.bind_in(expr, negate)
        if isinstance(expr, IsNull):
            if isinstance(expr.column, Literal):
                return Const((expr.column.value is None) != negate)
            value = self.bind_value(expr.column)[0]
            return Not(IsNull(value)) if negate else IsNull(value)
        if isinstance(expr, Like):
            return self.bind_like(expr, negate)
        raise InvalidPredicate(f"not a predicate node: {type(expr).__name__}")

    def bind_chain(self, expr: And | Or, negate: bool) -> Expr:
        # NOT (a AND b) = NOT a OR NOT b, and dually; holds in Kleene logic.
        source_kind = type(expr)
        kind: type[And] | type[Or] = source_kind
        if negate:
            kind = Or if source_kind is And else And
        return self.combine(kind, (self.bind(operand, negate)
                                   for operand in iter_chain(expr, source_kind)))

    def combine(self, kind: type[And] | type[Or], bound: Iterable[Expr]) -> Expr:
        """Fold constants out of already-bound operands and balance the chain."""
        absorbing = FALSE if kind is And else TRUE
        neutral = TRUE if kind is And else FALSE
        items: list[Expr] = []
        for operand in bound:
            if operand == absorbing:
                return absorbing
            if operand == neutral:
                continue
            items.extend(iter_chain(operand, kind))
        if not items:
            return neutral
        return _balanced(kind, items)

    def compare_leaf(self, op: str, left: Value, right: Value,
                     float_compare: bool, negate: bool) -> Expr:
        if negate:
            if float_compare and op in _ORDERING_OPS:
                return Not(Compare(op, left, right))
            op = _NEGATE_OP[op]
        return Compare(op, left, right)

    def bind_compare(self, op: str, left: Value, right: Value, negate: bool) -> Expr:
        if isinstance(left, Literal) and isinstance(right, Literal):
            return self.fold_compare(op, left, right, negate)
        if isinstance(right, Literal):
            value, arrow_type = self.bind_value(left)
            return self.compare_literal(op, value, arrow_type, right, negate)
        (lv, lt), (rv, rt) = self.bind_value(left), self.bind_value(right)
        families = {type_family(lt), type_family(rt)}
        comparable = len(families) == 1 or families <= {"int", "float", "decimal"}
        if comparable and "other" not in families:
            try:
                pc.equal(pa.array([], type=lt), pa.array([], type=rt))
            except (pa.ArrowException, TypeError):
                comparable = False
        if not comparable:
            raise InvalidPredicate(
                f"cannot compare {describe_typed(lv, lt)} with {describe_typed(rv, rt)}"
            )
        return self.compare_leaf(op, lv, rv, "float" in families, negate)

    def fold_compare(self, op: str, left: Literal, right: Literal, negate: bool) -> Expr:
        """Two literals: the comparison is a constant (``1 = 1``)."""
        arrow_type = literal_type(left.value)
        place = self.placement(left, arrow_type, right, f"{op} {describe_value(right.value)}")
        x: Any = left.value
        if isinstance(x, datetime) and x.tzinfo is not None:
            x = x.astimezone(UTC)
        if isinstance(place, _Exact):
            holds = _COMPARE_PY[op](x, place.value)
        elif place is _NAN:
            holds = op == "!="
        elif place is _BELOW or place is _ABOVE:
            holds = op == "!=" or (op in (">", ">=") if place is _BELOW else op in ("<", "<="))
        else:
            assert isinstance(place, _Gap)
            if op in ("=", "!="):
                holds = op == "!="
            else:
                holds = bool(x <= place.lo) if op in ("<", "<=") else bool(x > place.lo)
        return Const(bool(holds) != negate)

    def compare_literal(self, op: str, value: Value, arrow_type: pa.DataType,
                        literal: Literal, negate: bool) -> Expr:
        place = self.placement(value, arrow_type, literal, f"{op} {describe_value(literal.value)}")
        return self.compare_placed(op, value, arrow_type, place, negate)

    def compare_placed(self, op: str, value: Value, arrow_type: pa.DataType,
                       place: _Placement, negate: bool) -> Expr:
        float_column = is_float_type(arrow_type)
        if isinstance(place, _Exact):
            return self.compare_leaf(op, value, Literal(place.value), float_column, negate)
        if place is _NAN:
            # IEEE: only != holds for NaN; NULL rows stay NULL.
            return Const((op == "!=") != negate, value)
        if place is _BELOW or place is _ABOVE:
            # Every non-null value is above (or below) the literal.
            holds = op == "!=" or (
                op in (">", ">=") if place is _BELOW else op in ("<", "<=")
            )
            return Const(holds != negate, value)
        assert isinstance(place, _Gap)
        # No domain value lies strictly between lo and the literal.
        if op == "=":
            return Const(negate, value)
        if op == "!=":
            return Const(not negate, value)
        gap_op = "<=" if op in ("<", "<=") else ">"
        return self.compare_leaf(gap_op, value, Literal(place.lo), float_column, negate)

    def bind_in(self, expr: In, negate: bool) -> Expr:
        if not expr.values:
            return Const(negate)  # x IN () matches nothing, NULL or not
        if isinstance(expr.column, Literal):
            return self.bind(_any_equal(expr), negate)
        value, arrow_type = self.bind_value(expr.column)
        kept: list[LiteralValue] = []
        seen: set[Literal] = set()
        if pa.types.is_integer(arrow_type) and all(type(v.value) is int for v in expr.values):
            # The common long list (keys to delete): whole numbers for an integer
            # column place exactly when in range -- the loop below, without its
            # per-value work (1,500 keys: ~35 ms -> a few ms).
            low, high = _int_bounds(arrow_type)
            ints = [int(v.value) for v in expr.values]  # type: ignore[arg-type]
            kept = list(dict.fromkeys(i for i in ints if low <= i <= high))
            return self.in_leaf(value, arrow_type, kept, negate)
        for literal in expr.values:
            place = self.placement(value, arrow_type, literal, "IN")
            if not isinstance(place, _Exact):
                continue  # x = v cannot hold for this v
            key = Literal(place.value)  # 0.0 and -0.0 are one key
            if key in seen:
                continue
            seen.add(key)
            kept.append(place.value)
        return self.in_leaf(value, arrow_type, kept, negate)

    def in_leaf(self, value: Value, arrow_type: pa.DataType, kept: list[LiteralValue],
                negate: bool) -> Expr:
        """``value IN kept`` (distinct values that can each equal ``value``)."""
        if not kept:
            return Const(negate, value)
        if len(kept) == 1:
            return self.compare_leaf("=", value, Literal(kept[0]), is_float_type(arrow_type),
                                     negate)
        in_expr = In(value, tuple(Literal(v) for v in kept))
        return Not(in_expr) if negate else in_expr

    def bind_like(self, expr: Like, negate: bool) -> Expr:
        value, arrow_type = self.bind_value(expr.column)
        word = "ILIKE" if expr.case_insensitive else "LIKE"
        if type_family(arrow_type) != "string":
            raise InvalidPredicate(
                f"{word} needs a string, got {describe_typed(value, arrow_type)}"
            )
        like = Like(value, expr.pattern, expr.escape, expr.case_insensitive)
        if isinstance(value, Literal):
            matched = match_like_literal(like)
            return Const(matched != negate)
        parts: list[Expr] = []
        keep_like = True
        if not expr.case_insensitive:
            prefix, rest = _like_prefix(expr.pattern, expr.escape)
            if not rest:  # no wildcard at all: plain equality
                return self.compare_literal("=", value, arrow_type, Literal(prefix), negate)
            if prefix:
                # Every match lies in [prefix, successor): a range statistics prune.
                parts.append(self.compare_literal(">=", value, arrow_type, Literal(prefix),
                                                  negate))
                successor = string_successor(prefix)
                if successor is not None:
                    parts.append(self.compare_literal("<", value, arrow_type,
                                                      Literal(successor), negate))
                keep_like = set(rest) != {"%"}  # 'prefix%' is exactly the range
        if keep_like:
            parts.append(Not(like) if negate else like)
        return self.combine(Or if negate else And, parts)


def _any_equal(expr: In) -> Expr:
    """``v IN (a, b)`` as ``v = a OR v = b`` (for a literal ``v``)."""
    out: Expr = Compare("=", expr.column, expr.values[0])
    for literal in expr.values[1:]:
        out = Or(out, Compare("=", expr.column, literal))
    return out


_COMPARE_PY: Final[dict[str, Callable[[Any, Any], bool]]] = {
    "=": lambda a, b: bool(a == b), "!=": lambda a, b: bool(a != b),
    "<": lambda a, b: bool(a < b), "<=": lambda a, b: bool(a <= b),
    ">": lambda a, b: bool(a > b), ">=": lambda a, b: bool(a >= b),
}


def bind(expr: Expr, schema: pa.Schema) -> BoundExpr:
    """Check ``expr`` against ``schema`` and normalise it (see the module docstring).

    Raises :class:`~caslake.errors.UnknownColumn` for a column the schema does
    not have and :class:`~caslake.errors.InvalidPredicate` for a literal the
    column cannot be compared with or an operation its type does not support.
    """
    if not isinstance(schema, pa.Schema):
        raise InvalidArgument(f"bind needs a pyarrow.Schema, got {type(schema).__name__}")
    if not isinstance(expr, Expr):
        raise InvalidPredicate(
            f"a predicate must be a caslake.expr expression, got {type(expr).__name__}"
        )
    try:
        bound = _Binder(schema).bind(expr, False)
    except RecursionError:
        raise InvalidPredicate("the predicate is nested too deeply to evaluate") from None
    return BoundExpr(bound, schema, expr)


def bind_value(value: Value, schema: pa.Schema) -> tuple[Value, pa.DataType]:
    """A scalar value (not a predicate: what an UPDATE's ``SET`` takes) checked
    against ``schema``: columns renamed to their schema names, and its Arrow type.
    Errors as :func:`bind`."""
    if not isinstance(value, Value):
        raise InvalidPredicate(f"a value must be a caslake.expr value, got {type(value).__name__}")
    try:
        return _Binder(schema).bind_value(value)
    except RecursionError:
        raise InvalidPredicate("the value is nested too deeply to evaluate") from None
