"""The store's shapes: rollout and call records, their states and allowed transitions.

A rollout goes ``created → running → (completed | agent_error | timeout | infra_error)``;
``reward`` set on a finished rollout means it is scored. Finishing is idempotent: the
same terminal status (and reward) again is accepted, a different one is a conflict.
"""

from __future__ import annotations

import enum
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "SERVING_ROLES",
    "TERMINAL",
    "TRAINING",
    "TRAIN_SPLIT",
    "TRANSITIONS",
    "Blob",
    "CallRecord",
    "CallRole",
    "CallStatus",
    "Flag",
    "FlagSeverity",
    "Rollout",
    "RolloutSelection",
    "RolloutStatus",
    "decode_ids",
    "decode_logprobs",
    "encode_ids",
    "encode_logprobs",
]


class RolloutStatus(enum.StrEnum):
    CREATED = "created"
    RUNNING = "running"
    COMPLETED = "completed"
    AGENT_ERROR = "agent_error"
    TIMEOUT = "timeout"
    INFRA_ERROR = "infra_error"


TERMINAL = frozenset(
    {
        RolloutStatus.COMPLETED,
        RolloutStatus.AGENT_ERROR,
        RolloutStatus.TIMEOUT,
        RolloutStatus.INFRA_ERROR,
    }
)

TRANSITIONS: dict[RolloutStatus, frozenset[RolloutStatus]] = {
    RolloutStatus.CREATED: frozenset({RolloutStatus.RUNNING}) | TERMINAL,
    RolloutStatus.RUNNING: TERMINAL,
    **{s: frozenset() for s in TERMINAL},
}


class CallStatus(enum.StrEnum):
    OK = "ok"  # answered in full: a trainable sample
    CLIENT_ABORTED = "client_aborted"  # the client went away mid-answer
    ENGINE_ERROR = "engine_error"  # the engine failed; the harness got an error
    REJECTED = "rejected"  # refused before generation (context too long, bad request)
    # Answered after its rollout was finished (a call held past the finish's bounded drain):
    # kept for the record, never a training sample of the finished rollout.
    LATE = "late"


class CallRole(enum.StrEnum):
    """Who a call served (DESIGN.md, "Roles of a call"); only ``policy`` calls are RL samples,
    only ``policy`` and ``teacher`` calls SFT samples."""

    POLICY = "policy"  # the model being trained (the harness's calls)
    TEACHER = "teacher"  # an upstream model answering the harness (its answers are SFT data)
    JUDGE = "judge"  # an LLM judge serving a benchmark's grader
    USER = "user"  # a simulated user serving a benchmark's multi-turn conversation


# The roles a rollout may be given a key for besides its own (policy) key.
SERVING_ROLES = (CallRole.JUDGE, CallRole.USER)


@dataclass(frozen=True, slots=True)
class ControlState:
    """The admin state every gateway sharing a store applies (``Store.shared``): whether
    new calls are held, and which weights calls are stamped with.

    ``weight_version`` None: no version was set through the store, each gateway stamps its
    engine's own. ``weights_path``: the checkpoint (or, with ``adapter``, the LoRA adapter
    directory served under that name) the version was loaded from; a gateway whose engine
    runs in its own process loads it too. ``epoch`` grows with every change; each gateway
    acknowledges the epochs it has applied (drained, loaded), which is what a weight
    update through any one of them waits for.
    """

    epoch: int = 0
    paused: bool = False
    weight_version: str | None = None
    weights_path: str | None = None
    adapter: str | None = None
    # The gateway running a weight update (calls are held meanwhile, as when paused; an
    # operator's pause is ``paused`` and outlasts the update). Cleared by the others when
    # that gateway is gone, so a killed update does not hold the fleet for ever.
    syncing: str | None = None

    @property
    def held(self) -> bool:
        """Whether new calls wait at the gate."""
        return self.paused or self.syncing is not None


class FlagSeverity(enum.StrEnum):
    """How sure a monitor rule is that what it matched is a shortcut (training acts on
    flags at or above a chosen severity)."""

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]


_SEVERITY_RANK = {FlagSeverity.LOW: 0, FlagSeverity.MEDIUM: 1, FlagSeverity.HIGH: 2}


@dataclass(frozen=True, slots=True)
class Flag:
    """A reward-hack monitor's finding on a rollout: which rule matched, how severe it is,
    where (``call 3``, ``transcript turn 5``) and what it matched (cut short)."""

    rule: str
    severity: FlagSeverity
    where: str
    evidence: str

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Flag:
        """A flag as the store and the admin API write it."""
        return cls(str(d["rule"]), FlagSeverity(d["severity"]), str(d["where"]), str(d["evidence"]))


