"""The unbound predicate tree and the Python API that builds it.

This module owns the node classes every other part of :mod:`caslake.expr`
works on, the ``col(...) > 5`` operator API, :func:`referenced_columns` and the
rendering of a tree back to SQL text (``str(expr)``).

Nodes are immutable (frozen dataclasses) and know nothing about a schema:
``col("id") > "abc"`` is a perfectly good tree until it is bound.  Two kinds of
classes live here:

* values (:class:`Value`) -- :class:`Column`, :class:`Literal`, scalar
  function calls :class:`Func`, arithmetic :class:`Arith` and :class:`Cast`.
  They are *not* predicates and cannot be combined with ``&``/``|``/``~``;
* predicates -- subclasses of :class:`Expr`: :class:`Compare`,
  :class:`Between`, :class:`In`, :class:`IsNull`, :class:`Like`,
  :class:`Not`, :class:`And`, :class:`Or` and :class:`Const`
  (:data:`TRUE`, :data:`FALSE`).

Rules this module must never break:

* construction never raises anything but
  :class:`~caslake.errors.InvalidPredicate` (or a subclass) for bad input;
* a :class:`Compare` never has a literal on the left when the right side is
  not a literal (``5 < col("a")`` is stored as ``a > 5``) and always one of
  the six canonical operators;
* a comparison operand, ``BETWEEN`` bound or ``IN`` value is never the NULL
  literal -- comparing with NULL is never true in SQL and is rejected with a
  hint to use IS NULL;
* a predicate is never silently turned into a Python ``bool``: ``bool(expr)``
  raises, so ``a > 1 and b < 2`` or ``1 < col("a") < 5`` fail loudly instead
  of dropping half of the condition.  Callers test ``where is None``.
* ``==`` / ``!=`` between two non-literal values (``col("a") == col("b")``)
  is structural equality and gives a ``bool``, so trees compare; build a
  value-to-value equality with :meth:`Value.eq` / :meth:`Value.ne`.
  ``<``, ``<=``, ``>``, ``>=`` always build predicates;
* nothing here touches pyarrow, storage or schemas.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final, SupportsIndex, cast, overload

from caslake.errors import InvalidPredicate, UnknownFunction

if TYPE_CHECKING:
    from caslake.expr.bind import BoundExpr

__all__ = [
    "ARITH_OPS",
    "COMPARE_OPS",
    "FALSE",
    "FUNCTIONS",
    "NESTED_FUNCTIONS",
    "RESERVED_WORDS",
    "TRUE",
    "And",
    "Arith",
    "Between",
    "Case",
    "Cast",
    "Column",
    "Compare",
    "Const",
    "Expr",
    "Func",
    "GetField",
    "In",
    "IsNull",
    "Like",
    "Literal",
    "LiteralValue",
    "Not",
    "Or",
    "Subscript",
    "Value",
    "canonical_type_name",
    "col",
    "describe_value",
    "func",
    "iter_chain",
    "leaves",
    "lit",
    "quote_field",
    "quote_identifier",
    "referenced_columns",
    "render_literal",
    "to_sql",
    "value_path",
    "when",
]

#: Python values a :class:`Literal` may hold.
LiteralValue = None | bool | int | float | Decimal | str | date | datetime

#: The canonical comparison operators.
COMPARE_OPS: Final = frozenset({"=", "!=", "<", "<=", ">", ">="})
#: The arithmetic operators (``/`` is always a floating-point division).
ARITH_OPS: Final = frozenset({"+", "-", "*", "/"})

_OP_ALIASES: Final[dict[str, str]] = {"==": "=", "<>": "!="}
#: ``a op b`` is ``b FLIP[op] a``.
FLIP_OP: Final[dict[str, str]] = {
    "=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<=",
}

#: Scalar functions: canonical name -> (fewest, most) arguments.  What each
#: computes is defined in :mod:`caslake.expr.functions`.
FUNCTIONS: Final[dict[str, tuple[int, int]]] = {
    "lower": (1, 1), "upper": (1, 1), "length": (1, 1), "substr": (2, 3),
    "trim": (1, 1), "ltrim": (1, 1), "rtrim": (1, 1), "abs": (1, 1),
    "coalesce": (1, 64), "date": (1, 1), "year": (1, 1), "month": (1, 1),
    "day": (1, 1), "hour": (1, 1), "minute": (1, 1), "second": (1, 1),
    "negate": (1, 1),
    # nested values (lists, maps): see caslake.expr.nested
    "element_at": (2, 2), "array_contains": (2, 2), "cardinality": (1, 1),
    # everyday SQL (issue 32): see caslake.expr.sql_functions
    "mod": (2, 2), "round": (1, 2), "floor": (1, 1), "ceil": (1, 1), "concat": (1, 64),
    "dpipe": (2, 2), "starts_with": (2, 2), "ends_with": (2, 2), "contains": (2, 2),
    "regexp_matches": (2, 3), "date_trunc": (2, 2), "date_part": (2, 2),
    "add_interval": (2, 2),
}
#: The functions of caslake.expr.sql_functions.
SQL_FUNCTIONS: Final = frozenset({"mod", "round", "floor", "ceil", "concat", "dpipe",
                                  "starts_with", "ends_with", "contains", "regexp_matches",
                                  "date_trunc", "date_part", "add_interval"})
#: The functions on lists and maps (evaluated by :mod:`caslake.expr.nested`).
NESTED_FUNCTIONS: Final = frozenset({"element_at", "array_contains", "cardinality"})
_FUNCTION_ALIASES: Final[dict[str, str]] = {
    "substring": "substr", "char_length": "length", "character_length": "length",
    "len": "length", "dayofmonth": "day", "to_date": "date",
    "size": "cardinality", "array_size": "cardinality", "array_length": "cardinality",
    "list_contains": "array_contains", "list_has": "array_contains",
    "list_extract": "element_at", "list_element": "element_at",
    "map_extract_value": "element_at",
    "ceiling": "ceil", "prefix": "starts_with", "suffix": "ends_with",
    "regexp_like": "regexp_matches", "datepart": "date_part",
}

#: Type names CAST accepts (upper case) -> canonical spelling.
_CAST_TYPES: Final[dict[str, str]] = {
    "TINYINT": "TINYINT", "INT1": "TINYINT", "SMALLINT": "SMALLINT", "INT2": "SMALLINT",
    "INT": "INTEGER", "INTEGER": "INTEGER", "INT4": "INTEGER", "BIGINT": "BIGINT",
    "INT8": "BIGINT", "LONG": "BIGINT", "FLOAT": "FLOAT", "REAL": "FLOAT", "FLOAT4": "FLOAT",
    "DOUBLE": "DOUBLE", "FLOAT8": "DOUBLE", "DOUBLE PRECISION": "DOUBLE",
    "VARCHAR": "VARCHAR", "TEXT": "VARCHAR", "STRING": "VARCHAR", "CHAR": "VARCHAR",
    "BOOLEAN": "BOOLEAN", "BOOL": "BOOLEAN", "DATE": "DATE", "TIMESTAMP": "TIMESTAMP",
    "DATETIME": "TIMESTAMP", "TIMESTAMPTZ": "TIMESTAMPTZ",
    "TIMESTAMP WITH TIME ZONE": "TIMESTAMPTZ", "DECIMAL": "DECIMAL(18,3)",
    "NUMERIC": "DECIMAL(18,3)",
}
_DECIMAL_TYPE: Final = re.compile(r"(?:DECIMAL|NUMERIC)\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)")
_MAX_DECIMAL_DIGITS: Final = 76

#: Words the SQL dialect reserves; a column with one of these names must be
#: written as a double-quoted identifier.
RESERVED_WORDS: Final = frozenset(
    {"AND", "OR", "NOT", "BETWEEN", "IN", "IS", "NULL", "TRUE", "FALSE", "LIKE", "ILIKE",
     "CAST", "ESCAPE", "SELECT", "FROM", "WHERE", "CASE", "WHEN", "THEN", "ELSE", "END"}
)

_BARE_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MAX_INT_BITS: Final = 4096


def canonical_type_name(name: str) -> str:
    """The canonical spelling of a CAST target (``int`` -> ``INTEGER``,
    ``decimal(15, 2)`` -> ``DECIMAL(15,2)``); InvalidPredicate if unsupported."""
    if not isinstance(name, str):
        raise InvalidPredicate(f"a CAST type must be a string, got {type(name).__name__}")
    text = " ".join(name.upper().split())
    if text in _CAST_TYPES:
        return _CAST_TYPES[text]
    match = _DECIMAL_TYPE.fullmatch(text)
    if match is not None:
        precision, scale = int(match.group(1)), int(match.group(2) or 0)
        if not 1 <= precision <= 38 or scale > precision:
            raise InvalidPredicate(
                f"CAST to {name}: DECIMAL needs 1 <= precision <= 38 and scale <= precision"
            )
        return f"DECIMAL({precision},{scale})"
    raise InvalidPredicate(
        f"CAST to unsupported type {name!r}; supported: "
        f"{', '.join(sorted(set(_CAST_TYPES.values()) - {'DECIMAL(18,3)'}))}, DECIMAL(p,s)"
    )


def _decimal_text(value: Decimal) -> str:
    """Plain positional text of a finite decimal (never exponent notation)."""
    return format(value, "f")


# --- operands ----------------------------------------------------------------


def describe_value(value: object) -> str:
    """A short, human description of a literal for error messages."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE (a boolean)" if value else "FALSE (a boolean)"
    if isinstance(value, int):
        return f"{value} (an integer)"
    if isinstance(value, float):
        return f"{value!r} (a float)"
    if isinstance(value, Decimal):
        return f"{_decimal_text(value)} (a decimal)"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:40] + "..."
        return f"{shown!r} (a string)"
    if isinstance(value, datetime):
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    if isinstance(value, date):
        return f"DATE '{value.isoformat()}'"
    return f"{type(value).__name__} value"


