"""Each adapter end to end through the orchestrator: the scripted engine plays a correct
(reward 1) or wrong (reward 0) solution of claw-mini's hello-file with the harness's own
tools; the stored calls are token-exact; a prompt past the context ends agent_error.

A harness's three rollouts (correct, wrong, past the context) run once per module and at
the same time, each with its own gateway and sandbox: most of a harness's wall time is its
own start-up and shutdown (OpenClaw: ~12 s before its first call), which overlap."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from openforge.harnesses.fingerprint import compare, fingerprint, load_fingerprint
from openforge.harnesses.registry import get_harness
from openforge.probing.probe import SOLUTIONS, WRONG, ProbeRun, probe
from openforge.store.schemas import CallStatus

from .conftest import require

HARNESSES = [
    "claw",
    pytest.param("claude-code", marks=pytest.mark.slow),
    pytest.param("codex", marks=pytest.mark.slow),
    pytest.param("openclaw", marks=pytest.mark.slow),
    "mini-swe-agent",
]
DIALECT = {
    "claw": "openai_chat",
    "claude-code": "anthropic",
    "codex": "openai_responses",
    "openclaw": "openai_chat",
    "mini-swe-agent": "openai_chat",
}
# What each harness says when the gateway refuses a prompt past the context.
CONTEXT_REASON = {
    "claw": "maximum context length is 300 tokens",
    "claude-code": "Prompt is too long",
    "codex": "context window",
    "openclaw": "Context overflow",
    "mini-swe-agent": "ContextWindowExceededError",
}


# OpenClaw 2026.9.6 strips the "_" from the gateway's tool-call ids ("call_ab…" comes back
# as "callab…"), so its second prompt cannot extend the first: the gateway must say so.
REWRITES_HISTORY = {"openclaw"}


Runs = dict[str, ProbeRun]  # "correct", "wrong", "context" -> that rollout


async def _three(name: str, work: Path) -> Runs:
    harness = get_harness(name)
    correct, wrong, context = await asyncio.gather(
        probe(harness, SOLUTIONS[name], work / "correct"),
        probe(harness, WRONG[name], work / "wrong"),
        probe(harness, SOLUTIONS[name], work / "context", max_context=300),
    )
    return {"correct": correct, "wrong": wrong, "context": context}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Runs]:
    """``runs(NAME)``: NAME's three rollouts, run together on first use."""
    done: dict[str, Runs | BaseException] = {}

    def get(name: str) -> Runs:
        require(name)
        if name not in done:
            try:
                done[name] = asyncio.run(_three(name, tmp_path_factory.mktemp(name)))
            except Exception as exc:  # fail each of its tests, without re-running them all
                done[name] = exc
        got = done[name]
        if isinstance(got, BaseException):
            raise got
        return got

    return get


def _assert_token_exact(run: ProbeRun, dialect: str, rewrites: bool = False) -> None:
    main = [c for c in run.calls if c.dialect == dialect and c.status == CallStatus.OK]
    assert len(main) >= 2, [(c.dialect, c.status, c.error) for c in run.calls]
    # The k-th call got script line k: the stored output ids are the engine's, exactly.
    for k, call in enumerate(main[: len(run.reply_ids)]):
        assert call.output_ids == run.reply_ids[k]
        assert len(call.output_logprobs) == len(call.output_ids)
    # Each later prompt extends the earlier prompt and its sampled ids, token for token.
    for earlier, later in itertools.pairwise(main):
        prefix = earlier.prompt_ids + earlier.output_ids
        if rewrites:  # never silently: a prompt that does not extend is a recorded fork
            assert later.fork and later.render_info.get("fork_reason")
            continue
        assert later.prompt_ids[: len(prefix)] == prefix
        assert not later.fork


@pytest.mark.parametrize("name", HARNESSES)
def test_correct_solution_scores_1_token_exact(name: str, runs: Callable[[str], Runs]) -> None:
    harness = get_harness(name)
    run = runs(name)["correct"]
    res = run.result
    assert (res.status, res.reward, res.error) == ("completed", 1.0, None), res
    _assert_token_exact(run, DIALECT[name], rewrites=name in REWRITES_HISTORY)
    # The rollout records its harness: name, pinned version, the stored fingerprint's hash.
    assert run.rollout is not None
    meta = run.rollout.metadata
    stored = load_fingerprint(harness.name, harness.version)
    assert stored is not None, f"no fingerprint stored for {name}: `openforge harness fingerprint`"
    assert (meta["harness"], meta["harness_version"]) == (harness.name, harness.version)
    assert meta["harness_fingerprint"] == stored["hash"]
    # The same call pattern as the stored baseline.
    assert compare(stored, fingerprint(harness.name, harness.version, run.calls)) == []
    transcript = orjson.loads((run.run_dir / "rollouts/hello-file/0/transcript.json").read_bytes())
    assert transcript


@pytest.mark.parametrize("name", HARNESSES)
def test_wrong_solution_scores_0(name: str, runs: Callable[[str], Runs]) -> None:
    run = runs(name)["wrong"]
    assert (run.result.status, run.result.reward) == ("completed", 0.0), run.result
    assert run.result.details == {"found": "goodbye\n"}


@pytest.mark.parametrize("name", HARNESSES)
def test_prompt_past_the_context_ends_agent_error_with_the_reason(
    name: str, runs: Callable[[str], Runs]
) -> None:
    run = runs(name)["context"]
    res = run.result
    assert (res.status, res.reward) == ("agent_error", 0.0), res
    assert res.error is not None and CONTEXT_REASON[name] in res.error, res.error
    refused = [c for c in run.calls if c.status == CallStatus.REJECTED]
    assert refused and all("prompt is too long" in (c.error or "") for c in refused)
    assert not [c for c in run.calls if c.status == CallStatus.OK]
    assert run.rollout is not None and run.rollout.status == "agent_error"


async def test_mini_swe_agent_text_mode_parses_the_fenced_command(tmp_path: Path) -> None:
    """``config=mini_textbased``: no tools are sent; the action is a fenced block in the text."""
    require("mini-swe-agent")
    run = await probe(
        get_harness("mini-swe-agent", config="mini_textbased"),
        SOLUTIONS["mini-swe-agent/text"],
        tmp_path,
    )
    assert (run.result.status, run.result.reward) == ("completed", 1.0), run.result
    _assert_token_exact(run, "openai_chat")
    assert all("tools" not in orjson.loads(c.raw_request) for c in run.calls)
    trajectory = orjson.loads((run.run_dir / "rollouts/hello-file/0/transcript.json").read_bytes())
    assert trajectory["info"]["exit_status"] == "Submitted"
    assert trajectory["info"]["mini_version"] == "2.4.6"


def test_mini_swe_agent_sampling_options_go_into_its_model_kwargs() -> None:
    """max_tokens / temperature are set where mini's users set them (LiteLLM model_kwargs)."""
    from openforge.harnesses.mini_swe_agent import MiniSweAgentHarness, mini_config

    harness = MiniSweAgentHarness(max_tokens="64", temperature="0.6")  # as -O gives them
    assert harness.sampling == {"max_tokens": 64, "temperature": 0.6}
    config = mini_config("http://gw/r/k", "k", "m", "litellm", 3, harness.sampling)
    assert config["model"]["model_kwargs"] == {
        "api_base": "http://gw/r/k/v1", "api_key": "k", "max_tokens": 64, "temperature": 0.6,
    }  # fmt: skip
    assert (
        "max_tokens"
        not in mini_config("http://gw", "k", "m", "litellm", 3)["model"]["model_kwargs"]
    )
