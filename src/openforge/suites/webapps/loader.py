"""Tasks on OpenForge's bundled local web apps, verified from the apps' server state.

The apps (:mod:`openforge.suites.webapps.server`: a shop, a mail client, a booking
form, a docs wiki) run inside the sandbox beside the browser; every change an agent makes
is a form POST their server writes to SQLite. A task directory holds one ``webapp.toml``::

    app = "shop"                       # shop | mail | booking | wiki
    goal = "Buy 2 Blue Mugs for Ada Lovelace, 12 Analytical Street."
    start = "/shop/"                   # optional: the page opened first
    split = "train"                    # optional: train | test
    timeout_s = 300                    # optional

    [[check]]                          # SQL on the apps' database, after the agent stopped
    sql = "SELECT o.name, i.slug, i.qty FROM orders o JOIN order_items i ON i.order_id = o.id"
    expect = [["Ada Lovelace", "blue-mug", 2]]

    [answer]                           # optional: the agent's Answer must contain each
    contains = ["8443"]                # (the answer its policy stated, as the gateway recorded)

The reward is 1 when every check's rows equal ``expect`` (in order) and the answer holds,
else 0. A database that is missing (the apps never started) or a query that fails is the
verifier failing, so the rollout is ``infra_error``, never 0.

The bundled suite ``webapps`` (``openforge rollout --tasks webapps``) is :data:`SUITE_TASKS`,
one task of each app in the ``test`` split.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from openforge.environments.base import STATED_ANSWER
from openforge.environments.browser import APP_DB, RESULT_FILE, BrowserEnvironment
from openforge.sandboxes.runtime import SANDBOX_HOME
from openforge.suites.cache import cached_suite
from openforge.tasks.model import Task, TaskError, check_keys, read_task_data

__all__ = [
    "APPS",
    "SUITE_TASKS",
    "WEBAPPS_SUITE",
    "WEBAPP_FILE",
    "load_webapp",
    "read_checks",
    "verify_script",
    "webapps_suite",
]

WEBAPP_FILE = "webapp.toml"
WEBAPPS_SUITE = "webapps"
APPS = ("shop", "mail", "booking", "wiki")
_KEYS = ("app", "goal", "start", "split", "timeout_s", "check", "answer")
_VERIFY = "webapp_verify.py"
_SUITE_VERSION = 1

_ORDERS = (
    "SELECT o.name, o.address, i.slug, i.qty FROM orders o "
    "JOIN order_items i ON i.order_id = o.id ORDER BY o.id, i.slug"
)
# (TOML has no null: a message that replies to none reads 0.)
_SENT = "SELECT recipient, subject, coalesce(in_reply_to, 0) FROM messages WHERE id > 5 ORDER BY id"
_BOOKED = "SELECT name, day, time, party, status FROM bookings ORDER BY id"
# (name, app, goal, checks as (sql, expect), answer must contain, split)
_Check = tuple[str, list[list[Any]]]
SUITE_TASKS: tuple[tuple[str, str, str, tuple[_Check, ...], tuple[str, ...], str], ...] = (
    ("shop-mugs", "shop", "Buy 2 Blue Mugs and have them shipped to Ada Lovelace, "
     "12 Analytical Street.",
     ((_ORDERS, [["Ada Lovelace", "12 Analytical Street", "blue-mug", 2]]),), (), "train"),
    ("shop-desk", "shop", "Order one Desk Lamp and three Notebook A5 for Alan Turing, "
     "3 Bletchley Road.",
     ((_ORDERS, [["Alan Turing", "3 Bletchley Road", "desk-lamp", 1],
                 ["Alan Turing", "3 Bletchley Road", "notebook", 3]]),), (), "train"),
    ("shop-cheapest", "shop", "Buy one of the cheapest product in the office category, "
     "shipped to Grace Hopper, 1 Navy Way.",
     ((_ORDERS, [["Grace Hopper", "1 Navy Way", "notebook", 1]]),), (), "test"),
    ("mail-send", "mail", "Send an email to bob@example.org with the subject "
     "'Offsite agenda' saying that the agenda is attached.",
     ((_SENT, [["bob@example.org", "Offsite agenda", 0]]),), (), "train"),
    ("mail-star", "mail", "Star the email from Carol about the Q1 budget.",
     (("SELECT id FROM messages WHERE starred = 1", [[1]]),), (), "train"),
    ("mail-archive", "mail", "Archive the weekly newsletter.",
     (("SELECT id FROM messages WHERE folder = 'archive'", [[3]]),), (), "train"),
    ("mail-reply", "mail", "Reply to Dan's email about lunch to say yes.",
     ((_SENT, [["dan@example.org", "Re: Lunch on Thursday?", 2]]),), (), "test"),
    ("booking-four", "booking", "Book a table for 4 guests on 2026-12-12 at 19:00 under "
     "the name Ada Lovelace.",
     ((_BOOKED, [["Grace Hopper", "2026-12-11", "19:00", 2, "confirmed"],
                 ["Ada Lovelace", "2026-12-12", "19:00", 4, "confirmed"]]),), (), "train"),
    ("booking-cancel", "booking", "Cancel Grace Hopper's booking.",
     ((_BOOKED, [["Grace Hopper", "2026-12-11", "19:00", 2, "cancelled"]]),), (), "train"),
    ("booking-lunch", "booking", "Book a table for 2 guests on 2026-12-10 at 12:00 for "
     "Alan Turing.",
     ((_BOOKED, [["Grace Hopper", "2026-12-11", "19:00", 2, "confirmed"],
                 ["Alan Turing", "2026-12-10", "12:00", 2, "confirmed"]]),), (), "test"),
    ("wiki-release", "wiki", "On the Deploy page of the wiki, change the release from "
     "v1.2 to v1.3.",
     (("SELECT body LIKE '%v1.3%' AND body NOT LIKE '%v1.2%' FROM pages "
       "WHERE slug = 'deploy'", [[1]]),), (), "train"),
    ("wiki-new", "wiki", "Create a wiki page titled 'Release Notes' with the text "
     "'First release.'",
     (("SELECT title, body FROM pages WHERE slug = 'release-notes'",
       [["Release Notes", "First release."]]),), (), "train"),
    ("wiki-port", "wiki", "Which port does the staging server run on, according to the "
     "wiki? Answer with the number.",
     (("SELECT sum(revision) FROM pages", [[4]]),), ("8443",), "test"),
)  # fmt: skip


def verify_script(checks: list[dict[str, Any]], answer: list[str]) -> bytes:
    """The verifier: the checks' SQL on the apps' database (read-only), the agent's answer
    (the one the policy stated, which the orchestrator puts beside it as
    :data:`~openforge.environments.base.STATED_ANSWER`; the environment's result file, which
    a process with the sandbox's uid could write, is read only to see that it came up).

    It exits non-zero (``infra_error``) when a query fails; a result or database gone or
    spoiled after the environment came up (the only time it is run) is the agent's 0;
    else it prints the reward and each check's rows.
    """
    spec = json.dumps({"checks": checks, "answer": answer})
    return f"""import json, os, sqlite3, sys
SPEC = json.loads({spec!r})
home = {SANDBOX_HOME!r}  # the agent's home, where the environment wrote; not the verifier's $HOME
def zero(why):
    # Verified only after the environment came up (the orchestrator's rule), which wrote
    # both: one gone now was removed from inside the sandbox, the agent's doing.
    print(json.dumps({{"reward": 0.0, "details": {{"why_zero": why}}}}))
    sys.exit(0)
try:
    with open(os.path.join(home, {RESULT_FILE!r}), encoding="utf-8") as f:
        state = json.load(f)
    if not isinstance(state, dict):
        raise ValueError("not a JSON object")
except (OSError, ValueError) as exc:
    zero("the environment's result is gone or unreadable: %s" % exc)
if state.get("error"):  # written only before the environment was up: not the server's now
    zero("the result says error: %s" % str(state["error"])[:200])
db = os.path.join(home, {APP_DB!r})
if not os.path.isfile(db):
    zero("the web apps' database %s is gone" % db)
con = sqlite3.connect("file:%s?mode=ro" % db, uri=True)
results, ok = [], True
for check in SPEC["checks"]:
    try:
        rows = [list(r) for r in con.execute(check["sql"])]
    except sqlite3.Error as exc:
        sys.exit("check %r failed: %s" % (check["sql"], exc))
    good = rows == check["expect"]
    ok = ok and good
    results.append({{"sql": check["sql"], "rows": rows, "ok": good}})
try:  # the answer the policy stated, as the gateway recorded it: never the result's copy
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), {STATED_ANSWER!r})) as f:
        said = json.load(f).get("answer")
