"""Vacuum: delete dataset generations nobody can be reading any more.

Owns the age rule.  Under a dataset key, objects are grouped by generation
(``_gen-<hex>/``; remote-store's top-level ``data.parquet`` / ``part-*.parquet``
form one legacy group).  Nothing the current manifest references is ever
deleted, nor ``manifest.json``, ``_SUCCESS``, nested datasets or unknown
objects.  An unreferenced group is deleted when it has been *logically
dead* for ``older_than``, measured from:

* its newest object (a write still uploading keeps its generation young), and
* the moment it was superseded: the first commit (a ``_COMMITTED`` marker or
  the current ``manifest.json``) at or after its own ``_COMMITTED`` marker, or,
  without a marker, at or after its newest object.  Object times on S3 have
  one-second resolution, so this can be early by under a second.  A commit time that cannot be
  placed counts as "now", so the rule only errs towards keeping.

If the manifest moves while vacuum plans, it plans again; a dataset whose
manifest is damaged is skipped.  Never deletes anything when ``dry_run``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from caslake.dataset.manifest import (
    COMMITTED,
    MANIFEST,
    SUCCESS,
    DatasetManifest,
    is_generation,
    is_legacy_part,
)
from caslake.errors import CorruptMetadata, NotFound
from caslake.store.base import ObjectMeta, ObjectStore

PLAN_ATTEMPTS = 3
_LEGACY = ""


@dataclass
class VacuumReport:
    dry_run: bool
    datasets: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)  # or, in a dry run, would be deleted
    bytes_deleted: int = 0
    kept_young: list[str] = field(default_factory=list)  # unreferenced, not old enough
    skipped: dict[str, str] = field(default_factory=dict)  # dataset -> why

    def to_json(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, "datasets": self.datasets, "deleted": self.deleted,
                "bytes_deleted": self.bytes_deleted, "kept_young": self.kept_young,
                "skipped": self.skipped}


def _time(meta: ObjectMeta) -> datetime:
    return meta.last_modified or datetime.now(UTC)


def find_datasets(store: ObjectStore, prefix: str = "") -> list[str]:
    """Dataset keys with a manifest or a generation directory under ``prefix``."""
    found: set[str] = set()
    for m in store.list(prefix):
        segs = m.key.split("/")
        for i, seg in enumerate(segs[1:], start=1):
            if is_generation(seg) or (seg == MANIFEST and i == len(segs) - 1):
                found.add("/".join(segs[:i]))
                break
    return sorted(found)


def _plan(store: ObjectStore, key: str, older_than: timedelta, now: datetime
          ) -> tuple[str | None, list[ObjectMeta], list[ObjectMeta]] | str:
    """(manifest etag, to delete, kept young), or the reason to skip the dataset."""
    objects = list(store.list(key + "/"))
    by_rel = {m.key[len(key) + 1:]: m for m in objects}
    referenced: set[str] = set()
    etag: str | None = None
    commit_times: list[tuple[datetime, str]] = []  # (when, the object that dates it)
    if MANIFEST in by_rel:
        try:
            got = store.get(f"{key}/{MANIFEST}")
        except NotFound:
            return "the manifest vanished while vacuum read it"
        try:
            manifest = DatasetManifest.from_json(got.data.decode("utf-8", "replace"),
                                                 key=f"{key}/{MANIFEST}")
        except CorruptMetadata as exc:
            return f"damaged manifest: {exc}"
        etag = got.etag
        referenced = set(manifest.parts)
        commit_times.append((_time(by_rel[MANIFEST]), MANIFEST))
    groups: dict[str, list[tuple[str, ObjectMeta]]] = {}
    for rel, m in by_rel.items():
        head, _, rest = rel.partition("/")
        if rest and is_generation(head):
            groups.setdefault(head, []).append((rel, m))
            if rest == COMMITTED:
                commit_times.append((_time(m), rel))
        elif not rest and is_legacy_part(rel):
            groups.setdefault(_LEGACY, []).append((rel, m))
    delete: list[ObjectMeta] = []
    young: list[ObjectMeta] = []
    for name, members in groups.items():
        live = any(rel in referenced for rel, _ in members)
        marker = by_rel.get(f"{name}/{COMMITTED}") if name else None
        for rel, m in members:
            if rel in referenced or (live and rel == f"{name}/{COMMITTED}"):
                continue
            if live:
                dead_since = _time(m)  # a failed upload beside a committed generation
            else:
                newest = max(_time(x) for _, x in members)
                start = _time(marker) if marker is not None else newest
                # ">=": stores date objects to the second (S3), so a later commit
                # can carry the same time as this generation's own marker.
                later = [t for t, what in commit_times
                         if t >= start and what != f"{name}/{COMMITTED}"]
                superseded = min(later) if later else (now if marker is not None else newest)
                dead_since = max(newest, superseded)
            (delete if now - dead_since >= older_than else young).append(m)
    # Parts before markers: an interrupted vacuum leaves the generation still dated.
    delete.sort(key=lambda m: (m.key.endswith("/" + COMMITTED), m.key))
    return etag, delete, young


def vacuum_datasets(store: ObjectStore, dataset_key: str | None, *, older_than: timedelta,
                    dry_run: bool, now: Callable[[], datetime]) -> VacuumReport:
    report = VacuumReport(dry_run=dry_run)
    keys = [dataset_key] if dataset_key is not None else find_datasets(store)
    for key in keys:
        report.datasets.append(key)
        for _ in range(PLAN_ATTEMPTS):
            planned = _plan(store, key, older_than, now())
            if isinstance(planned, str):
                report.skipped[key] = planned
                break
            etag, delete, young = planned
            try:
                current: str | None = store.head(f"{key}/{MANIFEST}").etag
            except NotFound:
                current = None
            if current != etag:
                continue  # a commit landed while planning: plan again
            report.kept_young.extend(m.key for m in young)
            for m in delete:
                if m.key.endswith(("/" + MANIFEST, "/" + SUCCESS)):
                    continue  # never, by construction; a guard against future edits
                if not dry_run:
                    store.delete(m.key)
                report.deleted.append(m.key)
                report.bytes_deleted += m.size
            break
        else:
            report.skipped[key] = "the manifest kept moving while vacuum planned"
    return report
