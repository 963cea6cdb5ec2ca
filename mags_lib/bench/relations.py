"""How well the graph decides relation conflicts, measured on the game worlds' relation schema.

The ground truth is :mod:`mags_lib.data.templates`: every relation of the procedural worlds says
whether it is single-valued (``functional=True``: a new object supersedes the old one, the game
asks "update" questions about it) or not. The labels measured are each relation's canonical label
(what the gold triplets use) and the paraphrases its statement templates use between subject and
object ("{S} feed mostly on {O}." -> ``feed mostly on``): 82 labels over 33 relations.

The decision measured is the graph's own, :func:`mags_lib.graph.engram.relation_kind`, in a fresh
graph with the given embedder and :class:`~mags_lib.graph.EngramConfig`:

* **labels** -- a label is "conflicting" (positive) when it is decided single-valued; precision and
  recall against ``functional``. Reported for the labels no declared list names (decided by
  meaning) and for all 82;
* **pairs** -- two different labels of relations of the same subject type (so they may describe one
  subject) conflict when both are decided single-valued in the same slot; the truth is "same
  relation and functional" (949 pairs, 55 conflicting);
* **held out** -- the same, with every label of the label's own relation removed from the declared
  lists first: how the rule does on a relation nobody declared.

End to end, :func:`game_invalidations` writes the gold facts of the generated game scenarios as they
are said (canonical or paraphrased labels) and counts wrong and missed invalidations.

Run ``python -m mags_lib.bench.relations`` (MiniLM, the default thresholds grid; ``--embedder hash``
for the model-free embedder, ``--game 40`` for the game replay, ``--out file.json`` to keep the numbers).
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, replace

from ..data.templates import RELATIONS
from ..graph import LiquidGraph
from ..graph.config import DEFAULT_MULTI_VALUED, EngramConfig, GraphConfig
from ..graph.core import norm_key
from ..graph.engram import relation_kind

__all__ = ["BEFORE", "THRESHOLDS", "LabelCase", "decisions", "evaluate", "game_invalidations", "relation_labels",
           "scores"]

THRESHOLDS = (2.0, 0.9, 0.8, 0.75, 0.7, 0.65, 0.6, 0.55, 0.5, 0.45, 0.4, 0.3)
"""``slot_similarity`` values measured by default (2.0: the rule off)."""

BEFORE = EngramConfig(
    functional_relations=frozenset(),
    multi_valued_relations=DEFAULT_MULTI_VALUED - {"build nests from", "live for", "have natural enemy",
                                                   "is allergic to", "is near", "is famous for", "is made of"},
    slot_similarity=2.0)
"""The declared lists and decision before relations were decided by meaning (for comparison)."""


@dataclass(frozen=True)
class LabelCase:
    """One relation label of the game schema: its relation, subject type, label, truth."""

    relation: str
    subject_type: str
    label: str
    functional: bool
    canonical: bool


_STATEMENT = re.compile(r"\{S\} (.+?) (?:the |a |an )?\{O\}\.?")
_FIRST_PERSON = re.compile(r"I(?:'m| am)? (.+?) (?:the |a |an )?\{O\}\.?")


def relation_labels() -> list[LabelCase]:
    """Every relation's canonical label and the paraphrases its statements put between {S} and {O}.

    >>> cases = relation_labels()
    >>> len(cases), sum(c.canonical for c in cases), sum(c.functional for c in cases)
    (82, 33, 50)
    """
    out = []
    for r in RELATIONS:
        labels = {norm_key(r.label)}
        for pattern, texts in ((_STATEMENT, r.statements), (_FIRST_PERSON, r.first_person)):
            for t in texts:
                m = pattern.fullmatch(t)
                if m:
                    labels.add(norm_key(m.group(1)))
        out += [LabelCase(r.key, r.subject_type, x, r.functional, x == norm_key(r.label)) for x in sorted(labels)]
    return out


def _without(cfg: EngramConfig, labels: set[str]) -> EngramConfig:
    """``cfg`` with ``labels`` (normalised) removed from every declared list."""
    keep = [n for n in cfg.multi_valued_relations if norm_key(n) not in labels]
    func = [n for n in cfg.functional_relations if norm_key(n) not in labels]
    groups = []
    for g in cfg.same_slot_relations:
        names = [n for n in g.split("|") if norm_key(n) not in labels]
        if names:
            groups.append("|".join(names))
    return replace(cfg, multi_valued_relations=frozenset(keep), functional_relations=frozenset(func),
                   same_slot_relations=frozenset(groups))


def decisions(embedder, cfg: EngramConfig, cases: list[LabelCase], *, held_out: bool = False
              ) -> list[tuple[str, bool]]:
    """``relation_kind`` of every case's label: (slot, single-valued), in a fresh graph per config."""
    def graph(c: EngramConfig) -> LiquidGraph:
        return LiquidGraph(embedder, config=GraphConfig(engram=c))

    if not held_out:
        g = graph(cfg)
        return [relation_kind(g, c.label) for c in cases]
    by_rel: dict[str, set[str]] = {}
    for c in cases:
        by_rel.setdefault(c.relation, set()).add(c.label)
    graphs = {rel: graph(_without(cfg, labels)) for rel, labels in by_rel.items()}
    return [relation_kind(graphs[c.relation], c.label) for c in cases]