@dataclass(slots=True)
class Rollout:
    id: str
    key: str
    status: RolloutStatus = RolloutStatus.CREATED
    task_id: str | None = None
    group_id: str | None = None
    reward: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0
    finished_at: float | None = None
    # Why a rollout ended as it did (an agent_error's message, a verifier's details).
    details: dict[str, Any] = field(default_factory=dict)
    # What the reward-hack monitor found in its calls and transcript (traces/monitor.py);
    # set after the finish, and replaced whole when the rules are run again.
    flags: list[Flag] = field(default_factory=list)
    # The orchestrator run that made it and its task's split (``train``, ``test`` or a
    # suite's own); None when it was minted without one (before stores recorded them, or
    # by a caller of the admin API that does not say).
    run_id: str | None = None
    split: str | None = None


# The one split whose rollouts are training data; every other split is held out.
TRAIN_SPLIT = "train"


@dataclass(frozen=True, slots=True)
class RolloutSelection:
    """Which rollouts a reader takes; an empty field takes any value.

    ``splits`` may hold None: rollouts whose split was never recorded.
    """

    runs: tuple[str, ...] = ()
    splits: tuple[str | None, ...] = ()
    tasks: tuple[str, ...] = ()

    def held_out(self) -> tuple[str, ...]:
        """The held-out splits this selection takes (empty: any split is not one)."""
        return tuple(s for s in self.splits if s is not None and s != TRAIN_SPLIT)


# What training takes by default: rollouts of train tasks, and those whose split no one
# recorded (stores from before splits, rollouts minted by hand) — never a known held-out one.
TRAINING = RolloutSelection(splits=(TRAIN_SPLIT, None))


@dataclass(slots=True)
class CallRecord:
    """One served call, token-exactly.

    ``prompt_ids + output_ids`` is exactly what the engine saw and sampled;
    ``output_logprobs[i]`` is the logprob of ``output_ids[i]`` under the distribution
    it was sampled from. ``fork`` is set when the prompt could not be rendered as an
    extension of an earlier call of the rollout (the harness edited history).
    """

    id: str
    rollout_id: str
    seq: int  # 0-based arrival order within the rollout
    dialect: str  # "openai_chat", "openai_responses", "anthropic"
    status: CallStatus
    prompt_ids: list[int] = field(default_factory=list)
    output_ids: list[int] = field(default_factory=list)
    output_logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    request_model: str = ""  # the model name the harness asked for
    engine: str = ""  # engine kind ("teacher" calls come from "upstream")
    served_model: str = ""
    weight_version: str = "0"
    fork: bool = False
    # Rendering notes: fork reason, drifted assistant turns [{"message": i, "position": p}], ...
    render_info: dict[str, Any] = field(default_factory=dict)
    raw_request: bytes = b""  # the request body as received (compressed by the store)
    conversation: dict[str, Any] = field(default_factory=dict)  # canonical conversation, JSON-able
    completion: dict[str, Any] = field(default_factory=dict)  # text, reasoning, tool_calls
    error: str | None = None
    harness: dict[str, Any] = field(default_factory=dict)  # user agent + identifying headers
    created_at: float = 0.0
    queued_s: float = 0.0  # waiting (pause, engine queue) before generation started
    first_token_s: float | None = None
    total_s: float = 0.0
    # The id of the answer the harness saw (``resp_…``, ``chatcmpl-…``, ``msg_…``), so a
    # Responses ``previous_response_id`` can be resolved from the store after a restart.
    response_id: str | None = None
    # Which role's key the call came with (a judge's or simulated user's calls are never
    # training samples; teacher: the policy key served by a text engine).
    role: CallRole = CallRole.POLICY
    # ``prompt_ids`` as a JSON array, when the caller has it (the gateway's engine request
    # carries one): the store then compares the call with its rollout's last one as
    # bytes. Not stored; a text that does not hold as many ids as ``prompt_ids`` is
    # not used.
    prompt_json: bytes | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class Blob:
    """Content-addressed bytes (an image): stored once however many calls refer to them."""

    sha256: str  # hex digest of ``data``: the key calls refer to it by
    media_type: str
    data: bytes = field(repr=False)


# Ids converted per step: one conversion of a huge prompt's 15 M ids held the GIL for most
# of a second (the gateway's admin health probe waited on it); between steps it is handed over.
_IDS_STEP = 1 << 20


def encode_ids(ids: Sequence[int]) -> bytes:
    """Token ids as little-endian int32 bytes (compact, fast to decode)."""
    if len(ids) <= _IDS_STEP:
        return array("i", ids).tobytes()
    out = array("i")
    for at in range(0, len(ids), _IDS_STEP):
        out.extend(ids[at : at + _IDS_STEP])
    return out.tobytes()


def decode_ids(blob: bytes | None) -> list[int]:
    if not blob:
        return []
    out = array("i")
    out.frombytes(blob)
    return out.tolist()


def encode_logprobs(values: list[float]) -> bytes:
    """Logprobs as float32 bytes; float32 is what engines compute them in."""
    return array("f", values).tobytes()


def decode_logprobs(blob: bytes | None) -> list[float]:
    if not blob:
        return []
    out = array("f")
    out.frombytes(blob)
    return out.tolist()
