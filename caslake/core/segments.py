"""Reading and writing segments: the entries of a version that its root manifest
does not hold inline (docs/format.md, "Segments").

Owns:

* the process-wide cache of parsed segment objects, keyed by (store, key) and
  bounded by bytes: segment objects are immutable and their keys are never
  reused, so a reopened table neither re-fetches nor re-parses them; beside
  it, a bounded cache of decoded blocks of pruned reads (decoded and checked
  once, then reused by the next point read or delete near the same keys);
* the checks made when a segment is opened: size and CRC-32 against the
  reference, the reference's summary against the segment's own (and each
  block's summary against its entries when the block is decoded), so a lying
  or damaged summary is CorruptMetadata, never a skipped file;
* :func:`pruned_files`: the entries of a version that *might* hold rows a
  predicate wants, opening only segments and blocks whose summaries might
  match; and :func:`iter_live_files`, every entry, streamed segment by segment;
* :func:`write_segment`, used by commits.

Format-1 segments (earlier manifests) carry no summary; they are always opened.
Never decides what a commit writes (that is :mod:`caslake.core.changes`).
"""

from __future__ import annotations

import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence

from caslake.core.cache import LruCache
from caslake.core.pointer import put_new
from caslake.core.pools import fetch_all
from caslake.errors import CorruptMetadata, NotFound
from caslake.format.keys import new_token, segment_key
from caslake.format.manifest import DataFile, SegmentRef
from caslake.format.partition import Partitioning
from caslake.format.schema import TableSchema
from caslake.format.segment import (
    SegmentFile,
    Stats,
    Summary,
    check_summary,
    encode_segment,
)
from caslake.store.base import ObjectStore

# Decide from a summary whether any entry under it might hold a wanted row:
# (stats, row count, where it comes from) -> bool.
MightMatch = Callable[[Stats, int, str], bool]

CACHE_BYTES = 256 * 1024 * 1024
# Decoded (and checked) blocks kept per process: 64 entries each, so at most
# 32,768 entries, a few tens of MB.  A repeated point read or delete near one key
# decodes its block once.
CACHE_BLOCKS = 512


class SegmentCache:
    """Parsed segment objects by (store URI, key), least recently used dropped first
    once their encoded sizes add up to more than ``max_bytes``."""

    def __init__(self, max_bytes: int = CACHE_BYTES, max_blocks: int = CACHE_BLOCKS) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple[str, str], SegmentFile] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        # (store URI, segment key, block index) -> its entries, checked against the
        # block's summary when decoded (segment keys are never reused).
        self.blocks: LruCache[tuple[str, str, int], tuple[DataFile, ...]] = LruCache(max_blocks)

    def get(self, k: tuple[str, str]) -> SegmentFile | None:
        with self._lock:
            hit = self._items.get(k)
            if hit is not None:
                self._items.move_to_end(k)
            return hit

    def put(self, k: tuple[str, str], seg: SegmentFile) -> None:
        with self._lock:
            old = self._items.pop(k, None)
            if old is not None:
                self._bytes -= old.nbytes
            self._items[k] = seg
            self._bytes += seg.nbytes
            while self._bytes > self.max_bytes and len(self._items) > 1:
                _, dropped = self._items.popitem(last=False)
                self._bytes -= dropped.nbytes

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0
        self.blocks.clear()

    @property
    def nbytes(self) -> int:
        return self._bytes


CACHE = SegmentCache()


def _check_ref(ref: SegmentRef, seg: SegmentFile, where: str) -> None:
    if seg.nbytes != ref.size or seg.crc32 != ref.crc32:
        raise CorruptMetadata(ref.manifest, f"segment has {seg.nbytes} bytes with CRC-32 "
                              f"{seg.crc32}; {where} says {ref.size} bytes, CRC-32 {ref.crc32}")
    claimed = Summary(ref.file_count, ref.row_count, ref.byte_count,
                      {k: dict(v) for k, v in (ref.stats or {}).items()})
    check_summary(claimed, seg.summary, ref.manifest, f"its reference in {where}")


def open_segment(store: ObjectStore, ref: SegmentRef, where: str) -> SegmentFile:
    """The parsed segment object ``ref`` names, checked against ``ref`` (from the
    manifest ``where``)."""
    k = (store.uri, ref.manifest)
    seg = CACHE.get(k)
    if seg is None:
        try:
            data = store.get(ref.manifest).data
        except NotFound:
            raise CorruptMetadata(ref.manifest, f"the segment is missing (referenced by {where})"
                                  ) from None
        if len(data) != ref.size or zlib.crc32(data) != ref.crc32:
            raise CorruptMetadata(ref.manifest, f"segment bytes differ from the reference in "
                                  f"{where} (size or CRC-32): damaged or replaced")
        seg = SegmentFile(data, ref.manifest)
        CACHE.put(k, seg)
    _check_ref(ref, seg, where)
    return seg


