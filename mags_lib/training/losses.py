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
logits. And it leaves the padding out: the rows of a batch go through the model in chunks of similar
length (:func:`length_chunks`), each cut at its longest row. Measured (write role, default data,
random batches of 8, SmolLM2-135M + LoRA r=32, 2 threads, AVX2 fp32, 2026-11-27): the padded batches
computed 1.82 positions per real token; in chunks (``PAD_SLACK=1.25``) 1.16, forward+backward 65.5 ->
108.7 tokens/s (``python -m mags_lib.training.throughput --chunks write``), the same losses; through the
trainer, 10 steps took 147.7 s padded and 102.5 s in chunks, with the same loss at every step.

The tokens every row of a chunk begins with (the chat template and the role's system prompt: 28-32
tokens of rows of 76 / 98 / 143 tokens, ask / write / answer) run once per chunk, and the rows go on from
that pass's key/value cache, expanded to the chunk as a view (the backward pass sums the rows'
gradients into the one prefix pass): ``SFTConfig.share_prefix``, on in every profile, for both
averages (:func:`token_mean_loss` is TRL's token mean computed this way). Measured on the default
data, 2 threads, AVX2 fp32, 2026-11-28 (``python -m mags_lib.training.throughput --threads 2 --chunks
ROLE --prefix``): chunks against chunks with the prefix once, forward+backward real tokens/s, answer
143.1 -> 161.8, ask 120.1 -> 131.4, write (random batches: chunks of 1-5 rows) 110.4 -> 116.4; through
the trainer, 10 steps of the default answer warm start: the same loss at all 10 steps, steps 2-10 in
82.9 s with TRL's loss and 71.4 s with this one.

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

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from .config import LOSS_AVERAGES

__all__ = ["LOSS_AVERAGES", "PAD_SLACK", "completion_nll", "length_chunks", "prefix_cache", "row_widths",
           "sequence_mean", "sequence_mean_loss", "shared_prefix_len", "token_mean_loss"]


# A chunk of rows goes through the model as one padded batch while its padded positions stay within this
# factor of its real ones (see length_chunks); None: the whole batch as one (the padded batch the collator made).
PAD_SLACK: float | None = 1.25


def length_chunks(lengths: Sequence[int], slack: float | None = PAD_SLACK) -> list[list[int]]:
    """Rows grouped for padded forward passes that waste little: longest first, a row joins the current
    chunk while ``chunk width x rows <= slack x real tokens`` (the width is the chunk's first, longest row).
    Rows of length 0 (all padding) are left out; ``slack=None`` keeps every other row in one chunk.

    >>> length_chunks([40, 400, 38, 390, 100, 0])
    [[1, 3], [4], [0, 2]]
    >>> length_chunks([40, 400, 38, 390, 100, 0], slack=None)
    [[1, 3, 4, 0, 2]]
    """
    order = sorted((i for i, n in enumerate(lengths) if n > 0), key=lambda i: -lengths[i])
    if slack is None:
        return [order] if order else []
    if not slack >= 1.0:
        raise ValueError(f"slack must be >= 1 (padded / real tokens) or None, got {slack!r}")
    chunks: list[list[int]] = []
    real = 0
    for i in order:
        if chunks and lengths[chunks[-1][0]] * (len(chunks[-1]) + 1) <= slack * (real + lengths[i]):
            chunks[-1].append(i)
            real += lengths[i]
        else:
            chunks.append([i])
            real = lengths[i]
    return chunks


def row_widths(attention_mask: torch.Tensor) -> list[int]:
    """Per row, the position after its last real token (right padding: its length; 0: all padding)."""
    m = attention_mask.bool()
    last = m.shape[1] - m.flip(1).int().argmax(1)
    return torch.where(m.any(1), last, torch.zeros_like(last)).tolist()


def prefix_cache(stack, prefix_ids: torch.Tensor, n_rows: int, position_ids: torch.Tensor | None = None):
    """Run the shared prefix ``prefix_ids`` ``(1, c)`` through a decoder ``stack`` once and return its key/value
    cache expanded to ``n_rows`` rows, a view (no copy): the backward pass sums the rows' gradients into the one
    prefix pass. None when the stack returns no cache (under activation checkpointing): run the rows whole then.
    Used by :func:`completion_nll` and the consolidation trainer (:func:`mags_lib.training.prefix.batch_loss`).
    """
    kw = {} if position_ids is None else {"position_ids": position_ids}
    cache = stack(input_ids=prefix_ids, use_cache=True, **kw).past_key_values
    if cache is None:
        return None
    for layer in cache.layers:
        layer.keys = layer.keys.expand(n_rows, -1, -1, -1)
        layer.values = layer.values.expand(n_rows, -1, -1, -1)
    return cache


def completion_nll(model, inputs: dict, labels: torch.Tensor, *, slack: float | None | str = "auto",
                   share_prefix: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Next-token losses of the completion tokens of a batch.

    ``model``: a causal LM (a PEFT model is unwrapped; its LoRA layers stay in the path);
    ``labels``: ``(B, S)`` with -100 outside the completions. Returns ``(nll, rows, correct)``, one
    entry per counted token: its loss (fp32), the row it belongs to, and whether the argmax is right.

    The rows go through the model in :func:`length_chunks` (``slack="auto"``: :data:`PAD_SLACK`), each
    chunk cut to its longest row: a row's positions never attend to the padding after it (causal
    attention), so the losses are those of the padded batch, without computing the padding. A random
    batch of the write role mixes 40-token chatter with 400-token seed rows; padded to its longest row it
    is mostly padding.

    ``share_prefix``: the tokens every row of a chunk begins with (the chat template and the role's
    system prompt: ~30 tokens of a 75-145-token row) go through the model once, and the rows continue
    from that pass's key/value cache (see :func:`shared_prefix_len`); the losses and gradients are those
    of the rows run whole.
    """
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    mask = inputs.get("attention_mask")
    n_rows, width = inputs["input_ids"].shape
    widths = row_widths(mask) if mask is not None else [width] * n_rows
    slack = PAD_SLACK if slack == "auto" else slack
    parts = []
    for chunk in length_chunks(widths, slack):
        idx = torch.tensor(chunk, device=inputs["input_ids"].device)
        w = widths[chunk[0]]
        ids = inputs["input_ids"][idx, :w]
        keep = {k: inputs[k][idx, :w] for k in ("attention_mask", "position_ids")
                if inputs.get(k) is not None}
        c = shared_prefix_len(ids, labels[idx.to(labels.device), :w], keep.get("attention_mask")) \
            if share_prefix else 0
        stack, pos = inner.base_model, keep.get("position_ids")
        cache = prefix_cache(stack, ids[:1, :c], len(chunk), None if pos is None else pos[:1, :c]) if c else None
        c = c if cache is not None else 0  # no cache (activation checkpointing): every row runs whole
        if c:
            rest = {"position_ids": pos[:, c:] if pos is not None
                    else torch.arange(c, w, device=ids.device).unsqueeze(0).expand(len(chunk), -1)}
            if "attention_mask" in keep:
                rest["attention_mask"] = keep["attention_mask"]  # past and present positions
            hidden = stack(input_ids=ids[:, c:], past_key_values=cache, use_cache=True, **rest).last_hidden_state
        else:
            hidden = stack(input_ids=ids, use_cache=False, **keep).last_hidden_state
        target = labels[idx.to(labels.device), c + 1:w].to(hidden.device)
        m = target != -100
        logits = inner.get_output_embeddings()(hidden[:, :-1][m]).float()
        gold = target[m]
        parts.append((F.cross_entropy(logits, gold, reduction="none"), idx[m.nonzero()[:, 0]],
                      logits.detach().argmax(-1) == gold))
    if not parts:
        empty = torch.zeros(0, device=inputs["input_ids"].device)
        return empty, empty.long(), empty.bool()
    return tuple(torch.cat(x) for x in zip(*parts))


def shared_prefix_len(ids: torch.Tensor, labels: torch.Tensor, attention_mask: torch.Tensor | None = None) -> int:
    """How many leading positions of a chunk ``ids`` ``(B, W)`` can run once for all its rows: the tokens every
    row begins with, stopped before the output that predicts the first completion token of any row
    (``labels`` -100 outside the completions), and only over real tokens (any padding at the start of a
    chunk shares nothing). 0 for a single row: nothing to share. The same rule on token lists (rows
    without padding) is the consolidation trainer's ``prefix._shared_len`` (the common prefix, stopped before
    each row's last prompt token).

    >>> ids = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, 3, 0]])
    >>> labels = torch.tensor([[-100, -100, -100, -100, 9], [-100, -100, -100, 3, -100]])
    >>> shared_prefix_len(ids, labels)   # 5 6 7 shared, but row 1's output at 2 predicts its label 3
    2
    >>> shared_prefix_len(ids[:1], labels[:1])
    0
    """
    if ids.shape[0] < 2:
        return 0
    same = (ids == ids[:1]).all(0)
    if attention_mask is not None:
        same &= attention_mask.bool().all(0)
    c = int(same.int().cumprod(0).sum())
    scored = labels != -100
    if bool(scored.any()):
        first = int(scored.int().argmax(1)[scored.any(1)].min())  # first label position of any row
        c = min(c, first - 1)
    return max(0, min(c, ids.shape[1] - 1))


def sequence_mean(nll: torch.Tensor, rows: torch.Tensor, n_rows: int) -> torch.Tensor:
    """The mean over the rows that have a counted token of each row's mean token loss."""
    counts = torch.bincount(rows, minlength=n_rows)
    has = counts > 0
    if not bool(has.any()):
        raise ValueError("a batch without a single completion token (every label is -100): check the "
                         "completion mask of the training examples")
    sums = torch.zeros(n_rows, dtype=nll.dtype, device=nll.device).index_add(0, rows, nll)
    return (sums[has] / counts[has]).mean()


