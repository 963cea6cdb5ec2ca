"""What the training notebook shows: curves, held-out scores per stage, example outputs, metrics.

* :func:`plot_curves` -- the warm start's loss, then every GRPO reward component, KL and the share of
  groups whose rewards have zero variance, against the step (from the stages' ``log.csv``);
* :func:`evaluate_run` -- held-out scores of the base model (prompted: base prompt, few-shot), the
  warm start and warm start + GRPO, free decoding, and grammar-constrained where a backend can
  constrain (llama.cpp: the base model; a trained stage once exported to GGUF);
* :func:`example_table` -- the same inputs answered by each stage;
* :func:`stage_comparison` -- the primary held-out metric of each stage, the GRPO diagnosis.
"""

from __future__ import annotations

import csv
import dataclasses
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..repro import jsonl_lines
from .layout import STAGES, read_run_meta, run_dir

__all__ = ["PRIMARY_METRIC", "evaluate_run", "example_table", "plot_curves", "read_log", "stage_comparison"]

# The held-out metric each role's GRPO must raise: (dataset source, column of evaluate_sets' table).
PRIMARY_METRIC = {"ask": ("gen", "retrieval"), "write": ("gen", "exact_f1"), "answer": ("gen", "accuracy")}


def read_log(path: str | Path) -> list[dict]:
    """Rows of a stage's ``log.csv`` with numeric values as floats."""
    path = Path(path)
    if not path.is_file():
        return []
    out = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            out.append({k: (float(v) if v not in ("", None) else None) for k, v in r.items()})
    return out


def plot_curves(role: str, run_tag: str, *, models_root: str | Path | None = None, path: str | Path | None = None):
    """A figure: SFT loss; GRPO reward components; GRPO KL and zero-variance share (against step)."""
    import matplotlib.pyplot as plt

    folder = run_dir(role, run_tag, models_root)
    sft, grpo = read_log(folder / "sft" / "log.csv"), read_log(folder / "grpo" / "log.csv")
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.6))
    ax = axes[0]
    pts = [(r["step"], r["loss"]) for r in sft if r.get("loss") is not None]
    if pts:
        ax.plot(*zip(*pts), color="tab:blue")
    ax.set(title=f"{role}: warm start (SFT)", xlabel="step", ylabel="loss (completion tokens)")
    ax = axes[1]
    names = sorted({k for r in grpo for k in r if k.startswith("rewards/") and k.endswith("/mean")})
    for name in names:
        pts = [(r["step"], r[name]) for r in grpo if r.get(name) is not None]
        if pts:
            ax.plot(*zip(*pts), marker=".", label=name.split("/")[1].removesuffix("_reward"))
    pts = [(r["step"], r["reward"]) for r in grpo if r.get("reward") is not None]
    if pts:
        ax.plot(*zip(*pts), color="black", lw=2, label="weighted total")
    ax.set(title="GRPO rewards (mean per step)", xlabel="step")
    if names:
        ax.legend(fontsize=7)
    ax = axes[2]
    for key, color in (("kl", "tab:red"), ("frac_reward_zero_std", "tab:gray")):
        pts = [(r["step"], r[key]) for r in grpo if r.get(key) is not None]
        if pts:
            ax.plot(*zip(*pts), marker=".", color=color, label=key)
    ax.set(title="GRPO: KL to the warm start, zero-variance groups", xlabel="step")
    if grpo:
        ax.legend(fontsize=7)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig


def _adapter_stamp(adapter: Path) -> str:
    """What a GGUF LoRA converted from ``adapter`` depends on: the stage's content hash and the sha256 of its
    adapter files (config and weights, :func:`mags_lib.export.layout._adapter_sha256`). The content hash alone
    names the configuration, not the weights: a stage trained again with the same configuration (another
    machine, a models folder copied from another clone, a re-stamped hash) has other weights under the same
    hash."""
    from ..export.layout import _adapter_sha256

    content = json.loads((adapter / "meta.json").read_text())["content_hash"]
    return f"{content}:{_adapter_sha256(adapter)}"


def _lora_gguf(adapter: Path, out: Path, note: Callable[[str], None]) -> Path | None:
    """The stage adapter as a GGUF LoRA (through the export module, when this checkout has it), so
    llama.cpp can run the trained stage with the role's grammar; ``None`` when it cannot."""
    try:
        from ..export import write_lora_gguf  # the export notebook's writer (issue 11)
    except ImportError:
        return None
    target = out / "lora.gguf"
    stamp = out / "lora.source"
    source = _adapter_stamp(adapter)
    if target.is_file() and stamp.is_file() and stamp.read_text() == source:
        return target
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from ..models import base_model_dir

    out.mkdir(parents=True, exist_ok=True)
    try:
        peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(base_model_dir())), str(adapter))
        write_lora_gguf(peft_model, target)
    except Exception as exc:  # noqa: BLE001 - fall back to transformers, saying why
        note(f"{adapter}: no GGUF LoRA ({type(exc).__name__}: {exc}); evaluated with transformers")
        return None
    stamp.write_text(source)
    return target


