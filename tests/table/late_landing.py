"""A store whose first pointer PUT lands late, for the no-false-failure tests
(issue 9, defect 1): ``tests/table/test_no_false_failure.py`` and the Spark
commit tests."""

from __future__ import annotations

from caslake.errors import TransientStoreError
from caslake.format.keys import POINTER_KEY
from caslake.store.base import Mode, ObjectStore, PutMode
from caslake.store.faults import FaultyStore


class LateLandingStore(FaultyStore):
    """The first pointer PUT is held in flight (the caller sees a timeout); it lands
    when ``land()`` is called.  ``fail_next(op, prefix)`` makes the next matching
    request after that fail with a TransientStoreError (before it applies),
    landing the held PUT first when ``land_first``."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner, [])
        self.held: tuple[bytes, Mode] | None = None
        self.landed = False
        self.armed: tuple[str, str, bool] | None = None
        self.failed = 0

    def land(self) -> None:
        assert self.held is not None and not self.landed
        data, mode = self.held
        self.inner.put(POINTER_KEY, data, mode=mode)  # its If-Match still matches
        self.landed = True

    def fail_next(self, op: str, prefix: str, *, land_first: bool) -> None:
        self.armed = (op, prefix, land_first)

    def _maybe_fail(self, op: str, key: str) -> None:
        if self.armed and self.held is not None and op == self.armed[0] \
                and key.startswith(self.armed[1]):
            land_first = self.armed[2]
            self.armed = None
            if land_first:
                self.land()
            self.failed += 1
            raise TransientStoreError(f"injected failure of {op} {key}", key=key)

    def put(self, key: str, data: bytes, *, mode: Mode = PutMode.OVERWRITE) -> str:
        if key == POINTER_KEY and self.held is None:
            self.held = (data, mode)
            raise TransientStoreError("injected timeout: the request is still in flight",
                                      key=key)
        self._maybe_fail("put", key)
        return self.inner.put(key, data, mode=mode)

    def get(self, key: str):  # type: ignore[no-untyped-def]
        self._maybe_fail("get", key)
        return self.inner.get(key)


def fail_after_the_settle_read(store: LateLandingStore, op: str, prefix: str, *,
                                land_first: bool) -> None:
    """Arm the failure once attempt 1's settle read has seen the old pointer."""
    orig_get = store.get
    reads = {"n": 0}

    def get(key: str):  # type: ignore[no-untyped-def]
        if key == POINTER_KEY and store.held is not None and not store.landed:
            reads["n"] += 1
            if reads["n"] == 1:
                result = orig_get(key)
                store.fail_next(op, prefix, land_first=land_first)
                return result
        return orig_get(key)

    store.get = get  # type: ignore[method-assign]
