"""Every ```python and ```sh / ```bash / ```console block of README.md and
docs/*.md runs, so the docs cannot go stale.

The blocks of one file run in order, in one temporary directory, the Python
ones in one shared namespace (a later block may use an earlier one's names) and
the shell ones with ``bash -euo pipefail`` and the venv's ``caslake`` first on
the PATH (a ```console block runs its ``$ `` lines).  Paths are made local:
``/tmp/`` becomes the temporary directory, and an S3 example's ``s3://bucket/``
and ``http://127.0.0.1:9000`` point at a fresh bucket on the test session's
moto server, with the credentials of the environment variables the README names.

An HTML comment on the line before a block changes how it runs:
``<!-- doc-test: skip (reason) -->`` leaves it out (a reason is required), and
``<!-- doc-test: spark -->`` gives it ``spark``, the tests' local SparkSession.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGS = {"python": "python", "py": "python", "sh": "sh", "bash": "sh", "shell": "sh",
         "console": "console"}
_FENCE = re.compile(r"^```\s*([\w-]*)\s*$")
_MARK = re.compile(r"^<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
_SKIP = re.compile(r"^skip\s*\((.+)\)$")
MAX_SKIPS = 4  # few, each with a reason
BLOCK_TIMEOUT_S = 120


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str  # python | sh | console
    code: str
    mark: str  # "", "spark", or "skip (reason)"

    @property
    def where(self) -> str:
        return f"{self.path.name}:{self.line}"


def parse(path: Path) -> list[Block]:
    """The runnable blocks of ``path`` (other languages and plain fences are text)."""
    lines = path.read_text().splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            raise AssertionError(f"{path.name}:{i + 1}: a code block is never closed")
        prev = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        mark = _MARK.match(prev.strip())
        lang = LANGS.get(m.group(1).lower())
        if lang is not None:
            out.append(Block(path, i + 1, lang, "\n".join(lines[i + 1:end]) + "\n",
                             mark.group(1) if mark else ""))
        elif mark is not None:
            raise AssertionError(f"{path.name}:{i + 1}: a doc-test mark on a block that "
                                 f"does not run ({m.group(1) or 'no language'})")
        i = end + 1
    for b in out:
        if b.mark and b.mark != "spark" and not _SKIP.match(b.mark):
            raise AssertionError(f"{b.where}: unknown doc-test mark {b.mark!r} (use "
                                 "'skip (reason)' or 'spark')")
    return out


class DocBlockFailed(AssertionError):
    pass


@dataclass
class Runner:
    """Runs one file's blocks in ``workdir``; ``fixture(name)`` gives moto or Spark."""

    workdir: Path
    fixture: Callable[[str], Any]
    env: dict[str, str]
    namespace: dict[str, Any] | None = None
    bucket: str | None = None

    def localize(self, code: str) -> str:
        code = code.replace("/tmp/", f"{self.workdir}/")
        if "s3://" in code or "127.0.0.1:9000" in code:
            from tests.conftest import make_bucket

            endpoint = self.fixture("moto_server")
            self.bucket = self.bucket or make_bucket(endpoint)
            code = (code.replace("s3://bucket/", f"s3://{self.bucket}/")
                    .replace("http://127.0.0.1:9000", endpoint))
        return code

    def run(self, block: Block) -> None:
        code = self.localize(block.code)
        if block.lang == "python":
            self.python(block, code)
        else:
            if block.lang == "console":
                code = "\n".join(ln[2:] for ln in code.splitlines() if ln.startswith("$ "))
            self.shell(block, code)

    def python(self, block: Block, code: str) -> None:
        if self.namespace is None:
            self.namespace = {"__name__": "__doc_block__"}
        if block.mark == "spark":
            self.namespace["spark"] = self.fixture("spark")
        try:
            exec(compile(code, block.where, "exec"), self.namespace)
        except Exception as e:
            raise DocBlockFailed(f"{block.where}: the python block fails: "
                                 f"{type(e).__name__}: {e}\n---\n{code}") from e

    def shell(self, block: Block, code: str) -> None:
        """Run ``code``: a plain ``caslake ...`` line (no pipe, redirection or
        substitution) in this process, through the CLI's ``main`` (a process
        start per line costs more than the whole README otherwise); any other
        line with bash."""
        pending: list[str] = []
        for line in _commands(code):
            words = _plain_caslake(line)
            if words is None:
                pending.append(line)
                continue
            if pending:
                self.bash(block, "\n".join(pending))
                pending = []
            self.cli(block, line, words)
        if pending:
            self.bash(block, "\n".join(pending))

    def cli(self, block: Block, line: str, words: list[str]) -> None:
        from caslake.cli.main import main

        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                code = main(words, out=out)
        except SystemExit as e:  # argparse: a usage error
            code = e.code if isinstance(e.code, int) else 2
        if code != 0:
            raise DocBlockFailed(f"{block.where}: `{line}` exits {code}\n--- stderr:\n"
                                 f"{err.getvalue()[-3000:]}")

    def bash(self, block: Block, code: str) -> None:
        proc = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=self.workdir,
                              env=self.env, capture_output=True, text=True,
                              timeout=BLOCK_TIMEOUT_S)
        if proc.returncode != 0:
            raise DocBlockFailed(f"{block.where}: the shell block exits {proc.returncode}"
                                 f"\n---\n{code}\n--- stdout:\n{proc.stdout[-3000:]}"
                                 f"\n--- stderr:\n{proc.stderr[-3000:]}")


