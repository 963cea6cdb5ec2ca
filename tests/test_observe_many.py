"""``MAGS.observe_many``: batched ingestion builds the memory the ``observe`` loop builds (issue 13).

A fake write model answers each prompt from a table keyed by the turn's text (so a reply does not
depend on the order or the batching of the calls) and records the size of every batch; the hash
embedder keeps everything fast.
"""

from __future__ import annotations

import dataclasses

import pytest
from fakes import TableBackend

from mags_lib import protocol as P
from mags_lib.agent import MAGS, MAGSConfig
from mags_lib.embed import HashEmbedder
from mags_lib.graph import persistence
from mags_lib.graph.core import _state_differences

EMB = HashEmbedder(dim=32)


def W(*triplets) -> str:
    return P.writes_to_text(list(triplets))


# 20 turns: speakers (first person resolved to them), times, repeats, an update that supersedes, a
# turn whose write model stores nothing, a triplet the grounding check drops, turns with no speaker or
# no time, a plain-text item and tuple items (given below as items of several shapes)
TURNS = [
    ("I work as a baker in Lyon.", "Caroline", "2023-05-01", W(("I", "work as", "baker"), ("I", "live in", "Lyon"))),
    ("My sister Mel paints birds.", "Caroline", "2023-05-01", W(("my sister", "is named", "Mel"), ("Mel", "paints", "birds"))),
    ("I adopted a dog called Rex.", "Jon", "2023-05-02", W(("I", "adopted", "Rex"), ("Rex", "is a", "dog"))),
    ("Nice weather today!", "Jon", "2023-05-02", ""),  # nothing to store
    ("Rex loves frozen lemons.", "Jon", "2023-05-03", W(("Rex", "loves", "frozen lemons"))),
    ("Odalie is my aunt.", "Caroline", "2023-05-03", W(("Odalie", "is aunt of", "me"), ("Zorb", "eats", "quux"))),
    ("I moved to Paris.", "Caroline", "2023-06-10", W(("I", "live in", "Paris"))),  # supersedes Lyon
    ("Rex loves frozen lemons, really.", "Jon", "2023-06-11", W(("Rex", "loves", "frozen lemons"))),  # repeat
    ("The bakery opens at 6 am.", None, "2023-06-12", W(("bakery", "opens at", "6 am"))),
    ("Mel sold a painting.", "Caroline", None, W(("Mel", "sold", "painting"))),
    ("I started learning chess.", "Jon", "2023-06-13", W(("I", "learns", "chess"))),
    ("Chess clubs meet on Tuesdays.", "Jon", "2023-06-13", W(("chess clubs", "meet on", "Tuesdays"))),
    ("My dog Rex is three years old.", "Jon", "2023-06-14", W(("my dog Rex", "is", "three years old"))),
    ("I bake sourdough every morning.", "Caroline", "2023-06-15", W(("I", "bakes", "sourdough"))),
    ("Lyon was lovely though.", "Caroline", "2023-06-15", W(("Lyon", "was", "lovely"))),
    ("hmm ok", None, None, ""),  # nothing to store, no speaker, no time
    ("Mel paints birds and boats.", "Caroline", "2023-07-01", W(("Mel", "paints", "boats"))),
    ("Rex hates the vacuum cleaner.", "Jon", "2023-07-02", W(("Rex", "hates", "vacuum cleaner"))),
    ("I won a chess game!", "Jon", "2023-07-03", W(("I", "won", "chess game"))),
    ("Paris is expensive.", "Caroline", "2023-07-04", W(("Paris", "is", "expensive"))),
]


def items() -> list:
    """The turns as observe_many items, in every accepted shape."""
    out: list = []
    for j, (text, speaker, time, _) in enumerate(TURNS):
        source = None if j % 7 == 3 else f"D1:{j}"  # some turns take the default source T<turn>
        if j == 15:
            out.append(text)  # a plain text
        elif j % 3 == 0:
            out.append((text, source, time, speaker))
        else:
            out.append({"text": text, "source": source, "time": time, "speaker": speaker})
    return out


def agent(fail_on: str | None = None, **cfg) -> tuple[MAGS, TableBackend]:
    b = TableBackend({text: reply for text, _, _, reply in TURNS}, fail_on=fail_on)
    c = MAGSConfig(embedder="hash", maintain_every=3, **cfg)
    return MAGS(c, embedder=EMB, backends={r: b for r in ("ask", "write", "answer", "router")}), b


def observe_loop(m: MAGS, its: list) -> list:
    out = []
    for x in its:
        if isinstance(x, str):
            out.append(m.observe(x))
        elif isinstance(x, dict):
            out.append(m.observe(**x))
        else:
            out.append(m.observe(*x))
    return out


def footprint(m: MAGS) -> tuple:
    g = m.graph
    return (g._state(), list(g.oplog), g.facts(include_invalid=True), g.episodes(), m._turn, m.n_observations,
            len(m.latencies["observe"]))


