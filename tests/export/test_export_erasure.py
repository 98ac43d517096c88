"""purge(expire=True) erases the exports too: afterwards no object under the export
prefixes (``metadata/``, ``_delta_log/``, ``dv/``) holds an erased value -- Delta
log entries and checkpoints (statistics), Iceberg metadata, manifest lists and
manifests (Avro, binary bounds), delete files, deletion vectors -- found by decoding
every object, and every outside reader still reads the exports as caslake reads
the table."""

from __future__ import annotations

import contextlib
import io
import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import caslake
from caslake.api import Table
from caslake.export.hook import DELTA_PROPERTY, ICEBERG_PROPERTY
from caslake.store.base import ObjectStore
from tests.export.readers import (
    caslake_rows,
    deltalake_rows,
    duckdb_delta_rows,
    duckdb_iceberg_rows,
    pyiceberg_rows,
)

SECRET = "zzz-victim@erase.me"  # the largest email: every min/max statistic names it
SECRET_ID = 987_654_321_123  # the largest id
SECRET_N = -424_242_424_242  # the smallest n
WHERE = f"email = '{SECRET}'"
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("email", pa.string()),
                    pa.field("n", pa.int64())])
EXPORT_PREFIXES = ("metadata/", "_delta_log/", "dv/")


def batch(lo: int, hi: int, *, secret: bool = False, names: tuple[str, ...] = ()) -> pa.Table:
    ids = list(range(lo, hi))
    emails = [f"user-{i}@example.com" for i in ids]
    ns = [i * 3 for i in ids]
    if secret:
        ids[-1], emails[-1], ns[-1] = SECRET_ID, SECRET, SECRET_N
    t = pa.table({"id": ids, "email": emails, "n": ns}, schema=SCHEMA)
    return t.rename_columns(list(names)) if names else t


