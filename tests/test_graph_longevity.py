"""Long conversations (issue 13): a memory that holds up over 600 turns with the default dynamics."""

from mags_lib.bench.longevity import conversation, legacy_config, simulate
from mags_lib.graph import GraphConfig


def test_600_turn_conversation_keeps_its_facts_with_default_dynamics():
    # 600 distinct facts, one per turn, each observed once (episode + engram, 256-d hash embedder)
    # and never recalled; maintain() every 8 turns (the agent's cadence): 75 ticks. At the end
    # at least 95% must be valid and recalled by "<subject> <relation>", and no valid fact may
    # have lost the episode that said it.
    new = simulate(GraphConfig(), n_turns=600)
    assert new["ticks"] == 75
    assert new["recallable_share"] >= 0.95, new
    assert new["valid_without_evidence"] == 0
    # the defaults before the review forget the older half (measured: 49% valid, 26% recallable)
    old = simulate(legacy_config(), n_turns=600, recall_check=False)
    assert old["valid_share"] < 0.95, old


def test_synthetic_conversation_is_distinct_and_conflict_free():
    turns = conversation(600)
    assert len({t for _, t in turns}) == 600
    assert len({(s, r) for _, (s, r, _o) in turns}) == 600  # one object per (subject, relation): no update
    assert len({o for _, (_s, _r, o) in turns}) == 600
