"""Property tests (hypothesis) over random sequences of engram / recall / reinforce / maintain / compact
(and, for some draws, maintain compacting by itself)."""

import dataclasses

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mags_lib.embed import HashEmbedder
from mags_lib.graph import DynamicsConfig, GraphConfig, LimitsConfig, LiquidGraph, RecallConfig
from mags_lib.graph.core import _state_differences
from mags_lib.graph.dynamics import _permanent_ends

EMB = HashEmbedder(dim=64)
WORDS = ["alice", "bob", "carol", "tea", "paris", "chess", "dog", "blue die", "ten", "six"]
RELS = ["likes", "lives in", "is", "has sides", "knows"]
# aggressive dynamics so that pruning, capacity, merging, solidification all happen in short runs
CFG = GraphConfig(
    dynamics=DynamicsConfig(decay_rate=0.3, prune_strength=0.15, max_nodes=9, max_edges=14, inactive_ticks=3,
                            working_capacity=6, scc_merge_similarity=0.3, solidify_strength=0.6,
                            solidify_min_uses=1, gol_survive_max=3),
    recall=RecallConfig(n_anchors=2, min_path_strength=0.01),
    limits=LimitsConfig(compact_dead_share=None),
)
CFG_COMPACT = dataclasses.replace(CFG, limits=LimitsConfig(compact_dead_share=0.3, compact_min_rows=0))

triplet = st.tuples(st.sampled_from(WORDS), st.sampled_from(RELS), st.sampled_from(WORDS))
op = st.one_of(
    st.tuples(st.just("engram"), st.lists(triplet, min_size=1, max_size=4), st.booleans()),
    st.tuples(st.just("recall"), st.lists(st.sampled_from(WORDS), min_size=1, max_size=2), st.integers(1, 6)),
    st.tuples(st.just("reinforce"), st.floats(-1.0, 1.0)),
    st.tuples(st.just("maintain")),
    st.tuples(st.just("permanent"), st.sampled_from(WORDS)),
    st.tuples(st.just("snapshot")),
    st.tuples(st.just("compact")),
)


def check_invariants(g: LiquidGraph) -> None:
    nd, ed = g.nodes, g.edges
    # ids increase with the rows and stay below the next id; a compaction leaves no dead edge
    for store in (nd, ed):
        assert (np.diff(store.uid) > 0).all() and (store.uid < store.next_uid).all()
    alive_nodes = set(np.flatnonzero(nd.alive).tolist())
    assert set(g.G.nodes) == alive_nodes
    # no dangling edges: every alive edge (valid or superseded) joins two alive nodes
    ae = np.flatnonzero(ed.alive)
    assert nd.alive[ed.src[ae]].all() and nd.alive[ed.dst[ae]].all()
    live = set(np.flatnonzero(ed.alive & ed.valid).tolist())
    assert {k for _, _, k in g.G.edges(keys=True)} == live
    for u, v, k in g.G.edges(keys=True):
        assert (ed.src[k], ed.dst[k]) == (u, v)
    # strengths in (0, 1]
    s = ed.strength[ae]
    assert ((s > 0) & (s <= 1)).all(), s[(s <= 0) | (s > 1)]
    # entity keys point at alive entities
    assert all(nd.alive[i] for i in g._entity_key.values())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, min_size=1, max_size=22), st.sampled_from([CFG, CFG_COMPACT]))
def test_random_operation_sequences(ops, cfg):
    g = LiquidGraph(EMB, config=cfg)
    last = None
    snap = None
    for i, o in enumerate(ops):
        perm_before = g.nodes.uid[g.nodes.alive & g.nodes.permanent]  # ids: maintain may compact the rows
        kind = o[0]
        if kind == "engram":
            ep = g.add_episode(f"input {i}: " + "; ".join(" ".join(t) for t in o[1]), source=f"S{i}") if o[2] else None
            g.engram(o[1], episode=ep, source=f"S{i}")
        elif kind == "recall":
            last = g.recall(o[1], k=o[2])
            for it in last.items:
                if it.kind == "fact":  # invalidated (or pruned) edges are never recalled
                    r = g.edges.row(it.edge_id)
                    assert r >= 0 and g.edges.valid[r] and g.edges.alive[r]
                else:
                    assert g.nodes.alive[g._idx(it.node_id)]
            assert len(last.items) <= o[2]
        elif kind == "reinforce" and last is not None:
            g.reinforce(last, reward=o[1])
        elif kind == "maintain":
            g.maintain()
            d = CFG.dynamics
            st_ = g.stats()
            # capacity never prunes a permanent node, nor an end of a permanent edge (the edge would go with it)
            protected = int((g.nodes.alive & (g.nodes.permanent | _permanent_ends(g))).sum())
            assert st_["n_nodes"] <= max(d.max_nodes, protected)
            assert st_["n_valid_edges"] <= max(d.max_edges, st_["n_permanent_edges"])
            assert st_["n_working"] <= d.working_capacity + protected
        elif kind == "permanent":
            nid = g.find(o[1])
            if nid is not None:
                g.set_permanent(nid)
        elif kind == "snapshot" and snap is None:
            snap = (g.snapshot(), g._state())
        elif kind == "compact":
            facts = g.facts(include_invalid=True)
            g.compact()
            assert not (~g.edges.alive).any() and g.facts(include_invalid=True) == facts
        check_invariants(g)
        # permanent nodes are never pruned
        rows = g.nodes.rows(perm_before)
        assert (rows >= 0).all() and g.nodes.alive[rows].all()
    # replay of the operation log rebuilds the same graph
    h = LiquidGraph.replay(g.oplog, EMB, config=cfg)
    assert _state_differences(g._state(), h._state()) == []
    # snapshot then rollback restores the graph exactly (and the log prefix replays to it)
    if snap is not None:
        sid, state = snap
        g.rollback(sid)
        assert _state_differences(g._state(), state) == []
        check_invariants(g)
        h2 = LiquidGraph.replay(g.oplog, EMB, config=cfg)
        assert _state_differences(g._state(), h2._state()) == []
