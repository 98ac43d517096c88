"""The unbound predicate tree and the Python API that builds it.

This module owns the node classes every other part of :mod:`caslake.expr`
works on, the ``col(...) > 5`` operator API, :func:`referenced_columns` and the
rendering of a tree back to SQL text (``str(expr)``).

Nodes are immutable (frozen dataclasses) and know nothing about a schema:
``col("id") > "abc"`` is a perfectly good tree until it is bound.  Two kinds of
classes live here:

* operands -- :class:`Column` and :class:`Literal`.  They are *not* predicates
  and cannot be combined with ``&``/``|``/``~``;
* predicates -- subclasses of :class:`Expr`: :class:`Compare`,
  :class:`Between`, :class:`In`, :class:`IsNull`, :class:`Not`, :class:`And`,
  :class:`Or` and :class:`Const` (:data:`TRUE`, :data:`FALSE`).

Rules this module must never break:

* construction never raises anything but
  :class:`~caslake.errors.InvalidPredicate` for bad input;
* a :class:`Compare` always has the column on the left (``5 < col("a")`` is
  stored as ``a > 5``) and one of the six canonical operators;
* a comparison, ``BETWEEN`` bound or ``IN`` value is never NULL -- comparing
  with NULL is never true in SQL and is rejected with a hint to use IS NULL;
* a predicate is never silently turned into a Python ``bool``: ``bool(expr)``
  raises, so ``a > 1 and b < 2`` or ``1 < col("a") < 5`` fail loudly instead
  of dropping half of the condition.  Callers test ``where is None``.
* nothing here touches pyarrow, storage or schemas.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Final, SupportsIndex, cast, overload

from caslake.errors import InvalidPredicate

if TYPE_CHECKING:
    from caslake.expr.bind import BoundExpr

__all__ = [
    "COMPARE_OPS",
    "FALSE",
    "RESERVED_WORDS",
    "TRUE",
    "And",
    "Between",
    "Column",
    "Compare",
    "Const",
    "Expr",
    "In",
    "IsNull",
    "Literal",
    "LiteralValue",
    "Not",
    "Or",
    "col",
    "describe_value",
    "iter_chain",
    "lit",
    "quote_identifier",
    "referenced_columns",
    "render_literal",
    "to_sql",
]

#: Python values a :class:`Literal` may hold.
LiteralValue = None | bool | int | float | str | date | datetime

#: The canonical comparison operators.
COMPARE_OPS: Final = frozenset({"=", "!=", "<", "<=", ">", ">="})

_OP_ALIASES: Final[dict[str, str]] = {"==": "=", "<>": "!="}
#: ``a op b`` is ``b FLIP[op] a``.
FLIP_OP: Final[dict[str, str]] = {
    "=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<=",
}

#: Words the SQL dialect reserves; a column with one of these names must be
#: written as a double-quoted identifier.
RESERVED_WORDS: Final = frozenset(
    {"AND", "OR", "NOT", "BETWEEN", "IN", "IS", "NULL", "TRUE", "FALSE"}
)

_BARE_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MAX_INT_BITS: Final = 4096


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


@dataclass(frozen=True, eq=False)
class Literal:
    """A constant operand.  ``value`` is one of :data:`LiteralValue`.

    Equality is by type and value (``Literal(1) != Literal(True)``, and two NaN
    literals are equal), so trees compare structurally.
    """

    value: LiteralValue

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", _normalise_value(self.value))

    def _key(self) -> tuple[str, object]:
        value = self.value
        if isinstance(value, float) and math.isnan(value):
            return ("float", "nan")
        if isinstance(value, datetime) and value.tzinfo is not None:
            return ("datetime-tz", value)
        return (type(value).__name__, value)

    # Against a Column these return NotImplemented, so Python falls back to
    # the column's reflected operator and ``lit(5) == col("a")`` builds a
    # Compare; the overloads tell type checkers so.
    @overload  # type: ignore[override]
    def __eq__(self, other: Column) -> Compare: ...  # type: ignore[overload-overlap]
    @overload
    def __eq__(self, other: object) -> bool: ...
    def __eq__(self, other: object) -> Compare | bool:
        if not isinstance(other, Literal):
            return NotImplemented
        return self._key() == other._key()

    @overload  # type: ignore[override]
    def __ne__(self, other: Column) -> Compare: ...  # type: ignore[overload-overlap]
    @overload
    def __ne__(self, other: object) -> bool: ...
    def __ne__(self, other: object) -> Compare | bool:
        if not isinstance(other, Literal):
            return NotImplemented
        return self._key() != other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        return render_literal(self.value)


def _as_literal(value: object) -> Literal:
    if isinstance(value, Literal):
        return value
    if isinstance(value, Column):
        raise InvalidPredicate(
            f"comparing two columns is not supported (got column {value.name!r} "
            "where a value was expected)"
        )
    if isinstance(value, Expr):
        raise InvalidPredicate(f"expected a value, got the predicate {value}")
    return Literal(_normalise_value(value))


@dataclass(frozen=True, eq=False)
class Column:
    """A reference to a column by name; build predicates with its operators.

    ``col("a") == 5`` builds a :class:`Compare`.  Comparing two *columns* with
    ``==``/``!=`` returns a plain ``bool`` (structural equality, used when
    trees are compared); column-to-column predicates are not supported.
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
        return hash(("Column", self.name))

    @overload  # type: ignore[override]
    def __eq__(self, other: Column) -> bool: ...  # type: ignore[overload-overlap]
    @overload
    def __eq__(self, other: object) -> Compare: ...
    def __eq__(self, other: object) -> Compare | bool:
        if isinstance(other, Column):
            return self.name == other.name
        return Compare("=", self, _as_literal(other))

    @overload  # type: ignore[override]
    def __ne__(self, other: Column) -> bool: ...  # type: ignore[overload-overlap]
    @overload
    def __ne__(self, other: object) -> Compare: ...
    def __ne__(self, other: object) -> Compare | bool:
        if isinstance(other, Column):
            return self.name != other.name
        return Compare("!=", self, _as_literal(other))

    def __lt__(self, other: object) -> Compare:
        return Compare("<", self, _as_literal(other))

    def __le__(self, other: object) -> Compare:
        return Compare("<=", self, _as_literal(other))

    def __gt__(self, other: object) -> Compare:
        return Compare(">", self, _as_literal(other))

    def __ge__(self, other: object) -> Compare:
        return Compare(">=", self, _as_literal(other))

    def isin(self, values: Iterable[object]) -> In:
        """``column IN (values...)``.  An empty collection matches no row."""
        return In(self, _literal_tuple(values))

    def between(self, low: object, high: object) -> Between:
        """``column BETWEEN low AND high`` (both ends inclusive)."""
        return Between(self, _as_literal(low), _as_literal(high))

    def is_null(self) -> IsNull:
        """``column IS NULL``."""
        return IsNull(self)

    def is_not_null(self) -> Not:
        """``column IS NOT NULL``."""
        return Not(IsNull(self))

    def __str__(self) -> str:
        return quote_identifier(self.name)


