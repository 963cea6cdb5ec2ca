"""One model for every role against specialised models, on the same budget (issue 15, item 3).

The seed project asked whether a single small model can be the asker, the writer and the reader (its
own single model "spewed random combinations"). Here that is one more configuration of the training
machinery, not a second trainer:

* **warm start**: one LoRA learns from the rows every specialised warm start learns from, together and
  shuffled, each prompted with its own role's trained prompt (``train_stage`` takes ``{role: prompt}``);
  its steps are the sum of the specialised runs' steps, so both sides see the same examples and spend
  the same optimizer steps;
* **GRPO**: the prompts each specialised GRPO would draw (the hardest for this one warm start), together,
  each completion scored by its own role's rewards and weights (:func:`mags_lib.rewards.by_role_reward`);
  steps summed likewise.

The model lives in ``models/joint/<run_tag>/`` and is also written as one run per role,
``models/<role>/<run_tag>/`` (the same adapter, that role's prompt, ``meta.json`` naming the joint
folder), so everything that takes a role and a run tag -- :func:`~mags_lib.training.report.evaluate_run`,
the export, ``MAGS.default(models="trained", trained_tag=...)``, the game -- uses it unchanged.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from .. import repro
from ..roles import ROLE_NAMES, ROLE_SPECS
from .config import JOINT, PRIMARY_REWARD, GRPOConfig, TrainConfig
from .layout import FORMAT, read_run_meta, run_dir
from .run import (
    _as_json,
    _base_model_id,
    _cached_selection,
    grpo_candidates,
    load_role_data,
    train_stage,
    training_rows,
)

__all__ = ["JOINT", "PRIMARY_METRIC", "comparison_table", "joint_config", "scaled_config", "train_joint"]

_VIEW_FILES = ("adapter_config.json", "adapter_model.safetensors", "meta.json", "log.csv")


def scaled_config(cfg: TrainConfig, scale: float) -> TrainConfig:
    """``cfg`` with its warm-start and GRPO steps (and the rows drawn for them) times ``scale``, at least 1:
    the specialised side of a comparison run below the profile's budget.

    >>> from mags_lib.training import profile_config
    >>> c = scaled_config(profile_config("write", "default"), 0.2)
    >>> c.sft.max_steps, c.sft.n_generated, c.sft.n_seed, c.grpo.max_steps
    (120, 960, 64, 2)
    """
    if not 0 < scale:
        raise ValueError(f"scale must be > 0, got {scale!r}")
    if scale == 1:
        return cfg

    def times(n: int) -> int:
        return n if n <= 0 else max(1, round(n * scale))

    sft = dataclasses.replace(cfg.sft, max_steps=times(cfg.sft.max_steps), n_generated=times(cfg.sft.n_generated),
                              n_seed=times(cfg.sft.n_seed))
    grpo = None if cfg.grpo is None else dataclasses.replace(cfg.grpo, max_steps=times(cfg.grpo.max_steps))
    return dataclasses.replace(cfg, sft=sft, grpo=grpo)


def _roles(configs: Mapping[str, TrainConfig]) -> list[str]:
    roles = [r for r in ROLE_NAMES if r in configs]
    stray = sorted(set(configs) - set(roles))
    if stray or len(roles) < 2:
        raise ValueError(f"a joint model needs the configs of at least two roles of {ROLE_NAMES}, "
                         f"got {sorted(configs)}")
    for r in roles:
        if configs[r].role != r:
            raise ValueError(f"configs[{r!r}] is for role {configs[r].role!r}")
    return roles


def joint_config(configs: Mapping[str, TrainConfig]) -> TrainConfig:
    """The one model's configuration on the budget of the specialised ``configs`` (role -> config).

    Steps, GRPO prompts and rows are summed; the warm-start recipe (batching, loss average, learning rate)
    is the first role's in ``ask, write, answer`` order; GRPO completions get the longest role's cap and
    the reward :func:`~mags_lib.rewards.by_role_reward` with each role's rewards and weights. Profile,
    seed, LoRA, batch size and GRPO group shape must agree (else a ``ValueError`` names the field).

    >>> from mags_lib.training import profile_config
    >>> j = joint_config({r: profile_config(r, "default") for r in ("ask", "write", "answer")})
    >>> j.role, j.sft.max_steps, j.grpo.max_steps, j.grpo.max_completion_length, sorted(j.grpo.rewards)
    ('joint', 1400, 30, 128, ['by_role'])
    """
    roles = _roles(configs)
    first = configs[roles[0]]
    for field in ("profile", "seed", "lora", "threads"):
        if len({json.dumps(dataclasses.asdict(configs[r]).get(field), sort_keys=True) for r in roles}) > 1:
            raise ValueError(f"the roles' configs disagree on {field!r}: one model has one")
    if len({configs[r].sft.batch_size for r in roles}) > 1:
        raise ValueError("the roles' warm starts disagree on batch_size: one budget in steps needs one batch size")
    for r in roles:  # the joint warm start starts from the base model: a continued run's earlier training is budget
        # the one model would not get (train_stage never reads init_from: it was ignored, the comparison unfair)
        if configs[r].sft.init_from is not None:
            raise ValueError(f"the {r} config continues run {configs[r].sft.init_from!r} (SFTConfig.init_from): one "
                             "model for all roles starts from the base model, so the specialised side would have "
                             "that run's training on top of the shared budget; compare configs without init_from")
    sft = dataclasses.replace(first.sft, max_steps=sum(configs[r].sft.max_steps for r in roles),
                              max_length=max(configs[r].sft.max_length for r in roles),
                              n_generated=sum(max(0, configs[r].sft.n_generated) for r in roles),
                              n_seed=sum(max(0, configs[r].sft.n_seed) for r in roles))
    grpo = None
    gs = [configs[r].grpo for r in roles]
    if any(g is not None for g in gs):
        if any(g is None for g in gs):
            raise ValueError("either every role's config has a GRPO stage or none has")
        for field in ("prompts_per_step", "num_generations", "learning_rate", "beta", "temperature", "select_hard"):
            if len({getattr(g, field) for g in gs}) > 1:
                raise ValueError(f"the roles' GRPO stages disagree on {field!r}: one model has one")
        if any(name.startswith("outcome_") for g in gs for name in g.rewards):
            raise ValueError("the outcome rewards draw mini-scenarios per role: not supported for a joint model")
        options = {"roles": {r: {"rewards": dict(configs[r].grpo.rewards),
                                 "options": {k: dict(v) for k, v in configs[r].grpo.reward_options.items()}}
                             for r in roles}}
        grpo = GRPOConfig(**{**dataclasses.asdict(gs[0]),
                             "max_steps": sum(g.max_steps for g in gs),
                             "max_completion_length": max(g.max_completion_length for g in gs),
                             "n_prompts": sum(g.n_prompts for g in gs),
                             "save_steps": min(g.save_steps for g in gs),
                             "rewards": {"by_role": 1.0}, "reward_options": {"by_role": options}})
    return dataclasses.replace(first, role=JOINT, sft=sft, grpo=grpo,
                               n_eval=max(configs[r].n_eval for r in roles))


def _refuse_specialised(role: str, run_tag: str, models_root: str | Path | None) -> dict | None:
    """The meta of ``models/<role>/<run_tag>/`` (None: no run there); a ``ValueError`` if it is a specialised run,
    which a joint model's view must never overwrite."""
    view = run_dir(role, run_tag, models_root)
    old = read_run_meta(view)
    if old is not None and not old.get("joint"):
        raise ValueError(f"{view} holds a specialised {role} run: give the joint model another run tag")
    if old is None and view.is_dir():  # an unfinished run: its meta names no final stage (or is not written yet)
        try:
            raw = json.loads((view / "meta.json").read_text())
        except (OSError, ValueError):
            raw = None
        if not (isinstance(raw, dict) and raw.get("joint")) and any((view / st).exists() for st in ("sft", "grpo")):
            raise ValueError(f"{view} holds an unfinished specialised {role} run (its checkpoints would be deleted): "
                             "give the joint model another run tag, or finish or remove that run")
    return old


