"""The training run's configuration: one typed dataclass, loaded from one YAML file.

Every field has a default that works on one CPU machine; a YAML file only names what it
changes. Unknown keys, wrong types and bad combinations are rejected with the file, the
key and what is allowed.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

__all__ = ["ConfigError", "TrainConfig", "load_config"]


class ConfigError(ValueError):
    """A bad configuration; the message names the file, the key and the allowed values."""

    def __init__(self, key: str, message: str, source: str = "<config>") -> None:
        super().__init__(f"{source}: {key}: {message}")
        self.key = key
        self.source = source


@dataclass(slots=True)
class TrainConfig:
    """A GRPO run. Each field is documented once, here."""

    # --- model and optimiser ---
    model: str = "tiny"  # a registry name ("smollm2-135m", "tiny") or a HF directory
    lora: bool = False  # train LoRA adapters (peft) instead of all weights
    lora_rank: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    lora_target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"]
    )
    # The compute dtype (auto: bf16 on CUDA with bf16, else fp32). The trained weights are
    # float32 master weights either way; bf16 runs the forward passes under autocast.
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    learning_rate: float = 1e-5
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    max_grad_norm: float = 1.0
    # Gradient accumulation: at most this many positions per forward pass, padding
    # included and a common prompt prefix counted once (training/batching.py).
    micro_batch_tokens: int = 4096
    # Run a micro-batch's common prompt prefix (a harness's system prompt and tools) once,
    # not once per row; the gradient is the same (training/batching.py). Off only to measure
    # it or rule it out. Gradient checkpointing and VLMs never share.
    share_prefix: bool = True
    gradient_checkpointing: bool = False
    # torch threads for the trainer and for the local engine of a gateway the run starts;
    # 0: torch's default (every core). On a small CPU machine give each 1: they run side by
    # side, and two processes with a thread per core each stall one another (measured on
    # 2 cores: a batch-8 decode step took 0.32 s with 1 thread, 5.8 s with 2).
    threads: int = 0
    # Train only the top N decoder layers (and the final norm); 0 trains all. The frozen
    # lower layers (and the embeddings, tied to the LM head in small models) run forward
    # without autograd, which roughly halves a CPU update at N ≈ a quarter of the layers.
    train_layers: int = 0
    # --- SFT warm-up (quickstart, bench/learning.py): see training/teacher.py ---
    sft_epochs: int = 0  # passes over the teacher trajectories before GRPO; 0: none
    sft_learning_rate: float = 1e-4
    # --- algorithm (see losses.py for the symbols) ---
    advantage_scale: Literal["none", "std"] = "std"
    eps_low: float = 0.2
    eps_high: float = 0.28  # DAPO's clip-higher: leaves room for unlikely good tokens to grow
    tis_cap: float | None = 2.0  # C; null turns truncated importance sampling off
    aggregation: Literal["token_mean", "seq_mean"] = "token_mean"
    # β; > 0 keeps a frozen reference: the policy as GRPO starts (after the SFT warm-up)
    kl_coef: float = 0.0
    # Self-imitation on solved groups (training/advantages.py): a group whose every rollout
    # earned the full reward is dropped by GRPO, while the weights it shares with the other
    # tasks move and can unlearn it (docs/training.md run B: make-dir 1.00 -> 0.71).
    # > 0: its first uniform_rollouts rollouts train with this advantage. 0: dropped.
    solved_advantage: float = 0.0
    # Rollouts kept of a group without a reward spread: for solved_advantage (a solved
    # group) and, with kl_coef > 0, for the KL term alone (any other, advantage 0; GRPO
    # as published keeps all G, each costing trainer time: 2 already put the KL on the
    # task's prompt).
    uniform_rollouts: int = 2
    entropy_coef: float = 0.0  # α
    sample_mode: Literal["per_call", "merged", "auto"] = "per_call"  # auto: per_call with images
    # Optimizer updates per step: the step's samples are shuffled and split into this many
    # mini-batches, one update each (veRL's ppo_mini_batch_size, TRL's
    # steps_per_generation). Rollouts are the dear part on a small machine; this takes
    # more updates from them at no extra trainer compute. Each later mini-batch is off
    # the sampling policy by the updates before it, which the ratio against the engine's
    # logprobs (clip, TIS) accounts for.
    updates_per_step: int = 1
    # --- loop ---
    steps: int = 4
    tasks_per_step: int = 4  # B
    group_size: int = 4  # G
    async_rollouts: bool = False  # rollouts for step t+1 run while step t trains
    # DAPO-style dynamic sampling (training/sampling.py): draw B more tasks, up to this many
    # rounds per step, until B groups have a reward spread; 1 samples once (plain GRPO).
    max_sample_rounds: int = 1
    # A task whose last group was uniform (all passed or all failed) is not drawn for this
    # many steps: its rollouts go to tasks the current policy sometimes solves. 0: never.
    rest_steps: int = 0
    # A skill (training/metrics.py ``skills``: claw-drill's family, a suite's category)
    # whose last this-many groups, over any of its tasks, were all uniform rests as a
    # whole for rest_steps steps. 0: never (tasks rest one by one).
    skill_rest_after: int = 0
    # --- curriculum (training/curriculum.py; docs/training.md "Curriculum") ---
    # Draw each step's tasks weighted by the current pass rate of their skill at their
    # difficulty (a claw-drill-levels task's level-L tag; 0 without), measured from the
    # groups' own rewards: a bucket not yet measured or within [curriculum_low,
    # curriculum_high] weighs 1, one outside curriculum_explore; level L opens once level
    # L-1 passes above curriculum_high. false: epochs over the tasks.
    curriculum: bool = False
    curriculum_low: float = 0.2
    curriculum_high: float = 0.8
    curriculum_window: int = 4  # a bucket's rate: its last this-many groups
    curriculum_explore: float = 0.1
    max_staleness: int = 1  # async: drop samples more than this many versions old
    eval_every: int = 0  # K; 0 evaluates only before and after training
    eval_samples: int = 1  # rollouts per held-out task in evaluation
    checkpoint_every: int = 1
    keep_checkpoints: int = 2
    seed: int = 0
    run_dir: str = "runs/train"
    # --- rollouts ---
    tasks: str = "claw-mini"  # suite name or directory
    # Which tasks of the suite, as `openforge rollout --task/--exclude/--limit/--sample` picks
    # them (suites/selection.py), over both splits before they are split.
    task_ids: list[str] = field(default_factory=list)  # ids or globs; []: all
    exclude_tasks: list[str] = field(default_factory=list)  # globs of ids to leave out
    task_limit: int | None = None  # only the first N selected
    task_sample: int | None = None  # N drawn at random with task_sample_seed
    task_sample_seed: int = 0
    train_split: Literal["train", "test"] = "train"
    eval_split: Literal["train", "test"] = "test"
    # Train on held-out (test) tasks' rollouts; refused unless set: evaluation data that
    # was trained on no longer measures anything.
    allow_held_out: bool = False
    harness: str = "claw"
    sandbox: str = "local"
    # Oracle-check tasks that bring their own environment (Harbor, Terminal-Bench) before
    # training; quarantined ones are left out (false: train on every task, unchecked).
    check_tasks: bool = True
    engine: Literal["local", "vllm", "sglang"] = "local"
    # The engine servers (vllm, sglang) of the gateway the run starts, and the model name
    # they serve; they must read the run's weights/ directory at the same path.
    engine_urls: list[str] = field(default_factory=list)
    served_model: str = ""
    gateway_url: str | None = None  # null: start a gateway with the engine in a subprocess
    store: str | None = None  # the gateway's SQLite store; null: <run_dir>/store.db
    admin_token: str | None = None
    # The gateway the run starts: engines for judge-role and user-role keys (benchmark graders'
    # LLM judge, multi-turn tasks' simulated user), as `openforge gateway --judge-engine SPEC`
    # / `--user-engine SPEC` take them; null: none (graders fall back to OPENFORGE_JUDGE_*).
    judge_engine: str | None = None
    user_engine: str | None = None
    concurrency: int = 4
    rollout_timeout_s: float = 300.0
    # claw harness: sampling temperature (others configure their own); the trainer scores
    # tokens under the same temperature, as the engine reports the tempered logprobs
    temperature: float = 1.0
    eval_temperature: float | None = None  # claw harness in evaluation; null: ``temperature``
    max_tokens: int = 512  # claw harness: max tokens per call
    rollout_options: dict[str, Any] = field(default_factory=dict)  # passed to the orchestrator
    # --- the reward-hack monitor (traces/monitor.py; docs/traces.md) ---
    # A TOML rule file that adds to, replaces or disables the default rules; null: defaults.
    monitor_rules: str | None = None
    # What a rollout flagged at flag_severity or above becomes: drop (no samples; its group
    # trains without it), zero (trained with reward 0, pushing the shortcut down) or keep
    # (trained as scored; the flag is only reported).
    flagged_rollouts: Literal["drop", "zero", "keep"] = "drop"
    flag_severity: Literal["low", "medium", "high"] = "medium"
    # --- where the config came from, for error messages (not a YAML key) ---
    source: str = field(default="<config>", metadata={"internal": True})

    def __post_init__(self) -> None:
        _check_types(self)
        _check_ranges(self)
        _check_curriculum(self)
        _check_setup(self)
        _check_monitor_rules(self)


_CURRICULUM_DEFAULTS = {
    "curriculum_low": 0.2,
    "curriculum_high": 0.8,
    "curriculum_window": 4,
    "curriculum_explore": 0.1,
}


def _check_ranges(cfg: TrainConfig) -> None:
    """Each number within the range its field allows."""
    positive = (
        "learning_rate", "micro_batch_tokens", "steps", "tasks_per_step", "concurrency",
        "checkpoint_every", "keep_checkpoints", "eval_samples", "max_tokens",
        "rollout_timeout_s", "lora_rank", "max_sample_rounds", "updates_per_step",
        "uniform_rollouts",
    )  # fmt: skip
    for name in positive:
        if getattr(cfg, name) <= 0:
            raise ConfigError(name, f"must be > 0, got {getattr(cfg, name)!r}", cfg.source)
    nonneg = (
        "max_grad_norm", "weight_decay", "kl_coef", "entropy_coef", "max_staleness",
        "train_layers", "sft_epochs", "sft_learning_rate", "threads", "rest_steps",
        "skill_rest_after", "solved_advantage",
    )  # fmt: skip
    for name in nonneg:
        if getattr(cfg, name) < 0:
            raise ConfigError(name, f"must be >= 0, got {getattr(cfg, name)!r}", cfg.source)
    if cfg.group_size < 2:
        raise ConfigError(
            "group_size", "GRPO needs at least 2 rollouts per task (allowed: >= 2)", cfg.source
        )
    if not 0 <= cfg.eps_low < 1:
        raise ConfigError("eps_low", "must be in [0, 1)", cfg.source)
    if cfg.eps_high < 0:
        raise ConfigError("eps_high", "must be >= 0", cfg.source)
    if cfg.tis_cap is not None and cfg.tis_cap < 1:
        raise ConfigError("tis_cap", "must be >= 1 (or null to turn TIS off)", cfg.source)
    if cfg.eval_every < 0:
        raise ConfigError("eval_every", "must be >= 0 (0: before and after only)", cfg.source)
    if not 0 <= cfg.temperature <= 2:
        raise ConfigError("temperature", "must be in [0, 2]", cfg.source)
    if cfg.eval_temperature is not None and not 0 <= cfg.eval_temperature <= 2:
        raise ConfigError("eval_temperature", "must be in [0, 2] or null", cfg.source)
    if cfg.skill_rest_after and not cfg.rest_steps:
        raise ConfigError(
            "skill_rest_after",
            "rests a skill for rest_steps steps: set rest_steps > 0 too",
            cfg.source,
        )


def _check_setup(cfg: TrainConfig) -> None:
    """The fine-tuning, engine, gateway and data choices agree with each other."""
    if cfg.lora and cfg.kl_coef > 0 and cfg.sft_epochs > 0:
        raise ConfigError(
            "kl_coef",
            "the KL's reference is the policy after the SFT warm-up, which LoRA cannot "
            "copy: set kl_coef: 0, sft_epochs: 0 or lora: false",
            cfg.source,
        )
    if cfg.lora and cfg.train_layers:
        raise ConfigError(
            "train_layers",
            "applies to full fine-tuning; with lora: true set it to 0",
            cfg.source,
        )
    if cfg.gateway_url is not None and cfg.store is None:
        raise ConfigError(
            "store",
            "with gateway_url set, give the path of that gateway's SQLite store "
            "(the trainer reads the recorded calls from it)",
            cfg.source,
        )
    if cfg.engine != "local" and cfg.gateway_url is None and not cfg.engine_urls:
        raise ConfigError(
            "engine_urls",
            f"engine {cfg.engine!r} runs outside OpenForge: give its server's URL in "
            "engine_urls (a gateway is started in front of it), or the gateway_url "
            "that serves it",
            cfg.source,
        )
    if cfg.engine_urls and (cfg.engine == "local" or cfg.gateway_url is not None):
        raise ConfigError(
            "engine_urls",
            "names the engine servers of the gateway the run starts, for engine vllm "
            "or sglang without gateway_url",
            cfg.source,
        )
    for name in ("judge_engine", "user_engine"):
        if getattr(cfg, name) is not None and cfg.gateway_url is not None:
            raise ConfigError(
                name,
                "configures the gateway the run starts; with gateway_url set, give it to "
                "that gateway (openforge gateway --judge-engine / --user-engine)",
                cfg.source,
            )
    if cfg.train_split != "train" and not cfg.allow_held_out:
        raise ConfigError(
            "train_split",
            f"{cfg.train_split!r} is held-out data: training on it contaminates every "
            "evaluation on it; use train, or set allow_held_out: true to train on it anyway",
            cfg.source,
        )
    if not 0 <= cfg.lora_dropout < 1:
        raise ConfigError("lora_dropout", "must be in [0, 1)", cfg.source)


def _check_monitor_rules(cfg: TrainConfig) -> None:
    """The reward-hack monitor's rules file, when given, loads."""
    if cfg.monitor_rules is not None:
        from openforge.traces.monitor import RuleError, load_rules

        try:
            load_rules(cfg.monitor_rules)
        except RuleError as exc:
            raise ConfigError("monitor_rules", str(exc), cfg.source) from None


