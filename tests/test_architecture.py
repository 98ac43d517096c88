"""The import graph of the package: acyclic, and never upward (docs/architecture.md).

Walks every module of ``caslake`` with ``ast`` and collects its imports of other
``caslake`` modules, including imports inside functions (a lazy import is
still a dependency; it only hides a cycle from the interpreter).  Imports under
``if TYPE_CHECKING:`` never run: they are exempt from the cycle check, but not
from the layer check (a lower layer must not even name a higher layer's types).
"""

from __future__ import annotations

import ast
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
    ("caslake.table",),
    ("caslake.maintenance", "caslake.dataset", "caslake.export"),
    ("caslake.api", "caslake"),  # the public facade and the package's re-exports
    ("caslake.spark", "caslake.cli", "caslake.cli_common", "caslake.cli_dataset",
     "caslake.cli_input", "caslake.cli_output"),
    ("caslake.demo", "caslake.spark.demo", "caslake.testing"),
]
# Packages of one layer that are peers: each stands on the layers below, never on
# another (maintenance, dataset and export are independent features).
PEERS = {"caslake.maintenance", "caslake.dataset", "caslake.export"}


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


def test_table_layer_never_imports_maintenance() -> None:
    assert not [e for e in graph() if e.source.startswith("caslake.table")
                and e.target.startswith("caslake.maintenance")]


# --- the checker itself must be able to fail -------------------------------------------


@pytest.mark.parametrize(("source", "text", "expect"), [
    ("caslake.store.base", "def f():\n    from caslake.table import commit\n", "up"),
    ("caslake.table.commit", "from caslake.maintenance.gc import GcReport\n", "up"),
    ("caslake.format.keys", "if TYPE_CHECKING:\n    from caslake.expr import Expr\n", "up"),
    ("caslake.maintenance.gc", "from caslake.dataset import x\n", "up"),
    ("caslake.table.scan", "from caslake.store.base import ObjectStore\n", "ok"),
    ("caslake.cli", "from caslake.maintenance.verify import verify_table\n", "ok"),
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
    lazy = [Edge("caslake.table.a", "caslake.table.b", 1, False),
            Edge("caslake.table.b", "caslake.table.a", 9, False)]
    assert cycles(lazy) == [["caslake.table.a", "caslake.table.b"]]
    typed = [lazy[0], Edge("caslake.table.b", "caslake.table.a", 9, True)]
    assert cycles(typed) == []
