"""QwenClawBench from the user's checkout of ``SKYLENAGE-AI/QwenClawBench``, graded by its code.

Layout (``scripts/benchmark.py``): ``data/<dataset>/tasks/task_*.md`` and
``data/<dataset>/assets/<task_id>/…`` (or ``tasks/`` and ``assets/`` at the root);
``scripts/lib_tasks.py`` parses a task file, ``scripts/lib_grading.py`` grades it.

A task file is YAML frontmatter (``id``, ``name``, ``category``, ``grading_type``
automated | llm_judge | hybrid, ``grading_weights``, ``timeout_seconds`` default 120,
``workspace_files`` entries ``{source, dest}`` found under ``assets/<task_id>/`` then
``assets/``, or inline ``{path, content}``) and ``## `` sections (``Prompt``, ``Expected
Behavior``, ``Grading Criteria``, ``Automated Checks`` with a ```` ```python ```` block whose
fence closes only at the start of a line, ``LLM Judge Rubric``). This loader reads the same
fields the same way, so a task it accepts is one the benchmark runs, and says which file and
field is wrong otherwise. Each task is graded by the benchmark's own code (``grader.py``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from openforge.suites.qwenclawbench.grader import QwenClawBenchGrader
from openforge.tasks.model import Task, TaskError, TaskWarning, inside, unknown_keys
from openforge.tasks.native import ID_RE

__all__ = ["find_checkout", "load_qwenclawbench_checkout"]

GRADING_TYPES = ("automated", "llm_judge", "hybrid")
# The frontmatter lib_tasks.py reads, and the descriptive fields the published tasks carry
# (read by nothing, the benchmark's own runner included); any other key is named as a warning.
FRONTMATTER = (
    "id", "name", "category", "grading_type", "timeout_seconds", "workspace_files",
    "grading_weights", "subcategory", "difficulty", "input_modality", "external_dependency",
    "verification_method", "skill_creation",
)  # fmt: skip
# workspace_files entries: {source, dest} (lib_agent, lib_docker), inline {path, content}, and
# the descriptive role and description.
WORKSPACE_ENTRY = ("source", "dest", "path", "content", "role", "description")


def frontmatter_warnings(file: Path, meta: dict[str, Any]) -> list[TaskWarning]:
    """A task's unknown front-matter keys and ``workspace_files`` entry keys, named."""
    warnings = unknown_keys(file, meta, FRONTMATTER)
    entries = meta.get("workspace_files")
    for i, entry in enumerate(entries if isinstance(entries, list) else []):
        warnings += unknown_keys(file, entry, WORKSPACE_ENTRY, f"workspace_files[{i}].")
    return warnings


def frontmatter_task(
    file: Path, meta: dict[str, Any], task_id: str, prompt: str, timeout_s: float
) -> Task:
    """The Task either layout (this one, or ``legacy.py``'s) makes of a task file: its id,
    prompt, timeout and front-matter warnings; the caller adds what its layout grades by."""
    return Task(
        id=task_id,
        instruction=prompt,
        path=file,
        format="qwenclawbench",
        timeout_s=timeout_s,
        warnings=tuple(frontmatter_warnings(file, meta)),
    )


_LIB = ("scripts", "lib_grading.py")
# lib_tasks.py's own expressions: the frontmatter, tracing-only fields it strips, sections,
# and lib_grading.py's code block (closed only by a fence at the start of a line).
_FRONT = re.compile(r"^---\s*\n(.*?)\n---\s*\n(.*)$", re.S)
_SOURCE_QUERY = re.compile(r"^source_query:\s*.*?(?=\n\w+:\s|\n---|\Z)", re.M | re.S)
_SOURCE_LINE = re.compile(r"^source_line_number:.*$", re.M)
_HEADER = re.compile(r"^##\s+(.+)$")
_CODE = re.compile(r"```python\s*\n(.*?)\n\s*```", re.S)


def find_checkout(path: Path) -> tuple[Path, Path, Path]:
    """``(checkout root, tasks dir, assets dir)`` for a checkout, a dataset dir, its tasks dir
    or one task file in it."""
    path = path.resolve()
    if path.is_file():
        if not path.name.endswith(".md"):
            raise TaskError(path, "(layout)", "not a QwenClawBench task file (task_*.md)")
        path = path.parent
    candidates = [path, path.parent, path.parent.parent, path.parent.parent.parent]
    root = next((c for c in candidates if c.joinpath(*_LIB).is_file()), None)
    if root is None:
        raise TaskError(
            path / "/".join(_LIB),
            "(layout)",
            "not a QwenClawBench checkout: expected scripts/lib_grading.py at its root "
            "(SKYLENAGE-AI/QwenClawBench)",
        )
    if path.name == "tasks" and path.is_dir():
        tasks = path
    elif (path / "tasks").is_dir() and path != root:
        tasks = path / "tasks"
    else:
        datasets = sorted(d for d in (root / "data").glob("*/tasks") if d.is_dir())
        if (root / "tasks").is_dir():
            tasks = root / "tasks"
        elif len(datasets) == 1:
            tasks = datasets[0]
        else:
            names = ", ".join(d.parent.name for d in datasets) or "none"
            raise TaskError(
                root / "data",
                "(layout)",
                f"expected one data/<dataset>/tasks directory (found: {names}); "
                "name the dataset directory",
            )
    return root, tasks, tasks.parent / "assets"


