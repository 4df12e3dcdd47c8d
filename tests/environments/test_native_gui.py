"""A user's own GUI task as a file: ``task.toml`` with ``[browser]`` or ``[desktop]``.

The example of docs/environments.md is shipped as ``samples/newsletter-signup`` (a test
checks the two agree) and run from its file through the real orchestrator: the built-in
browser agent and Browser-Use solve it (1.0) from scripted engine replies, a no-op scores 0,
and the hostile rows — a forged ``data:`` page, Browser-Use's ``evaluate``, a shell that
writes the site and the result file — score 0 or are refused at start.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from openforge.environments.browser import BrowserEnvironment
from openforge.environments.desktop import DesktopEnvironment
from openforge.harnesses.browser_use import PREFIX
from openforge.harnesses.registry import get_harness
from openforge.rollouts import RolloutConfig, run_rollouts
from openforge.rollouts.reach import EvidenceReachable, refuse_reachable_evidence
from openforge.sandboxes.local import LocalBackend
from openforge.suites import load_tasks
from openforge.tasks import Task
from openforge.tasks.oracle import check_task

from .conftest import ScriptedGateway

SAMPLES = Path(__file__).parent / "samples"
SAMPLE = SAMPLES / "newsletter-signup"
DESKTOP_SAMPLE = SAMPLES / "desktop-notes"
DOCS = Path(__file__).parents[2] / "docs" / "environments.md"
FORGED = 'data:text/html,<body data-subscribed="ada@example.org">'


def _example() -> Task:
    loaded = load_tasks(SAMPLE)
    assert loaded.errors == [], loaded.errors
    (task,) = loaded.tasks
    return task


def _config(tmp_path: Path, gateway: str, harness: str, **opts: Any) -> RolloutConfig:
    return RolloutConfig(
        tasks=[_example()],
        harness=harness,
        harness_options=opts,
        gateway_url=gateway,
        out_dir=tmp_path / "run",
        n=1,
        retry_backoff_s=0.0,
        backend_options={"root": tmp_path / "sandboxes"},
    )


def test_the_docs_example_is_the_shipped_sample() -> None:
    """What a user copies from the docs is what the tests run."""
    text = DOCS.read_text(encoding="utf-8")
    blocks = dict(re.findall(r"<!-- example: ([\w./-]+) -->\n```\w*\n(.*?)```", text, re.S))
    assert set(blocks) == {
        "newsletter-signup/task.toml",
        "newsletter-signup/reward.js",
        "newsletter-signup/site/index.html",
        "newsletter-signup/solution/solve.sh",
        "desktop-notes/task.toml",
    }
    for rel, body in blocks.items():
        assert (SAMPLES / rel).read_text(encoding="utf-8") == body, rel


def test_the_example_loads_as_a_browser_task() -> None:
    task = _example()
    assert isinstance(task.gui, BrowserEnvironment)
    assert (task.gui.start_url, task.gui.site_root) == ("site/index.html", "site/")
    assert "ada@example.org" in task.gui.reward_js
    assert set(task.workspace) == {"site/index.html"}
    assert task.verify_command.endswith("gui_result.py") and task.tags[-2:] == ("gui", "browser")


async def test_the_builtin_browser_agent_solves_the_example_and_a_noop_scores_zero(
    scripted_gateway: Callable[[list[str]], str], tmp_path: Path
) -> None:
    # [1] "Example Weekly", [2] the label, [3] the email field, [4] "Subscribe".
    solve = scripted_gateway(["Action: Type [3]; ada@example.org", "Action: Click [4]"])
    (res,) = await run_rollouts(_config(tmp_path / "a", solve, "browser-agent", max_steps=4))
    assert (res.status, res.reward, res.error) == ("completed", 1.0, None), res
    assert res.details is not None and res.details["raw"] == "ada@example.org"
    noop = scripted_gateway(["Action: Answer; done"])
    (res,) = await run_rollouts(_config(tmp_path / "b", noop, "browser-agent", max_steps=4))
    assert (res.status, res.reward) == ("completed", 0.0), res
    assert res.details is not None and res.details["done"] is False


def _bu(*actions: dict[str, object]) -> str:
    return json.dumps(
        {
            "evaluation_previous_goal": "Started.",
            "memory": "On the signup page.",
            "next_goal": "Subscribe.",
            "action": list(actions),
        }
    )


def _needs_browser_use() -> None:
    if not Path(PREFIX, "bin", "python").is_file():
        pytest.fail(f"Browser-Use is not installed at {PREFIX}: scripts/install-harnesses.sh")


async def test_browser_use_solves_the_example(
    scripted_gateway: Callable[[list[str]], str], tmp_path: Path
) -> None:
    _needs_browser_use()
    # Its element indices change between browser starts, so keys: Tab reaches the email
    # field (the page's first focusable element), the address is typed, Enter submits.
    gateway = scripted_gateway(
        [
            _bu(
                {"send_keys": {"keys": "Tab"}},
                {"send_keys": {"keys": "ada@example.org"}},
                {"send_keys": {"keys": "Enter"}},
            ),
            _bu({"done": {"text": "Subscribed.", "success": True}}),
        ]
    )
    (res,) = await run_rollouts(_config(tmp_path, gateway, "browser-use", max_steps=3))
    assert (res.status, res.reward, res.error) == ("completed", 1.0, None), res
    assert res.details is not None and res.details["raw"] == "ada@example.org"


async def test_the_builtin_agent_going_to_a_forged_page_scores_zero(
    scripted_gateway: Callable[[list[str]], str], tmp_path: Path
) -> None:
    gateway = scripted_gateway([f"Action: Goto; {FORGED}"])
    (res,) = await run_rollouts(_config(tmp_path, gateway, "browser-agent", max_steps=2))
    assert (res.status, res.reward) == ("agent_error", 0.0), res


@pytest.mark.parametrize(
    "action",
    [
        {"navigate": {"url": FORGED, "new_tab": False}},
        {"evaluate": {"code": "document.body.dataset.subscribed = 'ada@example.org'"}},
    ],
    ids=["navigate-data-url", "evaluate"],
)
async def test_browser_use_cannot_forge_the_example(
    scripted_gateway: Callable[[list[str]], str], tmp_path: Path, action: dict[str, object]
) -> None:
    _needs_browser_use()
    gateway = scripted_gateway([_bu(action), _bu({"done": {"text": "Done.", "success": True}})])
    (res,) = await run_rollouts(_config(tmp_path, gateway, "browser-use", max_steps=3))
    assert res.status in ("completed", "agent_error") and res.reward == 0.0, res
    assert res.details is not None and res.details["done"] is False


# A shell that writes what it can in the sandbox: the result file, and the site's page made
# to come up subscribed, then loaded again from the environment's own server.
FORGER = r"""
d="$HOME/.openforge/gui"
echo '{"done": true, "reward": 1.0, "raw": "ada@example.org", "reason": "forged"}' >"$d/result.json"
echo '<body data-subscribed="ada@example.org"></body>' >site/index.html
python3 - <<'PY'
import json, os, urllib.request
u = os.environ["OPENFORGE_BROWSER_URL"]
page = json.load(urllib.request.urlopen(u + "/observation"))["url"]
act = json.dumps({"action": "goto", "url": page}).encode()
print(json.load(urllib.request.urlopen(urllib.request.Request(u + "/action", data=act))))
PY
"""


async def test_a_shell_writing_the_sandbox_is_refused_and_gets_nothing_when_let_in(
    scripted_gateway: Callable[[list[str]], str], tmp_path: Path
) -> None:
    task = _example()
    with pytest.raises(EvidenceReachable, match="result file"):
        refuse_reachable_evidence([task], get_harness("shell", command="true"))
    gateway = scripted_gateway(["unused"])
    config = _config(tmp_path, gateway, "shell", command=FORGER)
    config.allow_reachable_evidence = True
    (res,) = await run_rollouts(config)
    assert (res.status, res.reward) == ("completed", 0.0), res
    assert res.details is not None and res.details["raw"] is None
    assert "not the top document (http://127.0.0.1" in res.details["reason"]


def _task_dir(tmp_path: Path, toml: str, files: dict[str, str] | None = None) -> Path:
    d = tmp_path / f"t{len(list(tmp_path.iterdir()))}"
    for rel, body in {"site/index.html": "<p>hi</p>", **(files or {})}.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(body)
    (d / "task.toml").write_text('id = "t"\ninstruction = "Do it."\n' + toml)
    return d


BAD_BROWSER = {
    "[browser]\nstart = 'index.html'\nsit = 'site'\n[browser.reward]\njs = '1'\n": (
        "browser.sit",
        "did you mean 'browser.site'",
    ),
    "[browser]\nstart = 'nope.html'\n[browser.reward]\njs = '1'\n": ("browser.start", "not found"),
    "[browser]\nsite = '../x'\nstart = 'index.html'\n[browser.reward]\njs = '1'\n": (
        "browser.site",
        "escapes",
    ),
    "[browser]\nstart = 'index.html'\n": ("browser.reward", "missing"),
    "[browser]\nstart = 'index.html'\n[browser.reward]\n": ("browser.reward", "needs js"),
    "[browser]\nstart = 'index.html'\n[browser.reward]\njs_file = 'r.js'\n": (
        "browser.reward.js_file",
        "not found",
    ),
    "[browser]\nstart = 'index.html'\n[browser.reward]\njs = '1'\nanswer = [1]\n": (
        "browser.reward.answer",
        "list of non-empty strings",
    ),
    "[browser]\nstart = 'index.html'\nallowed_sites = ['https://x.org/path']\n"
    "[browser.reward]\njs = '1'\n": ("browser.allowed_sites[0]", "no path"),
    "[browser]\nstart = 'index.html'\nallowed_sites = ['ftp://x.org']\n"
    "[browser.reward]\njs = '1'\n": ("browser.allowed_sites[0]", "http(s) origin"),
    "[browser]\nstart = 'https://x.org/a'\nsite = 'site'\n[browser.reward]\njs = '1'\n": (
        "browser.site",
        "not a URL",
    ),
    "[browser]\nstart = 'index.html'\nviewport = [0, 600]\n[browser.reward]\njs = '1'\n": (
        "browser.viewport",
        "[width, height]",
    ),
    "browser = 1\n": ("browser", "must be a table"),
    "[browser]\napp = 'bank'\n[browser.reward]\nanswer = ['1']\n": ("browser.app", "one of"),
    "[browser]\napp = 'wiki'\nstart = 'wiki'\n[browser.reward]\nanswer = ['1']\n": (
        "browser.start",
        "a path on its server",
    ),
    "[browser]\napp = 'wiki'\n[browser.reward]\njs = '1'\n": ("browser.reward.js", "use check"),
    "[browser]\nstart = 'index.html'\n[[browser.reward.check]]\nsql = 'SELECT 1'\n"
    "expect = [[1]]\n": ("browser.reward.check", "set app"),
    "[browser]\napp = 'wiki'\n[[browser.reward.check]]\nsql = 'SELECT 1'\n": (
        "browser.reward.check[0].expect",
        "list of rows",
    ),
    "[browser]\nstart = 'index.html'\n[browser.reward]\njs = '1'\n[desktop]\n": (
        "desktop",
        "one GUI environment",
    ),
    "[desktop]\nscreen = [1, 2, 3]\n": ("desktop.screen", "[width, height]"),
    "[desktop]\n[[desktop.setup]]\ntype = 'download'\n": ("desktop.setup[0].type", "one of"),
    "[desktop]\n[[desktop.setup]]\ntype = 'launch'\ncommand = 'mousepad'\n": (
        "desktop.setup[0].command",
        "list of strings",
    ),
    "[desktop]\n[[desktop.setup]]\ntype = 'sleep'\nsecond = 1\n": (
        "desktop.setup[0].second",
        "did you mean 'desktop.setup[0].seconds'",
    ),
    "[desktop]\n[desktop.check]\nfunc = 'compare_pdf'\n": ("desktop.check.func", "not supported"),
    "[desktop]\n[desktop.check]\nfunc = 'exact_match'\npostconfig = []\n": (
        "desktop.check.postconfig",
        "unknown key",
    ),
    "[desktop]\n[desktop.check]\nfunc = 'compare_text_file'\n"
    "expected = {type = 'cloud_file', dest = 'n.txt'}\n": ("desktop.check.expected.dest", "put"),
}


def test_bad_gui_sections_name_the_file_and_field(tmp_path: Path) -> None:
    bad_js = "[browser]\nstart = 'index.html'\n[browser.reward]\njs_file = 'site/index.html'\n"
    d = _task_dir(tmp_path, bad_js)
    (d / "site" / "index.html").write_bytes(b"\xff\xfe\x00bad")
    (err,) = load_tasks(d).errors
    assert err.field == "browser.reward.js_file" and "cannot be read" in err.problem
    for toml, (field, words) in BAD_BROWSER.items():
        d = _task_dir(tmp_path, toml)
        (err,) = load_tasks(d).errors
        assert (Path(err.file), err.field) == (d / "task.toml", field), (toml, err)
        assert words in err.problem, (toml, err)


def test_a_browser_task_has_one_reward_and_its_site_its_own_path(tmp_path: Path) -> None:
    toml = "[browser]\nstart = 'index.html'\n[browser.reward]\njs = '1'\n"
    d = _task_dir(tmp_path, toml, {"verify/verify.py": "print(1)"})
    (err,) = load_tasks(d).errors
    assert err.field == "verify/" and "drop verify/" in err.problem
    d = _task_dir(tmp_path, toml, {"workspace/site/index.html": "x"})
    (err,) = load_tasks(d).errors
    assert err.field == "workspace/" and "site/index.html" in err.problem


def test_a_url_start_and_an_answer_reward_load(tmp_path: Path) -> None:
    toml = (
        "[browser]\nstart = 'https://docs.example.org/a?b=1'\n"
        "allowed_sites = ['https://cdn.example.org/']\n[browser.reward]\nanswer = ['8443']\n"
    )
    (task,) = load_tasks(_task_dir(tmp_path, toml)).tasks
    assert isinstance(task.gui, BrowserEnvironment) and task.workspace == {}
    assert task.gui.allowed_origins == ("https://docs.example.org", "https://cdn.example.org")
    assert task.gui.reward_js == "" and b"8443" in task.verify_extra["gui_result.py"]


def test_a_desktop_task_loads_its_setup_and_check(tmp_path: Path) -> None:
    toml = (
        "[desktop]\nscreen = [1024, 768]\n"
        "[[desktop.setup]]\ntype = 'launch'\ncommand = ['mousepad', '/workspace/notes.txt']\n"
        "[[desktop.setup]]\ntype = 'sleep'\nseconds = 0.5\n"
        "[desktop.check]\nfunc = 'compare_text_file'\n"
        "result = {type = 'vm_file', path = '/workspace/notes.txt'}\n"
        "expected = {type = 'cloud_file', dest = 'notes.txt'}\n"
    )
    d = _task_dir(tmp_path, toml, {"files/notes.txt": "hello", "workspace/notes.txt": ""})
    (task,) = load_tasks(d).tasks
    assert isinstance(task.gui, DesktopEnvironment) and task.gui.screen == (1024, 768)
    assert [s.type for s in task.gui.steps] == ["launch", "sleep"]
    assert task.gui.steps[0].command == ("mousepad", "/workspace/notes.txt")
    assert set(task.verify) == {"files/notes.txt"}
    assert set(task.verify_extra) == {"osworld_eval.pyz", "task.json"}
    assert json.loads(task.verify_extra["task.json"])["evaluator"]["func"] == "compare_text_file"
    # Without a check, the task's own verify/ scores it.
    d = _task_dir(tmp_path, "[desktop]\n", {"verify/verify.py": "print(1)"})
    (task,) = load_tasks(d).tasks
    assert isinstance(task.gui, DesktopEnvironment) and task.verify_command.endswith("verify.py")


def _call(name: str, **arguments: object) -> dict[str, object]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


async def test_the_desktop_example_runs_from_its_file_with_the_computer_agent(
    scripted_gateway: ScriptedGateway, tmp_path: Path
) -> None:
    loaded = load_tasks(DESKTOP_SAMPLE)
    assert loaded.errors == [], loaded.errors
    (task,) = loaded.tasks
    notes = "/workspace/notes.txt"
    for name, replies, reward in (
        (
            "done",
            [
                _call(
                    "str_replace_editor", command="create", path=notes, file_text="hello desktop"
                ),
                _call("computer", code="DONE"),
            ],
            1.0,
        ),
        ("noop", [_call("computer", code="DONE")], 0.0),
    ):
        config = RolloutConfig(
            tasks=[task],
            harness="computer-agent",
            harness_options={"max_steps": 3},
            gateway_url=scripted_gateway(replies),
            out_dir=tmp_path / name / "run",
            n=1,
            retry_backoff_s=0.0,
            backend_options={"root": tmp_path / name / "sandboxes"},
        )
        (res,) = await run_rollouts(config)
        assert (res.status, res.reward, res.error) == ("completed", reward, None), res


WIKI_TASK = """
[browser]
app = "wiki"                   # a bundled web app served in the sandbox (shop, mail, ...)

