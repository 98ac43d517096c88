"""The exports' erasure (``purge(expire=True)``) and dropping an export.

Owns :func:`erase_export_history`, which ``Table.purge`` runs between the purge
commit and the expiry of the versions before it: each export at the table root
is rewritten to describe the latest caslake version only, and every export
object describing an older version -- Delta log entries and checkpoints (their
statistics name erased values), deletion-vector files, Iceberg metadata files,
manifest lists, manifests (bounds) and position-delete files -- is deleted.  The
expiry that follows then finds the old data files referenced by nothing and
deletes them.  Owns :func:`drop_export` (``Table.drop_export``, ``caslake export
drop``) too: every object of one export, deleted.

Reads and writes only the export prefixes (``metadata/``, ``_delta_log/``,
``dv/``); an export written elsewhere with ``--out`` is not seen (docs/interop.md).
"""

from __future__ import annotations

from caslake.errors import ExportOnCommitEnabled, ExportUnsupportedType, InvalidArgument
from caslake.export.delta import DV_PREFIX, LAST_CHECKPOINT_KEY, LOG_PREFIX, reset_delta
from caslake.export.hook import DELTA_PROPERTY, ICEBERG_PROPERTY
from caslake.export.iceberg import HINT_KEY, METADATA_PREFIX, IcebergExport, read_hint
from caslake.export.result import ExportResult
from caslake.export.roots import iceberg_keep
from caslake.export.source import TableHandle, load_source
from caslake.store.base import ObjectStore
from caslake.store.options import StorageOptions

FORMATS = ("iceberg", "delta")
_PREFIXES = {"iceberg": (METADATA_PREFIX,), "delta": (LOG_PREFIX, f"{DV_PREFIX}/")}


def _keys(store: ObjectStore, fmt: str) -> list[str]:
    return sorted(m.key for p in _PREFIXES[fmt] for m in store.list(p))


def exports_present(store: ObjectStore) -> list[str]:
    """The formats with any object under their prefixes at ``store``'s root."""
    return [fmt for fmt in FORMATS
            if any(True for p in _PREFIXES[fmt] for _ in store.list(p))]


def reset_iceberg(table: TableHandle) -> ExportResult | None:
    """Rewrite the Iceberg export at the table root to hold the latest caslake
    version only (one snapshot, every manifest and delete file new), publish it,
    then delete every other object under ``metadata/`` that existed before.  None
    when there is no Iceberg export (leftovers of one are deleted)."""
    store = table.store
    before = _keys(store, "iceberg")
    if read_hint(store) is None:
        _delete(store, before)
        return None
    source = load_source(table, None)
    export = IcebergExport(source, store, store.uri)  # refuses unmappable types first
    result = export.run(None)
    keep = iceberg_keep(store, store.uri.rstrip("/") + "/")
    # Older metadata files first: until the last goes, what is left stays readable.
    doomed = [k for k in before if k not in keep]
    doomed.sort(key=lambda k: (not k.endswith(".metadata.json"), k))
    _delete(store, doomed)
    return result


def _delete(store: ObjectStore, keys: list[str]) -> None:
    for key in keys:
        store.delete(key)


def _describe(fmt: str, result: ExportResult | None, removed: int) -> str:
    if result is None:
        return f"{fmt}: {removed} leftover objects deleted"
    return (f"{fmt}: re-exported version {result.version} alone; {removed} older export "
            "objects deleted")


def erase_export_history(table: TableHandle) -> list[str]:
    """Rewrite each export at the table root so it describes only the latest
    version, deleting every export object of older versions (see the module
    docstring).  An export that cannot show the latest version (a type or
    column-mapping refusal) is dropped whole instead: it would otherwise keep
    the old data files, and the values, alive.  Returns one line per format
    touched."""
    out = []
    store = table.store
    for fmt in exports_present(store):
        before = set(_keys(store, fmt))
        try:
            result = reset_iceberg(table) if fmt == "iceberg" else reset_delta(table)
        except ExportUnsupportedType as e:
            removed = drop_objects(store, fmt)
            out.append(f"{fmt}: dropped ({removed} objects), it cannot show the purged "
                       f"version: {e}")
            continue
        if result is None and fmt == "delta":  # no log: deletion vectors left over
            _delete(store, sorted(before))
        out.append(_describe(fmt, result, len(before - set(_keys(store, fmt)))))
    return out


def describe_erasure(store: ObjectStore) -> list[str]:
    """What :func:`erase_export_history` would do (a purge's dry run)."""
    return [f"{fmt}: would be re-exported at the purge's version alone and its "
            f"{len(_keys(store, fmt))} current objects deleted" for fmt in exports_present(store)]


def drop_objects(store: ObjectStore, fmt: str) -> int:
    """Delete every object of the ``fmt`` export at ``store``'s root: the publication
    object (``version-hint.text``, ``_last_checkpoint``) first, then the metadata
    files or log entries oldest first (a checkpoint before its version's commit), so
    what is left meanwhile is a suffix: it reads as the export did, or not at all --
    never as an older export -- then the rest.  Returns how many were deleted."""
    keys = _keys(store, fmt)
    publication = [k for k in keys if k in (HINT_KEY, LAST_CHECKPOINT_KEY)]
    heads = sorted((k for k in keys if k not in publication and k.endswith(
        (".metadata.json", ".json", ".checkpoint.parquet"))), key=_version)
    rest = [k for k in keys if k not in publication and k not in heads]
    _delete(store, publication + heads + rest)
    return len(keys)


def _version(key: str) -> tuple[int, str]:
    digits = "".join(c if c.isdigit() else " " for c in key.rsplit("/", 1)[-1]).split()
    return (int(digits[0]) if digits else -1, key)


def drop_export(table: TableHandle, fmt: str, *, out: str | ObjectStore | None = None,
                storage_options: StorageOptions | None = None) -> int:
    """Delete the ``fmt`` ("iceberg" or "delta") export of ``table`` (at the table
    root, or for Iceberg at ``out``).  Refused with ExportOnCommitEnabled while the
    table property ``export.<fmt>`` is true (the next commit would write it again);
    InvalidArgument for another format.  Returns the number of objects deleted (0:
    there was none; idempotent)."""
    from caslake.store import open_store

    if fmt not in FORMATS:
        raise InvalidArgument(f"unknown export format {fmt!r}: use 'iceberg' or 'delta'")
    if out is not None and fmt != "iceberg":
        raise InvalidArgument("only an Iceberg export can be written elsewhere (--out)")
    prop = ICEBERG_PROPERTY if fmt == "iceberg" else DELTA_PROPERTY
    if out is None and table.io.latest().manifest.properties.get(prop, "").strip().lower() \
            == "true":
        raise ExportOnCommitEnabled(fmt, prop)
    if out is None:
        store = table.store
    elif isinstance(out, str):
        store = open_store(out, storage_options)
    else:
        store = out
    return drop_objects(store, fmt)


__all__ = ["describe_erasure", "drop_export", "erase_export_history", "exports_present"]
