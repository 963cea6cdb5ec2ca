"""Live, saved, rolled-back and replayed memories agree (issue 9, items 5 and 6, and the property test).

The property test runs 1,000 seeded random operation sequences on small graphs with a cheap hash
embedder and checks after *every* step that the live graph, its save->load copy (the same encoder
and decoder as the files on disk, in memory) and its operation-log replay hold the same state and
recall the same items in the same order; every 4th sequence ends with a real save to disk and a load.
Compaction of dead rows is one of the random operations, and in half the blocks ``maintain`` also
compacts by itself (a low ``compact_dead_share``).
"""

from __future__ import annotations

import dataclasses
import os
import random

import numpy as np
import pytest

from mags_lib.embed import HashEmbedder
from mags_lib.graph import (
    DynamicsConfig,
    EngramConfig,
    GraphConfig,
    LimitsConfig,
    LiquidGraph,
    RecallConfig,
    TableEmbedder,
    persistence,
)
from mags_lib.graph.core import _state_differences

EMB = HashEmbedder(dim=32)


_QUIET: dict = {}


def recall_view(g: LiquidGraph, queries, k=6):
    """Recall without side effects, as comparable data (texts, scores, paths, anchors)."""
    cfg = _QUIET.get(g.config.recall)
    if cfg is None:
        cfg = _QUIET[g.config.recall] = dataclasses.replace(g.config.recall, touch=False, coactivation=False)
    r = g.recall(queries, k=k, config=cfg)
    return ([(it.text, round(it.score, 9), it.path, it.edges) for it in r.items],
            [a.node for a in r.trace.anchors])


# -- item 5: order is a property of the data ----------------------------------------------------------
def tie_graph() -> LiquidGraph:
    cfg = GraphConfig(engram=EngramConfig(gat=False, reconcile=False),
                      recall=RecallConfig(max_branch=2, n_anchors=1, include_episodes=False))
    g = LiquidGraph(EMB, config=cfg)
    # one hub with six facts of equal strength: which two are followed depends only on a tie-break
    g.engram([("hub", f"rel {i}", f"leaf {i}") for i in range(6)], source="S")
    return g


def reversed_adjacency(g: LiquidGraph) -> LiquidGraph:
    """The same graph whose networkx structure was built in reverse edge order."""
    import networkx as nx

    h = g.copy()
    G = nx.MultiDiGraph()
    G.add_nodes_from(sorted(h.G.nodes, reverse=True))
    G.add_edges_from(sorted(h.G.edges(keys=True), key=lambda x: -x[2]))
    h.G = G
    return h


def test_recall_does_not_depend_on_adjacency_order():
    g = tie_graph()
    h = reversed_adjacency(g)
    assert h.equals(g)
    for q in ("hub", "leaf 3", ["hub", "leaf 5"]):
        assert recall_view(g, q) == recall_view(h, q)
    # and with side effects: the same nodes and edges are touched
    g.recall("hub", k=3)
    h.recall("hub", k=3)
    assert h.equals(g)


def test_merge_then_load_recalls_like_the_live_graph(tmp_path):
    """A merge re-adds edges to networkx (at the end); a loaded graph adds them in id order."""
    table = {"blue die": [1.0] + [0.0] * 63, "blue dies": [0.85, 0.5268] + [0.0] * 62}
    cfg = GraphConfig(engram=EngramConfig(gat=False, reconcile=False),
                      recall=RecallConfig(max_branch=2, n_anchors=1, include_episodes=False))
    g = LiquidGraph(TableEmbedder(table, dim=64), config=cfg)
    # "blue dies" is node 0 (it is kept); the edges of "blue die" (merged into it) have lower ids than
    # its own "has" edges, and move to the end of its networkx adjacency in the live graph
    g.engram([("blue dies", "near", "x0")] + [("blue die", f"owns {i}", f"item {i}") for i in range(3)]
             + [("blue dies", f"has {i}", f"thing {i}") for i in range(3)]
             + [("blue die", "near", "blue dies"), ("blue dies", "near", "blue die")], source="S")
    g.maintain(steps=["scc"])
    assert g.stats()["n_entities"] == 8 and g.find("blue die") == "n0"  # merged into blue dies (n0)
    keep = list(g.G._succ[0])
    assert keep != sorted(keep)  # the live adjacency is not in id order
    h = LiquidGraph.load(g.save(tmp_path / "g"), g.embedder)
    for q in ("blue die", "thing 1", "item 2"):
        assert recall_view(g, q) == recall_view(h, q)
    # from the second anchor (x0) the path comes back to blue dies, whose two slots go to edges it can follow
    # (the edge it came by no longer takes one: max_branch counts followable edges)
    assert [it[0] for it in recall_view(g, "blue dies")[0]] == ["blue dies near x0", "blue dies owns 0 item 0",
                                                              "blue dies owns 1 item 1"]


