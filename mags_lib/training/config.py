"""Typed configurations of the two training stages, and the smoke / default / full profiles.

One dataclass per stage (:class:`SFTConfig` for the supervised warm start, :class:`GRPOConfig` for
reinforcement), fields with help text in their metadata (``dataclasses.fields(SFTConfig)[i].metadata
["help"]``), checks in ``__post_init__``. A whole role's run is a :class:`TrainConfig`;
:func:`profile_config` gives the profile's configuration for a role, and ablations are
``dataclasses.replace`` of it, never copies.

>>> cfg = profile_config("write", "smoke")
>>> cfg.role, cfg.sft.max_steps > 0, "exact_f1" in cfg.grpo.rewards
('write', True, True)
>>> help_text(SFTConfig, "learning_rate")
'peak learning rate of the LoRA weights (cosine decay after warm-up)'
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

from ..rewards import REGISTRY
from ..roles import ROLE_NAMES

__all__ = ["OBJECTIVES", "PROFILES", "GRPOConfig", "LoraSpec", "SFTConfig", "TrainConfig", "config_hash",
           "help_text", "profile_config", "with_objective"]

PROFILES = ("smoke", "default", "full")
BATCHING = ("shuffled_length", "sorted_length", "random")  # SFTConfig.batching (training.sampling)
LOSS_AVERAGES = ("token", "sequence")  # SFTConfig.loss_average (training.losses)

ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _f(default: Any, help: str, **kw: Any) -> Any:
    """A dataclass field with help metadata (mutable defaults through a factory)."""
    if isinstance(default, (dict, list, set)):
        return field(default_factory=lambda d=default: type(d)(d), metadata={"help": help, **kw})
    return field(default=default, metadata={"help": help, **kw})


def help_text(cls: type, name: str) -> str:
    """The help text of field ``name`` of a config dataclass."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            return f.metadata.get("help", "")
    raise KeyError(f"{cls.__name__} has no field {name!r}")


def _finite(obj: Any, name: str, lo: float, *, above: bool = False) -> None:
    """``obj.name`` is a finite number >= ``lo`` (> ``lo`` with ``above``): NaN passed every ``<`` check."""
    v = getattr(obj, name)
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and (v > lo if above else v >= lo)
    if not ok:
        raise ValueError(f"{type(obj).__name__}.{name} must be a finite number {'>' if above else '>='} {lo}, got {v!r}")


def _positive(obj: Any, *names: str, lo: int = 1) -> None:
    """Each ``obj.name`` is an int >= ``lo`` (a bool, a float or NaN is not)."""
    for n in names:
        v = getattr(obj, n)
        if not isinstance(v, int) or isinstance(v, bool) or v < lo:
            raise ValueError(f"{type(obj).__name__}.{n} must be an int >= {lo}, got {v!r}")


@dataclass(frozen=True)
class LoraSpec:
    """The LoRA adapter trained by both stages (PEFT)."""

    r: int = _f(32, "LoRA rank")
    alpha: int = _f(32, "LoRA alpha (scale = alpha / r)")
    dropout: float = _f(0.0, "dropout on the LoRA input (0: deterministic, faster)")
    target_modules: tuple[str, ...] = _f(ALL_LINEAR, "linear layers that get an adapter (all of them by default)")

    def __post_init__(self) -> None:
        _positive(self, "r")
        _finite(self, "alpha", 0, above=True)
        if isinstance(self.target_modules, str):  # one module name, not its characters
            object.__setattr__(self, "target_modules", (self.target_modules,))
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"LoRA dropout must be in [0, 1), got {self.dropout}")
        if not self.target_modules:
            raise ValueError("LoRA needs at least one target module")
        object.__setattr__(self, "target_modules", tuple(self.target_modules))


