"""Long conversations (issue 13): a memory that holds up over 600 turns with the default dynamics."""

import json
from dataclasses import replace

import pytest

from mags_lib.bench.longevity import conversation, legacy_config, simulate
from mags_lib.embed import HashEmbedder
from mags_lib.graph import EngramConfig, GraphConfig, LiquidGraph


def test_600_turn_conversation_keeps_its_facts_with_default_dynamics():
    # 600 distinct facts, one per turn, each observed once (episode + engram, 256-d hash embedder)
    # and never recalled; maintain() every 8 turns (the agent's cadence): 75 ticks. At the end
    # at least 95% must be valid and recalled by "<subject> <relation>", and no valid fact may
    # have lost the episode that said it.
    new = simulate(GraphConfig(), n_turns=600)
    assert new["ticks"] == 75
    assert new["recallable_share"] >= 0.95, new
    assert new["valid_without_evidence"] == 0
    # the defaults before the review forget the older half (measured: 49% valid, 26% recallable)
    old = simulate(legacy_config(), n_turns=600, recall_check=False)
    assert old["valid_share"] < 0.95, old


def test_synthetic_conversation_is_distinct_and_conflict_free():
    turns = conversation(600)
    assert len({t for _, t in turns}) == 600
    assert len({(s, r) for _, (s, r, _o) in turns}) == 600  # one object per (subject, relation): no update
    assert len({o for _, (_s, _r, o) in turns}) == 600


def _restated(n, **engram_kw):
    """A graph where one fact is said by ``n`` episodes (hash embedder, GAT off)."""
    cfg = GraphConfig(engram=replace(EngramConfig(gat=False), **engram_kw))
    g = LiquidGraph(HashEmbedder(dim=64), config=cfg)
    eps = []
    for i in range(n):
        eps.append(g.add_episode(f"Alice owns a kite ({i}).", source=f"D1:{i}"))
        rep = g.engram([("alice", "owns", "kite")], episode=eps[-1])
    return g, (rep.reinforced_edges or rep.new_edges)[0], eps


def test_provenance_of_a_repeated_fact_is_bounded():
    # said 20 times; max_provenance 8 keeps the first statement and the 7 newest, counts the 12 others
    g, e, eps = _restated(20)
    d = g.edge(e)
    assert d["episodes"] == [eps[0], *eps[13:]]
    assert d["sources"] == ["D1:0", *(f"D1:{i}" for i in range(13, 20))]
    assert d["provenance_dropped"] == 12 and d["uses"] == 19  # every restatement still counts as a use
    item = next(it for it in g.recall("alice kite", k=3).items if it.edge_id == e)
    assert item.sources == tuple(d["sources"])
    # saved and loaded, and replayed: the same bounded lists and count
    g2 = g.replayed()
    assert g2.edge(e) == g.edge(e) and g2.equals(g)
    # no bound: every statement stays
    g3, e3, eps3 = _restated(20, max_provenance=None)
    assert g3.edge(e3)["episodes"] == eps3 and g3.edge(e3)["provenance_dropped"] == 0
    with pytest.raises(ValueError, match="max_provenance"):
        EngramConfig(max_provenance=1)


def test_merging_two_bounded_edges_keeps_the_bound_and_the_count():
    # "alice" and "alicia" each hold "owns kite" said 6 times; merging them folds the two facts
    # into one: 12 statements, 8 kept (the first and the 7 newest), 4 + 0 dropped
    g, e, eps = _restated(6)
    for i in range(6):
        ep = g.add_episode(f"Alicia owns a kite ({i}).", source=f"D2:{i}")
        rep = g.engram([("alicia", "owns", "kite")], episode=ep)
    e2 = (rep.reinforced_edges or rep.new_edges)[0]
    g.edges.provenance_dropped[e2] = 3  # as if it had been bounded before
    g._merge_nodes(g._idx(g.find("alice")), g._idx(g.find("alicia")))
    d = g.edge(e)
    assert len(d["episodes"]) == 8 and d["episodes"][0] == eps[0] and d["episodes"][-1] == g.node_id(g._idx(ep))
    assert d["provenance_dropped"] == 4 + 3
    assert not g.edges.alive[e2]


def test_a_save_made_before_provenance_dropped_existed_loads(tmp_path):
    from mags_lib.graph import atomic, graph_from_files, graph_to_files

    g, e, _ = _restated(10)
    files = graph_to_files(g)
    manifest = json.loads(files.pop("manifest.json"))
    name = "arrays/edges_provenance_dropped.npy"
    del files[name], manifest["files"][name]
    manifest.pop("checksum")
    manifest["checksum"] = atomic.json_checksum(manifest)
    files["manifest.json"] = json.dumps(manifest).encode()
    old = graph_from_files(files, g.embedder)
    assert old.edge(e)["provenance_dropped"] == 0 and old.edge(e)["episodes"] == g.edge(e)["episodes"]


def test_too_short_a_conversation_is_refused_not_written_as_nan(tmp_path):
    # simulate(n_turns=0) returned NaN shares, and run(n_turns=3) wrote NaN fifths into longevity.json (not JSON)
    import pytest

    from mags_lib.bench import longevity

    for n in (0, 3, 2.5):
        with pytest.raises(ValueError, match="fifth"):
            simulate(n_turns=n)
    with pytest.raises(ValueError, match="fifth"):
        longevity.run(n_turns=3, out_dir=tmp_path, horizons=(3,), decay_rates=(0.01,), seeds=(0,), progress=False)
    with pytest.raises(ValueError, match="fifth"):
        longevity.run(n_turns=10, out_dir=tmp_path, horizons=(3,), decay_rates=(0.01,), seeds=(0,), progress=False)
    assert not (tmp_path / "longevity.json").exists()
    r = simulate(n_turns=5, recall_check=False)
    assert all(v == v for v in r["valid_by_fifth"])  # no NaN
