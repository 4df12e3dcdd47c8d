"""Kubernetes warm pool and the reconciler's watch, against a stateful fake API server
(tests/sandboxes/k8s_fake.py) driven by the real kubernetes_asyncio client and real sandboxd."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import uvicorn
from kubernetes_asyncio import client as k8s

from openforge.sandboxes import SandboxSpec
from openforge.sandboxes.kubernetes import KubernetesBackend
from openforge.sandboxes.manifests import LABEL_POOL, LABEL_ROLLOUT, LABEL_RUN, pod_name

from .k8s_fake import FakeCluster


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[FakeCluster, str]]:
    fake = FakeCluster(_free_port(), tmp_path)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(fake.app(), log_level="warning", lifespan="off",
                            timeout_graceful_shutdown=1)  # fmt: skip
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    yield fake, f"http://127.0.0.1:{sock.getsockname()[1]}"
    await fake.close()
    server.should_exit = True
    await task


def _backend(fake: FakeCluster, url: str, **options: object) -> KubernetesBackend:
    api = k8s.ApiClient(k8s.Configuration(host=url))
    return KubernetesBackend(namespace="of", api_client=api, sandboxd_port=fake.port,
                             ready_timeout=30, **options)  # type: ignore[arg-type]  # fmt: skip


def _pool_pods(fake: FakeCluster) -> set[str]:
    return {n for n, p in fake.pods.items() if p["metadata"]["labels"].get(LABEL_POOL) == "ready"}


async def test_warm_pool_claims_relabels_refills_and_recycles(
    cluster: tuple[FakeCluster, str],
) -> None:
    fake, url = cluster
    backend = _backend(fake, url, warm_pool=2, pool_max_age_s=600, run_id="run1")
    assert backend.pool is not None
    try:
        await backend.pool.wait_full()
        first = _pool_pods(fake)
        assert len(first) == 2
        pod = fake.pods[sorted(first)[0]]
        assert pod["metadata"]["labels"][LABEL_RUN] == "run1"
        # The deadline covers the time in the pool plus a whole rollout and its verifier.
        assert pod["spec"]["activeDeadlineSeconds"] == 600 + 3600 + 600

        box = await backend.create(SandboxSpec(labels={LABEL_ROLLOUT: "r1"}, env={"A": "spec"}))
        assert box.id in first
        labels = fake.pods[box.id]["metadata"]["labels"]
        assert labels[LABEL_ROLLOUT] == "r1" and LABEL_POOL not in labels
        assert ("PATCH", "pod", box.id) in fake.calls
        assert ("POST", "pod", pod_name("r1")) not in fake.calls  # no pod of its own
        result = await box.exec('echo "$A"')
        assert result.stdout == b"spec\n"

        await backend.pool.wait_full()  # refilled in the background after the claim
        assert len(_pool_pods(fake)) == 2 and len(first & _pool_pods(fake)) == 1

        # Pods past their pool lifetime are deleted and replaced.
        old = backend.pool.recycle(asyncio.get_running_loop().time() + 601)
        assert sorted(old) == sorted(_pool_pods(fake))
        await fake.until(lambda: not set(old) & set(fake.pods))
        await backend.pool.wait_full()
        assert len(_pool_pods(fake)) == 2 and not set(old) & _pool_pods(fake)

        # A spec the pool's pods do not fit gets its own pod, named after its rollout.
        other = await backend.create(SandboxSpec(labels={LABEL_ROLLOUT: "r2"}, cpu=2))
        assert other.id == pod_name("r2")
        assert (await other.exec("echo own")).stdout == b"own\n"

        # A pooled pod that dies is dropped from the pool (watch) and replaced.
        stop = asyncio.Event()
        reconciler = asyncio.create_task(backend.run_reconciler(stop, period_s=3600))
        await fake.until(lambda: fake.live_label_watches > 0)
        dying = sorted(_pool_pods(fake))[0]
        fake.set_phase(dying, "Failed")
        await fake.until(lambda: dying not in fake.pods)
        await backend.pool.wait_full()
        assert dying not in backend.pool.names()
        stop.set()
        await reconciler

        await box.close()
        await other.close()
        assert box.id not in fake.pods and other.id not in fake.pods
    finally:
        await backend.close()
        await backend._api_client.close()
    assert fake.pods == {}  # the pool's pods went with the backend


async def test_reconciler_watch_relists_on_410_and_reacts_to_events(
    cluster: tuple[FakeCluster, str],
) -> None:
    fake, url = cluster
    backend = _backend(fake, url, run_id="run2")
    try:
        box = await backend.create(SandboxSpec(labels={LABEL_ROLLOUT: "r1"}))
        mine = {"openforge.dev/sandbox": "true", LABEL_RUN: "run2"}
        fake.add_pod("stray-1", mine)  # left by a crashed attempt: the level pass removes it
        fake.add_pod("other-run", {"openforge.dev/sandbox": "true", LABEL_RUN: "zzz"})
        fake.expire_label_watches = 1
        stop = asyncio.Event()
        task = asyncio.create_task(backend.run_reconciler(stop, period_s=3600))
        await fake.until(lambda: "stray-1" not in fake.pods)
        await fake.until(lambda: fake.live_label_watches > 0)
        assert fake.served_410 == 1
        selector = f"openforge.dev/sandbox=true,{LABEL_RUN}=run2"
        # the periodic pass, the watch's first list and its relist after 410 Gone
        assert fake.calls.count(("LIST", "pods", selector)) >= 3

        # Only the watch can see these: the periodic pass sleeps for an hour.
        fake.add_pod("stray-2", mine)
        await fake.until(lambda: "stray-2" not in fake.pods)
        fake.set_phase(box.id, "Failed")
        await fake.until(lambda: box.id not in fake.pods)
        assert "other-run" in fake.pods  # another run's pod is never touched

        stop.set()
        await task
        await fake.until(lambda: fake.live_label_watches == 0)  # the watch connection closed
    finally:
        await backend.close()
        await backend._api_client.close()
