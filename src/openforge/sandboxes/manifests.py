"""Kubernetes objects as plain dicts: the gateway's Deployment/Service/RBAC and sandbox pods.

Pure functions, no client: the backend sends these bodies, ``openforge k8s manifests``
prints them, and the tests validate them offline with ``kubernetes-validate``.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from openforge.sandboxes.base import DEFAULT_DISK_MB, HARNESS_DIR, SandboxSpec, ServiceContainer
from openforge.sandboxes.container import SANDBOX_IMAGE_ENV
from openforge.sandboxes.runtime import RT_DIR, RT_ENTRYPOINT, SANDBOX_HOME

__all__ = [
    "ADMIN_SECRET",
    "GATEWAY_NAME",
    "LABEL_POOL",
    "LABEL_ROLLOUT",
    "LABEL_RUN",
    "LABEL_SANDBOX",
    "NAMESPACE_ENV",
    "SANDBOXD_PORT",
    "STORE_SECRET",
    "EngineArgs",
    "PodSidecar",
    "gateway_manifests",
    "harness_image_ref",
    "label_key",
    "label_value",
    "network_policy",
    "pod_manifest",
    "pod_name",
    "secret_commands",
    "secret_manifest",
    "service_url",
    "sidecar_container_name",
]

LABEL_SANDBOX = "openforge.dev/sandbox"
LABEL_ROLLOUT = "openforge.dev/rollout"
LABEL_RUN = "openforge.dev/run"
# "ready" on a warm-pool pod no rollout has claimed yet; removed when one claims it.
LABEL_POOL = "openforge.dev/pool"
LABEL_COMPONENT = "app.kubernetes.io/component"
SANDBOXD_PORT = 8765
GATEWAY_NAME = "openforge-gateway"
STORE_SECRET = "openforge-store"  # key "url": the store's URL
ADMIN_SECRET = "openforge-admin"  # key "token": the admin API's token
# The namespace the Kubernetes backend makes sandbox pods in, when not told.
NAMESPACE_ENV = "OPENFORGE_K8S_NAMESPACE"
Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class PodSidecar:
    """A task's sidecar as a container of the sandbox pod (which shares one network, as
    compose's services share theirs here): its service, the image reference the cluster
    pulls and its environment."""

    service: ServiceContainer
    image: str
    env: dict[str, str]


def sidecar_container_name(service: str) -> str:
    """The pod container of compose service ``service`` (a DNS label, never ``sandbox``)."""
    return _dns_label("svc", service, 40, 10)


def harness_image_ref(registry: str, key: str) -> str:
    """Where ``openforge images build --harness … --push REGISTRY`` put a portable install."""
    return f"{registry.rstrip('/')}/openforge-harness:{key}"


def _image_volume(name: str, reference: str, path: str) -> tuple[Obj, Obj]:
    """A read-only image volume (Kubernetes' ImageVolume feature) and its mount."""
    volume = {"name": name, "image": {"reference": reference, "pullPolicy": "IfNotPresent"}}
    return volume, {"name": name, "mountPath": path, "readOnly": True}


def pod_name(rollout_id: str) -> str:
    """A deterministic DNS-1123 name for a rollout's pod (a retry finds the same pod)."""
    return _dns_label("of-sb", rollout_id, 40, 10)


def _dns_label(prefix: str, value: str, slug_chars: int, digest_chars: int) -> str:
    """``prefix``, ``value`` made DNS-safe and cut to ``slug_chars``, and a digest of
    ``value`` (names that differ only in dropped characters stay apart)."""
    slug = re.sub(r"[^a-z0-9-]+", "-", value.lower()).strip("-")[:slug_chars].strip("-")
    digest = hashlib.sha256(value.encode()).hexdigest()[:digest_chars]
    return f"{prefix}-{slug}-{digest}" if slug else f"{prefix}-{digest}"


def label_value(value: str) -> str:
    """``value`` made a valid label value (or name part of a key): 63 safe characters."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", value)[:63].strip("-_.")
    return cleaned or "x"


def label_key(key: str) -> str:
    """``key`` made a valid label key, keeping its ``prefix/`` (``openforge.dev/run``)."""
    prefix, _, name = key.rpartition("/")
    if not prefix:
        return label_value(name)
    clean = re.sub(r"[^a-z0-9.-]+", "-", prefix.lower())[:253].strip("-.")
    return f"{clean}/{label_value(name)}" if clean else label_value(name)


def pod_manifest(
    name: str,
    spec: SandboxSpec,
    *,
    image: str,
    secret: str,
    deadline_s: int,
    owner: Obj | None = None,
    service_account: str | None = None,
    runtime_image: str | None = None,
    harness_image: str | None = None,
    sidecars: Sequence[PodSidecar] = (),
) -> Obj:
    """One sandbox pod running sandboxd, its token from ``secret``, and the task's
    ``sidecars`` as containers beside it, their service names resolving to the pod's own
    address (``hostAliases``) and the pod Ready only once each one's healthcheck passes.

    With ``runtime_image`` (the sandbox image), ``image`` is a task's own image or the GUI
    image (``deploy/build-gui-image.sh``), neither of which has sandboxd: the sandbox
    image is mounted read-only as an image volume (Kubernetes' ImageVolume feature) and
    sandboxd runs from it (``sandboxes/runtime.py``). ``harness_image`` (a harness's
    portable install, ``harnesses/portable.py``) is mounted the same way at
    ``/opt/openforge/harness``.
    """
    labels = {label_key(k): label_value(v) for k, v in spec.labels.items()}
    labels[LABEL_SANDBOX] = "true"
    labels[LABEL_COMPONENT] = "sandbox"
    meta: Obj = {"name": name, "labels": labels}
    if owner:
        meta["ownerReferences"] = [owner]
    container = _sandbox_container(spec, image, secret)
    pod_spec: Obj = {
        "restartPolicy": "Never",
        "activeDeadlineSeconds": deadline_s,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 0,
        "containers": [container],
    }
    if service_account:
        pod_spec["serviceAccountName"] = service_account
    images = [("openforge-rt", runtime_image, RT_DIR), ("openforge-harness", harness_image,
              HARNESS_DIR)]  # fmt: skip
    for volume, ref, path in images:
        if ref is not None:
            vol, mount = _image_volume(volume, ref, path)
            pod_spec.setdefault("volumes", []).append(vol)
            container.setdefault("volumeMounts", []).append(mount)
    if runtime_image is not None:
        container["command"] = RT_ENTRYPOINT
    if sidecars:
        pod_spec["containers"] += [_sidecar_container(side) for side in sidecars]
        names = [side.service.name for side in sidecars]
        pod_spec["hostAliases"] = [{"ip": "127.0.0.1", "hostnames": names}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec}


def _sidecar_container(side: PodSidecar) -> Obj:
    """A sidecar's container: compose's ``command`` as its args (it overrides the image's
    CMD, as compose's does) and its healthcheck as the startup probe: the container is Ready
    (and the pod, and with it the sandbox) only once it passes, and after ``retries``
    failures the kubelet stops the container, which (``restartPolicy: Never``) fails the
    starting sandbox naming it, as an unhealthy sidecar does under podman."""
    svc = side.service
    container: Obj = {
        "name": sidecar_container_name(svc.name),
        "image": side.image,
        "imagePullPolicy": "IfNotPresent",
        "env": [{"name": k, "value": v} for k, v in side.env.items()],
        "resources": {"limits": {"ephemeral-storage": f"{DEFAULT_DISK_MB}Mi"}},
        "securityContext": {"allowPrivilegeEscalation": False},
    }
    if svc.command:
        container["args"] = list(svc.command)
    if svc.health:
        container["startupProbe"] = {
            "exec": {"command": list(svc.health)},
            "periodSeconds": max(1, math.ceil(svc.interval_s)),
            "timeoutSeconds": max(1, math.ceil(svc.timeout_s)),
            "failureThreshold": svc.retries,
            "initialDelaySeconds": math.ceil(svc.start_period_s),
        }
    return container


def _sandbox_container(spec: SandboxSpec, image: str, secret: str) -> Obj:
    """The pod's one container: sandboxd serving ``spec.workdir``, its token from ``secret``."""
    env: list[Obj] = [{"name": k, "value": v} for k, v in spec.env.items()]
    env.append({"name": "HOME", "value": SANDBOX_HOME})
    env.append(
        {
            "name": "OPENFORGE_SANDBOXD_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": secret, "key": "token"}},
        }
    )
    return {
        "name": "sandbox",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": ["--port", str(SANDBOXD_PORT), "--workdir", spec.workdir, "--home", SANDBOX_HOME],
        "env": env,
        "ports": [{"containerPort": SANDBOXD_PORT, "name": "sandboxd"}],
        "resources": _resources(spec),
        "readinessProbe": {
            "httpGet": {"path": "/health", "port": SANDBOXD_PORT},
            "periodSeconds": 1,
        },
        "securityContext": {"allowPrivilegeEscalation": False},
    }


def _resources(spec: SandboxSpec) -> Obj:
    """Requests and limits from ``spec``; ephemeral storage is always limited."""
    resources: Obj = {}
    if spec.cpu is not None:
        resources.setdefault("limits", {})["cpu"] = str(spec.cpu)
        resources.setdefault("requests", {})["cpu"] = str(spec.cpu)
    if spec.memory_mb is not None:
        resources.setdefault("limits", {})["memory"] = f"{spec.memory_mb}Mi"
        resources.setdefault("requests", {})["memory"] = f"{spec.memory_mb}Mi"
    # Always bounded: the container's writable layer, logs and emptyDirs count against it
    # (past it the kubelet evicts the pod; it never fills the node's disk).
    disk_mb = spec.disk_mb if spec.disk_mb is not None else DEFAULT_DISK_MB
    resources.setdefault("limits", {})["ephemeral-storage"] = f"{disk_mb}Mi"
    return resources


def secret_manifest(name: str, token: str, owner: Obj | None) -> Obj:
    """The per-pod Secret holding sandboxd's token (owned by the pod: deleted with it)."""
    meta: Obj = {"name": name, "labels": {LABEL_SANDBOX: "true"}}
    if owner:
        meta["ownerReferences"] = [owner]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
        "type": "Opaque",
        "stringData": {"token": token},
    }


