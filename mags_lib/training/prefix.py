"""Supervised LoRA training that runs a batch's shared prompt prefix once ("shared-prefix batching").

Rows whose prompts share a long beginning -- the chat template, the role's system prompt, an empty
memory block -- and end in a short question and answer spend most of a plain trainer's compute on that
beginning, once per row. Here each batch's longest common token prefix goes through the model once
(batch size 1, with its autograd graph), its key/value cache is expanded -- a view, no copy -- to the
batch, and only each row's remaining tokens run on top of it. The expanded cache sums the rows'
gradients into the one prefix pass, so the loss and its gradient are those of the ordinary per-row
computation (:func:`batch_loss` against :func:`batch_loss_per_row`, tested to float tolerance); the
vocabulary projection runs at the completion positions only. With LoRA dropout > 0 (in training mode) the
one prefix pass draws one dropout mask for all the rows where the per-row computation draws one per row, so
there the two agree in expectation only.

The consolidation step (:mod:`mags_lib.consolidation`) trains with it: its rows average 82 tokens, of which a batch
shares ~55 (2.6x fewer tokens through the model in notebook 45's run). :func:`train_lora` is the loop: AdamW, cosine decay after a linear
warm-up, gradient clipping at 1.0 (TRL's defaults), bf16 autocast where the CPU computes in bf16, one
seed for the data order, a CSV row per step, a progress bar.
"""

from __future__ import annotations

import csv
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["batch_loss", "batch_loss_per_row", "common_prefix_len", "tokenize_examples", "train_lora"]


def tokenize_examples(tok: Any, examples: Sequence[dict]) -> list[tuple[list[int], int]]:
    """``(ids, n_prompt)`` per conversational prompt-completion example: the chat's token ids and how many
    of them are the prompt (with the assistant header); the rest are the completion the loss covers.

    Raises
    ------
    ValueError
        When the template does not render the prompt as a prefix of prompt + completion (the completion
        could not be told apart).
    """
    from .run import _chat_ids

    out = []
    for i, ex in enumerate(examples):
        p = _chat_ids(tok, ex["prompt"], add_generation_prompt=True)
        full = _chat_ids(tok, ex["prompt"] + ex["completion"])
        if full[: len(p)] != p or len(full) <= len(p):
            raise ValueError(f"example {i}: the chat template does not render its prompt as a prefix of prompt + "
                             "completion (or the completion is empty); cannot separate the completion tokens")
        out.append((full, len(p)))
    return out


def common_prefix_len(seqs: Sequence[Sequence[int]]) -> int:
    """Length of the longest common prefix of token sequences.

    >>> common_prefix_len([[1, 2, 3, 4], [1, 2, 5], [1, 2, 3]])
    2
    >>> common_prefix_len([[7, 8]])
    2
    """
    if not seqs:
        return 0
    first, n = seqs[0], min(len(s) for s in seqs)
    for i in range(n):
        if any(s[i] != first[i] for s in seqs[1:]):
            return i
    return n


def _parts(model: Any):
    """The decoder stack and the output projection of a (PEFT-wrapped) causal LM."""
    lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    return lm.model, lm.lm_head


def _shared_len(batch: Sequence[tuple[list[int], int]]) -> int:
    """How many leading tokens of ``batch`` run once: the common prefix, stopped before every row's last
    prompt token (whose output predicts the first completion token)."""
    return min(common_prefix_len([ids for ids, _ in batch]), min(n_p for _, n_p in batch) - 1)


def _targets(batch: Sequence[tuple[list[int], int]], start: int):
    """Row index, position within the suffix (from ``start``) and target token of every completion token."""
    rows, cols, tgt = [], [], []
    for b, (ids, n_p) in enumerate(batch):
        for t in range(n_p, len(ids)):  # the token at t is predicted by the output at t - 1
            rows.append(b)
            cols.append(t - 1 - start)
            tgt.append(ids[t])
    return rows, cols, tgt