def _write_view(role: str, run_tag: str, joint_folder: Path, stages: Sequence[str], meta: dict,
                models_root: str | Path | None) -> Path:
    """``models/<role>/<run_tag>/``: the joint model's stage adapters as a run of ``role``."""
    view = run_dir(role, run_tag, models_root)
    old = _refuse_specialised(role, run_tag, models_root)
    view.mkdir(parents=True, exist_ok=True)
    for stage in ("sft", "grpo"):  # a later stage of an earlier joint run of this tag is not this run's
        if stage not in stages:
            shutil.rmtree(view / stage, ignore_errors=True)
    for stage in stages:
        tmp = view / f".{stage}.view-tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        for name in _VIEW_FILES:
            if (joint_folder / stage / name).is_file():
                shutil.copy2(joint_folder / stage / name, tmp / name)
        shutil.rmtree(view / stage, ignore_errors=True)
        os.replace(tmp, view / stage)
    view_meta = {**meta, "role": role, "run_tag": run_tag, "prompt": ROLE_SPECS[role].trained.to_dict(),
                 "primary_reward": PRIMARY_REWARD[role],
                 "joint": {"folder": str(joint_folder), "roles": meta["roles"]},
                 "metrics": ((old or {}).get("metrics", {})
                             if _as_json((old or {}).get("config")) == _as_json(meta["config"]) else {})}
    view_meta.pop("roles")
    repro.atomic_write_text(view / "meta.json", json.dumps(view_meta, indent=1, default=str))
    return view


