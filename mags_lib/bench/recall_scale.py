"""Recall latency on a large memory of real dialogue turns: LoCoMo's turns, copied to ~50k episodes.

Usage::

    python -m mags_lib.bench.recall_scale                    # 8 copies of the 5,882 turns: ~47k episodes
    python -m mags_lib.bench.recall_scale --copies 2 --queries 100 --synthetic 0 --out /tmp/scale.json

The ten conversations' turns are embedded once with MiniLM (the LoCoMo benchmark's embedder); copy
``j > 0`` of a turn gets the text ``"<text> (copy j)"`` and the turn's vector plus a little noise
(renormalised), so the lexical index sees real words at real frequencies and the vector index real
sentence-embedding clusters (the episode block crosses ``IndexConfig.approx_threshold``: the HNSW
index answers). Each copy keeps the conversation's order, so episode context has real neighbours.
Queries are LoCoMo questions with their MiniLM embeddings given; each configuration (the default
recall and the ablations of :data:`~mags_lib.bench.locomo_eval.RECALL_VARIANTS`) is timed over the
same queries after a warm-up, with ``touch`` and ``coactivation`` off (nothing changes between calls).
Single-threaded BLAS, as the other benchmarks. Writes ``results/bench/locomo_recall_scale.json``.

``--synthetic N`` (default 50,000; 0: skip) also times the same configurations on the graph
benchmark's synthetic fact memory (:func:`mags_lib.bench.graph.build_synthetic`: ``N`` entities,
~5 fact edges each, random 384-d vectors, its queries: a node's vector plus noise), where the
anchors' traversal is what costs.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse
import dataclasses
import gc
import json
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = ["main", "measure"]


class _Lookup:
    """An embedder that returns stored vectors, and asks ``fallback`` for a text it has not stored."""

    def __init__(self, dim: int, name: str, fallback):
        self.dim, self.name, self.table, self.fallback = dim, name, {}, fallback
        self.misses = 0

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            v = self.table.get(t)
            if v is None:
                self.misses += 1
                v = self.table[t] = np.asarray(self.fallback.encode([t]), dtype=np.float32)[0]
            out[i] = v
        return out


def measure(*, copies: int = 8, queries: int = 300, ks: Sequence[int] = (10, 25), data: str | None = None,
            variants: Sequence[str] = ("legacy", "dense", "no-context", "fixed-anchors"), seed: int = 0,
            progress=print) -> dict:
    """Build the memory and time recall per configuration and k (see the module docstring)."""
    if copies < 1 or queries < 1:
        raise ValueError(f"copies and queries must be >= 1, got copies={copies}, queries={queries}")
    from ..embed import get_minilm
    from ..graph import LiquidGraph, RecallConfig
    from .locomo import load_locomo
    from .locomo_eval import RECALL_VARIANTS

    lc = load_locomo(data)
    turns = [t for c in lc.conversations for t in c.turns]
    qs = [q.question for c in lc.conversations for q in c.questions]
    rng = np.random.default_rng(seed)
    qs = [qs[i] for i in rng.permutation(len(qs))[:queries]]
    minilm = get_minilm()
    t0 = time.perf_counter()
    docs = [f"{t.speaker}: {t.utterance()}" for t in turns]
    V = np.asarray(minilm.encode(docs), dtype=np.float32)
    Q = np.asarray(minilm.encode(qs), dtype=np.float32)
    embed_s = time.perf_counter() - t0
    emb = _Lookup(V.shape[1], "minilm-lookup", minilm)
    g = LiquidGraph(emb, seed=seed)
    t0 = time.perf_counter()
    for j in range(copies):
        noise = 0.0 if j == 0 else 0.05
        W = V + noise * rng.standard_normal(V.shape).astype(np.float32)
        W /= np.linalg.norm(W, axis=1, keepdims=True)
        for t, d, w in zip(turns, docs, W):
            text = t.utterance() if j == 0 else f"{t.utterance()} (copy {j})"
            emb.table[f"{t.speaker}: {text}"] = w
            g.add_episode(text, source=f"{t.dia_id}#{j}", speaker=t.speaker)
    build_s = time.perf_counter() - t0
    for q, v in zip(qs, Q):
        emb.table[q] = v
    progress(f"{g.stats()['n_episodes']} episodes built in {build_s:.0f} s (embedding {embed_s:.0f} s)")
    t0 = time.perf_counter()
    g.recall(qs[0], k=10, query_embeddings=Q[0])  # tokenises every episode: the lexical index's first search
    first_s = time.perf_counter() - t0
    quiet = RecallConfig(touch=False, coactivation=False)
    configs = {"default": quiet, **{v: dataclasses.replace(quiet, **RECALL_VARIANTS[v]) for v in variants}}
    out: dict = {"n_episodes": int(g.stats()["n_episodes"]), "copies": copies, "turns": len(turns),
                 "approximate_index": bool(g._ep_index.approximate), "build_s": build_s, "embed_s": embed_s,
                 "first_recall_s": first_s, "queries": len(qs), "embedder_misses": emb.misses, "latency_ms": {}}
    for name, cfg in configs.items():
        for k in ks:
            for i in range(min(5, len(qs))):
                g.recall(qs[i], k=k, query_embeddings=Q[i], config=cfg)
            gc.collect()
            lat = []
            for q, v in zip(qs, Q):
                t = time.perf_counter()
                g.recall(q, k=k, query_embeddings=v, config=cfg)
                lat.append(time.perf_counter() - t)
            a = np.asarray(lat) * 1e3
            out["latency_ms"][f"{name} k={k}"] = {"p50": float(np.percentile(a, 50)),
                                                   "p95": float(np.percentile(a, 95)), "max": float(a.max())}
            progress(f"{name} k={k}: p50 {np.percentile(a, 50):.2f} ms, p95 {np.percentile(a, 95):.2f} ms")
    return out


def measure_synthetic(n: int, *, queries: int = 200, ks: Sequence[int] = (10, 25),
                      variants: Sequence[str] = ("legacy", "dense", "no-context", "fixed-anchors"), seed: int = 0,
                      progress=print) -> dict:
    """Recall latency per configuration and k on ``build_synthetic(n)`` (query embeddings given)."""
    if n < 10 or queries < 1:
        raise ValueError(f"need n >= 10 nodes and queries >= 1, got n={n}, queries={queries}")
    from ..graph import RecallConfig
    from .graph import _unit, build_synthetic
    from .locomo_eval import RECALL_VARIANTS

    g, _, vecs = build_synthetic(n, seed=seed)
    rng = np.random.default_rng(seed + 1)
    idx = rng.integers(0, n, queries)
    Q = _unit(vecs[idx] + 0.3 * _unit(rng.standard_normal((queries, g.dim))))
    texts = [f"what about entity {i}?" for i in idx.tolist()]  # "entity" is in every name: the longest postings
    quiet = RecallConfig(touch=False, coactivation=False)
    configs = {"default": quiet, **{v: dataclasses.replace(quiet, **RECALL_VARIANTS[v]) for v in variants}}
    g.recall(texts[0], k=10, query_embeddings=Q[0])
    out: dict = {"n_nodes": n, "n_edges": int((g.edges.alive & g.edges.valid).sum()), "queries": queries,
                 "latency_ms": {}}
    for name, cfg in configs.items():
        for k in ks:
            for i in range(min(5, queries)):
                g.recall(texts[i], k=k, query_embeddings=Q[i], config=cfg)
            gc.collect()
            lat, hit = [], 0
            for i in range(queries):
                t = time.perf_counter()
                r = g.recall(texts[i], k=k, query_embeddings=Q[i], config=cfg)
                lat.append(time.perf_counter() - t)
                hit += any(a.node == f"n{idx[i]}" for a in r.trace.anchors)
            a = np.asarray(lat) * 1e3
            out["latency_ms"][f"{name} k={k}"] = {"p50": float(np.percentile(a, 50)),
                                                   "p95": float(np.percentile(a, 95)), "max": float(a.max()),
                                                   "anchor_hit_rate": hit / queries}
            progress(f"synthetic {n}: {name} k={k}: p50 {np.percentile(a, 50):.2f} ms, "
                     f"p95 {np.percentile(a, 95):.2f} ms")
    return out


def _holds_locomo_figures(path: Path) -> bool:
    """Whether ``path`` is a result of this benchmark with the LoCoMo part measured."""
    try:
        return "latency_ms" in json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):
        return False


def main(argv: Sequence[str] | None = None) -> int:
    from ..repro import atomic_write_text, git_sha

    p = argparse.ArgumentParser(prog="python -m mags_lib.bench.recall_scale", description=__doc__.split("\n")[0])
    p.add_argument("--data", default=None, help="path of locomo10.json (default ../shared/data/locomo/)")
    p.add_argument("--copies", type=int, default=8)
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--synthetic", type=int, default=50_000, help="nodes of the synthetic fact memory (0: skip)")
    p.add_argument("--out", default="results/bench/locomo_recall_scale.json")
    a = p.parse_args(argv)
    if a.copies < 1 or a.queries < 1:
        p.error(f"--copies and --queries must be >= 1 (got {a.copies} and {a.queries})")
    if a.synthetic and a.synthetic < 10:
        p.error(f"--synthetic takes a node count >= 10, or 0 to skip (got {a.synthetic})")
    try:
        res = measure(copies=a.copies, queries=a.queries, data=a.data)
    except FileNotFoundError as e:
        print(f"skipped: {e}", file=sys.stderr)
        res = {"skipped": str(e)}
        if not a.synthetic:
            print("nothing measured (--synthetic 0): nothing written", file=sys.stderr)
            return 1
        if _holds_locomo_figures(Path(a.out)):
            print(f"{a.out} holds figures measured on LoCoMo; a run without LoCoMo does not replace them: pass "
                  "--data, or --out another file", file=sys.stderr)
            return 1
    if a.synthetic:
        res["synthetic"] = measure_synthetic(a.synthetic)
    res["command"] = "python -m mags_lib.bench.recall_scale " + " ".join(sys.argv[1:] if argv is None else argv)
    res["date"] = time.strftime("%Y-%m-%d %H:%M")
    res["git_sha"] = git_sha()
    res["machine"] = f"{platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}"
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(Path(a.out), json.dumps(res, indent=1) + "\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