def _walk(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(k)
            yield from _walk(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _walk(v)
    else:
        yield value
        if isinstance(value, str) and value[:1] in "{[":
            with contextlib.suppress(ValueError):  # Delta's add.stats: JSON in a JSON string
                yield from _walk(json.loads(value))


def _decoded(key: str, data: bytes) -> list[Any]:
    """Every value an object holds, decoded by its format."""
    if data[:4] == b"PAR1":
        buf = io.BytesIO(data)
        values: list[Any] = list(_walk(pq.read_table(buf).to_pylist()))
        md = pq.read_metadata(io.BytesIO(data))
        for g in range(md.num_row_groups):
            for c in range(md.num_columns):
                s = md.row_group(g).column(c).statistics
                if s is not None and s.has_min_max:
                    values += [s.min, s.max]
        return values
    if data[:4] == b"Obj\x01":
        values = list(_walk(list(fastavro.reader(io.BytesIO(data)))))
        for v in list(values):  # Iceberg bounds: single-value binary serialization
            if isinstance(v, bytes) and len(v) in (4, 8):
                values.append(int.from_bytes(v, "little", signed=True))
        return values
    if key.endswith((".json", "_last_checkpoint")):
        text = data.decode()
        try:
            return list(_walk(json.loads(text)))
        except ValueError:
            return list(_walk([json.loads(line) for line in text.splitlines() if line]))
    return []


def export_leaks(store: ObjectStore) -> list[str]:
    """Export objects holding an erased value: by raw bytes (the string, the ints
    as little- and big-endian 8 bytes) and by their decoded values."""
    secret_ints = (SECRET_ID, SECRET_N)
    raw = [SECRET.encode()] + [struct.pack(f, i) for i in secret_ints for f in ("<q", ">q")]
    out = []
    for prefix in EXPORT_PREFIXES:
        for meta in store.list(prefix):
            data = store.get(meta.key).data
            values = _decoded(meta.key, data)
            if any(r in data for r in raw) or any(
                    v == SECRET or (isinstance(v, str) and SECRET in v)
                    or (isinstance(v, int) and not isinstance(v, bool) and v in secret_ints)
                    or (isinstance(v, bytes) and SECRET.encode() in v) for v in values):
                out.append(meta.key)
    return sorted(out)


def readers_agree(t: Table, uri: Path) -> None:
    want = caslake_rows(t)
    schema = pa.schema([pa.field(f.name, f.type) for f in t.schema])
    location = t.export_iceberg().location  # a no-op: the erasure exported the head
    for name, got in (("deltalake", deltalake_rows(str(uri), schema)),
                      ("duckdb delta", duckdb_delta_rows(str(uri), schema)),
                      ("pyiceberg", pyiceberg_rows(location, schema)),
                      ("duckdb iceberg", duckdb_iceberg_rows(location, schema))):
        assert got.equals(want), f"{name} reads other rows than caslake after the erasure"


def history(t: Table) -> None:
    """Deletes, a rename, compaction: every kind of export object gets made."""
    t.append(batch(0, 40, secret=True))
    t.append(batch(40, 80))
    t.delete("id = 5 OR id = 45")
    t.export_iceberg()
    t.export_delta()
    t.delete("id BETWEEN 10 AND 12")  # deletion vectors and position deletes
    t.export_iceberg()
    t.export_delta()
    t.update_schema().rename_column("n", "m").commit()
    t.export_iceberg()
    t.export_delta()
    t.append(batch(80, 100, names=("id", "email", "m")))


@pytest.mark.parametrize("on_commit", [False, True], ids=["by-hand", "export-on-commit"])
def test_purge_expire_erases_the_exports(tmp_path: Path, on_commit: bool) -> None:
    uri = tmp_path / "t"
    props = {ICEBERG_PROPERTY: "true", DELTA_PROPERTY: "true"} if on_commit else None
    t = caslake.create_table(str(uri), SCHEMA, properties=props)
    history(t)
    t.compact(target_file_size=1 << 30, deleted_fraction=0.01)  # one name per column
    t.delete("id = 81")
    t.export_iceberg()
    t.export_delta()
    assert len(export_leaks(t.store)) >= 3  # the check sees the values before
    report = t.purge(WHERE, expire=True)
    assert report.expiry is not None and report.rows_erased >= 1
    assert export_leaks(t.store) == []
    assert {e.split(":")[0] for e in report.exports} == {"iceberg", "delta"}
    readers_agree(t, uri)
    assert SECRET_ID not in caslake_rows(t).column("id").to_pylist()
    # The exports carry on from the erased state.
    t.append(batch(200, 210, names=("id", "email", "m")))
    t.delete("id = 201")
    t.export_iceberg()
    t.export_delta()
    readers_agree(t, uri)
    assert export_leaks(t.store) == []


def test_erasure_after_a_purge_without_expire_and_a_reexport(tmp_path: Path) -> None:
    """The old workaround (purge, re-export, purge(expire=True)) left the Delta log's
    older entries holding the values' statistics; now nothing is left."""
    uri = tmp_path / "t"
    t = caslake.create_table(str(uri), SCHEMA)
    t.append(batch(0, 40, secret=True))
    t.append(batch(40, 80))
    t.delete("id = 7")
    t.export_delta()
    t.export_iceberg()
    t.purge(WHERE)
    t.export_delta()
    t.export_iceberg()
    t.purge(WHERE, expire=True)
    assert export_leaks(t.store) == []
    readers_agree(t, uri)


def test_dry_run_names_the_exports_and_changes_nothing(tmp_path: Path) -> None:
    uri = tmp_path / "t"
    t = caslake.create_table(str(uri), SCHEMA)
    t.append(batch(0, 40, secret=True))
    t.export_delta()
    t.export_iceberg()
    before = sorted((m.key, m.etag) for m in t.store.list(""))
    report = t.purge(WHERE, expire=True, dry_run=True)
    assert {e.split(":")[0] for e in report.exports} == {"iceberg", "delta"}
    assert "exports" in report.to_json()
    assert sorted((m.key, m.etag) for m in t.store.list("")) == before


def test_a_reader_sees_the_old_or_the_new_export_at_every_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After every put and delete the erasure makes, deltalake and pyiceberg (from
    the version hint) read either the export before it or the one after it."""
    from caslake.export.erase import erase_export_history
    from caslake.export.iceberg import read_hint

    uri = tmp_path / "t"
    t = caslake.create_table(str(uri), SCHEMA)
    t.append(batch(0, 40, secret=True))
    t.append(batch(40, 60))
    t.delete("id = 7")
    t.export_iceberg()
    t.export_delta()
    t.delete("id = 8")
    t.export_iceberg()
    t.export_delta()
    old = caslake_rows(t)
    t.purge(WHERE)  # without expire: the old data files stay for the old exports
    new = caslake_rows(t)
    store = t.context.store
    seen: list[str] = []

    def check(op: str, key: str) -> None:
        if not key.startswith(EXPORT_PREFIXES):
            return
        hint = read_hint(store)
        ice = pyiceberg_rows(f"{uri.as_uri()}/metadata/v{hint}.metadata.json", SCHEMA)
        delta = deltalake_rows(str(uri), SCHEMA)
        for name, got in (("iceberg", ice), ("delta", delta)):
            assert got.equals(old) or got.equals(new), f"{name} after {op} {key}"
        seen.append(f"{op} {key}")

    put, delete = store.put, store.delete

    def checked_put(key: str, data: bytes, **kw: Any) -> str:
        etag = put(key, data, **kw)
        check("put", key)
        return etag

    def checked_delete(key: str) -> None:
        delete(key)
        check("delete", key)

    monkeypatch.setattr(store, "put", checked_put)
    monkeypatch.setattr(store, "delete", checked_delete)
    erase_export_history(t.context)
    assert sum(s.startswith("delete") for s in seen) >= 4, seen
    assert export_leaks(store) == []
    readers_agree(t, uri)


def test_an_export_that_cannot_show_the_purged_version_is_dropped(tmp_path: Path) -> None:
    """A Delta export stuck at an older version (the files now store a renamed
    column under two names) would keep the old files and the values alive: the
    erasure drops it whole, and says so."""
    uri = tmp_path / "t"
    t = caslake.create_table(str(uri), SCHEMA)
    t.append(batch(0, 40, secret=True))
    t.export_delta()
    t.export_iceberg()
    t.update_schema().rename_column("n", "m").commit()
    t.append(batch(40, 60, names=("id", "email", "m")))
    report = t.purge(WHERE, expire=True)
    (delta,) = [e for e in report.exports if e.startswith("delta")]
    assert "dropped" in delta and "ExportColumnsDiverged" not in delta
    assert not any(True for p in ("_delta_log/", "dv/") for _ in t.store.list(p))
    assert export_leaks(t.store) == []
    schema = pa.schema([pa.field(f.name, f.type) for f in t.schema])
    loc = t.export_iceberg().location
    assert pyiceberg_rows(loc, schema).equals(caslake_rows(t))