def network_policy(name: str, gateway_labels: dict[str, str], gateway_port: int) -> Obj:
    """Sandbox pods: ingress only from the gateway/orchestrator, egress only to it and DNS."""
    gateway = {"podSelector": {"matchLabels": gateway_labels}}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name},
        "spec": {
            "podSelector": {"matchLabels": {LABEL_SANDBOX: "true"}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [gateway], "ports": [{"port": SANDBOXD_PORT}]}],
            "egress": [
                {"to": [gateway], "ports": [{"port": gateway_port}]},
                {
                    "to": [{"namespaceSelector": {}}],
                    "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}],
                },
            ],
        },
    }


@dataclass(frozen=True, slots=True)
class EngineArgs:
    """The model engine the gateway Deployment talks to: its kind, the engine servers' URLs
    (one per replica), the upstream API style and the name the servers know the model by."""

    kind: str = "vllm"
    urls: tuple[str, ...] = ()
    api: str | None = None
    served_model: str = ""

    def gateway_args(self) -> list[str]:
        """``openforge gateway`` options that select this engine."""
        args = ["--engine", self.kind]
        for url in self.urls:
            args += ["--url", url]
        if self.api:
            args += ["--api", self.api]
        if self.served_model:
            args += ["--served-model", self.served_model]
        return args


