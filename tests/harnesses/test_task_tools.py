"""Task tools end to end: a native task declares a tool in task.toml, the orchestrator asks
the adapter to expose it, the harness's first prompt names it and the scripted agent uses it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from openforge.harnesses.registry import get_harness
from openforge.probing.probe import tool_reply
from openforge.suites import load_tasks
from openforge.tasks.model import Task, TaskError, TaskTool
from openforge.tasks.native import load_native

from .conftest import require

USAGE = "python3 tools/lookup.py WORD"
TASK_TOML = f"""
id = "glossary"
instruction = "Write the glossary meaning of the word forge to answer.txt."
timeout = 120

[resources]
memory_mb = 2048
pids = 512

[[tools]]
name = "lookup"
description = "Print the glossary meaning of WORD."
usage = "{USAGE}"
"""
LOOKUP = b"import sys\nprint({'forge': 'a workshop for metal'}.get(sys.argv[1], '?'))\n"
VERIFY = b"""import json, pathlib
found = pathlib.Path("answer.txt").read_text() if pathlib.Path("answer.txt").exists() else None
print(json.dumps({"reward": float(found == "a workshop for metal\\n"), "details": found}))
"""
RUN_TOOL = "python3 tools/lookup.py forge > answer.txt"
REPLIES: dict[str, list[dict[str, Any]]] = {
    "claw": [tool_reply("bash", command=RUN_TOOL), tool_reply("submit", answer="done")],
    "mini-swe-agent": [
        tool_reply("bash", command=RUN_TOOL),
        tool_reply("bash", command="echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),
    ],
}


def _task_dir(root: Path, toml: str = TASK_TOML) -> Path:
    (root / "workspace/tools").mkdir(parents=True)
    (root / "verify").mkdir()
    (root / "task.toml").write_text(toml)
    (root / "workspace/tools/lookup.py").write_bytes(LOOKUP)
    (root / "verify/verify.py").write_bytes(VERIFY)
    return root


def _load(root: Path) -> Task:
    tasks = load_tasks(root)
    assert not tasks.errors, tasks.errors
    (task,) = tasks.tasks
    return task


def test_task_toml_declares_tools(tmp_path: Path) -> None:
    task = _load(_task_dir(tmp_path / "glossary"))
    assert task.tools == (TaskTool("lookup", "Print the glossary meaning of WORD.", USAGE),)


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ('[[tools]]\nname = "lookup"\ndescription = "d"\n', "tools[0].usage"),
        ('[[tools]]\nname = "a b"\ndescription = "d"\nusage = "u"\n', "tools[0].name"),
        ('tools = ["lookup"]\n', "tools[0]"),
    ],
)
def test_a_bad_tool_entry_names_its_field(tmp_path: Path, entry: str, field: str) -> None:
    toml = 'id = "t"\ninstruction = "x"\nverify = {command = "true"}\n' + entry
    root = _task_dir(tmp_path / "t", toml)
    with pytest.raises(TaskError) as err:
        load_native(root)
    assert err.value.field == field and str(root / "task.toml") in str(err.value)


@pytest.mark.parametrize("name", ["claw", "mini-swe-agent"])
async def test_declared_tool_reaches_the_harness_and_is_used(name: str, tmp_path: Path) -> None:
    from openforge.probing.probe import probe

    require(name)
    task = _load(_task_dir(tmp_path / "glossary"))
    run = await probe(get_harness(name), REPLIES[name], tmp_path / "run", task=task)
    assert (run.result.status, run.result.reward) == ("completed", 1.0), run.result
    first = orjson.loads(run.calls[0].raw_request)
    # claw puts AGENTS.md in its system prompt; mini-swe-agent gets it in the task text.
    role = "system" if name == "claw" else "user"
    text = "\n".join(m["content"] for m in first["messages"] if m["role"] == role)
    assert "## lookup" in text and USAGE in text
