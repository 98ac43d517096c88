"""Many processes on one dataset key: concurrent writers and readers, and writers SIGKILLed
at every step.  Local filesystem and moto S3 (real processes, real store)."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from datetime import timedelta
from pathlib import Path

import pytest

from caslake.dataset import DatasetIncomplete, ParquetDatasetStore
from caslake.store import ObjectStore, open_store
from tests.dataset import worker

KEY = "gold/daily"
WRITERS = 8
ROUNDS = 4
READERS = 2
ROOT = Path(__file__).resolve().parents[2]


def _uri(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, str]]:
    from tests.conftest import _store_uri

    return _store_uri(kind, request, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["local", pytest.param("s3", marks=pytest.mark.s3)])
def test_eight_processes_write_and_overwrite_while_readers_loop(
        kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    uri, options = _uri(kind, request, tmp_path)
    ctx = multiprocessing.get_context("spawn")
    start = time.time() + 6.0  # after every process has imported pyarrow
    with ProcessPoolExecutor(WRITERS + READERS, mp_context=ctx) as pool:
        writers = [pool.submit(worker.writer, uri, options, KEY, w, ROUNDS, start)
                   for w in range(WRITERS)]
        results = [f.result(timeout=300) for f in writers]
        until = time.time() + 1.0
        readers = [pool.submit(worker.reader, uri, options, KEY, until) for _ in range(READERS)]
        # Readers started late still race the last writers; run one more writer round.
        late = pool.submit(worker.writer, uri, options, KEY, 7, ROUNDS + 2, 0.0)
        reads = [f.result(timeout=300) for f in readers]
        results.append(late.result(timeout=300))
    errors = [e for r in results + reads for e in r["errors"]]
    assert errors == []
    won = [t for r in results for t in r["won"]]
    lost = [x for r in results for x in r["lost"]]
    assert len(won) + len(lost) == WRITERS * ROUNDS + ROUNDS + 2
    assert set(lost) <= {"DatasetAlreadyExists", "DatasetConflict"}
    assert sum(t.endswith("-r0") for t in won) == 1  # create-only: one first writer
    assert lost, "eight writers at once should lose some races"
    assert sum(r["reads"] for r in reads) > 0
    assert {t for r in reads for t in r["tags"]} <= set(won)
    final = ParquetDatasetStore(open_store(uri, options or None)).read_dataset(KEY)
    assert worker.check(final) in won


def _kill_run(uri: str, options: dict[str, str], overwrite: bool, index: int,
              when: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "tests.dataset.worker", "kill", uri, json.dumps(options), KEY,
         "1" if overwrite else "0", str(index), when],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
@pytest.mark.parametrize("overwrite", [False, True])
def test_sigkill_at_every_put(overwrite: bool, tmp_path: Path,
                              open_test_store: Callable[[str], ObjectStore]) -> None:
    """A writer killed before or after each of its PUTs leaves the previous complete
    dataset (or, on a new key, DatasetIncomplete) -- or, once its manifest landed, its
    own complete dataset.  Never a partial one."""
    base = worker.content(2, 0)
    new = worker.content(1, 0)
    # How many PUTs does the write make?  (Kill index past the end = no kill.)
    probe = str(tmp_path / "probe")
    done = _kill_run(probe, {}, False, 10_000, "before")
    assert done.returncode == 0, done.stderr
    puts = json.loads(done.stdout)["puts"]
    assert puts == 3 + 3  # 3 parts, manifest, _SUCCESS, _COMMITTED
    manifest_put = 4
    for index in range(1, puts + 1):
        for when in ("before", "after"):
            uri = str(tmp_path / f"k-{index}-{when}")
            pds = ParquetDatasetStore(open_store(uri), max_rows_per_file=worker.MAX_ROWS)
            if overwrite:
                pds.write_dataset(base, KEY)
            run = _kill_run(uri, {}, overwrite, index, when)
            assert run.returncode == -9, (index, when, run.stdout, run.stderr)
            landed = index > manifest_put or (index == manifest_put and when == "after")
            success = index > manifest_put + 1 or (index == manifest_put + 1 and when == "after")
            if landed and (success or overwrite):
                assert pds.read_dataset(KEY).equals(new), (index, when)
            elif overwrite:
                assert pds.read_dataset(KEY).equals(base), (index, when)
            else:
                with pytest.raises(DatasetIncomplete):
                    pds.read_dataset(KEY)
            # The key stays usable, and vacuum removes what the dead writer left.
            pds.write_dataset(base, KEY, overwrite=True)
            pds.vacuum(KEY, older_than=timedelta(0))
            manifest = pds.read_manifest(KEY)
            gen = manifest.parts[0].split("/")[0]
            left = sorted(m.key[len(KEY) + 1:] for m in pds.store.list(KEY + "/"))
            assert left == sorted(["_SUCCESS", "manifest.json", f"{gen}/_COMMITTED",
                                   *manifest.parts]), (index, when)
