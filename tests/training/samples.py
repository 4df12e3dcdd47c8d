"""A one-call training sample, as the trainer's tests build them."""

from __future__ import annotations

from openforge.traces.samples import Mode, Sample


def sample(rollout_id: str, prompt: list[int], response: list[int]) -> Sample:
    """A completed per-call sample of ``rollout_id``: every response token trained,
    logprobs 0 (a test sets them)."""
    return Sample(
        rollout_id=rollout_id, task_id="t", group_id="g", reward=None, status="completed",
        mode=Mode.PER_CALL, prompt_ids=prompt, response_ids=response,
        loss_mask=[1] * len(response), logprobs=[0.0] * len(response),
        call_ids=["c-" + rollout_id], spans=[("c-" + rollout_id, 0, len(response))],
        weight_versions=["0"],
    )  # fmt: skip
