"""8 processes x 25 appends on one table, with readers running: no lost commit, no gap,
and every read sees one whole version."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pytest

import caslake

WORKER = Path(__file__).with_name("append_worker.py")
SCHEMA = pa.schema([("id", pa.int64()), ("writer", pa.string())])


@pytest.mark.slow
def test_eight_processes_append_concurrently(any_store_uri) -> None:  # type: ignore[no-untyped-def]
    uri, opts = any_store_uri
    if uri.startswith("memory://"):
        pytest.skip("a memory:// table is private to one process")
    writers, per_writer = 8, 25
    caslake.create_table(uri, SCHEMA, storage_options=opts)
    stop = threading.Event()
    reads: list[tuple[int, int]] = []
    bad: list[str] = []

    def reader() -> None:
        try:
            t = caslake.open_table(uri, storage_options=opts)
            while not stop.is_set():
                scan = t.scan(columns=["id"])
                n = scan.count()
                reads.append((scan.snapshot.version, n))
                if n != 10 * scan.snapshot.version:
                    bad.append(f"version {scan.snapshot.version} showed {n} rows")
        except BaseException as e:  # a reader that dies must fail the test
            bad.append(f"reader failed: {e!r}")

    readers = [threading.Thread(target=reader) for _ in range(2)]
    for r in readers:
        r.start()
    procs = [subprocess.Popen([sys.executable, str(WORKER), uri, json.dumps(opts or {}), str(w),
                               str(per_writer)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for w in range(writers)]
    acked: list[int] = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-2000:]
        acked.extend(json.loads(out.strip().splitlines()[-1]))
    stop.set()
    for r in readers:
        r.join()

    assert not bad, bad[:5]
    assert len(reads) > 0
    # Exactly 200 new versions, each acknowledged to exactly one writer, no gaps.
    assert sorted(acked) == list(range(1, writers * per_writer + 1))
    t = caslake.open_table(uri, storage_options=opts)
    assert t.version == writers * per_writer
    hist = t.history()
    assert [h.version for h in hist] == list(range(200, -1, -1))
    ids = t.scan(columns=["id"]).to_arrow().column("id").to_pylist()
    expected = {w * 100_000 + i for w in range(writers) for i in range(per_writer * 10)}
    assert len(ids) == len(expected) and set(ids) == expected
