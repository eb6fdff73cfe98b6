"""No import cycles in wheelkiln, between modules or between top-level packages.

The graph is read from the source with ``ast``, so it sees every import: at module
level, inside functions (the lazy imports the per-TU path and the CLI rely on) and
under ``if TYPE_CHECKING``, relative and absolute. A cycle means two modules each need
the other to be understood; the shared noun belongs in a leaf module both import.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

import pytest

import wheelkiln

PACKAGE_DIR = Path(wheelkiln.__file__).resolve().parent
PACKAGE = PACKAGE_DIR.name


def module_names(package_dir: Path) -> dict[str, Path]:
    """``wheelkiln.shard.gate`` → its file, for every module and package under *package_dir*."""
    names: dict[str, Path] = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _origin(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module a ``from ... import`` reads from."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _owner(name: str, modules: Mapping[str, Path]) -> str | None:
    """The longest known module that *name* is or lies in."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool,
             modules: Mapping[str, Path]) -> set[str]:
    """The modules one import statement loads: ``from a.b import c`` is a.b.c when that
    is a module, else a.b (c is a name in it). Parent packages' ``__init__`` files are
    left out: they hold no imports of their own."""
    if isinstance(node, ast.Import):
        found = {_owner(alias.name, modules) for alias in node.names}
    else:
        origin = _origin(node, module, is_package)
        found = {
            f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in modules
            else _owner(origin, modules)
            for alias in node.names
        }
    return {target for target in found if target is not None and target != module}


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """Module → the modules of the same package it imports (anywhere in its file)."""
    modules = module_names(package_dir)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                graph[name] |= _targets(node, name, is_package, modules)
    return graph


def package_graph(graph: Mapping[str, set[str]]) -> dict[str, set[str]]:
    """Top-level package (or top-level module) → the other top-level ones it imports."""

    def top(module: str) -> str:
        parts = module.split(".")
        return parts[1] if len(parts) > 1 else parts[0]

    packages: dict[str, set[str]] = {}
    for module, targets in graph.items():
        edges = packages.setdefault(top(module), set())
        for target in targets:
            if top(target) != top(module):
                edges.add(top(target))
    return packages


def find_cycle(graph: Mapping[str, set[str]]) -> list[str] | None:
    """One cycle as ``[a, b, ..., a]``, or None when the graph has none (sorted walk, so
    the same graph always names the same cycle)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (cycle := visit(target)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def _edges(graph: Mapping[str, set[str]]) -> int:
    return sum(len(targets) for targets in graph.values())


def test_the_graph_sees_module_level_lazy_and_relative_imports(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.sub import b\n")
    (package / "sub" / "b.py").write_text("def f():\n    from . import c\n")
    (package / "sub" / "c.py").write_text("import pkg.d\nfrom ..e import name\n")
    (package / "d.py").write_text("import os\n")
    (package / "e.py").write_text("TYPE_CHECKING = False\nif TYPE_CHECKING:\n    from pkg import d\n")
    graph = import_graph(package)
    assert graph["pkg.a"] == {"pkg.sub.b"}
    assert graph["pkg.sub.b"] == {"pkg.sub.c"}
    assert graph["pkg.sub.c"] == {"pkg.d", "pkg.e"}
    assert graph["pkg.e"] == {"pkg.d"}
    assert graph["pkg.d"] == set()


def test_a_cycle_is_found_and_named(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "one").mkdir(parents=True)
    (package / "two").mkdir()
    for directory in (package, package / "one", package / "two"):
        (directory / "__init__.py").write_text("")
    (package / "one" / "gate.py").write_text("from pkg.two import wrapper\n")
    # the way back is a lazy import, as the wrapper's was
    (package / "two" / "wrapper.py").write_text("def run():\n    from pkg.one import gate\n")
    graph = import_graph(package)
    assert find_cycle(graph) == ["pkg.one.gate", "pkg.two.wrapper", "pkg.one.gate"]
    assert find_cycle(package_graph(graph)) == ["one", "two", "one"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_the_real_graph_is_not_empty() -> None:
    """A reader that saw no imports would find no cycle: check it sees the known ones."""
    graph = import_graph(PACKAGE_DIR)
    assert f"{PACKAGE}.shard.partition" in graph[f"{PACKAGE}.shard.wrapper"]
    assert f"{PACKAGE}.shard.diagnostics" in graph[f"{PACKAGE}.shard.wrapper"]  # lazy
    assert _edges(graph) > 100


@pytest.mark.parametrize("level", ["modules", "packages"])
def test_wheelkiln_has_no_import_cycle(level: str) -> None:
    graph = import_graph(PACKAGE_DIR)
    if level == "packages":
        graph = package_graph(graph)
    cycle = find_cycle(graph)
    assert cycle is None, (
        f"import cycle between {level}: {' -> '.join(cycle)}. Move the shared noun to a "
        "leaf module that both import."
    )
