"""Computed values on Arrow data: scalar functions, arithmetic and CAST.

This module owns what a computed :class:`~caslake.expr.nodes.Value` (a
:class:`Func`, :class:`Arith` or :class:`Cast`, with columns and literals at
its leaves) means, as pyarrow compute calls.  The same code builds

* a ``pyarrow.compute.Expression`` (``for_filter=True``) -- what the scan
  evaluates, and
* the result on zero-length arrays of the schema -- what the binder uses to
  learn a value's Arrow type and to reject a type error before any data is
  read (``lower(5)``, ``'a' + 1``).

Semantics chosen to match DuckDB: ``/`` divides as float64 (IEEE: ``x / 0``
is infinite); integer ``+ - *`` work in int64 and overflow is an error; CAST
to an integer rounds a float half to even and a decimal half away from zero,
CAST to a decimal rounds half away from zero; text functions count Unicode
characters.  A CAST that cannot
convert a value, or an overflow, fails when the data is evaluated, as
:class:`~caslake.errors.PredicateEvaluationError`.  It never reads files and
never raises anything but :class:`~caslake.errors.InvalidPredicate` (or a
subclass) for a bad value.

Literals become Arrow scalars and arrays built from buffers where that is
exact (:func:`literal_array`), not through ``pa.scalar``/``pa.array``: pyarrow
imports pandas on its first conversion of Python values, and a scan with a
simple predicate must not pay that third of a second.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any, Final, cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from caslake.errors import InvalidPredicate, UnsupportedExpression
from caslake.expr import sql_functions
from caslake.expr.nested import array_contains, cardinality, element_at
from caslake.expr.nodes import (
    NESTED_FUNCTIONS,
    SQL_FUNCTIONS,
    Arith,
    Case,
    Cast,
    Column,
    Expr,
    Func,
    GetField,
    Like,
    Literal,
    LiteralValue,
    Value,
    describe_value,
)

__all__ = [
    "ValueBuilder", "arrow_cast_type", "arrow_like_pattern", "describe_typed", "epoch_days",
    "epoch_ticks",
    "literal_array", "literal_scalar", "literal_type", "match_like_literal", "null_scalar",
    "type_family",
]

_CAST_ARROW: Final[dict[str, pa.DataType]] = {
    "TINYINT": pa.int8(), "SMALLINT": pa.int16(), "INTEGER": pa.int32(),
    "BIGINT": pa.int64(), "FLOAT": pa.float32(), "DOUBLE": pa.float64(),
    "VARCHAR": pa.string(), "BOOLEAN": pa.bool_(), "DATE": pa.date32(),
    "TIMESTAMP": pa.timestamp("us"), "TIMESTAMPTZ": pa.timestamp("us", tz="UTC"),
}
_ROUND_HALF_AWAY: Final = "half_towards_infinity"
_EXTRACT: Final[dict[str, Callable[..., Any]]] = {
    "year": pc.year, "month": pc.month, "day": pc.day, "hour": pc.hour,
    "minute": pc.minute, "second": pc.second,
}


def arrow_cast_type(name: str) -> pa.DataType:
    """The Arrow type of a canonical CAST type name (see ``canonical_type_name``)."""
    if name.startswith("DECIMAL("):
        precision, scale = name[len("DECIMAL("):-1].split(",")
        return pa.decimal128(int(precision), int(scale))
    return _CAST_ARROW[name]


def type_family(t: pa.DataType) -> str:
    """A coarse kind for type checks: int, float, decimal, string, bool, date,
    timestamp, or other."""
    types = pa.types
    if types.is_integer(t):
        return "int"
    if types.is_floating(t):
        return "float"
    if types.is_decimal(t):
        return "decimal"
    if types.is_string(t) or types.is_large_string(t):
        return "string"
    if types.is_boolean(t):
        return "bool"
    if types.is_date(t):
        return "date"
    if types.is_timestamp(t):
        return "timestamp"
    return "other"


def literal_type(value: LiteralValue) -> pa.DataType:
    """The Arrow type a literal takes on its own (inside a computed value)."""
    if isinstance(value, bool):
        return pa.bool_()
    if isinstance(value, int):
        if -(2**63) <= value < 2**63:
            return pa.int64()
        if abs(value) < 10**38:
            return pa.decimal128(38, 0)
        raise InvalidPredicate(f"integer literal {value} does not fit a 38-digit decimal")
    if isinstance(value, float):
        return pa.float64()
    if isinstance(value, Decimal):
        _sign, digits, exponent = value.as_tuple()
        assert isinstance(exponent, int)
        scale = max(0, -exponent)
        precision = max(len(digits) + max(0, exponent), scale, 1)
        if precision > 38:
            raise InvalidPredicate(f"decimal literal {value} has more than 38 digits")
        return pa.decimal128(precision, scale)
    if isinstance(value, str):
        return pa.string()
    if isinstance(value, datetime):
        return pa.timestamp("us", tz="UTC" if value.tzinfo is not None else None)
    if isinstance(value, date):
        return pa.date32()
    raise InvalidPredicate("NULL has no type here; use IS NULL")


def literal_scalar(value: LiteralValue, arrow_type: pa.DataType | None = None) -> pa.Scalar[Any]:
    """``value`` as an Arrow scalar of ``arrow_type`` (default: its own type)."""
    if arrow_type is None:
        arrow_type = literal_type(value)
    if isinstance(value, datetime) and value.tzinfo is not None and \
            getattr(arrow_type, "tz", None) is not None:
        value = value.astimezone(UTC)
    built = literal_array([value], arrow_type)
    result: pa.Scalar[Any] = pa.scalar(value, type=arrow_type) if built is None else built[0]
    return result


def null_scalar(arrow_type: pa.DataType) -> pa.Scalar[Any]:
    """A NULL of ``arrow_type`` (a fixed-width type), built from buffers."""
    width = max(1, arrow_type.bit_width // 8)
    nulls = pa.Array.from_buffers(arrow_type, 1, [pa.py_buffer(b"\0"),
                                                  pa.py_buffer(bytes(width))], null_count=1)
    scalar: pa.Scalar[Any] = nulls[0]
    return scalar


_EPOCH_DATE: Final = date(1970, 1, 1)
_TICKS_PER_SECOND: Final = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
_ONE_MICROSECOND: Final = timedelta(microseconds=1)


def epoch_days(value: date) -> int:
    """A date as date32 stores it: days since 1970-01-01."""
    return (value - _EPOCH_DATE).days


def epoch_ticks(instant: datetime, unit: str) -> Fraction:
    """A timestamp as ``unit`` ticks since the epoch, exactly (a fraction when it
    falls between ticks); an aware one counts from 1970-01-01 UTC."""
    epoch = datetime(1970, 1, 1, tzinfo=None if instant.tzinfo is None else UTC)
    micros = (instant - epoch) // _ONE_MICROSECOND
    return Fraction(micros * _TICKS_PER_SECOND[unit], 1_000_000)


def literal_array(values: Sequence[LiteralValue], arrow_type: pa.DataType) -> pa.Array[Any] | None:
    """``values`` (none NULL) as an Arrow array of ``arrow_type``, built from
    buffers; None when a value or the type is not one this builds exactly
    (the caller then converts with pyarrow).

    pyarrow imports pandas on its first conversion of Python objects
    (``pa.scalar``, ``pa.array``), a third of a second; a scan with a simple
    predicate must not pay that."""
    try:
        data = _literal_buffers(values, arrow_type)
    except (TypeError, ValueError, OverflowError, ArithmeticError):
        return None
    if data is None:
        return None
    return pa.Array.from_buffers(arrow_type, len(values), [None, *data], null_count=0)


def _literal_buffers(values: Sequence[LiteralValue], t: pa.DataType) -> list[pa.Buffer] | None:
    """The value buffers (after the validity bitmap) of ``values`` as type ``t``."""
    types = pa.types
    ints: list[int]
    if types.is_string(t) or types.is_large_string(t):
        if not all(isinstance(v, str) for v in values):
            return None
        encoded = [cast(str, v).encode("utf-8") for v in values]
        offsets = np.cumsum([0, *(len(e) for e in encoded)],
                            dtype=np.int64 if types.is_large_string(t) else np.int32)
        return [_buffer(offsets), pa.py_buffer(b"".join(encoded))]
    if types.is_boolean(t):
        if not all(isinstance(v, bool) for v in values):
            return None
        return [_buffer(np.packbits(np.array(values, np.bool_), bitorder="little"))]
    if types.is_decimal(t):
        scale = 10 ** cast(pa.Decimal128Type, t).scale
        width = t.bit_width // 8
        exact = [Fraction(v) * scale for v in values
                 if isinstance(v, (int, Decimal)) and not isinstance(v, bool)]
        limit = 10 ** cast(pa.Decimal128Type, t).precision
        if len(exact) != len(values) or any(q.denominator != 1 or abs(q) >= limit
                                            for q in exact):
            return None
        return [pa.py_buffer(b"".join(int(q).to_bytes(width, "little", signed=True)
                                      for q in exact))]
    if types.is_integer(t):
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            return None
        ints = [cast(int, v) for v in values]
    elif types.is_float32(t) or types.is_float64(t):
        if not all(isinstance(v, float) for v in values):
            return None  # an integer may not be exact in a float: pyarrow decides
        with np.errstate(over="ignore"):  # too large for float32: infinity, as pyarrow gives
            return [_buffer(np.array(values, np.dtype(f"f{t.bit_width // 8}")))]
    elif types.is_date32(t):
        if not all(isinstance(v, date) and not isinstance(v, datetime) for v in values):
            return None
        ints = [epoch_days(cast(date, v)) for v in values]
    elif types.is_timestamp(t):
        ints = []
        unit, tz = cast(pa.TimestampType, t).unit, cast(pa.TimestampType, t).tz
        for v in values:
            if not isinstance(v, datetime) or (v.tzinfo is None) != (tz is None):
                return None  # a naive / aware mix: pyarrow decides
            ticks = epoch_ticks(v, unit)
            if ticks.denominator != 1:
                return None
            ints.append(int(ticks))
    else:
        return None
    dtype = np.dtype(f"{'u' if types.is_unsigned_integer(t) else 'i'}{t.bit_width // 8}")
    info = np.iinfo(dtype)
    low, high = int(info.min), int(info.max)  # not per value: numpy's limits are slow
    if any(i < low or i > high for i in ints):
        return None
    return [_buffer(np.array(ints, dtype))]


def _buffer(values: npt.NDArray[Any]) -> pa.Buffer:
    return pa.py_buffer(cast(Any, values))


def arrow_like_pattern(pattern: str, escape: str | None) -> str:
    """A SQL LIKE pattern (no escape character unless ``escape``) in the syntax
    of pyarrow's ``match_like``, whose escape character is a backslash."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if escape is not None and ch == escape and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            out.append("\\" + nxt if nxt in "%_\\" else nxt)
            i += 2
            continue
        out.append("\\\\" if ch == "\\" else ch)
        i += 1
    return "".join(out)


