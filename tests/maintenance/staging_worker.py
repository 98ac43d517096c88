"""Run as a separate process: one append whose input never ends.  It writes row groups
holding ``secret`` into its local staging file, creates the file ``ready`` once at
least ``min_bytes`` are staged, and then blocks until the test kills it (SIGKILL):
what a writer that crashed mid-append leaves behind.

    python -m tests.maintenance.staging_worker URI SECRET READY MIN_BYTES
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

import caslake
from caslake.core import WriteOptions

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("user", pa.string())])


def main() -> None:
    uri, secret, ready, min_bytes = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
    t = caslake.open_table(uri, write_options=WriteOptions(row_group_size=64 * 1024))
    staging = Path(str(t.store.staging_dir()))

    def batches() -> Iterator[pa.RecordBatch]:
        n = 0
        while True:
            ids = pa.array(range(n, n + 4096), pa.int64())
            users = pa.array([secret if i % 3 == 0 else f"u{i}-{i * 7919 % 100003}"
                              for i in range(n, n + 4096)])
            yield pa.RecordBatch.from_arrays([ids, users], schema=SCHEMA)
            n += 4096
            staged = sum(p.stat().st_size for p in staging.glob("*.parquet.tmp"))
            if staged >= min_bytes and not ready.exists():
                ready.write_text(str(staged))
            if ready.exists():
                time.sleep(3600)  # "crash" here: the test sends SIGKILL

    t.append(pa.RecordBatchReader.from_batches(SCHEMA, batches()))


if __name__ == "__main__":
    main()