def _normalise_value(value: object) -> LiteralValue:
    """Map an accepted Python value onto exactly one of the LiteralValue types.

    Subclasses (numpy floats, pandas Timestamps, IntEnums, ...) become the plain
    builtin type so that equality, hashing and coercion behave predictably.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        if value.bit_length() > _MAX_INT_BITS:  # no column type is anywhere near
            raise InvalidPredicate(
                f"integer literal with {value.bit_length()} bits is too large to compare"
            )
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise InvalidPredicate(f"a decimal literal must be finite, got {value}")
        if abs(value.adjusted()) > _MAX_DECIMAL_DIGITS:
            raise InvalidPredicate(f"decimal literal {value:.20} is too large to compare")
        return Decimal(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, datetime):
        if type(value) is datetime:
            return value
        # pandas.Timestamp and friends: keep microsecond precision.
        return datetime(
            value.year, value.month, value.day, value.hour, value.minute, value.second,
            value.microsecond, tzinfo=value.tzinfo, fold=value.fold,
        )
    if isinstance(value, date):
        return date(value.year, value.month, value.day)
    as_py = getattr(value, "as_py", None)
    if as_py is not None and type(value).__module__.startswith("pyarrow"):
        try:
            inner = as_py()
        except Exception as exc:  # a pyarrow scalar that has no Python value
            raise InvalidPredicate(
                f"cannot use {type(value).__name__} as a literal: {exc}"
            ) from None
        if inner is value or type(inner).__module__.startswith("pyarrow"):
            raise InvalidPredicate(f"cannot use {type(value).__name__} as a literal")
        return _normalise_value(inner)
    kind = type(value)
    if kind.__module__ == "numpy" and not kind.__name__.startswith(("datetime64", "timedelta64")):
        # numpy numbers and bools (datetime64.item() may give a bare int: refused)
        item = getattr(value, "item", None)
        try:
            inner = item() if callable(item) else None
        except Exception:  # an exotic numpy scalar
            inner = None
        if isinstance(inner, (bool, int, float)):
            return _normalise_value(inner)
    if hasattr(type(value), "__index__"):  # other integer-likes
        try:
            return int(operator.index(cast(SupportsIndex, value)))
        except TypeError:
            pass
    raise InvalidPredicate(
        f"cannot use {type(value).__name__} value {value!r:.60} as a literal; "
        "use None, bool, int, float, str, datetime.date or datetime.datetime"
    )


def _key_of(item: object) -> object:
    if isinstance(item, (Value, Expr)):
        return item._key()
    if isinstance(item, tuple):
        return tuple(_key_of(x) for x in item)
    return item


class _Node:
    """Structural identity shared by values and predicates: the class name and
    the keys of every field, as plain tuples (so comparing two keys never
    calls a node's own ``==``, which may build a predicate)."""

    __slots__ = ()

    def _key(self) -> tuple[object, ...]:
        return (type(self).__name__,
                *(_key_of(getattr(self, f.name)) for f in fields(self)))  # type: ignore[arg-type]

    def __hash__(self) -> int:
        return hash(self._key())


class Value(_Node):
    """Base class of operands: anything with a value per row.

    Comparison operators build predicates: ``col("a") > col("b")``,
    ``lower(col("c")) == "ua"``, ``col("a") + 1 <= 5``.  ``==``/``!=`` between
    two non-literal values is structural equality (a ``bool``); use
    :meth:`eq`/:meth:`ne` for a value-to-value equality predicate.
    """

    __slots__ = ()

    @overload  # type: ignore[override]
    def __eq__(self, other: Value) -> Any: ...
    @overload
    def __eq__(self, other: object) -> Compare: ...
    def __eq__(self, other: object) -> Any:
        if isinstance(other, Value):
            if isinstance(self, Literal) == isinstance(other, Literal):
                return type(self) is type(other) and self._key() == other._key()
        elif isinstance(self, Literal):
            return NotImplemented
        return Compare("=", self, _as_value(other))

    @overload  # type: ignore[override]
    def __ne__(self, other: Value) -> Any: ...
    @overload
    def __ne__(self, other: object) -> Compare: ...
    def __ne__(self, other: object) -> Any:
        if isinstance(other, Value):
            if isinstance(self, Literal) == isinstance(other, Literal):
                return not (type(self) is type(other) and self._key() == other._key())
        elif isinstance(self, Literal):
            return NotImplemented
        return Compare("!=", self, _as_value(other))

    def __hash__(self) -> int:
        return hash(self._key())

    def __lt__(self, other: object) -> Compare:
        return Compare("<", self, _as_value(other))

    def __le__(self, other: object) -> Compare:
        return Compare("<=", self, _as_value(other))

    def __gt__(self, other: object) -> Compare:
        return Compare(">", self, _as_value(other))

    def __ge__(self, other: object) -> Compare:
        return Compare(">=", self, _as_value(other))

    def eq(self, other: object) -> Compare:
        """``self = other`` -- also between two columns or expressions."""
        return Compare("=", self, _as_value(other))

    def ne(self, other: object) -> Compare:
        """``self <> other`` -- also between two columns or expressions."""
        return Compare("!=", self, _as_value(other))

    def __add__(self, other: object) -> Arith:
        return Arith("+", self, _as_value(other))

    def __radd__(self, other: object) -> Arith:
        return Arith("+", _as_value(other), self)

    def __sub__(self, other: object) -> Arith:
        return Arith("-", self, _as_value(other))

    def __rsub__(self, other: object) -> Arith:
        return Arith("-", _as_value(other), self)

    def __mul__(self, other: object) -> Arith:
        return Arith("*", self, _as_value(other))

    def __rmul__(self, other: object) -> Arith:
        return Arith("*", _as_value(other), self)

    def __truediv__(self, other: object) -> Arith:
        return Arith("/", self, _as_value(other))

    def __rtruediv__(self, other: object) -> Arith:
        return Arith("/", _as_value(other), self)

    def __neg__(self) -> Func:
        return Func("negate", (self,))

    def isin(self, values: Iterable[object]) -> In:
        """``self IN (values...)``.  An empty collection matches no row."""
        return In(self, _literal_tuple(values))

    def between(self, low: object, high: object) -> Between:
        """``self BETWEEN low AND high`` (both ends inclusive)."""
        return Between(self, _as_value(low), _as_value(high))

    def is_null(self) -> IsNull:
        """``self IS NULL``."""
        return IsNull(self)

    def is_not_null(self) -> Not:
        """``self IS NOT NULL``."""
        return Not(IsNull(self))

    def like(self, pattern: str, escape: str | None = None) -> Like:
        """``self LIKE pattern`` (``%`` any run, ``_`` one character)."""
        return Like(self, pattern, escape)

    def ilike(self, pattern: str, escape: str | None = None) -> Like:
        """``self ILIKE pattern``: LIKE ignoring case."""
        return Like(self, pattern, escape, case_insensitive=True)

    def cast(self, type_name: str) -> Cast:
        """``CAST(self AS type_name)``, e.g. ``col("x").cast("BIGINT")``."""
        return Cast(self, type_name)

    def field(self, name: str) -> GetField:
        """The field ``name`` of a struct: ``col("device").field("os")`` is SQL
        ``device.os``."""
        return GetField(self, name)

    def __getitem__(self, key: object) -> Subscript:
        """``self[key]`` as Spark writes it: a struct's field (``device['os']``) or a
        map's value for ``key`` (``attrs['k']``, NULL when absent).  Lists are not
        subscripted (Spark counts from 0, DuckDB from 1): use :meth:`element_at`."""
        return Subscript(self, _as_literal(key, "a subscript"))

    def __iter__(self) -> Iterator[Any]:
        # __getitem__ would otherwise make every value iterable (forever).
        raise InvalidPredicate(f"{self} is a value, not a collection; it cannot be iterated")

    def element_at(self, key: object) -> Func:
        """``element_at(self, key)``: a map's value for ``key``, or a list's element
        at 1-based position ``key`` (negative counts from the end); NULL when absent."""
        return Func("element_at", (self, _as_literal(key, "element_at()")))

    def contains(self, value: object) -> Compare:
        """``array_contains(self, value)``: the list holds ``value`` (FALSE when it
        does not, NULL when the list is NULL -- as DuckDB's ``list_contains``)."""
        return Compare("=", Func("array_contains", (self, _as_literal(value, "contains()"))),
                       Literal(True))

    def cardinality(self) -> Func:
        """``cardinality(self)``: the number of elements of a list or entries of a
        map (NULL when it is NULL)."""
        return Func("cardinality", (self,))

    def __str__(self) -> str:
        return render_value(self)


@dataclass(frozen=True, eq=False)
class Literal(Value):
    """A constant operand.  ``value`` is one of :data:`LiteralValue`.

    Equality is by type and value (``Literal(1) != Literal(True)``, and two NaN
    literals are equal), so trees compare structurally.
    """

    value: LiteralValue

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", _normalise_value(self.value))

    def _key(self) -> tuple[object, ...]:
        value = self.value
        if isinstance(value, float) and math.isnan(value):
            return ("Literal", "float", "nan")
        if isinstance(value, datetime) and value.tzinfo is not None:
            return ("Literal", "datetime-tz", value)
        return ("Literal", type(value).__name__, value)

    def __hash__(self) -> int:
        return hash(self._key())


def _as_value(value: object) -> Value:
    if isinstance(value, Value):
        return value
    if isinstance(value, Expr):
        raise InvalidPredicate(f"expected a value, got the predicate {value}")
    return Literal(_normalise_value(value))


def _as_literal(value: object, what: str) -> Literal:
    if isinstance(value, Literal):
        return value
    if isinstance(value, Value):
        raise InvalidPredicate(f"{what} needs literal values, got {value}")
    if isinstance(value, Expr):
        raise InvalidPredicate(f"{what} needs literal values, got the predicate {value}")
    return Literal(_normalise_value(value))


@dataclass(frozen=True, eq=False)
class Column(Value):
    """A reference to a column by name.

    Names resolve against the schema when the predicate is bound: an exact
    match wins, otherwise a unique case-insensitive match (as in Spark and
    DuckDB).
    """

    name: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise InvalidPredicate(
                f"a column name must be a string, got {type(self.name).__name__}"
            )
        if not self.name:
            raise InvalidPredicate("a column name must not be empty")

    def __hash__(self) -> int:
        return hash(self._key())


@dataclass(frozen=True, eq=False)
class Func(Value):
    """A scalar function call, e.g. ``lower(carrier)``; see :data:`FUNCTIONS`."""

    name: str
    args: tuple[Value, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise InvalidPredicate(f"a function name must be a string, got {self.name!r:.60}")
        name = self.name.lower()
        name = _FUNCTION_ALIASES.get(name, name)
        if name not in FUNCTIONS:
            raise UnknownFunction(self.name, sorted(set(FUNCTIONS) - {"negate"}))
        if isinstance(self.args, (str, bytes, Value, Expr)):
            raise InvalidPredicate(f"the arguments of {name}() must be a tuple of values")
        try:
            args = tuple(_as_value(a) for a in self.args)
        except TypeError:
            raise InvalidPredicate(f"the arguments of {name}() must be a tuple of values") from None
        low, high = FUNCTIONS[name]
        if not low <= len(args) <= high:
            want = str(low) if low == high else f"{low} to {high}"
            raise InvalidPredicate(f"function {name}() takes {want} arguments, got {len(args)}")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "args", args)

    def __hash__(self) -> int:
        return hash(self._key())


@dataclass(frozen=True, eq=False)
class Arith(Value):
    """``left op right`` for ``op`` in ``+ - * /``.  ``/`` divides as floating
    point (``air_time / 60``), and a zero divisor gives NULL (as in DuckDB)."""

    op: str
    left: Value
    right: Value

    def __post_init__(self) -> None:
        if self.op not in ARITH_OPS:
            raise InvalidPredicate(f"unknown arithmetic operator {self.op!r:.20}")
        object.__setattr__(self, "left", _as_value(self.left))
        object.__setattr__(self, "right", _as_value(self.right))

    def __hash__(self) -> int:
        return hash(self._key())


@dataclass(frozen=True, eq=False)
class Cast(Value):
    """``CAST(value AS to)``; ``to`` is kept in canonical spelling."""

    value: Value
    to: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", _as_value(self.value))
        object.__setattr__(self, "to", canonical_type_name(self.to))

    def __hash__(self) -> int:
        return hash(self._key())


@dataclass(frozen=True, eq=False)
class GetField(Value):
    """``value.name``: field ``name`` of a struct value (NULL where the struct is
    NULL).  SQL ``device.os`` and ``col("device").field("os")`` build it; binding
    resolves ``name`` like a column name (exact, else unique ignoring case)."""

    value: Value
    name: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", _require_value(self.value, "a field access"))
        if not isinstance(self.name, str) or not self.name:
            raise InvalidPredicate(
                f"a field name must be a non-empty string, got {self.name!r:.60}")

    def __hash__(self) -> int:
        return hash(self._key())


@dataclass(frozen=True, eq=False)
class Subscript(Value):
    """``value[key]`` as Spark writes it: a struct's field (string ``key``) or a
    map's value (NULL when the key is absent).  Binding decides which by the
    value's type; lists are refused (use ``element_at``, 1-based)."""

    value: Value
    key: Literal

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", _require_value(self.value, "a subscript"))
        key = _as_literal(self.key, "a subscript")
        _reject_null(key, "a subscript with")
        object.__setattr__(self, "key", key)

    def __hash__(self) -> int:
        return hash(self._key())


def _require_value(value: object, what: str) -> Value:
    """The tested operand of IS NULL / IN / BETWEEN / LIKE: a value node (a bare
    Python string would silently become a literal, not a column)."""
    if not isinstance(value, Value):
        raise InvalidPredicate(
            f"{what} needs a column or value expression, got {type(value).__name__} "
            f"{value!s:.60} (use col(...) or lit(...))"
        )
    return value


def _literal_tuple(values: object) -> tuple[Literal, ...]:
    if isinstance(values, (str, bytes, bytearray, Value, Expr)):
        raise InvalidPredicate(
            f"IN needs a collection of values, got {type(values).__name__} {values!s:.60}"
        )
    try:
        items = list(values)  # type: ignore[call-overload]
    except TypeError:
        raise InvalidPredicate(
            f"IN needs a collection of values, got {type(values).__name__}"
        ) from None
    return tuple(_as_literal(v, "IN") for v in items)


def col(name: str) -> Column:
    """The column called ``name`` (resolved case-insensitively when unambiguous).

    Examples:
        >>> import caslake
        >>> str((caslake.col('amount') > 100) & caslake.col('city').is_not_null())
        'amount > 100 AND city IS NOT NULL'
    """
    return Column(name)


def lit(value: object) -> Literal:
    """A literal value, e.g. ``lit(5) < col("a")``.

    Examples:
        >>> import caslake
        >>> str(caslake.lit(5) < caslake.col('a'))
        'a > 5'
    """
    return _as_literal(value, "lit()")


def func(name: str, *args: object) -> Func:
    """A scalar function call: ``func("lower", col("carrier")) == "ua"``."""
    return Func(name, tuple(_as_value(a) for a in args))


def _require_expr(value: object, what: str) -> Expr:
    if not isinstance(value, Expr):
        hint = ""
        if isinstance(value, bool):
            hint = (" (a Python bool: did you compare two columns with ==/!= -- use "
                    ".eq()/.ne() -- or use 'and'/'or' instead of '&'/'|'?)")
        raise InvalidPredicate(
            f"{what} needs a predicate, got {type(value).__name__} {value!s:.60}{hint}"
        )
    return value


def _reject_null(value: Value, what: str) -> None:
    if isinstance(value, Literal) and value.value is None:
        raise InvalidPredicate(
            f"{what} NULL is never true in SQL; use IS NULL or IS NOT NULL "
            "(col(...).is_null() / .is_not_null())"
        )


# --- predicates --------------------------------------------------------------


class Expr(_Node):
    """Base class of every predicate node.

    Combine predicates with ``&`` (AND), ``|`` (OR) and ``~`` (NOT).
    """

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Expr):
            return NotImplemented
        return type(self) is type(other) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __and__(self, other: object) -> And:
        return And(self, _require_expr(other, "'&'"))

    def __rand__(self, other: object) -> And:
        return And(_require_expr(other, "'&'"), self)

    def __or__(self, other: object) -> Or:
        return Or(self, _require_expr(other, "'|'"))

    def __ror__(self, other: object) -> Or:
        return Or(_require_expr(other, "'|'"), self)

    def __invert__(self) -> Not:
        return Not(self)

    def __bool__(self) -> bool:
        raise InvalidPredicate(
            f"the predicate {self} has no Python truth value; combine predicates with "
            "'&', '|' and '~' (not 'and', 'or', 'not'), use .between() instead of "
            "chained comparisons, and test 'where is None' rather than 'if where'"
        )

    def __str__(self) -> str:
        return to_sql(self)