def assert_same(a: tuple, b: tuple) -> None:
    assert _state_differences(a[0], b[0]) == []
    assert a[1:] == b[1:]


def view(obs) -> list:
    return [(o.text, o.source, o.time, o.speaker, o.episode, o.triplets, o.dropped,
             None if o.report is None else dataclasses.asdict(o.report), o.maintained is not None) for o in obs]


@pytest.mark.parametrize("batch_size", [1, 6, 32])
def test_observe_many_builds_the_memory_the_loop_builds(batch_size):
    loop, _ = agent()
    ref = observe_loop(loop, items())
    m, b = agent()
    obs = m.observe_many(items(), batch_size=batch_size)
    # the same saved graph (every file: state, op log, manifest), facts, episodes, provenance, counters
    assert persistence.graph_to_files(m.graph) == persistence.graph_to_files(loop.graph)
    assert_same(footprint(m), footprint(loop))
    assert view(obs) == view(ref)
    assert b.batches == [min(batch_size, 20 - s) for s in range(0, 20, batch_size)]  # the model ran batched
    # what the test is about happened: speakers resolved, a turn with nothing stored, a supersession,
    # a dropped (ungrounded) triplet, the default source, periodic maintenance
    facts = {(f["subject"], f["relation"], f["object"]): f for f in m.graph.facts(include_invalid=True)}
    assert ("Caroline", "work as", "baker") in facts and not facts[("Caroline", "live in", "Lyon")]["valid"]
    assert facts[("Rex", "loves", "frozen lemons")]["sources"] == ["D1:4", "D1:7"]
    assert obs[3].triplets == [] and obs[3].episode is not None and obs[3].source == "T4"
    assert obs[5].dropped == [("Zorb", "eats", "quux")]
    assert sum(o.maintained is not None for o in obs) == 6 and m.graph.tick == 6
    assert [e["speaker"] for e in m.graph.episodes()][:3] == ["Caroline", "Caroline", "Jon"]
    # and the next turn goes on from there, as after the loop
    assert m.observe("Rex sleeps a lot.").source == loop.observe("Rex sleeps a lot.").source == "T21"
    assert persistence.graph_to_files(m.graph) == persistence.graph_to_files(loop.graph)


@pytest.mark.parametrize("memory", ["none", "full_context", "rag"])
def test_other_memory_modes_behave_like_the_loop(memory):
    loop, _ = agent(memory=memory)
    ref = observe_loop(loop, items())
    m, b = agent(memory=memory)
    obs = m.observe_many(items(), batch_size=6)
    assert_same(footprint(m), footprint(loop))
    assert view(obs) == view(ref) and b.batches == []  # no write model in these modes
    assert len(m.graph.episodes()) == (0 if memory == "none" else 20) and m.graph.facts() == []


def test_a_failing_model_call_mid_batch_leaves_no_turn():
    m, b = agent(fail_on=TURNS[13][0])  # the 3rd batch of 6 fails: 12 turns were stored by then
    m.observe("Blorps eat frozen lemons.", source="S0")
    before = footprint(m)
    with pytest.raises(RuntimeError, match="crashed"):
        m.observe_many(items(), batch_size=6)
    assert b.batches == [1, 6, 6, 6]  # the 3rd batch failed after two batches' turns were engrammed
    assert_same(before, footprint(m))
    assert all("baker" not in it.text for it in m.recall("baker", k=10))
    # the whole list goes in once the model works again
    b.fail_on = None
    assert len(m.observe_many(items(), batch_size=6)) == 20 and m.n_observations == 21


def test_a_failing_turn_mid_batch_leaves_no_turn(monkeypatch):
    m, _ = agent()
    before = footprint(m)
    real = m.graph.engram
    calls = []

    def engram(*a, **kw):  # the 9th turn's engram fails after its episode was added
        calls.append(1)
        if len(calls) == 9:
            raise RuntimeError("engram failed")
        return real(*a, **kw)

    monkeypatch.setattr(m.graph, "engram", engram)
    with pytest.raises(RuntimeError, match="engram failed"):
        m.observe_many(items(), batch_size=32)
    assert_same(before, footprint(m))


@pytest.mark.parametrize("bad,err", [
    ({"text": "hi", "who": "Jon"}, "items\\[20\\]: a turn dict"),
    (("hi", "S1", 3.5), "items\\[20\\]: time must be a date"),
    ("   ", "items\\[20\\]: empty text"),
    (42, "items\\[20\\]: a turn is a text"),
])
def test_every_item_is_checked_before_any_model_call(bad, err):
    m, b = agent()
    with pytest.raises((TypeError, ValueError), match=err):
        m.observe_many(items() + [bad])
    assert b.batches == [] and m.n_observations == 0 and m.graph.oplog == []
