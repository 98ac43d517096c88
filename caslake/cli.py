"""The ``caslake`` command line.

Every failure is one line on stderr (``caslake: error: ...``) and a non-zero
exit code; no traceback reaches the user.  Long work reports progress on
stderr when it is a terminal (or with ``--progress``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

import pyarrow as pa

from caslake.api import Table, create_table, open_table
from caslake.errors import CaslakeError, InvalidArgument

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_VERIFY_FAILED = 3  # verify found problems (distinct from a failure to run)


class Progress:
    def __init__(self, enabled: bool, label: str, out: TextIO = sys.stderr) -> None:
        self.enabled = enabled
        self.label = label
        self.out = out
        self.rows = 0
        self.start = time.monotonic()
        self._last = 0.0

    def add(self, rows: int) -> None:
        self.rows += rows
        now = time.monotonic()
        if self.enabled and now - self._last > 0.2:
            self._last = now
            rate = self.rows / max(now - self.start, 1e-9)
            self.out.write(f"\r{self.label}: {self.rows:,} rows ({rate:,.0f} rows/s)")
            self.out.flush()

    def done(self) -> None:
        if self.enabled:
            self.out.write(f"\r{self.label}: {self.rows:,} rows in "
                           f"{time.monotonic() - self.start:.1f}s\n")
            self.out.flush()


def _storage_options(pairs: Sequence[str] | None) -> dict[str, str] | None:
    if not pairs:
        return None
    out = {}
    for p in pairs:
        if "=" not in p:
            raise InvalidArgument(f"--storage-option {p!r} must look like KEY=VALUE")
        k, v = p.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _open_input(path: str, fmt: str | None) -> pa.RecordBatchReader:
    """A streaming reader over a Parquet or CSV file."""
    p = Path(path)
    if not p.exists():
        raise InvalidArgument(f"input file {path!r} does not exist")
    kind = fmt or ("csv" if p.suffix.lower() in (".csv", ".tsv") else "parquet")
    try:
        if kind == "csv":
            import pyarrow.csv as pcsv

            parse = pcsv.ParseOptions(delimiter="\t" if p.suffix.lower() == ".tsv" else ",")
            return pcsv.open_csv(p, parse_options=parse)
        if kind == "parquet":
            import pyarrow.parquet as pq

            pf = pq.ParquetFile(p)
            return pa.RecordBatchReader.from_batches(pf.schema_arrow,
                                                     pf.iter_batches(batch_size=65_536))
    except (OSError, pa.ArrowException) as e:
        raise InvalidArgument(f"cannot read {path!r} as {kind}: {e}") from None
    raise InvalidArgument(f"unknown input format {kind!r} (use parquet or csv)")


def _counted(reader: pa.RecordBatchReader, progress: Progress) -> pa.RecordBatchReader:
    def gen() -> Iterator[pa.RecordBatch]:
        try:
            for b in reader:
                progress.add(b.num_rows)
                yield b
        except pa.ArrowException as e:
            raise InvalidArgument(f"cannot read input: {e}") from None
    return pa.RecordBatchReader.from_batches(reader.schema, gen())


def _print_table(table: pa.Table, out: TextIO, limit: int | None) -> None:
    rows = table.to_pylist()
    cols = table.column_names
    cells = [[_cell(r[c]) for c in cols] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]
    out.write("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip() + "\n")
    out.write("  ".join("-" * w for w in widths) + "\n")
    for row in cells:
        out.write("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() + "\n")
    shown = f"{len(rows)} row{'s' if len(rows) != 1 else ''}"
    out.write(f"({shown}{', limited' if limit is not None and len(rows) >= limit else ''})\n")


def _cell(v: Any) -> str:
    if v is None:
        return "NULL"
    s = str(v)
    return s if len(s) <= 60 else s[:57] + "..."


def _json_default(v: Any) -> Any:
    return str(v)


def _emit_json(obj: Any, out: TextIO) -> None:
    out.write(json.dumps(obj, default=_json_default, indent=2) + "\n")


def cmd_create(args: argparse.Namespace, out: TextIO) -> int:
    opts = _storage_options(args.storage_option)
    if args.source is None and args.schema is None:
        raise InvalidArgument("create needs --from FILE (Parquet or CSV) or --schema "
                              "'name:type,...'")
    if args.schema is not None:
        schema = _parse_schema_arg(args.schema)
        reader = None
    else:
        reader = _open_input(args.source, args.format)
        schema = reader.schema
    table = create_table(args.uri, schema, storage_options=opts)
    out.write(f"created {table.uri} at version {table.version}\n")
    if reader is not None:
        return _append(table, reader, args, out)
    return 0


def _parse_schema_arg(text: str) -> pa.Schema:
    from caslake.format.schema import type_from_str

    parts: list[str] = []
    depth, start = 0, 0
    for i, ch in enumerate(text):  # split on commas outside [...] and (...)
        depth += ch in "[("
        depth -= ch in "])"
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    fields = []
    for part in parts:
        if ":" not in part:
            raise InvalidArgument(f"schema entry {part!r} must look like name:type")
        name, typ = (s.strip() for s in part.split(":", 1))
        try:
            fields.append(pa.field(name, type_from_str(typ)))
        except ValueError:
            raise InvalidArgument(f"unknown type {typ!r} for column {name!r}") from None
    return pa.schema(fields)


def _append(table: Table, reader: pa.RecordBatchReader, args: argparse.Namespace,
            out: TextIO) -> int:
    progress = Progress(args.progress or sys.stderr.isatty(), "appending")
    res = table.append(_counted(reader, progress))
    progress.done()
    out.write(f"appended {res.rows_added:,} rows in {res.files_added} file(s) as version "
              f"{res.version} ({_requests(res.requests)})\n")
    return 0


def _requests(req: dict[str, int]) -> str:
    kinds = {k: v for k, v in req.items() if not k.startswith("bytes") and v}
    parts = [f"{v} {k.upper()}" for k, v in sorted(kinds.items())]
    return "requests: " + (", ".join(parts) or "none")


def cmd_append(args: argparse.Namespace, out: TextIO) -> int:
    table = open_table(args.uri, storage_options=_storage_options(args.storage_option))
    return _append(table, _open_input(args.source, args.format), args, out)


def cmd_scan(args: argparse.Namespace, out: TextIO) -> int:
    table = open_table(args.uri, storage_options=_storage_options(args.storage_option))
    columns = [c.strip() for c in args.columns.split(",")] if args.columns else None
    scan = table.scan(columns=columns, where=args.where, version=args.version,
                      as_of=args.as_of)
    if args.plan:
        _emit_json(scan.plan().describe(), out)
        return 0
    batches = []
    n = 0
    for b in scan.to_batches():
        if args.limit is not None and n + b.num_rows > args.limit:
            b = b.slice(0, args.limit - n)
        batches.append(b)
        n += b.num_rows
        if args.limit is not None and n >= args.limit:
            break
    result = pa.Table.from_batches(batches, schema=scan.schema)
    if args.json:
        _emit_json(result.to_pylist(), out)
    else:
        _print_table(result, out, args.limit)
    return 0


def cmd_delete(args: argparse.Namespace, out: TextIO) -> int:
    table = open_table(args.uri, storage_options=_storage_options(args.storage_option))
    res = table.delete(args.where)
    if res.noop:
        out.write(f"deleted 0 rows; no new version (table stays at version {res.version}) "
                  f"({_requests(res.requests)})\n")
    else:
        out.write(f"deleted {res.rows_deleted:,} rows as version {res.version} "
                  f"({res.tombstones_added} tombstone, {res.files_removed} file(s) dropped; "
                  f"{_requests(res.requests)})\n")
    return 0


def cmd_verify(args: argparse.Namespace, out: TextIO) -> int:
    from caslake.maintenance.verify import verify_table
    from caslake.store import open_store

    store = open_store(args.uri, _storage_options(args.storage_option))
    report = verify_table(store, deep=args.deep, all_versions=args.all_versions)
    if args.json:
        _emit_json(report.to_json(), out)
    else:
        status = "ok" if report.ok else f"{len(report.problems)} problem(s)"
        out.write(f"{report.uri}: {status} (version {report.version}, "
                  f"{report.versions_checked} version(s), {report.data_files_checked} data "
                  f"files, {report.tombstones_checked} tombstones, {report.footers_checked} "
                  "footers checked)\n")
        for p in report.problems:
            out.write(f"  {p.object}: {p.problem}\n")
    return 0 if report.ok else EXIT_VERIFY_FAILED


def cmd_compact(args: argparse.Namespace, out: TextIO) -> int:
    table = open_table(args.uri, storage_options=_storage_options(args.storage_option))
    res = table.compact(deleted_fraction=args.deleted_fraction)
    if res.noop:
        out.write(f"nothing to compact (version {res.version})\n")
    else:
        out.write(f"compacted {res.files_removed} file(s) into {res.files_added} "
                  f"({res.rows_added:,} rows) as version {res.version} "
                  f"({_requests(res.requests)})\n")
    return 0


def cmd_gc(args: argparse.Namespace, out: TextIO) -> int:
    from datetime import timedelta

    table = open_table(args.uri, storage_options=_storage_options(args.storage_option))
    report = table.gc(retention=timedelta(hours=args.retain_hours), dry_run=args.dry_run,
                      force=args.force)
    if args.json:
        _emit_json(report.to_json(), out)
        return 0
    verb = "would delete" if report.dry_run else "deleted"
    kinds = ", ".join(f"{len(v)} {k}" for k, v in sorted(report.deleted.items())) or "nothing"
    out.write(f"{verb} {kinds} ({report.bytes_deleted:,} bytes); versions before "
              f"{report.oldest_version} expired, {report.retained_versions} retained; "
              f"{report.kept_too_young} unreferenced object(s) newer than the cutoff "
              f"{report.cutoff.isoformat()} kept\n")
    return 0


def cmd_history(args: argparse.Namespace, out: TextIO) -> int:
    table = open_table(args.uri, storage_options=_storage_options(args.storage_option))
    entries = table.history(limit=args.limit)
    if args.json:
        _emit_json([e.__dict__ for e in entries], out)
        return 0
    rows = pa.table({
        "version": [e.version for e in entries],
        "created_at": [e.created_at.isoformat(timespec="milliseconds") for e in entries],
        "operation": [e.operation for e in entries],
        "rows_added": [e.summary.get("added_rows", 0) for e in entries],
        "rows_deleted": [e.summary.get("deleted_rows", 0) for e in entries],
        "total_rows": [e.total_rows for e in entries],
        "total_files": [e.total_files for e in entries],
        "commit_id": [e.commit_id[:12] for e in entries],
    })
    _print_table(rows, out, None)
    return 0


def cmd_show(args: argparse.Namespace, out: TextIO) -> int:
    table = open_table(args.uri, storage_options=_storage_options(args.storage_option))
    info = table.describe()
    if args.json:
        _emit_json(info, out)
        return 0
    out.write(f"table      {info['uri']}\n")
    out.write(f"version    {info['version']} ({info['operation']} at {info['created_at']})\n")
    out.write(f"rows       {info['rows']:,} ({info['deleted_rows']:,} deleted rows still "
              "stored)\n")
    out.write(f"files      {info['files']:,} ({info['bytes']:,} bytes)\n")
    out.write(f"tombstones {info['tombstones']}\n")
    out.write("schema     " + ", ".join(f"{f['name']}:{f['type']}" for f in info["schema"]) + "\n")
    if info["data_files"]:
        files = pa.table({
            "path": [f["path"] for f in info["data_files"]],
            "rows": [f["rows"] for f in info["data_files"]],
            "bytes": [f["bytes"] for f in info["data_files"]],
            "row_groups": [f["row_groups"] for f in info["data_files"]],
            "deleted": [f"{f['deleted_rows'] / max(f['rows'], 1):.1%}"
                        for f in info["data_files"]],
        })
        out.write("\n")
        _print_table(files, out, None)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="caslake", description="Transactional Parquet tables on "
                                "object storage, coordinated by conditional writes.")
    sub = p.add_subparsers(dest="command", required=True)

    def table_cmd(name: str, help: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help)
        sp.add_argument("uri", help="table location: a path, file://, memory:// or s3://b/prefix")
        sp.add_argument("--storage-option", "-o", action="append", metavar="KEY=VALUE",
                        help="store option, e.g. endpoint_url=http://... (repeatable)")
        return sp

    c = table_cmd("create", "create a table, optionally from a Parquet or CSV file")
    c.add_argument("--from", dest="source", help="Parquet or CSV file giving schema and rows")
    c.add_argument("--schema", help="explicit schema, e.g. 'id:int64,name:string'")
    c.add_argument("--format", choices=["parquet", "csv"], help="input format (default: by suffix)")
    c.add_argument("--progress", action="store_true", help="always show progress")
    c.set_defaults(fn=cmd_create)

    a = table_cmd("append", "append the rows of a Parquet or CSV file as one commit")
    a.add_argument("source", help="Parquet or CSV file")
    a.add_argument("--format", choices=["parquet", "csv"])
    a.add_argument("--progress", action="store_true")
    a.set_defaults(fn=cmd_append)

    s = table_cmd("scan", "read rows")
    s.add_argument("--columns", help="comma-separated columns")
    s.add_argument("--where", help="SQL predicate, e.g. \"id BETWEEN 1 AND 5 AND user = 'u1'\"")
    s.add_argument("--version", type=int, help="read this version")
    s.add_argument("--as-of", help="read the version current at this ISO-8601 time")
    s.add_argument("--limit", type=int, help="at most this many rows")
    s.add_argument("--json", action="store_true", help="print JSON rows")
    s.add_argument("--plan", action="store_true", help="print what would be read, as JSON")
    s.set_defaults(fn=cmd_scan)

    d = table_cmd("delete", "delete rows matching a predicate (writes a tombstone, no rewrite)")
    d.add_argument("--where", required=True, help="SQL predicate of the rows to delete")
    d.set_defaults(fn=cmd_delete)

    v = table_cmd("verify", "check that every referenced object exists and agrees")
    v.add_argument("--deep", action="store_true", help="also check every Parquet footer")
    v.add_argument("--all-versions", action="store_true", help="check every version in history")
    v.add_argument("--json", action="store_true", help="print a JSON report (for monitoring)")
    v.set_defaults(fn=cmd_verify)

    k = table_cmd("compact", "rewrite small and mostly-deleted files into new ones")
    k.add_argument("--deleted-fraction", type=float, default=0.1,
                   help="rewrite files with at least this share of rows deleted (default 0.1)")
    k.set_defaults(fn=cmd_compact)

    g = table_cmd("gc", "expire old versions and delete objects no retained version uses")
    g.add_argument("--retain-hours", type=float, default=168.0,
                   help="keep versions (and unreferenced new objects) this young (default 168)")
    g.add_argument("--dry-run", action="store_true", help="report, commit and delete nothing")
    g.add_argument("--force", action="store_true", help="allow a retention below 24 hours")
    g.add_argument("--json", action="store_true")
    g.set_defaults(fn=cmd_gc)

    h = table_cmd("history", "list versions, newest first")
    h.add_argument("--limit", type=int)
    h.add_argument("--json", action="store_true")
    h.set_defaults(fn=cmd_history)

    sh = table_cmd("show", "version, files, rows, bytes and tombstones")
    sh.add_argument("--json", action="store_true")
    sh.set_defaults(fn=cmd_show)

    from caslake.cli_dataset import add_dataset_commands  # imports this module: load it late

    add_dataset_commands(sub)
    return p


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "limit", None) is not None and args.limit < 0:
        parser.error("--limit must be >= 0")
    try:
        code: int = args.fn(args, out)
        return code
    except CaslakeError as e:
        sys.stderr.write(f"caslake: error: {e}\n")
        return EXIT_ERROR
    except KeyboardInterrupt:
        sys.stderr.write("caslake: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
