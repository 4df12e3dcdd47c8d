"""Training samples from a rollout graph, in two modes, with masking and counters.

``per_call``: one sample per trained call — its prompt ids, its output ids, all trained.
``merged``: one sample per root-to-leaf path — the leaf's prompt + output ids, where each
trained call's output tokens carry loss mask 1 and their logprobs and everything else
(observations: tool results, user turns, template tokens) carries mask 0. A call shared
by several paths is trained in the first path (depth first, children by ``seq``) only.
``auto`` (the default): ``per_call`` for a rollout whose prompts showed a VLM images (a
GUI rollout), ``merged`` for any other. GUI harnesses drop old screenshots from history,
so nearly every call of theirs forks and a merged path would hold one call anyway; and a
merged path that did keep every screenshot would make one sequence carry all of them.

A sample that shows a VLM images lists them (:class:`SampleImage`, in order, by digest,
with their placeholder offsets in the sample's ``input_ids``); the bytes are store blobs.

A rollout the reward-hack monitor flagged (:mod:`openforge.traces.monitor`) is kept, left
out (reason ``flagged``) or kept with reward 0, as ``TraceOptions.flagged`` says, counting
only flags at or above ``flag_severity``.

Either way every sampled token of a trained call appears exactly once with its logprob.
Planning is pure (:func:`plan_rollout`, :func:`plan_groups`); reading a store and writing
exports live in :mod:`openforge.traces.source` and :mod:`openforge.traces.export`.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from openforge.store.schemas import CallRecord, FlagSeverity, Rollout, RolloutStatus
from openforge.traces.graph import DriftNote, Node, RolloutGraph, build_graph, retry_header_count

__all__ = [
    "FlagPolicy",
    "FlagSeverity",
    "Mode",
    "RolloutPlan",
    "Sample",
    "SampleImage",
    "TraceCounts",
    "TraceOptions",
    "acted_flags",
    "plan_groups",
    "plan_rollout",
]


class Mode(enum.StrEnum):
    PER_CALL = "per_call"
    MERGED = "merged"
    AUTO = "auto"  # per_call for rollouts with images, merged otherwise


class FlagPolicy(enum.StrEnum):
    """What becomes of a rollout the reward-hack monitor flagged."""

    KEEP = "keep"  # trained as if unflagged (the flag is only reported)
    DROP = "drop"  # no samples (reason ``flagged``); its group trains without it
    ZERO = "zero"  # trained with reward 0: the shortcut is pushed down, not ignored


@dataclass(slots=True, frozen=True)
class TraceOptions:
    """What to turn into samples.

    ``include_running``: also use rollouts not finished yet (created/running).
    ``mask_forks``: leave untrained every branch beyond a rollout's first root (a history
    edit, compaction or subagent); its calls are counted under reason ``fork``.
    ``require_reward``: leave out finished rollouts with no reward (reason ``unscored``);
    RL exports need one, SFT and analysis do not.
    ``min_group_size``: a group with fewer usable rollouts than this is dropped whole
    (reason ``group``); 1 keeps any group with a usable member.
    ``flagged``: what to do with a rollout that has a monitor flag at or above
    ``flag_severity`` (:class:`FlagPolicy`).
    """

    mode: Mode = Mode.AUTO
    include_running: bool = False
    mask_forks: bool = False
    require_reward: bool = False
    min_group_size: int = 1
    flagged: FlagPolicy = FlagPolicy.KEEP
    flag_severity: FlagSeverity = FlagSeverity.LOW

    def __post_init__(self) -> None:
        if self.min_group_size < 1:
            raise ValueError("min_group_size must be at least 1 (1 keeps every group)")


@dataclass(frozen=True, slots=True)
class SampleImage:
    """An image a sample shows: its store blob's digest and media type, the processor's
    ``(t, h, w)`` grid, and where its ``length`` pad ids start in ``input_ids``."""

    sha256: str
    media_type: str
    offset: int
    length: int
    grid_thw: tuple[int, int, int]

    @classmethod
    def from_record(cls, d: dict[str, Any]) -> SampleImage:
        """One entry of a call's ``render_info.prompt_images``."""
        t, h, w = (int(x) for x in d["grid_thw"])
        return cls(
            str(d["sha256"]), str(d.get("media_type") or ""), int(d["offset"]),
            int(d["length"]), (t, h, w),
        )  # fmt: skip


