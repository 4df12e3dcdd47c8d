"""The Kubernetes backend: manifests validated offline; API error reactions against a local
server that speaks the Kubernetes API paths with recorded responses (the real
kubernetes_asyncio client runs over HTTP); a real-cluster test when OPENFORGE_K8S_CONTEXT is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import typer
import uvicorn
import yaml
from kubernetes_asyncio import client as k8s
from kubernetes_validate import validate
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from typer.testing import CliRunner

from openforge.cli import app
from openforge.sandboxes import SandboxSpec
from openforge.sandboxes.base import DEFAULT_DISK_MB
from openforge.sandboxes.kubernetes import KubernetesBackend, TokenBucket, classify, parse_pod
from openforge.sandboxes.manifests import (
    LABEL_ROLLOUT,
    EngineArgs,
    gateway_manifests,
    pod_manifest,
    pod_name,
    secret_manifest,
)

K8S_VERSION = "1.33.0"


def test_manifests_validate() -> None:
    docs = gateway_manifests(
        namespace="of", image="img:1", port=9000, replicas=3,
        engine=EngineArgs("vllm", ("http://vllm-0:8000", "http://vllm-1:8000")),
    )  # fmt: skip
    docs.append(
        pod_manifest(
            pod_name("rollout/1"), SandboxSpec(cpu=1, memory_mb=512, disk_mb=100, env={"A": "b"}),
            image="img:1", secret="s", deadline_s=900,
            owner={"apiVersion": "v1", "kind": "ConfigMap", "name": "run", "uid": "u"},
        )
    )  # fmt: skip
    docs.append(pod_manifest(pod_name("r/2"), SandboxSpec(), image="i", secret="s", deadline_s=9))
    docs.append(secret_manifest("s", "tok", None))
    for doc in yaml.safe_load_all(yaml.safe_dump_all(docs)):
        validate(doc, K8S_VERSION, strict=True)
    # Every sandbox pod's disk is bounded: the task's disk_mb, else the default.
    limits = [d["spec"]["containers"][0]["resources"]["limits"] for d in docs if d["kind"] == "Pod"]
    assert [x["ephemeral-storage"] for x in limits] == ["100Mi", f"{DEFAULT_DISK_MB}Mi"]
    kinds = [d["kind"] for d in docs]
    assert kinds[:7] == [
        "ServiceAccount", "Role", "RoleBinding", "Deployment", "Service",
        "PodDisruptionBudget", "NetworkPolicy",
    ]  # fmt: skip
    deployment, service, budget = docs[3], docs[4], docs[5]
    assert deployment["spec"]["replicas"] == 3
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    # The store URL and the admin token come from Secrets, never from the manifest's text.
    assert container["env"] == [
        {"name": "OPENFORGE_STORE",
         "valueFrom": {"secretKeyRef": {"name": "openforge-store", "key": "url"}}},
        {"name": "OPENFORGE_ADMIN_TOKEN",
         "valueFrom": {"secretKeyRef": {"name": "openforge-admin", "key": "token"}}},
        # An orchestrator in this pod makes sandbox pods in the pod's own namespace.
        {"name": "OPENFORGE_K8S_NAMESPACE",
         "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]  # fmt: skip
    # The admin API has its own port, which sandbox pods may not reach: their egress is the
    # model port only.
    assert container["args"][container["args"].index("--admin-port") + 1] == "9001"
    assert {p["port"] for p in service["spec"]["ports"]} == {9000, 9001}
    policy = docs[6]
    egress_ports = [p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]]
    assert 9000 in egress_ports and 9001 not in egress_ports
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": 9000}
    assert container["args"].count("--url") == 2
    labels = deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["selector"] == labels
    assert budget["spec"]["selector"]["matchLabels"] == labels


def _secret_refs(node: Any) -> Iterator[tuple[str, str]]:
    """(Secret name, key) of every secretKeyRef anywhere in a manifest."""
    if isinstance(node, dict):
        ref = node.get("secretKeyRef")
        if isinstance(ref, dict):
            yield ref["name"], ref["key"]
        for value in node.values():
            yield from _secret_refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _secret_refs(value)


def test_k8s_manifests_command_prints_what_runs() -> None:
    """`openforge k8s manifests` as a user runs it: refused without the engine's URL (the
    gateway would refuse it too); otherwise YAML that validates against the Kubernetes
    schemas, whose Deployment args `openforge gateway` accepts, and whose every Secret is
    made by the commands printed at its head."""
    runner = CliRunner()
    refused = runner.invoke(app, ["k8s", "manifests"])
    assert refused.exit_code == 2 and "--engine vllm needs --url" in refused.output
    refused = runner.invoke(app, ["k8s", "manifests", "--engine", "upstream", "--url", "http://x"])
    assert refused.exit_code == 2 and "--api openai or --api anthropic" in refused.output
    got = runner.invoke(
        app, ["k8s", "manifests", "--namespace", "rl", "--url", "http://vllm-0.vllm:8000",
              "--url", "http://vllm-1.vllm:8000", "--served-model", "policy",
              "--sandbox-image", "registry.example/openforge-sandbox:1"],
    )  # fmt: skip
    assert got.exit_code == 0, got.output
    docs = list(yaml.safe_load_all(got.output))
    for doc in docs:
        validate(doc, K8S_VERSION, strict=True)
    made = {
        (m.group(1), m.group(2))
        for m in re.finditer(r"create secret generic (\S+) --from-literal=(\w+)=", got.output)
    }
    referenced = {ref for doc in docs for ref in _secret_refs(doc)}
    assert referenced == {("openforge-store", "url"), ("openforge-admin", "token")}
    assert referenced <= made
    assert "kubectl create namespace rl" in got.output
    by_kind = {d["kind"]: d for d in docs}
    container = by_kind["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][0] == "gateway"
    # The real `openforge gateway` parses these args (unknown or malformed ones raise).
    command = typer.main.get_command(app)
    gateway = command.commands["gateway"]  # type: ignore[attr-defined]
    with gateway.make_context("gateway", [*container["args"][1:], "--store", "x"]) as ctx:
        params = ctx.params
    assert params["url"] == ["http://vllm-0.vllm:8000", "http://vllm-1.vllm:8000"]
    assert params["engine"] == "vllm" and params["served_model"] == "policy"
    # Harnesses in sandbox pods are given the Service's name, on the port the policy opens.
    assert params["public_url"] == "http://openforge-gateway.rl.svc:8000"
    service_ports = {p["port"] for p in by_kind["Service"]["spec"]["ports"]}
    policy = by_kind["NetworkPolicy"]["spec"]["egress"][0]["ports"]
    assert params["port"] == 8000 and {8000, 8001} == service_ports
    assert policy == [{"port": 8000}]
    env = {e["name"]: e for e in container["env"]}
    assert env["OPENFORGE_SANDBOX_IMAGE"]["value"] == "registry.example/openforge-sandbox:1"


def test_pod_names_are_deterministic_dns_labels() -> None:
    a = pod_name("Task_7/sample#3")
    assert a == pod_name("Task_7/sample#3") != pod_name("Task_7/sample#4")
    assert len(a) <= 63 and a.replace("-", "").isalnum() and a.islower()


def test_classify_and_parse_pod() -> None:
    assert [classify(s) for s in (409, 404, 410, 429, 503, 403)] == [
        "conflict", "not_found", "gone", "retry", "retry", "fatal",
    ]  # fmt: skip
    ready = _pod("p", "Running", ready=True)
    assert parse_pod(ready).ready and parse_pod(ready).ip == "127.0.0.1"
    pulling = _pod("p", "Pending")
    pulling["status"]["containerStatuses"] = [
        {"state": {"waiting": {"reason": "ErrImagePull", "message": "no registry"}}}
    ]
    assert parse_pod(pulling).failed_reason == "ErrImagePull: no registry"


async def test_token_bucket_allows_burst_then_paces() -> None:
    bucket = TokenBucket(rate=1000.0, burst=3)
    for _ in range(5):
        await bucket.acquire()
    assert bucket._tokens < 1


def _status(code: int, reason: str) -> Response:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": reason, "reason": reason, "code": code}  # fmt: skip
    headers = {"Retry-After": "0"} if code == 429 else {}
    return Response(orjson.dumps(body), code, headers, media_type="application/json")


def _pod(name: str, phase: str, ready: bool = False, rv: str = "1") -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "of", "uid": "uid-1", "resourceVersion": rv},
        "spec": {"containers": [{"name": "sandbox", "image": "img"}]},
        "status": {"phase": phase, "podIP": "127.0.0.1",
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }  # fmt: skip


class FakeApi:
    """Recorded API responses, in order, per (method, kind); records every request."""

    def __init__(self, sandboxd_port: int) -> None:
        self.port = sandboxd_port
        self.calls: list[tuple[str, str]] = []
        self.sandboxd: asyncio.subprocess.Process | None = None
        self.pod_creates = [409, 429, 201]
        self.pod_lists: list[dict[str, Any] | None] = [None, "pending", "ready"]  # type: ignore[list-item]

    async def pods(self, request: Request) -> Response:
        self.calls.append((request.method, "pods"))
        if request.method == "POST":
            code = self.pod_creates.pop(0)
            if code != 201:
                return _status(code, "AlreadyExists" if code == 409 else "TooManyRequests")
            body = orjson.loads(await request.body())
            assert body["spec"]["activeDeadlineSeconds"] == 1800 + 600
            return Response(orjson.dumps(_pod(body["metadata"]["name"], "Pending")), 201,
                            media_type="application/json")  # fmt: skip
        if request.query_params.get("watch", "").lower() == "true":
            self.calls.append(("WATCH", "pods"))
            line = {"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1",
                    "metadata": {}, "status": "Failure", "message": "too old resource version",
                    "reason": "Expired", "code": 410}}  # fmt: skip
            return StreamingResponse(iter([orjson.dumps(line) + b"\n"]),
                                     media_type="application/json")  # fmt: skip
        state = self.pod_lists.pop(0) if self.pod_lists else "ready"
        items = [] if state is None else [_pod("p", "Running" if state == "ready" else "Pending",
                                                ready=state == "ready")]  # fmt: skip
        listing = {"kind": "PodList", "apiVersion": "v1",
                   "metadata": {"resourceVersion": "5"}, "items": items}  # fmt: skip
        return Response(orjson.dumps(listing), media_type="application/json")

    async def pod(self, request: Request) -> Response:
        self.calls.append((request.method, "pod"))
        if len([c for c in self.calls if c == ("DELETE", "pod")]) == 1:
            return Response(orjson.dumps(_pod("p", "Running")), media_type="application/json")
        return _status(404, "NotFound")

    async def secrets(self, request: Request) -> Response:
        self.calls.append((request.method, "secrets"))
        body = orjson.loads(await request.body())
        token = body["stringData"]["token"]
        assert body["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
        self.sandboxd = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "openforge.sandboxes.sandboxd", "--host", "127.0.0.1",
            "--port", str(self.port), "--workdir", "/tmp/of-k8s-test-work",
            "--home", "/tmp/of-k8s-test-home",
            env={**os.environ, "OPENFORGE_SANDBOXD_TOKEN": token},
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert self.sandboxd.stdout is not None
        await self.sandboxd.stdout.readline()
        return Response(orjson.dumps({**body, "kind": "Secret"}), 201,
                        media_type="application/json")  # fmt: skip

    async def policies(self, request: Request) -> Response:
        self.calls.append((request.method, "networkpolicies"))
        return _status(409, "AlreadyExists")

    def app(self) -> Starlette:
        base = "/api/v1/namespaces/{ns}"
        return Starlette(routes=[
            Route(f"{base}/pods", self.pods, methods=["GET", "POST"]),
            Route(f"{base}/pods/{{name}}", self.pod, methods=["GET", "DELETE"]),
            Route(f"{base}/secrets", self.secrets, methods=["POST"]),
            Route("/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies", self.policies,
                  methods=["POST"]),
        ])  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def fake_api() -> AsyncIterator[tuple[FakeApi, str]]:
    api = FakeApi(_free_port())
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(api.app(), log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    yield api, f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    await task
    if api.sandboxd is not None:
        with contextlib.suppress(ProcessLookupError):
            api.sandboxd.terminate()
        await api.sandboxd.wait()


async def test_api_error_reactions_and_real_exec(fake_api: tuple[FakeApi, str]) -> None:
    api, url = fake_api
    configuration = k8s.Configuration(host=url)
    backend = KubernetesBackend(
        namespace="of", api_client=k8s.ApiClient(configuration), sandboxd_port=api.port,
        ready_timeout=30,
    )  # fmt: skip
    spec = SandboxSpec(labels={LABEL_ROLLOUT: "r1"}, lifetime_s=1800, gateway_url="http://gw")
    box = await backend.create(spec)
    # 409 on create -> delete the stale pod, wait for it to go, create again (429 retried).
    assert api.calls[:4] == [
        ("POST", "networkpolicies"), ("POST", "pods"), ("DELETE", "pod"), ("GET", "pods"),
    ]  # fmt: skip
    assert api.calls.count(("POST", "pods")) == 3
    assert ("WATCH", "pods") in api.calls  # the 410 on watch was followed by a relist
    assert box.id == pod_name("r1") and box.gateway_url == "http://gw"
    result = await box.exec("echo from-pod")
    assert result.stdout == b"from-pod\n"
    await box.close()  # DELETE answered 404: already gone is fine
    assert api.calls[-1] == ("DELETE", "pod")
    await backend.close()
    await backend._api_client.close()


@pytest.mark.k8s
async def test_real_cluster_exec() -> None:
    context = os.environ.get("OPENFORGE_K8S_CONTEXT")
    if not context:
        reason = "OPENFORGE_K8S_CONTEXT is not set: no Kubernetes cluster to run on"
        print(f"SKIP: {reason}")
        pytest.skip(reason)
    backend = KubernetesBackend(
        namespace=os.environ.get("OPENFORGE_K8S_NAMESPACE", "openforge"),
        context=context,
        image=os.environ.get("OPENFORGE_SANDBOX_IMAGE", "localhost/openforge-sandbox:latest"),
    )
    try:
        box = await backend.create(SandboxSpec(network="open", lifetime_s=300))
        await box.put({"x.txt": b"hi"})
        result = await box.exec("cat x.txt")
        assert result.stdout == b"hi"
        await box.close()
        assert await backend.reconcile_once() == []
    finally:
        await backend.close()


_HARNESS = (
    'python3 -c "import json, os, urllib.request as u; '
    "req = u.Request(os.environ['OPENAI_BASE_URL'] + '/chat/completions', "
    "json.dumps({'model': 'm', 'messages': [{'role': 'user', 'content': 'hi'}]}).encode(), "
    "{'content-type': 'application/json', "
    "'authorization': 'Bearer ' + os.environ['OPENAI_API_KEY']}); "
    "u.urlopen(req, timeout=60).read(); open('r.txt', 'w').write('1')\""
)


@pytest.mark.k8s
async def test_real_cluster_full_rollout(tmp_path: Path) -> None:
    """The whole rollout on a cluster: gateway call from the pod, verifier, reward 1.

    Needs OPENFORGE_K8S_CONTEXT and OPENFORGE_K8S_GATEWAY_URL (a gateway reachable both from
    here and from the sandbox pods, e.g. its Service when this runs in-cluster).
    """
    context = os.environ.get("OPENFORGE_K8S_CONTEXT")
    gateway = os.environ.get("OPENFORGE_K8S_GATEWAY_URL")
    if not context or not gateway:
        reason = "OPENFORGE_K8S_CONTEXT / OPENFORGE_K8S_GATEWAY_URL not set: no cluster to run on"
        print(f"SKIP: {reason}")
        pytest.skip(reason)
    from openforge.rollouts import RolloutConfig, run_rollouts
    from openforge.suites import load_tasks

    task = tmp_path / "tasks" / "k8s-hello"
    (task / "verify").mkdir(parents=True)
    (task / "task.toml").write_text(
        'id = "k8s-hello"\ninstruction = "write 1"\ntimeout = 300\nnetwork = "gateway"\n'
    )
    (task / "verify" / "verify.py").write_text(
        "import json\nok = open('r.txt').read().strip() == '1'\n"
        "print(json.dumps({'reward': 1.0 if ok else 0.0}))\n"
    )
    image = os.environ.get("OPENFORGE_SANDBOX_IMAGE", "localhost/openforge-sandbox:latest")
    config = RolloutConfig(
        tasks=load_tasks(tmp_path / "tasks").tasks, harness="shell",
        harness_options={"command": _HARNESS}, gateway_url=gateway, n=2, concurrency=2,
        backend="kubernetes", out_dir=tmp_path / "run",
        backend_options={
            "context": context,
            "namespace": os.environ.get("OPENFORGE_K8S_NAMESPACE", "openforge"),
            "image": image,
            "warm_pool": 1,
        },
    )  # fmt: skip
    results = await run_rollouts(config)
    assert [r.status for r in results] == ["completed", "completed"], results
    assert [r.reward for r in results] == [1.0, 1.0]
