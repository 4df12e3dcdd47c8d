"""The sandbox interface: one isolated place per rollout where a harness and its tools run.

Exceptions::

    SandboxError           a sandbox could not be created, reached or used (an infra error)
    └── SandboxTimeout     an exec ran past its timeout (its processes were killed)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from openforge.sandboxes.runs import ExecResult, VerifierExec, VerifierRun
from openforge.sandboxes.runtime import SANDBOX_WORKDIR

__all__ = [
    "DEFAULT_DISK_MB",
    "HARNESS_DIR",
    "ExecResult",
    "HarnessInstall",
    "KillsLeftovers",
    "ModelApi",
    "ModelKey",
    "NetworkPolicy",
    "OutputCallback",
    "Sandbox",
    "SandboxBackend",
    "SandboxError",
    "SandboxSpec",
    "SandboxTimeout",
    "ServiceContainer",
    "TaskImage",
    "model_env",
    "service_env",
]

# What a sandbox may write in all, when its task does not say (``SandboxSpec.disk_mb``).
DEFAULT_DISK_MB = 4096
# Where a container sandbox shows a harness's portable install (``harnesses/portable.py``).
HARNESS_DIR = "/opt/openforge/harness"
# "none": no network at all; "gateway": only the gateway's address; "open": unrestricted.
NetworkPolicy = Literal["none", "gateway", "open"]
# Called with ("stdout" | "stderr", chunk) as output arrives.
OutputCallback = Callable[[str, bytes], Awaitable[None] | None]
# The model APIs a sidecar's environment names a key for (ANTHROPIC_API_KEY, OPENAI_API_KEY).
ModelApi = Literal["anthropic", "openai"]


class SandboxError(Exception):
    """The sandbox could not be created, reached or used: an infrastructure error."""


class SandboxTimeout(SandboxError):
    """An exec ran past its timeout; all of its processes were killed."""


@dataclass(frozen=True, slots=True)
class TaskImage:
    """A task's own image: built from ``dockerfile`` in ``context``, or the prebuilt ``image``.

    The backend adds OpenForge's in-sandbox runtime (sandboxd) without touching the image.
    Paths are the host's.
    """

    context: str | None = None
    dockerfile: str | None = None
    image: str | None = None
    build_timeout_s: float = 600.0
    # Context-relative paths never sent to the build (a task's tests and reference solution
    # beside its Dockerfile): an image the agent runs in must not carry them.
    exclude: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class HarnessInstall:
    """A harness's self-contained install, shown read-only at :data:`HARNESS_DIR`.

    ``path`` is the host directory (the container backends bind-mount it); ``key`` names
    its content (``<harness>-<version>-<hash>``): the Kubernetes backend mounts the image
    ``openforge images build --harness … --push REGISTRY`` made of it, tagged with ``key``.
    The local backend needs none: its sandboxes see the host's install.
    """

    key: str
    path: str


@dataclass(frozen=True, slots=True)
class ServiceContainer:
    """A task's sidecar (a compose service besides Harbor's ``main``): a container of its own
    image sharing the sandbox's network namespace, reached by ``name`` (at 127.0.0.1) from
    the sandbox; the sandbox is handed out once ``health`` (argv run in the sidecar) exits 0,
    polled every ``interval_s`` (failures within ``start_period_s`` not counted) at most
    ``retries`` failures. Container backends on podman only."""

    name: str
    image: TaskImage
    env: dict[str, str] = field(default_factory=dict)
    command: tuple[str, ...] = ()
    health: tuple[str, ...] = ()
    interval_s: float = 2.0
    timeout_s: float = 5.0
    retries: int = 15
    start_period_s: float = 0.0
    # The model APIs it calls (a simulated user's LLM, say): given the rollout's user-role
    # key when the sandbox has a :class:`ModelKey`, so its calls reach the run's user engine
    # through the gateway, recorded under the rollout, instead of a vendor's API.
    model_apis: tuple[ModelApi, ...] = ()


@dataclass(frozen=True, slots=True)
class ModelKey:
    """A gateway key a task's sidecars call a model with (the rollout's user-role key): the
    paths of its OpenAI and Anthropic base URLs, joined by the backend to the gateway's
    address as the sandbox reaches it."""

    key: str
    openai_path: str
    anthropic_path: str


def model_env(apis: Sequence[ModelApi], key: ModelKey, gateway_url: str) -> dict[str, str]:
    """The variables the official SDKs read (and Harbor's recipes set) that point a sidecar
    calling ``apis`` at ``key`` on the gateway reached at ``gateway_url``."""
    root = gateway_url.rstrip("/")
    env: dict[str, str] = {}
    if "anthropic" in apis:
        # Both of the SDK's credentials: a host's token the compose file passed on would
        # otherwise ride along (and reach the sandbox's network) beside the rollout's key.
        env |= {"ANTHROPIC_BASE_URL": root + key.anthropic_path, "ANTHROPIC_API_KEY": key.key,
                "ANTHROPIC_AUTH_TOKEN": key.key}  # fmt: skip
    if "openai" in apis:
        env |= {"OPENAI_BASE_URL": root + key.openai_path, "OPENAI_API_KEY": key.key}
    return env


def service_env(
    svc: ServiceContainer, key: ModelKey | None, gateway_url: str | None
) -> dict[str, str]:
    """``svc``'s environment in a sandbox: one that calls a model gets ``key`` at the
    gateway's address as the sandbox reaches it (sidecars share the sandbox's network)."""
    if not svc.model_apis or key is None:
        return svc.env
    if gateway_url is None:
        raise SandboxError(f"sidecar {svc.name} calls a model but the sandbox has no gateway")
    return {**svc.env, **model_env(svc.model_apis, key, gateway_url)}


@dataclass(slots=True)
class SandboxSpec:
    image: str | None = None  # container image (container and Kubernetes backends)
    # The task's own environment (container backends); the local backend has none to build.
    task_image: TaskImage | None = None
    workdir: str = SANDBOX_WORKDIR
    env: dict[str, str] = field(default_factory=dict)
    cpu: float | None = None  # cores
    memory_mb: int | None = None
    pids: int | None = None
    disk_mb: int | None = None
    network: NetworkPolicy = "gateway"
    # The gateway as the host sees it (http://127.0.0.1:PORT); the backend maps it to an
    # address reachable from inside and reports that as ``Sandbox.gateway_url``.
    gateway_url: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    # Upper bound on the sandbox's whole life (Kubernetes activeDeadlineSeconds, reapers).
    lifetime_s: float | None = None
    # Host paths an environment needs, shown read-only at the same path (local backend;
    # container images carry what they need). The browser environment's Python, say.
    host_paths: tuple[str, ...] = ()
    # The harness, for backends whose images do not carry it (container, Kubernetes).
    harness: HarnessInstall | None = None
    # The task has a browser or desktop environment (``Task.gui``): the container and
    # Kubernetes backends run it in their GUI image (``deploy/build-gui-image.sh``: chromium,
    # Xvfb, the GUI venv), unless the task brings its own image, which must then carry them.
    gui: bool = False
    # The task's sidecars (Harbor's compose services besides main), and the key those that
    # call a model use (none outside a rollout: an oracle check has no gateway).
    services: tuple[ServiceContainer, ...] = ()
    service_key: ModelKey | None = None


@runtime_checkable
class Sandbox(Protocol):
    id: str
    # The gateway's URL as seen from inside this sandbox (None when network is "none").
    gateway_url: str | None

    async def exec(
        self,
        cmd: Sequence[str] | str,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        stdin: bytes | None = None,
        on_output: OutputCallback | None = None,
    ) -> ExecResult:
        """Run ``cmd`` (argv, or a string for ``sh -c``); stream output to ``on_output``.

        On timeout every process of the exec is killed and ``timed_out`` is set.
        """
        ...

    async def exec_verifier(self, run: VerifierExec) -> VerifierRun:
        """Run a task's verifier where the agent's leftovers cannot steer it: every process
        the agent left killed, its directory and run area made anew, a clean environment,
        another uid where the backend has one, the reward read from its own channel
        (``sandboxes/verifier.py``). :class:`SandboxError` when it could not be set up."""
        ...

    async def put(self, files: Mapping[str, bytes]) -> None:
        """Write files; relative paths are under the workdir."""
        ...

    async def get(self, paths: Sequence[str]) -> dict[str, bytes]:
        """Read files; a missing path is absent from the result."""
        ...

    async def close(self) -> None:
        """Kill everything inside and remove the sandbox; idempotent."""
        ...


@runtime_checkable
class KillsLeftovers(Protocol):
    """A sandbox whose execs share one process namespace (containers, pods), where a process
    an exec left running outlives it. The episode marks the environment's processes before
    the agent's turn and kills the rest after it, so nothing of the agent's runs beside the
    verifier. (A local sandbox gives each exec its own namespace: nothing outlives an exec.)
    """

    async def mark_processes(self) -> None:
        """The processes running now belong to the environment (a task's services)."""
        ...

    async def kill_leftovers(self) -> int:
        """SIGKILL every process not marked and not the sandbox's own; the number killed."""
        ...


@runtime_checkable
class SandboxBackend(Protocol):
    name: str

    async def create(self, spec: SandboxSpec) -> Sandbox:
        """Create a ready sandbox or raise :class:`SandboxError`."""
        ...

    async def close(self) -> None:
        """Remove every sandbox this backend still holds."""
        ...
