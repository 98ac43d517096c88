"""Input files of the ``caslake`` command: Parquet, CSV or JSON lines, as a streaming
reader.

CSV keeps NULL and the empty string apart, as DuckDB's ``read_csv`` does with
``allow_quoted_nulls=false`` (DuckDB's default and Spark's ``spark.read.csv`` read a
quoted ``""`` as NULL too, losing the difference a Parquet source has): an
unquoted empty field is NULL, a quoted ``""`` is the empty string; ``--null-value``
names another text that means NULL (unquoted only: a quoted one is text).  Nothing
else is a null marker: ``NA``, ``null`` and ``nan`` in a string column stay text.

A CSV file appended to an existing table is parsed with the table's column
types, never with guessed ones (a column of whole numbers stays ``double`` if
the table says so; ``007`` stays a string).  Without a table (``create --from``)
the types are inferred from the first block of the file; a column with no value
there is a string column, and timestamps are microseconds (``timestamp[us]``, with
or without ``--timestamp-format``) unless a value there has sub-microsecond digits.
A cell that does not parse as its column's type is an
:class:`~caslake.errors.InputDataError` naming the file, line, column and cell.
``--date-format`` / ``--timestamp-format`` are ``strftime`` patterns
(``%d/%m/%Y``, ``%Y-%m-%d %H:%M:%S.%f``: ``%f`` is microseconds) limited to the
directives Python's ``strptime`` reads (:data:`DIRECTIVES`), checked before anything
is read or written: an unknown one is an :class:`InvalidTextFormat`.

JSON lines (``.json``, ``.jsonl``, ``.ndjson``: one object per line) is read with
the table's types as well, including what ``caslake scan --json`` writes for types
JSON has no literal for: ISO dates, times and timestamps, decimals as text, binary
as base64.  Parquet files carry their own types; they are conformed by the append
like any other Arrow data.  Never reads a whole file into memory.
"""

from __future__ import annotations

import base64
import binascii
import csv
import datetime as dt
import decimal
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.json as pjson
import pyarrow.parquet as pq

from caslake.errors import CaslakeError, InputDataError, InvalidArgument, SchemaMismatch

BATCH_ROWS = 65_536
BLOCK_BYTES = 1 << 22
FORMATS = ("parquet", "csv", "json")
SUPPORTED = ("parquet (.parquet, .pq), csv (.csv, .tsv) and json lines "
             "(.json, .jsonl, .ndjson)")
_SUFFIXES = {".csv": "csv", ".tsv": "csv", ".json": "json", ".jsonl": "json",
             ".ndjson": "json", ".parquet": "parquet", ".pq": "parquet"}


class InvalidTextFormat(InvalidArgument):
    """A ``--date-format`` / ``--timestamp-format`` caslake cannot read (or write)
    dates by: an unknown ``directive`` (e.g. ``%Q``), or none at all."""

    def __init__(self, message: str, *, option: str, format: str,
                 directive: str | None = None) -> None:
        super().__init__(message)
        self.option = option
        self.format = format
        self.directive = directive


class CsvCannotHold(InvalidArgument):
    """A nested column (struct, list, map) has no CSV form; ``column`` names it."""

    def __init__(self, column: str, type: pa.DataType, what: str) -> None:
        super().__init__(f"column {column!r} is {_type_name(type)}, which CSV cannot hold; "
                         f"{what}")
        self.column = column


def refuse_nested_csv(schema: pa.Schema, what: str) -> None:
    """CsvCannotHold for the first nested column of ``schema``."""
    for f in schema:
        if pa.types.is_nested(f.type):
            raise CsvCannotHold(f.name, f.type, what)


@dataclass(frozen=True)
class TextOptions:
    """How CSV cells are read and written: ``--null-value``, ``--date-format``,
    ``--timestamp-format`` (None: ISO 8601)."""

    null_value: str = ""
    date_format: str | None = None
    timestamp_format: str | None = None

    def check(self, delimiter: str = ",") -> TextOptions:
        bad = [c for c in (delimiter, '"', "\n", "\r") if c in self.null_value]
        if bad:
            raise InvalidArgument(f"--null-value {self.null_value!r} must not contain "
                                  f"{bad[0]!r} (a delimiter, quote or line break)")
        return self.check_formats()

    def check_formats(self) -> TextOptions:
        """Refuse a format caslake cannot read back: see :func:`check_format`."""
        for flag, fmt in (("--date-format", self.date_format),
                          ("--timestamp-format", self.timestamp_format)):
            if fmt is not None:
                check_format(flag, fmt)
        return self


