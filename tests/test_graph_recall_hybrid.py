"""Hybrid recall (issue 13): anchors that scale with k, BM25 beside the cosine, episode context,
and a lexical index that is the same live, saved, loaded, replayed and compacted."""

from dataclasses import replace

import numpy as np
import pytest

from mags_lib.embed import HashEmbedder
from mags_lib.graph import DynamicsConfig, GraphConfig, IndexConfig, LiquidGraph, RecallConfig, TableEmbedder
from mags_lib.graph.lexical import LexicalIndex, tokenize

QUIET = RecallConfig(touch=False, coactivation=False)  # recall that changes nothing
LEGACY = replace(QUIET, anchors_per_k=0, lexical_weight=0.0, episode_context=0.0)


def _unit(v):
    v = np.asarray(v, dtype=np.float64)
    return v / np.linalg.norm(v)


def _near(q, rng, cos):
    """A unit vector at cosine ``cos`` to unit vector ``q``."""
    r = rng.standard_normal(q.size)
    r = _unit(r - (r @ q) * q)
    return cos * q + np.sqrt(1 - cos**2) * r


def _dialogue(seed, query, turns, cos, dim=64):
    """A graph of one episode per ``(speaker, text)`` turn (sources ``D1:<i>``) whose rendered turn is
    at cosine ``cos[i]`` to ``query`` (random vectors drawn in turn order from ``seed``)."""
    rng = np.random.default_rng(seed)
    q = _unit(rng.standard_normal(dim))
    table = {query: q, **{f"{s}: {t}": _near(q, rng, c) for (s, t), c in zip(turns, cos)}}
    g = LiquidGraph(TableEmbedder(table, dim=dim))
    for i, (s, t) in enumerate(turns):
        g.add_episode(t, source=f"D1:{i}", speaker=s)
    return g


# ------------------------------------------------------------------------------------------------
def test_k_is_honoured_on_a_memory_of_episodes():
    """30 episodes, no edges: k items come back for every k (the old recall gave its 4 anchors)."""
    g = LiquidGraph(HashEmbedder(dim=64))
    for i in range(30):
        g.add_episode(f"turn {i}: we talked about the garden and the weather, part {i}", source=f"D1:{i}")
    for k in (1, 5, 10, 25):
        items = g.recall("what did we say about the garden", k=k, config=QUIET).items
        assert len(items) == k and len({it.sources for it in items}) == k
    assert len(g.recall("what did we say about the garden", k=10, config=LEGACY).items) == 4
    # the anchors scale with k, at least n_anchors
    assert len(g.recall("garden", k=10, config=QUIET).trace.anchors) == 10
    assert len(g.recall("garden", k=2, config=QUIET).trace.anchors) == QUIET.n_anchors
    assert len(g.recall("garden", k=10, config=replace(QUIET, anchors_per_k=0.5)).trace.anchors) == 5


def test_a_rare_name_the_embedder_misses_is_found_by_the_lexical_score():
    """Episodes: five turns the embedder puts near the query, and the one that names Zbigniew at
    cosine 0.3; hybrid recall ranks it first, cosine alone last."""
    rng = np.random.default_rng(0)
    dim = 64
    q = _unit(rng.standard_normal(dim))
    query = "Where does Zbigniew keep the boat?"
    target = "Zbigniew: the boat sleeps in the shed by the lake."
    table = {query: q, target: _near(q, rng, 0.3)}
    others = [f"Anna: we went out on day {i} and it rained." for i in range(5)]
    for i, t in enumerate(others):
        table[t] = _near(q, rng, 0.8 - 0.1 * i)
    emb = TableEmbedder(table, dim=dim)
    g = LiquidGraph(emb)
    for i, t in enumerate([target, *others]):
        speaker, text = t.split(": ", 1)
        # the table holds "<speaker>: <text>", what the graph embeds for an episode with a speaker
        g.add_episode(text, source=f"D1:{i}", speaker=speaker)
    hybrid = g.recall(query, k=2, config=QUIET).items
    assert hybrid[0].sources == ("D1:0",)
    dense = g.recall(query, k=2, config=replace(QUIET, lexical_weight=0.0)).items
    assert "D1:0" not in {s for it in dense for s in it.sources}
    cosine_alone = replace(QUIET, lexical_weight=0.0, episode_context=0.0)  # (its neighbour would lift it)
    assert g.recall(query, k=6, config=cosine_alone).items[-1].sources == ("D1:0",)
    # IndexConfig(lexical=False): no index is kept and recall is the cosine's
    off = LiquidGraph(emb, config=GraphConfig(index=IndexConfig(lexical=False)))
    for i, t in enumerate([target, *others]):
        speaker, text = t.split(": ", 1)
        off.add_episode(text, source=f"D1:{i}", speaker=speaker)
    assert len(off._ep_lex) == 0
    assert [it.sources for it in off.recall(query, k=2, config=QUIET).items] == [it.sources for it in dense]


