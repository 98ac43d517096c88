"""``WriteOptions``: how a write lays out its Parquet data files (file and row-group
size, codec).  Part of a table handle's context (:class:`caslake.core.runner.TableContext`),
so the core knows it without importing the writer (``caslake.ops.write``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from caslake.errors import InvalidArgument

MiB = 1024 * 1024
ZSTD_DEFAULT_LEVEL = 1  # chosen by measurement (docs/format.md, Compression)


@dataclass(frozen=True)
class WriteOptions:
    """How data files are written: target file size, row-group size (compressed
    bytes), compression codec and level.

    Examples:
        >>> import caslake
        >>> opts = caslake.WriteOptions(target_file_size=64 * 2**20, compression='zstd')
        >>> t = caslake.open_table('/data/events', write_options=opts)  # doctest: +SKIP
    """
    target_file_size: int = 256 * MiB
    row_group_size: int = 8 * MiB  # target compressed bytes per row group
    compression: Any = "zstd"  # any codec pyarrow.parquet accepts
    compression_level: int | None = None  # None: ZSTD_DEFAULT_LEVEL for zstd, else the codec's

    def level(self) -> int | None:
        if self.compression_level is None and str(self.compression).lower() == "zstd":
            return ZSTD_DEFAULT_LEVEL
        return self.compression_level

    def __post_init__(self) -> None:
        if self.target_file_size <= 0 or self.row_group_size <= 0:
            raise InvalidArgument("target_file_size and row_group_size must be positive")
