"""A real store (SQLite or PostgreSQL) holding a small, varied set of rollouts, written
through the Store API."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from openforge.models.registry import DEFAULT_MODEL, models_dir
from openforge.store.base import Store
from openforge.store.location import open_store
from openforge.store.schemas import CallRecord, CallStatus, RolloutStatus

MODEL_DIR = models_dir() / DEFAULT_MODEL  # pulled by the setup script
TOOLS = [{"name": "bash", "description": "Run a command", "parameters": {"type": "object"}}]


@dataclass
class Built:
    path: Path | str  # a SQLite file or a postgresql:// URL
    ids: dict[str, str]  # role in the fixture -> rollout id


def _msg(role: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"role": role, "content": [{"type": "text", "text": text}], "tool_calls": [], **extra}


class _Writer:
    def __init__(self, store: Store, tok: Tokenizer) -> None:
        self.store, self.tok, self.n = store, tok, 0

    def enc(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False).ids)

    async def call(
        self, rollout_id: str, seq: int, prompt: list[int], answer: str, **kw: Any
    ) -> CallRecord:
        out = self.enc(answer + "<|im_end|>")
        self.n += 1
        rec = CallRecord(
            id=f"call{self.n}",
            rollout_id=rollout_id,
            seq=seq,
            dialect="openai_chat",
            status=kw.pop("status", CallStatus.OK),
            prompt_ids=prompt,
            output_ids=out,
            output_logprobs=[-0.25 - k / 100 for k in range(len(out))],
            engine=kw.pop("engine", "local"),
            served_model=str(MODEL_DIR),
            weight_version="1",
            completion={"text": answer, "tool_calls": []},
            **kw,
        )
        await self.store.record_call(rec)
        return rec


async def build(path: Path | str) -> Built:
    tok = Tokenizer.from_file(str(MODEL_DIR / "tokenizer.json"))
    store = open_store(path)
    w = _Writer(store, tok)
    ids: dict[str, str] = {}
    system = "<|im_start|>system\nYou are a coding agent.<|im_end|>\n"
    user = "<|im_start|>user\nList the files.<|im_end|>\n<|im_start|>assistant\n"
    conv = {
        "messages": [_msg("system", "You are a coding agent."), _msg("user", "List the files.")],
        "tools": TOOLS,
    }
    for name, reward in (("good", 1.0), ("bad", 0.0)):
        r = await store.create_rollout(task_id="t1", group_id="g1")
        ids[name] = r.id
        p0 = w.enc(system + user)
        c0 = await w.call(r.id, 0, p0, "I will run ls.", conversation=conv)
        if name == "good":
            # An SDK retry of the first call (same prompt, same answer).
            await w.call(
                r.id,
                1,
                p0,
                "I will run ls.",
                conversation=conv,
                harness={"headers": {"x-stainless-retry-count": "1"}},
            )
        obs = w.enc("\n<|im_start|>tool\na.py b.py<|im_end|>\n<|im_start|>assistant\n")
        await w.call(
            r.id, 2, c0.prompt_ids + c0.output_ids + obs, "Done: a.py and b.py.", conversation=conv
        )
        if name == "bad":
            # The harness compacted history: a prompt that extends no earlier call.
            edited = w.enc(system + "<|im_start|>user\n[summary] files listed.<|im_end|>\n")
            await w.call(
                r.id,
                3,
                edited,
                "Anything else?",
                fork=True,
                render_info={
                    "fork_reason": "history edited",
                    "drift": [{"message": 1, "position": 12}],
                },
                conversation=conv,
            )
        await store.finish_rollout(r.id, RolloutStatus.COMPLETED, reward=reward)
    broken = await store.create_rollout(task_id="t1", group_id="g1")
    ids["infra"] = broken.id
    await w.call(broken.id, 0, w.enc(system + user), "ls", status=CallStatus.ENGINE_ERROR)
    await store.finish_rollout(broken.id, RolloutStatus.INFRA_ERROR)
    running = await store.create_rollout(task_id="t2", group_id="g2")
    ids["running"] = running.id
    await w.call(running.id, 0, w.enc(system + user), "Working on it.")
    teacher = await store.create_rollout(task_id="t3", group_id="g3")
    ids["teacher"] = teacher.id
    await w.call(teacher.id, 0, [], "Use `ls -la`.", engine="upstream", conversation=conv)
    await store.finish_rollout(teacher.id, RolloutStatus.AGENT_ERROR, reward=0.0)
    await store.close()
    return Built(path, ids)