@dataclass(frozen=True)
class SFTConfig:
    """Supervised warm start (TRL ``SFTTrainer``, loss on the completion tokens only)."""

    max_steps: int = _f(200, "optimizer steps (the data is cycled when it is shorter)")
    batch_size: int = _f(8, "examples per optimizer step (one forward/backward)")
    learning_rate: float = _f(4e-4, "peak learning rate of the LoRA weights (cosine decay after warm-up)")
    warmup_ratio: float = _f(0.05, "share of the steps spent warming the learning rate up")
    weight_decay: float = _f(0.0, "AdamW weight decay")
    max_length: int = _f(768, "longest training sequence in tokens (prompt + completion); longer rows are dropped")
    n_generated: int = _f(1200, "generated training examples used (0: all)")
    n_seed: int = _f(-1, "seed-dataset training examples used when present (-1: all, 0: none); answer: unused")
    batching: str = _f("shuffled_length", "shuffled_length: rows of similar length batched together (less "
                                          "padding), the batches in random order | sorted_length: transformers' "
                                          "group_by_length (each 50-batch block longest first: the shortest rows come "
                                          "in runs, see training.sampling) | random")
    loss_average: str = _f("token", "token: the batch's mean over its completion tokens (long completions weigh "
                                    "more) | sequence: each row's mean, then the mean over rows, the padding "
                                    "left out of the forward pass (training.losses; "
                                    "with batching='random' the writer learnt to store nothing for chatter; the "
                                    "long rows it then loops on are cut at the first repeated tag when decoding: "
                                    "README; the default profile's writer uses both)")
    share_prefix: bool = _f(True, "run the tokens all rows of a batch chunk begin with (chat template, system "
                                  "prompt) once and continue every row from its key/value cache (training.losses; "
                                  "same losses and gradients, fewer tokens through the model; not under Unsloth, "
                                  "whose activation checkpointing keeps no cache); False: TRL's own loss for "
                                  "loss_average='token'")
    bf16: bool = _f(True, "bf16 autocast (CPUs with avx512_bf16 / AMX, or CUDA); fp32 otherwise")
    save_steps: int = _f(25, "checkpoint every this many steps (resume point after an interruption)")
    save_total_limit: int = _f(2, "checkpoints kept")
    logging_steps: int = _f(1, "log loss and learning rate every this many steps (CSV)")
    extra_data: dict[str, int] = _f({}, "more processed datasets of the role mixed into the rows: folder name under "
                                        "data/processed -> train rows used (-1: all), e.g. "
                                        "{'gen_answer_textworld': 600} (mags_lib.data.textworld)")
    init_from: str | None = _f(None, "run tag of a finished run of this role whose final adapter the warm start "
                                     "continues (None: a new LoRA on the base model)")

    def __post_init__(self) -> None:
        _positive(self, "max_steps", "batch_size", "max_length", "save_steps", "save_total_limit",
                  "logging_steps")
        for name, n in dict(self.extra_data).items():
            if not isinstance(name, str) or not name or "/" in name or not isinstance(n, int) or n < -1 or n == 0:
                raise ValueError(f"extra_data maps a dataset folder name to a row count >= 1 or -1 (all), got "
                                 f"{name!r}: {n!r}")
        if self.init_from is not None and (not isinstance(self.init_from, str) or not self.init_from.strip()):
            raise ValueError(f"init_from must be None or a run tag, got {self.init_from!r}")
        _finite(self, "learning_rate", 0, above=True)  # a string ("1e-4") or NaN: said here, not deep in torch
        if not 0 < self.learning_rate < 1:
            raise ValueError(f"learning_rate must be in (0, 1), got {self.learning_rate}")
        if not 0 <= self.warmup_ratio < 1:
            raise ValueError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio!r}")
        _finite(self, "weight_decay", 0)
        _positive(self, "n_generated", lo=0)
        _positive(self, "n_seed", lo=-1)
        if self.batching not in BATCHING:
            raise ValueError(f"batching must be one of {BATCHING}, got {self.batching!r}")
        if self.loss_average not in LOSS_AVERAGES:
            raise ValueError(f"loss_average must be one of {LOSS_AVERAGES}, got {self.loss_average!r}")


