"""A table as a ``pyarrow.dataset.Dataset``, so DuckDB and Polars push projections and
filters into caslake's scan.

Owns :func:`pyarrow_dataset` (the Dataset subclass behind
``Table.to_pyarrow_dataset()``) and :func:`translate_filter`, which turns a
``pyarrow.compute.Expression`` into a caslake predicate.

* **What the engines call.** DuckDB's replacement scan calls
  ``dataset.scanner(columns=[...], filter=<Expression>)`` and reads the scanner;
  ``pl.scan_pyarrow_dataset`` calls ``to_batches(columns=..., filter=...,
  batch_size=...)``; both read ``schema``; others use ``to_table``, ``head`` and
  ``count_rows``.  Each call plans a caslake :class:`~caslake.core.read.scan.Scan`
  of the snapshot pinned when the dataset was made: deleted rows are dropped, the
  projected columns and those the filter names are read, and the translated
  predicate prunes files and row groups and filters rows.
* **Never a wrong answer.** The scan's rows then go through pyarrow's own
  ``Scanner.from_batches(..., columns, filter)``, which applies the original
  filter and projection exactly.  So the translation only has to be implied by
  the filter (every row the filter keeps, it keeps): a part it cannot translate is
  left out of an AND (TRUE in a positive position, FALSE under a NOT), and an
  expression it cannot read at all is no pushdown -- every column read, pyarrow
  filters.
* **Reading the Expression.** pyarrow has no public tree walk, so the
  expression's printed form is parsed (``(a == 2)``, ``((a >= 2) and (b ==
  "x"))``, ``invert(...)``, ``is_null(a, {nan_is_null=false})``, ``is_valid``,
  ``is_in(a, {value_set=int64:[...], ...})``); field names are matched against
  the schema's columns (they are printed unquoted), and a literal is read as the
  type of the column it is compared with.  NaN, infinities, nanoseconds,
  NULL literals and anything else unclear are left to pyarrow.

``pyarrow.dataset`` is imported when the first such dataset is made, never by
``import caslake``.
"""

from __future__ import annotations

import datetime as dt
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc

from caslake.errors import CaslakeError, InvalidArgument
from caslake.expr import Expr, Value, col, compile_where

# --- the printed Expression, parsed ------------------------------------------------------

_INFIX = ("==", "!=", "<=", ">=", "<", ">", "and", "or")
_COMPARE = {"==", "!=", "<=", ">=", "<", ">"}
_CALL = re.compile(r"[a-z_][a-z0-9_]*\(")


@dataclass(frozen=True)
class _Node:
    kind: str  # "field", "lit", "call", "bin", "bool"
    text: str = ""  # a literal's text (strings unescaped), a call's or operator's name
    path: tuple[str, ...] = ()  # a field's
    args: tuple[_Node, ...] = ()
    options: str = ""  # a call's ``{...}``
    quoted: bool = False  # a literal printed in quotes


class _Unreadable(Exception):
    """The printed expression is not in a form this parser knows."""


