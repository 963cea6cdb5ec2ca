"""Run the two stages for one role: supervised warm start (TRL ``SFTTrainer``), then GRPO.

:func:`train_role` is what the training notebook calls. Per stage it

1. skips the stage when its folder already holds a finished adapter of the same content hash
   (configuration, base model, data, prompt, seed);
2. otherwise resumes from the newest *complete* trainer checkpoint of that hash (a checkpoint is
   complete once its ``meta.json`` is written, the last file of a save), or starts fresh; a finished
   stage of another hash is moved aside to ``<run>/replaced/`` (nothing trained is deleted);
3. logs every step to ``log.csv`` (loss and tokens/s for SFT; every reward component, KL, the share
   of groups whose rewards have zero variance for GRPO);
4. saves the adapter atomically with its ``meta.json`` and updates the run's ``meta.json``.

The model runs on torch (CPU or CUDA); when torch sees a CUDA device and Unsloth is installed
(``pip install -e ".[gpu]"``), Unsloth loads the model and the LoRA (``backend="auto"``); asking for
``backend="unsloth"`` without CUDA is a clear error.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import repro
from ..roles import ROLE_SPECS, PromptSpec
from .config import PRIMARY_REWARD, TrainConfig, config_hash
from .layout import FORMAT, STAGES, read_run_meta, run_dir

__all__ = ["StageResult", "TrainingBackendError", "grpo_candidates", "grpo_pool", "grpo_rows",
           "last_complete_checkpoint", "load_role_data", "pick_backend", "record_metrics", "reuse_warm_start", "rows_hash", "sft_examples",
           "train_role", "train_stage", "training_rows"]

STAGE_FORMAT = "mags-trained-stage"


class TrainingBackendError(RuntimeError):
    """The requested training backend cannot run here (the message says what to do)."""


# ------------------------------------------------------------------------------------------------
# backend choice
def pick_backend(prefer: str = "auto") -> str:
    """``"unsloth"`` or ``"torch"``.

    ``auto``: Unsloth when torch sees a CUDA device and the ``unsloth`` package is installed, else
    plain torch (CPU or CUDA). ``unsloth`` without CUDA, or without the package, raises
    :class:`TrainingBackendError` saying what is missing.
    """
    if prefer not in ("auto", "torch", "unsloth"):
        raise ValueError(f"backend must be 'auto', 'torch' or 'unsloth', got {prefer!r}")
    import importlib.util

    import torch

    cuda = torch.cuda.is_available()
    has_unsloth = importlib.util.find_spec("unsloth") is not None
    if prefer == "unsloth":
        if not cuda:
            raise TrainingBackendError("backend='unsloth' needs a CUDA GPU, and torch sees none here: use "
                                       "backend='auto' or 'torch' to train on the CPU")
        if not has_unsloth:
            raise TrainingBackendError("backend='unsloth' but the unsloth package is not installed: "
                                       "pip install -e '.[gpu]'")
        return "unsloth"
    if prefer == "auto" and cuda and has_unsloth:
        return "unsloth"
    return "torch"


def _load_model(base_dir: Path, cfg: TrainConfig, backend: str, *, adapter: Path | None = None,
                layers: Sequence[int] = (), merge: Path | None = None):
    """The base model with a trainable LoRA (new, or ``adapter`` loaded to continue training); ``layers``: a
    new LoRA on those decoder layers only (torch backend; empty: every layer); ``merge``: a trained adapter
    merged into the base weights first, so the new LoRA learns on top of that model (torch backend)."""
    import torch

    lora = cfg.lora
    if merge is not None and (backend != "torch" or adapter is not None):
        raise ValueError("merge (a trained adapter under the new LoRA) needs the torch backend and a new LoRA")
    if backend == "unsloth":  # pragma: no cover - needs CUDA; not run on the CPU machines of this project
        # Unsloth patches transformers and TRL when imported: train_stage imports it before TRL.
        from unsloth import FastLanguageModel

        model, tok = FastLanguageModel.from_pretrained(model_name=str(base_dir), max_seq_length=cfg.sft.max_length,
                                                       dtype=None, load_in_4bit=False)
        model = FastLanguageModel.get_peft_model(model, r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                                 target_modules=list(lora.target_modules), bias="none",
                                                 use_gradient_checkpointing="unsloth", random_state=cfg.seed)
        if adapter is not None:  # continue the warm start: its weights into the same LoRA layout
            from peft import set_peft_model_state_dict
            from safetensors.torch import load_file

            set_peft_model_state_dict(model, load_file(str(adapter / "adapter_model.safetensors")))
        return model, _fix_special_tokens(tok, model)
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    tok = _fix_special_tokens(AutoTokenizer.from_pretrained(str(base_dir)), model)
    n_layers = model.config.num_hidden_layers
    if layers and max(layers) >= n_layers:
        raise ValueError(f"layers {list(layers)}: the model has {n_layers} decoder layers (0..{n_layers - 1})")
    if merge is not None:
        model = PeftModel.from_pretrained(model, str(merge)).merge_and_unload()
    if adapter is not None:
        model = PeftModel.from_pretrained(model, str(adapter), is_trainable=True)
    else:
        repro.seed_everything(cfg.seed)  # the LoRA init draws from torch's generator
        model = get_peft_model(model, LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                                 target_modules=list(lora.target_modules), bias="none",
                                                 task_type="CAUSAL_LM",
                                                 layers_to_transform=list(layers) if layers else None))
    return model, tok


def _fix_special_tokens(tok, model):
    """The end-of-turn token is the model's end of sequence; padding gets its own token.

    The SmolLM2 tokenizer converted from GGUF names ``<|im_start|>`` as its eos token while the model's
    generation config ends turns with ``<|im_end|>``. TRL appends the tokenizer's eos to completions
    and stops generation on it, so it must be the token that really ends an assistant turn.
    """
    eos = model.generation_config.eos_token_id
    eos = eos[0] if isinstance(eos, (list, tuple)) else eos
    if eos is not None and tok.eos_token_id != eos:
        tok.eos_token = tok.convert_ids_to_tokens(int(eos))
    if tok.pad_token is None or tok.pad_token_id == tok.eos_token_id:
        unk = tok.convert_ids_to_tokens(0)
        tok.pad_token = unk if unk is not None and 0 != tok.eos_token_id else tok.eos_token
    model.config.eos_token_id = tok.eos_token_id
    model.config.pad_token_id = tok.pad_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    return tok


# ------------------------------------------------------------------------------------------------
# data
def load_role_data(role: str, profile: str, *, root: str | Path | None = None,
                   extra: Sequence[str] = ()) -> dict:
    """The processed datasets of ``role``: ``{"gen": DatasetDict, "seed": DatasetDict | None,
    "seed_skipped": str | None, "extra": {name: DatasetDict}, "hashes": {name: content hash},
    "generation": the GenerationConfig that built the generated one (None if its card records none)}``.

    The seed datasets are optional: when ``data/processed/seed_<role>[_<profile>]`` does not exist,
    ``seed`` is ``None`` and ``seed_skipped`` is the one line saying so and how to add them.
    ``extra``: more dataset folders (``SFTConfig.extra_data``); a missing one is an error saying how to
    build it, and a dataset of another role is refused.
    """
    from ..data import dataset_name, generation_from_card, load_card, load_processed, processed_root

    cards = {}
    for name in extra:  # checked before anything loads
        if not (processed_root(root) / name / "data").exists():
            hint = (" (mags_lib.data.textworld.build_textworld_answer; notebook 20 builds it when its sft parameter's "
                    "extra_data names it)"
                    if name.startswith("gen_answer_textworld") else "")
            raise FileNotFoundError(f"extra training data {name!r} is not in {processed_root(root)}: build it first"
                                    f"{hint}, or drop it from SFTConfig.extra_data")
        card = load_card(name, root=root)
        if (card.get("role") == "answer") != (role == "answer"):  # answer cards say so; ask / write ones do not
            raise ValueError(f"extra training data {name!r} holds {card.get('role') or 'ask/write'} rows, not {role} "
                             "rows: mix only datasets of the role")
        cards[name] = card

    gen_name = dataset_name("gen", role, profile)
    gen_card = load_card(gen_name, root=root)
    out: dict[str, Any] = {"gen": load_processed(gen_name, root=root), "seed": None, "seed_skipped": None,
                           "extra": {}, "hashes": {gen_name: gen_card["content_hash"]},
                           "generation": generation_from_card(gen_card)}
    for name, card in cards.items():
        out["extra"][name] = load_processed(name, root=root)
        # ask and write datasets share a card without a role: their rows say it
        roles = {r for split in out["extra"][name].values() for r in split["role"]} - {role, None}
        if roles:
            raise ValueError(f"extra training data {name!r} holds {', '.join(sorted(map(str, roles)))} rows, not "
                             f"{role} rows: mix only datasets of the role")
        out["hashes"][name] = card["content_hash"]
    if role == "answer":
        return out
    seed_name = dataset_name("seed", role, profile)
    if (processed_root(root) / seed_name / "data").exists():
        out["seed"] = load_processed(seed_name, root=root)
        out["hashes"][seed_name] = load_card(seed_name, root=root)["content_hash"]
    else:
        out["seed_skipped"] = (f"seed {role} data skipped: no data/processed/{seed_name} (notebook 10 imports "
                               "it when ../shared/data/seed_syn_dual exists; put the seed's seed_syn_dual there "
                               "or pass -p seed_path=... to notebook 10)")
    return out


def _take(rows: list[dict], n: int, rng) -> list[dict]:
    if n < 0 or n >= len(rows):
        return list(rows)
    idx = sorted(rng.choice(len(rows), size=n, replace=False).tolist())
    return [rows[i] for i in idx]


def training_rows(data: dict, cfg: TrainConfig) -> list[dict]:
    """The rows the warm start learns from: ``n_generated`` generated and ``n_seed`` seed train rows,
    shuffled with the run's seed."""
    import numpy as np

    rng = np.random.default_rng([cfg.seed, 1])
    gen = data["gen"]["train"].to_list()
    rows = _take(gen, cfg.sft.n_generated or -1, rng)
    if data.get("seed") is not None and cfg.sft.n_seed != 0:
        rows += _take(data["seed"]["train"].to_list(), cfg.sft.n_seed, rng)
    for name, n in cfg.sft.extra_data.items():
        if name not in (data.get("extra") or {}):
            raise ValueError(f"SFTConfig.extra_data names {name!r}, which the loaded data lacks: load it with "
                             f"load_role_data(..., extra={sorted(cfg.sft.extra_data)})")
        rows += _take(data["extra"][name]["train"].to_list(), n, rng)
    order = rng.permutation(len(rows))
    return [rows[i] for i in order]


