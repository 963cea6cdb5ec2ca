"""The agent's turns and the memory's bounds (issue 9, items 3, 4, 10 and 12).

A scripted backend stands in for the language model where the model's words do not matter; the
gibberish test runs the real embedded SmolLM2 through llama.cpp (``n_threads=1``).
"""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import numpy as np
import pytest
from reliability_support import EMB, ScriptedBackend, scripted_agent

from mags_lib.agent import MAGS, MAGSConfig
from mags_lib.embed import HashEmbedder
from mags_lib.graph import GraphConfig, LimitsConfig, LiquidGraph
from mags_lib.graph.core import _state_differences

WRITE = "<memory_write>blorps,eat,frozen lemons</memory_write><memory_write>blorps,live in,caves</memory_write>"


def footprint(m: MAGS) -> tuple:
    return (m.graph._state(), list(m.graph.oplog), m._turn, m.n_observations,
            {k: list(v) for k, v in m.latencies.items()}, len(m.graph.recall("blorps", k=5,
            config=dataclasses.replace(m.graph.config.recall, touch=False, coactivation=False)).items))


def same(a: tuple, b: tuple) -> bool:
    return _state_differences(a[0], b[0]) == [] and a[1:] == b[1:]


# -- item 3: a turn applies whole or not at all --------------------------------------------------------
def test_failed_model_call_leaves_no_trace():
    m = scripted_agent([WRITE])
    m.observe("Blorps eat frozen lemons.", source="S1")
    before = footprint(m)
    m._role_backend["write"] = ScriptedBackend([], fail=ValueError("prompt does not fit n_ctx (28000 tokens)"))
    with pytest.raises(ValueError, match="n_ctx"):
        m.observe("a very long input " * 100, source="S2")
    assert same(before, footprint(m))
    assert all("very long" not in it.text for it in m.recall("very long input", k=10))


class FailingEmbedder(HashEmbedder):
    """Fails on the n-th encode call."""

    def __init__(self, fail_at: int):
        super().__init__(dim=32)
        self.fail_at, self.calls = fail_at, 0

    def encode(self, texts):
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError("embedder crashed")
        return super().encode(texts)


def test_failing_engram_rolls_back_the_episode():
    emb = FailingEmbedder(fail_at=10 ** 9)
    b = ScriptedBackend([WRITE, "<memory_write>blorps,fear,purple umbrellas</memory_write>"])
    m = MAGS(MAGSConfig(embedder="hash"), embedder=emb, backends={r: b for r in ("ask", "write", "answer", "router")})
    m.observe("Blorps eat frozen lemons.", source="S1")
    before = footprint(m)
    emb.fail_at = emb.calls + 2  # the episode's text encodes, the triplets' do not
    with pytest.raises(RuntimeError, match="embedder crashed"):
        m.observe("Blorps fear purple umbrellas.", source="S2")
    emb.fail_at = 10 ** 9
    assert same(before, footprint(m))
    # the next turn works and the turn numbering goes on as if the failure never happened
    o = m.observe("Blorps fear purple umbrellas.")
    assert o.source == "T2" and m.n_observations == 2


def test_failing_maintain_inside_a_turn_rolls_back(monkeypatch):
    m = scripted_agent([WRITE], maintain_every=2)
    m.observe("Blorps eat frozen lemons.", source="S1")
    before = footprint(m)
    from mags_lib.graph import dynamics

    real = dynamics.STEPS["prune"]

    def broken(g, cfg=None):
        real(g, cfg)
        g.edges.strength[:] = 0.5  # damage, then fail
        raise MemoryError("out of memory in prune")
    monkeypatch.setitem(dynamics.STEPS, "prune", broken)
    with pytest.raises(MemoryError):
        m.observe("Blorps live in caves.", source="S2")
    assert same(before, footprint(m))


class FailOnAnswer(ScriptedBackend):
    def generate(self, prompts, **kw):
        if any("Question:" in m["content"] for p in prompts for m in p if isinstance(p, list)):
            raise RuntimeError("answer model crashed")
        return super().generate(prompts, **kw)


def test_failed_ask_leaves_no_trace():
    m = scripted_agent([WRITE])
    m.observe("Blorps eat frozen lemons.", source="S1")
    m._role_backend["answer"] = FailOnAnswer(["lemons"])
    before = footprint(m), m.n_asks, list(m.memory_tokens)
    with pytest.raises(RuntimeError, match="answer model crashed"):
        m.ask("What do blorps eat?")
    assert same(before[0], footprint(m)) and (m.n_asks, m.memory_tokens) == before[1:]


def test_invalid_text_is_refused_before_anything():
    m = scripted_agent([WRITE])
    before = footprint(m)
    for bad in (None, 12, b"bytes", "   "):
        with pytest.raises((TypeError, ValueError)):
            m.observe(bad)
    assert same(before, footprint(m))


