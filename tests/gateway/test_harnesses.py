"""Real harnesses (Claude Code, Codex CLI) against the gateway: one shell-tool round trip
each, and a Codex session that compacts."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

from openforge.engines.scripted import ScriptedEngine
from openforge.gateway.server import Gateway
from openforge.harnesses.codex import KEY_ENV, codex_config
from openforge.store.sqlite import SqliteStore

from .conftest import MODEL, new_rollout, write_script

pytestmark = pytest.mark.slow


async def _run(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env={**os.environ, **env},
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 240)
    return proc.returncode or 0, out.decode(errors="replace")


async def _round_trip(tmp_path: Path, tool: dict[str, Any], launch: Any, dialect: str) -> None:
    script = write_script(
        tmp_path / "script.jsonl", [{"tool_calls": [tool]}, {"text": "The answer is forge-42."}]
    )
    engine = ScriptedEngine.for_model(script, MODEL)
    async with Gateway(engine, SqliteStore(tmp_path / "store.db"), model=MODEL) as gw:
        rollout = await new_rollout(gw)
        work = tmp_path / "work"
        work.mkdir()
        argv, env = launch(rollout, tmp_path)
        rc, out = await _run(argv, env, work)
        assert rc == 0, out
        assert "forge-42" in out
        calls = await gw.store.calls(rollout["rollout_id"])
    main = [c for c in calls if c.dialect == dialect and c.status == "ok"]
    assert len(main) >= 2, [(c.dialect, c.status, c.error) for c in calls]
    # The k-th call of the rollout got script line k, token for token.
    for c in main[:2]:
        assert c.output_ids == engine.reply_ids(c.seq)
    first, second = main[0], main[1]
    assert first.completion["tool_calls"][0]["name"] == tool["name"]
    assert second.completion["text"] == "The answer is forge-42."
    # The harness sent the tool call back; the gateway rendered it from its exact ids.
    prefix = first.prompt_ids + first.output_ids
    assert second.prompt_ids[: len(prefix)] == prefix
    assert not second.fork


def _installed(program: str) -> None:
    """Fail, naming the script, when a harness setup installs is missing (never a skip)."""
    if shutil.which(program) is None:
        pytest.fail(f"{program} is missing: scripts/install-harnesses.sh installs it")


async def test_claude_code_tool_round_trip(tmp_path: Path) -> None:
    _installed("claude")

    def launch(rollout: dict[str, Any], tmp: Path) -> tuple[list[str], dict[str, str]]:
        home = tmp / "home"
        home.mkdir()
        env = {
            "ANTHROPIC_BASE_URL": rollout["anthropic_base_url"],
            "ANTHROPIC_API_KEY": rollout["key"],
            "IS_SANDBOX": "1",
            "DISABLE_TELEMETRY": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "HOME": str(home),
        }
        argv = [
            "claude",
            "-p",
            "Print forge-42 with bash",
            "--output-format",
            "stream-json",
            "--verbose",
            "--allowedTools",
            "Bash",
        ]
        return argv, env

    tool = {"name": "Bash", "arguments": {"command": "echo forge-$((6*7))", "description": "p"}}
    await _round_trip(tmp_path, tool, launch, "anthropic")


async def test_codex_tool_round_trip(tmp_path: Path) -> None:
    _installed("codex")

    def launch(rollout: dict[str, Any], tmp: Path) -> tuple[list[str], dict[str, str]]:
        home = tmp / "codex-home"
        home.mkdir()
        (home / "config.toml").write_text(
            'model = "gpt-5-codex"\nmodel_provider = "openforge"\n\n'
            "[model_providers.openforge]\n"
            'name = "OpenForge"\n'
            f'base_url = "{rollout["openai_base_url"]}"\n'
            'wire_api = "responses"\n'
            'env_key = "OPENFORGE_KEY"\n'
        )
        env = {"CODEX_HOME": str(home), "OPENFORGE_KEY": rollout["key"], "HOME": str(tmp)}
        argv = [
            "codex",
            "exec",
            "--skip-git-repo-check",
            "--sandbox",
            "danger-full-access",
            "Print forge-42 with the shell",
        ]
        return argv, env

    tool = {"name": "exec_command", "arguments": {"cmd": "echo forge-$((6*7))"}}
    await _round_trip(tmp_path, tool, launch, "openai_responses")


async def test_codex_compacts_and_finishes(tmp_path: Path) -> None:
    """Codex forced to compact early (``model_auto_compact_token_limit`` below its first
    prompt): after its tool call it sends a ``compaction_trigger``; the policy's summary
    comes back as a compaction item, Codex carries it on and finishes the task, and the
    trace shows the compaction call and the fork its summary starts."""
    _installed("codex")
    summary = "Ran echo forge-$((6*7)); it printed forge-42. Next: report forge-42."
    script = write_script(
        tmp_path / "script.jsonl",
        [
            {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "echo forge-$((6*7))"}}]},
            {"text": summary},
            {"text": "The answer is forge-42."},
        ],
    )
    engine = ScriptedEngine.for_model(script, MODEL)
    async with Gateway(engine, SqliteStore(tmp_path / "store.db"), model=MODEL) as gw:
        rollout = await new_rollout(gw)
        home = tmp_path / "codex-home"
        home.mkdir()
        config = codex_config(rollout["base_url"], "gpt-5-codex", auto_compact_tokens=1000)
        (home / "config.toml").write_text(config)
        env = {"CODEX_HOME": str(home), KEY_ENV: rollout["key"], "HOME": str(tmp_path)}
        work = tmp_path / "work"
        work.mkdir()
        argv = ["codex", "exec", "--json", "--skip-git-repo-check", "Print forge-42 with the shell"]
        rc, out = await _run(argv, env, work)
        assert rc == 0, out
        calls = [c for c in await gw.store.calls(rollout["rollout_id"]) if c.status == "ok"]
    assert '"text":"The answer is forge-42."' in out, out[-3000:]
    # Codex's own session log records the compaction it installed.
    logs = [p.read_text() for p in (home / "sessions").rglob("*.jsonl")]
    assert any('"type":"compaction"' in log for log in logs)
    assert [c.seq for c in calls] == [0, 1, 2], [(c.seq, c.status, c.error) for c in calls]
    first, compaction, after = calls
    for c in calls:  # the k-th call got script line k, token for token
        assert c.output_ids == engine.reply_ids(c.seq)
    # The compaction is a policy call extending the first exactly; its answer the summary.
    assert compaction.render_info["compaction"] == "compaction_trigger"
    assert compaction.role == "policy" and not compaction.fork
    prefix = first.prompt_ids + first.output_ids
    assert compaction.prompt_ids[: len(prefix)] == prefix
    assert compaction.completion["text"] == summary
    # Codex sent the compaction item back: the summary stands for the turns it replaced.
    assert after.fork and after.completion["text"] == "The answer is forge-42."
    assert after.render_info["fork_reason"].startswith("compacted: ")
    assert after.render_info["compacted"][0]["source"] == compaction.response_id
    kinds = [i.get("type") for i in orjson.loads(after.raw_request)["input"]]
    assert kinds[-1] == "compaction" and "function_call" not in kinds
