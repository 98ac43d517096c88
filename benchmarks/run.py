"""`make bench`: every benchmark suite, each printing a table of ratios against peers."""

from __future__ import annotations

import sys

from benchmarks import append as append_bench
from benchmarks import (
    change_feed,
    commit_throughput,
    core,
    deletes,
    metadata,
    multitable,
    nested,
    predicates,
    purge,
    scan_paths,
    scans,
    segment_width,
    tpch,
)
from benchmarks import dataset as dataset_bench
from benchmarks import export as export_bench
from benchmarks import spark as spark_bench


def main() -> int:
    quick = "--quick" in sys.argv
    core.main(quick=quick)
    synthetic = scans.main(quick=quick)
    append_bench.run(1_000_000 if quick else 5_000_000, 3 if quick else 5, None)
    deletes.main(quick=quick)
    metadata.main(quick=quick)
    segment_width.main(1000 if quick else 3000)
    purge.main(quick=quick)
    export_bench.main(quick=quick)
    dataset_bench.main(quick=quick)
    nested.main(quick=quick)
    if quick:
        commit_throughput.main((1, 8), (15.0,), 20.0)
    else:
        commit_throughput.main((1, 8, 64), (15.0, 5.0, 1.0), 30.0)
    multitable.main(quick=quick)
    spark_bench.main(quick=quick)
    predicates.main(0.1 if quick else 1.0)
    paths = scan_paths.main(0.1 if quick else 1.0, [1, 2], append=True)
    feed = change_feed.main(quick=quick)
    return tpch.main(quick=quick) or paths or synthetic or feed


if __name__ == "__main__":
    sys.exit(main())
