"""Crash at every store call of a clustering compaction
(``compact(zorder_by=["s", "f"])``), with the shared fault loop of
tests/reliability/test_crash_every_step.py (``fault_every_call``) on its base table:
flat and nested columns, several files of several row groups, and a tombstone.

After each fault the table must be at the old version or at the compaction, hold
exactly the same rows either way (a compaction changes no row), keep its history,
verify deep, have only orphans the compaction wrote itself, and take a later
append (``check_after``).  Then, without faults, the clustering is finished by a
re-run: the files' ``(s, f)`` boxes no longer overlap, and a third run is a no-op.

The memory store and one fault kind, a crash (which stays dead), keep the row at
about 20 s: a clustering compaction differs from a plain one (whose row in
test_crash_every_step.py runs every fault kind on two stores) in what it plans and
writes, not in how it commits, so a lost reply or a failed call at the commit is
already covered there."""

from __future__ import annotations

from pathlib import Path

import caslake
from caslake.api import Table
from caslake.core import COMPACT
from caslake.ops.cluster import cluster_fields, file_box, out_of_order
from caslake.ops.compact import cluster_order
from tests.reliability.test_crash_every_step import (
    FAST,
    Row,
    Tables,
    check_after,
    fault_every_call,
    prepare,
)

ZORDER = ["s", "f"]  # both have NULLs (below every value): every base file overlaps


def _cluster(t: Table) -> None:
    res = t.compact(zorder_by=ZORDER, target_file_size=6_000)
    assert not res.noop and res.operation == COMPACT


def out_of_order_files(t: Table) -> int:
    snap = t.refresh().snapshot
    order = cluster_order(t.context, snap, None, ZORDER)
    assert order is not None
    fields = cluster_fields(snap.manifest.schema, order.clustering)
    boxes = [file_box(f, fields, snap.manifest.schema, snap.key)
             for f in t.io.live_files(snap)]
    return len(out_of_order(boxes))


class Case:
    """Fresh base tables, remembering each one's model and objects for the check."""

    def __init__(self, tmp_path: Path) -> None:
        self.tables = Tables("memory", tmp_path)
        self.bases: dict[str, tuple[list[list[Row]], set[str], list[str]]] = {}

    def setup(self) -> str:
        uri, model, keys, chain = prepare(self.tables)
        self.bases[uri] = (model, keys, chain)
        assert out_of_order_files(caslake.open_table(uri)) > 0
        return uri

    def check(self, uri: str, where: str) -> str:
        model, keys, chain = self.bases.pop(uri)
        state = check_after(uri, model, model[-1], keys, chain, where=where)
        again = caslake.open_table(uri)
        again.commit_policy = FAST
        again.compact(zorder_by=ZORDER, target_file_size=6_000)
        assert out_of_order_files(again) == 0, where
        assert again.compact(zorder_by=ZORDER, target_file_size=6_000).noop, where
        return state


def test_clustering_compaction_crash_at_every_store_call(tmp_path: Path) -> None:
    case = Case(tmp_path)
    try:
        fault_every_call("compact-zorder", "memory", "crash", case.setup, _cluster, case.check,
                         20)
    finally:
        case.tables.close()