# The directives Python's strptime reads (its documented C89 set, %f, and the ISO 8601
# week ones), so what ``scan --output`` writes by a format, caslake reads back by it.
# glibc's extras (%e %T %F %D %s ...) are refused: strptime cannot read them, and an
# unknown directive would be written literally ("%Q" in every cell).
DIRECTIVES = "aAwdbBmyYHIpMSfzZjUWcxX%GuV"
_PROBE = dt.datetime(2024, 2, 29, 13, 4, 5, 678901, tzinfo=dt.UTC)


def check_format(flag: str, fmt: str) -> None:
    """An :class:`InvalidTextFormat` naming ``flag`` and the directive unless every
    ``%`` directive of ``fmt`` is one of :data:`DIRECTIVES` (at least one besides
    ``%%``) and strptime accepts them together (``%G`` needs ``%V`` and a weekday)."""
    i, found = 0, False
    while i < len(fmt):
        if fmt[i] != "%":
            i += 1
            continue
        directive = fmt[i:i + 2]
        if len(directive) < 2 or directive[1] not in DIRECTIVES:
            shown = directive if len(directive) == 2 else "a lone % at the end"
            raise InvalidTextFormat(
                f"{flag} {fmt!r} has an unknown directive {shown}; the directives are "
                f"{' '.join('%' + d for d in DIRECTIVES)} (write %% for a literal %)",
                option=flag, format=fmt, directive=directive)
        found = found or directive != "%%"
        i += 2
    if not found:
        raise InvalidTextFormat(f"{flag} {fmt!r} has no % directive (e.g. %Y-%m-%d)",
                                option=flag, format=fmt)
    try:
        dt.datetime.strptime(_PROBE.strftime(fmt), fmt)
    except ValueError as e:
        raise InvalidTextFormat(f"{flag} {fmt!r} cannot be read back: {e}", option=flag,
                                format=fmt) from None


def input_format(path: str, fmt: str | None) -> str:
    if fmt is not None:
        return fmt
    return _SUFFIXES.get(Path(path).suffix.lower(), "parquet")


def open_input(path: str, fmt: str | None, schema: pa.Schema | None = None,
               options: TextOptions | None = None) -> pa.RecordBatchReader:
    """A streaming reader over a Parquet, CSV or JSON lines file; CSV and JSON columns
    typed by ``schema`` (the table's) when given."""
    p = Path(path)
    if not p.exists():
        raise InvalidArgument(f"input file {path!r} does not exist")
    if not p.is_file():
        raise InvalidArgument(f"input {path!r} is not a file")
    kind = input_format(path, fmt)
    options = options or TextOptions()
    try:
        if kind == "csv":
            return _open_csv(p, schema, options.check(_delimiter(p)))
        if kind == "json":
            return _open_json(p, schema)
        if kind == "parquet":
            pf = pq.ParquetFile(p)
            return pa.RecordBatchReader.from_batches(pf.schema_arrow,
                                                     pf.iter_batches(batch_size=BATCH_ROWS))
    except (OSError, pa.ArrowException) as e:
        if kind == "parquet" and fmt is None and p.suffix.lower() not in _SUFFIXES:
            raise InvalidArgument(
                f"cannot read {path!r}: it is not a Parquet file and its suffix names no "
                f"other format; the input formats are {SUPPORTED} (or use --format)"
            ) from None
        raise InvalidArgument(f"cannot read {path!r} as {kind}: {e}") from None
    raise InvalidArgument(f"unknown input format {kind!r}; the input formats are {SUPPORTED}")


# --- CSV ------------------------------------------------------------------------------------


def _delimiter(p: Path) -> str:
    return "\t" if p.suffix.lower() == ".tsv" else ","


def _header(p: Path) -> list[str]:
    with open(p, newline="", encoding="utf-8") as f:
        return next(csv.reader(f, delimiter=_delimiter(p)), [])


def _convert(opts: TextOptions, types: dict[str, pa.DataType] | None) -> pcsv.ConvertOptions:
    """Unquoted ``opts.null_value`` is NULL in every column; a quoted one is text."""
    kwargs: dict[str, Any] = {}
    if types is not None:
        kwargs["column_types"] = types
    return pcsv.ConvertOptions(null_values=[opts.null_value], strings_can_be_null=True,
                               quoted_strings_can_be_null=False, **kwargs)