def _describe_side(value: Value) -> str:
    return f"{value!s:.60}"


@dataclass(frozen=True, eq=False)
class Compare(Expr):
    """``left op right`` between two values (columns, literals, expressions).

    ``op`` is stored in canonical form (one of :data:`COMPARE_OPS`; ``==`` and
    ``<>`` are accepted as aliases).  A literal on the left of a non-literal
    is moved to the right and the operator flipped, so ``col op literal`` --
    the form statistics can prune -- always has the column on the left.
    """

    op: str
    left: Value
    right: Value

    def __post_init__(self) -> None:
        op: object = self.op
        if not isinstance(op, str) or _OP_ALIASES.get(op, op) not in COMPARE_OPS:
            raise InvalidPredicate(f"unknown comparison operator {op!r:.20}")
        op = _OP_ALIASES.get(op, op)
        left, right = _as_value(self.left), _as_value(self.right)
        if isinstance(left, Literal) and not isinstance(right, Literal):
            left, right, op = right, left, FLIP_OP[op]
        for side in (left, right):
            what = f"comparing {_describe_side(left if side is right else right)} with {op}"
            _reject_null(side, what)
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "left", left)
        object.__setattr__(self, "right", right)

    def __hash__(self) -> int:
        return hash(self._key())


@dataclass(frozen=True, eq=False)
class Between(Expr):
    """``column BETWEEN low AND high``, inclusive at both ends.  ``column`` is
    the tested value: a column or any value expression."""

    column: Value
    low: Value
    high: Value

    def __post_init__(self) -> None:
        column = _require_value(self.column, "BETWEEN")
        low, high = _as_value(self.low), _as_value(self.high)
        _reject_null(low, f"BETWEEN on {_describe_side(column)} with")
        _reject_null(high, f"BETWEEN on {_describe_side(column)} with")
        _reject_null(column, "BETWEEN on")
        object.__setattr__(self, "column", column)
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)

    def __hash__(self) -> int:
        return hash(self._key())


