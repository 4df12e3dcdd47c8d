"""Synthetic rollouts for tests, benchmarks and demos: call trees written token by token."""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["Spec", "linear_agent", "make_calls", "make_rollout"]

from openforge.store.schemas import CallRecord, CallStatus, Rollout, RolloutStatus


@dataclass
class Spec:
    """One call to write: extend ``parent`` (an index into earlier specs) or start a root."""

    parent: int | None
    observation: list[int]  # tokens the harness appended (or the root prompt)
    output: list[int]
    status: CallStatus = CallStatus.OK
    repeat_of: int | None = None  # same prompt as that spec (a retry)


def make_calls(
    rollout_id: str, specs: list[Spec], order: list[int] | None = None, engine: str = "local"
) -> list[CallRecord]:
    """Calls for ``specs``; ``order`` permutes arrival (seq) without changing tokens."""
    prompts: list[list[int]] = []
    outputs: list[list[int]] = []
    for sp in specs:
        if sp.repeat_of is not None:
            prompt = list(prompts[sp.repeat_of])
        elif sp.parent is None:
            prompt = list(sp.observation)
        else:
            prompt = prompts[sp.parent] + outputs[sp.parent] + sp.observation
        prompts.append(prompt)
        outputs.append(list(sp.output))
    order = order if order is not None else list(range(len(specs)))
    calls: list[CallRecord] = []
    for seq, i in enumerate(order):
        sp = specs[i]
        out = outputs[i] if sp.status == CallStatus.OK else outputs[i][: len(outputs[i]) // 2]
        calls.append(
            CallRecord(
                id=f"{rollout_id}-c{i}",
                rollout_id=rollout_id,
                seq=seq,
                dialect="openai_chat",
                status=sp.status,
                prompt_ids=prompts[i],
                output_ids=out,
                # Distinct, recognisable logprobs: -(call index + position / 1000).
                output_logprobs=[-(i + k / 1000) for k in range(len(out))],
                engine=engine,
                weight_version="3",
            )
        )
    return calls


def make_rollout(
    rollout_id: str,
    reward: float | None = 1.0,
    group: str | None = "g0",
    status: RolloutStatus = RolloutStatus.COMPLETED,
) -> Rollout:
    """A finished, scored rollout of task ``t0``."""
    return Rollout(
        id=rollout_id,
        key="k-" + rollout_id,
        status=status,
        task_id="t0",
        group_id=group,
        reward=reward,
    )


def linear_agent(
    rollout_id: str,
    turns: int,
    rng: random.Random,
    system: int = 600,
    obs: int = 120,
    out: int = 60,
) -> list[CallRecord]:
    """A plain agent: one growing conversation of ``turns`` calls."""
    specs = [
        Spec(
            None,
            [rng.randrange(1000, 50000) for _ in range(system)],
            [rng.randrange(50000) for _ in range(out)],
        )
    ]
    for t in range(1, turns):
        specs.append(
            Spec(
                t - 1,
                [rng.randrange(50000) for _ in range(obs)],
                [rng.randrange(50000) for _ in range(out)],
            )
        )
    return make_calls(rollout_id, specs)
