"""Group commit: writers that lose the pointer race fold into one version
(docs/protocol.md, "Group commit").

A commit whose changes do not depend on the base (an append of uploaded files)
may, after losing a compare-and-swap, publish an *intent*: a small JSON object
under ``_intents/<deadline_ms>-<token>.json``, written create-only, naming the
files it adds and what must hold on the base (its schema, its upload time for
gc's fence).  From then on the commit loop's ``prepare`` is a *fold*: the
writer's own intent plus every other pending, valid intent for the same table
and ref, in one version whose manifest lists them (``intents``).  Whoever wins
the next swap commits the batch; every writer recognises its commit by its
commit id in that list (:meth:`Manifest.has_commit`).

Deadline rule: a version may apply an intent only if its base was created
before the intent's deadline and the folder's clock is ``MARGIN_MS`` before it.
Commit times never decrease along the chain, so once the pointer shows a
version created at or after the deadline, an intent not applied by then never
will be.

This module reads and writes intents and builds folds; the loop that drives
them is :func:`caslake.core.commit.commit_with_retry`.  It never moves the
pointer itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from caslake.core.cache import LruCache
from caslake.core.changes import Changes, check_txn
from caslake.core.metadata_io import MetadataIO, Snapshot
from caslake.core.pointer import put_new
from caslake.core.pools import fetch_all
from caslake.core.requirements import SchemaUnchanged, TxnNotApplied, UploadsNotCollected
from caslake.errors import CaslakeError, CommitConflict, CorruptMetadata, StoreError
from caslake.format.keys import new_token
from caslake.format.manifest import (
    AppliedIntent,
    DataFile,
    parse_data_file,
    parse_table_schema,
)
from caslake.format.partition import Partitioning
from caslake.format.schema import TableSchema
from caslake.store.base import ObjectStore

INTENT_PREFIX = "_intents/"
INTENT_FORMAT = "caslake-intent"
#: A folder never applies an intent this close to its deadline (ms), by default
#: (``CommitPolicy.intent_margin_ms``): room for the manifest and pointer writes to
#: land before it.  Liveness only: the deadline rule itself is on commit times.
MARGIN_MS = 2_000
#: The bound on clock skew between writers (ms): a folder looks this far back
#: before an intent's creation for a version that already applied it.
SKEW_MS = 5_000
#: How many writers fold at once: those whose intents are the oldest live ones (the
#: rest watch the pointer, so the intents are read by few, not by every writer).
FOLDERS = 2
#: Twice as many writers fold for every this long (s) without a version that
#: applied intents: the writers ahead may have died, or keep losing the pointer.
STALL_S = 2.0


#: A directory: every process appends one JSON line per fold, watch and commit of the
#: group path there (``<pid>.jsonl``): phase times and store requests by kind.  Off
#: (unset) by default; a benchmark aid (benchmarks/commit_throughput.py ``--trace``).
TRACE_ENV = "CASLAKE_GROUP_TRACE"


class GroupTrace:
    """Where one commit's time and requests go, by phase (:data:`TRACE_ENV`).

    :meth:`mark` charges the time and the store requests since the last mark to a
    phase; :meth:`emit` writes the phases so far, with ``fields``, as one line and
    starts over.  Without the environment variable every call returns at once."""

    def __init__(self, store: ObjectStore) -> None:
        self.path = os.environ.get(TRACE_ENV) or None
        self._store = store
        self._cpu = 0.0
        self._phases: dict[str, dict[str, float]] = {}
        self._carry: dict[str, dict[str, float]] = {}
        self._at = 0.0
        self._counts: dict[str, int] = {}
        if self.path is not None:
            self.restart()

    def restart(self) -> None:
        """Start the next mark's interval now (time between is charged to nothing)."""
        if self.path is not None:
            self._at, self._cpu = time.perf_counter(), time.process_time()
            self._counts = self._store.counters.snapshot()

    def mark(self, phase: str) -> None:
        if self.path is None:
            return
        now, cpu = time.perf_counter(), time.process_time()
        counts = self._store.counters.snapshot()
        acc = self._phases.setdefault(phase, {})
        acc["ms"] = acc.get("ms", 0.0) + (now - self._at) * 1000
        # the process's CPU, all threads: a pool's reads count to the phase
        acc["cpu_ms"] = acc.get("cpu_ms", 0.0) + (cpu - self._cpu) * 1000
        for kind, n in counts.items():
            if not kind.startswith("bytes") and n != self._counts.get(kind, 0):
                acc[kind] = acc.get(kind, 0) + n - self._counts.get(kind, 0)
        self._at, self._cpu, self._counts = now, cpu, counts

    def begin(self) -> None:
        """Start a fold: its :meth:`emit` holds only its own phases; the phases
        before it are kept for the commit's line."""
        if self.path is not None:
            self._carry, self._phases = self._phases, {}
            self.restart()

    def emit(self, event: str, **fields: Any) -> None:
        if self.path is None:
            return
        line = json.dumps({"event": event, "t": time.time(), **fields,
                           "phases": self._phases}, separators=(",", ":"))
        self._phases, self._carry = self._carry, {}
        with contextlib.suppress(OSError), open(
                os.path.join(self.path, f"{os.getpid()}.jsonl"), "a", encoding="utf-8") as fh:
            fh.write(line + "\n")


