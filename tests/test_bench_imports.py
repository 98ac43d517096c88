"""Every benchmark module imports, so ``make bench`` cannot break silently.

The suites are run in full only by ``make bench`` (too long for ``make test``) and
mypy checks the package alone, so a name moved in the package (as
``ZSTD_DEFAULT_LEVEL`` was, into ``caslake.core.write_options``) broke
``benchmarks/run.py`` at import for two sessions without a failing test."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import benchmarks

MODULES = sorted(m.name for m in pkgutil.iter_modules(benchmarks.__path__))


def test_the_benchmark_package_has_its_suites() -> None:
    assert {"run", "append", "commit_throughput", "multitable", "tpch"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_every_benchmark_module_imports(name: str) -> None:
    importlib.import_module(f"benchmarks.{name}")
