"""Relative dates resolved against the observation's date (issue 13, must-have 1): the parser
(:mod:`mags_lib.graph.dates`), the reader's view of recalled episodes and facts, and written triplets
whose subject or object is only a relative date."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from fakes import TableBackend

from mags_lib import MAGS
from mags_lib import protocol as P
from mags_lib.agent import MAGSConfig, resolve_triplet_dates
from mags_lib.embed import HashEmbedder
from mags_lib.graph import atomic
from mags_lib.graph.dates import (
    annotate_relative_dates,
    reference_date,
    resolve_date_field,
    resolve_relative_dates,
)

EMB = HashEmbedder(dim=64)

# (phrase, reference date, expected ISO value, granularity); weekdays: 2023-05-08 is a Monday
TABLE = [
    # days
    ("today", "2023-05-08", "2023-05-08", "day"),
    ("tonight", "2023-05-08T21:00", "2023-05-08", "day"),
    ("this morning", "2023-05-08", "2023-05-08", "day"),
    ("this evening", "2023-05-08", "2023-05-08", "day"),
    ("yesterday", "2023-05-08T13:56", "2023-05-07", "day"),
    ("Yesterday", "2023-01-01", "2022-12-31", "day"),  # across a year
    ("yesterday", "2024-03-01", "2024-02-29", "day"),  # leap year
    ("yesterday", "2023-03-01", "2023-02-28", "day"),
    ("yesterday", "2100-03-01", "2100-02-28", "day"),  # 2100 is not a leap year
    ("last night", "2023-05-08", "2023-05-07", "day"),
    ("the day before yesterday", "2023-03-01", "2023-02-27", "day"),
    ("the day before yesterday", "2024-03-01", "2024-02-28", "day"),
    ("tomorrow", "2022-12-31", "2023-01-01", "day"),
    ("tomorrow", "2024-02-28", "2024-02-29", "day"),
    ("the day after tomorrow", "2024-02-28", "2024-03-01", "day"),
    # weekdays
    ("last Saturday", "2023-05-08", "2023-05-06", "day"),
    ("last Saturday", "2023-05-25", "2023-05-20", "day"),
    ("last Saturday", "2023-05-13", "2023-05-06", "day"),  # said on a Saturday: a week back
    ("last Friday", "2023-07-15", "2023-07-14", "day"),  # LoCoMo: "the Friday before 15 July 2023"
    ("Last Fri", "2023-07-15", "2023-07-14", "day"),
    ("last Tues", "2023-07-20", "2023-07-18", "day"),
    ("last Saturday", "2023-06-01", "2023-05-27", "day"),  # across a month
    ("last Saturday", "2023-01-02", "2022-12-31", "day"),  # across a year
    ("last Thursday", "2024-03-01", "2024-02-29", "day"),  # leap day
    ("this past Friday", "2023-05-08", "2023-05-05", "day"),
    ("next Monday", "2022-12-30", "2023-01-02", "day"),
    ("next Monday", "2023-05-08", "2023-05-15", "day"),  # said on a Monday: a week on
    ("next saturday", "2024-02-26", "2024-03-02", "day"),
    ("this coming Friday", "2023-05-08", "2023-05-12", "day"),
    ("this Saturday", "2023-05-08", "2023-05-13", "day"),  # the current Monday-Sunday week
    ("this Monday", "2023-05-10", "2023-05-08", "day"),
    # weeks and weekends (Monday-Sunday)
    ("last week", "2023-05-08", "2023-05-01/2023-05-07", "week"),
    ("last week", "2023-05-14", "2023-05-01/2023-05-07", "week"),
    ("last week", "2023-01-02", "2022-12-26/2023-01-01", "week"),
    ("last week", "2024-03-04", "2024-02-26/2024-03-03", "week"),  # a week with 29 February
    ("this week", "2023-08-23", "2023-08-21/2023-08-27", "week"),
    ("next week", "2023-12-28", "2024-01-01/2024-01-07", "week"),
    ("last weekend", "2023-07-17", "2023-07-15/2023-07-16", "weekend"),
    ("last weekend", "2024-03-04", "2024-03-02/2024-03-03", "weekend"),
    ("this past weekend", "2023-10-20", "2023-10-14/2023-10-15", "weekend"),
    ("this weekend", "2023-05-08", "2023-05-13/2023-05-14", "weekend"),
    ("next weekend", "2023-12-27", "2024-01-06/2024-01-07", "weekend"),
    # months and years
    ("last month", "2023-05-08", "2023-04", "month"),
    ("last month", "2023-01-15", "2022-12", "month"),
    ("last month", "2024-03-31", "2024-02", "month"),  # no day overflow into March
    ("this month", "2023-07-03", "2023-07", "month"),
    ("next month", "2022-12-10", "2023-01", "month"),
    ("last year", "2023-07-12", "2022", "year"),
    ("this year", "2023-07-12", "2023", "year"),
    ("next year", "2024-02-29", "2025", "year"),
    # N ... ago, in N ...
    ("two days ago", "2023-07-12", "2023-07-10", "day"),
    ("2 days ago", "2024-03-01", "2024-02-28", "day"),
    ("twenty days ago", "2023-01-10", "2022-12-21", "day"),
    ("a week ago", "2023-05-08", "2023-05-01/2023-05-07", "week"),  # = last week
    ("two weeks ago", "2023-05-08", "2023-04-24/2023-04-30", "week"),
    ("two weekends ago", "2023-07-17", "2023-07-08/2023-07-09", "weekend"),
    ("three months ago", "2024-05-31", "2024-02", "month"),
    ("eleven months ago", "2023-05-08", "2022-06", "month"),
    ("ten years ago", "2023-06-27", "2013", "year"),
    ("a year ago", "2024-02-29", "2023", "year"),
    ("in two days", "2023-12-30", "2024-01-01", "day"),
    ("in 3 weeks", "2023-05-08", "2023-05-29/2023-06-04", "week"),
]


@pytest.mark.parametrize(("phrase", "ref", "value", "granularity"), TABLE)
def test_resolution_table(phrase, ref, value, granularity):
    text = f"I said it {phrase} and meant it."
    (s,) = resolve_relative_dates(text, ref)
    assert (s.phrase, s.value, s.granularity) == (phrase, value, granularity)
    assert text[s.start:s.end] == phrase and not s.approximate
    first, _, last = value.partition("/")
    assert s.first.isoformat().startswith(first) and s.last.isoformat().startswith(last or first)


@pytest.mark.parametrize(("phrase", "value", "label"), [
    ("a couple of days ago", "2023-05-06", "about 6 May 2023"),
    ("a couple weeks ago", "2023-04-24/2023-04-30", "about 24 to 30 April 2023"),
    ("a few days ago", "2023-05-05", "about 5 May 2023"),
    ("about five years ago", "2018", "about 2018"),  # a hedge makes it approximate
])
def test_vague_counts_are_approximate(phrase, value, label):
    (s,) = resolve_relative_dates(phrase, "2023-05-08")
    assert (s.value, s.label, s.approximate) == (value, label, True)


def test_labels_name_the_date_in_words():
    def label(phrase, ref):
        return resolve_relative_dates(phrase, ref)[0].label

    assert label("yesterday", "2023-05-08") == "7 May 2023"
    assert label("last month", "2023-05-08") == "April 2023" and label("last year", "2023-05-08") == "2022"
    assert label("last week", "2023-05-08") == "1 to 7 May 2023"
    assert label("next week", "2023-05-25") == "29 May to 4 June 2023"
    assert label("last week", "2023-01-02") == "26 December 2022 to 1 January 2023"


@pytest.mark.parametrize("text", [
    "last", "The last time we met", "the next one", "It was the last straw",  # "last" alone
    "I love Saturday Night Live", "We watched last Saturday Night Live together",  # a name, not a date
    "See you on Friday", "Saturdays are for rest",  # a bare weekday: tense decides, not resolved
    "yesterdays", "todays", "lastweek",  # inside words
    "for the last month", "in the last year", "the next week was hard", "my last year of college",
    "his last Friday at work",  # a duration or a final item
    "the last week of May", "last night of the trip", "next year of school",  # "... of"
    "We haven't talked in a few days", "Rome wasn't built in a day", "first time in two weeks",  # durations
    "last Friday (14 July)", "yesterday, 7 May 2023, was fun", "last year, 2022, was hard",  # already absolute
    "I last sat down", "the sun set",  # lower-case abbreviations are words
    # the tail of a longer number ("one years ago", "5 years ago" were read: off by 20 and by 2.5 years)
    "I moved here twenty-one years ago.", "We met twenty five years ago.", "I started the job 2.5 years ago.",
    "That was a hundred days ago.",
    "The exam is a week from today.",  # an offset from the day ("today" was read)
    "We went camping last weekend in May.",  # May's, not the weekend before the reference
    "I quit last month (June 2023).", "It closed last year, in 2022.",  # already absolute
])
def test_what_is_not_resolved(text):
    assert resolve_relative_dates(text, "2023-07-15") == []


def test_day_before_yesterday_without_the_and_counts_that_stand_alone():
    # "Day before yesterday" was read as "yesterday" (07-09)
    assert [(s.phrase, s.value) for s in resolve_relative_dates("Day before yesterday I ran a 5k.", "2023-07-10")] \
        == [("Day before yesterday", "2023-07-08")]
    assert [s.value for s in resolve_relative_dates("See you day after tomorrow!", "2023-07-10")] == ["2023-07-12"]
    assert [s.value for s in resolve_relative_dates("We met 21 years ago, in two days it is 22.", "2023-07-10")] == \
        ["2002", "2023-07-12"]
    assert [s.value for s in resolve_relative_dates("I was sick last week in bed.", "2023-07-10")] == \
        ["2023-07-03/2023-07-09"]


def test_resolved_within_larger_text_and_possessives():
    assert [s.value for s in resolve_relative_dates("yesterday's news", "2023-05-08")] == ["2023-05-07"]
    assert [s.value for s in resolve_relative_dates("I saw her last week.", "2023-05-08")] == ["2023-05-01/2023-05-07"]
    text = "Last Friday I went to a meeting; last week a friend said she moved two years ago."
    spans = resolve_relative_dates(text, dt.date(2023, 7, 15))
    assert [(s.phrase, s.kind, s.value) for s in spans] == [
        ("Last Friday", "last <weekday>", "2023-07-14"), ("last week", "last week", "2023-07-03/2023-07-09"),
        ("two years ago", "<n> years ago", "2021")]
    assert [text[s.start:s.end] for s in spans] == [s.phrase for s in spans]


def test_no_reference_or_a_non_iso_reference_resolves_nothing():
    for ref in (None, "mid-May", "last summer", "2023-02-30", "May 8", 20230508):
        assert resolve_relative_dates("I went there yesterday", ref) == []
        assert annotate_relative_dates("I went there yesterday", ref) == "I went there yesterday"
    assert reference_date(dt.datetime(2023, 5, 8, 13, 56)) == dt.date(2023, 5, 8)
    with pytest.raises(TypeError, match="text must be a string"):
        resolve_relative_dates(b"yesterday", "2023-05-08")


def test_annotation_and_field_resolution():
    assert annotate_relative_dates("I went to a LGBTQ support group yesterday and it was so powerful.",
                                   "2023-05-08T13:56") == \
        "I went to a LGBTQ support group yesterday [7 May 2023] and it was so powerful."
    assert annotate_relative_dates("Camping next month, then a race last Sat.", "2023-05-25") == \
        "Camping next month [June 2023], then a race last Sat [20 May 2023]."
    assert resolve_date_field("Yesterday", "2023-05-08") == "7 May 2023"
    assert resolve_date_field(" on last Saturday. ", "2023-05-08") == "on 6 May 2023"
    assert resolve_date_field("last year", "2023-05-08") == "2022"
    for field in ("the park yesterday", "yesterday and today", "Caroline", "last", "yesterday"):
        assert resolve_date_field(field, None if field == "yesterday" else "2023-05-08") is None


# ------------------------------------------------------------------------------------------------
# the agent: what the reader sees, what the graph stores


SAID = "I went to a LGBTQ support group yesterday and it was so powerful."
WRITES = {"support group yesterday": [("I", "went to", "LGBTQ support group"), ("I", "went to support group on",
                                                                               "yesterday")],
          "birthday on 7 May": [("Mel", "had birthday on", "7 May 2023")],
          "interview on 8 May": [("Mel", "had interview on", "8 May 2023")]}
MAY_8 = "1:56 pm on 8 May, 2023"


def agent(**cfg):
    w = TableBackend({k: P.writes_to_text(v) for k, v in WRITES.items()})
    return MAGS(MAGSConfig(embedder="hash", maintain_every=0, **cfg), embedder=EMB,
                backends={r: w for r in ("ask", "write", "answer", "router")}), w


def test_the_reader_sees_the_relative_date_resolved_and_the_stored_text_is_unchanged(tmp_path):
    m, w = agent()
    m.observe(SAID, source="D1:3", time=MAY_8, speaker="Caroline")
    a = m.ask("When did Caroline go to the LGBTQ support group?")
    assert ("(2023-05-08) Caroline: I went to a LGBTQ support group yesterday [7 May 2023] and it was so "
            "powerful.") in a.facts
    assert w.calls[-1]["prompt"] == m.prompt_spec("answer").messages(a.question, facts=a.facts)  # what the reader got
    assert m.graph.episodes()[0]["text"] == SAID  # the annotation lives in the rendering, not in the memory
    assert m.graph.oplog[0]["text"] == SAID
    # the same in the baselines that show raw turns
    for memory in ("rag", "full_context"):
        b, _ = agent(memory=memory)
        b.observe(SAID, source="D1:3", time=MAY_8, speaker="Caroline")
        assert any("yesterday [7 May 2023]" in f for f in b.ask("When did Caroline go?").facts), memory
    # saved and loaded, replayed: the same memory, the same view
    m.save(tmp_path / "m")
    m2 = MAGS.load(tmp_path / "m", embedder=EMB, backends={r: w for r in ("ask", "write", "answer", "router")})
    assert m2.graph.equals(m.graph) and m.graph.replayed().equals(m.graph)
    assert [m2.render_item(it) for it in a.items] == a.facts


def test_a_fact_shows_its_relative_date_resolved_against_when_it_was_said():
    m, _ = agent()
    m.graph.engram([("Caroline", "started", "pottery last month")], source="D2:1", time="2023-07-03")
    (item,) = [it for it in m.recall("Caroline pottery", k=10) if it.kind != "episode"]
    assert m.render_item(item) == "(2023-07-03) Caroline started pottery last month [June 2023]"


def test_a_written_relative_date_is_stored_as_the_date_it_names():
    m, _ = agent()
    o = m.observe(SAID, source="D1:3", time=MAY_8, speaker="Caroline")
    assert ("Caroline", "went to support group on", "7 May 2023") in o.triplets
    facts = {(f["subject"], f["relation"], f["object"]) for f in m.graph.facts()}
    assert ("Caroline", "went to support group on", "7 May 2023") in facts
    assert m.graph.find("yesterday") is None
    # the resolved date is a date like any written one: the same node as "7 May 2023" written later,
    # never merged with 8 May
    m.observe("Mel had her birthday on 7 May.", source="D1:4", time=MAY_8, speaker="Mel")
    m.observe("Mel had an interview on 8 May.", source="D1:5", time=MAY_8, speaker="Mel")
    node = {f["relation"]: f["dst"] for f in m.graph.facts()}
    assert node["went to support group on"] == node["had birthday on"] != node["had interview on"]


def test_observe_many_resolves_like_observe():
    turns = [{"text": SAID, "source": "D1:3", "time": MAY_8, "speaker": "Caroline"},
             ("Mel had her birthday on 7 May.", "D1:4", MAY_8, "Mel")]
    loop, _ = agent()
    for t in turns:
        loop.observe(**t) if isinstance(t, dict) else loop.observe(*t)
    batch, _ = agent()
    obs = batch.observe_many(turns)
    assert ("Caroline", "went to support group on", "7 May 2023") in obs[0].triplets
    assert batch.graph.equals(loop.graph) and batch.graph.oplog == loop.graph.oplog


def test_switched_off_or_without_a_date_nothing_is_resolved():
    off, _ = agent(resolve_dates=False)
    o = off.observe(SAID, source="D1:3", time=MAY_8, speaker="Caroline")
    assert ("Caroline", "went to support group on", "yesterday") in o.triplets
    a = off.ask("When did Caroline go to the LGBTQ support group?")
    assert f"(2023-05-08) Caroline: {SAID}" in a.facts and not any("[" in f for f in a.facts)
    undated, _ = agent()
    o = undated.observe(SAID, source="D1:3", speaker="Caroline")
    assert ("Caroline", "went to support group on", "yesterday") in o.triplets
    assert resolve_triplet_dates(("a", "b", "yesterday"), "sometime in May") == ("a", "b", "yesterday")
    assert MAGSConfig.from_dict(MAGSConfig(resolve_dates=False).to_dict()).resolve_dates is False


def test_saves_from_before_the_switch_load_with_it_on(tmp_path):
    m, w = agent()
    m.observe(SAID, source="D1:3", time=MAY_8, speaker="Caroline")
    p = m.save(tmp_path / "m")
    state = json.loads((p / "mags.json").read_text())
    del state["config"]["resolve_dates"], state["checksum"]  # as written before the field existed
    state["checksum"] = atomic.json_checksum(state)
    (p / "mags.json").write_text(json.dumps(state))
    m2 = MAGS.load(p, embedder=EMB, backends={r: w for r in ("ask", "write", "answer", "router")})
    assert m2.config.resolve_dates is True and m2.graph.equals(m.graph)
    assert any("yesterday [7 May 2023]" in f for f in m2.ask("When did Caroline go?").facts)


# ------------------------------------------------------------------------------------------------
# the LoCoMo measurement (mags_lib.bench.dates)
@pytest.mark.parametrize(("answer", "session", "first", "last"), [
    ("7 May 2023", "2023-05-08", "2023-05-07", "2023-05-07"),
    ("July 2, 2023", "2023-07-03", "2023-07-02", "2023-07-02"),
    ("13 August", "2023-08-14", "2023-08-13", "2023-08-13"),  # the session's year
    ("April.2023", "2023-05-04", "2023-04-01", "2023-04-30"),
    ("2022", "2023-07-12", "2022-01-01", "2022-12-31"),
    ("The Friday before 15 July 2023", "2023-07-15", "2023-07-14", "2023-07-14"),
    ("The week before 9 June 2023", "2023-06-09", "2023-06-02", "2023-06-08"),
    ("two weekends before 17 July 2023", "2023-07-17", "2023-07-08", "2023-07-09"),
    ("The weekend before 17 July 2023", "2023-07-17", "2023-07-15", "2023-07-16"),
    ("The weekend of 24June, 2022.", "2022-06-24", "2022-06-25", "2022-06-26"),
    ("The week of 23 August 2023", "2023-08-23", "2023-08-21", "2023-08-27"),
    ("the day before 26 October, 2023", "2023-10-26", "2023-10-25", "2023-10-25"),
    ("last week of August 2023", "2023-09-01", "2023-08-25", "2023-08-31"),
    ("between October 19 and 24, 2023", "2023-10-24", "2023-10-19", "2023-10-24"),
])
def test_locomo_gold_answers_read_as_periods(answer, session, first, last):
    from mags_lib.bench.dates import gold_period

    _, (a, b) = gold_period(answer, dt.date.fromisoformat(session))
    assert (a.isoformat(), b.isoformat()) == (first, last)


def test_gold_answers_that_are_not_periods_and_the_agreement_rule():
    from mags_lib.bench.dates import agrees, gold_period

    for answer in ("four months", "10 years ago", "Chicago", "her mother", None, "Yes"):
        assert gold_period(answer, dt.date(2023, 5, 8)) is None
    d = dt.date
    day, week, month = (d(2023, 5, 7),) * 2, (d(2023, 5, 1), d(2023, 5, 7)), (d(2023, 5, 1), d(2023, 5, 31))
    assert agrees(day, day) and agrees(day, week) and agrees(week, month)  # as precise or finer, overlapping
    assert not agrees(month, day) and not agrees(week, day)  # coarser than the answer
    assert not agrees((d(2023, 5, 8),) * 2, day)  # the session date itself for "yesterday"


LOCOMO = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "locomo" / "locomo10.json"


@pytest.mark.skipif(not LOCOMO.is_file(), reason=f"LoCoMo is not at {LOCOMO} (CC BY-NC 4.0, never committed)")
def test_locomo_measurement_runs_and_holds(tmp_path):
    from mags_lib.bench.dates import run

    r = run(LOCOMO, out_dir=tmp_path, progress=False)
    assert json.loads((tmp_path / "dates.json").read_text())["temporal_questions"]["scored"] == \
        r["temporal_questions"]["scored"]
    t, q = r["turns"], r["temporal_questions"]
    assert t["n_turns"] == 5882 and t["turns_with_relative_date"] > 400
    assert q["n_temporal_questions"] == 321 and q["scored"] > 150
    # the resolution agrees with most dated gold answers; the session date alone with few
    assert q["agree_share"] >= 0.9 and q["session_date_agree_share"] < 0.2
