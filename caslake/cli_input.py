"""Input files of the ``caslake`` command: Parquet or CSV, as a streaming reader.

A CSV file appended to an existing table is parsed with the table's column
types, never with guessed ones (a column of whole numbers stays ``double`` if
the table says so; ``007`` stays a string).  A cell that does not parse as its
column's type is an :class:`~caslake.errors.InputDataError` naming the file,
line, column and cell.  Parquet files carry their own types; they are
conformed by the append like any other Arrow data.  Never reads a whole file
into memory.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from caslake.errors import InputDataError, InvalidArgument, SchemaMismatch

BATCH_ROWS = 65_536


def input_format(path: str, fmt: str | None) -> str:
    if fmt is not None:
        return fmt
    return "csv" if Path(path).suffix.lower() in (".csv", ".tsv") else "parquet"


def open_input(path: str, fmt: str | None, schema: pa.Schema | None = None
               ) -> pa.RecordBatchReader:
    """A streaming reader over a Parquet or CSV file; CSV columns typed by ``schema``
    (the table's) when given."""
    p = Path(path)
    if not p.exists():
        raise InvalidArgument(f"input file {path!r} does not exist")
    kind = input_format(path, fmt)
    try:
        if kind == "csv":
            return _open_csv(p, schema)
        if kind == "parquet":
            pf = pq.ParquetFile(p)
            return pa.RecordBatchReader.from_batches(pf.schema_arrow,
                                                     pf.iter_batches(batch_size=BATCH_ROWS))
    except (OSError, pa.ArrowException) as e:
        raise InvalidArgument(f"cannot read {path!r} as {kind}: {e}") from None
    raise InvalidArgument(f"unknown input format {kind!r} (use parquet or csv)")


def _delimiter(p: Path) -> str:
    return "\t" if p.suffix.lower() == ".tsv" else ","


def _header(p: Path) -> list[str]:
    with open(p, newline="", encoding="utf-8") as f:
        return next(csv.reader(f, delimiter=_delimiter(p)), [])


def _open_csv(p: Path, schema: pa.Schema | None) -> pa.RecordBatchReader:
    parse = pcsv.ParseOptions(delimiter=_delimiter(p))
    if schema is None:
        return pcsv.open_csv(p, parse_options=parse)
    header = _header(p)
    missing = [n for n in schema.names if n not in header]
    if missing:
        raise SchemaMismatch(f"{str(p)!r} is missing column(s) "
                             f"{', '.join(repr(n) for n in missing)} of the table",
                             column=missing[0])
    types = {n: schema.field(n).type for n in header if n in schema.names}
    # Strings are read as written: no null markers for them, so "" and "NA" stay text.
    convert = pcsv.ConvertOptions(column_types=types, strings_can_be_null=False,
                                  quoted_strings_can_be_null=False)
    try:  # the first block is converted here already
        reader = pcsv.open_csv(p, parse_options=parse, convert_options=convert,
                               read_options=pcsv.ReadOptions(block_size=1 << 22))
    except pa.ArrowInvalid as e:
        raise _first_bad_cell(p, types) or InvalidArgument(
            f"cannot read {str(p)!r} as CSV: {e}") from None
    return pa.RecordBatchReader.from_batches(reader.schema, _located(p, reader, types))


def _located(p: Path, reader: pcsv.CSVStreamingReader,
             types: dict[str, pa.DataType]) -> Iterator[pa.RecordBatch]:
    """The batches; on a conversion error, find and name the first bad cell."""
    try:
        yield from reader
    except pa.ArrowInvalid as e:
        raise _first_bad_cell(p, types) or InvalidArgument(
            f"cannot read {str(p)!r} as CSV: {e}") from None


def _first_bad_cell(p: Path, types: dict[str, pa.DataType]) -> InputDataError | None:
    """Read the file again as text, batch by batch, and cast each column to its
    type until one fails; return that cell.  Line numbers count the header as
    line 1 and assume one line per record (a quoted newline shifts them)."""
    parse = pcsv.ParseOptions(delimiter=_delimiter(p))
    text = pcsv.open_csv(p, parse_options=parse, convert_options=pcsv.ConvertOptions(
        column_types=dict.fromkeys(types, pa.string()), strings_can_be_null=False))
    row = 0
    for batch in text:
        for name, typ in types.items():
            values = batch.column(name)
            if not pa.types.is_string(typ):  # an empty cell is a null, as the reader says
                empty = pc.equal(values, pa.scalar(""))
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
                    line = row + i + 2
                    return InputDataError(
                        f"{str(p)!r} line {line}, column {name!r}: {cell!r} is not a valid "
                        f"{typ}", path=str(p), line=line, column=name, value=cell)
        row += batch.num_rows
    return None
