"""Evaluate a model on held-out sets of the ask, write and answer roles (the "before" row, and trained stages).

Every role is prompted and decoded by its :class:`mags_lib.roles.PromptSpec`, the same one the agent
and the training data use: the untrained model gets the role's *base* prompt (few-shot block, long
system prompt), a trained model the prompt its ``meta.json`` records (``prompt="auto"``, see
:func:`mags_lib.roles.prompt_for_model`). Decoding is greedy, either free or constrained by the spec's
GBNF grammar (llama.cpp; ask and write only). Outputs are scored with
:func:`mags_lib.metrics.evaluate_predictions` (adherence, op P/R/F1, exact-triplet P/R/F1, accuracy
on inputs whose gold is empty) or, for the answer role, :func:`mags_lib.metrics.evaluate_answers`
(accuracy by the game's rule, answerable accuracy, abstention accuracy, false abstentions).
Everything lands in ``out_dir``:

* ``predictions_<set>_<mode>.jsonl`` -- the generations, one line per example (id, kind, input,
  gold, output, tokens, seconds) after a header (cache key, config, prompt, the decoding process's
  pid), written atomically; reused when the model, prompt, grammar and rows are unchanged.
  Per-example scores are recomputed from them on every run (cheap). With ``EvalConfig.n_jobs`` > 1
  the (set, mode) jobs are decoded by that many processes, one llama.cpp thread each;
* ``metrics.json`` and ``table.csv`` -- one row per (set, mode); ``by_kind.csv`` -- scores per kind.

Command line (the "before" row of the default profile)::

    python -m mags_lib.evaluate --profile default --run-tag default --n 100
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from . import protocol
from .metrics import evaluate_answers, evaluate_predictions
from .repro import atomic_write_text
from .roles import ROLE_NAMES, ROLE_SPECS, PromptSpec, prompt_for_model

__all__ = ["EvalConfig", "before_sets", "evaluate_sets", "evaluated_sets", "main", "sample_rows"]

MODES = ("free", "grammar")


@dataclass
class EvalConfig:
    """How the model is run and scored (its prompt and decoding come from :data:`mags_lib.roles.ROLE_SPECS`)."""

    backend: str = "llamacpp"  # llamacpp | transformers | vllm
    model: str | None = None  # None: the embedded SmolLM2-135M-Instruct
    prompt: str = "auto"  # auto (the model's own: trained prompt if its meta.json says so) | base | trained
    prompt_model: str | None = None  # auto: read the prompt from this model folder's meta.json (e.g. the adapter a LoRA GGUF was converted from)
    modes: tuple[str, ...] = MODES  # "free" and/or "grammar" (GBNF-constrained; ask and write only)
    max_new_tokens: int | None = None  # None: the prompt spec's; else a cap (e.g. a quick smoke run)
    n_per_set: int = 100  # examples drawn from each evaluation set (0 = all)
    embedder: str = "minilm"  # embedder of the op-F1 metric ("hash" only for tests)
    seed: int = 0  # sampling of the examples
    batch_size: int = 8  # prompts per backend call (progress granularity)
    retrieval: bool = True  # ask sets with a context: also score the share of gold facts the queries recall
    stop_repeats: bool = True  # ask / write: decoding ends at the first repeated tag (False: as the model loops)
    n_jobs: int = 1  # processes decoding the (set, mode) jobs at once, each its own backend on 1 thread (1: in this process)

    def __post_init__(self) -> None:
        unknown = set(self.modes) - set(MODES)
        if unknown or not self.modes:
            raise ValueError(f"modes must be a non-empty subset of {MODES}, got {self.modes}")
        if self.prompt not in ("auto", "base", "trained"):
            raise ValueError(f"prompt must be 'auto', 'base' or 'trained', got {self.prompt!r}")
        if (self.max_new_tokens is not None and self.max_new_tokens < 1) or self.n_per_set < 0 or self.batch_size < 1:
            raise ValueError("max_new_tokens None or >= 1, n_per_set >= 0 and batch_size >= 1 required")
        if self.n_jobs < 1:
            raise ValueError(f"n_jobs must be >= 1 (1: decode in this process), got {self.n_jobs}")
        self.modes = tuple(self.modes)

    def prompt_spec(self, role: str, model_path: str | None) -> PromptSpec:
        """The prompt of ``role`` for this evaluation (see the ``prompt`` field)."""
        if self.prompt == "auto":
            return prompt_for_model(role, self.prompt_model or model_path)
        return ROLE_SPECS[role].prompt(self.prompt == "trained")


def sample_rows(rows: Sequence[dict], n: int, seed: int = 0) -> list[dict]:
    """``n`` rows drawn without replacement (all when ``n`` is 0 or too large), in their original order.

    >>> rows = [{"i": i} for i in range(10)]
    >>> a = sample_rows(rows, 3, seed=1)
    >>> a == sample_rows(rows, 3, seed=1), len(a), a == sorted(a, key=lambda r: r["i"])
    (True, 3, True)
    """
    rows = list(rows)
    if n <= 0 or n >= len(rows):
        return rows
    idx = np.sort(np.random.default_rng(seed).choice(len(rows), size=n, replace=False))
    return [rows[i] for i in idx]


def _file_id(path: str) -> str:
    try:
        st = os.stat(path)
    except OSError:
        return path
    return f"{path}:{st.st_size}:{st.st_mtime_ns}"


def _model_id(backend) -> str:
    """The backend's model path plus its size and modification time, so that a model re-exported to
    the same path invalidates cached predictions; for a LoRA file, also the base model it is applied
    onto (same identity) and the scale (the backend's ``memo_identity``): a new base under the same
    LoRA path is another model."""
    ident = _file_id(str(getattr(backend, "model_path", "")))
    memo = getattr(backend, "memo_identity", None)
    extra = memo() if callable(memo) else []
    return "|".join([ident, *(_file_id(x) if isinstance(x, str) else repr(x) for x in extra)])


def evaluated_sets(folder: str | Path, mode: str = "free") -> list[str]:
    """The sets the last :func:`evaluate_sets` into ``folder`` scored in ``mode`` (its ``metrics.json``), in
    order; predictions files of other sets in the folder are left over from earlier evaluations (another
    profile, a set dropped since) and are not this evaluation's. Empty when the folder has no metrics."""
    path = Path(folder) / "metrics.json"
    if not path.is_file():
        return []
    rows = json.loads(path.read_text()).get("rows") or []
    return [r["set"] for r in rows if r.get("mode") == mode]


def _key(cfg: EvalConfig, mode: str, rows: Sequence[dict], model_path: str, spec: PromptSpec) -> str:
    h = hashlib.sha256()
    h.update(json.dumps({"model": model_path, "backend": cfg.backend, "mode": mode, "prompt": spec.to_dict(),
                         "few_shot_examples": protocol.FEW_SHOT.get(spec.role, [])[:spec.few_shot],
                         "max_new_tokens": _max_new(cfg, spec),
                         "grammar": spec.grammar() if mode == "grammar" else None,
                         "stop_repeats": cfg.stop_repeats and spec.stop_repeats}, sort_keys=True).encode())
    for r in rows:
        h.update(f"{r['id']}\x00{r['input']}\x00{r['response']}\x00{_memory_text(r)}\n".encode())
    return h.hexdigest()[:16]


def _memory_text(row: dict) -> str:
    return protocol.format_facts(row["memory"]) if row.get("role") == "answer" else ""


def _max_new(cfg: EvalConfig, spec: PromptSpec) -> int:
    return spec.max_new_tokens if cfg.max_new_tokens is None else min(cfg.max_new_tokens, spec.max_new_tokens)


def _load_cached(path: Path, key: str) -> list[dict] | None:
    if not path.exists():
        return None
    from .repro import jsonl_lines

    lines = jsonl_lines(path.read_text())
    if not lines:
        return None
    try:
        head = json.loads(lines[0])
        return [json.loads(x) for x in lines[1:]] if head.get("cache_key") == key else None
    except json.JSONDecodeError:
        return None


def evaluate_sets(sets: dict[str, Sequence[dict]], out_dir: str | Path, config: EvalConfig | None = None,
                  *, backend=None, progress: bool = True, reuse: Sequence[str | Path] = ()):
    """Run the model on every set and mode, score, save, and return the table (a pandas DataFrame).

    Parameters
    ----------
    sets : dict
        Set name -> rows (all of one role; see :mod:`mags_lib.data` for the columns).
    out_dir : path
        Where predictions, ``metrics.json``, ``table.csv`` and ``by_kind.csv`` go.
    config : EvalConfig, optional
    backend : Backend, optional
        An open backend to use (else one is loaded from ``config`` and closed at the end).
    reuse : paths, optional
        Folders of earlier evaluations (e.g. notebook 10's before row for notebook 20's base stage): a
        predictions file there with the same cache key (same model file, prompt, decoding and rows) is
        copied into ``out_dir`` instead of decoding again.

    Returns
    -------
    pandas.DataFrame
        Columns: set, role, mode, prompt, n, then adherence, op_p, op_r, op_f1, exact_p, exact_r,
        exact_f1, empty_acc (ask, write; ``retrieval`` for ask sets with a context: the share of the
        gold facts the predicted queries recall from a graph of the context) or accuracy, answerable_acc, abstain_acc, false_abstain,
        words_mean (answer), then new_tokens_mean, seconds, tokens_per_s. The grammar mode is not run
        for the answer role (it has no grammar).
    """
    import pandas as pd

    cfg = config or EvalConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in sets.items():
        if not rows:
            raise ValueError(f"set {name!r} holds no rows: drop it from the sets to evaluate (or rebuild its data)")
        roles = {r["role"] for r in rows}
        if len(roles) != 1 or roles - set(ROLE_NAMES):
            raise ValueError(f"set {name!r} must hold rows of one role (ask, write or answer), found {sorted(roles)}")
    picked = {name: sample_rows(rows, cfg.n_per_set, cfg.seed) for name, rows in sets.items()}
    own = backend is None
    if own:
        from .backends import load_backend

        backend = load_backend(cfg.backend, model=cfg.model)
    needs_grammar = any(rows and rows[0]["role"] != "answer" for rows in picked.values())
    if "grammar" in cfg.modes and needs_grammar and not backend.supports_grammar:
        raise ValueError(f"backend {backend.name!r} cannot constrain decoding: drop 'grammar' from modes or "
                         "use the 'llamacpp' backend")
    table, by_kind = [], []
    try:
        jobs = [(name, mode) for name, rows in picked.items() for mode in cfg.modes
                if rows and not (mode == "grammar" and rows[0]["role"] == "answer")]
        bar = tqdm(total=sum(len(picked[n]) for n, _ in jobs), desc="evaluate", disable=not progress)
        model_path = getattr(backend, "model_path", None) or cfg.model
        reuse = tuple(Path(r) for r in reuse)
        by_workers = (_decode_in_workers(picked, jobs, cfg, out, model_path, _model_id(backend), bar, reuse)
                      if cfg.n_jobs > 1 and own else set())
        for name, mode in jobs:
            rows = picked[name]
            role = rows[0]["role"]
            spec = cfg.prompt_spec(role, model_path)
            records = _generate(backend, rows, spec, mode, cfg, out, name, None if (name, mode) in by_workers else bar,
                                reuse)
            for x, r in zip(records, rows):  # the labels of today's rows (the cache key holds ids, inputs, golds)
                x["kind"] = r["kind"]
            outputs = [x["output"] for x in records]
            if role == "answer":
                rep = evaluate_answers(outputs, [list(r["aliases"]) for r in rows])
                score_cols = ("correct", "abstained")
            else:
                rep = evaluate_predictions(outputs, [x["gold"] for x in records], role, embedder=cfg.embedder)
                score_cols = ("adheres", "op_f1", "exact_f1")
            for x, pe in zip(records, rep.per_example):
                x.update(pe)
            extra = {}
            if role == "ask" and cfg.retrieval and any(r.get("context") for r in rows):
                from .rewards import ask_retrieval_scores

                scores = ask_retrieval_scores(outputs, context=[r.get("context") or [] for r in rows],
                                              gold_facts=[r.get("gold_facts") or [] for r in rows],
                                              embedder=cfg.embedder, seed=cfg.seed)
                # recall, and beside it the precision of what the queries recalled: recall alone rewards spraying
                got, prec = [d["recall"] for d in scores], [d["precision"] for d in scores]
                for x, v, pr in zip(records, got, prec):
                    x["retrieval"], x["retrieval_precision"] = v, pr
                extra["retrieval"] = float(np.mean(got))
                extra["retrieval_precision"] = float(np.mean(prec))
                score_cols += ("retrieval", "retrieval_precision")
            secs = float(sum(x["seconds"] for x in records))
            new_tok = float(sum(x["n_new_tokens"] for x in records))
            table.append({"set": name, "role": role, "mode": mode, "prompt": spec.name, **rep.summary(), **extra,
                          "new_tokens_mean": new_tok / max(1, len(records)), "seconds": secs,
                          "tokens_per_s": new_tok / secs if secs > 0 else 0.0})
            df = pd.DataFrame(records)
            for kind, grp in df.groupby("kind"):
                by_kind.append({"set": name, "mode": mode, "kind": kind, "n": len(grp),
                                **{f"{c}_mean": float(grp[c].mean()) for c in score_cols}})
        bar.close()
    finally:
        if own:
            backend.close()
    result = pd.DataFrame(table)
    result.to_csv(out / "table.csv", index=False)
    pd.DataFrame(by_kind).to_csv(out / "by_kind.csv", index=False)
    atomic_write_text(out / "metrics.json", json.dumps({"config": asdict(cfg), "rows": table}, indent=1, default=str))
    return result


def _decode_in_workers(picked: dict[str, list[dict]], jobs: list[tuple[str, str]], cfg: EvalConfig, out: Path,
                       model_path: str | None, model_id: str, bar, reuse: tuple[Path, ...]) -> set[tuple[str, str]]:
    """Decode the (set, mode) jobs whose predictions are not cached in ``cfg.n_jobs`` processes (joblib), each
    with its own backend on one thread, largest job first; each writes its ``predictions_<set>_<mode>.jsonl``,
    which the caller's pass then reads as cached, so scores and tables are made exactly as in one process.
    A worker's model must be the one the caller loaded: its identity (path, size, mtime) is checked.
    Returns the jobs the workers decoded (none when fewer than two were left to decode)."""
    from joblib import Parallel, delayed

    todo = []
    for name, mode in jobs:
        rows = picked[name]
        key = _key(cfg, mode, rows, model_id, cfg.prompt_spec(rows[0]["role"], model_path))
        if all(_load_cached(d / f"predictions_{name}_{mode}.jsonl", key) is None for d in (out, *reuse)):
            todo.append((name, mode))
    if len(todo) < 2:
        return set()
    todo.sort(key=lambda j: -len(picked[j[0]]))
    par = Parallel(n_jobs=min(cfg.n_jobs, len(todo)), return_as="generator_unordered")
    for n_rows in par(delayed(_decode_job)(cfg, name, mode, picked[name], out, model_id) for name, mode in todo):
        bar.update(n_rows)
    return set(todo)


def _decode_job(cfg: EvalConfig, name: str, mode: str, rows: list[dict], out: Path, model_id: str) -> int:
    """One worker's job: load the backend on one thread, decode ``rows`` in ``mode``, write the predictions."""
    from .backends import load_backend

    with load_backend(cfg.backend, model=cfg.model, n_threads=1) as backend:
        if _model_id(backend) != model_id:
            raise RuntimeError(f"the worker loaded {_model_id(backend)}, not the caller's {model_id}")
        spec = cfg.prompt_spec(rows[0]["role"], getattr(backend, "model_path", None) or cfg.model)
        _generate(backend, rows, spec, mode, cfg, out, name, None)
    return len(rows)


def _generate(backend, rows: list[dict], spec: PromptSpec, mode: str, cfg: EvalConfig, out: Path, name: str,
              bar, reuse: Sequence[Path] = ()) -> list[dict]:
    """The model's outputs for ``rows`` (cached in ``predictions_<name>_<mode>.jsonl``, or copied from the same
    file of a ``reuse`` folder with the same cache key); ``bar`` may be None."""
    key = _key(cfg, mode, rows, _model_id(backend), spec)
    pred_path = out / f"predictions_{name}_{mode}.jsonl"
    for folder in (out, *reuse):
        records = _load_cached(folder / pred_path.name, key)
        if records is not None:
            if folder != out:
                atomic_write_text(pred_path, (folder / pred_path.name).read_text())
            if bar is not None:
                bar.update(len(rows))
            return records
    records = []
    grammar = spec.grammar() if mode == "grammar" else None
    prompts = [spec.messages(r["input"], facts=r["memory"] if spec.role == "answer" else None) for r in rows]
    for start in range(0, len(rows), cfg.batch_size):
        chunk = prompts[start:start + cfg.batch_size]
        gens = backend.generate(chunk, max_new_tokens=_max_new(cfg, spec), temperature=0.0, grammar=grammar,
                                stop=list(spec.stop) or None, seed=cfg.seed,
                                stop_repeats=cfg.stop_repeats and spec.stop_repeats)
        for r, g in zip(rows[start:start + cfg.batch_size], gens):
            records.append({"id": r["id"], "kind": r["kind"], "input": r["input"], "gold": r["response"],
                            "output": g.text, "n_prompt_tokens": g.n_prompt_tokens, "n_new_tokens": g.n_new_tokens,
                            "seconds": g.seconds})
        if bar is not None:
            bar.update(len(chunk))
    lines = [json.dumps({"cache_key": key, "set": name, "mode": mode, "config": asdict(cfg),
                         "prompt": spec.to_dict(), "pid": os.getpid()}, default=str)]
    lines += [json.dumps(x, ensure_ascii=False) for x in records]
    atomic_write_text(pred_path, "\n".join(lines) + "\n")
    return records


def before_sets(profile: str = "default", root: str | Path | None = None,
                sources: Sequence[str] = ("gen", "seed"), roles: Sequence[str] = ROLE_NAMES, *,
                split: str = "test", note: Callable[[str], None] | None = print) -> dict[str, list[dict]]:
    """Held-out splits of the processed datasets of ``profile`` (``gen_ask``, ``gen_write``,
    ``gen_answer``, ``seed_ask``, ``seed_write``, and ``gen_answer_textworld`` when it was built:
    :mod:`mags_lib.data.textworld`). The seed datasets are optional: when they were
    not imported, ``note`` gets one line saying they were skipped and how to add them."""
    from .data import dataset_name, load_processed, processed_root

    sets, missing = {}, []
    for source in sources:
        for role in roles:
            if source == "seed" and role == "answer":
                continue
            name = dataset_name(source, role, profile)
            if source == "seed" and not (processed_root(root) / name / "data").exists():
                missing.append(name)
                continue
            sets[name] = load_processed(name, root=root)[split].to_list()
    if "gen" in sources and "answer" in roles:  # the TextWorld-register rows, an optional training input
        from .data.textworld import dataset_name_tw

        name = dataset_name_tw(profile)
        if (processed_root(root) / name / "data").exists():
            sets[name] = load_processed(name, root=root)[split].to_list()
    if missing and note is not None:
        note(f"seed sets skipped ({', '.join(missing)} not in data/processed): notebook 10 imports them when "
             "../shared/data/seed_syn_dual exists (or pass -p seed_path=... to it)")
    return sets


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: evaluate the base model on the processed test splits and print the table."""
    from . import repro

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="default", choices=["smoke", "default", "full"])
    ap.add_argument("--run-tag", default="default")
    ap.add_argument("--stage", default="10_generate_datasets")
    ap.add_argument("--n", type=int, default=100, help="examples per set (0 = all)")
    ap.add_argument("--backend", default="llamacpp")
    ap.add_argument("--model", default=None)
    ap.add_argument("--modes", default="free,grammar")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1, help="processes decoding at once, one thread each")
    a = ap.parse_args(argv)
    cfg = EvalConfig(backend=a.backend, model=a.model, modes=tuple(a.modes.split(",")), n_per_set=a.n, seed=a.seed,
                     n_jobs=a.jobs)
    out = repro.run_dir(a.run_tag, a.stage) / "before"
    t0 = time.time()
    df = evaluate_sets(before_sets(a.profile), out, cfg)
    repro.write_meta(out, params=asdict(cfg) | {"profile": a.profile}, seed=a.seed, wall_time_s=time.time() - t0)
    print(df.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"saved under {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
