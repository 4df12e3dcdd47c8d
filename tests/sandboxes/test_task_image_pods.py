"""Kubernetes pods for tasks with their own images: pushed references, the runtime volume and
a harness's portable install as an image volume."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes_validate import validate

from openforge.sandboxes import SandboxError, SandboxSpec
from openforge.sandboxes.base import (
    HARNESS_DIR,
    HarnessInstall,
    ModelKey,
    ServiceContainer,
    TaskImage,
)
from openforge.sandboxes.kubernetes import KubernetesBackend, parse_pod
from openforge.sandboxes.manifests import pod_manifest
from openforge.sandboxes.runtime import RT_DIR, RT_ENTRYPOINT, SANDBOX_HOME


def _task_image(tmp_path: Path) -> TaskImage:
    (tmp_path / "Dockerfile").write_text("FROM ubuntu:24.04\nWORKDIR /app\n")
    return TaskImage(context=str(tmp_path), dockerfile=str(tmp_path / "Dockerfile"))


def test_task_pod_mounts_the_runtime_and_validates(tmp_path: Path) -> None:
    spec = SandboxSpec(workdir="/app", task_image=_task_image(tmp_path), env={"A": "b"})
    pod = pod_manifest("of-x", spec, image="reg.example/openforge-task:abc", secret="s",
                       deadline_s=60, runtime_image="reg.example/openforge-sandbox:1")  # fmt: skip
    validate(yaml.safe_load(yaml.safe_dump(pod)), "1.33.0", strict=True)
    (box,) = pod["spec"]["containers"]
    assert box["command"] == RT_ENTRYPOINT and box["volumeMounts"][0]["mountPath"] == RT_DIR
    assert box["args"][-4:] == ["--workdir", "/app", "--home", SANDBOX_HOME]
    assert pod["spec"]["volumes"][0]["image"]["reference"] == "reg.example/openforge-sandbox:1"


def test_backend_uses_pushed_references(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENFORGE_TASK_REGISTRY", raising=False)
    image = _task_image(tmp_path)
    backend = KubernetesBackend(task_registry="reg.example/of", image="reg.example/sb:1",
                                api_client=object())  # fmt: skip
    ref, runtime = backend._images(SandboxSpec(task_image=image))
    assert ref.startswith("reg.example/of/openforge-task:") and runtime == "reg.example/sb:1"
    assert ref.rsplit(":", 1)[1] == backend.task_images.tag(image).rsplit(":", 1)[1]
    prebuilt = backend._images(SandboxSpec(task_image=TaskImage(image="ubuntu:24.04")))
    assert prebuilt == ("ubuntu:24.04", "reg.example/sb:1")
    with pytest.raises(SandboxError, match="--push REGISTRY"):
        KubernetesBackend(api_client=object())._images(SandboxSpec(task_image=image))
    monkeypatch.setenv("OPENFORGE_TASK_REGISTRY", "reg.example/env")
    ref, _ = KubernetesBackend(api_client=object())._images(SandboxSpec(task_image=image))
    assert ref.startswith("reg.example/env/openforge-task:")


def test_a_harness_install_is_mounted_from_its_pushed_image(tmp_path: Path) -> None:
    """Pods get a harness's portable install as an image volume at /opt/openforge/harness,
    beside the runtime volume; without a registry the backend says what to run."""
    install = HarnessInstall(key="codex-0.171.0-abc", path=str(tmp_path))
    spec = SandboxSpec(workdir="/app", task_image=_task_image(tmp_path), harness=install)
    backend = KubernetesBackend(task_registry="reg.example/of", image="reg.example/sb:1",
                                api_client=object())  # fmt: skip
    ref = backend._harness_image(spec)
    assert ref == "reg.example/of/openforge-harness:codex-0.171.0-abc"
    pod = pod_manifest("of-x", spec, image="reg.example/of/openforge-task:abc", secret="s",
                       deadline_s=60, runtime_image="reg.example/sb:1",
                       harness_image=ref)  # fmt: skip
    validate(yaml.safe_load(yaml.safe_dump(pod)), "1.33.0", strict=True)
    (box,) = pod["spec"]["containers"]
    mounts = {m["mountPath"]: m["name"] for m in box["volumeMounts"]}
    assert mounts == {RT_DIR: "openforge-rt", HARNESS_DIR: "openforge-harness"}
    assert all(m["readOnly"] for m in box["volumeMounts"])
    refs = {v["name"]: v["image"]["reference"] for v in pod["spec"]["volumes"]}
    assert refs == {"openforge-rt": "reg.example/sb:1", "openforge-harness": ref}
    # The default sandbox image (no task image) takes the harness volume the same way.
    plain = pod_manifest("of-y", SandboxSpec(harness=install), image="reg.example/sb:1",
                         secret="s", deadline_s=60, harness_image=ref)  # fmt: skip
    validate(yaml.safe_load(yaml.safe_dump(plain)), "1.33.0", strict=True)
    assert "command" not in plain["spec"]["containers"][0]
    assert plain["spec"]["containers"][0]["volumeMounts"][0]["mountPath"] == HARNESS_DIR
    assert backend._harness_image(SandboxSpec()) is None
    with pytest.raises(SandboxError, match="--harness NAME --push REGISTRY"):
        KubernetesBackend(api_client=object())._harness_image(spec)
    # A warm-pool pod without the harness volume never serves a spec that needs one.
    pooled = KubernetesBackend(api_client=object(), image="reg.example/sb:1")
    assert pooled._fits_pool(SandboxSpec()) and not pooled._fits_pool(SandboxSpec(harness=install))


def test_a_gui_pod_runs_the_gui_image_with_the_runtime_mounted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A GUI spec's pod runs the GUI image (``$OPENFORGE_GUI_IMAGE`` or the option) with the
    sandbox image mounted as the runtime, as a task's own image does; a task image wins, and
    warm-pool pods serve GUI specs only from a GUI pool."""
    monkeypatch.setenv("OPENFORGE_GUI_IMAGE", "reg.example/openforge-gui:env")
    backend = KubernetesBackend(image="reg.example/sb:1", api_client=object())
    spec = SandboxSpec(gui=True, network="none", memory_mb=1024)
    image, runtime = backend._images(spec)
    assert (image, runtime) == ("reg.example/openforge-gui:env", "reg.example/sb:1")
    option = KubernetesBackend(image="reg.example/sb:1", gui_image="reg.example/gui:2",
                               api_client=object())  # fmt: skip
    assert option._images(spec)[0] == "reg.example/gui:2"
    pod = pod_manifest("of-gui", spec, image=image, secret="s", deadline_s=60,
                       runtime_image=runtime)  # fmt: skip
    validate(yaml.safe_load(yaml.safe_dump(pod)), "1.33.0", strict=True)
    (box,) = pod["spec"]["containers"]
    assert box["image"] == "reg.example/openforge-gui:env"
    assert box["command"] == RT_ENTRYPOINT
    assert box["volumeMounts"] == [{"name": "openforge-rt", "mountPath": RT_DIR, "readOnly": True}]
    assert pod["spec"]["volumes"][0]["image"]["reference"] == "reg.example/sb:1"
    # Chromium runs with --disable-dev-shm-usage: the pod needs no /dev/shm volume.
    assert [v["name"] for v in pod["spec"]["volumes"]] == ["openforge-rt"]
    prebuilt = SandboxSpec(gui=True, task_image=TaskImage(image="reg.example/mytask:1"))
    assert backend._images(prebuilt) == ("reg.example/mytask:1", "reg.example/sb:1")
    assert backend._fits_pool(SandboxSpec()) and not backend._fits_pool(spec)
    gui_pool = KubernetesBackend(image="reg.example/sb:1", api_client=object(), warm_pool=1,
                                 pool_spec=SandboxSpec(gui=True))  # fmt: skip
    assert gui_pool._fits_pool(SandboxSpec(gui=True)) and not gui_pool._fits_pool(SandboxSpec())