def write_segment(store: ObjectStore, files: Sequence[DataFile], schema: TableSchema,
                  version: int, partitioning: Partitioning | None = None) -> SegmentRef:
    """Write ``files`` as a new segment object (create-only) and return its reference.
    ``partitioning``: the table's partition specs (format 5), which the entries' name."""
    data, summary = encode_segment(files, schema, partitioning)
    key = segment_key(version, new_token())
    put_new(store, key, data)
    CACHE.put((store.uri, key), SegmentFile(data, key))
    return SegmentRef(key, version, summary.files, summary.rows, summary.bytes,
                      stats=summary.stats, size=len(data), crc32=zlib.crc32(data))


# --- resolving a version's entries ---------------------------------------------------

LoadManifestFiles = Callable[[SegmentRef], Sequence[DataFile]]


def _segment_files(store: ObjectStore, ref: SegmentRef, where: str,
                   load_manifest_files: LoadManifestFiles,
                   might_match: MightMatch | None) -> list[DataFile]:
    if not ref.is_object:
        return list(load_manifest_files(ref))
    if might_match is not None and not might_match(ref.stats or {}, ref.row_count,
                                                   ref.manifest):
        return []
    seg = open_segment(store, ref, where)
    out: list[DataFile] = []
    for i, block in enumerate(seg.blocks):
        if might_match is None or might_match(block.stats, block.rows, ref.manifest):
            out.extend(segment_block(store, seg, i, keep=might_match is not None))
    return out


def segment_block(store: ObjectStore, seg: SegmentFile, i: int, *,
                  keep: bool = True) -> Sequence[DataFile]:
    """Block ``i`` of an opened segment, from the process's block cache when it was
    decoded before; ``keep``: cache it (a pruned read), or not (a walk over every
    block, which would only push out the blocks point reads reuse)."""
    k = (store.uri, seg.key, i)
    hit = CACHE.blocks.get(k)
    if hit is not None:
        return hit
    files = tuple(seg.block(i))
    if keep:
        CACHE.blocks.put(k, files)
    return files


def segment_files(store: ObjectStore, refs: Sequence[SegmentRef], where: str,
                  load_manifest_files: LoadManifestFiles,
                  might_match: MightMatch | None = None) -> list[list[DataFile]]:
    """For each reference, its entries (only those of blocks that might match,
    when ``might_match`` is given); fetched in parallel."""
    def one(ref: SegmentRef) -> list[DataFile]:
        return _segment_files(store, ref, where, load_manifest_files, might_match)

    # Only fetches go to the pool: a summary that prunes, or a segment already in
    # the cache, costs less than a thread hand-off.
    fetch_all(lambda ref: one(ref) if not ref.is_object else open_segment(store, ref, where),
              [r for r in refs if _must_fetch(store, r, might_match)])
    return [one(r) for r in refs]


def _must_fetch(store: ObjectStore, ref: SegmentRef, might_match: MightMatch | None) -> bool:
    if not ref.is_object:
        return True  # an earlier manifest (cached by the caller's loader once read)
    if might_match is not None and not might_match(ref.stats or {}, ref.row_count,
                                                   ref.manifest):
        return False
    return CACHE.get((store.uri, ref.manifest)) is None


def iter_segment_files(store: ObjectStore, refs: Sequence[SegmentRef], where: str,
                       load_manifest_files: LoadManifestFiles,
                       might_match: MightMatch | None = None) -> Iterator[DataFile]:
    """Every entry of every reference, one segment block at a time (bounded memory);
    with ``might_match``, only those of segments and blocks whose summaries might
    match (as :func:`segment_files`; such blocks are cached like a pruned read's)."""
    for ref in refs:
        if not ref.is_object:
            yield from load_manifest_files(ref)
            continue
        if might_match is not None and not might_match(ref.stats or {}, ref.row_count,
                                                       ref.manifest):
            continue
        seg = open_segment(store, ref, where)
        for i, block in enumerate(seg.blocks):
            if might_match is None or might_match(block.stats, block.rows, ref.manifest):
                yield from segment_block(store, seg, i, keep=might_match is not None)
