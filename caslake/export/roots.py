"""What the latest exports of a table reference, for gc.

Owns the answer to "which objects under the table root must gc keep because an
Iceberg or Delta export points at them", and which key prefixes hold export
objects at all (so gc can collect the superseded ones):

* Iceberg (``metadata/``): the hint, the metadata file it names, and everything
  that file's snapshots reach -- manifest lists, manifests, position-delete
  files, and the caslake data files (even ones compaction made unreferenced
  for caslake).  Older metadata files, and manifests and delete files only
  they reached, are superseded.
* Delta (``_delta_log/``, ``dv/``): every log entry (readers replay them all),
  and the data files and deletion-vector files of the files the log's latest
  state holds.  Deletion vectors only removed files or older versions used are
  superseded.

Reads only.  An export under ``--out`` elsewhere is not seen (docs/interop.md).
An export whose metadata cannot be read raises CorruptMetadata: gc must not
delete on a guess.
"""

from __future__ import annotations

from dataclasses import dataclass

from caslake.core import key_at
from caslake.export import iceberg_avro as avro
from caslake.export.delta import DV_PREFIX, LOG_PREFIX, dv_key, read_log
from caslake.export.iceberg import HINT_KEY, METADATA_PREFIX, metadata_key, read_hint, read_metadata
from caslake.store.base import ObjectStore

PREFIXES = (METADATA_PREFIX, LOG_PREFIX, f"{DV_PREFIX}/")


@dataclass(frozen=True)
class ExportRoots:
    """``prefixes``: where export objects live (gc may collect unreferenced ones
    there); ``keep``: keys (export objects and caslake data files) to keep."""

    prefixes: tuple[str, ...]
    keep: frozenset[str]


def iceberg_keep(store: ObjectStore, root: str) -> set[str]:
    """The keys the Iceberg export at ``root`` references (its hint, the metadata
    file it names, and everything that file's snapshots reach)."""
    version = read_hint(store)
    if version is None:
        return set()
    key = metadata_key(version)
    keep = {HINT_KEY, key}

    def local(uri: str) -> str | None:
        # A clone's file of a table it references: by its aliased key (gc's hold there).
        return uri[len(root):] if uri.startswith(root) else key_at(store, uri)

    manifests: set[str] = set()
    for snap in read_metadata(store, key).get("snapshots", []):
        list_key = local(snap["manifest-list"])
        if list_key is None:
            continue
        keep.add(list_key)
        for rec in avro.read_records(store.get(list_key).data, list_key):
            mk = local(rec["manifest_path"])
            if mk is not None:
                manifests.add(mk)
    keep |= manifests
    for mk in manifests:
        for entry in avro.read_records(store.get(mk).data, mk):
            fk = local(entry["data_file"]["file_path"])
            if fk is not None:
                keep.add(fk)
    return keep


def _delta(store: ObjectStore) -> set[str]:
    keep = {m.key for m in store.list(LOG_PREFIX)}
    if not keep:
        return keep
    for path, add in read_log(store).adds.items():
        # Relative to the root, or (a clone's file of a table it references) absolute.
        absolute = path.startswith("/") or "://" in path
        keep.add((key_at(store, path) or path) if absolute else path)
        dv = add.get("deletionVector")
        if dv and dv.get("storageType") == "u":
            keep.add(dv_key(dv["pathOrInlineDv"]))
    return keep


def export_roots(store: ObjectStore) -> ExportRoots:
    """What the latest exports stored at ``store``'s root reference."""
    root = store.uri.rstrip("/") + "/"
    return ExportRoots(PREFIXES, frozenset(iceberg_keep(store, root) | _delta(store)))