@dataclass(frozen=True, eq=False)
class In(Expr):
    """``column IN (values...)``; an empty tuple matches no row.  ``column`` is
    the tested value: a column or any value expression."""

    column: Value
    values: tuple[Literal, ...]

    def __post_init__(self) -> None:
        column = _require_value(self.column, "IN")
        _reject_null(column, "IN on")
        values = _literal_tuple(self.values)
        for value in values:
            if value.value is None:
                raise InvalidPredicate(
                    f"NULL in the IN list of {_describe_side(column)} never matches; "
                    "use IS NULL (or OR ... IS NULL) instead"
                )
        object.__setattr__(self, "column", column)
        object.__setattr__(self, "values", values)

    def __hash__(self) -> int:
        return hash(self._key())


@dataclass(frozen=True, eq=False)
class IsNull(Expr):
    """``column IS NULL``.  ``Not(IsNull(c))`` is ``c IS NOT NULL``."""

    column: Value

    def __post_init__(self) -> None:
        _require_value(self.column, "IS NULL")

    def __hash__(self) -> int:
        return hash(self._key())


@dataclass(frozen=True, eq=False)
class Like(Expr):
    """``column LIKE pattern [ESCAPE escape]`` (``ILIKE`` when
    ``case_insensitive``).  ``%`` matches any run of characters, ``_`` one
    character; without ESCAPE no character escapes (as in DuckDB)."""

    column: Value
    pattern: str
    escape: str | None = None
    case_insensitive: bool = False

    def __post_init__(self) -> None:
        kind = "ILIKE" if self.case_insensitive else "LIKE"
        _require_value(self.column, kind)
        if not isinstance(self.pattern, str):
            raise InvalidPredicate(f"{kind} needs a string pattern, got {self.pattern!r:.60}")
        if self.escape is not None:
            if not isinstance(self.escape, str) or len(self.escape) != 1:
                raise InvalidPredicate(
                    f"{kind} ESCAPE must be one character, got {self.escape!r:.20}")
            if _ends_with_lone_escape(self.pattern, self.escape):
                raise InvalidPredicate(
                    f"{kind} pattern {self.pattern!r:.60} ends with the escape character"
                )
        if not isinstance(self.case_insensitive, bool):
            raise InvalidPredicate("case_insensitive must be a bool")

    def __hash__(self) -> int:
        return hash(self._key())


