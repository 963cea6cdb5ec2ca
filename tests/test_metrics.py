"""Metrics: adherence, Hungarian op matching, exact-triplet F1, micro averaging, empty conventions."""

import numpy as np
import pytest

from mags_lib.metrics import adherence, evaluate_predictions, exact_matches, op_text, prf, semantic_matches
from mags_lib.protocol import Op


def ask(q):
    return Op("ask", q)


def write(s, r, o):
    return Op("write", f"{s},{r},{o}", (s, r, o))


def test_hungarian_maximises_the_number_of_matches():
    # cosines: A-X .9, A-Y .7, B-X .8, B-Y .1 -> greedy (A-X) matches 1 pair, one-to-one optimum 2
    vec = {"A": np.array([0.9, 0.7]), "B": np.array([0.8, 0.1]), "X": np.array([1.0, 0.0]),
           "Y": np.array([0.0, 1.0])}
    assert semantic_matches([ask("A"), ask("B")], [ask("X"), ask("Y")], vec) == 2


@pytest.mark.parametrize("pred,gold,expected", [
    # one gold op can be matched once only, even by two identical predictions
    ([ask("A"), ask("A")], [ask("A")], 1),
    # same text but different tag: no match
    ([ask("a b c")], [write("a", "b", "c")], 0),
    # cosine exactly at the threshold counts
    ([ask("T")], [ask("X")], 1),
    # just below the threshold does not
    ([ask("U")], [ask("X")], 0),
    # nothing predicted or nothing expected
    ([], [ask("X")], 0),
    ([ask("X")], [], 0),
])
def test_semantic_match_table(pred, gold, expected):
    vec = {"A": np.array([1.0, 0.0]), "X": np.array([1.0, 0.0]), "T": np.array([0.65, 0.76]),
           "U": np.array([0.64, 0.77]), "a b c": np.array([0.0, 1.0])}
    assert semantic_matches(pred, gold, vec, threshold=0.65) == expected


def test_op_text_of_a_write_is_space_joined():
    assert op_text(write("Blorps", "eat", "lemons, frozen")) == "Blorps eat lemons, frozen"


@pytest.mark.parametrize("pred,gold,expected", [
    # case, punctuation and articles are normalised away
    ([write("The Blorps", "eat", "Lemons!")], [write("blorps", "eat", "lemons")], 1),
    # a different object is no exact match
    ([write("blorps", "eat", "moss")], [write("blorps", "eat", "lemons")], 0),
    # multiset: two predictions of one gold count once
    ([write("a", "b", "c")] * 2, [write("a", "b", "c")], 1),
    # asks compare their normalised query
    ([ask("Blorps diet?")], [ask("blorps diet")], 1),
])
def test_exact_match_table(pred, gold, expected):
    assert exact_matches(pred, gold) == expected


def test_prf_conventions():
    assert prf(0, 0, 0).f1 == 1.0  # nothing expected, nothing predicted
    assert prf(0, 2, 0).precision == 0.0 and prf(0, 2, 0).recall == 1.0
    assert prf(0, 0, 2).precision == 1.0 and prf(0, 0, 2).f1 == 0.0
    assert prf(1, 2, 4).f1 == pytest.approx(2 * 0.5 * 0.25 / 0.75)
    with pytest.raises(ValueError):
        prf(3, 2, 5)


def test_micro_average_over_examples():
    preds = ["<memory_write>a,b,c</memory_write>", ""]
    golds = ["<memory_write>a,b,c</memory_write>",
             "<memory_write>d,e,f</memory_write><memory_write>g,h,i</memory_write><memory_write>j,k,l</memory_write>"]
    r = evaluate_predictions(preds, golds, "write", embedder="hash")
    assert (r.exact.tp, r.exact.n_pred, r.exact.n_gold) == (1, 1, 4)
    assert r.exact.precision == 1.0 and r.exact.recall == 0.25  # micro, not the mean of per-example F1
    assert r.per_example[1]["exact_f1"] == 0.0


def test_adherence_and_lenient_ops():
    preds = ["Sure! <memory_ask>blorps diet</memory_ask>", "<memory_ask>blorps diet</memory_ask>", "", "junk"]
    golds = ["<memory_ask>blorps diet</memory_ask>"] * 2 + ["", ""]
    r = evaluate_predictions(preds, golds, "ask", embedder="hash")
    assert r.adherence == 0.5  # the chatty and the junk outputs do not adhere
    assert r.exact.tp == 2  # but the chatty output's op still counts (lenient parse)
    assert r.empty_accuracy == 1.0  # both gold-empty inputs got no op
    assert adherence(preds, "ask") == 0.5


def test_wrong_role_tags_are_dropped_from_ops():
    r = evaluate_predictions(["<memory_write>a,b,c</memory_write>"], ["<memory_ask>a b c</memory_ask>"], "ask",
                             embedder="hash")
    assert r.op.n_pred == 0 and r.adherence == 0.0


def test_bad_inputs():
    with pytest.raises(ValueError, match="predictions"):
        evaluate_predictions(["a"], [], "ask", embedder="hash")
    with pytest.raises(ValueError, match="gold response #0"):
        evaluate_predictions([""], ["not protocol"], "ask", embedder="hash")
    with pytest.raises(TypeError):
        evaluate_predictions([""], [""], "ask", embedder=42)


@pytest.mark.slow
def test_minilm_paraphrases_match_at_065():
    pytest.importorskip("sentence_transformers")
    from mags_lib.models import ModelNotFoundError

    try:
        r = evaluate_predictions(
            ["<memory_write>blorps,eat,frozen lemons</memory_write><memory_write>tax,law,reform</memory_write>"],
            [("<memory_write>Blorps,eat,lemons that are frozen</memory_write>"
             "<memory_write>Odalie,works as,glassblower</memory_write>")], "write", embedder="minilm")
    except ModelNotFoundError as exc:
        pytest.skip(str(exc))
    assert r.op.tp == 1 and r.exact.tp == 0


# -- the reader's scoring is the game's (an audit found two abstention lists, 15 and 46 phrases) ------------
@pytest.mark.parametrize("response", [
    "Not mentioned.", "I dont know.", "No relevant facts.", "That was never mentioned.", "Can't tell.",
    "I don\u2019t know.", "I do not know \u2013 sorry.", "It does not say.",
])
def test_the_reader_metrics_abstain_as_the_game_scores(response):
    from mags_lib.game import abstains, is_correct
    from mags_lib.metrics import answer_correct, evaluate_answers, is_abstention
    from mags_lib.rewards import REGISTRY

    assert abstains(response) and is_correct(response, [])
    assert is_abstention(response) and answer_correct(response, [])
    assert evaluate_answers([response], [[]]).abstain_accuracy == 1.0
    assert REGISTRY["answer_correct"]([response], aliases=[[]]) == REGISTRY["abstention"]([response], aliases=[[]]) \
        == [1.0]


def test_one_abstention_list_for_every_scorer():
    from mags_lib import game, metrics, protocol

    assert metrics.ABSTAIN_PHRASES is protocol.ABSTAIN_PHRASES is game.ABSTAIN_PHRASES
    assert protocol.ABSTAIN_ANSWER in protocol.ABSTAIN_PHRASES


@pytest.mark.parametrize("response,alias", [
    ("O\u2019Brien left.", "O'Brien"), ("Under the Teal\u2013Bridge.", "teal bridge"),
    ("\u201cfrozen\u201d lemons", "frozen lemons"),
])
def test_typographic_punctuation_scores_as_ascii(response, alias):
    from mags_lib.metrics import answer_correct

    assert answer_correct(response, [alias])