Prompts = PromptSpec | Mapping[str, PromptSpec]  # one role's, or role -> spec (one model for several roles)


def _prompt_of(row: dict, prompt: Prompts) -> PromptSpec:
    """The prompt spec of ``row``: ``prompt`` itself, or ``prompt[row["role"]]`` for a joint run."""
    if isinstance(prompt, PromptSpec):
        return prompt
    try:
        return prompt[row["role"]]
    except KeyError:
        raise ValueError(f"row {row.get('id', '?')!r} of role {row.get('role')!r} has no prompt among the joint "
                         f"run's roles {sorted(prompt)}") from None


def _prompt_ident(prompt: Prompts) -> dict:
    return prompt.to_dict() if isinstance(prompt, PromptSpec) else {r: p.to_dict() for r, p in sorted(prompt.items())}


def _messages(row: dict, prompt: Prompts) -> list[dict]:
    prompt = _prompt_of(row, prompt)
    facts = row.get("memory") if prompt.role == "answer" else None
    return prompt.messages(row["input"], facts=facts or ([] if prompt.role == "answer" else None))


def sft_examples(rows: Sequence[dict], prompt: Prompts) -> list[dict]:
    """TRL conversational prompt-completion examples (the loss covers the completion only).

    >>> from mags_lib.roles import ROLE_SPECS
    >>> ex = sft_examples([{"input": "Blorps eat lemons.", "response": "<memory_write>Blorps,eat,lemons"
    ...                     "</memory_write>"}], ROLE_SPECS["write"].trained)[0]
    >>> [m["role"] for m in ex["prompt"]], ex["completion"][0]["role"]
    (['system', 'user'], 'assistant')
    """
    return [{"prompt": _messages(r, prompt), "completion": [{"role": "assistant", "content": r["response"]}]}
            for r in rows]


