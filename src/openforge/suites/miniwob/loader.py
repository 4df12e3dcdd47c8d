"""MiniWoB++ tasks from the ``miniwob`` wheel, rewarded by each task's own JavaScript.

A MiniWoB task directory holds one ``miniwob.toml``::

    task = "click-button"   # a page of the wheel's html/miniwob/
    seed = 7                # Math.seedrandom seed: the same problem for every sample
    split = "train"         # optional
    timeout_s = 120         # optional

The task's page, with the wheel's ``core/`` and ``common/`` directories beside it, goes to
``site/`` in the workspace; the browser environment opens it, seeds it, starts the episode
with MiniWoB's 10-second episode clock turned off (a model on a CPU is slow) and reads
``WOB_RAW_REWARD_GLOBAL`` after every action. MiniWoB's raw reward is in [-1, 1] (-1 for a
wrong answer); the task's reward is ``max(0, raw)``.

The bundled suite ``miniwob`` (``openforge rollout --tasks miniwob``) is generated on
first use: :data:`SUITE_TASKS` with a few seeds each, ``test`` split on the last seed.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from openforge.environments.browser import VERIFY_SCRIPT, BrowserEnvironment, verify_script
from openforge.suites.cache import cached_suite
from openforge.tasks.model import Task, TaskError, collect_dir, read_task_data, unknown_keys

__all__ = [
    "MINIWOB_FILE",
    "MINIWOB_SUITE",
    "SUITE_TASKS",
    "load_miniwob",
    "miniwob_html_dir",
    "miniwob_suite",
    "miniwob_task",
]

MINIWOB_FILE = "miniwob.toml"
MINIWOB_SUITE = "miniwob"
_SUITE_VERSION = 1
# Click and type tasks an accessibility-tree agent can do with its actions.
SUITE_TASKS = (
    "click-button",
    "click-link",
    "click-dialog",
    "click-tab",
    "click-checkboxes",
    "focus-text",
    "enter-text",
    "enter-password",
    "login-user",
)
_SUITE_SEEDS = (1, 2, 3, 4)

_SETUP_JS = """() => {
  core.EPISODE_MAX_TIME = 2147483647;
  Math.seedrandom(%s);
  core.setDataMode('train');
  core.startEpisodeReal();
}"""
_GOAL_JS = "() => core.getUtterance()"
_REWARD_JS = """() => ({done: WOB_DONE_GLOBAL, raw: WOB_RAW_REWARD_GLOBAL,
  reward: Math.max(0, WOB_RAW_REWARD_GLOBAL), reason: WOB_REWARD_REASON})"""


def miniwob_html_dir() -> Path:
    """The wheel's ``html`` directory; :class:`TaskError` when ``miniwob`` is not installed."""
    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        raise TaskError("miniwob", "(package)", "not installed: pip install 'openforge[gui]'")
    html = Path(next(iter(spec.submodule_search_locations))) / "html"
    if not (html / "core" / "core.js").is_file():
        raise TaskError(html, "(package)", "the miniwob wheel has no html/core/core.js")
    return html


def miniwob_task(
    name: str,
    seed: int,
    split: str = "train",
    timeout_s: float = 300.0,
    path: Path | None = None,
) -> Task:
    """The MiniWoB task ``name`` with problem ``seed`` as an OpenForge task."""
    html = miniwob_html_dir()
    page = html / "miniwob" / f"{name}.html"
    where = path or page
    if not page.is_file():
        raise TaskError(where, "task", f"no MiniWoB task {name!r} in {html / 'miniwob'}")
    workspace = {f"site/miniwob/{page.name}": page}
    for sub in ("core", "common"):
        workspace.update({f"site/{sub}/{k}": v for k, v in collect_dir(html, sub, sub).items()})
    if "../flight/" in page.read_text(encoding="utf-8", errors="replace"):
        workspace.update(
            {f"site/flight/{k}": v for k, v in collect_dir(html, "flight", "").items()}
        )
    env = BrowserEnvironment(
        start_url=f"site/miniwob/{page.name}",  # relative: under the workspace
        site_root="site/",
        goal=f"MiniWoB task {name}",
        goal_js=_GOAL_JS,
        setup_js=_SETUP_JS % int(seed),
        reward_js=_REWARD_JS,
        skip_selector="#reward-display, #sync-task-cover",
        viewport=(500, 400),
    )
    return Task(
        id=f"miniwob/{name}/{seed}",
        instruction=f"Do the task stated on the web page in the browser (MiniWoB {name}).",
        path=where,
        format="miniwob",
        timeout_s=timeout_s,
        split=split,
        tags=("gui", "browser", "miniwob"),
        workspace=workspace,
        verify_command=f"python3 .openforge-verify/{VERIFY_SCRIPT}",
        verify_extra={VERIFY_SCRIPT: verify_script()},
        gui=env,
    )


def load_miniwob(d: Path) -> Task:
    """Load a task directory holding ``miniwob.toml``."""
    file = d / MINIWOB_FILE
    data = read_task_data(file)
    name, seed = data.get("task"), data.get("seed", 0)
    if not isinstance(name, str) or not name or "/" in name:
        raise TaskError(file, "task", "must be the name of a MiniWoB page, e.g. 'click-button'")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TaskError(file, "seed", f"must be an integer, not {seed!r}")
    split = data.get("split", "train")
    if split not in ("train", "test"):
        raise TaskError(file, "split", f"must be 'train' or 'test', not {split!r}")
    timeout = data.get("timeout_s", 300)
    if not isinstance(timeout, int | float) or timeout <= 0:
        raise TaskError(file, "timeout_s", f"must be a positive number, not {timeout!r}")
    task = miniwob_task(name, seed, split, float(timeout), path=file)
    task.warnings = tuple(unknown_keys(file, data, ("task", "seed", "split", "timeout_s")))
    return task


def _write_suite(root: Path) -> None:
    for name in SUITE_TASKS:
        for seed in _SUITE_SEEDS:
            split = "test" if seed == _SUITE_SEEDS[-1] else "train"
            d = root / f"{name}-{seed}"
            d.mkdir()
            (d / MINIWOB_FILE).write_text(
                f'task = "{name}"\nseed = {seed}\nsplit = "{split}"\n', encoding="utf-8"
            )


def miniwob_suite() -> Path:
    """The bundled ``miniwob`` suite's directory, generated on first use (atomically)."""
    return cached_suite(f"{MINIWOB_SUITE}-v{_SUITE_VERSION}", _write_suite)
