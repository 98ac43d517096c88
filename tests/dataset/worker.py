"""Subprocess entry points for the multi-process dataset tests.

``python -m tests.dataset.worker kill <uri> <options-json> <key> <overwrite> <put-index> <when>``
writes the dataset of writer 1 (round 0) and SIGKILLs itself at its ``put-index``-th PUT,
``before`` the request or ``after`` it applied.

:func:`writer` and :func:`reader` run in a spawned process pool (concurrency test).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

import pyarrow as pa

from caslake.dataset import DatasetAlreadyExists, DatasetConflict, ParquetDatasetStore
from caslake.errors import CaslakeError
from caslake.store import open_store
from caslake.store.base import Mode, ObjectStore, PutMode
from caslake.store.faults import FaultyStore

MAX_ROWS = 20


def content(writer: int, round_: int) -> pa.Table:
    """Writer ``writer``'s dataset in round ``round_``: its size identifies it too."""
    n = 30 + 11 * writer + round_
    tag = f"w{writer}-r{round_}"
    return pa.table({"id": pa.array(range(n), pa.int64()), "tag": pa.array([tag] * n)})


def check(t: pa.Table) -> str:
    """The tag of a read result if it is exactly one writer's complete dataset; else raise."""
    tags = set(t.column("tag").to_pylist())
    if len(tags) != 1:
        raise AssertionError(f"a read mixed datasets: {sorted(tags)}")
    tag = tags.pop()
    w, r = (int(x[1:]) for x in tag.split("-"))
    want = content(w, r)
    if not t.sort_by("id").equals(want):
        raise AssertionError(f"a read of {tag} returned {t.num_rows} rows, not its "
                             f"{want.num_rows}")
    return str(tag)


def writer(uri: str, options: dict[str, str], key: str, w: int, rounds: int,
           start: float) -> dict[str, Any]:
    pds = ParquetDatasetStore(open_store(uri, options or None), max_rows_per_file=MAX_ROWS)
    time.sleep(max(0.0, start - time.time()))
    out: dict[str, Any] = {"won": [], "lost": [], "errors": []}
    for r in range(rounds):
        try:
            pds.write_dataset(content(w, r), key, overwrite=r > 0)
            out["won"].append(f"w{w}-r{r}")
        except (DatasetAlreadyExists, DatasetConflict) as e:
            out["lost"].append(type(e).__name__)
        except Exception as e:  # anything else fails the test
            out["errors"].append(f"{type(e).__name__}: {e}")
    return out


def reader(uri: str, options: dict[str, str], key: str, until: float) -> dict[str, Any]:
    pds = ParquetDatasetStore(open_store(uri, options or None))
    out: dict[str, Any] = {"reads": 0, "tags": [], "incomplete": 0, "errors": []}
    while time.time() < until:
        try:
            t = pds.read_dataset(key) if out["reads"] % 2 else pds.read_batches(key).read_all()
            out["tags"].append(check(t))
        except CaslakeError as e:
            if type(e).__name__ == "DatasetIncomplete" and not out["tags"]:
                out["incomplete"] += 1  # nothing committed yet
            else:
                out["errors"].append(f"{type(e).__name__}: {e}")
        except AssertionError as e:
            out["errors"].append(str(e))
        out["reads"] += 1
    return out


class _KillAt(FaultyStore):
    def __init__(self, inner: ObjectStore, index: int, when: str) -> None:
        super().__init__(inner)
        self.puts = 0
        self.index = index
        self.when = when

    def _step(self, before: bool) -> None:
        if before == (self.when == "before") and self.puts == self.index:
            os.kill(os.getpid(), signal.SIGKILL)

    def put(self, key: str, data: bytes, *, mode: Mode = PutMode.OVERWRITE) -> str:
        self.puts += 1
        self._step(True)
        etag = super().put(key, data, mode=mode)
        self._step(False)
        return etag

    def put_file(self, key: str, path: str, *, mode: Mode = PutMode.CREATE) -> str:
        self.puts += 1
        self._step(True)
        etag = super().put_file(key, path, mode=mode)
        self._step(False)
        return etag


def main(argv: list[str]) -> int:
    cmd, uri, options, key, overwrite, index, when = argv
    assert cmd == "kill"
    store = _KillAt(open_store(uri, json.loads(options) or None), int(index), when)
    pds = ParquetDatasetStore(store, max_rows_per_file=MAX_ROWS)
    pds.write_dataset(content(1, 0), key, overwrite=overwrite == "1")
    print(json.dumps({"puts": store.puts}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
