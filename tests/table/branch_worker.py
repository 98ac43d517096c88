"""Run as a separate process: N appends of 10 rows to one branch of a table."""

from __future__ import annotations

import json
import sys

import pyarrow as pa

import caslake
from caslake.table.commit import CommitPolicy


def main() -> None:
    uri, opts_json, branch = sys.argv[1], sys.argv[2], sys.argv[3]
    writer, count = int(sys.argv[4]), int(sys.argv[5])
    opts = json.loads(opts_json) or None
    t = caslake.open_table(uri, storage_options=opts).branch(branch)
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