def _ends_with_lone_escape(pattern: str, escape: str) -> bool:
    i = 0
    while i < len(pattern):
        if pattern[i] == escape:
            if i + 1 == len(pattern):
                return True
            i += 2
        else:
            i += 1
    return False


@dataclass(frozen=True, eq=False)
class Not(Expr):
    """``NOT expr`` with SQL semantics: NOT of NULL is NULL."""

    expr: Expr

    def __post_init__(self) -> None:
        _require_expr(self.expr, "NOT")

    def __hash__(self) -> int:
        return hash(self._key())


@dataclass(frozen=True, eq=False)
class And(Expr):
    """``left AND right`` (Kleene logic)."""

    left: Expr
    right: Expr

    def __post_init__(self) -> None:
        _require_expr(self.left, "AND")
        _require_expr(self.right, "AND")

    def __hash__(self) -> int:
        return hash(self._key())


@dataclass(frozen=True, eq=False)
class Or(Expr):
    """``left OR right`` (Kleene logic)."""

    left: Expr
    right: Expr

    def __post_init__(self) -> None:
        _require_expr(self.left, "OR")
        _require_expr(self.right, "OR")

    def __hash__(self) -> int:
        return hash(self._key())


@dataclass(frozen=True, eq=False)
class Const(Expr):
    """A constant truth value.

    With ``unless_null`` set (only the binder produces this), the value is
    NULL on rows where that value is NULL and ``value`` elsewhere: it is what
    ``x = 1.5`` evaluates to when ``x`` is an integer column.
    """

    value: bool
    unless_null: Value | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.value, bool):
            raise InvalidPredicate(f"a constant must be True or False, got {self.value!r:.60}")
        if self.unless_null is not None and not isinstance(self.unless_null, Value):
            raise InvalidPredicate("a guarded constant needs a value to guard on")

    def __hash__(self) -> int:
        return hash(self._key())