class _Parser:
    def __init__(self, text: str, columns: Sequence[str]) -> None:
        self.s = text
        self.i = 0
        self.columns = sorted(columns, key=len, reverse=True)  # longest name first

    def parse(self) -> _Node:
        node = self.expr(until=None)
        if self.i != len(self.s):
            raise _Unreadable(self.s[self.i:])
        return node

    def peek(self, token: str) -> bool:
        return self.s.startswith(token, self.i)

    def expect(self, token: str) -> None:
        if not self.peek(token):
            raise _Unreadable(f"expected {token!r} at {self.i}")
        self.i += len(token)

    def expr(self, until: str | None) -> _Node:
        """One operand; ``until`` (``)`` or ``,``): a bare literal runs up to it."""
        s = self.s
        if self.peek("("):
            self.i += 1
            left = self.expr(until=" ")
            self.expect(" ")
            op = next((o for o in _INFIX if self.peek(o + " ")), None)
            if op is None:
                raise _Unreadable(f"no operator at {self.i}")
            self.i += len(op) + 1
            right = self.expr(until=")")
            self.expect(")")
            return _Node("bin", op, args=(left, right))
        if self.peek("FieldRef.Nested("):
            return self.nested()
        if self.peek('"'):
            return _Node("lit", self.quoted(), quoted=True)
        m = _CALL.match(s, self.i)
        if m is not None and s[self.i:m.end() - 1] not in self.columns:
            return self.call(m.end())
        for name in self.columns:
            end = self.i + len(name)
            if s.startswith(name, self.i) and (end == len(s) or s[end] in " ),"):
                self.i = end
                return _Node("field", path=(name,))
        if self.peek("true") or self.peek("false"):
            word = "true" if self.peek("true") else "false"
            end = self.i + len(word)
            if end == len(s) or s[end] in " ),":
                self.i = end
                return _Node("bool", word)
        if until is None or until == " ":
            raise _Unreadable(f"a literal where a field or expression is expected at {self.i}")
        end = s.find(until, self.i)
        if end < 0:
            raise _Unreadable("unterminated literal")
        text, self.i = s[self.i:end], end
        return _Node("lit", text)

    def quoted(self) -> str:
        self.expect('"')
        out: list[str] = []
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c == '"':
                self.i += 1
                return "".join(out)
            if c == "\\":
                nxt = s[self.i + 1:self.i + 2]
                if nxt not in ('"', "\\"):
                    raise _Unreadable("an escape this parser does not know")
                out.append(nxt)
                self.i += 2
                continue
            out.append(c)
            self.i += 1
        raise _Unreadable("unterminated string")

    def call(self, after_paren: int) -> _Node:
        name = self.s[self.i:after_paren - 1]
        self.i = after_paren
        args: list[_Node] = []
        options = ""
        while not self.peek(")"):
            if args or options:
                self.expect(", ")
            if self.peek("{"):
                options = self.braces()
            else:
                args.append(self.expr(until=","))
        self.expect(")")
        return _Node("call", name, args=tuple(args), options=options)

    def braces(self) -> str:
        """A call's options ``{...}``, raw (quotes and nesting respected)."""
        start, depth, s = self.i, 0, self.s
        while self.i < len(s):
            c = s[self.i]
            if c == '"':
                self.quoted()
                continue
            if c in "{[":
                depth += 1
            elif c in "}]":
                depth -= 1
                if depth == 0:
                    self.i += 1
                    return s[start:self.i]
            self.i += 1
        raise _Unreadable("unterminated options")

    def nested(self) -> _Node:
        self.expect("FieldRef.Nested(")
        path: list[str] = []
        while not self.peek(")"):
            if path:
                self.expect(" ")
            self.expect("FieldRef.Name(")
            end = self.s.find(")", self.i)
            if end < 0:
                raise _Unreadable("unterminated field reference")
            path.append(self.s[self.i:end])
            self.i = end + 1
        self.expect(")")
        return _Node("field", path=tuple(path))


# --- literals, read as the column's type ---------------------------------------------------

_INT = re.compile(r"^-?\d+$")
_FLOAT = re.compile(r"^-?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$", re.I)
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_TS = re.compile(r"^(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z)?$")


class _Unknown(Exception):
    """A literal or call whose meaning is not certain: left to pyarrow."""


def _literal(node: _Node, t: pa.DataType) -> Any:
    """The Python value of literal ``node`` compared with a column of type ``t``."""
    if node.kind == "bool" and pa.types.is_boolean(t):
        return node.text == "true"
    if node.kind != "lit":
        raise _Unknown
    text = node.text
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        if node.quoted:
            return text
    elif node.quoted:
        raise _Unknown
    elif pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        if _INT.match(text):
            return int(text)
        if _FLOAT.match(text):
            return Decimal(text) if pa.types.is_decimal(t) else float(text)
    elif pa.types.is_date32(t) and _DATE.match(text):
        return dt.date.fromisoformat(text)
    elif pa.types.is_timestamp(t):
        return _timestamp(text, t)
    raise _Unknown