def grpo_rows(rows: Sequence[dict], prompt: Prompts) -> list[dict]:
    """GRPO prompts with the columns the rewards read (``role``, ``input``: the question or text, whose words
    the answer role's rewards do not count as a guess, ``response``, ``context``, ``gold_facts``, ``aliases``)."""
    out = [{"prompt": _messages(r, prompt), "role": r["role"], "input": r["input"], "response": r["response"],
            "context": r.get("context") or [], "gold_facts": r.get("gold_facts") or [],
            "aliases": list(r.get("aliases") or [])} for r in rows]
    if any("scenario" in r for r in rows):  # outcome rows (mags_lib.data.outcome): every row must have one
        for o, r in zip(out, rows):
            if "scenario" not in r:
                raise ValueError(f"row {r.get('id', '?')!r} has no 'scenario' while others do: mix no outcome rows "
                                 "with ordinary ones")
            o["scenario"] = r["scenario"] if isinstance(r["scenario"], str) else json.dumps(r["scenario"])
    return out


def _chat_ids(tok, messages: list[dict], **kw) -> list[int]:
    """Token ids of a chat (transformers 5 returns a BatchEncoding unless ``return_dict=False``)."""
    return list(tok.apply_chat_template(messages, tokenize=True, return_dict=False, **kw))


def _token_lengths(tok, examples: Sequence[dict]) -> list[int]:
    return [len(_chat_ids(tok, ex["prompt"] + ex["completion"])) for ex in examples]


# ------------------------------------------------------------------------------------------------
# logging and checkpoints
class _Callbacks:
    """Trainer callbacks: a CSV row per log (with wall time and tokens/s) and a meta.json per checkpoint."""

    @staticmethod
    def make(log_path: Path, ckpt_meta: dict, resume_step: int):
        from transformers import TrainerCallback

        class CsvLog(TrainerCallback):
            def __init__(self) -> None:
                self.t_last = None
                self.tokens_last = None
                self.fields: list[str] | None = None
                _truncate_log(log_path, resume_step)

            def on_train_begin(self, args, state, control, **kw):
                self.t_last = time.perf_counter()

            def on_log(self, args, state, control, logs=None, **kw):
                if not logs or "train_runtime" in logs:
                    return
                now = time.perf_counter()
                row = {"step": state.global_step, "time": round(time.time(), 3)}
                row.update({k: float(v) for k, v in logs.items() if isinstance(v, (int, float))})
                tokens = row.get("num_tokens")
                if tokens is not None and self.tokens_last is not None and now > self.t_last:
                    row["tokens_per_s"] = (tokens - self.tokens_last) / (now - self.t_last)
                row["seconds"] = now - self.t_last
                self.t_last, self.tokens_last = now, tokens
                _append_csv(log_path, row)

        class CkptMeta(TrainerCallback):
            def on_save(self, args, state, control, **kw):
                folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
                if folder.is_dir():
                    repro.atomic_write_text(folder / "meta.json", json.dumps(
                        {**ckpt_meta, "step": state.global_step, "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S")},
                        indent=1))

        return [CsvLog(), CkptMeta()]


def _append_csv(path: Path, row: dict) -> None:
    rows = _read_csv(path)
    rows.append(row)
    fields = list(dict.fromkeys(k for r in rows for k in r))
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, path)


