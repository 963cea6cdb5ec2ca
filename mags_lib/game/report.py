"""Tables and figures of game results: accuracy with seeded 95% bootstrap intervals, curves, quality.

Intervals are **cluster bootstrap** intervals over scenarios: questions of one scenario share a
memory, so the scenarios (not the questions) are resampled with replacement, ``n_boot`` times with
one seeded generator, and the accuracy is pooled over the resampled scenarios' questions; the
interval is the 2.5 / 97.5 percentiles. A paired difference (:func:`difference_table`) resamples the
scenarios both systems ran. With fewer than two scenarios (or ``n_boot=0``) there is no interval: its
bounds are NaN (missing), never the point estimate (a zero-width interval would claim certainty).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .quality import QUALITY_COUNTS, quality_rates

__all__ = [
    "accuracy_table",
    "bootstrap_ci",
    "by_changes",
    "by_distance",
    "difference_table",
    "growth_table",
    "latency_table",
    "plot_accuracy",
    "plot_curve",
    "plot_growth",
    "quality_table",
    "summary_metrics",
]


def bootstrap_ci(correct: np.ndarray, total: np.ndarray, *, n_boot: int = 1000, seed: int = 0,
                 level: float = 0.95) -> tuple[float, float, float]:
    """Pooled accuracy and its cluster-bootstrap interval from per-cluster counts.

    One cluster (or ``n_boot < 1``) gives the accuracy with a missing (NaN) interval: the spread
    between clusters cannot be estimated from one.

    >>> bootstrap_ci(np.array([1, 1]), np.array([1, 1]))
    (1.0, 1.0, 1.0)
    >>> bootstrap_ci(np.array([2]), np.array([5]))
    (0.4, nan, nan)
    """
    c = np.asarray(correct, dtype=float)
    n = np.asarray(total, dtype=float)
    if n.sum() == 0:
        return (float("nan"),) * 3
    acc = float(c.sum() / n.sum())
    if len(n) < 2 or n_boot < 1:
        return acc, float("nan"), float("nan")
    idx = np.random.default_rng(seed).integers(0, len(n), size=(n_boot, len(n)))
    den = n[idx].sum(1)
    boot = np.where(den > 0, c[idx].sum(1) / np.maximum(den, 1), np.nan)
    lo, hi = np.nanpercentile(boot, [50 * (1 - level), 100 - 50 * (1 - level)])
    return acc, float(lo), float(hi)


def _grouped(asks, keys: Sequence[str], *, n_boot: int, seed: int):
    import pandas as pd

    rows = []
    if len(asks) == 0:
        return pd.DataFrame(columns=list(keys) + ["accuracy", "lo", "hi", "n_asks", "n_scenarios"])
    for key, df in asks.groupby(list(keys), sort=True, dropna=True):
        per = df.groupby("scenario")["correct"].agg(["sum", "count"])
        acc, lo, hi = bootstrap_ci(per["sum"].to_numpy(), per["count"].to_numpy(), n_boot=n_boot, seed=seed)
        key = key if isinstance(key, tuple) else (key,)
        rows.append({**dict(zip(keys, key)), "accuracy": acc, "lo": lo, "hi": hi, "n_asks": len(df),
                     "n_scenarios": len(per)})
    return pd.DataFrame(rows)


def accuracy_table(asks, *, n_boot: int = 1000, seed: int = 0):
    """Accuracy per system and kind, plus ``overall``, with 95% intervals (long format)."""
    import pandas as pd

    per_kind = _grouped(asks, ["system", "kind"], n_boot=n_boot, seed=seed)
    overall = _grouped(asks.assign(kind="overall"), ["system", "kind"], n_boot=n_boot, seed=seed)
    return pd.concat([per_kind, overall], ignore_index=True)


def difference_table(asks, a: str, b: str, *, n_boot: int = 1000, seed: int = 0):
    """Accuracy of system ``a`` minus ``b`` per kind and overall, paired over common scenarios."""
    import pandas as pd

    rows = []
    both = set(asks.loc[asks.system == a, "scenario"]) & set(asks.loc[asks.system == b, "scenario"])
    df = asks[asks.scenario.isin(both)]
    for kind in sorted(df.kind.unique()) + ["overall"]:
        sub = df if kind == "overall" else df[df.kind == kind]
        pa = sub[sub.system == a].groupby("scenario")["correct"].agg(["sum", "count"])
        pb = sub[sub.system == b].groupby("scenario")["correct"].agg(["sum", "count"])
        idx = sorted(set(pa.index) & set(pb.index))
        if not idx:
            continue
        ca, na = pa.loc[idx, "sum"].to_numpy(float), pa.loc[idx, "count"].to_numpy(float)
        cb, nb = pb.loc[idx, "sum"].to_numpy(float), pb.loc[idx, "count"].to_numpy(float)
        d = ca.sum() / na.sum() - cb.sum() / nb.sum()
        lo = hi = float("nan")  # one common scenario (or no resampling): no interval
        if len(idx) > 1 and n_boot > 0:
            r = np.random.default_rng(seed).integers(0, len(idx), size=(n_boot, len(idx)))
            boot = ca[r].sum(1) / na[r].sum(1) - cb[r].sum(1) / nb[r].sum(1)
            lo, hi = np.percentile(boot, [2.5, 97.5])
        rows.append({"a": a, "b": b, "kind": kind, "difference": float(d), "lo": float(lo), "hi": float(hi),
                     "n_scenarios": len(idx)})
    return pd.DataFrame(rows)


def by_changes(asks, *, n_boot: int = 1000, seed: int = 0):
    """Update accuracy against the number of changes of the asked fact."""
    up = asks[(asks.kind == "update") & asks.n_changes.notna()]
    return _grouped(up.astype({"n_changes": int}), ["system", "n_changes"], n_boot=n_boot, seed=seed)


def by_distance(asks, *, bins: Sequence[int] = (0, 4, 8, 16, 32, 10_000), n_boot: int = 1000, seed: int = 0):
    """Retention accuracy against the distance (events since the statement), binned ``(lo, hi]``."""
    import pandas as pd

    ret = asks[(asks.kind == "retention") & asks.distance.notna()].copy()
    labels = [f"{bins[i] + 1}-{bins[i + 1]}" if bins[i + 1] < 10_000 else f">{bins[i]}" for i in range(len(bins) - 1)]
    ret["distance_bin"] = pd.cut(ret.distance.astype(int), bins=list(bins), labels=labels).astype(str)
    out = _grouped(ret, ["system", "distance_bin"], n_boot=n_boot, seed=seed)
    if len(out):
        out["order"] = out.distance_bin.map({lab: i for i, lab in enumerate(labels)})
        out = out.sort_values(["system", "order"]).drop(columns="order").reset_index(drop=True)
    return out


def growth_table(turns):
    """Mean graph size per event index and system (graph systems), and memory tokens per question.

    ``n_scenarios``: how many scenarios reach that event index. Scenarios differ in length, so the
    means of late events pool only the longer scenarios (a drop of the curve there can be a short
    scenario ending, not a memory shrinking)."""
    cols = [c for c in ("n_nodes", "n_entities", "n_episodes", "n_facts", "n_invalidated", "memory_tokens")
            if c in turns.columns]
    g = turns.groupby(["system", "event"])
    out = g[cols].mean()
    if "scenario" in turns.columns:
        out["n_scenarios"] = g["scenario"].nunique()
    return out.reset_index()


def latency_table(turns):
    """Latency per turn (seconds): p50, p95 and mean per system and turn type."""
    g = turns.groupby(["system", "type"])["seconds"]
    out = g.quantile(0.5).rename("p50_s").to_frame()
    out["p95_s"] = g.quantile(0.95)
    out["mean_s"] = g.mean()
    out["n"] = g.size()
    return out.reset_index()


def quality_table(quality):
    """Operation quality per system: summed counts over scenarios and the rates (overall, micro)."""
    import pandas as pd

    if len(quality) == 0:
        return pd.DataFrame()
    rows = []
    for system, df in quality.groupby("system"):
        # n_removed is newer than some saved quality.csv files: absent there, nothing was counted as removed
        counts = {k: int(df[k].sum()) if k in df or k != "n_removed" else 0 for k in QUALITY_COUNTS}
        rows.append({"system": system, "n_scenarios": len(df), **quality_rates(counts), **counts})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------- figures
def plot_accuracy(table, *, ax=None, kinds: Sequence[str] | None = None, title: str | None = None):
    """Grouped bars: accuracy per kind (x) and system (colour), 95% intervals as error bars."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(9, 4))
    kinds = list(kinds) if kinds is not None else [k for k in
                                                   ("recall", "update", "multihop", "retention", "abstain", "overall")
                                                   if k in set(table.kind)]
    systems = list(dict.fromkeys(table.system))
    w = 0.8 / max(len(systems), 1)
    for j, s in enumerate(systems):
        sub = table[table.system == s].set_index("kind").reindex(kinds)
        x = np.arange(len(kinds)) + (j - (len(systems) - 1) / 2) * w
        acc = sub.accuracy.to_numpy(float)
        err = np.vstack([acc - sub.lo.to_numpy(float), sub.hi.to_numpy(float) - acc])
        ax.bar(x, acc, w, label=s, yerr=np.nan_to_num(err), capsize=2)
    ax.set_xticks(np.arange(len(kinds)), kinds)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("accuracy (95% CI)")
    ax.legend(fontsize=8, ncol=min(len(systems), 4), frameon=False)
    if title:
        ax.set_title(title)
    return ax


