"""Reading the pointer and manifests, with an in-process cache of immutable manifests.

Owns: GET of the pointer (``_latest_manifest`` for ``main``; the key is a
parameter, so a ref can have its own) and ``manifest/*``, resolution of segment
references into a live file list, and time travel by version or timestamp
through the ancestors' skip pointers (O(log n) manifest GETs), and what readers
see of a multi-table transaction's *staged* version (:meth:`MetadataIO.visible`:
the version if its record says committed, else its parent's contents; time travel
and history show an aborted one with its parent's contents, :meth:`settled`;
docs/protocol.md, "Multi-table transactions").
Never writes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from caslake.core.cache import LruCache
from caslake.core.segments import MightMatch, iter_segment_files, segment_files
from caslake.core.siblings import store_at
from caslake.errors import CorruptMetadata, NotFound, TableNotFound, VersionNotFound
from caslake.format.keys import POINTER_KEY
from caslake.format.manifest import (
    ABORTED,
    COMMITTED,
    PENDING,
    DataFile,
    Manifest,
    Pointer,
    SegmentRef,
    TransactionRef,
    TxnRecord,
    parse_manifest,
    parse_pointer,
    parse_txn_record,
    txn_record_key,
)
from caslake.store.base import ObjectStore

#: The operation of :meth:`MetadataIO.rolled_back`'s view of an aborted staged
#: version (never written: no manifest on storage has it).
ROLLED_BACK = "transaction_aborted"


@dataclass(frozen=True)
class Snapshot:
    """One committed table version: its manifest and where it lives."""

    manifest: Manifest
    key: str

    @property
    def version(self) -> int:
        return self.manifest.version


class MetadataIO:
    def __init__(self, store: ObjectStore, *, cache_size: int = 256,
                 pointer_key: str = POINTER_KEY) -> None:
        self.store = store
        self.pointer_key = pointer_key  # the ref this IO reads by default
        self._cache: LruCache[str, Manifest] = LruCache(cache_size)  # keys are never reused
        self._decided: LruCache[str, TxnRecord] = LruCache(1024)  # decided: never change

    # --- pointer and manifests -------------------------------------------------

    def read_pointer(self, pointer_key: str | None = None) -> tuple[Pointer, str]:
        """The pointer (``pointer_key``, default this IO's) and its ETag.  Raises
        TableNotFound if there is none."""
        key = pointer_key or self.pointer_key
        try:
            res = self.store.get(key)
        except NotFound:
            raise TableNotFound(f"no table at {self.store.uri} ({key} is missing)") from None
        return parse_pointer(res.data, key), res.etag

    def remember(self, key: str, manifest: Manifest) -> None:
        if manifest.operation == ROLLED_BACK:
            return  # a view of an aborted staged version: the object there differs
        self._cache.put(key, manifest)

    def load_manifest(self, key: str) -> Manifest:
        return self._cache.get_or_load(key, lambda: self._fetch_manifest(key))

    def _fetch_manifest(self, key: str) -> Manifest:
        try:
            res = self.store.get(key)
        except NotFound:
            raise CorruptMetadata(key, "the manifest is missing (referenced but not on storage)"
                                  ) from None
        return parse_manifest(res.data, key)

    def load_manifests(self, keys: Iterable[str]) -> list[Manifest]:
        keys = list(keys)
        if len(keys) <= 1:
            return [self.load_manifest(k) for k in keys]
        with ThreadPoolExecutor(max_workers=min(16, len(keys))) as pool:
            return list(pool.map(self.load_manifest, keys))

    def latest(self, pointer_key: str | None = None) -> Snapshot:
        """The version readers see at the head of the ref (:meth:`visible`)."""
        pointer, _ = self.read_pointer(pointer_key)
        return self.visible(self.snapshot_for_pointer(pointer))

    # --- multi-table transactions (read side) ----------------------------------------

    def txn_record(self, ref: TransactionRef) -> tuple[TxnRecord, str | None]:
        """The record deciding a staged version, and its ETag (None when it came from
        the cache of decided records).  A missing record is CorruptMetadata."""
        cached = self._decided.get(ref.id)
        if cached is not None:
            return cached, None
        key = txn_record_key(ref.id)
        try:
            res = store_at(self.store, ref.record).get(key)
        except NotFound:
            raise CorruptMetadata(f"{ref.record}/{key}", "the record of a staged version is "
                                  "missing") from None
        record = parse_txn_record(res.data, key)
        if record.id != ref.id:
            raise CorruptMetadata(key, f"the record is transaction {record.id}'s")
        if record.state != PENDING:
            self._decided.put(ref.id, record)
        return record, res.etag

    def remember_decided(self, record: TxnRecord) -> None:
        """Cache a decided record this process wrote (its owner's handles then build
        on their own staged versions without a GET)."""
        if record.state != PENDING:
            self._decided.put(record.id, record)

    def visible(self, snap: Snapshot) -> Snapshot:
        """What readers see of ``snap``: itself unless it is a staged version whose
        transaction is not committed -- then its parent while the record is
        pending, and :meth:`rolled_back` once it is aborted.  One record GET per
        staged version met (none for a version without ``transaction``)."""
        while snap.manifest.transaction is not None:
            record, _ = self.txn_record(snap.manifest.transaction)
            if record.state == COMMITTED:
                return snap
            if record.state == ABORTED:
                return self.rolled_back(snap)
            snap = self.parent(snap)
        return snap

    def settled(self, snap: Snapshot) -> Snapshot:
        """``snap`` as time travel and history see it: an aborted staged version as
        :meth:`rolled_back` (its commit id kept, so commit settling still finds it);
        any other version as it is -- a pending one too (only the raw head of the
        commit path can be pending: readers' heads are :meth:`visible`)."""
        ref = snap.manifest.transaction
        if ref is not None and self.txn_record(ref)[0].state == ABORTED:
            return self.rolled_back(snap)
        return snap

    def parent(self, snap: Snapshot) -> Snapshot:
        """The version before ``snap`` (VersionNotFound for version 0)."""
        if snap.manifest.parent is None:
            raise VersionNotFound(f"version {snap.version} has no parent")
        return self._step(snap, snap.manifest.parent, snap.version - 1)

    def rolled_back(self, staged: Snapshot) -> Snapshot:
        """An aborted staged version as it reads and as writers build on it: its
        number, key, commit time and skip pointers, with its parent's contents
        (never cached under the staged key: the manifest there stays as written)."""
        m = staged.manifest
        p = self.visible(self.parent(staged)).manifest
        return Snapshot(replace(
            p, version=m.version, parent=m.parent, commit_id=m.commit_id,
            created_at_ms=m.created_at_ms, ancestors=m.ancestors,
            operation=ROLLED_BACK, operation_params={},
            summary=dict.fromkeys(m.summary, 0), intents=(), transaction=None,
            format_version=max(p.format_version, m.format_version),
            oldest_version=max(p.oldest_version, m.oldest_version),
            collected_until_ms=max(p.collected_until_ms, m.collected_until_ms)), staged.key)

    def snapshot_for_pointer(self, pointer: Pointer) -> Snapshot:
        manifest = self.load_manifest(pointer.manifest)
        if manifest.version != pointer.version or manifest.commit_id != pointer.commit_id:
            raise CorruptMetadata(pointer.manifest, f"pointer says version {pointer.version} "
                                  f"commit {pointer.commit_id}, manifest disagrees")
        return Snapshot(manifest, pointer.manifest)

    # --- live files --------------------------------------------------------------

    def _manifest_segment(self, where: str) -> Callable[[SegmentRef], list[DataFile]]:
        """Loader of a format-1 segment (an earlier manifest's inline files)."""
        def load(ref: SegmentRef) -> list[DataFile]:
            seg = self.load_manifest(ref.manifest)
            if seg.version != ref.version or len(seg.files) != ref.file_count:
                raise CorruptMetadata(where, f"segment {ref.manifest} does not match "
                                      "its reference (version or file count)")
            return list(seg.files)
        return load

    def live_files(self, snap: Snapshot) -> list[DataFile]:
        """Every data file of the version, oldest segment first, inline entries last."""
        return self.pruned_files(snap, None)

    def pruned_files(self, snap: Snapshot, might_match: MightMatch | None) -> list[DataFile]:
        """The live data files of the version in segments and blocks whose summaries
        ``might_match`` (all of them when it is None), in live-file order.  Files of
        an opened block are returned whether or not they match: pruning single
        files is the caller's."""
        m = snap.manifest
        out: list[DataFile] = []
        for seg in segment_files(self.store, m.segments, snap.key,
                                 self._manifest_segment(snap.key), might_match):
            out.extend(f for f in seg if f.path not in m.removed)
        out.extend(m.files)
        return out

    def segment_entries(self, refs: Sequence[SegmentRef], where: str) -> list[list[DataFile]]:
        """Every entry of each segment (for a commit that rewrites them)."""
        return segment_files(self.store, refs, where, self._manifest_segment(where))

    def iter_segment(self, ref: SegmentRef, where: str) -> Iterator[DataFile]:
        """Every entry of one segment (named in manifest ``where``), streamed per block."""
        return iter_segment_files(self.store, [ref], where, self._manifest_segment(where))

    def iter_live_files(self, snap: Snapshot) -> Iterator[DataFile]:
        """Every data file of the version, streamed one segment block at a time."""
        return self.iter_pruned_files(snap, None)

    def iter_pruned_files(self, snap: Snapshot, might_match: MightMatch | None
                          ) -> Iterator[DataFile]:
        """:meth:`pruned_files`, streamed one segment block at a time."""
        m = snap.manifest
        for f in iter_segment_files(self.store, m.segments, snap.key,
                                    self._manifest_segment(snap.key), might_match):
            if f.path not in m.removed:
                yield f
        yield from m.files

    @staticmethod
    def pruned_bytes(snap: Snapshot, might_match: MightMatch | None,
                     file_might_match: Callable[[DataFile], bool] | None = None) -> int:
        """Stored bytes of the version's entries in segments whose summaries might
        match, plus its inline entries that ``file_might_match``: an estimate for
        sizing work (removed entries and pruned blocks are counted), from the
        manifest alone."""
        m = snap.manifest
        if might_match is None:
            return m.totals.bytes
        return sum(r.byte_count for r in m.segments
                   if not r.is_object or might_match(r.stats or {}, r.row_count, r.manifest)
                   ) + sum(f.size for f in m.files
                           if file_might_match is None or file_might_match(f))

    # --- time travel ---------------------------------------------------------------

    def at_version(self, head: Snapshot, version: int) -> Snapshot:
        if version < 0 or version > head.version:
            raise VersionNotFound(f"version {version} does not exist "
                                  f"(the table is at version {head.version})")
        self._check_retained(head, version)
        cur = head
        while cur.version != version:
            jumps = [a for a in cur.manifest.ancestors if a.version >= version]
            if not jumps:
                raise CorruptMetadata(cur.key, f"no ancestor reaches version {version}")
            best = min(jumps, key=lambda a: a.version)
            cur = self._step(cur, best.manifest, best.version)
        return self.settled(cur)

    def as_of(self, head: Snapshot, ts_ms: int) -> Snapshot:
        """The newest version committed at or before ``ts_ms`` (commit times are monotonic)."""
        cur = head
        while cur.manifest.created_at_ms > ts_ms:
            later = [a for a in cur.manifest.ancestors if a.created_at_ms > ts_ms]
            if later:
                best = min(later, key=lambda a: a.version)
                cur = self._step(cur, best.manifest, best.version)
                continue
            parent = [a for a in cur.manifest.ancestors if a.version == cur.version - 1]
            if not parent:
                raise VersionNotFound("no version of the table is that old "
                                      f"(version {cur.version} was committed after it)")
            self._check_retained(head, parent[0].version)
            return self.settled(self._step(cur, parent[0].manifest, parent[0].version))
        return self.settled(cur)

    def _check_retained(self, head: Snapshot, version: int) -> None:
        oldest = head.manifest.oldest_version
        if version < oldest:
            raise VersionNotFound(f"version {version} was expired by gc (the oldest "
                                  f"retained version is {oldest})")

    def _step(self, cur: Snapshot, key: str, version: int) -> Snapshot:
        try:
            m = self.load_manifest(key)
        except CorruptMetadata:
            # A handle opened before a gc may walk into an expired version.
            self._check_retained(self.latest(), version)
            raise
        if m.version != version or m.table_id != cur.manifest.table_id:
            raise CorruptMetadata(cur.key, f"ancestor {key} is not version {version} of this table")
        return Snapshot(m, key)

    def history(self, head: Snapshot, limit: int | None = None) -> list[Snapshot]:
        """Versions from ``head`` back to the oldest one gc retained, newest first
        (an aborted staged version as :meth:`rolled_back`)."""
        out = [self.settled(head)]
        cur = head
        oldest = head.manifest.oldest_version
        while (cur.manifest.parent is not None and cur.version > oldest
               and (limit is None or len(out) < limit)):
            cur = self._step(cur, cur.manifest.parent, cur.version - 1)
            try:
                out.append(self.settled(cur))
            except VersionNotFound:
                # The oldest retained version is an aborted staged one whose parent
                # gc expired: it has no contents left to show (time travel to it is
                # VersionNotFound too), so history ends above it.
                break
        return out