def scores(pred: list[bool], truth: list[bool]) -> dict:
    """Precision, recall, F1 and the counts of a binary decision (positive: conflicting).

    >>> scores([True, True, False], [True, False, True])["precision"]
    0.5
    """
    tp = sum(p and t for p, t in zip(pred, truth))
    fp = sum(p and not t for p, t in zip(pred, truth))
    fn = sum(t and not p for p, t in zip(pred, truth))
    prec = tp / (tp + fp) if tp + fp else float("nan")
    rec = tp / (tp + fn) if tp + fn else float("nan")
    f1 = 2 * prec * rec / (prec + rec) if tp else 0.0
    return {"precision": prec, "recall": rec, "f1": f1, "tp": tp, "fp": fp, "fn": fn, "n": len(pred)}


def _measure(embedder, cfg: EngramConfig, cases: list[LabelCase], held_out: bool) -> dict:
    dec = decisions(embedder, cfg, cases, held_out=held_out)
    undeclared = [i for i, c in enumerate(cases) if not cfg.declared(c.label)]
    pairs = [(i, j) for i, j in itertools.combinations(range(len(cases)), 2)
             if cases[i].subject_type == cases[j].subject_type and cases[i].label != cases[j].label]
    return {
        "labels_undeclared": scores([dec[i][1] for i in undeclared], [cases[i].functional for i in undeclared]),
        "labels_all": scores([d[1] for d in dec], [c.functional for c in cases]),
        "pairs": scores([dec[i][1] and dec[j][1] and dec[i][0] == dec[j][0] for i, j in pairs],
                        [cases[i].relation == cases[j].relation and cases[i].functional for i, j in pairs]),
        "errors": [(c.label, c.relation, c.functional, d[0], d[1]) for c, d in zip(cases, dec) if d[1] != c.functional],
    }


def evaluate(embedder, thresholds=THRESHOLDS, cfg: EngramConfig | None = None) -> dict:
    """The decision's scores before the rule (:data:`BEFORE`) and with each threshold.

    Returns ``{"before": {...}, "thresholds": {t: {"declared": {...}, "held_out": {...}}}}``: each
    block holds ``labels_undeclared``, ``labels_all``, ``pairs`` (see :func:`scores`) and ``errors``.
    """
    cfg = cfg or EngramConfig()
    cases = relation_labels()
    out = {"before": _measure(embedder, BEFORE, cases, False), "thresholds": {}}
    for t in thresholds:
        c = replace(cfg, slot_similarity=float(t))
        out["thresholds"][t] = {"declared": _measure(embedder, c, cases, False),
                                "held_out": _measure(embedder, c, cases, True)}
    return out