@dataclass(frozen=True, eq=False)
class Case(Value):
    """``CASE WHEN cond THEN value ... ELSE default END``: per row, the value of
    the first branch whose condition is TRUE; a NULL condition is not TRUE, so
    it falls through (to ``default``, NULL when there is no ELSE).  SQL
    ``CASE x WHEN 1 THEN ...`` is parsed as ``CASE WHEN x = 1 THEN ...``.

    Examples:
        >>> from caslake.expr import col, when
        >>> str(when(col("qty") > 10, "bulk").when(col("qty") > 0, "retail").otherwise("none"))
        "CASE WHEN qty > 10 THEN 'bulk' WHEN qty > 0 THEN 'retail' ELSE 'none' END"
    """

    whens: tuple[tuple[Expr, Value], ...]
    default: Value = Literal(None)

    def __post_init__(self) -> None:
        if isinstance(self.whens, (str, bytes, Value, Expr)) or not isinstance(
                self.whens, (tuple, list)) or not self.whens:
            raise InvalidPredicate("CASE needs at least one (condition, value) branch")
        branches: list[tuple[Expr, Value]] = []
        for branch in self.whens:
            if not isinstance(branch, (tuple, list)) or len(branch) != 2:
                raise InvalidPredicate("a CASE branch is a (condition, value) pair")
            branches.append((_require_expr(branch[0], "CASE WHEN"), _as_value(branch[1])))
        object.__setattr__(self, "whens", tuple(branches))
        object.__setattr__(self, "default", _as_value(self.default))

    def __hash__(self) -> int:
        return hash(self._key())

    def when(self, condition: Expr, value: object) -> Case:
        """This CASE with one more branch, tried after the others."""
        return Case((*self.whens, (condition, _as_value(value))), self.default)

    def otherwise(self, value: object) -> Case:
        """This CASE with ``value`` as its ELSE."""
        return Case(self.whens, _as_value(value))


