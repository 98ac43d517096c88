"""The fault-at-every-store-call loop the crash suites share, and the table templates
that make its fault points cheap.

:func:`fault_each_call` runs an operation once through a :class:`FaultyStore` to
count its store calls ``N``; then, for every call index ``i`` in ``1..N``, it puts
the starting state back (``setup``), arms one fault at call ``i`` and runs the
operation again:

* ``crash``: the process dies at call ``i`` (:class:`SimulatedCrash`) and stays
  dead, so every later call -- from any thread, a clean-up's included -- crashes too;
* ``lost-reply``: call ``i`` is applied, then its reply is lost (``TransientStoreError``);
* ``fail-before``: call ``i`` fails before it reaches the store (``TransientStoreError``).

Each point's :class:`Point` (where it is, what the run returned or raised) goes to
the suite's ``check``, which inspects what is left and names its state ("old",
"new", ...); the loop returns how often each ``outcome->state`` happened.

:class:`Template` builds a starting state once and puts it back before each point,
by hard links on a local store and by sharing the (immutable) entries of a memory
space, so that a point costs the operation and its check, not a rebuild.

Used by tests/reliability/test_crash_every_step.py, test_crash_new_ops.py,
tests/dml/test_dml_crash.py and tests/pipelines/test_restore_crash.py.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from caslake.errors import CaslakeError
from caslake.store import memory as memory_store
from caslake.store.faults import ALL_OPS, Fault, FaultyStore, SimulatedCrash, reset_error
from caslake.store.memory import forget_memory_space

MODES = ["crash", "lost-reply", "fail-before"]
DEAD_CALLS = 1_000  # more calls than any operation here makes: a dead process stays dead
H = TypeVar("H")  # what an operation under test runs on: a Table, a dataset store


def fault_at(mode: str, i: int) -> Fault:
    """The fault of ``mode`` at store call ``i``: a crash stays dead from call ``i`` on;
    the others hit call ``i`` only.  ALL_OPS is every operation kind FaultyStore
    counts, staging ones included, so call ``i`` is the ``i``-th call counted."""
    if mode == "crash":
        return Fault(ALL_OPS, "crash", calls=frozenset(range(i, i + DEAD_CALLS)))
    return Fault(ALL_OPS, "after" if mode == "lost-reply" else "before",
                 calls=frozenset({i}), error=reset_error)


@dataclass(frozen=True)
class Point:
    """One fault point after its run: the state to check is at ``uri``."""

    uri: str
    where: str  # "<name>/<kind>/<mode> at call i of N", for messages
    outcome: str  # "ok", "crash", or the CaslakeError's type name
    returned: object = None  # what the run returned (outcome "ok")
    error: CaslakeError | None = None  # what it raised (a typed error)


def run_faulted(run: Callable[[H], object], handle: H, mode: str, where: str
                ) -> tuple[str, object, CaslakeError | None]:
    """Run an operation whose fault is armed: its outcome's name, what it returned,
    what it raised.  A crash fault must end it with the crash; the other faults
    with a return or a typed error (anything else fails the test)."""
    try:
        returned = run(handle)
    except SimulatedCrash:
        assert mode == "crash", where
        return "crash", None, None
    except CaslakeError as e:
        assert mode != "crash", f"{where}: a dead process raised {e!r}"
        return type(e).__name__, None, e
    return "ok", returned, None


def told_the_truth(outcome: str, state: str) -> bool:
    """A returned operation is done ("new"); a typed error other than
    CommitOutcomeUnknown claims it is not ("old"); a crash or an unknown outcome
    may be either."""
    if outcome == "ok":
        return state == "new"
    return outcome in ("crash", "CommitOutcomeUnknown") or state == "old"


def fault_each_call(name: str, kind: str, mode: str, setup: Callable[[], str],
                    open_faulty: Callable[[str], tuple[H, FaultyStore]],
                    run: Callable[[H], object], check: Callable[[Point], str],
                    min_calls: int, *, truthful: bool = False,
                    counted: Callable[[str, object], None] | None = None) -> dict[str, int]:
    """Count the store calls ``run`` makes on what ``setup`` prepares (opened through
    ``open_faulty``; ``counted(uri, returned)`` checks that fault-free run), then fault
    each one on a fresh setup and ``check`` the :class:`Point` ("old", "new", ...).
    The fault must fire (a crash at call ``i`` or later, the others exactly once);
    with ``truthful``, the outcome must tell the truth about the state
    (:func:`told_the_truth`).  Returns the ``outcome->state`` counts."""
    uri = setup()
    handle, store = open_faulty(uri)
    start = store.calls
    returned = run(handle)
    n = store.calls - start
    assert n >= min_calls, f"{name} made only {n} store calls"
    if counted is not None:
        counted(uri, returned)
    outcomes: dict[str, int] = {}
    for i in range(1, n + 1):
        uri = setup()
        handle, store = open_faulty(uri)
        where = f"{name}/{kind}/{mode} at call {i} of {n}"
        fault = fault_at(mode, i)
        store.faults.append(fault)
        outcome, returned, error = run_faulted(run, handle, mode, where)
        if mode == "crash":
            assert fault.fired >= 1 and fault.seen >= i, f"{where}: the crash did not happen"
        else:
            assert fault.fired == 1, f"{where}: the fault did not fire"
        state = check(Point(uri, where, outcome, returned, error))
        assert not truthful or told_the_truth(outcome, state), f"{where}: {outcome} but {state}"
        label = f"{outcome}->{state}"
        outcomes[label] = outcomes.get(label, 0) + 1
    print(f"\n{name} [{kind}, {mode}]: {n} fault points tested; outcomes {outcomes}")
    return outcomes


T = TypeVar("T")


class Template(Generic[T]):
    """A starting state made once (``make(uri)``, whose result is ``made``) and put back
    at the same URI before every fault point: on a local store by hard links (the
    same path -- an Iceberg export names absolute paths -- and the same inodes and
    mtimes, so the same ETags); in memory by sharing the space's entries, which are
    immutable (the same bytes, ETags and times).  Sound because neither store
    changes an object in place: a local write links or renames a new file in, a
    delete unlinks; a memory write replaces the entry.  ``kind`` "local" needs
    ``root`` (a fresh directory): the table is ``root/w/t``, and whatever ``make``
    puts beside it in ``root/w`` (a clone at ``<uri>-c``) is put back too; "memory"
    makes its own space names (one table)."""

    def __init__(self, kind: str, make: Callable[[str], T], root: Path | None = None) -> None:
        self.kind = kind
        if kind == "local":
            assert root is not None
            self._work: str = str(root / "w")
            self._saved: str = str(root / "template")
        elif kind == "memory":
            name = uuid.uuid4().hex
            self._work, self._saved = f"{name}-t", f"{name}-template"
        else:
            raise ValueError(f"no template for a {kind} store")
        self.uri = str(Path(self._work) / "t") if kind == "local" else f"memory://{self._work}"
        if kind == "local":
            os.makedirs(self._work)
        self.made = make(self.uri)
        if kind == "local":
            shutil.copytree(self._work, self._saved, copy_function=os.link)
        else:
            _share_space(self._work, self._saved)

    def fresh(self) -> str:
        """The template's state at ``self.uri``, whatever the last point left there."""
        if self.kind == "local":
            shutil.rmtree(self._work)
            shutil.copytree(self._saved, self._work, copy_function=os.link)
        else:
            _share_space(self._saved, self._work)
        return self.uri

    def close(self) -> None:
        if self.kind == "memory":
            forget_memory_space(self._work)
            forget_memory_space(self._saved)


def _share_space(src: str, dst: str) -> None:
    """Make memory space ``dst`` hold exactly ``src``'s entries (shared, not copied)."""
    objects = memory_store._space_for(src).objects
    target = memory_store._space_for(dst)
    with target.lock:
        target.objects.clear()
        target.objects.update(objects)
