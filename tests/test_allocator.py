"""``import caslake`` lets Arrow's allocator (mimalloc) use huge pages, before
pyarrow loads; a value the user set is kept; after pyarrow, only child
processes get it.  Each case runs in a fresh interpreter, and asks mimalloc
itself (``MIMALLOC_VERBOSE`` prints the options it read), so the check sees
the allocator's real setting, not just an environment variable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OPTION = "option 'allow_large_os_pages': "

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="caslake sets the option on Linux only")


def _run(code: str, **env: str) -> tuple[dict[str, object], str]:
    """Run ``code`` (which prints a JSON line last) in a fresh interpreter, with
    mimalloc verbose; its JSON and mimalloc's setting as it read it ('0'/'1')."""
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith("MIMALLOC_") and k != "ARROW_DEFAULT_MEMORY_POOL"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT,
                         env={**clean, "PYTHONPATH": str(ROOT), "MIMALLOC_VERBOSE": "1", **env})
    seen = [ln.split(OPTION, 1)[1].strip() for ln in res.stderr.splitlines() if OPTION in ln]
    assert seen, f"mimalloc printed no options: {res.stderr[-500:]}"
    return json.loads(res.stdout.strip().splitlines()[-1]), seen[0]


REPORT = ("import json, os, pyarrow as pa; pa.array([1]); "
          "print(json.dumps({'pool': pa.default_memory_pool().backend_name, "
          "'env': os.environ.get('MIMALLOC_ALLOW_LARGE_OS_PAGES'), "
          "'huge': caslake._allocator.HUGE_PAGES}))")


def test_import_caslake_first_gives_arrow_huge_pages() -> None:
    got, option = _run(f"import caslake; {REPORT}")
    assert got == {"pool": "mimalloc", "env": "1", "huge": True}
    assert option == "1"


def test_without_caslake_arrow_keeps_small_pages() -> None:
    """The control: the same probe without caslake reads 0 (the check can fail)."""
    got, option = _run("import json, os, pyarrow as pa; pa.array([1]); "
                       "print(json.dumps({'env': os.environ.get("
                       "'MIMALLOC_ALLOW_LARGE_OS_PAGES')}))")
    assert got == {"env": None}
    assert option == "0"


def test_a_value_the_user_set_is_kept() -> None:
    got, option = _run(f"import caslake; {REPORT}", MIMALLOC_ALLOW_LARGE_OS_PAGES="0")
    assert got == {"pool": "mimalloc", "env": "0", "huge": False}
    assert option == "0"


def test_after_pyarrow_only_child_processes_get_it() -> None:
    child = ("import subprocess, sys; r = subprocess.run([sys.executable, '-c', "
             "'import pyarrow as pa; pa.array([1])'], capture_output=True, text=True); "
             f"child = [ln for ln in r.stderr.splitlines() if {OPTION!r} in ln]; ")
    got, option = _run("import pyarrow; import caslake; " + child
                       + REPORT.replace("}))", ", 'child': child[0].strip()[-1]}))"))
    assert got == {"pool": "mimalloc", "env": "1", "huge": False, "child": "1"}
    assert option == "0"
