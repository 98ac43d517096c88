"""The change feed (docs/protocol.md, "Change feed"): each operation's rows, read back
from the data files, compared with what pyarrow computes from the same rows."""

from __future__ import annotations

import uuid
from datetime import timedelta

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import caslake
from caslake.errors import (
    InvalidArgument,
    RefNotFound,
    UnknownColumn,
    VersionExpired,
    VersionNotFound,
)
from caslake.store import open_store
from tests.pipelines.helpers import (
    META,
    SCHEMA,
    WRITE,
    ByteCounter,
    arrow,
    feed_rows,
    new_table,
    rows,
    with_version,
)


def model_filter(rs: list, pred) -> list:  # type: ignore[no-untyped-def]
    return [r for r in rs if pred(r)]


def test_append_gives_inserts_with_commit_columns() -> None:
    t = new_table()
    t.append(arrow(rows(0, 1200)))
    res = t.append(arrow(rows(1200, 1300)))
    feed = t.changes(2).to_arrow()
    assert feed.schema.names == ["id", "s", "f", *META]
    assert feed.schema.field("_commit_version").type == pa.int64()
    assert feed.schema.field("_commit_timestamp").type == pa.timestamp("ms", tz="UTC")
    assert feed_rows(feed) == {"insert": with_version(rows(1200, 1300), 2)}
    created = t.history(limit=1)[0].created_at
    assert set(feed.column("_commit_timestamp").to_pylist()) == {created}
    assert res.version == 2
    # inclusive at both ends (Delta's table_changes): 1..2 holds both appends
    both = feed_rows(t.changes(1, 2).to_arrow())
    assert both == {"insert": sorted(with_version(rows(0, 1200), 1)
                                     + with_version(rows(1200, 1300), 2))}


def test_delete_gives_the_deleted_rows_read_from_their_files() -> None:
    t = new_table()
    t.append(arrow(rows(0, 3000)))
    t.delete("id BETWEEN 100 AND 140")
    before = rows(0, 3000)
    before = [r for r in before if not 100 <= r[0] <= 140]
    # a second delete on the same files: only its own rows, not the earlier ones
    t.delete("s = 's3' OR id < 150")
    gone = [r for r in before if r[1] == "s3" or r[0] < 150]
    assert feed_rows(t.changes(3, 3).to_arrow()) == {"delete": with_version(gone, 3)}
    # a delete that drops whole files (every row of them)
    t.delete("id < 1500")
    after = [r for r in before if not (r[1] == "s3" or r[0] < 150)]
    gone = [r for r in after if r[0] < 1500]
    assert feed_rows(t.changes(4).to_arrow()) == {"delete": with_version(gone, 4)}


def test_upsert_gives_preimage_and_postimage_pairs_by_key() -> None:
    t = new_table()
    t.append(arrow(rows(0, 1000)))
    t.delete("id = 5")
    new = rows(0, 10, tag="u") + rows(2000, 2005, tag="u")
    t.upsert(arrow(new), key="id")
    feed = feed_rows(t.changes(3).to_arrow())
    old = {r[0]: r for r in rows(0, 1000) if r[0] != 5}
    assert feed == {
        "update_preimage": with_version([old[i] for i in range(10) if i != 5], 3),
        "update_postimage": with_version([r for r in new if r[0] < 10 and r[0] != 5], 3),
        "insert": with_version([r for r in new if r[0] >= 2000 or r[0] == 5], 3),
    }


def test_overwrite_gives_deletes_and_inserts() -> None:
    t = new_table()
    t.append(arrow(rows(0, 800)))
    t.delete("id < 10")
    t.overwrite(arrow(rows(5, 20, tag="o")))
    assert feed_rows(t.changes(3).to_arrow()) == {
        "delete": with_version(rows(10, 800), 3),
        "insert": with_version(rows(5, 20, tag="o"), 3)}


