"""Save/load, corrupt files, atomic writes, snapshots, rollback, diff and operation-log replay."""

import json
import os

import numpy as np
import pytest

from mags_lib.embed import HashEmbedder
from mags_lib.graph import GraphConfig, GraphFormatError, LiquidGraph, load_graph, persistence, read_manifest

EMB = HashEmbedder(dim=64)


def story_graph():
    g = LiquidGraph(EMB, seed=3)
    ep = g.add_episode("Blorps eat frozen lemons.", source="D1:1", time="2023-05-08")
    g.engram([("blorps", "eat", "frozen lemons"), ("blorps", "live in", "caves")], episode=ep)
    res = g.recall("what do blorps eat", k=3)
    g.reinforce(res, reward=1.0)
    g.maintain()
    ep2 = g.add_episode("Blorps moved to the trees.", source="D1:2")
    g.engram([("blorps", "live in", "trees")], episode=ep2)
    g.maintain()
    return g


def test_round_trip_is_exact(tmp_path):
    g = story_graph()
    out = g.save(tmp_path / "mem")
    m = read_manifest(out)
    assert m["format"] == "mags-liquid-graph" and m["version"] == 2 and m["embedder"]["dim"] == 64
    h = LiquidGraph.load(out, EMB)
    assert g.equals(h) and h.oplog == g.oplog and h.config == g.config and h.seed == 3
    assert [it.text for it in h.recall("blorps", k=5).items] == [it.text for it in g.recall("blorps", k=5).items]
    # both continue identically
    for x in (g, h):
        x.engram([("caves", "are", "cold")], source="test")
        x.maintain()
    assert g.equals(h)


def test_save_overwrites_previous_save_atomically(tmp_path):
    g = story_graph()
    p = g.save(tmp_path / "mem")
    g.engram([("lemons", "are", "sour")], source="test")
    g.save(p)
    assert LiquidGraph.load(p, EMB).equals(g)
    assert [x.name for x in tmp_path.iterdir()] == ["mem"]  # no temp or old folders left


def test_failed_save_leaves_previous_state_intact(tmp_path, monkeypatch):
    g = story_graph()
    p = g.save(tmp_path / "mem")
    saved = LiquidGraph.load(p, EMB)
    g.engram([("lemons", "are", "sour")], source="test")
    calls = {"n": 0}
    real = persistence.atomic.write_file

    def flaky(path, data, root):
        calls["n"] += 1
        if calls["n"] == 5:
            raise OSError("disk full (simulated)")
        return real(path, data, root)

    monkeypatch.setattr(persistence.atomic, "write_file", flaky)
    with pytest.raises(OSError, match="disk full"):
        g.save(p)
    monkeypatch.undo()
    assert LiquidGraph.load(p, EMB).equals(saved)
    assert [x.name for x in tmp_path.iterdir()] == ["mem"]