def game_invalidations(embedder, cfg: EngramConfig | None = None, *, n_scenarios: int = 40,
                       paraphrase: bool = False, seed: int = 0) -> dict:
    """Wrong and missed invalidations when the game's gold facts are written as they are said.

    Every generated scenario of the default profile (:func:`mags_lib.game.generate.generate_scenarios`)
    is replayed into a fresh graph: each ``say`` becomes an episode (its time, source, speaker) and
    its gold facts are engrammed with it -- under their canonical label, or with ``paraphrase`` under
    a label drawn (seeded) among their relation's paraphrases (:func:`relation_labels`). Returns the
    summed counts and rates of :func:`mags_lib.game.quality.operation_quality`.
    """
    import numpy as np

    from ..game.generate import generate_scenarios, generator_config
    from ..game.quality import QUALITY_COUNTS, operation_quality, quality_rates

    cfg = cfg or EngramConfig()
    by_label: dict[str, list[str]] = {}
    canon = {norm_key(r.label): r.key for r in RELATIONS}
    for c in relation_labels():
        by_label.setdefault(c.relation, []).append(c.label)
    rng = np.random.default_rng(seed)
    totals = dict.fromkeys(QUALITY_COUNTS, 0)
    for sc in generate_scenarios(generator_config("default", seed=seed, n_scenarios=n_scenarios)):
        facts: dict[int, list] = {}
        for f in sc.gold:
            facts.setdefault(f.stated, []).append(f)  # the index of the event that states it
        g = LiquidGraph(embedder, config=GraphConfig(engram=cfg))
        for k, ev in enumerate(sc.events):
            if ev.is_ask:
                continue
            ep = g.add_episode(ev.text, source=ev.source, time=ev.time, speaker=ev.speaker)
            trips = []
            for f in facts.get(k, []):
                labels = by_label[canon[norm_key(f.relation)]]
                rel = labels[int(rng.integers(len(labels)))] if paraphrase else f.relation
                trips.append((f.subject, rel, f.object))
            if trips:
                g.engram(trips, episode=ep)
        q = operation_quality(g, sc)
        for key in QUALITY_COUNTS:
            totals[key] += q[key]
    return {**totals, **quality_rates(totals)}


def _row(name: str, m: dict) -> str:
    def f(s):
        return f"P {s['precision']:.2f} R {s['recall']:.2f} F1 {s['f1']:.2f} ({s['tp']}/{s['fp']}/{s['fn']})"
    return (f"{name:>12} | undeclared labels {f(m['labels_undeclared'])} (n={m['labels_undeclared']['n']}) | "
            f"all labels {f(m['labels_all'])} | pairs {f(m['pairs'])}")


def main(argv=None) -> None:
    import argparse
    import json

    from ..embed import load_embedder

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--embedder", default="minilm", help="minilm | hash | hash-<dim>")
    ap.add_argument("--out", default=None, help="write the numbers as JSON here")
    ap.add_argument("--errors", type=float, default=None, help="print the wrong labels at this threshold")
    ap.add_argument("--game", type=int, default=0, help="also replay this many game scenarios' gold facts "
                    "(canonical and paraphrased labels) and count wrong/missed invalidations")
    a = ap.parse_args(argv)
    if a.errors is not None and a.errors not in THRESHOLDS:
        ap.error(f"--errors takes one of the measured thresholds {list(THRESHOLDS)}, got {a.errors}")
    if a.game < 0:
        ap.error(f"--game takes a number of scenarios >= 0, got {a.game}")
    emb = load_embedder(a.embedder)
    res = evaluate(emb)
    print("counts are (tp/fp/fn); positive = conflicting (single-valued / same single-valued slot)")
    print(_row("before", res["before"]))
    for t, m in res["thresholds"].items():
        print(_row(f"{t:g}", m["declared"]))
        print(_row(f"{t:g} held out", m["held_out"]))
    if a.errors is not None:
        for e in res["thresholds"][a.errors]["declared"]["errors"]:
            print("  wrong:", e)
    if a.game:
        res["game"] = {}
        keys = ("n_invalidated", "n_correct_invalidations", "n_wrong_invalidations", "n_superseded_stored",
                "n_missed_invalidations", "wrong_invalidation_rate", "missed_invalidation_rate")
        for name, cfg in (("before", BEFORE), ("now", EngramConfig())):
            for para in (False, True):
                r = game_invalidations(emb, cfg, n_scenarios=a.game, paraphrase=para)
                res["game"][f"{name} {'paraphrased' if para else 'canonical'}"] = r
                print(f"game {name:>6} {'paraphrased' if para else 'canonical':>11}:", {k: r[k] for k in keys})
    if a.out:
        from pathlib import Path
        from time import strftime

        from .. import repro

        res["meta"] = {"embedder": a.embedder, "embedder_name": getattr(emb, "name", type(emb).__name__),
                       "thresholds": list(THRESHOLDS), "game_scenarios": a.game, "git_sha": repro.git_sha(),
                       "written_at": strftime("%Y-%m-%dT%H:%M:%S%z")}
        # strict JSON: an undefined precision or recall (no positive predicted / present) is null, not NaN
        repro.atomic_write_text(Path(a.out), json.dumps(_finite(res), indent=1, default=str, allow_nan=False) + "\n")


def _finite(x):
    """``x`` with its dict keys as strings and every non-finite float as None (JSON has no NaN)."""
    if isinstance(x, dict):
        return {str(k): _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


if __name__ == "__main__":
    main()
