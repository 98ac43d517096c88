"""``import caslake`` stays cheap: it never loads thriftpy2 (only writes and
foreign footers need the Thrift codec), pandas or ``pyarrow.dataset`` (Acero;
it imports pandas), obstore (only an s3:// table needs it), nor the export and
maintenance layers (only their methods need them).

It does load sqlglot and its DuckDB dialect (~0.1 s): a scan or delete with a
SQL string predicate is the common case, and a process's first one must not
pay that import (the cold-scan goal: first scan at most 1.3x a warm one).

A fresh interpreter, so modules another test loaded cannot hide a regression."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NEVER_ON_IMPORT = ("thriftpy2", "caslake.format.parquet_thrift", "pandas", "pyarrow.dataset",
                   "obstore", "caslake.export", "caslake.ops.compact", "caslake.ops.gc",
                   "caslake.ops.purge", "caslake.ops.verify")
ALWAYS_ON_IMPORT = ("sqlglot", "sqlglot.dialects.duckdb", "caslake.expr.sql")


def _loaded_after(code: str, *, before: str = "") -> set[str]:
    """The modules a fresh interpreter loads running ``code`` after ``before``."""
    probe = (f"{before}\nimport json, sys\nfirst = set(sys.modules)\n{code}\n"
             "print(json.dumps(sorted(set(sys.modules) - first)))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_import_caslake_loads_none_of_the_heavy_modules() -> None:
    loaded = _loaded_after("import caslake")
    assert "caslake.core.read.scan" in loaded  # the probe sees caslake's own modules
    assert sorted(m for m in NEVER_ON_IMPORT if m in loaded) == []
    assert sorted(m for m in ALWAYS_ON_IMPORT if m not in loaded) == []


def test_a_first_sql_predicate_imports_nothing_more() -> None:
    """Parsing and binding the first SQL predicate loads no module: its cost is
    the parse itself, not sqlglot's import or its dialect's."""
    new = _loaded_after("caslake.expr.compile_where(\"x > 1 AND y IN ('a', 'b')\", "
                        "pa.schema([('x', pa.int64()), ('y', pa.string())]))",
                        before="import caslake, caslake.expr, pyarrow as pa")
    assert sorted(new) == []


@pytest.mark.parametrize("use, module", [("import caslake.format.splice", "thriftpy2"),
                                         ("import caslake.export.hook", "caslake.export")])
def test_the_probe_sees_a_lazy_module_once_used(use: str, module: str) -> None:
    """The lazy modules do load when their feature is used (the check can fail)."""
    loaded = _loaded_after(f"import caslake\n{use}")
    assert module in loaded
