"""Parity of exported GGUF files with the transformers model they came from.

The reference is the PEFT adapter on its float32 base in transformers (merged in float32, the model
training produced). Each held-out example of a role is prompted exactly as the role's model is
prompted (its chat messages rendered with the chat template), and for every file:

* **teacher-forced top-1 agreement** -- the prompt followed by the gold response and the end-of-turn
  token is fed to both models as the same token ids; at every position that predicts a response
  token, do both put the same token first? (share of positions, pooled over the examples);
* **greedy output equality** -- share of examples whose greedy outputs are the same text;
* **the role's metrics** on each file's greedy outputs: adherence, op F1 and exact-triplet F1 (ask,
  write; :func:`mags_lib.metrics.evaluate_predictions`) -- the same for the reference, so the cost of a
  quantization is read in points;
* **size on disk** and **tokens/s** (greedy, single stream, prompt processing included; the
  reference generates in batches, its figure is for orientation only).

Prompts and decoding follow the role's :class:`~mags_lib.roles.PromptSpec`: the one the adapter was
trained with (its run's ``meta.json``), or the role's trained prompt for an adapter that has none (a
stand-in); its stop strings end every output and its budget caps ``max_new_tokens``. The answer role
is scored by the game's rule (:func:`mags_lib.metrics.evaluate_answers`: accuracy, abstention
accuracy, false abstentions).

Every prompt is evaluated afresh in llama.cpp (no KV prefix reuse between examples), so an output
does not depend on the order of the examples.

Near-ties decide greedy equality: a file that agrees on 99.9% of teacher-forced positions can still
diverge in a long output where two tokens were within a rounding error, after which the outputs
differ entirely. Both figures are reported for that reason.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["ParityConfig", "parity", "parity_spec", "parity_summary"]


@dataclass
class ParityConfig:
    """How :func:`parity` runs.

    Attributes
    ----------
    n_prompts : int
        Held-out examples per role (0 = all given).
    max_new_tokens : int
        Greedy generation budget per output (capped by the prompt spec's).
    n_threads : int
        llama.cpp and torch threads (1 keeps figures stable on a shared machine).
    n_ctx : int
        llama.cpp context window.
    batch_size : int
        Prompts per transformers generation call (left padding).
    embedder : str
        Embedder of the op-F1 metric (``"minilm"``; ``"hash"`` only for tests).
    seed : int
        Which examples are drawn.
    """

    n_prompts: int = 100
    max_new_tokens: int = 128
    n_threads: int = 1
    n_ctx: int = 2048
    batch_size: int = 8
    embedder: str = "minilm"
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("max_new_tokens", "n_threads", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.n_prompts < 0 or self.n_ctx < 64:
            raise ValueError("n_prompts must be >= 0 and n_ctx >= 64")


def parity_spec(role: str, adapter: str | os.PathLike | None) -> Any:
    """The :class:`~mags_lib.roles.PromptSpec` a trained ``adapter`` of ``role`` is prompted with: the one
    recorded in its run's ``meta.json``, else the role's trained prompt (no few-shot block)."""
    from ..roles import ROLE_SPECS, prompt_for_model, trained_meta

    return prompt_for_model(role, adapter) if trained_meta(adapter) is not None else ROLE_SPECS[role].trained


def _eos_id(backend: Any) -> int:
    eos = backend.model.generation_config.eos_token_id
    eos = eos[0] if isinstance(eos, (list, tuple)) else eos
    return int(eos if eos is not None else backend.tokenizer.eos_token_id)


def _role_metrics(role: str, outputs: Sequence[str], rows: Sequence[Mapping], embedder: str) -> dict:
    from .. import metrics, protocol

    if role == "answer":
        s = metrics.evaluate_answers(list(outputs), [list(r["aliases"]) for r in rows]).summary()
        return {"accuracy": s["accuracy"], "abstain_acc": s["abstain_acc"], "false_abstain": s["false_abstain"]}
    if role in protocol.ROLES:
        s = metrics.evaluate_predictions(list(outputs), [r["response"] for r in rows], role,
                                         embedder=embedder).summary()
        return {"adherence": s["adherence"], "op_f1": s["op_f1"], "exact_f1": s["exact_f1"]}
    return {}


def parity(role: str, rows: Sequence[Mapping[str, Any]], reference: Any, files: Mapping[str, str | os.PathLike],
           config: ParityConfig | None = None, *,
           spec: Any = None, stop: Sequence[str] | None = None, out_dir: str | os.PathLike | None = None,
           top1_only: Sequence[str] = (), progress: bool = True) -> Any:
    """Compare GGUF files with the transformers model they were exported from.

    Parameters
    ----------
    role : str
        ``"ask"``, ``"write"`` or ``"answer"``.
    rows : list of dict
        Held-out examples (``input``, ``response``; for ``answer`` also the recalled ``memory`` and the
        accepted ``aliases``).
    reference : path or Backend
        The PEFT adapter folder the files came from (loaded with the transformers backend, merged in
        float32), or an open transformers backend.
    files : dict
        Label -> GGUF file (a merged model, or a LoRA adapter applied onto the embedded base).
    spec : mags_lib.roles.PromptSpec, optional
        How the rows are prompted and decoded (default :func:`parity_spec` of the reference).
    stop : list of str, optional
        Strings that end a greedy output, for every model (default: the spec's).
    out_dir : path, optional
        Where ``parity_<role>.jsonl`` (every output, per example) and ``parity_<role>.csv`` go.
    top1_only : list of str
        Labels of ``files`` measured by teacher-forced top-1 agreement alone, on transformers' token ids
        (no text goes through the file's tokenizer): for files whose tokenizer llama.cpp cannot use.
        Their greedy and quality figures are NaN.

    Returns
    -------
    pandas.DataFrame
        One row for the reference and one per file: label, file, size_mb, n_prompts, n_positions,
        top1_agreement, greedy_equal, the role's metrics (adherence, op_f1, exact_f1 for ask and
        write; accuracy, abstain_acc, false_abstain for answer), tokens_per_s, load_s.
    """
    import pandas as pd
    from tqdm.auto import tqdm

    from ..backends import load_backend
    from ..evaluate import sample_rows

    cfg = config or ParityConfig()
    unknown = set(top1_only) - set(files)
    if unknown:
        raise ValueError(f"top1_only names labels that are not in files: {sorted(unknown)}")
    if not rows:
        raise ValueError(f"no held-out rows for the {role} role")
    picked = sample_rows(rows, cfg.n_prompts, cfg.seed)
    own = not hasattr(reference, "generate")
    spec = spec or parity_spec(role, reference if own else getattr(reference, "model_path", None))
    if spec.role != role:
        raise ValueError(f"the prompt spec is for the {spec.role!r} role, not {role!r}")
    stop = list(spec.stop) if stop is None else list(stop)
    max_new = min(cfg.max_new_tokens, spec.max_new_tokens)
    t0 = time.perf_counter()
    ref = load_backend("transformers", model=reference, n_threads=cfg.n_threads,
                       batch_size=cfg.batch_size) if own else reference
    ref_load = time.perf_counter() - t0 if own else float("nan")
    table, per_example = [], [{"id": r.get("id", i), "input": r["input"], "gold": r["response"]}
                              for i, r in enumerate(picked)]
    try:
        texts = [ref.render(spec.messages(r["input"], facts=r.get("memory") if role == "answer" else None))
                 for r in picked]
        eos = _eos_id(ref)
        seqs = []
        for text, r in zip(texts, picked):
            p = ref.tokenize(text)
            g = (ref.tokenize(r["response"]) if r["response"] else []) + [eos]
            seqs.append((p, g))
        too_long = [i for i, (p, g) in enumerate(seqs) if len(p) + max(len(g), max_new) > cfg.n_ctx]
        if too_long:
            raise ValueError(f"{len(too_long)} prompts do not fit n_ctx={cfg.n_ctx} with their response or "
                             f"{max_new} new tokens (e.g. example {picked[too_long[0]].get('id')}); "
                             "raise n_ctx")
        total = len(picked) * (len(files) + 1)
        bar = tqdm(total=2 * total, desc=f"parity {role}", disable=not progress)
        ref_top = []
        for p, g in seqs:
            ref_top.append(ref.top1(p + g)[len(p) - 1:len(p) + len(g) - 1])
            bar.update(1)
        ref_out, ref_secs, ref_new = [], 0.0, 0
        for start in range(0, len(texts), cfg.batch_size):
            gens = ref.generate(texts[start:start + cfg.batch_size], max_new_tokens=max_new, stop=stop or None,
                                stop_repeats=spec.stop_repeats)
            ref_out += [g.text for g in gens]
            ref_secs += gens[0].seconds
            ref_new += sum(g.n_new_tokens for g in gens)
            bar.update(len(gens))
        n_pos = sum(len(t) for t in ref_top)
        for ex, out in zip(per_example, ref_out):
            ex["transformers"] = out
        table.append({"label": "transformers", "file": str(getattr(ref, "model_path", reference)),
                      "size_mb": float("nan"), "n_prompts": len(picked), "n_positions": n_pos,
                      "top1_agreement": 1.0, "greedy_equal": 1.0,
                      **_role_metrics(role, ref_out, picked, cfg.embedder),
                      "tokens_per_s": ref_new / ref_secs if ref_secs > 0 else float("nan"), "load_s": ref_load})
        for label, path in files.items():
            t0 = time.perf_counter()
            b = load_backend("llamacpp", model=path, n_threads=cfg.n_threads, n_ctx=cfg.n_ctx, share_model=False,
                             prefix_cache=False)
            load_s = time.perf_counter() - t0
            try:
                agree = 0
                for ex, (p, g), rt in zip(per_example, seqs, ref_top):
                    t = b.top1(p + g)[len(p) - 1:len(p) + len(g) - 1]
                    hits = sum(int(a == c) for a, c in zip(t, rt))
                    agree += hits
                    ex[f"{label}_top1"] = hits / len(rt)
                    bar.update(1)
                outs, secs, new = [], 0.0, 0
                if label in top1_only:  # its tokenizer is never used: no text goes through it, no output
                    bar.update(len(texts))
                else:
                    for ex, text in zip(per_example, texts):
                        gen = b.generate([text], max_new_tokens=max_new, stop=stop or None,
                                         stop_repeats=spec.stop_repeats)[0]
                        outs.append(gen.text)
                        secs += gen.seconds
                        new += gen.n_new_tokens
                        ex[label] = gen.text
                        bar.update(1)
            finally:
                b.close()
            row = {"label": label, "file": str(path), "size_mb": Path(path).stat().st_size / 2**20,
                   "n_prompts": len(picked), "n_positions": n_pos, "top1_agreement": agree / n_pos,
                   "greedy_equal": sum(int(o == r) for o, r in zip(outs, ref_out)) / len(outs) if outs else float("nan"),
                   **(_role_metrics(role, outs, picked, cfg.embedder) if outs else {}),
                   "tokens_per_s": new / secs if secs > 0 else float("nan"), "load_s": load_s}
            table.append(row)
        bar.close()
    finally:
        if own:
            ref.close()
    df = pd.DataFrame(table)
    df.insert(0, "role", role)
    if out_dir is not None:
        from ..repro import atomic_write_text

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        head = json.dumps({"role": role, "config": asdict(cfg), "prompt": spec.to_dict(), "max_new_tokens": max_new,
                           "files": {k: str(v) for k, v in files.items()}})
        atomic_write_text(out / f"parity_{role}.jsonl",
                          "\n".join([head] + [json.dumps(e, ensure_ascii=False) for e in per_example]) + "\n")
        df.to_csv(out / f"parity_{role}.csv", index=False)
    return df


def parity_summary(df: Any) -> dict:
    """A parity table as ``{label: {figure: value}}`` for :func:`mags_lib.export.record_parity`."""
    keep = [c for c in ("n_prompts", "n_positions", "top1_agreement", "greedy_equal", "adherence", "op_f1",
                        "exact_f1", "accuracy", "abstain_acc", "false_abstain", "tokens_per_s", "size_mb")
            if c in df.columns]
    return {row["label"]: {k: (None if row[k] != row[k] else row[k]) for k in keep} for _, row in df.iterrows()}
