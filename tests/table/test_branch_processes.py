"""8 processes committing to two branches of one table on moto S3: both histories
stay linear and gap-free, every acknowledged commit is in its own branch only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import caslake

WORKER = Path(__file__).with_name("append_worker.py")
SCHEMA = pa.schema([("id", pa.int64()), ("writer", pa.string())])


@pytest.mark.slow
@pytest.mark.s3
def test_eight_processes_on_two_branches_keep_linear_histories(s3_uri, s3_options) -> None:  # type: ignore[no-untyped-def]
    writers, per_writer = 8, 12
    t = caslake.create_table(s3_uri, SCHEMA, storage_options=s3_options)
    t.append(pa.table({"id": pa.array([-1], pa.int64()), "writer": ["seed"]}))  # v1
    t.create_branch("audit")  # forks at v1
    branch_of = {w: ("main" if w % 2 == 0 else "audit") for w in range(writers)}
    procs = {w: subprocess.Popen(
        [sys.executable, str(WORKER), s3_uri, json.dumps(s3_options), str(w), str(per_writer),
         branch_of[w]], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for w in range(writers)}
    acked: dict[str, list[int]] = {"main": [], "audit": []}
    for w, p in procs.items():
        out, err = p.communicate(timeout=900)
        assert p.returncode == 0, err[-2000:]
        acked[branch_of[w]].extend(json.loads(out.strip().splitlines()[-1]))
    per_branch = writers // 2 * per_writer
    for name in ("main", "audit"):
        # Each version after the fork acknowledged to exactly one writer of this branch.
        assert sorted(acked[name]) == list(range(2, 2 + per_branch)), name
        b = caslake.open_table(s3_uri, storage_options=s3_options).branch(name)
        assert b.version == 1 + per_branch
        assert [h.version for h in b.history()] == list(range(1 + per_branch, -1, -1))
        got = b.scan(columns=["id", "writer"]).to_arrow()
        mine = {f"w{w}" for w in range(writers) if branch_of[w] == name}
        assert set(got.column("writer").to_pylist()) == mine | {"seed"}
        expected = {w * 100_000 + i for w in range(writers) if branch_of[w] == name
                    for i in range(per_writer * 10)} | {-1}
        ids = got.column("id").to_pylist()
        assert len(ids) == len(expected) and set(ids) == expected