class IntentSkipped(UserWarning):
    """A pending intent a folder could not use (corrupt, foreign, another table or
    ref); it is left alone and never breaks a commit."""


@dataclass(frozen=True)
class GroupWrite:
    """A commit that may take the group path: an append of already uploaded files
    written with ``schema``; ``started_at_ms`` is gc's fence check (None: none);
    ``txn`` its idempotency token ``(app_id, version)`` (None: none)."""

    operation: str
    files: tuple[DataFile, ...]
    schema: TableSchema
    started_at_ms: int | None
    txn: tuple[str, int] | None = None

    def check(self, base: Snapshot, io: MetadataIO) -> None:
        """Raise the typed conflict this write would meet committing on ``base``.
        Each failure is monotone along the chain (schema ids only advance, gc's fence
        only rises, a recorded txn version only rises), so an intent refused on a
        base is refused on every later one."""
        SchemaUnchanged(self.schema).validate(base, io)
        if self.started_at_ms is not None:
            UploadsNotCollected(self.started_at_ms, self.operation).validate(base, io)
        if self.txn is not None:
            TxnNotApplied(self.txn).validate(base, io)

    @property
    def rows(self) -> int:
        return sum(f.row_count for f in self.files)


@dataclass(frozen=True)
class Intent:
    key: str
    table_id: str
    pointer_key: str
    commit_id: str
    created_ms: int
    deadline_ms: int
    write: GroupWrite

    @property
    def id(self) -> str:
        return self.key.removeprefix(INTENT_PREFIX).removesuffix(".json")

    def applied(self) -> AppliedIntent:
        return AppliedIntent(self.id, self.commit_id, len(self.write.files), self.write.rows)

    def to_bytes(self) -> bytes:
        # A tagged intent is format 2, which a folder that knows no txn skips: it
        # would otherwise apply the write without recording its token.
        txn = self.write.txn
        extra: dict[str, Any] = {} if txn is None else {"txn": list(txn)}
        return json.dumps({
            "format": INTENT_FORMAT, "format_version": 1 if txn is None else 2, **extra,
            "table_id": self.table_id,
            "pointer_key": self.pointer_key, "commit_id": self.commit_id,
            "created_ms": self.created_ms, "deadline_ms": self.deadline_ms,
            "operation": self.write.operation, "started_at_ms": self.write.started_at_ms,
            "schema": self.write.schema.to_json(),
            "files": [f.to_json() for f in self.write.files]},
            separators=(",", ":")).encode()


# Sticky contention: (store URI, pointer key) -> when (monotonic s) a commit of this
# process last took the group path there.  Only a hint: it never decides an outcome.
_CONTENDED: dict[tuple[str, str], float] = {}


def note_contended(uri: str, pointer_key: str) -> None:
    """A commit to this table and ref took the group path now."""
    _CONTENDED[(uri, pointer_key)] = time.monotonic()


def recently_contended(uri: str, pointer_key: str, window_s: float) -> bool:
    """Did a commit of this process take the group path here within ``window_s``?"""
    at = _CONTENDED.get((uri, pointer_key))
    return at is not None and time.monotonic() - at < window_s


def intent_key(deadline_ms: int, token: str) -> str:
    return f"{INTENT_PREFIX}{deadline_ms:013d}-{token}.json"


def deadline_of(key: str) -> int | None:
    """The deadline a key names (None: not an intent key)."""
    name = key.removeprefix(INTENT_PREFIX)
    head, sep, _ = name.partition("-")
    return int(head) if sep and len(head) == 13 and head.isdigit() else None