def service_url(namespace: str, port: int) -> str:
    """The gateway Service's model API as sandbox pods reach it (cluster DNS)."""
    return f"http://{GATEWAY_NAME}.{namespace}.svc:{port}"


def gateway_manifests(
    namespace: str = "openforge",
    image: str = "localhost/openforge:latest",
    port: int = 8000,
    replicas: int = 1,
    *,
    model: str = "smollm2-135m",
    engine: EngineArgs | None = None,
    store_secret: str = STORE_SECRET,
    admin_secret: str = ADMIN_SECRET,
    sandbox_image: str | None = None,
) -> list[Obj]:
    """The gateway's ServiceAccount, Role, RoleBinding, Deployment, Service,
    PodDisruptionBudget and sandbox policy.

    The Deployment runs ``replicas`` gateways behind one Service; they share the store
    whose URL (``postgresql://…`` for more than one replica) is key ``url`` of the Secret
    ``store_secret``, made by the operator, never printed here. Each replica routes a
    rollout to the same engine server (``engine.urls``), whichever replica it reached.
    The admin API listens on ``port + 1`` (its token is key ``token`` of the Secret
    ``admin_secret``, made by the operator too: :func:`secret_commands`); the sandbox
    NetworkPolicy lets sandbox pods reach ``port`` only, so an agent can never reach the
    admin API. Minted base URLs name the Service (``--public-url``), the address sandbox pods
    reach. An orchestrator run in the gateway pod (``openforge rollout --backend kubernetes``)
    makes sandbox pods in the Deployment's namespace from ``sandbox_image`` (a registry
    reference the nodes pull; default: the backend's). The Role lets the gateway pod manage
    sandbox pods, their Secrets and the NetworkPolicy in its own namespace, nothing else.
    """
    name = GATEWAY_NAME
    labels = {"app.kubernetes.io/name": "openforge", LABEL_COMPONENT: "gateway"}
    meta = {"name": name, "namespace": namespace, "labels": labels}
    admin_port = port + 1
    args = ["gateway", "--host", "0.0.0.0", "--port", str(port), "--model", model]
    args += ["--admin-host", "0.0.0.0", "--admin-port", str(admin_port)]
    args += ["--public-url", service_url(namespace, port)]
    args += (engine or EngineArgs()).gateway_args()
    container = _gateway_container(image, args, port, store_secret, admin_secret)
    container["env"].append(
        {"name": NAMESPACE_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}
    )
    if sandbox_image:
        container["env"].append({"name": SANDBOX_IMAGE_ENV, "value": sandbox_image})
    pod = {"serviceAccountName": name, "containers": [container],
           # SIGTERM: stop accepting, let open calls finish (every answered call is stored).
           "terminationGracePeriodSeconds": 120}  # fmt: skip
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta,
         "rules": _gateway_rules()},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
         "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                  # Replace one replica at a time, the new one ready first.
                  "strategy": {"type": "RollingUpdate",
                               "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
                  "template": {"metadata": {"labels": labels}, "spec": pod}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": meta,
         "spec": {"selector": labels, "ports": [
             {"name": "http", "port": port, "targetPort": port},
             {"name": "admin", "port": admin_port, "targetPort": admin_port}]}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta,
         "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}}},
        {**network_policy("openforge-sandboxes", labels, port),
         "metadata": {"name": "openforge-sandboxes", "namespace": namespace}},
    ]  # fmt: skip