def batch_loss(model: Any, batch: Sequence[tuple[list[int], int]], pad_id: int) -> tuple[Any, int]:
    """Summed cross-entropy of the completion tokens of ``batch`` with the shared prefix run once.

    Returns ``(loss_sum, n_tokens)``; divide for the mean. The common prefix stops before every row's
    last prompt token, whose output predicts the first completion token.
    """
    import torch
    import torch.nn.functional as F

    from .losses import prefix_cache

    inner, head = _parts(model)
    c = _shared_len(batch)
    n = len(batch)
    cache = prefix_cache(inner, torch.tensor([batch[0][0][:c]]), n) if c > 0 else None
    c = c if cache is not None else 0  # no cache (activation checkpointing): every row runs whole
    suffix = [ids[c:] for ids, _ in batch]
    width = max(len(s) for s in suffix)
    # right padding: under the causal mask a real token never sees the pads after it, and the pads' own
    # outputs are never scored, so no attention mask is needed
    inp = torch.tensor([s + [pad_id] * (width - len(s)) for s in suffix])
    pos = torch.arange(c, c + width).unsqueeze(0).expand(n, width)
    hidden = inner(input_ids=inp, past_key_values=cache, position_ids=pos, use_cache=cache is not None).last_hidden_state
    rows, cols, tgt = _targets(batch, c)
    logits = head(hidden[torch.tensor(rows), torch.tensor(cols)])
    return F.cross_entropy(logits.float(), torch.tensor(tgt), reduction="sum"), len(tgt)


def batch_loss_per_row(model: Any, batch: Sequence[tuple[list[int], int]]) -> tuple[Any, int]:
    """The same loss computed row by row over whole sequences (the reference :func:`batch_loss` must equal;
    with LoRA dropout active, in expectation only: the shared prefix pass draws one dropout mask for all rows)."""
    import torch
    import torch.nn.functional as F

    inner, head = _parts(model)
    total, count = 0.0, 0
    for ids, n_p in batch:
        hidden = inner(input_ids=torch.tensor([ids])).last_hidden_state[0]
        logits = head(hidden[n_p - 1: len(ids) - 1])
        total = total + F.cross_entropy(logits.float(), torch.tensor(ids[n_p:]), reduction="sum")
        count += len(ids) - n_p
    return total, count


def _anchor_kl(model: Any, seqs: Sequence[list[int]], pad_id: int, bf16: bool) -> Any:
    """Mean per-token KL(base || adapted) of the next-token distributions on ``seqs`` (right-padded; the pads
    are not counted); the base is ``model`` with its adapter disabled, without gradient.

    Raises
    ------
    ValueError
        When no sequence has 2 or more tokens (nothing to predict).
    """
    import torch
    import torch.nn.functional as F

    width = max(len(s) for s in seqs)
    # outputs that predict a real token (bool even when empty: an empty list would make a float tensor)
    keep = torch.tensor([[t < len(s) - 1 for t in range(width - 1)] for s in seqs], dtype=torch.bool)
    if not bool(keep.any()):
        raise ValueError(f"anchor KL: none of the {len(seqs)} sequences has 2 or more tokens (nothing to predict)")
    inp = torch.tensor([s + [pad_id] * (width - len(s)) for s in seqs])
    mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs])
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        with torch.no_grad(), model.disable_adapter():
            base = model(input_ids=inp, attention_mask=mask).logits[:, :-1][keep].float()
        out = model(input_ids=inp, attention_mask=mask).logits[:, :-1][keep].float()
    return F.kl_div(F.log_softmax(out, -1), F.log_softmax(base, -1), log_target=True, reduction="batchmean")


BATCHINGS = ("random", "shuffled_length")
"""The row orders :func:`train_lora` knows (``batching=``); ``ConsolidationConfig.batching`` checks against it."""


def _lr_at(step: int, steps: int, peak: float, warmup: int) -> float:
    """Linear warm-up to ``peak``, then cosine decay to 0 (step counts from 0)."""
    if warmup and step < warmup:
        return peak * (step + 1) / warmup
    span = max(1, steps - warmup)
    return peak * 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / span)))


