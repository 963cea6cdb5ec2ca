"""Hand-checkable graphs for every dynamic of the Liquid Knowledge Graph: values before and after."""

from dataclasses import replace

import networkx as nx
import numpy as np
import pytest

from mags_lib.graph import DynamicsConfig, EngramConfig, GraphConfig, LiquidGraph, TableEmbedder, core_numbers
from mags_lib.graph.dynamics import STEPS

ALL_OFF = {s: False for s in STEPS}


def make(edges, *, dyn=None, table=None, dim=256):
    """Graph from (subject, relation, object, strength) rows; GAT edges and reconciliation off.

    Returns (g, {(subject, object): edge id}).
    """
    cfg = GraphConfig(engram=replace(GraphConfig().engram, gat=False, reconcile=False),
                      dynamics=dyn if dyn is not None else DynamicsConfig())
    g = LiquidGraph(TableEmbedder(table or {}, dim=dim), config=cfg)
    rep = g.engram([(s, r, o) for s, r, o, _ in edges], source="test")
    ids = {}
    for (s, r, o, st), e in zip(edges, rep.new_edges):
        g.edges.strength[e] = st
        ids[(s, o)] = e
    return g, ids


def S(g, e):
    return float(g.edges.strength[e])


# ------------------------------------------------------------------------------------------------
def test_decay_with_recency_correction():
    # two edges at strength 0.5; one used just now (age 0), one long ago (age 100); one permanent
    # (rate 0.05 and no salience protection: the recency rule alone, with round numbers)
    g, ids = make([("a", "r", "b", 0.5), ("c", "r", "d", 0.5), ("e", "r", "f", 0.5)],
                  dyn=DynamicsConfig(decay_rate=0.05, salience_protection=0.0))
    g.tick = 100
    g.edges.last_used[ids[("a", "b")]] = 100  # age 0: protection 0.8 -> factor 1 - 0.05 * 0.2 = 0.99
    g.edges.last_used[ids[("c", "d")]] = 0  # age 100: protection 0.8 * e^-20 ~ 0 -> factor 0.95
    g.edges.permanent[ids[("e", "f")]] = True
    g.maintain(steps=["decay"])
    assert S(g, ids[("a", "b")]) == pytest.approx(0.495)
    assert S(g, ids[("c", "d")]) == pytest.approx(0.475, abs=1e-9)
    assert S(g, ids[("e", "f")]) == 0.5
    # age 5 (one tau): protection 0.8/e -> factor 1 - 0.05 * (1 - 0.2943) = 0.964715
    g.edges.last_used[ids[("a", "b")]] = g.tick - 5
    g.maintain(steps=["decay"])
    assert S(g, ids[("a", "b")]) == pytest.approx(0.495 * (1 - 0.05 * (1 - 0.8 * np.exp(-1))))


def test_hebbian_activation_and_anchor_links():
    g, ids = make([("a", "r", "b", 0.5), ("c", "r", "d", 0.5)])
    e = ids[("a", "b")]
    g.edges.activation[e] = 2  # recalled twice: 1 - 0.5 * 0.8^2 = 0.68
    a, c = g._entity_key["a"], g._entity_key["c"]
    g._coact = [(a, c), (a, c)]  # two co-activations of anchors a and c, no edge between them yet
    rep = g.maintain(steps=["hebbian"])
    assert S(g, e) == pytest.approx(0.68)
    assert S(g, ids[("c", "d")]) == 0.5
    assert rep.steps["hebbian"]["anchor_links_new"] == 1
    link = g._find_edge(a, c, g._rel_id["related to"], 1)
    assert link is not None and S(g, link) == pytest.approx(1 - 0.9 * 0.8)  # 0.1 then one more step
    assert g.edges.activation.sum() == 0 and g._coact == []


def test_hebbian_after_real_recall_strengthens_path():
    g, ids = make([("alice", "likes", "bob", 0.5), ("zed", "likes", "yann", 0.5)])
    res = g.recall("alice", k=1)
    assert res.items[0].edge_id == ids[("alice", "bob")]
    before = S(g, ids[("alice", "bob")])
    g.maintain(steps=["hebbian"])
    assert S(g, ids[("alice", "bob")]) == pytest.approx(1 - (1 - before) * 0.8)
    assert S(g, ids[("zed", "yann")]) == 0.5