def _set_aside(stage_out: Path, note: Callable[[str], None]) -> None:
    """An earlier evaluation's predictions of a stage not evaluated now go to ``<out_dir>/replaced/`` (never
    deleted), so that nothing read from ``out_dir`` later (:func:`example_table`, the variants' paired figures)
    shows another model's outputs as this stage's."""
    if not any(stage_out.glob("predictions_*.jsonl")):
        return
    import time

    dest = stage_out.parent / "replaced" / f"{stage_out.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    i = 1
    while dest.exists():
        dest, i = dest.with_name(f"{stage_out.name}-{time.strftime('%Y%m%d-%H%M%S')}-{i}"), i + 1
    dest.parent.mkdir(parents=True, exist_ok=True)
    stage_out.rename(dest)
    note(f"{stage_out}: the predictions of an earlier evaluation were moved to {dest}")


def _not_the_runs(folder: Path, stage: str) -> str | None:
    """Why the adapter in ``folder/<stage>`` is not the run's own stage (``None`` when it is): the run has no
    finished ``meta.json``, its ``final_stage`` comes before ``stage`` (a GRPO adapter left behind by an earlier
    run of the tag, e.g. after the warm start was trained again with ``grpo_steps=0``), or a GRPO stage continues
    another warm start than the one in ``sft/``."""
    meta = read_run_meta(folder)
    if meta is None:
        return "the run has no finished meta.json"
    if STAGES.index(stage) > STAGES.index(meta["final_stage"]):
        return f"the run's final stage is {meta['final_stage']!r}"
    if stage == "grpo":
        try:
            init = json.loads((folder / "grpo" / "meta.json").read_text()).get("init")
            sft = json.loads((folder / "sft" / "meta.json").read_text()).get("content_hash")
        except (OSError, ValueError):
            return None  # no warm-start meta to compare with (a GRPO-only copy): nothing says otherwise
        if init and sft and init != sft:
            return f"it continues the warm start {init}, not {sft} in sft/"
    return None


def evaluate_run(role: str, run_tag: str, profile: str, out_dir: str | Path, *, n: int = 200, seed: int = 0,
                 stages: Sequence[str] = ("base", "sft", "grpo"), embedder: str = "minilm",
                 threads: int | None = None, max_new_tokens: int | None = None,
                 models_root: str | Path | None = None, data_root: str | Path | None = None,
                 base_from: str | Path | None = None, progress: bool = True, note: Callable[[str], None] = print):
    """Held-out (test split) scores of each stage of a run; a DataFrame with ``stage`` and ``engine``.

    ``base`` is the untrained SmolLM2 with the role's base prompt on llama.cpp (free, and grammar for
    ask / write). ``sft`` and ``grpo`` are the stage adapters with the prompt they were trained with:
    on llama.cpp as a GGUF LoRA over the same embedded base (free and grammar) when this checkout has
    the export module's writer, else on transformers (free decoding only, and the printed line says
    so). Greedy decoding everywhere, at most ``max_new_tokens`` per example when given (else the prompt
    spec's); predictions are cached per stage under ``out_dir/<stage>/``. The llama.cpp stages decode in
    ``threads`` processes (``None``: every usable core, as training counts them) of one llama.cpp thread
    each (``EvalConfig.n_jobs``; llama.cpp's own default is one thread less than the cores, so one thread
    here, where one process decoded the held-out sets before). ``base_from``: an earlier
    evaluation of the untrained model (notebook 10's before row) whose predictions the ``base`` stage
    copies where their cache key matches (the same model file, prompt, decoding and rows) instead of
    decoding them again. A trained stage the run does not have (no finished adapter, a stage after the run's
    ``final_stage``, a GRPO stage continuing another warm start) is not evaluated and has no rows: never an
    adapter left behind by an earlier run of the tag; an earlier evaluation's predictions of it under
    ``out_dir/<stage>/`` are moved to ``out_dir/replaced/``.
    """
    import pandas as pd

    from ..backends import load_backend
    from ..backends.llamacpp_backend import usable_cores
    from ..evaluate import EvalConfig, before_sets, evaluate_sets

    sets = before_sets(profile, root=data_root, roles=(role,), note=note)
    folder = run_dir(role, run_tag, models_root)
    modes = ("free",) if role == "answer" else ("free", "grammar")
    kw = {"n_threads": threads} if threads else {}
    processes = threads or usable_cores()  # threads None: every usable core, as in training
    tables, fallback = [], False
    for stage in stages:
        common = dict(n_per_set=n, embedder=embedder, seed=seed, max_new_tokens=max_new_tokens)
        if stage == "base":
            engine, model, cfg = "llamacpp", None, EvalConfig(backend="llamacpp", modes=modes, prompt="base", **common)
        else:
            adapter = folder / stage
            if not (adapter / "adapter_config.json").is_file() or not (adapter / "meta.json").is_file():
                note(f"{role}/{stage}: no finished adapter at {adapter}, not evaluated")
                _set_aside(Path(out_dir) / stage, note)
                continue
            why = _not_the_runs(folder, stage)
            if why:
                note(f"{role}/{stage}: {adapter} is not this run's {stage} stage ({why}), not evaluated")
                _set_aside(Path(out_dir) / stage, note)
                continue
            lora = _lora_gguf(adapter, Path(out_dir) / stage, note)
            if lora is not None:  # the prompt the run was trained with (its meta.json), as the agent uses it
                engine, model = "llamacpp", str(lora)
                cfg = EvalConfig(backend="llamacpp", model=model, modes=modes, prompt="auto",
                                 prompt_model=str(adapter), **common)
            else:
                fallback = True
                engine, model = "transformers", str(adapter)
                cfg = EvalConfig(backend="transformers", model=model, modes=("free",), prompt="auto", **common)
        reuse = [base_from] if stage == "base" and base_from else ()
        if engine == "llamacpp" and processes > 1:  # that many processes of one llama.cpp thread each
            cfg = dataclasses.replace(cfg, model=model, n_jobs=processes)
            df = evaluate_sets(sets, Path(out_dir) / stage, cfg, progress=progress, reuse=reuse)
        else:
            extra = {"batch_size": 8} if engine == "transformers" else {}
            with load_backend(engine, model, **kw, **extra) as b:
                df = evaluate_sets(sets, Path(out_dir) / stage, cfg, backend=b, progress=progress, reuse=reuse)
        df.insert(0, "engine", engine)
        df.insert(0, "stage", stage)
        tables.append(df)
    if fallback and role != "answer":
        note("the trained stages ran on transformers (free decoding only): grammar-constrained rows need the GGUF "
             "LoRA writer of the export module (notebooks/30_export_gguf, issue 11)")
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()


