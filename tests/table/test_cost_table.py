"""Seed 000's cost table, counted with the store counters over the S3 protocol (moto)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import caslake
from caslake.core import WriteOptions
from caslake.core.metadata_io import MetadataIO
from caslake.store.base import GET, GET_RANGE, HEAD, LIST, PUT

pytestmark = pytest.mark.s3
SCHEMA = pa.schema([("id", pa.int64()), ("a", pa.int64()), ("b", pa.int64())])


def data(start: int, n: int) -> pa.Table:
    rng = np.random.default_rng(start)
    return pa.table({"id": pa.array(np.arange(start, start + n), pa.int64()),
                     "a": pa.array(rng.integers(0, 2**62, n), pa.int64()),
                     "b": pa.array(rng.integers(0, 2**62, n), pa.int64())})


def test_append_costs_three_puts_and_at_most_two_gets(s3_uri, s3_options) -> None:  # type: ignore[no-untyped-def]
    caslake.create_table(s3_uri, SCHEMA, storage_options=s3_options)
    t = caslake.open_table(s3_uri, storage_options=s3_options)
    t.store.counters.reset()
    res = t.append(data(0, 1000))
    c = t.store.counters.snapshot()
    print("append requests:", c)
    assert res.files_added == 1
    assert c.get(PUT, 0) == 3
    assert c.get(GET, 0) + c.get(GET_RANGE, 0) <= 2
    assert c.get(HEAD, 0) == 0 and c.get(LIST, 0) == 0
    assert res.requests[PUT] == 3


def test_scan_costs_pointer_manifest_footers_and_needed_chunks(s3_uri, s3_options) -> None:  # type: ignore[no-untyped-def]
    # Column chunks of ~1.6 MB each so that unneeded chunks between needed ones are
    # wider than the coalescing gap and are never downloaded.
    opts = WriteOptions(row_group_size=200_000 * 24)
    t = caslake.create_table(s3_uri, SCHEMA, storage_options=s3_options, write_options=opts)
    for i in range(3):
        t.append(data(i * 600_000, 600_000))  # 3 files x 3 row groups
    cold = caslake.open_table(s3_uri, storage_options=s3_options)
    cold.context.io = MetadataIO(cold.store)  # nothing cached
    cold.store.counters.reset()
    scan = cold.scan(columns=["a"], where="id >= 650000 AND id < 700000")
    plan = scan.plan()
    got = scan.to_arrow()
    c = cold.store.counters.snapshot()
    print("scan plan:", plan.describe()["files"], plan.describe()["row_groups"])
    print("scan requests:", c)
    assert got.num_rows == 50_000
    assert plan.files_pruned == 2 and len(plan.tasks) == 1
    assert [len(tk.row_groups) for tk in plan.tasks] == [1]
    footers = 1  # only the file that survives manifest pruning
    chunks = 2  # columns a and id of the one surviving row group
    assert c[GET] == 2  # the pointer and the manifest
    # Needed chunks of one row group may be adjacent and coalesced into one request.
    assert footers + 1 <= c[GET_RANGE] <= footers + chunks
    footer_bytes = plan.tasks[0].file.footer_size
    assert c["bytes_in"] - footer_bytes - plan.bytes_to_read < 10_000  # pointer + manifest only
    assert c.get(PUT, 0) == 0 and c.get(LIST, 0) == 0 and c.get(HEAD, 0) == 0
