"""Purge: physical erasure by row-group splice, committed as one version.

Checked on every backend (memory and local splice by copying ranges, s3 by a
multipart upload with UploadPartCopy on moto): the table loses exactly the rows,
the new file is the old one minus the erased rows in order (pyarrow with page
checksums, DuckDB), unedited row groups are byte-identical, statistics prune
correctly, tombstones of untouched groups survive remapped, nothing of the
predicate is recorded in clear, and bad input leaves the table untouched.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import caslake
from caslake.api import Table
from caslake.errors import CorruptMetadata, InvalidArgument, UnknownColumn
from caslake.format import splice as sp
from caslake.format.parquet_thrift import decode_file_metadata, footer_length
from caslake.ops import purge as purge_mod
from caslake.ops.verify import verify_table
from caslake.testing.parquet_files import add_parquet_file

KiB = 1024
MiB = 1024 * KiB
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("user", pa.string()),
                    pa.field("blob", pa.binary())])


def rows(n: int, blob: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({
        "id": pa.array(np.arange(n), pa.int64()),
        # user7 lives only in the middle of the file (rows 4000..4999)
        "user": [f"user{7 if 4000 <= i < 5000 and i % 10 == 0 else i % 5 + 100}"
                 for i in range(n)],
        "blob": [rng.bytes(blob) for _ in range(n)],
    }, schema=SCHEMA)


def make_table(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Table:
    """One data file of 10 row groups of 1000 rows each."""
    from tests.conftest import _store_uri

    uri, opts = _store_uri(kind, request, tmp_path)
    t = caslake.create_table(uri, SCHEMA, storage_options=opts or None)
    if kind != "s3":
        t.store.min_part_size = 16 * KiB  # the same rule, scaled down
    # s3 (moto) enforces the 5 MiB part minimum: make groups big enough to splice.
    add_file(t, rows(10_000, 3 * KiB if kind == "s3" else 64))
    return t


def add_file(t: Table, data: pa.Table, *, group: int = 1000, **options: Any) -> None:
    add_parquet_file(t, data, row_group_rows=group, **options)


@pytest.fixture(params=["memory", "local", pytest.param("s3", marks=pytest.mark.s3)])
def table(request: pytest.FixtureRequest, tmp_path: Path) -> Table:
    return make_table(str(request.param), request, tmp_path)


def only_file(t: Table) -> Any:
    files = t.io.live_files(t.snapshot)
    assert len(files) == 1
    return files[0]


def footer_of(data: bytes) -> Any:
    return decode_file_metadata(data[-8 - footer_length(data[-8:]):-8])


def test_purge_erases_the_rows_and_splices_the_file(table: Table, tmp_path: Path) -> None:
    old = only_file(table)
    old_bytes = table.store.get(old.path).data
    full = pq.read_table(io.BytesIO(old_bytes))
    table.delete("id = 4003 OR id = 7500")  # one row in a touched group, one elsewhere
    version = table.version

    report = table.purge("user = 'user7'")

    assert not report.noop and report.version == version + 1
    assert report.files_rewritten == 1 and report.row_groups_reencoded == 1
    assert report.rows_erased == 100 + 1  # the matches and the deleted row in group 4
    assert report.strategy[old.path] in (sp_names := {"splice", "splice-widened"}), sp_names
    assert report.bytes_copied > 0
    assert report.bytes_uploaded < old.size / 2
    assert report.whole_file_rewrite_bytes == old.size

    # The table: every row but the erased ones and the deleted one.
    erased = pc.or_(pc.equal(full["user"], "user7"), pc.equal(full["id"], 4003))
    expected_file = full.filter(pc.invert(erased))
    expected_live = expected_file.filter(pc.not_equal(expected_file["id"], 7500))
    got = table.to_arrow().sort_by("id")
    assert got.equals(expected_live)
    reopened = caslake.open_table(table.uri, storage_options=_opts(table))
    assert reopened.to_arrow().sort_by("id").equals(expected_live)

    # The new file: old file minus the erased rows, in order, read by pyarrow and DuckDB.
    new = only_file(table)
    new_bytes = table.store.get(new.path).data
    assert len(new_bytes) == new.size
    pf = pq.ParquetFile(io.BytesIO(new_bytes), page_checksum_verification=True)
    assert pf.read().equals(expected_file)
    path = tmp_path / "spliced.parquet"
    path.write_bytes(new_bytes)
    assert duckdb.sql(f"select * from read_parquet('{path}')").arrow().read_all().equals(
        expected_file)
    # Unedited row groups are byte-for-byte the source's.
    old_fmd, new_fmd = footer_of(old_bytes), footer_of(new_bytes)
    for i in (0, 1, 2, 3, 5, 6, 7, 8, 9):
        s, e = sp.row_group_span(old_fmd.row_groups[i])
        ns, ne = sp.row_group_span(new_fmd.row_groups[i])
        assert new_bytes[ns:ne] == old_bytes[s:e]
    # Statistics prune correctly on the new file.
    assert pf.metadata.row_group(4).num_rows == 1000 - 101
    pruned = pq.read_table(io.BytesIO(new_bytes), filters=[("id", ">=", 4000),
                                                            ("id", "<", 4011)])
    assert pruned["id"].to_pylist() == [4001, 4002, 4004, 4005, 4006, 4007, 4008, 4009]
    assert table.scan(where="user = 'user7'").count() == 0
    assert table.scan(where="id = 7500").count() == 0  # the remapped tombstone holds

    # Nothing of the predicate is recorded in clear.
    m = table.snapshot.manifest
    assert m.operation == "purge"
    assert "user7" not in m.to_bytes().decode()
    assert m.operation_params["predicate_hmac"] == report.predicate_hmac
    assert verify_table(table.store, deep=True).ok


def _opts(t: Table) -> dict[str, str] | None:
    settings = getattr(t.store, "settings", None)
    if settings is None:
        return None
    return {"endpoint_url": settings.endpoint_url, "region": settings.region,
            "access_key_id": settings.access_key_id,
            "secret_access_key": settings.secret_access_key, "allow_http": "true"}


def test_a_predicate_matching_nothing_is_a_noop(table: Table) -> None:
    version = table.version
    report = table.purge("user = 'nobody'")
    assert report.noop and report.version == version and report.files_rewritten == 0
    assert table.refresh().version == version


def test_purge_erases_rows_deleted_earlier(table: Table) -> None:
    table.delete("user = 'user7'")  # the usual GDPR flow: delete now, purge later
    report = table.purge("user = 'user7'")
    assert not report.noop and report.rows_erased == 100
    new = only_file(table)
    data = pq.read_table(io.BytesIO(table.store.get(new.path).data))
    assert "user7" not in set(data["user"].to_pylist())
    assert table.snapshot.manifest.tombstones == ()  # nothing left to hide


@pytest.mark.parametrize("where, error", [
    ("", InvalidArgument), ("   ", InvalidArgument), ("nosuch = 1", UnknownColumn),
])
def test_bad_predicates_are_typed_errors(where: str, error: type[Exception]) -> None:
    t = caslake.create_table("memory://", SCHEMA)
    t.append(rows(10, 8))
    with pytest.raises(error):
        t.purge(where)
    with pytest.raises(InvalidArgument):
        t.purge(None)  # type: ignore[arg-type]
    assert t.refresh().version == 1


def test_a_data_file_replaced_behind_the_tables_back_is_refused(table: Table) -> None:
    old = only_file(table)
    other = io.BytesIO()
    pq.write_table(rows(10, 8, seed=3), other)
    table.store.put(old.path, other.getvalue())  # another file under the same key
    version = table.version
    with pytest.raises(CorruptMetadata, match="replaced"):
        table.purge("user = 'user7'")
    assert table.refresh().version == version
    assert [f.path for f in table.io.live_files(table.snapshot)] == [old.path]


def test_dry_run_plans_without_writing(table: Table) -> None:
    version = table.version
    keys = {m.key for m in table.store.list("")}
    report = table.purge("user = 'user7'", dry_run=True)
    assert report.dry_run and report.files_rewritten == 1 and report.rows_erased == 100
    assert report.bytes_uploaded == 0
    assert table.refresh().version == version
    assert {m.key for m in table.store.list("")} == keys


def test_a_concurrent_delete_on_the_purged_file_is_never_lost(
        table: Table, monkeypatch: pytest.MonkeyPatch) -> None:
    other = caslake.open_table(table.uri, storage_options=_opts(table))
    real_commit = purge_mod._commit
    calls = {"n": 0}

    def commit_after_a_delete(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            other.delete("id = 123")  # lands between the purge's plan and its commit
        return real_commit(*args, **kwargs)

    monkeypatch.setattr(purge_mod, "_commit", commit_after_a_delete)
    keys_before = {m.key for m in table.store.list("data/")}
    report = table.purge("user = 'user7'")
    assert calls["n"] == 2  # planned again on the new version
    assert table.scan(where="id = 123").count() == 0  # the delete is not lost
    assert table.scan(where="user = 'user7'").count() == 0
    assert table.scan().count() == 10_000 - 100 - 1
    # The object built by the first plan was removed.
    live = {f.path for f in table.io.live_files(table.snapshot)}
    assert {m.key for m in table.store.list("data/")} - keys_before == live
    assert report.attempts >= 1


def test_a_purge_whose_file_a_concurrent_delete_emptied_is_a_noop_that_counts_its_try(
        monkeypatch: pytest.MonkeyPatch) -> None:
    t = caslake.create_table("memory://", SCHEMA)
    t.append(rows(10, 8))
    t.append(pa.table({"id": [99], "user": ["keep"], "blob": [b"x"]}, schema=SCHEMA))
    other = Table.load(t.store)
    real_commit = purge_mod._commit
    calls = {"n": 0}

    def commit_after_a_delete(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            other.delete("id < 10")  # every row of the purged file: it leaves the table
        return real_commit(*args, **kwargs)

    monkeypatch.setattr(purge_mod, "_commit", commit_after_a_delete)
    version = other.refresh().version
    report = t.purge("id < 10")
    assert calls["n"] == 1 and report.noop and t.refresh().version == version + 1
    assert report.attempts >= 1  # the stale plan's commit was tried, and it lost
    assert t.to_arrow()["id"].to_pylist() == [99]


def test_progress_is_reported(table: Table) -> None:
    seen: list[tuple[str, int, int]] = []
    table.purge("user = 'user7'", progress=lambda *a: seen.append(a))
    assert seen == [("plan", 1, 1), ("file", 1, 1)]


def test_a_whole_file_of_matches_is_dropped() -> None:
    t = caslake.create_table("memory://", SCHEMA)
    t.append(rows(10, 8))
    t.append(pa.table({"id": [99], "user": ["keep"], "blob": [b"x"]}, schema=SCHEMA))
    report = t.purge("id < 10")
    assert report.strategy and set(report.strategy.values()) == {"drop"}
    assert t.to_arrow()["id"].to_pylist() == [99]


@pytest.mark.s3
def test_egress_is_bounded_on_s3(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    t = make_table("s3", request, tmp_path)
    old = only_file(t)
    fmd = footer_of(t.store.get(old.path).data)
    s, e = sp.row_group_span(fmd.row_groups[4])
    report = t.purge("user = 'user7'")
    widened = sum(f.bytes_widened for f in report.files)
    new = only_file(t)
    # Uploaded: the re-encoded group, the footer and the widening, nothing else.
    assert report.bytes_uploaded <= (e - s) + new.footer_size + widened + 4
    assert report.bytes_uploaded + report.bytes_copied >= new.size
    # Downloaded: footer(s), the touched group, the predicate column, the widening.
    assert report.bytes_downloaded < (e - s) + widened + 2 * MiB
    assert report.strategy[old.path] == "splice-widened"


@pytest.mark.s3
def test_an_endpoint_without_upload_part_copy_gets_a_whole_file_rewrite(
        moto_server: str, tmp_path: Path) -> None:
    from caslake.testing.moto_server import storage_options
    from tests.conftest import make_bucket
    from tests.store.rejecting_proxy import rejecting_upload_part_copy

    bucket = make_bucket(moto_server)
    with rejecting_upload_part_copy(moto_server) as proxy:
        t = caslake.create_table(f"s3://{bucket}/t", SCHEMA,
                                 storage_options=storage_options(proxy))
        add_file(t, rows(10_000, 3 * KiB))
        old = only_file(t)
        report = t.purge("user = 'user7'")
        assert report.strategy == {old.path: "rewrite"}
        assert report.bytes_copied == 0
        assert t.scan(where="user = 'user7'").count() == 0
        assert t.scan().count() == 9_900
        assert t.store.list_multipart_uploads() == []
        vr = verify_table(t.store, deep=True)
        assert vr.ok, vr.problems


def test_purge_reads_what_other_engines_wrote_and_keeps_codec() -> None:
    """A file's own codec and page checksums survive the re-encoding."""
    t = caslake.create_table("memory://", SCHEMA)
    t.store.min_part_size = 16 * KiB
    add_file(t, rows(10_000, 32), compression="snappy")
    t.purge("user = 'user7'")
    data = t.store.get(only_file(t).path).data
    md = pq.ParquetFile(io.BytesIO(data)).metadata
    assert {md.row_group(i).column(0).compression for i in range(md.num_row_groups)} == {
        "SNAPPY"}
    assert sp.writer_settings(footer_of(data).row_groups[4], data[
        sp.row_group_span(footer_of(data).row_groups[4])[0]:], sp.row_group_span(
        footer_of(data).row_groups[4])[0]).write_page_checksum