def _literal_tuple(values: object) -> tuple[Literal, ...]:
    if isinstance(values, (str, bytes, bytearray, Literal, Column, Expr)):
        raise InvalidPredicate(
            f"IN needs a collection of values, got {type(values).__name__} {values!s:.60}"
        )
    try:
        items = list(values)  # type: ignore[call-overload]
    except TypeError:
        raise InvalidPredicate(
            f"IN needs a collection of values, got {type(values).__name__}"
        ) from None
    return tuple(_as_literal(v) for v in items)


def col(name: str) -> Column:
    """The column called ``name`` (case-sensitive, exactly as in the schema)."""
    return Column(name)


def lit(value: object) -> Literal:
    """A literal value, e.g. ``lit(5) < col("a")``."""
    return _as_literal(value)


def _require_column(value: object, what: str) -> Column:
    if not isinstance(value, Column):
        raise InvalidPredicate(f"{what} needs a column, got {type(value).__name__} {value!s:.60}")
    return value


def _require_expr(value: object, what: str) -> Expr:
    if not isinstance(value, Expr):
        hint = ""
        if isinstance(value, bool):
            hint = (" (a Python bool: did you compare two columns, or use 'and'/'or' "
                    "instead of '&'/'|'?)")
        raise InvalidPredicate(
            f"{what} needs a predicate, got {type(value).__name__} {value!s:.60}{hint}"
        )
    return value


def _reject_null(value: Literal, what: str) -> None:
    if value.value is None:
        raise InvalidPredicate(
            f"{what} NULL is never true in SQL; use IS NULL or IS NOT NULL "
            "(col(...).is_null() / .is_not_null())"
        )


# --- predicates --------------------------------------------------------------


class Expr:
    """Base class of every predicate node.

    Combine predicates with ``&`` (AND), ``|`` (OR) and ``~`` (NOT).
    """

    __slots__ = ()

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


@dataclass(frozen=True)
class Compare(Expr):
    """``left op right``: a column compared with a non-NULL literal.

    ``op`` is stored in canonical form (one of :data:`COMPARE_OPS`; ``==`` and
    ``<>`` are accepted as aliases).  A literal on the left is moved to the
    right and the operator flipped.
    """

    op: str
    left: Column
    right: Literal

    def __post_init__(self) -> None:
        op: object = self.op
        if not isinstance(op, str) or _OP_ALIASES.get(op, op) not in COMPARE_OPS:
            raise InvalidPredicate(f"unknown comparison operator {op!r}")
        op = _OP_ALIASES.get(op, op)
        left: object = self.left
        right: object = self.right
        if not isinstance(left, Column) and isinstance(right, Column):
            left, right, op = right, left, FLIP_OP[op]
        if not isinstance(left, Column):
            raise InvalidPredicate(
                f"a comparison needs a column on one side, got {left!s:.60} {op} {right!s:.60}"
            )
        lit_right = _as_literal(right)
        _reject_null(lit_right, f"comparing column {left.name!r} with {op}")
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "left", left)
        object.__setattr__(self, "right", lit_right)