def secret_commands(
    namespace: str, store_secret: str = STORE_SECRET, admin_secret: str = ADMIN_SECRET
) -> list[str]:
    """The ``kubectl`` commands that make the two Secrets the Deployment reads (before it
    starts): the store URL and the admin token, which no manifest should carry."""
    return [
        f"kubectl create namespace {namespace}",
        f"kubectl -n {namespace} create secret generic {store_secret} "
        "--from-literal=url=postgresql://USER:PASSWORD@HOST:5432/DB",
        f"kubectl -n {namespace} create secret generic {admin_secret} "
        '--from-literal=token="$(openssl rand -hex 32)"',
    ]


def _gateway_rules() -> list[Obj]:
    """What the gateway pod may do in its namespace: manage sandbox pods, their Secrets
    and the sandbox NetworkPolicy (it also runs the orchestrator on a cluster)."""
    return [
        {"apiGroups": [""], "resources": ["pods"],
         "verbs": ["get", "list", "watch", "create", "delete", "deletecollection", "patch"]},
        {"apiGroups": [""], "resources": ["secrets"],
         "verbs": ["get", "list", "create", "delete", "deletecollection"]},
        {"apiGroups": [""], "resources": ["configmaps"],
         "verbs": ["get", "list", "create", "delete"]},
        {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
         "verbs": ["get", "create", "patch"]},
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"]},
    ]  # fmt: skip


def _gateway_container(
    image: str, args: list[str], port: int, store_secret: str, admin_secret: str
) -> Obj:
    """The gateway container: the store URL and admin token from their Secrets."""
    admin_port = port + 1
    store_url = {"secretKeyRef": {"name": store_secret, "key": "url"}}
    admin_token = {"secretKeyRef": {"name": admin_secret, "key": "token"}}
    return {
        "name": "gateway",
        "image": image,
        "args": args,
        "env": [{"name": "OPENFORGE_STORE", "valueFrom": store_url},
                {"name": "OPENFORGE_ADMIN_TOKEN", "valueFrom": admin_token}],
        "ports": [{"containerPort": port, "name": "http"},
                  {"containerPort": admin_port, "name": "admin"}],
        # Out of the Service while starting (tokenizer load) or stuck; harness streams idle
        # for minutes while tools run, so a slow answer is not a reason to restart it.
        "readinessProbe": {"httpGet": {"path": "/health", "port": port},
                           "periodSeconds": 5, "failureThreshold": 2},
        "livenessProbe": {"httpGet": {"path": "/health", "port": port},
                          "periodSeconds": 20, "failureThreshold": 6},
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
    }  # fmt: skip