def test_compose_sidecars_are_containers_of_the_pod(tmp_path: Path) -> None:
    """A task's compose services run as containers of its pod (one network, as compose's):
    their pushed images, compose's command as args, the healthcheck as the startup probe
    (the pod, and so the sandbox, is Ready only once they are), their names resolving to the
    pod; a sidecar that calls a model gets the rollout's key at the gateway's address. A
    sidecar container that exits while the pod starts fails it by name; warm-pool pods never
    serve a spec with sidecars."""
    (tmp_path / "api").mkdir()
    api_image = _task_image(tmp_path / "api")
    api = ServiceContainer(
        name="api_server", image=api_image, env={"TOKEN": "t"}, command=("serve", "--port=5000"),
        health=("curl", "-sf", "http://localhost:5000"), interval_s=0.5, timeout_s=5.0,
        retries=20, start_period_s=2.5,
    )  # fmt: skip
    user = ServiceContainer(name="user-server", image=TaskImage(image="reg.example/user:1"),
                            env={"ANTHROPIC_API_KEY": ""}, model_apis=("anthropic",))  # fmt: skip
    spec = SandboxSpec(
        workdir="/app", task_image=_task_image(tmp_path), services=(api, user),
        gateway_url="http://openforge-gateway.of.svc:8000",
        service_key=ModelKey("k-9", "/r/k-9/v1", "/r/k-9"),
    )  # fmt: skip
    backend = KubernetesBackend(task_registry="reg.example/of", image="reg.example/sb:1",
                                api_client=object())  # fmt: skip
    sidecars = backend._sidecars(spec)
    pod = pod_manifest("of-x", spec, image="reg.example/of/openforge-task:abc", secret="s",
                       deadline_s=60, runtime_image="reg.example/sb:1",
                       sidecars=sidecars)  # fmt: skip
    validate(yaml.safe_load(yaml.safe_dump(pod)), "1.33.0", strict=True)
    box, side_api, side_user = pod["spec"]["containers"]
    assert box["name"] == "sandbox"
    assert side_api["name"].startswith("svc-api-server-") and len(side_api["name"]) <= 63
    assert side_api["image"].startswith("reg.example/of/openforge-task:")
    assert side_api["image"].rsplit(":", 1)[1] == backend.task_images.tag(api_image).split(":")[1]
    assert side_api["args"] == ["serve", "--port=5000"] and "command" not in side_api
    assert side_api["env"] == [{"name": "TOKEN", "value": "t"}]
    assert side_api["startupProbe"] == {
        "exec": {"command": ["curl", "-sf", "http://localhost:5000"]}, "periodSeconds": 1,
        "timeoutSeconds": 5, "failureThreshold": 20, "initialDelaySeconds": 3,
    }  # fmt: skip
    assert "volumeMounts" not in side_api  # the runtime and harness are the sandbox's only
    assert side_user["image"] == "reg.example/user:1" and "startupProbe" not in side_user
    assert {e["name"]: e["value"] for e in side_user["env"]} == {
        "ANTHROPIC_API_KEY": "k-9", "ANTHROPIC_AUTH_TOKEN": "k-9",
        "ANTHROPIC_BASE_URL": "http://openforge-gateway.of.svc:8000/r/k-9",
    }  # fmt: skip
    assert pod["spec"]["hostAliases"] == [
        {"ip": "127.0.0.1", "hostnames": ["api_server", "user-server"]}
    ]
    assert not KubernetesBackend(api_client=object())._fits_pool(SandboxSpec(services=(user,)))
    with pytest.raises(SandboxError, match="--push REGISTRY"):
        KubernetesBackend(api_client=object())._sidecars(spec)
    exited = {"metadata": {"name": "of-x"}, "status": {"phase": "Running", "containerStatuses": [
        {"name": side_api["name"], "state": {"terminated": {"exitCode": 3, "reason": "Error"}}},
    ]}}  # fmt: skip
    state = parse_pod(exited)
    assert state.failed_reason is None  # a rollout already running goes on, as under podman
    assert state.exited == f"container {side_api['name']} exited (3): Error"
