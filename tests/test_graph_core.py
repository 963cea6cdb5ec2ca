"""Engram, recall, index and inspection of the Liquid Knowledge Graph (model-free embedders)."""

import sys
from dataclasses import replace

import numpy as np
import pytest

from mags_lib.embed import HashEmbedder
from mags_lib.graph import (
    EngramConfig,
    GraphConfig,
    IndexConfig,
    LiquidGraph,
    RecallConfig,
    TableEmbedder,
    VectorIndex,
)
from mags_lib.graph.config import DEFAULT_FUNCTIONAL
from mags_lib.graph.engram import gat_attention
from mags_lib.graph.recall import choose_anchors


def hash_graph(**engram_kw):
    cfg = GraphConfig(engram=replace(EngramConfig(), **engram_kw)) if engram_kw else None
    return LiquidGraph(HashEmbedder(dim=128), config=cfg)


def test_import_is_torch_free():
    import subprocess

    code = "import sys, mags_lib.graph, mags_lib.graph.viz; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_engram_creates_nodes_edges_and_provenance():
    g = hash_graph()
    ep = g.add_episode("Blorps eat frozen lemons.", source="D1:3", time="2023-05-08")
    rep = g.engram([("Blorps", "eat", "frozen lemons")], episode=ep)
    assert len(rep.new_nodes) == 2 and len(rep.new_edges) == 1
    f = g.edge(rep.new_edges[0])
    assert (f["subject"], f["relation"], f["object"]) == ("Blorps", "eat", "frozen lemons")
    assert f["sources"] == ["D1:3"] and f["episodes"] == [ep]
    assert f["strength"] == pytest.approx(0.5) and f["valid"]
    # the episode is linked to both entities
    assert g.G.has_edge(g._idx(ep), g._idx(g.find("blorps")))
    assert g.node(ep)["block"] == "episodic" and g.node(ep)["time"] == "2023-05-08"
    s = g.stats()
    assert (s["n_entities"], s["n_episodes"], s["n_facts"]) == (2, 1, 1)


def test_engram_resolution_by_text_and_by_similarity():
    table = {"bob": [1, 0, 0, 0], "robert": [0.96, 0.28, 0, 0], "alice": [0, 0, 1, 0], "tea": [0, 0, 0, 1]}
    g = LiquidGraph(TableEmbedder(table, dim=4), config=GraphConfig(engram=EngramConfig(gat=False)))
    g.engram([("Bob", "drinks", "tea")], source="test")
    rep = g.engram([("the BOB!", "knows", "alice")], source="test")  # same normalised text: no new node for bob
    assert rep.new_nodes == [g.find("alice")]
    rep = g.engram([("robert", "likes", "tea")], source="test")  # cosine 0.96 >= 0.90: update/merge into bob
    assert rep.new_nodes == [] and rep.resolved[0][:2] == ("robert", g.find("bob"))
    assert g.find("robert") == g.find("bob")
    assert "robert" in g.node(g.find("bob"))["aliases"]
    assert g.node(g.find("bob"))["access_count"] == 3  # mentioned three times
    g2 = LiquidGraph(TableEmbedder(table, dim=4),
                     config=GraphConfig(engram=EngramConfig(gat=False, resolve_threshold=0.99)))
    g2.engram([("bob", "drinks", "tea")], source="test")
    assert len(g2.engram([("robert", "drinks", "tea")], source="test").new_nodes) == 1  # below threshold: new node


