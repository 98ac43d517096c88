"""``caslake verify``: check that a table's metadata and objects agree.

Checks every ref of the table -- each branch head (``main`` first), each live
tag and each clone hold's version -- and, with ``all_versions``, every version
in each branch's history; a version several refs share is checked once.  The
report lists each ref with the problems found in what it references (a
problem is reported once in ``problems`` however many refs share it).  A
clone is checked through the stores of the tables it references.  For each
version:

* the pointer parses and names a manifest with its version and commit id;
* manifests chain: each parent is version - 1 of the same table, and every
  skip pointer and segment reference names the right version;
* every referenced data file and tombstone exists with the recorded size (one
  HEAD each).  An ETag that differs from the manifest's is not a problem by
  itself -- a copied table has other ETags -- and is counted in
  ``etags_differ``; the content is proven by checksums: tombstones by their own
  CRC-32 (parsed below), data files by the footer CRC-32 with ``deep``;
* a staged version of a multi-table transaction: its record exists, parses,
  names the table and is decided (or pending within its deadline); a committed
  record's participants' staged versions exist (:func:`_check_staged`);
* every tombstone parses, matches the files it is referenced for, and stays
  within their row counts and row groups;
* with ``deep``: every data file's Parquet footer matches the manifest's CRC-32,
  parses and agrees with the manifest (rows, row groups), read under the
  relocation rule of :mod:`caslake.core.footers`; and every page of every live
  file is read and its CRC-32 checked (the writer stores one per page,
  :data:`~caslake.format.parquet.VERIFY_PAGE_CHECKSUMS`), one row group at a
  time, with a progress bar on request; the report says how many bytes were
  checked.

Counts are scoped: ``scope`` is "current version" or "all versions", and the
data file and tombstone counts are the distinct objects of that scope.

Never writes.  Problems are collected, not raised, so one run reports them all.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from caslake.core import (
    MetadataIO,
    RoutingStore,
    Snapshot,
    TombstoneCache,
    load_masks,
    names_table,
    progress_advance,
    progress_task,
    read_footer,
    store_at,
)
from caslake.errors import CaslakeError, NotFound, RefNotFound
from caslake.format.manifest import (
    COMMITTED,
    PENDING,
    DataFile,
    TombstoneRef,
    TxnRecord,
    parse_txn_record,
    txn_record_key,
)
from caslake.format.parquet import VERIFY_PAGE_CHECKSUMS
from caslake.format.refs import MAIN, REFS_PREFIX, Hold, hold_key
from caslake.ops import refs
from caslake.ops.clone import with_externals
from caslake.store.base import ObjectStore
from caslake.store.options import StorageOptions


@dataclass
class Problem:
    object: str
    problem: str

    def to_json(self) -> dict[str, str]:
        return {"object": self.object, "problem": self.problem}


@dataclass
class RefCheck:
    """One ref and the problems found in the versions and objects it references."""

    kind: str  # "branch", "tag" or "hold"
    name: str  # a hold's name is the holder's table id
    version: int | None
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "version": self.version,
                "ok": self.ok, "problems": [p.to_json() for p in self.problems]}


@dataclass
class VerifyReport:
    uri: str
    version: int | None = None
    versions_checked: int = 0
    data_files_checked: int = 0
    tombstones_checked: int = 0
    footers_checked: int = 0
    etags_differ: int = 0  # objects whose ETag is not the manifest's (e.g. a copied table)
    scope: str = "current version"
    column_chunks_checked: int = 0  # deep: column chunks whose every page CRC was checked
    bytes_checked: int = 0  # deep: bytes of data files read and checked
    problems: list[Problem] = field(default_factory=list)
    refs: list[RefCheck] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {"uri": self.uri, "ok": self.ok, "version": self.version,
                "versions_checked": self.versions_checked,
                "data_files_checked": self.data_files_checked,
                "tombstones_checked": self.tombstones_checked,
                "footers_checked": self.footers_checked,
                "etags_differ": self.etags_differ, "scope": self.scope,
                "column_chunks_checked": self.column_chunks_checked,
                "bytes_checked": self.bytes_checked,
                "problems": [p.to_json() for p in self.problems],
                "refs": [r.to_json() for r in self.refs]}


def _check_object(store: ObjectStore, key: str, size: int, etag: str
                  ) -> tuple[Problem | None, bool]:
    """A problem with the object, if any, and whether its ETag differs from ``etag``."""
    try:
        meta = store.head(key)
    except NotFound:
        return Problem(key, "missing"), False
    except CaslakeError as e:
        return Problem(key, f"cannot be read: {e}"), False
    if meta.size != size:
        return Problem(key, f"size is {meta.size}, the manifest says {size}"), False
    return None, meta.etag != etag


def verify_table(store: ObjectStore, *, deep: bool = False, all_versions: bool = False,
                 progress: bool = False, storage_options: StorageOptions | None = None
                 ) -> VerifyReport:
    """``progress``: show progress bars (stderr) while objects and pages are checked.
    ``storage_options``: for opening the tables a clone references."""
    report = VerifyReport(store.uri, scope="all versions" if all_versions else "current version")
    try:
        head = MetadataIO(store).latest()
    except CaslakeError as e:
        report.problems.append(Problem("_latest_manifest", str(e)))
        return report
    if not isinstance(store, RoutingStore):
        store = with_externals(store, head.manifest, storage_options)
    io = MetadataIO(store)
    report.version = head.version
    seen_files: dict[str, DataFile] = {}
    seen_tombs: dict[str, TombstoneRef] = {}
    checked: dict[str, list[Problem]] = {}  # manifest key -> problems of that version
    objects: dict[int, set[str]] = {}  # id of a RefCheck -> the objects it references
    records: set[str] = set()  # transaction records whose participants were checked
    for check, chain, oldest in _ref_chains(io, head, all_versions, report):
        report.refs.append(check)
        mine = objects.setdefault(id(check), set())
        for snap in chain:
            if snap.key not in checked:
                report.versions_checked += 1
                before = len(report.problems)
                _check_snapshot(io, snap, report, seen_files, seen_tombs, oldest=oldest)
                _check_staged(io, snap, report, records)
                checked[snap.key] = report.problems[before:]
            check.problems.extend(checked[snap.key])
            mine.update(_object_keys(io, snap))
    first_object_problem = len(report.problems)
    checks = [(f.path, f.size, f.etag) for f in seen_files.values()]
    checks += [(t.path, t.size, t.etag) for t in seen_tombs.values()]
    with ThreadPoolExecutor(max_workers=16) as pool, \
            progress_task("checking objects", total=len(checks), unit="object",
                          enabled=progress):
        for problem, etag_differs in pool.map(lambda c: _check_object(store, *c), checks):
            if problem is not None:
                report.problems.append(problem)
            report.etags_differ += etag_differs
            progress_advance()
    report.data_files_checked = len(seen_files)
    report.tombstones_checked = len(seen_tombs)
    if deep:
        _check_footers(store, list(seen_files.values()), report)
        broken = {p.object for p in report.problems}
        _check_pages(store, [f for f in seen_files.values() if f.path not in broken], report,
                     progress)
    for check in report.refs:  # each object's problems go to every ref that reaches it
        mine = objects[id(check)]
        check.problems.extend(p for p in report.problems[first_object_problem:]
                              if p.object in mine)
    return report


def _ref_chains(io: MetadataIO, head: Snapshot, all_versions: bool, report: VerifyReport
                ) -> Iterator[tuple[RefCheck, list[Snapshot], int]]:
    """Each ref, the versions to check for it, and the oldest version its links may
    name (versions below it were expired by gc; links to them are not followed)."""
    listing = [("branch", name) for name in refs.list_branches(io)]
    holds: dict[str, Hold] = {}
    try:
        listing += [("tag", t.name) for t in refs.list_tags(io)]
        holds = {h.holder_id: h for h in refs.list_holds(io)}
    except CaslakeError as e:  # a ref record that does not parse
        report.problems.append(Problem(getattr(e, "key", REFS_PREFIX), str(e)))
    listing += [("hold", holder) for holder in holds]
    for kind, name in listing:
        check = RefCheck(kind, name, None)
        try:
            if kind == "branch":
                snap = head if name == MAIN else refs.branch_head(io, name)
            elif kind == "tag":
                snap = refs.tag_snapshot(io, name)
            else:
                snap = refs.target_snapshot(io, holds[name].target, where=hold_key(name))
        except RefNotFound:
            continue  # dropped while we listed
        except CaslakeError as e:
            problem = Problem(getattr(e, "key", name), str(e))
            report.problems.append(problem)
            check.problems.append(problem)
            yield check, [], 0
            continue
        check.version = snap.version
        if kind != "branch":  # one version: its own links are not this ref's promise
            yield check, [snap], snap.version
            continue
        try:
            chain = io.history(snap) if all_versions else [snap]
        except CaslakeError as e:
            problem = Problem(getattr(e, "key", snap.key), str(e))
            report.problems.append(problem)
            check.problems.append(problem)
            chain = [snap]
        yield check, chain, snap.manifest.oldest_version


def _object_keys(io: MetadataIO, snap: Snapshot) -> set[str]:
    try:
        keys = {f.path for f in io.live_files(snap)}
    except CaslakeError:
        keys = set()  # already reported by _check_snapshot
    return keys | {t.path for t in snap.manifest.tombstones}


def _check_snapshot(io: MetadataIO, snap: Snapshot, report: VerifyReport,
                    seen_files: dict[str, DataFile], seen_tombs: dict[str, TombstoneRef], *,
                    oldest: int) -> None:
    """``oldest``: versions below it were expired by gc; links to them are not followed."""
    m = snap.manifest
    try:
        if m.parent is not None and m.version - 1 >= oldest:
            parent = io.load_manifest(m.parent)
            if parent.version != m.version - 1 or parent.table_id != m.table_id:
                report.problems.append(Problem(snap.key, f"parent {m.parent} is not version "
                                               f"{m.version - 1} of this table"))
        for a in m.ancestors:
            if a.version >= oldest and io.load_manifest(a.manifest).version != a.version:
                report.problems.append(Problem(snap.key, f"skip pointer to {a.manifest} "
                                               f"does not name version {a.version}"))
        files = io.live_files(snap)
    except CaslakeError as e:
        report.problems.append(Problem(getattr(e, "key", snap.key), str(e)))
        return
    by_path = {f.path: f for f in files}
    if len(by_path) != len(files):
        report.problems.append(Problem(snap.key, "a data file is live twice"))
    rows = sum(f.row_count for f in files)
    if rows != m.totals.rows or len(files) != m.totals.files:
        report.problems.append(Problem(snap.key, f"totals say {m.totals.files} files and "
                                       f"{m.totals.rows} rows; the file list has {len(files)} "
                                       f"and {rows}"))
    for f in files:
        seen_files.setdefault(f.path, f)
    for t in m.tombstones:
        seen_tombs.setdefault(t.path, t)
    try:
        load_masks(io.store, TombstoneCache(), m.tombstones, by_path, by_path, m.schema)
    except CaslakeError as e:
        report.problems.append(Problem(getattr(e, "key", snap.key), str(e)))


def _check_staged(io: MetadataIO, snap: Snapshot, report: VerifyReport,
                  records: set[str]) -> None:
    """A staged version's record (docs/protocol.md, "verify of staged versions"):
    it exists, parses, is its transaction's, names this table, is decided (or
    pending within its deadline); a committed one's participants' staged
    versions exist (or were expired by their gc).  ``records``: records whose
    participants were checked already."""
    try:
        raw = io.load_manifest(snap.key)  # an aborted version reads as its parent
    except CaslakeError:
        return  # reported by _check_snapshot
    ref = raw.transaction
    if ref is None:
        return
    key = txn_record_key(ref.id)
    where = f"{ref.record.rstrip('/')}/{key}"
    try:
        record = parse_txn_record(store_at(io.store, ref.record).get(key).data, key)
    except NotFound:
        report.problems.append(Problem(where, f"missing: the record of staged version "
                                       f"{snap.version} of {io.store.uri}"))
        return
    except CaslakeError as e:
        report.problems.append(Problem(where, str(e)))
        return
    if record.id != ref.id:
        report.problems.append(Problem(where, f"the record is transaction {record.id}'s"))
    if not names_table(record, io.store.uri, raw.table_id):
        report.problems.append(Problem(where, f"does not name {io.store.uri} (table "
                                       f"{raw.table_id}) as a participant, yet its staged "
                                       f"version {snap.version} refers to it"))
    if record.state == PENDING and record.deadline_ms < int(time.time() * 1000):
        report.problems.append(Problem(where, f"pending past its deadline under staged "
                                       f"version {snap.version}, which a later version "
                                       "builds on"))
    if record.state == COMMITTED and record.id not in records:
        records.add(record.id)
        report.problems.extend(Problem(where, p) for p in _participant_problems(io, record))


def _participant_problems(io: MetadataIO, record: TxnRecord) -> list[str]:
    """What is wrong with the staged versions a committed ``record`` names."""
    out = []
    for p in record.participants:
        if p.version is None:
            out.append(f"committed, but names no staged version of {p.uri}")
            continue
        try:
            pio = MetadataIO(store_at(io.store, p.uri))
            head = pio.snapshot_for_pointer(pio.read_pointer()[0])
            if p.version > head.version:
                out.append(f"names version {p.version} of {p.uri}, which is at version "
                           f"{head.version}")
            elif p.version >= head.manifest.oldest_version:
                staged = pio.load_manifest(pio.at_version(head, p.version).key).transaction
                if staged is None or staged.id != record.id:
                    out.append(f"names version {p.version} of {p.uri}, which is not a "
                               "staged version of this transaction")
        except CaslakeError as e:
            out.append(f"participant {p.uri} version {p.version} cannot be read: {e}")
    return out


def _check_footers(store: ObjectStore, files: list[DataFile], report: VerifyReport) -> None:
    def one(f: DataFile) -> Problem | None:
        try:
            read_footer(store, f)
        except CaslakeError as e:
            return Problem(f.path, str(e))
        return None

    with ThreadPoolExecutor(max_workers=16) as pool:
        for problem in pool.map(one, files):
            report.footers_checked += 1
            if problem is not None:
                report.problems.append(problem)


def _check_pages(store: ObjectStore, files: list[DataFile], report: VerifyReport,
                 progress: bool) -> None:
    """Read every page of every file with CRC verification on, a row group at a time."""
    with progress_task("checking pages", total=sum(f.size for f in files), unit="B",
                       unit_scale=True, enabled=progress):
        for f in files:
            try:
                chunks = _check_file_pages(store, f)
            except CaslakeError as e:
                report.problems.append(Problem(f.path, str(e)))
            except (OSError, pa.ArrowException) as e:
                report.problems.append(Problem(f.path, f"a page failed its CRC-32 check or "
                                               f"does not decode: {e}"))
            else:
                report.column_chunks_checked += chunks
                report.bytes_checked += f.size
            progress_advance(f.size)


def _check_file_pages(store: ObjectStore, f: DataFile) -> int:
    # No ETag pin: a relocated table has other ETags; the footer CRC-32 (checked
    # just before) and the page CRC-32s prove the content.
    local = store.local_path(f.path)
    # An Arrow buffer, not io.BytesIO: Arrow's I/O threads then never call back into
    # Python for the bytes, so none can still want the GIL as the interpreter exits
    # (a C++ thread that does is ended by pthread_exit: "terminate called without an
    # active exception", rc -6; issue 27).
    source = local if local is not None else pa.BufferReader(store.get(f.path).data)
    pf = pq.ParquetFile(source, **VERIFY_PAGE_CHECKSUMS)
    chunks = 0
    for rg in range(pf.metadata.num_row_groups):
        pf.read_row_group(rg)  # decoding verifies each page's CRC-32
        chunks += pf.metadata.num_columns
    return chunks