def uses_format(typ: pa.DataType, opts: TextOptions) -> bool:
    """Whether the column is parsed by a --date-format / --timestamp-format (as text
    first, then converted here) instead of by the CSV reader."""
    return bool((pa.types.is_date(typ) and opts.date_format is not None)
                or (pa.types.is_timestamp(typ) and opts.timestamp_format is not None))


def _open_csv(p: Path, schema: pa.Schema | None, opts: TextOptions) -> pa.RecordBatchReader:
    parse = pcsv.ParseOptions(delimiter=_delimiter(p), newlines_in_values=True)
    read = pcsv.ReadOptions(block_size=BLOCK_BYTES)
    header = _header(p)
    if schema is not None:
        refuse_nested_csv(schema, "append it from JSON lines (.jsonl, one object per row, "
                          "as `caslake scan --json` writes) or Parquet")
    if schema is None:
        types = _infer_csv_types(p, parse, read, opts)
    else:
        missing = [n for n in schema.names if n not in header]
        if missing:
            raise SchemaMismatch(f"{str(p)!r} is missing column(s) "
                                 f"{', '.join(repr(n) for n in missing)} of the table",
                                 column=missing[0])
        types = {n: schema.field(n).type for n in header if n in schema.names}
    text_types = {n: (pa.string() if uses_format(t, opts) else t) for n, t in types.items()}
    try:  # the first block is converted here already
        reader = pcsv.open_csv(p, parse_options=parse, convert_options=_convert(
            opts, text_types), read_options=read)
    except pa.ArrowInvalid as e:
        raise _first_bad_cell(p, text_types, opts) or InvalidArgument(
            f"cannot read {str(p)!r} as CSV: {e}") from None
    formatted = {n: t for n, t in types.items() if uses_format(t, opts)}
    out_schema = pa.schema([pa.field(f.name, types.get(f.name, f.type))
                            for f in reader.schema])
    return pa.RecordBatchReader.from_batches(
        out_schema, _located(p, reader, text_types, formatted, out_schema, opts))


def _infer_csv_types(p: Path, parse: pcsv.ParseOptions, read: pcsv.ReadOptions,
                     opts: TextOptions) -> dict[str, pa.DataType]:
    """Column types from the first block: Arrow's inference, a column with no value
    there a string, and with --date-format / --timestamp-format a text column whose
    every value parses by it a date / timestamp."""
    try:
        reader = pcsv.open_csv(p, parse_options=parse, convert_options=_convert(opts, None),
                               read_options=read)
        first = reader.read_next_batch()
    except StopIteration:
        return {f.name: (pa.string() if pa.types.is_null(f.type) else f.type)
                for f in reader.schema}
    except pa.ArrowInvalid as e:
        raise InvalidArgument(f"cannot read {str(p)!r} as CSV: {e}") from None
    types: dict[str, pa.DataType] = {}
    for f in reader.schema:
        typ = pa.string() if pa.types.is_null(f.type) else f.type
        column = first.column(f.name)
        if pa.types.is_timestamp(typ):
            typ = _timestamp_unit(column, typ)
        if pa.types.is_string(typ) and column.null_count < len(column):
            for fmt, target in ((opts.date_format, pa.date32()),
                                (opts.timestamp_format, pa.timestamp("us"))):
                if fmt is not None and _all_parse(column, fmt):
                    typ = target
                    break
        types[f.name] = typ
    return types


def _timestamp_unit(column: pa.Array[Any], typ: pa.TimestampType) -> pa.DataType:
    """Microseconds, as with --timestamp-format (strptime's ``%f``) and the unit of
    DuckDB's and Spark's timestamps (Arrow infers seconds or nanoseconds by the digits
    it sees).  A column whose first block holds a value with sub-microsecond digits
    stays nanoseconds."""
    micro = pa.timestamp("us", tz=typ.tz)
    unit: str = typ.unit
    if unit != "ns":
        return micro
    try:
        column.cast(micro)  # safe: fails if a digit would be lost
    except pa.ArrowInvalid:
        return typ
    return micro


def _all_parse(column: pa.Array[Any], fmt: str) -> bool:
    try:
        for v in column.drop_null().unique().to_pylist():
            dt.datetime.strptime(str(v), fmt)
    except ValueError:
        return False
    return True


