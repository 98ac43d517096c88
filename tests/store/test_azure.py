"""Azure Blob (caslake.store.azure) on Azurite: the emulator's conditional requests,
URI and credential resolution, one-line configuration errors.

The store contract itself runs in tests/store/test_conformance.py (kind "azure"); the
table round trip in tests/store/test_cloud_tables.py.
"""

from __future__ import annotations

from pathlib import Path

import obstore
import obstore.exceptions as obx
import pytest
from obstore.store import AzureStore

from caslake.errors import AlreadyExists, NotFound, PreconditionFailed, StoreConfigError
from caslake.store import CopyFrom, open_store
from caslake.store.azure import AzureBlobStore, resolve_azure_settings
from caslake.testing import azurite as az
from tests.conftest import make_container

pytestmark = pytest.mark.azure


# --- the emulator itself ----------------------------------------------------------


def test_azurite_refuses_stale_etags_and_second_creates(azurite: str) -> None:
    """Checked with obstore alone, before caslake relies on it: If-None-Match: * on
    an existing blob and If-Match with a stale ETag (on put and on a ranged get)
    are refused, the current ETag is accepted."""
    container = make_container(azurite)
    raw = AzureStore(config={"account_name": az.ACCOUNT, "account_key": az.ACCOUNT_KEY,
                             "endpoint": azurite, "container_name": container},
                     client_options={"allow_http": True})
    first = obstore.put(raw, "k", b"one", mode="create")["e_tag"]
    with pytest.raises(obx.AlreadyExistsError):
        obstore.put(raw, "k", b"two", mode="create")
    second = obstore.put(raw, "k", b"two", mode={"e_tag": first})["e_tag"]
    assert second != first
    with pytest.raises(obx.PreconditionError):
        obstore.put(raw, "k", b"three", mode={"e_tag": first})
    with pytest.raises(obx.PreconditionError):
        obstore.get(raw, "k", options={"range": (0, 1), "if_match": first})
    got = obstore.get(raw, "k", options={"range": (0, 2), "if_match": second})
    assert bytes(got.bytes()) == b"tw"
    assert bytes(obstore.get(raw, "k").bytes()) == b"two"


# --- URIs and settings --------------------------------------------------------------


def test_abfss_uri_names_the_account_and_the_env_gives_the_key() -> None:
    s = resolve_azure_settings(
        "abfss://data@myacct.dfs.core.windows.net/lake/t/", None,
        {"AZURE_STORAGE_ACCOUNT_KEY": "a2V5", "AZURE_STORAGE_ACCOUNT_NAME": "other"})
    assert (s.container, s.prefix, s.account, s.account_key) == ("data", "lake/t", "myacct",
                                                                 "a2V5")
    assert "a2V5" not in repr(s)


def test_connection_string_then_env_and_options_win() -> None:
    conn = ("DefaultEndpointsProtocol=http;AccountName=devacct;AccountKey=a2V5;"
            "BlobEndpoint=http://127.0.0.1:10000/devacct;")
    s = resolve_azure_settings("az://c1x/p", None, {"AZURE_STORAGE_CONNECTION_STRING": conn})
    assert (s.account, s.account_key, s.endpoint_url, s.allow_http) == (
        "devacct", "a2V5", "http://127.0.0.1:10000/devacct", True)
    s = resolve_azure_settings("az://c1x/p", {"sas_token": "?sv=1&sig=x", "ACCOUNT_NAME": "mine"},
                               {"AZURE_STORAGE_CONNECTION_STRING": conn})
    assert (s.account, s.account_key, s.sas_token) == ("mine", None, "sv=1&sig=x")


@pytest.mark.parametrize(("uri", "opts", "env", "names"), [
    ("az://c1x/p", None, {}, "AZURE_STORAGE_ACCOUNT_NAME"),
    ("az://c1x/p", {"account_name": "acct", "account_key": "not base64!"}, {},
     "AZURE_STORAGE_ACCOUNT_KEY"),
    ("az://c1x/p", {"account_name": "acct", "regionx": "1"}, {}, "regionx"),
    ("az://C_bad/p", {"account_name": "acct"}, {}, "container"),
    ("abfss://data/p", {"account_name": "acct"}, {}, "container@ACCOUNT"),
    ("az://c1x/p", None, {"AZURE_STORAGE_CONNECTION_STRING": "AccountName"},
     "connection string"),
])
def test_bad_settings_are_one_line_config_errors(uri: str, opts: dict[str, str] | None,
                                                  env: dict[str, str], names: str) -> None:
    with pytest.raises(StoreConfigError) as info:
        AzureBlobStore(uri, opts, environ=env)  # type: ignore[arg-type]
    assert names in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("case", ["wrong key", "no key", "missing container",
                                  "wrong account"])
