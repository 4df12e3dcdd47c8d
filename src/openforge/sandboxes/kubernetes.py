"""The ``kubernetes`` backend: one Pod per rollout running sandboxd, reconciled crash-safely.

Client: ``kubernetes_asyncio`` — the official client's generated models and API surface,
but async, because the orchestrator is asyncio end to end and a sync client would need a
thread per in-flight call at hundreds of concurrent rollouts.

Names derive from the rollout id (``pod_name``), so a retried create after a crash finds
its own pod; every object carries ``openforge.dev/sandbox=true`` and the run's label, and
pods are owned by the gateway Deployment or a per-run ConfigMap, so ``openforge k8s gc``,
the garbage collector and :meth:`KubernetesBackend.run_reconciler` remove orphans. Errors
are classified by status code only (:func:`classify`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from openforge.sandboxes.base import SandboxError, SandboxSpec, TaskImage, service_env
from openforge.sandboxes.container import gui_image_default, sandbox_image_default
from openforge.sandboxes.images import ImageBuilder
from openforge.sandboxes.k8s_pool import PooledPod, WarmPool
from openforge.sandboxes.manifests import (
    LABEL_POOL,
    LABEL_ROLLOUT,
    LABEL_RUN,
    LABEL_SANDBOX,
    NAMESPACE_ENV,
    SANDBOXD_PORT,
    PodSidecar,
    harness_image_ref,
    label_value,
    network_policy,
    pod_manifest,
    pod_name,
    secret_manifest,
)
from openforge.sandboxes.remote import RemoteSandbox, SandboxdClient

__all__ = ["KubernetesBackend", "PodState", "TokenBucket", "classify", "parse_pod"]

log = logging.getLogger(__name__)

ErrorClass = Literal["conflict", "not_found", "gone", "retry", "fatal"]


def classify(status: int) -> ErrorClass:
    """What an API status code means for us (never parsed from a message)."""
    if status == 409:
        return "conflict"
    if status == 404:
        return "not_found"
    if status == 410:
        return "gone"
    if status == 429 or status >= 500:
        return "retry"
    return "fatal"


class TokenBucket:
    """Client-side rate limit: ``rate`` calls/s sustained, ``burst`` at once."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate, self.burst = rate, burst
        self._tokens = float(burst)
        self._last: float | None = None
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        """Wait for one token."""
        async with self._lock:
            loop = asyncio.get_running_loop()
            now = loop.time()
            if self._last is not None:
                self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
            self._last = now
            if self._tokens < 1:
                await asyncio.sleep((1 - self._tokens) / self.rate)
                self._last = loop.time()
                self._tokens = 1
            self._tokens -= 1


@dataclass(slots=True)
class PodState:
    """What the backend needs from a pod's status."""

    phase: str
    ready: bool
    ip: str | None
    failed_reason: str | None
    terminating: bool
    # A container that ended (a sidecar, restartPolicy Never: it never comes back). While
    # the pod starts that fails it; later the rollout goes on, as under podman.
    exited: str | None = None


def parse_pod(pod: Any) -> PodState:
    """The one place a pod's status is read (model object or raw dict)."""
    raw = pod if isinstance(pod, dict) else pod.to_dict()
    meta = raw.get("metadata") or {}
    status = raw.get("status") or {}
    phase = status.get("phase") or "Pending"
    conditions = status.get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    ip = status.get("podIP") or status.get("pod_ip")
    reason = exited = None
    if phase == "Failed":
        reason = status.get("reason") or "Failed"
    for cs in status.get("containerStatuses") or status.get("container_statuses") or []:
        state = cs.get("state") or {}
        waiting = state.get("waiting") or {}
        if waiting.get("reason") in ("ErrImagePull", "ImagePullBackOff", "CreateContainerError"):
            reason = f"{waiting['reason']}: {waiting.get('message', '')}"
        ended = state.get("terminated")
        if ended:
            code = ended.get("exitCode", ended.get("exit_code"))
            exited = f"container {cs.get('name')} exited ({code}): {ended.get('reason') or ''}"
    deleting = meta.get("deletionTimestamp") or meta.get("deletion_timestamp")
    return PodState(phase, ready and phase == "Running", ip, reason, bool(deleting), exited)


