"""Reliability rows on the cloud stores' emulators (Azurite, fake-gcs-server):

* racing writers: 4 threads x 10 appends on one table; the history check
  (caslake.testing.stress.check_appends_run) finds every acknowledged append in
  exactly one version and no row from nowhere, and verify passes deep;
* unclear replies: appends through the loopback fault proxy, which cuts the
  connection after forwarding a write (it applied) or before (it did not); every
  append ends acknowledged, failed or unknown, and the same check holds.
"""

from __future__ import annotations

import functools
import random
import threading
from pathlib import Path

import pyarrow as pa
import pytest

import caslake
from caslake.ops.verify import verify_table
from caslake.store.options import StorageOptions
from caslake.testing.stress import ID_STRIDE, HistoryLog, check_appends_run, load_records, run_op
from caslake.testing.wire_faults import WireFault, run_fault_proxy
from tests.conftest import kind_params

SCHEMA = pa.schema([("id", pa.int64()), ("writer", pa.int64()), ("gen", pa.int64())])


@pytest.fixture(params=kind_params(["azure", "gcs"]))
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _appends(uri: str, opts: StorageOptions, log_dir: Path, writer: int, count: int,
             seed: int) -> None:
    """``count`` appends of 1-20 fresh rows by one writer, each logged."""
    table = caslake.open_table(uri, storage_options=opts)
    log = HistoryLog(log_dir / f"w{writer}.jsonl", f"w{writer}")
    rng = random.Random(seed)
    next_id = writer * ID_STRIDE
    try:
        for gen in range(count):
            ids = range(next_id, next_id + rng.randint(1, 20))
            next_id += len(ids)
            data = pa.table({"id": list(ids), "writer": [writer] * len(ids),
                             "gen": [gen] * len(ids)}, schema=SCHEMA)
            run_op(log, "append", {"rows": [[i, writer, gen] for i in ids]},
                   functools.partial(table.append, data))
    finally:
        log.close()


def _check(uri: str, opts: StorageOptions, log_dir: Path) -> list[dict[str, object]]:
    records, problems = load_records(log_dir)
    assert not problems
    report = check_appends_run(uri, opts, records)
    assert not report.failures, report.failures
    verified = verify_table(caslake.open_table(uri, storage_options=opts).store, deep=True)
    assert verified.ok, verified.problems
    return records


def test_racing_writers_lose_and_double_nothing(any_store_uri: tuple[str, dict[str, str]],
                                                tmp_path: Path) -> None:
    uri, raw = any_store_uri
    opts: StorageOptions = raw  # type: ignore[assignment]
    caslake.create_table(uri, SCHEMA, storage_options=opts)
    threads = [threading.Thread(target=_appends, args=(uri, opts, tmp_path, w, 10, w))
               for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    records = _check(uri, opts, tmp_path)
    assert len(records) == 40
    assert sum(r["outcome"] == "ok" for r in records) >= 30  # races are retried, not lost


def test_cut_connections_never_give_a_wrong_outcome(any_store_uri: tuple[str, dict[str, str]],
                                                    store_kind: str, tmp_path: Path) -> None:
    uri, raw = any_store_uri
    opts: StorageOptions = raw  # type: ignore[assignment]
    caslake.create_table(uri, SCHEMA, storage_options=opts)
    endpoint = str(opts["endpoint_url"])
    account = endpoint.split("/", 3)[3] if store_kind == "azure" else ""
    writes = frozenset({"PUT"} if store_kind == "azure" else {"POST"})
    with run_fault_proxy(endpoint, seed=3) as proxy:
        through: StorageOptions = {**opts, "endpoint_url": proxy.endpoint + (
            f"/{account}" if account else "")}
        proxy.set_faults([WireFault("lost_reply", 0.2, methods=writes),
                          WireFault("reset", 0.1, methods=writes)])
        _appends(uri, through, tmp_path, 0, 10, 7)
        fired = proxy.fired()
    assert fired.get("lost_reply", 0) >= 2 and fired.get("reset", 0) >= 1, fired
    records = _check(uri, opts, tmp_path)
    assert len(records) == 10
    assert not any(r.get("untyped") for r in records)
