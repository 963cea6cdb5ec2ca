"""How the warm start averages its loss over a batch (``SFTConfig.loss_average``).

``token`` (TRL's own): the mean over every completion token of the batch, so a row weighs as many
tokens as its completion has. ``sequence``: each row's mean over its own completion tokens, then the
mean over the rows, so every row weighs the same.

Why it matters here: the rows whose gold is *empty* (chatter, questions, noise: the write and ask
roles store or ask nothing) have a two-token completion (``<|im_end|>`` and a newline), a row with
two triplets about forty. The one decision that makes an empty output -- ending at the first token
instead of opening a tag -- then weighs 1/20 of a two-triplet row in a mixed batch under ``token``,
and as much as any row under ``sequence``. The other side: each token of a long completion, its
closing ``<|im_end|>`` included, weighs less.

Measured (write role, default data, 100 steps of 8 at 1.5e-3, 2026-11-27, README): in length-grouped
batches the two averages nearly coincide (similar completions per batch); with ``batching="random"``
the ``sequence`` average left all 48 empty-gold test rows empty (3 of 48 before) and raised
exact-triplet F1 from 0.59 to 0.76, but 28 of 67 long seed rows ran to the token cap (1 before), so
the profiles keep ``token``. The random batches carry most of both: ``token`` with them gave 0.75, 33 of
48 left empty, and 34 of 67 at the cap.

Like TRL's default (``loss_type="chunked_nll"``), :func:`completion_nll` runs the output projection on
the completion positions only: the prompt's positions (most of a row) never become vocabulary-sized
logits.

>>> import torch
>>> nll = torch.tensor([1.0, 3.0, 2.0])                 # row 0: two tokens, row 1: one
>>> rows = torch.tensor([0, 0, 1])
>>> sequence_mean(nll, rows, 3).item()                  # (mean(1, 3) + 2) / 2; row 2 has none
2.0
>>> (nll.sum() / 3).item()                              # the token mean
2.0
>>> sequence_mean(torch.tensor([1.0, 3.0, 8.0]), rows, 3).item(), (torch.tensor([1.0, 3.0, 8.0]).mean()).item()
(5.0, 4.0)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .config import LOSS_AVERAGES

__all__ = ["LOSS_AVERAGES", "completion_nll", "sequence_mean", "sequence_mean_loss"]


def completion_nll(model, inputs: dict, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Next-token losses of the completion tokens of a batch.

    ``model``: a causal LM (a PEFT model is unwrapped; its LoRA layers stay in the path);
    ``labels``: ``(B, S)`` with -100 outside the completions. Returns ``(nll, rows, correct)``, one
    entry per counted token: its loss (fp32), the row it belongs to, and whether the argmax is right.
    """
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    keep = {k: inputs[k] for k in ("attention_mask", "position_ids") if inputs.get(k) is not None}
    hidden = inner.base_model(input_ids=inputs["input_ids"], use_cache=False, **keep).last_hidden_state
    target = labels[:, 1:].to(hidden.device)
    mask = target != -100
    logits = inner.get_output_embeddings()(hidden[:, :-1][mask]).float()
    gold = target[mask]
    nll = F.cross_entropy(logits, gold, reduction="none")
    return nll, mask.nonzero()[:, 0], logits.detach().argmax(-1) == gold


def sequence_mean(nll: torch.Tensor, rows: torch.Tensor, n_rows: int) -> torch.Tensor:
    """The mean over the rows that have a counted token of each row's mean token loss."""
    counts = torch.bincount(rows, minlength=n_rows)
    has = counts > 0
    if not bool(has.any()):
        raise ValueError("a batch without a single completion token (every label is -100): check the "
                         "completion mask of the training examples")
    sums = torch.zeros(n_rows, dtype=nll.dtype, device=nll.device).index_add(0, rows, nll)
    return (sums[has] / counts[has]).mean()


def sequence_mean_loss(model, inputs: dict, labels: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """The ``sequence`` loss of a batch, and the counts TRL logs beside it (``n_tokens``: completion
    tokens, ``n_correct``: of them predicted by the argmax)."""
    nll, rows, correct = completion_nll(model, inputs, labels)
    return sequence_mean(nll, rows, labels.shape[0]), {"n_tokens": int(nll.numel()),
                                                       "n_correct": int(correct.sum().item())}
