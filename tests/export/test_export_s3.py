"""Exports of a table on S3 (moto), read back over the S3 protocol by every reader.

A crash, a lost reply or a failure at every store call of an export are rows of
the crash-at-every-step suite (tests/reliability/test_crash_every_step.py,
``test_export_fault_at_every_store_call``)."""

from __future__ import annotations

from urllib.parse import urlparse

import pytest

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