def _read_csv(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _truncate_log(path: Path, step: int) -> None:
    """Drop log rows after ``step`` (steps of an interrupted run that resuming will repeat)."""
    rows = _read_csv(path)
    keep = [r for r in rows if float(r.get("step") or 0) <= step]
    if not keep:
        path.unlink(missing_ok=True)
    elif len(keep) != len(rows):
        path.unlink()
        for r in keep:
            _append_csv(path, r)


def last_complete_checkpoint(folder: Path, content_hash: str) -> Path | None:
    """The newest ``checkpoint-<step>`` of ``folder`` whose ``meta.json`` says ``content_hash``.

    Checkpoints without a ``meta.json`` (a save interrupted before its end) or of another hash are
    removed, so the trainer never resumes from them.
    """
    if not folder.is_dir():
        return None
    best, best_step = None, -1
    for ck in folder.glob("checkpoint-*"):
        try:
            meta = json.loads((ck / "meta.json").read_text())
        except (OSError, ValueError):
            meta = None
        if not meta or meta.get("content_hash") != content_hash:
            shutil.rmtree(ck, ignore_errors=True)
            continue
        if meta["step"] > best_step:
            best, best_step = ck, meta["step"]
    return best


# ------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class StageResult:
    """What one stage did: its folder, whether it was skipped (already done), steps, timings."""

    stage: str
    folder: Path
    skipped: bool
    resumed_from: int | None
    steps: int
    seconds: float
    metrics: dict


def _base_model_id(base_dir: Path) -> dict:
    manifest = base_dir / "mags_manifest.json"
    info = {"path": str(base_dir), "name": base_dir.name}
    try:
        info["sha256"] = json.loads(manifest.read_text()).get("model.safetensors_sha256")
    except (OSError, ValueError):
        pass
    return info


def _finish_adapter(model, stage_folder: Path, meta: dict) -> None:
    """Save the trained adapter next to the checkpoints, then its meta.json (the completion marker)."""
    tmp = stage_folder / ".adapter.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    kw = {"selected_adapters": ["default"]} if "ref" in getattr(model, "peft_config", {}) else {}
    model.save_pretrained(str(tmp), **kw)
    (stage_folder / "meta.json").unlink(missing_ok=True)
    for p in tmp.iterdir():
        os.replace(p, stage_folder / p.name)
    tmp.rmdir()
    repro.atomic_write_text(stage_folder / "meta.json", json.dumps(meta, indent=1, default=str))


def _stage_done(folder: Path, content_hash: str) -> dict | None:
    try:
        meta = json.loads((folder / "meta.json").read_text())
    except (OSError, ValueError):
        return None
    if meta.get("content_hash") == content_hash and (folder / "adapter_config.json").is_file():
        return meta
    return None


def _move_aside(folder: Path, note: Callable[[str], None]) -> None:
    """A finished stage of another configuration goes to ``<run>/replaced/`` (never deleted)."""
    if (folder / "meta.json").is_file():
        dest = folder.parent / "replaced" / f"{folder.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(folder, dest)
        note(f"{folder.name}: a finished stage of another configuration was moved to {dest}")


def rows_hash(rows: Sequence[dict]) -> str:
    """sha256 (16 hex digits) of the rows' ids, inputs and responses, in order."""
    import hashlib

    h = hashlib.sha256()
    for r in rows:
        h.update(f"{r.get('id')}\x00{r['input']}\x00{r['response']}\n".encode())
    return h.hexdigest()[:16]


def _text_progress(trainer: Any) -> None:
    """In the pipeline's batch kernels (``MAGS_BATCH_KERNEL``), the trainer's text progress bar.

    Inside any Jupyter kernel transformers shows training progress as an HTML table, which in a batch
    run reaches neither the runner's output nor its log: a 40-minute warm start then showed no sign of
    life. Interactive notebooks keep the table.
    """
    if not os.environ.get("MAGS_BATCH_KERNEL"):
        return
    from transformers.trainer_callback import ProgressCallback
    from transformers.utils.notebook import NotebookProgressCallback

    if any(isinstance(c, NotebookProgressCallback) for c in trainer.callback_handler.callbacks):
        trainer.remove_callback(NotebookProgressCallback)
        trainer.add_callback(ProgressCallback)


def _trl_common(cfg: TrainConfig, stage_cfg, out: Path, progress: bool, backend: str) -> dict:
    import torch

    cuda = torch.cuda.is_available()
    return dict(output_dir=str(out / "checkpoints"), max_steps=stage_cfg.max_steps, learning_rate=stage_cfg.learning_rate,
                logging_steps=stage_cfg.logging_steps, save_steps=stage_cfg.save_steps,
                save_total_limit=stage_cfg.save_total_limit, seed=cfg.seed, data_seed=cfg.seed,
                report_to=[], disable_tqdm=not progress, use_cpu=not cuda, dataloader_num_workers=0,
                gradient_accumulation_steps=1, optim="adamw_torch", save_only_model=False,
                # TRL turns activation checkpointing on by default: one more forward pass per step to save
                # memory a 135M model does not need (24 GiB here); Unsloth brings its own.
                gradient_checkpointing=backend == "unsloth")


def _bf16_ok(requested: bool) -> bool:
    """bf16 autocast only where the hardware computes in bf16 (CUDA with bf16, or CPUs with
    avx512_bf16 / AMX); elsewhere it is emulated and slower than fp32."""
    if not requested:
        return False
    import torch

    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def _stage_ident(stage: str, cfg: TrainConfig, rows: Sequence[dict], *, base_dir: Path, prompt: Prompts,
                 data_hashes: dict, init_adapter: Path | None) -> dict:
    """What names a stage's content (its hash decides skip / resume / replace)."""
    stage_cfg = dataclasses.asdict(cfg.sft if stage == "sft" else cfg.grpo)
    for name in ("extra_data", "init_from"):  # added 2026-11-29: at their defaults they leave earlier runs' hashes
        if name in stage_cfg and not stage_cfg[name]:
            del stage_cfg[name]
    return {"stage": stage, "stage_config": stage_cfg, "lora": dataclasses.asdict(cfg.lora),
            "seed": cfg.seed, "role": cfg.role, "base": _base_model_id(base_dir), "data": data_hashes,
            "prompt": _prompt_ident(prompt), "n_rows": len(rows), "rows": rows_hash(rows),
            "init": json.loads((init_adapter / "meta.json").read_text())["content_hash"] if init_adapter else None}


def stage_hash(ident: dict) -> str:
    """The content hash of a stage's identity (:func:`_stage_ident`). The base model counts by its weights'
    sha256, not by the folder it was read from, so a models folder copied or moved elsewhere (another clone,
    another ``models_root``) keeps its finished stages; without a sha256 the path is all there is and stays.

    >>> ident = {"stage": "sft", "base": {"path": "/a/models/base/m", "name": "m", "sha256": "ab12"}}
    >>> stage_hash(ident) == stage_hash({**ident, "base": {**ident["base"], "path": "/b/models/base/m"}})
    True
    >>> stage_hash(ident) == stage_hash({**ident, "base": {**ident["base"], "sha256": "cd34"}})
    False
    """
    base = dict(ident.get("base") or {})
    if base.get("sha256"):
        base.pop("path", None)
    return config_hash({**ident, "base": base})


def reuse_warm_start(source: Path, folder: Path, digest: str, note: Callable[[str], None] = print) -> bool:
    """Copy the finished warm start ``source`` (``models/<role>/<tag>/sft``) to ``folder`` when its content
    hash is ``digest`` (same configuration, data and base), so variants of one role (training objectives,
    ablations) continue one warm start instead of each training its own. Returns whether ``folder`` now
    holds it; a source of another content is a ``ValueError`` (never a silent retrain)."""
    if _stage_done(folder, digest) is not None:
        return True
    if _stage_done(source, digest) is None:
        try:
            got = json.loads((source / "meta.json").read_text()).get("content_hash")
        except (OSError, ValueError):
            got = None
        raise ValueError(f"warm start {source} is {'missing or unfinished' if got is None else f'of another content (hash {got})'}; "
                         f"this run needs hash {digest}: train the warm start with notebook 20 (same profile and "
                         "seed), or run without reusing it")
    tmp = folder.parent / f".{folder.name}.copy-tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for p in source.iterdir():  # the adapter and its meta; not the checkpoints (the stage is finished)
        if p.is_file():
            shutil.copy2(p, tmp / p.name)
    _move_aside(folder, note)
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)
    note(f"{folder.parent.parent.name}/{folder.parent.name}: warm start reused from {source}")
    return True