def when(condition: Expr, value: object) -> Case:
    """Start a CASE: ``when(col("a") > 1, "big").when(...).otherwise("small")``.

    Examples:
        >>> from caslake.expr import col, when
        >>> str(when(col("a").is_null(), 0).otherwise(col("a")))
        'CASE WHEN a IS NULL THEN 0 ELSE a END'
    """
    return Case(((condition, _as_value(value)),))


TRUE: Final = Const(True)
FALSE: Final = Const(False)


# --- traversal ---------------------------------------------------------------


def iter_chain(expr: Expr, kind: type[And] | type[Or]) -> list[Expr]:
    """The operands of a chain of ``kind`` nodes, left to right, without recursion.

    ``a & b & c`` (``And(And(a, b), c)``) gives ``[a, b, c]``; anything that is
    not a ``kind`` node is a one-element chain.
    """
    out: list[Expr] = []
    stack: list[Expr] = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, kind):
            stack.append(node.right)
            stack.append(node.left)
        else:
            out.append(node)
    return out


def leaves(expr: Expr) -> Iterator[Expr]:
    """Every predicate below ``expr`` that is not AND, OR or NOT, without recursion."""
    stack: list[Expr] = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, (And, Or)):
            stack.extend((node.right, node.left))
        elif isinstance(node, Not):
            stack.append(node.expr)
        else:
            yield node


def _children(node: Expr) -> Iterator[Expr]:
    if isinstance(node, (And, Or)):
        yield node.left
        yield node.right
    elif isinstance(node, Not):
        yield node.expr


def operands(node: Expr | Value) -> Iterator[Value]:
    """The values directly inside ``node`` (a predicate leaf or a value)."""
    if isinstance(node, Compare | Arith):
        yield node.left
        yield node.right
    elif isinstance(node, Between):
        yield node.column
        yield node.low
        yield node.high
    elif isinstance(node, In | IsNull | Like):
        yield node.column
    elif isinstance(node, Const) and node.unless_null is not None:
        yield node.unless_null
    elif isinstance(node, Func):
        yield from node.args
    elif isinstance(node, Cast | GetField):
        yield node.value
    elif isinstance(node, Subscript):
        yield node.value
        yield node.key
    elif isinstance(node, Case):
        for condition, value in node.whens:
            for leaf in leaves(condition):
                yield from operands(leaf)
            yield value
        yield node.default


def value_columns(value: Value) -> Iterator[str]:
    """Names of the columns a value reads, without recursion."""
    stack: list[Value] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Column):
            yield item.name
        else:
            stack.extend(operands(item))


def referenced_columns(expr: Expr | BoundExpr) -> set[str]:
    """The names of every column ``expr`` mentions.

    Accepts an :class:`Expr` or a :class:`~caslake.expr.bind.BoundExpr` (whose
    normalised tree may mention fewer columns than its source).
    """
    root: object = expr if isinstance(expr, Expr) else getattr(expr, "expr", None)
    if not isinstance(root, Expr):
        raise InvalidPredicate(f"expected a predicate, got {type(expr).__name__}")
    names: set[str] = set()
    stack: list[Expr] = [root]
    while stack:
        node = stack.pop()
        for value in operands(node):
            names.update(value_columns(value))
        stack.extend(_children(node))
    return names


# --- rendering ---------------------------------------------------------------


def quote_identifier(name: str) -> str:
    """``name`` as the SQL dialect spells it: bare when possible, else double-quoted."""
    if _BARE_IDENTIFIER.fullmatch(name) and name.upper() not in RESERVED_WORDS and \
            name.upper() not in ("DATE", "TIMESTAMP") and name.lower() not in FUNCTIONS:
        return name
    return '"' + name.replace('"', '""') + '"'