def test_a_rare_entity_anchors_its_facts():
    """Facts: thirty entities the embedder puts nearer the query than Zbigniew; only the BM25 top
    list makes him a candidate, so only hybrid recall reaches his fact."""
    rng = np.random.default_rng(1)
    dim = 64
    q = _unit(rng.standard_normal(dim))
    query = "What does Zbigniew collect?"
    table = {query: q, "Zbigniew": _near(q, rng, 0.0)}
    trips = [("Zbigniew", "collects", "tin soldiers")]
    for i in range(30):
        name = f"person{i}"
        table[name] = _near(q, rng, 0.7 - 0.01 * i)
        trips.append((name, "likes", f"thing{i}"))
    emb = TableEmbedder(table, dim=dim)
    g = LiquidGraph(emb, config=GraphConfig(recall=replace(QUIET, include_episodes=False)))
    g.engram(trips, source="D1:1")
    hybrid = [it.text for it in g.recall(query, k=3).items]
    assert hybrid[0] == "Zbigniew collects tin soldiers"
    dense = [it.text for it in g.recall(query, k=3, config=replace(g.config.recall, lexical_weight=0.0)).items]
    assert "Zbigniew collects tin soldiers" not in dense


def test_episode_context_lifts_the_reply_to_a_question():
    """The answer turn says nothing the query says; the turn before it asks the question. With
    context (the turns just before and after: ``episode_window=1``) the reply is lifted into the top
    2; alone it ranks last of 37 turns."""
    query = "the puppy's name"
    turns = [("Gina", "What did you call the new puppy?"), ("Jon", "We went with Rex."),
             ("Gina", "My store opened on Monday."), ("Jon", "I found a dance studio."),
             ("Gina", "The jackets sold out."), ("Jon", "Tea or coffee?"), ("Gina", "Lovely weather today.")]
    cos = [0.9, 0.05, 0.5, 0.45, 0.4, 0.35, 0.45]
    # 30 more turns nearer the query than the reply: it is in neither top list of 16 candidates
    # (k = 2: 4 anchors), only a neighbour of one
    turns += [("Jon" if i % 2 else "Gina", f"Small talk number {i}.") for i in range(30)]
    cos += [0.1 + 0.01 * i for i in range(30)]
    g = _dialogue(2, query, turns, cos)
    one = replace(QUIET, episode_window=1)
    with_context = [it.sources[0] for it in g.recall(query, k=2, config=one).items]
    assert with_context == ["D1:0", "D1:1"]
    alone_items = g.recall(query, k=37, config=replace(QUIET, episode_context=0.0)).items
    alone = [it.sources[0] for it in alone_items]
    assert alone[0] == "D1:0" and alone[-1] == "D1:1"
    # context lifts and never lowers: every score with context is at least the one without
    b = {it.sources[0]: it.score for it in alone_items}
    for cfg in (one, QUIET):
        a = {it.sources[0]: it.score for it in g.recall(query, k=37, config=cfg).items}
        assert all(a[s] >= b[s] - 1e-12 for s in b)


