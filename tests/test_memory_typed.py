"""Typed entities (issue 13 item 2): dates, times, numbers and quantities are never merged by
embedding similarity; short names merge when their words match, or else only at cosine >= 0.95
(``short_name_threshold``): "Caroline's son" / "Caroline's daughter" and Jon / John (MiniLM cosine
0.60, measured) stay apart. The ``Same`` embedder gives cosine 0.93 to every pair -- above the
resolve threshold (0.90), so similarity alone would merge everything -- and only the rule decides."""

from __future__ import annotations

import numpy as np
import pytest

from mags_lib.graph import EngramConfig, GraphConfig, LiquidGraph
from mags_lib.graph.engram import same_kind


class Same:
    """Every text maps to the same unit vector: embedding similarity alone would merge everything."""

    name, dim = "same", 4096

    def encode(self, texts):
        v = np.zeros((len(texts), self.dim), dtype=np.float32)
        v[:, 0] = np.sqrt(0.93)
        for i, t in enumerate(texts):  # one private axis per text: distinct texts at cosine 0.93
            v[i, 1 + hash(t) % (self.dim - 1)] = np.sqrt(0.07)
        return v


PAIRS_APART = [("7 May 2023", "8 May 2023"), ("May 7, 2023", "June 7, 2023"), ("2022", "2023"),
               ("5 pm", "6 pm"), ("3 dogs", "4 dogs"), ("Caroline's son", "Caroline's daughter"), ("Jon", "John"),
               ("Saturday", "Sunday"), ("the meeting on 7 May 2023", "the meeting on 8 May 2023"),
               ("dinner at 5 pm on Friday", "dinner at 6 pm on Friday")]
PAIRS_SAME = [("8 May 2023", "May 8, 2023"), ("blorp", "blorps"), ("05 pm", "5 pm"), ("Teal Bridge", "the Teal Bridge")]


@pytest.mark.parametrize("a,b", PAIRS_APART)
def test_typed_mentions_are_never_merged_by_similarity(a, b):
    g = LiquidGraph(Same())
    g.engram([("Caroline", "noted", a)], source="s1")
    g.engram([("Melanie", "noted", b)], source="s2")
    assert g.find(a) != g.find(b) and not same_kind(a, b, 0.93)
    g.maintain()  # the SCC / similarity merge of the dynamics respects the rule too
    assert g.find(a) != g.find(b)


@pytest.mark.parametrize("a,b", PAIRS_SAME)
def test_equal_values_written_differently_still_merge(a, b):
    g = LiquidGraph(Same())
    g.engram([("Caroline", "noted", a)], source="s1")
    g.engram([("Caroline", "noted", b)], source="s2")
    assert g.find(a) == g.find(b) and same_kind(a, b, 0.93)


def test_the_rule_can_be_switched_off():
    g = LiquidGraph(Same(), config=GraphConfig(engram=EngramConfig(typed_resolution=False)))
    g.engram([("Caroline", "noted", "7 May 2023")], source="s1")
    g.engram([("Melanie", "noted", "8 May 2023")], source="s2")
    assert g.find("7 May 2023") == g.find("8 May 2023")  # the old behaviour: similarity is identity