def test_hebbian_never_links_episodes():
    # Episodes anchor recall results but belong to the episodic block: co-activation wires only
    # entity anchors, so after recall + hebbian no association edge touches an episode node.
    from mags_lib.embed import HashEmbedder
    from mags_lib.graph.store import EDGE_ASSOC, KIND_EPISODE

    g = LiquidGraph(HashEmbedder(dim=128))
    for i, (text, trip) in enumerate([("Blorps eat frozen lemons.", ("blorps", "eat", "frozen lemons")),
                                      ("Quindles live under the Teal Bridge.", ("quindles", "live under", "Teal Bridge")),
                                      ("Snarfs build nests of glass straws.", ("snarfs", "build nests of", "glass straws"))]):
        ep = g.add_episode(text, source=f"D1:{i}")
        g.engram([trip], episode=ep, source=f"D1:{i}")
    res = g.recall(["what do blorps eat", "where do quindles live", "snarfs nests"], k=6)
    assert any(it.kind == "episode" for it in res.items) and any(it.kind == "fact" for it in res.items)
    g.maintain(steps=["hebbian"])
    ed, kinds = g.edges, g.nodes.kind
    assoc = np.flatnonzero(ed.alive & (ed.kind == EDGE_ASSOC))
    assert assoc.size > 0  # entity anchors were linked
    assert not any(kinds[ed.src[e]] == KIND_EPISODE or kinds[ed.dst[e]] == KIND_EPISODE for e in assoc)


def test_reward_path_strengthening_and_weakening():
    g, ids = make([("alice", "likes", "bob", 0.5), ("carol", "likes", "dan", 0.5)])
    res = g.recall("alice", k=1)
    g.reinforce(res, reward=1.0)  # 0.5 + 0.3 * 1 * 0.5
    assert S(g, ids[("alice", "bob")]) == pytest.approx(0.65)
    g.reinforce(res, reward=-1.0)  # 0.65 * (1 - 0.3)
    assert S(g, ids[("alice", "bob")]) == pytest.approx(0.455)
    assert S(g, ids[("carol", "dan")]) == 0.5
    with pytest.raises(ValueError):
        g.reinforce(res, reward=2.0)


def test_only_a_positive_reward_counts_a_use_or_refreshes_recency():
    # uses and recency both protect an edge from decay (salience, recency protection): a neutral or a
    # negative reward used to count a use (0) and refresh the recency (both), so punishing a path protected it
    g, ids = make([("alice", "likes", "bob", 0.5)])
    e = ids[("alice", "bob")]
    res = g.recall("alice", k=1)
    uses = int(g.edges.uses[e])
    for _ in range(5):
        g.maintain(steps=["decay"])
    assert g.tick == 5 and int(g.edges.last_used[e]) == 0
    before = S(g, e)
    assert g.reinforce(res, reward=0.0) == 0
    assert (int(g.edges.uses[e]), int(g.edges.last_used[e]), S(g, e)) == (uses, 0, before)
    assert g.reinforce(res, reward=-0.5) == 1
    assert S(g, e) == pytest.approx(before * (1 - 0.3 * 0.5))
    assert (int(g.edges.uses[e]), int(g.edges.last_used[e])) == (uses, 0)
    assert g.reinforce(res, reward=0.5) == 1
    assert (int(g.edges.uses[e]), int(g.edges.last_used[e])) == (uses + 1, 5)


def test_game_of_life_lonely_crowded_surviving():
    leaves = [("hub", "r", f"leaf{i}", 0.5) for i in range(13)]  # hub has 13 live edges > 12: crowded
    g, ids = make(leaves + [("x", "r", "y", 0.2)], dyn=DynamicsConfig(gol_birth=False))
    rep = g.maintain(steps=["game_of_life"])
    f_hub, f_leaf = 0.95, 1.0  # crowded: 1 - 0.05; surviving (1 live edge): unchanged by default
    for i in range(13):
        assert S(g, ids[("hub", f"leaf{i}")]) == pytest.approx(0.5 * np.sqrt(f_hub * f_leaf))
    # x - y: strength 0.2 < 0.3 so neither end has a live edge: both lonely -> 0.2 * 0.95
    assert S(g, ids[("x", "y")]) == pytest.approx(0.19)
    assert rep.steps["game_of_life"] == {"lonely": 2, "crowded": 1, "surviving": 13, "births": 0}