# -- item 6: SCC merges reconcile ----------------------------------------------------------------------
@pytest.mark.parametrize("policy,winner", [("newer", "ten"), ("stronger", "six")])
def test_scc_merge_runs_conflict_reconciliation(policy, winner):
    table = {"blue die": [1.0] + [0.0] * 63, "blue dies": [0.85, 0.5268] + [0.0] * 62}
    cfg = GraphConfig(engram=EngramConfig(gat=False, conflict_policy=policy))
    g = LiquidGraph(TableEmbedder(table, dim=64), config=cfg)
    e1 = g.add_episode("The blue die has six sides.", source="D1")
    g.engram([("blue die", "has sides", "six")], episode=e1)
    g.engram([("blue die", "has sides", "six")], episode=e1)  # repeated: the stronger one
    e2 = g.add_episode("The blue dies have ten sides.", source="D2")
    g.engram([("blue dies", "has sides", "ten"), ("blue die", "looks like", "blue dies"),
              ("blue dies", "looks like", "blue die")], episode=e2)
    rep = g.maintain(steps=["scc"])
    assert rep.steps["scc"]["merged"] == 1
    valid = [(f["subject"], f["object"]) for f in g.history("blue die", "has sides") if f["valid"]]
    assert valid == [("blue die", winner)]
    loser = [f for f in g.history("blue die", "has sides") if not f["valid"]]
    assert len(loser) == 1 and loser[0]["invalidated_by"] is not None
    assert rep.steps["scc"]["reconciled"] == 1
    # multi-valued relations are left alone
    g2 = LiquidGraph(TableEmbedder(table, dim=64), config=cfg)
    g2.engram([("blue die", "likes", "red"), ("blue dies", "likes", "green"),
               ("blue die", "looks like", "blue dies"), ("blue dies", "looks like", "blue die")], source="S")
    g2.maintain(steps=["scc"])
    assert sorted(f["object"] for f in g2.history("blue die", "likes") if f["valid"]) == ["green", "red"]


# -- the property test: 1,000 random sequences -----------------------------------------------------------
WORDS = ["alice", "bob", "carol", "tea", "paris", "chess", "dog", "blue die", "blue dies", "ten", "six"]
RELS = ["likes", "lives in", "is", "has sides", "knows"]
CFG = GraphConfig(
    dynamics=DynamicsConfig(decay_rate=0.3, prune_strength=0.15, max_nodes=9, max_edges=14, inactive_ticks=3,
                            working_capacity=6, scc_merge_similarity=0.3, solidify_strength=0.6,
                            solidify_min_uses=1, gol_survive_max=3),
    recall=RecallConfig(n_anchors=2, min_path_strength=0.01, max_branch=2),
    limits=LimitsConfig(max_snapshots=2, max_oplog_ops=5, max_coactivation=6, compact_dead_share=None),
)
CFG_COMPACT = dataclasses.replace(CFG, limits=dataclasses.replace(CFG.limits, compact_dead_share=0.2,
                                                                    compact_min_rows=0))
QUERIES = [["alice"], ["blue die", "tea"], ["ten"], ["dog", "paris", "chess"]]


def loaded_copy(g: LiquidGraph) -> LiquidGraph:
    return persistence.graph_from_files(persistence.graph_to_files(g), g.embedder)