def test_transaction_restores_everything_on_error():
    g = LiquidGraph(EMB, config=GraphConfig(limits=LimitsConfig(max_oplog_ops=3)))
    ep = g.add_episode("x y", source="s")
    g.engram([("a", "r", "b")], episode=ep)
    sid = g.snapshot()
    st, log, base = g._state(), list(g.oplog), g.oplog_base
    with pytest.raises(KeyError), g.transaction():
        g.engram([("a", "r", "c"), ("b", "likes", "d")], source="s2")  # invalidates a->b
        g.recall("a", k=3)
        g.maintain()
        g.add_episode("more", source="s3")  # folds the log into a new base (limit 3)
        raise KeyError("boom")
    assert _state_differences(st, g._state()) == [] and g.oplog == log and g.oplog_base is base
    assert g.snapshots == [sid]
    h = LiquidGraph.replay(g.oplog, EMB, config=g.config, base=g.oplog_base)
    assert h.equals(g)


# -- item 4: packing skips an item over budget --------------------------------------------------------
def item(text):
    return SimpleNamespace(text=text, sources=("S",))


def test_pack_facts_skips_an_item_over_budget_and_keeps_filling():
    m = scripted_agent([])
    long = item("word " * 400)
    facts, tokens, used = m.pack_facts([long, item("blorps eat lemons"), item("quindles live under bridges")],
                                       budget=30)
    assert facts == ["blorps eat lemons", "quindles live under bridges"]
    assert used[0].text == "blorps eat lemons" and 0 < tokens <= 30
    assert m.pack_facts([long, item("short one")], budget=30)[0] == ["short one"]


# -- item 10: nothing to store stores nothing ----------------------------------------------------------
def test_ungrounded_triplets_are_not_stored():
    m = scripted_agent([("<memory_write>Odalie,is sister of,me</memory_write>"
                         "<memory_write>blorps,eat,lemons</memory_write>")])
    o = m.observe("Blorps eat frozen lemons.", source="S1")
    assert o.triplets == [("blorps", "eat", "lemons")] and o.dropped == [("Odalie", "is sister of", "me")]
    assert [f["subject"] for f in m.graph.facts()] == ["blorps"]
    m2 = scripted_agent(["<memory_write>Odalie,is sister of,me</memory_write>"], write_grounding=False)
    assert m2.observe("zzz qqq", source="S1").triplets == [("Odalie", "is sister of", "me")]


def test_write_nonempty_defaults_to_false_and_the_grammar_allows_zero_ops():
    c = MAGSConfig(embedder="hash")
    assert c.write_nonempty is False
    m = scripted_agent([""])
    gram = m.grammar_for("write", nonempty=c.write_nonempty)
    assert gram.startswith("root ::= (op") and gram.split("\n")[0].endswith("?")
    o = m.observe(bytes(range(256)).decode("latin-1"), source="G")
    assert o.triplets == [] and m.graph.facts() == []


@pytest.mark.slow
def test_base_model_stores_no_gibberish_but_stores_statements():
    """The embedded SmolLM2 (llama.cpp, grammar, default config): about 15 s on one thread."""
    m = MAGS.default(embedder="hash", n_threads=1, maintain_every=0)
    try:
        gib = m.observe(bytes(range(256)).decode("latin-1"), source="G1")  # the input of the issue
        gib2 = m.observe("?!?! ... ~~~ ### %%% ;;; !!!", source="G2")
        assert gib.triplets == [] and gib2.triplets == [], (gib.extraction.text, gib2.extraction.text)
        assert m.graph.facts() == []
        stored = [m.observe(t, source=f"S{i}") for i, t in enumerate([
            "Blorps eat only frozen lemons.",
            "Quindles live under the Teal Bridge.",
            "My brother Tomas works as a chef in Madrid.",
        ])]
        assert all(o.triplets for o in stored), [o.extraction.text for o in stored]
        assert {f["sources"][0] for f in m.graph.facts()} == {"S0", "S1", "S2"}
    finally:
        m.close()


# -- item 12: bounds -------------------------------------------------------------------------------------
def busy_graph(n_facts=60, **limits) -> LiquidGraph:
    g = LiquidGraph(HashEmbedder(dim=64), config=GraphConfig(limits=LimitsConfig(**limits)))
    for i in range(n_facts):
        ep = g.add_episode(f"fact {i}", source=f"S{i}")
        g.engram([(f"thing {i % 17}", f"rel {i % 5}", f"value {i}")], episode=ep)
    return g


def test_snapshots_are_bounded_in_count_and_bytes():
    g = busy_graph(max_snapshots=3)
    sids = [g.snapshot() for _ in range(5)]
    assert g.snapshots == sids[2:]
    with pytest.raises(KeyError, match="dropped"):
        g.rollback(sids[0])
    g.rollback(sids[2])
    one = g.snapshot_nbytes() // 3  # the three snapshots are of the same state
    g2 = busy_graph(max_snapshots=None, max_snapshot_bytes=one * 2)
    for _ in range(10):
        g2.snapshot()
    assert len(g2.snapshots) == 2 and g2.snapshot_nbytes() <= one * 2
    g3 = busy_graph(max_snapshots=None, max_snapshot_bytes=1)
    sid = g3.snapshot()
    assert g3.snapshots == [sid]  # the newest always stays


