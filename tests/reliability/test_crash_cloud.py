"""Crash-at-every-step's lost-reply mode on the cloud stores' emulators (issue 34):
fake-gcs-server (``gs://``) and Azurite (``az://``).

The rows are tests/reliability/test_crash_every_step.py's: for each operation the
base table (several small files of several row groups, nested columns, a
tombstone) is built, the operation is run once through a FaultyStore to count its
store calls ``N``, and then for EVERY call ``i`` in ``1..N`` the base is built
afresh at a new location in the bucket, call ``i`` is applied and its reply lost
(``TransientStoreError``), and the table must hold exactly the old or the new
rows, with the history unchanged, verify deep passing, a returned commit at the
version it reported, a typed error other than CommitOutcomeUnknown meaning "not
done", and a later append working (``check_after``).  A lost reply of the pointer's
conditional PUT itself must be settled by reading back as a success.

Only lost-reply runs here: a crash or a fail-before is injected before the store is
reached, or stops the process, so it behaves alike on every backend (the memory
and local rows cover it); a lost reply is the fault whose recovery depends on the
real store's answers (a create-only or If-Match/ifGenerationMatch PUT that
applied, sent again: 412 or 409 must be read back as ours).

Operations, every step of each, on both emulators: append (5 store calls), upsert
(7) and a narrower delete than the local suite's (7 calls instead of 17: a term on
a struct leaf, ``dev.os``, and a key range in the one file that already has a
tombstone, so it reads and merges that tombstone).  A point costs about 0.4 s on an
emulator (a fresh base table, the operation, verify deep and a later commit), so
the transaction, compaction and purge rows (18-23 calls each) and the wide delete
stay on memory/local (and moto for clone/refs/export), whose PUTs are of the same
kinds; gc's lost replies are plain deletes and overwrites.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from caslake.testing import azurite as azurite_harness
from caslake.testing import gcs_emulator
from tests.conftest import kind_params, make_container, make_gcs_bucket
from tests.reliability.test_crash_every_step import OPS, Op, Row, Tables, op_with_faults, os_is


def _in_delete(r: Row) -> bool:
    return os_is(r, "os1") and r[0] < 40


CLOUD_OPS: dict[str, Op] = {
    "append": OPS["append"],
    "delete": Op(lambda t: t.delete("dev.os = 'os1' AND id < 40"),
                 lambda rs: [r for r in rs if not _in_delete(r)]),
    "upsert": OPS["upsert"],
}


class BucketTables(Tables):
    """Fresh table locations under one emulator bucket (container)."""

    def __init__(self, kind: str, root: Path, base: str) -> None:
        super().__init__(kind, root)
        self.base = base

    def new_uri(self) -> str:
        return f"{self.base}/{uuid.uuid4().hex}"


@pytest.fixture(params=kind_params(["gcs", "azure"]))
def cloud_tables(request: pytest.FixtureRequest, tmp_path: Path,
                 monkeypatch: pytest.MonkeyPatch) -> Iterator[Tables]:
    """Tables in one fresh bucket of an emulator.  The suite opens stores by URI
    alone, so the endpoint and credentials come from each backend's standard
    environment variables."""
    kind = str(request.param)
    if kind == "gcs":
        endpoint = request.getfixturevalue("fake_gcs")
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", endpoint)  # implies anonymous
        monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", gcs_emulator.PROJECT)
        base = f"gs://{make_gcs_bucket(endpoint)}"
    else:
        endpoint = request.getfixturevalue("azurite")
        for name, value in {"AZURE_STORAGE_ACCOUNT_NAME": azurite_harness.ACCOUNT,
                            "AZURE_STORAGE_ACCOUNT_KEY": azurite_harness.ACCOUNT_KEY,
                            "AZURE_STORAGE_ENDPOINT": endpoint}.items():
            monkeypatch.setenv(name, value)
        for name in ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_SAS_TOKEN"):
            monkeypatch.delenv(name, raising=False)
        base = f"az://{make_container(endpoint)}"
    t = BucketTables(kind, tmp_path, base)
    yield t
    t.close()


@pytest.mark.parametrize("op_name", CLOUD_OPS)
def test_lost_reply_at_every_store_call_on_the_emulators(cloud_tables: Tables,
                                                         op_name: str) -> None:
    outcomes = op_with_faults(cloud_tables, op_name, CLOUD_OPS[op_name], "lost-reply")
    assert sum(outcomes.values()) >= 5, outcomes
