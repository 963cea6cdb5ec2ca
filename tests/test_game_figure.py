"""The paper figure of one recall: only the recalled subgraph, the query as title, no overlapping labels."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest

from mags_lib.embed import HashEmbedder
from mags_lib.graph import LiquidGraph, viz


@pytest.fixture
def memory():
    g = LiquidGraph(HashEmbedder(dim=128))
    trips = [("blorps", "eat", "frozen lemons"), ("blorps", "live in", "copper caves"),
             ("blorps", "are afraid of", "purple umbrellas"), ("blorps", "are led by", "Larrowick"),
             ("blorps", "sleep for", "nine days"), ("blorps", "have color", "bright orange"),
             ("Larrowick", "lives in", "Teal Bridge"), ("Larrowick", "plays", "the violin"),
             ("snarfs", "build nests from", "glass straws"), ("quindles", "hunt", "snarfs")]
    ep = g.add_episode("Blorps eat frozen lemons and live in copper caves.", source="D1:1")
    g.engram(trips, episode=ep)
    return g


def test_only_the_recalled_subgraph_with_the_query_as_title_and_no_overlaps(memory):
    res = memory.recall("what do blorps eat and who leads them", k=8)
    ax = viz.draw_recall_subgraph(memory, res, title="Who leads the blorps?")
    try:
        assert ax.get_title() == "Who leads the blorps?"
        on_paths = {memory.node(n)["text"] for p in res.trace.paths for n in p.nodes}
        drawn = [t.get_text().replace("\n", " ") for t in ax.texts]
        nodes_drawn = {t for t in drawn if t in {memory.node(n)["text"] for n in memory.to_networkx().nodes}}
        assert nodes_drawn == on_paths
        assert "glass straws" not in drawn and "snarfs" not in drawn  # not recalled: not drawn
        assert any(t == "eat" for t in drawn)  # relation labels on the fact edges
        assert viz.text_overlaps(ax) == []
    finally:
        plt.close(ax.figure)


def test_overlap_check_can_fail():
    fig, ax = plt.subplots()
    ax.text(0.5, 0.5, "one label", bbox={"boxstyle": "round"})
    ax.text(0.51, 0.5, "another label", bbox={"boxstyle": "round"})
    assert viz.text_overlaps(ax) == [("one label", "another label")]
    plt.close(fig)


def test_empty_recall_is_a_clear_error(memory):
    g = LiquidGraph(HashEmbedder(dim=32))
    with pytest.raises(ValueError, match="nothing"):
        viz.draw_recall_subgraph(g, g.recall("anything", k=3))
