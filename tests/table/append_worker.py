"""Run as a separate process: N appends of 10 rows tagged with this writer's id, to
the table's main branch or to the branch named by an optional fifth argument."""

from __future__ import annotations

import json
import sys

import pyarrow as pa

import caslake
from caslake.core.commit import CommitPolicy


def main() -> None:
    uri, opts_json, writer, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    opts = json.loads(opts_json) or None
    t = caslake.open_table(uri, storage_options=opts)
    if len(sys.argv) > 5:
        t = t.branch(sys.argv[5])
    t.commit_policy = CommitPolicy(max_attempts=500, base_backoff_s=0.002, max_backoff_s=0.1)
    versions = []
    for i in range(count):
        first = writer * 100_000 + i * 10
        data = pa.table({"id": pa.array(range(first, first + 10), pa.int64()),
                         "writer": pa.array([f"w{writer}"] * 10)})
        versions.append(t.append(data).version)
    print(json.dumps(versions))


if __name__ == "__main__":
    main()
