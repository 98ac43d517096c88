"""Pieces every ``caslake`` subcommand module shares: ``-o KEY=VALUE`` storage
options, a plain text table, and pretty JSON.  It imports no other CLI module, so
``cli`` and its subcommand modules (``cli.dataset``, ...) depend on it and never
on each other.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TextIO, cast

import pyarrow as pa

from caslake.errors import InvalidArgument
from caslake.store.options import StorageOptions


def storage_options(pairs: Sequence[str] | None) -> StorageOptions | None:
    if not pairs:
        return None
    out: dict[str, str] = {}
    for p in pairs:
        if "=" not in p:
            raise InvalidArgument(f"--storage-option {p!r} must look like KEY=VALUE")
        k, v = p.split("=", 1)
        out[k.strip()] = v.strip()
    return cast(StorageOptions, out)  # unknown keys are refused by the store


def print_table(table: pa.Table, out: TextIO, limit: int | None) -> None:
    rows = table.to_pylist(maps_as_pydicts="lossy")  # a display: a map as {key: value}
    cols = table.column_names
    cells = [[cell(r[c]) for c in cols] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]
    out.write("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip() + "\n")
    out.write("  ".join("-" * w for w in widths) + "\n")
    for row in cells:
        out.write("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() + "\n")
    shown = f"{len(rows)} row{'s' if len(rows) != 1 else ''}"
    out.write(f"({shown}{', limited' if limit is not None and len(rows) >= limit else ''})\n")


def cell(v: Any) -> str:
    if v is None:
        return "NULL"
    s = json.dumps(v, default=str) if isinstance(v, dict | list) else str(v)
    return s if len(s) <= 60 else s[:57] + "..."


def json_default(v: Any) -> Any:
    return str(v)


def emit_json(obj: Any, out: TextIO) -> None:
    out.write(json.dumps(obj, default=json_default, indent=2) + "\n")
