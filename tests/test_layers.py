"""The layering DESIGN.md draws, checked on the source: no package imports one above it.

Imports are read with ``ast`` (module level and inside functions alike), so a lazy import
cannot hide a dependency that points the wrong way.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "openforge"

# (package, packages it must never import), as DESIGN.md states them.
FORBIDDEN = {
    "dialects": {"gateway", "engines", "store", "rendering"},
    "rendering": {"gateway", "dialects", "engines", "store"},
    "engines": {"gateway"},  # dialects only through each format's client side (below)
    "rollouts": {"gateway"},  # the orchestrator talks to the gateway over HTTP
    "store": {"gateway", "traces", "training"},
    "training": {"store"},  # training reads calls through traces/
    # The task model, native format and episode know no benchmark; suites/ builds on them.
    "tasks": {"suites", "rollouts", "harnesses", "gateway"},
    "suites": {"rollouts", "gateway", "training", "harnesses"},
    "environments": {"suites", "tasks", "harnesses"},
}
# What runs inside a sandbox imports no other package of OpenForge (guest/__init__.py).
FORBIDDEN["guest"] = {
    p.stem
    for p in SRC.iterdir()
    if (p.is_dir() or p.suffix == ".py") and p.stem not in {"guest", "__init__", "__pycache__"}
}


def _imports() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).parts
        if rel[:3] == ("suites", "claw_mini", "tasks"):
            continue  # task data, run inside sandboxes
        package = rel[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] == "openforge" and len(parts) > 1 and parts[1] != package:
                    edges[package].add(parts[1])
    return edges


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle between packages, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt] if nxt in path else [*path, nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_no_import_cycle_between_packages() -> None:
    edges = _imports()
    assert _cycle(edges) is None, " -> ".join(_cycle(edges) or [])


def test_no_package_imports_one_above_it() -> None:
    edges = _imports()
    wrong = {p: sorted(edges[p] & banned) for p, banned in FORBIDDEN.items() if edges[p] & banned}
    assert not wrong, wrong


def _imported_modules(package: str) -> set[str]:
    """Every ``openforge.*`` module named by an import in ``package``."""
    found: set[str] = set()
    for path in (SRC / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
    return {name for name in found if name.startswith("openforge.")}


def test_engines_reach_dialects_only_through_client_modules() -> None:
    # An engine may speak a wire format as a client (a teacher behind a commercial API),
    # never reach into what the gateway serves: parsing requests, rendering answers.
    dialects = {m for m in _imported_modules("engines") if m.startswith("openforge.dialects")}
    assert dialects, "the upstream engine's clients should come from dialects"
    wrong = {
        m
        for m in dialects
        if m != "openforge.dialects.client" and not (m.endswith(".client") and m.count(".") == 3)
    }
    assert not wrong, sorted(wrong)


def test_nothing_imports_the_cli() -> None:
    assert not [p for p, deps in _imports().items() if "cli" in deps]


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_imports() -> dict[str, set[str]]:
    """Module -> the ``openforge`` modules it imports (anywhere in it, relative imports
    resolved; ``from pkg import name`` counts ``pkg.name`` when that is a module). A module's
    import of a package above it is left out: Python runs the package first either way."""
    paths = {
        _module_name(p): p
        for p in SRC.rglob("*.py")
        if p.relative_to(SRC).parts[:3] != ("suites", "claw_mini", "tasks")
    }
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in paths.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                base = ".".join(here[: len(here) - node.level + 1]) if node.level else ""
                module = ".".join(x for x in (base, node.module or "") if x)
                targets = [module, *(f"{module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            edges[name] |= {
                t for t in targets if t in paths and t != name and not name.startswith(t + ".")
            }
    return edges


def test_no_import_cycle_between_modules() -> None:
    # A cycle between modules works only while import order happens to suit it, and a lazy
    # import inside a function hides one; an import under ``if TYPE_CHECKING:`` hides one from
    # the interpreter but not from a reader (the two modules still lean on each other): all
    # three count here. Break one by moving what both sides name to a module below both.
    edges = _module_imports()
    assert len(edges) > 200, "the module graph was not read"
    assert _cycle(edges) is None, " -> ".join(_cycle(edges) or [])
