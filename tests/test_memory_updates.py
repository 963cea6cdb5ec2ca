"""Update semantics (issue 12 item 2): what supersedes what.

Each case below failed on the code before this change (see the commit message): one observation
superseded its own facts, ingestion order (not the observation's time) decided which fact was
current, the multi-valued relations of the game worlds superseded, ``eat`` never did, and a
paraphrased relation never conflicted; superseded facts' episodes were shown to the reader as if
current."""

from __future__ import annotations

from mags_lib.embed import HashEmbedder
from mags_lib.graph import LiquidGraph

EMB = HashEmbedder(dim=64)


def valid(g):
    return sorted((f["subject"], f["relation"], f["object"]) for f in g.facts())


def say(g, triplets, time, source):
    ep = g.add_episode(" ".join(" ".join(t) for t in triplets) + ".", source=source, time=time)
    g.engram(triplets, episode=ep)
    return ep


def test_one_observation_never_supersedes_its_own_facts():
    g = LiquidGraph(EMB)
    say(g, [("Caroline", "got", "new shoes"), ("Caroline", "got", "a red dress")], "2023-05-08", "D1:1")
    assert valid(g) == [("Caroline", "got", "a red dress"), ("Caroline", "got", "new shoes")]


def test_an_older_statement_ingested_later_is_history_not_current():
    g = LiquidGraph(EMB)
    say(g, [("Caroline", "lives in", "Boston")], "2023-05-08", "D2:1")
    say(g, [("Caroline", "lives in", "Denver")], "2023-04-01", "D1:1")  # said earlier, read later
    assert valid(g) == [("Caroline", "lives in", "Boston")]
    hist = g.history("Caroline", "lives in")
    assert [(h["object"], h["valid"]) for h in hist] == [("Denver", False), ("Boston", True)]  # oldest first
    assert hist[0]["invalidated_by"] == hist[1]["id"]
    # the newer statement, read later, does supersede
    say(g, [("Caroline", "lives in", "Paris")], "2023-06-01", "D3:1")
    assert valid(g) == [("Caroline", "lives in", "Paris")]
    assert g.replayed().equals(g)


def test_multi_valued_relations_do_not_supersede_and_eat_does():
    g = LiquidGraph(EMB)
    for i, (rel, a, b) in enumerate([("are afraid of", "purple umbrellas", "loud bells"),
                                     ("can", "swim", "fly"), ("has pet", "a cat", "a dog"),
                                     ("has sibling", "Odalie", "Bren")]):
        say(g, [("Snarfs", rel, a)], f"2023-01-0{i + 1}", f"A{i}")
        say(g, [("Snarfs", rel, b)], f"2023-02-0{i + 1}", f"B{i}")
    assert len(valid(g)) == 8
    say(g, [("Blorps", "eat", "frozen lemons")], "2023-01-01", "E1")
    say(g, [("Blorps", "eat", "copper wire")], "2023-03-01", "E2")  # the diet rule changed
    assert [t for t in valid(g) if t[0] == "Blorps"] == [("Blorps", "eat", "copper wire")]


def test_a_paraphrased_relation_conflicts():
    g = LiquidGraph(EMB)
    say(g, [("Caroline", "lives in", "Denver")], "2023-04-01", "D1:1")
    say(g, [("Caroline", "moved to", "Boston")], "2023-05-08", "D2:1")
    assert valid(g) == [("Caroline", "moved to", "Boston")]


def test_the_reader_sees_superseded_episodes_as_no_longer_true():
    from reliability_support import ScriptedBackend

    from mags_lib import MAGS
    from mags_lib import protocol as P
    from mags_lib.agent import MAGSConfig

    b = ScriptedBackend([P.writes_to_text([("Caroline", "lives in", "Denver")]),
                         P.writes_to_text([("Caroline", "moved to", "Boston")]), "", "Boston."])
    m = MAGS(MAGSConfig(embedder="hash", maintain_every=0), embedder=EMB,
             backends={r: b for r in ("ask", "write", "answer", "router")})
    m.observe("I live in Denver.", source="D1:1", time="2023-04-01", speaker="Caroline")
    m.observe("I moved to Boston!", source="D2:1", time="2023-05-08", speaker="Caroline")
    a = m.ask("Where does Caroline live?", k=10)
    assert "(2023-04-01, no longer true since 2023-05-08) Caroline: I live in Denver." in a.facts, a.facts
    assert "(2023-05-08) Caroline: I moved to Boston!" in a.facts
    assert "(2023-05-08) Caroline moved to Boston" in a.facts
    assert not any("lives in Denver" in f for f in a.facts)  # the superseded fact is not recalled
