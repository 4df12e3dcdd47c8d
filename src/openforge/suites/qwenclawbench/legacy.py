"""PinchBench-style single task files (``task_*.md``), each loaded on its own.

YAML frontmatter (``id``, ``timeout_seconds``, ``grading_type``, ``workspace_files: [{source,
dest}]``), a ``## Prompt`` section and an ``## Automated Checks`` python block defining
``grade(transcript, workspace_path) -> dict`` of criterion scores, run in the sandbox; the
reward is their mean. ``llm_judge`` tasks are refused (no judge). Checkouts of QwenClawBench
itself, graded by its own code on the host: ``loader.py``.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from openforge.suites.grading import GRADER_WRAPPER, check_id
from openforge.suites.qwenclawbench.loader import frontmatter_task
from openforge.tasks.model import VERIFY_DIR, Task, TaskError, inside
from openforge.tasks.native import number

__all__ = ["load_qwenclawbench"]


_FRONT = re.compile(r"\A---\s*\n(.*?)\n---\s*\n(.*)\Z", re.S)
_SECTION = re.compile(r"^##\s+(.+?)\s*$", re.M)
_CODE = re.compile(r"```python\s*\n(.*?)```", re.S)


def load_qwenclawbench(file: Path, suite_root: Path) -> Task:
    """Load one QwenClawBench/PinchBench ``task_*.md`` file."""
    text = file.read_text(encoding="utf-8")
    m = _FRONT.match(text)
    if not m:
        raise TaskError(file, "(frontmatter)", "missing the leading --- YAML block ---")
    try:
        front = yaml.safe_load(m.group(1))
    except yaml.YAMLError as exc:
        raise TaskError(file, "(frontmatter)", f"not valid YAML: {exc}") from exc
    if not isinstance(front, dict):
        raise TaskError(file, "(frontmatter)", "must be a mapping")
    task_id = check_id(file, "id", front.get("id", file.stem))
    parts = _SECTION.split(m.group(2))
    sections = {parts[i].lower(): parts[i + 1] for i in range(1, len(parts) - 1, 2)}
    prompt = sections.get("prompt", "").strip().strip("-").strip()
    if not prompt:
        raise TaskError(file, "## Prompt", "missing or empty section")
    grading = front.get("grading_type", "automated")
    if grading == "llm_judge":
        raise TaskError(file, "grading_type", "llm_judge tasks need a judge; not supported")
    code = _CODE.search(sections.get("automated checks", ""))
    if not code:
        raise TaskError(file, "## Automated Checks", "needs a ```python block defining grade()")
    workspace: dict[str, Path] = {}
    entries = front.get("workspace_files") or []
    if not isinstance(entries, list):
        raise TaskError(file, "workspace_files", "must be a list of {source, dest}")
    for i, entry in enumerate(entries):
        where = f"workspace_files[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("source"), str):
            raise TaskError(file, where, "must be a mapping with source and dest")
        dest = entry.get("dest", Path(entry["source"]).name)
        inside(suite_root, str(dest), file, f"{where}.dest")  # dest must stay relative
        src = _find_source(file, suite_root, entry["source"], where)
        workspace[str(dest)] = src
    timeout = number(file, front, "timeout_seconds", 300.0) or 300.0
    task = frontmatter_task(file, front, task_id, prompt, timeout)
    task.tags = tuple(str(t) for t in [front.get("category")] if t)
    task.workspace = workspace
    task.verify_extra = {
        "grader.py": code.group(1).encode(),
        "run.py": (GRADER_WRAPPER % "*([[], ws][-n:] if n == 2 else [ws])").encode(),
    }
    task.verify_command = f"python3 {VERIFY_DIR}/run.py"
    return task


def _find_source(file: Path, suite_root: Path, source: str, where: str) -> Path:
    for base in (file.parent, file.parent.parent, suite_root):
        if not base.resolve().is_relative_to(suite_root.resolve()):
            continue
        path = inside(base, source, file, f"{where}.source")
        if not path.is_relative_to(suite_root.resolve()):
            raise TaskError(file, f"{where}.source", "leads outside the suite directory")
        if path.is_file():
            return path
    raise TaskError(file, f"{where}.source", f"file {source!r} not found")
