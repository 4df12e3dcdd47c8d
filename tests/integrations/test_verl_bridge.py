"""The veRL bridge: OpenForge samples → veRL agent-loop outputs.

The conversions run everywhere; the checks against veRL's own classes run where
``verl==0.9.1`` imports (CPU is enough).
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings
from typing import Any

import pytest

from openforge.integrations.verl.convert import (
    VERL_VERSION,
    call_from_json,
    output_fields,
    rollout_from_json,
    samples_of,
)

# Two calls: the second prompt extends the first call's prompt + output by a tool result.
CALLS: list[dict[str, Any]] = [
    {"id": "c0", "seq": 0, "status": "ok", "prompt_ids": [1, 2, 3], "output_ids": [10, 11],
     "output_logprobs": [-0.5, -0.25], "weight_version": "3"},
    {"id": "c1", "seq": 1, "status": "ok", "prompt_ids": [1, 2, 3, 10, 11, 20, 21],
     "output_ids": [12], "output_logprobs": [-1.0], "weight_version": "4"},
]  # fmt: skip
ROLLOUT = {"id": "r1", "status": "completed", "task_id": "t", "group_id": "g", "reward": 1.0}


def _samples() -> list[Any]:
    calls = [call_from_json(c, "r1") for c in CALLS]
    return samples_of(rollout_from_json(ROLLOUT), calls)


def test_merged_rollout_to_output_fields() -> None:
    fields = output_fields(_samples(), 1.0, response_length=100, num_turns=4)
    assert fields["prompt_ids"] == [1, 2, 3]
    assert fields["response_ids"] == [10, 11, 20, 21, 12]
    assert fields["response_mask"] == [1, 1, 0, 0, 1]
    assert fields["response_logprobs"] == pytest.approx([-0.5, -0.25, 0.0, 0.0, -1.0])
    assert fields["reward_score"] == 1.0
    assert fields["extra_fields"]["openforge_weight_versions"] == ["3", "4"]


def test_truncation_and_masked_rollout() -> None:
    cut = output_fields(_samples(), 1.0, response_length=3, num_turns=4)
    assert cut["response_ids"] == [10, 11, 20] and cut["response_mask"] == [1, 1, 0]
    assert cut["extra_fields"]["openforge_truncated"] is True
    infra = {**ROLLOUT, "status": "infra_error", "reward": None}
    none = samples_of(rollout_from_json(infra), [call_from_json(c, "r1") for c in CALLS])
    masked = output_fields(none, None, response_length=3, num_turns=4)
    assert masked["response_mask"] == [] and masked["extra_fields"]["openforge_masked"]


def _verl_or_skip() -> None:
    if importlib.util.find_spec("verl") is None:
        reason = f"verl=={VERL_VERSION} is not installed in this environment"
        print(f"SKIP: {reason}")
        pytest.skip(reason)
    # veRL imports Ray's deprecated state API; that is theirs, not ours to fail on.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        importlib.import_module("verl.experimental.agent_loop.agent_loop")
        importlib.import_module("openforge.integrations.verl.agent_loop")


def test_fields_build_real_agent_loop_output() -> None:
    _verl_or_skip()
    import verl
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput

    assert verl.__version__ == VERL_VERSION
    fields = output_fields(_samples(), 1.0, response_length=100, num_turns=4)
    out = AgentLoopOutput(**fields, metrics=AgentLoopMetrics())
    d = out.as_dict()
    assert d["responses"].tolist() == [10, 11, 20, 21, 12]
    assert d["response_mask"].tolist() == [1, 1, 0, 0, 1]
    assert d["rollout_log_probs"].tolist() == pytest.approx([-0.5, -0.25, 0.0, 0.0, -1.0])


def test_agent_loop_registers_with_verl() -> None:
    _verl_or_skip()
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    import openforge.integrations.verl.agent_loop as bridge

    entry = _agent_loop_registry["openforge"]
    assert entry["_target_"] == f"{bridge.__name__}.OpenForgeAgentLoop"