def prompt_images(call: CallRecord) -> list[SampleImage]:
    """The images the call's prompt showed a VLM, in prompt order (none for text models)."""
    return [SampleImage.from_record(d) for d in call.render_info.get("prompt_images", [])]


@dataclass(slots=True)
class Sample:
    """One training sequence: ``prompt_ids`` then ``response_ids``.

    ``loss_mask[i]`` is 1 where ``response_ids[i]`` was sampled by the policy and is
    trained, 0 for observation tokens; ``logprobs[i]`` is its sampling logprob (0.0 where
    the mask is 0). ``spans`` gives each trained call's output as
    ``(call_id, start, end)`` in response coordinates; ``weight_versions`` lines up with
    ``call_ids``. The response always ends with a trained token. ``images`` are those
    whose placeholders lie in ``input_ids`` (offsets in its coordinates), and
    ``image_processor`` the processor settings their grids were computed with.
    """

    rollout_id: str
    task_id: str | None
    group_id: str | None
    reward: float | None
    status: str
    mode: Mode
    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    call_ids: list[str]
    spans: list[tuple[str, int, int]]
    weight_versions: list[str]
    harness: dict[str, Any] = field(default_factory=dict)
    drift: str = "clean"  # the path's worst DriftKind: fork > realign > clean
    images: list[SampleImage] = field(default_factory=list)
    image_processor: dict[str, Any] = field(default_factory=dict)
    # The monitor's rules that flagged the rollout at or above the options' severity (its
    # reward is 0 when the options zero flagged rollouts).
    flags: list[str] = field(default_factory=list)

    @property
    def input_ids(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    @property
    def trained_tokens(self) -> int:
        return sum(self.loss_mask)


@dataclass(slots=True)
class TraceCounts:
    """Counters over everything planned; they add up across rollouts."""

    rollouts: int = 0
    rollouts_used: int = 0
    calls: int = 0
    teacher_calls: int = 0
    # Calls made with a judge or simulated-user key, by role: recorded, never samples.
    serving_calls: Counter[str] = field(default_factory=Counter)
    samples: int = 0
    tokens: int = 0  # prompt + response tokens over all samples
    tokens_trained: int = 0
    retries: int = 0
    retry_headers: int = 0  # calls whose SDK said it was retrying
    forks: int = 0
    ambiguous: int = 0
    drift: int = 0
    groups_dropped: int = 0
    # Rollouts with a monitor flag at or above the options' severity, and the flags by rule
    # (every severity): counted whether the options keep, drop or zero them.
    flagged: int = 0
    flags: Counter[str] = field(default_factory=Counter)
    masked_rollouts: Counter[str] = field(default_factory=Counter)
    masked_calls: Counter[str] = field(default_factory=Counter)

    def add(self, other: TraceCounts) -> None:
        for name in self.__dataclass_fields__:
            mine = getattr(self, name)
            if isinstance(mine, Counter):
                mine.update(getattr(other, name))
            else:
                setattr(self, name, mine + getattr(other, name))

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            out[name] = dict(sorted(value.items())) if isinstance(value, Counter) else value
        return out


@dataclass(slots=True)
class RolloutPlan:
    """A rollout's graph, its samples and why anything was left out."""

    rollout: Rollout
    graph: RolloutGraph
    samples: list[Sample]
    excluded: str | None  # why the whole rollout gives no samples (None: it may)
    counts: TraceCounts
    # The flag policy applied to it (drop or zero) when the monitor flagged it at the
    # options' severity; None when unflagged or kept. SFT exports leave such rollouts out.
    flagged: FlagPolicy | None = None

    @property
    def drift(self) -> list[DriftNote]:
        return self.graph.drift


_DRIFT_RANK = {"clean": 0, "realign": 1, "fork": 2}


def _rollout_exclusion(rollout: Rollout, options: TraceOptions, flagged: bool) -> str | None:
    if rollout.status == RolloutStatus.INFRA_ERROR:
        return "infra_error"
    unfinished = rollout.status in (RolloutStatus.CREATED, RolloutStatus.RUNNING)
    if unfinished and not options.include_running:
        return "running"
    if options.require_reward and rollout.reward is None:
        return "unscored"
    if flagged and options.flagged == FlagPolicy.DROP:
        return "flagged"
    return None


def acted_flags(rollout: Rollout, severity: FlagSeverity) -> list[str]:
    """The rules that flagged ``rollout`` at or above ``severity``, each once."""
    return list(dict.fromkeys(f.rule for f in rollout.flags if f.severity.rank >= severity.rank))


def _mask_forks(graph: RolloutGraph) -> None:
    for root in graph.roots[1:]:
        stack = [root]
        while stack:
            node = stack.pop()
            if node.excluded is None:
                node.excluded = "fork"
            stack.extend(node.children)


def _new_sample(rollout: Rollout, mode: Mode, harness: dict[str, Any]) -> Sample:
    return Sample(
        rollout_id=rollout.id,
        task_id=rollout.task_id,
        group_id=rollout.group_id,
        reward=rollout.reward,
        status=str(rollout.status),
        mode=mode,
        prompt_ids=[],
        response_ids=[],
        loss_mask=[],
        logprobs=[],
        call_ids=[],
        spans=[],
        weight_versions=[],
        harness=harness,
    )


def _per_call(rollout: Rollout, graph: RolloutGraph) -> list[Sample]:
    out: list[Sample] = []
    for node in sorted(graph.nodes, key=lambda n: n.call.seq):
        call = node.call
        if node.excluded is not None or not call.output_ids:
            continue
        s = _new_sample(rollout, Mode.PER_CALL, call.harness)
        s.prompt_ids = list(call.prompt_ids)
        s.response_ids = list(call.output_ids)
        s.loss_mask = [1] * len(call.output_ids)
        s.logprobs = list(call.output_logprobs)
        s.call_ids = [call.id]
        s.spans = [(call.id, 0, len(call.output_ids))]
        s.weight_versions = [call.weight_version]
        s.drift = str(node.drift)
        s.images = prompt_images(call)
        s.image_processor = dict(call.render_info.get("image_processor") or {})
        out.append(s)
    return out


def _merged_path(rollout: Rollout, path: list[Node], trained: set[int]) -> Sample | None:
    """The path's leaf ids with this path's not-yet-trained calls' outputs marked."""
    spans: list[tuple[Node, int, int]] = []
    for node in path:
        if node.excluded is None and id(node) not in trained and node.call.output_ids:
            trained.add(id(node))
            spans.append((node, node.prompt_len, node.full_len))
    if not spans:
        return None
    leaf = path[-1].call
    start, end = spans[0][1], spans[-1][2]
    s = _new_sample(rollout, Mode.MERGED, leaf.harness)
    # Cut straight from the leaf's lists: every trained call's prompt starts at or before
    # the leaf's output, so ``start`` lies in the leaf's prompt.
    prompt, cut = leaf.prompt_ids, len(leaf.prompt_ids)
    s.prompt_ids = prompt[:start]
    s.response_ids = (
        prompt[start:end] if end <= cut else prompt[start:] + leaf.output_ids[: end - cut]
    )
    mask = [0] * (end - start)
    logprobs = [0.0] * (end - start)
    for node, a, b in spans:
        mask[a - start : b - start] = [1] * (b - a)
        logprobs[a - start : b - start] = node.call.output_logprobs
        s.call_ids.append(node.call.id)
        s.spans.append((node.call.id, a - start, b - start))
        s.weight_versions.append(node.call.weight_version)
    s.loss_mask = mask
    s.logprobs = logprobs
    s.drift = max((str(n.drift) for n in path), key=_DRIFT_RANK.__getitem__)
    # The sample is a prefix of the leaf's prompt + output: the leaf's images up to its end.
    s.images = [i for i in prompt_images(leaf) if i.offset + i.length <= end]
    s.image_processor = dict(leaf.render_info.get("image_processor") or {}) if s.images else {}
    return s


def _merged(rollout: Rollout, graph: RolloutGraph) -> list[Sample]:
    trained: set[int] = set()
    out: list[Sample] = []
    for path in graph.paths():
        s = _merged_path(rollout, path, trained)
        if s is not None:
            out.append(s)
    return out


def _resolve(mode: Mode, graph: RolloutGraph) -> Mode:
    """``auto`` → ``per_call`` when a policy prompt of the rollout showed a VLM images (a
    judge's or simulated user's screenshots do not make a rollout a GUI one)."""
    if mode != Mode.AUTO:
        return mode
    gui = any(n.call.render_info.get("prompt_images") for n in graph.nodes)
    return Mode.PER_CALL if gui else Mode.MERGED


def plan_rollout(
    rollout: Rollout, calls: Iterable[CallRecord], options: TraceOptions | None = None
) -> RolloutPlan:
    """Graph, samples and counters for one rollout. Pure; ``calls`` may come in any order."""
    options = options or TraceOptions()
    calls = list(calls)
    graph = build_graph(calls)
    counts = TraceCounts(
        rollouts=1,
        calls=len(calls),
        teacher_calls=len(graph.teacher),
        serving_calls=Counter(str(c.role) for c in graph.serving),
        retries=graph.retries,
        retry_headers=sum(1 for c in calls if retry_header_count(c) > 0),
        forks=graph.forks,
        ambiguous=graph.ambiguous,
        drift=len(graph.drift),
    )
    acted = acted_flags(rollout, options.flag_severity)
    counts.flagged = int(bool(acted))
    counts.flags.update(f.rule for f in rollout.flags)
    excluded = _rollout_exclusion(rollout, options, bool(acted))
    samples: list[Sample] = []
    if excluded is None:
        if options.mask_forks:
            _mask_forks(graph)
        for node in graph.nodes:
            if node.excluded is not None:
                counts.masked_calls[node.excluded] += 1
        builder = _per_call if _resolve(options.mode, graph) == Mode.PER_CALL else _merged
        samples = builder(rollout, graph)
        for sample in samples:
            sample.flags = list(acted)
            if acted and options.flagged == FlagPolicy.ZERO and sample.reward is not None:
                sample.reward = 0.0
        if not samples:
            excluded = "no_trainable_calls"
    if excluded is not None:
        counts.masked_rollouts[excluded] += 1
        samples = []
    else:
        counts.rollouts_used = 1
    counts.samples = len(samples)
    counts.tokens = sum(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    counts.tokens_trained = sum(s.trained_tokens for s in samples)
    applied = options.flagged if acted and options.flagged != FlagPolicy.KEEP else None
    return RolloutPlan(rollout, graph, samples, excluded, counts, applied)


def plan_groups(plans: Sequence[RolloutPlan], options: TraceOptions) -> list[RolloutPlan]:
    """Drop whole groups with fewer than ``min_group_size`` usable rollouts (reason ``group``).

    Rollouts without a group id form groups of one. Returns the plans that keep samples.
    """
    members: dict[str, list[RolloutPlan]] = {}
    for p in plans:
        key = p.rollout.group_id if p.rollout.group_id is not None else f"rollout:{p.rollout.id}"
        members.setdefault(key, []).append(p)
    kept: list[RolloutPlan] = []
    for group in members.values():
        usable = [p for p in group if p.excluded is None]
        if len(usable) >= options.min_group_size:
            kept.extend(usable)
            continue
        for p in usable:
            p.counts.masked_rollouts["group"] += 1
            p.counts.rollouts_used = 0
            p.counts.samples = p.counts.tokens = p.counts.tokens_trained = 0
            p.excluded = "group"
            p.samples = []
        group[0].counts.groups_dropped += 1
    return kept
