"""Dataset statistics: sizes, kinds, input lengths, operations per example, diversity.

Diversity is the distinct n-gram ratio (distinct-n: distinct word n-grams / all word n-grams over a
set of inputs). Invented names inflate it, so :func:`distinct_ngram_ratio` can mask a set of words
first (every invented name becomes ``<E>``): the masked figure measures the variety of the sentence
templates themselves.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

__all__ = [
    "dataset_stats",
    "plot_input_lengths",
    "plot_ops",
    "samples_table",
    "seed_failures_table",
    "distinct_ngram_ratio",
    "diversity_table",
    "samples_by_kind",
    "split_stats",
    "stats_table",
    "tokenize",
]

_WORD = re.compile(r"[a-z0-9']+")


def tokenize(text: str) -> list[str]:
    """Lower-case word tokens.

    >>> tokenize("Blorps eat frozen-lemons!")
    ['blorps', 'eat', 'frozen', 'lemons']
    """
    return _WORD.findall(text.lower())


def distinct_ngram_ratio(texts: Iterable[str], n: int = 2, mask: set[str] | None = None) -> float:
    """Distinct n-grams divided by all n-grams over ``texts`` (0 when there is no n-gram).

    Parameters
    ----------
    texts : iterable of str
    n : int
        N-gram order (>= 1).
    mask : set of str, optional
        Lower-case words replaced by ``<E>`` before counting (e.g. invented names).

    Examples
    --------
    >>> distinct_ngram_ratio(["a b a b"], n=1)
    0.5
    >>> distinct_ngram_ratio(["blorps eat", "quindles eat"], n=1, mask={"blorps", "quindles"})
    0.5
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    total, distinct = 0, set()
    for t in texts:
        toks = tokenize(t)
        if mask:
            toks = ["<E>" if w in mask else w for w in toks]
        grams = [tuple(toks[i:i + n]) for i in range(len(toks) - n + 1)]
        total += len(grams)
        distinct.update(grams)
    return len(distinct) / total if total else 0.0


def _n_ops(r: dict) -> int:
    """Operations of an ask/write row; recalled memory items of an answer row."""
    return len(r["memory"]) if r.get("role") == "answer" else r["n_ops"]


def _empty(r: dict) -> bool:
    """Gold is the empty output (ask/write) or the abstention (answer)."""
    return r["response"] == _abstain() if r.get("role") == "answer" else r["n_ops"] == 0


def _abstain() -> str:
    from ..protocol import ABSTAIN_ANSWER

    return ABSTAIN_ANSWER


def split_stats(rows: Sequence[dict], mask: set[str] | None = None) -> dict:
    """Statistics of one split: size, kinds, lengths, ops per example, empty share, diversity.

    For the answer role ``ops_*`` count the recalled memory items of an example and ``empty_share``
    is the share whose gold answer is the abstention.
    """
    if not rows:
        return {"n": 0}
    words = np.array([len(tokenize(r["input"])) for r in rows])
    chars = np.array([len(r["input"]) for r in rows])
    ops = np.array([_n_ops(r) for r in rows])
    templates = Counter(t for r in rows for t in r.get("template_ids", []))
    inputs = [r["input"] for r in rows]
    out = {
        "n": len(rows),
        "kinds": dict(Counter(r["kind"] for r in rows).most_common()),
        "input_words_mean": round(float(words.mean()), 2),
        "input_words_p50": float(np.percentile(words, 50)),
        "input_words_p95": float(np.percentile(words, 95)),
        "input_chars_mean": round(float(chars.mean()), 1),
        "ops_mean": round(float(ops.mean()), 3),
        "ops_hist": {int(k): int(v) for k, v in sorted(Counter(ops.tolist()).items())},
        "empty_share": round(float(np.mean([_empty(r) for r in rows])), 4),
        "distinct_inputs": len(set(inputs)),
        "distinct_1": round(distinct_ngram_ratio(inputs, 1), 4),
        "distinct_2": round(distinct_ngram_ratio(inputs, 2), 4),
        "distinct_3": round(distinct_ngram_ratio(inputs, 3), 4),
        "n_templates_used": len(templates),
        "top_template_share": round(templates.most_common(1)[0][1] / max(1, sum(templates.values())), 4)
        if templates else 0.0,
    }
    if mask:
        out["distinct_2_masked"] = round(distinct_ngram_ratio(inputs, 2, mask), 4)
        out["distinct_3_masked"] = round(distinct_ngram_ratio(inputs, 3, mask), 4)
    return out


def dataset_stats(splits: dict[str, Sequence[dict]], mask: set[str] | None = None) -> dict:
    """:func:`split_stats` for each split."""
    return {name: split_stats(rows, mask) for name, rows in splits.items()}


