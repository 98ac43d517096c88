"""Clones into another bucket (container) of the same provider, and refused across
providers (issue 34): on moto S3 (two buckets), fake-gcs-server (two buckets) and
Azurite (two containers).

A source with two appends and a delete is cloned into the other bucket (by the
CLI, ``caslake clone SRC DST -o key=value ...``).  The clone
names the source by its full URI and reads its files there: pyarrow reads each live
file of the clone straight from the bucket that holds it (the source's for the
cloned files), and those rows less the rows the table hides equal the scan, which
equals a plain-Python model of the rows.  Then the source is overwritten and gc'd
with a clock 30 days ahead: its hold keeps the clone's files, and the clone still
reads right.  The clone deletes, appends and compacts in its own bucket (the
source's objects byte for byte unchanged); the clone's gc releases its hold on the
source, after which the source's gc reclaims the shared files and the clone still
reads right.

Across providers (local -> S3, S3 -> local, S3 -> GCS, GCS -> Azure, Azure -> S3,
memory -> S3; local files and memory count as one) ``clone`` raises
CloneAcrossProviders naming both URIs, before writing anything: no target table, no
hold under the source; the CLI says so in one line.
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import caslake
from caslake.cli import main as cli_main
from caslake.errors import CloneAcrossProviders
from caslake.format.keys import split_external
from caslake.store import open_store
from tests.conftest import _store_uri, kind_params

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("s", pa.string())])
LATER = timedelta(days=30)  # gc's clock: every unreferenced object is old enough


def _rows(ids: range | list[int]) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()),
                     "s": pa.array([f"s{i % 7}" for i in ids], pa.string())}, schema=SCHEMA)


@pytest.fixture(params=kind_params(["s3", "gcs", "azure"]))
def two_buckets(request: pytest.FixtureRequest, tmp_path: Path
                ) -> tuple[str, str, dict[str, str]]:
    """(source uri, clone uri in another fresh bucket of the same emulator, options)."""
    kind = str(request.param)
    source, opts = _store_uri(kind, request, tmp_path)
    target, _ = _store_uri(kind, request, tmp_path)
    assert source.split("/")[2] != target.split("/")[2]
    return source, target.replace("/tables/t", "/clones/c"), opts


def _raw_ids(table: caslake.Table, opts: dict[str, str], owners: dict[str, str]
             ) -> tuple[list[int], int]:
    """Every id in the table's live files as pyarrow reads them from the bucket that
    holds each file (``owners``: alias -> table URI, "" -> the table's own), and the
    number of rows the table hides in them."""
    ids: list[int] = []
    hidden = 0
    for f in table.live_files():
        alias, key = split_external(f["path"])
        store = open_store(owners[alias or ""], opts)  # type: ignore[arg-type]
        ids += pq.read_table(io.BytesIO(store.get(key).data)).column("id").to_pylist()
        hidden += f["deleted_rows"]
    return ids, hidden


def _check_reads(table: caslake.Table, opts: dict[str, str], owners: dict[str, str],
                 model: set[int]) -> None:
    got = table.scan().to_arrow().sort_by("id")
    assert got.column("id").to_pylist() == sorted(model)
    assert got.equals(_rows(sorted(model)))
    raw, hidden = _raw_ids(table, opts, owners)
    assert len(raw) - hidden == len(model) and model <= set(raw)


def _objects(uri: str, opts: dict[str, str]) -> dict[str, str]:
    store = open_store(uri, opts)  # type: ignore[arg-type]
    return {m.key: m.etag for m in store.list("")}


def test_a_clone_in_another_bucket_reads_writes_and_is_held(
        two_buckets: tuple[str, str, dict[str, str]]) -> None:
    source_uri, clone_uri, opts = two_buckets
    src = caslake.create_table(source_uri, SCHEMA, storage_options=opts)
    src.append(_rows(range(0, 100)))
    src.append(_rows(range(100, 200)))
    src.delete("id < 10")
    model = set(range(10, 200))

    # Cloned by the CLI, with the storage options as -o pairs.
    out = io.StringIO()
    options = [a for k, v in opts.items() for a in ("-o", f"{k}={v}")]
    assert cli_main(["clone", source_uri, clone_uri, *options, "--json"], out=out) == 0
    assert json.loads(out.getvalue())["rows"] == len(model)
    clone = caslake.open_table(clone_uri, storage_options=opts)
    externals = clone.snapshot.manifest.external
    assert [e.uri.rstrip("/") for e in externals.values()] == [source_uri]
    owners = {"": clone_uri, **{a: e.uri for a, e in externals.items()}}
    _check_reads(clone, opts, owners, model)
    assert all(split_external(f["path"])[0] for f in clone.live_files())  # all the source's

    # The source moves on and collects: its hold keeps what the clone reads.
    src.overwrite(_rows(range(1000, 1010)))
    src.gc(now=datetime.now(UTC) + LATER)
    clone = caslake.open_table(clone_uri, storage_options=opts)
    _check_reads(clone, opts, owners, model)
    before = _objects(source_uri, opts)

    # The clone writes in its own bucket only.
    clone.delete("id >= 150 OR s = 's3'")
    clone.append(_rows(range(500, 520)))
    model = {i for i in model if not (i >= 150 or i % 7 == 3)} | set(range(500, 520))
    _check_reads(clone, opts, owners, model)
    clone.compact(target_file_size=1 << 20)
    _check_reads(clone, opts, owners, model)
    assert not any(split_external(f["path"])[0] for f in clone.live_files())
    assert _objects(source_uri, opts) == before, "the clone changed its source"

    # The clone's gc releases its hold; the source's gc then reclaims the shared files.
    report = clone.gc(now=datetime.now(UTC) + LATER)
    assert [h.rsplit("/refs/", 1)[0] for h in report.holds_released] == [source_uri]
    reclaimed = src.gc(now=datetime.now(UTC) + LATER)
    assert reclaimed.deleted.get("data"), reclaimed
    again = caslake.open_table(clone_uri, storage_options=opts)
    _check_reads(again, opts, owners, model)
    assert caslake.open_table(source_uri, storage_options=opts).scan().to_arrow() \
        .sort_by("id").equals(_rows(range(1000, 1010)))


def _refused(source: str, target: str, opts: dict[str, str] | None = None) -> None:
    with pytest.raises(CloneAcrossProviders) as info:
        caslake.clone(source, target, storage_options=opts)
    message = str(info.value)
    assert source in message and target in message and "\n" not in message
    assert (info.value.source, info.value.target) == (source, target)


@pytest.mark.s3
def test_a_clone_across_providers_is_refused_before_writing(
        s3_uri: str, s3_options: dict[str, str], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    local = str(tmp_path / "local")
    caslake.create_table(local, SCHEMA).append(_rows(range(5)))
    caslake.create_table(s3_uri, SCHEMA, storage_options=s3_options).append(_rows(range(5)))
    s3_target = s3_uri.replace("/tables/t", "/clones/c")
    _refused(local, s3_target)
    _refused(s3_uri, str(tmp_path / "c"), s3_options)
    assert not _objects(s3_target, s3_options), "the refused clone wrote to its target"
    assert not (tmp_path / "c").exists()
    assert not [k for k in _objects(s3_uri, s3_options) if k.startswith("refs/holds/")]
    assert not [p for p in (Path(local) / "refs").rglob("*") if "holds" in p.parts]

    capsys.readouterr()
    assert cli_main(["clone", local, s3_target], out=io.StringIO()) != 0
    err = capsys.readouterr().err.strip()
    assert err.startswith("caslake: error: cannot clone") and "\n" not in err
    assert local in err and s3_target in err


@pytest.mark.parametrize(("source", "target"), [
    ("s3://bucket-a/t", "gs://bucket-b/c"),
    ("gs://bucket-a/t", "az://container-b/c"),
    ("az://container-a/t", "s3://bucket-b/c"),
    ("abfss://cont@account.dfs.core.windows.net/t", "gs://bucket-b/c"),
    ("memory://somewhere", "s3://bucket-b/c"),
    ("file:///tmp/somewhere", "gs://bucket-b/c"),
])
def test_the_provider_check_comes_before_any_store_is_opened(source: str, target: str
                                                             ) -> None:
    _refused(source, target)
