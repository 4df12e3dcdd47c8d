"""Tasks: the native format, foreign-suite loaders, verifiers, the bundled claw-mini suite."""

from openforge.tasks.loading import TaskSet, builtin_suite, load_task_dir, load_tasks
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
    "TaskSet",
    "VerifierError",
    "VerifyResult",
    "builtin_suite",
    "load_task_dir",
    "load_tasks",
    "parse_verifier_output",
    "run_verifier",
]
