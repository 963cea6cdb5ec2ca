"""The MAGS agent: its memory loop checked against a scripted language model, then end to end on the
embedded base models (llama.cpp SmolLM2 + MiniLM).

Every input is stored twice: as an episode (its raw text) and as the write model's triplets. So a
check that only looks for the answer's words among the recalled items passes even when the write
model stores junk: the episode holds the words. The tests below say which of the two they look at.
What the agent does with the write model's triplets is checked with a scripted model whose
outputs are known (gold triplets, then junk, which must not pass). The untrained base model's
triplets are partly junk (issue 10): its quality is measured by the evaluation notebooks, not
asserted here.

One agent on the real models is built per module and observes a short story (about 25 s on 2 busy
cores, so the tests that use it are marked slow and kept on one xdist worker); the models load once.
Tests that only need the configuration use the hash embedder and never load a language model.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from fakes import TableBackend

from mags_lib import MAGS
from mags_lib import protocol as P
from mags_lib.agent import ROUTER_GRAMMAR, Answer, MAGSConfig, Observation, find_trained_model, rule_route
from mags_lib.models import ModelNotFoundError

STORY = [
    ("S1", "Blorps are small creatures that live in copper caves."),
    ("S2", "Blorps eat only frozen lemons."),
    ("S3", "Quindles live under the Teal Bridge."),
    ("S4", "Snarfs build nests out of glass straws."),
    ("S5", "The chief of the quindles is named Larrowick."),
    ("S6", "Snarfs are afraid of purple umbrellas."),
]
# question -> (source of the gold fact, a word of the gold fact that the question does not contain)
GOLD = [
    ("What do blorps eat?", "S2", "lemons"),
    ("Where do quindles live?", "S3", "teal"),
    ("What do snarfs build their nests from?", "S4", "straws"),
    ("Who is the chief of the quindles?", "S5", "larrowick"),
    ("What are snarfs afraid of?", "S6", "umbrellas"),
    ("Where do blorps live?", "S1", "copper"),
]
# what a good write model stores for each sentence, and what a broken one stores (issue 10's junk)
GOLD_TRIPLETS = {
    "S1": [("Blorps", "live in", "copper caves"), ("Blorps", "are", "small creatures")],
    "S2": [("Blorps", "eat", "frozen lemons")],
    "S3": [("Quindles", "live under", "Teal Bridge")],
    "S4": [("Snarfs", "build nests from", "glass straws")],
    "S5": [("Larrowick", "is chief of", "the quindles")],
    "S6": [("Snarfs", "are afraid of", "purple umbrellas")],
}
JUNK_TRIPLETS = {sid: [("Odels nest inside", "tarnished owls.O", "is a bird of prey.O")] for sid in GOLD_TRIPLETS}


def scripted_agent(triplets: dict[str, list], **config) -> tuple[MAGS, dict[str, TableBackend]]:
    """An agent whose write model stores ``triplets[source]`` for each story sentence (hash embedder:
    what is under test is the loop, not the embedding; the real MiniLM runs in the story tests)."""
    writes = {text: P.writes_to_text(triplets[sid]) for sid, text in STORY}
    backends = {"write": TableBackend(writes), "ask": TableBackend({"blorps eat": A_QUERY}),
                "answer": TableBackend({"What do blorps eat?": "Frozen lemons."}, default="I don't know."),
                "router": TableBackend({})}
    m = MAGS(MAGSConfig(maintain_every=0, embedder="hash", **config), backends=backends)
    for sid, text in STORY:
        m.observe(text, source=sid, time="2023-05-08")
    return m, backends


A_QUERY = "<memory_ask>blorp diet</memory_ask>"


@pytest.fixture(scope="module")
def scripted():
    return {name: scripted_agent(t) for name, t in (("gold", GOLD_TRIPLETS), ("junk", JUNK_TRIPLETS))}


# -- the memory loop, with a scripted model ----------------------------------------------------------
@pytest.mark.parametrize("question,source,word", GOLD)
def test_recall_returns_the_fact_the_write_model_stored(scripted, question, source, word):
    for writer, expected in (("gold", True), ("junk", False)):
        m, _ = scripted[writer]
        hits = m.recall(question, k=5)
        facts = [h for h in hits if h.kind == "fact" and source in h.sources
                 and word in " ".join(h.triplet).lower()]
        assert bool(facts) is expected, (writer, [(h.kind, h.text, h.sources) for h in hits])
        # the episode holding the sentence is recalled either way: it alone proves nothing of the writes
        assert any(h.kind == "episode" and source in h.sources for h in hits), writer


def test_observe_stores_the_write_models_triplets_with_their_source(scripted):
    m, backends = scripted["gold"]
    # compared after normalisation: entity resolution files "the quindles" under the node "Quindles"
    stored = {P.normalize_triplet((f["subject"], f["relation"], f["object"])): f["sources"]
              for f in m.graph.facts()}
    for sid, triplets in GOLD_TRIPLETS.items():
        for t in triplets:
            assert stored.get(P.normalize_triplet(t)) == [sid], (t, stored)
    assert len(stored) == sum(map(len, GOLD_TRIPLETS.values()))  # nothing invented, nothing lost
    # the write model decoded under the agent's grammar (at least one op when write_nonempty)
    want = m.grammar_for("write", nonempty=m.config.write_nonempty)
    assert {c["grammar"] for c in backends["write"].calls} == {want}


def test_ask_gives_the_answer_model_the_recalled_facts(scripted):
    m, backends = scripted["gold"]
    a = m.ask("What do blorps eat?")
    assert a.answer == "Frozen lemons."
    assert a.queries == ["What do blorps eat?", "blorp diet"]  # the question, then the ask model's query
    # the stored fact (the episode says "eat only"), with the date it was said (format_item)
    assert "(2023-05-08) Blorps eat frozen lemons" in a.facts
    assert a.facts == [m.render_item(it) for it in a.items] and "S2" in a.sources
    seen = backends["answer"].calls[-1]["content"]
    assert seen == m.prompt_spec("answer").messages("What do blorps eat?", facts=a.facts)[-1]["content"]
    assert seen == P.build_messages("answer", "What do blorps eat?", facts=a.facts)[-1]["content"]
    assert backends["answer"].calls[-1]["stop"] == list(m.prompt_spec("answer").stop) == ["\n"]
    assert backends["ask"].calls[-1]["grammar"] == m.grammar_for("ask")
    assert a.memory_tokens == backends["answer"].count_tokens(P.format_facts(a.facts))


def test_the_reader_sees_dated_items_oldest_first_and_undated_ones_in_their_ranked_places():
    """Recall ranks items best first; the reader is shown the dated ones oldest first (as the answer model's
    training data, mags_lib.data.answer), so the later of two values is the later line."""
    said = [("Blorps moved to Tarn Hollow.", "2023-09-02"), ("Blorps live in Pell Ridge.", "2022-01-15"),
            ("Blorps nest in copper caves.", None), ("Blorps once lived in Gale Fen.", "2023-03-30"),
            ("Blorps settled in Mossy Creek.", "2021-11-04")]
    backends = {"write": TableBackend({}), "ask": TableBackend({}), "answer": TableBackend({}, default="x"),
                "router": TableBackend({})}
    m = MAGS(MAGSConfig(maintain_every=0, embedder="hash"), backends=backends)
    for i, (text, time) in enumerate(said):
        m.observe(text, source=f"S{i}", time=time)
    a = m.ask("Where do blorps live?", k=10)
    assert a.facts == [m.render_item(it) for it in a.items] and len(a.facts) == len(said)
    ranked, _, _ = m.pack_facts(a.recall.items)
    assert sorted(ranked) == sorted(a.facts) and ranked != a.facts  # the ranking was not already in time order
    dates = [f[1:11] for f in a.facts if f.startswith("(")]
    assert dates == sorted(dates) and len(dates) == 4
    undated = "Blorps nest in copper caves."
    assert a.facts.index(undated) == ranked.index(undated)  # the undated item keeps its ranked place
    seen = backends["answer"].calls[-1]["content"]
    assert seen == P.build_messages("answer", a.question, facts=a.facts)[-1]["content"]


def test_adherence_is_the_strict_parse_of_the_raw_output():
    text = "Glimmets sing at noon."
    write = TableBackend({text: "Sure! <memory_write>Glimmets,sing at,noon</memory_write>"})
    m = MAGS(MAGSConfig(maintain_every=0, embedder="hash"), backends={"write": write})
    o = m.observe(text, source="S7")
    assert not o.extraction.adherent and o.extraction.text.startswith("Sure!")  # chatter: not adherent
    assert o.triplets == [("Glimmets", "sing at", "noon")]  # but the op is recovered and stored
    assert [f["object"] for f in m.graph.facts()] == ["noon"]
    write.default = "Nothing to store here."
    o2 = m.observe("Hmm.", source="S8")
    assert not o2.extraction.adherent and o2.triplets == [] and m.graph.node(o2.episode)["source"] == "S8"


# -- the loop on the real base models ----------------------------------------------------------------
@pytest.fixture(scope="module")
def story():
    m = MAGS.default(maintain_every=0)
    obs = [m.observe(text, source=sid, time="2023-05-08") for sid, text in STORY]
    yield m, obs
    m.close()


# -- the loop on the base models ---------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.xdist_group("agent_story")
def test_observe_builds_episode_and_facts(story):
    m, obs = story
    assert all(isinstance(o, Observation) for o in obs)
    assert m.n_observations == len(STORY)
    st = m.stats()
    assert st["n_episodes"] == len(STORY)
    for (sid, text), o in zip(STORY, obs):
        ep = m.graph.node(o.episode)
        assert ep["source"] == sid and ep["text"] == text and ep["time"] == "2023-05-08"
        # grammar-constrained write step: its output parses strictly (the grammar's language and the
        # parser agree) and every triplet it gave is stored as a fact of this episode, none elsewhere
        assert o.extraction.adherent and len(o.triplets) >= 1
        from_here = [f for f in m.graph.facts() if o.episode in f["episodes"]]
        assert len(from_here) >= 1 and all(f["sources"] == [sid] for f in from_here)


@pytest.mark.slow
@pytest.mark.xdist_group("agent_story")
def test_sources_travel_to_every_fact(story):
    m, _ = story
    facts = m.graph.facts()
    assert facts, "the write model stored no fact"
    given = {sid for sid, _ in STORY}
    for f in facts:
        assert f["sources"] and set(f["sources"]) <= given, f


@pytest.mark.slow
@pytest.mark.xdist_group("agent_story")
@pytest.mark.parametrize("question,source,word", GOLD)
def test_recall_returns_the_gold_episode_in_top5(story, question, source, word):
    # the episode (the raw sentence) is what this checks: MiniLM + graph recall rank it in the top 5.
    # Whether the untrained write model also stored a usable fact is not asserted (see the module doc).
    m, _ = story
    hits = m.recall(question, k=5)
    assert len(hits) <= 5
    text = dict(STORY)[source]
    assert [h for h in hits if h.kind == "episode" and h.sources == (source,) and h.text == text], \
        [(h.kind, h.text, h.sources) for h in hits]


@pytest.mark.slow
@pytest.mark.xdist_group("agent_story")
def test_ask_returns_answer_facts_trace(story):
    m, _ = story
    before = len(m.memory_tokens)
    a = m.ask("What do blorps eat?")
    assert isinstance(a, Answer) and isinstance(a.answer, str) and a.answer
    # the answer model was given the recalled items, in order: here the gold episode among them
    assert a.facts == [m.render_item(it) for it in a.items]
    assert any(f.endswith("Blorps eat only frozen lemons.") for f in a.facts) and "S2" in a.sources
    assert a.trace.anchors and a.queries[0] == "What do blorps eat?"
    assert 0 < a.memory_tokens <= m.config.memory_token_budget
    assert m.memory_tokens[before:] == [a.memory_tokens]
    assert set(a.timings) == {"ask", "recall", "answer"} and a.seconds > 0
    assert "\n" not in a.answer  # the answer stops at the end of its line


@pytest.mark.slow
@pytest.mark.xdist_group("agent_story")
def test_token_budget_limits_facts(story):
    m, _ = story
    items = m.graph.recall("blorps", k=10).items
    big, big_tokens, _ = m.pack_facts(items, budget=10_000)
    small, small_tokens, used = m.pack_facts(items, budget=40)
    assert len(small) < len(big) and small == big[: len(small)]
    assert small_tokens <= 40 < big_tokens and len(used) == len(small)
    assert m.pack_facts(items, budget=1)[:2] == ([], 0)


@pytest.mark.slow
@pytest.mark.xdist_group("agent_story")
def test_extract_returns_ops(story):
    m, _ = story
    ops = m.extract("Trolls guard the Iron Gate.", role="write")
    assert ops and all(isinstance(op, P.Op) and op.role == "write" and op.triplet for op in ops)
    asks = m.extract("Who guards the Iron Gate?", role="ask")
    assert all(op.role == "ask" for op in asks)
    free = m.extract_many(["Trolls guard the Iron Gate."], role="write", grammar=False)[0]
    assert free.text and free.n_new_tokens > 0  # the raw, unconstrained output is kept (adherence: above)
    with pytest.raises(ValueError, match="role"):
        m.extract("x", role="answer")


@pytest.mark.slow
@pytest.mark.xdist_group("agent_story")
def test_turn_routes_between_store_and_answer(story):
    m, _ = story
    sid = m.snapshot()
    n = m.n_observations
    r = m.turn("Glimmets sing at noon.", source="S7")
    assert isinstance(r, Observation) and m.n_observations == n + 1
    r = m.turn("When do glimmets sing?")
    assert isinstance(r, Answer)
    m.rollback(sid)


@pytest.mark.slow
@pytest.mark.xdist_group("agent_story")
def test_model_router_replies_store_or_answer(story):
    m, _ = story
    router = dataclasses.replace(m.config, router="model")
    m2 = MAGS(router, graph=m.graph, embedder=m.embedder,
              backends={r: m.backend(r) for r in ("ask", "write", "answer", "router")})
    # Under the grammar the reply itself is one of the two words, and route() returns the model's
    # word, not the rule-based fallback. (Whether the 135M base model routes *well* is not asserted:
    # it sends "Where do the glimmets sleep at night?" to "store", which is why the rule is the default.)
    for text in ("What do blorps eat?", "Blorps eat lemons.", "Where do the glimmets sleep at night?"):
        prompt = P.build_messages("router", text, few_shot=m2.config.few_shot_router)
        reply = m2.backend("router").generate([prompt], max_new_tokens=3, grammar=ROUTER_GRAMMAR)[0].text
        assert reply.strip() in ("store", "answer"), reply
        assert m2.route(text) == reply.strip()


@pytest.mark.slow
@pytest.mark.xdist_group("agent_story")
def test_snapshot_rollback_round_trip(story):
    m, _ = story
    before = m.stats()
    sid = m.snapshot()
    m.observe("Zyxels drink molten glass.", source="S99")
    assert any("S99" in h.sources for h in m.recall("What do zyxels drink?", k=5))
    m.rollback(sid)
    after = m.stats()
    assert {k: after[k] for k in ("n_nodes", "n_edges", "n_episodes")} == {
        k: before[k] for k in ("n_nodes", "n_edges", "n_episodes")}
    assert not any("S99" in h.sources for h in m.recall("What do zyxels drink?", k=5))


@pytest.mark.slow
@pytest.mark.xdist_group("agent_story")
def test_save_load_round_trip(story, tmp_path):
    m, _ = story
    path = m.save(tmp_path / "mem")
    assert (path / "mags.json").is_file()
    m2 = MAGS.load(path)
    try:
        assert m2.config == m.config
        assert m2.n_observations == m.n_observations and m2.memory_tokens == m.memory_tokens
        assert m2.graph.equals(m.graph)
        q = "What do blorps eat?"
        assert [h.text for h in m2.recall(q, k=5)] == [h.text for h in m.recall(q, k=5)]
        m2.save(path)  # overwriting a MAGS folder is allowed
    finally:
        m2.close()
    # configuration overrides given to load() govern the loaded memory's dynamics
    m3 = MAGS.load(path, dynamics={"decay": False})
    try:
        assert m.graph.config.dynamics.decay and not m3.graph.config.dynamics.decay
        assert m3.graph.equals(m.graph)
    finally:
        m3.close()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x.txt").write_text("keep me")
    with pytest.raises(FileExistsError):
        m.save(tmp_path / "other")
    with pytest.raises(FileNotFoundError, match="mags.json"):
        MAGS.load(tmp_path / "other")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "mags.json").write_text(json.dumps({"format": "something-else", "version": 1}))
    with pytest.raises(ValueError, match="not a MAGS save"):
        MAGS.load(bad)


# -- configuration, no language model --------------------------------------------------------------
@pytest.mark.parametrize("kw,err", [
    ({"backend": "tensorrt"}, ValueError),          # unknown backend
    ({"router": "oracle"}, ValueError),             # unknown router
    ({"models": "finetuned"}, ValueError),          # models is base | trained
    ({"recall_k": 0}, ValueError),                  # k >= 1
    ({"memory_token_budget": 0}, ValueError),       # budget >= 1
    ({"dynamics": {"teleport": True}}, ValueError),  # unknown dynamics switch
    ({"dynamics": "on"}, TypeError),                # a string is no switch set
    ({"answer_stop": "\n"}, TypeError),             # a sequence of strings, not a string
])
def test_config_rejects_bad_values(kw, err):
    with pytest.raises(err):
        MAGSConfig(**kw)


def test_dynamics_switches_map_to_graph_config():
    off = MAGSConfig(dynamics=False).graph_config().dynamics
    assert not any([off.hebbian, off.decay, off.game_of_life, off.prune])
    one = MAGSConfig(dynamics={"game_of_life": False}).graph_config().dynamics
    assert not one.game_of_life and one.decay
    only = MAGSConfig(dynamics=["decay"]).graph_config().dynamics
    assert only.decay and not only.hebbian
    cfg = MAGSConfig(dynamics={"prune": False}, answer_stop=["\n"])
    assert MAGSConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg


@pytest.mark.parametrize("text,route", [
    ("Blorps eat frozen lemons.", "store"),        # statement
    ("What do blorps eat?", "answer"),             # wh-question
    ("do blorps eat lemons", "answer"),            # auxiliary first, no question mark
    ("Tell me where quindles live", "answer"),     # request
    ("Where I live, it rains a lot.", "store"),    # wh-word opening a statement
    ("I wonder what blorps eat?", "answer"),       # question mark wins
])
def test_rule_router(text, route):
    assert rule_route(text) == route


def test_trained_models_missing_is_a_clear_error(tmp_path):
    with pytest.raises(ModelNotFoundError, match="20_train_ask_write"):
        MAGS.default(models="trained", models_root=str(tmp_path), embedder="hash")


def test_find_trained_model_resolves_by_run_tag(tmp_path):
    """The layout and the never-mix-tags rule are tested in tests/test_training_layout.py."""
    run = tmp_path / "write" / "run2"
    (run / "sft").mkdir(parents=True)
    (run / "sft" / "adapter_config.json").write_text("{}")
    (run / "meta.json").write_text(json.dumps({"format": "mags-trained-model", "final_stage": "sft"}))
    assert find_trained_model("write", run_tag="run2", backend="transformers", models_root=tmp_path) == run / "sft"
    with pytest.raises(ModelNotFoundError, match="no trained ask model"):
        find_trained_model("ask", run_tag="run2", models_root=tmp_path)


def test_empty_input_is_rejected_before_any_model_call():
    m = MAGS.default(embedder="hash")
    try:
        with pytest.raises(ValueError, match="empty"):
            m.observe("   ")
        with pytest.raises(TypeError):
            m.ask(None)  # type: ignore[arg-type]
        assert m._owned == []  # no backend was loaded
    finally:
        m.close()


@pytest.mark.slow
def test_inference_benchmark_writes_its_json(tmp_path):
    """The benchmark CLI's ``run`` on tiny sizes: every figure present, grammar adherence 100%."""
    from mags_lib.bench.inference import run

    out = tmp_path / "inference.json"
    res = run(out=out, threads=1, max_new_tokens=4, n_prompts=1, n_story=2, n_questions=1, n_adherence=2,
              backends=("llamacpp",), embedder="hash", n_constrained=3, constrained_max_new_tokens=12,
              n_parallel=(1, 2))
    saved = json.loads(out.read_text())
    assert saved["summary"] == json.loads(json.dumps(res["summary"]))
    s = saved["summary"]
    assert s["llamacpp_tokens_per_s"] > 0 and s["transformers_tokens_per_s"] is None
    assert s["observe_p50_s"] > 0 and s["ask_p95_s"] >= s["ask_p50_s"] > 0
    assert s["adherence_agent_grammar"] == 1.0 and 0.0 <= s["adherence_no_grammar"] <= 1.0
    assert saved["meta"]["params"]["threads"] == 1 and saved["targets_met"]["adherence_with_grammar"]
    # the backend's own decoding loop is llama-cpp-python's completion, token for token, one prompt at a time
    assert s["write_grammar_equal_to_reference_n_parallel_1"] == 1.0
    assert s["write_grammar_tokens_per_s_reference"] > 0 and s["write_grammar_tokens_per_s_n_parallel_2"] > 0
    assert saved["constrained_decoding"]["n_prompts"] == 3
