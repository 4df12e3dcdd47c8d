"""The OSWorld-format evaluator, run as the task's verifier inside the sandbox.

A guest program (:mod:`openforge.guest`: standard library and :mod:`openforge.guest.common`,
shipped as a zipapp). Reads the task's own JSON (``--task``) and evaluates its ``evaluator`` the way
OSWorld does: each ``func`` (a metric) gets the ``result`` getter's value and, when given,
the ``expected`` getter's value and ``options``; several funcs combine with ``conj``
(``and`` by default). An agent that said FAIL scores 0 unless the task is ``infeasible``;
one that said nothing of the kind on an infeasible task scores 0 too.

Getters: ``vm_file`` (a file in the sandbox), ``vm_command_line`` (a command's stdout),
``rule`` (the ``rules`` object), ``cloud_file`` (the file named ``dest`` under ``files/``
beside the task's JSON: the task's loader puts it there). Metrics: ``exact_match``,
``check_include_exclude``, ``compare_text_file``, ``is_in_list``, ``infeasible``. Prints
``{"reward", "details"}``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from openforge.guest.common import GUI_DIR, SANDBOX_HOME

# Where the desktop wrote the agent's DONE/FAIL: under the agent's home, which is also what
# OSWorld's "~" means. A verifier's own $HOME may be another, fresh one.
RESULT = Path(SANDBOX_HOME, GUI_DIR, "desktop-result.json")


def agent_path(path: str) -> Path:
    """``path`` with a leading ``~`` meaning the agent's home, as in the task's VM."""
    if path == "~" or path.startswith("~/"):
        return Path(SANDBOX_HOME + path[1:])
    return Path(path)


def get(spec: dict[str, Any], here: Path) -> Any:
    """The value of one OSWorld getter spec (``here``: the folder of the task's JSON)."""
    kind = spec.get("type")
    if kind == "vm_file":
        path = agent_path(str(spec["path"]))
        return str(path) if path.is_file() else None
    if kind == "cloud_file":
        return str(here / "files" / str(spec["dest"]))
    if kind == "vm_command_line":
        cmd = spec["command"]
        done = subprocess.run(
            cmd,
            shell=bool(spec.get("shell")) or isinstance(cmd, str),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return done.stdout
    if kind == "rule":
        return spec.get("rules", {})
    raise SystemExit(f"unsupported getter {kind!r}")


def _text(path: Any, options: dict[str, Any]) -> str | None:
    if not path or not Path(path).is_file():
        return None
    text = Path(path).read_text(errors="replace")
    if options.get("ignore_blanks"):
        text = "".join(text.split())
    if options.get("ignore_case"):
        text = text.lower()
    return text


def metric(name: str, result: Any, expected: Any, options: dict[str, Any]) -> float:
    """One OSWorld metric on the getters' values, in [0, 1]."""
    if name == "exact_match":
        return float(result == expected["expected"])
    if name == "check_include_exclude":
        text = result or ""
        ok = all(s in text for s in expected.get("include", []))
        return float(ok and not any(s in text for s in expected.get("exclude", [])))
    if name == "compare_text_file":
        a, b = _text(result, options), _text(expected, options)
        return float(a is not None and a == b)
    if name == "is_in_list":
        return float(result in expected["expected"])
    raise SystemExit(f"unsupported metric {name!r}")


def main(argv: list[str] | None = None) -> int:
    """Evaluate and print the verdict line."""
    ap = argparse.ArgumentParser(prog="osworld-eval", description=__doc__)
    ap.add_argument("--task", required=True, help="the task's OSWorld JSON")
    task_file = Path(ap.parse_args(argv).task)
    here = task_file.resolve().parent
    task = json.loads(task_file.read_text())
    ev = task["evaluator"]
    # Verified only after the desktop came up (the orchestrator's rule; it writes this file
    # at once): a result gone or spoiled now is the agent's doing (its pyautogui code can
    # delete it), read as "said neither DONE nor FAIL" — never an infrastructure error.
    try:
        got = json.loads(RESULT.read_text())
        status = got.get("status") if isinstance(got, dict) else None
    except (OSError, ValueError):
        status = None
    funcs = ev["func"] if isinstance(ev["func"], list) else [ev["func"]]
    if funcs == ["infeasible"]:
        reward = float(status == "fail")
        print(json.dumps({"reward": reward, "details": {"status": status}}))
        return 0
    if status == "fail":
        print(json.dumps({"reward": 0.0, "details": {"status": status, "why": "agent said FAIL"}}))
        return 0

    def each(key: str) -> list[Any]:
        value = ev.get(key)
        return value if isinstance(value, list) else [value] * len(funcs)

    scores = []
    for name, res, exp, opt in zip(funcs, each("result"), each("expected"), each("options")):
        expected = get(exp, here) if exp else None
        scores.append(metric(name, get(res, here) if res else None, expected, opt or {}))
    reward = min(scores) if ev.get("conj", "and") == "and" else max(scores)
    print(json.dumps({"reward": reward, "details": {"status": status, "scores": scores}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
