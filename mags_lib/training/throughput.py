"""Where the training time goes, measured on this machine.

* :func:`raw_rate` -- forward and forward+backward tokens/s of the LoRA model on fixed-size batches,
  with the 49k-vocabulary ``lm_head`` over every position or over the completion positions only
  (what TRL's ``chunked_nll`` loss and GRPO's ``logits_to_keep`` do), in fp32 and (where the CPU
  computes in bf16) bf16 autocast. Wall time and process CPU time are both reported: CPU seconds per
  token hardly change when other work shares the cores, wall time does.
* :func:`padding_share` -- the share of a batch that is padding, random batches against batches of
  similar lengths (``train_sampling_strategy="group_by_length"``).
* :func:`chunked_rate` -- a warm-start step of the ``sequence`` loss on a role's real training rows in
  random batches: the padded batch against the rows in chunks of similar length
  (:func:`mags_lib.training.losses.length_chunks`), seconds per batch and the losses of both.
* :func:`grpo_profile` -- the seconds of a GRPO step spent generating, in forward passes for
  log-probabilities (policy and KL reference), in the reward functions, and the rest (backward, optimizer).
* :func:`training_rate` -- the tokens/s a finished stage achieved (its ``log.csv``).

Command line (prints JSON, writes it with ``--out``)::

    python -m mags_lib.training.throughput --threads 2 --out results/bench/training_throughput.json
    python -m mags_lib.training.throughput --threads 2 --chunks write --out results/bench/training_chunks_write.json
    python -m mags_lib.training.throughput --threads 2 --chunks answer --prefix --out results/bench/training_prefix_answer.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["chunked_rate", "grpo_profile", "padding_share", "raw_rate", "training_rate"]


def _lora_model(base_dir: Path, r: int = 32):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from .config import ALL_LINEAR

    torch.manual_seed(0)
    m = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    return get_peft_model(m, LoraConfig(r=r, lora_alpha=r, target_modules=list(ALL_LINEAR), task_type="CAUSAL_LM"))


def raw_rate(base_dir: str | Path | None = None, *, batch: int = 8, seq_len: int = 128, completion_len: int = 32,
             repeats: int = 3, bf16: bool | None = None, threads: int | None = None) -> dict:
    """Tokens/s of forward and forward+backward of SmolLM2 + LoRA r=32 (all linear layers).

    Returns a dict of cases -> ``{"tokens_per_s", "cpu_s_per_1k_tokens"}`` (median of ``repeats``
    after one warm-up): ``forward``, ``fwd_bwd_full_logits`` (lm_head on every position),
    ``fwd_bwd_completion_logits`` (lm_head on the last ``completion_len`` positions only), and the
    bf16 autocast variant of the latter when ``bf16`` (default: when the CPU has avx512_bf16/AMX).
    """
    import torch

    from ..models import base_model_dir
    from .run import _bf16_ok

    if threads:
        torch.set_num_threads(int(threads))
    model = _lora_model(Path(base_dir) if base_dir else base_model_dir())
    model.train()
    ids = torch.randint(100, 49000, (batch, seq_len), generator=torch.Generator().manual_seed(0))
    bf16 = _bf16_ok(True) if bf16 is None else bf16
    n_tok = batch * seq_len

    def run(keep: int | None, backward: bool, autocast: bool) -> dict:
        wall, cpu = [], []
        for i in range(repeats + 1):
            t0, c0 = time.perf_counter(), time.process_time()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                if backward:
                    out = model(input_ids=ids, logits_to_keep=keep or 0)
                    out.logits.float().logsumexp(-1).mean().backward()
                else:
                    with torch.no_grad():
                        model(input_ids=ids, logits_to_keep=keep or 0)
            if i:  # the first call warms up
                wall.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
        model.zero_grad(set_to_none=True)
        w, c = sorted(wall)[len(wall) // 2], sorted(cpu)[len(cpu) // 2]
        return {"tokens_per_s": n_tok / w, "cpu_s_per_1k_tokens": 1000 * c / n_tok}

    out = {"batch": batch, "seq_len": seq_len, "completion_len": completion_len, "threads": torch.get_num_threads(),
           "forward": run(None, False, False), "fwd_bwd_full_logits": run(None, True, False),
           "fwd_bwd_completion_logits": run(completion_len, True, False)}
    if bf16:
        out["fwd_bwd_completion_logits_bf16"] = run(completion_len, True, True)
    out["bf16_native"] = _bf16_ok(True)
    return out


def padding_share(lengths: Sequence[int], batch: int, *, seed: int = 0) -> dict:
    """Share of padding in batches of ``batch`` rows: random order vs sorted into similar lengths.

    >>> padding_share([10, 10, 50, 50], 2)["grouped"]
    0.0
    """
    import numpy as np

    lengths = list(lengths)

    def share(order):
        pad = total = 0
        for i in range(0, len(order), batch):
            chunk = [lengths[j] for j in order[i:i + batch]]
            pad += max(chunk) * len(chunk) - sum(chunk)
            total += max(chunk) * len(chunk)
        return pad / total if total else 0.0

    rng = np.random.default_rng(seed)
    return {"random": round(share(list(rng.permutation(len(lengths)))), 4),
            "grouped": round(share(list(np.argsort(lengths, kind="stable"))), 4)}


def chunked_rate(role: str = "write", profile: str = "default", *, batches: int = 6, batch: int = 8,
                 slacks: Sequence[float | None] = (None, 1.25), share_prefix: Sequence[bool] = (False,),
                 threads: int | None = None, root: str | Path | None = None, seed: int = 0) -> dict:
    """Forward+backward of the ``sequence`` loss on ``batches`` batches of ``role``'s warm-start rows (the
    profile's data, the trained prompt, right padding as TRL's collator pads; random batches, or batches of
    similar lengths in random order where the profile's ``batching`` groups by length), once per arm: every
    ``slack`` (``None``: the padded batch as the collator makes it, a number: the rows in
    :func:`~mags_lib.training.losses.length_chunks`) with every ``share_prefix`` (the tokens all rows of a
    chunk begin with run once, :func:`~mags_lib.training.losses.completion_nll`). The arms take turns on
    each batch (one warm-up batch first), so a change of machine load falls on all of them.

    Returns, per arm (``"1.25"``, or ``"1.25+prefix"`` when ``share_prefix`` holds ``True``), ``seconds``
    (summed), ``tokens_per_s`` (real tokens, padding not counted), ``positions_per_token`` (positions the
    model computed per real token) and ``max_loss_diff`` (largest difference of a batch's loss from the
    first arm's).
    """
    import numpy as np
    import torch

    from ..models import base_model_dir
    from ..roles import ROLE_SPECS
    from .config import profile_config
    from .losses import length_chunks, row_widths, sequence_mean_loss, shared_prefix_len
    from .run import _chat_ids, load_role_data, sft_examples, training_rows

    if threads:
        torch.set_num_threads(int(threads))
    base = base_model_dir()
    cfg = profile_config(role, profile, seed=seed)
    examples = sft_examples(training_rows(load_role_data(role, profile, root=root), cfg), ROLE_SPECS[role].trained)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(base))
    rng = np.random.default_rng(seed)
    tokenized = []
    for i in rng.permutation(len(examples)):
        ex = examples[int(i)]
        full = _chat_ids(tok, ex["prompt"] + ex["completion"])
        n_prompt = len(_chat_ids(tok, ex["prompt"], add_generation_prompt=True))
        if len(full) <= cfg.sft.max_length:
            tokenized.append((full, n_prompt))
        if len(tokenized) == (batches + 1) * batch:
            break
    if batches < 1 or batch < 1 or len(tokenized) < (batches + 1) * batch:
        raise ValueError(f"chunked_rate needs (batches + 1) x batch = {(batches + 1) * batch} rows of at most "
                         f"{cfg.sft.max_length} tokens (one warm-up batch), and {role}/{profile} has {len(tokenized)}: "
                         "ask for fewer batches (batches >= 1, batch >= 1)")

    def collate(rows):
        width = max(len(f) for f, _ in rows)
        ids = torch.full((len(rows), width), int(tok.pad_token_id or 0), dtype=torch.long)
        mask, labels = torch.zeros_like(ids), torch.full_like(ids, -100)
        for j, (full, n_prompt) in enumerate(rows):
            ids[j, :len(full)] = torch.tensor(full)
            mask[j, :len(full)] = 1
            labels[j, n_prompt:len(full)] = torch.tensor(full[n_prompt:])
        return {"input_ids": ids, "attention_mask": mask}, labels

    model = _lora_model(base, r=cfg.lora.r)
    model.train()
    if cfg.sft.batching != "random":  # batches of similar lengths (the profile's shuffled_length), in random order
        tokenized.sort(key=lambda t: len(t[0]))
    runs = [collate(tokenized[k * batch:(k + 1) * batch]) for k in range(batches + 1)]
    if cfg.sft.batching != "random":
        runs = [runs[int(i)] for i in rng.permutation(len(runs))]
    arms = [(s, p) for s in slacks for p in share_prefix]
    keys = [f"{s}+prefix" if p else str(s) for s, p in arms]
    out = {k: {"seconds": 0.0, "tokens": 0, "positions": 0, "max_loss_diff": 0.0} for k in keys}
    for k, (inputs, labels) in enumerate(runs):
        ref, widths = None, row_widths(inputs["attention_mask"])
        for key, (slack, share) in zip(keys, arms):
            model.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            loss, _ = sequence_mean_loss(model, inputs, labels, slack=slack, share_prefix=share)
            loss.backward()
            dt = time.perf_counter() - t0
            ref = loss.item() if ref is None else ref
            if k:  # the first batch warms up
                o = out[key]
                o["seconds"] += dt
                o["tokens"] += sum(widths)
                for c in length_chunks(widths, slack):
                    w, rows = widths[c[0]], torch.tensor(c)
                    shared = shared_prefix_len(inputs["input_ids"][rows, :w], labels[rows, :w],
                                               inputs["attention_mask"][rows, :w]) if share else 0
                    o["positions"] += shared + (w - shared) * len(c)
                o["max_loss_diff"] = max(o["max_loss_diff"], abs(loss.item() - ref))
    for o in out.values():
        o["tokens_per_s"] = round(o["tokens"] / o["seconds"], 1)
        o["positions_per_token"] = round(o["positions"] / o["tokens"], 3)
        o["seconds"] = round(o["seconds"], 2)
    return {"role": role, "profile": profile, "batches": batches, "batch": batch, "batching": cfg.sft.batching,
            "threads": torch.get_num_threads(), "slacks": out}


def training_rate(stage_folder: str | Path) -> dict:
    """Tokens/s (all non-padding tokens of the batches) and seconds per step of a stage's ``log.csv``."""
    from .report import read_log

    log = read_log(Path(stage_folder) / "log.csv")
    rates = [r["tokens_per_s"] for r in log if r.get("tokens_per_s")]
    secs = [r["seconds"] for r in log[1:] if r.get("seconds")]
    med = (lambda xs: sorted(xs)[len(xs) // 2] if xs else None)
    return {"steps": len(log), "tokens_per_s_median": med(rates), "seconds_per_step_median": med(secs)}


def grpo_profile(trainer) -> dict:
    """Wrap a ``GRPOTrainer``'s generation, log-probability passes and reward functions with timers.

    Call before ``trainer.train()``; the returned dict fills in as the steps run (seconds summed over
    the run). The rest of a step (backward, optimizer) is the step time minus these.
    """
    spent = {"generate": 0.0, "logprob_forward": 0.0, "rewards": 0.0, "calls": {}}

    def timed(key, fn):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[key] += time.perf_counter() - t0
                spent["calls"][key] = spent["calls"].get(key, 0) + 1
        return wrapper

    trainer._generate = timed("generate", trainer._generate)
    trainer._get_per_token_logps_and_entropies = timed("logprob_forward", trainer._get_per_token_logps_and_entropies)
    funcs = []
    for f in trainer.reward_funcs:
        w = timed("rewards", f)
        w.__name__ = getattr(f, "__name__", "reward")
        funcs.append(w)
    trainer.reward_funcs = funcs
    return spent


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="raw forward/backward rate of SmolLM2 + LoRA on this machine")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--chunks", metavar="ROLE", default=None,
                    help="instead: the sequence loss on ROLE's real rows in random batches, padded against chunked")
    ap.add_argument("--batches", type=int, default=6, help="with --chunks: timed batches")
    ap.add_argument("--prefix", action="store_true",
                    help="with --chunks: each arm also with the shared prefix run once (losses.completion_nll)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    if a.chunks:
        from .. import repro

        t0 = time.perf_counter()
        res = chunked_rate(a.chunks, batches=a.batches, batch=a.batch, threads=a.threads,
                           share_prefix=(False, True) if a.prefix else (False,))
        command = "python -m mags_lib.training.throughput " + " ".join(sys.argv[1:] if argv is None else argv)
        res["meta"] = repro.run_meta(params=vars(a), seed=0, wall_time_s=time.perf_counter() - t0,
                                     extra={"command": command, "cpu": repro.cpu_model()})
    else:
        res = raw_rate(batch=a.batch, seq_len=a.seq_len, threads=a.threads)
    text = json.dumps(res, indent=1)
    print(text)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
