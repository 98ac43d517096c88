"""The text form of a column type, nested ones included, as ``--schema`` and
``add_column("tags", "list<string>")`` take it.

Owns: :func:`parse_type` (text -> Arrow type) and :func:`type_text` (Arrow type ->
text), inverse of each other on every type a table holds, and :func:`sql_text`
(Arrow type -> DuckDB DDL), which :func:`parse_type` also reads back.  A primitive
is its type string (docs/format.md, "Schema": ``int64``, ``decimal128(10, 2)``,
``timestamp[us, tz=UTC]``) or a DuckDB / Spark SQL name, in any case (``bigint``,
``double``, ``decimal(7,2)``, ``varchar``, ``timestamptz``: :data:`SQL_NAMES`);
nested types are ``list<T>`` (or ``array<T>``, DuckDB's ``T[]``),
``struct<name:T,...>`` (or ``struct<name T,...>``, DuckDB's ``struct(name T, ...)``)
and ``map<K,V>`` (or DuckDB's ``map(K, V)``), to any depth.  Where the engines
disagree the SQL standard and DuckDB win: ``timestamp`` has no time zone (Spark's
is ``timestamp_ltz``, an instant: write ``timestamptz``), and a bare ``decimal`` is
refused (DuckDB reads it as decimal(18,3), Spark as decimal(10,0)).  Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa

from caslake.errors import InvalidArgument
from caslake.format.schema import type_from_str, type_to_str

# pyarrow-stubs type the nested constructors narrower than pyarrow accepts.
_pa: Any = pa
_OPEN, _CLOSE = "([<", ")]>"

_US_UTC = pa.timestamp("us", tz="UTC")
# DuckDB and Spark SQL names of primitive types (lower case, inner spaces single)
SQL_NAMES: dict[str, pa.DataType] = {
    **dict.fromkeys(("bigint", "long"), pa.int64()),
    **dict.fromkeys(("integer", "int", "int4", "signed"), pa.int32()),
    **dict.fromkeys(("smallint", "short", "int2"), pa.int16()),
    **dict.fromkeys(("tinyint", "byte", "int1"), pa.int8()),
    "ubigint": pa.uint64(), "uinteger": pa.uint32(), "usmallint": pa.uint16(),
    "utinyint": pa.uint8(),
    **dict.fromkeys(("double", "float8", "double precision"), pa.float64()),
    **dict.fromkeys(("float", "real", "float4"), pa.float32()),
    "boolean": pa.bool_(), "date": pa.date32(),
    **dict.fromkeys(("varchar", "text", "char", "bpchar"), pa.string()),
    **dict.fromkeys(("blob", "bytea", "varbinary"), pa.binary()),
    **dict.fromkeys(("timestamp", "timestamp_ntz", "datetime", "timestamp_us",
                     "timestamp without time zone"), pa.timestamp("us")),
    "timestamp_s": pa.timestamp("s"), "timestamp_ms": pa.timestamp("ms"),
    "timestamp_ns": pa.timestamp("ns"),
    **dict.fromkeys(("timestamptz", "timestamp_ltz", "timestamp with time zone"), _US_UTC),
    "time": pa.time64("us"),
}
_SQL_DECIMAL = re.compile(r"^(?:decimal|numeric|dec)\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)$")
VALID_NAMES = ("Arrow: bool, int8..int64, uint8..uint64, float16/32/64, string, binary, "
               "date32, date64, decimal128(p, s), timestamp[us] or [s|ms|ns, tz=UTC], "
               "time64[us], fixed_size_binary[n], uuid; SQL: bigint, integer/int, smallint, "
               "tinyint, double, float/real, boolean, date, decimal(p,s)/numeric(p,s), "
               "varchar/string/text, binary/blob, timestamp/timestamp_ntz, "
               "timestamptz/timestamp_ltz, time, uuid; nested: list<T>/array<T>/T[], "
               "struct<name:T,...>, map<K,V>")


def parse_type(text: str, path: str = "") -> pa.DataType:
    """The Arrow type written as ``text``; InvalidArgument naming ``path`` (the
    column, or the nested field, the type is for) when it is not one."""
    parser = _Parser(text, path)
    t = parser.type(path)
    parser.end()
    return t


def type_text(t: pa.DataType) -> str:
    """The text :func:`parse_type` reads back as ``t``."""
    if pa.types.is_struct(t):
        return "struct<" + ",".join(f"{f.name}:{type_text(f.type)}" for f in t) + ">"
    if (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
            or pa.types.is_list_view(t) or pa.types.is_large_list_view(t)):
        return f"list<{type_text(t.value_type)}>"
    if pa.types.is_map(t):
        return f"map<{type_text(t.key_type)},{type_text(t.item_type)}>"
    return type_to_str(t)


class _Parser:
    """Recursive descent over ``text``; ``pos`` is the next character to read."""

    def __init__(self, text: str, path: str) -> None:
        self.text = text
        self.pos = 0
        self.path = path

    def error(self, what: str, path: str) -> InvalidArgument:
        where = f" for {path!r}" if path else ""
        return InvalidArgument(f"cannot read the type {self.text!r}{where}: {what} (valid "
                               f"types: {VALID_NAMES})")

    def skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def expect(self, ch: str, path: str) -> None:
        self.skip()
        if not self.text.startswith(ch, self.pos):
            got = self.text[self.pos:self.pos + 10] or "the end"
            raise self.error(f"expected {ch!r} at position {self.pos}, found {got!r}", path)
        self.pos += 1

    def end(self) -> None:
        self.skip()
        if self.pos != len(self.text):
            raise self.error(f"unexpected {self.text[self.pos:]!r}", self.path)

    def word(self) -> str:
        """Up to the next ``<``, or a ``,``/``>``/``:`` outside brackets: a primitive
        type (which may hold ``(10, 2)`` or ``[us, tz=UTC]``) or a nested type's name."""
        self.skip()
        depth, start = 0, self.pos
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if depth == 0 and (ch in ",>:" or ch == "<"):
                break
            if ch in "([":
                depth += 1
            elif ch in ")]":
                depth -= 1
            self.pos += 1
        return self.text[start:self.pos].strip()

    def type(self, path: str, word: str | None = None) -> pa.DataType:
        """The type at ``pos`` (``word``: its first word, already read)."""
        word = self.word() if word is None else word
        self.skip()
        if self.pos < len(self.text) and self.text[self.pos] == "<":
            self.pos += 1
            return self.nested(word.lower(), path)
        if not word:
            raise self.error(f"a type is missing at position {self.pos}", path)
        if word.lower() in ("list", "array", "struct", "map"):
            raise self.error(f"{word} needs its parts in <...>", path)
        found = primitive_or_sql(word, path)
        if found is None and " ".join(word.lower().split()) in ("decimal", "numeric", "dec"):
            raise self.error(f"write {word}(p,s): DuckDB reads a bare {word} as decimal(18,3), "
                             "Spark as decimal(10,0)", path)
        if found is None and self.path and word.strip() == self.text.strip():
            raise InvalidArgument(f"unknown type {word!r} for column {path!r} (valid types: "
                                  f"{VALID_NAMES})")
        if found is None:
            raise self.error(f"unknown type {word!r}", path)
        return found

    def nested(self, kind: str, path: str) -> pa.DataType:
        if kind in ("list", "array"):
            element = self.type(f"{path}.element")
            self.expect(">", path)
            return pa.list_(element)
        if kind == "map":
            key = self.type(f"{path}.key")
            self.expect(",", path)
            value = self.type(f"{path}.value")
            self.expect(">", path)
            out: pa.DataType = _pa.map_(key, value)
            return out
        if kind == "struct":
            return pa.struct(self.struct_fields(path))
        raise self.error(f"unknown nested type {kind!r} (list, struct or map)", path)

    def struct_fields(self, path: str) -> list[pa.Field[Any]]:
        fields: list[pa.Field[Any]] = []
        while True:
            name = self.word()
            if not name:
                raise self.error("a struct field needs a name (struct<name:type,...>)", path)
            if name in (f.name for f in fields):
                raise self.error(f"struct field {name!r} twice", path)
            self.skip()
            first = None
            if self.text.startswith(":", self.pos):
                self.pos += 1
            elif len(name.split(None, 1)) == 2:  # Spark's and DuckDB's ``name type``
                name, first = name.split(None, 1)
            else:
                self.expect(":", f"{path}.{name}")
            fields.append(pa.field(name, self.type(f"{path}.{name}", first)))
            self.skip()
            if self.text.startswith(">", self.pos):
                self.pos += 1
                return fields
            self.expect(",", path)


