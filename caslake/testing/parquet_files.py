"""Add a Parquet file written with exact row groups to a table, for tests and benchmarks.

``Table.append`` sizes row groups by bytes; tests and benchmarks of row-group
operations (purge) need a known layout.  The file is written with caslake's own
writer settings (zstd, statistics, page checksums) unless told otherwise, uploaded
create-only and committed as one ``append`` with the manifest entry the writer
would have produced.  Never used by the library itself.
"""

from __future__ import annotations

import io
import zlib
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from caslake.core import put_new
from caslake.format.keys import data_file_key
from caslake.format.manifest import DataFile
from caslake.format.parquet import file_stats
from caslake.format.parquet_thrift import footer_length

if TYPE_CHECKING:
    from caslake.table import Table


def add_parquet_file(table: Table, data: pa.Table, *, row_group_rows: int,
                     **writer_options: Any) -> DataFile:
    """Append ``data`` as one file of ``row_group_rows``-row groups; return its entry."""
    settings: dict[str, Any] = {"compression": "zstd", "write_statistics": True,
                                "write_page_checksum": True, **writer_options}
    buf = io.BytesIO()
    pq.write_table(data, buf, row_group_size=row_group_rows, **settings)
    raw = buf.getvalue()
    key = data_file_key()
    etag = put_new(table.store, key, raw)
    md = pq.ParquetFile(io.BytesIO(raw)).metadata
    schema = table.table_schema
    stats = {schema.field(n).id: st for n, st in file_stats(
        md, {f.name: f.arrow_type for f in schema.fields}).items() if st}
    footer = 8 + footer_length(raw[-8:])
    entry = DataFile(key, len(raw), etag, md.num_rows, md.num_row_groups, footer, stats,
                     zlib.crc32(raw[-footer:]))
    with table.transaction() as tx:
        tx.stage("append", files=[entry])
    return entry
