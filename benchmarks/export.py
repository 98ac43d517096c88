"""Export cost: bytes an Iceberg / Delta export writes, full vs incremental.

A table of 10,000 data files (``--quick``: 2,000), one row each, is exported once
in full; then each of these changes is made and exported (N+1 after N):

* an append of one file;
* a one-row delete in a multi-row file (a tombstone: a position-delete file /
  a deletion vector);
* a delete that removes one whole file.

The goal: an incremental export writes O(changed files) bytes, flat in the
size of the table -- a small fraction of the full export.  The table lives in
a ``memory://`` store so building 10,000 files measures no disk syncs; the
export code path is the same for every store.
"""

from __future__ import annotations

import time
import uuid

import pyarrow as pa

import caslake
from caslake.core import WriteOptions

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.float64())])


def _rows(lo: int, hi: int) -> pa.Table:
    return pa.table({"id": list(range(lo, hi)), "v": [i / 2 for i in range(lo, hi)]},
                    schema=SCHEMA)


def main(quick: bool = False) -> list[dict[str, object]]:
    files = 2_000 if quick else 10_000
    t = caslake.create_table(f"memory://bench-export-{uuid.uuid4().hex}", SCHEMA,
                             write_options=WriteOptions(target_file_size=1, row_group_size=1))
    t.append(_rows(0, files))  # one row per file
    t.write_options = WriteOptions()
    t.append(_rows(10**6, 10**6 + 1000))  # one 1,000-row file for the one-row delete
    steps = [("full export", None),
             ("append 1 file", lambda: t.append(_rows(2 * 10**6, 2 * 10**6 + 1))),
             ("one-row delete", lambda: t.delete(f"id = {10**6 + 500}")),
             ("delete 1 whole file", lambda: t.delete("id = 7"))]
    out: list[dict[str, object]] = []
    for name, change in steps:
        if change is not None:
            change()
        for fmt in ("iceberg", "delta"):
            t0 = time.perf_counter()
            res = t.export_iceberg() if fmt == "iceberg" else t.export_delta()
            out.append({"step": name, "format": fmt, "bytes": res.bytes_written,
                        "objects": res.objects_written, "seconds": time.perf_counter() - t0})
    print(f"\nexport cost: bytes written per export, table of {files + 1:,} data files")
    print(f"{'step':<22}{'format':<9}{'bytes':>12}{'objects':>9}{'vs full':>10}{'time':>9}")
    full = {r["format"]: r["bytes"] for r in out if r["step"] == "full export"}
    for r in out:
        share = int(r["bytes"]) / max(int(full[r["format"]]), 1)  # type: ignore[call-overload]
        print(f"{r['step']:<22}{r['format']:<9}{r['bytes']:>12,}{r['objects']:>9}"
              f"{share:>9.2%}{r['seconds']:>8.2f}s")
    return out


if __name__ == "__main__":
    import sys

    main(quick="--quick" in sys.argv)