def test_game_of_life_survivors_strengthen_capped_at_one():
    g, ids = make([("a", "r", "b", 0.99), ("b", "r", "c", 0.5)],
                  dyn=DynamicsConfig(gol_birth=False, gol_survive_gain=0.025))
    g.maintain(steps=["game_of_life"])
    assert S(g, ids[("a", "b")]) == 1.0  # 0.99 * 1.025 capped
    assert S(g, ids[("b", "c")]) == pytest.approx(0.5125)


def test_game_of_life_births_in_a_square():
    # square a-b, b-d, d-c, c-a: a and d share live neighbours {b, c}; so do b and c -> two births
    g, _ = make([("a", "r", "b", 0.5), ("b", "r", "d", 0.5), ("d", "r", "c", 0.5), ("c", "r", "a", 0.5)])
    n_before = int(g.edges.alive.sum())
    rep = g.maintain(steps=["game_of_life"])
    assert rep.steps["game_of_life"]["births"] == 2
    assert int(g.edges.alive.sum()) == n_before + 2
    key = g._entity_key
    new = np.flatnonzero(g.edges.alive)[-2:]
    pairs = {frozenset((int(g.edges.src[e]), int(g.edges.dst[e]))) for e in new}
    assert pairs == {frozenset((key["a"], key["d"])), frozenset((key["b"], key["c"]))}
    assert all(S(g, e) == pytest.approx(0.2) for e in new)


def test_core_numbers_hand_and_against_networkx():
    # triangle 0-1-2 plus pendant 3
    assert core_numbers(5, np.array([0, 1, 2, 2]), np.array([1, 2, 0, 3])).tolist() == [2, 2, 2, 1, 0]
    rng = np.random.default_rng(0)
    for _ in range(20):
        n = int(rng.integers(2, 40))
        m = int(rng.integers(0, 120))
        u, v = rng.integers(0, n, m), rng.integers(0, n, m)
        G = nx.Graph()
        G.add_nodes_from(range(n))
        G.add_edges_from((a, b) for a, b in zip(u.tolist(), v.tolist()) if a != b)
        want = nx.core_number(G)
        assert core_numbers(n, u, v).tolist() == [want[i] for i in range(n)]


def test_kcore_consolidates_the_main_core_only():
    clique = [(a, "r", b, 0.5) for a, b in [("a", "b"), ("a", "c"), ("a", "d"), ("b", "c"), ("b", "d"), ("c", "d")]]
    tail = [("d", "r", "e", 0.5), ("e", "r", "f", 0.5), ("f", "r", "g", 0.5), ("g", "r", "h", 0.5)]
    g, ids = make(clique + tail)  # 4 of 8 nodes in the main core: share 0.5 <= kcore_max_share
    imp_before = float(g.nodes.importance[g._entity_key["a"]])
    rep = g.maintain(steps=["kcore"])
    assert rep.steps["kcore"] == {"k": 3, "core_nodes": 4, "edges_strengthened": 6}
    for s, _, o, _ in clique:
        assert S(g, ids[(s, o)]) == pytest.approx(0.525)  # 0.5 + 0.05 * 0.5
    assert S(g, ids[("d", "e")]) == 0.5 and S(g, ids[("e", "f")]) == 0.5
    k = g._entity_key
    assert g.nodes.importance[k["a"]] == pytest.approx(imp_before + 0.1 * (1 - imp_before))
    # the same clique with a short tail: the core is 4 of 6 nodes, the whole graph's centre -> skipped
    g2, ids2 = make(clique + tail[:2])
    assert g2.maintain(steps=["kcore"]).steps["kcore"]["core_nodes"] == 0
    assert S(g2, ids2[("a", "b")]) == 0.5
    assert g.nodes.importance[k["e"]] == pytest.approx(imp_before)
    assert g.node(g.find("a"))["stage"] == "long_term" and g.node(g.find("e"))["stage"] == "working"


def test_kcore_skips_when_main_core_too_shallow():
    g, ids = make([("a", "r", "b", 0.5), ("b", "r", "c", 0.5)], dyn=DynamicsConfig(kcore_min_k=2))
    rep = g.maintain(steps=["kcore"])  # a path: main core k = 1 < 2
    assert rep.steps["kcore"]["core_nodes"] == 0 and S(g, ids[("a", "b")]) == 0.5


