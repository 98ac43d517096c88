"""What an append, overwrite or upsert accepts as data, turned into one
``pyarrow.RecordBatchReader``.

Accepted: pyarrow Tables, RecordBatches and RecordBatchReaders, pandas
DataFrames (the index is dropped), and any object that exports the Arrow
PyCapsule stream interface ``__arrow_c_stream__`` (Polars DataFrames, DuckDB
relations, Arrow objects of other libraries) or a single array
(``__arrow_c_array__``).  Streams are consumed lazily, batch by batch.
Never copies data it does not have to, never guesses a schema.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from caslake.errors import InvalidArgument

ACCEPTED = ("a pyarrow Table, RecordBatch or RecordBatchReader, a pandas DataFrame, or any "
            "object with __arrow_c_stream__ (a Polars DataFrame, a DuckDB relation, ...)")


def as_reader(data: Any) -> pa.RecordBatchReader:
    """One streaming reader over ``data``; InvalidArgument lists what is accepted."""
    if isinstance(data, pa.RecordBatchReader):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.RecordBatchReader.from_batches(data.schema, [data])
    if isinstance(data, pa.Table):
        return data.to_reader()
    if type(data).__module__.startswith("pandas"):
        # before __arrow_c_stream__: pandas' own export would keep the index as a column
        return pa.Table.from_pandas(data, preserve_index=False).to_reader()
    if hasattr(data, "__arrow_c_stream__"):
        try:
            return pa.RecordBatchReader.from_stream(data)
        except (TypeError, pa.ArrowException) as e:
            raise InvalidArgument(f"cannot read {type(data).__name__} through "
                                  f"__arrow_c_stream__: {e}") from None
    if hasattr(data, "__arrow_c_array__"):
        batch = pa.record_batch(data)
        return pa.RecordBatchReader.from_batches(batch.schema, [batch])
    raise InvalidArgument(f"cannot append {type(data).__name__}: pass {ACCEPTED}")