def test_gat_initial_edges_hand_values():
    # new node "c" has cosine 0.8 with "a" and 0.6 with "b"; "z" is orthogonal
    table = {"a": [1, 0, 0, 0], "b": [0, 1, 0, 0], "z": [0, 0, 0, 1],
             "c": [0.8, 0.6, 0, 0]}
    g = LiquidGraph(TableEmbedder(table, dim=4), config=GraphConfig(engram=EngramConfig(reconcile=False)))
    g.engram([("a", "r", "z"), ("b", "r", "z")], source="test")
    rep = g.engram([("c", "r", "z")], source="test")
    att = gat_attention(np.array([0.8, 0.6]), temperature=0.1)  # softmax([8, 6]) = [0.8808, 0.1192]
    assert att == pytest.approx([0.880797, 0.119203], abs=1e-6)
    got = {g.edge(e)["object"]: g.edge(e)["strength"] for e in rep.association_edges}
    # strength = 0.5 * attention * cosine: a gets 0.5 * 0.8808 * 0.8 = 0.3523; b would get
    # 0.5 * 0.1192 * 0.6 = 0.0358 < gat_min_strength (0.05): no edge
    assert got == pytest.approx({"a": 0.5 * 0.880797 * 0.8}, abs=1e-6)
    g2 = LiquidGraph(TableEmbedder(table, dim=4),
                     config=GraphConfig(engram=EngramConfig(reconcile=False, gat_min_strength=0.01)))
    g2.engram([("a", "r", "z"), ("b", "r", "z")], source="test")
    rep2 = g2.engram([("c", "r", "z")], source="test")
    got2 = {g2.edge(e)["object"]: g2.edge(e)["strength"] for e in rep2.association_edges}
    assert got2 == pytest.approx({"a": 0.5 * 0.880797 * 0.8, "b": 0.5 * 0.119203 * 0.6}, abs=1e-6)
    assert all(g.edge(e)["relation"] == "related to" for e in rep.association_edges)


def test_reconciliation_newer_wins_and_old_stays_inspectable():
    # "has sides" is declared single-valued: undeclared, it would be multi-valued like "has" by meaning
    g = hash_graph(functional_relations=DEFAULT_FUNCTIONAL | {"has sides"})
    ep1 = g.add_episode("The blue die has six sides.", source="D1:1")
    r1 = g.engram([("blue die", "has sides", "six")], episode=ep1)
    ep2 = g.add_episode("Rule change: the blue die now has ten sides.", source="D1:9")
    r2 = g.engram([("blue die", "has sides", "ten")], episode=ep2)
    old, new = r1.new_edges[0], r2.new_edges[0]
    assert r2.invalidated_edges == [old]
    h = g.history("blue die", "has sides")
    assert [(x["object"], x["valid"]) for x in h] == [("six", False), ("ten", True)]
    assert h[0]["invalidated_by"] == new and h[0]["valid_to"] == 0 and h[0]["sources"] == ["D1:1"]
    assert g.node(ep1)["confidence"] == pytest.approx(0.5)  # the input that said "six" counts less
    for q in ["how many sides does the blue die have", "blue die six sides"]:
        res = g.recall(q, k=10)
        assert old not in {it.edge_id for it in res.items}
        assert new in {it.edge_id for it in res.items}
    # a multi-valued relation never conflicts
    g.engram([("blue die", "likes", "red")], source="test")
    rep = g.engram([("blue die", "likes", "green")], source="test")
    assert rep.invalidated_edges == []


def test_reconciliation_stronger_policy_and_off():
    g = hash_graph(conflict_policy="stronger")
    e_old = g.engram([("ommar", "is", "referee")], source="test").new_edges[0]
    g.engram([("ommar", "is", "referee")], source="test")  # repeated: 0.5 -> 0.6, confidence 0.7 -> 0.76
    rep = g.engram([("ommar", "is", "player")], source="test")
    assert rep.rejected_edges and not rep.invalidated_edges
    assert g.edge(rep.rejected_edges[0])["valid"] is False
    assert g.edge(rep.rejected_edges[0])["invalidated_by"] == e_old
    assert g.edge(e_old)["valid"] and g.edge(e_old)["strength"] == pytest.approx(0.6)
    g2 = hash_graph(reconcile=False)
    g2.engram([("ommar", "is", "referee")], source="test")
    assert g2.engram([("ommar", "is", "player")], source="test").invalidated_edges == []
    assert g2.stats()["n_facts"] == 2


