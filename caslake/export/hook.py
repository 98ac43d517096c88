"""Export on commit: the table properties ``export.iceberg = true`` and
``export.delta = true`` make every commit also publish its version, right after
the commit, in the same call.

Owns reading those properties and running the exports.  The commit has
already landed when this runs: an export error must never fail it, so the
caller (the operation runner) logs any error and carries on; the next
export, on commit or by hand, catches up (exports are incremental from the
last published one, never from the last attempt).  Never commits.
"""

from __future__ import annotations

from caslake.core import Snapshot, progress_advance
from caslake.export.delta import export_delta
from caslake.export.iceberg import export_iceberg
from caslake.export.source import TableHandle

ICEBERG_PROPERTY = "export.iceberg"
DELTA_PROPERTY = "export.delta"


def wanted(snapshot: Snapshot) -> list[str]:
    """The formats ``snapshot``'s table properties ask to export on commit."""
    props = snapshot.manifest.properties
    return [fmt for fmt, prop in (("iceberg", ICEBERG_PROPERTY), ("delta", DELTA_PROPERTY))
            if props.get(prop, "").strip().lower() == "true"]


def export_on_commit(table: TableHandle, snapshot: Snapshot) -> None:
    """Export ``snapshot`` in every format its properties ask for.  Raises the first
    export error after trying every format (the runner logs it)."""
    first: Exception | None = None
    for fmt in wanted(snapshot):
        try:
            if fmt == "iceberg":
                export_iceberg(table, snapshot.version)
            else:
                export_delta(table, snapshot.version)
        except Exception as e:  # one format failing must not stop the other
            first = first or e
        progress_advance()  # one step per format, when a bar is open (the CLI's)
    if first is not None:
        raise first
