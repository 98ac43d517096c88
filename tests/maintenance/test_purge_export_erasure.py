"""purge(expire=True) on a table with Iceberg and Delta exports under its root: no
object under the prefix holds the erased value afterwards -- data files, deletion
vectors, Iceberg metadata and Avro manifests, the Delta log and its checkpoints,
staging files -- as the erasure check (tests/maintenance/erasure.py) decodes them."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

import caslake
from tests.maintenance.erasure import assert_erased, find_leaks

SECRET = "trudy-3b8e41"
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("user", pa.string())])


def rows(lo: int, hi: int, every: int) -> pa.Table:
    return pa.table({"id": list(range(lo, hi)),
                     "user": [SECRET if i % every == 0 else f"u{i % 11}" for i in range(lo, hi)]},
                    schema=SCHEMA)


def test_purge_expire_leaves_no_value_in_exports(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = caslake.create_table(uri, SCHEMA)
    t.append(rows(0, 100, 10))
    t.export_iceberg()
    t.export_delta()
    t.append(rows(100, 200, 25))
    t.delete("id = 3")
    t.export_iceberg()
    t.export_delta()
    leaks = find_leaks(uri, [SECRET])
    assert any(leak.startswith("metadata/") for leak in leaks), leaks  # Iceberg stats
    assert any(leak.startswith("_delta_log/") for leak in leaks), leaks

    t.purge(f"user = '{SECRET}'", expire=True)

    assert_erased(uri, [SECRET])
    got = sorted(caslake.open_table(uri).to_arrow().column("id").to_pylist())
    assert got == [i for i in range(200)
                   if i != 3 and not (i < 100 and i % 10 == 0) and not (i >= 100 and i % 25 == 0)]