def test_scc_strengthens_cycle_and_sets_clusters():
    g, ids = make([("a", "r", "b", 0.5), ("b", "r", "c", 0.5), ("c", "r", "a", 0.5), ("d", "r", "e", 0.5)])
    rep = g.maintain(steps=["scc"])
    assert rep.steps["scc"]["components"] == 1 and rep.steps["scc"]["nodes"] == 3
    for pair in [("a", "b"), ("b", "c"), ("c", "a")]:
        assert S(g, ids[pair]) == pytest.approx(0.55)
    assert S(g, ids[("d", "e")]) == 0.5
    k = g._entity_key
    cid = min(k["a"], k["b"], k["c"])
    assert [int(g.nodes.cluster[k[x]]) for x in "abcde"] == [cid, cid, cid, -1, -1]


def test_scc_merges_near_duplicates_in_a_cycle():
    # "bob" and "robert": cosine 0.96, below the engram resolve threshold (0.97 here) but above
    # the SCC merge threshold (0.8); they refer to each other, so the SCC step merges them.
    table = {"bob": [1, 0, 0, 0], "robert": [0.96, 0.28, 0, 0], "paris": [0, 0, 1, 0], "chess": [0, 0, 0, 1]}
    cfg = GraphConfig(engram=replace(GraphConfig().engram, gat=False, resolve_threshold=0.97))
    g = LiquidGraph(TableEmbedder(table, dim=4), config=cfg)
    g.engram([("bob", "also called", "robert"), ("robert", "also called", "bob"), ("robert", "lives in", "paris"),
              ("bob", "plays", "chess")], source="test")
    assert g.stats()["n_entities"] == 4
    rep = g.maintain(steps=["scc"])
    assert rep.steps["scc"]["merged"] == 1
    assert g.stats()["n_entities"] == 3
    bob = g.find("bob")
    assert g.find("robert") == bob  # the alias now resolves to the kept node
    facts = {(f["subject"], f["relation"], f["object"]) for f in g.facts()}
    assert facts == {("bob", "lives in", "paris"), ("bob", "plays", "chess")}  # self-loops dropped
    assert "robert" in g.node(bob)["aliases"]


def test_scc_merge_keeps_a_permanent_member_and_merges_the_rest_into_it():
    # bob, robert and bobby are near-duplicates in one cycle; bobby (the largest id, met first when
    # members are merged from the largest down) is permanent, so both others merge into bobby.
    # (every pair above the short-name threshold 0.95: a merged group is similar pair by pair)
    table = {"bob": [1, 0, 0, 0], "robert": [0.96, 0.28, 0, 0], "bobby": [0.96, 0.2, 0.2, 0], "chess": [0, 0, 0, 1]}
    cfg = GraphConfig(engram=replace(GraphConfig().engram, gat=False, resolve_threshold=0.99))
    g = LiquidGraph(TableEmbedder(table, dim=4), config=cfg)
    g.engram([("bob", "also called", "robert"), ("robert", "also called", "bobby"), ("bobby", "also called", "bob"),
              ("bob", "plays", "chess")], source="test")
    bobby = g.find("bobby")
    assert g.stats()["n_entities"] == 4 and g._idx(g.find("bob")) < g._idx(g.find("robert")) < g._idx(bobby)
    g.nodes.permanent[g._idx(bobby)] = True
    rep = g.maintain(steps=["scc"])
    assert rep.steps["scc"]["merged"] == 2
    assert g.find("bob") == g.find("robert") == bobby
    assert {(f["subject"], f["relation"], f["object"]) for f in g.facts()} == {("bobby", "plays", "chess")}


def test_solidify_edges_and_nodes():
    g, ids = make([("a", "r", "b", 0.96), ("a", "r", "c", 0.96), ("a", "r", "d", 0.96), ("x", "r", "y", 0.96)],
                  dyn=DynamicsConfig(solidify_node_edges=3))
    for pair in [("a", "b"), ("a", "c"), ("a", "d")]:
        g.edges.uses[ids[pair]] = 3
    g.edges.uses[ids[("x", "y")]] = 2  # strong but too rarely used
    rep = g.maintain(steps=["solidify"])
    assert rep.steps["solidify"] == {"edges_solidified": 3, "nodes_solidified": 1}
    assert not g.edges.permanent[ids[("x", "y")]]
    assert g.node(g.find("a"))["permanent"] and not g.node(g.find("b"))["permanent"]


