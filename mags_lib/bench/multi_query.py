"""Multi-query recall on the game's held-out scenarios: does the order of the queries matter, and what does a
second query buy?

Usage::

    python -m mags_lib.bench.multi_query --out results/bench/multi_query.json [--n-scenarios 40] [--k 10]

The memory of each of the first ``--n-scenarios`` held-out generated scenarios of the default game profile
(:func:`mags_lib.game.generate.evaluation_scenarios`, examples left out) is written as a perfect writer would:
every ``say`` an episode (its source and time) with the generator's gold triplets stated there, ``maintain()``
every 8 observations as :class:`mags_lib.MAGS` does, MiniLM embeddings, default dynamics. No model is needed.
At every answerable question (not ``abstain``) whose answer is the object of a gold fact valid then, recall
(``touch`` and co-activation off, so every recall sees the same memory) with

* ``q``: the question alone;
* ``q+a``: the question, then ``"<subject> <relation>"`` of that fact (what a trained ask model sends:
  :meth:`MAGS.ask` sends the question first, then the ask model's queries);
* ``a+q``: the same two queries the other way round.

For each, the share of questions whose current gold fact is among the first 1, 3 and ``k`` items, and the
number of questions whose two orders give different items or scores. Latency is the median wall time of one
recall on this machine (after one untimed recall of the same memory; a quiet machine: timings are measured,
not asserted).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = ["main", "measure"]


def measure(scenarios: Sequence, k: int = 10, *, embedder=None, progress: bool = True) -> dict:
    """The figures of the module docstring for ``scenarios`` (a dict: ``n``, ``hit``, ``order_differs``,
    ``latency_ms``, ``rows``)."""
    from tqdm.auto import tqdm

    from ..embed import load_embedder
    from ..graph import LiquidGraph, RecallConfig
    from ..protocol import normalize_answer

    emb = embedder or load_embedder("minilm")
    cfg = RecallConfig(touch=False, coactivation=False)
    modes = ("q", "q+a", "a+q")
    rows: list[dict] = []
    lat: dict[str, list[float]] = {m: [] for m in modes}
    for sc in tqdm(scenarios, desc="multi-query recall", unit="scenario", disable=not progress):
        g = LiquidGraph(emb)
        said: dict[int, list] = {}
        for f in sc.gold:
            said.setdefault(f.stated, []).append((f.subject, f.relation, f.object))
        n_obs = 0
        for i, ev in enumerate(sc.events):
            if not ev.is_ask:
                source = ev.source or f"{sc.name}:{i}"
                ep = g.add_episode(ev.text, source=source, time=ev.time, speaker=ev.speaker)
                if said.get(i):
                    g.engram(said[i], episode=ep, source=source, time=ev.time)
                n_obs += 1
                if n_obs % 8 == 0:
                    g.maintain()
                continue
            if ev.kind == "abstain":
                continue
            aliases = {normalize_answer(a) for a in ev.answer}
            live = [f for f in sc.gold if f.stated < i and (f.superseded is None or f.superseded > i)
                    and normalize_answer(f.object) in aliases]
            if not live:
                continue
            q, a = ev.text, f"{live[0].subject} {live[0].relation}"
            row: dict = {"scenario": sc.name, "event": i, "kind": ev.kind}
            items = {}
            g.recall([q, a], k=k, config=cfg)  # the first recall after a write builds lazy indexes: not timed
            for mode, qs in (("q", [q]), ("q+a", [q, a]), ("a+q", [a, q])):
                t0 = time.perf_counter()
                res = g.recall(qs, k=k, config=cfg)
                lat[mode].append(time.perf_counter() - t0)
                ranks = [j for j, it in enumerate(res.items) if it.kind == "fact" and it.current
                         and normalize_answer(it.triplet[2]) in aliases]
                row[f"rank_{mode}"] = ranks[0] if ranks else None
                items[mode] = [(it.text, round(it.score, 6)) for it in res.items]
            row["order_differs"] = items["q+a"] != items["a+q"]
            rows.append(row)
    n = len(rows)
    hit = {mode: {f"@{c}": round(sum(1 for r in rows if r[f"rank_{mode}"] is not None and r[f"rank_{mode}"] < c)
                                 / max(n, 1), 4) for c in (1, 3, k)} for mode in modes}
    return {"n": n, "k": k, "hit": hit, "order_differs": sum(r["order_differs"] for r in rows),
            "latency_ms": {m: round(1000 * float(np.median(v)), 2) if v else None for m, v in lat.items()},
            "rows": rows}


def main(argv: Sequence[str] | None = None) -> int:
    from .. import repro
    from ..game.generate import evaluation_scenarios

    p = argparse.ArgumentParser(prog="python -m mags_lib.bench.multi_query", description=__doc__.split("\n\n")[0])
    p.add_argument("--n-scenarios", type=int, default=40, help="held-out scenarios of the default game profile")
    p.add_argument("--k", type=int, default=10, help="items recalled")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    if a.n_scenarios < 1 or a.k < 1:
        p.error("--n-scenarios and --k must be >= 1")
    scs = evaluation_scenarios("default", n_scenarios=a.n_scenarios, examples=False)
    t0 = time.perf_counter()
    res = {"what": "multi-query recall on a gold memory of the game's held-out scenarios: the question, the "
                   "question then the fact's 'subject relation', and the reverse order",
           **measure(scs, k=a.k)}
    res["seconds"] = round(time.perf_counter() - t0, 1)
    res["meta"] = repro.command_meta("mags_lib.bench.multi_query", argv)
    repro.atomic_write_text(Path(a.out), json.dumps(res, indent=1) + "\n")
    for mode, h in res["hit"].items():
        print(f"{mode:>4}: gold fact in the first 1 / 3 / {a.k}: {h['@1']} / {h['@3']} / {h[f'@{a.k}']} "
              f"(n={res['n']}), median recall {res['latency_ms'][mode]} ms")
    print(f"questions whose two query orders recall differently: {res['order_differs']} of {res['n']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
