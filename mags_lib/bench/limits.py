"""Measure the memory bounds of the Liquid Knowledge Graph (:class:`~mags_lib.graph.LimitsConfig`).

Usage::

    python -m mags_lib.bench.limits                 # 400-node graph, 300 snapshots, 3,000 recalls
    python -m mags_lib.bench.limits --quick         # tiny sizes, for tests: limits_quick.json

Writes ``results/bench/limits.json`` (``--quick``: ``limits_quick.json``, so a smoke run never replaces the
full run's figures; ``--out`` changes the folder; the run's parameters, git SHA and
wall time are in its ``meta`` entry) with, for each bound, the memory held without the bound and with it (snapshots: bytes allocated by
Python and numpy, measured with :mod:`tracemalloc` as the growth of traced memory while they are taken and kept; the
log and the co-activation list: :func:`deep_sizeof` of the objects):

* **snapshots**: ``--snapshots`` snapshots of a graph of about ``--nodes`` nodes, one recall
  between two snapshots. Rows: a full deep copy per snapshot (what a snapshot cost before the
  bound: every column, text and embedding copied), copy-on-write snapshots without a limit, and
  copy-on-write snapshots under the default ``max_snapshots`` / ``max_snapshot_bytes``;
* **recall log entries**: mean JSON bytes of a recall's operation-log entry when the embedder
  recomputes the query (query text only) and when ``query_embeddings`` were given (kept as base64
  float32), beside the size of the query embedding written as a JSON list of floats;
* **operation log**: ``--recalls`` logged recalls without a limit and with ``--oplog-cap``
  (``max_oplog_ops``): entries kept, memory, and whether replaying the checkpointed base state plus
  the log rebuilds the live graph;
* **co-activation list**: the same recalls, three queries each, without ``maintain``: pairs kept
  and memory without a limit and with ``--coact-cap`` (``max_coactivation``; the default of 10,000
  pairs needs more recalls than the run makes: bytes per pair are in the JSON).

The figures are bytes and counts, the same on a loaded machine (``meta`` records the wall time).
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["build_graph", "deep_sizeof", "main", "measure", "run"]


def build_graph(n_nodes: int, *, dim: int = 384, **limits):
    """A graph of about ``n_nodes`` nodes (episodes and entities), hash embeddings of ``dim``."""
    from ..embed import HashEmbedder
    from ..graph import GraphConfig, LimitsConfig, LiquidGraph

    g = LiquidGraph(HashEmbedder(dim=dim), config=GraphConfig(limits=LimitsConfig(**limits)))
    i = 0
    while g.stats()["n_nodes"] < n_nodes:
        ep = g.add_episode(f"observation {i}: thing {i % 97} relates to value {i}", source=f"S{i}")
        g.engram([(f"thing {i % 97}", f"rel {i % 7}", f"value {i}")], episode=ep)
        i += 1
    return g


def measure(build: Callable[[], object]) -> tuple[int, object]:
    """Bytes of traced memory still held after ``build()`` returns (its result kept alive)."""
    gc.collect()
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = build()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before, kept
    finally:
        if started:
            tracemalloc.stop()


def _queries(i: int) -> list[str]:
    return [f"thing {i % 97}", f"value {(i * 7) % 300}", f"thing {(i + 13) % 97}"]


def bench_snapshots(n_nodes: int, n_snapshots: int) -> dict:
    """Snapshot memory: full copies, copy-on-write without a limit, copy-on-write under the defaults."""
    from ..graph import LimitsConfig

    rows = {}
    default = LimitsConfig()
    for name, limits in (("full_copy", {"max_snapshots": None, "max_snapshot_bytes": None}),
                         ("unbounded", {"max_snapshots": None, "max_snapshot_bytes": None}),
                         ("default_limits", {})):
        g = build_graph(n_nodes, **limits)

        def take(g=g, name=name):
            held = []
            for i in range(n_snapshots):
                g.recall(_queries(i)[0], k=5)
                if name == "full_copy":
                    held.append((g._state(share=False), copy.deepcopy(g.oplog)))
                else:
                    g.snapshot()
            return held

        nbytes, _ = measure(take)
        rows[name] = {"bytes": nbytes, "kept": n_snapshots if name == "full_copy" else len(g.snapshots),
                      "counted_bytes": None if name == "full_copy" else g.snapshot_nbytes()}
    return {"n_nodes": g.stats()["n_nodes"], "n_edges": g.stats()["n_edges"], "n_snapshots": n_snapshots,
            "max_snapshots": default.max_snapshots, "max_snapshot_bytes": default.max_snapshot_bytes, **rows}


def bench_recall_entry(n_nodes: int) -> dict:
    """JSON bytes of one recall log entry: query text only, or with given query embeddings."""
    import numpy as np

    g = build_graph(n_nodes)
    text, given = [], []
    rng = np.random.default_rng(0)
    for i in range(50):
        g.recall(_queries(i)[0], k=5)
        text.append(len(json.dumps(g.oplog[-1])))
        q = rng.standard_normal((1, g.dim)).astype(np.float32)
        q /= np.linalg.norm(q)
        g.recall(_queries(i)[0], k=5, query_embeddings=q)
        given.append(len(json.dumps(g.oplog[-1])))
    return {"dim": g.dim, "text_only_bytes": sum(text) / len(text),
            "with_embeddings_bytes": sum(given) / len(given), "embedding_as_json_list_bytes": len(json.dumps(q[0].tolist()))}


def deep_sizeof(obj, seen: set | None = None) -> int:
    """Bytes of ``obj`` and everything it holds (containers followed; each object counted once)."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    n = sys.getsizeof(obj)
    if isinstance(obj, dict):
        n += sum(deep_sizeof(k, seen) + deep_sizeof(v, seen) for k, v in obj.items())
    elif isinstance(obj, (list, tuple, set, frozenset)):
        n += sum(deep_sizeof(x, seen) for x in obj)
    return n