def test_compaction_properties_and_schema_changes_give_no_rows() -> None:
    store = ByteCounter(open_store(f"memory://{uuid.uuid4().hex}"))
    t = new_table(store.uri)
    for lo in range(0, 600, 100):
        t.append(arrow(rows(lo, lo + 100)))
    t.delete("id IN (3, 6, 9, 300, 301, 590)")
    v = t.compact(target_file_size=1 << 20).version
    t.set_properties({"a": "b"})
    t.update_schema().add_column("extra", pa.int32()).commit()
    t = caslake.Table.load(store)
    store.reset()
    feed = t.changes(v, t.version).to_arrow()
    assert feed.num_rows == 0
    assert feed.schema.names == ["id", "s", "f", "extra", *META]
    assert store.data_bytes() == {}  # nothing of the data read


def test_purge_gives_null_delete_rows_for_the_live_rows_it_erased() -> None:
    t = new_table()
    t.append(arrow(rows(0, 2000)))
    t.delete("id BETWEEN 100 AND 120")  # deleted now, purged later: already in the feed
    t.purge("id BETWEEN 100 AND 150")
    v = t.version
    feed = t.changes(v).to_arrow()
    assert feed.num_rows == 150 - 120  # live rows erased: 121..150
    assert set(feed.column("_change_type").to_pylist()) == {"delete"}
    for c in ("id", "s", "f"):
        assert feed.column(c).null_count == feed.num_rows
    assert set(feed.column("_commit_version").to_pylist()) == {v}
    # a predicate on a table column never matches them; one on the metadata does
    assert t.changes(v, where="id > 0").to_arrow().num_rows == 0
    assert t.changes(v, where="_change_type = 'delete'").to_arrow().num_rows == 30
    # the delete before it carried the values
    assert feed_rows(t.changes(2, 2).to_arrow()) == {
        "delete": with_version(rows(100, 121), 2)}


def test_restore_gives_the_difference() -> None:
    t = new_table()
    t.append(arrow(rows(0, 600)))
    t.delete("id < 50")                      # v2
    t.append(arrow(rows(600, 700)))          # v3
    t.compact(target_file_size=1 << 20)      # v4: same rows in new files
    t.delete("id >= 650")                    # v5
    t.restore(version=2)                     # v6: back to 50..599
    assert feed_rows(t.changes(6).to_arrow()) == {"delete": with_version(rows(600, 650), 6)}
    t.restore(version=1)                     # v7: 0..599, 0..49 come back
    assert feed_rows(t.changes(7).to_arrow()) == {"insert": with_version(rows(0, 50), 7)}


def test_columns_where_reader_and_pycapsule() -> None:
    t = new_table()
    t.append(arrow(rows(0, 1000)))
    t.delete("id < 100")
    t.upsert(arrow(rows(100, 110, tag="u")), key="id")
    all_rows = t.changes(1, 3).to_arrow()
    proj = t.changes(1, 3, columns=["f"]).to_arrow()
    assert proj.schema.names == ["f", *META]
    assert proj.num_rows == all_rows.num_rows
    want = all_rows.filter(pc.and_(pc.less(all_rows["id"], 105),
                                   pc.equal(all_rows["_change_type"], "update_postimage")))
    got = t.changes(1, 3, where="id < 105 AND _change_type = 'update_postimage'").to_arrow()
    assert feed_rows(got) == feed_rows(want) and got.num_rows == 5
    assert t.changes(1, 3, where="_commit_version = 2").to_arrow().num_rows == 100
    scan = t.changes(1, 3)
    reader = scan.to_reader()
    assert reader.schema == all_rows.schema
    assert reader.read_all().num_rows == all_rows.num_rows
    assert sum(b.num_rows for b in scan.to_batches()) == all_rows.num_rows
    counts = dict(duckdb.sql("select _change_type, count(*) from scan group by all").fetchall())
    assert counts == {"insert": 1000, "delete": 100, "update_preimage": 10,
                      "update_postimage": 10}


