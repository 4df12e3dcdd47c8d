"""A stateful stand-in for the Kubernetes API server's pod, secret and NetworkPolicy paths.

It answers the real ``kubernetes_asyncio`` client over HTTP with the API server's own JSON
shapes (Pod, PodList with resourceVersion, Status errors, watch event lines including the
``ERROR``/410 event), keeps resourceVersions and an event log, and streams watches that
replay from a version and then follow live changes. Each pod's sandboxd (the real app) runs
in-process on its own loopback address 127.0.0.N once the pod's token Secret arrives; the
pod then turns Running and Ready, as the kubelet would report it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from openforge.sandboxes.sandboxd import build_app

Obj = dict[str, Any]


def _json(body: Obj, code: int = 200) -> Response:
    return Response(orjson.dumps(body), code, media_type="application/json")


def _status(code: int, reason: str, message: str) -> Response:
    return _json({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                  "message": message, "reason": reason, "code": code}, code)  # fmt: skip


def _matches(pod: Obj, labels: str | None, fields: str | None) -> bool:
    have = pod["metadata"].get("labels") or {}
    for term in filter(None, (labels or "").split(",")):
        key, _, value = term.partition("=")
        if have.get(key) != value:
            return False
    for term in filter(None, (fields or "").split(",")):
        key, _, value = term.partition("=")
        if key == "metadata.name" and pod["metadata"]["name"] != value:
            return False
    return True


class FakeCluster:
    """Pods, secrets and watches in memory; ``calls`` records (method, kind, name)."""

    def __init__(self, sandboxd_port: int, root: Path) -> None:
        self.port = sandboxd_port
        self.root = root
        self.pods: dict[str, Obj] = {}
        self.rv = 100
        self.events: list[tuple[int, str, Obj]] = []
        self.watchers: list[tuple[asyncio.Queue[tuple[int, str, Obj] | None], str, str]] = []
        self.calls: list[tuple[str, str, str]] = []
        self.expire_label_watches = 0  # this many label-selector watches answer 410 first
        self.served_410 = 0
        self.sandboxd: dict[str, uvicorn.Server] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._next_ip = 2

    # -- state changes -------------------------------------------------------------
    def _emit(self, kind: str, pod: Obj) -> None:
        self.rv += 1
        pod["metadata"]["resourceVersion"] = str(self.rv)
        snapshot = orjson.loads(orjson.dumps(pod))
        self.events.append((self.rv, kind, snapshot))
        for queue, labels, fields in self.watchers:
            if _matches(snapshot, labels, fields):
                queue.put_nowait((self.rv, kind, snapshot))

    def add_pod(self, name: str, labels: dict[str, str], phase: str = "Running") -> None:
        """A pod made by someone else (a crashed earlier run of ours, say)."""
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": "of", "uid": f"uid-{name}",
                            "labels": dict(labels)},
               "spec": {"containers": [{"name": "sandbox", "image": "img"}]},
               "status": {"phase": phase}}  # fmt: skip
        self.pods[name] = pod
        self._emit("ADDED", pod)

    def set_phase(self, name: str, phase: str) -> None:
        """The kubelet reports a new phase (Failed: the container died)."""
        pod = self.pods[name]
        pod["status"]["phase"] = phase
        pod["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
        self._emit("MODIFIED", pod)

    async def until(self, pred: Callable[[], bool]) -> None:
        """Wait for ``pred`` (bounded so a broken reaction fails instead of hanging)."""

        async def poll() -> None:
            while not pred():
                await asyncio.sleep(0.01)

        await asyncio.wait_for(poll(), 60)

    @property
    def live_label_watches(self) -> int:
        return sum(1 for _, labels, _ in self.watchers if labels)

    # -- routes ----------------------------------------------------------------------
    async def pods_route(self, request: Request) -> Response:
        q = request.query_params
        if request.method == "POST":
            body = orjson.loads(await request.body())
            name = body["metadata"]["name"]
            self.calls.append(("POST", "pod", name))
            if name in self.pods:
                return _status(409, "AlreadyExists", f'pods "{name}" already exists')
            body["metadata"].update(namespace="of", uid=f"uid-{name}")
            body["status"] = {"phase": "Pending"}
            self.pods[name] = body
            self._emit("ADDED", body)
            return _json(body, 201)
        labels, fields = q.get("labelSelector", ""), q.get("fieldSelector", "")
        if q.get("watch", "").lower() == "true":
            self.calls.append(("WATCH", "pods", labels or fields))
            since = int(q.get("resourceVersion") or 0)
            return StreamingResponse(self._watch(labels, fields, since),
                                     media_type="application/json")  # fmt: skip
        self.calls.append(("LIST", "pods", labels or fields))
        items = [p for p in self.pods.values() if _matches(p, labels, fields)]
        return _json({"kind": "PodList", "apiVersion": "v1",
                      "metadata": {"resourceVersion": str(self.rv)}, "items": items})  # fmt: skip

    async def _watch(self, labels: str, fields: str, since: int) -> AsyncIterator[bytes]:
        if labels and self.expire_label_watches > 0:
            self.expire_label_watches -= 1
            self.served_410 += 1
            error = {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": "too old resource version",
                "reason": "Expired",
                "code": 410,
            }
            yield orjson.dumps({"type": "ERROR", "object": error}) + b"\n"  # fmt: skip
            return
        queue: asyncio.Queue[tuple[int, str, Obj] | None] = asyncio.Queue()
        entry = (queue, labels, fields)
        self.watchers.append(entry)  # registered with the replay snapshot: nothing missed
        backlog = [e for e in self.events if e[0] > since and _matches(e[2], labels, fields)]
        try:
            for _, kind, pod in backlog:
                yield orjson.dumps({"type": kind, "object": pod}) + b"\n"
            while (item := await queue.get()) is not None:
                yield orjson.dumps({"type": item[1], "object": item[2]}) + b"\n"
        finally:
            self.watchers.remove(entry)

    async def pod_route(self, request: Request) -> Response:
        name = request.path_params["name"]
        self.calls.append((request.method, "pod", name))
        pod = self.pods.get(name)
        if pod is None:
            return _status(404, "NotFound", f'pods "{name}" not found')
        if request.method == "PATCH":
            assert request.headers["content-type"] == "application/strategic-merge-patch+json"
            patch = orjson.loads(await request.body())
            labels = pod["metadata"].setdefault("labels", {})
            for key, value in patch["metadata"]["labels"].items():
                if value is None:
                    labels.pop(key, None)
                else:
                    labels[key] = value
            self._emit("MODIFIED", pod)
            return _json(pod)
        if request.method == "DELETE":
            del self.pods[name]
            self._emit("DELETED", pod)
            server = self.sandboxd.pop(name, None)
            if server is not None:
                server.should_exit = True
        return _json(pod)

    async def secrets_route(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        owner = body["metadata"]["ownerReferences"][0]["name"]
        self.calls.append((request.method, "secret", owner))
        pod = self.pods[owner]
        ip = f"127.0.0.{self._next_ip}"  # taken before any await: concurrent pods differ
        self._next_ip += 1
        await self._start_sandboxd(owner, body["stringData"]["token"], ip)
        pod["status"] = {"phase": "Running", "podIP": ip,
                         "conditions": [{"type": "Ready", "status": "True"}]}  # fmt: skip
        self._emit("MODIFIED", pod)
        return _json({**body, "kind": "Secret"}, 201)

    async def _start_sandboxd(self, name: str, token: str, ip: str) -> None:
        work, home = self.root / name / "work", self.root / name / "home"
        work.mkdir(parents=True, exist_ok=True)
        home.mkdir(parents=True, exist_ok=True)
        app = build_app(token, str(work), str(home))
        config = uvicorn.Config(app, host=ip, port=self.port, log_level="warning",
                                lifespan="off")  # fmt: skip
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve())
        self._tasks.append(task)
        while not server.started:
            assert not task.done(), f"sandboxd of {name} did not start on {ip}"
            await asyncio.sleep(0.005)
        self.sandboxd[name] = server

    async def policies_route(self, request: Request) -> Response:
        self.calls.append((request.method, "networkpolicy", ""))
        if sum(1 for c in self.calls if c[1] == "networkpolicy") > 1:
            return _status(409, "AlreadyExists", "exists")
        return _json(orjson.loads(await request.body()), 201)

    def app(self) -> Starlette:
        base = "/api/v1/namespaces/{ns}"
        return Starlette(routes=[
            Route(f"{base}/pods", self.pods_route, methods=["GET", "POST"]),
            Route(f"{base}/pods/{{name}}", self.pod_route, methods=["GET", "DELETE", "PATCH"]),
            Route(f"{base}/secrets", self.secrets_route, methods=["POST"]),
            Route("/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
                  self.policies_route, methods=["POST"]),
        ])  # fmt: skip

    async def close(self) -> None:
        """End every watch stream and stop every sandboxd."""
        for queue, _, _ in list(self.watchers):
            queue.put_nowait(None)
        for server in self.sandboxd.values():
            server.should_exit = True
        for task in self._tasks:
            with contextlib.suppress(Exception):
                await task