def _commands(code: str) -> list[str]:
    """The block's command lines (backslash continuations joined)."""
    out: list[str] = []
    carry = ""
    for raw in code.splitlines():
        if raw.rstrip().endswith("\\"):
            carry += raw.rstrip()[:-1] + " "
            continue
        out.append(carry + raw)
        carry = ""
    if carry:
        out.append(carry)
    return [ln for ln in out if ln.strip()]


_SHELL_SYNTAX = re.compile(r"[|&;<>`$]")


def _plain_caslake(line: str) -> list[str] | None:
    """``line``'s words when it is one plain ``caslake`` command, else None."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        return None
    if not words or words[0] != "caslake":
        return None
    code = line.split(" #", 1)[0]
    unquoted = re.sub(r"'[^']*'|\"[^\"]*\"", "", code)
    return None if _SHELL_SYNTAX.search(unquoted) else words[1:]


def shell_env(workdir: Path) -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "HOME": str(workdir), "PYTHONPATH": str(ROOT), "LANG": "C.UTF-8",
            "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1"}


def run_file(path: Path, workdir: Path, fixture: Callable[[str], Any], *,
             spark: bool = False) -> list[Block]:
    """Run the blocks of ``path`` (skips left out): those not marked spark, or with
    ``spark`` only those (in a namespace of their own); returns the blocks that ran."""
    runner = Runner(workdir, fixture, shell_env(workdir))
    ran = []
    old = os.getcwd()
    os.chdir(workdir)
    try:
        for block in parse(path):
            if block.mark.startswith("skip") or (block.mark == "spark") != spark:
                continue
            runner.run(block)
            ran.append(block)
    finally:
        os.chdir(old)
    return ran


def _spark_session() -> Any:
    pytest.importorskip("pyspark")
    from tests.spark.helpers import local_spark

    return local_spark()


def _fixture(request: pytest.FixtureRequest) -> Callable[[str], Any]:
    def get(name: str) -> Any:
        return _spark_session() if name == "spark" else request.getfixturevalue(name)
    return get


RUNNABLE = [p for p in DOCS if any(b.mark != "spark" for b in parse(p))]
WITH_SPARK = [p for p in DOCS if any(b.mark == "spark" for b in parse(p))]


@pytest.mark.parametrize("path", RUNNABLE, ids=[p.name for p in RUNNABLE])
def test_every_block_of_the_file_runs(path: Path, tmp_path: Path,
                                      request: pytest.FixtureRequest,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in shell_env(tmp_path).items():
        if k.startswith("AWS_"):
            monkeypatch.setenv(k, v)
    ran = run_file(path, tmp_path, _fixture(request))
    assert ran, f"{path.name}: no block ran"


def test_shell_lines_run_in_process_only_when_plain() -> None:
    assert _plain_caslake("caslake scan /tmp/t --where \"a = 'x|y'\"  # a | b") == [
        "scan", "/tmp/t", "--where", "a = 'x|y'"]
    assert _plain_caslake("caslake scan /tmp/t --json | head -1") is None
    assert _plain_caslake("caslake scan /tmp/t > out.txt") is None
    assert _plain_caslake("printf 'x' > f.csv") is None
    assert _commands("caslake a \\\n  --b c\n\nd\n") == ["caslake a    --b c", "d"]


@pytest.mark.parametrize("path", WITH_SPARK, ids=[p.name for p in WITH_SPARK])
def test_every_spark_block_of_the_file_runs(path: Path, tmp_path: Path,
                                            request: pytest.FixtureRequest) -> None:
    """The ``spark`` blocks, with the tests' one local SparkSession (shared with
    tests/spark: its JVM start is paid once per test run)."""
    assert run_file(path, tmp_path, _fixture(request), spark=True)


def test_skips_are_few_and_each_has_a_reason() -> None:
    skips = [b for p in DOCS for b in parse(p) if b.mark.startswith("skip")]
    assert all(_SKIP.match(b.mark) for b in skips)
    assert len(skips) <= MAX_SKIPS, [f"{b.where}: {b.mark}" for b in skips]


def test_readme_opens_with_make_demo_and_make_test() -> None:
    first = parse(ROOT / "README.md")[0]
    commands = [ln.split("#")[0].strip() for ln in first.code.splitlines()]
    assert commands == ["make demo", "make test"]


# --- the runner itself fails on a wrong block ----------------------------------------

def _doc(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "doc.md"
    path.write_text(text)
    return path


def _fails(tmp_path: Path, text: str, pattern: str) -> Path:
    """Run a document that must fail with ``pattern``; returns its work directory."""
    work = tmp_path / "w"
    work.mkdir(exist_ok=True)
    with pytest.raises(DocBlockFailed, match=pattern):
        run_file(_doc(tmp_path, text), work, lambda name: None)
    return work


def test_a_wrong_python_block_fails_naming_its_line(tmp_path: Path) -> None:
    _fails(tmp_path, "# t\n\n```python\nx = 1\n```\n\ntext\n\n```python\n"
                     "import caslake\ncaslake.open_table('/tmp/nothing-here')\n```\n",
           r"doc\.md:9: the python block fails: TableNotFound")


def test_a_wrong_shell_block_fails(tmp_path: Path) -> None:
    work = _fails(tmp_path, "```bash\ncaslake create /tmp/t --schema 'id:int64'\n"
                            "caslake scan /tmp/t --where 'nope >'\necho never\n```\n",
                  r"doc\.md:1: `caslake scan .* --where 'nope >'` exits 1")
    assert (work / "t").exists()  # /tmp/ was the work directory
    _fails(tmp_path, "```sh\necho ok > f.txt\ncat missing.txt | wc -l\n```\n",
           r"doc\.md:1: the shell block exits 1")


def test_console_blocks_run_their_dollar_lines_and_skips_need_a_reason(tmp_path: Path) -> None:
    work = _fails(tmp_path, "```console\n$ caslake create /tmp/c --schema 'id:int64'\n"
                            "created ...\n$ false\n```\n", r"doc\.md:1: the shell block exits 1")
    assert (work / "c").exists()
    doc = _doc(tmp_path, "<!-- doc-test: skip (needs S3) -->\n```python\nraise SystemExit\n```\n"
                         "<!-- doc-test: skip -->\n```python\nx\n```\n")
    with pytest.raises(AssertionError, match="unknown doc-test mark 'skip'"):
        run_file(doc, work, lambda name: None)
    doc = _doc(tmp_path, "<!-- doc-test: skip (needs S3) -->\n```python\nraise SystemExit\n"
                         "```\n```python\ny = 2\n```\n")
    assert [b.line for b in run_file(doc, work, lambda name: None)] == [5]
