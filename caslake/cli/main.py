"""The ``caslake`` command line.

Every failure is one line on stderr (``caslake: error: ...``) and a non-zero
exit code; no traceback reaches the user.  Long work reports progress on
stderr when it is a terminal (or with ``--progress``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import re
import sys
import time
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any, TextIO

import pyarrow as pa

from caslake import __version__
from caslake.cli.common import emit_json as _emit_json
from caslake.cli.common import print_table as _print_table
from caslake.cli.common import storage_options as _storage_options
from caslake.cli.dataset import add_dataset_commands
from caslake.cli.input import FORMATS, TextOptions, open_input
from caslake.cli.output import emit_json_lines, parse_size, write_output
from caslake.cli.txn import add_txn_command
from caslake.core import (
    SchemaConformer,
    progress_advance,
    progress_shown,
    progress_stage,
    progress_task,
)
from caslake.errors import CaslakeError, InvalidArgument, TableAlreadyExists, TableNotFound
from caslake.store.options import StorageOptions
from caslake.table import Table, create_table, open_table

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




#: The help text of every command's table-location argument.
URI_HELP = ("table location: a path, file://, memory://, s3://b/prefix, gs://b/prefix or "
            "az://container/prefix")

def _bar(args: argparse.Namespace, desc: str, *, total: int | None = None,
         unit: str = "step") -> contextlib.AbstractContextManager[Any]:
    """The progress bar of a long command (compact, purge, gc, export, clone,
    verify): on stderr when it is a terminal (or with ``--progress``), never with
    ``--json``; the operation advances it (caslake.core.progress)."""
    enabled = progress_shown(bool(getattr(args, "progress", False)),
                             as_json=bool(getattr(args, "json", False)))
    return progress_task(desc, total=total, unit=unit, enabled=enabled)


def _counted(reader: pa.RecordBatchReader, progress: Progress) -> pa.RecordBatchReader:
    def gen() -> Iterator[pa.RecordBatch]:
        try:
            for b in reader:
                progress.add(b.num_rows)
                yield b
        except pa.ArrowException as e:
            raise InvalidArgument(f"cannot read input: {e}") from None
    return pa.RecordBatchReader.from_batches(reader.schema, gen())


def _text_options(args: argparse.Namespace) -> TextOptions:
    """The CSV text options, the date and timestamp formats checked up front (before
    a table is created or an output file opened)."""
    return TextOptions(null_value=args.null_value, date_format=args.date_format,
                       timestamp_format=args.timestamp_format).check_formats()


def cmd_create(args: argparse.Namespace, out: TextIO) -> int:
    """Create a table, then append the ``--from`` file.  The file is read and converted
    once in full before the table is created (and once more to write it), so a bad
    input -- a cell, a format, a type -- creates nothing and the corrected command
    can simply be run again."""
    opts = _storage_options(args.storage_option)
    if args.source is None and args.schema is None:
        raise InvalidArgument("create needs --from FILE (Parquet, CSV or JSON lines) or "
                              "--schema 'name:type,...'")
    text = _text_options(args)
    given = _parse_schema_arg(args.schema) if args.schema is not None else None
    if args.source is None:
        assert given is not None
        table = create_table(args.uri, given, storage_options=opts)
        out.write(f"created {table.uri} at version {table.version}\n")
        return 0
    _refuse_existing(args.uri, opts)  # before reading a large file for nothing
    schema = _check_input(args, given, text)
    table = create_table(args.uri, schema, storage_options=opts)
    out.write(f"created {table.uri} at version {table.version}\n")
    # typed by the checked schema (not inferred again): the rows checked are the rows written
    return _append(table, open_input(args.source, args.format, schema, text), args, out)


def _refuse_existing(uri: str, opts: StorageOptions | None) -> None:
    try:
        open_table(uri, storage_options=opts)
    except TableNotFound:
        return
    raise TableAlreadyExists(f"a table already exists at {uri}")


def _check_input(args: argparse.Namespace, schema: pa.Schema | None,
                 text: TextOptions) -> pa.Schema:
    """Read every row of the ``--from`` file and convert it to the table's types as the
    append will (``schema``: --schema, else the file's own), keeping nothing; the
    table schema.  Raises what the append would raise on the input."""
    from caslake.format.schema import TableSchema

    reader = open_input(args.source, args.format, schema, text)
    table_schema = TableSchema.from_arrow(schema if schema is not None
                                          else reader.schema).to_arrow()
    conform = SchemaConformer(table_schema, reader.schema)
    progress = Progress(args.progress or sys.stderr.isatty(), "checking")
    for batch in _counted(reader, progress):
        conform(batch)
    progress.done()
    return schema if schema is not None else reader.schema


def _parse_schema_arg(text: str) -> pa.Schema:
    """``--schema 'id:int64,tags:list<string>,dev:struct<os:string,v:int32>,
    attrs:map<string,int64>'``: columns split on the commas outside ``[...]``,
    ``(...)`` and ``<...>``; each ``name:type`` or ``name type`` (SQL DDL:
    ``id bigint, price decimal(7,2), tags array<string>``); types as
    caslake.format.type_text reads them (Arrow, DuckDB and Spark names)."""
    from caslake.format.type_text import parse_type

    parts: list[str] = []
    depth, start = 0, 0
    for i, ch in enumerate(text):  # split on commas outside [...], (...) and <...>
        depth += ch in "[(<"
        depth -= ch in "])>"
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    fields = []
    for part in parts:
        name, typ = _schema_entry(part)
        typ, required = _NOT_NULL.subn("", typ)
        fields.append(pa.field(name, parse_type(typ.strip(), name), nullable=not required))
    return pa.schema(fields)


def _schema_entry(part: str) -> tuple[str, str]:
    """``name:type``, ``name type`` or ``"quoted name" type``: the name and the type."""
    from caslake.format.type_text import sql_unquote

    if part.strip().startswith('"'):
        name, typ = sql_unquote(part)
        typ = typ.strip().removeprefix(":")
    else:
        m = _SCHEMA_ENTRY.match(part)
        name, typ = (m.group(1), m.group(2)) if m else ("", "")
    if not name or not typ.strip():
        raise InvalidArgument(f"schema entry {part!r} must look like name:type "
                              "(or 'name type')")
    return name, typ.strip()


# ``name:type`` or ``name type``: the name ends at the first colon or space
_SCHEMA_ENTRY = re.compile(r"^\s*([^\s:]+)\s*(?::|\s)\s*(\S.*)$", re.S)
_NOT_NULL = re.compile(r"\s+not\s+null\s*$", re.I)


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


def _open_table(args: argparse.Namespace) -> Table:
    return open_table(args.uri, storage_options=_storage_options(args.storage_option))


def _input_for(table: Table, args: argparse.Namespace) -> tuple[pa.RecordBatchReader, Progress]:
    """The input file, CSV columns typed by the table, counted for --progress."""
    progress = Progress(args.progress or sys.stderr.isatty(), "reading")
    reader = open_input(args.source, args.format, table.schema, _text_options(args))
    return _counted(reader, progress), progress


def cmd_append(args: argparse.Namespace, out: TextIO) -> int:
    table = _open_table(args)
    reader = open_input(args.source, args.format, table.schema, _text_options(args))
    return _append(table, reader, args, out)


def cmd_upsert(args: argparse.Namespace, out: TextIO) -> int:
    table = _open_table(args)
    keys = [k.strip() for k in args.key.split(",") if k.strip()]
    if not keys:
        raise InvalidArgument("--key needs at least one column name")
    reader, progress = _input_for(table, args)
    res = table.upsert(reader, key=keys, on_duplicate=args.on_duplicate)
    progress.done()
    out.write(f"upserted {res.rows_added:,} rows (replaced {res.rows_deleted:,} existing "
              f"row(s) with the same {','.join(keys)}) as version {res.version} "
              f"({_requests(res.requests)})\n")
    return 0


def cmd_overwrite(args: argparse.Namespace, out: TextIO) -> int:
    table = _open_table(args)
    reader, progress = _input_for(table, args)
    res = table.overwrite(reader)
    progress.done()
    out.write(f"overwrote the table with {res.rows_added:,} rows in {res.files_added} "
              f"file(s) as version {res.version} ({_requests(res.requests)})\n")
    return 0


def cmd_scan(args: argparse.Namespace, out: TextIO) -> int:
    table = open_table(args.uri, storage_options=_storage_options(args.storage_option))
    columns = _columns_arg(args.columns)
    scan = table.scan(columns=columns, where=args.where, version=args.version,
                      as_of=args.as_of)
    if args.plan:
        _emit_json(scan.plan().describe(), out)
        return 0
    batches = _limited(scan.to_batches(), args.limit)
    if args.output:
        rows = write_output(batches, scan.schema, args.output, args.output_format,
                            _text_options(args))
        out.write(f"wrote {rows:,} rows to {args.output}\n")
    elif args.json:
        emit_json_lines(batches, out)
    else:
        result = pa.Table.from_batches(list(batches), schema=scan.schema)
        _print_table(result, out, args.limit)
    return 0


def _columns_arg(text: str | None) -> list[str] | None:
    """``--columns a,b`` -> ["a", "b"]; absent -> every column.  An empty list or an
    empty name is refused: ``--columns ""`` is most likely an unset shell variable."""
    if text is None:
        return None
    columns = [c.strip() for c in text.split(",")]
    if not any(columns):
        raise InvalidArgument(f"--columns {text!r} names no column; leave --columns out to "
                              "read every column")
    if not all(columns):
        raise InvalidArgument(f"--columns {text!r} has an empty column name")
    return columns


def _limited(batches: Iterator[pa.RecordBatch], limit: int | None) -> Iterator[pa.RecordBatch]:
    n = 0
    for b in batches:
        if limit is not None and n + b.num_rows > limit:
            b = b.slice(0, limit - n)
        yield b
        n += b.num_rows
        if limit is not None and n >= limit:
            return


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


def cmd_update(args: argparse.Namespace, out: TextIO) -> int:
    """``caslake update URI --set col=EXPR ... [--where PRED]``: one UPDATE commit."""
    assignments: dict[str, str] = {}
    for item in args.set:
        column, eq, value = item.partition("=")
        if not eq or not column.strip() or not value.strip():
            raise InvalidArgument(f"--set takes COLUMN=EXPRESSION (e.g. --set \"status='closed'\""
                                  f"), not {item!r}")
        if column.strip() in assignments:
            raise InvalidArgument(f"--set gives column {column.strip()!r} twice")
        assignments[column.strip()] = value.strip()
    table = open_table(args.uri, storage_options=_storage_options(args.storage_option))
    res = table.update(assignments, args.where)
    if args.json:
        _emit_json(dataclasses.asdict(res), out)
        return 0
    what = (f"0 rows; no new version (table stays at version {res.version}) (" if res.noop
            else f"{res.rows_deleted:,} rows as version {res.version} ({res.tombstones_added} "
            f"tombstone, {res.files_added} file(s) added, {res.files_removed} dropped; ")
    out.write(f"updated {what}{_requests(res.requests)})\n")
    return 0


def cmd_verify(args: argparse.Namespace, out: TextIO) -> int:
    from caslake.ops.verify import verify_table
    from caslake.store import open_store

    store = open_store(args.uri, _storage_options(args.storage_option))
    shown = progress_shown(args.progress, as_json=args.json)
    report = verify_table(store, deep=args.deep, all_versions=args.all_versions,
                          progress=shown, storage_options=_storage_options(args.storage_option))
    if args.json:
        _emit_json(report.to_json(), out)
    else:
        status = "ok" if report.ok else f"{len(report.problems)} problem(s)"
        scope = (f"across all {report.versions_checked} versions" if args.all_versions
                 else "in the current version")
        out.write(f"{report.uri}: {status} (version {report.version}; "
                  f"{report.data_files_checked} data files, {report.tombstones_checked} "
                  f"tombstones {scope}; {report.footers_checked} footers checked)\n")
        if args.deep:
            out.write(f"  page CRC-32s of {report.column_chunks_checked} column chunk(s): "
                      f"{report.bytes_checked:,} bytes of data pages checked\n")
        for p in report.problems:
            out.write(f"  {p.object}: {p.problem}\n")
    return 0 if report.ok else EXIT_VERIFY_FAILED


def cmd_compact(args: argparse.Namespace, out: TextIO) -> int:
    if not 0 < args.deleted_fraction <= 1:
        raise InvalidArgument(f"--deleted-fraction must be in (0, 1], not "
                              f"{args.deleted_fraction:g}")
    table = _open_table(args)
    if args.dry_run:
        from caslake.ops.compact import plan_compaction

        target = args.target_file_size or table.write_options.target_file_size
        base = table.io.latest()
        plan = plan_compaction(table.context, base, target_file_size=target,
                               deleted_fraction=args.deleted_fraction)
        if plan is None:
            out.write(f"nothing to compact (version {base.version})\n")
        else:
            out.write(f"would rewrite {len(plan.rewrite)} file(s) ({plan.live_rows:,} live "
                      f"rows, {sum(f.size for f in plan.rewrite):,} bytes) and drop "
                      f"{len(plan.drop)} fully deleted file(s) at version "
                      f"{plan.base.version}; nothing was written\n")
        return 0
    with _bar(args, "compacting", unit="file"):
        res = table.compact(target_file_size=args.target_file_size,
                            deleted_fraction=args.deleted_fraction)
        progress_advance(res.files_removed)
    if res.noop:
        out.write(f"nothing to compact (version {res.version})\n")
    else:
        out.write(f"compacted {res.files_removed} file(s) into {res.files_added} "
                  f"({res.rows_added:,} rows rewritten) as version {res.version} "
                  f"({_requests(res.requests)})\n")
    return 0


def cmd_purge(args: argparse.Namespace, out: TextIO) -> int:
    table = open_table(args.uri, storage_options=_storage_options(args.storage_option))
    with _bar(args, "purging", unit="file") as bar:
        report = table.purge(args.where, dry_run=args.dry_run, expire=args.expire,
                             progress=progress_stage if bar is not None else None)
    if args.json:
        _emit_json(report.to_json(), out)
    elif report.noop:
        out.write(f"no row matches: nothing to purge (version {report.version})\n")
    else:
        what = "would erase" if report.dry_run else "erased"
        out.write(f"{what} {report.rows_erased:,} row(s) in {report.files_rewritten} file(s), "
                  f"{report.row_groups_reencoded} row group(s) re-encoded"
                  + ("" if report.dry_run else f", as version {report.version}") + "\n")
        for f in report.files:
            out.write(f"  {f.path}: {f.strategy}\n")
        if report.dry_run:
            # A dry run re-encodes nothing: the upload is bounded, not known.
            out.write(f"  would download about {report.bytes_downloaded:,} B (the splice and "
                      f"its commit) and upload at most {report.whole_file_rewrite_bytes:,} B "
                      "(a whole-file rewrite of those files; the splice copies what it can "
                      "inside the store)" + ("; the expiry's gc and the exports' rewrite "
                                            "read more" if args.expire else "") + "\n")
        else:
            out.write(f"  uploaded {report.bytes_uploaded:,} B, downloaded "
                      f"{report.bytes_downloaded:,} B, copied in the store "
                      f"{report.bytes_copied:,} B (a whole-file rewrite uploads "
                      f"{report.whole_file_rewrite_bytes:,} B)\n")
    if report.expiry is not None and not args.json:
        out.write(f"expired the versions below {report.expired_below} and deleted "
                  f"{report.expiry.deleted_count} object(s) holding the erased rows or "
                  "unreferenced\n")
    if not args.json:
        for line in report.exports:  # what the erasure did (would do) to each export
            out.write(f"  export {line}\n")
    return 0


def cmd_gc(args: argparse.Namespace, out: TextIO) -> int:
    retention = timedelta(hours=args.retain_hours)
    if args.retain_hours < 0:
        raise InvalidArgument(f"--retain-hours must not be negative, not {args.retain_hours:g}")
    if retention < timedelta(hours=24) and not args.force:
        raise InvalidArgument(
            f"--retain-hours {args.retain_hours:g} is below the 24 h minimum: objects a "
            "running writer has uploaded but not committed yet could be deleted. Add --force "
            "only if no writer can be running that long")
    table = _open_table(args)
    with _bar(args, "deleting unreferenced objects", unit="object"):
        report = table.gc(retention=retention, dry_run=args.dry_run, force=args.force)
    if args.json:
        _emit_json(report.to_json(), out)
        return 0
    verb = "would delete" if report.dry_run else "deleted"
    kinds = ", ".join(f"{len(v)} {k}" for k, v in sorted(report.deleted.items())) or "nothing"
    out.write(f"{verb} {kinds} ({report.bytes_deleted:,} bytes); versions before "
              f"{report.oldest_version} expired, {report.retained_versions} retained; "
              f"{report.kept_too_young} unreferenced object(s) newer than the cutoff "
              f"{report.cutoff.isoformat()} kept; {report.lock_files_deleted} unused lock "
              "file(s) removed\n")
    for hold in report.holds_released:  # a clone that no longer references a source
        out.write(f"{'would release' if report.dry_run else 'released'} hold {hold}\n")
    return 0


def cmd_restore(args: argparse.Namespace, out: TextIO) -> int:
    given = [x for x in (args.version, args.timestamp, args.tag) if x is not None]
    if len(given) != 1:
        raise InvalidArgument("restore needs exactly one of --version, --timestamp or --tag")
    table = _open_table(args)
    res = table.restore(version=args.version, timestamp=args.timestamp, tag=args.tag)
    target = (f"version {args.version}" if args.version is not None
              else f"tag {args.tag!r}" if args.tag is not None
              else f"the version current at {args.timestamp}")
    if args.json:
        _emit_json({"version": res.version, "noop": res.noop, "restored": target,
                    "files": res.files_added, "requests": res.requests}, out)
    elif res.noop:
        out.write(f"nothing to restore: version {res.version} already equals {target}\n")
    else:
        out.write(f"restored {target} as version {res.version} ({res.files_added} file(s) "
                  f"referenced again, no data rewritten; {_requests(res.requests)})\n")
    return 0


def cmd_history(args: argparse.Namespace, out: TextIO) -> int:
    entries = _open_table(args).history(limit=args.limit)
    if args.json:
        _emit_json([e.to_json() for e in entries], out)
        return 0
    rows = pa.table({
        "version": [e.version for e in entries],
        "created_at": [e.created_at_text for e in entries],
        "operation": [e.operation for e in entries],
        "rows_added": [e.rows_added for e in entries],
        "rows_deleted": [e.rows_deleted for e in entries],
        "total_rows": [e.total_rows for e in entries],
        "total_files": [e.total_files for e in entries],
        "commit_id": [e.commit_id[:12] for e in entries],
    })
    _print_table(rows, out, None)
    out.write("(rows_added / rows_deleted: by that commit; total_rows / total_files: the "
              "table at that version)\n")
    return 0


def cmd_show(args: argparse.Namespace, out: TextIO) -> int:
    info = _open_table(args).describe()
    if args.json:
        _emit_json(info, out)
        return 0
    out.write(f"table      {info['uri']}\n")
    out.write(f"version    {info['version']} ({info['operation']} at {info['created_at']}); "
              "every count below is of this version\n")
    out.write(f"rows       {info['rows']:,} ({info['deleted_rows']:,} deleted rows still "
              "stored)\n")
    out.write(f"files      {info['files']:,} ({info['bytes']:,} bytes)\n")
    out.write(f"tombstones {info['tombstones']} (current version)\n")
    out.write("schema     " + ", ".join(_field_text(f, ids=False) for f in info["schema"])
              + "\n")
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


def _emit_result(result: dict[str, Any], out: TextIO, *, as_json: bool) -> None:
    """A ref command's result: JSON, or ``key=value`` pairs on one line."""
    if as_json:
        _emit_json(result, out)
    else:
        out.write(" ".join(f"{k}={v}" for k, v in result.items()) + "\n")


def _ref_json(r: Any) -> dict[str, Any]:
    out: dict[str, Any] = r.to_json()
    return out


def cmd_refs(args: argparse.Namespace, out: TextIO) -> int:
    table = open_table(args.uri, storage_options=_storage_options(args.storage_option))
    refs = [_ref_json(r) for r in table.list_refs()]
    if args.json:
        _emit_json(refs, out)
        return 0
    _print_table(pa.table({
        "kind": [r["kind"] for r in refs], "name": [r["name"] for r in refs],
        "version": [r["version"] for r in refs],
        "branch": [r.get("branch", "") for r in refs],
        "commit_id": [str(r["commit_id"])[:12] for r in refs]}), out, None)
    return 0


def cmd_branch(args: argparse.Namespace, out: TextIO) -> int:
    table = open_table(args.uri, storage_options=_storage_options(args.storage_option))
    result: dict[str, Any]
    if args.action == "create":
        b = table.create_branch(args.name, from_version=args.from_version, tag=args.tag)
        result = {"branch": args.name, "version": b.version}
    elif args.action == "drop":
        table.drop_branch(args.name)
        result = {"dropped_branch": args.name}
    elif args.action == "fast-forward":
        v = table.fast_forward(args.target, source=args.name)
        result = {"branch": args.target, "version": v, "source": args.name}
    else:
        res = table.merge(args.name, into=args.target)
        result = {"branch": args.target, "version": res.version, "source": args.name,
                  "noop": res.noop, "files_added": res.files_added,
                  "rows_added": res.rows_added, "rows_deleted": res.rows_deleted}
    _emit_result(result, out, as_json=args.json)
    return 0


def cmd_tag(args: argparse.Namespace, out: TextIO) -> int:
    table = open_table(args.uri, storage_options=_storage_options(args.storage_option))
    if args.branch:
        table = table.branch(args.branch)
    result: dict[str, Any]
    if args.action == "create":
        result = _ref_json(table.create_tag(args.name, version=args.version))
    else:
        table.drop_tag(args.name)
        result = {"dropped_tag": args.name}
    _emit_result(result, out, as_json=args.json)
    return 0


def cmd_clone(args: argparse.Namespace, out: TextIO) -> int:
    from caslake.table import clone

    opts = _storage_options(args.storage_option)
    with _bar(args, "cloning"):
        t = clone(args.uri, args.target, version=args.version, tag=args.tag,
                  storage_options=opts)
    result = {"clone": t.uri, "source": args.uri, "rows": t.describe()["rows"],
              "files": len(t.describe()["data_files"])}
    _emit_result(result, out, as_json=args.json)
    return 0


def _pair(text: str, what: str) -> tuple[str, str]:
    a, sep, b = text.partition(":")
    if not sep or not a or not b:
        raise InvalidArgument(f"{what} must look like A:B, not {text!r}")
    return a, b


def cmd_schema(args: argparse.Namespace, out: TextIO) -> int:
    table = open_table(args.uri, storage_options=_storage_options(args.storage_option))
    if args.add or args.rename or args.drop or args.widen or args.make_nullable:
        upd = table.update_schema()
        for spec in args.add or []:
            upd.add_column(*_pair(spec, "--add"))
        for spec in args.rename or []:
            upd.rename_column(*_pair(spec, "--rename"))
        for name in args.drop or []:
            upd.drop_column(name)
        for spec in args.widen or []:
            upd.widen_column(*_pair(spec, "--widen"))
        for name in args.make_nullable or []:
            upd.make_nullable(name)
        upd.commit()
    history: list[dict[str, Any]] = []
    for snap in reversed(table.io.history(table.refresh().snapshot)):
        m = snap.manifest
        if history and history[-1]["schema_id"] == m.schema.schema_id:
            continue
        history.append({"schema_id": m.schema.schema_id, "since_version": m.version,
                        "operation": m.operation,
                        "changes": m.operation_params.get("changes", ""),
                        "last_field_id": m.schema.last_field_id,
                        "fields": [f.to_json() for f in m.schema.fields],
                        **_schema_both_ways(m.schema.to_arrow())})
    if args.json:
        _emit_json(history, out)
        return 0
    if history:  # the current schema both ways, then its history (the last line)
        out.write(f"arrow: {history[-1]['arrow']}\nsql:   {history[-1]['sql']}\n")
    for h in history:
        cols = ", ".join(_field_text(f, ids=True) for f in h["fields"])
        what = h["changes"] or h["operation"]
        out.write(f"schema {h['schema_id']} (since version {h['since_version']}, {what}): "
                  f"{cols}\n")
    return 0


def _schema_both_ways(schema: pa.Schema) -> dict[str, str]:
    """A schema as ``--schema`` takes it in Arrow names (``id:int64,tags:list<string>``)
    and as DuckDB DDL (``id BIGINT NOT NULL, tags VARCHAR[]``), which ``--schema``
    also takes."""
    from caslake.format.type_text import sql_name, sql_text, type_text

    return {"arrow": ",".join(f"{f.name}:{type_text(f.type)}" for f in schema),
            "sql": ", ".join(f"{sql_name(f.name)} {sql_text(f.type)}"
                             + ("" if f.nullable else " NOT NULL") for f in schema)}


def _field_text(f: dict[str, Any], *, ids: bool) -> str:
    """``name:type`` of a field's JSON form, nested types spelled out as ``--schema``
    takes them (``dev:struct<os:string,v:int32>``); ``#id`` after each with ``ids``."""
    return f"{f['name']}:{_type_text(f, ids=ids)}"


def _type_text(f: dict[str, Any], *, ids: bool) -> str:
    tag = f"#{f['id']}" if ids else ""
    kids = f.get("fields") or []
    if f["type"] == "struct":
        inner = ",".join(_field_text(c, ids=ids) for c in kids)
    else:  # a list's element, a map's key and value: by position
        inner = ",".join(_type_text(c, ids=ids) for c in kids)
    return f"{f['type']}<{inner}>{tag}" if kids else f"{f['type']}{tag}"


def cmd_properties(args: argparse.Namespace, out: TextIO) -> int:
    table = _open_table(args)
    if args.set:
        updates = {}
        for pair in args.set:
            if "=" not in pair or not pair.split("=", 1)[0].strip():
                raise InvalidArgument(f"--set {pair!r} must look like KEY=VALUE")
            k, v = pair.split("=", 1)
            updates[k.strip()] = v
        res = table.set_properties(updates)
        out.write(f"set {len(updates)} propert{'y' if len(updates) == 1 else 'ies'} as version "
                  f"{res.version} ({_requests(res.requests)})\n")
    props = table.properties
    if args.json:
        _emit_json(props, out)
    elif not args.set:
        for k, v in sorted(props.items()):
            out.write(f"{k}={v}\n")
        if not props:
            out.write("(no properties)\n")
        unset = [p for p in _export_properties() if p[0] not in props]
        if unset:
            out.write("# export properties not set, with their defaults:\n")
        for name, default, what in unset:
            out.write(f"# {name}={default}  ({what})\n")
    return 0


def _export_properties() -> list[tuple[str, str, str]]:
    """The table properties the exports read: name, default, meaning."""
    from caslake.export.delta import CHECKPOINT_INTERVAL_PROPERTY, DEFAULT_CHECKPOINT_INTERVAL
    from caslake.export.hook import DELTA_PROPERTY, ICEBERG_PROPERTY

    return [(ICEBERG_PROPERTY, "false", "true: every commit is also exported as Iceberg"),
            (DELTA_PROPERTY, "false", "true: every commit is also exported as Delta"),
            (CHECKPOINT_INTERVAL_PROPERTY, str(DEFAULT_CHECKPOINT_INTERVAL),
             "a Delta checkpoint every N Delta versions")]


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a size (bytes, or e.g. 64MB, 256MiB)") from None


def cmd_report(args: argparse.Namespace, out: TextIO) -> int:
    table = _open_table(args)
    health = table.report(args.html)
    if args.json:
        _emit_json({"report": args.html, "version": health.version,
                    "live_files": len(health.file_sizes), "counts": health.counts,
                    "small_file_share": health.small_file_share}, out)
    else:
        out.write(f"wrote the health report of version {health.version} to {args.html} "
                  f"({len(health.file_sizes)} live files, {health.small_file_share:.0%} "
                  "small)\n")
    return 0


def cmd_export(args: argparse.Namespace, out: TextIO) -> int:
    options = _storage_options(args.storage_option)
    table = open_table(args.uri, storage_options=options)
    if args.target == "drop":
        n = table.drop_export(args.format, out=args.out, storage_options=options)
        if args.json:
            _emit_json({"format": args.format, "objects_deleted": n}, out)
        else:
            out.write(f"dropped the {args.format} export: {n} objects deleted\n" if n else
                      f"no {args.format} export there: nothing deleted\n")
        return 0
    with _bar(args, f"exporting {args.target}", total=1, unit="format"):
        if args.target == "iceberg":
            res = table.export_iceberg(version=args.version, out=args.out,
                                       storage_options=options)
        else:
            res = table.export_delta(version=args.version)
        progress_advance()
    if args.json:
        _emit_json(res.__dict__, out)
        return 0
    if res.noop:
        out.write(f"version {res.version} is already exported as {args.target}: "
                  f"{res.location}\n")
    else:
        out.write(f"exported version {res.version} as {args.target}: {res.location} "
                  f"({res.objects_written} objects, {res.bytes_written:,} bytes written")
        out.write(f"; {res.manifests_reused} manifests reused)\n" if args.target == "iceberg"
                  else ")\n" if res.checkpoint is None
                  else f"; checkpoint at Delta version {res.checkpoint})\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="caslake", description="Transactional Parquet tables on "
                                "object storage, coordinated by conditional writes.")
    p.add_argument("--version", action="version", version=f"caslake {__version__}",
                   help="print the caslake version and exit")
    sub = p.add_subparsers(dest="command", required=True, help="the command to run")

    def table_cmd(name: str, help: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help, description=help)
        sp.add_argument("uri", help=URI_HELP)
        sp.add_argument("--storage-option", "-o", action="append", metavar="KEY=VALUE",
                        help="store option, e.g. endpoint_url=http://... (repeatable)")
        return sp

    def json_flag(sp: argparse.ArgumentParser, what: str) -> None:
        sp.add_argument("--json", action="store_true", help=f"print {what} as JSON")

    def text_args(sp: argparse.ArgumentParser, *, output: bool) -> None:
        null = "written for NULL" if output else "that means NULL"
        what = "written" if output else "in the file"
        sp.add_argument("--null-value", default="", metavar="TEXT",
                        help=f"CSV: the unquoted text {null} (default: an empty field; a "
                        "quoted \"\" is always the empty string)")
        sp.add_argument("--date-format", metavar="FORMAT",
                        help=f"CSV: strftime pattern of the dates {what}, e.g. %%d/%%m/%%Y "
                        "(default: ISO 8601)")
        sp.add_argument("--timestamp-format", metavar="FORMAT",
                        help=f"CSV: strftime pattern of the timestamps {what}, e.g. "
                        "'%%Y-%%m-%%d %%H:%%M:%%S.%%f' (%%f: microseconds; default: ISO 8601)")

    def input_args(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("source", help="Parquet, CSV or JSON lines file (CSV and JSON are "
                        "parsed with the table's column types)")
        sp.add_argument("--format", choices=list(FORMATS),
                        help="input format (default: by suffix; .csv/.tsv are CSV, "
                        ".json/.jsonl/.ndjson JSON lines)")
        sp.add_argument("--progress", action="store_true",
                        help="always show progress on stderr (default: when it is a terminal)")
        text_args(sp, output=False)

    c = table_cmd("create", "create a table, optionally from a Parquet, CSV or JSON lines "
                  "file")
    c.add_argument("--from", dest="source",
                   help="Parquet, CSV or JSON lines file giving the rows (and, without "
                   "--schema, the schema)")
    c.add_argument("--schema", help="explicit schema, e.g. 'id:int64,name:string,"
                   "tags:list<string>,dev:struct<os:string,v:int32>,attrs:map<string,int64>'; "
                   "with --from, the types of the file's columns")
    c.add_argument("--format", choices=list(FORMATS), help="input format (default: by suffix)")
    c.add_argument("--progress", action="store_true", help="always show progress")
    text_args(c, output=False)
    c.set_defaults(fn=cmd_create)

    a = table_cmd("append", "append the rows of a Parquet, CSV or JSON lines file as one "
                  "commit")
    input_args(a)
    a.set_defaults(fn=cmd_append)

    u = table_cmd("upsert", "replace the rows whose key is in the file, add the rest "
                  "(one commit)")
    input_args(u)
    u.add_argument("--key", required=True, help="comma-separated key columns, e.g. a,b")
    u.add_argument("--on-duplicate", choices=["error", "last", "first"], default="error",
                   help="a key twice in the file: refuse (default) or keep its last or first "
                   "row")
    u.set_defaults(fn=cmd_upsert)

    o = table_cmd("overwrite", "replace every row with the file's rows (one commit)")
    input_args(o)
    o.set_defaults(fn=cmd_overwrite)

    s = table_cmd("scan", "read rows")
    s.add_argument("--columns", help="comma-separated columns")
    s.add_argument("--where", help="SQL predicate, e.g. \"id BETWEEN 1 AND 5 AND user = 'u1'\"")
    s.add_argument("--version", type=int, help="read this version")
    s.add_argument("--as-of", help="read the version current at this ISO-8601 time")
    s.add_argument("--limit", type=int, help="at most this many rows")
    s.add_argument("--json", action="store_true",
                   help="print one JSON object per row (JSON lines), streamed")
    s.add_argument("--output", metavar="FILE",
                   help="write the rows to FILE (.parquet or .csv), streamed")
    s.add_argument("--output-format", choices=["parquet", "csv"],
                   help="format of --output (default: by suffix)")
    s.add_argument("--plan", action="store_true", help="print what would be read, as JSON")
    text_args(s, output=True)
    s.set_defaults(fn=cmd_scan)

    d = table_cmd("delete", "delete rows matching a predicate (writes a tombstone, no rewrite)")
    d.add_argument("--where", required=True, help="SQL predicate of the rows to delete")
    d.set_defaults(fn=cmd_delete)

    up = table_cmd("update", "set columns of the rows matching a predicate (one commit: a "
                   "tombstone for the old rows, their new values appended)")
    up.add_argument("--set", action="append", required=True, metavar="COLUMN=EXPR",
                    help="a column and its new value as SQL, e.g. \"status='closed'\" or "
                    "'amount=amount * 1.1' (repeat for more columns)")
    up.add_argument("--where", help="SQL predicate of the rows to update (default: every row)")
    json_flag(up, "the commit result")
    up.set_defaults(fn=cmd_update)

    v = table_cmd("verify", "check that every referenced object exists and agrees")
    v.add_argument("--deep", action="store_true",
                   help="also check every Parquet footer and every page's CRC-32")
    v.add_argument("--all-versions", action="store_true", help="check every version in history")
    v.add_argument("--progress", action="store_true",
                   help="always show a progress bar (default: on a terminal, not with --json)")
    json_flag(v, "the report (for monitoring)")
    v.set_defaults(fn=cmd_verify)

    k = table_cmd("compact", "rewrite small and mostly-deleted files into new ones")
    k.add_argument("--deleted-fraction", type=float, default=0.1,
                   help="rewrite files with at least this share of rows deleted (default 0.1)")
    k.add_argument("--target-file-size", type=_size, metavar="SIZE",
                   help="size of the files written, e.g. 256MiB (default: the table's "
                   "write option, 256 MiB); files under half of it count as small")
    k.add_argument("--dry-run", action="store_true",
                   help="say what would be rewritten; write and commit nothing")
    k.set_defaults(fn=cmd_compact)

    pu = table_cmd("purge", "physically erase matching rows (row-group splice, one version)")
    pu.add_argument("--where", required=True, help="SQL predicate of the rows to erase")
    pu.add_argument("--dry-run", action="store_true", help="plan and report, write nothing")
    pu.add_argument("--expire", action="store_true",
                    help="also expire the versions that still reference the erased values")
    pu.add_argument("--json", action="store_true", help="print the result as JSON")
    pu.set_defaults(fn=cmd_purge)

    g = table_cmd("gc", "expire old versions and delete objects no retained version uses")
    g.add_argument("--retain-hours", type=float, default=168.0,
                   help="keep versions (and unreferenced new objects) this young (default 168)")
    g.add_argument("--dry-run", action="store_true", help="report, commit and delete nothing")
    g.add_argument("--force", action="store_true", help="allow a retention below 24 hours")
    json_flag(g, "the report")
    g.set_defaults(fn=cmd_gc)

    rs = table_cmd("restore", "make a new version whose contents equal an older version "
                   "(one commit; no data rewritten)")
    which = rs.add_mutually_exclusive_group()
    which.add_argument("--version", type=int, help="restore this version")
    which.add_argument("--timestamp", help="restore the version current at this ISO-8601 time")
    which.add_argument("--tag", help="restore the version this tag names")
    json_flag(rs, "the result")
    rs.set_defaults(fn=cmd_restore)

    h = table_cmd("history", "list versions, newest first")
    h.add_argument("--limit", type=int, help="at most this many versions, newest first")
    json_flag(h, "the versions")
    h.set_defaults(fn=cmd_history)

    sh = table_cmd("show", "version, files, rows, bytes and tombstones of the current version")
    json_flag(sh, "the description")
    sh.set_defaults(fn=cmd_show)

    r = table_cmd("refs", "list branches, tags and clone holds")
    r.add_argument("--json", action="store_true", help="print the result as JSON")
    r.set_defaults(fn=cmd_refs)

    br = table_cmd("branch", "create, drop, fast-forward or merge a branch")
    br.add_argument("action", choices=["create", "drop", "fast-forward", "merge"],
                    help="what to do with the branch")
    br.add_argument("name", help="the branch (for fast-forward and merge: the source)")
    br.add_argument("--from-version", type=int, help="create: fork at this version of main")
    br.add_argument("--tag", help="create: fork at this tag")
    br.add_argument("--target", default="main", help="fast-forward / merge into this branch")
    br.add_argument("--json", action="store_true", help="print the result as JSON")
    br.set_defaults(fn=cmd_branch)

    tg = table_cmd("tag", "create or drop an immutable tag")
    tg.add_argument("action", choices=["create", "drop"], help="what to do with the tag")
    tg.add_argument("name", help="the tag")
    tg.add_argument("--version", type=int, help="create: tag this version (default: latest)")
    tg.add_argument("--branch", help="create: a version of this branch (default: main)")
    tg.add_argument("--json", action="store_true", help="print the result as JSON")
    tg.set_defaults(fn=cmd_tag)

    cl = table_cmd("clone", "zero-copy clone of a table (uri) into a new table (target)")
    cl.add_argument("target", help="where the clone is created")
    cl.add_argument("--version", type=int, help="clone this version (default: latest)")
    cl.add_argument("--tag", help="clone the version of this tag")
    cl.add_argument("--json", action="store_true", help="print the result as JSON")
    cl.set_defaults(fn=cmd_clone)

    sc = table_cmd("schema", "schema history (ids and changes); optionally change it")
    sc.add_argument("--add", action="append", metavar="NAME:TYPE",
                    help="add a column, or a struct's field by its dotted path; TYPE may be "
                    "nested, e.g. dev.loc:struct<lat:float64,lon:float64> or tags:list<string>")
    sc.add_argument("--rename", action="append", metavar="OLD:NEW",
                    help="rename a column or nested field (dev.os:platform)")
    sc.add_argument("--drop", action="append", metavar="NAME",
                    help="drop a column or a struct's field (dev.os)")
    sc.add_argument("--widen", action="append", metavar="NAME:TYPE",
                    help="widen a type, nested ones by path (tags.element:int64)")
    sc.add_argument("--make-nullable", action="append", metavar="NAME",
                    help="let a column or nested field hold NULL")
    sc.add_argument("--json", action="store_true", help="print the result as JSON")
    sc.set_defaults(fn=cmd_schema)

    pr = table_cmd("properties", "print the table properties, or set some (one commit)")
    pr.add_argument("--set", action="append", metavar="KEY=VALUE",
                    help="set a property (repeatable); all --set values are one commit")
    json_flag(pr, "the properties")
    pr.set_defaults(fn=cmd_properties)

    rp = table_cmd("report", "draw the table's health as one self-contained HTML page")
    rp.add_argument("--html", required=True, metavar="PATH",
                    help="where to write the report, e.g. report.html")
    json_flag(rp, "a summary of the report")
    rp.set_defaults(fn=cmd_report)

    ex = sub.add_parser("export", help="publish a version as Iceberg or Delta metadata "
                        "(zero-copy, deletes included)")
    ex_sub = ex.add_subparsers(dest="target", required=True)
    for target, what in (("iceberg", "Iceberg v2 metadata under <table>/metadata/"),
                         ("delta", "a Delta commit in <table>/_delta_log/")):
        e = ex_sub.add_parser(target, help=f"write {what}")
        e.add_argument("uri", help=URI_HELP)
        e.add_argument("--storage-option", "-o", action="append", metavar="KEY=VALUE",
                       help="store option, e.g. endpoint_url=http://... (repeatable)")
        e.add_argument("--version", type=int, help="export this version (default: latest)")
        if target == "iceberg":
            e.add_argument("--out", help="write metadata under OUT/metadata/ instead")
        e.add_argument("--json", action="store_true", help="print the result as JSON")
        e.set_defaults(fn=cmd_export, out=None)
    e = ex_sub.add_parser("drop", help="delete an export (every object of it); refused while "
                          "the table property export.<format> is true")
    e.add_argument("uri", help=URI_HELP)
    e.add_argument("--storage-option", "-o", action="append", metavar="KEY=VALUE",
                   help="store option, e.g. endpoint_url=http://... (repeatable)")
    e.add_argument("--format", required=True, choices=("iceberg", "delta"),
                   help="the export to delete")
    e.add_argument("--out", help="an Iceberg export written with --out OUT")
    e.add_argument("--json", action="store_true", help="print the result as JSON")
    e.set_defaults(fn=cmd_export)


    add_dataset_commands(sub)
    add_txn_command(sub)
    return p


# Library messages name Python keywords; the CLI user needs the flag.
_FLAG_WORDS = [(re.compile(r"on_duplicate='last' or 'first'"), "--on-duplicate last or first"),
               (re.compile(r"\bforce=True \(--force\)"), "--force"),
               (re.compile(r"\bforce=True\b"), "--force"),
               (re.compile(r"\btarget_file_size\b"), "--target-file-size"),
               (re.compile(r"\bdeleted_fraction\b"), "--deleted-fraction"),
               (re.compile(r"\bretention\b"), "--retain-hours")]


def cli_wording(message: str) -> str:
    for pattern, flag in _FLAG_WORDS:
        message = pattern.sub(flag, message)
    return message


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "limit", None) is not None and args.limit < 0:
        parser.error("--limit must be >= 0")
    try:
        return _run(args, out)
    finally:
        _wind_down(out)


def _run(args: argparse.Namespace, out: TextIO) -> int:
    try:
        code: int = args.fn(args, out)
        return code
    except CaslakeError as e:
        sys.stderr.write(f"caslake: error: {cli_wording(str(e))}\n")
        return EXIT_ERROR
    except KeyboardInterrupt:
        sys.stderr.write("caslake: interrupted\n")
        return 130
    except BrokenPipeError:
        _quiet_stdout()
        return 0
    except OSError as e:  # a layer that missed its mapping: still one line, no traceback
        where = f": {e.filename}" if e.filename else ""
        sys.stderr.write(f"caslake: error: {e.strerror or e}{where}\n")
        return EXIT_ERROR


def _wind_down(out: TextIO) -> None:
    """Before exit: join caslake's thread pools and flush the output, so no thread of
    ours is still running while the interpreter shuts down (a native thread that
    calls into Python then is killed mid-frame: "terminate called without an active
    exception", rc -6; issue 27)."""
    from caslake.core import shutdown_all

    shutdown_all()
    for stream in (out, sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed, or the reader went away
            stream.flush()


def _quiet_stdout() -> None:
    """The reader went away (``| head``): send what is still buffered nowhere, so
    Python's exit flush does not fail a second time."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def console_main() -> None:
    """The process entry point (the ``caslake`` script and ``python -m caslake.cli``).

    After :func:`main` has joined caslake's pools and flushed the output, the process
    ends with ``os._exit``: interpreter teardown is skipped, so a native thread some
    library left running (Arrow's, the AWS SDK's) cannot be destroyed mid-call, which
    aborts the process with rc -6 ("terminate called without an active exception",
    issue 27) after the command has already succeeded."""
    import os

    code = main()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    console_main()