def train_lora(model: Any, tok: Any, examples: Sequence[dict], *, steps: int, batch_size: int,
               learning_rate: float, warmup_ratio: float = 0.0, weight_decay: float = 0.0, max_grad_norm: float = 1.0,
               seed: int = 0, bf16: bool = False, max_length: int | None = None, log_path: str | Path | None = None, progress: bool = True,
               should_stop: Callable[[int], bool] | None = None, batching: str = "random",
               anchor: Sequence[str] = (), anchor_weight: float = 0.0, anchor_per_step: int = 2,
               anchor_every: int = 1) -> dict:
    """Train the trainable parameters of ``model`` (a PEFT LoRA) on ``examples`` for ``steps`` optimizer steps.

    Parameters
    ----------
    examples : list of dict
        Conversational prompt-completion examples (:func:`mags_lib.training.sft_examples`).
    steps, batch_size : int
        Optimizer steps of ``batch_size`` rows (both >= 1); the rows are cycled, reshuffled each epoch (seeded).
        No batch holds a row twice. With ``random``, an epoch's leftover rows open the next epoch's first
        batch, filled up with rows of the new epoch that are not among them (those leftover rows run again
        later in the new epoch); with fewer rows than ``batch_size`` every step is one batch of all rows.
        With ``shuffled_length`` an epoch's short batch (when ``batch_size`` does not divide the rows) runs short.
    batching : str
        ``random``: each epoch a random permutation cut into batches; ``shuffled_length``: rows of similar
        length batched together, the batches in random order (:func:`mags_lib.training.sampling.length_batches`):
        rows of one kind -- closed-book questions behind the same prefix, open-book rehearsals with a memory
        block -- share a batch, so its common prefix is longer and its padding shorter.
    anchor, anchor_weight, anchor_per_step, anchor_every : texts, float, int, int
        A regulariser of the model's general ability: with ``anchor_weight > 0`` every ``anchor_every``-th step
        also runs ``anchor_per_step`` of the plain ``anchor`` texts (cycled) and adds ``anchor_weight`` times the mean
        per-token KL divergence from the model without its adapter (PEFT's ``disable_adapter``, no gradient)
        to the model with it: the adapter is pulled back towards the base distribution on text it is not
        meant to change. Logged as ``anchor_kl``. Texts of fewer than 2 tokens (nothing to predict) are left
        out; a ValueError when none is left.
    max_length : int, optional
        Rows longer than this many tokens are left out (counted in ``n_dropped``).
    bf16 : bool
        Autocast the forward pass to bf16 (only where the CPU computes in bf16; see ``run._bf16_ok``).
    log_path : path, optional
        CSV with one row per step: step, epoch, loss (mean per completion token), learning rate,
        tokens run through the model, completion tokens, seconds.
    should_stop : callable, optional
        Called with the step count after each step; True stops early (tests interrupt with it).

    Returns
    -------
    dict
        ``steps``, ``loss_first``, ``loss_last`` (mean of the last 5 steps), ``tokens`` (run through the
        model), ``tokens_plain`` (what a per-row trainer would run), ``tokens_padded`` (what the forward passes
        computed: the shared prefix once, every row padded to its batch's longest suffix), ``n_dropped`` (rows over ``max_length``), ``seconds``,
        ``tokens_per_s``, ``rows_per_s`` and ``epochs`` (rows run, counted as run -- a short batch counts its
        rows -- per second and per row of the data).
    """
    import numpy as np
    import torch
    from tqdm.auto import tqdm

    from .sampling import length_batches

    if batching not in BATCHINGS:
        raise ValueError(f"batching must be one of {BATCHINGS}, got {batching!r}")
    if steps < 1 or batch_size < 1:
        raise ValueError(f"steps and batch_size must be >= 1, got steps={steps}, batch_size={batch_size}")
    if not examples:
        raise ValueError("no training examples given")
    if anchor_weight < 0 or (anchor_weight > 0 and (not anchor or anchor_per_step < 1 or anchor_every < 1)):
        raise ValueError(f"anchor_weight={anchor_weight} needs anchor_weight >= 0, and anchor texts and "
                         f"anchor_per_step, anchor_every >= 1 when it is > 0 (got {len(anchor)} texts, "
                         f"{anchor_per_step}, {anchor_every})")
    data = tokenize_examples(tok, examples)
    n_all = len(data)
    if max_length is not None:
        data = [d for d in data if len(d[0]) <= max_length]
    if not data:
        raise ValueError(f"no training examples ({n_all} given, none of at most max_length={max_length} tokens)")
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    anchor_ids: list[list[int]] = []
    if anchor_weight > 0:  # a text of one token predicts nothing: left out
        anchor_ids = [ids for ids in (tok(t)["input_ids"] for t in anchor) if len(ids) >= 2]
        if not anchor_ids:
            raise ValueError(f"anchor: none of the {len(anchor)} anchor texts has 2 or more tokens")
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the model has no trainable parameters (expected a PEFT LoRA)")
    opt = torch.optim.AdamW(params, lr=learning_rate, weight_decay=weight_decay)
    warmup = int(round(warmup_ratio * steps))
    rng = np.random.default_rng([seed, 7])
    flat: list[int] = []  # batching="random": rows still to run
    order: list[list[int]] = []  # batching="shuffled_length": the epoch's batches still to run
    epoch = -1
    model.train()
    log_f = writer = None
    if log_path is not None:
        log_f = open(log_path, "w", newline="")
        writer = csv.writer(log_f)
        writer.writerow(["step", "epoch", "loss", "learning_rate", "tokens", "completion_tokens", "padded_tokens",
                         "anchor_kl", "seconds"])
    losses: list[float] = []
    tokens = plain = padded = done = rows_run = 0
    t0 = time.perf_counter()
    bar = tqdm(total=steps, desc="consolidation LoRA", disable=not progress, leave=False)
    try:
        for step in range(steps):
            if batching == "random":  # rows cycled: an epoch's leftover rows open the next epoch's first batch
                if len(flat) < batch_size:
                    epoch += 1
                    fresh = [int(i) for i in rng.permutation(len(data))]
                    # fill the batch with new-epoch rows not among the leftovers (no row twice in one batch); the
                    # leftovers keep their places later in the new epoch (without an overlap: leftovers + permutation)
                    held = set(flat)
                    fill = [i for i in fresh if i not in held][:batch_size - len(flat)]
                    filled = set(fill)
                    flat += fill + [i for i in fresh if i not in filled]
                picked = flat[:batch_size]
                del flat[:batch_size]
            else:
                if not order:
                    epoch += 1
                    order = length_batches([len(ids) for ids, _ in data], batch_size, seed=seed, epoch=epoch)
                picked = order.pop(0)
            batch = [data[i] for i in picked]
            lr = _lr_at(step, steps, learning_rate, warmup)
            for g in opt.param_groups:
                g["lr"] = lr
            ts = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss_sum, n_tok = batch_loss(model, batch, pad_id)
            loss = loss_sum / n_tok
            kl = None
            if anchor_ids and step % anchor_every == 0:
                first = (step // anchor_every) * anchor_per_step
                picked_a = [anchor_ids[(first + j) % len(anchor_ids)] for j in range(anchor_per_step)]
                kl = _anchor_kl(model, picked_a, pad_id, bf16)
                loss = loss + anchor_weight * kl
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if max_grad_norm:
                torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
            opt.step()
            c = _shared_len(batch)
            run_tokens = c + sum(len(ids) - c for ids, _ in batch)
            pad_tokens = c + len(batch) * max(len(ids) - c for ids, _ in batch)  # what the forward pass computes
            tokens += run_tokens
            padded += pad_tokens
            plain += sum(len(ids) for ids, _ in batch)
            rows_run += len(batch)
            losses.append(float((loss_sum / n_tok).detach()))
            done = step + 1
            if writer is not None:
                writer.writerow([done, epoch, round(losses[-1], 5), f"{lr:.3e}", run_tokens, n_tok, pad_tokens,
                                 "" if kl is None else round(float(kl.detach()), 5), round(time.perf_counter() - ts, 3)])
                log_f.flush()
            bar.update(1)
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
            if should_stop is not None and should_stop(done):
                break
    finally:
        bar.close()
        if log_f is not None:
            log_f.close()
    model.eval()
    seconds = time.perf_counter() - t0
    tail = losses[-5:]
    return {"steps": done, "loss_first": losses[0], "loss_last": sum(tail) / len(tail), "tokens": tokens,
            "tokens_plain": plain, "tokens_padded": padded, "seconds": round(seconds, 2), "tokens_per_s": round(tokens / seconds, 1),
            "rows_per_s": round(rows_run / seconds, 2), "epochs": round(rows_run / len(data), 2),
            "n_dropped": n_all - len(data)}