def bench_log_and_coactivation(n_nodes: int, n_recalls: int, oplog_cap: int, coact_cap: int) -> dict:
    """Operation log and co-activation list after ``n_recalls`` recalls, without and with bounds."""
    from ..graph import LimitsConfig, LiquidGraph

    out = {"n_recalls": n_recalls, "oplog_cap": oplog_cap, "coact_cap": coact_cap,
           "default_max_oplog_ops": LimitsConfig().max_oplog_ops,
           "default_max_coactivation": LimitsConfig().max_coactivation}
    for name, limits in (("unbounded", {"max_oplog_ops": None, "max_coactivation": 10**12}),
                         ("bounded", {"max_oplog_ops": oplog_cap, "max_coactivation": coact_cap})):
        g = build_graph(n_nodes, **limits)
        g.oplog, g.oplog_base, g._coact = [], g._state(share=True), []  # measure what the recalls add
        for i in range(n_recalls):
            g.recall(_queries(i), k=6)
        row = {"oplog_entries": len(g.oplog), "oplog_bytes": deep_sizeof(g.oplog),
               "oplog_folded": len(g.oplog) < n_recalls,
               "coactivation_pairs": len(g._coact), "coactivation_bytes": deep_sizeof(g._coact)}
        if name == "bounded":
            h = LiquidGraph.replay(g.oplog, g.embedder, config=g.config, base=g.oplog_base)
            row["replay_from_base_equals_live"] = bool(h.equals(g))
        out[name] = row
    return out


def check_sizes(*, n_nodes: int, n_snapshots: int, n_recalls: int, oplog_cap: int, coact_cap: int) -> None:
    """Refuse sizes the measurement cannot use, before any work (ValueError naming the argument)."""
    for name, value, least in (("n_nodes (--nodes)", n_nodes, 1), ("n_snapshots (--snapshots)", n_snapshots, 1),
                               ("n_recalls (--recalls)", n_recalls, 1), ("oplog_cap (--oplog-cap)", oplog_cap, 1),
                               ("coact_cap (--coact-cap)", coact_cap, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")


def run(*, n_nodes: int = 400, n_snapshots: int = 300, n_recalls: int = 3_000, oplog_cap: int = 1_000,
        coact_cap: int = 2_000, out_dir: str | Path = "results/bench", progress: bool = True,
        filename: str = "limits.json") -> dict:
    """Measure every bound and write ``<out_dir>/<filename>`` (atomically); returns the result."""
    from .. import repro

    check_sizes(n_nodes=n_nodes, n_snapshots=n_snapshots, n_recalls=n_recalls, oplog_cap=oplog_cap,
                coact_cap=coact_cap)
    say = print if progress else (lambda *a, **k: None)
    t0 = time.perf_counter()
    say(f"[limits] snapshots: {n_snapshots} of a {n_nodes}-node graph")
    result = {"snapshots": bench_snapshots(n_nodes, n_snapshots)}
    say("[limits] recall log entries")
    result["recall_entry"] = bench_recall_entry(n_nodes)
    say(f"[limits] operation log and co-activations: {n_recalls} recalls")
    result["oplog_and_coactivation"] = bench_log_and_coactivation(n_nodes, n_recalls, oplog_cap, coact_cap)
    result["meta"] = {"params": {"n_nodes": n_nodes, "n_snapshots": n_snapshots, "n_recalls": n_recalls,
                                 "oplog_cap": oplog_cap, "coact_cap": coact_cap},
                      "git_sha": repro.git_sha(), "wall_time_s": round(time.perf_counter() - t0, 1)}
    repro.atomic_write_text(Path(out_dir) / filename, json.dumps(result, indent=1))
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: see the module docstring."""
    p = argparse.ArgumentParser(prog="python -m mags_lib.bench.limits", description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=400)
    p.add_argument("--snapshots", type=int, default=300)
    p.add_argument("--recalls", type=int, default=3_000)
    p.add_argument("--oplog-cap", type=int, default=1_000)
    p.add_argument("--coact-cap", type=int, default=2_000)
    p.add_argument("--out", default="results/bench")
    p.add_argument("--quick", action="store_true", help="tiny sizes (tests); written to limits_quick.json")
    a = p.parse_args(argv)
    if a.quick:
        a.nodes, a.snapshots, a.recalls, a.oplog_cap, a.coact_cap = 60, 40, 200, 50, 300
    try:
        check_sizes(n_nodes=a.nodes, n_snapshots=a.snapshots, n_recalls=a.recalls, oplog_cap=a.oplog_cap,
                    coact_cap=a.coact_cap)
    except ValueError as e:
        p.error(str(e))
    res = run(n_nodes=a.nodes, n_snapshots=a.snapshots, n_recalls=a.recalls, oplog_cap=a.oplog_cap,
              coact_cap=a.coact_cap, out_dir=a.out, filename="limits_quick.json" if a.quick else "limits.json")
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
