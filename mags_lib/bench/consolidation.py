"""Measure one parametric consolidation (issue 14; notebook ``45_consolidation``).

The memory holds the ground-truth facts of generated game scenarios (creatures, town, dice arena and
the persona family), engrammed directly into the graph (the write model is measured elsewhere: here
the question is what consolidation buys once the facts are in memory), each recalled and rewarded a
few times so that it is solidified and passes the selection. Then, before and after one
:func:`mags_lib.consolidation.consolidate`:

* closed-book accuracy on the consolidated facts (a question template held out of training), and
  abstention on questions about what was never consolidated;
* open-book accuracy (recall + answer model) and memory tokens per query, graph size;
* facts that change after the consolidation (the scenarios' own updates): the new value is observed,
  then asked open-book (does recall override the stale adapter?) and closed-book (the stale value);
* interference: perplexity on a fixed held-out text, the answer role's accuracy on generated reader
  examples (memory in the prompt), with and without the adapter;
* wall time and adapter size of the consolidation.

``python -m mags_lib.bench.consolidation --recipe '{...}'`` measures one recipe (:func:`recipe`: closed-book
accuracy, abstention and perplexity, appended to the list in ``results/bench/consolidation_recipes.json``);
``python -m mags_lib.bench.consolidation`` compares the two consolidation trainers on the same rows
(:func:`trainer_speed`: TRL's ``SFTTrainer`` against :mod:`mags_lib.training.prefix`, and the prefix
trainer with the adapter on the upper half of the layers) and writes ``results/bench/consolidation_trainers.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["HELD_OUT_TEXT", "RECIPE_BASE", "answer_role_accuracy", "build_memory", "main", "perplexity", "recipe", "run",
           "scenario_facts", "trainer_speed"]

HELD_OUT_TEXT = (
    "The kettle started to whistle, so she poured the water over the tea leaves and waited a few minutes.",
    "Trains leave the central station every half hour, and the last one departs shortly before midnight.",
    "Most plants need sunlight, water and a little soil to grow, although some can live on air alone.",
    "He forgot his umbrella at home and arrived at the office soaked from head to toe.",
    "The library closes early on Sundays, so students usually study there on Saturday afternoons.",
    "A good bread dough should be kneaded until it becomes smooth and springs back when pressed.",
    "The children built a small wooden boat and watched it drift slowly down the river.",
    "During the winter months the village is quiet, but in summer it fills with tourists.",
    "She wrote the numbers on the board and asked the class to add them up without a calculator.",
    "The old bridge was repaired last year, and cars can cross it again without any limit on weight.",
)
"""A fixed held-out text for perplexity: everyday English that no consolidation trains on."""


def scenario_facts(profile: str = "default", seed: int = 0, n_scenarios: int | None = None) -> list[dict]:
    """Facts of generated game scenarios: ``{"subject", "relation", "object", "family", "scenario",
    "new_object"}`` -- the value first stated, and (``new_object``) the value it changes to, if it does."""
    from ..game.generate import generate_scenarios, generator_config

    over = {} if n_scenarios is None else {"n_scenarios": n_scenarios}
    out: list[dict] = []
    seen: set[tuple[str, str]] = set()
    for sc in generate_scenarios(generator_config(profile, seed=seed, **over)):
        chains: dict[tuple[str, str], list] = {}
        for g in sorted(sc.gold, key=lambda g: g.stated):
            chains.setdefault((g.subject, g.relation), []).append(g)
        for (s, r), chain in chains.items():
            if (s.lower(), r.lower()) in seen:
                continue
            seen.add((s.lower(), r.lower()))
            out.append({"subject": s, "relation": r, "object": chain[0].object, "family": sc.meta.get("family", ""),
                        "scenario": sc.name,
                        "new_object": chain[1].object if len(chain) > 1 and chain[1].object != chain[0].object
                        else None})
    return out


def build_memory(m: Any, facts: Sequence[dict], *, uses: int = 2, note: Callable[[str], None] = print) -> None:
    """Engram ``facts`` into ``m``'s graph (one source id each) and reward each one's recall ``uses`` times."""
    from tqdm.auto import tqdm

    g = m.graph
    for i, f in enumerate(facts):
        g.engram([(f["subject"], f["relation"], f["object"])], source=f"F{i}")
    for f in tqdm(facts, desc="rehearse", leave=False):
        for _ in range(uses):
            res = g.recall(f"{f['subject']} {f['relation']}", k=4)
            hit = [i for i, it in enumerate(res.items) if it.triplet
                   and it.triplet[0].lower() == f["subject"].lower() and it.triplet[1].lower() == f["relation"].lower()]
            if hit:
                g.reinforce(res, 1.0, items=hit[:1])


def perplexity(m: Any, texts: Sequence[str] = HELD_OUT_TEXT) -> float:
    """Perplexity of the answer model (with the agent's consolidation adapter, if any) on ``texts``
    (transformers backend)."""
    import torch

    b = m.backend("answer")
    prev = b.active_adapter
    name = m.consolidated_adapter_name()
    if name is not None:
        b.set_adapter(name)
    try:
        nll, n = 0.0, 0
        for t in texts:
            ids = torch.tensor([b.tokenizer(t)["input_ids"]])
            with torch.inference_mode():
                logits = b.model(input_ids=ids).logits[0, :-1].float()
            nll += float(torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="sum"))
            n += ids.shape[1] - 1
    finally:
        b.set_adapter(prev)
    return math.exp(nll / n)


def answer_role_accuracy(m: Any, n: int = 20, seed: int = 0) -> dict:
    """The answer model's accuracy on ``n`` generated reader examples (question + memory block)."""
    import numpy as np

    from ..data.answer import ANSWER_KINDS, render_answer
    from ..data.worlds import generate_world
    from ..metrics import answer_correct

    rng = np.random.default_rng([seed, 45])
    kinds = list(ANSWER_KINDS)
    ok = []
    for i in range(n):
        world = generate_world(f"c45-{i}", seed=seed)
        row = render_answer(world, kinds[i % len(kinds)], rng)
        gen, _ = m._answer(row["input"], row["memory"])
        ok.append(bool(answer_correct(gen.text.strip(), row.get("aliases") or [])))
    return {"accuracy": float(np.mean(ok)) if ok else float("nan"), "n": len(ok)}


#: the serving policies measured beside the default ("always"): key suffix -> ``consolidated_when``.
#: closed_only: the adapter answers only for an empty memory block (recall is read alone);
#: fallback: ... and also when the answer model abstains over what was recalled.
_POLICIES = (("closed_only", "closed_book"), ("fallback", "fallback"))


def _block_ranks(facts: Sequence[str], new: str, old: str) -> dict:
    """Where a changed fact's values stand in the memory block given to the reader: ``new_rank`` (0-based
    index of the first item naming the new value, None if none), whether it is there / first, and whether
    an item names the old value without the reader's ``no longer true`` mark."""
    def names(item: str, value: str) -> bool:
        return value.lower() in item.lower()

    rank = next((i for i, f in enumerate(facts) if names(f, new)), None)
    return {"new_rank": rank, "new_in_block": rank is not None, "new_first_in_block": rank == 0,
            "old_unmarked_in_block": any(names(f, old) and "no longer true" not in f.lower() for f in facts)}


@contextlib.contextmanager
def _serving(m: Any, when: str):
    """``m`` with ``config.consolidated_when = when`` inside the block (the agent reads it at each answer)."""
    old = m.config
    m.config = dataclasses.replace(old, consolidated_when=when)
    try:
        yield m
    finally:
        m.config = old


def _open_book(m: Any, questions: Sequence[dict]) -> dict:
    from tqdm.auto import tqdm

    from ..metrics import answer_correct

    ok, tokens = [], []
    for q in tqdm(questions, desc="open-book", leave=False):
        a = m.ask(q["question"])
        ok.append(bool(answer_correct(a.answer, q["aliases"])))
        tokens.append(a.memory_tokens)
    return {"accuracy": sum(ok) / len(ok) if ok else float("nan"), "n": len(ok),
            "memory_tokens_mean": sum(tokens) / len(tokens) if tokens else 0.0}


def run(m: Any, facts: Sequence[dict], config: Any, *, root: str | Path, uses: int = 2, n_answer: int = 20,
        n_open: int = 20, seed: int = 0, note: Callable[[str], None] = print) -> dict:
    """The whole measurement on agent ``m`` (fresh memory; transformers backend); returns the metrics."""
    from tqdm.auto import tqdm

    from ..consolidation import closed_book_accuracy, consolidate, eval_questions, select_facts

    out: dict[str, Any] = {"n_facts_in_memory": len(facts)}
    build_memory(m, facts, uses=uses, note=note)
    selected = select_facts(m.graph, config)
    out["n_selected"] = len(selected)
    questions = eval_questions(selected, config)
    by_key = {(f["subject"].lower(), f["relation"].lower()): f for f in facts}
    changed = [q for q in questions if by_key.get((q["subject"].lower(), q["relation"].lower()), {}).get("new_object")]
    rng_open = questions[:n_open]
    t = time.perf_counter()
    before = {"closed_book": closed_book_accuracy(m, questions, progress=True), "open_book": _open_book(m, rng_open),
              "graph": m.graph.stats(), "perplexity": perplexity(m),
              "answer_role": answer_role_accuracy(m, n_answer, seed)}
    note(f"before: closed-book {before['closed_book']['accuracy']:.2f}, open-book {before['open_book']['accuracy']:.2f}, "
         f"ppl {before['perplexity']:.2f} ({time.perf_counter() - t:.0f} s)")
    res = consolidate(m, config, root=root, note=note, progress=True)
    out["consolidation"] = res.summary()
    out["train_metrics"] = res.train_metrics
    if res.skipped:
        out["before"] = before
        return out
    negatives = res.negatives_eval
    after = {"closed_book": closed_book_accuracy(m, questions, progress=True), "open_book": _open_book(m, rng_open)}
    for suffix, when in _POLICIES:
        with _serving(m, when):
            after[f"open_book_adapter_{suffix}"] = _open_book(m, rng_open)
    after.update({"negatives": closed_book_accuracy(m, negatives, progress=True, desc="negatives"),
                  "graph": m.graph.stats(), "perplexity": perplexity(m),
                  "answer_role": answer_role_accuracy(m, n_answer, seed)})
    before["negatives"] = None
    out.update(before=before, after=after)
    # facts that change after the consolidation: the new value is observed; recall should override the adapter
    upd_rows = []
    for q in changed:
        new = by_key[(q["subject"].lower(), q["relation"].lower())]["new_object"]
        m.graph.engram([(q["subject"], q["relation"], new)], source="update")
    from ..metrics import answer_correct

    for q in tqdm(changed, desc="changed facts", leave=False):
        new = by_key[(q["subject"].lower(), q["relation"].lower())]["new_object"]
        ans = m.ask(q["question"])
        a_open = ans.answer
        a_closed = m.ask(q["question"], recall=False).answer
        row = {"question": q["question"], "old": q["object"], "new": new, "open_book": a_open, "closed_book": a_closed,
               "open_new": answer_correct(a_open, [new]), "open_old": answer_correct(a_open, [q["object"]]),
               "closed_old": answer_correct(a_closed, [q["object"]]), **_block_ranks(ans.facts, new, q["object"])}
        for suffix, when in _POLICIES:
            with _serving(m, when):
                a = m.ask(q["question"]).answer
            row.update({f"open_book_adapter_{suffix}": a, f"open_new_adapter_{suffix}": answer_correct(a, [new]),
                        f"open_old_adapter_{suffix}": answer_correct(a, [q["object"]])})
        upd_rows.append(row)
    n = len(upd_rows)

    def share(key: str) -> float | None:
        return sum(r[key] for r in upd_rows) / n if n else None

    out["changed"] = {"n": n, "rows": upd_rows, "open_book_new": share("open_new"), "open_book_old": share("open_old"),
                      "closed_book_old": share("closed_old"),
                      # is a miss recall's or the reader's? the new value in the memory block, first in it, and the
                      # old value shown without its "no longer true" mark
                      "new_in_block": share("new_in_block"), "new_first_in_block": share("new_first_in_block"),
                      "old_unmarked_in_block": share("old_unmarked_in_block")}
    for suffix, _ in _POLICIES:
        out["changed"][f"open_book_new_adapter_{suffix}"] = share(f"open_new_adapter_{suffix}")
        out["changed"][f"open_book_old_adapter_{suffix}"] = share(f"open_old_adapter_{suffix}")
    # rollback restores the graph and the adapter of the snapshot taken before the consolidation
    m.rollback(res.previous_snapshot)
    out["rollback_restores_no_adapter"] = m.consolidated is None
    return out


def trainer_speed(*, n_facts: int = 100, steps: int = 10, batch_size: int = 8, threads: int = 2, seed: int = 0,
                  note: Callable[[str], None] = print) -> dict:
    """Seconds per optimizer step of the consolidation trainers on the same rows (notebook 45's rendering
    of ``n_facts`` scenario facts): ``trl`` (TRL ``SFTTrainer`` through ``training.train_stage``), ``prefix``
    (:func:`mags_lib.training.prefix.train_lora`, every layer adapted) and ``prefix_upper`` (the adapter
    on the upper half of the decoder layers). Wall time of the training call (model load included) and
    the trainer's own time; tokens run through the model against the rows' tokens."""
    import tempfile

    import torch

    from .. import repro
    from ..consolidation import ConsolidationConfig, _train_shared_prefix, render_examples, train_config
    from ..models import base_model_dir
    from ..roles import ROLE_SPECS
    from ..training import train_stage
    from ..training.run import rows_hash

    torch.set_num_threads(threads)
    facts = [dict(f, id=i) for i, f in enumerate(_facts(n_facts, seed))]
    cfg = ConsolidationConfig(min_strength=0.0, max_facts=n_facts, questions_per_fact=2, statements_per_fact=1,
                              negatives_ratio=0.25, open_book_ratio=0.25, seed=seed)
    rows = render_examples(facts, cfg)["rows"]
    base, prompt = base_model_dir(), ROLE_SPECS["answer"].base
    tcfg = train_config(cfg, max_steps=steps, batch_size=batch_size, threads=threads)
    out: dict[str, Any] = {"n_rows": len(rows), "n_facts": len(facts), "steps": steps, "batch_size": batch_size,
                           "threads": threads, "seed": seed, "git_sha": repro.git_sha(),
                           "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                           "machine": {"cpus": os.cpu_count(), "processor": platform.processor(),
                                       "platform": platform.platform()}, "trainers": {}}
    with tempfile.TemporaryDirectory() as tmp:
        n_layers = None
        for name in ("trl", "prefix", "prefix_upper"):
            t = time.perf_counter()
            if name == "trl":
                train_stage("sft", tcfg, rows, Path(tmp) / name, base_dir=base, prompt=prompt,
                            data_hashes={"c": rows_hash(rows)}, progress=False, note=note)
                with open(Path(tmp) / name / "log.csv") as f:
                    log = list(csv.DictReader(f))
                rec = {"wall_s": round(time.perf_counter() - t, 2),
                       "train_s": round(sum(float(r["seconds"]) for r in log), 2),
                       "tokens": int(float(log[-1]["num_tokens"])), "layers": "all"}
            else:
                if n_layers is None:
                    from transformers import AutoConfig

                    n_layers = AutoConfig.from_pretrained(str(base)).num_hidden_layers
                layers = tuple(range(n_layers // 2, n_layers)) if name == "prefix_upper" else ()
                m = _train_shared_prefix(tcfg, rows, Path(tmp) / name, base_dir=base, prompt=prompt, layers=layers,
                                         progress=False, note=note)
                rec = {"wall_s": round(time.perf_counter() - t, 2), "train_s": m["seconds"], "tokens": m["tokens"],
                       "tokens_plain": m["tokens_plain"], "layers": list(layers) or "all"}
            rec["s_per_step"] = round(rec["train_s"] / steps, 3)
            out["trainers"][name] = rec
            note(f"{name}: {rec}")
    return out


def _facts(n_facts: int, seed: int) -> list[dict]:
    """The first ``n_facts`` facts of 60 scenarios (notebook 45's); a ValueError, before any model is loaded,
    when ``n_facts`` is below 1 or more than the scenarios hold (a row must not claim more facts than it used)."""
    if isinstance(n_facts, bool) or not isinstance(n_facts, int) or n_facts < 1:
        raise ValueError(f"n_facts (--n-facts) must be an integer >= 1, got {n_facts!r}")
    facts = scenario_facts("default", seed=seed, n_scenarios=60)
    if len(facts) < n_facts:
        raise ValueError(f"n_facts={n_facts} but the 60 scenarios of seed {seed} hold {len(facts)} facts: "
                         f"use --n-facts {len(facts)} or fewer")
    return facts[:n_facts]


RECIPE_BASE = {"min_strength": 0.0, "min_uses": 1, "after": "demote", "batch_size": 8, "threads": 2, "seed": 0}
"""What :func:`recipe` fixes beside its overrides (notebook 45's settings; the rest are ConsolidationConfig defaults)."""


def recipe(overrides: dict | None = None, *, n_facts: int = 100, models: str = "base", threads: int = 2,
           seed: int = 0, note: Callable[[str], None] = print) -> dict:
    """One consolidation of ``n_facts`` scenario facts with ``ConsolidationConfig(**RECIPE_BASE, **overrides)``
    (notebook 45's facts and rehearsal, the hash embedder): the training time, closed-book accuracy on the
    held-out template, abstention on never-consolidated pairs, perplexity on :data:`HELD_OUT_TEXT` before and
    after, and the first wrong answers. The recipe comparison of the README; notebook 45 measures the rest."""
    import tempfile

    import torch

    from .. import MAGS, repro
    from ..agent import MAGSConfig
    from ..consolidation import ConsolidationConfig, closed_book_accuracy, consolidate, eval_questions, select_facts

    repro.seed_everything(seed)
    torch.set_num_threads(threads)
    over = dict(overrides or {})
    cfg = ConsolidationConfig(**{**RECIPE_BASE, "max_facts": n_facts, "threads": threads, "seed": seed, **over})
    facts = _facts(n_facts, seed)
    m = MAGS(MAGSConfig(backend="transformers", embedder="hash", n_threads=threads, seed=seed,
                        max_new_tokens_answer=16, models=models))
    try:
        build_memory(m, facts, uses=2, note=note)
        questions = eval_questions(select_facts(m.graph, cfg), cfg)
        ppl0 = perplexity(m)
        with tempfile.TemporaryDirectory(prefix="mags-recipe-") as root:
            res = consolidate(m, cfg, root=root, note=note)
            cb = closed_book_accuracy(m, questions)
            neg = closed_book_accuracy(m, res.negatives_eval)
            ppl1 = perplexity(m)
    finally:
        m.close()
    tm = res.train_metrics
    return {"overrides": over, "config": cfg.to_dict(), "models": models, "n_facts": n_facts,
            "train_seconds": round(res.train_seconds, 1), "rows": res.n_rows,
            "train": {k: tm.get(k) for k in ("steps", "epochs", "loss_first", "loss_last", "tokens", "tokens_padded")},
            "closed_book": cb["accuracy"], "abstains_never_consolidated": neg["accuracy"], "n_negatives": neg["n"],
            "perplexity_before": ppl0, "perplexity_after": ppl1,
            "wrong": [(q["question"], q["object"], a) for q, a, ok in zip(questions, cb["answers"], cb["correct"])
                      if not ok][:12],
            "machine": {"cpus": os.cpu_count(), "processor": platform.processor(), "platform": platform.platform()},
            "git_sha": repro.git_sha(), "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: the trainer comparison, or with ``--recipe`` one recipe's measurement (module docstring)."""
    p = argparse.ArgumentParser(prog="python -m mags_lib.bench.consolidation",
                                description="Seconds per step of the consolidation trainers on the same rows, or "
                                            "(--recipe) closed-book accuracy and perplexity of one recipe.")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--n-facts", type=int, default=100)
    p.add_argument("--recipe", default=None, metavar="JSON",
                   help='ConsolidationConfig overrides, e.g. \'{"max_steps": 260, "anchor_weight": 0}\'; appends the '
                        "result to the list in <out>/consolidation_recipes.json")
    p.add_argument("--tag", default="", help="a name for the --recipe row")
    p.add_argument("--out", default="results/bench")
    a = p.parse_args(argv)
    if a.steps < 1 or a.threads < 1 or a.n_facts < 1:
        p.error("--steps, --threads and --n-facts must be >= 1")
    from .. import repro

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.recipe is not None:
        try:
            over = json.loads(a.recipe)
        except json.JSONDecodeError as exc:
            p.error(f"--recipe must be a JSON object of ConsolidationConfig fields: {exc}")
        if not isinstance(over, dict):
            p.error("--recipe must be a JSON object of ConsolidationConfig fields, e.g. '{\"max_steps\": 260}'")
        row = {"tag": a.tag, **recipe(over, n_facts=a.n_facts, threads=a.threads)}
        path = out / "consolidation_recipes.json"
        rows = json.loads(path.read_text()) if path.is_file() else []
        repro.atomic_write_text(path, json.dumps([*rows, row], indent=1) + "\n")
        print(json.dumps({k: v for k, v in row.items() if k not in ("config", "wrong")}, indent=1))
        return 0
    res = trainer_speed(n_facts=a.n_facts, steps=a.steps, threads=a.threads)
    repro.atomic_write_text(out / "consolidation_trainers.json", json.dumps(res, indent=1) + "\n")
    print(json.dumps(res["trainers"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