def train_joint(run_tag: str, configs: Mapping[str, TrainConfig], *, models_root: str | Path | None = None,
                data_root: str | Path | None = None, data: Mapping[str, dict] | None = None,
                backend: str = "auto", progress: bool = True, note: Callable[[str], None] = print,
                callbacks: Sequence = ()) -> dict:
    """Train one model for the roles of ``configs`` (role -> the specialised run's config) on their summed
    budget (:func:`joint_config`) into ``models/joint/<run_tag>/``, and write it as a run of each role.

    Resumable and skipped when done, as :func:`~mags_lib.training.train_role` (the same stage machinery).
    ``run_tag`` must not be the tag of a specialised run of these roles (a ``ValueError`` says so before
    anything trains). Returns the joint run's ``meta.json``.
    """
    from ..models import base_model_dir

    roles = _roles(configs)
    for r in roles:  # refuse before hours of training, not after
        _refuse_specialised(r, run_tag, models_root)
    cfg = joint_config(configs)
    t0 = time.perf_counter()
    base_dir = base_model_dir(models_root)
    datas = {r: (data or {}).get(r) or load_role_data(r, configs[r].profile, root=data_root) for r in roles}
    for r in roles:
        if datas[r].get("seed_skipped"):
            note(datas[r]["seed_skipped"])
    hashes = {k: v for r in roles for k, v in datas[r]["hashes"].items()}
    import numpy as np

    rows = [row for r in roles for row in training_rows(datas[r], configs[r])]
    rows = [rows[i] for i in np.random.default_rng([cfg.seed, 5]).permutation(len(rows))]
    prompts = {r: ROLE_SPECS[r].trained for r in roles}
    folder = run_dir(JOINT, run_tag, models_root)
    folder.mkdir(parents=True, exist_ok=True)
    results = {"sft": train_stage("sft", cfg, rows, folder / "sft", base_dir=base_dir, prompt=prompts,
                                  data_hashes=hashes, backend=backend, progress=progress, note=note,
                                  callbacks=callbacks)}
    finished = results["sft"].skipped or results["sft"].steps >= cfg.sft.max_steps
    if cfg.grpo is not None and not finished:
        note(f"joint: the warm start stopped at step {results['sft'].steps} of {cfg.sft.max_steps}; GRPO not started "
             "(run again to resume)")
    elif cfg.grpo is not None:
        grpo_data = []
        for r in roles:  # what each specialised GRPO would draw, the hardest for this warm start
            c = configs[r]
            cand = grpo_candidates(c, datas[r], base_dir, note=note, progress=progress)
            if c.grpo.select_hard:
                cand = _cached_selection(folder, cand, c, base_dir, prompts[r],
                                         min(len(cand), c.grpo.max_steps * c.grpo.prompts_per_step), note,
                                         cache_name=f"grpo_prompts_{r}.json")
            grpo_data += cand
        results["grpo"] = train_stage("grpo", cfg, grpo_data, folder / "grpo", base_dir=base_dir, prompt=prompts,
                                      data_hashes=hashes, init_adapter=folder / "sft", backend=backend,
                                      progress=progress, note=note, callbacks=callbacks)
    done = [s for s in ("sft", "grpo") if s in results and (results[s].skipped
                                                             or results[s].steps >= getattr(cfg, s).max_steps)]
    meta = {"format": FORMAT, "role": JOINT, "roles": roles, "run_tag": run_tag, "base_model": _base_model_id(base_dir),
            "data": hashes, "config": cfg.to_dict(), "prompt": {r: p.to_dict() for r, p in prompts.items()},
            "final_stage": done[-1] if done else None,
            "specialised_configs": {r: configs[r].to_dict() for r in roles},
            "stages": {s: {"folder": s, "steps": v.steps, "skipped": v.skipped, "resumed_from": v.resumed_from,
                           "wall_time_s": round(v.seconds, 1), "train_metrics": v.metrics}
                       for s, v in results.items()},
            "wall_time_s": round(time.perf_counter() - t0, 1), "git_sha": repro.git_sha(),
            "packages": repro.package_versions(), "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    repro.atomic_write_text(folder / "meta.json", json.dumps(meta, indent=1, default=str))
    if done:
        for r in roles:
            _write_view(r, run_tag, folder, done, meta, models_root)
        note(f"joint: one model for {', '.join(roles)} in {folder}; as runs {run_tag!r} of each role "
             f"({', '.join(str(run_dir(r, run_tag, models_root)) for r in roles)})")
    return meta


# the primary metric of each role in evaluate_run's table (what its GRPO stage must raise), then adherence
PRIMARY_METRIC = {"ask": "retrieval", "write": "exact_f1", "answer": "accuracy"}


def comparison_table(scores):
    """One row per role, stage, set and decoding mode: the role's primary metric (and adherence) of the
    specialised model and of the one model, and their difference.

    ``scores``: :func:`~mags_lib.training.report.evaluate_run` tables of both, with a ``model`` column
    (``"specialised"`` / ``"one model"``) and a ``role`` column.

    >>> import pandas as pd
    >>> s = pd.DataFrame([{"model": m, "role": "answer", "stage": "sft", "set": "gen_answer", "mode": "free", "n": 4,
    ...                    "accuracy": a} for m, a in (("specialised", .75), ("one model", .5))])
    >>> comparison_table(s)[["role", "metric", "specialised", "one_model", "difference"]].to_dict("records")
    [{'role': 'answer', 'metric': 'accuracy', 'specialised': 0.75, 'one_model': 0.5, 'difference': -0.25}]
    """
    import pandas as pd

    rows = []
    keys = ["role", "stage", "set", "mode"]
    for key, group in scores.groupby(keys, sort=False):
        role = key[0]
        for metric in (PRIMARY_METRIC[role], "adherence"):
            if metric not in group or group[metric].isna().all():
                continue
            by = {m: g[metric].dropna() for m, g in group.groupby("model")}
            spec = float(by["specialised"].iloc[0]) if len(by.get("specialised", ())) else None
            one = float(by["one model"].iloc[0]) if len(by.get("one model", ())) else None
            rows.append({**dict(zip(keys, key)), "n": int(group["n"].max()), "metric": metric, "specialised": spec,
                         "one_model": one,
                         "difference": None if spec is None or one is None else round(one - spec, 6)})
    return pd.DataFrame(rows)