def test_stronger_policy_a_rejected_challenger_gathers_evidence_and_wins_when_stronger():
    """A challenger rejected under ``"stronger"`` is one record that restatements reinforce, not a new rejected
    edge at the initial strength each time (which could never win, however often it was said)."""
    g = hash_graph(conflict_policy="stronger")
    e_old = g.engram([("ommar", "is", "referee")], source="s1").new_edges[0]
    g.engram([("ommar", "is", "referee")], source="s2")  # 0.5 x 0.7 -> 0.6 x 0.76 = 0.456
    first = g.engram([("ommar", "is", "player")], source="s3").rejected_edges
    again = g.engram([("ommar", "is", "player")], source="s4")  # 0.456 against 0.456: not yet stronger
    assert again.rejected_edges == first and not again.new_edges and not again.invalidated_edges
    assert g.edge(first[0])["strength"] == pytest.approx(0.6) and g.edge(first[0])["valid"] is False
    won = g.engram([("ommar", "is", "player")], source="s5")  # 0.68 x 0.808 > 0.456: the stronger now
    assert len(won.new_edges) == 1 and won.invalidated_edges == [e_old] and not won.rejected_edges
    new = g.edge(won.new_edges[0])
    assert new["valid"] and new["strength"] == pytest.approx(0.68) and new["confidence"] == pytest.approx(0.808)
    assert new["sources"] == ["s3", "s4", "s5"]  # all the statements that made it the stronger
    assert g.edge(first[0])["valid"] is False and g.edge(first[0])["strength"] == pytest.approx(0.6)  # the record
    assert g.edge(e_old)["valid"] is False and g.edge(e_old)["invalidated_by"] == won.new_edges[0]
    assert won.new_edges[0] in {it.edge_id for it in g.recall("what is ommar", k=10).items}
    # the old fact, said again, continues its own evidence (0.6 x 0.76 -> 0.68 x 0.808: not above the winner's)
    back = g.engram([("ommar", "is", "referee")], source="s6")
    assert back.rejected_edges == [e_old] and g.edge(e_old)["strength"] == pytest.approx(0.68)
    assert g.edge(won.new_edges[0])["valid"]
    assert g.engram([("ommar", "is", "referee")], source="s7").invalidated_edges == won.new_edges  # and then wins
    # the newer policy is unchanged: the newest statement wins at once
    h = hash_graph()
    h.engram([("ommar", "is", "referee")], source="s1")
    h.engram([("ommar", "is", "referee")], source="s2")
    assert h.engram([("ommar", "is", "player")], source="s3").invalidated_edges


def test_engram_bad_input():
    g = hash_graph()
    rep = g.engram([("", "r", "x"), ("  ", "r", "y")], source="test")
    assert len(rep.skipped) == 2 and g.stats()["n_nodes"] == 0
    with pytest.raises(ValueError, match="subject, relation, object"):
        g.engram([("only", "two")], source="test")
    with pytest.raises(KeyError, match="not a node id"):
        g.engram([("a", "b", "c")], episode="episode-7")
    g.engram([("a", "b", "c")], source="test")
    nid = g.find("a")
    with pytest.raises(ValueError, match="not an episode"):
        g.engram([("a", "b", "c")], episode=nid)
    with pytest.raises(ValueError, match="non-empty"):
        g.add_episode("   ")
    with pytest.raises(TypeError, match="embedder"):
        LiquidGraph(object())


