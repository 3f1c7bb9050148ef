"""Imports inside the harness point one way: no module reaches back to one that imports it.

Read from the source with `ast`, so imports inside functions count too (that is how the
`harness.cli` <-> `harness.bench.cli` cycle used to hide).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from functools import cache
from pathlib import Path

import harness

HARNESS_DIR = Path(harness.__file__).resolve().parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(HARNESS_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache  # two tests read the same graph: the tree is parsed once
def _harness_imports() -> dict[str, frozenset[str]]:
    """module -> the harness modules it imports (anywhere in its body)."""
    modules = {_module_name(p): p for p in HARNESS_DIR.rglob("*.py")}
    graph: dict[str, frozenset[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets.add(node.module)
                targets.update(f"{node.module}.{alias.name}" for alias in node.names)  # `from pkg import module`
        graph[name] = frozenset(t for t in targets if t in modules and t != name)
    return graph


def _cycle(graph: Mapping[str, AbstractSet[str]]) -> list[str]:
    """One import cycle as [a, b, ..., a], or [] if there is none."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str]:
        if module in path:
            return [*path[path.index(module):], module]
        if module in done:
            return []
        for target in sorted(graph[module]):
            found = visit(target, [*path, module])
            if found:
                return found
        done.add(module)
        return []

    for module in sorted(graph):
        found = visit(module, [])
        if found:
            return found
    return []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) == []


def test_harness_modules_import_each_other_without_cycles():
    graph = _harness_imports()
    assert "harness.bench.cli" in graph["harness.cli"]  # the top-level app mounts the bench app
    assert _cycle(graph) == []


def test_no_command_module_imports_the_top_level_app():
    graph = _harness_imports()
    importers = sorted(module for module, targets in graph.items() if "harness.cli" in targets)
    assert importers == []
