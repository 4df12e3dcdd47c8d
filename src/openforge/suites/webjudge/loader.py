"""WebVoyager and Online-Mind2Web task files: live-site tasks judged by WebJudge (``grader.py``).

* WebVoyager: ``WebVoyager_data.jsonl``, one JSON object a line:
  ``{"web_name": "Allrecipes", "id": "Allrecipes--0", "ques": "…", "web": "https://…"}``.
* Online-Mind2Web: one JSON array of ``{"task_id", "confirmed_task", "website",
  "reference_length", "level"}`` (``level``: easy | medium | hard).

``load_tasks("webvoyager:FILE")`` / ``load_tasks("online-mind2web:FILE")`` (a directory
holding the suite's file works too). Each task opens its site in the browser environment
and keeps the last :data:`~openforge.suites.webjudge.grader.KEEP_SCREENSHOTS` screenshots;
the site's origin is the only one the page may reach, and the task asks for the internet
(``--allow-task-internet``). A site that cannot be reached (offline, as here) ends the
rollout ``infra_error`` with ``unreachable`` in its error, before the harness starts.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

from openforge.environments.browser import BrowserEnvironment
from openforge.suites.webjudge.grader import KEEP_SCREENSHOTS, WebJudgeGrader
from openforge.tasks.model import Task, TaskError, read_task_data, unknown_keys

__all__ = ["MIND2WEB_FILE", "WEBVOYAGER_FILE", "load_mind2web", "load_webvoyager", "site_task"]

WEBVOYAGER_FILE = "WebVoyager_data.jsonl"
MIND2WEB_FILE = "Online_Mind2Web.json"
# The published rows' fields; any other is named as a warning.
_WEBVOYAGER_KEYS = ("web_name", "id", "ques", "web")
_MIND2WEB_KEYS = ("task_id", "confirmed_task", "website", "reference_length", "level")


def site_task(task_id: str, goal: str, url: str, path: Path, *, category: str = "") -> Task:
    """A live-site task: open ``url``, do ``goal``, judged by :class:`WebJudgeGrader`."""
    parts = urlsplit(url)
    env = BrowserEnvironment(
        start_url=url,
        goal=goal,
        allowed_origins=(f"{parts.scheme}://{parts.netloc}",),
        keep_screenshots=KEEP_SCREENSHOTS,
        viewport=(1024, 768),
    )
    return Task(
        id=task_id,
        instruction=goal,
        path=path,
        format="webjudge",
        timeout_s=600.0,
        tags=("gui", "browser", "webjudge"),
        category=category,
        gui=env,
        grader=WebJudgeGrader(goal),
        wants_internet=True,
    )


def _suite_file(path: Path, name: str) -> Path:
    file = path / name if path.is_dir() else path
    if not file.is_file():
        raise TaskError(file, "(path)", f"no such file (the suite's {name})")
    return file


def _url(file: Path, where: str, value: object) -> str:
    if not isinstance(value, str) or urlsplit(value).scheme not in ("http", "https"):
        raise TaskError(file, where, f"must be an http(s) URL, not {value!r}")
    return value


def load_webvoyager(path: Path) -> tuple[list[Task], list[TaskError]]:
    """WebVoyager's ``WebVoyager_data.jsonl`` (the file or its directory)."""
    file = _suite_file(path, WEBVOYAGER_FILE)
    tasks: list[Task] = []
    errors: list[TaskError] = []
    for n, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict):
                raise TaskError(file, f"line {n}", "must be a JSON object")
            for key in ("web_name", "id", "ques", "web"):
                if not isinstance(row.get(key), str) or not row[key].strip():
                    raise TaskError(file, f"line {n}.{key}", "must be a non-empty string")
            url = _url(file, f"line {n}.web", row["web"])
            task_id, name = f"webvoyager/{row['id']}", row["web_name"]
            task = site_task(task_id, row["ques"], url, file, category=name)
            task.warnings = tuple(unknown_keys(file, row, _WEBVOYAGER_KEYS, f"line {n}."))
            tasks.append(task)
        except json.JSONDecodeError as exc:
            errors.append(TaskError(file, f"line {n}", f"not JSON: {exc}"))
        except TaskError as exc:
            errors.append(exc)
    return tasks, errors


def load_mind2web(path: Path) -> tuple[list[Task], list[TaskError]]:
    """Online-Mind2Web's task JSON (a list of tasks; the file or its directory)."""
    file = _suite_file(path, MIND2WEB_FILE)
    rows = read_task_data(file, list)
    tasks: list[Task] = []
    errors: list[TaskError] = []
    for i, row in enumerate(rows):
        try:
            if not isinstance(row, dict):
                raise TaskError(file, f"[{i}]", "must be a JSON object")
            for key in ("task_id", "confirmed_task", "website"):
                if not isinstance(row.get(key), str) or not row[key].strip():
                    raise TaskError(file, f"[{i}].{key}", "must be a non-empty string")
            url = _url(file, f"[{i}].website", row["website"])
            level = row.get("level", "")
            if level not in ("", "easy", "medium", "hard"):
                raise TaskError(file, f"[{i}].level", f"must be easy, medium or hard: {level!r}")
            task = site_task(
                f"online-mind2web/{row['task_id']}", row["confirmed_task"], url, file,
                category=str(level),
            )  # fmt: skip
            task.warnings = tuple(unknown_keys(file, row, _MIND2WEB_KEYS, f"[{i}]."))
            tasks.append(task)
        except TaskError as exc:
            errors.append(exc)
    return tasks, errors