def test_choose_anchors_prefers_coverage():
    # candidates 1 and 2 cover the same ground; 3 covers new nodes
    got = choose_anchors([1, 2, 3], [0.9, 0.88, 0.6], [{1, 2, 5}, {1, 2, 5}, {3, 7}], 2)
    assert [c for c, _, _ in got] == [1, 3]
    # coverage weight 0: pure similarity
    got = choose_anchors([1, 2, 3], [0.9, 0.88, 0.6], [{1, 2, 5}, {1, 2, 5}, {3, 7}], 2, coverage_weight=0.0)
    assert [c for c, _, _ in got] == [1, 2]
    # gain of the second candidate after the first: 0.88 * (0.5 + 0.5 * 0) = 0.44 < 0.6
    assert got[1][2] == pytest.approx(0.88)
    assert choose_anchors([1], [0.1], [{1}], 3, min_similarity=0.2) == []


def chain_graph(cfg=None):
    """a -> b -> c -> d, each strength 0.5, orthogonal embeddings."""
    table = {t: np.eye(8)[i] for i, t in enumerate("abcd")}
    g = LiquidGraph(TableEmbedder(table, dim=8),
                    config=cfg or GraphConfig(engram=EngramConfig(gat=False, reconcile=False)))
    rep = g.engram([("a", "r", "b"), ("b", "r", "c"), ("c", "r", "d")], source="test")
    return g, rep.new_edges


@pytest.mark.parametrize("traversal", ["bfs", "dfs"])
def test_traversal_bounded_by_product_of_strengths(traversal):
    g, (ab, bc, cd) = chain_graph()
    cfg = RecallConfig(n_anchors=1, anchors_per_k=0, traversal=traversal, min_path_strength=0.2, touch=False,
                       coactivation=False)
    res = g.recall("a", k=10, config=cfg)
    assert res.trace.anchor_ids == [g.find("a")]
    # a-b: 0.5, b-c: 0.25 >= 0.2, c-d: 0.125 < 0.2 -> not reached
    assert res.trace.edge_weights == {ab: pytest.approx(0.5), bc: pytest.approx(0.25)}
    assert {it.edge_id for it in res.items} == {ab, bc}
    far = next(it for it in res.items if it.edge_id == bc)
    assert far.path == (g.find("a"), g.find("b"), g.find("c")) and far.edges == (ab, bc)
    cfg2 = replace(cfg, min_path_strength=0.1)
    assert cd in {it.edge_id for it in g.recall("a", k=10, config=cfg2).items}
    cfg3 = replace(cfg2, max_depth=1)
    assert {it.edge_id for it in g.recall("a", k=10, config=cfg3).items} == {ab}


def test_branch_choice_out_of_a_hub_is_query_aware():
    # A hub with 40 facts: 39 strong "likes" facts and one weak allergy. The hub is the only anchor
    # (n_anchors=1, not scaled with k) and the allergy's object shares nothing with the query, so the
    # only route to the allergy is the hub's branch choice: the 8 strongest edges never include it, the
    # query-aware choice (cos(query, relation + neighbour)) does, within the same bound.
    rng = np.random.default_rng(0)
    things = ["".join(rng.choice(list("bdfgklmnprstvz"), 3)) + "ix" + str(i) for i in range(39)]
    g = hash_graph(gat=False)
    rep = g.engram([("Caroline", "likes", t) for t in things] + [("Caroline", "is allergic to", "penicillin")],
                   source="D1:1")
    *likes, allergy = rep.new_edges
    g.edges.strength[likes] = np.linspace(0.5, 0.9, len(likes))
    g.edges.strength[allergy] = 0.1  # said once, long ago: the weakest edge of the hub
    cfg = RecallConfig(n_anchors=1, anchors_per_k=0, touch=False, coactivation=False)
    res = g.recall("what is Caroline allergic to", k=5, config=cfg)
    assert res.trace.anchor_ids == [g.find("Caroline")]
    assert res.items[0].edge_id == allergy
    assert len(res.trace.edge_weights) == cfg.max_branch  # the bound holds: 8 of the hub's 40 edges
    strength_only = g.recall("what is Caroline allergic to", k=5, config=replace(cfg, branch_query_weight=0.0))
    assert allergy not in {it.edge_id for it in strength_only.items}
    assert set(strength_only.trace.edge_weights) == set(likes[-cfg.max_branch:])  # the 8 strongest


