"""Speakers and dates first-class (issue 13 item 1): ``observe(text, source=, time=, speaker=)``,
first person resolved to the speaker, LoCoMo session dates parsed, dates and speakers shown to the
reader through ``protocol.format_item``."""

from __future__ import annotations

import datetime as dt

import pytest
from fakes import TableBackend

from mags_lib import MAGS
from mags_lib import protocol as P
from mags_lib.agent import MAGSConfig, resolve_speaker
from mags_lib.embed import HashEmbedder
from mags_lib.graph.values import clean_time, parse_session_date

EMB = HashEmbedder(dim=64)


def agent(table, **cfg):
    w = TableBackend({k: P.writes_to_text(v) for k, v in table.items()})
    return MAGS(MAGSConfig(embedder="hash", maintain_every=0, **cfg), embedder=EMB,
                backends={r: w for r in ("ask", "write", "answer", "router")}), w


def test_each_speakers_first_person_becomes_their_own_node():
    m, _ = agent({"I live in Boston": [("I", "live in", "Boston")],
                  "I work as a baker": [("me", "work as", "a baker"), ("my sister", "lives in", "Denver")]})
    m.observe("I live in Boston now.", source="D1:1", speaker="Caroline")
    m.observe("I work as a baker, and my sister lives in Denver.", source="D1:2", speaker="Melanie")
    subjects = {(f["subject"], f["object"]) for f in m.graph.facts()}
    assert subjects == {("Caroline", "Boston"), ("Melanie", "a baker"), ("Melanie's sister", "Denver")}
    assert m.graph.find("I") is None and m.graph.find("me") is None
    # without a speaker nothing is resolved
    assert resolve_speaker(("I", "like", "tea"), None) == ("I", "like", "tea")


def test_the_write_model_reads_who_is_speaking():
    # the speaker's name precedes the turn (the training data's "Caroline: I work as a baker." form), in
    # observe and observe_many alike; without a speaker, or with write_speaker off, the text alone
    table = {"Hey Jon! I lost my job": [("Jon", "lost", "job")], "Gina: Hey Jon! I lost my job": [("I", "lost", "job")]}
    for many in (False, True):
        m, w = agent(table)
        turns = [("Hey Jon! I lost my job.", "D1:1", None, "Gina"), ("Hey Jon! I lost my job.", "D1:2")]
        obs = m.observe_many(turns) if many else [m.observe(*t) for t in turns]
        assert [c["content"] for c in w.calls] == ["Gina: Hey Jon! I lost my job.", "Hey Jon! I lost my job."]
        assert obs[0].triplets == [("Gina", "lost", "job")] and obs[0].text == "Hey Jon! I lost my job."
        assert m.graph.episodes()[0]["text"] == "Hey Jon! I lost my job."  # the episode keeps what was said
    m, w = agent(table, write_speaker=False)
    assert m.observe("Hey Jon! I lost my job.", speaker="Gina").triplets == [("Jon", "lost", "job")]
    assert w.calls[-1]["content"] == "Hey Jon! I lost my job."


def test_the_speakers_name_is_no_evidence_for_a_fact():
    # the name comes with the turn: a fact about the speaker needs its object in what was said
    m, _ = agent({"Ugh, Mondays": [("I", "has age", "18")], "I just turned 29": [("I", "has age", "29")]})
    o = m.observe("Ugh, Mondays.", speaker="Jon")
    assert o.triplets == [] and o.dropped == [("Jon", "has age", "18")]
    assert m.observe("I just turned 29.", speaker="Jon").triplets == [("Jon", "has age", "29")]
    assert [(f["subject"], f["object"]) for f in m.graph.facts()] == [("Jon", "29")]


def test_speaker_is_checked_saved_and_replayed(tmp_path):
    m, w = agent({})
    with pytest.raises(TypeError, match="speaker must be a name"):
        m.observe("Hello there.", speaker=3)
    with pytest.raises(ValueError, match="speaker is empty"):
        m.observe("Hello there.", speaker="  ")
    assert m.graph.stats()["n_nodes"] == 0 and m.n_observations == 0  # a refused turn leaves no trace
    o = m.observe("Hello there.", source="D1:1", time="1:56 pm on 8 May, 2023", speaker="Jon \n Smith")
    assert o.speaker == "Jon Smith" and o.time == "2023-05-08T13:56"
    assert m.graph.episodes()[0] == {"id": o.episode, "text": "Hello there.", "source": "D1:1",
                                     "time": "2023-05-08T13:56", "speaker": "Jon Smith"}
    m.save(tmp_path / "m")
    m2 = MAGS.load(tmp_path / "m", embedder=EMB, backends={r: w for r in ("ask", "write", "answer", "router")})
    assert m2.graph.episodes() == m.graph.episodes() and m.graph.replayed().equals(m.graph)


def test_locomo_session_dates_are_parsed_to_iso():
    assert parse_session_date("1:56 pm on 8 May, 2023") == "2023-05-08T13:56"
    assert parse_session_date("10:04 am on 20 January, 2023") == "2023-01-20T10:04"
    assert parse_session_date("8 May 2023") == "2023-05-08" and parse_session_date("May 8, 2023") == "2023-05-08"
    assert parse_session_date("2023-05-08") is None and parse_session_date("last Saturday") is None
    assert clean_time("1:56 pm on 8 May, 2023") == "2023-05-08T13:56"
    assert clean_time("sometime in spring") == "sometime in spring"  # kept as written
    assert clean_time(dt.date(2023, 5, 8)) == "2023-05-08"


def test_the_reader_sees_date_and_speaker_of_every_recalled_item():
    m, w = agent({"Blorps eat": [("Blorps", "eat", "frozen lemons")]})
    m.observe("Blorps eat only frozen lemons.", source="D1:1", time="1:56 pm on 8 May, 2023", speaker="Caroline")
    a = m.ask("What do blorps eat?")
    assert "(2023-05-08) Blorps eat frozen lemons" in a.facts
    assert "(2023-05-08) Caroline: Blorps eat only frozen lemons." in a.facts
    assert w.calls[-1]["prompt"] == m.prompt_spec("answer").messages("What do blorps eat?", facts=a.facts)


def test_format_item_is_the_protocol_form():
    assert P.format_item("Caroline moved to Boston", time="2023-05-08") == "(2023-05-08) Caroline moved to Boston"
    assert P.format_item("Caroline lives in Denver", time="2023-04-01", current=False) == \
        "(2023-04-01, no longer true) Caroline lives in Denver"
    assert P.format_item("I work as a baker.", speaker="Caroline") == "Caroline: I work as a baker."