@dataclass(frozen=True)
class Between(Expr):
    """``column BETWEEN low AND high``, inclusive at both ends."""

    column: Column
    low: Literal
    high: Literal

    def __post_init__(self) -> None:
        column = _require_column(self.column, "BETWEEN")
        low, high = _as_literal(self.low), _as_literal(self.high)
        _reject_null(low, f"BETWEEN on column {column.name!r} with")
        _reject_null(high, f"BETWEEN on column {column.name!r} with")
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)


@dataclass(frozen=True)
class In(Expr):
    """``column IN (values...)``; an empty tuple matches no row."""

    column: Column
    values: tuple[Literal, ...]

    def __post_init__(self) -> None:
        column = _require_column(self.column, "IN")
        values = _literal_tuple(self.values)
        for value in values:
            if value.value is None:
                raise InvalidPredicate(
                    f"NULL in the IN list of column {column.name!r} never matches; "
                    "use IS NULL (or OR ... IS NULL) instead"
                )
        object.__setattr__(self, "values", values)


@dataclass(frozen=True)
class IsNull(Expr):
    """``column IS NULL``.  ``Not(IsNull(c))`` is ``c IS NOT NULL``."""

    column: Column

    def __post_init__(self) -> None:
        _require_column(self.column, "IS NULL")


@dataclass(frozen=True)
class Not(Expr):
    """``NOT expr`` with SQL semantics: NOT of NULL is NULL."""

    expr: Expr

    def __post_init__(self) -> None:
        _require_expr(self.expr, "NOT")


@dataclass(frozen=True)
class And(Expr):
    """``left AND right`` (Kleene logic)."""

    left: Expr
    right: Expr

    def __post_init__(self) -> None:
        _require_expr(self.left, "AND")
        _require_expr(self.right, "AND")


@dataclass(frozen=True)
class Or(Expr):
    """``left OR right`` (Kleene logic)."""

    left: Expr
    right: Expr

    def __post_init__(self) -> None:
        _require_expr(self.left, "OR")
        _require_expr(self.right, "OR")


@dataclass(frozen=True, eq=False)
class Const(Expr):
    """A constant truth value.

    With ``unless_null`` set (only the binder produces this), the value is
    NULL on rows where that column is NULL and ``value`` elsewhere: it is what
    ``x = 1.5`` evaluates to when ``x`` is an integer column.
    """

    value: bool
    unless_null: Column | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.value, bool):
            raise InvalidPredicate(f"a constant must be True or False, got {self.value!r:.60}")
        if self.unless_null is not None:
            _require_column(self.unless_null, "a guarded constant")

    def _key(self) -> tuple[bool, str | None]:
        # Column == None would build a predicate, so compare by name.
        return (self.value, None if self.unless_null is None else self.unless_null.name)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Const):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(("Const", *self._key()))


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


def _children(node: Expr) -> Iterator[Expr]:
    if isinstance(node, (And, Or)):
        yield node.left
        yield node.right
    elif isinstance(node, Not):
        yield node.expr


def _columns_of(node: Expr) -> Iterator[str]:
    if isinstance(node, Compare):
        yield node.left.name
    elif isinstance(node, (Between, In, IsNull)):
        yield node.column.name
    elif isinstance(node, Const) and node.unless_null is not None:
        yield node.unless_null.name


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
        names.update(_columns_of(node))
        stack.extend(_children(node))
    return names


# --- rendering ---------------------------------------------------------------


def quote_identifier(name: str) -> str:
    """``name`` as the SQL dialect spells it: bare when possible, else double-quoted."""
    if _BARE_IDENTIFIER.fullmatch(name) and name.upper() not in RESERVED_WORDS and \
            name.upper() not in ("DATE", "TIMESTAMP"):
        return name
    return '"' + name.replace('"', '""') + '"'


def render_literal(value: LiteralValue) -> str:
    """``value`` as SQL literal text (NaN and infinities have no SQL spelling)."""
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
        return repr(value)
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


def _render_between(node: Between, keyword: str) -> str:
    return f"{node.column}{keyword}{node.low} AND {node.high}"


def _render_in(node: In, keyword: str) -> str:
    return f"{node.column}{keyword}({', '.join(str(v) for v in node.values)})"


def _render_leaf(node: Expr) -> str | None:
    if isinstance(node, Compare):
        return f"{node.left} {node.op} {node.right}"
    if isinstance(node, Between):
        return _render_between(node, " BETWEEN ")
    if isinstance(node, In):
        return _render_in(node, " IN ") if node.values else "FALSE"
    if isinstance(node, IsNull):
        return f"{node.column} IS NULL"
    if isinstance(node, Not) and isinstance(node.expr, IsNull):
        return f"{node.expr.column} IS NOT NULL"
    if isinstance(node, Not) and isinstance(node.expr, In) and node.expr.values:
        return _render_in(node.expr, " NOT IN ")
    if isinstance(node, Not) and isinstance(node.expr, Between):
        return _render_between(node.expr, " NOT BETWEEN ")
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