def _parse_text(values: pa.Array[Any], typ: pa.DataType, fmt: str, p: Path, name: str,
                first_line: int) -> pa.Array[Any]:
    """Text cells -> dates or timestamps by a strftime pattern (each distinct value
    parsed once); a cell that does not parse is an InputDataError naming its line
    (``first_line``: the line of the first cell)."""
    encoded = values.dictionary_encode()
    parsed: list[Any] = []
    tz = typ.tz if pa.types.is_timestamp(typ) else None
    for text in encoded.dictionary.to_pylist():
        try:
            value = dt.datetime.strptime(str(text), fmt)
        except ValueError:
            line = first_line + values.index(text).as_py()
            raise _bad(p, line, name, text, f"value for the format {fmt!r}") from None
        if pa.types.is_date(typ):
            parsed.append(value.date())
        elif tz is not None and value.tzinfo is None:
            parsed.append(value.replace(tzinfo=dt.UTC))
        elif tz is None and value.tzinfo is not None:
            parsed.append(value.astimezone(dt.UTC).replace(tzinfo=None))
        else:
            parsed.append(value)
    try:
        dictionary = pa.array(parsed, typ)
    except (pa.ArrowInvalid, OverflowError) as e:
        raise InvalidArgument(f"a value does not fit {typ}: {e}") from None
    return dictionary.take(encoded.indices)


def _located(p: Path, reader: pcsv.CSVStreamingReader, types: dict[str, pa.DataType],
             formatted: dict[str, pa.DataType], schema: pa.Schema,
             opts: TextOptions) -> Iterator[pa.RecordBatch]:
    """The batches, formatted columns parsed; on a conversion error, find and name the
    first bad cell."""
    row = 0
    try:
        for batch in reader:
            if formatted:
                arrays = []
                for f in schema:
                    col = batch.column(f.name)
                    if f.name in formatted:
                        fmt = (opts.date_format if pa.types.is_date(f.type)
                               else opts.timestamp_format)
                        assert fmt is not None
                        col = _parse_text(col, f.type, fmt, p, f.name, row + 2)
                    arrays.append(col)
                batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
            row += batch.num_rows
            yield batch
    except pa.ArrowInvalid as e:
        raise _first_bad_cell(p, types, opts) or InvalidArgument(
            f"cannot read {str(p)!r} as CSV: {e}") from None


def _bad(p: Path, line: int, column: str, cell: str | None, what: str) -> InputDataError:
    return InputDataError(f"{str(p)!r} line {line}, column {column!r}: {cell!r} is not a "
                          f"valid {what}", path=str(p), line=line, column=column, value=cell)


def _first_bad_cell(p: Path, types: dict[str, pa.DataType],
                    opts: TextOptions) -> InputDataError | None:
    """Read the file again as text, batch by batch, and cast each column to its
    type until one fails; return that cell.  Line numbers count the header as
    line 1 and assume one line per record (a quoted newline shifts them)."""
    parse = pcsv.ParseOptions(delimiter=_delimiter(p), newlines_in_values=True)
    text = pcsv.open_csv(p, parse_options=parse, convert_options=pcsv.ConvertOptions(
        column_types=dict.fromkeys(types, pa.string()), strings_can_be_null=False))
    row = 0
    for batch in text:
        for name, typ in types.items():
            values = batch.column(name)
            if not pa.types.is_string(typ):  # the null marker is a null, as the reader says
                empty = pc.equal(values, pa.scalar(opts.null_value))
                values = pc.if_else(empty, pa.scalar(None, pa.string()), values)
            try:
                values.cast(typ)
                continue
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                pass
            for i, cell in enumerate(values.to_pylist()):
                try:
                    pa.array([cell], pa.string()).cast(typ)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    return _bad(p, row + i + 2, name, cell, str(typ))
        row += batch.num_rows
    return None


# --- JSON lines -----------------------------------------------------------------------------


def _json_native(typ: pa.DataType) -> bool:
    """Types Arrow's JSON reader converts itself (timestamps from ISO 8601 text)."""
    return bool(pa.types.is_integer(typ) or pa.types.is_floating(typ)
                or pa.types.is_boolean(typ) or pa.types.is_string(typ)
                or pa.types.is_large_string(typ) or pa.types.is_timestamp(typ)
                or pa.types.is_null(typ))


