"""The orchestrator: tasks × n samples through a harness in sandboxes, verified and rewarded."""

from openforge.rollouts.config import STATUSES, RolloutConfig, RolloutResult
from openforge.rollouts.metrics import RunSummary, pass_at_k, pass_hat_k, summarize
from openforge.rollouts.orchestrator import Interrupted, load_results, run_rollouts

__all__ = [
    "STATUSES",
    "Interrupted",
    "RolloutConfig",
    "RolloutResult",
    "RunSummary",
    "load_results",
    "pass_at_k",
    "pass_hat_k",
    "run_rollouts",
    "summarize",
]
