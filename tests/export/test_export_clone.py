"""Exports of a clone (docs/format.md, "Clones"; notes/model.md defect 7): a clone
references its sources' files through aliased keys (``data/x=s0/...``) that only
caslake's routing store resolves, so the Iceberg and Delta exports of a clone must
name every file by its real location (the source table's file), and each outside
reader must read the clone exactly as ``Table.scan`` does -- for chains one, two
and three deep with deletes at every level (deletion vectors and position deletes
on files of every table of the chain)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import caslake
from caslake.api import Table
from tests.export.readers import (
    caslake_rows,
    deltalake_rows,
    duck,
    duckdb_delta_rows,
    duckdb_iceberg_rows,
    pyiceberg_rows,
)

SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string())])


def batch(lo: int, hi: int) -> pa.Table:
    ids = list(range(lo, hi))
    return pa.table({"id": pa.array(ids, pa.int64()), "s": [f"v{i}" for i in ids]})


def clone_chain(root: Path, depth: int = 3, name: str = "t",
                storage_options: dict[str, str] | None = None,
                base: str | None = None) -> list[Table]:
    """A table (three files, a delete) and a chain of ``depth`` clones of it, each
    with a delete of its own (reaching files of every table before it) and, at the
    first level, an append (a clone holding its own files next to its sources').
    Returns the table then every clone, each refreshed to its head."""
    uri = base or str(root / name)
    t = caslake.create_table(uri, SCHEMA, storage_options=storage_options)
    for lo in (0, 10, 20):
        t.append(batch(lo, lo + 10))
    t.delete("id = 1 OR id = 11")
    chain = [t]
    deletes = {1: "id = 2 OR id = 21", 2: "id = 3 OR id = 31", 3: "id = 4 OR id = 12 OR id = 32"}
    for level in range(1, depth + 1):
        dst = f"{uri}-c{level}"
        caslake.clone(chain[-1].uri, dst, storage_options=storage_options)
        c = caslake.open_table(dst, storage_options=storage_options)
        if level == 1:
            c.append(batch(30, 36))
        c.delete(deletes[level])
        chain.append(c.refresh())
    return chain


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_exports_of_a_clone_chain_read_as_its_scan(tmp_path: Path, depth: int) -> None:
    chain = clone_chain(tmp_path, depth)
    ice, dl = duck(("avro", "iceberg")), duck(("delta",))
    failures = []
    for level, t in enumerate(chain):
        want = caslake_rows(t)
        root = t.store.uri.removeprefix("file://")
        assert want.num_rows > 0
        ir = t.export_iceberg()
        t.export_delta()
        readers = {
            "pyiceberg": lambda ir=ir: pyiceberg_rows(ir.location, SCHEMA),
            "duckdb iceberg_scan": lambda ir=ir: duckdb_iceberg_rows(ir.location, SCHEMA,
                                                                      con=ice),
            "deltalake": lambda root=root: deltalake_rows(root, SCHEMA),
            "duckdb delta_scan": lambda root=root: duckdb_delta_rows(root, SCHEMA, con=dl),
        }
        for reader, read in readers.items():
            try:
                got = read()
            except Exception as e:  # every (level, reader) is reported at once
                failures.append(f"level {level}, {reader}: {type(e).__name__}: "
                                f"{str(e).splitlines()[0][:300]}")
                continue
            if not got.equals(want):
                failures.append(f"level {level}, {reader}: {got.num_rows} rows "
                                f"{got.column('id').to_pylist()}, want "
                                f"{want.column('id').to_pylist()}")
    assert not failures, "\n".join(failures)


def test_a_clone_export_names_its_sources_files_and_keeps_erasing(tmp_path: Path) -> None:
    """The Delta log of a clone adds its own files by relative path and its sources'
    by their absolute path (a local table); a later export (a delete changing a
    source file's deletion vector) removes and re-adds by the same path; the
    erasure's reset of the Delta export re-adds them alike and still reads as the
    scan."""
    from caslake.export.delta import read_log, reset_delta

    chain = clone_chain(tmp_path, 2)
    c = chain[2]
    c.export_delta()
    adds = read_log(c.store).adds
    src0, src1 = (t.store.uri.removeprefix("file://") for t in chain[:2])
    assert all(p.startswith((f"{src0}/data/", f"{src1}/data/")) for p in adds), sorted(adds)
    c.delete("id = 5")
    c.export_delta()
    adds = read_log(c.store).adds
    assert all(p.startswith((f"{src0}/data/", f"{src1}/data/")) for p in adds), sorted(adds)
    root = c.store.uri.removeprefix("file://")
    assert deltalake_rows(root, SCHEMA).equals(caslake_rows(c))
    reset_delta(c.context)
    assert deltalake_rows(root, SCHEMA).equals(caslake_rows(c))
    assert duckdb_delta_rows(root, SCHEMA).equals(caslake_rows(c))
    own = chain[1]
    own.export_delta()
    mine = [p for p in read_log(own.store).adds if not p.startswith("/")]
    assert mine and all(p.startswith("data/") and "x=" not in p for p in mine), mine


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_clone_keeps_its_hold_while_its_export_names_a_sources_file(
        tmp_path: Path, fmt: str) -> None:
    """gc keeps what an export references: a clone compacted off its source keeps
    its hold there while its export still names the source's files (by their real
    location), so the source's gc cannot delete them; once the export no longer
    names them (Delta re-exported; the Iceberg export dropped) the hold goes."""
    from datetime import UTC, datetime, timedelta

    from caslake.format.refs import HOLD_PREFIX

    later = datetime.now(UTC) + timedelta(days=30)
    src = caslake.create_table(str(tmp_path / "src"), SCHEMA)
    src.append(batch(0, 10))
    c = caslake.clone(src.uri, str(tmp_path / "c"))
    c = caslake.open_table(c.uri)
    c.append(batch(10, 20))
    c.delete("id = 3")
    export = c.export_delta if fmt == "delta" else c.export_iceberg
    export()
    c.compact(target_file_size=1 << 30, deleted_fraction=0.01)  # nothing of src live
    assert all(not f.path.startswith("data/x=") for f in c.io.live_files(c.refresh().snapshot))
    assert c.gc(retention=timedelta(0), force=True, now=later).holds_released == []
    assert [m.key for m in src.store.list(HOLD_PREFIX)]
    if fmt == "delta":
        export()
    else:
        c.drop_export("iceberg")  # its snapshots keep every exported version's files
    assert len(c.gc(retention=timedelta(0), force=True, now=later).holds_released) == 1
    assert not list(src.store.list(HOLD_PREFIX))
    assert caslake_rows(c).column("id").to_pylist() == [i for i in range(20) if i != 3]


@pytest.mark.s3
def test_exports_of_a_clone_on_s3(s3_uri: str, s3_options: dict[str, str],
                                  moto_server: str, tmp_path: Path) -> None:
    """On S3 the Delta log names a source's file by its s3:// URI: deltalake reads
    it; DuckDB's delta_scan prefixes the table root to it (docs/interop.md,
    "Clones"), so it is checked to fail, not to read.  Iceberg reads with both."""
    from urllib.parse import urlparse

    from caslake.testing.moto_server import DUMMY_KEY_ID, DUMMY_SECRET, REGION

    c = clone_chain(tmp_path, 2, storage_options=s3_options, base=s3_uri)[-1]
    want = caslake_rows(c)
    ir = c.export_iceberg()
    c.export_delta()
    props = {"s3.endpoint": moto_server, "s3.access-key-id": DUMMY_KEY_ID,
             "s3.secret-access-key": DUMMY_SECRET, "s3.region": REGION}
    assert pyiceberg_rows(ir.location, SCHEMA, properties=props).equals(want)
    delta_opts = {"AWS_ENDPOINT_URL": moto_server, "AWS_ACCESS_KEY_ID": DUMMY_KEY_ID,
                  "AWS_SECRET_ACCESS_KEY": DUMMY_SECRET, "AWS_REGION": REGION,
                  "AWS_ALLOW_HTTP": "true"}
    assert deltalake_rows(c.uri, SCHEMA, storage_options=delta_opts).equals(want)
    con = duck(("httpfs", "avro", "iceberg", "delta"))
    con.execute(f"""CREATE SECRET moto (TYPE s3, KEY_ID '{DUMMY_KEY_ID}',
                    SECRET '{DUMMY_SECRET}', REGION '{REGION}',
                    ENDPOINT '{urlparse(moto_server).netloc}', URL_STYLE 'path',
                    USE_SSL false)""")
    assert duckdb_iceberg_rows(ir.location, SCHEMA, con=con).equals(want)
    with pytest.raises(Exception, match=r"t-c2/s3(%3A|:)//"):  # the root prefixed
        duckdb_delta_rows(c.uri, SCHEMA, con=con)