def _open_json(p: Path, schema: pa.Schema | None) -> pa.RecordBatchReader:
    read = pjson.ReadOptions(block_size=BLOCK_BYTES)
    if schema is None:
        inferred = pjson.open_json(p, read_options=read).schema
        schema = pa.schema([f.with_type(_no_null_type(f.type)) for f in inferred])
    if any(pa.types.is_nested(f.type) for f in schema):
        return pa.RecordBatchReader.from_batches(schema, _nested_json_batches(p, schema))
    text_schema = pa.schema([pa.field(f.name, f.type if _json_native(f.type) else pa.string())
                             for f in schema])
    reader = pjson.open_json(p, read_options=read, parse_options=pjson.ParseOptions(
        explicit_schema=text_schema, unexpected_field_behavior="error"))
    return pa.RecordBatchReader.from_batches(schema, _json_batches(p, reader, schema))


def _json_batches(p: Path, reader: Any, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    row = 0
    try:
        for batch in reader:
            arrays = []
            for f in schema:
                col = batch.column(f.name)
                if col.type != f.type:
                    col = _from_json_text(p, col, f.name, f.type, row)
                arrays.append(col)
            row += batch.num_rows
            yield pa.RecordBatch.from_arrays(arrays, schema=schema)
    except pa.ArrowInvalid as e:
        raise InvalidArgument(f"cannot read {str(p)!r} as JSON lines (one object per line, "
                              f"with the table's columns): {e}") from None


_TEXT_ERRORS = (ValueError, binascii.Error, pa.ArrowInvalid, pa.ArrowNotImplementedError)


def _from_json_text(p: Path, col: pa.Array[Any], name: str, typ: pa.DataType,
                    row: int) -> pa.Array[Any]:
    """A column JSON has no literal for, from the text ``scan --json`` writes; a cell
    that does not convert is an InputDataError naming its line."""
    try:
        return _json_text_to(col, typ)
    except _TEXT_ERRORS:
        pass
    for i, cell in enumerate(col.to_pylist()):  # name the first cell that fails
        try:
            _json_text_to(pa.array([cell], pa.string()), typ)
        except _TEXT_ERRORS:
            raise _bad(p, row + i + 1, name, cell, str(typ)) from None
    raise InvalidArgument(f"cannot read column {name!r} of {str(p)!r} as {typ}")


def _json_text_to(col: pa.Array[Any], typ: pa.DataType) -> pa.Array[Any]:
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        return pa.array([None if v is None else base64.b64decode(v, validate=True)
                         for v in col.to_pylist()], typ)
    if pa.types.is_time(typ):
        return pa.array([None if v is None else dt.time.fromisoformat(v)
                         for v in col.to_pylist()], typ)
    return col.cast(typ)


# --- JSON lines with nested columns ---------------------------------------------------------
#
# Arrow's JSON reader has no maps and no text form of the types JSON lacks inside a
# struct or list, so a table with a nested column reads its JSON lines here: each
# line parsed by ``json``, each value converted by its type at every level.


def _no_null_type(t: pa.DataType) -> pa.DataType:
    """An inferred type with every null type (a field with no value yet) a string."""
    if pa.types.is_null(t):
        return pa.string()
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_no_null_type(f.type)) for f in t])
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_no_null_type(t.value_type)))
    return t


class _Bad(Exception):
    """A JSON value that is not of its field's type (``typ``), or a field the struct
    does not have (``typ`` None); ``path`` names the field."""

    def __init__(self, path: str, value: Any, typ: pa.DataType | None) -> None:
        super().__init__(path)
        self.path, self.value, self.typ = path, value, typ

    def error(self, p: Path, line: int) -> InputDataError:
        if self.typ is None:
            parent, _, name = self.path.rpartition(".")
            return InputDataError(f"{str(p)!r} line {line}: {self.path!r} is not in the table "
                                  f"(struct {parent!r} has no field {name!r})", path=str(p),
                                  line=line,
                                  column=self.path, value=_shown(self.value))
        return _bad(p, line, self.path, _shown(self.value), _type_name(self.typ))


def _type_name(t: pa.DataType) -> str:
    from caslake.format.type_text import type_text

    try:
        return type_text(t)
    except CaslakeError:
        return str(t)