def test_promote_and_working_capacity():
    g, ids = make([("a", "r", "b", 0.5), ("c", "r", "d", 0.5)], dyn=DynamicsConfig(working_capacity=1))
    k = g._entity_key
    nd = g.nodes
    nd.access[k["a"]] = 2  # used enough -> long term
    nd.surprise[k["b"]] = 0.9  # surprising -> long term
    nd.access[k["c"]] = 1
    nd.access[k["d"]] = 1
    nd.last_access[k["c"]] = -5  # least recently used working node: forgotten first
    rep = g.maintain(steps=["promote"])
    assert rep.steps["promote"] == {"promoted": 2, "forgotten": 1}
    assert g.find("c") is None and g.find("d") is not None
    assert g.node(g.find("a"))["stage"] == "long_term" and g.node(g.find("d"))["stage"] == "working"
    assert not g.edges.alive[ids[("c", "d")]]  # the forgotten node took its edge with it


def test_prune_weak_inactive_isolated_and_permanent_exempt():
    # the rules themselves: keep_evidence off (it spares the ends of valid facts, tested below)
    g, ids = make([("a", "r", "b", 0.04), ("c", "r", "d", 0.06), ("e", "r", "f", 0.01), ("g", "r", "h", 0.5)],
                  dyn=DynamicsConfig(keep_evidence=False))
    g.edges.permanent[ids[("e", "f")]] = True
    g.set_permanent(g.find("a"))
    g.tick = 1
    rep = g.maintain(steps=["prune"])
    assert rep.steps["prune"]["weak_edges"] == 1
    assert not g.edges.alive[ids[("a", "b")]]
    assert g.edges.alive[ids[("c", "d")]] and g.edges.alive[ids[("e", "f")]]
    # a and b became isolated: b (created at tick 0, grace 1) is removed, permanent a stays
    assert g.find("b") is None and g.find("a") is not None
    # inactive: g-h not accessed for >= 50 ticks and degree 1 <= 1 -> removed; c-d too, e-f ends are not permanent
    g.tick = 60
    g.nodes.last_access[g._entity_key["c"]] = 59
    g.nodes.last_access[g._entity_key["d"]] = 59
    rep = g.maintain(steps=["prune"])
    assert g.find("g") is None and g.find("h") is None
    assert g.find("c") is not None and g.find("a") is not None
    assert rep.steps["prune"]["inactive_nodes"] >= 2


def test_salience_protects_from_decay_hand_values():
    # factor = 1 - 0.01 * (1 - 0.8 * salience) for edges last used long ago (no recency protection);
    # salience = max(min over the ends of max(importance, surprise), uses / (uses + 2))
    g, ids = make([("a", "r", "b", 0.5), ("c", "r", "d", 0.5), ("e", "r", "f", 0.5), ("h", "r", "i", 0.5),
                   ("j", "r", "k", 0.5)])
    nd, k = g.nodes, g._entity_key
    nd.importance[:], nd.surprise[:] = 0.3, 0.0  # the engram default importance, no surprise
    nd.importance[[k["c"], k["d"]]] = 0.9  # observed as important: both ends
    nd.surprise[[k["e"], k["f"]]] = 1.0  # a contradiction's surprise: both ends
    g.edges.uses[ids[("h", "i")]] = 6  # used six times: 6 / 8
    nd.importance[k["j"]] = 1.0  # one important end (a hub) does not make its every fact salient
    g.tick = 100
    g.maintain(steps=["decay"])
    for pair, sal in [(("a", "b"), 0.3), (("c", "d"), 0.9), (("e", "f"), 1.0), (("h", "i"), 0.75), (("j", "k"), 0.3)]:
        assert S(g, ids[pair]) == pytest.approx(0.5 * (1 - 0.01 * (1 - 0.8 * sal))), pair
    # off: every edge decays at the full rate
    g2, ids2 = make([("c", "r", "d", 0.5)], dyn=DynamicsConfig(salience_protection=0.0))
    g2.nodes.importance[:] = 0.9
    g2.tick = 100
    g2.maintain(steps=["decay"])
    assert S(g2, ids2[("c", "d")]) == pytest.approx(0.495)


