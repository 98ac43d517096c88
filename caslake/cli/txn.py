"""``caslake txn SPEC``: apply a JSON list of operations to several tables atomically
(a multi-table transaction: docs/protocol.md, "Multi-table transactions").

Owns the ``txn`` subcommand only; :mod:`caslake.cli` adds it to its parser and
reports errors.  The spec (a file, or ``-`` for stdin)::

    {"operations": [
      {"table": "orders", "op": "delete", "where": "id = 2"},
      {"table": "orders", "op": "append", "rows": [{"id": 4, "total": 40.0}]},
      {"table": "items", "op": "upsert", "key": ["order_id", "sku"],
       "source": "items.parquet"},
      {"table": "items", "op": "read_version", "version": 3}]}

``table`` is a table URI (or path); ``op`` one of ``append``, ``upsert``,
``overwrite`` (data as inline ``rows`` or a ``source`` file: Parquet, CSV or JSON
lines), ``delete`` (``where``), ``read_version`` (``version``).  Every table of
the spec commits, or none does.  A defect is a typed error naming its path in the
spec (``operations[2].where``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, TextIO

import pyarrow as pa

from caslake.cli.common import emit_json
from caslake.cli.common import storage_options as _storage_options
from caslake.cli.input import open_input
from caslake.errors import InvalidArgument, SchemaMismatch
from caslake.ops.multi import DEFAULT_TTL_MS, MultiTransaction, Part
from caslake.table import Table, open_table

DATA_OPS = ("append", "upsert", "overwrite")
OPS = (*DATA_OPS, "delete", "read_version")
_FAILS = (pa.ArrowException, TypeError, ValueError, OverflowError)


def _load_spec(path: str) -> list[dict[str, Any]]:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as e:
        raise InvalidArgument(f"cannot read the spec {path!r}: {e.strerror or e}") from None
    try:
        spec = json.loads(text)
    except ValueError as e:
        raise InvalidArgument(f"the spec {path!r} is not valid JSON ({e})") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("operations"), list):
        raise InvalidArgument("the spec must be a JSON object with a list 'operations'")
    ops: list[dict[str, Any]] = spec["operations"]
    if not ops:
        raise InvalidArgument("operations: the list is empty")
    for i, op in enumerate(ops):
        if not isinstance(op, dict):
            raise InvalidArgument(f"operations[{i}] must be a JSON object")
        for name in ("table", "op"):
            if not isinstance(op.get(name), str) or not op[name]:
                raise InvalidArgument(f"operations[{i}].{name} must be a non-empty string")
        if op["op"] not in OPS:
            raise InvalidArgument(f"operations[{i}].op is {op['op']!r}, not one of "
                                  f"{', '.join(OPS)}")
    return ops


def _rows(rows: Any, schema: pa.Schema, where: str) -> pa.Table:
    """Inline rows (a list of objects) as a table of ``schema``; a bad value is a
    SchemaMismatch naming ``where.rows[*].<column>``."""
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise InvalidArgument(f"{where}.rows must be a list of JSON objects")
    for j, r in enumerate(rows):
        extra = set(r) - set(schema.names)
        if extra:
            name = sorted(extra)[0]
            raise SchemaMismatch(f"{where}.rows[{j}].{name}: no such column in the table",
                                 column=name)
    columns = []
    for f in schema:
        try:
            columns.append(pa.array([r.get(f.name) for r in rows], type=f.type))
        except _FAILS as e:
            raise SchemaMismatch(f"{where}.rows[*].{f.name}: values do not fit {f.type} "
                                 f"({e})", column=f.name) from None
    return pa.Table.from_arrays(columns, schema=schema)


def _data(op: dict[str, Any], table: Table, where: str) -> Any:
    if ("rows" in op) == ("source" in op):
        raise InvalidArgument(f"{where}: give the data as 'rows' or 'source', one of them")
    if "rows" in op:
        return _rows(op["rows"], table.schema, where)
    if not isinstance(op["source"], str):
        raise InvalidArgument(f"{where}.source must be a file path")
    return open_input(op["source"], op.get("format"), table.schema)


def _apply(part: Part, op: dict[str, Any], table: Table, where: str) -> None:
    kind = op["op"]
    if kind == "delete":
        if not isinstance(op.get("where"), str):
            raise InvalidArgument(f"{where}.where must be a predicate string")
        part.delete(op["where"])
    elif kind == "read_version":
        version = op.get("version")
        if isinstance(version, bool) or not isinstance(version, int):
            raise InvalidArgument(f"{where}.version must be an integer")
        part.read_version(version)
    elif kind == "upsert":
        key = op.get("key")
        if isinstance(key, str):
            key = [key]
        if not isinstance(key, list) or not key or not all(isinstance(k, str) for k in key):
            raise InvalidArgument(f"{where}.key must be a column name or a list of them")
        part.upsert(_data(op, table, where), key=key)
    elif kind == "append":
        part.append(_data(op, table, where))
    else:
        part.overwrite(_data(op, table, where))


def cmd_txn(args: argparse.Namespace, out: TextIO) -> int:
    ops = _load_spec(args.spec)
    options = _storage_options(args.storage_option)
    tables: dict[str, Table] = {}
    for op in ops:
        if op["table"] not in tables:
            tables[op["table"]] = open_table(op["table"], storage_options=options)
    with MultiTransaction(list(tables.values()), ttl_ms=args.ttl_ms) as tx:
        for i, op in enumerate(ops):
            table = tables[op["table"]]
            _apply(tx[table], op, table, f"operations[{i}]")
    versions = {uri: r.version for uri, r in tx.results.items()}
    if args.json:
        emit_json({"transaction": tx.txn_id, "versions": versions}, out)
        return 0
    out.write(f"committed transaction {tx.txn_id} on {len(versions)} table(s):\n")
    for uri, v in versions.items():
        out.write(f"  {uri} -> version {v}\n")
    return 0


def add_txn_command(sub: Any) -> None:
    """Add ``caslake txn`` to the CLI's subparsers."""
    help = "apply a JSON list of operations to several tables atomically"
    sp = sub.add_parser("txn", help=help, description=help)
    sp.add_argument("spec", help="the JSON spec file ('-': stdin); see docs/protocol.md")
    sp.add_argument("--storage-option", "-o", action="append", metavar="KEY=VALUE",
                    help="store option, e.g. endpoint_url=http://... (repeatable)")
    sp.add_argument("--ttl-ms", type=int, default=DEFAULT_TTL_MS, metavar="MS",
                    help="the transaction's deadline: after it another writer may abort it "
                    f"(default {DEFAULT_TTL_MS})")
    sp.add_argument("--json", action="store_true", help="print the result as JSON")
    sp.set_defaults(fn=cmd_txn)