def test_recall_direction_out_only():
    g, (ab, bc, cd) = chain_graph()
    cfg = RecallConfig(n_anchors=1, anchors_per_k=0, min_path_strength=0.01, direction="out", touch=False,
                       coactivation=False)
    assert {it.edge_id for it in g.recall("c", k=10, config=cfg).items} == {cd}
    both = replace(cfg, direction="both")
    assert {it.edge_id for it in g.recall("c", k=10, config=both).items} == {ab, bc, cd}


def test_recall_items_trace_and_side_effects():
    g = hash_graph()
    ep = g.add_episode("Lena's dog is called Pico.", source="D2:1")
    g.engram([("Lena", "has dog", "Pico"), ("Pico", "chases", "seagulls")], episode=ep)
    res = g.recall(["lena dog", "pico"], k=5)
    assert 0 < len(res.items) <= 5
    assert [it.score for it in res.items] == sorted((it.score for it in res.items), reverse=True)
    fact = next(it for it in res.items if it.kind == "fact")
    assert fact.text == " ".join(fact.triplet) and fact.sources == ("D2:1",)
    assert fact.path[0] in res.trace.anchor_ids
    assert len(res.trace.paths) == len(res.items)
    assert res.trace.queries == ["lena dog", "pico"]
    e = fact.edge_id
    assert g.edges.uses[e] >= 1 and g.edges.activation[e] >= 1  # touched, co-activated
    # precomputed embeddings give the same items
    q = g.embedder.encode(["lena dog", "pico"])
    res2 = g.recall(["lena dog", "pico"], k=5, query_embeddings=q)
    assert [it.text for it in res2.items] == [it.text for it in res.items]
    with pytest.raises(ValueError, match="shape"):
        g.recall("x", query_embeddings=np.zeros((2, 5)))
    with pytest.raises(ValueError, match="k must be"):
        g.recall("x", k=0)
    with pytest.raises(ValueError):
        g.recall([])


def test_recall_routing_caps_episodes():
    g = hash_graph()
    for i in range(6):
        ep = g.add_episode(f"Episode {i} about tea and cakes", source=f"D{i}")
        g.engram([(f"guest {i}", "drinks", "tea")], episode=ep)
    cfg = RecallConfig(max_episode_share=0.25, episode_share_by_memory=False, touch=False, coactivation=False)
    res = g.recall("tea and cakes", k=4, config=cfg)
    # k=4 and a 25% share: exactly one episode although all six mention "tea and cakes" verbatim
    assert len(res.items) == 4 and sum(it.kind == "episode" for it in res.items) == 1
    wide = g.recall("tea and cakes", k=4, config=replace(cfg, max_episode_share=1.0))
    assert sum(it.kind == "episode" for it in wide.items) > 1  # the cap, not the ranking, held them back
    # by memory (the default): 6 episodes and 6 valid facts, so episodes may take half of k however low the share
    by_mem = g.recall("tea and cakes", k=4, config=replace(cfg, episode_share_by_memory=True))
    assert len(by_mem.items) == 4 and sum(it.kind == "episode" for it in by_mem.items) == 2