def _sections(body: str) -> dict[str, str]:
    out: dict[str, str] = {}
    current: str | None = None
    lines: list[str] = []
    for line in body.split("\n"):
        m = _HEADER.match(line)
        if m:
            if current:
                out[current] = "\n".join(lines).strip()
            current, lines = m.group(1), []
        elif current:
            lines.append(line)
    if current:
        out[current] = "\n".join(lines).strip()
    return out


def _front(file: Path, text: str) -> tuple[dict[str, Any], str]:
    m = _FRONT.match(text)
    if not m:
        raise TaskError(file, "(frontmatter)", "missing the leading --- YAML block ---")
    raw = _SOURCE_LINE.sub("", _SOURCE_QUERY.sub("", m.group(1)))
    try:
        meta = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise TaskError(file, "(frontmatter)", f"not valid YAML: {exc}") from exc
    if not isinstance(meta, dict):
        raise TaskError(file, "(frontmatter)", "must be a YAML mapping")
    return meta, m.group(2)


def _workspace(
    file: Path, meta: dict[str, Any], task_id: str, assets: list[Path]
) -> tuple[dict[str, Path], dict[str, bytes]]:
    entries = meta.get("workspace_files") or []
    if not isinstance(entries, list):
        raise TaskError(file, "workspace_files", "must be a list")
    files: dict[str, Path] = {}
    inline: dict[str, bytes] = {}
    for i, e in enumerate(entries):
        where = f"workspace_files[{i}]"
        if not isinstance(e, dict):
            raise TaskError(file, where, "must be a mapping {source, dest} or {path, content}")
        if "content" in e:
            if not isinstance(e.get("path"), str) or not isinstance(e["content"], str):
                raise TaskError(file, where, "an inline entry needs string path and content")
            inside(file.parent, e["path"], file, f"{where}.path")
            inline[e["path"]] = e["content"].encode()
            continue
        src, dest = e.get("source"), e.get("dest")
        if not isinstance(src, str) or not isinstance(dest, str):
            raise TaskError(file, where, "needs string source and dest")
        inside(file.parent, dest, file, f"{where}.dest")
        found = None
        for base in assets:
            for cand in (base / task_id, base):
                path = inside(cand, src, file, f"{where}.source") if cand.is_dir() else None
                if path is not None and path.exists():
                    found = path
                    break
            if found:
                break
        if found is None:
            looked = " or ".join(str(b / task_id / src) for b in assets)
            raise TaskError(
                file, f"{where}.source", f"asset {src!r} not found (looked in {looked})"
            )
        if found.is_dir():
            for p in sorted(found.rglob("*")):
                if p.is_file():
                    files[f"{dest.rstrip('/')}/{p.relative_to(found).as_posix()}"] = p
        else:
            files[dest] = found
    return files, inline


def _load_one(file: Path, root: Path, tasks_dir: Path, assets: list[Path]) -> Task:
    meta, body = _front(file, file.read_text(encoding="utf-8"))
    task_id = meta.get("id")
    if not isinstance(task_id, str) or not ID_RE.match(task_id):
        raise TaskError(file, "id", f"must be a string of [A-Za-z0-9._/-], got {task_id!r}")
    sections = _sections(body)
    prompt = sections.get("Prompt", "").strip()
    if not prompt:
        raise TaskError(file, "## Prompt", "missing or empty section")
    grading = meta.get("grading_type", "automated")
    if grading not in GRADING_TYPES:
        raise TaskError(file, "grading_type", f"must be one of {', '.join(GRADING_TYPES)}")
    if grading != "llm_judge" and not _CODE.search(sections.get("Automated Checks", "")):
        raise TaskError(
            file, "## Automated Checks", "needs a ```python block defining grade(transcript, ws)"
        )
    weights = meta.get("grading_weights")
    if weights is not None and (
        not isinstance(weights, dict)
        or not all(isinstance(v, int | float) for v in weights.values())
    ):
        raise TaskError(file, "grading_weights", "must map automated/llm_judge to numbers")
    timeout = meta.get("timeout_seconds", 120)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise TaskError(file, "timeout_seconds", f"must be a positive number, got {timeout!r}")
    category = meta.get("category", "")
    files, inline = _workspace(file, meta, task_id, assets)
    task = frontmatter_task(file, meta, task_id, prompt, float(timeout))
    task.verify_timeout_s = 600.0
    task.tags = tuple(str(t) for t in (category, meta.get("subcategory")) if t)
    task.category = str(category or "")
    task.workspace, task.workspace_extra = files, inline
    task.grader = QwenClawBenchGrader(root, tasks_dir, file, str(grading))
    return task


def load_qwenclawbench_checkout(path: Path) -> tuple[list[Task], list[TaskError]]:
    """Every ``task_*.md`` of a checkout; the errors of those that did not load."""
    root, tasks_dir, assets = find_checkout(path)
    # One task file given: that task alone, with the checkout's assets and grader.
    files = [path.resolve()] if path.is_file() else sorted(tasks_dir.glob("task_*.md"))
    if not files:
        raise TaskError(tasks_dir, "(layout)", "no task_*.md files in the tasks directory")
    asset_dirs = [d for d in (assets, assets.parent / "generated_assets") if d.is_dir()]
    if not asset_dirs:
        asset_dirs = [assets]
    tasks: list[Task] = []
    errors: list[TaskError] = []
    for f in files:
        try:
            tasks.append(_load_one(f, root, tasks_dir, asset_dirs))
        except TaskError as exc:
            errors.append(exc)
        except (OSError, UnicodeDecodeError) as exc:
            errors.append(TaskError(f, "(file)", f"cannot be read: {exc}"))
    return tasks, errors