STEP_QUERY = ["alice", "blue die"]  # after every step: one two-query recall


def check_same(live: LiquidGraph, others: dict[str, LiquidGraph], what: str, queries=(STEP_QUERY,),
               state_only: tuple[str, ...] = ()) -> None:
    """``others`` (name -> graph) hold the live graph's state and recall like it (those named in
    ``state_only``: the state only)."""
    state = live._state(share=True)  # read-only comparisons: nothing needs copying
    views = [recall_view(live, q) for q in queries]
    for name, other in others.items():
        d = _state_differences(state, other._state(share=True))
        assert d == [], f"{what}: {name} differs in {d}"
        if name in state_only:
            continue
        for q, v in zip(queries, views):
            assert recall_view(other, q) == v, f"{what}: {name} recalls differently for {q}"


def random_step(g: LiquidGraph, rng: random.Random, i: int, last):
    kind = rng.choices(["engram", "recall", "reinforce", "maintain", "permanent", "snapshot", "rollback", "compact"],
                       weights=[5, 3, 1, 2, 1, 1, 1, 1])[0]
    if kind == "engram":
        trips = [(rng.choice(WORDS), rng.choice(RELS), rng.choice(WORDS)) for _ in range(rng.randint(1, 3))]
        if rng.random() < 0.7:
            ep = g.add_episode(f"input {i}: " + "; ".join(" ".join(t) for t in trips), source=f"S{i}",
                               time=f"2023-05-{1 + i % 28:02d}")
            g.engram(trips, episode=ep)
        else:
            g.engram(trips, source=f"S{i}")
    elif kind == "recall":
        last = g.recall(rng.sample(WORDS, rng.randint(1, 2)), k=rng.randint(1, 6))
    elif kind == "reinforce" and last is not None:
        g.reinforce(last, reward=rng.uniform(-1, 1))
    elif kind == "maintain":
        g.maintain()
    elif kind == "permanent":
        nid = g.find(rng.choice(WORDS))
        if nid is not None:
            g.set_permanent(nid, rng.random() < 0.8)
    elif kind == "snapshot":
        g.snapshot()
    elif kind == "rollback" and g.snapshots:
        g.rollback(rng.choice(g.snapshots))
        last = None
    elif kind == "compact":
        g.compact()  # a recall taken before it still reinforces the same edges (ids do not change)
    return kind, last


@pytest.mark.parametrize("block", range(4))
def test_live_equals_saved_equals_replayed_after_every_step(tmp_path, monkeypatch, block):
    """250 sequences per block (1,000 in all), 1-10 steps each; a real save to disk every 4th; in odd
    blocks maintain() compacts whenever a fifth of the rows are dead."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)  # no crash here: durability is not what is tested
    cfg = CFG_COMPACT if block % 2 else CFG
    n_seq = 0
    n_steps = 0
    n_compacted = 0
    for s in range(block * 250, (block + 1) * 250):
        rng = random.Random(s)
        g = LiquidGraph(EMB, config=cfg)
        replica = LiquidGraph(EMB, config=cfg)
        last = None
        for i in range(rng.randint(1, 10)):
            n_before, base_before = len(g.oplog), g.oplog_base
            kind, last = random_step(g, rng, i, last)
            n_steps += 1
            if kind == "rollback" or g.oplog_base is not base_before or len(g.oplog) < n_before:
                # the log was truncated (rollback) or folded into a new base: replay from scratch
                replica = LiquidGraph.replay(g.oplog, EMB, config=cfg, base=g.oplog_base)
            else:
                for op in g.oplog[n_before:]:
                    replica.apply(op)
            # every step: the same state for the replay, the same state and recall for the loaded copy
            # (rebuilt from the stores, so its networkx structure differs from the live one's history)
            check_same(g, {"replay": replica, "save->load": loaded_copy(g)}, f"seq {s} step {i} ({kind})",
                       state_only=("replay",))
            n_compacted += g.nodes.n < g.nodes.next_uid or g.edges.n < g.edges.next_uid
        check_same(g, {"replay": replica}, f"seq {s}", QUERIES)
        if s % 4 == 0:  # the files on disk (the in-memory files above are the same bytes)
            h = LiquidGraph.load(g.save(tmp_path / f"g{s % 3}"), EMB)
            check_same(g, {"save to disk -> load": h}, f"seq {s}", QUERIES)
            assert h.oplog == g.oplog and (h.oplog_base is None) == (g.oplog_base is None)
        n_seq += 1
    assert n_seq == 250 and n_steps > 1200
    assert n_compacted > 10 or not block % 2  # steps taken after a compaction (more in the test below)


def test_long_sequences_with_compaction_stay_equal(monkeypatch):
    """40 sequences of 40 steps; maintain() compacts whenever a tenth of the rows are dead, and the
    random steps compact too: live, replayed and saved->loaded graphs agree after every step."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    cfg = dataclasses.replace(CFG, limits=dataclasses.replace(CFG.limits, compact_dead_share=0.1, compact_min_rows=0))
    n_after = 0
    for s in range(40):
        rng = random.Random(10_000 + s)
        g = LiquidGraph(EMB, config=cfg)
        last = None
        for i in range(40):
            kind, last = random_step(g, rng, i, last)
            replica = LiquidGraph.replay(g.oplog, EMB, config=cfg, base=g.oplog_base)
            check_same(g, {"replay": replica, "save->load": loaded_copy(g)}, f"seq {s} step {i} ({kind})",
                       state_only=("replay",))
            n_after += g.nodes.n < g.nodes.next_uid or g.edges.n < g.edges.next_uid
        check_same(g, {"replay": g.replayed()}, f"seq {s}", QUERIES)
    assert n_after > 400  # steps taken on a compacted graph