def test_branches_and_tags() -> None:
    t = new_table()
    t.append(arrow(rows(0, 100)))
    t.create_tag("start")
    dev = t.create_branch("dev")
    dev.append(arrow(rows(100, 150)))
    dev.delete("id < 10")
    t.append(arrow(rows(500, 510)))  # main's own version 2
    assert feed_rows(t.changes(2, ref="dev").to_arrow()) == {
        "insert": with_version(rows(100, 150), 2), "delete": with_version(rows(0, 10), 3)}
    assert feed_rows(dev.changes(2, 2).to_arrow()) == {"insert": with_version(rows(100, 150), 2)}
    assert feed_rows(t.changes(2).to_arrow()) == {"insert": with_version(rows(500, 510), 2)}
    assert feed_rows(t.changes("start").to_arrow()) == feed_rows(t.changes(1).to_arrow())


def test_bad_ranges_are_typed_errors() -> None:
    t = new_table()
    t.append(arrow(rows(0, 10)))
    t.append(arrow(rows(10, 20)))
    with pytest.raises(InvalidArgument):
        t.changes(2, 1)
    with pytest.raises(VersionNotFound):
        t.changes(3)
    with pytest.raises(VersionNotFound):
        t.changes(0, 9)
    with pytest.raises(VersionNotFound):
        t.changes(-1)
    with pytest.raises(RefNotFound):
        t.changes("no-such-tag")
    with pytest.raises(RefNotFound):
        t.changes(1, ref="nope")
    with pytest.raises(InvalidArgument):
        t.changes(True)  # type: ignore[arg-type]
    with pytest.raises(UnknownColumn):
        t.changes(1, columns=["nope"])
    with pytest.raises(caslake.errors.InvalidPredicate):
        t.changes(1, where="nope = 1")


def test_an_expired_version_names_the_oldest_readable() -> None:
    t = new_table()
    for lo in range(0, 50, 10):
        t.append(arrow(rows(lo, lo + 10)))
    t.gc(retention=timedelta(0), force=True)  # versions older than now expire
    head = t.refresh().version
    oldest = t.snapshot.manifest.oldest_version
    # Commit times have millisecond resolution: a version made in gc's own
    # millisecond is not older than it and stays (CI saw 4 here once).
    assert oldest >= 2
    with pytest.raises(VersionExpired) as e:
        t.changes(oldest)  # needs oldest - 1
    assert e.value.oldest_readable == oldest + 1
    with pytest.raises(VersionExpired):
        t.changes(1, head)
    t.append(arrow(rows(100, 110)))
    assert feed_rows(t.changes(head + 1).to_arrow()) == {
        "insert": with_version(rows(100, 110), t.version)}
    # from the oldest readable start: the appends still retained after gc's marker
    kept = [r for v in range(oldest + 1, head) for r in with_version(rows(10 * (v - 1), 10 * v), v)]
    got = feed_rows(t.changes(oldest + 1).to_arrow())["insert"]
    assert sorted(got) == sorted(kept + with_version(rows(100, 110), t.version))


def test_feed_columns_follow_the_end_schema_by_field_id() -> None:
    t = new_table()
    t.append(arrow(rows(0, 20)))
    t.update_schema().rename_column("s", "label").commit()
    t.update_schema().add_column("n", pa.int64()).commit()
    feed = t.changes(1).to_arrow()
    assert feed.schema.names == ["id", "label", "f", "n", *META]
    assert feed_rows(feed, ("id", "label", "f")) == {"insert": with_version(rows(0, 20), 1)}
    assert feed.column("n").null_count == 20


def test_a_table_column_named_like_a_feed_column_is_refused() -> None:
    t = caslake.create_table(f"memory://{uuid.uuid4().hex}",
                             pa.schema([("_change_type", pa.string())]))
    with pytest.raises(InvalidArgument):
        t.changes(0)