def match_like_literal(like: Like) -> bool:
    """LIKE on a literal string (constant folding)."""
    assert isinstance(like.column, Literal) and isinstance(like.column.value, str)
    result = pc.match_like(pa.scalar(like.column.value),
                           pattern=arrow_like_pattern(like.pattern, like.escape),
                           ignore_case=like.case_insensitive)
    return bool(result.as_py())


def _mismatch(what: str, types: list[pa.DataType], hint: str = "") -> InvalidPredicate:
    shown = ", ".join(str(t) for t in types)
    return InvalidPredicate(f"{what} does not accept ({shown}){': ' + hint if hint else ''}")


class ValueBuilder:
    """Builds computed values over a schema.

    ``build(value)`` gives ``(operand, type)``: the operand is a
    ``pc.Expression`` when ``for_filter`` (else a zero-length array or a
    scalar) and ``type`` its Arrow type.  Type errors raise InvalidPredicate
    naming the operation.
    """

    def __init__(self, schema: pa.Schema, *, for_filter: bool,
                 table: pa.Table | None = None,
                 predicate: Callable[[Expr], Any] | None = None) -> None:
        self.schema = schema
        self.for_filter = for_filter
        # Given a table, the operand is computed on its columns instead of
        # being an expression (functions on lists and maps have no expression).
        self.table = table
        # How a bound predicate inside a value (a CASE condition) is evaluated:
        # caslake.expr.arrow's translator, which builds on this class.
        self.predicate = predicate

    # Each step runs on a pair (target, sample): ``sample`` is the operation
    # on zero-length arrays, which gives the type and surfaces kernel errors;
    # ``target`` is the expression when building a filter.
    def build(self, value: Value) -> tuple[Any, pa.DataType]:
        target, sample = self._pair(value)
        return target, sample.type

    def _pair(self, value: Value) -> tuple[Any, Any]:
        if isinstance(value, Column):
            t = self.schema.field(value.name).type
            sample = pa.array([], type=t)
            if not self.for_filter:
                return sample, sample
            if self.table is not None:
                return self.table.column(value.name), sample
            return pc.field(value.name), sample
        if isinstance(value, GetField):
            return self._field(value)
        if isinstance(value, Literal):
            scalar = literal_scalar(value.value)
            return scalar, scalar
        if isinstance(value, Func):
            return self._func(value)
        if isinstance(value, Arith):
            return self._arith(value)
        if isinstance(value, Cast):
            return self._cast(value)
        if isinstance(value, Case):
            return self._case(value)
        raise InvalidPredicate(f"not a value node: {type(value).__name__}")

    def _run(self, what: str, fn: Callable[..., Any], args: list[tuple[Any, Any]],
             **options: Any) -> tuple[Any, Any]:
        try:
            sample = fn(*(a[1] for a in args), **options)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            detail = str(exc).split("\n")[0][:160]
            raise _mismatch(what, [a[1].type for a in args], detail) from None
        if not self.for_filter:
            return sample, sample
        return fn(*(a[0] for a in args), **options), sample

    def _cast_to(self, pair: tuple[Any, Any], t: pa.DataType, what: str) -> tuple[Any, Any]:
        if pair[1].type == t:
            return pair
        if isinstance(pair[0], pa.Scalar) and pa.types.is_decimal(pair[0].type) and \
                pa.types.is_float64(t) and pair[0].is_valid:
            # Arrow's decimal-to-double cast is not correctly rounded (1.7 becomes
            # 1.7000000000000002); a literal converts exactly, as in DuckDB.
            exact = pa.scalar(float(pair[0].as_py()), pa.float64())
            return exact, exact
        return self._run(what, lambda x: x.cast(t), [pair])

    def _field(self, node: GetField) -> tuple[Any, Any]:
        base = self._pair(node.value)
        struct = base[1].type
        index = struct.get_field_index(node.name) if pa.types.is_struct(struct) else -1
        if index < 0:
            raise InvalidPredicate(f"{node.value} of type {struct} has no field {node.name!r}")
        return self._run(f"field {node}", lambda x: pc.struct_field(x, [index]), [base])

    def _nested(self, node: Func) -> tuple[Any, Any]:
        """A function on a list or map (types and literals checked by binding)."""
        base = self._pair(node.args[0])
        t = base[1].type
        fn: Callable[[Any], Any]
        if node.name == "cardinality":
            fn = cardinality
        else:
            arg = node.args[1]
            if not isinstance(arg, Literal):
                raise InvalidPredicate(f"{node.name}() needs a literal, got {arg}")
            if node.name == "array_contains":
                needle = literal_scalar(arg.value, t.value_type)
                fn = lambda x: array_contains(x, needle)  # noqa: E731
            elif pa.types.is_map(t):
                key = literal_scalar(arg.value, t.key_type)
                fn = lambda x: element_at(x, key)  # noqa: E731
            else:
                fn = lambda x: element_at(x, arg.value)  # noqa: E731
        if self.for_filter and self.table is None:
            raise UnsupportedExpression(
                f"{node} has no pyarrow compute expression; evaluate the predicate on "
                "the data with caslake.expr.filter_table")
        return self._run(f"function {node.name}()", fn, [base])

    def _func(self, node: Func) -> tuple[Any, Any]:
        name = node.name
        if name == "substr":
            return self._substr(node)
        if name in NESTED_FUNCTIONS:
            return self._nested(node)
        args = [self._pair(a) for a in node.args]
        families = [type_family(a[1].type) for a in args]
        what = f"function {name}()"
        if name in ("lower", "upper", "length", "trim", "ltrim", "rtrim"):
            if families[0] != "string":
                raise _mismatch(what, [args[0][1].type], "it takes a string")
            if name == "length":
                return self._cast_to(self._run(what, pc.utf8_length, args), pa.int64(), what)
            text_fns: dict[str, Callable[..., Any]] = {
                "lower": pc.utf8_lower, "upper": pc.utf8_upper,
                "trim": lambda x: pc.utf8_trim(x, characters=" "),
                "ltrim": lambda x: pc.utf8_ltrim(x, characters=" "),
                "rtrim": lambda x: pc.utf8_rtrim(x, characters=" "),
            }
            return self._run(what, text_fns[name], args)
        if name in ("abs", "negate"):
            if families[0] not in ("int", "float", "decimal"):
                raise _mismatch("-" if name == "negate" else what, [args[0][1].type],
                                "it takes a number")
            if families[0] == "int":
                args = [self._cast_to(args[0], pa.int64(), what)]
            return self._run(what, pc.abs_checked if name == "abs" else pc.negate_checked, args)
        if name == "coalesce":
            return self._run(what, pc.coalesce, self._common(what, args))
        if name == "date":
            if families[0] not in ("date", "timestamp", "string"):
                raise _mismatch(what, [args[0][1].type], "it takes a timestamp, date or string")
            return self._cast_to(args[0], pa.date32(), what)
        if name in _EXTRACT:
            if families[0] not in ("date", "timestamp"):
                raise _mismatch(what, [args[0][1].type], "it takes a date or timestamp")
            return self._cast_to(self._run(what, _EXTRACT[name], args), pa.int64(), what)
        if name in SQL_FUNCTIONS:
            return sql_functions.build(node, args, self._run, type_family)
        raise InvalidPredicate(f"function {name}() has no implementation")

    def _substr(self, node: Func) -> tuple[Any, Any]:
        what = "function substr()"
        text = self._pair(node.args[0])
        if type_family(text[1].type) != "string":
            raise _mismatch(what, [text[1].type], "it takes a string")
        bounds: list[int] = []
        for arg in node.args[1:]:
            if not (isinstance(arg, Literal) and isinstance(arg.value, int)
                    and not isinstance(arg.value, bool)):
                raise InvalidPredicate(
                    f"substr() needs integer literals for start and length, got {arg}"
                )
            bounds.append(arg.value)
        start = bounds[0]
        if start < 1:
            raise InvalidPredicate(f"substr() start must be 1 or more, got {start}")
        if len(bounds) > 1 and bounds[1] < 0:
            raise InvalidPredicate(f"substr() length must not be negative, got {bounds[1]}")
        stop = start - 1 + bounds[1] if len(bounds) > 1 else None
        start = min(start, 2**62)
        stop = None if stop is None else min(stop, 2**62)
        return self._run(what, lambda x: pc.utf8_slice_codeunits(x, start - 1, stop), [text])

    def _common(self, what: str, args: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
        """Cast operands to one type: numbers widen (int < decimal < float)."""
        types = [a[1].type for a in args]
        families = {type_family(t) for t in types}
        if len({str(t) for t in types}) == 1:
            return args
        if families <= {"int", "float", "decimal"}:
            if "float" in families:
                target: pa.DataType = pa.float64()
            elif "decimal" in families:
                return args  # pyarrow widens decimals and integers itself
            else:
                target = pa.int64()
            return [self._cast_to(a, target, what) for a in args]
        if len(families) == 1:
            return args
        raise _mismatch(what, types, "the values have different kinds")

    def _arith(self, node: Arith) -> tuple[Any, Any]:
        left, right = self._pair(node.left), self._pair(node.right)
        what = f"the {node.op} operator"
        families = {type_family(left[1].type), type_family(right[1].type)}
        if not families <= {"int", "float", "decimal"}:
            raise _mismatch(what, [left[1].type, right[1].type], "it takes numbers")
        if node.op == "/":
            left, right = (self._cast_to(p, pa.float64(), what) for p in (left, right))

            return self._run(what, pc.divide, [left, right])
        if "float" in families:
            left, right = (self._cast_to(p, pa.float64(), what) for p in (left, right))
        elif "decimal" in families:
            # Integers join decimals as decimal(19, 0) (every int64 fits), so the
            # result type is what pyarrow's decimal kernels derive, exactly.
            left, right = (self._cast_to(p, pa.decimal128(19, 0), what)
                           if type_family(p[1].type) == "int" else p for p in (left, right))
        elif families == {"int"}:
            left, right = (self._cast_to(p, pa.int64(), what) for p in (left, right))
        fn = {"+": pc.add_checked, "-": pc.subtract_checked, "*": pc.multiply_checked}[node.op]
        return self._run(what, fn, [left, right])

    def _cast(self, node: Cast) -> tuple[Any, Any]:
        source = self._pair(node.value)
        target = arrow_cast_type(node.to)
        what = f"CAST(... AS {node.to})"
        family = type_family(source[1].type)
        if family == "other":
            raise _mismatch(what, [source[1].type])
        to_family = type_family(target)
        if family in ("float", "decimal") and to_family in ("int", "decimal"):
            digits = cast(pa.Decimal128Type, target).scale if to_family == "decimal" else 0
            mode = "half_to_even" if (family, to_family) == ("float", "int") else _ROUND_HALF_AWAY
            if family == "float" or to_family == "int" or digits < source[1].type.scale:
                if family == "decimal":
                    # Rounding can carry into a new digit (9.99 -> 10); pyarrow's
                    # round keeps the precision and would wrap, so widen first.
                    source_type = cast(pa.Decimal128Type, source[1].type)
                    wider = source_type.precision + 1
                    source = self._cast_to(source, pa.decimal128(wider, source_type.scale)
                                           if wider <= 38 else
                                           pa.decimal256(wider, source_type.scale), what)
                source = self._run(
                    what, lambda x: pc.round(x, digits, round_mode=mode),  # type: ignore[call-overload]
                    [source])
        return self._cast_to(source, target, what)


    def _case(self, node: Case) -> tuple[Any, Any]:
        """CASE: the branch values in one type (as coalesce's arguments), chosen
        per row by ``case_when`` -- whose NULL condition is not TRUE, as in SQL."""
        what = "CASE"
        values = [*(v for _, v in node.whens), node.default]
        typed = [self._pair(v) for v in values if not _is_null(v)]
        if not typed:
            common: pa.DataType = pa.null()
        else:
            typed = self._common(what, typed)
            common = _one_type(what, [p[1].type for p in typed])
        pairs = iter(self._cast_to(p, common, what) for p in typed)
        null: Any = pa.nulls(1, common)[0]  # type: ignore[call-overload]
        branches = [(null, null) if _is_null(v) else next(pairs) for v in values]
        sample = pa.array([], type=common)
        if not self.for_filter:
            return sample, sample
        if self.predicate is None:
            raise InvalidPredicate("CASE needs a predicate evaluator to compute its conditions")
        conditions = [self.predicate(c) for c, _ in node.whens]
        names = [f"c{i}" for i in range(len(conditions))]
        try:
            target = pc.case_when(pc.make_struct(*conditions, field_names=names),
                                  *(b[0] for b in branches))
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise _mismatch(what, [common], str(exc).split("\n")[0][:160]) from None
        return target, sample


def _is_null(value: Value) -> bool:
    return isinstance(value, Literal) and value.value is None


def _one_type(what: str, types: list[pa.DataType]) -> pa.DataType:
    """The type every branch of ``what`` is cast to: the one type they share,
    else a decimal holding every decimal (and int64) exactly, else the first
    (strings, dates: one kind, different encodings)."""
    first = types[0]
    if all(t == first for t in types):
        return first
    if all(type_family(t) in ("decimal", "int") for t in types):
        decimals = [cast(pa.Decimal128Type, t) if type_family(t) == "decimal"
                    else pa.decimal128(19, 0) for t in types]
        scale = max(d.scale for d in decimals)
        digits = max(d.precision - d.scale for d in decimals)
        if digits + scale > 38:
            raise _mismatch(what, types, "no decimal holds every branch exactly")
        return pa.decimal128(digits + scale, scale)
    return first


def describe_typed(value: Value, arrow_type: pa.DataType) -> str:
    """``lower(c) (a string)``-style text for error messages."""
    if isinstance(value, Literal):
        return describe_value(value.value)
    return f"{value} of type {arrow_type}"
