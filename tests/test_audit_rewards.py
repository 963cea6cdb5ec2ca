"""Audit of the GRPO rewards (2026-12-07, night): replies a reader or an asker could game them with.

Each table is scored with the weights and options the training ships (``mags_lib.training.config``): a degenerate
reply must never score above the honest alternative it replaces."""

from __future__ import annotations

import pytest

from mags_lib import protocol as P
from mags_lib.rewards import get_reward
from mags_lib.training.config import _REWARD_OPTIONS, _REWARDS


def _answer_total(reply: str, aliases: list[str], question: str = "What do blorps eat?") -> float:
    total = 0.0
    for name, w in _REWARDS["answer"].items():
        f = get_reward(name, **_REWARD_OPTIONS["answer"].get(name, {}))
        kw = {"aliases": [aliases], "input": [question], "response": [aliases[0] if aliases else P.ABSTAIN_ANSWER]}
        total += w * f([reply], **kw)[0]
    return total


@pytest.mark.parametrize("aliases", [["figs"], ["frozen lemons"]])
def test_a_hedge_or_a_list_never_scores_above_abstaining_on_an_answerable_question(aliases):
    # "Not sure, figs?" scored 1.0 (answer_correct) where abstaining scored -0.275 and a plain wrong guess -0.5:
    # GRPO would teach the reader to hedge; a list of six candidates with the answer among them scored 1.375
    right = aliases[0]
    abstain = _answer_total(P.ABSTAIN_ANSWER, aliases)
    assert _answer_total(right.capitalize() + ".", aliases) > abstain
    for reply in (f"Not sure, {right}?", f"{right}, I think, but I don't know.", "Not sure, plums?",
                  f"plums, lemons, caves, {right}, dates, owls", "plums"):
        assert _answer_total(reply, aliases) < abstain, reply


def test_a_guess_beside_an_abstention_earns_nothing_where_nothing_answers():
    abstain = _answer_total(P.ABSTAIN_ANSWER, [])
    assert abstain == _answer_total("I don't know what blorps eat.", [])  # the question's words are no guess
    for reply in ("Not sure, figs?", "figs"):
        assert _answer_total(reply, []) < abstain - 1.0, reply


def test_an_answer_holding_an_abstention_word_is_an_answer():
    f = get_reward("abstention", wrong_answer=-1.0)
    assert f(["Unknown Pleasures"], aliases=[["Unknown Pleasures"]]) == [1.0]
    assert get_reward("answer_correct")(["Unknown Pleasures"], aliases=[["Unknown Pleasures"]]) == [1.0]


def test_spraying_queries_costs_the_ask_reward():
    # recall only: 8 template queries scored 1.0 where one natural query scored 0, and junk queries never cost
    ctx = [["blorps", "eat", "frozen lemons"], ["blorps", "live in", "copper caves"],
           ["quindles", "fear", "purple umbrellas"], ["Odalie", "works as", "glassblower"]]
    gold = [[["blorps", "eat", "frozen lemons"]]]
    f = get_reward("ask_retrieval", embedder="hash")
    one = f(["<memory_ask>what do blorps eat</memory_ask>"], context=[ctx], gold_facts=gold)[0]
    spray = "".join(f"<memory_ask>{s} {r}</memory_ask>" for s in ("blorps", "quindles", "Odalie")
                    for r in ("eat", "fear", "works as"))
    assert one == 1.0 and f([spray], context=[ctx], gold_facts=gold)[0] < 0.75
    assert get_reward("ask_retrieval", embedder="hash", score="recall")([spray], context=[ctx], gold_facts=gold) == [1.0]


def test_the_wrong_answer_option_is_bounded():
    with pytest.raises(ValueError, match="wrong_answer"):
        get_reward("abstention", wrong_answer=7.0)(["plums"], aliases=[["figs"]])


@pytest.mark.parametrize("make", [
    lambda: __import__("mags_lib.rewards", fromlist=["x"]).GraphCostConfig(ops_weight=float("nan"), nodes_weight=0,
                                                                          edges_weight=0, churn_weight=0),
    lambda: __import__("mags_lib.rewards", fromlist=["x"]).GraphCostConfig(scale=float("nan")),
    lambda: get_reward("brevity", scale=float("nan"))(["a b c"], response="a"),
    lambda: get_reward("length", scale=float("nan"))(["a"], response="a"),
])
def test_nan_options_are_refused_not_turned_into_a_full_penalty(make):
    # NaN passed every "< 0" check: GraphCostConfig then raised ZeroDivisionError, and brevity / length gave -1
    with pytest.raises(ValueError):
        make()


@pytest.mark.parametrize("reply", ["Not figs, lemons.", "It isn't figs, it's lemons.", "Never figs."])
def test_an_answer_the_reply_denies_is_no_answer(reply):
    # "Not figs, lemons." named the alias and so scored as right (game rule and reader rewards alike)
    assert P.matching_alias(reply, ["figs"]) is None
    assert get_reward("answer_correct")([reply], aliases=[["figs"]]) == [0.0]
    assert _answer_total(reply, ["figs"]) < _answer_total("Figs.", ["figs"])
    assert P.matching_alias("Figs, not lemons.", ["figs"]) == "figs"  # the denial of another candidate is fine
    assert P.matching_alias("Not only figs.", ["figs"]) == "figs"


def test_a_sign_is_part_of_a_number():
    # "It is 5 degrees" matched the alias "-5 degrees" (the minus was dropped as punctuation)
    assert P.matching_alias("It is 5 degrees.", ["-5 degrees"]) is None
    assert P.matching_alias("It is -5 degrees.", ["5 degrees"]) is None
    assert P.matching_alias("It was \u22125 degrees.", ["-5 degrees"]) == "-5 degrees"
    assert P.normalize_answer("10-15 dice, well-known") == "10-15 dice well known"
