"""Sandboxes: one isolated place per rollout, on local, container or Kubernetes backends.

``create_backend(name, **options)`` is the one entry point the orchestrator needs; backends
import lazily so ``import openforge.sandboxes`` stays cheap.
"""

from __future__ import annotations

from typing import Any

from openforge.sandboxes.base import (
    ExecResult,
    NetworkPolicy,
    OutputCallback,
    Sandbox,
    SandboxBackend,
    SandboxError,
    SandboxSpec,
    SandboxTimeout,
)

__all__ = [
    "BACKENDS",
    "ExecResult",
    "NetworkPolicy",
    "OutputCallback",
    "Sandbox",
    "SandboxBackend",
    "SandboxError",
    "SandboxSpec",
    "SandboxTimeout",
    "create_backend",
]

BACKENDS = ("local", "podman", "docker", "kubernetes")


def create_backend(name: str, **options: Any) -> SandboxBackend:
    """The backend called ``name`` ("local", "podman", "docker", "kubernetes"), configured.

    Options are the backend class's keyword arguments; an unknown name or a backend that
    cannot run here raises :class:`SandboxError` with the reason.
    """
    if name == "local":
        from openforge.sandboxes.local import LocalBackend

        return LocalBackend(**options)
    if name in ("podman", "docker"):
        from openforge.sandboxes.container import ContainerBackend

        container: SandboxBackend = ContainerBackend(engine=name, **options)
        return container
    if name in ("kubernetes", "k8s"):
        from openforge.sandboxes.kubernetes import KubernetesBackend

        cluster: SandboxBackend = KubernetesBackend(**options)
        return cluster
    raise SandboxError(f"unknown sandbox backend {name!r}; choose one of {', '.join(BACKENDS)}")
