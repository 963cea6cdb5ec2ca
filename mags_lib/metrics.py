"""Metrics of ask/write outputs, as DESIGN.md defines them (shared by training, notebooks and tests).

* **Adherence**: share of outputs that parse under the *strict* protocol for their role
  (:func:`mags_lib.protocol.parse`). An empty output adheres.
* **Op F1** (the seed's metric): per example, predicted and gold operations are matched one-to-one
  with the Hungarian algorithm (:func:`scipy.optimize.linear_sum_assignment`) among pairs with the
  same tag and an embedding cosine >= 0.65 between their contents (MiniLM by default); the matching
  maximises the number of matched pairs, ties broken by total similarity. Counts are summed over
  the set (micro precision / recall / F1).
* **Exact-triplet F1**: the same micro P/R/F1 with matches required to be identical after
  :func:`mags_lib.protocol.normalize_text` on every field (lower case, punctuation and articles
  removed); asks compare their normalised query text.

Operations of a prediction are read with the *lenient* parser for its role, so op F1 measures
content even when the format is slightly off (adherence measures the format); gold responses are
parsed strictly. The content compared for a write is ``"subject relation object"``.

Conventions for empty sets: precision is 1 when nothing was predicted, recall is 1 when nothing
was expected, and F1 is 1 when both are empty (an empty output for an input with nothing to
store is a perfect answer), else ``2PR / (P + R)`` (0 when P + R = 0).

Answers (the reader) are scored by the game's rule (DESIGN.md): a response is **correct** when,
after :func:`mags_lib.protocol.normalize_text`, one alias occurs in it as a whole-word run
(:func:`answer_matches`); a question with no alias (nothing in memory answers it) is correct when the
response is an **abstention** (:func:`is_abstention`: one of :data:`ABSTAIN_PHRASES`, which include
``protocol.ABSTAIN_ANSWER``). :func:`evaluate_answers` reports accuracy over all questions, over the
answerable ones, abstention accuracy over the unanswerable ones, and the false-abstention rate.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from . import protocol
from .protocol import Op

__all__ = [
    "ABSTAIN_PHRASES",
    "PRF",
    "SIM_THRESHOLD",
    "AnswerReport",
    "EvalReport",
    "adherence",
    "answer_correct",
    "answer_matches",
    "evaluate_answers",
    "evaluate_predictions",
    "exact_key",
    "exact_matches",
    "is_abstention",
    "mean_difference",
    "op_f1_difference",
    "op_text",
    "prf",
    "resolve_embedder",
    "semantic_matches",
]

SIM_THRESHOLD = 0.65
_BIG = 1000.0


@dataclass(frozen=True)
class PRF:
    """Micro precision, recall, F1 and the counts behind them."""

    precision: float
    recall: float
    f1: float
    tp: int
    n_pred: int
    n_gold: int

    def as_dict(self, prefix: str = "") -> dict:
        return {f"{prefix}{k}": v for k, v in asdict(self).items()}


def prf(tp: int, n_pred: int, n_gold: int) -> PRF:
    """Precision/recall/F1 from counts, with the empty-set conventions of this module.

    >>> prf(2, 4, 2).f1
    0.6666666666666666
    >>> prf(0, 0, 0).f1, prf(0, 1, 0).f1, prf(0, 0, 3).f1
    (1.0, 0.0, 0.0)
    """
    if not 0 <= tp <= min(n_pred, n_gold):
        raise ValueError(f"need 0 <= tp <= min(n_pred, n_gold), got tp={tp}, n_pred={n_pred}, n_gold={n_gold}")
    p = tp / n_pred if n_pred else 1.0
    r = tp / n_gold if n_gold else 1.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return PRF(p, r, f, tp, n_pred, n_gold)


def adherence(outputs: Sequence[str], roles: Sequence[str] | str) -> float:
    """Share of ``outputs`` that parse strictly for their role.

    >>> adherence(["<memory_ask>x</memory_ask>", "", "Sure: <memory_ask>x</memory_ask>"], "ask")
    0.6666666666666666
    """
    roles = _roles(roles, len(outputs))
    if not outputs:
        return float("nan")
    return sum(protocol.parse(o, role=r, mode="strict").ok for o, r in zip(outputs, roles)) / len(outputs)


def op_text(op: Op) -> str:
    """The text compared for an op: a write's ``"subject relation object"``, an ask's query."""
    return " ".join(op.triplet) if op.role == "write" and op.triplet else op.content


def exact_key(op: Op) -> tuple:
    """Normalised identity of an op for exact matching.

    >>> exact_key(Op("write", "The Blorps,eat,Lemons!", ("The Blorps", "eat", "Lemons!")))
    ('write', 'blorps', 'eat', 'lemons')
    """
    if op.role == "write" and op.triplet:
        return ("write",) + protocol.normalize_triplet(op.triplet)
    return (op.role, protocol.normalize_text(op.content))


def exact_matches(pred: Sequence[Op], gold: Sequence[Op]) -> int:
    """Number of one-to-one exact matches (multiset intersection of :func:`exact_key`)."""
    return sum((Counter(map(exact_key, pred)) & Counter(map(exact_key, gold))).values())


def semantic_matches(pred: Sequence[Op], gold: Sequence[Op], vectors: dict[str, np.ndarray],
                     threshold: float = SIM_THRESHOLD) -> int:
    """Size of the best one-to-one matching among same-tag pairs with cosine >= ``threshold``.

    ``vectors`` maps :func:`op_text` to an L2-normalised embedding.
    """
    if not pred or not gold:
        return 0
    from scipy.optimize import linear_sum_assignment

    P = np.stack([vectors[op_text(o)] for o in pred])
    G = np.stack([vectors[op_text(o)] for o in gold])
    sim = P @ G.T
    same = np.array([[p.role == g.role for g in gold] for p in pred])
    valid = same & (sim >= threshold - 1e-6)
    if not valid.any():
        return 0
    weight = np.where(valid, _BIG + sim, 0.0)
    rows, cols = linear_sum_assignment(weight, maximize=True)
    return int(valid[rows, cols].sum())


def resolve_embedder(embedder):
    """An embedder from a name (``"minilm"``, ``"hash"``) or the object itself."""
    if isinstance(embedder, str):
        from .embed import load_embedder

        return _cached_embedder(embedder) if embedder.startswith("hash") else load_embedder(embedder)
    if embedder is None or not hasattr(embedder, "encode"):
        raise TypeError(f"embedder must be a name ('minilm', 'hash') or have .encode(), got {embedder!r}")
    return embedder


_EMBEDDERS: dict[str, object] = {}


def _cached_embedder(name: str):
    from .embed import load_embedder

    if name not in _EMBEDDERS:
        _EMBEDDERS[name] = load_embedder(name)
    return _EMBEDDERS[name]


def _embed_ops(op_lists: Sequence[Sequence[Op]], embedder) -> dict[str, np.ndarray]:
    texts = sorted({op_text(o) for ops in op_lists for o in ops})
    if not texts:
        return {}
    vecs = resolve_embedder(embedder).encode(texts)
    return dict(zip(texts, np.asarray(vecs, dtype=np.float32)))


def _roles(roles, n: int) -> list:
    if roles is None or isinstance(roles, str):
        return [roles] * n
    roles = list(roles)
    if len(roles) != n:
        raise ValueError(f"got {len(roles)} roles for {n} outputs")
    return roles


@dataclass
class EvalReport:
    """Metrics of a list of predictions against gold responses."""

    n: int
    adherence: float
    op: PRF
    exact: PRF
    empty_accuracy: float  # on examples whose gold is empty: share predicted empty (nan if none)
    per_example: list[dict] = field(default_factory=list, repr=False)

    def summary(self) -> dict:
        """Flat dict for tables: n, adherence, op_p/op_r/op_f1, exact_p/exact_r/exact_f1, empty_acc."""
        return {"n": self.n, "adherence": self.adherence, "op_p": self.op.precision, "op_r": self.op.recall,
                "op_f1": self.op.f1, "exact_p": self.exact.precision, "exact_r": self.exact.recall,
                "exact_f1": self.exact.f1, "empty_acc": self.empty_accuracy}


def evaluate_predictions(predictions: Sequence[str], golds: Sequence[str], roles: Sequence[str] | str, *,
                         embedder="minilm", threshold: float = SIM_THRESHOLD) -> EvalReport:
    """Adherence, op P/R/F1 (Hungarian, same tag, cosine >= threshold) and exact-triplet P/R/F1.

    Parameters
    ----------
    predictions : list of str
        Model outputs.
    golds : list of str
        Gold responses in protocol text (must parse strictly).
    roles : str or list of str
        ``"ask"`` / ``"write"`` per example (or one for all).
    embedder : str or Embedder
        ``"minilm"`` (the metric's definition) or ``"hash"`` for fast tests.
    threshold : float
        Cosine threshold of a semantic match.

    Examples
    --------
    >>> r = evaluate_predictions(
    ...     ["<memory_write>Blorps,eat,lemons</memory_write>", "hello", ""],
    ...     ["<memory_write>blorps,eat,lemons</memory_write>", "<memory_ask>blorps diet</memory_ask>", ""],
    ...     ["write", "ask", "ask"], embedder="hash")
    >>> round(r.adherence, 3), r.exact.tp, r.exact.n_gold, r.op.f1 > 0.6, r.empty_accuracy
    (0.667, 1, 2, True, 1.0)
    """
    if len(predictions) != len(golds):
        raise ValueError(f"{len(predictions)} predictions but {len(golds)} gold responses")
    roles = _roles(roles, len(predictions))
    embedder = resolve_embedder(embedder)  # fail early on a bad embedder, before any work
    preds, gold_ops, strict_ok = [], [], []
    for i, (p, g, r) in enumerate(zip(predictions, golds, roles)):
        gp = protocol.parse(g, role=r, mode="strict")
        if not gp.ok:
            raise ValueError(f"gold response #{i} does not parse strictly: {gp.problems}")
        gold_ops.append(gp.ops)
        preds.append(protocol.parse(p, role=r, mode="lenient").ops)
        strict_ok.append(protocol.parse(p, role=r, mode="strict").ok)
    vectors = _embed_ops(preds + gold_ops, embedder)
    tp_s = tp_e = n_p = n_g = 0
    per_example, empty_hits, empty_total = [], 0, 0
    for i, (p_ops, g_ops) in enumerate(zip(preds, gold_ops)):
        s = semantic_matches(p_ops, g_ops, vectors, threshold)
        e = exact_matches(p_ops, g_ops)
        tp_s, tp_e, n_p, n_g = tp_s + s, tp_e + e, n_p + len(p_ops), n_g + len(g_ops)
        if not g_ops:
            empty_total += 1
            empty_hits += not p_ops
        per_example.append({"adheres": strict_ok[i], "n_pred": len(p_ops), "n_gold": len(g_ops),
                            "sem_tp": s, "exact_tp": e, "op_f1": prf(s, len(p_ops), len(g_ops)).f1,
                            "exact_f1": prf(e, len(p_ops), len(g_ops)).f1})
    n = len(predictions)
    return EvalReport(n=n, adherence=sum(strict_ok) / n if n else float("nan"), op=prf(tp_s, n_p, n_g),
                      exact=prf(tp_e, n_p, n_g),
                      empty_accuracy=empty_hits / empty_total if empty_total else float("nan"),
                      per_example=per_example)


# --------------------------------------------------------------------------------------------------
# answers (the reader), by the game's scoring rule
ABSTAIN_PHRASES = protocol.ABSTAIN_PHRASES  # the game's list: one for every scorer


def answer_matches(response: str, aliases: Sequence[str]) -> bool:
    """Whether an alias occurs in the response as a whole-word run (:func:`mags_lib.protocol.matching_alias`:
    after :func:`~mags_lib.protocol.normalize_answer`, numbers kept whole, the response's abstention
    phrases left out).

    >>> answer_matches("They eat the frozen lemons.", ["frozen lemons"])
    True
    >>> answer_matches("category", ["cat"]), answer_matches("anything", []), answer_matches("1,380", ["380"])
    (False, False, False)
    """
    return protocol.matching_alias(response, aliases) is not None


def is_abstention(response: str) -> bool:
    """Whether the response says the information is unknown / not in memory.

    >>> is_abstention(protocol.ABSTAIN_ANSWER), is_abstention("I don't know."), is_abstention("Knowing")
    (True, True, False)
    """
    return protocol.abstains(response)


def answer_correct(response: str, aliases: Sequence[str]) -> bool:
    """The game's rule: an alias matches (:func:`answer_matches`); with no alias, an abstention.

    >>> answer_correct("frozen lemons", ["frozen lemons"]), answer_correct("I don't know", [])
    (True, True)
    >>> answer_correct("frozen lemons", [])
    False
    """
    return answer_matches(response, aliases) if aliases else is_abstention(response)


@dataclass
class AnswerReport:
    """Scores of reader responses against aliases.

    Attributes
    ----------
    accuracy : float
        Share of all questions answered correctly (:func:`answer_correct`).
    answerable_accuracy : float
        Share of answerable questions (with aliases) whose response matches an alias.
    abstain_accuracy : float
        Share of unanswerable questions (no alias) answered with an abstention.
    false_abstain : float
        Share of answerable questions answered with an abstention.
    """

    n: int
    n_answerable: int
    accuracy: float
    answerable_accuracy: float
    abstain_accuracy: float
    false_abstain: float
    words_mean: float
    per_example: list[dict] = field(default_factory=list, repr=False)

    def summary(self) -> dict:
        return {"n": self.n, "n_answerable": self.n_answerable, "accuracy": self.accuracy,
                "answerable_acc": self.answerable_accuracy, "abstain_acc": self.abstain_accuracy,
                "false_abstain": self.false_abstain, "words_mean": self.words_mean}


def evaluate_answers(predictions: Sequence[str], aliases: Sequence[Sequence[str]]) -> AnswerReport:
    """Accuracy, answerable accuracy, abstention accuracy and false abstentions of reader responses.

    >>> r = evaluate_answers(["frozen lemons", "I don't know", "figs", protocol.ABSTAIN_ANSWER],
    ...                      [["frozen lemons"], ["copper caves"], [], []])
    >>> r.accuracy, r.answerable_accuracy, r.abstain_accuracy, r.false_abstain
    (0.5, 0.5, 0.5, 0.5)
    """
    if len(predictions) != len(aliases):
        raise ValueError(f"{len(predictions)} predictions but {len(aliases)} alias lists")
    per, nan = [], float("nan")
    for p, al in zip(predictions, aliases):
        if isinstance(al, str):
            raise TypeError("aliases must be a list of alias lists (one list per question), not a string")
        al = list(al)
        per.append({"answerable": bool(al), "correct": answer_correct(p, al), "abstained": is_abstention(p),
                    "words": len(str(p).split())})

    def share(rows, key):
        return sum(r[key] for r in rows) / len(rows) if rows else nan

    ans = [r for r in per if r["answerable"]]
    una = [r for r in per if not r["answerable"]]
    return AnswerReport(n=len(per), n_answerable=len(ans), accuracy=share(per, "correct"),
                        answerable_accuracy=share(ans, "correct"), abstain_accuracy=share(una, "correct"),
                        false_abstain=share(ans, "abstained"),
                        words_mean=float(np.mean([r["words"] for r in per])) if per else nan, per_example=per)


# --------------------------------------------------------------------------------------------------
# paired comparisons of two systems on the same examples (95 % percentile bootstrap over the examples)
def _micro_f1(tp: np.ndarray, n_pred: np.ndarray, n_gold: np.ndarray) -> np.ndarray:
    p, g = n_pred.sum(-1), n_gold.sum(-1)
    t = tp.sum(-1)
    return np.where(p + g > 0, 2 * t / np.maximum(p + g, 1), 1.0)


def op_f1_difference(a: Sequence[dict], b: Sequence[dict], *, tp: str = "sem_tp", n_boot: int = 2000,
                     seed: int = 0) -> dict:
    """Micro op F1 of ``a`` minus that of ``b`` (per-example rows of :func:`evaluate_predictions` on the same
    inputs, in the same order) with a 95 % paired percentile-bootstrap interval over the inputs (micro F1
    recomputed on each resample). ``tp="exact_tp"``: exact-triplet F1 instead.

    >>> a = [{"sem_tp": 1, "n_pred": 1, "n_gold": 1}, {"sem_tp": 0, "n_pred": 1, "n_gold": 1}]
    >>> op_f1_difference(a, a, n_boot=10)["difference"]
    0.0
    """
    if len(a) != len(b) or not a:
        raise ValueError(f"need the same non-empty inputs on both sides, got {len(a)} and {len(b)}")
    arr = {k: (np.array([r[f] for r in a]), np.array([r[f] for r in b])) for k, f in
           (("tp", tp), ("p", "n_pred"), ("g", "n_gold"))}
    diff = float(_micro_f1(arr["tp"][0], arr["p"][0], arr["g"][0]) - _micro_f1(arr["tp"][1], arr["p"][1], arr["g"][1]))
    idx = np.random.default_rng(seed).integers(0, len(a), size=(n_boot, len(a)))
    boots = (_micro_f1(arr["tp"][0][idx], arr["p"][0][idx], arr["g"][0][idx])
             - _micro_f1(arr["tp"][1][idx], arr["p"][1][idx], arr["g"][1][idx]))
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return {"difference": diff, "interval": [float(lo), float(hi)], "n": len(a), "n_boot": n_boot}


def mean_difference(a: Sequence[float], b: Sequence[float], *, n_boot: int = 2000, seed: int = 0) -> dict:
    """Mean of ``a`` minus mean of ``b`` (per-example scores of two systems on the same examples, same order)
    with a 95 % paired percentile-bootstrap interval over the examples.

    >>> d = mean_difference([1, 1, 0, 1], [1, 0, 0, 1], n_boot=200)
    >>> d["difference"], d["n"], d["interval"][0] <= 0.25 <= d["interval"][1]
    (0.25, 4, True)
    """
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or not x.size:
        raise ValueError(f"need the same non-empty examples on both sides, got {x.shape} and {y.shape}")
    d = x - y
    idx = np.random.default_rng(seed).integers(0, d.size, size=(n_boot, d.size))
    lo, hi = np.percentile(d[idx].mean(1), [2.5, 97.5])
    return {"difference": float(d.mean()), "interval": [float(lo), float(hi)], "n": int(d.size), "n_boot": n_boot}
