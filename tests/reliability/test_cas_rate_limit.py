"""The fault proxy's per-key rate limit on conditional PUTs (issue 33): a store
caps how often one key can be compare-and-swapped (S3 ~15/s, GCS 1/s), answering
``503 SlowDown`` above it.  Checked with boto3, a client nobody here wrote."""

from __future__ import annotations

import time

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from caslake.testing.wire_faults import run_fault_proxy
from tests.conftest import make_bucket

pytestmark = pytest.mark.s3


def _client(endpoint: str):  # type: ignore[no-untyped-def]
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing",
                        config=Config(retries={"total_max_attempts": 1, "mode": "standard"}))


def _put(client, bucket: str, key: str, **extra: str) -> int:  # type: ignore[no-untyped-def]
    try:
        client.put_object(Bucket=bucket, Key=key, Body=b"x", **extra)
        return 200
    except ClientError as e:
        return int(e.response["ResponseMetadata"]["HTTPStatusCode"])


def _swap(client, bucket: str, key: str) -> int:  # type: ignore[no-untyped-def]
    """One compare-and-swap of ``key`` against its current ETag."""
    etag = client.head_object(Bucket=bucket, Key=key)["ETag"]
    return _put(client, bucket, key, IfMatch=etag)


def test_conditional_puts_to_one_key_are_capped_per_second(moto_server: str) -> None:
    bucket = make_bucket(moto_server)
    with run_fault_proxy(moto_server, cas_rate_limit=5.0) as proxy:
        client = _client(proxy.endpoint)
        _put(client, bucket, "ptr")
        start = time.monotonic()
        codes = [_swap(client, bucket, "ptr") for _ in range(40)]
        elapsed = time.monotonic() - start
        accepted = codes.count(200)
        assert set(codes) <= {200, 503}
        # at most one per 1/5 s window over the run (plus the first)
        assert 1 <= accepted <= 1 + 5 * elapsed + 1, (accepted, elapsed)
        assert codes.count(503) == proxy.fired().get("cas_rate_limit", 0) > 0
        # another key has its own budget; unconditional PUTs and create-only PUTs of
        # new keys (If-None-Match) to distinct keys are not limited
        _put(client, bucket, "other")
        assert _swap(client, bucket, "other") == 200
        assert all(_put(client, bucket, "ptr") == 200 for _ in range(10))
        assert all(_put(client, bucket, f"intent-{i}", IfNoneMatch="*") == 200
                   for i in range(20))
        time.sleep(0.25)
        assert _swap(client, bucket, "ptr") == 200  # the window has passed