# --- SQL (DuckDB and Spark) spellings --------------------------------------------------


def primitive_or_sql(word: str, path: str) -> pa.DataType | None:
    """The type a word without ``<...>`` names: an Arrow type string, a SQL name
    (:data:`SQL_NAMES`, any case), ``decimal(p,s)``, or DuckDB's ``T[]``,
    ``struct(name T, ...)`` and ``map(K, V)``; None if it names none."""
    try:
        return type_from_str(word)
    except ValueError:
        pass
    low = " ".join(word.lower().split())
    if low in SQL_NAMES:
        return SQL_NAMES[low]
    if low.endswith("[]"):
        return pa.list_(parse_type(word.rstrip()[:-2], f"{path}.element"))
    m = _SQL_DECIMAL.match(low)
    if m:
        precision, scale = int(m.group(1)), int(m.group(2) or 0)
        return (pa.decimal128 if precision <= 38 else pa.decimal256)(precision, scale)
    inner = word.strip()[word.strip().find("(") + 1:-1]
    if low.startswith(("struct(", "struct (")) and low.endswith(")"):
        return pa.struct([_sql_struct_field(part, path) for part in _split_top(inner)])
    if low.startswith(("map(", "map (")) and low.endswith(")"):
        parts = _split_top(inner)
        if len(parts) == 2:
            out: pa.DataType = _pa.map_(parse_type(parts[0], f"{path}.key"),
                                        parse_type(parts[1], f"{path}.value"))
            return out
    if "tz=" not in word and low != word:
        try:
            return type_from_str(low)  # INT64, DECIMAL128(10, 2)
        except ValueError:
            pass
    return None


