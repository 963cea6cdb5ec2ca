"""Where trained models live, what their ``meta.json`` says, and how they are found by run tag.

::

    models/<role>/<run_tag>/
        meta.json          format "mags-trained-model": role, run tag, base model, data hashes, config,
                           prompt spec, stages, final_stage, metrics, git SHA, packages, wall times
        sft/               PEFT LoRA adapter of the warm start (adapter_config.json,
                           adapter_model.safetensors) + its own meta.json + log.csv (loss per step)
            checkpoints/   trainer checkpoints (checkpoint-<step>/, each with a meta.json once complete)
        grpo/              PEFT LoRA adapter after GRPO (on the same base), meta.json, log.csv
            checkpoints/   (rewards per component, KL and zero-variance share per step)
        gguf/              written by the export notebook (30_export_gguf): GGUF files + manifest.json

Every stage adapter is a plain PEFT adapter on the base model named in ``meta.json`` (GRPO continues
the warm-start adapter), so the transformers backend serves any stage directly. The run's
``meta.json`` is written after each stage and names the ``final_stage``, the last stage that finished
(``"grpo"``, or ``"sft"`` when the run has no finished GRPO stage yet); a run without one (its warm start
stopped early) is unfinished and never served.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..models import ModelNotFoundError, project_root

__all__ = ["FORMAT", "STAGES", "find_trained_model", "list_runs", "models_root", "read_run_meta", "run_dir",
           "stage_dir"]

FORMAT = "mags-trained-model"
STAGES = ("sft", "grpo")
# Preference among merged GGUF files of gguf/ when its manifest names no default (the export
# helper's manifest.json may say {"default": "<file name>"}).
_GGUF_PREFERENCE = ("q8_0", "f16", "q4_k_m", "q4_1")


def models_root(root: str | Path | None = None) -> Path:
    """``<project>/models`` (or ``root``)."""
    return Path(root) if root is not None else project_root() / "models"


def run_dir(role: str, run_tag: str, root: str | Path | None = None) -> Path:
    """``models/<role>/<run_tag>/`` (not created)."""
    for label, value in (("role", role), ("run_tag", run_tag)):
        if not value or "/" in value or value in (".", ".."):
            raise ValueError(f"{label} must be a plain folder name, got {value!r}")
    return models_root(root) / role / run_tag


def stage_dir(role: str, run_tag: str, stage: str, root: str | Path | None = None) -> Path:
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")
    return run_dir(role, run_tag, root) / stage


def read_run_meta(folder: str | Path) -> dict | None:
    """The run's ``meta.json`` when it is a finished trained-model run, else ``None``."""
    p = Path(folder) / "meta.json"
    try:
        d = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) and d.get("format") == FORMAT and d.get("final_stage") in STAGES else None


def _unfinished_stage(folder: Path, meta: dict) -> str | None:
    """The first stage up to the run's ``final_stage`` whose folder holds no adapter (``None``: every one does).

    A run interrupted while it trains a stage again (a new configuration moved the old stage to ``replaced/``) or
    while a joint model's stages are copied into it keeps the ``meta.json`` of its earlier finish, which names a
    final stage, but a stage before or at it is half-written: such a run is not finished."""
    for stage in STAGES[: STAGES.index(meta["final_stage"]) + 1]:
        if not (folder / stage / "adapter_config.json").is_file():
            return stage
    return None


def list_runs(root: str | Path | None = None) -> dict[str, dict[str, str]]:
    """``{role: {run_tag: final_stage}}`` of every finished run under ``models/`` (its ``meta.json`` names a final
    stage, and that stage and every one before it hold their adapters)."""
    out: dict[str, dict[str, str]] = {}
    base = models_root(root)
    for role in ("ask", "write", "answer"):
        folder = base / role
        if not folder.is_dir():
            continue
        for run in sorted(p for p in folder.iterdir() if p.is_dir()):
            meta = read_run_meta(run)
            if meta is not None and _unfinished_stage(run, meta) is None:
                out.setdefault(role, {})[run.name] = meta["final_stage"]
    return out


def _describe(runs: dict[str, dict[str, str]]) -> str:
    if not runs:
        return "no trained model exists yet"
    return "existing runs: " + "; ".join(
        f"{role}: " + ", ".join(f"{tag} ({stage})" for tag, stage in tags.items()) for role, tags in runs.items())


