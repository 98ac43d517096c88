"""moto's S3 server with conditional writes made atomic: ``python -m caslake.testing.atomic_moto``.

moto checks a conditional PUT's precondition and then stores the object as two
separate steps with no lock between them, while its server handles requests on
many threads.  Two conditional PUTs that race can therefore both pass the check
and both "win" -- which AWS S3, MinIO and R2 never allow, and which is exactly
the contract caslake's commit protocol relies on (docs/protocol.md, "Storage
contract", rule 3).  On a loaded machine this showed up as two pointer CASes
from one ETag both answered 200: eight racing writers, 80 acknowledged commits,
79 versions (``tests/store/test_conformance.py`` pins the contract).

This wrapper serialises moto's object-writing request handlers (put, copy,
multipart completion, delete) behind one lock, so each conditional check and the
write it guards happen as one step, as on a real store.  Reads stay concurrent,
and so do the parts of a multipart upload (UploadPart, UploadPartCopy: no
condition to check, nothing visible until the Complete, which is serialised), as
on a real store.  No response changes.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from typing import Any

_WRITE_HANDLERS = ("put_object", "copy_object", "delete_object", "_key_response_post",
                   "_key_response_put")
_LOCK = threading.RLock()


def _is_part_upload(args: tuple[Any, ...]) -> bool:
    """``_key_response_put(self, query, key_name)`` of an UploadPart(Copy)."""
    query = args[1] if len(args) > 1 else None
    return isinstance(query, dict) and bool(query.get("uploadId")) and bool(
        query.get("partNumber"))


def _serialised(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if fn.__name__ == "_key_response_put" and _is_part_upload(args):
            return fn(*args, **kwargs)
        with _LOCK:
            return fn(*args, **kwargs)

    wrapper._caslake_serialised = True  # type: ignore[attr-defined]
    return wrapper


def make_conditional_writes_atomic() -> None:
    """Patch moto's S3 request handlers in this process (idempotent)."""
    from moto.s3.responses import S3Response

    for name in _WRITE_HANDLERS:
        fn = getattr(S3Response, name, None)
        if fn is not None and not getattr(fn, "_caslake_serialised", False):
            setattr(S3Response, name, _serialised(fn))


def main(argv: list[str] | None = None) -> None:
    make_conditional_writes_atomic()
    from moto.server import main as moto_main

    moto_main(argv if argv is not None else sys.argv[1:])


if __name__ == "__main__":
    main()