@dataclass(frozen=True)
class GRPOConfig:
    """Reinforcement from the warm start (TRL ``GRPOTrainer``), rewards chosen by name."""

    max_steps: int = _f(40, "optimizer steps (one generation round each)")
    prompts_per_step: int = _f(2, "prompts per step; each gets num_generations completions")
    num_generations: int = _f(4, "completions per prompt (the group whose rewards are normalised)")
    learning_rate: float = _f(5e-5, "peak learning rate")
    beta: float = _f(0.02, "KL coefficient against the warm-start model (logged per step)")
    temperature: float = _f(1.0, "sampling temperature of the completions")
    max_completion_length: int = _f(96, "longest completion in tokens")
    rewards: dict[str, float] = _f({}, "reward name (mags_lib.rewards.REGISTRY) -> weight")
    reward_options: dict[str, dict] = _f({}, "reward name -> keyword options (e.g. the embedder)")
    n_prompts: int = _f(400, "candidate training prompts (whose gold fits max_completion_length); GRPO uses "
                             "max_steps x prompts_per_step of them, the hardest first when select_hard")
    select_hard: bool = _f(True, "prefer prompts the warm-start model gets wrong (fewer zero-variance groups)")
    save_steps: int = _f(10, "checkpoint every this many steps")
    save_total_limit: int = _f(2, "checkpoints kept")
    logging_steps: int = _f(1, "log rewards, KL and zero-variance share every this many steps (CSV)")

    def __post_init__(self) -> None:
        _positive(self, "max_steps", "prompts_per_step", "max_completion_length", "n_prompts", "save_steps",
                  "save_total_limit", "logging_steps")
        _positive(self, "num_generations")
        if self.num_generations < 2:
            raise ValueError(f"GRPO needs num_generations >= 2 (a group), got {self.num_generations}")
        _finite(self, "learning_rate", 0, above=True)
        if not 0 < self.learning_rate < 1:
            raise ValueError(f"learning_rate must be in (0, 1), got {self.learning_rate!r}")
        _finite(self, "beta", 0)
        _finite(self, "temperature", 0, above=True)
        bad = {k: w for k, w in self.rewards.items()
               if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w)}
        if bad:
            raise ValueError(f"reward weights must be finite numbers, got {bad}")
        unknown = set(self.rewards) - set(REGISTRY)
        if unknown or not self.rewards:
            raise ValueError(f"rewards must name rewards of mags_lib.rewards.REGISTRY {sorted(REGISTRY)}, "
                             f"got {sorted(self.rewards)}")
        stray = set(self.reward_options) - set(self.rewards)
        if stray:
            raise ValueError(f"reward_options for rewards that are not used: {sorted(stray)}")
        from ..rewards import check_reward_options

        for name, opts in self.reward_options.items():
            check_reward_options(name, opts)  # a misspelt option was bound and silently ignored