def test_snapshot_shares_the_embedding_matrix():
    g = busy_graph()
    sid = g.snapshot()
    snap = g._snapshots[sid]
    assert np.shares_memory(snap["emb"], g._emb)  # no copy of the embeddings
    numeric = sum(a.nbytes for part in ("nodes", "edges") for a in snap[part]["arrays"].values())
    assert g.snapshot_nbytes() < numeric + snap["emb"].nbytes
    g.add_episode("one more", source="X")  # writes a new row only
    g.rollback(sid)
    h = busy_graph()
    assert g.equals(h)


def test_mags_drop_snapshot():
    m = scripted_agent([WRITE])
    sid = m.snapshot()
    m.drop_snapshot(sid)
    assert sid not in m.graph.snapshots
    with pytest.raises(KeyError, match="was dropped"):
        m.drop_snapshot(sid)
    with pytest.raises(KeyError, match="unknown snapshot"):
        m.drop_snapshot("nope")


def test_recall_log_entries_are_compact():
    g = busy_graph()
    g.recall("thing 3", k=3)
    assert set(g.oplog[-1]) == {"op", "query", "k"}  # the embedder recomputes the query: text only
    assert len(json.dumps(g.oplog[-1])) < 80
    n = len(g.oplog)
    g.recall("nothing matches zzqx", k=3, config=dataclasses.replace(g.config.recall, min_anchor_similarity=0.99))
    assert len(g.oplog) == n  # a recall that changed nothing is not logged
    r = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    r /= np.linalg.norm(r)
    g.recall("thing 5", k=3, query_embeddings=r, config=dataclasses.replace(g.config.recall, n_anchors=2))
    entry = g.oplog[-1]
    assert entry["config"] == {"n_anchors": 2}  # only what differs from the defaults
    # given embeddings (not recomputable from the text) are kept exactly, as base64 float32
    assert len(json.dumps(entry)) < 64 * 4 * 4 / 3 + 150
    assert len(json.dumps(entry)) < len(json.dumps(r.tolist())) / 2
    h = LiquidGraph.replay(g.oplog, g.embedder, config=g.config)
    assert h.equals(g)


def test_oplog_is_bounded_and_replay_still_works(tmp_path):
    g = busy_graph(n_facts=40, max_oplog_ops=25)
    for i in range(30):
        g.recall(f"thing {i % 17}", k=3)
    g.maintain()
    assert len(g.oplog) <= 25 and g.oplog_base is not None
    assert LiquidGraph.replay(g.oplog, g.embedder, config=g.config, base=g.oplog_base).equals(g)
    h = LiquidGraph.load(g.save(tmp_path / "g"), g.embedder)
    assert h.equals(g) and h.oplog == g.oplog
    assert LiquidGraph.replay(h.oplog, h.embedder, config=h.config, base=h.oplog_base).equals(g)


def test_coactivation_list_is_bounded_without_maintain():
    g = busy_graph(max_coactivation=50)
    for i in range(200):
        g.recall([f"thing {i % 17}", f"value {i % 60}", f"thing {(i + 5) % 17}"], k=6)
    assert 0 < len(g._coact) <= 50


def test_limits_config_checks_and_round_trips():
    for bad in ({"max_snapshots": 0}, {"max_snapshot_bytes": -1}, {"max_oplog_ops": 0},
                {"max_coactivation": -1}, {"max_snapshots": 2.5}):
        with pytest.raises((ValueError, TypeError)):
            LimitsConfig(**bad)
    c = GraphConfig(limits=LimitsConfig(max_snapshots=5))
    assert GraphConfig.from_dict(c.to_dict()) == c
    assert GraphConfig.from_dict({k: v for k, v in c.to_dict().items() if k != "limits"}) == GraphConfig()


def test_limits_benchmark_measures_every_bound(tmp_path):
    from mags_lib.bench import limits

    res = limits.run(n_nodes=30, n_snapshots=36, n_recalls=60, oplog_cap=20, coact_cap=30, out_dir=tmp_path,
                     progress=False)
    snap = res["snapshots"]
    assert snap["default_limits"]["kept"] == LimitsConfig().max_snapshots < snap["unbounded"]["kept"] == 36
    assert snap["default_limits"]["bytes"] < snap["unbounded"]["bytes"] < snap["full_copy"]["bytes"]
    entry = res["recall_entry"]
    assert entry["text_only_bytes"] < 100 < entry["with_embeddings_bytes"] < entry["embedding_as_json_list_bytes"]
    log = res["oplog_and_coactivation"]
    assert log["unbounded"]["oplog_entries"] == 60 and not log["unbounded"]["oplog_folded"]
    assert log["bounded"]["oplog_entries"] <= 20 and log["bounded"]["oplog_folded"]
    assert log["bounded"]["oplog_bytes"] < log["unbounded"]["oplog_bytes"]
    assert log["bounded"]["coactivation_pairs"] <= 30 < log["unbounded"]["coactivation_pairs"]
    assert log["bounded"]["replay_from_base_equals_live"] is True
    assert json.loads((tmp_path / "limits.json").read_text()) == res and res["meta"]["params"]["n_nodes"] == 30