def test_salient_facts_keep_their_strength_and_escape_pruning():
    # keep_salience 0.6: a fact whose ends were observed as important (0.9) decays no lower than
    # keep_strength (0.1) and is not pruned below prune_strength; a plain fact and an association
    # edge between important nodes are
    g, ids = make([("a", "r", "b", 0.101), ("c", "r", "d", 0.04), ("x", "r", "y", 0.101), ("p", "r", "q", 0.04)],
                  dyn=DynamicsConfig(decay_rate=0.5, salience_protection=0.0))
    nd, k = g.nodes, g._entity_key
    nd.importance[:], nd.surprise[:] = 0.3, 0.0
    for name in "abcdpq":
        nd.importance[k[name]] = 0.9
    g.edges.kind[ids[("p", "q")]] = 1  # an association edge (EDGE_ASSOC): facts only are kept
    g.tick = 100
    g.maintain(steps=["decay"])
    assert S(g, ids[("a", "b")]) == pytest.approx(0.1)  # 0.101 * 0.5 floored at keep_strength
    assert S(g, ids[("x", "y")]) == pytest.approx(0.0505)  # plain: halved
    assert S(g, ids[("c", "d")]) == pytest.approx(0.04)  # already below the floor: stays where it is
    rep = g.maintain(steps=["prune"])
    alive = {p: bool(g.edges.alive[e]) for p, e in ids.items()}
    assert alive == {("a", "b"): True, ("c", "d"): True, ("x", "y"): True, ("p", "q"): False}
    assert rep.steps["prune"]["salient_kept"] == 1  # c-d: 0.04 < 0.05 but salient
    g3, ids3 = make([("c", "r", "d", 0.04)], dyn=DynamicsConfig(keep_salience=None))
    g3.nodes.importance[:] = 0.9
    g3.maintain(steps=["prune"])
    assert not g3.edges.alive[ids3[("c", "d")]]  # off: pruned like any weak edge


def test_prune_keeps_the_last_evidence_of_a_valid_fact():
    # Four idle episodes without edges (episode links off): A and B both said fact F1, C alone said
    # F2, D said nothing. At tick 60 all four are inactive. One of A/B (the first, A) stays for F1,
    # C stays for F2, D goes; once F2 is forgotten, C goes too. The fact ends stay while F1 and F2
    # are valid (the inactive rule no longer removes them). (D, which said nothing, stays by default:
    # keep_unconsolidated, tested below; off here to see the evidence rule alone.)
    cfg = GraphConfig(engram=EngramConfig(gat=False, link_episodes=False),
                      dynamics=DynamicsConfig(keep_unconsolidated=False))
    g = LiquidGraph(TableEmbedder({}, dim=64), config=cfg)
    a, b, c, d = (g.add_episode(t, source=f"S{i}") for i, t in enumerate(["A", "B", "C", "D"]))
    f1 = g.engram([("alice", "owns", "kite")], episode=a).new_edges[0]
    assert g.engram([("alice", "owns", "kite")], episode=b).reinforced_edges == [f1]
    f2 = g.engram([("bob", "owns", "drum")], episode=c).new_edges[0]
    g.tick = 60
    rep = g.maintain(steps=["prune"])
    alive = {ep: bool(g.nodes.alive[int(ep[2:])]) for ep in (a, b, c, d)}
    assert alive == {a: True, b: False, c: True, d: False}
    assert rep.steps["prune"]["evidence_kept"] == 2
    assert all(g.find(x) is not None for x in ("alice", "kite", "bob", "drum"))
    g.forget([f2])
    g.maintain(steps=["prune"])
    assert not g.nodes.alive[int(c[2:])]  # C went once its only fact did
    assert g.find("bob") is None and g.find("alice") is not None
    assert g.edge(f1)["valid"] and g.nodes.alive[int(a[2:])]
    # keep_evidence off: every idle episode and every idle fact end goes
    g2 = LiquidGraph(TableEmbedder({}, dim=64), config=replace(cfg, dynamics=DynamicsConfig(
        keep_evidence=False, keep_unconsolidated=False)))
    eps = [g2.add_episode(t, source=f"S{i}") for i, t in enumerate(["A", "C"])]
    g2.engram([("alice", "owns", "kite")], episode=eps[0])
    g2.engram([("bob", "owns", "drum")], episode=eps[1])
    g2.tick = 60
    g2.maintain(steps=["prune"])
    assert g2.stats()["n_nodes"] == 0


