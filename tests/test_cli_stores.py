"""The CLI on the cloud stores' emulators: ``caslake create/append/delete/scan`` on an
``az://`` (Azurite) and a ``gs://`` (fake-gcs-server) table, storage options given
with ``-o``, the result compared with pyarrow reading the source files."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from caslake.cli import main
from tests.conftest import kind_params


@pytest.fixture(params=kind_params(["azure", "gcs"]))
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _cli(*argv: str) -> str:
    out = io.StringIO()
    code = main(list(argv), out=out)
    assert code == 0, (argv, out.getvalue())
    return out.getvalue()


def test_create_append_delete_scan(any_store_uri: tuple[str, dict[str, str]],
                                   tmp_path: Path) -> None:
    uri, options = any_store_uri
    opts = [arg for k, v in options.items() for arg in ("-o", f"{k}={v}")]
    first, second = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(pa.table({"id": pa.array(range(50), pa.int64()),
                             "name": [f"n{i}" for i in range(50)]}), first)
    pq.write_table(pa.table({"id": pa.array(range(50, 80), pa.int64()),
                             "name": [f"n{i}" for i in range(50, 80)]}), second)
    _cli("create", uri, *opts, "--from", str(first))
    _cli("append", uri, *opts, str(second))
    _cli("delete", uri, *opts, "--where", "id < 10")
    out = tmp_path / "out.parquet"
    _cli("scan", uri, *opts, "--output", str(out))
    _cli("scan", uri, *opts, "--version", "1", "--output", str(tmp_path / "v1.parquet"))

    both = pa.concat_tables([pq.read_table(first), pq.read_table(second)])
    expected = both.filter(pc.greater_equal(both["id"], 10))
    assert pq.read_table(out).sort_by("id").equals(expected)
    assert pq.read_table(tmp_path / "v1.parquet").sort_by("id").equals(pq.read_table(first))
