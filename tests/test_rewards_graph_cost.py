"""Graph-cost reward terms (issue 15, item 1): one table of hand-made cases per term.

Every expected number is worked out by hand in the table's comment: a term is
``-min(1, max(0, x(completion) - x(gold) - slack) / scale)`` with ``x`` counted on a fresh graph
of the row's context (``scale`` 4 unless said otherwise).
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from mags_lib import rewards
from mags_lib.embed import HashEmbedder


def W(*trips) -> str:
    return "".join(f"<memory_write>{s},{r},{o}</memory_write>" for s, r, o in trips)


CTX = [["blorps", "eat", "figs"], ["blorps", "live in", "caves"]]  # 3 nodes: blorps, figs, caves
GOLD = W(("blorps", "live in", "mines"))  # 1 op, 1 new node (mines), 1 new edge, 1 invalidation

# (completion, gold, expected) -- ops_cost: excess operations / 4
OPS_CASES = [
    (GOLD, GOLD, 0.0),  # 1 - 1 = 0
    ("", GOLD, 0.0),  # fewer ops than gold is not a cost (op F1 scores that)
    (GOLD + W(("a", "b", "c")), GOLD, -0.25),  # 2 - 1 = 1 -> -1/4
    (GOLD + W(("a", "b", "c"), ("d", "e", "f")), GOLD, -0.5),  # 3 - 1 = 2
    (W(*[(f"x{i}", "r", "y") for i in range(7)]), GOLD, -1.0),  # 7 - 1 = 6 -> capped at -1
    (W(("a", "b", "c"), ("d", "e", "f")), "", -0.5),  # no gold: 2 - 0 = 2
    ("junk <memory_write>a,b,c</memory_write> more junk", "", -0.25),  # lenient parse still counts 1
]

# new_nodes_cost: nodes created in the graph of CTX; gold creates 1 (mines)
NODES_CASES = [
    (GOLD, 0.0),  # 1 - 1
    (W(("blorps", "eat", "figs")), 0.0),  # restates a context fact: 0 nodes -> 0 - 1 < 0 -> 0
    (W(("Blorps", "eat", "Figs")), 0.0),  # same keys after normalisation: 0 nodes
    (W(("zorgs", "fear", "mice")), -0.25),  # zorgs + mice = 2 -> 2 - 1 = 1
    (W(("zorgs", "fear", "mice"), ("quindles", "fear", "rats")), -0.75),  # 4 nodes -> 3 -> -3/4
    (W(("zorgs", "fear", "mice"), ("zorgs", "fear", "rats")), -0.5),  # zorgs, mice, rats = 3 -> 2
]

# new_edges_cost: fact edges created; gold creates 1
EDGES_CASES = [
    (GOLD, 0.0),
    (W(("blorps", "eat", "figs")), 0.0),  # reinforces the existing edge: 0 created
    (W(("blorps", "live in", "mines"), ("blorps", "eat", "figs")), 0.0),  # 1 new + 1 reinforced
    (W(("zorgs", "fear", "mice"), ("zorgs", "fear", "rats"), ("blorps", "live in", "mines")), -0.5),  # 3 - 1
    (W(*[(f"x{i}", "r", "y") for i in range(6)]), -1.0),  # 6 - 1 = 5 -> capped
]

# churn_cost with gold = a plain new fact (no churn): invalidations of CTX's facts + merges
NEW_FACT = W(("zorgs", "fear", "mice"))
CHURN_CASES = [
    (NEW_FACT, 0.0),
    (W(("blorps", "live in", "mines")), -0.25),  # 'live in' is single-valued: caves invalidated -> 1
    (W(("blorps", "live in", "mines"), ("blorps", "eat", "lemons")), -0.5),  # caves + figs invalidated
    (W(("blorps", "fear", "mice"), ("blorps", "fear", "rats")), 0.0),  # 'fear' is multi-valued: 0
    (W(("blorps", "eat", "figs")), 0.0),  # a restatement churns nothing
]


@pytest.mark.parametrize("completion,gold,expected", OPS_CASES)
def test_ops_cost_table(completion, gold, expected):
    assert rewards.ops_cost([completion], response=[gold], role="write") == [expected]


@pytest.mark.parametrize("completion,expected", NODES_CASES)
def test_new_nodes_cost_table(completion, expected):
    assert rewards.new_nodes_cost([completion], response=GOLD, context=[CTX], role="write") == [expected]


@pytest.mark.parametrize("completion,expected", EDGES_CASES)
def test_new_edges_cost_table(completion, expected):
    assert rewards.new_edges_cost([completion], response=GOLD, context=[CTX], role="write") == [expected]


@pytest.mark.parametrize("completion,expected", CHURN_CASES)
def test_churn_cost_table(completion, expected):
    assert rewards.churn_cost([completion], response=NEW_FACT, context=[CTX], role="write") == [expected]


class _StemEmbedder(HashEmbedder):
    """Hash embeddings of the text with a trailing 's' dropped: 'blorpss' lands on 'blorps'."""

    def encode(self, texts):
        return super().encode([t.rstrip("s") or t for t in texts])


def test_churn_counts_merges_into_existing_nodes():
    emb = _StemEmbedder()
    # 'blorpss' is a new key whose embedding equals 'blorps': merged (1 churn); 'mice' is a new node.
    got = rewards.churn_cost([W(("blorpss", "fear", "mice")), NEW_FACT], response=NEW_FACT,
                             context=[CTX, CTX], role="write", embedder=emb)
    assert got == [-0.25, 0.0]
    eff = rewards.graph_effects(W(("blorpss", "fear", "mice")), CTX, embedder=emb)
    assert eff == {"ops": 1, "nodes": 1, "edges": 1, "churn": 1}


def test_slack_and_scale_options():
    extra = GOLD + W(("a", "b", "c"), ("d", "e", "f"))  # 2 ops over gold
    assert rewards.ops_cost([extra], response=GOLD, role="write", slack=1) == [-0.25]  # (2-1)/4
    assert rewards.ops_cost([extra], response=GOLD, role="write", scale=2) == [-1.0]  # 2/2
    assert rewards.ops_cost([extra], response=GOLD, role="write", scale=8) == [-0.25]  # 2/8
    with pytest.raises(ValueError, match="scale > 0"):
        rewards.ops_cost([extra], response=GOLD, role="write", scale=0)


# graph_cost: weighted mean of the four terms. Completion: GOLD + zorgs,fear,mice against GOLD in CTX:
# ops 2-1 = 1 -> -.25; nodes 3-1 = 2 -> -.5; edges 2-1 = 1 -> -.25; churn 1-1 = 0 -> 0.
EXTRA = GOLD + W(("zorgs", "fear", "mice"))
GRAPH_CASES = [
    ({}, (1 * -.25 + .5 * -.5 + .5 * -.25 + 1 * 0) / 3.0),  # defaults 1, .5, .5, 1 -> -0.2083
    ({"ops_weight": 1, "nodes_weight": 0, "edges_weight": 0, "churn_weight": 0}, -0.25),
    ({"ops_weight": 0, "nodes_weight": 1, "edges_weight": 0, "churn_weight": 0}, -0.5),
    ({"ops_weight": 0, "nodes_weight": 1, "edges_weight": 1, "churn_weight": 0}, -0.375),
    ({"ops_weight": 0, "nodes_weight": 0, "edges_weight": 0, "churn_weight": 1}, 0.0),
    ({"ops_weight": 1, "nodes_weight": 1, "edges_weight": 1, "churn_weight": 1, "scale": 2.0}, (-.5 - 1 - .5 + 0) / 4),
]


@pytest.mark.parametrize("opts,expected", GRAPH_CASES)
def test_graph_cost_table(opts, expected):
    got = rewards.get_reward("graph_cost", **opts)([EXTRA, GOLD], response=GOLD, context=[CTX, CTX], role="write")
    assert got == [round(expected, 4), 0.0]


def test_graph_cost_config_object_and_checks():
    cfg = rewards.GraphCostConfig(ops_weight=0, nodes_weight=1, edges_weight=0, churn_weight=0)
    assert rewards.graph_cost_reward([EXTRA], response=GOLD, context=[CTX], role="write", config=cfg) == [-0.5]
    with pytest.raises(ValueError, match="not both"):
        rewards.graph_cost_reward([EXTRA], response=GOLD, context=[CTX], config=cfg, ops_weight=1.0)
    for bad in ({"ops_weight": -1}, {"ops_weight": 0, "nodes_weight": 0, "edges_weight": 0, "churn_weight": 0},
                {"scale": 0}, {"slack": -1}, {"slack": 1.5}):
        with pytest.raises(ValueError, match="GraphCostConfig"):
            rewards.GraphCostConfig(**bad)


def test_graph_cost_rewards_are_registered_pure_and_picklable():
    for name in ("ops_cost", "new_nodes_cost", "new_edges_cost", "churn_cost", "graph_cost"):
        f = rewards.get_reward(name, scale=4.0)
        g = pickle.loads(pickle.dumps(f))
        a = g([EXTRA, GOLD, ""], response=GOLD, context=[CTX] * 3, role="write")
        assert a == f([EXTRA, GOLD, ""], response=GOLD, context=[CTX] * 3, role="write")  # no state kept
        assert all(-1.0 <= x <= 0.0 for x in a) and a[1] == 0.0
        assert np.isfinite(a).all()


def test_graph_cost_does_not_touch_the_context():
    ctx = [list(t) for t in CTX]
    rewards.graph_cost_reward([EXTRA], response=GOLD, context=[ctx], role="write")
    assert ctx == CTX


def test_objectives_are_options_only():
    from mags_lib.training.config import GRPOConfig, profile_config, with_objective

    base = profile_config("write", "default")
    assert "graph_cost" not in base.grpo.rewards and not any(n.startswith("outcome") for n in base.grpo.rewards)
    gc = with_objective(base, "graph_cost", graph_cost_weight=0.3, graph_cost_options={"ops_weight": 2.0})
    assert gc.grpo.rewards == {**base.grpo.rewards, "graph_cost": 0.3}
    assert gc.grpo.reward_options["graph_cost"] == {"ops_weight": 2.0}
    assert gc.sft == base.sft and profile_config("write", "default") == base  # nothing else moves
    out = with_objective(profile_config("ask", "default"), "outcome", reader_threads=1)
    assert out.grpo.rewards == {"outcome_ask": 1.0, "format": 0.5, "length": 0.5}
    assert out.grpo.reward_options == {"outcome_ask": {"n_threads": 1, "embedder": "minilm"}}
    for bad, match in (({"objective": "nope"}, "objective"), ({"objective": "graph_cost", "graph_cost_weight": 0},
                                                                 "graph_cost_weight")):
        with pytest.raises(ValueError, match=match):
            with_objective(base, **bad)
    with pytest.raises(ValueError, match="write and ask"):
        with_objective(profile_config("answer", "smoke"), "outcome")
    with pytest.raises(ValueError, match="REGISTRY"):
        GRPOConfig(rewards={"graph_costs": 1.0})