def test_prune_keeps_episodes_no_fact_was_drawn_from(tmp_path):
    # A said a fact, B said nothing the write model kept (chit-chat, or a memory of episodes only),
    # C's fact was forgotten, D's fact decayed below prune_strength, E restated A's fact. At tick 60
    # all five are idle: A stays as evidence, B stays as the only record of what was said, C goes
    # with its forgotten fact, D stays although its fact went (it is now the record of what was
    # said), E goes (A tells its fact). Capacity still removes B; the ablation prunes B and D.
    cfg = GraphConfig(engram=EngramConfig(gat=False, link_episodes=False))
    g = LiquidGraph(TableEmbedder({}, dim=64), config=cfg)
    a, b, c, d, e = (g.add_episode(t, source=f"S{i}") for i, t in enumerate(["A", "B", "C", "D", "E"]))
    f1 = g.engram([("alice", "owns", "kite")], episode=a).new_edges[0]
    assert g.engram([], episode=b).new_edges == []
    g.forget(g.engram([("bob", "owns", "drum")], episode=c).new_edges)
    f4 = g.engram([("carol", "owns", "harp")], episode=d).new_edges[0]
    assert g.engram([("alice", "owns", "kite")], episode=e).reinforced_edges == [f1]
    g.edges.strength[g._erows([f4])] = 0.01  # decayed: the next prune removes it
    g2 = g.with_config(replace(cfg, dynamics=DynamicsConfig(keep_unconsolidated=False)))
    g3 = g.with_config(replace(cfg, dynamics=DynamicsConfig(max_nodes=2)))
    path = tmp_path / "m"
    g.save(path)
    g4 = LiquidGraph.load(path, embedder=TableEmbedder({}, dim=64))
    reps = []
    for x in (g, g2, g3, g4):
        x.tick = 60
        reps.append(x.maintain(steps=["prune"]).steps["prune"])

    def alive(x):
        live = {ep["id"] for ep in x.episodes()}
        return [ep in live for ep in (a, b, c, d, e)]

    assert not g.edge(f4)["alive"] and g.edge(f1)["valid"]
    assert alive(g) == [True, True, False, True, False]
    assert reps[0]["unconsolidated_kept"] == 1 and reps[0]["outlived_kept"] == 1
    assert alive(g4) == [True, True, False, True, False]  # both marks are saved with the episode
    assert alive(g2) == [True, False, False, False, False]
    assert alive(g3)[2:] == [False, False, False] and g3.stats()["n_nodes"] == 2


def test_prune_capacity_keeps_the_last_evidence():
    cfg = GraphConfig(engram=EngramConfig(gat=False, link_episodes=False), dynamics=DynamicsConfig(max_nodes=3))
    g = LiquidGraph(TableEmbedder({}, dim=64), config=cfg)
    ep = g.add_episode("Alice owns a kite.", source="S0")
    g.engram([("alice", "owns", "kite")], episode=ep)
    chat = [g.add_episode(f"chit-chat {i}", source=f"S{i + 1}") for i in range(3)]
    nd = g.nodes
    nd.importance[:] = 0.1
    nd.importance[[g._idx(g.find("alice")), g._idx(g.find("kite"))]] = 0.9
    nd.importance[g._idx(ep)] = 0.0  # the least important node: first in line for capacity
    g2 = g.with_config(replace(cfg, dynamics=DynamicsConfig(max_nodes=3, keep_evidence=False)))
    g.maintain(steps=["prune"])  # 6 nodes, 3 kept: the fact's only episode stays, the chit-chat goes
    assert g.nodes.alive[int(ep[2:])] and g.stats()["n_nodes"] == 3
    assert not any(g.nodes.alive[int(x[2:])] for x in chat)
    g2.maintain(steps=["prune"])  # keep_evidence off: the least important go, the episode first
    assert not g2.nodes.alive[int(ep[2:])] and g2.stats()["n_nodes"] == 3


def test_prune_capacity_limits():
    rows = [(f"s{i}", "r", f"o{i}", 0.1 + 0.1 * i) for i in range(5)]
    g, ids = make(rows, dyn=DynamicsConfig(max_edges=3))
    g.maintain(steps=["prune"])
    alive = [bool(g.edges.alive[ids[(f"s{i}", f"o{i}")]]) for i in range(5)]
    assert alive == [False, False, True, True, True]  # the two weakest went
    g2, _ = make(rows, dyn=DynamicsConfig(max_nodes=4))
    for i in range(5):
        g2.nodes.importance[g2._entity_key[f"s{i}"]] = 0.1 * i + 0.5
    g2.maintain(steps=["prune"])
    assert g2.stats()["n_nodes"] <= 4