except (OSError, ValueError, AttributeError):
    said = None
answer_ok = all(a.lower() in str(said or "").lower() for a in SPEC["answer"])
details = {{"checks": results, "answer": said, "answer_ok": answer_ok}}
print(json.dumps({{"reward": 1.0 if ok and answer_ok else 0.0, "details": details}}))
""".encode()


def read_checks(file: Path, raw: Any, field: str = "check") -> list[dict[str, Any]]:
    """The ``[[check]]`` tables (``sql``, ``expect``) of ``file``, named ``field`` in errors."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise TaskError(file, field, f"must be an array of tables ([[{field}]])")
    out = []
    for i, c in enumerate(raw):
        where = f"{field}[{i}]"
        if not isinstance(c, dict):
            raise TaskError(file, where, "must be a table with sql and expect")
        check_keys(file, c, ("sql", "expect"), f"{where}.")
        if not isinstance(c.get("sql"), str) or not c["sql"].strip():
            raise TaskError(file, f"{where}.sql", "must be an SQL query")
        expect = c.get("expect")
        if not isinstance(expect, list) or not all(isinstance(r, list) for r in expect):
            raise TaskError(file, f"{where}.expect", "must be a list of rows (lists)")
        out.append({"sql": c["sql"], "expect": expect})
    return out


