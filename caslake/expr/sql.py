"""The ``where`` SQL dialect: SQL expression text parsed by sqlglot.

This module owns turning predicate text into an unbound
:class:`~caslake.expr.nodes.Expr`.  sqlglot (DuckDB dialect) does the
tokenising and parsing; this module maps its syntax tree onto caslake's nodes
and refuses, by name, every construct caslake does not evaluate.  It never
looks at a schema (binding does that) and never raises anything but
:class:`~caslake.errors.InvalidPredicate` or a subclass:

* :class:`~caslake.errors.PredicateSyntaxError` -- the text does not parse;
  the message carries the 1-based character position and an excerpt, e.g.
  ``malformed where at position 11 near "AND y = 1": ...``;
* :class:`~caslake.errors.UnknownFunction` -- a function caslake lacks;
* :class:`~caslake.errors.UnsupportedExpression` -- a construct caslake does
  not evaluate (subqueries, ``IS DISTINCT FROM``, ``//``, ...), named.

What is accepted (keywords are case-insensitive; precedence as in SQL)::

    predicate  := predicate OR predicate | predicate AND predicate | NOT predicate
                | ( predicate ) | TRUE | FALSE
                | value cmp value                 -- = == != <> < <= > >=
                | value [NOT] BETWEEN value AND value
                | value [NOT] IN ( literal, ... )
                | value IS [NOT] NULL
                | value [NOT] LIKE|ILIKE 'pattern' [ESCAPE 'c']
                | value                           -- a boolean value: value = TRUE
    value      := column | literal | value (+ - * /) value | - value | ( value )
                | function ( value, ... ) | CAST ( value AS type ) | value::type
                | CASE WHEN predicate THEN value ... [ELSE value] END
                | CASE value WHEN value THEN value ... [ELSE value] END
                | IF ( predicate, value, value )  -- CASE WHEN p THEN a ELSE b END
    literal    := integer | decimal (1.5) | float (1.5e0) | 'string' | TRUE | FALSE
                | NULL | DATE 'YYYY-MM-DD' | TIMESTAMP 'YYYY-MM-DD HH:MM:SS[.f][+HH:MM]'
                | TIMESTAMPTZ '...'
    column     := identifier | "any text"         -- "" for a quote

A number with a decimal point is a DECIMAL literal (exact), one with an
exponent a float, as in DuckDB.  Parsed trees are cached by text, so a
predicate repeated across scans is parsed once.

sqlglot and its DuckDB dialect load with this module, which ``import caslake``
loads (~0.1 s): a process's first scan or delete with a SQL string does not
pay them (``tests/test_import_cost.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Final

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, SqlglotError, TokenError

from caslake.errors import (
    InvalidPredicate,
    PredicateSyntaxError,
    UnknownFunction,
    UnsupportedExpression,
)
from caslake.expr import sql_functions
from caslake.expr._iso import parse_date, parse_timestamp
from caslake.expr.nodes import (
    FALSE,
    FUNCTIONS,
    TRUE,
    And,
    Arith,
    Between,
    Case,
    Cast,
    Column,
    Compare,
    Expr,
    Func,
    GetField,
    In,
    IsNull,
    Like,
    Literal,
    Not,
    Or,
    Subscript,
    Value,
)

__all__ = ["MAX_NESTING", "parse_sql", "parse_sql_value"]

#: Deepest nesting accepted; deeper input is rejected (it is never
#: hand-written and would otherwise exhaust the Python stack).
MAX_NESTING: Final = 100
#: Loaded now, not on the first parse (its first lookup imports its module).
_DIALECT: Final = sqlglot.Dialect.get_or_raise("duckdb")
_EXCERPT: Final = 24
_MAX_TEXT: Final = 1_000_000

_COMPARE: Final[dict[type[exp.Expression], str]] = {
    exp.EQ: "=", exp.NEQ: "!=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">=",
}
_ARITH: Final[dict[type[exp.Expression], str]] = {
    exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/",
}
#: sqlglot function classes -> (caslake function, argument keys in order).
_FUNCS: Final[dict[type[exp.Expression], tuple[str, tuple[str, ...]]]] = {
    exp.Lower: ("lower", ("this",)), exp.Upper: ("upper", ("this",)),
    exp.Length: ("length", ("this",)), exp.Abs: ("abs", ("this",)),
    exp.Substring: ("substr", ("this", "start", "length")),
    exp.Coalesce: ("coalesce", ("this", "expressions")),
    exp.Date: ("date", ("this",)), exp.Year: ("year", ("this",)),
    exp.Month: ("month", ("this",)), exp.Day: ("day", ("this",)),
    exp.DayOfMonth: ("day", ("this",)), exp.Hour: ("hour", ("this",)),
    exp.Minute: ("minute", ("this",)), exp.Second: ("second", ("this",)),
    exp.Trim: ("trim", ("this",)),
    exp.ArrayContains: ("array_contains", ("this", "expression")),
    exp.ArraySize: ("cardinality", ("this",)),
}
_TRIM_POSITION: Final = {None: "trim", "LEADING": "ltrim", "TRAILING": "rtrim", "BOTH": "trim"}
#: Names of constructs users may type, for the "not supported" message.
_NAMES: Final[dict[type[exp.Expression], str]] = {
    exp.Mod: "the % operator", exp.IntDiv: "the // operator", exp.DPipe: "the || operator",
    exp.NullSafeEQ: "IS NOT DISTINCT FROM / <=>", exp.NullSafeNEQ: "IS DISTINCT FROM",
    exp.Subquery: "a subquery", exp.Select: "SELECT",
    exp.Star: "*", exp.Placeholder: "a parameter placeholder", exp.Interval: "INTERVAL",
    exp.TryCast: "TRY_CAST", exp.SimilarTo: "SIMILAR TO", exp.Glob: "GLOB",
    exp.RegexpLike: "regular expressions", exp.Exists: "EXISTS", exp.Window: "a window",
    exp.Xor: "XOR", exp.BitwiseAnd: "the & operator", exp.BitwiseOr: "the | operator",
}


def _position(text: str, line: int, column: int) -> int:
    """0-based offset of a 1-based (line, column) as sqlglot reports it."""
    lines = text.split("\n")
    line = max(1, min(line, len(lines)))
    return sum(len(row) + 1 for row in lines[:line - 1]) + max(0, column - 1)


def _syntax_error(text: str, offset: int, message: str) -> PredicateSyntaxError:
    if offset >= len(text.rstrip()) or not text.strip():
        where = f"at position {len(text) + 1} (end of input)"
    else:
        excerpt = text[offset:offset + _EXCERPT]
        excerpt = "".join(c if c.isprintable() else " " for c in excerpt)
        if offset + _EXCERPT < len(text):
            excerpt += "..."
        where = f'at position {offset + 1} near "{excerpt}"'
    return PredicateSyntaxError(f"malformed where {where}: {message}")


def _from_parse_error(text: str, error: SqlglotError) -> PredicateSyntaxError:
    details = getattr(error, "errors", None) or []
    if details:
        first = details[0]
        description = str(first.get("description") or "syntax error")
        if description.startswith("Required keyword"):
            description = "a value or operand is missing"
        highlight = str(first.get("highlight") or "")
        line, column = int(first.get("line") or 1), int(first.get("col") or 1)
        # sqlglot reports the column of the highlighted token's last character.
        offset = _position(text, line, column) - max(0, len(highlight) - 1)
        return _syntax_error(text, max(0, offset), description)
    return _syntax_error(text, len(text), str(error).split("\n")[0][:200])


def _unsupported(node: exp.Expression) -> UnsupportedExpression:
    name = _NAMES.get(type(node))
    if name is None:
        name = type(node).__name__.upper()
    try:
        shown = node.sql(dialect="duckdb")
    except SqlglotError:
        shown = ""
    if len(shown) > 60:
        shown = shown[:60] + "..."
    return UnsupportedExpression(
        f"{name} is not supported in a where predicate" + (f": {shown}" if shown else "")
    )


def _column_path(node: exp.Column) -> Value:
    """A column, or a field of one: ``device.os`` (sqlglot reads the parts as
    table and column) is field ``os`` of column ``device``; any depth."""
    parts = node.parts
    if not parts or not all(isinstance(p, exp.Identifier) for p in parts):
        raise _unsupported(node.this if not isinstance(node.this, exp.Identifier) else node)
    value: Value = Column(str(parts[0].this))
    for part in parts[1:]:
        value = GetField(value, str(part.this))
    return value


def _number(text: str) -> Literal:
    try:
        if any(c in text for c in "eE"):
            value = float(text)
            if value in (float("inf"), float("-inf")):
                raise InvalidPredicate(f"number {text[:30]!r} is out of range for a float")
            return Literal(value)
        if "." in text:
            return Literal(Decimal(text))
        return Literal(int(text))
    except (ValueError, InvalidOperation):
        if len(text) > 1000:
            raise InvalidPredicate(f"number {text[:20]!r}... has too many digits") from None
        raise InvalidPredicate(f"malformed number {text[:30]!r}") from None


def _negate(value: Value) -> Value:
    if isinstance(value, Literal) and isinstance(value.value, (int, float, Decimal)) \
            and not isinstance(value.value, bool):
        return Literal(-value.value)
    return Func("negate", (value,))


def _string(node: exp.Expression, what: str) -> str:
    if isinstance(node, exp.Literal) and node.is_string:
        return str(node.this)
    raise UnsupportedExpression(f"{what} must be a string literal, got {node.sql()[:60]}")


def _typed_literal(cast: exp.Cast) -> Literal | None:
    """``DATE '...'`` / ``TIMESTAMP '...'`` (also CAST('...' AS DATE)) as a literal."""
    if not (isinstance(cast.this, exp.Literal) and cast.this.is_string):
        return None
    to = cast.to
    text = str(cast.this.this)
    if to.is_type(exp.DataType.Type.DATE):
        day = parse_date(text)
        if day is None:
            raise InvalidPredicate(f"invalid DATE literal {text[:40]!r}: expected 'YYYY-MM-DD'")
        return Literal(day)
    if to.is_type(*exp.DataType.TEMPORAL_TYPES) and not to.is_type(exp.DataType.Type.TIME):
        moment = parse_timestamp(text)
        if moment is None:
            raise InvalidPredicate(
                f"invalid TIMESTAMP literal {text[:40]!r}: expected "
                "'YYYY-MM-DD[ HH:MM[:SS[.ffffff]]][Z|+HH:MM]'"
            )
        return Literal(moment)
    return None


class _Translator:
    """sqlglot tree -> caslake tree.  Depth is bounded by :data:`MAX_NESTING`
    except along AND/OR chains, which are walked without recursion."""

    def __init__(self) -> None:
        self.depth = 0

    def nested(self, node: exp.Expression, visit: Callable[[exp.Expression], object]) -> object:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise InvalidPredicate(f"the predicate is nested more than {MAX_NESTING} deep")
        try:
            return visit(node)
        finally:
            self.depth -= 1

    def predicate(self, node: exp.Expression) -> Expr:
        result = self.nested(node, self._predicate)
        assert isinstance(result, Expr)
        return result

    def value(self, node: exp.Expression) -> Value:
        result = self.nested(node, self._value)
        assert isinstance(result, Value)
        return result

    def chain(self, node: exp.And | exp.Or) -> Expr:
        kind = type(node)
        operands: list[exp.Expression] = []
        stack: list[exp.Expression] = [node]
        while stack:  # left-deep chains of thousands of terms: no recursion
            item = stack.pop()
            if type(item) is kind:
                stack.append(item.expression)
                stack.append(item.this)
            else:
                operands.append(item)
        combine = And if kind is exp.And else Or
        result = self.predicate(operands[0])
        for operand in operands[1:]:
            result = combine(result, self.predicate(operand))
        return result

    def _predicate(self, node: exp.Expression) -> Expr:
        if isinstance(node, (exp.And, exp.Or)):
            return self.chain(node)
        if isinstance(node, exp.Not):
            return Not(self.predicate(node.this))
        if isinstance(node, exp.Paren):
            return self.predicate(node.this)
        if isinstance(node, exp.Boolean):
            return TRUE if node.this else FALSE
        op = _COMPARE.get(type(node))
        if op is not None:
            return Compare(op, self.value(node.this), self.value(node.expression))
        if isinstance(node, exp.Between):
            if node.args.get("symmetric"):
                raise _unsupported(node)
            return Between(self.value(node.this), self.value(node.args["low"]),
                           self.value(node.args["high"]))
        if isinstance(node, exp.In):
            return self.in_list(node)
        if isinstance(node, exp.Is):
            if not isinstance(node.expression, exp.Null):
                raise UnsupportedExpression(
                    f"IS {node.expression.sql()[:20]} is not supported in a where predicate; "
                    "only IS NULL and IS NOT NULL"
                )
            return IsNull(self.value(node.this))
        if isinstance(node, exp.Escape):
            like = node.this
            if not isinstance(like, (exp.Like, exp.ILike)):
                raise _unsupported(node)
            return self.like(like, _string(node.expression, "the ESCAPE character"))
        if isinstance(node, (exp.Like, exp.ILike)):
            return self.like(node, None)
        # A value where a predicate belongs: a boolean column or expression.
        value = self.value(node)
        if isinstance(value, Literal):
            if value.value is None:
                raise InvalidPredicate("NULL is not a predicate; use IS NULL")
            raise InvalidPredicate(f"{value} is not a predicate")
        return Compare("=", value, Literal(True))

    def in_list(self, node: exp.In) -> Expr:
        if node.args.get("query") is not None or node.args.get("unnest") is not None \
                or node.args.get("field") is not None:
            raise _unsupported(node.args.get("query") or node)
        values: list[Literal] = []
        for item in node.expressions:
            value = self.value(item)
            if not isinstance(value, Literal):
                raise UnsupportedExpression(
                    f"IN lists must hold literal values, got {item.sql()[:60]}"
                )
            values.append(value)
        return In(self.value(node.this), tuple(values))

    def like(self, node: exp.Like | exp.ILike, escape: str | None) -> Expr:
        if node.args.get("escape") is not None:
            escape = _string(node.args["escape"], "the ESCAPE character")
        pattern = _string(node.expression, "a LIKE pattern")
        result: Expr = Like(self.value(node.this), pattern, escape,
                            case_insensitive=isinstance(node, exp.ILike))
        return Not(result) if node.args.get("negate") else result

    def _value(self, node: exp.Expression) -> Value:
        if isinstance(node, exp.Column):
            return _column_path(node)
        if isinstance(node, exp.Dot):
            if not isinstance(node.expression, exp.Identifier):
                raise _unsupported(node)
            return GetField(self.value(node.this), str(node.expression.this))
        if isinstance(node, exp.Bracket):
            return self.subscript(node)
        if isinstance(node, exp.Identifier):
            return Column(str(node.this))
        if isinstance(node, exp.Literal):
            return Literal(str(node.this)) if node.is_string else _number(str(node.this))
        if isinstance(node, exp.Boolean):
            return Literal(bool(node.this))
        if isinstance(node, exp.Null):
            return Literal(None)
        if isinstance(node, exp.Paren):
            return self.value(node.this)
        if isinstance(node, exp.Neg):
            return _negate(self.value(node.this))
        if isinstance(node, exp.Case):
            return self.case(node)
        if isinstance(node, exp.If):
            return self.if_(node)
        everyday = sql_functions.translate(node, self.value)
        if everyday is not None:
            return everyday
        op = _ARITH.get(type(node))
        if op is not None:
            return Arith(op, self.value(node.this), self.value(node.expression))
        if isinstance(node, exp.Cast) and not isinstance(node, exp.TryCast):
            typed = _typed_literal(node)
            if typed is not None:
                return typed
            return Cast(self.value(node.this), node.to.sql(dialect="duckdb"))
        if isinstance(node, exp.Anonymous):
            return Func(str(node.this), tuple(self.value(a) for a in node.expressions))
        mapped = _FUNCS.get(type(node))
        if mapped is not None:
            return self.function(node, *mapped)
        if type(node) in _NAMES:
            raise _unsupported(node)
        if isinstance(node, exp.Func) and not isinstance(node, exp.Predicate | exp.Connector):
            raise UnknownFunction(node.sql_name().lower(), sorted(set(FUNCTIONS) - {"negate"}))
        if isinstance(node, exp.Predicate | exp.Connector | exp.Not):
            raise UnsupportedExpression(
                f"a predicate cannot be used as a value: {node.sql()[:60]}"
            )
        raise _unsupported(node)

    def case(self, node: exp.Case) -> Case:
        """``CASE [x] WHEN ... THEN ... [ELSE ...] END``; the simple form's ``WHEN v``
        is the condition ``x = v`` (never TRUE for ``WHEN NULL``, as in SQL)."""
        subject = node.args.get("this")
        tested = None if subject is None else self.value(subject)
        whens: list[tuple[Expr, Value]] = []
        for branch in node.args.get("ifs") or []:
            if not isinstance(branch, exp.If) or branch.args.get("false") is not None:
                raise _unsupported(node)
            if tested is None:
                condition = self.predicate(branch.this)
            else:
                value = self.value(branch.this)
                null = any(isinstance(v, Literal) and v.value is None for v in (value, tested))
                condition = FALSE if null else Compare("=", tested, value)
            whens.append((condition, self.branch(branch.args["true"])))
        default = node.args.get("default")
        return Case(tuple(whens), Literal(None) if default is None else self.branch(default))

    def if_(self, node: exp.If) -> Case:
        """``IF(p, a, b)`` (and ``IIF``) as ``CASE WHEN p THEN a ELSE b END``."""
        otherwise = node.args.get("false")
        return Case(((self.predicate(node.this), self.branch(node.args["true"])),),
                    Literal(None) if otherwise is None else self.branch(otherwise))

    def branch(self, node: exp.Expression) -> Value:
        """A CASE branch's value; a predicate there (``THEN a > 1``) is the boolean
        it evaluates to: TRUE, FALSE, or NULL where it is neither."""
        while isinstance(node, exp.Paren):
            node = node.this
        if not isinstance(node, exp.Predicate | exp.Connector | exp.Not) \
                or isinstance(node, exp.Case | exp.If):
            return self.value(node)
        test = self.predicate(node)
        return Case(((test, Literal(True)), (Not(test), Literal(False))))

    def subscript(self, node: exp.Bracket) -> Value:
        """``value[key]`` with a literal key.  sqlglot's DuckDB dialect counts list
        subscripts from 1 and shifts an integer key down by one as it parses;
        the key is shifted back, so ``m[1]`` is the key 1 (a list subscript is
        refused when bound: use element_at)."""
        keys = node.expressions
        extra = [k for k, v in node.args.items()
                 if k not in ("this", "expressions") and v not in (None, [], False)]
        if len(keys) != 1 or isinstance(keys[0], exp.Slice) or extra:
            raise UnsupportedExpression(
                f"a subscript takes one literal key: {node.sql(dialect='duckdb')[:60]}")
        key = self.value(keys[0])
        if not isinstance(key, Literal) or key.value is None:
            raise UnsupportedExpression(
                f"a subscript key must be a literal, got {keys[0].sql()[:60]}")
        if isinstance(key.value, int) and not isinstance(key.value, bool):
            key = Literal(key.value + 1)
        return Subscript(self.value(node.this), key)

    def function(self, node: exp.Expression, name: str, keys: tuple[str, ...]) -> Func:
        if isinstance(node, exp.Trim):
            position = node.args.get("position")
            name = _TRIM_POSITION.get(str(position).upper() if position else None, "")
            if not name:
                raise _unsupported(node)
        extra = [k for k, v in node.args.items()
                 if k not in keys and k != "position" and v not in (None, [], False)]
        if extra:
            raise UnsupportedExpression(
                f"{name}() with {', '.join(extra)} is not supported: {node.sql()[:60]}"
            )
        args: list[Value] = []
        for key in keys:
            item = node.args.get(key)
            if isinstance(item, list):
                args.extend(self.value(a) for a in item)
            elif item is not None:
                args.append(self.value(item))
        return Func(name, tuple(args))


def _tree(text: str) -> exp.Expression:
    """The one sqlglot tree of ``text`` (syntax errors, statements and a trailing
    word refused as a predicate's are)."""
    if not text.strip():
        raise _syntax_error(text, len(text), "the predicate is empty")
    try:
        trees = sqlglot.parse(text, dialect=_DIALECT)
    except (ParseError, TokenError) as exc:
        raise _from_parse_error(text, exc) from None
    except RecursionError:
        raise InvalidPredicate(
            f"the predicate is nested more than {MAX_NESTING} deep"
        ) from None
    except Exception as exc:  # sqlglot is third-party: any failure is a syntax error
        raise _syntax_error(text, len(text), str(exc).split("\n")[0][:200]) from None
    trees = [t for t in trees if t is not None]
    if len(trees) != 1:
        raise _syntax_error(text, len(text),
                            "expected one expression" if trees else "the predicate is empty")
    tree = trees[0]
    assert isinstance(tree, exp.Expression)
    if isinstance(tree, exp.Alias):  # "a = 1 extra": sqlglot reads a trailing word as an alias
        extra = tree.alias or "text"
        offset = text.rfind(extra)
        raise _syntax_error(text, offset if offset >= 0 else len(text),
                            f"unexpected {extra!r} after the predicate (a missing AND or OR?)")
    if isinstance(tree, (exp.Query, exp.Command, exp.DDL, exp.DML)):
        raise _unsupported(trees[0])  # type: ignore[arg-type]
    return tree


@lru_cache(maxsize=512)
def _parse_cached(text: str, as_value: bool = False) -> Expr | Value:
    tree = _tree(text)
    try:
        return _Translator().value(tree) if as_value else _Translator().predicate(tree)
    except RecursionError:
        raise InvalidPredicate(
            f"the predicate is nested more than {MAX_NESTING} deep"
        ) from None


def parse_sql_value(text: str) -> Value:
    """Parse SQL value text (``amount * 1.1``, ``'closed'``, ``NULL``,
    ``upper(status)``) into an unbound :class:`Value`: what an UPDATE's ``SET``
    and a MERGE's values take.  Errors as :func:`parse_sql`."""
    if not isinstance(text, str):
        raise InvalidPredicate(f"a SQL value must be a string, got {type(text).__name__}")
    if len(text) > _MAX_TEXT:
        raise InvalidPredicate(f"the value is longer than {_MAX_TEXT} characters")
    value = _parse_cached(text, True)
    assert isinstance(value, Value)
    return value


def parse_sql(text: str) -> Expr:
    """Parse SQL predicate text into an unbound :class:`Expr`.

    Raises :class:`~caslake.errors.InvalidPredicate` (or a subclass) for
    anything that is not a well-formed predicate caslake evaluates.
    """
    if not isinstance(text, str):
        raise InvalidPredicate(f"a where predicate must be a string, got {type(text).__name__}")
    if len(text) > _MAX_TEXT:
        raise InvalidPredicate(f"the predicate is longer than {_MAX_TEXT} characters")
    expr = _parse_cached(text)
    assert isinstance(expr, Expr)
    return expr




