"""Building blocks of the guided tour (``notebooks/40_graph_dynamics.ipynb``).

A short story written as hand-made triplets (no language model involved), a tick simulator that
records what the dynamics do, and small table helpers.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .config import GraphConfig
from .core import LiquidGraph

__all__ = ["STORY", "STORY_QUERIES", "build_story_memory", "facts_table", "run_ticks"]

# (source id, time, text, triplets): a small world with entities that recur, a rule change and a
# two-hop chain (Tomas -> Lena -> Pico), in the protocol's (subject, relation, object) form.
STORY: list[tuple[str, str, str, list[tuple[str, str, str]]]] = [
    ("D1:1", "2023-05-01", "Lena is a marine biologist who lives in Lisbon.",
     [("Lena", "is", "marine biologist"), ("Lena", "lives in", "Lisbon")]),
    ("D1:2", "2023-05-01", "Lena's dog is called Pico.", [("Lena", "has dog", "Pico")]),
    ("D1:3", "2023-05-02", "Pico loves chasing seagulls on the beach.",
     [("Pico", "loves", "chasing seagulls"), ("seagulls", "live on", "the beach")]),
    ("D1:4", "2023-05-03", "Lena studies octopus camouflage at the aquarium.",
     [("Lena", "studies", "octopus camouflage"), ("Lena", "works at", "aquarium"),
      ("octopus", "lives in", "aquarium")]),
    ("D1:5", "2023-05-04", "Her brother Tomas is a chef in Madrid.",
     [("Tomas", "is brother of", "Lena"), ("Tomas", "works as", "chef"), ("Tomas", "lives in", "Madrid")]),
    ("D1:6", "2023-05-05", "Tomas cooks octopus for Lena when she visits.",
     [("Tomas", "cooks", "octopus"), ("Lena", "visits", "Tomas")]),
    ("D1:7", "2023-05-06", "Pico is afraid of the octopus at the aquarium.",
     [("Pico", "is afraid of", "octopus")]),
    ("D1:8", "2023-05-07", "Lena and Tomas both love the beach.",
     [("Lena", "loves", "the beach"), ("Tomas", "loves", "the beach")]),
    ("D1:9", "2023-05-08", "Marta, Lena's colleague, also studies octopus camouflage.",
     [("Marta", "is colleague of", "Lena"), ("Marta", "studies", "octopus camouflage"),
      ("Lena", "is colleague of", "Marta")]),
    ("D1:10", "2023-05-09", "Pico is three years old and has a red collar.",
     [("Pico", "age", "three years"), ("Pico", "wears", "red collar")]),
    ("D1:11", "2023-05-09", "Tomas owns a small restaurant called Sal.",
     [("Tomas", "owns", "restaurant Sal")]),
    ("D1:12", "2023-05-10", "Marta was born in Faro and drives a yellow van.",
     [("Marta", "was born in", "Faro"), ("Marta", "drives", "yellow van")]),
    ("D1:13", "2023-05-10", "Lena's favourite food is grilled sardines.",
     [("Lena", "favourite food", "grilled sardines")]),
]

STORY_QUERIES = [
    "Where does Lena live?",
    "What is the name of Lena's dog?",
    "What does Lena's brother do for a living?",
    "What does Pico like?",
    "Who studies octopus camouflage?",
]


def build_story_memory(embedder, *, config: GraphConfig | None = None, seed: int | None = None,
                       story: Sequence = STORY) -> LiquidGraph:
    """A memory holding ``story``: one episode per input, its triplets engrammed with its source id."""
    g = LiquidGraph(embedder, config=config, seed=seed)
    for source, time, text, triplets in story:
        ep = g.add_episode(text, source=source, time=time)
        g.engram(triplets, episode=ep)
    return g


def run_ticks(g: LiquidGraph, ticks: int, *, queries: Sequence[str] = STORY_QUERIES, recall_prob: float = 0.5,
              reward_prob: float = 0.3, k: int = 5, seed: int | None = 0, snapshot_every: int = 10,
              progress: bool = False) -> dict:
    """Live ``ticks`` ticks: random recalls (some rewarded), then one ``maintain`` per tick.

    Returns a history dict: per tick the counts (nodes, valid edges, facts, permanent edges, pruned
    edges so far, mean strength) and, every ``snapshot_every`` ticks, the strength arrays (for
    distributions). ``g`` is modified in place.
    """
    from .values import clean_int, clean_unit

    ticks = clean_int(ticks, "ticks", minimum=0)
    recall_prob, reward_prob = clean_unit(recall_prob, "recall_prob"), clean_unit(reward_prob, "reward_prob")
    k = clean_int(k, "k", minimum=1)
    snapshot_every = clean_int(snapshot_every, "snapshot_every", minimum=1)
    rng = np.random.default_rng(seed)
    hist: dict = {"tick": [], "n_nodes": [], "n_valid_edges": [], "n_facts": [], "n_permanent_edges": [],
                  "pruned_edges": [], "mean_strength": [], "strengths": {}, "reports": []}
    pruned = 0

    def record(t):
        s = g.stats()
        hist["tick"].append(t)
        for key in ("n_nodes", "n_valid_edges", "n_facts", "n_permanent_edges", "mean_strength"):
            hist[key].append(s[key])
        hist["pruned_edges"].append(pruned)
        if t % snapshot_every == 0 or t == ticks:
            live = g.edges.alive & g.edges.valid
            hist["strengths"][t] = g.edges.strength[live].copy()

    record(0)
    it = range(1, ticks + 1)
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(it, desc="ticks")
    for t in it:
        if queries and rng.random() < recall_prob:
            res = g.recall(str(queries[int(rng.integers(len(queries)))]), k=k)
            if res.items and rng.random() < reward_prob:
                g.reinforce(res, reward=1.0, items=[0])
        rep = g.maintain()
        hist["reports"].append(rep.steps)
        pruned += rep.steps.get("prune", {}).get("weak_edges", 0) + rep.steps.get("prune", {}).get("capacity_edges", 0)
        record(t)
    return hist


def facts_table(g: LiquidGraph, include_invalid: bool = False, rows: Sequence[dict] | None = None):
    """A pandas DataFrame of facts (subject, relation, object, strength, valid, sources, ...)."""
    import pandas as pd

    rows = g.facts(include_invalid=include_invalid) if rows is None else rows
    cols = ["id", "subject", "relation", "object", "strength", "confidence", "valid", "valid_from", "valid_to",
            "invalidated_by", "permanent", "sources"]
    df = pd.DataFrame([{c: r[c] for c in cols} for r in rows], columns=cols)
    if len(df):
        df["sources"] = df["sources"].map(lambda s: ", ".join(s))
    return df
