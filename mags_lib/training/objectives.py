"""Training objectives compared (issue 15): variants of one role's GRPO stage from one warm start.

A *variant* is a training objective (:data:`mags_lib.training.config.OBJECTIVES`) applied to the
role's profile configuration with :func:`~mags_lib.training.config.with_objective`:

* ``imitation`` -- the profile's own rewards (exact / op F1 first): the run of notebook 20 itself;
* ``graph_cost-<w>`` -- the same plus the graph regulariser :func:`mags_lib.rewards.graph_cost_reward`
  at weight ``w`` (operations, new nodes and edges, churn beyond the gold's);
* ``outcome`` -- the prediction term: a frozen reader answers a mini-scenario's questions from the
  memory the completion built (write) or recalled (ask), on training-world scenarios.

Every variant continues the **same warm start** (copied from the notebook-20 run, never retrained,
:func:`mags_lib.training.run.reuse_warm_start`), so the variants differ only in their GRPO rewards
and spend the same GRPO steps. Each is saved as its own trained run, ``models/<role>/<tag>/`` with
``tag = <run_tag>-obj-<variant>``, so the game and LoCoMo notebooks can evaluate any of them by
configuration (``MAGS.default(models="trained", trained_tag=tag)`` once exported).

Measured per variant (:func:`evaluate_variant`): held-out adherence, op F1 and exact F1 (the test
splits, as notebook 20), operations stored per input against the gold's, and the **held-out
outcome**: the share of questions of mini-scenarios built from the *test* worlds that the frozen
reader answers from the memory the variant's outputs built -- the downstream figure the outcome
reward optimises, on worlds no training row saw.

>>> [v.name for v in variants(("imitation", "graph_cost", "outcome"), (0.5, 2.0))]
['imitation', 'graph_cost-0.5', 'graph_cost-2', 'outcome']
>>> variant_tag("default", variants(("graph_cost",), (0.5,))[0])
'default-obj-graph_cost-0.5'
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..repro import jsonl_lines
from .config import OBJECTIVES, TrainConfig, profile_config, with_objective

__all__ = ["Variant", "evaluate_variant", "findings", "heldout_outcome", "ops_per_input", "paired_with", "plot_signal",
           "plot_tradeoff", "variant_config", "variant_table", "variant_tag", "variants"]


@dataclass(frozen=True)
class Variant:
    """One training objective of a comparison."""

    name: str
    objective: str
    graph_cost_weight: float | None = None


def variants(objectives: Sequence[str], graph_cost_weights: Sequence[float] = (0.5,)) -> list[Variant]:
    """The variants of ``objectives`` (``graph_cost`` once per weight), in the order given."""
    out = []
    for obj in objectives:
        if obj not in OBJECTIVES:
            raise ValueError(f"unknown objective {obj!r}: choose from {OBJECTIVES}")
        if obj == "graph_cost":
            if not graph_cost_weights:
                raise ValueError("the graph_cost objective needs at least one weight")
            for w in graph_cost_weights:
                if not w > 0:
                    raise ValueError(f"graph-cost weights must be > 0, got {w!r}")
                out.append(Variant(f"graph_cost-{float(w):g}", obj, float(w)))
        else:
            out.append(Variant(obj, obj))
    if len({v.name for v in out}) != len(out):
        raise ValueError(f"repeated variants: {[v.name for v in out]}")
    return out


def variant_tag(run_tag: str, variant: Variant) -> str:
    """The run tag a variant is trained under (``imitation`` is notebook 20's run itself)."""
    return run_tag if variant.objective == "imitation" else f"{run_tag}-obj-{variant.name}"


def variant_config(role: str, profile: str, variant: Variant, *, seed: int = 0, reader_threads: int = 1,
                   **overrides) -> TrainConfig:
    """The role's profile configuration with the variant's GRPO rewards (warm start unchanged)."""
    base = profile_config(role, profile, seed=seed, **overrides)
    kw = {"graph_cost_weight": variant.graph_cost_weight} if variant.objective == "graph_cost" else {}
    if variant.objective == "outcome":
        kw["reader_threads"] = reader_threads
    return with_objective(base, variant.objective, **kw)


def ops_per_input(predictions: str | Path) -> dict:
    """Operations per input in an evaluation's predictions file (``predictions_<set>_<mode>.jsonl``):
    the model's (lenient parse) and the gold's means, and their ratio."""
    from .. import protocol

    recs = _prediction_records(predictions)
    if not recs:
        raise ValueError(f"{predictions} holds no predictions")
    role = "write" if any("<memory_write>" in r["gold"] for r in recs) else "ask"

    def count(text: str) -> int:
        return len(protocol.parse(text, role=role, mode="lenient").ops)

    pred = sum(count(r["output"]) for r in recs) / len(recs)
    gold = sum(count(r["gold"]) for r in recs) / len(recs)
    return {"n": len(recs), "pred_ops": pred, "gold_ops": gold, "ratio": pred / gold if gold else None}


def _outcome_key(role: str, backend, prompt, rows: Sequence[dict], *, profile: str, seed: int, reader,
                 embedder) -> str:
    """Cache key of a held-out outcome: the model file (path, size, mtime), the prompt, the reader and the
    scenarios themselves (ids, inputs, questions and answers)."""
    import hashlib

    from ..evaluate import _model_id

    h = hashlib.sha256(json.dumps({"role": role, "model": _model_id(backend), "prompt": prompt.to_dict(),
                                   "profile": profile, "seed": seed, "reader": str(reader), "embedder": str(embedder)},
                                  sort_keys=True, default=str).encode())
    for r in rows:
        h.update(json.dumps([r["id"], r["input"], r["scenario"]], sort_keys=True, default=str).encode() + b"\n")
    return h.hexdigest()[:16]


def _prediction_records(path: str | Path) -> list[dict]:
    """The records of an evaluation's ``predictions_<set>_<mode>.jsonl`` (its first line, the cache header,
    skipped)."""
    return [json.loads(x) for x in jsonl_lines(Path(path).read_text())[1:]]


def _outcome_records(path: Path) -> list[dict]:
    """The per-scenario records of a ``heldout_outcome.jsonl`` (its cache header skipped; files written
    before the header have none)."""
    lines = jsonl_lines(path.read_text())
    recs = [json.loads(x) for x in lines]
    return [r for r in recs if "cache_key" not in r]


def heldout_outcome(role: str, backend, prompt, *, profile: str = "default", seed: int = 0, n: int = 100,
                    reader="llamacpp", reader_threads: int = 1, embedder="minilm", out: str | Path | None = None,
                    n_jobs: int = 1, progress: bool = False, generation=None) -> dict:
    """The share of held-out mini-scenario questions the frozen ``reader`` answers from the memory built
    (write) or recalled (ask) with the outputs of ``backend`` (greedy, the role's trained ``prompt``).

    Scenarios come from the **test** worlds of the profile's datasets (:func:`mags_lib.data.outcome.
    heldout_worlds`), ``n`` of them, rendered with ``seed``; scored by the reward functions themselves.
    ``generation``: the :class:`~mags_lib.data.GenerationConfig` the role's datasets were built with
    (:func:`mags_lib.data.generation_config`; :func:`evaluate_variant` passes it), so the worlds are those
    datasets' test worlds whatever seed built them; without it, the profile's worlds of ``seed``. Returns ``{"n",
    "outcome", "per_row", "cached"}``. With ``out``, the outputs are written to ``out/heldout_outcome.jsonl``
    behind a cache header (the model file, prompt, reader and scenarios): a second call with the same
    inputs reads them back instead of generating and scoring again. With ``n_jobs`` > 1 (a llama.cpp
    ``backend`` and the ``"llamacpp"`` reader) the scenarios are split into parts (up to four a process)
    run by that many processes (joblib), each part loading the backend's model file and the reader again
    on one thread, with a progress bar over the scenarios done: every scenario is generated and scored on
    its own, greedily, so the outputs and scores are those of one process.
    """
    from ..data import outcome
    from ..repro import atomic_write_text
    from ..rewards import get_reward

    if role not in ("write", "ask"):
        raise ValueError(f"the held-out outcome exists for the write and ask roles, got {role!r}")
    worlds = outcome.heldout_worlds("test", profile=profile, seed=seed, config=generation)
    ocfg = outcome.OutcomeConfig(n=n, worlds=len(worlds), seed=seed, roles=(role,))
    rows = outcome.build_outcome_rows(ocfg, worlds=worlds, split="test", progress=progress)[role]
    key = _outcome_key(role, backend, prompt, rows, profile=profile, seed=seed, reader=reader, embedder=embedder)
    path = None if out is None else Path(out) / "heldout_outcome.jsonl"
    if path is not None and path.is_file():
        try:
            recs = [json.loads(x) for x in jsonl_lines(path.read_text())]
        except json.JSONDecodeError:
            recs = []
        if recs and recs[0].get("cache_key") == key:
            recs = recs[1:]
            if [r["id"] for r in recs] == [r["id"] for r in rows]:
                scores = [float(r["score"]) for r in recs]
                return {"n": len(rows), "outcome": sum(scores) / len(scores), "per_row": scores, "cached": True}
    if n_jobs > 1 and getattr(backend, "name", None) == "llamacpp" and isinstance(reader, str) and len(rows) > 1:
        from joblib import Parallel, delayed
        from tqdm.auto import tqdm

        from ..evaluate import _model_id

        spec = {"model": backend.model_path, "base_model": getattr(backend, "base_model_path", None),
                "model_id": _model_id(backend)}
        # up to 4 parts a process (of 3 scenarios at least), so the bar moves while the parts run; each
        # scenario is generated and scored on its own, so how they are grouped changes nothing
        n_parts = max(min(n_jobs, len(rows)), min(4 * n_jobs, -(-len(rows) // 3)))
        parts = [list(range(i, len(rows), n_parts)) for i in range(n_parts)]
        par = Parallel(n_jobs=min(n_jobs, n_parts), return_as="generator")  # in order, as each finishes
        bar = tqdm(total=len(rows), desc=f"held-out outcome ({role}), {min(n_jobs, n_parts)} processes",
                   disable=not progress)
        texts, scores = [""] * len(rows), [0.0] * len(rows)
        for part, (part_texts, part_scores) in zip(parts, par(
                delayed(_outcome_part)(role, spec, prompt, [rows[i] for i in part], seed=seed, reader=reader,
                                       embedder=embedder) for part in parts)):
            for i, t, sc in zip(part, part_texts, part_scores):
                texts[i], scores[i] = t, sc
            bar.update(len(part))
        bar.close()
    else:
        texts = _outcome_texts(backend, prompt, rows, seed)
        reward = get_reward(f"outcome_{role}", reader=reader, n_threads=reader_threads, embedder=embedder, seed=seed)
        scores = reward(texts, scenario=[r["scenario"] for r in rows])
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        head = json.dumps({"cache_key": key, "role": role, "n": len(rows), "profile": profile, "seed": seed,
                           "reader": str(reader), "prompt": prompt.to_dict()}, default=str)
        atomic_write_text(path, head + "\n" + "".join(
            json.dumps({"id": r["id"], "input": r["input"], "output": t, "score": s}, ensure_ascii=False) + "\n"
            for r, t, s in zip(rows, texts, scores)))
    return {"n": len(rows), "outcome": sum(scores) / len(scores), "per_row": scores, "cached": False}


def _outcome_texts(backend, prompt, rows: Sequence[dict], seed: int) -> list[str]:
    """The role's greedy outputs for the mini-scenarios' inputs, 8 prompts a call."""
    msgs = [prompt.messages(r["input"]) for r in rows]
    texts = []
    for start in range(0, len(msgs), 8):
        gens = backend.generate(msgs[start:start + 8], max_new_tokens=prompt.max_new_tokens, temperature=0.0,
                                stop=list(prompt.stop) or None, seed=seed, stop_repeats=prompt.stop_repeats)
        texts += [g.text for g in gens]
    return texts


def _outcome_part(role: str, spec: dict, prompt, rows: list[dict], *, seed: int, reader: str,
                  embedder) -> tuple[list[str], list[float]]:
    """One worker of :func:`heldout_outcome`: the model file loaded again on one thread (its identity
    checked against the caller's), its outputs for ``rows``, and their outcome scores."""
    from ..backends import load_backend
    from ..evaluate import _model_id
    from ..rewards import get_reward

    with load_backend("llamacpp", spec["model"], base_model=spec["base_model"], n_threads=1) as backend:
        if _model_id(backend) != spec["model_id"]:
            raise RuntimeError(f"the worker loaded {_model_id(backend)}, not the caller's {spec['model_id']}")
        texts = _outcome_texts(backend, prompt, rows, seed)
    reward = get_reward(f"outcome_{role}", reader=reader, n_threads=1, embedder=embedder, seed=seed)
    return texts, reward(texts, scenario=[r["scenario"] for r in rows])


def evaluate_variant(role: str, tag: str, profile: str, out_dir: str | Path, *, n: int, seed: int = 0,
                     n_outcome: int = 100, threads: int | None = None, max_new_tokens: int | None = None,
                     reader_threads: int = 1, progress: bool = False,
                     note: Callable[[str], None] = print) -> dict:
    """Held-out scores of a variant's final (GRPO) stage: notebook 20's table (test splits, free and
    grammar decoding), operations per input, and the held-out outcome. Returns ``{"scores": DataFrame
    records, "ops": {set: ops_per_input}, "outcome": heldout_outcome minus per_row}``."""
    from ..backends import load_backend
    from ..backends.llamacpp_backend import usable_cores
    from ..data import generation_config
    from ..evaluate import evaluated_sets
    from ..roles import prompt_for_model
    from .layout import run_dir
    from .report import _lora_gguf, evaluate_run

    out = Path(out_dir)
    scores = evaluate_run(role, tag, profile, out / "eval", n=n, seed=seed, stages=("grpo",), threads=threads,
                          max_new_tokens=max_new_tokens, progress=progress, note=note)
    ops = {name: ops_per_input(out / "eval" / "grpo" / f"predictions_{name}_free.jsonl")
           for name in evaluated_sets(out / "eval" / "grpo")}  # this evaluation's sets, not leftovers
    adapter = run_dir(role, tag) / "grpo"
    prompt = prompt_for_model(role, adapter)
    if max_new_tokens:
        from dataclasses import replace

        prompt = replace(prompt, max_new_tokens=max_new_tokens)
    lora = _lora_gguf(adapter, out / "eval" / "grpo", note)
    kw = {"n_threads": threads} if threads else {}
    engine, model = ("llamacpp", str(lora)) if lora is not None else ("transformers", str(adapter))
    generation = generation_config(role, profile)  # the test worlds of the datasets the variant learned from
    with load_backend(engine, model, **kw) as b:  # with threads > 1, llama.cpp: that many processes of one thread
        oc = heldout_outcome(role, b, prompt, profile=profile, seed=seed, n=n_outcome, reader_threads=reader_threads,
                             out=out, n_jobs=threads or usable_cores(), progress=progress, generation=generation)
    return {"scores": scores.to_dict(orient="records"), "ops": ops,
            "outcome": {k: v for k, v in oc.items() if k != "per_row"}, "engine": engine}


def _pick(scores: Sequence[dict], source: str, key: str):
    """The free-decoding value of ``key`` on the ``source`` (``gen`` / ``seed``) test set, or None."""
    for row in scores:
        if row.get("mode") == "free" and str(row.get("set", "")).startswith(source + "_") and row.get(key) is not None:
            return float(row[key])
    return None


def variant_table(results: dict, logs: dict, *, out_dir: str | Path | None = None, role: str | None = None):
    """One row per variant: held-out scores, operations per input, held-out outcome and the GRPO signal
    (:func:`mags_lib.rewards.signal_report` of its log, with the held-out outputs as the sampled
    completions whose flags count)."""
    import pandas as pd

    from ..rewards import signal_report

    rows = []
    for name, r in results.items():
        gen_ops = next((v for k, v in r["ops"].items() if k.startswith("gen_")), {})
        samples = []
        if out_dir is not None and (Path(out_dir) / name / "heldout_outcome.jsonl").is_file():
            samples = [{"completion": x["output"], "reward": x["score"], "input": x["input"],
                        "role": role or ("write" if "write" in x["id"] else "ask")}
                       for x in _outcome_records(Path(out_dir) / name / "heldout_outcome.jsonl")]
        sig = signal_report(logs.get(name) or [], samples)
        rows.append({"variant": name,
                     "adherence": _pick(r["scores"], "gen", "adherence"),
                     "op_f1_gen": _pick(r["scores"], "gen", "op_f1"),
                     "exact_f1_gen": _pick(r["scores"], "gen", "exact_f1"),
                     "op_f1_seed": _pick(r["scores"], "seed", "op_f1"),
                     "ops_per_input": gen_ops.get("pred_ops"), "gold_ops_per_input": gen_ops.get("gold_ops"),
                     "heldout_outcome": r["outcome"]["outcome"], "n_outcome": r["outcome"]["n"],
                     "zero_std_mean": (sig["zero_std"] or {}).get("mean"), "kl_last": (sig["kl"] or {}).get("last"),
                     "reward_first": (sig["reward"] or {}).get("first"), "reward_last": (sig["reward"] or {}).get("last"),
                     "hacking_share": sig["hacking"], **{f"flag_{k}": v for k, v in sig["flags"].items()}})
    table = pd.DataFrame(rows)
    if out_dir is not None and "imitation" in results:
        paired = [paired_with(out_dir, name, "imitation", role=role) if name != "imitation" else {}
                  for name in table["variant"]]
        for col in ("op_f1_minus_imitation", "op_f1_diff_lo", "op_f1_diff_hi", "outcome_minus_imitation",
                    "outcome_diff_lo", "outcome_diff_hi"):
            vals = [None if p.get(col) is None else round(float(p[col]), 4) for p in paired]
            table[col] = pd.Series(vals, dtype=object)  # imitation's: None (JSON null, not NaN)
    return table


def _same_rows(a: Sequence[dict], b: Sequence[dict], fields: Sequence[str]) -> bool:
    """Whether two record lists hold the same rows in the same order: ids alone are positions (``o0``, ``o1``, ...
    whatever scenarios a file was built from), so the inputs (and golds) must agree too."""
    return [[r.get(f) for f in fields] for r in a] == [[r.get(f) for f in fields] for r in b]


def paired_with(out_dir: str | Path, name: str, ref: str = "imitation", *, role: str | None = None,
                n_boot: int = 2000, seed: int = 0) -> dict:
    """Variant ``name`` minus variant ``ref`` on the same held-out inputs, with 95 % paired bootstrap
    intervals: op F1 on the generated test split (free decoding; :func:`mags_lib.metrics.op_f1_difference`)
    and the held-out outcome per mini-scenario (:func:`mags_lib.metrics.mean_difference`). Read from the
    files :func:`evaluate_variant` wrote under ``out_dir/<variant>/``; a figure whose files are missing or
    hold other inputs (ids, inputs and golds compared row by row) is left out."""
    from .. import metrics
    from ..evaluate import evaluated_sets

    out: dict = {}
    root = Path(out_dir)
    a, b = (root / v / "heldout_outcome.jsonl" for v in (name, ref))
    if a.is_file() and b.is_file():
        ra, rb = _outcome_records(a), _outcome_records(b)
        if ra and _same_rows(ra, rb, ("id", "input")):
            d = metrics.mean_difference([r["score"] for r in ra], [r["score"] for r in rb], n_boot=n_boot, seed=seed)
            out.update(outcome_minus_imitation=d["difference"], outcome_diff_lo=d["interval"][0],
                       outcome_diff_hi=d["interval"][1])
    pa, pb = ([root / v / "eval" / "grpo" / f"predictions_{s}_free.jsonl"
               for s in evaluated_sets(root / v / "eval" / "grpo") if s.startswith("gen_")] for v in (name, ref))
    if pa and pb and pa[0].name == pb[0].name:
        ea, eb = _prediction_records(pa[0]), _prediction_records(pb[0])
        if ea and _same_rows(ea, eb, ("id", "input", "gold")):
            r_ = role or ("write" if "_write_" in pa[0].name else "ask")
            golds = [r["gold"] for r in ea]
            sa = metrics.evaluate_predictions([r["output"] for r in ea], golds, r_).per_example
            sb = metrics.evaluate_predictions([r["output"] for r in eb], golds, r_).per_example
            d = metrics.op_f1_difference(sa, sb, n_boot=n_boot, seed=seed)
            out.update(op_f1_minus_imitation=d["difference"], op_f1_diff_lo=d["interval"][0],
                       op_f1_diff_hi=d["interval"][1])
    return out


def findings(table) -> list[str]:
    """Issue 15's targets checked against the ``imitation`` row, whichever way they come out.

    >>> import pandas as pd
    >>> t = pd.DataFrame([{"variant": "imitation", "op_f1_gen": .60, "ops_per_input": 2.0, "heldout_outcome": .5},
    ...                   {"variant": "graph_cost-2", "op_f1_gen": .59, "ops_per_input": 1.2, "heldout_outcome": .5},
    ...                   {"variant": "outcome", "op_f1_gen": .40, "ops_per_input": 1.0, "heldout_outcome": .45}])
    >>> for line in findings(t): print(line)
    graph_cost-2: operations per input -40% (2.00 -> 1.20) at op F1 -0.010 (target: -30% at <= 2 points): met
    graph-cost target (a weight cutting operations >= 30% at <= 2 points of op F1): met by graph_cost-2
    outcome: held-out outcome 0.450 vs imitation 0.500 (target: at least as good): missed
    """
    rows = {r["variant"]: r for r in table.to_dict(orient="records")}
    base = rows.get("imitation")
    if base is None:
        return ["no imitation row: the targets are relative to it (add imitation to objective_list)"]
    out, met = [], []
    for name, r in rows.items():
        if not name.startswith("graph_cost"):
            continue
        if not base.get("ops_per_input") or r.get("ops_per_input") is None or r.get("op_f1_gen") is None:
            out.append(f"{name}: no operations-per-input or op F1 figure")
            continue
        cut = 1 - r["ops_per_input"] / base["ops_per_input"]
        drop = base["op_f1_gen"] - r["op_f1_gen"]
        ok = cut >= 0.30 and drop <= 0.02
        met += [name] if ok else []
        out.append(f"{name}: operations per input {-cut:+.0%} ({base['ops_per_input']:.2f} -> {r['ops_per_input']:.2f}) "
                   f"at op F1 {-drop:+.3f}{_interval(r, 'op_f1')} (target: -30% at <= 2 points): {'met' if ok else 'missed'}")
    if any(n.startswith("graph_cost") for n in rows):
        out.append("graph-cost target (a weight cutting operations >= 30% at <= 2 points of op F1): "
                   + (f"met by {', '.join(met)}" if met else "missed by every weight tried"))
        cap = cut_f1_bound(base)
        if cap is not None:
            out.append(f"bound: imitation stores {base['ops_per_input']:.2f} operations per input against the gold's "
                       f"{base['gold_ops_per_input']:.2f}; a 30% cut leaves {0.7 * base['ops_per_input']:.2f}, which caps "
                       f"micro op F1 at {cap:.3f} (every kept operation right), {cap - base['op_f1_gen']:+.3f} against "
                       f"imitation's {base['op_f1_gen']:.3f}: for this writer the target is "
                       + ("out of reach" if base["op_f1_gen"] - cap > 0.02 else "within reach"))
    if "outcome" in rows:
        o, b = rows["outcome"]["heldout_outcome"], base["heldout_outcome"]
        out.append(f"outcome: held-out outcome {o:.3f} vs imitation {b:.3f}{_interval(rows['outcome'], 'outcome')} "
                   f"(target: at least as good): {'met' if o >= b else 'missed'}")
    return out


def cut_f1_bound(row: dict, cut: float = 0.30) -> float | None:
    """The highest micro op F1 a model can reach storing ``1 - cut`` times the operations of ``row``
    (``ops_per_input``) against the gold's (``gold_ops_per_input``): true positives are at most
    ``min(stored, gold)``, so F1 <= 2 min(P, G) / (P + G). ``None`` without the two counts, or when the
    model stores nothing.

    >>> round(cut_f1_bound({"ops_per_input": 1.5, "gold_ops_per_input": 1.5}), 3)  # 1.05 of 1.5 stored
    0.824
    >>> round(cut_f1_bound({"ops_per_input": 2.2, "gold_ops_per_input": 1.5}), 3)  # an over-writer loses little
    0.987
    >>> cut_f1_bound({"ops_per_input": 0.0, "gold_ops_per_input": 2.0}) is None  # nothing stored, nothing to cut
    True
    """
    p, g = row.get("ops_per_input"), row.get("gold_ops_per_input")
    if p is None or g is None or math.isnan(p) or math.isnan(g) or p <= 0 or g < 0:
        return None  # a model that stores nothing has nothing to cut
    p = (1.0 - cut) * p
    return 2.0 * min(p, g) / (p + g)


def _interval(row: dict, what: str) -> str:
    """`` (paired 95 % interval of the difference [lo, hi])`` of a variant's difference to imitation, when the
    table has it; else an empty string."""
    lo, hi = row.get(f"{what}_diff_lo"), row.get(f"{what}_diff_hi")
    if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):
        return ""
    return f" (paired 95 % interval of the difference [{lo:+.3f}, {hi:+.3f}])"


def plot_signal(logs: dict, *, path: str | Path | None = None):
    """Per variant against GRPO step: weighted reward, zero-variance share of groups, KL to the warm start."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 3.4))
    for ax, key, title in zip(axes, ("reward", "frac_reward_zero_std", "kl"),
                              ("weighted reward", "zero-variance groups (share)", "KL to the warm start")):
        for name, log in logs.items():
            pts = [(r["step"], r[key]) for r in log if r.get(key) is not None]
            if pts:
                ax.plot(*zip(*pts), marker=".", label=name)
        ax.set(title=title, xlabel="GRPO step")
    if any(logs.values()):
        axes[0].legend(fontsize=7)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig


def plot_tradeoff(table, *, path: str | Path | None = None):
    """Operations per input against op F1 (generated test split) per variant, and the held-out outcome."""
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.8))
    for r in table.to_dict(orient="records"):
        if r.get("ops_per_input") is not None and r.get("op_f1_gen") is not None:
            a.scatter(r["ops_per_input"], r["op_f1_gen"])
            a.annotate(r["variant"], (r["ops_per_input"], r["op_f1_gen"]), fontsize=8, xytext=(4, 4),
                       textcoords="offset points")
    gold = table["gold_ops_per_input"].dropna()
    if len(gold):
        a.axvline(float(gold.iloc[0]), color="gray", ls="--", lw=1, label="gold operations per input")
        a.legend(fontsize=7)
    a.set(xlabel="operations stored per input", ylabel="op F1 (generated test split)",
          title="graph cost: fewer operations at what F1")
    b.bar(table["variant"], table["heldout_outcome"], color="tab:green")
    b.set(ylabel="share of questions answered", title="held-out outcome (test-world mini-scenarios)", ylim=(0, 1))
    b.tick_params(axis="x", labelrotation=20)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig
