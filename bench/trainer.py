"""Trainer throughput: OpenForge's GRPO update vs a plain transformers forward/backward.

Every side runs on the same model, the same batch and in the same process, interleaved:
the baseline is the textbook policy-gradient step (full logits, log-softmax, advantage-
weighted masked mean, backward, clip, AdamW); a second baseline is the same step with
logits for the response positions only; the trainer adds PPO-clip, TIS, entropy and
metrics to the latter. A third trainer line trains only the top 10 layers (``train_layers``).
Target: overhead ≤ 10%.

``--workload claw`` is a GRPO step as the quickstart's loop sees it instead of random
prompts: B claw-drill training tasks × G samples, each prompt the claw agent's system
prompt, tools and task rendered by the gateway's renderer (~485 tokens, ~465 of them the
same in every prompt), each response the length of a two-turn rollout (a reply, a tool
result the loss masks, a reply). The trainer runs each micro-batch's common prefix once
(``training/batching.py``) and projects only trained positions to the vocabulary;
``prefix not shared`` is the trainer without the first, and the textbook step (rows
whole, every response position projected) the baseline for both.

    .venv/bin/python bench/trainer.py [--quick] [--model smollm2-135m] [--workload random|claw]
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import time
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import AutoConfig

from openforge.dialects.openai_chat.parse import parse_request
from openforge.guest.claw_agent import SYSTEM_PROMPT, TOOLS
from openforge.models.registry import resolve_model
from openforge.rendering import load_renderer
from openforge.suites import load_tasks
from openforge.traces.samples import Mode, Sample
from openforge.training import batching
from openforge.training.config import TrainConfig
from openforge.training.trainer import Trainer


def make_samples(n: int, prompt: int, response: int, vocab: int, seed: int = 0) -> list[Sample]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        p = [rng.randrange(3, vocab) for _ in range(prompt - rng.randrange(0, prompt // 4))]
        r = [rng.randrange(3, vocab) for _ in range(response)]
        out.append(
            Sample(
                rollout_id=f"r{i}", task_id="t", group_id="g", reward=float(i % 2),
                status="completed", mode=Mode.PER_CALL, prompt_ids=p, response_ids=r,
                loss_mask=[1] * response, logprobs=[-2.0] * response, call_ids=[f"c{i}"],
                spans=[(f"c{i}", 0, response)], weight_versions=["0"],
            )
        )  # fmt: skip
    return out


def claw_samples(model: str, tasks: int, group: int, vocab: int, seed: int = 0) -> list[Sample]:
    """``tasks`` claw-drill training tasks × ``group`` samples: the claw agent's first
    prompt as the gateway renders it, and a two-turn response (reply, masked tool result,
    reply) of lengths around a real run's (99 tokens on average, 57 of them trained)."""
    rng = random.Random(seed)
    renderer = load_renderer(model)
    out = []
    for task in load_tasks("claw-drill", "train").tasks[:tasks]:
        body = {
            "model": "m",
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": task.instruction},
            ],
            "tools": TOOLS,
        }
        prompt = renderer.render(parse_request(json.dumps(body).encode())).ids
        for g in range(group):
            first, result, second = rng.randint(20, 45), rng.randint(15, 60), rng.randint(15, 45)
            n = first + result + second
            response = [rng.randrange(3, vocab) for _ in range(n)]
            mask = [1] * first + [0] * result + [1] * second
            out.append(
                Sample(
                    rollout_id=f"{task.id}/{g}", task_id=task.id, group_id=task.id,
                    reward=float(g % 2), status="completed", mode=Mode.MERGED,
                    prompt_ids=list(prompt), response_ids=response,
                    loss_mask=mask, logprobs=[-2.0 if m else 0.0 for m in mask],
                    call_ids=[f"c{g}"], spans=[(f"c{g}", 0, n)], weight_versions=["0"],
                )
            )  # fmt: skip
    return out