def parse_intent(data: bytes, key: str, partitioning: Partitioning | None = None) -> Intent:
    """An intent object, checked; any defect is CorruptMetadata naming ``key``.
    ``partitioning``: the table's partition specs, which a file's partition names."""
    try:
        doc = json.loads(data)
        if not isinstance(doc, dict) or doc.get("format") != INTENT_FORMAT:
            raise CorruptMetadata(key, "not a caslake intent")
        if doc.get("format_version") not in (1, 2):
            raise CorruptMetadata(key, f"unknown intent format_version "
                                       f"{doc.get('format_version')!r}")
        txn = _txn(doc, key)
        schema = parse_table_schema(doc["schema"], source=f"{key}: schema")
        files = tuple(parse_data_file(raw, schema, source=f"{key}: files[{i}]",
                                      partitioning=partitioning)
                      for i, raw in enumerate(doc["files"]))
        started = doc["started_at_ms"]
        intent = Intent(key, _str(doc, "table_id"), _str(doc, "pointer_key"),
                        _str(doc, "commit_id"), _int(doc, "created_ms"),
                        _int(doc, "deadline_ms"),
                        GroupWrite(_str(doc, "operation"), files, schema,
                                   None if started is None else _int(doc, "started_at_ms"),
                                   txn))
    except CorruptMetadata:
        raise
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptMetadata(key, f"unreadable intent ({type(e).__name__}: {e})") from None
    if deadline_of(key) != intent.deadline_ms:
        raise CorruptMetadata(key, "the deadline in the key and the body differ")
    return intent


def _txn(doc: dict[str, Any], key: str) -> tuple[str, int] | None:
    """The intent's idempotency token: present exactly in format 2."""
    if doc["format_version"] == 1:
        if "txn" in doc:
            raise CorruptMetadata(key, "a format 1 intent has no txn")
        return None
    raw = doc["txn"]
    try:
        return check_txn(tuple(raw) if isinstance(raw, list) else raw)
    except CaslakeError as e:
        raise CorruptMetadata(key, f"bad txn: {e}") from None


def _str(doc: dict[str, Any], name: str) -> str:
    v = doc[name]
    if not isinstance(v, str) or not v:
        raise ValueError(f"{name} must be a non-empty string")
    return v


def _int(doc: dict[str, Any], name: str) -> int:
    v = doc[name]
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise ValueError(f"{name} must be an integer >= 0")
    return v


def new_intent(pointer_key: str, write: GroupWrite, *, commit_id: str, table_id: str,
               now_ms: int, ttl_ms: int) -> Intent:
    """Our intent, under a fresh key, with its deadline ``ttl_ms`` from now."""
    deadline = now_ms + ttl_ms
    return Intent(intent_key(deadline, new_token()), table_id, pointer_key, commit_id,
                  now_ms, deadline, write)


def publish(io: MetadataIO, intent: Intent) -> bool:
    """Write ``intent`` create-only.  False if the write failed: it may still have
    landed (or land late), so the caller treats the intent as published."""
    try:
        put_new(io.store, intent.key, intent.to_bytes())
        return True
    except StoreError:
        return False


def foldable(intent: Intent, base: Snapshot, now_ms: int, margin_ms: int = MARGIN_MS) -> bool:
    """The deadline rule: ``base`` was created before the deadline and the folder's
    clock is at least ``margin_ms`` before it."""
    return (base.manifest.created_at_ms < intent.deadline_ms
            and now_ms < intent.deadline_ms - margin_ms)


