"""Crash, lose the reply, or fail before the request, at every store call of a dataset
write and of an overwrite (in process, through caslake's FaultyStore), on memory, local
and moto S3.

After the fault, with a healthy store: a reader sees the previous complete dataset, the
new complete dataset, or -- on a new key whose manifest had not landed with its
``_SUCCESS`` -- DatasetIncomplete; never a partial one.  A write that returned is
visible; a write that raised a typed error other than CommitOutcomeUnknown did not
replace the previous dataset.  Afterwards the key takes a new overwrite, and vacuum
leaves exactly the current generation.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pyarrow as pa
import pytest

from caslake.dataset import DatasetIncomplete, ParquetDatasetStore
from caslake.errors import CaslakeError, CommitOutcomeUnknown
from caslake.store import ObjectStore
from caslake.store.faults import ALL_OPS, Fault, FaultyStore, SimulatedCrash
from tests.dataset.helpers import table

KEY = "k/ds"
DEAD = 1_000
BASE = table(0, 70)
NEW = table(1000, 1055, tag="n")


def _pds(store: ObjectStore) -> ParquetDatasetStore:
    return ParquetDatasetStore(store, max_rows_per_file=20)


def _calls(store: ObjectStore, overwrite: bool) -> int:
    if overwrite:
        _pds(store).write_dataset(BASE, KEY)
    faulty = FaultyStore(store)
    _pds(faulty).write_dataset(NEW, KEY, overwrite=overwrite)
    return faulty.calls


@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("kind", ["crash", "after", "before"])
def test_fault_at_every_call(store_kind: str, open_test_store: Callable[[str], ObjectStore],
                             overwrite: bool, kind: str) -> None:
    n = _calls(open_test_store(store_kind), overwrite)
    assert n >= 7  # HEAD, 3 parts, manifest, _SUCCESS, _COMMITTED
    for i in range(1, n + 1):
        store = open_test_store(store_kind)
        pds = _pds(store)
        if overwrite:
            pds.write_dataset(BASE, KEY)
        calls = frozenset(range(i, DEAD)) if kind == "crash" else frozenset({i})
        fault = Fault(ops=ALL_OPS, when=kind, calls=calls)
        faulty = FaultyStore(store, [fault])
        outcome: str
        try:
            _pds(faulty).write_dataset(NEW, KEY, overwrite=overwrite)
            outcome = "returned"
        except SimulatedCrash:
            outcome = "crashed"
        except CommitOutcomeUnknown:
            outcome = "unknown"
        except CaslakeError:
            outcome = "failed"
        assert fault.fired >= 1, (i, kind)
        try:
            got: pa.Table | None = pds.read_dataset(KEY)
        except DatasetIncomplete:
            got = None
        where = (i, kind, outcome)
        if outcome == "returned":
            assert got is not None and got.equals(NEW), where
        elif outcome == "failed":
            assert (got.equals(BASE) if overwrite else got is None), where
        else:
            assert got is None or got.equals(NEW) or (overwrite and got.equals(BASE)), where
            assert overwrite or got is None or got.equals(NEW), where
        pds.write_dataset(BASE, KEY, overwrite=True)
        assert pds.read_dataset(KEY).equals(BASE)
        pds.vacuum(KEY, older_than=timedelta(0))
        m = pds.read_manifest(KEY)
        gen = m.parts[0].split("/")[0]
        left = sorted(o.key[len(KEY) + 1:] for o in store.list(KEY + "/"))
        assert left == sorted(["_SUCCESS", "manifest.json", f"{gen}/_COMMITTED", *m.parts]), where