def test_corrupt_truncated_foreign_and_missing(tmp_path):
    g = story_graph()
    p = g.save(tmp_path / "mem")
    # corrupt: flip one byte of an array file
    f = p / "arrays" / "edges_strength.npy"
    data = bytearray(f.read_bytes())
    data[-3] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(GraphFormatError, match="sha256"):
        LiquidGraph.load(p, EMB)
    # truncated
    p2 = g.save(tmp_path / "mem2")
    f = p2 / "graph.json"
    f.write_bytes(f.read_bytes()[:40])
    with pytest.raises(GraphFormatError, match="truncated"):
        LiquidGraph.load(p2, EMB)
    # missing file
    p3 = g.save(tmp_path / "mem3")
    os.remove(p3 / "arrays" / "emb.npy")
    with pytest.raises(GraphFormatError, match="missing"):
        LiquidGraph.load(p3, EMB)
    # corrupt manifest
    p4 = g.save(tmp_path / "mem4")
    (p4 / "manifest.json").write_text('{"format": "mags-liquid')
    with pytest.raises(GraphFormatError, match="corrupt or truncated"):
        LiquidGraph.load(p4, EMB)
    # foreign directory and foreign format
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("hello")
    with pytest.raises(GraphFormatError, match="no manifest.json"):
        LiquidGraph.load(foreign, EMB)
    (foreign / "manifest.json").write_text(json.dumps({"format": "something-else", "version": 1}))
    with pytest.raises(GraphFormatError, match="not a LiquidGraph save"):
        LiquidGraph.load(foreign, EMB)
    # newer version
    p5 = g.save(tmp_path / "mem5")
    m = json.loads((p5 / "manifest.json").read_text())
    m["version"] = 99
    (p5 / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(GraphFormatError, match="version 99"):
        LiquidGraph.load(p5, EMB)
    # a file instead of a directory, and nothing at all
    (tmp_path / "file.bin").write_bytes(b"\x00\x01")
    with pytest.raises(GraphFormatError, match="not a saved graph directory"):
        LiquidGraph.load(tmp_path / "file.bin", EMB)
    with pytest.raises(FileNotFoundError):
        LiquidGraph.load(tmp_path / "nowhere", EMB)
    # never overwrite a directory that is not a save
    with pytest.raises(FileExistsError, match="refusing"):
        g.save(_nonempty(tmp_path))
    # wrong embedder dimension
    with pytest.raises(ValueError, match="64-d"):
        load_graph(g.save(tmp_path / "mem6"), HashEmbedder(dim=32))


def _nonempty(tmp_path):
    d = tmp_path / "busy"
    d.mkdir()
    (d / "keep.txt").write_text("important")
    return d


def test_snapshot_rollback_and_diff():
    g = story_graph()
    sid = g.snapshot()
    before = g._state()
    n_ops = len(g.oplog)
    ep = g.add_episode("The referee is Ommar.", source="D2:1")
    rep = g.engram([("referee", "is", "ommar"), ("blorps", "live in", "mud")], episode=ep)
    g.maintain()
    sid2 = g.snapshot()
    d = g.diff(sid, sid2)
    s = d.summary()
    assert s["nodes_added"] == 4  # episode, referee, ommar, mud
    assert set(rep.new_edges) <= set(d.edges_added)
    assert set(rep.invalidated_edges) == set(d.edges_invalidated) and rep.invalidated_edges
    assert s["strength_changed"] > 0 and not d.empty
    assert g.diff(sid2).empty  # nothing changed since sid2
    g.rollback(sid)
    assert g.equals(_from_state(before)) and len(g.oplog) == n_ops
    assert g.find("ommar") is None
    g.rollback(sid2)
    assert g.find("ommar") is not None
    with pytest.raises(KeyError, match="unknown snapshot"):
        g.rollback("s99")


def _from_state(st):
    h = LiquidGraph(EMB, seed=3)
    h._load_state(st)
    return h


def test_replay_rebuilds_identical_graph():
    g = story_graph()
    q = EMB.encode(["lemons"])
    g.recall("lemons", k=2, query_embeddings=q)
    g.set_permanent(g.find("blorps"))
    g.maintain(steps=["decay", "prune"])
    h = LiquidGraph.replay(g.oplog, EMB, config=g.config, seed=3)
    assert g.equals(h) and h.oplog == g.oplog
    with pytest.raises(ValueError, match="unknown operation"):
        h.apply({"op": "explode"})


def test_config_round_trip():
    cfg = GraphConfig()
    assert GraphConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    with pytest.raises(ValueError, match="unknown"):
        GraphConfig.from_dict({"engram": {"nonsense": 1}})


def test_saved_arrays_are_plain_npy(tmp_path):
    p = story_graph().save(tmp_path / "m")
    arr = np.load(p / "arrays" / "edges_strength.npy", allow_pickle=False)
    assert arr.dtype == np.float64 and ((arr > 0) & (arr <= 1)).all()
