"""What one exec and one verifier run give back, shared by the sandbox interface
(``base.py``) and the verifier machinery (``verifier.py``, which sandboxd runs inside a
container: so standard library only). A leaf: both name these types, neither imports the
other for them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["VERIFIER_MAX_OUTPUT", "ExecResult", "VerifierExec", "VerifierRun"]

VERIFIER_MAX_OUTPUT = 1024 * 1024  # bytes of stdout and of stderr kept per verifier run


@dataclass(slots=True)
class ExecResult:
    exit_code: int
    stdout: bytes = b""
    stderr: bytes = b""
    timed_out: bool = False


@dataclass(frozen=True, slots=True)
class VerifierExec:
    """One verifier run (see ``verifier.py`` for what happens around it).

    ``dir``: where the verifier's ``files`` go, made anew (relative to the workdir, or
    absolute such as ``/tests``); ``$OPENFORGE_VERIFY_DIR`` names it. ``own_uid``: run as
    the verifier's uid (False: as the sandbox's own, for a published verifier whose
    contract needs it). ``outputs``: an absolute directory made empty before the run, whose
    regular files (``CHANNEL_MAX`` bytes in all) come back in :attr:`VerifierRun.outputs`
    (Harbor's ``/logs/verifier``).
    """

    cmd: Sequence[str] | str
    files: Mapping[str, bytes] = field(default_factory=dict)
    dir: str = ".openforge-verify"
    env: Mapping[str, str] = field(default_factory=dict)
    timeout: float | None = None
    max_output: int = VERIFIER_MAX_OUTPUT
    own_uid: bool = True
    outputs: str | None = None


@dataclass(slots=True)
class VerifierRun:
    """What a verifier run gave: its exit and output (bounded), what it wrote on the
    reward channel, the ``outputs`` directory's files, and notes on what was undone first
    (``uid``: the uid it ran as, in the sandbox's terms; None when the sandbox's own)."""

    result: ExecResult
    channel: bytes = b""
    outputs: dict[str, bytes] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    uid: int | None = None
