"""Reading data-file footers from the store, under the relocation rule.

A manifest records each data file's ETag as it was when the file was written.
ETags are not content: a copied table (``cp -a``, tar, rsync, ``aws s3 sync``,
CopyObject, bucket replication) has the same bytes under other ETags.  So a
reader never *requires* the recorded ETag.  At first touch of a file it:

1. fetches the footer pinned to the recorded ETag (the common case: one
   ranged GET);
2. if the ETag differs, HEADs the file for its current size and ETag, and
   fetches the footer pinned to *that* ETag -- a different size, or a file
   whose manifest entry has no footer CRC-32 to check it by, is
   CorruptMetadata naming the file;
3. checks the footer bytes against the manifest's ``footer_crc32``, row count
   and row-group count (:func:`caslake.format.parquet.check_footer`).

The returned :class:`~caslake.format.parquet.FooterInfo` carries the ETag the
footer was read under; every later range read of the file pins to it, and the
page CRC-32s check the column chunks.  A file whose content changed is
therefore a typed error, never a wrong answer.

Owns the footer cache too (parsed footers by (path, recorded ETag)).  Never writes.
"""

from __future__ import annotations

from caslake.core.cache import LruCache
from caslake.errors import CorruptMetadata, PreconditionFailed
from caslake.format.manifest import DataFile
from caslake.format.parquet import FooterInfo, check_footer
from caslake.store.base import ObjectStore


def read_footer(store: ObjectStore, f: DataFile) -> FooterInfo:
    """Fetch and check data file ``f``'s footer (see the module docstring)."""
    span = [(f.size - f.footer_size, f.size)]
    try:
        return check_footer(store.get_ranges(f.path, span, etag=f.etag)[0], f, etag=f.etag)
    except PreconditionFailed:
        pass  # another ETag: a copied table, or a changed file -- the content decides
    meta = store.head(f.path)
    if meta.size != f.size:
        raise CorruptMetadata(f.path, f"size is {meta.size}, the manifest says {f.size} "
                              "(the file was replaced or damaged)")
    if f.footer_crc32 is None:
        raise CorruptMetadata(f.path, f"ETag is {meta.etag}, the manifest says {f.etag}, and "
                              "the manifest has no footer CRC-32 to check the content by")
    tail = store.get_ranges(f.path, span, etag=meta.etag)[0]
    return check_footer(tail, f, etag=meta.etag)


class FooterCache:
    """Parsed, checked footers by (path, recorded ETag); bounded LRU."""

    def __init__(self, size: int = 4096) -> None:
        self._lru: LruCache[tuple[str, str], FooterInfo] = LruCache(size)

    def get(self, store: ObjectStore, f: DataFile) -> FooterInfo:
        return self._lru.get_or_load((f.path, f.etag), lambda: read_footer(store, f))

    def cached(self, f: DataFile) -> FooterInfo | None:
        """The footer if it is in the cache already (no I/O), else None."""
        return self._lru.get((f.path, f.etag))