def webapp_task(
    task_id: str,
    app: str,
    goal: str,
    checks: list[dict[str, Any]],
    answer: list[str],
    *,
    start: str = "",
    split: str = "train",
    timeout_s: float = 300.0,
    path: Path,
) -> Task:
    """A task on the bundled app ``app``: open ``start``, reward by ``checks`` and ``answer``."""
    env = BrowserEnvironment(start_url=start or f"/{app}/", app=app, goal=goal)
    return Task(
        id=task_id,
        instruction=goal,
        path=path,
        format="webapp",
        timeout_s=timeout_s,
        split=split,
        tags=("gui", "browser", "webapp", app),
        category=app,
        verify_command=f"python3 .openforge-verify/{_VERIFY}",
        verify_extra={_VERIFY: verify_script(checks, answer)},
        gui=env,
    )


def load_webapp(d: Path) -> Task:
    """Load a task directory holding ``webapp.toml``."""
    file = d / WEBAPP_FILE
    data = read_task_data(file)
    check_keys(file, data, _KEYS)
    app = data.get("app")
    if app not in APPS:
        raise TaskError(file, "app", f"must be one of {', '.join(APPS)}, not {app!r}")
    goal = data.get("goal")
    if not isinstance(goal, str) or not goal.strip():
        raise TaskError(file, "goal", "must be the task as the agent is told it")
    start = data.get("start", f"/{app}/")
    if not isinstance(start, str) or not start.startswith("/"):
        raise TaskError(file, "start", f"must be a path on the apps' server, not {start!r}")
    split = data.get("split", "train")
    if split not in ("train", "test"):
        raise TaskError(file, "split", f"must be 'train' or 'test', not {split!r}")
    timeout = data.get("timeout_s", 300)
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0:
        raise TaskError(file, "timeout_s", f"must be a positive number, not {timeout!r}")
    answer = data.get("answer", {})
    if not isinstance(answer, dict):
        raise TaskError(file, "answer", "must be a table with contains")
    check_keys(file, answer, ("contains",), "answer.")
    contains = answer.get("contains", [])
    if not isinstance(contains, list) or not all(isinstance(a, str) for a in contains):
        raise TaskError(file, "answer.contains", "must be a list of strings")
    checks = read_checks(file, data.get("check", []))
    if not checks and not contains:
        raise TaskError(file, "check", "a task needs at least one [[check]] or an [answer]")
    return webapp_task(
        f"webapps/{d.name}",
        app,
        goal.strip(),
        checks,
        contains,
        start=start,
        split=split,
        timeout_s=float(timeout),
        path=file,
    )


def _write_suite(root: Path) -> None:
    for name, app, goal, checks, contains, split in SUITE_TASKS:
        d = root / name
        d.mkdir()
        lines = [f"app = {json.dumps(app)}", f"goal = {json.dumps(goal)}", f'split = "{split}"']
        for sql, expect in checks:
            lines += ["", "[[check]]", f"sql = {json.dumps(sql)}", f"expect = {json.dumps(expect)}"]
        if contains:
            lines += ["", "[answer]", f"contains = {json.dumps(list(contains))}"]
        (d / WEBAPP_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")


def webapps_suite() -> Path:
    """The bundled ``webapps`` suite's directory, generated on first use (atomically)."""
    return cached_suite(f"{WEBAPPS_SUITE}-v{_SUITE_VERSION}", _write_suite)
