"""Exports of a table on S3 (moto), read back over the S3 protocol by every reader;
and a crash at every store call of an export leaves the previous export readable
and the next export completes."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

import pytest

from caslake.api import Table
from caslake.export.delta import LOG_PREFIX
from caslake.export.iceberg import HINT_KEY, METADATA_PREFIX, metadata_key, read_hint
from caslake.store import ObjectStore, open_store
from caslake.store.faults import ALL_OPS, Fault, FaultyStore, SimulatedCrash
from caslake.testing.moto_server import DUMMY_KEY_ID, DUMMY_SECRET, REGION
from tests.export.data import SCHEMA, history, new_table
from tests.export.readers import (
    caslake_rows,
    deltalake_rows,
    duck,
    duckdb_delta_rows,
    duckdb_iceberg_rows,
    pyiceberg_rows,
)


@pytest.mark.s3
def test_export_on_s3_reads_back_over_s3(s3_uri: str, s3_options: dict[str, str],
                                         moto_server: str) -> None:
    t = new_table(s3_uri, storage_options=s3_options)
    for _, op in history(t)[:6]:  # through the compaction
        op()
    want = caslake_rows(t)
    ir = t.export_iceberg()
    t.export_delta()
    assert ir.location.startswith(s3_uri)
    iceberg_props = {"s3.endpoint": moto_server, "s3.access-key-id": DUMMY_KEY_ID,
                     "s3.secret-access-key": DUMMY_SECRET, "s3.region": REGION}
    assert pyiceberg_rows(ir.location, SCHEMA, properties=iceberg_props).equals(want)
    delta_opts = {"AWS_ENDPOINT_URL": moto_server, "AWS_ACCESS_KEY_ID": DUMMY_KEY_ID,
                  "AWS_SECRET_ACCESS_KEY": DUMMY_SECRET, "AWS_REGION": REGION,
                  "AWS_ALLOW_HTTP": "true"}
    assert deltalake_rows(s3_uri, SCHEMA, storage_options=delta_opts).equals(want)
    endpoint = urlparse(moto_server)
    con = duck(("httpfs", "avro", "iceberg", "delta"))
    con.execute(f"""CREATE SECRET moto (TYPE s3, KEY_ID '{DUMMY_KEY_ID}',
                    SECRET '{DUMMY_SECRET}', REGION '{REGION}', ENDPOINT '{endpoint.netloc}',
                    URL_STYLE 'path', USE_SSL false)""")
    assert duckdb_iceberg_rows(ir.location, SCHEMA, con=con).equals(want)
    assert duckdb_delta_rows(s3_uri, SCHEMA, con=con).equals(want)


# --- crash at every store call ---------------------------------------------------------

EXPORT_PREFIXES = (METADATA_PREFIX, LOG_PREFIX, "dv/")


def export_keys(store: ObjectStore) -> set[str]:
    return {m.key for p in EXPORT_PREFIXES for m in store.list(p)}


def reset_exports(store: ObjectStore, baseline: set[str], hint: bytes) -> None:
    """Back to the baseline export: drop what later exports added, restore the hint."""
    for key in export_keys(store) - baseline:
        store.delete(key)
    store.put(HINT_KEY, hint)


def check_readable(t: Table, uri: str, iceberg: set[int], delta: set[int], where: str) -> None:
    """The Iceberg export reads as exactly one of ``iceberg`` and the Delta one as
    exactly one of ``delta`` (caslake versions), content compared."""
    version = read_hint(t.store)
    assert version in iceberg, f"{where}: Iceberg export at {version}, expected {iceberg}"
    meta = f"{t.store.uri}/{metadata_key(version)}"
    assert pyiceberg_rows(meta, SCHEMA).equals(caslake_rows(t, version)), where
    got = deltalake_rows(uri, SCHEMA)
    assert any(got.equals(caslake_rows(t, v)) for v in delta), where


@pytest.mark.parametrize("target", ["iceberg", "delta"])
def test_crash_at_every_store_call_of_an_export(tmp_path: Path, target: str) -> None:
    uri = str(tmp_path / "t")
    t = new_table(uri)
    ops = history(t)
    for _, op in ops[:2]:  # two appends
        op()
    t.export_iceberg()
    t.export_delta()
    old = t.refresh().version
    for _, op in ops[2:5]:  # a one-row delete, a range delete, an upsert
        op()
    new = t.refresh().version
    baseline = export_keys(t.store)
    hint = t.store.get(HINT_KEY).data

    def run(faults: list[Fault]) -> tuple[FaultyStore, Table]:
        store = FaultyStore(open_store(uri), faults)
        handle = Table.load(store)
        return store, handle

    store, handle = run([])
    start = store.calls
    getattr(handle, f"export_{target}")()
    calls = store.calls - start
    assert calls >= 6, f"export made only {calls} store calls"
    crashed = 0
    for i in range(1, calls + 1):
        reset_exports(t.store, baseline, hint)
        where = f"{target} export crashed at store call {i} of {calls}"
        store, handle = run([])
        store.faults.append(Fault(ALL_OPS, "crash", calls=frozenset(range(i, i + 10_000))))
        with pytest.raises(SimulatedCrash):
            getattr(handle, f"export_{target}")()
        crashed += 1
        check_readable(t, uri, {old}, {old}, where)  # the crashed export never published
        res = getattr(t, f"export_{target}")()  # the next export completes
        assert res.version == new and not res.noop, where
        done = {new} if target == "iceberg" else {old}
        check_readable(t, uri, done, {new} if target == "delta" else {old}, where)
    assert crashed == calls
    t.export_iceberg()
    t.export_delta()  # one of the two is a no-op: it already published ``new``
    assert duckdb_delta_rows(uri, SCHEMA).equals(caslake_rows(t, new))
    assert duckdb_iceberg_rows(f"{t.store.uri}/{metadata_key(new)}", SCHEMA).equals(
        caslake_rows(t, new))