def test_the_feed_of_a_small_append_reads_only_its_file() -> None:
    store = ByteCounter(open_store(f"memory://{uuid.uuid4().hex}"))
    caslake.create_table(store.uri, SCHEMA, write_options=WRITE)
    t = caslake.Table.load(store, write_options=caslake.WriteOptions(
        target_file_size=200_000, row_group_size=20_000))
    for lo in range(0, 200_000, 50_000):
        t.append(arrow(rows(lo, lo + 50_000)))
    t.delete("id IN (0, 1000, 70000, 150000, 199999)")
    res = t.append(arrow(rows(900_000, 900_010)))
    added = [f for f in t.live_files() if f["path"] not in {
        g["path"] for g in t.live_files(version=res.version - 1)}]
    assert len(added) == 1
    store.reset()
    feed = t.changes(res.version).to_arrow()
    assert feed_rows(feed) == {"insert": with_version(rows(900_000, 900_010), res.version)}
    read = store.data_bytes()
    assert set(read) == {added[0]["path"]}
    assert read[added[0]["path"]] <= added[0]["bytes"]


def test_key_range_tombstones_feed_the_rows_they_delete() -> None:
    t = caslake.create_table(f"memory://{uuid.uuid4().hex}", SCHEMA)  # one big file
    t.append(arrow(rows(0, 60_000)))
    t.delete("s = 's3'")  # scattered: stored as a key range on s, not positions
    t.delete("id BETWEEN 10 AND 400")
    gone = [r for r in rows(0, 60_000) if r[1] == "s3"]
    assert feed_rows(t.changes(2, 2).to_arrow()) == {"delete": with_version(gone, 2)}
    later = [r for r in rows(10, 401) if r[1] != "s3"]
    assert feed_rows(t.changes(3, 3).to_arrow()) == {"delete": with_version(later, 3)}
    t.restore(version=1)
    assert feed_rows(t.changes(4).to_arrow()) == {"insert": with_version(
        sorted(gone + later), 4)}


def test_after_purge_with_expire_the_feed_starts_after_the_purge() -> None:
    t = new_table()
    t.append(arrow(rows(0, 100)))
    t.delete("id < 10")
    rep = t.purge("id < 20", expire=True)
    with pytest.raises(VersionExpired) as e:
        t.changes(rep.version)
    assert e.value.oldest_readable == rep.version + 1
    v = t.append(arrow(rows(100, 105))).version  # after the purge and gc's marker
    assert feed_rows(t.changes(rep.version + 1).to_arrow()) == {
        "insert": with_version(rows(100, 105), v)}


def test_nested_columns_in_the_feed_and_a_restore() -> None:
    schema = pa.schema([("id", pa.int64()), ("dev", pa.struct([("os", pa.string())])),
                        ("tags", pa.list_(pa.string()))])
    t = caslake.create_table(f"memory://{uuid.uuid4().hex}", schema)

    def data(ids: range, os: str) -> pa.Table:
        return pa.table({"id": list(ids), "dev": [{"os": f"{os}{i}"} for i in ids],
                         "tags": [[os, str(i)] for i in ids]}, schema=schema)

    t.append(data(range(0, 20), "a"))
    t.upsert(data(range(15, 25), "b"), key="id")
    feed = t.changes(2).to_arrow()
    got = sorted(zip(feed["_change_type"].to_pylist(), feed["id"].to_pylist(),
                     feed["dev"].to_pylist(), feed["tags"].to_pylist(), strict=True),
                 key=lambda r: (r[0], r[1]))
    want = sorted([("update_preimage", i, {"os": f"a{i}"}, ["a", str(i)]) for i in range(15, 20)]
                  + [("update_postimage", i, {"os": f"b{i}"}, ["b", str(i)])
                     for i in range(15, 20)]
                  + [("insert", i, {"os": f"b{i}"}, ["b", str(i)]) for i in range(20, 25)],
                  key=lambda r: (r[0], r[1]))
    assert got == want
    t.restore(version=1)
    back = t.changes(3).to_arrow()
    assert sorted(back["_change_type"].to_pylist()) == ["delete"] * 10 + ["insert"] * 5
