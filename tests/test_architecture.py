"""The import graph of the package: acyclic, and never upward (docs/architecture.md).

Walks every module of ``caslake`` with ``ast`` and collects its imports of other
``caslake`` modules, including imports inside functions (a lazy import is
still a dependency; it only hides a cycle from the interpreter).  Imports under
``if TYPE_CHECKING:`` never run: they are exempt from the cycle check, but not
from the layer check (a lower layer must not even name a higher layer's types).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "caslake"

# Bottom to top.  A module may import modules of its own layer (no cycles) and
# of layers below it, never of a layer above.  Longest prefix wins, so
# ``caslake.spark.demo`` is placed apart from ``caslake.spark``.
LAYERS: list[tuple[str, ...]] = [
    ("caslake.errors",),
    ("caslake.store",),
    ("caslake.format",),
    ("caslake.expr",),
    ("caslake.core",),  # the commit core and the read path
    ("caslake.ops",),  # one module per operation
    ("caslake.dataset", "caslake.export"),
    ("caslake.table", "caslake.api", "caslake"),  # the public facade and the re-exports
    ("caslake.spark", "caslake.cli"),
    ("caslake.demo", "caslake.spark.demo", "caslake.testing"),
]
# Packages of one layer that are peers: each stands on the layers below, never on
# another (the dataset store and the exporters are independent features).
PEERS = {"caslake.dataset", "caslake.export"}
# The layers above the core reach it through its one door, ``caslake.core``.
CORE = "caslake.core"
ABOVE_CORE = ("caslake.ops", "caslake.dataset", "caslake.export", "caslake.spark", "caslake.cli",
              "caslake.table", "caslake.api", "caslake.demo", "caslake.testing")
DOCS = ROOT.parent / "docs"


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    type_only: bool

    def __str__(self) -> str:
        kind = " (TYPE_CHECKING)" if self.type_only else ""
        return f"{self.source}:{self.line} -> {self.target}{kind}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, type_only: bool = False) -> Iterator[tuple[ast.stmt, bool]]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, type_only
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), True)
            for child in node.orelse:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), type_only)
        else:
            yield from _imports(node, type_only)


def edges_of(name: str, path: Path, modules: dict[str, Path]) -> list[Edge]:
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: list[Edge] = []
    for node, type_only in _imports(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            assert isinstance(node, ast.ImportFrom)
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                targets.append(sub if sub in modules else base)
        for target in targets:
            if target.split(".")[0] != "caslake" or target == name:
                continue
            while target not in modules:  # `import caslake.x.y.attr`-style references
                target = target.rpartition(".")[0]
            if target != name:
                out.append(Edge(name, target, node.lineno, type_only))
    return out


def layer_of(module: str) -> int:
    best, rank = -1, -1
    for i, layer in enumerate(LAYERS):
        for prefix in layer:
            # "caslake" is the package's own __init__ only, not everything under it.
            inside = module.startswith(prefix + ".") and prefix != "caslake"
            if (module == prefix or inside) and len(prefix) > best:
                best, rank = len(prefix), i
    if rank < 0:
        raise AssertionError(f"module {module} is in no layer: place it in LAYERS")
    return rank


def peer_of(module: str) -> str | None:
    return next((p for p in PEERS if module == p or module.startswith(p + ".")), None)


def graph() -> list[Edge]:
    modules = all_modules()
    return [e for name, path in modules.items() for e in edges_of(name, path, modules)]


def upward(edges: list[Edge]) -> list[Edge]:
    bad = []
    for e in edges:
        src, dst = layer_of(e.source), layer_of(e.target)
        a, b = peer_of(e.source), peer_of(e.target)
        if dst > src or (dst == src and a is not None and b is not None and a != b):
            bad.append(e)
    return bad


def cycles(edges: list[Edge]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    succ: dict[str, set[str]] = {}
    for e in edges:
        if not e.type_only:
            succ.setdefault(e.source, set()).add(e.target)
            succ.setdefault(e.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(succ[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(succ):
        if v not in index:
            visit(v)
    return out


def test_every_module_has_a_layer() -> None:
    for name in all_modules():
        layer_of(name)


def test_no_import_from_a_lower_layer_into_a_higher_one() -> None:
    bad = upward(graph())
    names = [" / ".join(layer) for layer in LAYERS]
    assert not bad, ("upward imports (layers, bottom to top: " + " < ".join(names) + "):\n"
                     + "\n".join(map(str, bad)))


def test_no_import_cycles() -> None:
    found = cycles(graph())
    assert not found, "import cycles (lazy imports count):\n" + "\n".join(
        " <-> ".join(c) for c in found)


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def core_imports_above(edges: list[Edge]) -> list[Edge]:
    """Edges from the core to anything above it (ops, dataset, export, spark, cli,
    the facade), type-only ones included."""
    return [e for e in edges if _inside(e.source, CORE) and not _inside(e.target, CORE)
            and layer_of(e.target) > layer_of(CORE)]


def past_the_core_door(edges: list[Edge]) -> list[Edge]:
    """Edges from a layer above the core to one of the core's modules instead of
    ``caslake.core`` itself (type-only ones included)."""
    return [e for e in edges if _inside(e.target, CORE) and e.target != CORE
            and any(_inside(e.source, p) for p in ABOVE_CORE)]


def test_the_core_imports_nothing_above_it() -> None:
    bad = core_imports_above(graph())
    assert not bad, "the core imports a layer above it:\n" + "\n".join(map(str, bad))


def test_layers_above_the_core_import_only_caslake_core() -> None:
    bad = past_the_core_door(graph())
    assert not bad, ("import `caslake.core`, not its modules (add the name to "
                     "caslake/core/__init__.py):\n" + "\n".join(map(str, bad)))


_PATH = re.compile(r"`((?:\w+/)*\w+\.py|(?:\w+/)+)`")  # `core/commit.py`, `ops/`, `table.py`
_MODULE_NAME = re.compile(r"`(caslake(?:\.\w+)+)`")


def _path_exists(path: str) -> bool:
    """A path as the docs write it: from the repository root or from ``caslake/``;
    a bare file name (``refs.py``, in a row that names its package) anywhere in the
    package."""
    repo = ROOT.parent
    if (repo / path).exists() or (ROOT / path).exists():
        return True
    return "/" not in path and any(ROOT.rglob(path))


def missing_modules(text: str) -> list[str]:
    """The ``caslake/...py`` paths, packages (``ops/``) and ``caslake.x.y`` names a
    document puts in backticks that name nothing in the tree."""
    modules = all_modules()
    bad = [p for p in sorted(set(_PATH.findall(text))) if not _path_exists(p)]
    for name in sorted(set(_MODULE_NAME.findall(text))):
        # a module, or an attribute of one (``caslake.core.run_operation``)
        if name not in modules and name.rpartition(".")[0] not in modules:
            bad.append(name)
    return bad


def test_architecture_doc_names_only_modules_that_exist() -> None:
    bad = missing_modules((DOCS / "architecture.md").read_text())
    assert not bad, "docs/architecture.md names modules that do not exist: " + ", ".join(bad)


def test_the_doc_check_catches_a_module_that_does_not_exist() -> None:
    assert missing_modules("see `core/commit.py`, `caslake.core.run_operation`, `ops/`, "
                           "`refs.py`, `caslake/table.py`, `tests/test_architecture.py`") == []
    assert missing_modules("see `table/commit.py`") == ["table/commit.py"]
    assert missing_modules("see `maintenance/`") == ["maintenance/"]
    assert missing_modules("see `segment_cache.py`") == ["segment_cache.py"]
    assert missing_modules("see `caslake.maintenance.gc`") == ["caslake.maintenance.gc"]


# --- the checker itself must be able to fail -------------------------------------------


@pytest.mark.parametrize(("source", "text", "expect"), [
    ("caslake.store.base", "def f():\n    from caslake.core import commit\n", "up"),
    ("caslake.core.commit", "from caslake.ops.gc import GcReport\n", "up"),
    ("caslake.format.keys", "if TYPE_CHECKING:\n    from caslake.expr import Expr\n", "up"),
    ("caslake.ops.gc", "from caslake.dataset import x\n", "up"),
    ("caslake.export.delta", "from caslake.dataset import x\n", "up"),
    ("caslake.core.read.scan", "from caslake.store.base import ObjectStore\n", "ok"),
    ("caslake.cli.main", "from caslake.ops.verify import verify_table\n", "ok"),
])
def test_the_layer_check_catches_an_upward_import(tmp_path: Path, source: str, text: str,
                                                  expect: str) -> None:
    path = tmp_path / "m.py"
    path.write_text(text)
    modules = {**all_modules(), "caslake.dataset.x": path}
    edges = edges_of(source, path, modules)
    assert edges, "the import was not seen"
    assert bool(upward(edges)) == (expect == "up")


def test_the_cycle_check_catches_a_lazy_cycle_but_not_a_type_only_one() -> None:
    lazy = [Edge("caslake.core.a", "caslake.core.b", 1, False),
            Edge("caslake.core.b", "caslake.core.a", 9, False)]
    assert cycles(lazy) == [["caslake.core.a", "caslake.core.b"]]
    typed = [lazy[0], Edge("caslake.core.b", "caslake.core.a", 9, True)]
    assert cycles(typed) == []


@pytest.mark.parametrize(("source", "text", "rule"), [
    ("caslake.core.runner", "from caslake.ops.write import write_data_files\n", "core"),
    ("caslake.core.commit", "if TYPE_CHECKING:\n    from caslake.spark import x\n", "core"),
    ("caslake.ops.gc", "from caslake.core.runner import run_operation\n", "door"),
    ("caslake.spark.dml", "from caslake.core.read.scan import Scan\n", "door"),
    ("caslake.ops.gc", "from caslake.core import run_operation\n", "ok"),
    ("caslake.core.runner", "from caslake.core.commit import settle\n", "ok"),
])
def test_the_core_rules_catch_a_wrong_import(tmp_path: Path, source: str, text: str,
                                             rule: str) -> None:
    path = tmp_path / "m.py"
    path.write_text(text)
    modules = {**all_modules(), "caslake.spark.x": path}
    edges = edges_of(source, path, modules)
    assert edges, "the import was not seen"
    assert bool(core_imports_above(edges)) == (rule == "core")
    assert bool(past_the_core_door(edges)) == (rule == "door")


# --- conditional writes: one module ----------------------------------------------------

# A create-only or compare-and-swap put, however it is spelled: the store's put modes,
# the HTTP headers, boto3's parameters, obstore's mode strings.
_CONDITIONAL = re.compile(r"If-?None-?Match|If-?Match|PutMode\.CREATE|"
                          r"""mode\s*=\s*["'](?:create|update)["']""", re.IGNORECASE)
# The store layer implements the conditions; the pointer module is the one caller.
# The store, the pointer module -- and the test harness's fault proxy, which sends no
# put of its own: it reads the conditional headers of requests passing through it
# (to cap compare-and-swaps per key, as a store does).
_CONDITIONAL_ALLOWED = ("caslake/store/", "caslake/core/pointer.py",
                        "caslake/testing/wire_faults.py")


def conditional_writes(path: str, text: str) -> list[str]:
    """``path:line: text`` of each line of ``text`` that names a conditional put,
    unless ``path`` is allowed to."""
    if path.startswith(_CONDITIONAL_ALLOWED):
        return []
    return [f"{path}:{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1)
            if _CONDITIONAL.search(line)]


def test_conditional_writes_go_through_core_pointer() -> None:
    bad = [hit for p in sorted(ROOT.rglob("*.py"))
           for hit in conditional_writes(p.relative_to(ROOT.parent).as_posix(), p.read_text())]
    assert not bad, ("a conditional put outside caslake/store/ and caslake/core/pointer.py "
                     "(use put_new, create_record or swap_record):\n" + "\n".join(bad))


@pytest.mark.parametrize(("path", "line", "flagged"), [
    ("caslake/ops/refs.py", "io.store.put(key, data, mode=IfMatch(etag))", True),
    ("caslake/ops/write.py", "store.put_file(key, p, mode=PutMode.CREATE)", True),
    ("caslake/dataset/store.py", "# swap it with If-Match on the noted ETag", True),
    ("caslake/export/result.py", "client.put_object(Key=k, Body=b, IfNoneMatch='*')", True),
    ("caslake/core/commit.py", 'obstore.put(s, k, b, mode="create")', True),
    ("caslake/core/commit.py", "put_new(store, key, manifest.to_bytes())", False),
    ("caslake/export/result.py", "self.store.put(key, data, mode=PutMode.OVERWRITE)", False),
    ("caslake/core/pointer.py", "store.put(key, data, mode=IfMatch(etag))", False),
    ("caslake/store/s3.py", "kwargs['IfNoneMatch'] = '*'", False),
    ("caslake/testing/wire_faults.py", 'headers.get("If-Match")', False),
    ("caslake/testing/stress.py", 'headers.get("If-Match")', True),
])
def test_the_conditional_write_check_catches_a_stray_put(path: str, line: str,
                                                         flagged: bool) -> None:
    assert bool(conditional_writes(path, line)) == flagged