def test_rollback_equals_the_snapshot_and_recalls_the_same():
    rng = random.Random(99)
    g = LiquidGraph(EMB, config=dataclasses.replace(CFG, limits=LimitsConfig()))
    last = None
    for i in range(30):
        _, last = random_step(g, rng, i, last) if i % 7 else (None, last)
    sid = g.snapshot()
    frozen = g.copy()
    deep = g._state()  # a deep copy: shares nothing with the live graph
    for i in range(30, 50):
        kind, last = random_step(g, rng, i, last)
        if kind == "rollback":
            break
    g.rollback(sid)
    check_same(frozen, {"rollback": g}, "rollback", QUERIES)
    assert _state_differences(deep, g._state()) == []
    assert np.array_equal(g._emb[: g.nodes.n], frozen._emb[: frozen.nodes.n])


def test_snapshots_share_nothing_that_changes():
    """Snapshots and copies share list cells (provenance, aliases): changes must replace them."""
    table = {"blue die": [1.0] + [0.0] * 63, "blue dies": [0.85, 0.5268] + [0.0] * 62,
             "bob": [0.0, 0.0, 1.0] + [0.0] * 61, "robert": [0.0, 0.0, 0.96, 0.28] + [0.0] * 60}
    g = LiquidGraph(TableEmbedder(table, dim=64), config=GraphConfig(engram=EngramConfig(gat=False)))
    e1 = g.add_episode("The blue die has six sides.", source="D1")
    g.engram([("blue die", "has sides", "six"), ("bob", "owns", "blue die")], episode=e1)
    e2 = g.add_episode("The blue dies look like the blue die.", source="D2")
    g.engram([("blue dies", "looks like", "blue die"), ("blue die", "looks like", "blue dies")], episode=e2)
    sid = g.snapshot()
    copy = g.copy()
    deep = g._state()
    e3 = g.add_episode("Robert owns the blue die.", source="D3")
    g.engram([("robert", "owns", "blue die"), ("blue die", "has sides", "six")], episode=e3)  # alias, repeat
    g.maintain(steps=["scc"])  # merges blue dies into blue die: aliases, keys, provenance move
    assert g.stats()["n_entities"] < copy.stats()["n_entities"]
    assert _state_differences(deep, copy._state()) == []  # the copy did not change
    g.rollback(sid)
    assert _state_differences(deep, g._state()) == []  # nor did the snapshot
