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