def test_recall_routing_follows_a_memory_of_few_facts():
    g = hash_graph()
    for i in range(12):
        ep = g.add_episode(f"Episode {i} about tea and cakes", source=f"D{i}")
        g.engram([(f"guest {i % 3}", "drinks", "tea")], episode=ep)  # three facts, each restated four times
    assert g.stats()["n_facts"] == 3 and g.stats()["n_episodes"] == 12
    cfg = RecallConfig(touch=False, coactivation=False)  # share 0.5, by memory, min_fact_share 0.3
    # facts are 3/15 = 0.2 of the memory, under min_fact_share: a memory of episodes, ranked by score alone
    # (every episode repeats the query verbatim and outscores the facts)
    res = g.recall("tea and cakes", k=4, config=cfg)
    assert len(res.items) == 4 and sum(it.kind == "episode" for it in res.items) == 4
    # without the floor: ceil(0.2 * 4) = 1 place of k=4 for facts (the fixed share keeps 2)
    reserve = g.recall("tea and cakes", k=4, config=replace(cfg, min_fact_share=0.0))
    assert len(reserve.items) == 4 and sum(it.kind == "episode" for it in reserve.items) == 3
    fixed = g.recall("tea and cakes", k=4, config=replace(cfg, episode_share_by_memory=False))
    assert sum(it.kind == "episode" for it in fixed.items) == 2
    # the floor is a share of the memory: at 0.2 exactly the reserve holds (fewer than, not at most)
    assert sum(it.kind == "episode" for it in g.recall("tea and cakes", k=4, config=replace(
        cfg, min_fact_share=0.2)).items) == 3
    # three more facts make it 6/18 = 0.33: the memory keeps ceil(0.33 * 4) = 2 places for facts
    for i in range(3):
        g.engram([(f"guest {i}", "eats", "cakes")], source="menu")
    assert g.stats()["n_facts"] == 6
    rich = g.recall("tea and cakes", k=4, config=cfg)
    assert len(rich.items) == 4 and sum(it.kind == "episode" for it in rich.items) == 2
    with pytest.raises(ValueError, match="min_fact_share"):
        RecallConfig(min_fact_share=-0.1)


def test_recall_returns_the_best_episodes_when_entities_take_the_anchor_places():
    g = hash_graph()
    # entities named by the query's words (the best anchors), never linked to the episodes
    g.engram([("tea", "goes with", "cakes"), ("cakes", "go with", "tea"), ("tea cakes", "are", "tea")], source="menu")
    for i in range(6):
        g.add_episode(f"tea and cakes, said guest {i}", source=f"D{i}")
    cfg = RecallConfig(n_anchors=4, anchors_per_k=1.0, max_episode_share=1.0, touch=False, coactivation=False)
    res = g.recall("tea and cakes", k=4, config=cfg)
    n_ent_anchors = sum(not a.node.startswith("ep") for a in res.trace.anchors)
    assert n_ent_anchors >= 1  # an entity took an anchor place ...
    n_eps = sum(it.kind == "episode" for it in res.items)
    old = g.recall("tea and cakes", k=4, config=replace(cfg, candidate_episodes=False))
    assert sum(it.kind == "episode" for it in old.items) == len(res.trace.anchors) - n_ent_anchors  # only anchors
    # ... but the episode candidates still compete: the 4 best-scored items include more episodes than anchors
    assert n_eps > len(res.trace.anchors) - n_ent_anchors
    assert [it.score for it in res.items] == sorted((it.score for it in res.items), reverse=True)


def test_source_weight_grounds_a_fact_in_the_turn_that_said_it():
    g = hash_graph()
    a = g.add_episode("Lena: the storm flooded the harbour last night.", source="D1")
    g.engram([("Lena", "talked about", "the weather")], episode=a)  # said in a turn about the storm
    b = g.add_episode("Mira: I baked bread with my aunt.", source="D2")
    g.engram([("Mira", "talked about", "the storm")], episode=b)  # matches by words, said in a turn about bread
    g.engram([("Oskar", "talked about", "the storm harbour")], source="notes")  # no episode: keeps its own
    cfg = RecallConfig(touch=False, coactivation=False, max_episode_share=1.0)
    query = "Who talked about the storm in the harbour?"

    def scores(s):
        items = g.recall(query, k=6, config=replace(cfg, source_weight=s)).items
        return {it.text: it.score for it in items if it.kind == "fact"}

    alone, grounded, only_source = scores(0.0), scores(0.5), scores(1.0)
    lena, mira, oskar = "Lena talked about the weather", "Mira talked about the storm", "Oskar talked about the storm harbour"
    assert alone[mira] > alone[lena]  # on their own words the bread turn's fact wins ...
    assert grounded[lena] > grounded[mira]  # ... grounded in their turns, the storm turn's fact does
    assert only_source[lena] > grounded[lena] > alone[lena] and only_source[mira] < grounded[mira] < alone[mira]
    assert alone[oskar] == pytest.approx(grounded[oskar]) == pytest.approx(only_source[oskar])
    # a fact whose episode is gone (pruned by the dynamics) keeps its own relevance
    g._kill_nodes([g._idx(a)])
    assert scores(0.5)[lena] == pytest.approx(scores(0.0)[lena])
    assert scores(0.5)[mira] < scores(0.0)[mira]  # the other still grounded
    with pytest.raises(ValueError, match="source_weight"):
        RecallConfig(source_weight=1.5)