def render_literal(value: LiteralValue) -> str:
    """``value`` as SQL literal text (NaN and infinities have no SQL spelling).

    Floats are written with an exponent (``1.5E0``) so they read back as
    floats: ``1.5`` alone is a DECIMAL literal in SQL."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        text = repr(value)
        return text if "e" in text else text + "E0"
    if isinstance(value, Decimal):
        text = _decimal_text(value)
        return text if "." in text else text + ".0"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            try:
                value = value.astimezone(UTC)  # offsets like +05:30:15 have no SQL spelling
            except OverflowError:
                return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
            return f"TIMESTAMP '{value.replace(tzinfo=None).isoformat(sep=' ')}+00:00'"
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    return f"DATE '{value.isoformat()}'"


def render_value(value: Value) -> str:
    """``value`` as SQL text."""
    if isinstance(value, Column):
        return quote_identifier(value.name)
    if isinstance(value, Literal):
        return render_literal(value.value)
    if isinstance(value, Func):
        if value.name == "negate":
            return f"-({render_value(value.args[0])})"
        if value.name == "dpipe":
            return f"({render_value(value.args[0])} || {render_value(value.args[1])})"
        if value.name == "add_interval":
            return (f"({render_value(value.args[0])} + INTERVAL "
                    f"({render_value(value.args[1])}) MICROSECOND)")
        return f"{value.name}({', '.join(render_value(a) for a in value.args)})"
    if isinstance(value, Arith):
        return f"({render_value(value.left)} {value.op} {render_value(value.right)})"
    if isinstance(value, Cast):
        return f"CAST({render_value(value.value)} AS {value.to})"
    if isinstance(value, GetField):
        return f"{_render_base(value.value)}.{quote_field(value.name)}"
    if isinstance(value, Subscript):
        return f"{_render_base(value.value)}[{render_literal(value.key.value)}]"
    if isinstance(value, Case):
        branches = " ".join(f"WHEN {to_sql(c)} THEN {render_value(v)}" for c, v in value.whens)
        default = value.default
        tail = "" if isinstance(default, Literal) and default.value is None else \
            f" ELSE {render_value(default)}"
        return f"CASE {branches}{tail} END"
    raise InvalidPredicate(f"not a value node: {type(value).__name__}")


def _render_base(value: Value) -> str:
    """A value written before ``.field`` or ``[key]``: columns, field accesses and
    subscripts as they are, anything else in parentheses."""
    text = render_value(value)
    return text if isinstance(value, Column | GetField | Subscript) else f"({text})"


def quote_field(name: str) -> str:
    """A struct field's name after a dot: bare when possible, else double-quoted."""
    if _BARE_IDENTIFIER.fullmatch(name) and name.upper() not in RESERVED_WORDS:
        return name
    return '"' + name.replace('"', '""') + '"'


def value_path(value: Value) -> tuple[str, ...] | None:
    """``("device", "os")`` for ``device.os`` (a column or a chain of field accesses
    on one), else None.  In a bound tree every such chain goes through structs
    only, so the path names one column of the data files (with statistics)."""
    names: list[str] = []
    while isinstance(value, GetField):
        names.append(value.name)
        value = value.value
    if not isinstance(value, Column):
        return None
    names.append(value.name)
    return tuple(reversed(names))


def _render_between(node: Between, keyword: str) -> str:
    return f"{node.column}{keyword}{node.low} AND {node.high}"


def _render_in(node: In, keyword: str) -> str:
    return f"{node.column}{keyword}({', '.join(str(v) for v in node.values)})"


def _render_like(node: Like, negated: bool) -> str:
    word = ("NOT " if negated else "") + ("ILIKE" if node.case_insensitive else "LIKE")
    text = f"{node.column} {word} {render_literal(node.pattern)}"
    if node.escape is not None:
        text += f" ESCAPE {render_literal(node.escape)}"
    return text


def _render_leaf(node: Expr) -> str | None:
    if isinstance(node, Compare):
        return f"{node.left} {node.op} {node.right}"
    if isinstance(node, Between):
        return _render_between(node, " BETWEEN ")
    if isinstance(node, In):
        return _render_in(node, " IN ") if node.values else "FALSE"
    if isinstance(node, IsNull):
        return f"{node.column} IS NULL"
    if isinstance(node, Like):
        return _render_like(node, False)
    if isinstance(node, Not) and isinstance(node.expr, IsNull):
        return f"{node.expr.column} IS NOT NULL"
    if isinstance(node, Not) and isinstance(node.expr, In) and node.expr.values:
        return _render_in(node.expr, " NOT IN ")
    if isinstance(node, Not) and isinstance(node.expr, Between):
        return _render_between(node.expr, " NOT BETWEEN ")
    if isinstance(node, Not) and isinstance(node.expr, Like):
        return _render_like(node.expr, True)
    if isinstance(node, Const):
        word = "TRUE" if node.value else "FALSE"
        if node.unless_null is None:
            return word
        return f"{word}_UNLESS_NULL({node.unless_null})"
    return None


def to_sql(expr: Expr) -> str:
    """Render ``expr`` as SQL text that :func:`~caslake.expr.sql.parse_sql` reads
    back to an equal tree (except NaN/infinite literals, which SQL cannot spell).
    """
    leaf = _render_leaf(expr)
    if leaf is not None:
        return leaf
    if isinstance(expr, Not):
        inner = expr.expr
        text = to_sql(inner)
        if isinstance(inner, (And, Or)):
            text = f"({text})"
        return f"NOT {text}"
    if isinstance(expr, (And, Or)):
        kind = type(expr)
        word = " AND " if kind is And else " OR "
        parts: list[str] = []
        # Walk the left spine only: a AND b AND c is And(And(a, b), c), and a
        # right-nested a AND (b AND c) keeps its parentheses, so the text
        # parses back to an equal tree.
        spine: list[Expr] = []
        node: Expr = expr
        while isinstance(node, kind):
            spine.append(node.right)
            node = node.left
        spine.append(node)
        for operand in reversed(spine):
            text = to_sql(operand)
            if isinstance(operand, (And, Or)) and (kind is And or isinstance(operand, Or)):
                text = f"({text})"
            parts.append(text)
        return word.join(parts)
    raise InvalidPredicate(f"not a predicate node: {type(expr).__name__}")