[browser.reward]
answer = ["8443"]
[[browser.reward.check]]       # SQL on the app's database, read after the agent stopped
sql = "SELECT sum(revision) FROM pages"
expect = [[4]]
"""


async def test_an_app_task_is_scored_by_the_apps_state_and_a_shell_is_refused(
    scripted_gateway: ScriptedGateway, tmp_path: Path
) -> None:
    (tmp_path / "tasks").mkdir()
    d = _task_dir(tmp_path / "tasks", WIKI_TASK)
    (task,) = load_tasks(d).tasks
    assert isinstance(task.gui, BrowserEnvironment) and task.gui.app == "wiki"
    assert task.gui.start_url == "/wiki/" and "wiki" in task.tags
    with pytest.raises(EvidenceReachable, match="web apps' database"):
        refuse_reachable_evidence([task], get_harness("shell", command="true"))
    for said, reward in (("8443", 1.0), ("80", 0.0)):
        config = RolloutConfig(
            tasks=[task],
            harness="browser-agent",
            harness_options={"max_steps": 2},
            gateway_url=scripted_gateway([f"Action: Answer; {said}"]),
            out_dir=tmp_path / said / "run",
            n=1,
            retry_backoff_s=0.0,
            backend_options={"root": tmp_path / said / "sandboxes"},
        )
        (res,) = await run_rollouts(config)
        assert (res.status, res.reward) == ("completed", reward), res
        assert res.details is not None and res.details["checks"][0]["rows"] == [[4]]


@pytest.mark.parametrize("sample", ["newsletter-signup", "desktop-notes"])
async def test_tasks_check_runs_a_gui_tasks_solution_with_its_environment_up(
    backend: LocalBackend, sample: str
) -> None:
    """``openforge tasks check``'s oracle: the browser example's solve.sh drives the page
    through the environment's server (1), and the untouched environment scores 0."""
    (task,) = load_tasks(SAMPLES / sample).tasks
    got = await check_task(backend, task, use_cache=False)
    assert (got.ok, got.oracle, got.noop, got.reason) == (True, 1.0, 0.0, ""), got