def test_superseded_facts_lower_their_episode_once():
    for compound, expected in ((False, 0.5), (True, 0.25)):
        g = hash_graph(compound_superseded=compound)
        ep = g.add_episode("Lena lives in Paris and works at the bakery.", source="D1")
        g.engram([("Lena", "lives in", "Paris"), ("Lena", "works at", "bakery")], episode=ep)
        later = g.add_episode("Lena moved to Rome and works at the school now.", source="D2")
        g.engram([("Lena", "lives in", "Rome"), ("Lena", "works at", "school")], episode=later)
        assert g.stats()["n_invalidated"] == 2
        assert g.nodes.confidence[g._idx(ep)] == pytest.approx(expected), compound  # two facts superseded
        assert g.nodes.confidence[g._idx(later)] == pytest.approx(1.0)


def test_vector_index_exact_and_approximate_switch():
    rng = np.random.default_rng(0)
    M = rng.standard_normal((420, 32)).astype(np.float32)
    M /= np.linalg.norm(M, axis=1, keepdims=True)
    ix = VectorIndex(32, IndexConfig(approx_threshold=200))
    ix.add(np.arange(150), M)
    assert not ix.approximate
    rows, sims = ix.search(M[7], 3, M)[0]
    assert rows[0] == 7 and sims[0] == pytest.approx(1.0, abs=1e-5)
    ix.add(np.arange(150, 300), M)
    assert ix.approximate and len(ix) == 300
    rows, sims = ix.search(M[250], 5, M)[0]
    assert rows[0] == 250
    exact = ix.search(M[:20], 5, M, exact=True)
    approx = ix.search(M[:20], 5, M)
    recall_at5 = np.mean([len(set(a[0]) & set(b[0])) / 5 for a, b in zip(exact, approx)])
    assert recall_at5 >= 0.9
    # new rows wait in an exactly searched buffer, then go into the HNSW graph in one batch
    ix.add(np.arange(400, 410), M)
    assert len(ix._pending) == 10 and ix.search(M[405], 1, M)[0][0][0] == 405
    ix.remove(np.array([401]))
    assert 401 not in ix._pending and len(ix) == 309
    ix.flush(M)
    assert not ix._pending and ix.search(M[405], 1, M)[0][0][0] == 405
    ix.remove(np.arange(400, 410))
    ix.remove(np.arange(0, 120))  # 180 left: still >= 100 (half the threshold)
    assert ix.approximate and 5 not in set(ix.search(M[5], 10, M)[0][0])
    ix.remove(np.arange(120, 220))  # 80 left: back to exact
    assert not ix.approximate and len(ix) == 80
    assert set(ix.search(M[250], 80, M)[0][0]) == set(range(220, 300))


def test_graph_switches_to_approximate_index():
    cfg = GraphConfig(index=IndexConfig(approx_threshold=40))
    g = LiquidGraph(HashEmbedder(dim=64), config=cfg)
    g.engram([(f"thing {i}", "near", f"place {i}") for i in range(25)], source="test")
    assert g.stats()["approximate_index"]
    res = g.recall("thing 7", k=3)
    assert any("thing 7" in it.text for it in res.items)


