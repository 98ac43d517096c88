"""Every public function and class has a docstring with an example (issue 32).

Public means: what ``caslake.__all__`` and ``caslake.spark.__all__`` export
(functions and classes), and every public method and property of
:class:`caslake.Table`.  An example is an ``Example`` section or a ``>>>``
line.  The examples run too (doctest): those of ``Table``'s members start from
the table of the class's own example, as their text says; ``+SKIP`` marks the
few that need Spark, S3 or a path of the reader's.
"""

from __future__ import annotations

import doctest
import inspect
import io
from collections.abc import Iterator
from typing import Any

import pytest

import caslake


def _has_example(obj: Any) -> bool:
    doc = inspect.getdoc(obj) or ""
    generated = isinstance(obj, type) and doc.startswith(f"{obj.__name__}(")  # dataclass
    return not generated and (">>>" in doc or "Example" in doc)


def _table_members() -> Iterator[tuple[str, Any]]:
    for name, member in inspect.getmembers_static(caslake.Table):
        if name.startswith("_"):
            continue
        if isinstance(member, property):
            yield f"Table.{name}", member.fget
        elif isinstance(member, (staticmethod, classmethod)):
            yield f"Table.{name}", member.__func__
        elif inspect.isfunction(member):
            yield f"Table.{name}", member


def _exported(module: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.isfunction(obj) or inspect.isclass(obj):
            yield f"{prefix}.{name}", obj


def public_api() -> list[tuple[str, Any]]:
    spark = pytest.importorskip("caslake.spark")
    return [*_exported(caslake, "caslake"), *_exported(spark, "caslake.spark"),
            *_table_members()]


def test_every_public_function_and_class_has_an_example() -> None:
    api = public_api()
    assert len(api) > 60  # the walk found the API
    missing = [name for name, obj in api if not _has_example(obj)]
    assert missing == [], "no docstring example: " + ", ".join(missing)


def test_the_check_catches_a_docstring_without_an_example() -> None:
    def documented() -> None:
        """Does a thing."""

    assert not _has_example(documented)
    documented.__doc__ = "Does a thing.\n\nExample:\n    >>> documented()\n"
    assert _has_example(documented)


def _table_globals() -> dict[str, Any]:
    """What the Table class example defines (``t`` and its imports)."""
    parser = doctest.DocTestParser()
    glob: dict[str, Any] = {}
    for example in parser.get_examples(inspect.getdoc(caslake.Table) or ""):
        exec(compile(example.source, "<Table example>", "exec"), glob)
    return glob


def test_the_examples_run() -> None:
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report = io.StringIO()
    ran = 0
    for name, obj in public_api():
        if name.startswith("caslake.spark."):
            continue  # they need a SparkSession (and are marked +SKIP)
        glob = _table_globals() if name.startswith("Table.") else {}
        test = parser.get_doctest(inspect.getdoc(obj) or "", glob, name, None, 0)
        result = runner.run(test, out=report.write)
        ran += result.attempted
    assert runner.failures == 0, report.getvalue()[-4000:]
    assert ran > 80
