"""Tasks: the native format, foreign-suite loaders, verifiers, the bundled claw-mini suite."""

from openforge.tasks.model import VERIFY_DIR, Task, TaskError
from openforge.tasks.verify import (
    VerifierError,
    VerifyResult,
    parse_verifier_output,
    run_verifier,
)

__all__ = [
    "VERIFY_DIR",
    "Task",
    "TaskError",
    "VerifierError",
    "VerifyResult",
    "parse_verifier_output",
    "run_verifier",
]