def test_inspection_helpers():
    g = hash_graph()
    ep = g.add_episode("Tomas is a chef in Madrid.", source="D5")
    g.engram([("Tomas", "works as", "chef"), ("Tomas", "lives in", "Madrid")], episode=ep)
    G = g.to_networkx()
    assert G.number_of_nodes() == 4 and G.nodes[g.find("tomas")]["text"] == "Tomas"
    assert len(g.facts()) == 2
    assert "LiquidGraph(" in repr(g)
    with pytest.raises(KeyError):
        g.node("n999")
    with pytest.raises(KeyError):
        g.edge(10_000)


def test_time_order_reads_the_time_of_a_fact_written_without_an_episode():
    """``engram(..., source=, time=)`` with no episode: an older statement read later is history, as with
    episodes (the rival's time was read from its episodes only, so the older one superseded it with an interval
    ending before it began; found by an audit)."""
    from mags_lib.embed import HashEmbedder

    for with_episodes in (False, True):
        g = LiquidGraph(HashEmbedder(dim=64))
        for obj, src, when in (("rome", "S2", "2024-01-01"), ("paris", "S1", "2023-01-01")):
            if with_episodes:
                g.engram([("bob", "lives in", obj)], episode=g.add_episode(f"Bob lives in {obj}.", source=src,
                                                                            time=when))
            else:
                g.engram([("bob", "lives in", obj)], source=src, time=when)
        hist = {f["object"]: (f["valid"], f["valid_from"], f["valid_to"]) for f in g.history("bob", "lives in")}
        assert hist == {"rome": (True, "2024-01-01", None), "paris": (False, "2023-01-01", "2024-01-01")}, \
            (with_episodes, hist)


def test_a_node_id_of_the_wrong_kind_is_refused():
    """'ep1' named entity n1 and 'n0' episode ep0 (the prefix was ignored; found by an audit)."""
    g = LiquidGraph(HashEmbedder(dim=64))
    ep = g.add_episode("Bob lives in Paris.", source="D1")
    g.engram([("bob", "lives in", "paris")], episode=ep)
    assert ep == "ep0" and g.node("n1")["text"] == "bob"
    n_ops = len(g.oplog)
    with pytest.raises(KeyError, match="uid 1 is an entity, 'n1'"):
        g.node("ep1")
    with pytest.raises(KeyError, match="uid 0 is an episode, 'ep0'"):
        g.engram([("bob", "likes", "tea")], episode="n0")
    with pytest.raises(KeyError, match="uid 2 is an entity"):
        g.set_permanent("ep2")
    assert len(g.oplog) == n_ops and not g.node("n2")["permanent"]


def test_engram_embeds_the_declared_labels_before_its_first_change():
    """A relation no list declares is classified by the declared labels' embeddings, encoded on first need:
    mid-write before, so an embedder failure there left nodes, edges and relations no log entry held (found by
    an audit). Now they are encoded with everything else, before the first change."""
    from mags_lib.graph.core import _state_differences

    class Flaky(HashEmbedder):
        fail_on = None

        def encode(self, texts):
            if self.fail_on is not None and self.fail_on(texts):
                raise RuntimeError("embedder down")
            return super().encode(texts)

    emb = Flaky(dim=64)
    g = LiquidGraph(emb)
    g.engram([("alice", "eats", "fish")], source="D0")  # declared relations only: the labels are not needed
    before = g._state()
    emb.fail_on = lambda texts: len(texts) > 5  # the declared labels' batch
    with pytest.raises(RuntimeError, match="embedder down"):
        g.engram([("bob", "zorbles", "paris"), ("bob", "zorbles", "london")], source="D1")
    assert _state_differences(before, g._state()) == [] and [o["op"] for o in g.oplog] == ["engram"]
    emb.fail_on = None
    g.engram([("bob", "zorbles", "paris"), ("bob", "zorbles", "london")], source="D1")
    assert g.replayed().equals(g)