def _timestamp(text: str, t: pa.TimestampType) -> dt.datetime:
    m = _TS.match(text)
    if m is None or (m.group(4) is not None) != (t.tz is not None):
        raise _Unknown
    frac = m.group(3) or ""
    if len(frac) > 6 and frac[6:].strip("0"):
        raise _Unknown  # finer than a microsecond
    value = dt.datetime.fromisoformat(f"{m.group(1)}T{m.group(2)}.{frac[:6].ljust(6, '0')}")
    return value.replace(tzinfo=dt.UTC) if m.group(4) else value


_VALUE_SET = re.compile(r"^\{value_set=[a-z0-9_\[\], ()=/+:-]+?:\[(.*)\], null_matching_behavior="
                        r"(MATCH|SKIP|EMIT_NULL|INCONCLUSIVE)\}$", re.S | re.I)


def _value_set(options: str, t: pa.DataType) -> list[Any]:
    """The values of an ``is_in`` call's value set (no NULL in it), as type ``t``."""
    m = _VALUE_SET.match(options)
    if m is None:
        raise _Unknown
    items = _Parser(m.group(1).replace("\n", " ").strip(), [])
    values: list[Any] = []
    while items.i < len(items.s):
        if values:
            items.expect(",")
        while items.peek(" "):
            items.i += 1
        if items.peek('"'):
            node = _Node("lit", items.quoted(), quoted=True)
        else:
            end = items.s.find(",", items.i)
            end = len(items.s) if end < 0 else end
            node = _Node("lit", items.s[items.i:end].strip())
            items.i = end
        if node.text == "null" and not node.quoted:
            raise _Unknown  # NULL in the set: pyarrow's matching is not SQL's
        values.append(_literal(node, t))
    return values


# --- translation --------------------------------------------------------------------------

_OPERATORS: dict[str, Callable[[Any, Any], Any]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
    ">": operator.gt, ">=": operator.ge}
_FLIP = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


