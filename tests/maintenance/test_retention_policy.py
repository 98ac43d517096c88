"""Retention policy properties: gc() with no arguments follows them; refs always survive."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

import caslake
from caslake.errors import InvalidArgument, VersionNotFound
from caslake.ops.verify import verify_table

SCHEMA = pa.schema([("id", pa.int64())])


def batch(i: int) -> pa.Table:
    return pa.table({"id": pa.array([i], pa.int64())})


@pytest.fixture
def table(tmp_path) -> caslake.Table:  # type: ignore[no-untyped-def]
    return caslake.create_table(str(tmp_path / "t"), SCHEMA)


def test_keep_last_versions_caps_history(table) -> None:  # type: ignore[no-untyped-def]
    table.set_properties({"retention.keep_last_versions": "3"})  # v1
    for i in range(6):
        table.append(batch(i))  # v2..v7
    report = table.gc()  # default max_age 7 days: only the cap expires anything
    assert report.oldest_version == 5  # the last 3 of v0..v7
    assert table.refresh().version == 8  # the expire marker
    for v in (5, 6, 7, 8):
        assert table.scan(version=v).count() == (v - 1 if v < 8 else 6)
    with pytest.raises(VersionNotFound):
        table.scan(version=4)
    assert verify_table(table.store, all_versions=True).ok


def test_max_age_is_the_default_retention(table) -> None:  # type: ignore[no-untyped-def]
    table.append(batch(0))
    table.append(batch(1))
    later = datetime.now(UTC) + timedelta(days=3)
    table.set_properties({"retention.max_age": "30d"})
    assert table.gc(now=later).oldest_version == 0  # nothing is 30 days old
    table.set_properties({"retention.max_age": "2d"})
    report = table.gc(now=later)
    assert report.oldest_version == 4  # every version was committed before later - 2d
    with pytest.raises(VersionNotFound):
        table.scan(version=1)
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [0, 1]


def test_an_explicit_retention_overrides_the_policy(table) -> None:  # type: ignore[no-untyped-def]
    table.set_properties({"retention.keep_last_versions": "1", "retention.max_age": "1d"})
    table.append(batch(0))
    report = table.gc(retention=timedelta(days=30), dry_run=True)
    assert report.oldest_version == 2  # the cap still applies; age expires nothing


def test_refs_survive_the_tightest_policy(table) -> None:  # type: ignore[no-untyped-def]
    table.append(batch(0))  # v1
    table.create_tag("first", version=1)
    audit = table.create_branch("audit")
    audit.append(batch(100))
    for i in range(1, 5):
        table.append(batch(i))
    table.set_properties({"retention.keep_last_versions": "1"})
    table.gc(now=datetime.now(UTC) + timedelta(days=400))
    fresh = caslake.open_table(table.uri)  # cold caches, as another process reads
    assert fresh.scan(tag="first").to_arrow().column("id").to_pylist() == [0]
    assert sorted(fresh.scan(ref="audit").to_arrow().column("id").to_pylist()) == [0, 100]
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("props", [
    {"retention.keep_last_versions": "0"}, {"retention.keep_last_versions": "-1"},
    {"retention.keep_last_versions": "three"}, {"retention.max_age": "7 days"},
    {"retention.max_age": "-1d"}, {"retention.max_age": ""}, {"retention.max_age": "1y"},
])
def test_bad_policy_values_are_typed_errors_and_commit_nothing(table, props) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidArgument) as e:
        table.set_properties(props)
    assert next(iter(props)) in str(e.value)
    assert table.refresh().version == 0


def test_a_policy_below_the_minimum_needs_force(table) -> None:  # type: ignore[no-untyped-def]
    table.set_properties({"retention.max_age": "1h"})
    with pytest.raises(InvalidArgument, match="24 h"):
        table.gc()
    table.gc(force=True)
