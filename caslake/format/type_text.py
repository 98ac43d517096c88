"""The text form of a column type, nested ones included, as ``--schema`` and
``add_column("tags", "list<string>")`` take it.

Owns: :func:`parse_type` (text -> Arrow type) and :func:`type_text` (Arrow type ->
text), inverse of each other on every type a table holds.  A primitive is its type
string (docs/format.md, "Schema": ``int64``, ``decimal128(10, 2)``,
``timestamp[us, tz=UTC]``); nested types are ``list<T>``, ``struct<name:T,...>`` and
``map<K,V>``, to any depth.  Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from caslake.errors import InvalidArgument
from caslake.format.schema import type_from_str, type_to_str

# pyarrow-stubs type the nested constructors narrower than pyarrow accepts.
_pa: Any = pa
_OPEN, _CLOSE = "([<", ")]>"


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
        return InvalidArgument(f"cannot read the type {self.text!r}{where}: {what} (types are "
                               "primitives such as int64, string, decimal128(10, 2), "
                               "timestamp[us], or list<T>, struct<name:T,...>, map<K,V>)")

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

    def type(self, path: str) -> pa.DataType:
        word = self.word()
        self.skip()
        if self.pos < len(self.text) and self.text[self.pos] == "<":
            self.pos += 1
            return self.nested(word, path)
        if not word:
            raise self.error(f"a type is missing at position {self.pos}", path)
        if word in ("list", "struct", "map"):
            raise self.error(f"{word} needs its parts in <...>", path)
        try:
            return type_from_str(word)
        except ValueError:
            raise self.error(f"unknown type {word!r}", path) from None

    def nested(self, kind: str, path: str) -> pa.DataType:
        if kind == "list":
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
            self.expect(":", f"{path}.{name}")
            fields.append(pa.field(name, self.type(f"{path}.{name}")))
            self.skip()
            if self.text.startswith(">", self.pos):
                self.pos += 1
                return fields
            self.expect(",", path)