def plot_curve(table, x: str, *, ax=None, xlabel: str | None = None, title: str | None = None):
    """Accuracy against ``x`` per system, the 95% interval shaded."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    for s, df in table.groupby("system", sort=False):
        xs = np.arange(len(df)) if df[x].dtype == object else df[x].to_numpy()
        ax.plot(xs, df.accuracy, marker="o", label=s)
        ax.fill_between(xs, df.lo.astype(float), df.hi.astype(float), alpha=0.2)
        if df[x].dtype == object:
            ax.set_xticks(xs, df[x])
    ax.set_ylim(0, 1.05)
    ax.set_xlabel(xlabel or x)
    ax.set_ylabel("accuracy (95% CI)")
    ax.legend(fontsize=8, frameon=False)
    if title:
        ax.set_title(title)
    return ax


def plot_growth(growth, column: str, *, ax=None, title: str | None = None):
    """Mean ``column`` (graph size, memory tokens) against the event index, per system."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    for s, df in growth.groupby("system", sort=False):
        d = df.dropna(subset=[column])
        if len(d):
            ax.plot(d.event, d[column], marker=".", label=s)
    ax.set_xlabel("event")
    ax.set_ylabel(column)
    ax.legend(fontsize=8, frameon=False)
    if title:
        ax.set_title(title)
    return ax


