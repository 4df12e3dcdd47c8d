"""Loaders for other suites' task formats, each turned into a :class:`Task` with a verifier
that prints OpenForge's ``{"reward": …, "details": …}`` line.

- **Harbor** (``task.toml`` + ``instruction.md`` + ``tests/test.sh`` + ``solution/solve.sh``):
  ``[agent].timeout_sec``, ``[verifier].timeout_sec``, ``[environment]`` cpus/memory_mb/
  storage_mb, ``[metadata].tags``. The reward is ``/logs/verifier/reward.txt`` (or
  ``reward.json``'s ``reward``) when the test wrote one, else 1 if ``test.sh`` exited 0.
- **Terminal-Bench** (``task.yaml`` with ``instruction`` + ``run-tests.sh`` or
  ``tests/test.sh``, ``solution.sh``): ``max_agent_timeout_sec``, ``max_test_timeout_sec``;
  reward 1 when the tests exit 0. ``$TEST_DIR`` points at the copied tests.
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
import tomllib
from pathlib import Path
from typing import Any

import yaml

from openforge.tasks.model import VERIFY_DIR, Task, TaskError, check_keys, collect_dir, inside
from openforge.tasks.native import ID_RE, number, string_list

__all__ = ["load_claweval", "load_harbor", "load_qwenclawbench", "load_terminal_bench"]

_HARBOR_TOP = (
    "schema_version", "version", "task", "metadata", "agent", "verifier", "environment",
    "solution", "source", "steps", "artifacts", "multi_step_reward_strategy",
)  # fmt: skip
_HARBOR_TABLES = {
    "agent": ("timeout_sec", "user", "network_mode", "allowed_hosts"),
    "verifier": ("timeout_sec", "env", "user", "network_mode", "allowed_hosts", "environment_mode",
                 "environment"),
    "environment": ("build_timeout_sec", "docker_image", "cpus", "memory_mb", "storage_mb", "gpus",
                    "gpu_types", "allow_internet", "network_mode", "allowed_hosts", "mcp_servers",
                    "env", "skills_dir", "healthcheck", "memory", "storage", "workdir", "os"),
}  # fmt: skip

_TESTS_WRAPPER = """\
d="$OPENFORGE_VERIFY_DIR"
export TEST_DIR="$d/tests"
mkdir -p /logs/verifier 2>/dev/null
bash "$d/%s" >"$d/test.log" 2>&1
rc=$?
tail -c 4000 "$d/test.log" >&2
for f in /logs/verifier/reward.txt "$d/reward.txt"; do
  if [ -f "$f" ]; then
    printf '{"reward": %%s, "details": {"exit_code": %%d}}\\n' "$(tr -d ' \\n' <"$f")" "$rc"
    exit 0
  fi
done
if [ -f /logs/verifier/reward.json ]; then
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); \
print(json.dumps({"reward": r["reward"], "details": r}))' /logs/verifier/reward.json
  exit 0
fi
if [ "$rc" -eq 0 ]; then r=1; else r=0; fi
printf '{"reward": %%d, "details": {"exit_code": %%d}}\\n' "$r" "$rc"
"""

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


def _test_task(root: Path, task_id: str, instruction: str, entry: str) -> Task:
    tests = {f"tests/{k}": v for k, v in collect_dir(root, "tests", "tests/").items()}
    if entry not in tests:
        extra = root / entry
        if not extra.is_file():
            raise TaskError(root, entry, "the test entry point is missing")
        tests[entry] = inside(root, entry, root, entry)
    return Task(
        id=task_id,
        instruction=instruction.strip(),
        path=root,
        verify=tests,
        verify_extra={"run.sh": (_TESTS_WRAPPER % entry).encode()},
        verify_command=f"sh {VERIFY_DIR}/run.sh",
        solution=collect_dir(root, "solution", "solution/"),
    )


def load_harbor(root: Path) -> Task:
    """Load a Harbor task directory."""
    file = root / "task.toml"
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise TaskError(file, "(toml)", f"not valid TOML: {exc}") from exc
    md = root / "instruction.md"
    if not md.is_file():
        raise TaskError(root, "instruction.md", "missing: a Harbor task needs instruction.md")
    if not (root / "tests" / "test.sh").is_file():
        raise TaskError(root, "tests/test.sh", "missing: a Harbor task needs tests/test.sh")
    name = data.get("task", {}).get("name") if isinstance(data.get("task"), dict) else None
    task_id = _check_id(file, "task.name", (name or root.name).replace("/", "-"))
    task = _test_task(root, task_id, md.read_text(encoding="utf-8"), "tests/test.sh")
    task.format = "harbor"
    check_keys(file, data, _HARBOR_TOP)
    agent, verifier, env = (data.get(k, {}) for k in ("agent", "verifier", "environment"))
    for key, table in (("agent", agent), ("verifier", verifier), ("environment", env)):
        if not isinstance(table, dict):
            raise TaskError(file, key, "must be a table")
        check_keys(file, table, _HARBOR_TABLES[key], f"{key}.")
    task.timeout_s = number(file, agent, "timeout_sec", 600.0, "agent.") or 600.0
    task.verify_timeout_s = number(file, verifier, "timeout_sec", 600.0, "verifier.") or 600.0
    task.cpu = number(file, env, "cpus", None, "environment.")
    mem = number(file, env, "memory_mb", None, "environment.")
    disk = number(file, env, "storage_mb", None, "environment.")
    task.memory_mb = None if mem is None else int(mem)
    task.disk_mb = None if disk is None else int(disk)
    meta = data.get("metadata", {})
    task.tags = string_list(
        file, meta.get("tags") if isinstance(meta, dict) else None, "metadata.tags"
    )
    if env.get("allow_internet") is True:
        task.network = "open"
    return task


def load_terminal_bench(root: Path) -> Task:
    """Load a Terminal-Bench (``task.yaml`` + ``run-tests.sh``) task directory."""
    file = root / "task.yaml"
    data = _read_yaml(file)
    instruction = data.get("instruction")
    if not isinstance(instruction, str) or not instruction.strip():
        raise TaskError(file, "instruction", "missing or empty")
    entry = "run-tests.sh" if (root / "run-tests.sh").is_file() else "tests/test.sh"
    task = _test_task(root, _check_id(file, "(directory name)", root.name), instruction, entry)
    task.format = "terminal-bench"
    task.timeout_s = number(file, data, "max_agent_timeout_sec", 360.0) or 360.0
    task.verify_timeout_s = number(file, data, "max_test_timeout_sec", 180.0) or 180.0
    task.tags = string_list(file, data.get("tags"), "tags")
    if (root / "solution.sh").is_file() and not task.solution:
        task.solution = {"solve.sh": root / "solution.sh"}
    return task


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
