"""Process pools for the cross-process store tests.

``Pool.__exit__`` stops its workers with SIGTERM and then waits for them.  A
worker inherits ignored signal dispositions from the pytest process (through
the forkserver's exec), and something in a full run leaves SIGTERM ignored there:
the join then waits for ever (CI timed out on exactly that).  Every worker
therefore resets SIGTERM to its default action first."""

from __future__ import annotations

import multiprocessing as mp
import signal
import sys
from multiprocessing.pool import Pool


def context() -> mp.context.BaseContext:
    # Not fork: by the time these tests run the pytest process has threads (Spark's
    # py4j gateway, scan pools, tqdm's monitor), and a forked child can inherit one of
    # their locks held.  forkserver forks from a clean single-threaded process.
    return mp.get_context("forkserver" if sys.platform.startswith("linux") else "spawn")


def _default_sigterm() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def pool(ctx: mp.context.BaseContext, processes: int) -> Pool:
    """A pool whose workers die on SIGTERM whatever the parent ignores."""
    return ctx.Pool(processes, initializer=_default_sigterm)  # type: ignore[attr-defined,no-any-return]