def _or_none(x):
    """A float, or None (JSON null: missing) for NaN."""
    x = float(x)
    return None if np.isnan(x) else x


def summary_metrics(results, *, n_boot: int = 1000, seed: int = 0) -> dict:
    """The ``metrics.json`` of a game run: accuracy per system and kind (with intervals, the number
    of questions and of scenarios they pool), operation quality rates per system, turn latency (with
    its number of turns), skipped systems and errors.

    A system that crashed on a scenario has no answers there: its accuracy pools fewer scenarios than
    the run's (``n_scenarios`` of the entry against the top-level one), and ``failed_scenarios`` names
    them per system, so that its mean is not read as one over the same scenarios as the others'.
    An interval that cannot be computed (one scenario) is None (null), never the point estimate.

    A run under a shared generation memo (``evaluate_systems(share_generations=True)``) reports no
    latency: a remembered call takes 0 s, so its turn times are not the models'. ``generation_memo``
    (its hits and misses) says so, and ``latency_note`` in words."""
    acc = accuracy_table(results.asks, n_boot=n_boot, seed=seed)
    out: dict = {"accuracy": {}, "quality": {}, "latency": {}, "skipped": dict(results.skipped),
                 "errors": [list(e) for e in results.errors],
                 "n_scenarios": int(results.asks.scenario.nunique()) if len(results.asks) else 0}
    for r in acc.itertuples():
        out["accuracy"].setdefault(r.system, {})[r.kind] = {"accuracy": _or_none(r.accuracy), "lo": _or_none(r.lo),
                                                             "hi": _or_none(r.hi),
                                                             "n_asks": int(r.n_asks),
                                                             "n_scenarios": int(r.n_scenarios)}
    failed: dict = {}
    for system, scenario, _ in results.errors:
        failed.setdefault(system, []).append(scenario)
    out["failed_scenarios"] = failed
    q = quality_table(results.quality)
    for r in q.to_dict("records"):
        out["quality"][r["system"]] = {k: v for k, v in r.items() if k.endswith("_rate")}
    memo = getattr(results, "generation_memo", None)
    out["generation_memo"] = memo
    if memo is not None:
        out["latency_note"] = (f"not measured: {memo.get('hits', 0)} of {memo.get('hits', 0) + memo.get('misses', 0)} "
                               "model calls were answered from the shared generation memo in 0 s")
    elif len(results.turns):
        for r in latency_table(results.turns).itertuples():
            out["latency"].setdefault(r.system, {})[r.type] = {"p50_s": r.p50_s, "p95_s": r.p95_s, "n": int(r.n)}
    return out
