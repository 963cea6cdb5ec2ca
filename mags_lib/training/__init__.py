"""Training of the memory operators: ask, write and answer (the reader).

Two stages per role, each a typed configuration (:mod:`~mags_lib.training.config`):

1. **warm start** (:class:`SFTConfig`): TRL ``SFTTrainer`` on conversational prompt-completion
   examples, loss on the completion tokens only (TRL's ``chunked_nll``: the 49k-vocabulary
   ``lm_head`` runs on completion positions only), a PEFT LoRA on every linear layer;
2. **GRPO** (:class:`GRPOConfig`): TRL ``GRPOTrainer`` continuing the warm-start adapter, rewards
   chosen by name from :data:`mags_lib.rewards.REGISTRY` with weights, KL against a frozen copy of
   the warm start, prompts the warm start fits worst first.

Prompts are the role's *trained* prompt of :data:`mags_lib.roles.ROLE_SPECS` (a short system
prompt, no few-shot block); the run's ``meta.json`` records it, and the agent uses exactly it.

Trained-model layout (other parts rely on it)::

    models/<role>/<run_tag>/meta.json      role, run tag, base model, data hashes, config, prompt
                                           spec, stages, final_stage, metrics, git SHA, packages
    models/<role>/<run_tag>/sft/           PEFT adapter + meta.json + log.csv (+ checkpoints/)
    models/<role>/<run_tag>/grpo/          PEFT adapter + meta.json + log.csv (+ checkpoints/)
    models/<role>/<run_tag>/gguf/          added by the export notebook (30_export_gguf)

:func:`find_trained_model` resolves ``(role, run_tag, backend)`` to a model path and never mixes run
tags; ``MAGS.default(models="trained", trained_tag=...)`` calls it. Runs are resumable: kill one and
call :func:`train_role` again (see :mod:`~mags_lib.training.run`).
"""

from .config import PROFILES, GRPOConfig, LoraSpec, SFTConfig, TrainConfig, config_hash, help_text, profile_config
from .layout import FORMAT, STAGES, find_trained_model, list_runs, read_run_meta, run_dir, stage_dir
from .run import (
    StageResult,
    TrainingBackendError,
    grpo_rows,
    last_complete_checkpoint,
    load_role_data,
    pick_backend,
    record_metrics,
    sft_examples,
    train_role,
    train_stage,
    training_rows,
)

__all__ = [
    "FORMAT",
    "PROFILES",
    "STAGES",
    "GRPOConfig",
    "LoraSpec",
    "SFTConfig",
    "StageResult",
    "TrainConfig",
    "TrainingBackendError",
    "config_hash",
    "find_trained_model",
    "grpo_rows",
    "help_text",
    "last_complete_checkpoint",
    "list_runs",
    "load_role_data",
    "pick_backend",
    "profile_config",
    "read_run_meta",
    "record_metrics",
    "run_dir",
    "sft_examples",
    "stage_dir",
    "train_role",
    "train_stage",
    "training_rows",
]