JOINT = "joint"  # the role name of one model trained for several roles (mags_lib.training.joint)


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines one role's training run (its hash names the run's content)."""

    role: str = _f("write", "ask | write | answer (joint: one model for several roles, training.joint)")
    profile: str = _f("default", "smoke | default | full (sizes)")
    seed: int = _f(0, "one seed: data order, LoRA init, sampling")
    lora: LoraSpec = _f(LoraSpec(), "the adapter")
    sft: SFTConfig = _f(SFTConfig(), "warm start")
    grpo: GRPOConfig | None = _f(None, "reinforcement stage (None: warm start only)")
    n_eval: int = _f(200, "held-out examples per evaluation set (0: all)")
    eval_max_new_tokens: int | None = _f(None, "cap on the tokens generated per held-out example (None: the "
                                               "role's prompt spec's; smoke: a short cap, the scores mean nothing)")
    threads: int | None = _f(None, "torch threads (None: every usable core; on a shared machine 1 is faster)")

    def __post_init__(self) -> None:
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2**32:
            raise ValueError(f"seed must be an integer in [0, 2**32), got {self.seed!r}")
        if self.role not in (*ROLE_NAMES, JOINT):
            raise ValueError(f"role must be one of {(*ROLE_NAMES, JOINT)}, got {self.role!r}")
        if self.profile not in PROFILES:
            raise ValueError(f"profile must be one of {PROFILES}, got {self.profile!r}")
        _positive(self, "n_eval", lo=0)
        if self.threads is not None:
            _positive(self, "threads")
        if self.eval_max_new_tokens is not None and (not isinstance(self.eval_max_new_tokens, int)
                                                     or self.eval_max_new_tokens < 1):
            raise ValueError(f"eval_max_new_tokens must be None or an int >= 1, got {self.eval_max_new_tokens!r}")
        for name, cls in (("lora", LoraSpec), ("sft", SFTConfig)):
            if not isinstance(getattr(self, name), cls):
                raise TypeError(f"{name} must be a {cls.__name__}")
        if self.grpo is not None and not isinstance(self.grpo, GRPOConfig):
            raise TypeError("grpo must be a GRPOConfig or None")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        d = dict(d)
        d["lora"] = LoraSpec(**d["lora"])
        sft = dict(d["sft"])
        if "group_by_length" in sft:  # a meta.json written before batching replaced it (2026-11-27)
            sft["batching"] = "sorted_length" if sft.pop("group_by_length") else "random"
        d["sft"] = SFTConfig(**sft)
        d["grpo"] = GRPOConfig(**d["grpo"]) if d.get("grpo") else None
        return cls(**d)


def config_hash(obj: Any) -> str:
    """A short sha256 of a (JSON-able) configuration."""
    data = dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) else obj
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


# Rewards per role: the primary metric's reward first (it is what GRPO must raise), then shaping terms.
_REWARDS = {
    "ask": {"ask_retrieval": 1.0, "op_f1": 0.5, "format": 0.5, "length": 0.5},
    "write": {"exact_f1": 1.0, "op_f1": 0.5, "format": 0.5, "length": 0.5},
    "answer": {"answer_correct": 1.0, "abstention": 0.5, "brevity": 0.5},
}
PRIMARY_REWARD = {role: next(iter(r)) for role, r in _REWARDS.items()}
# The reader's abstention term makes a wrong guess cost more than abstaining (selective answering): with the
# plain term a wrong answer to an answerable question still earned the 0.5 of "did not abstain", so GRPO taught
# guessing (2026-11-29, the 600-step warm start, the 500 test rows: abstention accuracy 0.951 -> 0.863, accuracy
# 0.914 -> 0.912; with wrong_answer=-1: 0.918 / 0.918; README, "The reader's warm start 260 -> 600 steps").
_REWARD_OPTIONS = {"answer": {"abstention": {"wrong_answer": -1.0}}}


def _profile_values(role: str, profile: str) -> dict:
    long_out = role in ("ask", "write")
    if profile == "smoke":
        # CI: every code path once (warm start with a checkpoint, GRPO with every reward and the KL, the held-out
        # evaluation of each stage), on as few tokens as that takes: a step's cost is its tokens (about 150
        # tokens/s forward+backward on 2 quiet cores), and trained stages decode on transformers. One torch
        # thread: CI shares the cores (xdist workers, other jobs), and two OpenMP threads on a busy machine
        # spin-wait: generating 2 x 32 tokens took 118 s with 2 threads against 12 s with 1 (load 7, 2 cores).
        # Two warm-start steps (the second saves a checkpoint) on rows of at most 256 tokens; GRPO completions of
        # 24 / 12 tokens (the shortest caps that most smoke golds fit under: GRPO only draws prompts whose gold
        # fits). train_role of the three roles, quiet 2-core AVX2 machine: 178.8 s with 3 steps, 384 tokens and
        # 32 / 16; 164.5 s so (target: 3 min in all). GRPO's generation on transformers (6 tokens/s here) is most of it.
        return dict(sft=dict(max_steps=2, batch_size=2, max_length=256, n_generated=16, n_seed=8, save_steps=2),
                    grpo=dict(max_steps=2, prompts_per_step=1, num_generations=2, n_prompts=4, save_steps=2,
                              max_completion_length=24 if long_out else 12, select_hard=False),
                    n_eval=2, eval_max_new_tokens=32, threads=1)
    if profile == "default":
        # Sized to the 90-minute budget for all three roles on 2 quiet cores, in tokens: a row of the generated
        # sets is 75 / 100 / 142 tokens (ask / write / answer, trained prompt + completion), a seed row 215 / 225.
        # The first default run (40 / 40 / 32 steps over all 638-663 seed rows + 500-800 generated, ~55 min with
        # GRPO) learnt the format but not the generated worlds' relation labels (exact-triplet F1 0.04) and left
        # the reader abstaining; this one spends the same tokens on 2.5x the examples: fewer of the long seed
        # rows (320 of them, about a fifth of the rows), more steps. The second (100 / 100 / 80 steps, 39 min with
        # GRPO: 4.0 / 8.0 / 5.9 s a step beside other work) reached exact-triplet F1 0.37 and answer accuracy 0.62,
        # still climbing, with half the budget unused: this third one spends it, ~1 epoch of fresh generated rows
        # per role (seed rows unchanged). Figures per run: models/<role>/<run_tag>/meta.json, README.
        # The writer: rows in random batches, each row's mean loss (probes of 100 steps at 1.5e-3, README:
        # exact-triplet F1 0.59 -> 0.76, all 48 empty-gold test inputs left empty instead of 3; the long seed rows
        # it then loops on are cut at the first repeated tag when decoding, Backend.generate(stop_repeats=True);
        # at this profile's 4e-4, 100 steps: 0.43, the 48 still empty). Random batches would be mostly padding;
        # the sequence loss computes its rows in chunks of similar length instead (losses.length_chunks: 1.44x
        # faster over 10 steps here, same losses). The whole 280-step writer warm start so (2026-11-27, AVX2, fp32):
        # 2,401 s, exact-triplet F1 0.834 (0.784 with the old recipe), all 48 empty-gold test rows left empty.
        # Ask and answer keep length-grouped batches (not probed).
        # Steps: cut by a fifth for the 90-minute target (200 / 280 / 260 -> 160 / 224 / 208, 2026-11-28) the warm
        # starts lost 0.08-0.09 of their primary metric (write exact-triplet F1 0.834 -> 0.754 on 100 generated test
        # rows, answer accuracy 0.780 -> 0.686 on the 500 test rows; one run each), so the profile keeps these; that
        # run's three roles took 69.6 min in one process at that hour's rates (README: "The default profile in one
        # process").
        # The writer 280 -> 400 steps (2026-11-29, the AVX-512 machine, where the three roles took 45 min): held out,
        # exact-triplet F1 0.798 -> 0.865, op F1 0.907 -> 0.950 (100 generated test rows), seed op F1 0.584 -> 0.634;
        # on the game's 40 held-out scenarios (bench.write_quality) missed invalidations 18 / 112 -> 15 / 128, wrong
        # invalidations 4 / 106 -> 4 / 124, gold facts stored 0.81 -> 0.90; 1,477 s (README, "The default profile on
        # the AVX-512 machine").
        # The reader 260 -> 600 steps (2026-11-29, AVX-512 machine): held out, the 500 test rows, warm start
        # accuracy 0.786 -> 0.888 (440 steps) -> 0.914 (600), abstention accuracy 0.803 -> 0.913 -> 0.951; a warm
        # start of 1,967 s for the 600 (README, "The reader's warm start 260 -> 600 steps"): the checkpoints of the
        # 260-step run had looked flat, the longer schedule (fresh rows, later decay) was not.
        write = dict(batching="random", loss_average="sequence") if role == "write" else {}
        # The writer 400 -> 600 steps (2026-11-29, twentieth session): held out, the same 100 generated test rows,
        # exact-triplet F1 0.865 -> 0.923, op F1 0.950 -> 0.985, seed op F1 0.634 -> 0.647 (free), seed free adherence
        # 0.76 -> 0.73; warm start 1,978 s (README, "The writer's warm start 400 -> 600 steps").
        steps = {"ask": 200, "write": 600, "answer": 600}[role]
        return dict(sft=dict(max_steps=steps, batch_size=8, save_steps=10, n_generated=8 * steps, n_seed=320, **write),
                    grpo=dict(max_steps=10, prompts_per_step=2, num_generations=4, save_steps=5,
                              max_completion_length=128 if long_out else 16, n_prompts=60),
                    n_eval=100)
    return dict(sft=dict(max_steps=1200, batch_size=16, n_generated=0, n_seed=-1, learning_rate=3e-4),
                grpo=dict(max_steps=300, prompts_per_step=4, num_generations=8,
                          max_completion_length=384 if long_out else 24, n_prompts=2000),
                n_eval=0)


def profile_config(role: str, profile: str = "default", *, seed: int = 0, **overrides: Any) -> TrainConfig:
    """The :class:`TrainConfig` of ``role`` in ``profile``; keyword overrides replace whole fields.

    Profiles: ``smoke`` (CI: a few steps of each stage, minutes for all three roles), ``default``
    (the real CPU run: the three roles in about 90 minutes on 2 quiet cores), ``full`` (more steps, all the data,
    larger groups: GPU welcome).
    """
    if role not in ROLE_NAMES:
        raise ValueError(f"role must be one of {ROLE_NAMES}, got {role!r}")
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {PROFILES}, got {profile!r}")
    v = _profile_values(role, profile)
    rewards = dict(_REWARDS[role])
    options = {name: {"embedder": "minilm"} for name in rewards if name in ("op_f1", "ask_retrieval")}
    options.update(_REWARD_OPTIONS.get(role, {}))
    cfg = TrainConfig(role=role, profile=profile, seed=seed, sft=SFTConfig(**v["sft"]),
                      grpo=GRPOConfig(rewards=rewards, reward_options=options, **v["grpo"]), n_eval=v["n_eval"],
                      eval_max_new_tokens=v.get("eval_max_new_tokens"), threads=v.get("threads"))
    return dataclasses.replace(cfg, **overrides) if overrides else cfg


# Training objectives of issue 15, as OPTIONS on top of a profile (no profile uses them by default):
# "imitation" the profile's own reward set (op F1 / exact F1 first), "graph_cost" the same plus the
# graph regulariser (mags_lib.rewards.graph_cost) at a weight, "outcome" the prediction term (a frozen
# reader answers a mini-scenario's questions; rows from mags_lib.data.outcome.build_outcome_rows, whose
# GRPO rows carry the 'scenario' column) with the format and length shaping terms kept.
OBJECTIVES = ("imitation", "graph_cost", "outcome")


def with_objective(cfg: TrainConfig, objective: str, *, graph_cost_weight: float = 0.5,
                   graph_cost_options: dict | None = None, reader_threads: int = 1) -> TrainConfig:
    """``cfg`` with its GRPO rewards replaced by those of ``objective`` (see :data:`OBJECTIVES`).

    >>> cfg = profile_config("write", "smoke")
    >>> sorted(with_objective(cfg, "graph_cost", graph_cost_weight=0.25).grpo.rewards.items())[1]
    ('format', 0.5)
    >>> with_objective(cfg, "graph_cost", graph_cost_weight=0.25).grpo.rewards["graph_cost"]
    0.25
    >>> sorted(with_objective(cfg, "outcome").grpo.rewards)
    ['format', 'length', 'outcome_write']
    >>> with_objective(cfg, "imitation") == cfg
    True
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    if cfg.grpo is None:
        raise ValueError("with_objective needs a config with a GRPO stage (cfg.grpo is None)")
    if objective == "imitation":
        return cfg
    rewards, options = dict(cfg.grpo.rewards), dict(cfg.grpo.reward_options)
    if objective == "graph_cost":
        if cfg.role != "write":
            raise ValueError(f"the graph-cost objective scores stored operations: role 'write', got {cfg.role!r}")
        if not graph_cost_weight > 0:
            raise ValueError(f"graph_cost_weight must be > 0, got {graph_cost_weight!r}")
        rewards["graph_cost"] = float(graph_cost_weight)
        options["graph_cost"] = dict(graph_cost_options or {})
    else:
        if cfg.role not in ("write", "ask"):
            raise ValueError(f"the outcome objective exists for the write and ask roles, got {cfg.role!r}")
        name = f"outcome_{cfg.role}"
        rewards = {name: 1.0, **{k: v for k, v in rewards.items() if k in ("format", "length")}}
        options = {name: {"n_threads": int(reader_threads), "embedder": "minilm"}}
    return dataclasses.replace(cfg, grpo=dataclasses.replace(cfg.grpo, rewards=rewards, reward_options=options))