def test_episode_window_reaches_a_reply_two_turns_on():
    """The reply comes two turns after the question (an aside between them): the default window
    (two turns either way) lifts it into the top 3; the turns just before and after do not reach it,
    and it ranks below turns that are only a little relevant."""
    query = "the puppy's name"
    turns = [("Gina", "What did you call the new puppy?"), ("Jon", "Sorry, one second, the doorbell."),
             ("Jon", "We went with Rex."), ("Gina", "My store opened on Monday."), ("Jon", "I found a studio."),
             ("Gina", "The jackets sold out."), ("Jon", "Tea or coffee?")]
    cos = [0.9, 0.05, 0.05, 0.3, 0.25, 0.25, 0.2]
    turns += [("Jon" if i % 2 else "Gina", f"Small talk number {i}.") for i in range(30)]
    cos += [0.1 + 0.004 * i for i in range(30)]
    g = _dialogue(3, query, turns, cos)
    assert QUIET.episode_window == 2
    assert [it.sources[0] for it in g.recall(query, k=3, config=QUIET).items] == ["D1:0", "D1:1", "D1:2"]
    one = [it.sources[0] for it in g.recall(query, k=37, config=replace(QUIET, episode_window=1)).items]
    assert one[:2] == ["D1:0", "D1:1"] and one.index("D1:2") > 5


def test_the_speaker_is_part_of_an_episode_s_lexical_document():
    """Two turns with the same words and the same cosine; the query names one speaker."""
    rng = np.random.default_rng(4)
    q = _unit(rng.standard_normal(64))
    v = _near(q, rng, 0.5)
    query = "What did Gina say about the jackets?"
    g = LiquidGraph(TableEmbedder({query: q, "Jon: The jackets sold out.": v, "Gina: The jackets sold out.": v}, dim=64))
    g.add_episode("The jackets sold out.", source="D1:1", speaker="Jon")
    g.add_episode("The jackets sold out.", source="D1:2", speaker="Gina")
    hybrid = g.recall(query, k=2, config=QUIET).items
    assert [it.sources[0] for it in hybrid] == ["D1:2", "D1:1"] and hybrid[0].score > hybrid[1].score
    assert len({it.score for it in g.recall(query, k=2, config=LEGACY).items}) == 1  # by cosine: a tie


# ------------------------------------------------------------------------------------------------
def _items(res):
    return [(it.kind, it.text, round(it.score, 12), it.sources, it.path) for it in res.items]


QUERIES = ["What does Gina's store sell?", "Jon's dance studio", "Biscuit the dog", "what about the park"]


def _memory():
    """Episodes with speakers and facts, recalls that touch, maintenance that prunes idle episodes
    (so the live lexical index holds dead postings), then more turns."""
    dyn = DynamicsConfig(inactive_ticks=2, keep_evidence=False, keep_unconsolidated=False)
    g = LiquidGraph(HashEmbedder(dim=128), config=GraphConfig(dynamics=dyn), seed=0)
    turns = [("Jon", "I lost my job as a banker last week."),
             ("Gina", "I just opened an online clothing store."),
             ("Jon", "I always wanted to open a dance studio."),
             ("Gina", "My store sells vintage jackets and scarves."),
             ("Jon", "I found a space for the dance studio downtown."),
             ("Gina", "My dog Biscuit loves the park near the store.")]
    for i, (s, t) in enumerate(turns * 3):
        ep = g.add_episode(t if i < 6 else f"{t} (again, {i})", source=f"D{i // 6 + 1}:{i % 6}", speaker=s)
        if i % 3 == 0:
            g.engram([(s, "said", t.split()[-1].strip("."))], episode=ep)
        if i % 4 == 3:
            g.recall(QUERIES[i % len(QUERIES)], k=5)
            g.maintain()
    return g


def test_recall_is_the_same_live_saved_loaded_replayed_and_compacted(tmp_path):
    g = _memory()
    assert g.stats()["n_episodes"] < 18  # maintenance removed some: their postings are dead
    live = {q: _items(g.recall(q, k=k, config=QUIET)) for q in QUERIES for k in (3, 10)}
    loaded = LiquidGraph.load(g.save(tmp_path / "mem"), g.embedder)
    replayed = g.replayed()
    compacted = g.copy()
    compacted.compact()
    for other in (loaded, replayed, compacted):
        assert {q: _items(other.recall(q, k=k, config=QUIET)) for q in QUERIES for k in (3, 10)} == live
    # rollback rebuilds the index too
    sid = g.snapshot()
    g.add_episode("Gina: the store also sells hats now.", source="D9:1")
    g.rollback(sid)
    assert {q: _items(g.recall(q, k=k, config=QUIET)) for q in QUERIES for k in (3, 10)} == live