def test_maintain_switches_and_ablation():
    rows = [("a", "r", "b", 0.5), ("b", "r", "c", 0.5)]
    g, _ = make(rows, dyn=DynamicsConfig(**ALL_OFF))
    st = g._state()
    rep = g.maintain()
    assert rep.steps == {} and g.tick == 1
    after = g._state()
    assert all(np.array_equal(st["edges"]["arrays"][k], after["edges"]["arrays"][k]) for k in st["edges"]["arrays"])
    g2, _ = make(rows, dyn=replace(DynamicsConfig(), decay=False))
    rep2 = g2.maintain()
    assert "decay" not in rep2.steps and "prune" in rep2.steps
    with pytest.raises(ValueError, match="unknown maintain steps"):
        g2.maintain(steps=["teleport"])


def test_config_validation_messages():
    with pytest.raises(ValueError, match="decay_rate"):
        DynamicsConfig(decay_rate=1.0)
    with pytest.raises(ValueError, match="traversal"):
        from mags_lib.graph import RecallConfig

        RecallConfig(traversal="random")
    with pytest.raises(ValueError, match="branch_query_weight"):
        RecallConfig(branch_query_weight=1.5)
    for bad in ({"salience_protection": 1.2}, {"salience_uses_half": 0.0}, {"keep_salience": -0.1},
                {"keep_strength": 0.0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            DynamicsConfig(**bad)
    with pytest.raises(TypeError, match="keep_evidence"):
        DynamicsConfig(keep_evidence="yes")
    assert DynamicsConfig(keep_salience=None).keep_salience is None  # None switches it off
    with pytest.raises(TypeError):
        GraphConfig(dynamics={"decay": False})


def test_superseded_history_survives_pruning_until_its_ends_go_as_inactive():
    """The old value of a changed fact is history (recall returns it for questions about the past): its object,
    whose only edge is the superseded fact, was pruned as isolated at the next ticks, history and all (found by
    an audit). It goes like any idle node, after ``inactive_ticks``."""
    from mags_lib.embed import HashEmbedder

    g = LiquidGraph(HashEmbedder(dim=64), config=GraphConfig(dynamics=DynamicsConfig(inactive_ticks=5)))
    g.engram([("bob", "lives in", "paris"), ("bob", "likes", "tea")], source="D1")
    g.engram([("bob", "lives in", "rome")], source="D2")
    for _ in range(3):
        g.maintain()
    assert [(f["object"], f["valid"]) for f in g.history("bob", "lives in")] == [("paris", False), ("rome", True)]
    assert ("bob lives in paris", False) in [(it.text, it.current) for it in g.recall("bob", k=5, history=True)]
    for _ in range(7):
        g.maintain()
    assert g.find("paris") is None  # idle for inactive_ticks after the recall touched it: forgotten, with its history
    assert [f["object"] for f in g.history("bob", "lives in")] == ["rome"]


def test_a_merge_reconciles_single_valued_slots_not_only_equal_relations():
    """"bob lives in paris" and "bobby moved to london" are one slot ("moved to" / "lives in", as engram reads
    them): after scc merges bob and bobby, one of the two stays valid, as engram would have kept it (reconcile
    grouped facts by relation id, so both stayed valid; found by an audit)."""
    emb = TableEmbedder({"bob": [1, 0] + [0] * 62, "bobby": [0.85, (1 - 0.85**2) ** 0.5] + [0] * 62}, dim=64)
    cfg = GraphConfig(engram=EngramConfig(gat=False, time_order=False),
                      dynamics=DynamicsConfig(scc_merge_similarity=0.8))
    g = LiquidGraph(emb, config=cfg)
    for t, src in ((("bob", "knows", "bobby"), "S1"), (("bobby", "knows", "bob"), "S2"),
                   (("bob", "lives in", "paris"), "S3"), (("bobby", "moved to", "london"), "S4")):
        g.engram([t], source=src)
    assert g.maintain(["scc"]).steps["scc"]["merged"] == 1
    direct = LiquidGraph(emb, config=cfg)
    direct.engram([("bob", "lives in", "paris")], source="S3")
    direct.engram([("bob", "moved to", "london")], source="S4")
    lives = lambda h: sorted((f["relation"], f["object"]) for f in h.facts() if f["object"] in ("paris", "london"))  # noqa: E731
    assert lives(g) == lives(direct) == [("moved to", "london")]
    assert LiquidGraph.replay(g.oplog, emb, config=cfg).equals(g)
