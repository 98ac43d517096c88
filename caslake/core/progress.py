"""Progress bars for long maintenance work (compact, purge, gc, export, clone, verify).

This module owns the one way caslake shows progress: a tqdm bar on stderr,
opened by the caller that knows whether a person is watching (the CLI: stderr
is a terminal, no ``--json``) with :func:`task`, and advanced from inside the
operation with :func:`advance` / :func:`set_total`, which do nothing when no
bar is open.  So library calls stay silent, and an operation needs no bar
argument threaded through its layers.

* The bar is process-wide (one command runs at a time in the CLI) and
  thread-safe: workers of a pool may advance it.
* No tqdm monitor thread is ever started (``monitor_interval = 0``): a daemon
  thread would outlive the command and run while the interpreter shuts down
  (``tests/test_cli_exit.py``).

Examples:
    >>> from caslake.core import progress
    >>> with progress.task("deleting", total=3, unit="object", enabled=False):
    ...     progress.advance(3)  # no bar: enabled=False (piped, or --json)
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from tqdm import tqdm

__all__ = ["Bar", "advance", "set_total", "shown", "stage_callback", "task"]


class Bar(tqdm):  # type: ignore[misc]
    """A tqdm bar that never starts tqdm's monitor thread."""

    monitor_interval = 0


_lock = threading.Lock()
_current: list[Any] = []  # the open bar, if any (a stack: an inner task wins)


def shown(requested: bool = False, *, as_json: bool = False, out: TextIO | None = None) -> bool:
    """Whether to draw a bar: never with ``--json``; else when asked for
    (``--progress``) or when ``out`` (stderr) is a terminal."""
    if as_json:
        return False
    stream = sys.stderr if out is None else out
    try:
        return requested or stream.isatty()
    except (AttributeError, ValueError):  # a closed or exotic stream
        return requested


@contextmanager
def task(desc: str, *, total: int | None = None, unit: str = "it", enabled: bool,
         unit_scale: bool = False, out: TextIO | None = None) -> Iterator[Any]:
    """Open a bar for the work inside the ``with`` block (none when not
    ``enabled``); :func:`advance` moves it.  The bar is closed on exit."""
    if not enabled:
        yield None
        return
    bar = Bar(total=total, desc=desc, unit=unit, unit_scale=unit_scale, leave=True,
              file=sys.stderr if out is None else out)
    with _lock:
        _current.append(bar)
    try:
        yield bar
    finally:
        with _lock:
            _current.remove(bar)
        bar.close()


def _bar() -> Any:
    with _lock:
        return _current[-1] if _current else None


def advance(n: int = 1) -> None:
    """Move the open bar by ``n`` (nothing when no bar is open)."""
    bar = _bar()
    if bar is not None and n:
        with _lock:
            bar.update(n)


def set_total(total: int) -> None:
    """Set the open bar's total, once the work is known (nothing when none is open)."""
    bar = _bar()
    if bar is not None:
        with _lock:
            bar.total = total
            bar.refresh()


def stage_callback(stage: str, done: int, total: int) -> None:
    """A ``progress(stage, done, total)`` callback (purge's) that drives the open bar:
    the total is set, then the bar follows ``done``."""
    bar = _bar()
    if bar is None:
        return
    with _lock:
        if bar.total != total:
            bar.total = total
        bar.set_postfix_str(stage, refresh=False)
        bar.update(max(0, done - bar.n))