class _Translator:
    """A parsed expression as a caslake predicate implied by it (see module doc)."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.fields: set[str] = set()

    def field_type(self, node: _Node) -> pa.DataType:
        t: pa.DataType = self.schema.field(node.path[0]).type
        for name in node.path[1:]:
            if not pa.types.is_struct(t):
                raise _Unknown
            t = t.field(name).type  # type: ignore[attr-defined]
        return t

    def column(self, node: _Node) -> Value:
        out: Value = col(node.path[0])
        for name in node.path[1:]:
            out = out.field(name)
        return out

    def collect(self, node: _Node) -> None:
        """Every column ``node`` names."""
        if node.kind == "field":
            self.fields.add(node.path[0])
        for a in node.args:
            self.collect(a)

    def translate(self, node: _Node, positive: bool) -> Expr | bool:
        """A predicate implied by ``node`` (``positive``), or implying it (under a
        NOT); True / False: no condition / no row."""
        try:
            return self._translate(node, positive)
        except (_Unknown, CaslakeError, KeyError, ValueError, InvalidOperation):
            return positive  # unknown: TRUE where it is ANDed in, FALSE under a NOT

    def _translate(self, node: _Node, positive: bool) -> Expr | bool:
        if node.kind == "bool":
            return node.text == "true"
        if node.kind == "bin" and node.text in ("and", "or"):
            left = self.translate(node.args[0], positive)
            right = self.translate(node.args[1], positive)
            return _combine(node.text, left, right)
        if node.kind == "bin":
            return self.compare(node)
        if node.kind == "call" and node.text == "invert" and len(node.args) == 1:
            inner = self.translate(node.args[0], not positive)
            return (not inner) if isinstance(inner, bool) else ~inner
        if node.kind == "call" and len(node.args) == 1 and node.args[0].kind == "field":
            target = self.column(node.args[0])
            if node.text == "is_valid":
                return self.checked(target.is_not_null())
            if node.text == "is_null" and node.options == "{nan_is_null=false}":
                return self.checked(target.is_null())
            if node.text == "is_in" and positive:  # NULL is no member, as SQL's IN
                return self.checked(target.isin(
                    _value_set(node.options, self.field_type(node.args[0]))))
        raise _Unknown

    def checked(self, leaf: Expr) -> Expr:
        """``leaf``, once it binds to the schema (else CaslakeError: unknown)."""
        compile_where(leaf, self.schema)
        return leaf

    def compare(self, node: _Node) -> Expr:
        left, right = node.args
        op = node.text
        if left.kind != "field":
            left, right, op = right, left, _FLIP[op]
        if left.kind != "field" or op not in _COMPARE:
            raise _Unknown
        target = self.column(left)
        if right.kind == "field":
            other: Any = self.column(right)
        else:
            other = _literal(right, self.field_type(left))
            if (isinstance(other, float) and other != other) or other in (
                    float("inf"), float("-inf")):
                raise _Unknown
        return self.checked(_OPERATORS[op](target, other))


def _combine(op: str, left: Expr | bool, right: Expr | bool) -> Expr | bool:
    """``left AND right`` / ``left OR right``, the constants folded away."""
    absorbing = op == "or"  # FALSE absorbs an AND, TRUE an OR; the other is neutral
    if left is absorbing or right is absorbing:
        return absorbing
    if isinstance(left, bool):
        return right
    if isinstance(right, bool):
        return left
    return left & right if op == "and" else left | right


@dataclass(frozen=True)
class Translation:
    """A pyarrow filter as caslake sees it: the predicate pushed into the scan
    (None: none) and the columns the filter names (None: unknown, read every one)."""

    where: Expr | None
    columns: frozenset[str] | None


def translate_filter(expression: Any, schema: pa.Schema) -> Translation:
    """``expression`` (a ``pyarrow.compute.Expression`` or None) as a caslake predicate
    that every row it keeps satisfies, checked against ``schema``."""
    if expression is None:
        return Translation(None, frozenset())
    if not isinstance(expression, pc.Expression):
        raise InvalidArgument(f"filter must be a pyarrow.compute.Expression, not "
                              f"{type(expression).__name__}")
    try:
        tree = _Parser(str(expression), schema.names).parse()
    except _Unreadable:
        return Translation(None, None)
    tr = _Translator(schema)
    tr.collect(tree)
    where = tr.translate(tree, True)
    if isinstance(where, bool):
        return Translation(None, frozenset(tr.fields))  # FALSE: pyarrow's filter says so
    try:
        compile_where(where, schema)
    except CaslakeError:
        return Translation(None, frozenset(tr.fields))
    return Translation(where, frozenset(tr.fields))


# --- the Dataset ------------------------------------------------------------------------

COUNT_BATCH_ROWS = 1 << 20


def _row_count_reader(rows: int) -> pa.RecordBatchReader:
    """``rows`` rows of no column (``select count(*)``: the manifest's count)."""
    sizes = [COUNT_BATCH_ROWS] * (rows // COUNT_BATCH_ROWS) + [rows % COUNT_BATCH_ROWS]
    empty = pa.schema([])
    batches = (pa.RecordBatch.from_struct_array(
        cast(Any, pa.Array.from_buffers(pa.struct([]), n, [None]))) for n in sizes if n)
    return pa.RecordBatchReader.from_batches(empty, batches)


OpenScan = Callable[[list[str] | None, Expr | None], Any]  # (columns, where) -> Scan
_CLASS: list[type] = []


def pyarrow_dataset(open_scan: OpenScan, schema: pa.Schema, describe: str) -> Any:
    """A ``pyarrow.dataset.Dataset`` over the scans ``open_scan(columns, where)``
    plans (of one pinned snapshot whose schema is ``schema``)."""
    if not _CLASS:
        _CLASS.append(_dataset_class())
    return _CLASS[0](open_scan, schema, describe)


def _dataset_class() -> type:
    import pyarrow.dataset as pads

    base: Any = pads.Dataset  # overridden loosely: the engines pass keywords through

    class CaslakeDataset(base):  # type: ignore[misc]
        """A caslake table at one version, as pyarrow, DuckDB and Polars read a
        dataset: ``scanner``, ``to_batches``, ``to_table``, ``head``,
        ``count_rows`` and ``schema`` (see :mod:`caslake.core.read.pyarrow_dataset`)."""

        def __init__(self, open_scan: OpenScan, schema: pa.Schema, describe: str) -> None:
            # pyarrow's own constructor is not called: every method it would
            # serve from a C++ dataset is defined here.
            self._open_scan = open_scan
            self._schema = schema
            self._describe = describe

        def __repr__(self) -> str:
            return f"<caslake dataset {self._describe}>"

        @property
        def schema(self) -> pa.Schema:
            return self._schema

        @property
        def partition_expression(self) -> Any:
            return pc.scalar(True)

        def _scan(self, columns: Any, filter: Any) -> tuple[Any, Translation]:
            tr = translate_filter(filter, self._schema)
            if columns is None or tr.columns is None:
                read = None
            elif isinstance(columns, list | tuple) and all(isinstance(c, str) for c in columns):
                wanted = set(columns) | tr.columns
                read = [n for n in self._schema.names if n in wanted]
            else:  # a {name: expression} projection: pyarrow computes it from every column
                read = None
            return self._open_scan(read, tr.where), tr

        def scanner(self, columns: Any = None, filter: Any = None, **kwargs: Any) -> Any:
            """A pyarrow Scanner of the rows ``filter`` keeps, projected to
            ``columns``: caslake reads and prunes, pyarrow applies the filter exactly."""
            if filter is None and isinstance(columns, list | tuple) and not columns:
                reader = _row_count_reader(self._open_scan(None, None).count())
            else:
                reader = self._scan(columns, filter)[0].to_reader()
            options = {k: v for k, v in kwargs.items() if k in ("batch_size", "use_threads")}
            try:
                return pads.Scanner.from_batches(reader, columns=columns, filter=filter,
                                                 **options)
            except (pa.ArrowInvalid, pa.ArrowKeyError, pa.ArrowTypeError,
                    pa.ArrowNotImplementedError, TypeError) as e:
                reader.close()
                raise InvalidArgument(f"pyarrow cannot apply filter {filter} / columns "
                                      f"{columns!r} to {self._describe}: {e}") from None

        def to_batches(self, **kwargs: Any) -> Any:
            return self.scanner(**kwargs).to_batches()

        def to_table(self, **kwargs: Any) -> pa.Table:
            out: pa.Table = self.scanner(**kwargs).to_table()
            return out

        def head(self, num_rows: int, columns: Any = None, filter: Any = None,
                 **kwargs: Any) -> pa.Table:
            if filter is None and (columns is None or isinstance(columns, list)):
                # no filter: the scan stops after the row group that completes them
                out: pa.Table = self._open_scan(columns, None).limit(num_rows).to_arrow()
                return out
            out = self.scanner(columns=columns, filter=filter, **kwargs).head(num_rows)
            return out

        def count_rows(self, filter: Any = None, **kwargs: Any) -> int:
            if filter is None:
                return int(self._open_scan(None, None).count())  # from the manifest
            return int(self.scanner(columns=[], filter=filter, **kwargs).count_rows())

        def _unsupported(self, *args: Any, **kwargs: Any) -> Any:
            raise InvalidArgument("a caslake dataset supports scanner, to_batches, to_table, "
                                  "head, count_rows and schema; read it with to_table() "
                                  "first for anything else")

        take = filter = sort_by = join = join_asof = get_fragments = _unsupported
        replace_schema = _unsupported

    return CaslakeDataset
