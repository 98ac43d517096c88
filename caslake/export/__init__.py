"""Export caslake snapshots as Iceberg and Delta tables, zero-copy.

The exporters write only metadata (and deletion files) that point at
caslake's own Parquet data files; they sit above ``caslake.table`` and are
never imported by it.  See docs/interop.md.
"""

from caslake.export.delta import export_delta
from caslake.export.iceberg import export_iceberg
from caslake.export.result import ExportResult

__all__ = ["ExportResult", "export_delta", "export_iceberg"]
