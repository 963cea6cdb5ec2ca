"""The game's scorer: tables of cases, one comment per case (DESIGN.md's definition)."""

from __future__ import annotations

import pytest

from mags_lib.game import ABSTAIN_PHRASES, abstains, is_correct, matched_alias, normalize
from mags_lib.protocol import ABSTAIN_ANSWER

ALIAS_CASES = [
    # response, aliases, expected
    ("They eat frozen lemons.", ["frozen lemons"], True),  # plain
    ("FROZEN LEMONS!!!", ["frozen lemons"], True),  # case and punctuation
    ("salted moss", ["frozen lemons", "lemons"], False),  # none of the aliases
    ("They love lemons", ["frozen lemons", "lemons"], True),  # the second alias
    ("The category is big", ["cat"], False),  # whole words only: cat is not in category
    ("I saw a cat.", ["cat"], True),  # a whole word
    ("concatenate", ["cat"], False),  # not inside a word either
    ("under the Teal Bridge", ["teal bridge"], True),  # article in the response removed
    ("Teal Bridge", ["the Teal Bridge"], True),  # article in the alias removed
    ("an orange", ["orange"], True),  # an
    ("teal, bridge", ["teal bridge"], True),  # punctuation becomes a space, spaces collapse
    ("the teal river bridge", ["teal bridge"], False),  # a run: words must be adjacent
    ("bridge teal", ["teal bridge"], False),  # and in order
    ("It costs 27 points", ["27"], True),  # numbers are words
    ("It costs 127 points", ["27"], False),  # 27 is not in 127
    ("twenty-seven", ["twenty seven"], True),  # hyphen is punctuation
    ("twenty-seven", ["twenty-seven"], True),  # both sides normalised
    ("Larrowick.", ["Larrowick"], True),  # proper name, final period
    ("", ["violet"], False),  # empty response
    ("a", ["a"], False),  # an alias that normalises to nothing never matches
]


@pytest.mark.parametrize("response,aliases,expected", ALIAS_CASES)
def test_alias_matching(response, aliases, expected):
    assert is_correct(response, aliases, "recall") is expected


ABSTAIN_CASES = [
    (ABSTAIN_ANSWER, True),  # the reader's instructed reply
    ("I don't know.", True),  # apostrophe
    ("i dont know", True),  # no apostrophe
    ("Sorry, I do not know that.", True),
    ("That is not in my memory", True),
    ("The answer is unknown.", True),
    ("There is no information about that.", True),
    ("I'm not sure.", True),
    ("Memory: (no relevant facts)", True),  # echo of the empty memory block
    ("They live in Porto.", False),  # an answer
    ("Violet", False),
    ("", False),  # saying nothing is not abstaining
    ("knowledge is power", False),  # 'know' inside another word
    ("I know it: Porto", False),  # knowing is not abstaining
    ("A piano idea", False),  # whole words only: 'pia-no idea' does not say 'no idea'
    ("Unknownland", False),  # 'unknown' inside a name
    ("I don't have any information about that.", True),  # phrasings a reader uses that the list missed
    ("I can't recall where she lives.", True),
    ("There is nothing in my memory about it.", True),
    ("The memory does not mention a dog.", True),
    ("I recall that she lives in Porto.", False),  # recalling is not abstaining
]


@pytest.mark.parametrize("response,expected", ABSTAIN_CASES)
def test_abstain(response, expected):
    assert is_correct(response, [], "abstain") is expected
    assert abstains(response) is expected


def test_every_abstain_phrase_is_recognised_and_the_list_holds_the_protocols_answer():
    assert ABSTAIN_ANSWER in ABSTAIN_PHRASES
    for p in ABSTAIN_PHRASES:
        assert abstains(f"Well. {p.upper()}!"), p


def test_an_abstain_phrase_does_not_answer_a_question_with_aliases():
    assert not is_correct("I don't know", ["violet"], "retention")


def test_matched_alias_and_normalize():
    assert matched_alias("in the Hollow Oak", ["teal bridge", "hollow oak"]) == "hollow oak"
    assert matched_alias("nothing", ["x"]) is None
    assert normalize("  The  Blue-Die,  an AN a ") == "blue die"


# numbers are whole words: a thousands comma joins, a decimal point or a time's colon stays inside the number
NUMBER_CASES = [
    ("He scored 1,380 points.", ["380"], False),
    ("He scored 1,380 points.", ["1,380"], True),
    ("He scored 1380 points.", ["1,380"], True),  # the same number written without the comma
    ("He scored 1,380 points.", ["1380"], True),
    ("It costs 3.5 coins.", ["5"], False),
    ("It costs 3.5 coins.", ["3.5"], True),
    ("It costs 3.5 coins.", ["3"], False),
    ("At 10:30 sharp.", ["30"], False),
    ("At 10:30 sharp.", ["10:30"], True),
    ("Rooms 1,2 and 3.", ["2"], True),  # a list, not a thousands group
    ("Room 12. Then 5 more.", ["5"], True),  # a sentence's full stop is punctuation
    ("In 1999.", ["1999"], True),
    # a date's, a range's or a fraction's number is not a number of its own (they matched before)
    ("Rindis was 75 as of 2024-01-18.", ["18"], False),
    ("Between 10-15 points.", ["15"], False),
    ("3/15", ["15"], False),
    ("On 2024-01-18.", ["2024-01-18"], True),
    ("Six-sided dice, 12 of them.", ["six-sided dice"], True),
]


@pytest.mark.parametrize("response,aliases,expected", NUMBER_CASES)
def test_numbers_match_only_whole(response, aliases, expected):
    from mags_lib.metrics import answer_correct

    assert is_correct(response, aliases, "recall") is expected
    assert answer_correct(response, aliases) is expected  # the reader's metrics and rewards: the same rule


@pytest.mark.parametrize("response,aliases,expected", [
    ("Nothing.", ["nothing"], True),
    ("He carries nothing at all.", ["nothing"], True),
    ("I know nothing about it.", ["nothing"], False),  # an abstention's words are no answer
    ("I don't know: that is not in my memory.", ["memory"], False),
    ("I'm not sure, but it is in the memory box.", ["memory box"], True),  # an answer beside a hedge
    ("The unknown soldier.", ["unknown soldier"], True),  # an alias holding more than the phrase still counts
    ("It is unknown.", ["unknown soldier"], False),
])
def test_abstention_words_are_not_an_answer(response, aliases, expected):
    from mags_lib.metrics import answer_correct

    assert is_correct(response, aliases, "recall") is expected
    assert answer_correct(response, aliases) is expected

