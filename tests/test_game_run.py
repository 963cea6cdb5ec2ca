"""Systems as configurations, ablation switches that change behaviour, the runner, tables, parallel == serial."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from mags_lib.embed import HashEmbedder
from mags_lib.game import (
    ABLATIONS,
    SYSTEMS,
    ablation_systems,
    accuracy_table,
    by_changes,
    by_distance,
    difference_table,
    evaluate_systems,
    latency_table,
    make_config,
    resolve_systems,
    scenario_from_dict,
    summary_metrics,
    sweep_systems,
    system_status,
)
from mags_lib.graph import DynamicsConfig, GraphConfig, LiquidGraph, TableEmbedder


# ------------------------------------------------------------------------------------ systems
def test_every_named_system_and_ablation_is_data_and_a_valid_config_or_a_clear_skip():
    for spec in {**SYSTEMS, **ablation_systems()}.values():
        assert isinstance(spec, dict)
        cfg = make_config(spec)  # every switch names a real field (memory modes included, issue 12)
        assert cfg.memory == spec.get("memory", "graph")


@pytest.mark.parametrize("baseline, memory", [("rag_trained", "rag"), ("full_context_trained", "full_context")])
def test_trained_baselines_read_with_the_reader_of_graph_trained(baseline, memory):
    """graph_trained reads with the trained answer model; its fair baselines change the memory only."""
    ours, theirs = make_config(SYSTEMS["graph_trained"]), make_config(SYSTEMS[baseline])
    assert theirs.memory == memory and ours.memory == "graph"
    assert theirs.models == ours.models == "trained" and theirs.trained_tag == ours.trained_tag


@pytest.mark.parametrize("name", [n for n, s in ABLATIONS.items() if isinstance(s.get("dynamics"), dict)])
def test_each_dynamics_ablation_turns_exactly_its_switch_off(name):
    dyn = make_config(ablation_systems(names=[name])[name]).graph_config().dynamics
    default = DynamicsConfig()
    off = [f.name for f in dataclasses.fields(DynamicsConfig) if f.type in (bool, "bool")
           and getattr(dyn, f.name) != getattr(default, f.name)]
    assert off == list(ABLATIONS[name]["dynamics"])


def test_no_dynamics_means_no_maintain_tick():
    assert make_config(ABLATIONS["no_dynamics"]).dynamics_on is False
    assert make_config(SYSTEMS["graph_base"]).dynamics_on is True


def _build(cfg: GraphConfig, emb) -> LiquidGraph:
    g = LiquidGraph(emb, config=cfg)
    for text, trips in (("Blorps eat frozen lemons.", [("blorps", "eat", "frozen lemons")]),
                        ("Frozen lemons grow in Teal Bridge.", [("frozen lemons", "grow in", "Teal Bridge")]),
                        ("Teal Bridge is ruled by Larrowick.", [("Teal Bridge", "is ruled by", "Larrowick")])):
        ep = g.add_episode(text)
        g.engram(trips, episode=ep)
    return g


def _graph_cfg(system: str, extra: dict | None = None) -> GraphConfig:
    spec = ablation_systems(names=[system])[system] if system in ABLATIONS else SYSTEMS[system]
    from mags_lib.game.run import _merge

    return make_config(_merge(spec, extra or {})).graph_config()


def test_no_episodic_block_changes_recall():
    emb = HashEmbedder(dim=128)
    on = _build(_graph_cfg("graph_base"), emb).recall("what do blorps eat", k=10)
    off_g = _build(_graph_cfg("no_episodic_block"), emb)
    off = off_g.recall("what do blorps eat", k=10)
    assert any(it.kind == "episode" for it in on.items)
    assert off.items and not any(it.kind == "episode" for it in off.items)
    assert not any(f["kind"] == "mention" for f in [off_g.edge(e) for e in range(off_g.edges.n)])


def test_no_traversal_reads_only_the_anchors_own_edges():
    emb = HashEmbedder(dim=128)
    extra = {"graph": {"recall": {"n_anchors": 1, "anchors_per_k": 0, "include_episodes": False}}}
    on = _build(_graph_cfg("graph_base", extra), emb).recall("blorps", k=10)
    off = _build(_graph_cfg("no_traversal", extra), emb).recall("blorps", k=10)
    assert max(len(it.path) for it in on.items) >= 3  # reached Larrowick through two hops
    assert max(len(it.path) for it in off.items) == 2
    assert len(off.items) < len(on.items)


def test_no_coverage_anchors_picks_by_similarity_alone():
    q, a, b, c = np.eye(64)[:4]
    table = {"query": q, "alpha": 0.9 * q + 0.436 * a, "beta": 0.88 * q + 0.475 * b, "gamma": 0.6 * q + 0.8 * c}
    emb = TableEmbedder(table, dim=64)
    extra = {"graph": {"recall": {"n_anchors": 2, "anchors_per_k": 0, "include_episodes": False},
                       "engram": {"gat": False}}}

    def anchors(system):
        g = LiquidGraph(emb, config=_graph_cfg(system, extra))
        g.engram([("alpha", "near", "beta"), ("gamma", "near", "delta")], source="test")
        return [x.text for x in g.recall("query", k=5).trace.anchors]

    assert anchors("graph_base") == ["alpha", "gamma"]  # beta's neighbourhood is already covered
    assert anchors("no_coverage_anchors") == ["alpha", "beta"]


def test_no_reconciliation_keeps_both_values_valid():
    emb = HashEmbedder(dim=64)
    for system, n_valid in (("graph_base", 1), ("no_reconciliation", 2)):
        g = LiquidGraph(emb, config=_graph_cfg(system))
        g.engram([("blorps", "live in", "copper caves")], source="test")
        g.engram([("blorps", "live in", "salted marshes")], source="test")
        assert len(g.facts()) == n_valid, system


def test_resolve_systems_and_sweeps():
    s = resolve_systems("none | graph_base|no_scc|recall_k=3|memory_token_budget=64")
    assert list(s) == ["none", "graph_base", "no_scc", "recall_k=3", "memory_token_budget=64"]
    assert s["recall_k=3"] == {"recall_k": 3} and s["no_scc"] == {"dynamics": {"scc": False}}
    assert make_config(s["memory_token_budget=64"]).memory_token_budget == 64
    assert list(sweep_systems("recall_k", [1, 5])) == ["recall_k=1", "recall_k=5"]
    with pytest.raises(ValueError, match="unknown system"):
        resolve_systems("graph_basic")
    with pytest.raises(ValueError, match="no systems"):
        resolve_systems(" | ")


def test_systems_that_cannot_run_are_skipped_with_the_reason(tmp_path, capsys):
    base = {"embedder": "hash", "models_root": str(tmp_path)}
    assert system_status(SYSTEMS["graph_base"], base) is None
    assert system_status(SYSTEMS["rag"], base) is None  # memory modes run (issue 12)
    assert "no trained ask model" in system_status(SYSTEMS["graph_trained"], base)
    assert "invalid configuration" in system_status({"recall_k": 0}, base)
    assert "invalid configuration" in system_status({"memory": "vector"}, base)
    sc = scenario_from_dict({"name": "x", "description": "", "events": [{"say": "Blorps eat lemons."}]})
    res = evaluate_systems("rag|graph_trained", [sc], base=base, progress=False)
    assert set(res.skipped) == {"graph_trained"} and len(res.asks) == 0
    out = capsys.readouterr().out
    assert "skipped graph_trained" in out and "skipped rag" not in out
    res.save(tmp_path / "out")
    assert "no trained ask model" in (tmp_path / "out" / "systems.json").read_text()


# ------------------------------------------------------------------------------------ tables
def _asks() -> pd.DataFrame:
    rows = []
    # system A: s1 2/2, s2 0/2 (update, n_changes 1 and 2); system B: 1/2 in each
    for system, outcome in (("A", {"s1": [1, 1], "s2": [0, 0]}), ("B", {"s1": [1, 0], "s2": [1, 0]})):
        for sc, res in outcome.items():
            for j, c in enumerate(res):
                rows.append({"system": system, "scenario": sc, "kind": "update", "correct": bool(c),
                             "n_changes": j + 1, "distance": 4 + 10 * j})
    rows.append({"system": "A", "scenario": "s1", "kind": "retention", "correct": True, "n_changes": 0,
                 "distance": 20})
    return pd.DataFrame(rows)


def test_accuracy_table_values_and_seeded_intervals():
    t = accuracy_table(_asks(), n_boot=500, seed=3)
    a = t[(t.system == "A") & (t.kind == "update")].iloc[0]
    assert a.accuracy == 0.5 and a.n_asks == 4 and a.n_scenarios == 2
    assert a.lo == 0.0 and a.hi == 1.0  # resampling two scenarios: both good, both bad, or one of each
    b = t[(t.system == "B") & (t.kind == "update")].iloc[0]
    assert b.accuracy == b.lo == b.hi == 0.5  # every scenario alike: no spread
    overall = t[(t.system == "A") & (t.kind == "overall")].iloc[0]
    assert overall.accuracy == pytest.approx(3 / 5)
    assert t.equals(accuracy_table(_asks(), n_boot=500, seed=3))


def test_difference_changes_and_distance_tables():
    d = difference_table(_asks(), "A", "B", n_boot=200)
    upd = d[d.kind == "update"].iloc[0]
    assert upd.difference == 0.0 and upd.lo == -0.5 and upd.hi == 0.5
    ch = by_changes(_asks(), n_boot=0)
    assert list(ch[ch.system == "B"].accuracy) == [1.0, 0.0]  # first change right, second wrong
    dist = by_distance(_asks(), n_boot=0)
    assert list(dist.distance_bin) == ["17-32"] and dist.accuracy.iloc[0] == 1.0


def test_latency_table():
    turns = pd.DataFrame({"system": ["A"] * 4, "type": ["say", "say", "ask", "ask"], "seconds": [1.0, 3.0, 2.0, 2.0]})
    t = latency_table(turns).set_index("type")
    assert t.loc["say", "p50_s"] == 2.0 and t.loc["ask", "mean_s"] == 2.0 and t.loc["say", "n"] == 2


# ------------------------------------------------------------------------------------ real runs
TINY = scenario_from_dict({
    "name": "tiny", "description": "two facts, two questions",
    "events": [
        {"say": "Blorps eat frozen lemons.", "time": "2024-01-02", "source": "t:0"},
        {"say": "I live in Porto.", "time": "2024-01-03", "speaker": "Lena"},
        {"ask": "What do blorps eat?", "answer": ["frozen lemons", "lemons"], "kind": "recall", "distance": 2},
        {"ask": "What is the favourite song of the snarfs?", "answer": [], "kind": "abstain"},
    ],
    "gold": [{"subject": "blorps", "relation": "eat", "object": "frozen lemons", "stated": 0, "superseded": None},
             {"subject": "Lena", "relation": "lives in", "object": "Porto", "stated": 1, "superseded": None}],
    "entities": [{"name": "blorps", "core": "blorp", "type": "species"},
                 {"name": "Lena", "core": "Lena", "type": "person"}],
})
BASE = {"embedder": "hash", "n_threads": 1, "max_new_tokens_write": 48, "max_new_tokens_ask": 24,
        "max_new_tokens_answer": 12}
TIMING = ["seconds"]


@pytest.mark.slow
def test_one_scenario_end_to_end_and_parallel_equals_serial(tmp_path):
    """SmolLM2 via llama.cpp (1 thread, few tokens), graph mode; 4 runs: 131 s measured under heavy load."""
    from mags_lib.embed import load_embedder
    from mags_lib.game import is_correct

    systems = "graph_base|recall_k=1"
    serial = evaluate_systems(systems, [TINY], base=BASE, n_jobs=1, progress=False, save_memories=tmp_path)
    parallel = evaluate_systems(systems, [TINY], base=BASE, n_jobs=2, progress=False)
    assert not serial.errors and not parallel.errors
    # end to end: the events reached the memory, the questions were answered and scored
    turns = serial.turns[serial.turns.system == "graph_base"]
    assert turns.type.tolist() == ["say", "say", "ask", "ask"]
    assert turns.n_episodes.tolist() == [1, 2, 2, 2] and turns.n_nodes.iloc[-1] >= 2
    g = LiquidGraph.load(tmp_path / "graph_base" / "tiny" / "graph", load_embedder("hash"))
    nodes = g.to_networkx().nodes(data=True)
    assert "t:0" in {d["source"] for _, d in nodes}  # the scenario's source id reached the memory
    eps = [d["text"] for _, d in nodes if d["block"] == "episodic"]
    assert "Lena: I live in Porto." in eps or "I live in Porto." in eps  # speaker inlined, or given
    asks = serial.asks[serial.asks.system == "graph_base"]
    assert asks.kind.tolist() == ["recall", "abstain"] and asks.distance.iloc[0] == 2
    assert (asks.memory_tokens > 0).all()
    for r in asks.itertuples():
        assert r.correct == is_correct(r.response, r.answer, r.kind)
    assert serial.quality.n_gold.tolist() == [2, 2]
    # parallel == serial, timings aside
    assert len(serial.asks) == 4
    pd.testing.assert_frame_equal(serial.asks.drop(columns=TIMING), parallel.asks.drop(columns=TIMING))
    pd.testing.assert_frame_equal(serial.turns.drop(columns=TIMING), parallel.turns.drop(columns=TIMING))
    # shared generations (a sweep's memo): the same tables, and recall_k=1 re-used graph_base's write and ask calls
    shared = evaluate_systems(systems, [TINY], base=BASE, n_jobs=1, progress=False, share_generations=True)
    pd.testing.assert_frame_equal(serial.asks.drop(columns=TIMING), shared.asks.drop(columns=TIMING))
    pd.testing.assert_frame_equal(serial.turns.drop(columns=TIMING), shared.turns.drop(columns=TIMING))
    assert serial.generation_memo is None and shared.generation_memo["hits"] >= 4  # 2 writes + 2 asks at least
    # the memo's turn times are not the models': the summary of a shared run gives no latency, and says why
    m_serial, m_shared = summary_metrics(serial, n_boot=10), summary_metrics(shared, n_boot=10)
    assert m_serial["latency"]["graph_base"]["ask"]["p50_s"] > 0 and m_serial["generation_memo"] is None
    assert m_shared["latency"] == {} and m_shared["generation_memo"] == shared.generation_memo
    assert "memo" in m_shared["latency_note"] and m_shared["accuracy"] == m_serial["accuracy"]
    pd.testing.assert_frame_equal(serial.quality, parallel.quality)


def test_saved_memories_never_share_a_folder(tmp_path):
    # "town 1" and "town_1" were saved to one folder: the second memory replaced the first without a word
    import dataclasses

    a, b = dataclasses.replace(TINY, name="town 1"), dataclasses.replace(TINY, name="town_1")
    with pytest.raises(ValueError, match="one folder"):
        evaluate_systems("rag", [a, b], base=BASE, progress=False, save_memories=tmp_path)
    with pytest.raises(ValueError, match="folder"):
        evaluate_systems("rag", [dataclasses.replace(TINY, name="..")], base=BASE, progress=False,
                         save_memories=tmp_path)
    assert not any(tmp_path.iterdir())
    evaluate_systems("rag", [a, b], base=BASE, progress=False)  # without saving, the names are fine


def test_none_trained_is_graph_trained_without_memory():
    """graph_trained (trained reader) against none (base reader) mixed a memory with a reader (DESIGN.md: systems
    differ in memory only); none_trained is the trained reader with no memory."""
    ours, theirs = make_config(SYSTEMS["graph_trained"]), make_config(SYSTEMS["none_trained"])
    assert theirs.memory == "none" and ours.memory == "graph"
    assert theirs.models == ours.models == "trained" and theirs.trained_tag == ours.trained_tag
    assert resolve_systems("none_trained")["none_trained"] == {"memory": "none", "models": "trained"}
