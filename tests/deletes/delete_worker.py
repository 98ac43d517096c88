"""Run as a separate process by test_delete_concurrency.py.

    delete_worker.py URI OPTIONS_JSON delete '[id, id, ...]'
        one ``delete("id = <id>")`` per id, in order;
    delete_worker.py URI OPTIONS_JSON append '[[first_id, n], ...]'
        one append of ``n`` rows with ids ``first_id .. first_id+n-1`` per pair.

Prints, as its last stdout line, a JSON list with one record per acknowledged
operation: ``{"op", "version", "noop", "rows_deleted" | "ids"}``.
"""

from __future__ import annotations

import json
import sys

import pyarrow as pa

import caslake
from caslake.core.commit import CommitPolicy

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


def main() -> None:
    uri, opts_json, role, payload = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    table = caslake.open_table(uri, storage_options=json.loads(opts_json) or None)
    table.commit_policy = CommitPolicy(max_attempts=1000, base_backoff_s=0.002,
                                       max_backoff_s=0.1)
    out: list[dict[str, object]] = []
    if role == "delete":
        for key in payload:
            res = table.delete(f"id = {int(key)}")
            out.append({"op": "delete", "id": key, "version": res.version, "noop": res.noop,
                        "rows_deleted": res.rows_deleted})
    elif role == "append":
        for first, n in payload:
            ids = list(range(first, first + n))
            data = pa.table({"id": pa.array(ids, pa.int64()),
                             "v": pa.array([f"p{i}" for i in ids])}, schema=SCHEMA)
            res = table.append(data)
            out.append({"op": "append", "ids": ids, "version": res.version, "noop": res.noop})
    else:
        raise SystemExit(f"unknown role {role!r}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