def sequence_mean_loss(model, inputs: dict, labels: torch.Tensor, *, slack: float | None | str = "auto",
                       share_prefix: bool = True) -> tuple[torch.Tensor, dict]:
    """The ``sequence`` loss of a batch, and the counts TRL logs beside it (``n_tokens``: completion
    tokens, ``n_correct``: of them predicted by the argmax); ``slack`` and ``share_prefix`` as in
    :func:`completion_nll`."""
    nll, rows, correct = completion_nll(model, inputs, labels, slack=slack, share_prefix=share_prefix)
    return sequence_mean(nll, rows, labels.shape[0]), {"n_tokens": int(nll.numel()),
                                                       "n_correct": int(correct.sum().item())}


def token_mean_loss(model, inputs: dict, labels: torch.Tensor, *, num_items_in_batch=None,
                    slack: float | None | str = "auto", share_prefix: bool = True) -> tuple[torch.Tensor, dict]:
    """The ``token`` loss of a batch (TRL's: the completion tokens' summed loss over ``num_items_in_batch``,
    the completion tokens of the whole optimizer step, else over the batch's own), computed as
    :func:`completion_nll` does, with the counts of :func:`sequence_mean_loss`."""
    nll, _, correct = completion_nll(model, inputs, labels, slack=slack, share_prefix=share_prefix)
    if nll.numel() == 0:
        raise ValueError("a batch without a single completion token (every label is -100): check the "
                         "completion mask of the training examples")
    denom = num_items_in_batch if num_items_in_batch is not None else nll.numel()
    if isinstance(denom, torch.Tensor):
        denom = denom.to(nll.device)
    return nll.sum() / denom, {"n_tokens": int(nll.numel()), "n_correct": int(correct.sum().item())}
