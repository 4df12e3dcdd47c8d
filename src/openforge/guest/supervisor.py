"""Runs a task's services around the harness, inside the sandbox, in one process tree.

Shipped into the sandbox as a zipapp and run as ``python -I supervisor.pyz SPEC -- HARNESS
ARGV…`` with the environments Python. The services, the harness and the MCP bridge the
harness starts must share one network namespace (each sandbox exec may get its own), so the
harness launch is wrapped rather than the services started by a separate exec.

``SPEC`` is JSON ``{"cwd", "status", "audit", "services": [{name, command, env, health_check,
health_check_method, ready_timeout, reset_endpoint}]}``. As ClawEval's ``ServiceManager``:
each command is split like a shell would, a bare ``python`` runs as this interpreter, the
service is ready when its health check answers below 500 within ``ready_timeout``. After the
harness exits, each service's ``…/audit`` (beside its reset endpoint) is fetched into the
audit file, the services are stopped and the harness's exit status is returned. A service
that does not come up is written to the status file with its stderr, and the harness never
starts (exit 97): the grader reads the status and reports ``infra_error``.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import hmac
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
SERVICE_FAILED = 97


def _healthy(svc: dict[str, Any]) -> bool:
    method = str(svc.get("health_check_method", "POST")).upper()
    req = urllib.request.Request(
        svc["health_check"],
        data=b"{}" if method != "GET" else None,
        method=method,
        headers={"X-Health-Check": "1", "Content-Type": "application/json"},
    )
    try:
        with _OPENER.open(req, timeout=2) as resp:
            return int(resp.status) < 500
    except urllib.error.HTTPError as exc:
        return exc.code < 500
    except (urllib.error.URLError, OSError):
        return False


def _start(svc: dict[str, Any], cwd: str) -> subprocess.Popen[bytes]:
    cmd = shlex.split(svc["command"])
    if cmd and cmd[0] in ("python", "python3"):
        cmd[0] = sys.executable
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env.update(svc.get("env") or {})
    err = open(os.path.join(cwd, f".service-{svc['name']}.log"), "wb")  # noqa: SIM115
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err)


def _wait_ready(svc: dict[str, Any], proc: subprocess.Popen[bytes], cwd: str) -> str | None:
    deadline = time.monotonic() + float(svc.get("ready_timeout", 10))
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        if _healthy(svc):
            return None
        time.sleep(0.2)
    log = os.path.join(cwd, f".service-{svc['name']}.log")
    tail = ""
    if os.path.exists(log):
        with open(log, "rb") as f:
            tail = f.read()[-2000:].decode(errors="replace")
    how = f"exited with {proc.returncode}" if proc.poll() is not None else "never became healthy"
    return f"service {svc['name']!r} {how}: {tail}"


def _audit(services: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for svc in services:
        reset = svc.get("reset_endpoint")
        if not reset:
            continue
        url = reset.rsplit("/reset", 1)[0] + "/audit"
        try:
            with _OPENER.open(url, timeout=5) as resp:
                out[svc["name"]] = {"url": url, "data": json.loads(resp.read())}
        except (urllib.error.URLError, OSError, ValueError):
            continue  # ClawEval's runner fetches audits best-effort too
    return out


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in reversed(procs):
        proc.terminate()
    for proc in reversed(procs):
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()


def _take_key(path: str) -> bytes:
    """The audit key, read and deleted before the agent runs; this process made
    undumpable, so the agent (same uid) cannot read it from /proc/<pid>/mem or attach."""
    try:
        with open(path, encoding="ascii") as f:
            key = bytes.fromhex(f.read().strip())
        os.unlink(path)
    except (OSError, ValueError):
        return b""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    return key


def _write_audit(spec: dict[str, Any], audits: dict[str, Any], key: bytes) -> None:
    data = json.dumps(audits).encode()
    with open(spec["audit"], "wb") as f:
        f.write(data)
    if key and spec.get("audit_mac"):
        with open(spec["audit_mac"], "w", encoding="ascii") as f:
            f.write(hmac.new(key, data, hashlib.sha256).hexdigest())


def main(argv: list[str]) -> int:
    """Start the services, run the harness, collect the audits, stop the services."""
    with open(argv[0], encoding="utf-8") as f:
        spec = json.load(f)
    key = _take_key(spec["audit_key"]) if spec.get("audit_key") else b""
    harness = argv[argv.index("--") + 1 :]
    cwd, services = spec["cwd"], spec["services"]
    procs: list[subprocess.Popen[bytes]] = []
    status: dict[str, Any] = {"ok": True}
    try:
        for svc in services:
            procs.append(_start(svc, cwd))
            error = _wait_ready(svc, procs[-1], cwd)
            if error:
                status = {"ok": False, "error": error}
                return SERVICE_FAILED
        # Written before the harness runs: a harness killed at its timeout still leaves it.
        with open(spec["status"], "w", encoding="utf-8") as f:
            json.dump(status, f)
        child = subprocess.Popen(harness)
        signal.signal(signal.SIGTERM, lambda *_: child.terminate())
        code = child.wait()
        _write_audit(spec, _audit(services), key)
        return code
    finally:
        if not status["ok"]:
            with open(spec["status"], "w", encoding="utf-8") as f:
                json.dump(status, f)
        _stop(procs)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