def test_refused_credentials_and_missing_places_are_one_line_errors(
        azurite: str, azure_options: dict[str, str], case: str) -> None:
    container = make_container(azurite)
    opts = dict(azure_options)
    uri, names = f"az://{container}/t", "AZURE_STORAGE_ACCOUNT_KEY"
    if case == "wrong key":
        opts["account_key"] = "d3Jvbmcga2V5"
    elif case == "no key":
        del opts["account_key"]
    elif case == "missing container":
        uri, names = "az://no-such-container/t", "container 'no-such-container' does not exist"
    else:
        opts["account_name"] = "nosuchacct"
        opts["endpoint_url"] = azurite.replace(az.ACCOUNT, "nosuchacct")
        names = "account 'nosuchacct'"
    store = open_store(uri, opts)  # type: ignore[arg-type]
    for call in (lambda: store.put("k", b"x"), lambda: list(store.list(""))):
        with pytest.raises(StoreConfigError) as info:
            call()
        assert names in str(info.value) and "\n" not in str(info.value)


# --- compose: Put Block From URL ---------------------------------------------------------


def test_compose_copies_ranges_inside_the_service(azure_uri: str,
                                                  azure_options: dict[str, str]) -> None:
    store = open_store(azure_uri, azure_options)  # type: ignore[arg-type]
    store.min_part_size = 10
    data = bytes(range(256)) * 4
    etag = store.put("src", data)
    store.counters.reset()
    made = store.compose("dst", [CopyFrom("src", 0, 100, etag), b"spliced in!",
                                 CopyFrom("src", 500, 1024, etag)])
    got = store.get("dst")
    assert got.data == data[:100] + b"spliced in!" + data[500:] and got.etag == made
    snap = store.counters.snapshot()
    assert (snap["bytes_copied"], snap["bytes_out"], snap["compose"]) == (624, 11, 1)
    with pytest.raises(AlreadyExists):
        store.compose("dst", [CopyFrom("src", 0, 10, etag)])


def test_compose_is_pinned_to_the_source_etag(azure_uri: str,
                                             azure_options: dict[str, str]) -> None:
    store = open_store(azure_uri, azure_options)  # type: ignore[arg-type]
    store.min_part_size = 10
    old = store.put("src", b"a" * 100)
    store.put("src", b"b" * 100)
    with pytest.raises(PreconditionFailed):
        store.compose("dst", [CopyFrom("src", 0, 50, old), b"tail"])
    store.delete("src")
    with pytest.raises(NotFound):
        store.compose("dst", [CopyFrom("src", 0, 50, old)])
    assert not store.exists("dst")


def test_a_bad_source_signature_is_refused_by_the_emulator(
        azure_uri: str, azure_options: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Azurite checks the SAS the service reads the source with (so the test above
    proves the signature caslake computes)."""
    from caslake.store import azure_blocks

    store = open_store(azure_uri, azure_options)  # type: ignore[arg-type]
    etag = store.put("src", b"x" * 100)
    signed = azure_blocks._Client.source_url
    monkeypatch.setattr(azure_blocks._Client, "source_url",
                        lambda self, key: signed(self, key).replace("sig=", "sig=AAAA"))
    with pytest.raises(StoreConfigError):
        store.compose("dst", [CopyFrom("src", 0, 100, etag)])


def test_purge_splices_on_azurite_and_other_engines_read_the_result(
        azure_uri: str, azure_options: dict[str, str], tmp_path: Path) -> None:
    """Purge copies the untouched row groups inside the service: it uploads at most a
    tenth of the file, and pyarrow and DuckDB read the new file as the rows kept."""
    import duckdb
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    import caslake
    from caslake.testing.parquet_files import add_parquet_file
    from tests.maintenance.test_purge_estimate import SCHEMA, rows

    t = caslake.create_table(azure_uri, SCHEMA, storage_options=azure_options)
    t.store.min_part_size = 16 * 1024  # Azure blocks have no minimum size
    source = rows(0, 4000, 256)
    add_parquet_file(t, source, row_group_rows=200)
    old = t.live_files()[0]
    dry = t.purge("id = 1210", dry_run=True)
    t = caslake.open_table(azure_uri, storage_options=azure_options)  # nothing cached
    t.store.min_part_size = 16 * 1024
    t.store.counters.reset()
    report = t.purge("id = 1210")
    assert report.strategy[old["path"]] in ("splice", "splice-widened")
    size = t.store.head(old["path"]).size
    assert report.bytes_uploaded <= size / 10 and report.bytes_copied >= size * 0.8
    assert t.store.counters.snapshot()["bytes_out"] == report.bytes_uploaded
    down = t.store.counters.snapshot()["bytes_in"]
    assert abs(dry.bytes_downloaded - down) <= 0.01 * down + 256, (dry.bytes_downloaded, down)

    local = tmp_path / "new.parquet"
    local.write_bytes(t.store.get(t.live_files()[0]["path"]).data)
    expected = source.filter(pc.not_equal(source["id"], 1210))
    assert pq.read_table(local).equals(expected)
    by_duckdb = duckdb.sql(f"SELECT * FROM read_parquet('{local}') ORDER BY id").fetch_arrow_table()
    assert by_duckdb.select(["id", "user"]).equals(expected.select(["id", "user"]))
    assert by_duckdb["blob"].to_pylist() == expected["blob"].to_pylist()