def stage_comparison(table, role: str, grpo_log: Sequence[dict] = ()) -> dict:
    """The primary held-out metric per stage (free decoding) and what GRPO's log says about it."""
    from ..data import dataset_name

    source, col = PRIMARY_METRIC[role]
    # the role's own set of that source only (gen_answer, gen_answer_smoke, ...): not every set whose name starts
    # with it (gen_answer_textworld, the TextWorld-register rows, is another set, not more rows of this one)
    names = {dataset_name(source, role, p) for p in ("default", "smoke", "full")}
    rows = table[(table["mode"] == "free") & table["set"].isin(names)]
    per_stage = {s: float(g[col].mean()) for s, g in rows.groupby("stage") if col in g and g[col].notna().any()}
    out: dict[str, Any] = {"metric": f"{source} {col}", "per_stage": per_stage}
    if "n" in rows:
        out["n"] = {s: int(g["n"].sum()) for s, g in rows.groupby("stage") if s in per_stage}
    if "sft" in per_stage and "grpo" in per_stage:
        out["grpo_minus_sft"] = per_stage["grpo"] - per_stage["sft"]
        out["grpo_beats_sft"] = per_stage["grpo"] > per_stage["sft"]
    if grpo_log:
        zero = [r["frac_reward_zero_std"] for r in grpo_log if r.get("frac_reward_zero_std") is not None]
        kl = [r["kl"] for r in grpo_log if r.get("kl") is not None]
        out["grpo_zero_variance_share_mean"] = sum(zero) / len(zero) if zero else None
        out["grpo_kl_last"] = kl[-1] if kl else None
        out["grpo_steps"] = len(grpo_log)
    return out


def example_table(out_dir: str | Path, *, stages: Sequence[str] = ("base", "sft", "grpo"), set_name: str | None = None,
                  n: int = 4, seed: int = 0):
    """``n`` held-out inputs with the gold answer and each stage's free-decoding output."""
    import numpy as np
    import pandas as pd

    from ..evaluate import evaluated_sets

    preds = {}
    for stage in stages:
        folder = Path(out_dir) / stage
        # the sets this stage's last evaluation scored: other predictions files there are left over (another profile)
        names = [s for s in evaluated_sets(folder) if set_name is None or s == set_name]
        files = [folder / f"predictions_{s}_free.jsonl" for s in names]
        files = [f for f in files if f.is_file()]
        if not files:
            continue
        lines = jsonl_lines(files[0].read_text())[1:]
        preds[stage] = {d["id"]: d for d in map(json.loads, lines)}
    if not preds:
        return pd.DataFrame()
    common = sorted(set.intersection(*(set(p) for p in preds.values())))
    rng = np.random.default_rng(seed)
    pick = [common[i] for i in sorted(rng.choice(len(common), size=min(n, len(common)), replace=False))]
    first = next(iter(preds.values()))
    return pd.DataFrame([{"input": first[i]["input"], "gold": first[i]["gold"],
                          **{s: preds[s][i]["output"] for s in preds}} for i in pick])
