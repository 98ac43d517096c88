"""The ``where`` SQL dialect: a hand-written tokenizer and recursive-descent parser.

This module owns turning predicate text into an unbound
:class:`~caslake.expr.nodes.Expr`.  It never looks at a schema (binding does
that) and never raises anything but :class:`~caslake.errors.InvalidPredicate`,
whose message carries the 1-based character position and an excerpt of the
text at the offending token, e.g.
``malformed where at position 11 near "AND b = 2": expected a value``.

Grammar (keywords are case-insensitive; precedence NOT > AND > OR)::

    predicate  := or_expr EOF
    or_expr    := and_expr ("OR" and_expr)*
    and_expr   := not_expr ("AND" not_expr)*
    not_expr   := "NOT"* primary
    primary    := "(" or_expr ")" | "TRUE" | "FALSE" | test
    test       := column                              -- a boolean column: column = TRUE
                | operand cmp_op operand              -- one side a column
                | column ["NOT"] "BETWEEN" value "AND" value
                | column ["NOT"] "IN" "(" value ("," value)* ")"
                | column "IS" ["NOT"] "NULL"
    cmp_op     := "=" | "==" | "!=" | "<>" | "<" | "<=" | ">" | ">="
    operand    := column | value
    column     := bare identifier [A-Za-z_][A-Za-z0-9_]* (not a reserved word)
                | '"' any text, "" for a quote '"'
    value      := integer | float | 'string' ('' for a quote) | TRUE | FALSE
                | NULL | DATE 'YYYY-MM-DD'
                | TIMESTAMP 'YYYY-MM-DD[ T]HH:MM:SS[.ffffff][Z|+HH:MM]'

Identifiers are case-sensitive.  ``DATE`` and ``TIMESTAMP`` are keywords only
when a string follows, so a column may be called ``date``.  NULL is accepted by
the tokenizer but rejected wherever it is used as a comparison operand, a
BETWEEN bound or an IN element, with a hint to use IS NULL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from caslake.errors import InvalidPredicate
from caslake.expr._iso import parse_date, parse_timestamp
from caslake.expr.nodes import (
    RESERVED_WORDS,
    And,
    Between,
    Column,
    Compare,
    Const,
    Expr,
    In,
    IsNull,
    Literal,
    Not,
    Or,
)

__all__ = ["MAX_NESTING", "parse_sql"]

#: Deepest parenthesis / NOT nesting accepted; deeper input is rejected (it is
#: never hand-written and would otherwise exhaust the Python stack).
MAX_NESTING: Final = 100

_NUMBER: Final = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_IDENT_START: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_IDENT_CHARS: Final = _IDENT_START | frozenset("0123456789")
_TWO_CHAR_OPS: Final = {"<=": "<=", ">=": ">=", "<>": "!=", "!=": "!=", "==": "="}
_ONE_CHAR_OPS: Final = {"=": "=", "<": "<", ">": ">"}
_EXCERPT: Final = 24


@dataclass(frozen=True)
class _Token:
    kind: str  # ident | qident | kw | num | str | op | ( | ) | , | eof
    pos: int  # 0-based offset of the first character
    text: str  # the source text of the token
    value: object  # name / upper-case keyword / number / string / canonical op


def _fail(text: str, pos: int, message: str) -> InvalidPredicate:
    if pos >= len(text):
        where = f"at position {len(text) + 1} (end of input)"
    else:
        excerpt = text[pos:pos + _EXCERPT]
        excerpt = "".join(c if c.isprintable() else " " for c in excerpt)
        if pos + _EXCERPT < len(text):
            excerpt += "..."
        where = f'at position {pos + 1} near "{excerpt}"'
    return InvalidPredicate(f"malformed where {where}: {message}")


def _describe(token: _Token) -> str:
    if token.kind == "eof":
        return "the end of the predicate"
    shown = token.text if len(token.text) <= 30 else token.text[:30] + "..."
    return repr(shown)


def _scan_quoted(text: str, start: int, quote: str) -> tuple[str, int]:
    """The unescaped body of the quoted run opening at ``start`` and the offset after it."""
    parts: list[str] = []
    i = start + 1
    while True:
        end = text.find(quote, i)
        if end < 0:
            what = "string" if quote == "'" else "quoted identifier"
            raise _fail(text, start, f"unterminated {what}: no closing {quote}")
        parts.append(text[i:end])
        if text.startswith(quote, end + 1):  # doubled quote: an escaped quote
            parts.append(quote)
            i = end + 2
            continue
        return "".join(parts), end + 1


def _number(text: str, start: int) -> tuple[_Token, int]:
    match = _NUMBER.match(text, start)
    if match is None:
        raise _fail(text, start, f"unexpected character {text[start]!r}")
    end = match.end()
    if end < len(text) and (text[end] in _IDENT_CHARS or text[end] == "."):
        raise _fail(text, start, f"malformed number {text[start:end + 1]!r}")
    raw = match.group()
    value: int | float
    if any(c in raw for c in ".eE"):
        value = float(raw)
        if value in (float("inf"), float("-inf")):
            raise _fail(text, start, f"number {raw!r} is out of range for a float")
    else:
        try:
            value = int(raw)
        except ValueError:  # more digits than int() accepts
            raise _fail(text, start, f"number {raw[:20]!r}... has too many digits") from None
    return _Token("num", start, raw, value), end


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in "(),":
            tokens.append(_Token(ch, i, ch, ch))
            i += 1
        elif text[i:i + 2] in _TWO_CHAR_OPS:
            tokens.append(_Token("op", i, text[i:i + 2], _TWO_CHAR_OPS[text[i:i + 2]]))
            i += 2
        elif ch in _ONE_CHAR_OPS:
            tokens.append(_Token("op", i, ch, _ONE_CHAR_OPS[ch]))
            i += 1
        elif ch == "'":
            body, end = _scan_quoted(text, i, "'")
            tokens.append(_Token("str", i, text[i:end], body))
            i = end
        elif ch == '"':
            body, end = _scan_quoted(text, i, '"')
            if not body:
                raise _fail(text, i, 'empty quoted identifier ""')
            tokens.append(_Token("qident", i, text[i:end], body))
            i = end
        elif ch in _IDENT_START:
            end = i + 1
            while end < n and text[end] in _IDENT_CHARS:
                end += 1
            word = text[i:end]
            if word.upper() in RESERVED_WORDS:
                tokens.append(_Token("kw", i, word, word.upper()))
            else:
                tokens.append(_Token("ident", i, word, word))
            i = end
        elif ch in "+-." or ch in "0123456789":
            token, i = _number(text, i)
            tokens.append(token)
        else:
            raise _fail(text, i, f"unexpected character {ch!r}")
    tokens.append(_Token("eof", n, "", None))
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.index = 0
        self.depth = 0

    # -- token helpers --------------------------------------------------------

    def peek(self, ahead: int = 0) -> _Token:
        return self.tokens[min(self.index + ahead, len(self.tokens) - 1)]

    def advance(self) -> _Token:
        token = self.peek()
        if token.kind != "eof":
            self.index += 1
        return token

    def is_kw(self, word: str, ahead: int = 0) -> bool:
        token = self.peek(ahead)
        return token.kind == "kw" and token.value == word

    def error(self, token: _Token, message: str) -> InvalidPredicate:
        return _fail(self.text, token.pos, message)

    def expect_kw(self, word: str, context: str) -> _Token:
        token = self.peek()
        if not self.is_kw(word):
            raise self.error(token, f"expected {word} {context}, found {_describe(token)}")
        return self.advance()

    def is_typed_literal(self, ahead: int = 0) -> bool:
        token = self.peek(ahead)
        return (token.kind == "ident" and str(token.value).upper() in ("DATE", "TIMESTAMP")
                and self.peek(ahead + 1).kind == "str")

    # -- grammar --------------------------------------------------------------

    def parse(self) -> Expr:
        if self.peek().kind == "eof":
            raise self.error(self.peek(), "the predicate is empty")
        expr = self.parse_or()
        token = self.peek()
        if token.kind == ")":
            raise self.error(token, "unbalanced ')': no '(' to close")
        if token.kind != "eof":
            raise self.error(
                token, f"expected AND, OR or the end of the predicate, found {_describe(token)}"
            )
        return expr

    def parse_or(self) -> Expr:
        left = self.parse_and()
        while self.is_kw("OR"):
            self.advance()
            left = Or(left, self.parse_and())
        return left

    def parse_and(self) -> Expr:
        left = self.parse_not()
        while self.is_kw("AND"):
            self.advance()
            left = And(left, self.parse_not())
        return left

    def parse_not(self) -> Expr:
        nots = 0
        while self.is_kw("NOT"):
            token = self.advance()
            nots += 1
            if nots > MAX_NESTING:
                raise self.error(token, f"more than {MAX_NESTING} nested NOTs")
        expr = self.parse_primary()
        for _ in range(nots):
            expr = Not(expr)
        return expr

    def parse_primary(self) -> Expr:
        token = self.peek()
        if token.kind == "(":
            self.depth += 1
            if self.depth > MAX_NESTING:
                raise self.error(token, f"parentheses nested more than {MAX_NESTING} deep")
            self.advance()
            expr = self.parse_or()
            closing = self.peek()
            if closing.kind != ")":
                raise self.error(
                    closing,
                    f"expected ')' to close the '(' at position {token.pos + 1}, "
                    f"found {_describe(closing)}",
                )
            self.advance()
            self.depth -= 1
            return expr
        if token.kind == "kw" and token.value in ("TRUE", "FALSE"):
            follower = self.peek(1)
            if follower.kind != "op" and not (
                follower.kind == "kw" and follower.value in ("IS", "IN", "BETWEEN", "NOT")
            ):
                self.advance()
                return Const(token.value == "TRUE")
        return self.parse_test()

    def parse_test(self) -> Expr:
        left_token = self.peek()
        left = self.parse_operand()
        token = self.peek()
        if token.kind == "op":
            self.advance()
            right_token = self.peek()
            right = self.parse_operand()
            return self.make_compare(str(token.value), left, left_token, right, right_token)
        if self.is_kw("IS"):
            column = self.need_column(left, left_token, "IS NULL")
            self.advance()
            negated = self.is_kw("NOT")
            if negated:
                self.advance()
            self.expect_kw("NULL", "after IS NOT" if negated else "after IS")
            return Not(IsNull(column)) if negated else IsNull(column)
        negated = False
        if self.is_kw("NOT"):
            negated = True
            if not (self.is_kw("BETWEEN", 1) or self.is_kw("IN", 1)):
                found = _describe(self.peek(1))
                raise self.error(self.peek(1), f"expected BETWEEN or IN after NOT, found {found}")
            self.advance()
        if self.is_kw("BETWEEN"):
            column = self.need_column(left, left_token, "BETWEEN")
            self.advance()
            low = self.parse_value("a BETWEEN")
            self.expect_kw("AND", "between the BETWEEN bounds")
            high = self.parse_value("a BETWEEN")
            between = Between(column, low, high)
            return Not(between) if negated else between
        if self.is_kw("IN"):
            column = self.need_column(left, left_token, "IN")
            self.advance()
            opening = self.peek()
            if opening.kind != "(":
                raise self.error(opening, f"expected '(' after IN, found {_describe(opening)}")
            self.advance()
            values = [self.parse_value("an IN list")]
            while self.peek().kind == ",":
                self.advance()
                values.append(self.parse_value("an IN list"))
            closing = self.peek()
            if closing.kind != ")":
                raise self.error(
                    closing, f"expected ',' or ')' in the IN list, found {_describe(closing)}"
                )
            self.advance()
            in_expr = In(column, tuple(values))
            return Not(in_expr) if negated else in_expr
        if isinstance(left, Column) and (
            token.kind in ("eof", ")") or (token.kind == "kw" and token.value in ("AND", "OR"))
        ):
            return Compare("=", left, Literal(True))  # a bare boolean column
        if isinstance(left, Column):
            raise self.error(
                token,
                f"expected a comparison operator, IS, IN or BETWEEN after column "
                f"{left.name!r}, found {_describe(token)}",
            )
        raise self.error(token, f"expected a comparison operator, found {_describe(token)}")

    def need_column(self, operand: Column | Literal, token: _Token, what: str) -> Column:
        if not isinstance(operand, Column):
            raise self.error(token, f"{what} needs a column on its left, found {_describe(token)}")
        return operand

    def make_compare(self, op: str, left: Column | Literal, left_token: _Token,
                     right: Column | Literal, right_token: _Token) -> Compare:
        for operand, token in ((left, left_token), (right, right_token)):
            if isinstance(operand, Literal) and operand.value is None:
                raise self.error(
                    token,
                    f"comparing with NULL using {op} is never true; "
                    "use IS NULL or IS NOT NULL",
                )
        if isinstance(left, Column) and isinstance(right, Column):
            raise self.error(right_token, "comparing two columns is not supported")
        if isinstance(left, Literal) and isinstance(right, Literal):
            raise self.error(left_token, "a comparison needs a column on one side")
        return Compare(op, left, right)  # type: ignore[arg-type]  # Compare normalises sides

    def parse_operand(self) -> Column | Literal:
        token = self.peek()
        if token.kind == "qident" or (token.kind == "ident" and not self.is_typed_literal()):
            self.advance()
            return Column(str(token.value))
        return self.parse_value("a comparison")

    def parse_value(self, context: str) -> Literal:
        token = self.peek()
        if token.kind in ("num", "str"):
            self.advance()
            return self.literal(token, token.value)
        if token.kind == "kw" and token.value in ("TRUE", "FALSE", "NULL"):
            self.advance()
            value = None if token.value == "NULL" else token.value == "TRUE"
            if value is None and context != "a comparison":
                hint = ("NULL in an IN list never matches; use IS NULL"
                        if context == "an IN list"
                        else "a BETWEEN bound cannot be NULL")
                raise self.error(token, hint)
            return Literal(value)
        if self.is_typed_literal():
            keyword = str(token.value).upper()
            self.advance()
            body_token = self.advance()
            body = str(body_token.value)
            if keyword == "DATE":
                parsed_date = parse_date(body)
                if parsed_date is None:
                    raise self.error(
                        body_token, f"invalid DATE literal {body_token.text}: expected 'YYYY-MM-DD'"
                    )
                return Literal(parsed_date)
            parsed = parse_timestamp(body)
            if parsed is None:
                raise self.error(
                    body_token,
                    f"invalid TIMESTAMP literal {body_token.text}: expected "
                    "'YYYY-MM-DD HH:MM:SS[.ffffff][+HH:MM|Z]'",
                )
            return Literal(parsed)
        if token.kind in ("ident", "qident"):
            raise self.error(
                token, f"expected a value in {context}, found column {str(token.value)!r}"
            )
        raise self.error(token, f"expected a value, found {_describe(token)}")

    def literal(self, token: _Token, value: object) -> Literal:
        try:
            return Literal(value)  # type: ignore[arg-type]
        except InvalidPredicate as exc:  # pragma: no cover - tokens only carry valid types
            raise self.error(token, str(exc)) from None


def parse_sql(text: str) -> Expr:
    """Parse a SQL ``where`` predicate into an unbound :class:`Expr`.

    Raises :class:`~caslake.errors.InvalidPredicate` (with the position of the
    offending token) for any text that is not a predicate of the dialect.
    """
    if not isinstance(text, str):
        raise InvalidPredicate(
            f"a SQL predicate must be a string, got {type(text).__name__}"
        )
    try:
        return _Parser(text).parse()
    except RecursionError:  # pragma: no cover - nesting is bounded above
        raise InvalidPredicate("malformed where: the predicate is nested too deeply") from None
