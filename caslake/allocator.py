"""The one process setting caslake makes: Arrow's allocator may use huge pages.

pyarrow allocates through mimalloc, which by default backs memory with 4 KiB
pages.  A scan's output is fresh memory, and on Linux the kernel zeroes and maps
every page on first touch.  In a new process (a Spark Python worker, a CLI
call, a serverless function), that page work is most of the first scan's extra
cost: TPC-H SF1 Q1's seven columns (6M rows, ~0.5 GB of Arrow) took 0.56-0.73 s
in a fresh process against 0.22-0.26 s warm, 0.7-1.0 s of it kernel time.  With
``MIMALLOC_ALLOW_LARGE_OS_PAGES=1`` mimalloc asks for transparent huge pages
(``madvise``), and the same first scan took 0.24-0.34 s; warm scans and peak
memory were unchanged (docs/architecture.md, "The first scan in a process").

mimalloc reads its options once, when pyarrow's library loads, so the variable
must be in the environment before ``import pyarrow``: ``import caslake`` sets it
(only if unset) before it imports pyarrow, and every process started afterwards
(Spark's JVM and its Python workers, ``multiprocessing``) inherits it.  If
pyarrow is already loaded, this process keeps 4 KiB pages; set the variable in
the environment to have it everywhere, or to ``0`` to opt out (caslake never
overrides a value that is set).  Linux only: elsewhere mimalloc's large pages
need privileges, and nothing is set.  Imports nothing of caslake's or pyarrow's.
"""

from __future__ import annotations

import os
import sys

LARGE_PAGES = "MIMALLOC_ALLOW_LARGE_OS_PAGES"


#: Whether caslake put the variable in this process's environment (it was unset).
SET_BY_CASLAKE = sys.platform.startswith("linux") and LARGE_PAGES not in os.environ


def prefer_huge_pages() -> bool:
    """Set ``MIMALLOC_ALLOW_LARGE_OS_PAGES=1`` unless it is set already; True if
    it takes effect in this process (Linux, pyarrow not loaded yet, enabled)."""
    if not sys.platform.startswith("linux"):
        return False
    os.environ.setdefault(LARGE_PAGES, "1")
    return "pyarrow" not in sys.modules and os.environ[LARGE_PAGES] == "1"


HUGE_PAGES = prefer_huge_pages()
