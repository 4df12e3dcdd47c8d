"""The bundled web apps in real bubblewrap sandboxes: the built-in browser agent and
Browser-Use (unmodified, through the gateway) do tasks on them, and the verifier reads the
outcome from the apps' own database."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from openforge.environments.browser import RESULT_FILE
from openforge.harnesses.browser_use import PREFIX
from openforge.rollouts import RolloutConfig, run_rollouts
from openforge.sandboxes.runtime import SANDBOX_HOME
from openforge.suites import load_tasks

from .conftest import ScriptedGateway, admin_headers

ORDERS = (
    "SELECT o.name, o.address, i.slug, i.qty FROM orders o "
    "JOIN order_items i ON i.order_id = o.id ORDER BY o.id, i.slug"
)


def _config(
    tmp_path: Path, gateway: str, harness: str, ids: list[str], **opts: object
) -> RolloutConfig:
    tasks = load_tasks("webapps").by_id()
    return RolloutConfig(
        tasks=[tasks[i] for i in ids],
        harness=harness,
        harness_options=dict(opts),
        gateway_url=gateway,
        out_dir=tmp_path / "run",
        n=1,
        retry_backoff_s=0.0,
        backend_options={"root": tmp_path / "sandboxes"},
    )


async def test_browser_agent_places_an_order_read_from_the_shops_database(
    scripted_gateway: Callable[[list[str]], str], tmp_path: Path
) -> None:
    # The shop's pages as the agent sees them: home [6] "Blue Mug"; product [6] Quantity,
    # [7] Add to cart; cart [11] Checkout; checkout [5] Full name, [7] Address, [8] Place order.
    gateway = scripted_gateway(
        [
            "Action: Click [6]",
            "Action: Type [6]; 2",
            "Action: Click [7]",
            "Action: Click [11]",
            "Action: Type [5]; Ada Lovelace",
            "Action: Type [7]; 12 Analytical Street",
            "Action: Click [8]",
            "Action: Answer; ordered",
        ]
    )
    config = _config(tmp_path, gateway, "browser-agent", ["webapps/shop-mugs"], max_steps=10)
    (res,) = await run_rollouts(config)
    assert (res.status, res.reward, res.error) == ("completed", 1.0, None), res
    assert res.details is not None
    (check,) = res.details["checks"]
    assert check["sql"] == ORDERS
    assert check["rows"] == [["Ada Lovelace", "12 Analytical Street", "blue-mug", 2]]
    rec = httpx.get(f"{gateway}/admin/rollouts/{res.rollout_id}", headers=admin_headers()).json()
    assert (rec["status"], rec["reward"], len(rec["calls"])) == ("completed", 1.0, 8)
    assert not list((tmp_path / "sandboxes").iterdir())


async def test_answers_are_checked_and_a_wrong_one_scores_zero(
    scripted_gateway: Callable[[list[str]], str], tmp_path: Path
) -> None:
    results = []
    for said in ("8443", "port 80"):  # the scripted engine replays its script per rollout
        gateway = scripted_gateway([f"Action: Answer; {said}"])
        config = _config(tmp_path / said, gateway, "browser-agent", ["webapps/wiki-port"])
        results += await run_rollouts(config)
    assert [(r.status, r.reward) for r in results] == [("completed", 1.0), ("completed", 0.0)]
    assert results[1].details is not None and results[1].details["answer"] == "port 80"
    # The wiki was only read: its revisions are the seed's.
    assert results[1].details["checks"][0]["rows"] == [[4]]


# Inside the sandbox: kill the browser environment's server (the process running
# browser_server.pyz after "python -I") so nothing writes its result again, then forge the
# result with the right answer, where the web-apps verifier read the answer before.
_FORGE = """for p in /proc/[0-9]*; do
  case "$(tr '\\0' '\\n' < "$p/cmdline" 2>/dev/null | sed -n 3p)" in
    */browser_server.pyz) kill -9 "${{p#/proc/}}" ;;
  esac
