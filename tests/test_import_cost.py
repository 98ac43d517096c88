"""``import caslake`` stays cheap: it never loads sqlglot (only a SQL string
predicate needs it), pandas or ``pyarrow.dataset`` (Acero; it imports pandas),
obstore (only an s3:// table needs it), nor the export and maintenance layers
(only their methods need them).

A fresh interpreter, so modules another test loaded cannot hide a regression."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NEVER_ON_IMPORT = ("sqlglot", "pandas", "pyarrow.dataset", "obstore", "caslake.export",
                   "caslake.maintenance")


def _loaded_after(code: str) -> set[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_import_caslake_loads_none_of_the_heavy_modules() -> None:
    loaded = _loaded_after("import caslake")
    assert "caslake.table.scan" in loaded  # the probe sees caslake's own modules
    assert sorted(m for m in NEVER_ON_IMPORT if m in loaded) == []


@pytest.mark.parametrize("where, module", [("x > 1", "sqlglot"), (None, "caslake.export")])
def test_the_probe_sees_a_lazy_module_once_used(where: str | None, module: str) -> None:
    """The lazy modules do load when their feature is used (the check can fail)."""
    use = (f"caslake.expr.compile_where({where!r}, pa.schema([('x', pa.int64())]))"
           if where is not None else "import caslake.export.hook")
    loaded = _loaded_after(f"import caslake, caslake.expr, pyarrow as pa\n{use}")
    assert module in loaded
