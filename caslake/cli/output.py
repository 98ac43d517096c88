"""Result output of the ``caslake`` command: JSON lines on stdout, or a Parquet
or CSV file, written batch by batch as the scan streams them (never the whole
result in memory, so ``caslake scan --json | head`` stops at once); and
human-friendly sizes for options such as ``--target-file-size``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import secrets
from collections.abc import Iterable
from datetime import date, datetime, time
from pathlib import Path
from typing import Any, TextIO

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from caslake.cli.input import TextOptions, refuse_nested_csv, uses_format
from caslake.errors import InvalidArgument

JSON_SLICE_ROWS = 1024
_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3,
          "gb": 1000**3, "kib": 1024, "mib": 1024**2, "gib": 1024**3}


def parse_size(text: str) -> int:
    """``1048576``, ``512KiB``, ``64MB``, ``1GiB`` -> bytes (argparse type)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if m is None or m.group(2).lower() not in _UNITS:
        raise ValueError(text)
    size = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if size <= 0:
        raise ValueError(text)
    return size


def json_value(v: Any) -> Any:
    """JSON for a value pyarrow's ``to_pylist`` returns that json cannot encode: dates,
    times and timestamps in ISO 8601, binary in base64, decimals and UUIDs as text."""
    if isinstance(v, datetime | date | time):
        return v.isoformat()
    if isinstance(v, bytes):
        return base64.b64encode(v).decode("ascii")
    return str(v)  # Decimal, UUID and anything else: its exact text