def _pick_gguf(folder: Path) -> Path | None:
    files = sorted(p for p in folder.glob("*.gguf") if p.is_file())
    if not files:
        return None
    manifest = folder / "manifest.json"
    if manifest.is_file():
        try:
            default = json.loads(manifest.read_text()).get("default")
        except ValueError:
            default = None
        if default and (folder / default).is_file():
            return folder / default
    merged = [p for p in files if "lora" not in p.name.lower() and "adapter" not in p.name.lower()]
    for key in _GGUF_PREFERENCE:
        for p in merged:
            if key in p.name.lower():
                return p
    return merged[0] if merged else None


def find_trained_model(role: str, *, run_tag: str = "default", backend: str = "llamacpp",
                       models_root: str | Path | None = None) -> Path:
    """The trained model of ``role`` from run ``run_tag``, for ``backend``.

    ``transformers`` (and ``vllm``): the final stage's PEFT adapter folder,
    ``models/<role>/<run_tag>/<final_stage>/``. ``llamacpp``: a GGUF file of
    ``models/<role>/<run_tag>/gguf/`` (the one its ``manifest.json`` names as ``default``, else a
    merged model, preferring Q8_0, F16, Q4_K_M, Q4_1). Runs of other tags are never used.

    Raises
    ------
    mags_lib.models.ModelNotFoundError
        No finished run of that tag for the role (the message lists what exists and how to train
        one), or no GGUF for llama.cpp (the message says to run the export notebook).
    """
    if role not in ("ask", "write", "answer"):
        raise ValueError(f"trained models exist for the roles ask, write and answer, not {role!r}")
    folder = run_dir(role, run_tag, models_root)
    meta = read_run_meta(folder)
    if meta is None:
        raise ModelNotFoundError(
            f"no trained {role} model of run tag {run_tag!r} (looked for {folder}/meta.json); "
            f"{_describe(list_runs(models_root))}. Train one with notebooks/20_train_ask_write.ipynb "
            f"(-p role={role} --run-tag {run_tag}), pass another tag (MAGS.default(models='trained', "
            "trained_tag=...)), or use MAGS.default(models='base').")
    key = backend.lower().replace(".", "").replace("_", "").replace("-", "")
    if key in ("llamacpp", "llama", "gguf"):
        from ..export import ExportError, read_manifest, trained_gguf

        try:  # an export of mags_lib.export: resolved and checked against the adapter it came from
            ours = read_manifest(folder / "gguf", verify="none", missing_ok=True) is not None
        except ExportError:
            ours = False  # another tool's manifest.json (or a corrupt one: the files are picked by name)
        if ours:
            return trained_gguf(role, run_tag, models_root=models_root)
        half = _unfinished_stage(folder, meta) if any((folder / st).exists() for st in STAGES) else None
        if half is not None:  # files picked by name: nothing ties them to an adapter, so the run must be whole
            raise ModelNotFoundError(f"the {role} run {folder} is half-written ({folder / half} holds no adapter: a "
                                     "run interrupted while it trained that stage again); its GGUF files may be of "
                                     "the stage it replaces: re-run the training notebook, then the export")
        gguf = _pick_gguf(folder / "gguf")
        if gguf is None:
            raise ModelNotFoundError(
                f"the trained {role} model {folder} has no GGUF file (looked in {folder / 'gguf'}): the "
                "llamacpp backend needs one. Run notebooks/30_export_gguf.ipynb for this run tag, or use "
                "backend='transformers' (it serves the PEFT adapter directly).")
        return gguf
    stage = folder / meta["final_stage"]
    if not (stage / "adapter_config.json").is_file():
        raise ModelNotFoundError(f"{folder}/meta.json names the final stage {meta['final_stage']!r} but "
                                 f"{stage} holds no adapter_config.json: re-run the training notebook")
    half = _unfinished_stage(folder, meta)
    if half is not None:
        raise ModelNotFoundError(f"the {role} run {folder} is half-written: its meta.json names the final stage "
                                 f"{meta['final_stage']!r} but {folder / half} holds no adapter (a run interrupted "
                                 "while it trained that stage again): re-run the training notebook to finish it")
    return stage
