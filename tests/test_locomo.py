"""LoCoMo: the loader (real file and broken inputs), session dates, QA F1 normalisation, evidence recall."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from mags_lib.bench import locomo as L

REAL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "locomo" / "locomo10.json"
needs_real = pytest.mark.skipif(not REAL.is_file(), reason=f"LoCoMo is not at {REAL} (CC BY-NC 4.0, never "
                                "committed): put locomo10.json there to run these tests")


# ------------------------------------------------------------------------------------------------
# the real file
@pytest.fixture(scope="module")
def real():
    return L.load_locomo(REAL)


@needs_real
def test_real_file_counts(real):
    assert len(real.conversations) == 10
    assert real.n_questions == 1986
    assert real.n_turns == 5882
    assert real.category_counts() == {1: 282, 2: 321, 3: 96, 4: 841, 5: 446}
    assert [c.n_turns for c in real.conversations] == [419, 369, 663, 629, 680, 675, 689, 681, 509, 568]


@needs_real
def test_real_file_quirks_are_counted(real):
    q = real.quirks
    assert q["numeric_answers"] == 6  # 2022 (x4), 2, 3
    assert q["image_turns_with_captions"] == 1226
    assert q["category5_adversarial_answer_only"] == 444
    assert q["category5_with_answer_too"] == 2
    assert q["session_dates_without_turns"] == 16  # conv-26 dates sessions 20-35 without turns
    assert q["questions_without_evidence_in_file"] == 4
    assert q["evidence_entries_with_several_ids"] == 4
    assert q["evidence_ids_repaired"] == 2  # 'D:11:26', 'D30:05'
    assert q["evidence_ids_unresolvable"] == 3  # 'D', and two ids naming no turn
    assert all(line.split(":")[0] in q for line in real.quirk_report())


@needs_real
def test_real_file_values(real):
    c = real.conversation("conv-26")
    assert (c.speaker_a, c.speaker_b) == ("Caroline", "Melanie")
    t = c.turn("D1:3")
    assert t.time == datetime(2023, 5, 8, 13, 56) and t.speaker == "Caroline" and t.position == 2
    assert c.turn("D1:5").render().endswith("[shares a photo of a dog walking past a wall with a painting of a woman]")
    q1 = c.questions[1]
    assert q1.answer == "2022" and q1.category == 2 and q1.evidence == ("D1:12",)
    q37 = c.questions[37]
    assert q37.raw_evidence == ("D8:6; D9:17",) and q37.evidence == ("D8:6", "D9:17")
    assert "D11:26" in real.conversation("conv-43").questions[18].evidence  # from "D:11:26"
    adv = c.questions[152]
    assert adv.category == 5 and adv.answer is None and adv.adversarial_answer
    # every kept evidence id names a turn of its conversation
    for conv in real.conversations:
        ids = {t.dia_id for t in conv.turns}
        assert all(set(q.evidence) <= ids for q in conv.questions)
    # turns in order, positions consecutive, session dates increasing
    for conv in real.conversations:
        assert [t.position for t in conv.turns] == list(range(conv.n_turns))
        dates = [s.date for s in conv.sessions]
        assert dates == sorted(dates), conv.sample_id


# ------------------------------------------------------------------------------------------------
# broken and quirky inputs
def _conv(**over):
    conv = {
        "speaker_a": "Jon", "speaker_b": "Gina",
        "session_1_date_time": "4:04 pm on 20 January, 2023",
        "session_1": [
            {"speaker": "Jon", "dia_id": "D1:1", "text": "I lost my job as a banker."},
            {"speaker": "Gina", "dia_id": "D1:2", "text": "Look at my new store!", "blip_caption": "a photo of a shop",
             "img_url": ["http://example.invalid/x.jpg"]},
        ],
        "session_2_date_time": "12:15 am on 2 February, 2023",
        "session_2": [{"speaker": "Jon", "dia_id": "D2:1", "text": "I opened a dance studio."}],
        "session_3_date_time": "1:00 pm on 3 March, 2023",
    }
    conv.update(over)
    return conv


def _qa():
    return [
        {"question": "What was Jon's job?", "answer": "banker", "evidence": ["D1:1"], "category": 4},
        {"question": "When did Gina open her store?", "answer": 2023, "evidence": ["D1:2; D2:1", "D:1:1"],
         "category": 2},
        {"question": "What did Jon open?", "answer": "dance studio", "evidence": ["D02:01", "D9:9", "D"],
         "category": 1},
        {"question": "Is Jon a pilot?", "adversarial_answer": "Yes", "evidence": ["D1:1"], "category": 5},
        {"question": "Would Jon like ballet?", "answer": "Likely yes; he dances", "evidence": [], "category": 3},
    ]


def _write(tmp_path, data, name="locomo.json"):
    p = tmp_path / name
    p.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return p


def test_quirks_are_tolerated_and_counted(tmp_path):
    d = L.load_locomo(_write(tmp_path, [{"sample_id": "c1", "conversation": _conv(), "qa": _qa()}]))
    c = d.conversations[0]
    assert [t.dia_id for t in c.turns] == ["D1:1", "D1:2", "D2:1"]
    assert c.sessions[1].date == datetime(2023, 2, 2, 0, 15)
    assert c.turns[1].render() == "Gina: Look at my new store! [shares a photo of a shop]"
    qs = c.questions
    assert qs[1].answer == "2023" and qs[1].evidence == ("D1:2", "D2:1", "D1:1")
    assert qs[2].evidence == ("D2:1",)  # 'D02:01' repaired, 'D9:9' and 'D' dropped
    assert qs[3].answer is None and qs[3].adversarial_answer == "Yes"
    assert qs[4].evidence == ()
    assert dict(d.quirks) == {
        "image_turns_with_captions": 1, "session_dates_without_turns": 1, "evidence_entries_with_several_ids": 1,
        "evidence_ids_repaired": 2, "evidence_ids_unresolvable": 2, "numeric_answers": 1,
        "category5_adversarial_answer_only": 1, "questions_without_evidence_in_file": 1}


def test_missing_file_says_where_to_get_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="snap-research/locomo") as e:
        L.load_locomo(tmp_path / "nope.json")
    assert "nope.json" in str(e.value) and "CC BY-NC" in str(e.value)


@pytest.mark.parametrize("data, match", [
    ("{not json", "not valid JSON"),  # a damaged file
    ({"qa": []}, "JSON list of conversations"),  # an object, not the list of conversations
    ([], "non-empty"),  # nothing in it
    ([{"sample_id": "c1", "qa": []}], "no 'conversation' object"),
    ([{"sample_id": "c1", "conversation": _conv(speaker_b=""), "qa": []}], "c1: no 'speaker_b' name"),
    ([{"sample_id": "c1", "conversation": _conv(session_2_date_time="sometime in May"), "qa": []}],
     "c1: session_2_date_time: cannot parse session date 'sometime in May'"),
    ([{"sample_id": "c1", "conversation": _conv(session_1=[{"speaker": "Jon", "dia_id": "x", "text": "hi"}]),
       "qa": []}], "unreadable dia_id 'x'"),
    ([{"sample_id": "c1", "conversation": _conv(), "qa": [{"question": "Q?", "answer": "a", "evidence": [],
                                                           "category": 7}]}], "qa 0: category must be one of"),
    ([{"sample_id": "c1", "conversation": _conv(), "qa": [{"question": "Q?", "answer": "a", "evidence": "D1:1",
                                                           "category": 4}]}], "'evidence' is not a list"),
    ([{"sample_id": "c1", "conversation": _conv(), "qa": [{"question": "Q?", "evidence": [], "category": 4}]}],
     "category 4 question without an 'answer'"),
    ([{"sample_id": "c1", "conversation": _conv(), "qa": []}] * 2, "sample_id repeated"),
])
def test_broken_inputs_raise_clear_errors(tmp_path, data, match):
    with pytest.raises(L.LoCoMoFormatError, match=match):
        L.load_locomo(_write(tmp_path, data))


# ------------------------------------------------------------------------------------------------
# dates
@pytest.mark.parametrize("text, expected", [
    ("1:56 pm on 8 May, 2023", datetime(2023, 5, 8, 13, 56)),  # the file's form
    ("12:28 am on 8 November, 2023", datetime(2023, 11, 8, 0, 28)),  # 12 am is midnight
    ("12:04 pm on 19 June, 2023", datetime(2023, 6, 19, 12, 4)),  # 12 pm is noon
    ("11:59 PM on 31 December, 2023", datetime(2023, 12, 31, 23, 59)),  # upper case
    ("9:05 a.m. on 1 Feb 2024", datetime(2024, 2, 1, 9, 5)),  # dots, short month, no comma
    ("  7:00 am on 29 February, 2024 ", datetime(2024, 2, 29, 7, 0)),  # leap day, spaces
])
def test_session_dates(text, expected):
    assert L.parse_session_date(text) == expected


@pytest.mark.parametrize("text", [
    "8 May 2023",  # no time
    "13:56 pm on 8 May, 2023",  # 24-hour clock with pm
    "1:56 pm on 8 Mayo, 2023",  # unknown month
    "1:56 pm on 30 February, 2023",  # impossible day
    None,
])
def test_bad_session_dates_raise(text):
    with pytest.raises(ValueError, match="session date"):
        L.parse_session_date(text)


# ------------------------------------------------------------------------------------------------
# QA F1, LoCoMo's normalisation: cases worked out by hand from its evaluation's rules
@pytest.mark.parametrize("text, normalised", [
    ("The Cat, and the Hat!", "cat hat"),  # commas, punctuation, a/an/the/and
    ("self-care", "selfcare"),  # punctuation deleted, not replaced by a space
    ("Sweden, Norway", "sweden norway"),
    ("  A   trip  to   Paris. ", "trip to paris"),
    ("Andrew and Anna", "andrew anna"),  # 'and' only as a whole word
    ("7 May 2023", "7 may 2023"),
    ("caf\u00e9's", "caf\u00e9s"),  # non-ASCII letters kept, apostrophe dropped
])
def test_normalize_answer(text, normalised):
    assert L.normalize_answer(text) == normalised


@pytest.mark.parametrize("prediction, answer, category, score", [
    ("paintings", "painting", 4, 1.0),  # Porter stemming
    ("She went to Paris", "Paris", 4, 0.4),  # P = 1/4, R = 1
    ("In 2022", "2022", 2, 2 / 3),  # an integer answer, turned into text by the loader
    ("Mel and Caroline", "Caroline, Mel", 4, 1.0),  # single-hop: commas removed, no splitting
    ("Paris, Rome", "Rome, Paris, Oslo", 1, 2 / 3),  # multi-hop: (1 + 1 + 0) / 3 gold parts
    ("Rome", "Rome, Paris", 1, 0.5),  # multi-hop: best predicted part per gold part
    ("psychology", "Psychology, counseling certification; maybe", 3, 0.5),  # open-domain: before ';'
    ("counseling", "Psychology; counseling", 3, 0.0),  # the part after ';' does not count
    ("Not mentioned in the conversation", None, 5, 1.0),  # adversarial: the right option
    ("No information available.", None, 5, 1.0),
    ("Yes", "No", 5, 0.0),  # adversarial: the gold answer is ignored
    ("", "banker", 4, 0.0),  # empty reply
    ("the", "banker", 4, 0.0),  # normalises to nothing
])
def test_qa_score_table(prediction, answer, category, score):
    assert L.qa_score(prediction, answer, category) == pytest.approx(score)


def test_qa_score_rejects_bad_arguments():
    with pytest.raises(ValueError, match="category"):
        L.qa_score("x", "y", 6)
    with pytest.raises(ValueError, match="gold answer"):
        L.qa_score("x", None, 4)


# ------------------------------------------------------------------------------------------------
# evidence recall
@pytest.mark.parametrize("evidence, sources, k, expected", [
    (["D1:1"], [["D1:1"], ["D1:2"]], 1, 1.0),
    (["D1:1", "D2:1"], [["D1:2"], ["D1:1"], ["D2:1"]], 2, 0.5),  # one of two within the top 2
    (["D1:1", "D2:1"], [["D1:2"], ["D1:1"], ["D2:1"]], 3, 1.0),
    (["D1:1", "D1:1"], [["D1:1"]], 1, 1.0),  # repeated evidence counts once
    (["D1:1", "D2:1"], [["D2:1", "D1:1"]], 1, 1.0),  # one memory item with two sources
    (["D1:1"], [], 5, 0.0),  # nothing retrieved
    ([], [["D1:1"]], 1, None),  # no evidence: nothing to find, left out of averages
])
def test_evidence_recall(evidence, sources, k, expected):
    assert L.evidence_recall(evidence, sources, k) == expected


def test_evidence_recall_needs_positive_k():
    with pytest.raises(ValueError, match="k must be"):
        L.evidence_recall(["D1:1"], [["D1:1"]], 0)