def _json_keys(v: Any) -> Any:
    """``v`` with every dict key that json cannot take (a date, bytes, a Decimal: map
    keys) turned into its text."""
    if isinstance(v, dict):
        return {(k if isinstance(k, str | int | float | bool) else json_value(k)):
                _json_keys(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_json_keys(x) for x in v]
    return v


def _has_map(t: pa.DataType) -> bool:
    if pa.types.is_map(t):
        return True
    return any(_has_map(t.field(i).type) for i in range(t.num_fields))


def _rows(piece: pa.RecordBatch) -> list[dict[str, Any]]:
    """The rows of ``piece``, a map as a JSON object (DuckDB's ``to_json`` too); a map
    with a key twice is an error rather than a lossy object."""
    if not any(_has_map(f.type) for f in piece.schema):
        return piece.to_pylist()
    try:
        return piece.to_pylist(maps_as_pydicts="strict")
    except (KeyError, ValueError, pa.ArrowException) as e:
        raise InvalidArgument(f"a map holds a key twice, which a JSON object cannot ({e}); "
                              "write the rows with --output FILE.parquet instead") from None


def _dumps(row: dict[str, Any]) -> str:
    try:
        return json.dumps(row, default=json_value)
    except TypeError:  # a map key json cannot take
        return json.dumps(_json_keys(row), default=json_value)


def emit_json_lines(batches: Iterable[pa.RecordBatch], out: TextIO) -> int:
    """One JSON object per row, flushed per batch; returns the rows written.  Nested
    values are JSON objects (structs, maps) and arrays (lists)."""
    n = 0
    for b in batches:
        for start in range(0, b.num_rows, JSON_SLICE_ROWS):  # a reader (| head) sees rows early
            piece = b.slice(start, JSON_SLICE_ROWS)
            out.write("".join(_dumps(row) + "\n" for row in _rows(piece)))
            out.flush()
            n += piece.num_rows
    return n


def output_format(path: str, fmt: str | None) -> str:
    if fmt is not None:
        return fmt
    suffix = Path(path).suffix.lower()
    if suffix in (".parquet", ".pq"):
        return "parquet"
    if suffix == ".csv":
        return "csv"
    raise InvalidArgument(f"cannot tell the format of --output {path!r} from its suffix: "
                          "use .parquet or .csv, or --output-format")


def write_output(batches: Iterable[pa.RecordBatch], schema: pa.Schema, path: str,
                 fmt: str | None, options: TextOptions | None = None) -> int:
    """Stream ``batches`` into a Parquet (zstd) or CSV file; returns the rows written.

    CSV: a NULL is ``options.null_value`` unquoted (default: an empty field), every
    string is quoted (so ``''`` is ``""``, and a string equal to the null marker is
    quoted text); dates and timestamps are ISO 8601 unless a format is given.

    The options are checked before anything is opened.  A regular file is written
    under a temporary name beside ``path`` and renamed onto it once complete, so a
    failure (a bad value, a store error mid-scan, Ctrl-C) leaves no partial file and
    an existing ``path`` as it was; a FIFO or device (``/dev/stdout``) is written
    in place."""
    kind = output_format(path, fmt)
    options = (options or TextOptions()).check()
    if kind == "csv":
        refuse_nested_csv(schema, "print the rows with --json, or write Parquet "
                          "(--output FILE.parquet), or leave the column out with --columns")
    target = Path(path).resolve() if Path(path).is_symlink() else Path(path)
    in_place = target.exists() and not target.is_file()
    tmp = target if in_place else _temporary(target)
    try:
        n = _write(batches, schema, str(tmp), kind, options)
        if not in_place:
            os.replace(tmp, target)
    except BaseException as e:
        if not in_place:
            with contextlib.suppress(OSError):
                tmp.unlink()
        if isinstance(e, OSError | pa.ArrowException):
            kept = "" if in_place else "; nothing was written there"
            raise InvalidArgument(f"cannot write --output {path!r}: {e}{kept}") from None
        raise
    return n


def _temporary(target: Path) -> Path:
    """A new empty file beside ``target``, created as ``open`` would create ``target``
    (mode 0666 less the umask), so the renamed result has the usual permissions."""
    for _ in range(100):
        tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.caslake-tmp")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        except OSError as e:
            raise InvalidArgument(f"cannot write --output {str(target)!r}: {e}") from None
        return tmp
    raise InvalidArgument(f"cannot write --output {str(target)!r}: no free temporary name")


def _write(batches: Iterable[pa.RecordBatch], schema: pa.Schema, path: str, kind: str,
           options: TextOptions) -> int:
    n = 0
    if kind == "parquet":
        with pq.ParquetWriter(path, schema, compression="zstd") as pw:
            for b in batches:
                pw.write_batch(b)
                n += b.num_rows
        return n
    write = pcsv.WriteOptions(null_string=options.null_value,  # type: ignore[call-arg]
                              quoting_style="needed")
    out_schema = pa.schema([pa.field(f.name, pa.string()) if uses_format(f.type, options)
                            else f for f in schema])
    with pcsv.CSVWriter(path, out_schema, write_options=write) as cw:
        for b in batches:
            cw.write_batch(_format_batch(b, out_schema, options))
            n += b.num_rows
    return n


def _format_batch(batch: pa.RecordBatch, schema: pa.Schema, options: TextOptions
                  ) -> pa.RecordBatch:
    """Dates and timestamps as text by --date-format / --timestamp-format (C strftime,
    each distinct value formatted once)."""
    if schema == batch.schema:
        return batch
    arrays = []
    for f, col in zip(batch.schema, batch.columns, strict=True):
        if uses_format(f.type, options):
            fmt = str(options.date_format if pa.types.is_date(f.type)
                      else options.timestamp_format)
            encoded = col.dictionary_encode()
            text = pa.array([strftime(v, fmt) for v in encoded.dictionary.to_pylist()],
                            pa.string())
            col = text.take(encoded.indices)
        arrays.append(col)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


_YEAR = re.compile(r"%(?:%|Y)")


def strftime(value: Any, fmt: str) -> str:
    """``value.strftime(fmt)`` with ``%Y`` always four digits (glibc writes year 999
    as ``999``, which ``strptime``'s ``%Y`` and DuckDB do not read back)."""
    fmt = _YEAR.sub(lambda m: "%%" if m.group() == "%%" else f"{value.year:04d}", fmt)
    return str(value.strftime(fmt))
