"""``caslake dataset ls | show | read | rm | vacuum``: RFC-0008 datasets from the shell.

Owns the ``dataset`` subcommand group only; :mod:`caslake.cli` adds it to its
parser and reports errors.  Every command takes the store URI (a path,
``file://``, ``memory://`` or ``s3://bucket/prefix``) and ``--json``.
"""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import Any, TextIO

import pyarrow as pa

from caslake.cli.common import emit_json as _emit_json
from caslake.cli.common import print_table as _print_table
from caslake.cli.common import storage_options as _storage_options
from caslake.dataset import ParquetDatasetStore
from caslake.errors import InvalidArgument


def _pds(args: argparse.Namespace) -> ParquetDatasetStore:
    return ParquetDatasetStore(args.uri, storage_options=_storage_options(args.storage_option))


def _summary(pds: ParquetDatasetStore, key: str) -> dict[str, Any]:
    m = pds.read_manifest(key)
    return {"dataset_key": key, "complete": pds.dataset_exists(key), "rows": m.row_count,
            "parts": len(m.parts), "created_at_utc": m.created_at_utc, "run_id": m.run_id}


def cmd_ls(args: argparse.Namespace, out: TextIO) -> int:
    pds = _pds(args)
    rows = [_summary(pds, k) for k in pds.list_datasets(args.prefix or "")]
    if args.json:
        _emit_json(rows, out)
        return 0
    cols = ["dataset_key", "complete", "rows", "parts", "created_at_utc"]
    _print_table(pa.table({c: [r[c] for r in rows] for c in cols}) if rows
                 else pa.table({c: pa.array([], pa.string()) for c in cols}), out, None)
    return 0


def cmd_show(args: argparse.Namespace, out: TextIO) -> int:
    pds = _pds(args)
    m = pds.read_manifest(args.key)
    info = {"complete": pds.dataset_exists(args.key), "manifest": {
        k: v for k, v in m.__dict__.items() if v is not None}}
    if args.json:
        _emit_json(info, out)
        return 0
    out.write(f"dataset    {args.key} ({'complete' if info['complete'] else 'INCOMPLETE'})\n")
    out.write(f"rows       {m.row_count:,} in {len(m.parts)} part(s), {m.compression}\n")
    out.write(f"created    {m.created_at_utc}" + (f" (run {m.run_id})" if m.run_id else "")
              + "\n")
    out.write(f"schema     sha256 {m.schema_hash}\n")
    for k, v in sorted((m.metadata or {}).items()):
        out.write(f"metadata   {k} = {v}\n")
    for p in m.parts:
        out.write(f"part       {p}\n")
    return 0


def cmd_read(args: argparse.Namespace, out: TextIO) -> int:
    pds = _pds(args)
    columns = [c.strip() for c in args.columns.split(",")] if args.columns else None
    reader = pds.read_batches(args.key, columns, filter=args.where, verify=not args.no_verify)
    batches: list[pa.RecordBatch] = []
    n = 0
    for b in reader:
        if args.limit is not None and n + b.num_rows > args.limit:
            b = b.slice(0, args.limit - n)
        batches.append(b)
        n += b.num_rows
        if args.limit is not None and n >= args.limit:
            break
    result = pa.Table.from_batches(batches, schema=reader.schema)
    if args.json:
        _emit_json(result.to_pylist(), out)
    else:
        _print_table(result, out, args.limit)
    return 0


def cmd_rm(args: argparse.Namespace, out: TextIO) -> int:
    _pds(args).delete_dataset(args.key)
    if args.json:
        _emit_json({"deleted": args.key}, out)
    else:
        out.write(f"deleted dataset {args.key}\n")
    return 0


def cmd_vacuum(args: argparse.Namespace, out: TextIO) -> int:
    if args.older_than_hours < 0:
        raise InvalidArgument("--older-than-hours must be >= 0")
    report = _pds(args).vacuum(args.key, older_than=timedelta(hours=args.older_than_hours),
                               dry_run=args.dry_run)
    if args.json:
        _emit_json(report.to_json(), out)
        return 0
    verb = "would delete" if report.dry_run else "deleted"
    out.write(f"{verb} {len(report.deleted)} object(s), {report.bytes_deleted:,} bytes, in "
              f"{len(report.datasets)} dataset(s); kept {len(report.kept_young)} too young\n")
    return 0


def add_dataset_commands(sub: Any) -> None:
    """Add the ``dataset`` group to the top-level subparsers ``sub``."""
    group = sub.add_parser("dataset", help="RFC-0008 Parquet datasets (manifest + _SUCCESS)")
    dsub = group.add_subparsers(dest="dataset_command", required=True)

    def cmd(name: str, help: str, *, key: bool = True) -> argparse.ArgumentParser:
        sp: argparse.ArgumentParser = dsub.add_parser(name, help=help)
        sp.add_argument("uri", help="store root: a path, file://, memory://, s3://b/prefix, "
                        "gs://b/prefix or az://container/prefix")
        if key:
            sp.add_argument("key", help="dataset key, e.g. silver/orders")
        sp.add_argument("--storage-option", "-o", action="append", metavar="KEY=VALUE",
                        help="store option, e.g. endpoint_url=http://... (repeatable)")
        sp.add_argument("--json", action="store_true", help="print JSON")
        return sp

    ls = cmd("ls", "list datasets under the store root", key=False)
    ls.add_argument("--prefix", help="only datasets whose key starts with this")
    ls.set_defaults(fn=cmd_ls)
    cmd("show", "the manifest of a dataset").set_defaults(fn=cmd_show)
    rd = cmd("read", "read rows of a complete dataset")
    rd.add_argument("--columns", help="comma-separated columns")
    rd.add_argument("--where", help="SQL predicate (prunes parts and row groups)")
    rd.add_argument("--limit", type=int, help="at most this many rows")
    rd.add_argument("--no-verify", action="store_true",
                    help="skip the part, row count and schema hash checks")
    rd.set_defaults(fn=cmd_read)
    cmd("rm", "delete a dataset and everything under its key").set_defaults(fn=cmd_rm)
    vac = cmd("vacuum", "delete superseded generations and failed writes", key=False)
    vac.add_argument("key", nargs="?", help="one dataset (default: every dataset)")
    vac.add_argument("--older-than-hours", type=float, default=1.0,
                     help="only what has been dead this long (default 1)")
    vac.add_argument("--dry-run", action="store_true", help="report, delete nothing")
    vac.set_defaults(fn=cmd_vacuum)


__all__ = ["add_dataset_commands"]
