"""Memory modes (issue 12 item 1): every baseline is a configuration of ``MAGS`` -- ``memory="graph" |
"none" | "full_context" | "rag"`` -- with the same reader and answer prompt; each saves, loads and
rolls back like the graph. A scripted reader records the memory block it was given."""

from __future__ import annotations

import pytest
from reliability_support import ScriptedBackend

from mags_lib import MAGS
from mags_lib import protocol as P
from mags_lib.agent import MEMORY_MODES, MAGSConfig
from mags_lib.embed import HashEmbedder

EMB = HashEmbedder(dim=64)
TURNS = [  # (speaker, text, date)
    ("Caroline", "I moved to Boston last week.", "1:56 pm on 8 May, 2023"),
    ("Melanie", "My kids love the new pottery class.", "2:10 pm on 9 May, 2023"),
    ("Caroline", "Blorps eat only frozen lemons.", "3:00 pm on 10 May, 2023"),
    ("Melanie", "The quindles live under the Teal Bridge.", "4:00 pm on 11 May, 2023"),
]


class Reader(ScriptedBackend):
    """Scripted backend: the write model writes one fact about the input, the reader records its prompt."""

    def __init__(self):
        super().__init__([])
        self.prompts: list = []

    def generate(self, prompts, **kw):
        from mags_lib.backends.base import Generation

        out = []
        for p in prompts:
            self.prompts.append(p)
            content = p[-1]["content"]
            if "blorps" in content.lower() and "?" not in content:
                text = P.writes_to_text([("Blorps", "eat", "frozen lemons")])
            elif "?" in content:
                text = "An answer."
            else:
                text = ""
            out.append(Generation(text=text, n_prompt_tokens=1, n_new_tokens=1, seconds=0.0))
        return out


def agent(memory: str, **cfg) -> tuple[MAGS, Reader]:
    r = Reader()
    m = MAGS(MAGSConfig(embedder="hash", memory=memory, maintain_every=0, recall_k=2, **cfg), embedder=EMB,
             backends={role: r for role in ("ask", "write", "answer", "router")})
    for i, (who, text, when) in enumerate(TURNS):
        m.observe(text, source=f"D1:{i + 1}", time=when, speaker=who)
    return m, r


def memory_block(r: Reader) -> str:
    return r.prompts[-1][-1]["content"]


def test_memory_field_is_checked_and_round_trips():
    assert MEMORY_MODES == ("graph", "none", "full_context", "rag")
    with pytest.raises(ValueError, match="memory must be one of"):
        MAGSConfig(memory="vector")
    c = MAGSConfig(memory="rag")
    assert MAGSConfig.from_dict(c.to_dict()) == c and MAGSConfig().memory == "graph"


def test_none_gives_the_reader_no_memory_and_calls_no_write_model():
    m, r = agent("none")
    assert len(r.prompts) == 0  # no write model call for observations
    a = m.ask("What do blorps eat?")
    assert a.facts == [] and a.memory_tokens == 0 and a.extraction is None
    assert "Memory: (no relevant facts)" in memory_block(r)
    assert m.graph.stats()["n_nodes"] == 0


def test_rag_returns_top_k_raw_observations_and_never_changes():
    m, r = agent("rag")
    assert len(r.prompts) == 0 and m.graph.facts() == []  # raw observations only, no write model
    before = m.graph._state()
    n_ops = len(m.graph.oplog)
    a = m.ask("What do blorps eat?")
    assert len(r.prompts) == 1  # the reader only (no ask model call)
    # the best hit among them (the reader sees dated items oldest first, not best first)
    assert len(a.facts) <= 2 and "(2023-05-10) Caroline: Blorps eat only frozen lemons." in a.facts
    assert a.recall.items[0].text == "Blorps eat only frozen lemons." and "D1:3" in a.sources
    assert len(m.graph.oplog) == n_ops  # static: the search is not logged, nothing touched
    from mags_lib.graph.core import _state_differences

    assert _state_differences(before, m.graph._state()) == []
    assert [it.text for it in m.recall("frozen lemons", k=1)] == ["Blorps eat only frozen lemons."]


def test_full_context_keeps_the_newest_that_fit_oldest_first():
    m, _ = agent("full_context")
    a = m.ask("What do blorps eat?")
    assert [f.split(") ", 1)[0] for f in a.facts] == ["(2023-05-08", "(2023-05-09", "(2023-05-10", "(2023-05-11"]
    assert a.facts[1] == "(2023-05-09) Melanie: My kids love the new pottery class."
    # a window too small for everything (40 more turns after them): the newest observations are kept
    m2, _ = agent("full_context", n_ctx=256 + 48 + 24, memory_token_budget=16, max_new_tokens_write=16,
                   max_new_tokens_ask=16)
    for i in range(40):
        m2.observe(f"Small talk number {i} about the weather.", source=f"D2:{i}", time=f"2023-05-{12 + i // 4:02d}")
    a2 = m2.ask("What do blorps eat?")
    assert 0 < len(a2.facts) < len(TURNS) + 40
    assert a2.facts[-1].endswith("number 39 about the weather.") and a2.sources[-1] == "D2:39"


def test_graph_mode_is_unchanged_and_shows_dates():
    m, _ = agent("graph")
    assert any(f["subject"] == "Blorps" for f in m.graph.facts())
    a = m.ask("What do blorps eat?")
    assert any(line == "(2023-05-10) Blorps eat frozen lemons" for line in a.facts), a.facts


def test_same_answer_prompt_for_every_mode():
    systems = {}
    for mode in MEMORY_MODES:
        m, r = agent(mode)
        a = m.ask("What do blorps eat?")
        systems[mode] = r.prompts[-1]
        assert r.prompts[-1] == m.prompt_spec("answer").messages("What do blorps eat?", facts=a.facts)
    assert len({p[0]["content"] for p in systems.values()}) == 1  # one system prompt for all


@pytest.mark.parametrize("mode", MEMORY_MODES)
def test_every_mode_saves_loads_and_rolls_back(tmp_path, mode):
    m, r = agent(mode)
    sid = m.snapshot()
    m.observe("Snarfs are afraid of purple umbrellas.", source="D2:1", time="2023-06-01", speaker="Caroline")
    after = m.ask("What are snarfs afraid of?").facts
    m.save(tmp_path / "m")
    m2 = MAGS.load(tmp_path / "m", embedder=EMB, backends={role: r for role in ("ask", "write", "answer", "router")})
    assert m2.config.memory == mode and m2.graph.equals(m.graph)
    assert m2.ask("What are snarfs afraid of?").facts == after
    if mode != "none":
        assert any("Snarfs" in f for f in after)
        assert m.graph.replayed().equals(m.graph)  # the speaker is in the log too
    m.rollback(sid)
    assert not any("Snarfs" in f for f in m.ask("What are snarfs afraid of?").facts)
