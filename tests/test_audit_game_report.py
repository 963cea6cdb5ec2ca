"""Audit of the game's evidence: intervals, scenario names, latencies and failed scenarios.

Fake backends only (tests/fakes.py): no model is loaded.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd
import pytest
from fakes import TableBackend

from mags_lib.game import (
    accuracy_table,
    difference_table,
    evaluate_systems,
    run_scenario,
    scenario_from_dict,
    summary_metrics,
)
from mags_lib.game.report import bootstrap_ci

BASE = {"embedder": "hash"}


def _scenario(name: str, fruit: str, extra: str = ""):
    return scenario_from_dict({"name": name, "description": "", "events": [
        {"say": f"Blorps eat {fruit}.{extra}"},
        {"ask": "What do blorps eat?", "answer": [fruit], "kind": "recall"}]})


@pytest.fixture
def fake_models(monkeypatch):
    """Every role's model is a table backend (answers 'Lemons.' when the prompt holds 'lemons');
    a prompt holding 'CRASH' raises. ``delay`` seconds pass in each load (a model read from disk)."""
    import mags_lib.backends as B

    state = {"delay": 0.0, "loads": 0}

    def load(name, model=None, **kw):
        time.sleep(state["delay"])
        state["loads"] += 1
        return TableBackend({"lemons": "Lemons."}, default="I don't know.", fail_on="CRASH")

    monkeypatch.setattr(B, "load_backend", load)
    return state


def test_one_scenario_or_no_resampling_gives_a_missing_interval_not_a_zero_width_one():
    acc, lo, hi = bootstrap_ci(np.array([2]), np.array([5]))
    assert acc == 0.4 and math.isnan(lo) and math.isnan(hi)
    acc, lo, hi = bootstrap_ci(np.array([0, 1, 2]), np.array([2, 2, 2]), n_boot=0)
    assert acc == 0.5 and math.isnan(lo) and math.isnan(hi)
    # two systems on one scenario of four questions: accuracies and their difference, no interval
    rows = [{"system": s, "scenario": "s1", "kind": "recall", "correct": bool(c)}
            for s, cs in (("A", [1, 1, 1, 0]), ("B", [0, 0, 1, 0])) for c in cs]
    t = accuracy_table(pd.DataFrame(rows), n_boot=100)
    assert list(t.accuracy) == [0.75, 0.25, 0.75, 0.25] and t.lo.isna().all() and t.hi.isna().all()
    d = difference_table(pd.DataFrame(rows), "A", "B", n_boot=100)
    assert list(d.difference) == [0.5, 0.5] and d.lo.isna().all() and d.hi.isna().all()
    # two scenarios still resample as before
    two = bootstrap_ci(np.array([2, 0]), np.array([2, 2]), n_boot=200)
    assert two == (0.5, 0.0, 1.0)


def test_scenarios_sharing_a_name_are_refused_not_merged(fake_models):
    # two different scenarios with one name (generated with seeds 0 and 1 they are both "creatures_0000"):
    # they used to be pooled as one scenario by the bootstrap and the pairing, and saved to one folder
    with pytest.raises(ValueError, match="distinct names"):
        evaluate_systems("rag", [_scenario("s", "lemons"), _scenario("s", "pears")], base=BASE, progress=False)


def test_turn_latencies_leave_the_per_scenario_model_loading_out(fake_models):
    fake_models["delay"] = 0.3
    sc = scenario_from_dict({"name": "t", "description": "", "events":
                             [{"say": f"Blorps eat lemons number {i}."} for i in range(3)]
                             + [{"ask": f"What do blorps eat {i}?", "answer": ["lemons"], "kind": "recall"}
                                for i in range(3)]})
    r = run_scenario({"memory": "rag"}, sc, base=BASE, quality=False)
    assert fake_models["loads"] >= 1
    assert r["load_seconds"] >= 0.3 * fake_models["loads"]
    assert max(t["seconds"] for t in r["turns"]) < 0.2  # the first ask loaded the reader: not its latency
    assert max(a["seconds"] for a in r["asks"]) < 0.2
    assert r["seconds"] >= r["load_seconds"]  # the wall time keeps everything


def test_summary_says_on_which_scenarios_a_system_failed_and_the_n_of_its_numbers(fake_models):
    scs = [_scenario("a", "lemons"), _scenario("b", "lemons"), _scenario("c", "pears", " CRASH")]
    res = evaluate_systems("none|rag", scs, base=BASE, progress=False)
    assert res.errors and res.errors[0][:2] == ("rag", "c")
    m = summary_metrics(res, n_boot=50)
    assert m["n_scenarios"] == 3
    assert m["accuracy"]["none"]["overall"]["n_scenarios"] == 3
    assert m["accuracy"]["rag"]["overall"]["n_scenarios"] == 2  # its 1.0 pools two scenarios, not three
    assert m["failed_scenarios"] == {"rag": ["c"]}
    assert m["latency"]["rag"]["ask"]["n"] == 2 and m["latency"]["none"]["ask"]["n"] == 3


def test_growth_table_says_how_many_scenarios_each_mean_pools():
    from mags_lib.game import growth_table

    turns = pd.DataFrame([{"system": "A", "scenario": "long", "event": i, "n_nodes": i + 1} for i in range(4)]
                         + [{"system": "A", "scenario": "short", "event": i, "n_nodes": 10 * (i + 1)}
                            for i in range(2)])
    g = growth_table(turns)
    assert list(g.n_nodes) == [5.5, 11.0, 3.0, 4.0]  # the "drop" at event 2 is the short scenario ending
    assert list(g.n_scenarios) == [2, 2, 1, 1]


def test_summary_writes_a_missing_interval_as_null(fake_models):
    m = summary_metrics(evaluate_systems("rag", [_scenario("a", "lemons")], base=BASE, progress=False), n_boot=50)
    a = m["accuracy"]["rag"]["overall"]
    assert a["accuracy"] == 1.0 and a["lo"] is None and a["hi"] is None and a["n_scenarios"] == 1


def test_operation_quality_of_a_played_scenario_counts_what_maintenance_pruned(monkeypatch):
    # the game's quality rows scored only the memory left at the end: an invalidation pruned later was lost
    import mags_lib.backends as B

    writes = {"Blorps eat lemons": "<memory_write>blorps,eat,lemons</memory_write>",
              "Blorps switched to pears": "<memory_write>blorps,eat,pears</memory_write>"}
    monkeypatch.setattr(B, "load_backend", lambda name, model=None, **kw: TableBackend(writes, default="No."))
    sc = scenario_from_dict({"name": "p", "description": "", "events": [
        {"say": "Blorps eat lemons."}, {"say": "Blorps switched to pears."}]
        + [{"say": f"Filler number {i}."} for i in range(6)]
        + [{"ask": "What do blorps eat?", "answer": ["pears"], "kind": "update"}],
        "gold": [{"subject": "blorps", "relation": "eat", "object": "lemons", "stated": 0, "superseded": 1},
                 {"subject": "blorps", "relation": "eat", "object": "pears", "stated": 1, "superseded": None}],
        "entities": [{"name": "blorps", "core": "blorp", "type": "species"}]})
    prune_all = {"prune_strength": 0.999, "keep_salience": None, "inactive_ticks": 1, "keep_evidence": False,
                 "keep_unconsolidated": False}
    r = run_scenario({"memory": "graph", "maintain_every": 2, "graph": {"dynamics": prune_all}}, sc, base=BASE,
                     return_agent=True)
    try:
        assert r["agent"].graph.facts(include_invalid=True) == []  # everything went before the end
    finally:
        r["agent"].close()
    q = r["quality"]
    assert q["n_removed"] == 2 and q["n_gold_stored"] == 2
    assert q["n_invalidated"] == q["n_correct_invalidations"] == 1 and q["n_missed_invalidations"] == 0