def train_stage(stage: str, cfg: TrainConfig, rows: Sequence[dict], folder: Path, *, base_dir: Path,
                prompt: Prompts, data_hashes: dict, init_adapter: Path | None = None,
                backend: str = "auto", progress: bool = True, note: Callable[[str], None] = print,
                stop_after: int | None = None, callbacks: Sequence = ()) -> StageResult:
    """Train (or resume, or skip) one stage into ``folder``.

    Parameters
    ----------
    stage : {"sft", "grpo"}
    rows : list of dict
        Dataset rows of the role (see :mod:`mags_lib.data`).
    prompt : PromptSpec or dict
        The role's trained prompt, or ``{role: spec}`` when one model learns several roles
        (:mod:`~mags_lib.training.joint`): each row is then prompted by its own ``role``'s spec.
    init_adapter : Path, optional
        GRPO: the warm-start adapter it continues (the KL reference is a frozen copy of it); SFT: a finished
        adapter the warm start continues (``SFTConfig.init_from``).
    stop_after : int, optional
        Stop after this many steps (the run stays resumable and is not marked finished).
    callbacks : list of transformers.TrainerCallback, optional
        Extra trainer callbacks (progress displays, tests).
    """
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")
    if stage == "grpo" and (cfg.grpo is None or init_adapter is None):
        raise ValueError("the grpo stage needs cfg.grpo and the warm-start adapter (init_adapter)")
    stage_cfg = cfg.sft if stage == "sft" else cfg.grpo
    backend = pick_backend(backend)
    ident = _stage_ident(stage, cfg, rows, base_dir=base_dir, prompt=prompt, data_hashes=data_hashes,
                         init_adapter=init_adapter)
    digest = stage_hash(ident)
    done = _stage_done(folder, digest)
    if done is not None:
        note(f"{cfg.role}/{stage}: already trained with this configuration ({folder}), skipped")
        return StageResult(stage, folder, True, None, done.get("steps", 0), 0.0, done.get("train_metrics", {}))
    _move_aside(folder, note)
    folder.mkdir(parents=True, exist_ok=True)
    ckpt = last_complete_checkpoint(folder / "checkpoints", digest)
    resume_step = json.loads((ckpt / "meta.json").read_text())["step"] if ckpt else 0
    if ckpt:
        note(f"{cfg.role}/{stage}: resuming from {ckpt.name}")
    if cfg.threads:
        import torch

        torch.set_num_threads(cfg.threads)
    if backend == "unsloth":  # pragma: no cover - needs CUDA
        import unsloth  # noqa: F401  (before TRL, so its patches apply)
    model, tok = _load_model(base_dir, cfg, backend, adapter=init_adapter)
    callbacks = _Callbacks.make(folder / "log.csv", {"content_hash": digest, "stage": stage}, resume_step) + list(callbacks)
    if stop_after is not None:
        callbacks.append(_StopAfter(stop_after))
    t0 = time.perf_counter()
    common = _trl_common(cfg, stage_cfg, folder, progress, backend)
    bf16 = _bf16_ok(getattr(stage_cfg, "bf16", True))
    from datasets import Dataset

    if stage == "sft":
        from trl import SFTConfig as TRLSFTConfig
        from trl import SFTTrainer

        examples = sft_examples(rows, prompt)
        lengths = _token_lengths(tok, examples)
        keep = [i for i, n in enumerate(lengths) if n <= stage_cfg.max_length]
        if len(keep) < len(examples):
            note(f"{cfg.role}/sft: {len(examples) - len(keep)} of {len(examples)} examples are longer than "
                 f"max_length={stage_cfg.max_length} tokens and were left out")
        ds = Dataset.from_list([{**examples[i], "length": lengths[i]} for i in keep])
        args = TRLSFTConfig(**common, per_device_train_batch_size=stage_cfg.batch_size,
                            lr_scheduler_type="cosine", warmup_steps=stage_cfg.warmup_ratio,
                            weight_decay=stage_cfg.weight_decay, max_length=stage_cfg.max_length,
                            completion_only_loss=True, bf16=bf16,
                            train_sampling_strategy="random" if stage_cfg.batching == "random" else "group_by_length",
                            length_column_name="length", dataset_num_proc=None)
        trainer_cls = SFTTrainer
        if stage_cfg.batching in ("shuffled_length", "sorted_length"):
            from .sampling import ShuffledLengthSampler, SortedLengthSampler

            sampler_cls = ShuffledLengthSampler if stage_cfg.batching == "shuffled_length" else SortedLengthSampler

            class _LengthSFT(SFTTrainer):  # batches of similar lengths, their order seeded by (seed, epoch)
                def _get_train_sampler(self, train_dataset=None):
                    data = self.train_dataset if train_dataset is None else train_dataset
                    lengths = (data["length"] if "length" in data.column_names
                               else [len(ids) for ids in data["input_ids"]])
                    return sampler_cls(lengths, self.args.train_batch_size * self.args.gradient_accumulation_steps,
                                       seed=cfg.seed)

            trainer_cls = _LengthSFT
        # Unsloth checkpoints activations (no key/value cache to continue from): the prefix runs per row there
        share = stage_cfg.share_prefix and backend != "unsloth"
        if stage_cfg.loss_average == "sequence" or share:
            from .losses import sequence_mean_loss, token_mean_loss

            class _ChunkedSFT(trainer_cls):  # the loss of losses.py: chunks of similar length, the prefix once
                def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
                    if return_outputs:
                        raise NotImplementedError("the chunked loss (losses.completion_nll) computes no logits "
                                                  "to return")
                    if stage_cfg.loss_average == "sequence":  # each row's mean loss, then the mean over rows
                        loss, counts = sequence_mean_loss(model, inputs, inputs["labels"], share_prefix=share)
                    else:  # TRL's token mean
                        loss, counts = token_mean_loss(model, inputs, inputs["labels"],
                                                       num_items_in_batch=num_items_in_batch, share_prefix=share)
                    if model.training:  # what TRL's compute_loss logs (tokens seen, token accuracy)
                        self._total_train_tokens += int(inputs["attention_mask"].sum())
                        self._metrics["train"]["num_tokens"] = [self._total_train_tokens]
                        self._metrics["train"]["mean_token_accuracy"].append(
                            counts["n_correct"] / max(1, counts["n_tokens"]))
                    return loss

            trainer_cls = _ChunkedSFT
        trainer = trainer_cls(model=model, args=args, train_dataset=ds, processing_class=tok, callbacks=callbacks)
    else:
        from trl import GRPOConfig as TRLGRPOConfig
        from trl import GRPOTrainer

        from ..rewards import get_reward

        g = stage_cfg
        funcs = [get_reward(name, **g.reward_options.get(name, {})) for name in g.rewards]
        ds = Dataset.from_list(grpo_rows(rows, prompt))
        n = g.prompts_per_step * g.num_generations
        args = TRLGRPOConfig(**common, per_device_train_batch_size=n,
                             num_generations=g.num_generations, steps_per_generation=1, beta=g.beta,
                             temperature=g.temperature, max_completion_length=g.max_completion_length,
                             reward_weights=list(g.rewards.values()), lr_scheduler_type="constant", bf16=bf16,
                             disable_dropout=True, log_completions=False)
        trainer = GRPOTrainer(model=model, reward_funcs=funcs, args=args, train_dataset=ds, processing_class=tok,
                              callbacks=callbacks)
        from .throughput import grpo_profile

        spent = grpo_profile(trainer)  # seconds in generation, log-prob forwards, rewards
    if progress:
        _text_progress(trainer)
    if ckpt is not None:
        _load_policy_of(trainer.model, ckpt)
    t_train = time.perf_counter()
    trainer.train(resume_from_checkpoint=str(ckpt) if ckpt else None)
    seconds = time.perf_counter() - t0
    if stage == "grpo":
        train_s = time.perf_counter() - t_train
        rest = train_s - spent["generate"] - spent["logprob_forward"] - spent["rewards"]
        time_split = {k: round(v, 2) for k, v in spent.items() if k != "calls"} | {
            "backward_optimizer_other": round(rest, 2), "train_seconds": round(train_s, 2),
            "steps_this_process": int(trainer.state.global_step) - resume_step}
    else:
        time_split = None
    steps = int(trainer.state.global_step)
    if steps < stage_cfg.max_steps:  # stopped early (stop_after): resumable, not finished
        return StageResult(stage, folder, False, resume_step or None, steps, seconds, {})
    log = _read_csv(folder / "log.csv")
    metrics = _summarise_log(log, stage, cfg)
    meta = {"format": STAGE_FORMAT, "role": cfg.role, "stage": stage, "content_hash": digest, **ident,
            "steps": steps, "resumed_from": resume_step or None, "wall_time_s": round(seconds, 1),
            "train_metrics": metrics, "time_split": time_split, "backend": backend, "bf16": bf16, "git_sha": repro.git_sha(),
            "packages": repro.package_versions(), "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    _finish_adapter(trainer.model, folder, meta)
    del trainer, model
    return StageResult(stage, folder, False, resume_step or None, steps, seconds, metrics)


def _load_policy_of(model: Any, ckpt: Path) -> None:
    """The trained adapter of checkpoint ``ckpt`` into ``model``'s active adapter, where transformers would not.

    A GRPO checkpoint holds the policy's adapter at its top level and TRL's reference copy of the warm start in
    ``ref/``; transformers' resume loads only the subfolder adapters when a checkpoint has any, so the policy
    went on from the warm start's weights (with the optimizer state of the checkpoint's step). Loaded here; a
    checkpoint without subfolder adapters is left to transformers, which loads it itself.
    """
    weights = ckpt / "adapter_model.safetensors"
    subfolders = [d for d in ckpt.iterdir() if d.is_dir() and (d / "adapter_config.json").is_file()]
    if not weights.is_file() or not subfolders or not hasattr(model, "active_adapter"):
        return
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    set_peft_model_state_dict(model, load_file(str(weights)), adapter_name=model.active_adapter)


def _StopAfter(n: int):  # noqa: N802 - a factory that returns a TrainerCallback instance
    from transformers import TrainerCallback

    class StopAfter(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            if state.global_step >= n:
                control.should_training_stop = True
                control.should_save = True
            return control

    return StopAfter()


def _summarise_log(log: list[dict], stage: str, cfg: TrainConfig) -> dict:
    """First/last values of the logged curves (loss for SFT; rewards, KL, zero-std share for GRPO)."""
    def col(name):
        return [float(r[name]) for r in log if r.get(name) not in (None, "")]

    out: dict[str, Any] = {"log_rows": len(log)}
    keys = ["loss", "mean_token_accuracy", "tokens_per_s"] if stage == "sft" else (
        ["reward", "kl", "frac_reward_zero_std", "completions/mean_length"]
        + [f"rewards/{_reward_name(n)}/mean" for n in (cfg.grpo.rewards if cfg.grpo else {})])
    for k in keys:
        v = col(k)
        if v:
            head = v[: max(1, len(v) // 5)]
            tail = v[-max(1, len(v) // 5):]
            out[k] = {"first": sum(head) / len(head), "last": sum(tail) / len(tail), "n": len(v)}
    return out


def _reward_name(name: str) -> str:
    from ..rewards import REGISTRY

    return REGISTRY[name].__name__


# ------------------------------------------------------------------------------------------------
def _select_hard(rows: list[dict], cfg: TrainConfig, base_dir: Path, adapter: Path, prompt: Prompts,
                 n: int) -> list[dict]:
    """``n`` GRPO prompts, three quarters the ones the warm-start model fits worst (highest
    completion loss, teacher-forced: one forward pass each), the rest at random."""
    import numpy as np
    import torch

    from ..backends.transformers_backend import TransformersBackend

    rng = np.random.default_rng([cfg.seed, 3])
    if len(rows) <= n:
        return rows
    b = TransformersBackend(str(adapter), device="cuda" if torch.cuda.is_available() else "cpu")
    try:
        losses = []
        for r in rows:
            msgs = _messages(r, prompt)
            p_ids = _chat_ids(b.tokenizer, msgs, add_generation_prompt=True)
            full = _chat_ids(b.tokenizer, msgs + [{"role": "assistant", "content": r["response"]}])
            ids = torch.tensor([full], device=b.device)
            with torch.inference_mode():
                logits = b.model(input_ids=ids, logits_to_keep=len(full) - len(p_ids) + 1).logits[0, :-1]
            target = ids[0, len(p_ids):]
            losses.append(float(torch.nn.functional.cross_entropy(logits.float(), target)))
    finally:
        b.close()
    order = np.argsort(-np.asarray(losses))
    n_hard = (3 * n) // 4
    hard = order[:n_hard].tolist()
    rest = [i for i in range(len(rows)) if i not in set(hard)]
    pick = hard + rng.choice(rest, size=n - n_hard, replace=False).tolist()
    return [rows[i] for i in sorted(pick)]


def _cached_selection(folder: Path, cand: list[dict], cfg: TrainConfig, base_dir: Path, prompt: Prompts,
                      n: int, note: Callable[[str], None], cache_name: str = "grpo_prompts.json") -> list[dict]:
    """:func:`_select_hard`, cached in ``<run>/<cache_name>`` by warm start and candidates."""
    sft_hash = json.loads((folder / "sft" / "meta.json").read_text())["content_hash"]
    key = config_hash({"sft": sft_hash, "cand": rows_hash(cand), "n": n})
    cache = folder / cache_name
    try:
        saved = json.loads(cache.read_text())
        if saved.get("key") == key:
            by_id = {r["id"]: r for r in cand}
            return [by_id[i] for i in saved["ids"]]
    except (OSError, ValueError, KeyError):
        pass
    t0 = time.perf_counter()
    picked = _select_hard(cand, cfg, base_dir, folder / "sft", prompt, n)
    repro.atomic_write_text(cache, json.dumps({"key": key, "ids": [r["id"] for r in picked]}))
    note(f"{cfg.role}/grpo: picked {len(picked)} of {len(cand)} prompts, hardest first by the warm start's "
         f"loss ({time.perf_counter() - t0:.0f} s)")
    return picked


def grpo_pool(config: TrainConfig, data: dict, *, progress: bool = False) -> list[dict]:
    """The rows GRPO draws its prompts from: the role's generated train split (and the seed's, ask / write),
    or, when the rewards include an outcome reward, mini-scenarios of the same training worlds
    (:func:`mags_lib.data.outcome.build_outcome_rows`, ``n_prompts`` of them, with a ``scenario`` column)."""
    g = config.grpo
    if g is None:
        raise ValueError("grpo_pool needs a config with a GRPO stage")
    if any(name.startswith("outcome_") for name in g.rewards):
        from ..data import outcome

        gen = data.get("generation")
        if gen is None:
            raise ValueError("an outcome objective draws its mini-scenarios from the training worlds of the role's "
                             "generated dataset: pass data with its GenerationConfig (load_role_data gives it as "
                             "data['generation'] when the dataset's card records it: rebuild the datasets with "
                             "mags_lib.data.build_all if it is None)")
        # the dataset's worlds (its card's seed and sizes), rendered with the run's seed
        worlds = outcome.training_worlds(gen.worlds_train, seed=gen.seed, config=gen.world)
        ocfg = outcome.OutcomeConfig(n=g.n_prompts, worlds=len(worlds), seed=config.seed, roles=(config.role,))
        return outcome.build_outcome_rows(ocfg, worlds=worlds, progress=progress)[config.role]
    pool = data["gen"]["train"].to_list()
    if data.get("seed") is not None and config.role != "answer":
        pool += data["seed"]["train"].to_list()
    return pool


def grpo_candidates(config: TrainConfig, data: dict, base_dir: Path, *, note: Callable[[str], None] = print,
                    progress: bool = False) -> list[dict]:
    """GRPO's candidate prompts: ``n_prompts`` rows of :func:`grpo_pool` whose gold answer fits
    ``max_completion_length`` tokens, drawn with the run's seed."""
    import numpy as np
    from transformers import AutoTokenizer

    g = config.grpo
    pool = grpo_pool(config, data, progress=progress)
    tok = AutoTokenizer.from_pretrained(str(base_dir))
    fits = [r for r in pool if len(tok(r["response"], add_special_tokens=False)["input_ids"])
            < g.max_completion_length]
    if len(fits) < len(pool):
        note(f"{config.role}/grpo: {len(pool) - len(fits)} of {len(pool)} training rows have a gold answer longer "
             f"than max_completion_length={g.max_completion_length} tokens and are not GRPO prompts")
    rng = np.random.default_rng([config.seed, 2])
    return _take(fits, min(len(fits), g.n_prompts), rng)


def train_role(role: str, *, run_tag: str, config: TrainConfig, data: dict | None = None,
               models_root: str | Path | None = None, data_root: str | Path | None = None,
               backend: str = "auto", progress: bool = True, note: Callable[[str], None] = print,
               warm_start: str | None = None, callbacks: Sequence = ()) -> dict:
    """Warm start then GRPO for ``role`` into ``models/<role>/<run_tag>/``; returns the run's meta.

    Stages already finished with the same content are skipped; an interrupted stage resumes from its
    last complete checkpoint. The run's ``meta.json`` is rewritten after each stage. ``warm_start``: the
    run tag of a finished run of this role whose warm start has the same content; it is copied, not
    retrained (variants of the GRPO stage then differ in nothing else). When the GRPO rewards include
    an outcome reward (``outcome_write`` / ``outcome_ask``), GRPO's prompts are mini-scenarios of the
    training worlds (:func:`mags_lib.data.outcome.build_outcome_rows`), never held-out ones. ``callbacks``:
    extra trainer callbacks for both stages (progress displays, a time limit); when one stops the warm start
    early, GRPO is not started (it needs the finished warm start; the run's meta shows the steps done).
    """
    from ..models import base_model_dir

    if config.role != role:
        raise ValueError(f"config is for role {config.role!r}, not {role!r}")
    t0 = time.perf_counter()
    folder = run_dir(role, run_tag, models_root)
    init = None
    if config.sft.init_from is not None:  # continue a finished run's final adapter (checked before anything is
        # loaded, converted or created: a wrong tag fails at once and leaves no run folder behind)
        if warm_start is not None:
            raise ValueError("init_from (continue another run's adapter) and warm_start (reuse its warm start) "
                             "exclude each other")
        src = read_run_meta(run_dir(role, config.sft.init_from, models_root))
        if src is None:
            raise FileNotFoundError(f"init_from={config.sft.init_from!r}: no finished {role} run at "
                                    f"{run_dir(role, config.sft.init_from, models_root)}; train it first")
        init = run_dir(role, config.sft.init_from, models_root) / src["final_stage"]
        if init.parent.resolve() == folder.resolve():  # its warm start or its GRPO stage: this run's own
            raise ValueError("init_from names this run itself: give the variant its own run tag")
    data = data if data is not None else load_role_data(role, config.profile, root=data_root,
                                                        extra=tuple(config.sft.extra_data))
    if data.get("seed_skipped"):
        note(data["seed_skipped"])
    base_dir = base_model_dir(models_root)
    prompt = ROLE_SPECS[role].trained
    rows = training_rows(data, config)
    if warm_start is not None:  # checked (and copied) before the run folder exists: a wrong tag leaves nothing
        ident = _stage_ident("sft", config, rows, base_dir=base_dir, prompt=prompt, data_hashes=data["hashes"],
                             init_adapter=None)
        reuse_warm_start(run_dir(role, warm_start, models_root) / "sft", folder / "sft", stage_hash(ident), note)
    folder.mkdir(parents=True, exist_ok=True)
    results = {}
    results["sft"] = train_stage("sft", config, rows, folder / "sft", base_dir=base_dir, prompt=prompt,
                                 data_hashes=data["hashes"], init_adapter=init, backend=backend, progress=progress,
                                 note=note, callbacks=callbacks)
    if not results["sft"].skipped:  # a new warm start: served (GRPO pending) until GRPO finishes on it. A skipped
        # one changes nothing: rewriting the meta here served the warm start of a finished run until GRPO's skip
        _write_run_meta(folder, config, results, data["hashes"], base_dir, prompt, time.perf_counter() - t0)
    if config.grpo is not None and results["sft"].steps < config.sft.max_steps and not results["sft"].skipped:
        note(f"{role}: the warm start stopped at step {results['sft'].steps} of {config.sft.max_steps}; GRPO not "
             "started (run again to resume)")
    elif config.grpo is not None:
        g = config.grpo
        cand = grpo_candidates(config, data, base_dir, note=note, progress=progress)
        need = g.max_steps * g.prompts_per_step
        grpo_data = cand
        if g.select_hard:
            grpo_data = _cached_selection(folder, cand, config, base_dir, prompt, min(len(cand), need), note)
        results["grpo"] = train_stage("grpo", config, grpo_data, folder / "grpo", base_dir=base_dir, prompt=prompt,
                                      data_hashes=data["hashes"], init_adapter=folder / "sft", backend=backend,
                                      progress=progress, note=note, callbacks=callbacks)
    return _write_run_meta(folder, config, results, data["hashes"], base_dir, prompt, time.perf_counter() - t0)


def _write_run_meta(folder: Path, cfg: TrainConfig, results: dict, hashes: dict, base_dir: Path,
                    prompt: PromptSpec, seconds: float) -> dict:
    old = read_run_meta(folder) or {}

    def finished(stage: str) -> bool:
        r = results.get(stage)
        return r is not None and (r.skipped or r.steps >= getattr(cfg, stage).max_steps)

    # the final stage is the last one that finished (GRPO, else the warm start: served while GRPO is pending);
    # a stage stopped early (a time limit) was named final with no adapter behind it
    final = "grpo" if finished("grpo") else "sft" if finished("sft") else None
    if (results and all(r.skipped for r in results.values()) and old.get("final_stage") == final
            and _as_json(old.get("config")) == _as_json(cfg.to_dict()) and old.get("data") == hashes
            and old.get("prompt") == prompt.to_dict() and old.get("base_model") == _base_model_id(base_dir)):
        # nothing trained and the run is the one recorded: its meta (and the training records in it) stays as it
        # is. Rewriting it (a new time stamp) changed the input hash of every notebook reading it: notebook 25's
        # imitation variant, which reruns notebook 20's run, made the pipeline run 25, 30 and all after them again
        return old
    meta = {"format": FORMAT, "role": cfg.role, "run_tag": folder.name, "base_model": _base_model_id(base_dir),
            "data": hashes, "config": cfg.to_dict(), "prompt": prompt.to_dict(), "final_stage": final,
            "stages": {s: {"folder": s, "steps": r.steps, "skipped": r.skipped, "resumed_from": r.resumed_from,
                           "wall_time_s": round(r.seconds, 1), "train_metrics": r.metrics}
                       for s, r in results.items()},
            "primary_reward": PRIMARY_REWARD[cfg.role],
            # the evaluations recorded for this run stay while they measure it (same config, data and final stage;
            # the config compared as JSON: a list read back is not the tuple of to_dict)
            "metrics": old.get("metrics", {}) if (_as_json(old.get("config")) == _as_json(cfg.to_dict())
                                                  and old.get("data") == hashes
                                                  and old.get("final_stage") == final) else {},
            "wall_time_s": round(seconds, 1), "git_sha": repro.git_sha(), "packages": repro.package_versions(),
            "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    repro.atomic_write_text(folder / "meta.json", json.dumps(meta, indent=1, default=str))
    return meta


def _as_json(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def record_metrics(role: str, run_tag: str, metrics: dict, *, models_root: str | Path | None = None) -> dict:
    """Merge evaluation ``metrics`` into the run's ``meta.json`` (e.g. held-out scores per stage)."""
    folder = run_dir(role, run_tag, models_root)
    meta = read_run_meta(folder)
    if meta is None:
        raise FileNotFoundError(f"no finished training run at {folder}: train it first")
    meta["metrics"] = {**meta.get("metrics", {}), **metrics}
    repro.atomic_write_text(folder / "meta.json", json.dumps(meta, indent=1, default=str))
    return meta