def _nested_json_batches(p: Path, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    lines: list[tuple[int, str]] = []
    with open(p, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                lines.append((number, line))
            if len(lines) == BATCH_ROWS:
                yield _json_batch(p, lines, schema)
                lines = []
    if lines:
        yield _json_batch(p, lines, schema)


def _json_batch(p: Path, lines: list[tuple[int, str]], schema: pa.Schema) -> pa.RecordBatch:
    columns: dict[str, list[Any]] = {f.name: [] for f in schema}
    for number, line in lines:
        try:
            row = json.loads(line)
        except ValueError as e:
            raise InvalidArgument(f"{str(p)!r} line {number} is not JSON: {e}") from None
        if not isinstance(row, dict):
            raise InvalidArgument(f"{str(p)!r} line {number} is not a JSON object (JSON lines: "
                                  "one object per line)")
        extra = [k for k in row if k not in columns]
        if extra:
            raise SchemaMismatch(f"{str(p)!r} line {number} has column(s) "
                                 f"{', '.join(map(repr, extra))} the table does not",
                                 column=extra[0])
        for field in schema:
            try:
                columns[field.name].append(_json_to(row.get(field.name), field.type,
                                                    field.name))
            except _Bad as e:
                raise e.error(p, number) from None
    arrays = []
    for field in schema:
        try:
            arrays.append(pa.array(columns[field.name], field.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError) as e:
            raise InvalidArgument(f"{str(p)!r}: a value of column {field.name!r} (lines "
                                  f"{lines[0][0]}-{lines[-1][0]}) does not fit {field.type}: "
                                  f"{e}") from None
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _shown(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def _json_to(v: Any, t: pa.DataType, path: str) -> Any:
    """The Python value pyarrow builds a ``t`` from, for JSON value ``v``: a struct
    from an object, a list from an array, a map from an object (or an array of
    ``[key, value]`` pairs), and the text forms ``scan --json`` writes."""
    if v is None:
        return None
    if pa.types.is_struct(t):
        if not isinstance(v, dict):
            raise _Bad(path, v, t)
        names = {f.name for f in t}
        extra = next((k for k in v if k not in names), None)
        if extra is not None:
            raise _Bad(f"{path}.{extra}", v[extra], None)
        return {f.name: _json_to(v.get(f.name), f.type, f"{path}.{f.name}") for f in t}
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        if not isinstance(v, list):
            raise _Bad(path, v, t)
        return [_json_to(x, t.value_type, f"{path}.element") for x in v]
    if pa.types.is_map(t):
        pairs = (list(v.items()) if isinstance(v, dict) else
                 [tuple(x) for x in v if isinstance(x, list) and len(x) == 2]
                 if isinstance(v, list) else None)
        if pairs is None or (isinstance(v, list) and len(pairs) != len(v)):
            raise _Bad(path, v, t)
        return [(_key_to(k, t.key_type, f"{path}.key"), _json_to(x, t.item_type,
                                                                 f"{path}.value"))
                for k, x in pairs]
    return _leaf(v, t, path)


def _key_to(k: Any, t: pa.DataType, path: str) -> Any:
    """A map key: a JSON object's keys are text, whatever the key type."""
    if k is None:
        raise _Bad(path, k, t)
    if isinstance(k, str) and (pa.types.is_integer(t) or pa.types.is_floating(t)
                               or pa.types.is_boolean(t)):
        try:
            k = json.loads(k)
        except ValueError:
            raise _Bad(path, k, t) from None
    return _leaf(k, t, path)


def _leaf(v: Any, t: pa.DataType, path: str) -> Any:
    try:
        return _leaf_value(v, t)
    except (ValueError, TypeError, binascii.Error, decimal.InvalidOperation):
        raise _Bad(path, v, t) from None


def _leaf_value(v: Any, t: pa.DataType) -> Any:
    if pa.types.is_boolean(t):
        if not isinstance(v, bool):
            raise TypeError(v)
        return v
    if pa.types.is_integer(t):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(v)
        return v
    if pa.types.is_floating(t):
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise TypeError(v)
        return float(v)
    if pa.types.is_decimal(t):
        if isinstance(v, bool) or not isinstance(v, str | int | float):
            raise TypeError(v)
        return decimal.Decimal(str(v))
    if not isinstance(v, str):
        raise TypeError(v)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return v
    if isinstance(t, pa.BaseExtensionType) and t.extension_name == "arrow.uuid":
        return uuid.UUID(v)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return base64.b64decode(v, validate=True)
    if pa.types.is_date(t):
        return dt.date.fromisoformat(v)
    if pa.types.is_time(t):
        return dt.time.fromisoformat(v)
    if pa.types.is_timestamp(t):
        return dt.datetime.fromisoformat(v)
    raise TypeError(t)
