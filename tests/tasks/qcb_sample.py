"""A small QwenClawBench-layout checkout written for the tests: ``scripts/lib_tasks.py`` and
``scripts/lib_grading.py`` with the interface ``scripts/benchmark.py`` uses
(``TaskLoader(tasks_dir).load_task(file)``, ``grade_task(task=, execution_result=,
skill_dir=, judge_model=)`` returning an object with ``to_dict()``), and task files under
``data/sample-v1/tasks`` with sources under ``data/sample-v1/assets/<task_id>/``.

The grading library is OpenForge's own small one of the same shape: automated checks
averaged, a judge over ``JUDGE_BASE_URL``, hybrid combined with ``grading_weights`` and the
judge zeroed below 0.75 automated.
"""

from __future__ import annotations

from pathlib import Path

LIB_TASKS = """
import re
from pathlib import Path

import yaml


class Task:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class TaskLoader:
    def __init__(self, tasks_dir):
        self.tasks_dir = Path(tasks_dir)

    def load_task(self, path):
        text = Path(path).read_text(encoding="utf-8")
        front, body = re.match(r"^---\\s*\\n(.*?)\\n---\\s*\\n(.*)$", text, re.S).groups()
        meta = yaml.safe_load(front)
        sections, name = {}, None
        for line in body.split("\\n"):
            m = re.match(r"^##\\s+(.+)$", line)
            if m:
                name = m.group(1)
                sections[name] = []
            elif name:
                sections[name].append(line)
        sections = {k: "\\n".join(v).strip() for k, v in sections.items()}
        return Task(
            task_id=meta["id"],
            grading_type=meta.get("grading_type", "automated"),
            grading_weights=meta.get("grading_weights"),
            prompt=sections.get("Prompt", ""),
            automated_checks=sections.get("Automated Checks"),
            llm_judge_rubric=sections.get("LLM Judge Rubric"),
        )
"""

LIB_GRADING = """
import json
import os
import re
import time
import urllib.request


class GradeResult:
    def __init__(self, task_id, score, grading_type, breakdown):
        self.task_id, self.score = task_id, score
        self.grading_type, self.breakdown = grading_type, breakdown

    def to_dict(self):
        return {"task_id": self.task_id, "score": self.score,
                "grading_type": self.grading_type, "breakdown": self.breakdown}


def _automated(task, execution):
    code = re.search(r"```python\\s*\\n(.*?)\\n\\s*```", task.automated_checks, re.S).group(1)
    ns = {}
    exec(code, ns)
    scores = ns["grade"](execution["transcript"], execution["workspace"])
    return sum(scores.values()) / len(scores), scores


def _call_llm_judge_api(prompt, model, base_url, api_key, timeout_seconds=1800):
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": prompt}],
                       "temperature": 0.0}).encode()
    req = urllib.request.Request(
        base_url.rstrip("/") + "/chat/completions", data=body,
        headers={"Content-Type": "application/json", "Authorization": "Bearer " + api_key})
    try:
        with urllib.request.urlopen(req, timeout=timeout_seconds) as resp:
            return json.loads(resp.read())["choices"][0]["message"]["content"]
    except Exception as exc:
        raise RuntimeError(f"LLM judge API request failed: {exc}") from exc


def _judge(task, execution, model):
    prompt = task.llm_judge_rubric + json.dumps(execution["transcript"])
    for attempt in range(20):  # as the benchmark's: every failure retried with back-off
        try:
            text = _call_llm_judge_api(prompt, model, os.environ["JUDGE_BASE_URL"],
                                       os.environ["JUDGE_API_KEY"])
            return float(json.loads(text[text.index("{"):text.rindex("}") + 1])["total"])
        except Exception:
            time.sleep(3)
    return 0.0


def grade_task(*, task, execution_result, skill_dir, judge_model="judge"):
    auto, scores = (0.0, {})
    if task.grading_type != "llm_judge":
        auto, scores = _automated(task, execution_result)
    if task.grading_type == "automated":
        return GradeResult(task.task_id, auto, "automated", scores)
    llm = _judge(task, execution_result, judge_model)
    w = task.grading_weights or {"automated": 0.5, "llm_judge": 0.5}
    llm_part = llm if auto >= 0.75 else 0.0
    score = (auto * w["automated"] + llm_part * w["llm_judge"]) / (w["automated"] + w["llm_judge"])
    return GradeResult(task.task_id, score, task.grading_type, {**scores, "llm_judge": llm})
"""

# The checks read the transcript in OpenClaw's session format; the string holding a fence
# (```) mid-line must not end the code block.
CHECKS = """
```python
def grade(transcript, workspace_path):
    import json, os
    fence = "```"
    answer = os.path.join(workspace_path, "answer.txt")
    wrote = os.path.isfile(answer) and open(answer).read().strip() == "42"
    called = any(
        part.get("type") == "toolCall" and "42" in json.dumps(part.get("arguments"))
        for e in transcript if e.get("type") == "message"
        for part in e["message"].get("content", []) if isinstance(part, dict)
    )
    notes = open(os.path.join(workspace_path, "notes/input.txt")).read()
    settings = json.load(open(os.path.join(workspace_path, "config/settings.json")))
    return {
        "answer_written": 1.0 if wrote else 0.0,
        "transcript_shows_write": 1.0 if called else 0.0,
        "assets_in_place": float(notes.startswith("six times seven") and settings["n"] == 7),
        "fence_kept": 1.0 if len(fence) == 3 else 0.0,
    }
```
"""

TASK = """---
id: {id}
name: Sample {id}
category: {category}
grading_type: {grading}
{weights}timeout_seconds: 120
workspace_files:
- source: input.txt
  dest: notes/input.txt
- path: config/settings.json
  content: '{{"n": 7}}'
---
## Prompt

Read notes/input.txt and write the answer to answer.txt.

## Expected Behavior

answer.txt holds 42.

## Grading Criteria

- [ ] answer.txt holds 42

## Automated Checks
{checks}
## LLM Judge Rubric

Score the answer. Respond with JSON {{"scores": {{}}, "total": x}}.
"""

HYBRID_WEIGHTS = "grading_weights:\n  automated: 0.4\n  llm_judge: 0.6\n"


def write_sample(root: Path) -> Path:
    """Write the sample checkout under ``root``; returns ``root``."""
    (root / "scripts").mkdir(parents=True)
    (root / "scripts/lib_tasks.py").write_text(LIB_TASKS)
    (root / "scripts/lib_grading.py").write_text(LIB_GRADING)
    tasks = root / "data/sample-v1/tasks"
    tasks.mkdir(parents=True)
    for tid, category, grading, weights in (
        ("task_00001_answer", "Files", "automated", ""),
        ("task_00002_answer_hybrid", "Judged", "hybrid", HYBRID_WEIGHTS),
    ):
        (tasks / f"{tid}.md").write_text(
            TASK.format(id=tid, category=category, grading=grading, weights=weights, checks=CHECKS)
        )
        assets = root / "data/sample-v1/assets" / tid
        assets.mkdir(parents=True)
        (assets / "input.txt").write_text("six times seven\n")
    return root
