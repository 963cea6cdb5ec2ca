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


def split_stats(rows: Sequence[dict], mask: set[str] | None = None) -> dict:
    """Statistics of one split: size, kinds, lengths, ops per example, empty share, diversity."""
    if not rows:
        return {"n": 0}
    words = np.array([len(tokenize(r["input"])) for r in rows])
    chars = np.array([len(r["input"]) for r in rows])
    ops = np.array([r["n_ops"] for r in rows])
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
        "empty_share": round(float((ops == 0).mean()), 4),
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
    """``per_kind`` example rows of each kind (kind, input, response), as a DataFrame."""
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
            lines.append({"kind": kind, "input": r["input"], "response": r["response"]})
    return pd.DataFrame(lines)