def stats_table(rows_by_name: dict[str, dict[str, Sequence[dict]]], mask: set[str] | None = None):
    """One line per (dataset, split): size, lengths, ops, empty share, diversity (a DataFrame)."""
    import pandas as pd

    lines = []
    for name, splits in rows_by_name.items():
        for split, rows in splits.items():
            st = split_stats(rows, mask if name.startswith("gen") else None)
            if not st["n"]:
                continue
            lines.append({"dataset": name, "split": split, "n": st["n"], "kinds": len(st["kinds"]),
                          "words_mean": st["input_words_mean"], "words_p95": st["input_words_p95"],
                          "ops_mean": st["ops_mean"], "empty_share": st["empty_share"],
                          "distinct_inputs": st["distinct_inputs"], "distinct_2": st["distinct_2"],
                          "templates_used": st["n_templates_used"]})
    return pd.DataFrame(lines)


def diversity_table(rows_by_name: dict[str, Sequence[dict]], mask: set[str] | None = None, *,
                    sample: int = 500, seed: int = 0):
    """Distinct-1/2/3 of equal-size samples of inputs (fair across datasets of different sizes).

    ``masked`` columns replace the invented names by ``<E>`` first (template diversity proper);
    ``top_template_share`` is the share of the most used template among all template uses.
    """
    import pandas as pd

    rng = np.random.default_rng(seed)
    lines = []
    for name, rows in rows_by_name.items():
        rows = list(rows)
        if not rows:
            continue
        idx = rng.choice(len(rows), size=min(sample, len(rows)), replace=False)
        texts = [rows[i]["input"] for i in idx]
        templates = Counter(t for r in rows for t in r.get("template_ids", []))
        line = {"dataset": name, "n_sampled": len(texts)}
        for n in (1, 2, 3):
            line[f"distinct_{n}"] = round(distinct_ngram_ratio(texts, n), 4)
        use_mask = mask if name.startswith("gen") else None
        for n in (2, 3):
            line[f"distinct_{n}_masked"] = round(distinct_ngram_ratio(texts, n, use_mask), 4) if use_mask else None
        line["distinct_inputs_share"] = round(len({r["input"] for r in rows}) / len(rows), 4)
        line["templates_used"] = len(templates)
        line["top_template_share"] = (round(templates.most_common(1)[0][1] / sum(templates.values()), 4)
                                      if templates else None)
        lines.append(line)
    return pd.DataFrame(lines)


def samples_by_kind(rows: Sequence[dict], per_kind: int = 1, seed: int = 0):
    """``per_kind`` example rows of each kind (kind, input, response), as a DataFrame (an answer row's
    input is its memory block and question, as the reader sees them)."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    by_kind: dict[str, list[dict]] = {}
    for r in rows:
        by_kind.setdefault(r["kind"], []).append(r)
    lines = []
    for kind in sorted(by_kind):
        group = by_kind[kind]
        for i in rng.choice(len(group), size=min(per_kind, len(group)), replace=False):
            r = group[i]
            text = r["input"]
            if r.get("role") == "answer":
                from ..protocol import format_facts

                text = f"{format_facts(r['memory'])}\nQuestion: {text}"
            lines.append({"kind": kind, "input": text, "response": r["response"]})
    return pd.DataFrame(lines)


def samples_table(rows_by_name: dict[str, dict[str, Sequence[dict]]], per_kind: int = 1, seed: int = 0,
                  split: str = "train"):
    """:func:`samples_by_kind` of every dataset, with a ``dataset`` column (generated ones first)."""
    import pandas as pd

    tables = []
    for name in sorted(rows_by_name, key=lambda n: (not n.startswith("gen"), n)):
        t = samples_by_kind(rows_by_name[name][split], per_kind=per_kind, seed=seed)
        t.insert(0, "dataset", name)
        tables.append(t)
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()


def seed_failures_table(imp):
    """The seed examples left out of the import (file, id, cause, first problem), as a DataFrame."""
    import pandas as pd

    return pd.DataFrame([{"file": f["file"], "id": f["id"], "cause": f["category"], "first problem": f["reasons"][0]}
                         for f in imp.failures], columns=["file", "id", "cause", "first problem"])


def plot_input_lengths(rows_by_name: dict[str, dict[str, Sequence[dict]]], path=None, split: str = "train"):
    """Histogram of words per input of every dataset (density, one outline each)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.5))
    for name, splits in rows_by_name.items():
        lengths = [len(tokenize(r["input"])) for r in splits[split]]
        ax.hist(lengths, bins=range(0, 160, 4), histtype="step", density=True, label=name)
    ax.set(xlabel="words per input", ylabel="density", title="Input length")
    ax.legend()
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig


def plot_ops(rows_by_name: dict[str, dict[str, Sequence[dict]]], path=None, split: str = "train", cap: int = 15):
    """Share of examples per number of operations (memory items for the answer role), per dataset."""
    import matplotlib.pyplot as plt
    import pandas as pd

    fig, axes = plt.subplots(1, len(rows_by_name), figsize=(3.2 * len(rows_by_name), 3), sharey=True, squeeze=False)
    for ax, (name, splits) in zip(axes[0], rows_by_name.items()):
        ops = pd.Series([_n_ops(r) for r in splits[split]]).clip(upper=cap)
        ops.value_counts(normalize=True).sort_index().plot.bar(ax=ax, color="tab:blue")
        what = "memory items" if "answer" in name else "operations"
        ax.set(title=name, xlabel=f"{what} ({cap} = {cap}+)")
    axes[0][0].set_ylabel("share of examples")
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig
