"""Compaction of dead rows (issue 13): ``LiquidGraph.compact`` and its call from ``maintain``.

Pruned and merged nodes and edges stay in the column stores as dead rows until a compaction drops
them and renumbers the rows. Ids are the rows' ``uid`` and do not change, so what the memory says
(facts, recall, provenance, episodes) and what it does next must be identical with and without a
compaction; the compaction is logged, so live == saved+loaded == replayed still holds.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math

import numpy as np
import pytest

from mags_lib.embed import HashEmbedder
from mags_lib.graph import DynamicsConfig, GraphConfig, LimitsConfig, LiquidGraph, persistence
from mags_lib.graph.atomic import json_checksum
from mags_lib.graph.core import _state_differences

EMB = HashEmbedder(dim=64)
# any node idle for 2 ticks and not the end of a valid fact goes; compaction only when asked
CFG = GraphConfig(dynamics=DynamicsConfig(inactive_ticks=2, inactive_max_degree=100, keep_unconsolidated=False),
                  limits=LimitsConfig(compact_dead_share=None))
QUERIES = ["Mira", "Mira lives in", "Oslo", ["filler 3", "Tarn"], "Tarn likes tea", "filler 77", ["Sola", "kite"]]


def say(g: LiquidGraph, triplets, time: str, source: str):
    ep = g.add_episode("; ".join(" ".join(t) for t in triplets), source=source, time=time)
    return ep, g.engram(triplets, episode=ep)


def pruned_graph(config: GraphConfig = CFG) -> LiquidGraph:
    """A graph where most rows are dead, and one live fact's provenance names a pruned episode.

    "Mira lives in Oslo" is said in March and again in June; when both episodes are pruned together
    the older one stays as its evidence, so the fact's latest statement (June) is only known from a
    dead episode. 120 filler turns are forgotten and pruned (their episodes, entities and edges)."""
    g = LiquidGraph(EMB, config=config)
    say(g, [("Mira", "lives in", "Oslo")], "2023-03-01", "D1:1")
    say(g, [("Tarn", "likes", "tea"), ("Tarn", "owns", "a red kite")], "2023-03-02", "D1:2")
    for i in range(120):
        _, rep = say(g, [(f"filler {i}", "is near", f"spot {i}")], f"2023-03-{3 + i % 25:02d}", f"F{i}")
        g.forget(rep.new_edges)
    say(g, [("Mira", "lives in", "Oslo")], "2023-06-01", "D2:1")
    say(g, [("Sola", "visits", "Tarn"), ("Sola", "paints", "Oslo")], "2023-06-02", "D2:2")  # rows after the dead
    say(g, [("Sola", "knows", "Lumi"), ("Lumi", "knows", "Sola")], "2023-06-03", "D2:3")  # an SCC cluster
    g.recall(["Tarn", "kite"], k=4)  # something used, touched and co-activated
    for _ in range(4):
        g.maintain()
    return g


def quiet(g: LiquidGraph):
    return dataclasses.replace(g.config.recall, touch=False, coactivation=False)


def what_it_says(g: LiquidGraph, candidates: bool = True) -> tuple:
    """Everything the memory tells the world, by id (never by row). ``candidates=False`` leaves out the
    recall trace's over-queried candidate list, whose order among similarities that tie at 0 follows
    BLAS rounding (see :func:`assert_close`)."""
    recalls = []
    for q in QUERIES:
        r = g.recall(q, k=6, config=quiet(g))
        trace = dataclasses.asdict(r.trace)
        if not candidates:
            del trace["candidates"]
        recalls.append(([dataclasses.astuple(it) for it in r.items], trace))
    nodes = [g.node(g.node_id(i)) for i in np.flatnonzero(g.nodes.alive).tolist()]
    stats = {k: v for k, v in g.stats().items() if k != "n_ops"}
    return (g.facts(include_invalid=True), g.episodes(), nodes, recalls, stats, g.history("Mira", "lives in"),
            sorted(g.to_networkx(include_invalid=True).edges(keys=True)), g.find("Tarn"))


def assert_close(a, b, where: str = "") -> None:
    """``a == b``, floats within 1e-6 (relative): BLAS rounds a row's similarity differently once the
    rows are renumbered, as it does on a save->load, so recall scores may differ in their last bits."""
    if isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9), f"{where}: {a} != {b}"
    elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), f"{where}: {a!r:.300} != {b!r:.300}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_close(x, y, f"{where}[{i}]")
    elif isinstance(a, dict) and isinstance(b, dict):
        assert list(a) == list(b), f"{where}: keys {list(a)} != {list(b)}"
        for k in a:
            assert_close(a[k], b[k], f"{where}.{k}")
    else:
        assert a == b, f"{where}: {a!r:.300} != {b!r:.300}"


def loaded(g: LiquidGraph) -> LiquidGraph:
    return persistence.graph_from_files(persistence.graph_to_files(g), g.embedder)


def test_compaction_shrinks_the_stores_and_changes_nothing_the_memory_says():
    g = pruned_graph()
    ref = g.copy()  # the same memory, never compacted
    for h in (g, ref):
        h.recall(["Sola", "Tarn"], k=6)  # co-activated anchors wait for the next tick (by row)
    assert g._coact
    before = what_it_says(g)
    n_nodes, n_edges, n_emb = g.nodes.n, g.edges.n, g._emb.shape[0]
    assert g._dead_rows() > 0.7 * (n_nodes + n_edges)  # the case of the issue: mostly dead rows
    out = g.compact()
    assert g.nodes.n < 0.3 * n_nodes and g.edges.n < 0.3 * n_edges and g._emb.shape[0] < n_emb
    assert out["node_rows"] == [n_nodes, g.nodes.n] and out["edge_rows"] == [n_edges, g.edges.n]
    assert not (~g.edges.alive).any()  # no dead edge left
    # the pruned June episode stays (dead) for the fact that names it: the one dead row kept
    assert out["kept_dead_episodes"] == 1 == int((~g.nodes.alive).sum())
    assert g.node(g.find("Lumi"))["cluster"] == int(g.find("Sola")[1:]) > g.nodes.n  # an id, not a row
    mira = g.history("Mira", "lives in")[0]
    assert mira["valid"] and len(mira["episodes"]) == 2 and sum(_alive(g, x) for x in mira["episodes"]) == 1
    assert_close(what_it_says(g), before)
    # saved and loaded, replayed from the log (the compaction is an entry of it): the same state
    assert g.oplog[-1] == {"op": "compact"}
    for other in (loaded(g), g.replayed()):
        assert _state_differences(g._state(), other._state()) == []
        assert_close(what_it_says(other), before)
    # ... and it goes on exactly as the memory that was never compacted
    for h in (g, ref):
        h.maintain(steps=["scc"])  # clusters are named by id
    assert g.node(g.find("Lumi"))["cluster"] == ref.node(ref.find("Lumi"))["cluster"] == int(g.find("Sola")[1:])
    for h in (g, ref):
        say(h, [("Mira", "lives in", "Bergen")], "2023-04-15", "D3:1")  # said after March, before June
        say(h, [("Tarn", "likes", "coffee"), ("filler 5", "is near", "spot 9")], "2023-07-01", "D3:2")
        h.reinforce(h.recall(["Tarn", "Mira"], k=5), reward=0.7)
        h.maintain()
    assert_close(what_it_says(g, False), what_it_says(ref, False))
    assert [f["valid"] for f in g.history("Mira", "lives in")] == [True, False]  # Bergen is the older news


def _alive(g: LiquidGraph, node_id: str) -> bool:
    try:
        g._idx(node_id)
    except KeyError:
        return False
    return True


def test_ids_held_across_a_compaction_still_name_the_same_edges_and_nodes():
    g = pruned_graph()
    ref = g.copy()
    res_g, res_r = (h.recall(["Sola", "Mira"], k=5) for h in (g, ref))  # taken before the compaction
    assert [it.edge_id for it in res_g.items] == [it.edge_id for it in res_r.items]
    moved = [e for it in res_g.items for e in it.edges if g.edges.row(e) == e]  # no compaction yet: id = row
    late = int(g.edges.uid[np.flatnonzero(g.edges.alive & g.edges.valid)[-1]])  # the newest live edge
    gone = int(np.flatnonzero(~g.edges.alive)[0])  # an edge id (= row: no compaction yet) pruned away
    mira = g.find("Mira")
    g.compact()
    assert g.edges.row(late) < late  # the row moved, the id did not
    assert any(g.edges.row(e) < e for e in moved)  # and so did rows the recall named
    for h, res in ((g, res_g), (ref, res_r)):
        h.reinforce(res, reward=1.0)
        h.demote([late], 0.5)
        h.set_permanent(mira)
    assert_close(what_it_says(g, False), what_it_says(ref, False))
    assert g.edge(late) == ref.edge(late) and g.node(mira) == ref.node(mira)
    with pytest.raises(KeyError, match="compacted away"):
        g.edge(gone)
    assert ref.edge(gone)["alive"] is False  # still a dead row there
    with pytest.raises(KeyError, match="no edges"):
        g.forget([g.edges.next_uid])  # an id never given out
    assert g.forget([gone]) == 0  # gone already: nothing to do, as on the uncompacted graph
    # the diff from a snapshot taken before the compaction matches ids, not rows
    h = pruned_graph()
    sid = h.snapshot()
    h.compact()
    d = h.diff(sid)
    assert not (d.nodes_added or d.nodes_removed or d.edges_added or d.edges_removed or d.strength_changed)
    h.rollback(sid)  # the snapshot keeps its own rows
    assert h.nodes.n > g.nodes.n
    assert_close(what_it_says(h, False), what_it_says(pruned_graph(), False))


def test_maintain_compacts_past_the_dead_share_and_replays():
    limits = LimitsConfig(compact_dead_share=0.5, compact_min_rows=0)
    g = pruned_graph(dataclasses.replace(CFG, limits=limits))
    reports = [r for r in (op for op in g.oplog) if r["op"] == "maintain"]
    assert reports and not any(op["op"] == "compact" for op in g.oplog)  # part of the maintain entries
    assert g._dead_rows() <= 0.5 * (g.nodes.n + g.edges.n)  # it ran (the graph was > 70% dead)
    ref = pruned_graph()  # the same steps, never compacted
    assert_close(what_it_says(g, False), what_it_says(ref, False))
    assert g.nodes.n < ref.nodes.n
    assert _state_differences(g._state(), g.replayed()._state()) == []
    # the report says so; below the row floor, or with the knob off, nothing is compacted
    h = pruned_graph(dataclasses.replace(CFG, limits=LimitsConfig(compact_dead_share=0.5, compact_min_rows=0)))
    for _ in range(3):
        say(h, [(f"late {_}", "is near", "spot")], "2023-08-01", "L")
    h.forget([h.facts()[-1]["id"]])
    assert 0 < h._dead_rows() < 0.5 * (h.nodes.n + h.edges.n)
    assert h.maintain().compacted is None  # a few new dead rows: under the share
    # dead rows that a compaction must keep (pruned episodes a live fact names) do not count: a fact said
    # eight times, seven of its episodes pruned, is mostly dead rows and nothing to compact
    cfg = dataclasses.replace(CFG, engram=dataclasses.replace(CFG.engram, link_episodes=False),
                              limits=LimitsConfig(compact_dead_share=0.5, compact_min_rows=0))
    t = LiquidGraph(EMB, config=cfg)
    for i in range(8):
        say(t, [("Mira", "lives in", "Oslo")], f"2023-03-0{i + 1}", f"D{i}")
    reps = [t.maintain() for _ in range(3)]
    assert t._dead_rows() == 7 > 0.5 * (t.nodes.n + t.edges.n)
    assert [r.compacted for r in reps] == [None] * 3 and t.compact()["node_rows"] == [t.nodes.n] * 2
    for limits in (LimitsConfig(compact_dead_share=0.5, compact_min_rows=10_000), LimitsConfig(compact_dead_share=None)):
        k = pruned_graph(dataclasses.replace(CFG, limits=limits))
        assert (k.nodes.n, k.edges.n) == (ref.nodes.n, ref.edges.n)


@pytest.mark.parametrize("kw,err", [({"compact_dead_share": 0.0}, "compact_dead_share"),
                                    ({"compact_dead_share": 1.0}, "compact_dead_share"),
                                    ({"compact_dead_share": "half"}, "compact_dead_share"),
                                    ({"compact_min_rows": -1}, "compact_min_rows"),
                                    ({"compact_min_rows": 2.5}, "compact_min_rows")])
def test_compaction_knobs_are_checked(kw, err):
    with pytest.raises((TypeError, ValueError), match=err):
        LimitsConfig(**kw)


def test_saves_from_before_ids_were_stored_load_with_ids_equal_to_rows():
    g = pruned_graph()
    files = dict(persistence.graph_to_files(g))
    body = json.loads(files["graph.json"])
    for part in ("nodes", "edges"):
        del body[part]["next_uid"]
        del files[f"arrays/{part}_uid.npy"]
    files["graph.json"] = json.dumps(body).encode()
    m = json.loads(files["manifest.json"])
    m.pop("checksum")
    for part in ("nodes", "edges"):
        del m["files"][f"arrays/{part}_uid.npy"]
    m["files"]["graph.json"] = {"sha256": hashlib.sha256(files["graph.json"]).hexdigest(),
                                "bytes": len(files["graph.json"])}
    m["checksum"] = json_checksum(m)
    files["manifest.json"] = json.dumps(m).encode()
    old = persistence.graph_from_files(files, EMB)
    assert _state_differences(g._state(), old._state()) == []
    old.compact()  # and it compacts like the graph it was saved from
    g.compact()
    assert _state_differences(g._state(), old._state()) == []
    # a save whose ids do not increase is refused, naming the file
    files = dict(persistence.graph_to_files(g))
    bad = np.zeros(g.nodes.n, dtype=np.int64)
    files["arrays/nodes_uid.npy"] = persistence._npy_bytes(bad)
    m = json.loads(files["manifest.json"])
    m.pop("checksum")
    m["files"]["arrays/nodes_uid.npy"] = {"sha256": hashlib.sha256(files["arrays/nodes_uid.npy"]).hexdigest(),
                                         "bytes": len(files["arrays/nodes_uid.npy"])}
    m["checksum"] = json_checksum(m)
    files["manifest.json"] = json.dumps(m).encode()
    with pytest.raises(persistence.GraphFormatError, match="nodes_uid.npy"):
        persistence.graph_from_files(files, EMB)


def test_compaction_bench_writes_what_compaction_saves(tmp_path):
    from mags_lib.bench.compaction import run

    res = run(horizons=(300,), out_dir=tmp_path, dim=32, progress=False)
    assert json.loads((tmp_path / "compaction.json").read_text()) == res
    legacy = res["cases"]["legacy dynamics (forgets the older half)"]["300 turns"]
    before, after, auto = legacy["never compacted"], legacy["compacted at the end"], legacy["auto"]
    assert before["dead_rows"] > 0 and after["dead_rows"] < before["dead_rows"] / 10
    assert after["node_rows"] + after["edge_rows"] == before["node_rows"] + before["edge_rows"] - \
        (before["dead_rows"] - after["dead_rows"])
    assert after["save_bytes_without_log"] < before["save_bytes_without_log"]
    assert after["embedding_bytes"] < before["embedding_bytes"]
    assert auto["same_facts"] and auto["compactions"] == 0  # 300 turns stay under compact_min_rows