done
sleep 1
printf '%s' {result} > {home}/{result_file}
"""


async def test_an_answer_forged_in_the_result_file_scores_nothing(
    scripted_gateway: ScriptedGateway, tmp_path: Path
) -> None:
    # A shell harness (run only with --allow-reachable-evidence) forges the environment's
    # result with the right answer; its policy never states one. The wiki is left as seeded,
    # so the database check passes: only the answer can fail, and must.
    forged = {"answer": "8443", "done": True, "reward": 1.0, "actions": []}
    script = _FORGE.format(
        result=shlex.quote(json.dumps(forged)), home=SANDBOX_HOME, result_file=RESULT_FILE
    )
    gateway = scripted_gateway(
        [{"tool_calls": [{"name": "bash", "arguments": {"command": script}}]}, "Done."]
    )
    config = _config(tmp_path, gateway, "claw", ["webapps/wiki-port"])
    config.allow_reachable_evidence = True
    (res,) = await run_rollouts(config)
    assert (res.status, res.reward, res.error) == ("completed", 0.0, None), res
    assert res.details is not None
    assert (res.details["answer"], res.details["answer_ok"]) == (None, False)
    assert res.details["checks"][0]["ok"] is True  # the forged result was read, as it was up
    rec = httpx.get(f"{gateway}/admin/rollouts/{res.rollout_id}", headers=admin_headers()).json()
    assert len(rec["calls"]) == 2  # the forging policy did run


def _reply(*actions: dict[str, object]) -> str:
    return json.dumps(
        {
            "evaluation_previous_goal": "Page loaded.",
            "memory": "Buying mugs.",
            "next_goal": "Go on with the order.",
            "action": list(actions),
        }
    )


def _keys(*keys: str) -> str:
    actions: list[dict[str, object]] = [{"send_keys": {"keys": k}} for k in keys]
    return _reply(*actions)


async def test_browser_use_orders_in_the_shop_through_the_gateway(
    scripted_gateway: Callable[[list[str]], str], tmp_path: Path
) -> None:
    if not Path(PREFIX, "bin", "python").is_file():
        pytest.fail(f"Browser-Use is not installed at {PREFIX}: scripts/install-harnesses.sh")
    # Browser-Use's element indices change between browser starts, so the script types
    # through its own send_keys action (over DevTools); each page focuses its first field.
    gateway = scripted_gateway(
        [
            _keys("Blue Mug", "Enter"),  # search
            _keys("Enter"),  # open the first result
            _keys("2", "Enter"),  # quantity, add to cart
            _keys("Enter"),  # checkout
            _keys("Ada Lovelace", "Tab", "12 Analytical Street"),
            _keys("Enter"),  # place the order
            _reply({"done": {"text": "Ordered 2 Blue Mugs.", "success": True}}),
        ]
    )
    config = _config(tmp_path, gateway, "browser-use", ["webapps/shop-mugs"], max_steps=9)
    (res,) = await run_rollouts(config)
    assert (res.status, res.reward, res.error) == ("completed", 1.0, None), res
    assert res.details is not None
    assert res.details["checks"][0]["rows"] == [
        ["Ada Lovelace", "12 Analytical Street", "blue-mug", 2]
    ]
    rec = httpx.get(f"{gateway}/admin/rollouts/{res.rollout_id}", headers=admin_headers()).json()
    assert len(rec["calls"]) == 7  # seven policy calls; Browser-Use's judge is off


def test_bundled_suite_and_bad_files(tmp_path: Path) -> None:
    loaded = load_tasks("webapps")
    assert loaded.errors == []
    by_app: dict[str, int] = {}
    for t in loaded.tasks:
        by_app[t.category] = by_app.get(t.category, 0) + 1
    assert by_app == {"shop": 3, "mail": 4, "booking": 3, "wiki": 3}
    assert {t.category for t in loaded.tasks if t.split == "test"} == {
        "shop",
        "mail",
        "booking",
        "wiki",
    }
    for name, body in {
        "app": 'app = "bank"\ngoal = "x"\n[answer]\ncontains = ["1"]\n',
        "typo": 'app = "shop"\ngoal = "x"\nchek = 1\n',
        "expect": 'app = "shop"\ngoal = "x"\n[[check]]\nsql = "SELECT 1"\nexpect = 1\n',
        "empty": 'app = "wiki"\ngoal = "x"\n',
        "start": 'app = "wiki"\ngoal = "x"\nstart = "wiki"\n[answer]\ncontains = ["1"]\n',
    }.items():
        d = tmp_path / name
        d.mkdir()
        (d / "webapp.toml").write_text(body)
    errors = {Path(e.file).parent.name: e for e in load_tasks(tmp_path).errors}
    assert errors["app"].field == "app" and "bank" in errors["app"].problem
    assert errors["typo"].field == "chek" and "'check'" in errors["typo"].problem
    assert errors["expect"].field == "check[0].expect"
    assert errors["empty"].field == "check"
    assert errors["start"].field == "start"
