"""ClawEval's older per-task layout (``task.yaml`` + ``grader.py``), one task directory.

``id``/``task_id``, ``prompt``/``instruction``, ``timeout``/``timeout_seconds``, ``tags``;
``workspace/`` (or ``fixtures/``) is the workspace; ``grader.py`` defines
``grade(workspace_path[, transcript])`` returning a float or a dict with ``score``/``reward``,
run in the sandbox after the agent stops (checkouts of today's layout: ``loader.py``).
"""

from __future__ import annotations

from pathlib import Path

from openforge.suites.grading import GRADER_WRAPPER, check_id
from openforge.tasks.model import (
    VERIFY_DIR,
    Task,
    TaskError,
    collect_dir,
    inside,
    read_yaml_mapping,
    unknown_keys,
)
from openforge.tasks.native import number, string_list

__all__ = ["load_claweval"]

_KEYS = ("id", "task_id", "prompt", "instruction", "timeout", "timeout_seconds", "tags",
         "task_name", "name", "category", "difficulty", "version")  # fmt: skip


def load_claweval(root: Path) -> Task:
    """Load a ClawEval (``task.yaml`` + ``grader.py``) task directory."""
    file = root / "task.yaml"
    data = read_yaml_mapping(file)
    task_id = check_id(file, "id", data.get("id", data.get("task_id", root.name)))
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
        verify_extra={"run.py": (GRADER_WRAPPER % "*([ws, None][:n])").encode()},
        verify_command=f"python3 {VERIFY_DIR}/run.py",
        solution=collect_dir(root, "solution", "solution/"),
        warnings=tuple(unknown_keys(file, data, _KEYS)),
    )