def test_lexical_index_incremental_equals_rebuilt():
    rng = np.random.default_rng(3)
    words = ["boat", "lake", "shed", "zbigniew", "rain", "garden", "store", "jacket", "scarf", "dog"]
    docs = {i: " ".join(rng.choice(words, rng.integers(1, 8))) for i in range(60)}
    live = LexicalIndex(docs.__getitem__)
    alive = set()
    for i in range(60):
        live.add([i])
        alive.add(i)
        if i % 7 == 6:
            dead = sorted(alive)[:: 3]
            live.remove(dead)
            alive -= set(dead)
            live.scores("boat lake", 64)  # a search between changes: postings flushed and pruned lazily
    rebuilt = LexicalIndex(docs.__getitem__)
    rebuilt.add(sorted(alive))
    for query in ("boat lake", "Zbigniew's garden", "dogs and scarves", "nothing here"):
        a, b = live.scores(query, 64, 1.2, 0.5), rebuilt.scores(query, 64, 1.2, 0.5)
        assert (a is None) == (b is None)
        if a is not None:
            assert np.array_equal(a, b) and not a[sorted(set(range(60)) - alive)].any()
    assert len(live) == len(rebuilt) == len(alive)


def test_lexical_top_breaks_ties_by_row():
    ix = LexicalIndex(lambda r: "")
    scores = np.array([0.0, 2.0, 1.0, 2.0, 1.0, 1.0, 0.0, 3.0])
    rows, vals = ix.top(scores, 4)
    assert rows.tolist() == [7, 1, 3, 2] and vals.tolist() == [3.0, 2.0, 2.0, 1.0]
    assert ix.top(scores, 20)[0].tolist() == [7, 1, 3, 2, 4, 5]  # positive scores only
    assert ix.top(None, 3)[0].size == 0
    assert tokenize("The boats were running", "en") == ["boat", "were", "run"]
    assert tokenize("What were you running for?") == ["run"]  # the default list drops question words too


def test_recall_config_checks():
    with pytest.raises(ValueError, match="lexical_stopwords"):
        IndexConfig(lexical_stopwords="fr")
    for bad in ({"anchors_per_k": -1.0}, {"lexical_weight": 1.5}, {"episode_context": -0.1}, {"bm25_k1": 0.0},
                {"bm25_b": 2.0}, {"max_total_visits": 0}, {"episode_window": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            RecallConfig(**bad)


def test_recall_scale_bench_on_a_small_synthetic_memory():
    from mags_lib.bench.recall_scale import measure_synthetic

    out = measure_synthetic(300, queries=5, ks=(10,), variants=("legacy",), progress=lambda s: None)
    assert set(out["latency_ms"]) == {"default k=10", "legacy k=10"}
    assert all(v["p95"] > 0 for v in out["latency_ms"].values())


def test_the_first_tokenisation_loads_nltks_stemmer_alone():
    """Tokenising loads NLTK's Porter stemmer without the ``nltk`` package's ``__init__``, which imports most of
    NLTK and scipy.stats (2-3 s of CPU in every process that tokenises: the agent's first recall, each kernel,
    each worker); the stems are NLTK's own, and ``import nltk`` afterwards gives the whole package as usual."""
    import subprocess
    import sys
    from pathlib import Path

    code = """
import re, sys
from pathlib import Path
from mags_lib.graph import lexical
assert lexical.tokenize("Caroline's puppies were running") == ["carolin", "puppi", "run"]
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "nltk" or m.startswith("scipy.stats"))
assert loaded == [], loaded
words = sorted({w for p in Path(sys.argv[1]).rglob("*.py") for w in re.findall(r"[a-z]{2,}", p.read_text().lower())})
words += ["skies", "dying", "lying", "news", "innings", "proceed", "generalizations", "conditional", "hopping"]
ours = lexical.porter_stemmer()
import nltk
from nltk.stem.porter import PorterStemmer
assert callable(nltk.word_tokenize) and nltk.stem.porter.PorterStemmer is PorterStemmer  # the whole package
theirs = PorterStemmer()
assert len(words) > 2000 and [ours.stem(w) for w in words] == [theirs.stem(w) for w in words]
assert type(lexical.porter_stemmer.__wrapped__()) is PorterStemmer  # nltk imported already: its own class
print(len(words))
"""
    lib = Path(__file__).resolve().parents[1] / "mags_lib"
    out = subprocess.run([sys.executable, "-c", code, str(lib)], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
