"""Typed errors live in caslake.errors; a class moved there from the module that
first defined it stays importable from that module (the same class, so an
``except`` written against either path catches it)."""

from __future__ import annotations

import caslake.errors as errors


def test_native_read_unsupported_lives_in_errors_and_keeps_its_old_path() -> None:
    from caslake.spark import native

    assert errors.NativeReadUnsupported.__module__ == "caslake.errors"
    assert native.NativeReadUnsupported is errors.NativeReadUnsupported
    assert issubclass(errors.NativeReadUnsupported, errors.InvalidArgument)