def _sql_struct_field(text: str, path: str) -> pa.Field[Any]:
    """``name T`` (or ``"na me" T``) of DuckDB's ``struct(...)``."""
    name, rest = sql_unquote(text)
    if not name or not rest.strip():
        raise InvalidArgument(f"a struct field {text!r} at {path!r} must look like 'name type' "
                              f"(valid types: {VALID_NAMES})")
    return pa.field(name, parse_type(rest.strip(), f"{path}.{name}"))


def _split_top(text: str) -> list[str]:
    """``text`` split on the commas outside brackets and double quotes."""
    parts, depth, start, quoted = [], 0, 0, False
    for i, ch in enumerate(text):
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch in _OPEN:
            depth += 1
        elif not quoted and ch in _CLOSE:
            depth -= 1
        elif ch == "," and depth == 0 and not quoted:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


_SQL_OF = {pa.int64(): "BIGINT", pa.int32(): "INTEGER", pa.int16(): "SMALLINT",
           pa.int8(): "TINYINT", pa.uint64(): "UBIGINT", pa.uint32(): "UINTEGER",
           pa.uint16(): "USMALLINT", pa.uint8(): "UTINYINT", pa.float64(): "DOUBLE",
           pa.float32(): "FLOAT", pa.bool_(): "BOOLEAN", pa.string(): "VARCHAR",
           pa.large_string(): "VARCHAR", pa.binary(): "BLOB", pa.large_binary(): "BLOB",
           pa.date32(): "DATE", pa.time64("us"): "TIME", pa.uuid(): "UUID"}
_SQL_TS = {"s": "TIMESTAMP_S", "ms": "TIMESTAMP_MS", "us": "TIMESTAMP", "ns": "TIMESTAMP_NS"}


def sql_text(t: pa.DataType) -> str:
    """``t`` in DuckDB's DDL (``BIGINT``, ``DECIMAL(10,2)``, ``VARCHAR[]``,
    ``STRUCT("os" VARCHAR, "v" INTEGER)``, ``MAP(VARCHAR, BIGINT)``,
    ``TIMESTAMPTZ``), which :func:`parse_type` reads back; a type DuckDB has no
    name for (float16, date64, time32, fixed_size_binary, decimal256) keeps its
    Arrow text."""
    if pa.types.is_struct(t):
        return "STRUCT(" + ", ".join(f"{sql_name(f.name)} {sql_text(f.type)}"
                                     for f in t) + ")"
    if (pa.types.is_list(t) or pa.types.is_large_list(t)
            or pa.types.is_fixed_size_list(t)):
        return f"{sql_text(t.value_type)}[]"
    if pa.types.is_map(t):
        return f"MAP({sql_text(t.key_type)}, {sql_text(t.item_type)})"
    if t in _SQL_OF:
        return _SQL_OF[t]
    if pa.types.is_timestamp(t):
        return "TIMESTAMPTZ" if t.tz and t.unit == "us" else (
            type_text(t) if t.tz else _SQL_TS[t.unit])
    if pa.types.is_decimal128(t):
        return f"DECIMAL({t.precision},{t.scale})"
    return type_text(t)


def sql_name(name: str) -> str:
    """A column or field name in DDL, always double-quoted (``at``, ``order`` and
    the like are keywords)."""
    return '"' + name.replace('"', '""') + '"'


def sql_unquote(text: str) -> tuple[str, str]:
    """The name at the start of ``text`` (``"na ""me"" x"`` or a plain word) and the
    rest of ``text``."""
    text = text.strip()
    if not text.startswith('"'):
        name, _, rest = text.partition(" ")
        return name, rest
    i = 1
    while i < len(text):
        if text[i] == '"' and text[i + 1:i + 2] == '"':
            i += 2
        elif text[i] == '"':
            return text[1:i].replace('""', '"'), text[i + 1:]
        else:
            i += 1
    return text, ""
