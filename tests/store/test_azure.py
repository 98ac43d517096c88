"""Azure Blob (caslake.store.azure) on Azurite: the emulator's conditional requests,
URI and credential resolution, one-line configuration errors, and a table round
trip compared with pyarrow reading the files from the container.

The store contract itself runs in tests/store/test_conformance.py (kind "azure").
"""

from __future__ import annotations

import io

import obstore
import obstore.exceptions as obx
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from obstore.store import AzureStore

import caslake
from caslake.errors import StoreCapabilityUnsupported, StoreConfigError
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


def test_compose_reports_it_cannot_copy_ranges(azure_uri: str,
                                               azure_options: dict[str, str]) -> None:
    store = open_store(azure_uri, azure_options)  # type: ignore[arg-type]
    etag = store.put("src", b"x" * 10)
    with pytest.raises(StoreCapabilityUnsupported):
        store.compose("dst", [CopyFrom("src", 0, 10, etag)])
    assert not store.exists("dst")


# --- a table on Azurite, read back by pyarrow ----------------------------------------


def _rows(start: int, n: int) -> pa.Table:
    ids = pa.array(range(start, start + n), pa.int64())
    return pa.table({"id": ids, "name": pc.cast(ids, pa.string()),
                     "score": pc.multiply(pc.cast(ids, pa.float64()), 0.5)})


def test_table_round_trip_matches_pyarrow_reading_the_blobs(
        azure_uri: str, azure_options: dict[str, str]) -> None:
    t = caslake.create_table(azure_uri, _rows(0, 0).schema, storage_options=azure_options)
    t.append(_rows(0, 100))
    t.append(_rows(100, 50))
    t.delete("id < 20")
    everything = pa.concat_tables([_rows(0, 100), _rows(100, 50)])
    expected = everything.filter(pc.greater_equal(everything["id"], 20))

    again = caslake.open_table(azure_uri, storage_options=azure_options)
    assert again.scan().to_arrow().sort_by("id").equals(expected)
    assert again.scan(version=2).to_arrow().sort_by("id").equals(everything)
    assert again.scan(version=1).count() == 100

    # pyarrow reads every live file straight from the container; the rows the
    # table hides (its deletes) are exactly the ones deleted.
    store = open_store(azure_uri, azure_options)  # type: ignore[arg-type]
    files = again.live_files()
    read = pa.concat_tables([pq.read_table(io.BytesIO(store.get(f["path"]).data))
                             for f in files])
    assert read.num_rows == sum(f["rows"] for f in files)
    hidden = sum(f["deleted_rows"] for f in files)
    visible = read.filter(pc.greater_equal(read["id"], 20)).sort_by("id")
    assert read.num_rows - hidden == visible.num_rows == expected.num_rows
    assert visible.select(expected.column_names).equals(expected)