class IntentReader:
    """Pending intents of one table and ref, as a folder sees them; parsed intents
    are cached by key (an intent object is never rewritten)."""

    def __init__(self, io: MetadataIO, pointer_key: str, margin_ms: int = MARGIN_MS,
                 trace: GroupTrace | None = None) -> None:
        self._io = io
        self.trace = trace or GroupTrace(io.store)
        self._pointer_key = pointer_key
        self._margin_ms = margin_ms
        # (intent,) or (None,) for one a folder skips: a tuple, so a miss is None
        self._parsed: LruCache[str, tuple[Intent | None]] = LruCache(4096)
        self.pending_seen = 0  # how many live intents the last listing showed
        self.listed = 0  # how many keys it listed
        self.batch = 0  # how many intents the last fold applied

    def pending(self, base: Snapshot, now_ms: int) -> list[Intent]:
        """The intents a fold on ``base`` may apply, by deadline: live keys only
        (deadline rule), readable, this table's and ref's; unreadable or foreign ones
        are skipped with an :class:`IntentSkipped` warning."""
        listed = list(self._io.store.list(INTENT_PREFIX))
        self.trace.mark("list")
        live = [m.key for m in listed if self._live(m.key, now_ms)
                and (deadline_of(m.key) or 0) > base.manifest.created_at_ms]
        # the ones not parsed yet, read at once on the metadata pool (not one by one)
        fetch_all(lambda key: self._load(key, base),
                  [k for k in live if self._parsed.get(k) is None])
        out = [i for i in (self._load(k, base) for k in live)
               if i is not None and foldable(i, base, now_ms, self._margin_ms)]
        self.trace.mark("read")
        self.listed, self.pending_seen = len(listed), len(out)
        return sorted(out, key=lambda i: (i.deadline_ms, i.key))

    def _live(self, key: str, now_ms: int) -> bool:
        deadline = deadline_of(key)
        return deadline is not None and deadline - self._margin_ms > now_ms

    def rank(self, key: str, now_ms: int) -> int:
        """How many live intent keys sort before ``key`` (one LIST): intents
        published earlier, by deadline; their writers fold first."""
        keys = [m.key for m in self._io.store.list(INTENT_PREFIX)]
        self.trace.mark("rank")
        return sum(1 for k in keys if k < key and self._live(k, now_ms))

    def _load(self, key: str, base: Snapshot) -> Intent | None:
        table_id = base.manifest.table_id
        hit = self._parsed.get(key)
        if hit is not None:
            return hit[0]
        try:
            intent: Intent | None = parse_intent(self._io.store.get(key).data, key,
                                                 base.manifest.partitioning)
        except CorruptMetadata as e:
            warnings.warn(IntentSkipped(f"skipped intent {key!r}: {e.reason}"), stacklevel=2)
            intent = None
        except StoreError:
            return None  # gone (applied and cleaned up) or unreadable now: not this round
        if intent is not None and (intent.table_id != table_id
                                   or intent.pointer_key != self._pointer_key):
            if intent.table_id != table_id:
                warnings.warn(IntentSkipped(f"skipped intent {key!r}: it is for table "
                                            f"{intent.table_id}, not {table_id}"),
                              stacklevel=2)
            intent = None  # another ref's intent is simply not ours to fold
        self._parsed.put(key, (intent,))
        return intent


def applied_since(io: MetadataIO, base: Snapshot, intents: Sequence[Intent]) -> set[str]:
    """Commit ids among ``intents`` that a version up to ``base`` already applied:
    versions back to ``SKEW_MS`` before the oldest intent's creation are searched
    (no version built before an intent existed can hold it)."""
    if not intents:
        return set()
    oldest = min(i.created_ms for i in intents) - SKEW_MS
    wanted = {i.commit_id for i in intents}
    found: set[str] = set()
    cur: Snapshot | None = base
    while cur is not None and cur.manifest.created_at_ms >= oldest:
        m = cur.manifest
        found |= {a.commit_id for a in m.intents if a.commit_id in wanted}
        if m.commit_id in wanted:
            found.add(m.commit_id)
        if m.parent is None or cur.version <= m.oldest_version:
            break
        cur = io.history(cur, limit=2)[-1]
    return found


def fold_prepare(io: MetadataIO, own: Intent, reader: IntentReader,
                 now_ms: Callable[[], int]) -> Callable[[Snapshot], Changes | None]:
    """The ``prepare`` of a fold: our intent plus every pending intent that still
    holds on the base, in one version.  Our own write's conflicts are raised by the
    commit loop's requirements (checked before this runs)."""

    def prepare(base: Snapshot) -> Changes | None:
        now = now_ms()
        reader.trace.mark("base")
        others = [i for i in reader.pending(base, now) if i.commit_id != own.commit_id]
        done = applied_since(io, base, others)
        reader.trace.mark("applied")
        batch = [own]
        tokens = {own.write.txn}
        for intent in others:
            if intent.commit_id in done or (intent.write.txn is not None
                                            and intent.write.txn in tokens):
                continue  # applied already, or its token is in the batch: once
            try:
                intent.write.check(base, io)
            except CommitConflict:
                continue  # refused on this base, so on every later one: its owner sees it
            except CaslakeError:
                continue
            batch.append(intent)
            tokens.add(intent.write.txn)
        files = tuple(f for i in batch for f in i.write.files)
        reader.trace.mark("check")
        reader.batch = len(batch)
        return Changes(own.write.operation, add_files=files,
                       params={"group_intents": str(len(batch))},
                       txn=own.write.txn,
                       txns=tuple(i.write.txn for i in batch[1:] if i.write.txn is not None),
                       intents=tuple(i.applied() for i in batch))

    return prepare


def remove_intent(io: MetadataIO, intent: Intent) -> None:
    """Best effort: our intent has settled, so it is no longer needed (gc would
    collect it once its deadline has passed)."""
    with contextlib.suppress(StoreError):
        io.store.delete(intent.key)
