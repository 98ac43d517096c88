"""A plain model of schema evolution, and Hypothesis strategies for change sequences.

The model knows nothing of field ids: a table is a list of column names with
types and rows as ``{name: value}`` dicts.  Adding a column gives every
existing row ``None``; renaming renames the key in every row; dropping removes
it; widening keeps every value.  The code under test works by field id, so
agreeing with this model is evidence, not a tautology.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

from caslake.format.schema_evolution import (
    AddColumn,
    DropColumn,
    RenameColumn,
    SchemaChange,
    WidenColumn,
)

NAMES = ["a", "b", "c", "d", "e"]
TYPES = ["int8", "int16", "int32", "int64", "float32", "float64", "string"]
WIDER = {"int8": ["int16", "int32", "int64"], "int16": ["int32", "int64"],
         "int32": ["int64"], "float32": ["float64"]}
ARROW = {"int8": pa.int8(), "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64(),
         "float32": pa.float32(), "float64": pa.float64(), "string": pa.string()}


def value_for(type_: str, n: int) -> Any:
    """A value of ``type_`` that every wider type represents exactly."""
    if type_.startswith("int"):
        return (n * 7) % 100 - 50
    if type_.startswith("float"):
        return float((n % 64) / 4)  # exact in float32
    return f"s{n}"


@dataclass
class SchemaModel:
    columns: list[tuple[str, str]]  # (name, type) in table order
    rows: list[dict[str, Any]] = field(default_factory=list)
    next_row: int = 0

    def copy(self) -> SchemaModel:
        return SchemaModel(list(self.columns), [dict(r) for r in self.rows], self.next_row)

    @property
    def names(self) -> list[str]:
        return [n for n, _ in self.columns]

    def apply(self, ch: SchemaChange) -> None:
        if isinstance(ch, AddColumn):
            self.columns.append((ch.name, ch.type))
            for r in self.rows:
                r[ch.name] = None
        elif isinstance(ch, RenameColumn):
            self.columns = [(ch.new if n == ch.old else n, t) for n, t in self.columns]
            for r in self.rows:
                r[ch.new] = r.pop(ch.old)
        elif isinstance(ch, DropColumn):
            self.columns = [(n, t) for n, t in self.columns if n != ch.name]
            for r in self.rows:
                del r[ch.name]
        elif isinstance(ch, WidenColumn):
            self.columns = [(n, ch.type if n == ch.name else t) for n, t in self.columns]

    def new_rows(self, count: int) -> list[dict[str, Any]]:
        out = []
        for _ in range(count):
            self.next_row += 1
            out.append({n: value_for(t, self.next_row) for n, t in self.columns})
        return out

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([(n, ARROW[t]) for n, t in self.columns])

    def to_arrow(self, rows: list[dict[str, Any]]) -> pa.Table:
        return pa.Table.from_pylist(rows, schema=self.arrow_schema())

    def sorted_rows(self) -> list[tuple[Any, ...]]:
        return sorted((tuple(r[n] for n in self.names) for r in self.rows), key=repr)


def valid_changes(model: SchemaModel, protected: frozenset[str] = frozenset()
                  ) -> st.SearchStrategy[SchemaChange]:
    """One change that is valid for ``model`` (drawn freshly for each state), never
    touching the ``protected`` columns."""
    names = [n for n in model.names if n not in protected]
    free = [n for n in NAMES if n not in names]
    options: list[st.SearchStrategy[SchemaChange]] = []
    if free:
        options.append(st.builds(AddColumn, st.sampled_from(free), st.sampled_from(TYPES)))
        if names:
            options.append(st.builds(RenameColumn, st.sampled_from(names),
                                     st.sampled_from(free)))
    if names and len(model.names) > 1:
        options.append(st.builds(DropColumn, st.sampled_from(names)))
    widenable = [(n, t) for n, t in model.columns if t in WIDER and n not in protected]
    if widenable:
        options.append(st.sampled_from(widenable).flatmap(
            lambda nt: st.builds(WidenColumn, st.just(nt[0]), st.sampled_from(WIDER[nt[1]]))))
    return st.one_of(*options)
