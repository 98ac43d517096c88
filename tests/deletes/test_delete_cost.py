"""What a delete costs on S3 (moto), counted with the store counters.

* A one-row delete (``id = k`` on a sorted id) costs the same number of
  requests of every kind on tables of 1M, 10M and 50M rows: 3 PUTs
  (tombstone, manifest, pointer) and a GET / GET_RANGE count that does not
  depend on the table size, measured on a freshly opened handle each time.
* The bytes it writes do not grow with the table: the tombstone and the
  pointer are the same size at every scale, and the whole write is small.
* A tombstone deleting 1M rows of one 2M-row file (a contiguous range, or a
  scattered predicate) is at most a few hundred KB, and the delete rewrites
  no data file.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pytest

import caslake
from caslake.core import WriteOptions
from caslake.format.keys import MANIFEST_PREFIX, TOMBSTONE_PREFIX
from caslake.store import open_store
from caslake.store.base import DELETE, GET, GET_RANGE, HEAD, LIST, PUT

pytestmark = pytest.mark.s3
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("f", pa.float64())])
MiB = 1024 * 1024
SIZES = [1_000_000, 10_000_000, 50_000_000]
TOMBSTONE_LIMIT = 400 * 1024  # "a few hundred KB"


def batches(n: int, chunk: int = 1_000_000) -> pa.RecordBatchReader:
    """Sorted ids 0..n-1 and random floats in [0, 1), streamed in 1M-row batches."""

    def gen() -> Iterator[pa.RecordBatch]:
        for start in range(0, n, chunk):
            m = min(chunk, n - start)
            ids = np.arange(start, start + m, dtype=np.int64)
            f = np.random.default_rng(start).random(m)
            yield pa.record_batch([pa.array(ids), pa.array(f)], schema=SCHEMA)

    return pa.RecordBatchReader.from_batches(SCHEMA, gen())


def keys_under(uri: str, opts: dict[str, str], prefix: str) -> dict[str, int]:
    return {m.key: m.size for m in open_store(uri, opts).list(prefix)}


def test_one_row_delete_cost_does_not_depend_on_table_size(s3_uri, s3_options) -> None:  # type: ignore[no-untyped-def]
    # 32 MiB files: 1 file at 1M rows, several at 10M and 50M, so the delete must
    # prune files by the manifest's statistics and row groups by the footer.
    options = WriteOptions(target_file_size=32 * MiB)
    counts: dict[int, dict[str, int]] = {}
    written: dict[int, dict[str, int]] = {}
    for n in SIZES:
        uri = f"{s3_uri}-{n}"
        t0 = time.monotonic()
        t = caslake.create_table(uri, SCHEMA, storage_options=s3_options, write_options=options)
        t.append(batches(n))
        files = t.describe()["files"]
        print(f"build {n:>11,} rows: {time.monotonic() - t0:5.1f} s, {files} data files")

        fresh = caslake.open_table(uri, storage_options=s3_options)
        fresh.store.counters.reset()
        k = n // 2 + 12_345
        res = fresh.delete(f"id = {k}")
        c = fresh.store.counters.snapshot()
        print(f"delete id = {k} on {n:>11,} rows: requests {c}")
        assert (res.rows_deleted, res.noop, res.version) == (1, False, 2)
        assert {k: v for k, v in res.requests.items() if v} == {k: v for k, v in c.items() if v}, (
            "CommitResult.requests must be the counter delta", res.requests)
        assert c.get(PUT, 0) == 3  # tombstone, manifest, pointer: no data file rewritten
        assert c.get(HEAD, 0) == 0 and c.get(LIST, 0) == 0 and c.get(DELETE, 0) == 0
        counts[n] = {kind: c.get(kind, 0) for kind in (GET, GET_RANGE, PUT, HEAD, LIST, DELETE)}

        tombstones = keys_under(uri, s3_options, TOMBSTONE_PREFIX)
        assert len(tombstones) == 1, tombstones
        manifests = keys_under(uri, s3_options, MANIFEST_PREFIX)
        new_manifest = max(manifests)  # keys sort by their 20-digit version
        assert new_manifest.startswith(f"{MANIFEST_PREFIX}v{2:020d}-")
        written[n] = {"total": c["bytes_out"], "tombstone": next(iter(tombstones.values())),
                      "manifest": manifests[new_manifest]}
        written[n]["rest"] = written[n]["total"] - written[n]["manifest"]
        print(f"delete bytes written on {n:>11,} rows: {written[n]}")
        assert caslake.open_table(uri, storage_options=s3_options).scan(
            where=f"id BETWEEN {k - 1} AND {k + 1}").to_arrow().column("id").to_pylist() == [
            k - 1, k + 1]

    small, mid, big = (counts[n] for n in SIZES)
    assert small == mid == big, counts
    # Bytes: the tombstone and pointer are the same size at every scale (a few bytes
    # of slack for longer numbers); the manifest lists the data files (more of them
    # in a bigger table), but the whole delete stays small.
    tomb = [written[n]["tombstone"] for n in SIZES]
    rest = [written[n]["rest"] for n in SIZES]
    assert max(tomb) - min(tomb) <= 16, written
    assert max(rest) - min(rest) <= 32, written
    assert all(w["total"] <= 64 * 1024 for w in written.values()), written


def _tombstone_after(uri: str, opts: dict[str, str], where: str, expect_deleted: int) -> int:
    t = caslake.open_table(uri, storage_options=opts)
    before = keys_under(uri, opts, "data/")
    t.store.counters.reset()
    res = t.delete(where)
    c = t.store.counters.snapshot()
    assert (res.rows_deleted, res.noop) == (expect_deleted, False)
    assert c.get(PUT, 0) == 3, c  # no data file rewritten
    assert keys_under(uri, opts, "data/") == before
    (size,) = keys_under(uri, opts, TOMBSTONE_PREFIX).values()
    print(f"tombstone for {where!r} ({expect_deleted:,} rows): {size:,} bytes; requests {c}")
    assert caslake.open_table(uri, storage_options=opts).scan().count() == 2_000_000 - (
        expect_deleted)
    return size


@pytest.mark.parametrize("kind", ["range", "scattered"])
def test_tombstone_for_a_million_rows_is_small(s3_uri, s3_options, kind) -> None:  # type: ignore[no-untyped-def]
    t = caslake.create_table(s3_uri, SCHEMA, storage_options=s3_options,
                             write_options=WriteOptions(target_file_size=1024 * MiB))
    t.append(batches(2_000_000))
    files = t.describe()["data_files"]
    assert len(files) == 1 and files[0]["rows"] == 2_000_000, files
    if kind == "range":
        size = _tombstone_after(s3_uri, s3_options, "id < 1000000", 1_000_000)
    else:
        # Rows whose random float is below the median: ~half, scattered over the file.
        f = np.concatenate([np.random.default_rng(s).random(1_000_000)
                            for s in (0, 1_000_000)])
        cut = float(np.sort(f)[1_000_000])
        size = _tombstone_after(s3_uri, s3_options, f"f < {cut!r}", int((f < cut).sum()))
    assert size <= TOMBSTONE_LIMIT
