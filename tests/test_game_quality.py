"""Operation quality on hand-made graphs whose right answers can be counted by hand.

The embedder is a :class:`TableEmbedder`: unlisted texts get near-orthogonal vectors, so only the
text rules match unless a case lists vectors on purpose (relation paraphrase, typed numbers).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from mags_lib.game import operation_quality, scenario_from_dict
from mags_lib.game.report import quality_table
from mags_lib.graph import GraphConfig, LiquidGraph, TableEmbedder

SCENARIO = scenario_from_dict({
    "name": "q", "description": "hand-made",
    "events": [
        {"say": "Blorps eat frozen lemons."},  # 0
        {"say": "Quindles live under the Teal Bridge."},  # 1
        {"say": "Blorps switched to salted moss."},  # 2
        {"say": "I live in Porto.", "speaker": "Lena"},  # 3
        {"ask": "What do blorps eat?", "answer": ["salted moss"], "kind": "update"},
    ],
    "gold": [
        {"subject": "blorps", "relation": "eat", "object": "frozen lemons", "stated": 0, "superseded": 2},
        {"subject": "quindles", "relation": "live in", "object": "Teal Bridge", "stated": 1, "superseded": None},
        {"subject": "blorps", "relation": "eat", "object": "salted moss", "stated": 2, "superseded": None},
        {"subject": "Lena", "relation": "lives in", "object": "Porto", "stated": 3, "superseded": None},
    ],
    "entities": [{"name": "blorps", "core": "blorp", "type": "species"},
                 {"name": "quindles", "core": "quindle", "type": "species"},
                 {"name": "Lena", "core": "Lena", "type": "person"},
                 {"name": "Teal Bridge", "core": "Teal", "type": "place"}],
})

PERFECT = [("blorps", "eat", "frozen lemons"), ("quindles", "live in", "Teal Bridge"),
           ("blorps", "eat", "salted moss"), ("Lena", "lives in", "Porto")]


def graph(triplets, *, reconcile=True, table=None):
    emb = TableEmbedder(table or {}, dim=64)
    cfg = GraphConfig()
    cfg = replace(cfg, engram=replace(cfg.engram, reconcile=reconcile, gat=False,
                                      multi_valued_relations=frozenset()))
    g = LiquidGraph(emb, config=cfg)
    for t in triplets:  # one observation per triplet, in order
        g.engram([t], source="test")
    return g


def test_perfect_memory_has_no_errors():
    q = operation_quality(graph(PERFECT), SCENARIO)
    assert q["n_invalidated"] == 1 and q["n_correct_invalidations"] == 1
    assert q["n_wrong_invalidations"] == q["n_missed_invalidations"] == 0
    assert q["n_duplicate_entities"] == 0 and q["n_wrong_subject"] == 0
    assert q["n_matched"] == 4 and q["n_gold_stored"] == 4 and q["stored_rate"] == 1.0
    assert q["wrong_invalidation_rate"] == 0.0 and q["missed_invalidation_rate"] == 0.0


def test_missed_invalidation_when_the_old_value_stays_valid():
    q = operation_quality(graph(PERFECT, reconcile=False), SCENARIO)
    assert q["n_invalidated"] == 0
    assert q["n_superseded"] == 1 and q["n_superseded_stored"] == 1
    assert q["n_missed_invalidations"] == 1 and q["missed_invalidation_rate"] == 1.0


def test_wrong_invalidation_when_a_true_fact_is_superseded():
    # a wrong later fact supersedes the quindles' true home
    g = graph(PERFECT + [("quindles", "live in", "copper caves")])
    q = operation_quality(g, SCENARIO, details=True)
    assert q["n_invalidated"] == 2
    assert q["n_wrong_invalidations"] == 1 and q["n_correct_invalidations"] == 1
    assert q["wrong_invalidation_rate"] == 0.5
    assert q["n_unmatched"] == 1  # copper caves matches no gold fact
    row = next(r for r in q["facts"] if r["object"] == "Teal Bridge")
    assert row["valid"] is False and row["gold_holds"] is True


def test_duplicate_entity_nodes():
    # "Blorp" (singular) and "the blorps" normalise differently from "blorps": three nodes, one entity
    g = graph(PERFECT + [("Blorp", "sleep for", "nine days"), ("Lena's", "has pet", "Biscuit")])
    q = operation_quality(g, SCENARIO, details=True)
    assert sorted(q["entities"]["blorps"]) == ["Blorp", "blorps"]
    assert q["entities"]["Lena"] == ["Lena", "Lena's"]
    assert q["n_duplicate_entities"] == 2
    assert q["n_entities_present"] == 4 and q["duplicate_entity_rate"] == 0.5
    # "Lena's sister" is another entity, not a duplicate of Lena
    g2 = graph(PERFECT + [("Lena's sister", "lives in", "Bergen")])
    assert operation_quality(g2, SCENARIO)["n_duplicate_entities"] == 0


def test_wrong_subject():
    facts = [t for t in PERFECT if t[0] != "Lena"] + [("I", "lives in", "Porto")]
    q = operation_quality(graph(facts), SCENARIO)
    assert q["n_wrong_subject"] == 1 and q["n_matched"] == 3
    assert q["wrong_subject_rate"] == 0.25
    assert q["n_gold_stored"] == 3  # Lena's fact is not stored under Lena


def test_relation_paraphrase_matches_through_similarity():
    v = np.zeros(64)
    v[0] = 1
    w = v.copy()
    w[1] = 0.3  # cosine 0.96
    table = {"feed on salted moss": v, "eat salted moss": w}
    facts = [("blorps", "eat", "frozen lemons"), ("blorps", "feed on", "salted moss")]
    q = operation_quality(graph(facts, table=table), SCENARIO, details=True)
    row = next(r for r in q["facts"] if r["object"] == "salted moss")
    assert row["status"] == "matched"
    # without the table the paraphrase is not recognised
    q2 = operation_quality(graph(facts), SCENARIO, details=True)
    assert next(r for r in q2["facts"] if r["object"] == "salted moss")["status"] == "unmatched"


def test_numbers_are_typed_values_never_matched_by_similarity():
    sc = scenario_from_dict({
        "name": "n", "description": "", "events": [{"say": "x"}, {"say": "y"}],
        "gold": [{"subject": "Arena", "relation": "starts players with", "object": "60 points", "stated": 0,
                  "superseded": 1},
                 {"subject": "Arena", "relation": "starts players with", "object": "30 points", "stated": 1,
                  "superseded": None}],
        "entities": [{"name": "Arena", "core": "Arena", "type": "game"}]})
    same = np.ones(64)
    table = {"60 points": same, "30 points": same, "sixty points": same}  # identical vectors
    g = graph([("Arena", "starts players with", "sixty points")], table=table)
    q = operation_quality(g, sc, details=True)
    assert q["facts"][0]["gold"].endswith("60 points")  # the word matches its digits, not the other number
    assert q["n_missed_invalidations"] == 1  # an old value still valid
    g2 = graph([("Arena", "starts players with", "45 points")], table={**table, "45 points": same})
    assert operation_quality(g2, sc)["n_unmatched"] == 1


def test_needs_ground_truth_and_tables_sum_counts():
    bare = scenario_from_dict({"name": "b", "description": "", "events": [{"say": "x"}]})
    with pytest.raises(ValueError, match="no ground truth"):
        operation_quality(graph(PERFECT), bare)
    import pandas as pd

    rows = [{"system": "s", "scenario": str(i), **operation_quality(graph(PERFECT, reconcile=i == 0), SCENARIO)}
            for i in range(2)]
    t = quality_table(pd.DataFrame(rows))
    assert t.loc[0, "n_missed_invalidations"] == 1 and t.loc[0, "missed_invalidation_rate"] == 0.5


def _pruning(g):
    """``g`` under a config whose ``maintain`` prunes every valid edge (strength < 0.999), then the nodes
    left inactive with their superseded edges (history goes with its ends, a tick later)."""
    d = replace(g.config.dynamics, prune_strength=0.999, keep_salience=None, inactive_ticks=1,
                keep_evidence=False, keep_unconsolidated=False)
    return g.with_config(replace(g.config, dynamics=d))


def _prune_all(g):
    for _ in range(3):
        g.maintain()


def test_facts_pruned_during_the_run_are_scored_in_their_state_when_they_went():
    # an invalidation that maintenance prunes later used to drop out of the counts (they scored only the
    # memory left at the end): here every fact edge is pruned, the right invalidation with them
    g = _pruning(graph(PERFECT))
    with g.record_removed_facts() as removed:
        _prune_all(g)
    assert g.facts(include_invalid=True) == [] and len(removed) == 4
    assert all(f["alive"] is False for f in removed)
    end_only = operation_quality(g, SCENARIO)
    assert end_only["n_invalidated"] == 0 and end_only["n_gold_stored"] == 0 and end_only["n_removed"] == 0
    q = operation_quality(g, SCENARIO, removed=removed, details=True)
    assert q["n_removed"] == 4 and q["n_memory_facts"] == 4 and q["n_matched"] == 4
    assert q["n_invalidated"] == 1 and q["n_correct_invalidations"] == 1 and q["n_wrong_invalidations"] == 0
    assert q["n_gold_stored"] == 4 and q["stored_rate"] == 1.0
    assert all(r["removed"] for r in q["facts"])
    # a wrong invalidation pruned later counts as wrong
    g2 = _pruning(graph(PERFECT + [("quindles", "live in", "copper caves")]))
    with g2.record_removed_facts() as removed2:
        _prune_all(g2)
    q2 = operation_quality(g2, SCENARIO, removed=removed2)
    assert q2["n_wrong_invalidations"] == 1 and q2["wrong_invalidation_rate"] == 0.5


def test_a_fact_forgotten_while_still_valid_is_stored_but_not_a_missed_invalidation():
    g = _pruning(graph(PERFECT, reconcile=False))  # the old value was never invalidated
    assert operation_quality(g, SCENARIO)["n_missed_invalidations"] == 1
    with g.record_removed_facts() as removed:
        _prune_all(g)
    assert g.facts(include_invalid=True) == []
    q = operation_quality(g, SCENARIO, removed=removed)
    assert q["n_superseded_stored"] == 1 and q["n_missed_invalidations"] == 0 and q["n_gold_stored"] == 4
    with pytest.raises(ValueError, match="record_removed_facts"):
        operation_quality(g, SCENARIO, removed=[{"id": 0}])


def test_removal_records_follow_transactions_rollbacks_and_nesting():
    g = graph(PERFECT)
    lemons = next(f["id"] for f in g.facts(include_invalid=True) if f["object"] == "frozen lemons")
    with g.record_removed_facts() as outer:
        with pytest.raises(RuntimeError), g.transaction():  # a failed turn leaves no trace, here either
            g.forget([next(f["id"] for f in g.facts() if f["object"] == "Porto")])
            raise RuntimeError("the model failed")
        assert outer == [] and len(g.facts()) == 3
        sid = g.snapshot()
        with g.record_removed_facts() as inner:
            _pruning(g)  # a copy: its removals are its own
            g.forget([next(f["id"] for f in g.facts() if f["object"] == "Teal Bridge")])
        assert [f["object"] for f in inner] == ["Teal Bridge"]
        g.rollback(sid)  # the forgotten fact is back: scored once, live
    assert [f["object"] for f in outer] == ["Teal Bridge"]
    q = operation_quality(g, SCENARIO, removed=outer, details=True)
    assert q["n_removed"] == 0 and q["n_memory_facts"] == 4
    assert [r["object"] for r in q["facts"] if r["object"] == "Teal Bridge"] == ["Teal Bridge"]
    assert lemons in {f["id"] for f in g.facts(include_invalid=True)}
    assert g._removal_sinks == []  # closed blocks are not written to any more
