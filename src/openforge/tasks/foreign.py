"""Loaders for other suites' task formats, each turned into a :class:`Task` with a verifier
that prints OpenForge's ``{"reward": …, "details": …}`` line (Harbor and Terminal-Bench:
``tasks/harbor.py``).

- **ClawEval** (``task.yaml`` + ``grader.py``): ``id``/``task_id``, ``prompt``/``instruction``,
  ``timeout``/``timeout_seconds``, ``tags``; ``workspace/`` (or ``fixtures/``) is the
  workspace; ``grader.py`` defines ``grade(workspace_path[, transcript])`` returning a float or
  a dict with ``score``/``reward``.
- **QwenClawBench / PinchBench** (``task_*.md``): YAML frontmatter (``id``, ``timeout_seconds``,
  ``grading_type``, ``workspace_files: [{source, dest}]``), a ``## Prompt`` section and an
  ``## Automated Checks`` python block defining ``grade(transcript, workspace_path) -> dict``
  of criterion scores; the reward is their mean. ``llm_judge`` tasks are refused (no judge).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from openforge.tasks.model import VERIFY_DIR, Task, TaskError, collect_dir, inside
from openforge.tasks.native import ID_RE, number, string_list

__all__ = ["load_claweval", "load_qwenclawbench"]

_GRADER_WRAPPER = """\
import importlib.util, inspect, json, os, sys
d = os.environ["OPENFORGE_VERIFY_DIR"]
spec = importlib.util.spec_from_file_location("grader", os.path.join(d, "grader.py"))
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
ws = os.getcwd()
n = len(inspect.signature(mod.grade).parameters)
out = mod.grade(%s)
if isinstance(out, dict):
    if "reward" in out or "score" in out:
        reward = float(out.get("reward", out.get("score")))
    else:
        vals = [float(v) for v in out.values()]
        reward = sum(vals) / len(vals) if vals else 0.0
else:
    reward = float(out)
print(json.dumps({"reward": reward, "details": out if isinstance(out, dict) else {}}))
"""


def _read_yaml(file: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise TaskError(file, "(yaml)", f"not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise TaskError(file, "(yaml)", "must be a mapping")
    return data


def _check_id(file: Path, field_name: str, value: Any) -> str:
    if not isinstance(value, str) or not ID_RE.match(value):
        raise TaskError(file, field_name, f"must be a string of [A-Za-z0-9._/-], got {value!r}")
    return value


def load_claweval(root: Path) -> Task:
    """Load a ClawEval (``task.yaml`` + ``grader.py``) task directory."""
    file = root / "task.yaml"
    data = _read_yaml(file)
    task_id = _check_id(file, "id", data.get("id", data.get("task_id", root.name)))
    instruction = data.get("prompt", data.get("instruction"))
    if not isinstance(instruction, str) or not instruction.strip():
        raise TaskError(file, "prompt", "missing or empty")
    grader = root / "grader.py"
    if not grader.is_file():
        raise TaskError(grader, "grader.py", "missing")
    timeout = number(file, data, "timeout", None) or number(file, data, "timeout_seconds", 300.0)
    sub = "workspace" if (root / "workspace").is_dir() else "fixtures"
    return Task(
        id=task_id,
        instruction=instruction.strip(),
        path=root,
        format="claweval",
        timeout_s=timeout or 300.0,
        tags=string_list(file, data.get("tags"), "tags"),
        workspace=collect_dir(root, sub, f"{sub}/"),
        verify={"grader.py": inside(root, "grader.py", file, "grader.py")},
        verify_extra={"run.py": (_GRADER_WRAPPER % "*([ws, None][:n])").encode()},
        verify_command=f"python3 {VERIFY_DIR}/run.py",
        solution=collect_dir(root, "solution", "solution/"),
    )


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
    task_id = _check_id(file, "id", front.get("id", file.stem))
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
    return Task(
        id=task_id,
        instruction=prompt,
        path=file,
        format="qwenclawbench",
        timeout_s=timeout,
        tags=tuple(str(t) for t in [front.get("category")] if t),
        workspace=workspace,
        verify_extra={
            "grader.py": code.group(1).encode(),
            "run.py": (_GRADER_WRAPPER % "*([[], ws][-n:] if n == 2 else [ws])").encode(),
        },
        verify_command=f"python3 {VERIFY_DIR}/run.py",
    )


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