def _check_curriculum(cfg: TrainConfig) -> None:
    """The curriculum's keys: a band inside [0, 1], and none set while it is off."""
    if not cfg.curriculum:
        for key, default in _CURRICULUM_DEFAULTS.items():
            if getattr(cfg, key) != default:
                raise ConfigError(
                    key, "configures the curriculum: set curriculum: true too", cfg.source
                )
        return
    if not 0 <= cfg.curriculum_low < cfg.curriculum_high <= 1:
        raise ConfigError(
            "curriculum_low",
            f"the band needs 0 <= curriculum_low < curriculum_high <= 1, got "
            f"{cfg.curriculum_low!r} and {cfg.curriculum_high!r}",
            cfg.source,
        )
    if cfg.curriculum_window < 1:
        raise ConfigError("curriculum_window", "must be >= 1 (groups)", cfg.source)
    if not 0 <= cfg.curriculum_explore <= 1:
        raise ConfigError("curriculum_explore", "must be in [0, 1]", cfg.source)


def _fields() -> dict[str, dataclasses.Field[Any]]:
    return {f.name: f for f in dataclasses.fields(TrainConfig) if not f.metadata.get("internal")}


def _describe(tp: Any) -> str:
    if typing.get_origin(tp) is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        return " or ".join(_describe(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def _matches(value: Any, tp: Any) -> bool:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return value in typing.get_args(tp)
    if isinstance(tp, types.UnionType) or origin is typing.Union:
        return any(_matches(value, a) for a in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if tp is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is list:
        (inner,) = typing.get_args(tp)
        return isinstance(value, list) and all(_matches(v, inner) for v in value)
    if origin is dict:
        return isinstance(value, dict)
    return isinstance(value, tp)


def _check_types(cfg: TrainConfig) -> None:
    hints = typing.get_type_hints(TrainConfig)
    for name in _fields():
        value = getattr(cfg, name)
        if not _matches(value, hints[name]):
            raise ConfigError(name, f"expected {_describe(hints[name])}, got {value!r}", cfg.source)
        if hints[name] is float and isinstance(value, int):
            object.__setattr__(cfg, name, float(value))


def load_config(path: str | Path | None, **overrides: Any) -> TrainConfig:
    """Read ``path`` (YAML mapping; ``None`` for all defaults), apply ``overrides``, validate."""
    source = str(path) if path is not None else "<defaults>"
    data: dict[str, Any] = {}
    if path is not None:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ConfigError("-", f"cannot read the file ({exc.strerror})", source) from None
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError("-", f"not valid YAML ({exc})", source) from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError("-", "the file must hold a mapping of keys to values", source)
        data = dict(loaded or {})
    data.update(overrides)
    known = _fields()
    for key in data:
        if key not in known:
            raise ConfigError(
                str(key), "unknown key; allowed keys: " + ", ".join(sorted(known)), source
            )
    return TrainConfig(**data, source=source)
