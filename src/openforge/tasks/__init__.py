"""Tasks: the task model and OpenForge's native format, the episode, verification and the
oracle check. The benchmarks that produce tasks are in :mod:`openforge.suites`."""

from openforge.tasks.grading import VerifierError, VerifyResult
from openforge.tasks.model import VERIFY_DIR, Task, TaskError
from openforge.tasks.verify import parse_verifier_output, run_verifier

__all__ = [
    "VERIFY_DIR",
    "Task",
    "TaskError",
    "VerifierError",
    "VerifyResult",
    "parse_verifier_output",
    "run_verifier",
]
