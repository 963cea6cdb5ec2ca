"""The graph benchmark CLI in quick mode: it runs, writes the JSON and the plot, numbers are sane."""

import json

import numpy as np
import pytest

from mags_lib.bench import graph as bench


def test_quick_benchmark_writes_json_and_plot(tmp_path):
    assert bench.main(["--quick", "--out", str(tmp_path), "--embedder", "hash"]) == 0
    res = json.loads((tmp_path / "graph.json").read_text())
    assert (tmp_path / "graph.png").stat().st_size > 10_000
    assert [r["n_nodes"] for r in res["sizes"]] == [300, 1000]
    for r in res["sizes"]:
        assert 0 < r["recall"]["p50_ms"] <= r["recall"]["p95_ms"]
        assert r["recall"]["anchor_hit_rate"] >= 0.9  # the noisy query finds its source node
        assert r["recall_with_embedding"]["embedder"].startswith("hash")
        assert r["engram"]["batch_10"]["triplets"] == 200 and r["engram"]["triplets_per_s"] > 0
        assert r["maintain"]["median_s"] > 0 and set(r["maintain"]["steps_s"]) >= {"decay", "kcore", "prune"}
        assert r["n_edges"] >= 4 * r["n_nodes"]
    assert set(res["targets_met"]) == set(bench.TARGETS)
    # the targets are judged at 100k nodes: quick sizes never claim them
    assert res["targets_reference_n_nodes"] == 1000
    assert all(v is None for v in res["targets_met"].values())  # not measured, rather than missed or met
    # maintain is timed on the graph of the size reported (not after the engram phase grew it)
    assert [r["maintain"]["n_nodes"] for r in res["sizes"]] == [300, 1000]
    assert [r["maintain"]["n_edges"] for r in res["sizes"]] == [r["n_edges"] for r in res["sizes"]]
    assert "| nodes |" in bench.table(res)


def test_memory_check_refuses_sizes_that_cannot_fit(tmp_path):
    assert 9_000 < bench.memory_needed_mb(1_000_000) < 12_000  # measured: ~10.3 GB peak at 1M nodes
    with pytest.raises(MemoryError, match="drop the largest size"):
        bench.run([10**12], out_dir=tmp_path, embedder="none", verbose=False)
    assert not (tmp_path / "graph.json").exists()


def test_fit_exponent_and_synthetic_graph():
    assert abs(bench.fit_exponent([1e3, 1e4, 1e5], [1.0, 10.0, 100.0]) - 1.0) < 1e-9
    assert bench.fit_exponent([1e3], [1.0]) is None
    g, _emb, vecs = bench.build_synthetic(200, edges_per_node=3, seed=1)
    s = g.stats()
    assert s["n_entities"] == 200 and 500 <= s["n_valid_edges"] <= 600
    assert vecs.shape == (200, 384) and np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    res = g.recall("entity 5", k=3, query_embeddings=vecs[5])
    assert res.trace.anchors[0].node == "n5"