def plain_step(
    model: torch.nn.Module, opt: torch.optim.Optimizer, samples: list[Sample], adv: dict[str, float]
) -> None:
    """Right-padded batch, full logits, advantage-weighted log-likelihood."""
    width = max(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    ids = torch.zeros((len(samples), width), dtype=torch.long)
    attn = torch.zeros_like(ids)
    mask = torch.zeros((len(samples), width - 1))
    advs = torch.tensor([[adv[s.rollout_id]] for s in samples])
    for i, s in enumerate(samples):
        seq = s.prompt_ids + s.response_ids
        ids[i, : len(seq)] = torch.tensor(seq)
        attn[i, : len(seq)] = 1
        mask[i, len(s.prompt_ids) - 1 : len(seq) - 1] = 1
    logits = model(input_ids=ids, attention_mask=attn, use_cache=False).logits[:, :-1].float()
    logp = torch.gather(logits.log_softmax(-1), -1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    loss = -(advs * logp * mask).sum() / mask.sum()
    loss.backward()  # type: ignore[no-untyped-call]
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


def plain_kept_step(
    model: torch.nn.Module, opt: torch.optim.Optimizer, samples: list[Sample], adv: dict[str, float]
) -> None:
    """The same textbook step, left-padded with logits only for the response positions:
    what OpenForge's trainer does minus its loss terms and bookkeeping (its overhead)."""
    width = max(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    r = max(len(s.response_ids) for s in samples)
    ids = torch.zeros((len(samples), width), dtype=torch.long)
    attn = torch.zeros_like(ids)
    mask = torch.zeros((len(samples), r))
    advs = torch.tensor([[adv[s.rollout_id]] for s in samples])
    for i, s in enumerate(samples):
        seq = s.prompt_ids + s.response_ids
        ids[i, width - len(seq) :] = torch.tensor(seq)
        attn[i, width - len(seq) :] = 1
        mask[i, r - len(s.response_ids) :] = 1
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=False,
                logits_to_keep=r + 1)  # fmt: skip
    logits = out.logits[:, :-1].float()
    logp = torch.gather(logits.log_softmax(-1), -1, ids[:, width - r :].unsqueeze(-1)).squeeze(-1)
    loss = -(advs * logp * mask).sum() / mask.sum()
    loss.backward()  # type: ignore[no-untyped-call]
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small batch, 3 rounds")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    ap.add_argument("--workload", choices=["random", "claw"], default="random")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    n, prompt, response, rounds = (4, 256, 64, 3) if args.quick else (8, 512, 96, 4)
    path = resolve_model(args.model)
    if args.workload == "claw":
        layers = [10] if args.quick else [0, 10]  # 10: the quickstart's train_layers
        claw(path, args.model, 2 if args.quick else 4, 2 if args.quick else 3, layers)
        return
    cfg = TrainConfig(model=str(path), learning_rate=1e-7, micro_batch_tokens=1 << 20)
    trainer = Trainer(cfg, path, device="cpu")
    top = TrainConfig(model=str(path), learning_rate=1e-7, micro_batch_tokens=1 << 20,
                      train_layers=10)  # fmt: skip
    partial = Trainer(top, path, device="cpu")
    vocab = int(trainer.model.config.vocab_size)
    samples = make_samples(n, prompt, response, vocab)
    adv = {s.rollout_id: (1.0 if s.reward else -1.0) for s in samples}
    tokens = sum(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    plain_opt = torch.optim.AdamW(trainer.model.parameters(), lr=1e-7)
    sides: dict[str, Callable[[], object]] = {
        "plain transformers fwd/bwd": lambda: plain_step(trainer.model, plain_opt, samples, adv),
        "plain, response logits only": lambda: plain_kept_step(
            trainer.model, plain_opt, samples, adv
        ),
        "openforge trainer step": lambda: trainer.train_step(samples, adv),
        "  same, train_layers=10": lambda: partial.train_step(samples, adv),
    }
    best = _interleaved(sides, rounds)
    print(f"model {args.model}, batch {n} x ~{prompt}+{response} tokens ({tokens} tokens), "
          f"best of {rounds} interleaved rounds, {torch.get_num_threads()} threads")  # fmt: skip
    print(f"{'':30}{'tokens/s':>10}{'step s':>9}")
    for name, secs in best.items():
        print(f"{name:30}{tokens / secs:>10.0f}{secs:>9.2f}")
    ours = best["openforge trainer step"]
    for name in ("plain transformers fwd/bwd", "plain, response logits only"):
        print(f"overhead vs {name}: {100 * (ours / best[name] - 1):+.1f}% (target <= +10%)")


def claw(path: Path, model: str, tasks: int, rounds: int, layer_counts: list[int]) -> None:
    """The trainer on a GRPO step of claw rollouts, with and without the shared prefix,
    beside the textbook step (every row whole, every response position projected: what
    the trainer did before either change, minus its loss terms)."""
    vocab = int(AutoConfig.from_pretrained(path).vocab_size)
    samples = claw_samples(str(path), tasks, 8, vocab)
    adv = {s.rollout_id: (1.0 if s.reward else -1.0) for s in samples}
    tokens = sum(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    shared = batching.make_micro_batches(
        [batching.TrainItem(s, 0.0) for s in samples], 4096, 0
    )  # the quickstart's micro_batch_tokens
    sides: dict[str, Callable[[], object]] = {}
    for layers in layer_counts:
        suffix = f", train_layers={layers}" if layers else ""
        for share in (False, True):
            cfg = TrainConfig(
                model=str(path), learning_rate=1e-7, train_layers=layers, share_prefix=share
            )
            trainer = Trainer(cfg, path, device="cpu")
            if not share:
                opt = torch.optim.AdamW(list(trainer.params.values()), lr=1e-7)
                sides[f"textbook step{suffix}"] = functools.partial(
                    plain_kept_step, trainer.model, opt, samples, adv
                )
            name = f"trainer, prefix {'shared' if share else 'not shared'}{suffix}"
            sides[name] = functools.partial(trainer.train_step, samples, adv)
    best = _interleaved(sides, rounds)
    print(f"model {model}, {len(samples)} claw samples ({tasks} tasks x 8), {tokens} tokens, "
          f"{len(shared)} micro-batches of <= 4096 positions sharing "
          f"{min(mb.shared for mb in shared)}-{max(mb.shared for mb in shared)} prompt ids, "
          f"best of {rounds} interleaved rounds, {torch.get_num_threads()} threads")  # fmt: skip
    print(f"{'':42}{'tokens/s':>10}{'step s':>9}")
    for name, secs in best.items():
        print(f"{name:42}{tokens / secs:>10.0f}{secs:>9.2f}")
    for layers in layer_counts:
        suffix = f", train_layers={layers}" if layers else ""
        textbook = best[f"textbook step{suffix}"]
        for side in ("not shared", "shared"):
            ours = best[f"trainer, prefix {side}{suffix}"]
            print(f"trainer, prefix {side}{suffix}: x{textbook / ours:.2f} the textbook step")


def _interleaved(sides: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Each side's best time over ``rounds`` rounds that interleave the sides, after one
    warm-up: the machine is shared, so a burst of someone else's load hits one round, not
    one side."""
    for run in sides.values():
        run()
    best = dict.fromkeys(sides, float("inf"))
    for _ in range(rounds):
        for name, run in sides.items():
            t0 = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


if __name__ == "__main__":
    main()
