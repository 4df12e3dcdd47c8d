"""The orchestrator's boundary shapes: :class:`RolloutConfig` in, :class:`RolloutResult` out."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openforge.harnesses.base import Harness
from openforge.home import read_admin_token
from openforge.sandboxes.base import SandboxBackend
from openforge.sandboxes.runtime import SANDBOX_WORKDIR
from openforge.suites.catalog import SUITE_SPLITS
from openforge.tasks.model import Task

__all__ = ["STATUSES", "RolloutConfig", "RolloutResult"]

# Terminal statuses, as the gateway's store names them.
STATUSES = ("completed", "agent_error", "timeout", "infra_error")


@dataclass(slots=True)
class RolloutResult:
    """One rollout's outcome: a line of ``results.jsonl``.

    ``reward`` is None exactly when ``status`` is ``infra_error`` (masked from training);
    a rollout whose gateway was lost mid-run or whose finish the gateway did not record is
    ``infra_error``.
    ``rollout_id`` is the gateway rollout of the last attempt; earlier attempts were
    finished there as ``infra_error``. ``timings`` holds seconds per phase: ``create``
    (sandbox create-to-ready), ``setup`` (workspace + harness config), ``agent``, ``verify``,
    ``teardown``, ``total`` (every attempt: the sandbox time the rollout cost).
    """

    task_id: str
    sample: int
    status: str
    reward: float | None = None
    rollout_id: str | None = None
    group_id: str | None = None
    split: str = "train"
    attempts: int = 1
    error: str | None = None
    details: Any = None
    agent_exit_code: int | None = None
    verifier_output: str | None = None
    finish_error: str | None = None  # the last attempt's finish failed (so: infra_error)
    # Gateway rollouts of this pair whose finish was never recorded (the gateway was lost);
    # a ``retry_infra`` run finishes them as ``infra_error`` once the gateway is back.
    unfinished: list[str] = field(default_factory=list)
    started_at: float = 0.0
    finished_at: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)
    # Engine tokens by call role over every attempt: {"policy": {"calls", "prompt",
    # "output"}, ...}, read back from the gateway (rollouts/cost.py adds them up).
    usage: dict[str, dict[str, int]] = field(default_factory=dict)
    # The ids of the reward-hack monitor's rules that matched the last attempt, most
    # severe first (traces/monitor.py; the store holds each flag's place and evidence).
    flags: list[str] = field(default_factory=list)
    # How loaded the host was (rollouts/host.py): ``cores``, ``load_start`` and
    # ``load_end`` (one-minute load average), ``slot_wait_s`` (waiting for a concurrency
    # slot), ``engine_queue_s`` (the last attempt's calls waiting for the engine) and
    # ``overloaded`` (1.0: a timeout may be the machine's, not the agent's).
    host: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class RolloutConfig:
    """Everything one orchestrator run needs.

        ``tasks`` is a list of loaded tasks or a path / bundled suite name for
        :func:`openforge.suites.load_tasks`. ``harness`` is an adapter or a registry name (with
        ``harness_options``). ``gateway_url`` is the root of the gateway's admin listener as this
    host sees it (sandboxes get the model listener's address from each mint, never this one);
    ``admin_token`` defaults to ``$OPENFORGE_ADMIN_TOKEN``, else the token ``openforge gateway``
    stored for this user.
        With ``out_dir`` set, results go to ``out_dir/results.jsonl`` and a rerun skips the
        ``(task_id, sample)`` pairs already there (``retry_infra`` reruns their infra errors).
    """

    tasks: Sequence[Task] | str | Path
    harness: Harness | str
    gateway_url: str
    harness_options: dict[str, Any] = field(default_factory=dict)
    n: int = 1
    concurrency: int = 8
    backend: SandboxBackend | str = "local"
    backend_options: dict[str, Any] = field(default_factory=dict)
    model: str = "openforge"
    split: str | None = None
    out_dir: Path | str | None = None
    admin_token: str | None = field(default_factory=read_admin_token)
    retries: int = 2  # extra attempts after an infra error
    retry_backoff_s: float = 0.25
    retry_infra: bool = False
    # The gateway's /health is probed this often during a run; a failed probe during a
    # rollout's agent run makes that attempt infra_error (the gateway was lost mid-run).
    health_interval_s: float = 0.5
    health_timeout_s: float = 10.0
    workdir: str = SANDBOX_WORKDIR
    # Give tasks that ask for the internet (Harbor allow_internet) an open network; without
    # it they keep the gateway-only network and the CLI names them.
    allow_task_internet: bool = False
    # Run a harness with a shell on tasks whose reward evidence lies in its sandbox (GUI
    # tasks' result files, the web apps' database); refused by default (rollouts/reach.py).
    allow_reachable_evidence: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)  # added to every gateway rollout
    # The reward-hack monitor (traces/monitor.py) runs on every finished rollout with the
    # default rules, plus this file's (which may add, replace and disable rules); its flags
    # go to the store through the admin API and into ``RolloutResult.flags``.
    monitor: bool = True
    monitor_rules: Path | str | None = None
    run_id: str | None = None  # default: the run dir's, or a fresh one
    handle_signals: bool = False  # SIGINT/SIGTERM cancel the run (the CLI sets this)
    on_result: Callable[[RolloutResult], None] | None = None
    on_start: Callable[[str, int], None] | None = None

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"n must be at least 1, got {self.n}")
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        if self.retries < 0:
            raise ValueError(f"retries must be 0 or more, got {self.retries}")
        if self.health_interval_s <= 0 or self.health_timeout_s <= 0:
            raise ValueError(
                "health_interval_s and health_timeout_s must be positive, got"
                f" {self.health_interval_s} and {self.health_timeout_s}"
            )
        if self.split not in (None, "train", "test", *SUITE_SPLITS):
            allowed = ", ".join(("train", "test", *SUITE_SPLITS))
            raise ValueError(f"split must be one of {allowed}, got {self.split!r}")
        if not self.gateway_url.startswith(("http://", "https://")):
            raise ValueError(f"gateway_url must be an http(s) URL, got {self.gateway_url!r}")
