"""Memory of a long conversation with and without compaction of dead rows (issue 13).

Usage::

    python -m mags_lib.bench.compaction              # 600 to 4800 turns, two configurations (about a minute)
    python -m mags_lib.bench.compaction --quick      # 600 and 1200 turns, written to compaction_quick.json

The conversation is :func:`mags_lib.bench.longevity.conversation` (one distinct fact per turn, observed
through ``add_episode`` + ``engram``, ``maintain`` every 8 turns, nothing recalled: the worst case
for forgetting), under today's defaults and under the legacy dynamics that forget the older half
(:func:`~mags_lib.bench.longevity.legacy_config`). For each length the graph is built three times:

* **never compacted** (``LimitsConfig.compact_dead_share=None``): nodes and edges removed by
  pruning and merging stay as dead rows;
* the same graph after one :meth:`~mags_lib.graph.LiquidGraph.compact` at the end;
* **auto** -- the default knobs (``compact_dead_share`` 0.5 of at least ``compact_min_rows`` rows):
  ``maintain`` compacts by itself; the count of compactions is reported, and the facts must equal
  the never-compacted graph's (``same_facts``).

Figures per state: rows and dead rows; bytes of the save (:func:`~mags_lib.graph.graph_to_files`,
all files, and without the operation log, which compaction does not shorten); bytes of the
in-memory numeric columns and of the embedding matrix (allocated, capacity included); and the same
bytes per 1,000 turns. Writes ``results/bench/compaction.json`` (``--out`` changes the folder).
Bytes and counts, not times: the figures do not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

__all__ = ["main", "measure", "run"]


def _build(config, n_turns: int, *, dim: int, seed: int, maintain_every: int = 8):
    """The graph of an ``n_turns`` conversation, and how many maintain ticks compacted it."""
    from ..embed import HashEmbedder
    from ..graph import LiquidGraph
    from .longevity import RELATIONS, conversation

    g = LiquidGraph(HashEmbedder(dim=dim), config=config)
    n_compactions = 0
    turns = conversation(n_turns, n_subjects=max(40, -(-n_turns // len(RELATIONS))), seed=seed)
    for t, (text, trip) in enumerate(turns):
        ep = g.add_episode(text, source=f"T{t}")
        g.engram([trip], episode=ep)
        if (t + 1) % maintain_every == 0:
            n_compactions += g.maintain().compacted is not None
    return g, n_compactions


def measure(g, n_turns: int) -> dict:
    """Rows, save bytes and in-memory bytes of graph ``g`` (and the bytes per 1,000 turns)."""
    from ..graph import graph_to_files

    files = graph_to_files(g)
    nd, ed = g.nodes, g.edges
    out = {
        "node_rows": nd.n, "edge_rows": ed.n, "dead_rows": g._dead_rows(),
        "dead_share": round(g._dead_rows() / max(nd.n + ed.n, 1), 4),
        "save_bytes": sum(len(b) for b in files.values()),
        "save_bytes_without_log": sum(len(b) for k, b in files.items() if k != "oplog.jsonl"),
        "column_bytes": sum(a.nbytes for a in (*nd._a.values(), *ed._a.values())),
        "embedding_bytes": int(g._emb.nbytes),
    }
    per = 1000.0 / n_turns
    for k in ("save_bytes", "save_bytes_without_log", "column_bytes", "embedding_bytes"):
        out[f"{k}_per_1k_turns"] = round(out[k] * per)
    return out


def run(*, horizons: Sequence[int] = (600, 1200, 2400, 4800), out_dir: str | Path = "results/bench",
        dim: int = 256, seed: int = 0, progress: bool = True, filename: str = "compaction.json") -> dict:
    """Measure every configuration and horizon and write ``<out_dir>/<filename>`` (atomically); returns it."""
    from .. import repro
    from ..graph import GraphConfig
    from .longevity import legacy_config

    say = print if progress else (lambda *a, **k: None)
    t0 = time.perf_counter()
    configs = {"default": GraphConfig(), "legacy dynamics (forgets the older half)": legacy_config()}
    cases: dict = {}
    for name, cfg in configs.items():
        never = replace(cfg, limits=replace(cfg.limits, compact_dead_share=None))
        rows = {}
        for n in horizons:
            g, _ = _build(never, n, dim=dim, seed=seed)
            before = measure(g, n)
            facts = g.facts(include_invalid=True)
            g.compact()
            after = measure(g, n)
            auto, n_auto = _build(cfg, n, dim=dim, seed=seed)
            rows[f"{n} turns"] = {"never compacted": before, "compacted at the end": after,
                                  "auto": {**measure(auto, n), "compactions": n_auto,
                                           "same_facts": auto.facts(include_invalid=True) == facts}}
            say(f"[compaction] {name}, {n} turns: dead share {before['dead_share']:.3f}, save "
                f"{before['save_bytes'] / 1e3:.0f} -> {after['save_bytes'] / 1e3:.0f} kB, columns "
                f"{before['column_bytes'] / 1e3:.0f} -> {after['column_bytes'] / 1e3:.0f} kB; auto: {n_auto} "
                f"compaction(s)")
        cases[name] = rows
    limits = GraphConfig().limits
    result = {"cases": cases,
              "meta": {"params": {"horizons": list(horizons), "dim": dim, "seed": seed, "maintain_every": 8,
                                  "compact_dead_share": limits.compact_dead_share,
                                  "compact_min_rows": limits.compact_min_rows},
                       "git_sha": repro.git_sha(), "wall_time_s": round(time.perf_counter() - t0, 1)}}
    repro.atomic_write_text(Path(out_dir) / filename, json.dumps(result, indent=1))
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: see the module docstring."""
    p = argparse.ArgumentParser(prog="python -m mags_lib.bench.compaction", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="results/bench")
    p.add_argument("--quick", action="store_true", help="600 and 1200 turns only (written to compaction_quick.json, "
                                                        "never over the full run's compaction.json)")
    a = p.parse_args(argv)
    run(horizons=(600, 1200) if a.quick else (600, 1200, 2400, 4800), out_dir=a.out,
        filename="compaction_quick.json" if a.quick else "compaction.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