def test_cli_purge(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from caslake.cli import main as cli_main

    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA)
    t.append(rows(10_000, 8))
    assert cli_main(["purge", uri, "--where", "user = 'user7'", "--dry-run", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["dry_run"] and out["rows_erased"] == 100 and out["version"] == 1
    assert cli_main(["purge", uri, "--where", "user = 'user7'", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["version"] == 2 and out["files_rewritten"] == 1
    assert cli_main(["purge", uri, "--where", "nosuch = 1"]) != 0
    _ = os


@pytest.mark.s3
def test_gc_aborts_stale_multipart_uploads(request: pytest.FixtureRequest,
                                          tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta

    from caslake.store import S3Store

    t = make_table("s3", request, tmp_path)
    store = t.store
    assert isinstance(store, S3Store)
    # A purge that died mid-splice leaves an unfinished upload, invisible to list().
    store.boto3_client().create_multipart_upload(Bucket=store.bucket,
                                                 Key=store.full_key("data/dead.parquet"))
    assert [u.key for u in store.list_multipart_uploads("data/")] == ["data/dead.parquet"]
    dry = t.gc(now=datetime.now(UTC) + timedelta(days=30), dry_run=True)
    assert dry.multipart_aborted == 1 and len(store.list_multipart_uploads("data/")) == 1
    report = t.gc(now=datetime.now(UTC) + timedelta(days=30))
    assert report.multipart_aborted == 1
    assert store.list_multipart_uploads() == []


def test_planning_reads_each_footer_once(request: pytest.FixtureRequest,
                                         tmp_path: Path) -> None:
    # The thrift footer comes from the footer cache the planning scan fills: one
    # GET of the footer bytes, not one per reader (on S3 each is a round trip).
    t = make_table("memory", request, tmp_path)
    old = only_file(t)
    tail = (old.size - old.footer_size, old.size)
    fetched: list[tuple[int, int]] = []
    inner = t.store.get_ranges

    def recording(key: str, ranges: Any, **kw: Any) -> list[bytes]:
        if key == old.path:
            fetched.extend(ranges)
        return inner(key, ranges, **kw)

    t.store.get_ranges = recording  # type: ignore[method-assign]
    t.purge("user = 'user7'")
    assert fetched.count(tail) == 1


@pytest.mark.parametrize("as_integer", [True, False], ids=["int64", "fixed"])
def test_decimal_columns_are_spliced_in_the_files_own_physical_type(
        as_integer: bool, tmp_path: Path) -> None:
    """caslake stores decimals as INT64; files of other writers (and older caslake) use
    FIXED_LEN_BYTE_ARRAY.  A splice re-encodes in the source's type, so it stays a
    splice, and DuckDB reads the exact sums."""
    from decimal import Decimal

    schema = pa.schema([pa.field("id", pa.int64()), pa.field("price", pa.decimal128(15, 2))])
    t = caslake.create_table(f"memory://dec-{as_integer}", schema)
    t.store.min_part_size = KiB
    data = pa.table({"id": pa.array(range(10_000), pa.int64()),
                     "price": pa.array([Decimal(i) / 100 for i in range(10_000)],
                                       pa.decimal128(15, 2))})
    add_file(t, data, store_decimal_as_integer=as_integer)
    old = only_file(t)
    report = t.purge("id >= 4000 AND id < 4010")
    assert report.strategy[old.path] in ("splice", "splice-widened")
    new = only_file(t)
    raw = t.store.get(new.path).data
    want = "INT64" if as_integer else "FIXED_LEN_BYTE_ARRAY"
    md = pq.read_metadata(io.BytesIO(raw))
    assert {md.row_group(g).column(1).physical_type for g in range(md.num_row_groups)} == {
        want}
    path = tmp_path / "spliced.parquet"
    path.write_bytes(raw)
    total, n = duckdb.connect().execute(
        f"SELECT sum(price), count(*) FROM read_parquet('{path}')").fetchone() or (None, None)
    assert n == 9_990
    assert total == sum(Decimal(i) / 100 for i in range(10_000) if not 4000 <= i < 4010)
