"""OpenForge rollouts → veRL agent-loop outputs (pure; no veRL import).

A rollout's calls are read back from the gateway's admin API
(``GET /admin/rollouts/<id>?tokens=1``), planned into ``merged`` samples by ``traces/``
(observation tokens mask 0, sampled tokens mask 1 with their logprobs), and the first
path becomes veRL's ``AgentLoopOutput`` fields. A rollout that forked (the harness edited
its history) has more than one path; veRL takes one trajectory per prompt, so the rest are
counted in ``extra_fields`` rather than silently merged.

A path that shows a VLM images carries them as ``multi_modal_data = {"images": [...]}``
(PIL images in placeholder order, read from the gateway's ``/admin/blobs/<sha256>``), and
``mm_processor_kwargs`` with the ``min_pixels``/``max_pixels`` the gateway's processor used,
so veRL's processor re-derives the same grids (``pixel_values``, ``image_grid_thw`` and the
M-RoPE positions) for the placeholders already expanded in the ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from openforge.store.schemas import CallRecord, CallStatus, Rollout, RolloutStatus
from openforge.traces.samples import Mode, Sample, TraceOptions, plan_rollout

__all__ = [
    "VERL_VERSION",
    "call_from_json",
    "output_fields",
    "processor_kwargs",
    "rollout_from_json",
    "samples_of",
]

VERL_VERSION = "0.9.1"  # the veRL release the bridge is written and tested against


def call_from_json(d: dict[str, Any], rollout_id: str) -> CallRecord:
    """A call as the admin API shows it (with ``tokens=1``) back as a :class:`CallRecord`."""
    return CallRecord(
        id=str(d["id"]),
        rollout_id=rollout_id,
        seq=int(d["seq"]),
        dialect=str(d.get("dialect", "")),
        status=CallStatus(d.get("status", "ok")),
        prompt_ids=[int(x) for x in d.get("prompt_ids", [])],
        output_ids=[int(x) for x in d.get("output_ids", [])],
        output_logprobs=[float(x) for x in d.get("output_logprobs", [])],
        finish_reason=d.get("finish_reason"),
        engine=str(d.get("engine", "")),
        weight_version=str(d.get("weight_version", "0")),
        fork=bool(d.get("fork", False)),
        render_info=dict(d.get("render_info") or {}),
        harness=dict(d.get("harness") or {}),
    )


def rollout_from_json(d: dict[str, Any]) -> Rollout:
    """The admin API's rollout JSON as a :class:`Rollout` (the key is never shown there)."""
    return Rollout(
        id=str(d["id"]),
        key="",
        status=RolloutStatus(d["status"]),
        task_id=d.get("task_id"),
        group_id=d.get("group_id"),
        reward=d.get("reward"),
        metadata=dict(d.get("metadata") or {}),
    )


def samples_of(rollout: Rollout, calls: Sequence[CallRecord]) -> list[Sample]:
    """The rollout's merged samples (empty when it is masked: infra error, no trained call)."""
    return plan_rollout(rollout, calls, TraceOptions(mode=Mode.MERGED)).samples


def processor_kwargs(sample: Sample) -> dict[str, Any] | None:
    """The processor settings the sample's grids were computed with, as veRL passes them
    to its processor (``mm_processor_kwargs``); None for a sample without images."""
    if not sample.images:
        return None
    settings = sample.image_processor
    out = {k: settings[k] for k in ("min_pixels", "max_pixels") if settings.get(k) is not None}
    return out or None


def output_fields(
    samples: Sequence[Sample],
    reward: float | None,
    response_length: int,
    num_turns: int,
    images: Sequence[Any] = (),
) -> dict[str, Any]:
    """``AgentLoopOutput`` keyword arguments (less ``metrics``) for a rollout's samples.

    The response is cut to ``response_length`` (veRL pads every row to it); a masked
    rollout gives an empty, fully masked response so veRL trains nothing on it. ``images``
    are the first sample's images (PIL, in its ``images`` order).
    """
    if not samples:
        return {
            "prompt_ids": [], "response_ids": [], "response_mask": [],
            "response_logprobs": [], "reward_score": None, "num_turns": num_turns,
            "extra_fields": {"openforge_masked": True, "openforge_paths": 0},
        }  # fmt: skip
    s = samples[0]
    if len(images) != len(s.images):
        raise ValueError(f"the path shows {len(s.images)} images, {len(images)} were given")
    cut = slice(0, response_length)
    # veRL re-derives pixel features from the kept ids: images past the cut are dropped,
    # and one cut through its placeholders would misalign them all (so the path is masked).
    edge = len(s.prompt_ids) + response_length
    if any(i.offset < edge < i.offset + i.length for i in s.images):
        return output_fields([], reward, response_length, num_turns)
    multimodal: dict[str, Any] = {}
    kept = [img for img, i in zip(images, s.images, strict=True) if i.offset + i.length <= edge]
    if kept:
        multimodal = {"multi_modal_data": {"images": kept}}
        kwargs = processor_kwargs(s)
        if kwargs:
            multimodal["mm_processor_kwargs"] = kwargs
    return {
        **multimodal,
        "prompt_ids": list(s.prompt_ids),
        "response_ids": s.response_ids[cut],
        "response_mask": s.loss_mask[cut],
        "response_logprobs": s.logprobs[cut],
        "reward_score": reward,
        "num_turns": num_turns,
        "extra_fields": {
            "openforge_masked": False,
            "openforge_paths": len(samples),
            "openforge_rollout_id": s.rollout_id,
            "openforge_truncated": len(s.response_ids) > response_length,
            "openforge_weight_versions": list(s.weight_versions),
        },
    }
