"""Tables and figures of a LoCoMo benchmark run (notebook 70 displays them; nothing here measures).

Every function takes a :class:`~mags_lib.bench.locomo_eval.BenchResult` (or its rows) and returns a
pandas DataFrame or a matplotlib Axes. Reference numbers (:data:`~.locomo_eval.PUBLISHED`) are set beside
ours: published ones in rows whose ``source`` is ``published`` and whose ``reference`` names where they come from
(:data:`REFERENCES`), this project's own earlier run (issue 13) in rows whose ``source`` is ``internal, issue 13
run``; a row of ours has ``source`` ``measured``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .locomo import CATEGORIES
from .locomo_eval import PUBLISHED, BenchResult

REFERENCES = {
    "dragon": "LoCoMo paper (Maharana et al., 2024): DRAGON retriever over dialog turns (DESIGN.md, Anchors)",
    "mem0": "as reported by Mem0 (DESIGN.md, Anchors; README: 'Mem0 reports search p95 200 ms')",
    "zep": "Zep search p95 as listed in DESIGN.md's Anchors (no paper named in the project)",
    "issue13": "this project's issue 13 run (README: 'Measured elsewhere with the same metric (issue 13)')",
}
"""Where each reference row's numbers come from, as the project's documents cite them (nothing beyond)."""

__all__ = ["REFERENCES", "category_recall_table", "ingest_table", "plot_category_bars", "plot_survival", "qa_table", "quirks_table", "recall_table",
           "survival_by_position", "survival_table"]


def recall_table(res: BenchResult, *, published: bool = True):
    """Evidence recall@k overall, latency p50/p95, memory tokens per query, one row per retriever."""
    import pandas as pd

    ks = res.config.ks
    rows = []
    for d in res.recall_summary():
        # the recall means are over the questions with evidence: that is their n (the others are counted apart)
        rows.append({"retriever": d["retriever"], "source": "measured",
                     "questions": d["n_questions"] - d["n_no_evidence"], "no evidence": d["n_no_evidence"],
                     **{f"R@{k}": d[f"recall@{k}"] for k in ks},
                     "p50 ms": d["latency_p50_ms"], "p95 ms": d["latency_p95_ms"],
                     "memory tokens": d["memory_tokens_mean"], "sources / item": d["sources_per_item"]})
    if published:
        dragon = PUBLISHED["dragon_dialog_recall"]
        rows.append({"retriever": "DRAGON over dialog turns (LoCoMo paper)", "source": "published",
                     "reference": REFERENCES["dragon"], **{f"R@{k}": dragon.get(k) for k in ks}})
        if 10 in ks:  # R@10 is all that run measured: without that column the row would be empty
            for name, v in PUBLISHED["issue13_recall10"].items():
                rows.append({"retriever": f"{name} (issue 13 run)", "source": "internal, issue 13 run",
                             "reference": REFERENCES["issue13"], "R@10": v})
        rows.append({"retriever": "Mem0 search", "source": "published", "reference": REFERENCES["mem0"],
                     "p50 ms": PUBLISHED["mem0_search_p50_s"] * 1e3, "p95 ms": PUBLISHED["mem0_search_p95_s"] * 1e3,
                     "memory tokens": PUBLISHED["mem0_memory_tokens_per_query"]})
        rows.append({"retriever": "Zep search", "source": "published", "reference": REFERENCES["zep"],
                     "p95 ms": PUBLISHED["zep_search_p95_s"] * 1e3})
    return pd.DataFrame(rows).set_index("retriever")


def _by_category(summary: list[dict], name_key: str, metric: str):
    import pandas as pd

    rows = []
    for d in summary:
        row = {name_key: d[name_key], **{f"{c} {CATEGORIES[c]}": d[f"{metric} cat{c}"] for c in CATEGORIES}}
        row["overall"] = d[metric]
        rows.append(row)
    return pd.DataFrame(rows).set_index(name_key)


def category_recall_table(res: BenchResult, k: int = 10):
    """Evidence recall@k per category (columns) and retriever (rows)."""
    return _by_category(res.recall_summary(), "retriever", f"recall@{k}")


def qa_table(res: BenchResult):
    """QA F1 (LoCoMo's) per category and overall, memory tokens and seconds per question, per system.

    Per category and overall, the F1 of the sample weighted by the questions each (conversation, category)
    stands for (:func:`~mags_lib.bench.locomo_eval.summarise_qa`): an estimate of LoCoMo's mean over every
    question; "sample mean" is the plain mean of the questions read, which over-weights the rare categories."""
    import pandas as pd

    if not res.qa_rows:
        return pd.DataFrame()
    t = _by_category(res.qa_summary(), "system", "f1")
    extra = {d["system"]: d for d in res.qa_summary()}
    for col, key in (("sample mean", "f1_sample"), ("questions", "n_questions"),
                     ("questions stood for", "n_population"), ("context recall", "context_recall"),
                     ("memory tokens", "memory_tokens_mean"), ("s / question", "seconds_per_question")):
        t[col] = [extra[s].get(key) for s in t.index]
    return t


def plot_category_bars(table, *, ax=None, title: str | None = None, ylabel: str = ""):
    """Grouped bars: one group per category (and overall), one bar per row of ``table``.

    A missing value (a category the row has no question of, a metric not measured) draws no bar and is
    marked "n/a" at the axis: never a bar of height 0, which would read as a measured 0."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(11, 4))
    cols = list(table.columns)
    cols = [c for c in cols if c[0].isdigit()] + (["overall"] if "overall" in cols else [])
    n = len(table.index)
    width = 0.8 / max(1, n)
    x = np.arange(len(cols))
    for i, name in enumerate(table.index):
        vals = [float(v) if v is not None and not (isinstance(v, float) and np.isnan(v)) else np.nan
                for v in table.loc[name, cols]]
        xs = x + (i - (n - 1) / 2) * width
        ax.bar(xs, vals, width, label=str(name))
        for xi, v in zip(xs, vals):
            if np.isnan(v):
                ax.text(xi, 0.01, "n/a", ha="center", va="bottom", rotation=90, fontsize=7)
    ax.set_xticks(x, cols)
    ax.set_ylim(0, 1)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the bars, not over them
    if title:
        ax.set_title(title)
    return ax


def survival_table(res: BenchResult):
    """Evidence survival at the end, per conversation and memory: alive (episode or fact), by episode,
    by fact."""
    import pandas as pd

    if not res.survival_rows:
        return pd.DataFrame()
    df = pd.DataFrame(res.survival_rows)
    return (df.groupby(["write", "sample_id"])[["alive", "episode_alive", "fact_alive"]].mean()
            .assign(evidence_turns=df.groupby(["write", "sample_id"]).size()))


def survival_by_position(res: BenchResult, bins: int = 10):
    """Share of evidence turns alive at the end, by where the turn lies in the conversation (deciles)."""
    import pandas as pd

    if not res.survival_rows:
        return pd.DataFrame()
    df = pd.DataFrame(res.survival_rows)
    df["bin"] = np.minimum((df["relative_position"] * bins).astype(int), bins - 1)
    t = df.groupby(["write", "bin"])["alive"].mean().unstack(0)
    t.index = [f"{b / bins:.1f}-{(b + 1) / bins:.1f}" for b in t.index]
    t.index.name = "position in conversation"
    return t


def plot_survival(res: BenchResult, *, axes: Any = None):
    """Left: share of the evidence turns seen so far still in memory, after each session (one line
    per conversation and memory). Right: alive at the end by position in the conversation."""
    import matplotlib.pyplot as plt
    import pandas as pd

    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(12, 4))
    if not res.curve_rows:
        return axes
    cur = pd.DataFrame(res.curve_rows).dropna(subset=["share_alive"])
    for (write, sid), g in cur.groupby(["write", "sample_id"]):
        axes[0].plot(g["turns_seen"], g["share_alive"], marker=".", ls="-" if write == "episodes" else "--",
                     label=f"{sid} ({write})")
    axes[0].set_xlabel("turns observed")
    axes[0].set_ylabel("evidence seen so far, still in memory")
    axes[0].set_ylim(0, 1.05)
    axes[0].legend(fontsize=7, ncol=2, loc="lower left")
    axes[0].set_title("evidence survival during ingestion")
    pos = survival_by_position(res)
    pos.plot(kind="bar", ax=axes[1], ylim=(0, 1.05), rot=45)
    axes[1].set_ylabel("alive at the end")
    axes[1].set_title("evidence alive at the end, by position")
    return axes


def ingest_table(res: BenchResult):
    """Ingestion cost per conversation and memory: turns, seconds, seconds per turn, graph size."""
    import pandas as pd

    rows = []
    for d in res.ingest:
        g = d.get("graph", {})
        rows.append({"sample_id": d["sample_id"], "memory": d["write"], "turns": d["turns"],
                     "seconds": d["seconds"], "s / turn": d["seconds_per_turn"],
                     "speaker": d.get("speaker_mode"), "nodes": g.get("n_nodes"), "episodes": g.get("n_episodes"),
                     "valid facts": g.get("n_facts")})
    return pd.DataFrame(rows)


def quirks_table(quirks: dict[str, int], examples: dict[str, list[str]] | None = None):
    """The loader's quirk counts (and examples)."""
    import pandas as pd

    rows = [{"quirk": k, "count": v, "examples": "; ".join((examples or {}).get(k, [])[:3])}
            for k, v in sorted(quirks.items())]
    return pd.DataFrame(rows, columns=["quirk", "count", "examples"]).set_index("quirk")  # none: an empty table
