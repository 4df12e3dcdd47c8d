"""Sandbox paths are named, never spelled: ``/home/sandbox`` and ``/workspace`` appear in src
only in guest/common.py, so host code and guests cannot drift apart on where things are."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "openforge"
PATH = re.compile(r"(?<![\w.])/(?:home/sandbox|workspace)(?![\w-])")
# Shipped as a plain verify file run by the task's python3, so it cannot import guest/common
# until it is bundled like the other guest programs.
PLAIN_VERIFY_FILES = {"osworld_eval.py", "evaluate.py"}


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
        if path.name in PLAIN_VERIFY_FILES and "osworld" in str(rel):
            continue
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            text = node.value if isinstance(node, ast.Constant) else None
            if isinstance(text, str) and id(node) not in docs and PATH.search(text):
                found.append(f"{rel}:{node.lineno}: {text[:60]!r}")
    assert found == []
