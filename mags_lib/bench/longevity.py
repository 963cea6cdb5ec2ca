"""Memory longevity: how many facts of a long conversation are still valid and recallable at its end.

Usage::

    python -m mags_lib.bench.longevity              # 600 turns: legacy vs current defaults, sweeps (minutes)
    python -m mags_lib.bench.longevity --quick      # 200 turns, for a look

A synthetic conversation of ``n_turns`` turns states one distinct fact per turn (``subject relation
object``; subjects recur, so some entities are hubs with many facts, as the speakers of a real
conversation are). Every turn is observed through the graph's own API (``add_episode`` then
``engram`` with the episode), and ``maintain`` runs every ``maintain_every`` turns (the agent's
default cadence, :attr:`mags_lib.agent.MAGSConfig.maintain_every`). Nothing is recalled during the
conversation: no fact is ever used, the worst case for decay. At the end, for every fact:

* **valid**: its edge is alive and valid;
* **recallable**: ``recall("<subject> <relation>", k)`` returns it (the object is what is asked for);
* **evidence**: the episode that said it is alive.

Writes ``results/bench/longevity.json`` (``--out`` changes the folder) with the figures for the
legacy defaults (:func:`legacy_config`, before the issue-13 review), the current defaults and
one-knob ablations, a decay-rate sweep over several horizons (plain, important and used facts
apart), and the valid facts left without evidence (see :func:`run`). Counts, not times: the figures
do not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

__all__ = ["conversation", "legacy_config", "main", "run", "simulate"]

_SYLLABLES = ["ba", "ko", "ri", "mel", "tus", "van", "dor", "li", "zen", "pra", "qui", "sol", "mar", "tek",
              "nu", "fei", "gor", "ha", "jin", "lum", "pe", "ros", "ta", "wex", "yo", "cal", "bri", "dun"]
# one slot per relation: none is in a same-slot group, and a subject uses each relation once, so no
# fact supersedes another (every fact stays true: what is lost is lost to forgetting)
RELATIONS = ["likes", "visited", "owns", "plays", "reads", "collects", "studies", "met", "bought", "painted",
             "cooked", "wrote about", "grows", "repairs", "teaches", "sings", "builds", "wears", "drinks",
             "watches", "photographed", "sketched", "borrowed", "sold", "named", "found", "lost", "mended",
             "carved", "knitted"]


def _word(rng, n: int) -> str:
    return "".join(rng.choice(_SYLLABLES, size=n))


def conversation(n_turns: int = 600, *, n_subjects: int = 40, seed: int = 0
                 ) -> list[tuple[str, tuple[str, str, str]]]:
    """``n_turns`` (text, (subject, relation, object)) turns, every triplet distinct.

    Subjects are ``n_subjects`` names used round-robin (each gets about ``n_turns / n_subjects``
    facts, under distinct relations); objects are fresh two-word names.

    >>> turns = conversation(5, n_subjects=2)
    >>> len(turns), len({t for _, t in turns})
    (5, 5)
    """
    if n_turns > n_subjects * len(RELATIONS):
        raise ValueError(f"at most {n_subjects * len(RELATIONS)} distinct facts with {n_subjects} subjects")
    rng = np.random.default_rng(seed)
    names: list[str] = []
    while len(names) < n_subjects:
        w = _word(rng, 2).capitalize()
        if w not in names:
            names.append(w)
    used: set[str] = set()
    rel_order = [rng.permutation(len(RELATIONS)) for _ in range(n_subjects)]
    out = []
    for t in range(n_turns):
        s = names[t % n_subjects]
        r = RELATIONS[int(rel_order[t % n_subjects][t // n_subjects])]
        while True:
            o = f"{_word(rng, 2)} {_word(rng, 3)}"
            if o not in used:
                used.add(o)
                break
        out.append((f"{s} {r} the {o}.", (s, r, o)))
    return out


LEGACY_DYNAMICS = {"decay_rate": 0.05, "salience_protection": 0.0, "keep_salience": None, "keep_evidence": False,
                   "keep_unconsolidated": False}
"""The dynamics defaults that differ from today's, as they were before the long-conversation review
(issue 13): facts never recalled were pruned after about 45 ticks (360 turns at the agent's cadence)."""
LEGACY_RECALL = {"branch_query_weight": 0.0}
"""The recall defaults before the review: the strongest ``max_branch`` edges out of every node."""


def legacy_config(*, recall: bool = True):
    """The graph defaults before the long-conversation review (issue 13): the ablation to compare with.

    ``recall=False`` keeps today's recall defaults (legacy dynamics only).
    """
    from ..graph import GraphConfig

    cfg = GraphConfig()
    cfg = replace(cfg, dynamics=replace(cfg.dynamics, **LEGACY_DYNAMICS))
    return replace(cfg, recall=replace(cfg.recall, **LEGACY_RECALL)) if recall else cfg


def simulate(config=None, *, n_turns: int = 600, maintain_every: int | None = None, n_subjects: int | None = None,
             k: int = 10, dim: int = 256, seed: int = 0, recall_check: bool = True, important_every: int = 0,
             used_every: int = 0) -> dict:
    """Observe a :func:`conversation`, maintaining every ``maintain_every`` turns; measure what survives.

    Parameters
    ----------
    config : GraphConfig, optional
        Default: today's defaults.
    maintain_every : int, optional
        Turns between two ``maintain`` ticks; default the agent's (``MAGSConfig().maintain_every``).
    n_subjects : int, optional
        Default: ``max(40, ceil(n_turns / 30))`` (each subject has at most one fact per relation).
    important_every : int
        Every n-th fact is observed with importance 0.9 (0: none); reported apart.
    used_every : int
        Every n-th fact (among those not important) is recalled three times by its query right after
        it is said (0: none); reported apart.

    Returns
    -------
    dict
        ``facts``, ``valid``, ``recallable``, ``evidence`` (counts), their shares, the share valid per
        fifth of the conversation (oldest first), per group (plain / important / used) the share
        valid, graph stats and wall time.
    """
    from ..embed import HashEmbedder
    from ..graph import GraphConfig, LiquidGraph

    if isinstance(n_turns, bool) or not isinstance(n_turns, int) or n_turns < 5:
        raise ValueError(f"n_turns must be an integer >= 5 (survival is reported per fifth), got {n_turns!r}")
    if maintain_every is None:
        from ..agent import MAGSConfig

        maintain_every = MAGSConfig().maintain_every
    cfg = config if config is not None else GraphConfig()
    g = LiquidGraph(HashEmbedder(dim=dim), config=cfg)
    t0 = time.perf_counter()
    n_subjects = n_subjects or max(40, -(-n_turns // len(RELATIONS)))
    turns = conversation(n_turns, n_subjects=n_subjects, seed=seed)
    edge_of, ep_of = [], []
    group = np.zeros(len(turns), dtype=np.int8)  # 0 plain, 1 important, 2 used
    for t, (text, trip) in enumerate(turns):
        important = bool(important_every) and t % important_every == 0
        ep = g.add_episode(text, source=f"T{t}")
        rep = g.engram([trip], episode=ep, importance=0.9 if important else None)
        edge_of.append((rep.new_edges or rep.reinforced_edges)[0])
        ep_of.append(int(ep[2:]))  # ids, not rows: maintain() may compact the stores
        if important:
            group[t] = 1
        elif used_every and t % used_every == 1:
            group[t] = 2
            for _ in range(3):
                g.recall(f"{trip[0]} {trip[1]}", k=k)
        if maintain_every and (t + 1) % maintain_every == 0:
            g.maintain()
    ed, nd = g.edges, g.nodes
    e, ep_rows = ed.rows(edge_of), nd.rows(ep_of)  # -1: removed and compacted away
    valid = (e >= 0) & ed.alive[e] & ed.valid[e]
    evidence = (ep_rows >= 0) & nd.alive[ep_rows]
    recallable = np.zeros(len(turns), dtype=bool)
    if recall_check:
        quiet = replace(cfg.recall, touch=False, coactivation=False)
        for t, (_, (s, r, _o)) in enumerate(turns):
            if valid[t]:
                res = g.recall(f"{s} {r}", k=k, config=quiet)
                recallable[t] = any(it.edge_id == edge_of[t] for it in res.items)
    fifths = np.array_split(np.arange(len(turns)), 5)
    n = len(turns)
    return {
        "facts": n, "valid": int(valid.sum()), "recallable": int(recallable.sum()), "evidence": int(evidence.sum()),
        "valid_share": round(float(valid.mean()), 4), "recallable_share": round(float(recallable.mean()), 4),
        "evidence_share": round(float(evidence.mean()), 4),
        "valid_without_evidence": int((valid & ~evidence).sum()),
        "valid_by_fifth": [round(float(valid[f].mean()), 3) for f in fifths],
        "recallable_by_fifth": [round(float(recallable[f].mean()), 3) for f in fifths],
        "valid_by_group": {name: round(float(valid[group == i].mean()), 3)
                           for i, name in enumerate(("plain", "important", "used")) if (group == i).any()},
        "ticks": int(g.tick), "stats": {k_: v for k_, v in g.stats().items()
                                        if k_ in ("n_nodes", "n_entities", "n_episodes", "n_valid_edges", "n_facts")},
        "seconds": round(time.perf_counter() - t0, 2),
    }


_HUB_SUBJECTS = 20  # the hub case of :func:`run`: fewer subjects, more facts each


def _check_turns(n_turns: int) -> None:
    """ValueError unless ``n_turns`` fits the hub case (:data:`_HUB_SUBJECTS` subjects of at most one fact per
    relation each): checked before the first simulation."""
    hub_max = _HUB_SUBJECTS * len(RELATIONS)
    if not 5 <= n_turns <= hub_max:
        raise ValueError(f"n_turns must be in [5, {hub_max}], got {n_turns}: survival is reported per fifth of the "
                         f"conversation, and the hub case has {_HUB_SUBJECTS} subjects of at most {len(RELATIONS)} "
                         "distinct facts each")


def run(*, n_turns: int = 600, out_dir: str | Path = "results/bench", seeds: Sequence[int] = (0, 1),
        horizons: Sequence[int] = (600, 1200, 2400), decay_rates: Sequence[float] = (0.005, 0.01, 0.02, 0.03, 0.05),
        progress: bool = True) -> dict:
    """Measure and write ``<out_dir>/longevity.json``; returns the result.

    * ``cases``: ``n_turns`` turns, per seed (and with 20 subjects, hubs of 30 facts): the legacy
      defaults, legacy dynamics with today's recall, today's defaults, and today's defaults with one
      change each (``keep_evidence`` off, salience off, decay 0.05, strength-only branches);
    * ``decay_sweep``: survival of plain, important (every 10th fact, importance 0.9) and used (every
      10th, recalled three times) facts for each decay rate and horizon (valid only, no recall check);
    * ``evidence``: valid facts left without their episode, today's defaults with and without
      ``keep_evidence``, at the longest horizon.
    """
    from .. import repro
    from ..graph import GraphConfig

    _check_turns(n_turns)
    if not len(seeds):
        raise ValueError("seeds is empty: give at least one seed")
    if not len(horizons) or min(horizons) < 5 or not len(decay_rates) or min(decay_rates) < 0:
        raise ValueError(f"horizons need turn counts >= 5 (one per fifth) and decay_rates rates >= 0, got {list(horizons)} and "
                         f"{list(decay_rates)}")
    say = print if progress else (lambda *a, **k: None)
    t0 = time.perf_counter()
    G = GraphConfig()
    D = G.dynamics

    def dyn(**kw):
        return replace(G, dynamics=replace(D, **kw))

    variants = {
        "legacy": legacy_config(),
        "legacy dynamics, today's recall": legacy_config(recall=False),
        "default": G,
        "default, keep_evidence off": dyn(keep_evidence=False),
        "default, salience off": dyn(salience_protection=0.0, keep_salience=None),
        "default, decay_rate 0.05": dyn(decay_rate=0.05),
        "default, strength-only branches": replace(G, recall=replace(G.recall, branch_query_weight=0.0)),
    }
    keys = ("valid_share", "recallable_share", "evidence_share", "valid_without_evidence", "valid_by_fifth")
    cases = {}
    for name, cfg in variants.items():
        rows = {}
        for seed, subjects in [(s, None) for s in seeds] + [(seeds[0], _HUB_SUBJECTS)]:
            r = simulate(cfg, n_turns=n_turns, seed=seed, n_subjects=subjects)
            rows[f"seed {seed}, {subjects or 'default'} subjects"] = {k: r[k] for k in keys}
        cases[name] = rows
        worst = min(v["recallable_share"] for v in rows.values())
        say(f"[longevity] {name:34s} valid {min(v['valid_share'] for v in rows.values()):.3f} "
            f"recallable {worst:.3f} (worst of {len(rows)})")
    sweep = {}
    for turns in horizons:
        for rate in decay_rates:
            r = simulate(dyn(decay_rate=rate), n_turns=turns, seed=seeds[0], recall_check=False, important_every=10,
                         used_every=10)
            sweep[f"{turns} turns, decay_rate {rate}"] = {k: r[k] for k in ("valid_share", "valid_by_group",
                                                                          "valid_by_fifth")} | {
                "nodes": r["stats"]["n_nodes"]}
            say(f"[longevity] {turns} turns, decay {rate}: {r['valid_share']:.3f} {r['valid_by_group']}")
    evidence = {}
    for name in ("default", "default, keep_evidence off"):
        r = simulate(variants[name], n_turns=max(horizons), seed=seeds[0], recall_check=False)
        evidence[name] = {k: r[k] for k in ("valid", "evidence", "valid_without_evidence")}
        say(f"[longevity] {max(horizons)} turns, {name}: {evidence[name]}")
    result = {"cases": cases, "decay_sweep": sweep, "evidence": evidence,
              "meta": {"params": {"n_turns": n_turns, "seeds": list(seeds), "horizons": list(horizons),
                                  "decay_rates": list(decay_rates)},
                       "git_sha": repro.git_sha(), "wall_time_s": round(time.perf_counter() - t0, 1)}}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    repro.atomic_write_text(out / "longevity.json", json.dumps(result, indent=1, allow_nan=False))
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: see the module docstring."""
    p = argparse.ArgumentParser(prog="python -m mags_lib.bench.longevity", description=__doc__.split("\n\n")[0])
    p.add_argument("--turns", type=int, default=600)
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--out", default="results/bench")
    p.add_argument("--quick", action="store_true", help="200 turns, one seed, short horizons")
    a = p.parse_args(argv)
    try:
        seeds = [int(x) for x in a.seeds.split(",") if x.strip()]
    except ValueError:
        p.error(f"--seeds takes comma-separated integers, got {a.seeds!r}")
    if not seeds:
        p.error("--seeds needs at least one seed")
    if not a.quick:
        try:
            _check_turns(a.turns)
        except ValueError as e:
            p.error(f"--turns: {e}")
    if a.quick:
        run(n_turns=200, out_dir=a.out, seeds=[0], horizons=(200, 400), decay_rates=(0.01, 0.05))
    else:
        run(n_turns=a.turns, out_dir=a.out, seeds=seeds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
