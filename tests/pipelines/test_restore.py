"""Restore (docs/protocol.md, "Restore"): one commit whose contents equal an older
version, re-referencing its files and tombstones; typed errors; conflicts."""

from __future__ import annotations

import io
import time
import uuid
from datetime import timedelta

import duckdb
import pyarrow as pa
import pytest

import caslake
from caslake.cli.main import main
from caslake.errors import (
    ConcurrentModification,
    CorruptMetadata,
    InvalidArgument,
    RefNotFound,
    VersionExpired,
    VersionNotFound,
)
from caslake.store import open_store
from tests.deletes.helpers import HookStore, table_rows
from tests.pipelines.helpers import SCHEMA, WRITE, arrow, new_table, rows


def stored_keys(t: caslake.Table, prefix: str) -> set[str]:
    return {m.key for m in t.store.list(prefix)}


def model(rs: list) -> list:  # type: ignore[type-arg]
    return table_rows(arrow(rs))


def build(t: caslake.Table) -> list[list]:  # type: ignore[type-arg]
    """Versions 1..5 of ``t`` and their rows (version -> rows)."""
    states: list[list] = [[]]  # type: ignore[type-arg]
    cur = rows(0, 1500)
    t.append(arrow(cur))
    states.append(cur)
    t.delete("id BETWEEN 10 AND 30 OR s = 's4'")
    cur = [r for r in cur if not (10 <= r[0] <= 30 or r[1] == "s4")]
    states.append(cur)
    t.upsert(arrow(rows(100, 120, tag="u")), key="id")
    cur = [r for r in cur if not 100 <= r[0] < 120] + rows(100, 120, tag="u")
    states.append(cur)
    t.compact(target_file_size=1 << 20)
    states.append(cur)
    t.overwrite(arrow(rows(5000, 5100)))
    cur = rows(5000, 5100)
    states.append(cur)
    return states


@pytest.mark.parametrize("target", [1, 2, 3, 4])
def test_restore_reads_as_the_old_version_and_writes_no_data(target: int) -> None:
    t = new_table()
    states = build(t)
    data, tombs = stored_keys(t, "data/"), stored_keys(t, "tombstone/")
    res = t.restore(version=target)
    assert not res.noop and res.version == 6 and res.operation == "restore"
    assert stored_keys(t, "data/") == data and stored_keys(t, "tombstone/") == tombs
    fresh = caslake.open_table(t.uri)
    assert table_rows(fresh.to_arrow()) == model(states[target])  # pyarrow's model
    got = duckdb.sql("select id, s, f from fresh").fetch_arrow_table()
    assert table_rows(got) == model(states[target])
    assert sorted(f["path"] for f in fresh.live_files()) == sorted(
        f["path"] for f in fresh.live_files(version=target))
    h = fresh.history(limit=1)[0]
    assert h.operation == "restore" and h.params["version"] == str(target)
    # later writes work on it as on any version
    fresh.delete("id < 50")
    fresh.append(arrow(rows(9000, 9010)))
    want = [r for r in states[target] if r[0] >= 50] + rows(9000, 9010)
    assert table_rows(caslake.open_table(t.uri).to_arrow()) == model(want)
    assert table_rows(fresh.to_arrow(version=5)) == model(states[5])  # history kept


def test_restore_by_tag_and_timestamp() -> None:
    t = new_table()
    states = build(t)
    t.create_tag("before-overwrite", version=3)
    assert t.restore(tag="before-overwrite").version == 6
    assert table_rows(t.to_arrow()) == model(states[3])
    when = t.history()[-3].created_at  # version 2's commit time
    t.restore(timestamp=when + timedelta(microseconds=500))
    assert table_rows(t.to_arrow()) == model(states[2])


def test_restoring_the_same_contents_is_a_noop() -> None:
    t = new_table()
    build(t)
    res = t.restore(version=5)
    assert res.noop and res.version == 5


def test_restore_brings_back_the_old_schema_without_reusing_ids() -> None:
    t = new_table()
    t.append(arrow(rows(0, 10)))
    t.update_schema().add_column("extra", pa.int32()).commit()
    t.update_schema().drop_column("f").commit()
    t.restore(version=1)
    assert t.schema.names == ["id", "s", "f"]
    assert t.table_schema.schema_id == 3
    assert t.table_schema.last_field_id == 4
    assert table_rows(t.to_arrow()) == model(rows(0, 10))
    t.update_schema().add_column("more", pa.int64()).commit()
    assert t.table_schema.field("more").id == 5


def test_bad_targets_are_typed_errors_and_commit_nothing() -> None:
    t = new_table()
    build(t)
    for kwargs, err in [({}, InvalidArgument), ({"version": 1, "tag": "x"}, InvalidArgument),
                        ({"version": 9}, VersionNotFound), ({"tag": "nope"}, RefNotFound),
                        ({"version": True}, InvalidArgument)]:
        with pytest.raises(err):
            t.restore(**kwargs)
    assert t.refresh().version == 5


def test_an_expired_version_is_refused_naming_the_oldest() -> None:
    t = new_table()
    build(t)
    t.gc(retention=timedelta(0), force=True)
    oldest = t.refresh().snapshot.manifest.oldest_version
    head = t.version
    assert oldest > 2
    with pytest.raises(VersionExpired) as e:
        t.restore(version=2)
    assert e.value.oldest_readable == oldest
    assert t.refresh().version == head


def test_a_missing_object_of_the_version_is_refused() -> None:
    t = new_table()
    build(t)
    gone = sorted(set(f["path"] for f in t.live_files(version=2))
                  - set(f["path"] for f in t.live_files()))[0]
    t.store.delete(gone)
    with pytest.raises(CorruptMetadata):
        t.restore(version=2)
    assert t.refresh().version == 5


def test_a_concurrent_commit_makes_the_restore_a_conflict() -> None:
    uri = f"memory://{uuid.uuid4().hex}"
    new_table(uri)
    other = caslake.open_table(uri)
    states = build(other)
    racer = caslake.open_table(uri)
    store = HookStore(open_store(uri), lambda: racer.append(arrow(rows(7000, 7005))))
    t = caslake.Table.load(store)
    with pytest.raises(ConcurrentModification):
        t.restore(version=1)
    fresh = caslake.open_table(uri)
    assert fresh.version == 6
    assert table_rows(fresh.to_arrow()) == model(states[5] + rows(7000, 7005))


def test_cli_restore(tmp_path: object) -> None:
    t = new_table(str(tmp_path) + "/t")
    states = build(t)
    out = io.StringIO()
    assert main(["restore", t.uri, "--version", "2"], out=out) == 0
    assert "version 6" in out.getvalue()
    assert table_rows(caslake.open_table(t.uri).to_arrow()) == model(states[2])
    t.create_tag("v3", version=3)
    assert main(["restore", t.uri, "--tag", "v3"], out=io.StringIO()) == 0
    assert table_rows(caslake.open_table(t.uri).to_arrow()) == model(states[3])
    stamp = t.history()[-2].created_at_text
    time.sleep(0.002)
    assert main(["restore", t.uri, "--timestamp", stamp], out=io.StringIO()) == 0
    assert table_rows(caslake.open_table(t.uri).to_arrow()) == model(states[1])
    err = io.StringIO()
    assert main(["restore", t.uri, "--version", "99"], out=err) != 0
    assert main(["restore", t.uri], out=io.StringIO()) != 0


_ = (SCHEMA, WRITE)