class KubernetesBackend:
    """Sandboxes as pods in ``namespace``; exec and files go to sandboxd on the pod IP."""

    name = "kubernetes"

    def __init__(
        self,
        namespace: str | None = None,
        image: str | None = None,
        context: str | None = None,
        run_id: str | None = None,
        owner: dict[str, Any] | None = None,
        api_client: Any = None,
        qps: float = 20.0,
        burst: int = 40,
        verify_margin_s: float = 600.0,
        default_lifetime_s: float = 3600.0,
        ready_timeout: float = 300.0,
        gateway_labels: dict[str, str] | None = None,
        gateway_port: int = 8000,  # the model API's port, as `openforge gateway`'s default
        max_retries: int = 5,
        sandboxd_port: int = SANDBOXD_PORT,
        warm_pool: int = 0,
        pool_spec: SandboxSpec | None = None,
        pool_max_age_s: float = 900.0,
        task_registry: str | None = None,
        base_images: dict[str, str] | None = None,
        gui_image: str | None = None,
    ) -> None:
        # In the gateway pod (`openforge k8s manifests`) the Deployment names its namespace.
        self.namespace = namespace or os.environ.get(NAMESPACE_ENV) or "openforge"
        # Where ``openforge images build --push REGISTRY`` put the tasks' own images.
        self.task_registry = task_registry or os.environ.get("OPENFORGE_TASK_REGISTRY") or None
        self.task_images = ImageBuilder("podman", base_images)
        self.image = image or sandbox_image_default()
        # For tasks with a GUI environment: deploy/build-gui-image.sh's image, pushed where
        # the cluster pulls from (default: $OPENFORGE_GUI_IMAGE, else the local name).
        self.gui_image = gui_image or gui_image_default()
        self.context = context
        self.run_id = run_id or secrets.token_hex(4)
        self.owner = owner
        self.verify_margin_s = verify_margin_s
        self.default_lifetime_s = default_lifetime_s
        self.ready_timeout = ready_timeout
        self.gateway_labels = gateway_labels or {"app.kubernetes.io/component": "gateway"}
        self.gateway_port = gateway_port
        self.max_retries = max_retries
        self.sandboxd_port = sandboxd_port
        self.bucket = TokenBucket(qps, burst)
        self._api_client = api_client
        self._own_client = api_client is None
        self._open: dict[str, RemoteSandbox] = {}
        self._creating: set[str] = set()
        self._policy_done = False
        self.pool: WarmPool | None = None
        if warm_pool > 0:
            self.pool = WarmPool(
                size=warm_pool, spec=pool_spec or SandboxSpec(), max_age_s=pool_max_age_s,
                prefix=f"of-pool-{self.run_id}", launch=self._launch_pooled,
                delete=self._delete_named, fits=self._fits_pool,
            )  # fmt: skip

    async def _core(self) -> Any:
        from kubernetes_asyncio import client, config

        if self._api_client is None:
            try:
                config.load_incluster_config()  # type: ignore[no-untyped-call]
                self._api_client = client.ApiClient()
            except config.ConfigException:
                await config.load_kube_config(context=self.context)
                self._api_client = client.ApiClient()
        return client.CoreV1Api(self._api_client)

    async def call(self, fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
        """Rate-limited API call; 429 and 5xx are retried with backoff, others raised."""
        from kubernetes_asyncio.client.exceptions import ApiException

        for attempt in range(self.max_retries + 1):
            await self.bucket.acquire()
            try:
                return await fn(*args, **kwargs)
            except ApiException as exc:
                if classify(exc.status) != "retry" or attempt == self.max_retries:
                    raise
                headers: dict[str, str] = dict(exc.headers or {})
                retry_after = headers.get("Retry-After")
                delay = float(retry_after) if retry_after else min(8.0, 0.05 * 2**attempt)
                log.info("kubernetes API %s; retrying in %.2fs", exc.status, delay)
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def _delete_named(self, name: str) -> None:
        await self._delete_pod(await self._core(), name)

    async def _delete_pod(self, core: Any, name: str) -> None:
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            await self.call(
                core.delete_namespaced_pod, name, self.namespace, grace_period_seconds=0
            )
        except ApiException as exc:
            if classify(exc.status) != "not_found":
                raise

    async def _ensure_policy(self, core: Any) -> None:
        from kubernetes_asyncio import client
        from kubernetes_asyncio.client.exceptions import ApiException

        if self._policy_done:
            return
        net = client.NetworkingV1Api(core.api_client)
        body = network_policy("openforge-sandboxes", self.gateway_labels, self.gateway_port)
        try:
            await self.call(net.create_namespaced_network_policy, self.namespace, body)
        except ApiException as exc:
            if classify(exc.status) != "conflict":
                raise
        self._policy_done = True

    async def create(self, spec: SandboxSpec) -> RemoteSandbox:
        """A ready sandbox for ``spec``: a claimed warm-pool pod, else the rollout's own pod.

        Its own pod is created (or re-created) with its Secret, then waited for until
        sandboxd answers.
        """
        from kubernetes_asyncio.client.exceptions import ApiException

        rollout = (spec.labels.get(LABEL_ROLLOUT) or spec.labels.get("openforge/rollout")
                   or secrets.token_hex(8))  # fmt: skip
        spec.labels = {**spec.labels, LABEL_ROLLOUT: rollout, LABEL_RUN: self.run_id}
        if self.pool is not None:
            self.pool.start()
            pooled = self.pool.claim(spec)
            if pooled is not None:
                box = await self._claim(pooled, spec, rollout)
                if box is not None:
                    return box
        name = pod_name(rollout)
        token = secrets.token_urlsafe(32)
        lifetime = spec.lifetime_s or self.default_lifetime_s
        image, runtime = self._images(spec)
        body = pod_manifest(
            name, spec, image=image, secret=f"{name}-token",
            deadline_s=int(lifetime + self.verify_margin_s), owner=self.owner,
            runtime_image=runtime, harness_image=self._harness_image(spec),
            sidecars=self._sidecars(spec),
        )  # fmt: skip
        self._creating.add(name)
        try:
            ip = await self._launch(name, body, token, spec.network)
        except ApiException as exc:
            raise SandboxError(f"kubernetes: pod {name}: {exc.status} {exc.reason}") from exc
        finally:
            self._creating.discard(name)
        client = SandboxdClient(f"http://{ip}:{self.sandboxd_port}", token)
        box = self._box(name, client, spec)
        try:
            await client.wait_ready(self.ready_timeout)
        except BaseException:
            await box.close()
            raise
        return box

    def _images(self, spec: SandboxSpec) -> tuple[str, str | None]:
        """The pod's image, and the sandbox image to mount beside a task's own image or the
        GUI image (a task's own image wins: it must then carry its GUI itself)."""
        if spec.task_image is None and spec.gui:
            return self.gui_image, self.image
        if spec.task_image is None:
            return spec.image or self.image, None
        return self._pushed(spec.task_image), self.image

    def _pushed(self, image: TaskImage) -> str:
        """The reference the cluster pulls ``image`` by: its own when prebuilt, else where
        ``openforge images build --push REGISTRY`` put it."""
        ref = self.task_images.tag(image)
        if image.dockerfile is None:
            return ref
        if self.task_registry is None:
            raise SandboxError(
                "a task with its own Dockerfile needs its image in a registry: "
                "openforge images build --tasks … --push REGISTRY, then task_registry=REGISTRY"
            )
        return f"{self.task_registry.rstrip('/')}/{ref.rsplit('/', 1)[-1]}"

    def _sidecars(self, spec: SandboxSpec) -> list[PodSidecar]:
        """The task's compose services as containers of its pod; one that calls a model gets
        the sandbox's model key at the gateway's in-cluster address."""
        return [
            PodSidecar(svc, self._pushed(svc.image),
                       service_env(svc, spec.service_key, spec.gateway_url))
            for svc in spec.services
        ]  # fmt: skip

    def _harness_image(self, spec: SandboxSpec) -> str | None:
        """The pushed image of the spec's portable harness install, if it has one."""
        if spec.harness is None:
            return None
        if self.task_registry is None:
            raise SandboxError(
                "a harness in pods needs its portable install in a registry: openforge images "
                "build --harness NAME --push REGISTRY, then task_registry=REGISTRY"
            )
        return harness_image_ref(self.task_registry, spec.harness.key)

    def _box(
        self, name: str, client: SandboxdClient, spec: SandboxSpec, env: Any = None
    ) -> RemoteSandbox:
        async def remove() -> None:
            self._open.pop(name, None)
            await self._delete_named(name)

        box = RemoteSandbox(name, client, spec.gateway_url, remove, env)
        self._open[name] = box
        return box

    async def _launch(self, name: str, body: dict[str, Any], token: str, network: str) -> str:
        """Create the pod and its token Secret; the pod's IP once it is Ready."""
        from kubernetes_asyncio.client.exceptions import ApiException

        core = await self._core()
        if network != "open":
            await self._ensure_policy(core)
        pod = await self._create_pod(core, name, body)
        owner = {"apiVersion": "v1", "kind": "Pod", "name": name,
                 "uid": pod.metadata.uid, "controller": False}  # fmt: skip
        secret = secret_manifest(f"{name}-token", token, owner)
        try:
            await self.call(core.create_namespaced_secret, self.namespace, secret)
        except ApiException as exc:
            if classify(exc.status) != "conflict":
                raise
            await self.call(core.replace_namespaced_secret, f"{name}-token", self.namespace, secret)
        return await self.wait_ready(core, name)

    def _fits_pool(self, spec: SandboxSpec) -> bool:
        pool = self.pool.spec if self.pool is not None else SandboxSpec()
        lifetime = spec.lifetime_s or self.default_lifetime_s
        return (
            spec.task_image is None
            and not spec.services
            and spec.gui == pool.gui
            and (spec.image or self.image) == (pool.image or self.image)
            and spec.workdir == pool.workdir
            and (spec.cpu, spec.memory_mb, spec.pids, spec.disk_mb)
            == (pool.cpu, pool.memory_mb, pool.pids, pool.disk_mb)
            and spec.network == pool.network
            and spec.harness == pool.harness
            and lifetime <= self.default_lifetime_s
        )

    async def _launch_pooled(self, name: str) -> PooledPod:
        """One warm-pool pod, Ready and answering; its deadline covers pool age + lifetime."""
        assert self.pool is not None
        born = asyncio.get_running_loop().time()
        spec = self.pool.spec
        labeled = SandboxSpec(**{**{f: getattr(spec, f) for f in spec.__slots__},
                                 "labels": {**spec.labels, LABEL_POOL: "ready",
                                            LABEL_RUN: self.run_id}})  # fmt: skip
        token = secrets.token_urlsafe(32)
        deadline = self.pool.max_age_s + self.default_lifetime_s + self.verify_margin_s
        image, runtime = self._images(spec)
        body = pod_manifest(
            name, labeled, image=image, secret=f"{name}-token", deadline_s=int(deadline),
            owner=self.owner, runtime_image=runtime, harness_image=self._harness_image(spec),
        )  # fmt: skip
        ip = await self._launch(name, body, token, spec.network)
        client = SandboxdClient(f"http://{ip}:{self.sandboxd_port}", token)
        try:
            await client.wait_ready(self.ready_timeout)
        except BaseException:
            await client.aclose()
            raise
        return PooledPod(name, client, born)

    async def _claim(
        self, pooled: PooledPod, spec: SandboxSpec, rollout: str
    ) -> RemoteSandbox | None:
        """Relabel a pool pod to ``rollout``; None (pod deleted) if it is gone or changed."""
        from kubernetes_asyncio.client.exceptions import ApiException

        patch = {"metadata": {"labels": {LABEL_POOL: None, LABEL_ROLLOUT: label_value(rollout)}}}
        self._creating.add(pooled.name)
        try:
            core = await self._core()
            await self.call(core.patch_namespaced_pod, pooled.name, self.namespace, patch)
        except ApiException as exc:
            log.info("warm pool pod %s not claimable (%s); creating one", pooled.name, exc.status)
            await pooled.client.aclose()
            with contextlib.suppress(ApiException):
                await self._delete_named(pooled.name)
            return None
        finally:
            self._creating.discard(pooled.name)
        return self._box(pooled.name, pooled.client, spec, spec.env)

    async def _create_pod(self, core: Any, name: str, body: dict[str, Any]) -> Any:
        from kubernetes_asyncio.client.exceptions import ApiException

        for _ in range(3):
            try:
                return await self.call(core.create_namespaced_pod, self.namespace, body)
            except ApiException as exc:
                if classify(exc.status) != "conflict":
                    raise
            # A pod of this rollout from an earlier attempt: its token is lost, replace it.
            await self._delete_pod(core, name)
            await self._wait_gone(core, name)
        raise SandboxError(f"kubernetes: pod {name} keeps existing after deletion")

    async def _watch_pod(self, core: Any, name: str, done: Callable[[Any], bool]) -> Any:
        """Watch one pod until ``done(pod_or_None)``; relists on 410 Gone."""
        from kubernetes_asyncio import watch
        from kubernetes_asyncio.client.exceptions import ApiException

        selector = f"metadata.name={name}"
        while True:
            listing = await self.call(
                core.list_namespaced_pod, self.namespace, field_selector=selector
            )
            pod = listing.items[0] if listing.items else None
            if done(pod):
                return pod
            w = watch.Watch()
            try:
                async for event in w.stream(
                    core.list_namespaced_pod, self.namespace, field_selector=selector,
                    resource_version=listing.metadata.resource_version, timeout_seconds=60,
                ):  # fmt: skip
                    obj = None if event["type"] == "DELETED" else event["object"]
                    if done(obj):
                        return obj
            except ApiException as exc:
                if classify(exc.status) not in ("gone", "retry"):
                    raise
                log.info("watch on pod %s: %s; relisting", name, exc.status)
            finally:
                await w.close()

    async def _wait_gone(self, core: Any, name: str) -> None:
        await self._watch_pod(core, name, lambda pod: pod is None)

    async def wait_ready(self, core: Any, name: str) -> str:
        """The pod's IP once it is Running and Ready; SandboxError if it fails or vanishes."""

        def done(pod: Any) -> bool:
            if pod is None:
                raise SandboxError(f"kubernetes: pod {name} disappeared while starting")
            state = parse_pod(pod)
            if state.failed_reason or state.phase in ("Failed", "Succeeded"):
                raise SandboxError(f"kubernetes: pod {name} failed: {state.failed_reason}")
            if state.exited:
                raise SandboxError(f"kubernetes: pod {name} failed: {state.exited}")
            return state.ready and state.ip is not None

        try:
            pod = await asyncio.wait_for(self._watch_pod(core, name, done), self.ready_timeout)
        except TimeoutError:
            msg = f"kubernetes: pod {name} not ready in {self.ready_timeout}s"
            raise SandboxError(msg) from None
        ip = parse_pod(pod).ip
        assert ip is not None
        return ip

    def _owned(self, name: str) -> bool:
        pool = self.pool.names() if self.pool is not None else set()
        return name in self._open or name in self._creating or name in pool

    def _doomed(self, pod: Any) -> bool:
        """Whether a pod of this run should go: nobody owns it, or it has terminated."""
        state = parse_pod(pod)
        if state.terminating:
            return False
        name = pod.metadata.name
        if state.phase in ("Failed", "Succeeded") or state.failed_reason:
            if self.pool is not None:
                self.pool.discard(name)
            return name not in self._creating
        return not self._owned(name)

    @property
    def _selector(self) -> str:
        return f"{LABEL_SANDBOX}=true,{LABEL_RUN}={self.run_id}"

    async def reconcile_once(self) -> list[str]:
        """Delete this run's pods that no open sandbox owns or that have terminated."""
        core = await self._core()
        listing = await self.call(
            core.list_namespaced_pod, self.namespace, label_selector=self._selector
        )
        return await self._reconcile(core, listing.items)

    async def _reconcile(self, core: Any, pods: list[Any]) -> list[str]:
        doomed = [pod.metadata.name for pod in pods if self._doomed(pod)]
        for name in doomed:
            await self._delete_pod(core, name)
        return doomed

    async def _on_event(self, core: Any, kind: str, pod: Any) -> None:
        """React to one watch event on this run's pods (edge-triggered reconcile)."""
        name = pod.metadata.name
        if kind == "DELETED":
            if self.pool is not None:
                self.pool.discard(name)
            if name in self._open:
                log.warning("sandbox pod %s was deleted under its rollout", name)
            return
        if kind in ("ADDED", "MODIFIED"):
            await self._reconcile(core, [pod])

    async def watch_pods(self, watch_timeout_s: int = 300) -> None:
        """Watch this run's pods forever: list (a level pass), then watch from that version.

        ``410 Gone`` (the version is too old) and the server ending the watch both lead to
        a relist; 429/5xx and transport errors back off and relist. Cancel to stop.
        """
        import aiohttp
        from kubernetes_asyncio import watch
        from kubernetes_asyncio.client.exceptions import ApiException

        backoff = 0.0
        while True:
            w = watch.Watch()
            try:
                core = await self._core()
                listing = await self.call(
                    core.list_namespaced_pod, self.namespace, label_selector=self._selector
                )
                await self._reconcile(core, listing.items)
                async for event in w.stream(
                    core.list_namespaced_pod, self.namespace, label_selector=self._selector,
                    resource_version=listing.metadata.resource_version,
                    timeout_seconds=watch_timeout_s,
                ):  # fmt: skip
                    await self._on_event(core, event["type"], event["object"])
                backoff = 0.0
            except ApiException as exc:
                if classify(exc.status) == "gone":
                    log.info("reconciler watch: 410 Gone; relisting")
                    continue
                backoff = min(30.0, max(0.1, backoff * 2))
                log.warning("reconciler watch: %s %s; relisting in %.1fs",
                            exc.status, exc.reason, backoff)  # fmt: skip
            except (TimeoutError, OSError, aiohttp.ClientError) as exc:
                backoff = min(30.0, max(0.1, backoff * 2))
                log.warning("reconciler watch: %r; relisting in %.1fs", exc, backoff)
            finally:
                await w.close()
            await asyncio.sleep(backoff)

    async def run_reconciler(
        self, stop: asyncio.Event, period_s: float = 30.0, watch: bool = True
    ) -> None:
        """Until ``stop`` is set: a level-triggered pass every ``period_s`` and, with
        ``watch``, a watch on this run's pods that reacts to each event as it comes."""
        from kubernetes_asyncio.client.exceptions import ApiException

        async def periodic() -> None:
            while True:
                try:
                    deleted = await self.reconcile_once()
                    if deleted:
                        log.info("reconciler removed %d pods", len(deleted))
                except (ApiException, OSError) as exc:
                    log.warning("reconcile pass failed: %r", exc)
                await asyncio.sleep(period_s)

        tasks = [asyncio.create_task(periodic())]
        if watch:
            tasks.append(asyncio.create_task(self.watch_pods()))
        try:
            await stop.wait()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def gc(self, all_runs: bool = False) -> int:
        """Delete sandbox pods and secrets (this run's, or every run's); returns pods deleted."""
        core = await self._core()
        selector = f"{LABEL_SANDBOX}=true" + ("" if all_runs else f",{LABEL_RUN}={self.run_id}")
        listing = await self.call(core.list_namespaced_pod, self.namespace, label_selector=selector)
        for pod in listing.items:
            await self._delete_pod(core, pod.metadata.name)
        if all_runs:  # a run's Secrets are owned by its pods and go with them
            await self.call(
                core.delete_collection_namespaced_secret, self.namespace,
                label_selector=f"{LABEL_SANDBOX}=true",
            )  # fmt: skip
        return len(listing.items)

    async def close(self) -> None:
        """Delete every pod this backend still holds (pool included), close the API client."""
        if self.pool is not None:
            await self.pool.close()
        await asyncio.gather(*(box.close() for box in list(self._open.values())))
        if self._own_client and self._api_client is not None:
            await self._api_client.close()
