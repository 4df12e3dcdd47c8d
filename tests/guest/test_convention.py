"""The guest convention checked on the source: each program imports only the standard
library, ``openforge.guest.common`` and its declared packages (so its bundle is all it needs);
sandbox paths are named, never spelled: ``/home/sandbox`` and ``/workspace`` appear in src
only in guest/common.py, so host code and guests cannot drift apart on where things are."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from openforge.guest import HOST_CHILDREN, LIBRARIES, PLAIN, PROGRAMS, THIRD_PARTY, source

SRC = Path(__file__).resolve().parents[2] / "src" / "openforge"
PATH = re.compile(r"(?<![\w.])/(?:home/sandbox|workspace)(?![\w-])")
COMMON = "openforge.guest.common"


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.update(
                f"{node.module}.{a.name}" if node.module == "openforge.guest" else node.module
                for a in node.names
            )
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_programs_import_the_stdlib_common_and_their_own_packages_only() -> None:
    for name in (*PROGRAMS, *LIBRARIES, *HOST_CHILDREN):
        allowed = THIRD_PARTY.get(name, frozenset())
        for module in _imports(source(name)):
            if module == COMMON and name not in PLAIN:
                continue
            top = module.split(".")[0]
            assert top in sys.stdlib_module_names or top in allowed, (name, module)


def test_the_guest_programs_share_common() -> None:
    # What they have in common is written once: the model client, the step loop's errors,
    # the JSON server, the judge guard.
    users = {n for n in (*PROGRAMS, *HOST_CHILDREN) if COMMON in _imports(source(n))}
    assert users >= {
        "claw_agent", "browser_agent", "computer_agent", "browser_use_runner",
        "browser_server", "desktop_server", "webapps_server", "osworld_eval",
        "claweval_grade", "qwenclawbench_grade",
    }  # fmt: skip


def _docstrings(tree: ast.AST) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            ids.add(id(first.value))
    return ids


def test_sandbox_paths_are_spelled_only_in_guest_common() -> None:
    found = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        if {"claw-mini", "claw_mini"} & set(rel.parts) or rel == Path("guest/common.py"):
            continue
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            text = node.value if isinstance(node, ast.Constant) else None
            if isinstance(text, str) and id(node) not in docs and PATH.search(text):
                found.append(f"{rel}:{node.lineno}: {text[:60]!r}")
    assert found == []
