"""Reward functions for GRPO on the ask, write and answer roles, chosen by name from :data:`REGISTRY`.

Every function has TRL's signature ``(completions, **kwargs) -> list[float]``: ``completions`` is a
list of strings or of chat message lists (``[{"role": "assistant", "content": ...}]``), and the
dataset's columns arrive as keyword lists of the same length (``role``, ``response``, ``context``,
``gold_facts``; see :mod:`mags_lib.data.render`; the answer role's ``aliases``, see
:mod:`mags_lib.data.answer`). A scalar column (``role``, ``response``) may also
be given as a single string for all completions; list-valued columns (``context``, ``gold_facts``)
(and ``aliases``) must always hold one entry per completion. Rewards are pure (no global counters, no state kept between calls except the
shared embedding model) and picklable (module-level functions; :func:`get_reward` binds options with
:func:`functools.partial` and keeps ``__name__`` for TRL's logs).

========================  ============  ===========================================================
name                      range         what it scores
========================  ============  ===========================================================
``format``                {0, .5, 1}    1 strict protocol for the role, .5 only leniently parsable
                                        operations, 0 nothing usable
``role``                  [0, 1]        share of tags of the right role (1 when there is no tag)
``exact_f1``              [0, 1]        per-example exact-triplet F1 against ``response``
``op_f1``                 [0, 1]        per-example semantic op F1 (the seed's metric, Hungarian,
                                        same tag, cosine >= 0.65)
                                        (both: ``score="min"`` scores min(precision, recall)
                                        instead of F1, see :data:`SCORES`)
``ask_retrieval``         [0, 1]        F1 of the facts the asked queries retrieve from a small
                                        LiquidGraph built from ``context`` against ``gold_facts``
                                        (``score="recall"``: the share of them found)
``length``                [-1, 0]       penalty for output longer than ``slack`` x gold + margin
``answer_correct``        {0, 1}        answer role: the game's rule (an alias as a whole-word run;
                                        with no alias, an abstention), and committed (no hedge, no
                                        list of candidates: ``strict``)
``abstention``            [-1, 1]       answer role: abstains exactly when there is no alias
                                        (``wrong_answer`` in [-1, 1] for a wrong answer)
``brevity``               [-1, 0]       answer role: penalty for words beyond ``slack`` x the gold
                                        answer's words + ``margin``
``ops_cost``              [-1, 0]       graph cost: operations stored beyond the gold's count
``new_nodes_cost``        [-1, 0]       graph cost: entity nodes created (applied to a graph of
                                        ``context``) beyond those the gold creates
``new_edges_cost``        [-1, 0]       graph cost: fact edges created beyond the gold's
``churn_cost``            [-1, 0]       graph cost: existing facts invalidated plus entities merged
                                        into existing nodes, beyond the gold's
``graph_cost``            [-1, 0]       the four terms above, weighted by :class:`GraphCostConfig`
``outcome_write``         [0, 1]        write role: share of a mini-scenario's questions a frozen
                                        reader answers from the memory built with the completion
                                        (see :mod:`mags_lib.data.outcome`)
``outcome_ask``           [0, 1]        ask role: share of the scenario's questions the reader
                                        answers from what the completion's queries recall
========================  ============  ===========================================================

Graph-cost terms count, per completion, ``max(0, x(completion) - x(gold) - slack)`` (``x`` an
operation count, or what applying the operations to a fresh graph of ``context`` created or churned)
and return ``-min(1, excess / scale)``: the gold's own cost is free, and a term reaches -1 at ``scale``
excess units. Without a gold ``response`` the gold's cost is 0.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import protocol
from .metrics import (
    SIM_THRESHOLD,
    answer_correct,
    exact_matches,
    prf,
    resolve_embedder,
    semantic_matches,
)

__all__ = [
    "REGISTRY",
    "SCORES",
    "GraphCostConfig",
    "abstention_reward",
    "answer_correct_reward",
    "ask_retrieval_reward",
    "ask_retrieval_scores",
    "brevity_reward",
    "by_role_reward",
    "churn_cost",
    "completion_text",
    "exact_f1_reward",
    "format_reward",
    "get_reward",
    "graph_cost_reward",
    "graph_effects",
    "group_push",
    "length_penalty",
    "new_edges_cost",
    "new_nodes_cost",
    "op_f1_reward",
    "ops_cost",
    "outcome_ask_reward",
    "outcome_write_reward",
    "role_reward",
    "signal_report",
]


def completion_text(completion: Any) -> str:
    """The text of a completion: a string, a message dict, or a list of messages (last assistant's).

    >>> completion_text([{"role": "assistant", "content": "<memory_ask>x</memory_ask>"}])
    '<memory_ask>x</memory_ask>'
    >>> completion_text("plain")
    'plain'
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    if isinstance(completion, (list, tuple)):
        msgs = [m for m in completion if isinstance(m, dict)]
        assistant = [m for m in msgs if m.get("role") == "assistant"] or msgs
        return str(assistant[-1].get("content", "")) if assistant else ""
    return "" if completion is None else str(completion)


def _column(value, n: int, name: str, default=None) -> list:
    if value is None:
        if default is _REQUIRED:
            raise ValueError(f"this reward needs the dataset column {name!r} (pass it as a keyword)")
        return [default] * n
    if isinstance(value, (str, dict)) or not isinstance(value, (list, tuple)):
        return [value] * n
    if len(value) != n:
        raise ValueError(f"column {name!r} has {len(value)} values for {n} completions")
    return list(value)


_REQUIRED = object()


def format_reward(completions: Sequence, role: Sequence[str] | str | None = None, **kwargs) -> list[float]:
    """1.0 when the output follows the strict protocol for ``role``; 0.5 when only the lenient parser
    recovers operations; else 0.0. An empty output is well-formed (nothing to ask or store).

    >>> format_reward(["<memory_ask>blorps diet</memory_ask>", "Sure: <memory_ask>blorps diet",
    ...                "no tags at all", ""], role="ask")
    [1.0, 0.5, 0.0, 1.0]
    """
    roles = _column(role, len(completions), "role")
    out = []
    for c, r in zip(completions, roles):
        text = completion_text(c)
        if protocol.parse(text, role=r, mode="strict").ok:
            out.append(1.0)
        elif protocol.parse(text, role=r, mode="lenient").ops:
            out.append(0.5)
        else:
            out.append(0.0)
    return out


def role_reward(completions: Sequence, role: Sequence[str] | str | None = None, **kwargs) -> list[float]:
    """Share of the output's memory tags that belong to ``role`` (1.0 when it has no tag).

    >>> role_reward(["<memory_ask>q</memory_ask><memory_write>a,b,c</memory_write>", "",
    ...              "<memory_write>a,b,c</memory_write>"], role="write")
    [0.5, 1.0, 1.0]
    """
    roles = _column(role, len(completions), "role", default=_REQUIRED)
    out = []
    for c, r in zip(completions, roles):
        ops = protocol.parse(completion_text(c), role=None, mode="lenient").ops
        out.append(sum(op.role == r for op in ops) / len(ops) if ops else 1.0)
    return out


SCORES = ("f1", "min")
"""How ``exact_f1`` and ``op_f1`` turn an example's matches into a reward. ``f1``: their F1. ``min``:
min(precision, recall) = matches / max(stated, gold), so leaving a gold operation out costs exactly as much
as stating a wrong one. F1 prefers the omission (2 of 3 gold triplets stated and right: 0.8; the same
plus a wrong third: 0.67). A GRPO option (``GRPOConfig.reward_options``), not the default: it did not stop
GRPO from leaving triplets out of the default writer, and :func:`group_push` shows the rewards, F1 or min,
push towards more triplets there (README: GRPO and the omission)."""


def _scorer(score: str) -> Callable[[Any], float]:
    if score == "f1":
        return lambda pr: pr.f1
    if score == "min":
        return lambda pr: min(pr.precision, pr.recall)
    raise ValueError(f"score must be one of {SCORES}, got {score!r}")


def _pred_gold(completions, response, role):
    golds = _column(response, len(completions), "response", default=_REQUIRED)
    roles = _column(role, len(completions), "role")
    pairs = []
    for c, g, r in zip(completions, golds, roles):
        gp = protocol.parse(g, role=r, mode="lenient")  # lenient: a reward must not raise mid-training
        pairs.append((protocol.parse(completion_text(c), role=r, mode="lenient").ops, gp.ops))
    return pairs


def exact_f1_reward(completions: Sequence, response: Sequence[str] | str | None = None,
                    role: Sequence[str] | str | None = None, *, score: str = "f1", **kwargs) -> list[float]:
    """Per-example F1 of exactly matching operations (fields normalised) against the gold ``response``
    (``score="min"``: min(precision, recall), see :data:`SCORES`).

    >>> gold = "<memory_write>Blorps,eat,lemons</memory_write><memory_write>Blorps,live in,caves</memory_write>"
    >>> exact_f1_reward(["<memory_write>blorps,eat,Lemons</memory_write>", gold, "", "gibberish"],
    ...                 response=gold, role="write")
    [0.6666666666666666, 1.0, 0.0, 0.0]
    >>> exact_f1_reward([""], response=[""], role="ask")   # nothing to store, nothing stored
    [1.0]
    >>> wrong = "<memory_write>Blorps,eat,lemons</memory_write><memory_write>Blorps,eat,caves</memory_write>"
    >>> one = "<memory_write>Blorps,eat,lemons</memory_write>"
    >>> exact_f1_reward([one, wrong], response=gold, role="write"), exact_f1_reward([one, wrong], response=gold,
    ...                                                                          role="write", score="min")
    ([0.6666666666666666, 0.5], [0.5, 0.5])
    """
    of = _scorer(score)
    return [of(prf(exact_matches(p, g), len(p), len(g))) for p, g in _pred_gold(completions, response, role)]


def op_f1_reward(completions: Sequence, response: Sequence[str] | str | None = None,
                 role: Sequence[str] | str | None = None, *, embedder="minilm",
                 threshold: float = SIM_THRESHOLD, score: str = "f1", **kwargs) -> list[float]:
    """Per-example semantic op F1 (the seed's metric): Hungarian matching of same-tag operations whose
    contents have cosine >= ``threshold`` (MiniLM by default; ``embedder="hash"`` for tests);
    ``score="min"``: min(precision, recall) of the same matches (:data:`SCORES`).

    >>> op_f1_reward(["<memory_ask>blorps diet</memory_ask>", "<memory_ask>tax law</memory_ask>"],
    ...              response="<memory_ask>the blorps diet</memory_ask>", role="ask", embedder="hash")
    [1.0, 0.0]
    """
    of = _scorer(score)
    pairs = _pred_gold(completions, response, role)
    from .metrics import _embed_ops

    vectors = _embed_ops([p for p, _ in pairs] + [g for _, g in pairs], embedder)
    return [of(prf(semantic_matches(p, g, vectors, threshold), len(p), len(g))) for p, g in pairs]


def _graph_for(context: tuple, embedder, seed: int):
    from .graph import LiquidGraph

    g = LiquidGraph(embedder, seed=seed)
    if context:
        g.engram([tuple(t) for t in context], source="context")
    return g


def ask_retrieval_reward(completions: Sequence, context: Sequence | None = None,
                         gold_facts: Sequence | None = None, *, embedder="minilm", k: int = 1,
                         per_query: bool = True, max_queries: int = 8, seed: int = 0, score: str = "f1",
                         **kwargs) -> list[float]:
    """How well the completion's queries retrieve the gold facts from a graph of the context: with
    ``score="f1"`` (the default for training) the F1 of the recalled facts against the gold ones, so that
    spraying queries costs (recall alone can only rise with every query: 8 template queries scored 1.0 where
    the one natural query scored 0, found by an audit); ``"recall"``: the share of the gold facts found (the
    held-out "retrieval" metric, reported beside its precision).

    For each example a :class:`~mags_lib.graph.LiquidGraph` is built from its ``context`` triplets
    (the facts a memory would hold), the completion's ``<memory_ask>`` queries (lenient parse, at most
    ``max_queries``) are recalled -- each on its own with top-``k`` when ``per_query`` (the default:
    every query must pinpoint a fact, so echoing a two-question input as one query earns half), else
    all together with top-``k`` -- and the reward is the share of ``gold_facts`` found among the
    recalled facts (normalised triplets). With no gold facts (nothing to
    ask) the reward is 1.0 for an output without queries and 0.0 otherwise; with gold facts and no
    query it is 0.0. ``context`` and ``gold_facts`` hold one list of triplets per completion (the
    dataset columns). One graph is built per distinct context and copied for each completion, so
    recall side effects never leak between completions.

    >>> ctx = [["blorps", "eat", "frozen lemons"], ["blorps", "live in", "copper caves"],
    ...        ["quindles", "fear", "purple umbrellas"], ["Odalie", "works as", "glassblower"]]
    >>> ask_retrieval_reward(["<memory_ask>what do blorps eat</memory_ask>",
    ...                       "<memory_ask>Odalie job</memory_ask>", ""],
    ...                      context=[ctx] * 3, gold_facts=[[["blorps", "eat", "frozen lemons"]]] * 3,
    ...                      embedder="hash", k=1)
    [1.0, 0.0, 0.0]
    >>> spray = "".join(f"<memory_ask>{s} {r}</memory_ask>" for s in ("blorps", "quindles", "Odalie")
    ...                 for r in ("eat", "fear", "works as"))
    >>> kw = dict(context=[ctx] * 2, gold_facts=[[["blorps", "eat", "frozen lemons"]]] * 2, embedder="hash")
    >>> one = "<memory_ask>what do blorps eat</memory_ask>"
    >>> ask_retrieval_reward([one, spray], **kw), ask_retrieval_reward([one, spray], score="recall", **kw)
    ([1.0, 0.5], [1.0, 1.0])
    """
    if score not in ("f1", "recall", "precision"):
        raise ValueError(f"ask_retrieval score must be f1, recall or precision, got {score!r}")
    return [d[score] for d in ask_retrieval_scores(completions, context, gold_facts, embedder=embedder, k=k,
                                                   per_query=per_query, max_queries=max_queries, seed=seed)]


def ask_retrieval_scores(completions: Sequence, context: Sequence | None = None,
                         gold_facts: Sequence | None = None, *, embedder="minilm", k: int = 1,
                         per_query: bool = True, max_queries: int = 8, seed: int = 0) -> list[dict[str, float]]:
    """:func:`ask_retrieval_reward`'s ``recall``, ``precision`` and ``f1`` of each completion, from one recall
    of its queries (the held-out evaluation reports two of them)."""
    n = len(completions)
    contexts = _column(context, n, "context", default=_REQUIRED)
    golds = _column(gold_facts, n, "gold_facts", default=_REQUIRED)
    emb = resolve_embedder(embedder)
    built: dict[tuple, Any] = {}
    out = []
    for c, ctx, gold in zip(completions, contexts, golds):
        queries = protocol.parse(completion_text(c), role="ask", mode="lenient").asks[:max_queries]
        gold_keys = {protocol.normalize_triplet(t) for t in (gold or [])}
        if not gold_keys or not queries:  # nothing to ask: right only without a query; no query: nothing found
            v = 1.0 if not gold_keys and not queries else 0.0
            out.append({"recall": v, "precision": v, "f1": v})
            continue
        key = tuple(tuple(t) for t in (ctx or []))
        if key not in built:
            built[key] = _graph_for(key, emb, seed)
        g = built[key].copy()
        found = set()
        for q in (queries if per_query else [queries]):
            res = g.recall(q if per_query or len(q) > 1 else q[0], k=k)
            found |= {protocol.normalize_triplet(it.triplet) for it in res.items if it.triplet is not None}
        hit = len(gold_keys & found)
        rec, prec = hit / len(gold_keys), (hit / len(found) if found else 0.0)
        out.append({"recall": rec, "precision": prec, "f1": 2 * prec * rec / (prec + rec) if hit else 0.0})
    return out


def length_penalty(completions: Sequence, response: Sequence[str] | str | None = None, *,
                   slack: float = 1.5, margin: int = 40, scale: float = 200.0, **kwargs) -> list[float]:
    """Penalty in [-1, 0] for characters beyond ``slack`` x len(gold) + ``margin``, reaching -1 after
    ``scale`` more characters. Without a gold ``response`` the allowance is ``margin`` alone.

    >>> gold = "<memory_ask>blorps diet</memory_ask>"   # 36 characters -> allowance 94
    >>> length_penalty([gold, gold * 3, gold * 12], response=gold)
    [0.0, -0.07, -1.0]
    """
    if not (0 <= slack < math.inf and 0 <= margin < math.inf and 0 < scale < math.inf):  # NaN fails every one
        raise ValueError("length_penalty needs slack >= 0, margin >= 0 and scale > 0")
    golds = _column(response, len(completions), "response", default="")
    out = []
    for c, g in zip(completions, golds):
        excess = len(completion_text(c)) - (slack * len(g or "") + margin)
        out.append(-round(min(1.0, max(0.0, excess) / scale), 4) if excess > 0 else 0.0)
    return out


def _aliases(aliases, n: int) -> list[list[str]]:
    if aliases is None:
        raise ValueError("this reward needs the dataset column 'aliases' (one list of aliases per completion)")
    if not isinstance(aliases, (list, tuple)) or len(aliases) != n:
        raise ValueError(f"column 'aliases' must hold one list per completion ({n}), got {aliases!r:.80}")
    out = []
    for a in aliases:
        if isinstance(a, str) or not isinstance(a, (list, tuple)):
            raise ValueError(f"each entry of 'aliases' is a list of strings, got {a!r:.80}")
        out.append([str(x) for x in a])
    return out


def answer_correct_reward(completions: Sequence, aliases: Sequence[Sequence[str]] | None = None,
                          input: Sequence[str] | str | None = None, *, strict: bool = True,
                          **kwargs) -> list[float]:
    """1.0 when the answer is correct: by the game's rule (:func:`mags_lib.metrics.answer_correct`), and with
    ``strict`` (the default for training) only when it commits (:meth:`mags_lib.protocol.AnswerForm.strict`):
    an answer beside an abstention ("Not sure, figs?") or among other candidates ("plums, lemons, figs") is
    not, and nor is an abstention beside a guess on a question nothing answers. ``input``: the questions
    (their words are no guess). The game scores such replies right (DESIGN.md's rule, README); a reward that
    did taught the reader to hedge and to list (found by an audit).

    >>> answer_correct_reward(["Frozen lemons.", "lemons", "I don't know", "I don't know"],
    ...                       aliases=[["frozen lemons"], ["frozen lemons"], [], ["figs"]])
    [1.0, 0.0, 1.0, 0.0]
    >>> answer_correct_reward(["Not sure, figs?", "plums, lemons, caves, figs", "Not sure, figs?"],
    ...                       aliases=[["figs"], ["figs"], []])
    [0.0, 0.0, 0.0]
    """
    out = []
    for text, a, _, commits in _answer_forms(completions, aliases, input):
        ok = answer_correct(text, a)
        if ok and strict:
            ok = commits is (True if a else None)
        out.append(float(ok))
    return out


def _answer_forms(completions: Sequence, aliases, questions) -> list[tuple]:
    """``(text, aliases, AnswerForm, commits)`` per completion, ``commits`` its :meth:`AnswerForm.strict` with the
    longest alias's words as the allowance: what the answer role's rewards read."""
    out = []
    qs = _column(questions, len(completions), "input", default=None)
    for c, a, q in zip(completions, _aliases(aliases, len(completions)), qs):
        text = completion_text(c)
        form = protocol.answer_form(text, a, q)
        out.append((text, a, form, form.strict(max((len(protocol.normalize_answer(x).split()) for x in a),
                                                    default=1))))
    return out


def abstention_reward(completions: Sequence, aliases: Sequence[Sequence[str]] | None = None,
                      wrong_answer: float = 1.0, input: Sequence[str] | str | None = None,
                      **kwargs) -> list[float]:
    """Whether the output abstains exactly when nothing answers (no alias): 1.0 for a committed right answer
    (:meth:`mags_lib.protocol.AnswerForm.strict`) or a pure abstention where nothing answers, 0.0 for an
    abstention on an answerable question or anything else where nothing answers (a guess, or a guess beside
    an abstention); ``wrong_answer`` (in [-1, 1]): the score of any other reply to an answerable question (a
    wrong answer, or the answer among other candidates; default 1.0: it did not abstain, whatever else it
    says), and ``min(0, wrong_answer)`` for a hedge (an answer or a guess beside an abstention), so a hedge
    never scores above abstaining. ``input``: the questions (their words are no guess).

    With the default, beside ``answer_correct``, a wrong guess scores more than abstaining on an answerable
    question, so GRPO learns to guess; ``wrong_answer=-1`` makes it a selective-answering reward (with weights
    1 / w: answer when the chance of being right exceeds w / (1 + 2w)), README "Training the memory operators".

    >>> abstention_reward(["figs", "I don't know", "figs", "not in memory"], aliases=[["figs"], ["figs"], [], []])
    [1.0, 0.0, 0.0, 1.0]
    >>> abstention_reward(["figs", "plums", "I don't know", "Not sure, plums?"], aliases=[["figs"]] * 4,
    ...                   wrong_answer=-1.0)
    [1.0, -1.0, 0.0, -1.0]
    """
    if not -1.0 <= float(wrong_answer) <= 1.0:
        raise ValueError(f"abstention_reward needs wrong_answer in [-1, 1], got {wrong_answer!r}")
    out = []
    for _, a, form, commits in _answer_forms(completions, aliases, input):
        if not a:
            out.append(1.0 if commits is None else 0.0)
        elif commits is None:
            out.append(0.0)
        elif commits and form.alias is not None:
            out.append(1.0)
        else:
            out.append(min(0.0, float(wrong_answer)) if form.abstains else float(wrong_answer))
    return out


def brevity_reward(completions: Sequence, response: Sequence[str] | str | None = None, *, slack: float = 1.5,
                   margin: int = 2, scale: int = 10, **kwargs) -> list[float]:
    """Penalty in [-1, 0] for words beyond ``slack`` x the gold answer's words + ``margin``, reaching -1
    after ``scale`` more words (the reader answers in a few words; hedges and sentences cost).

    >>> brevity_reward(["frozen lemons", "they eat frozen lemons every day", "a " * 30],
    ...                response="frozen lemons")
    [0.0, -0.1, -1.0]
    """
    if not (0 <= slack < math.inf and 0 <= margin < math.inf and 0 < scale < math.inf):  # NaN fails every one
        raise ValueError("brevity_reward needs slack >= 0, margin >= 0 and scale > 0")
    golds = _column(response, len(completions), "response", default="")
    out = []
    for c, g in zip(completions, golds):
        excess = len(completion_text(c).split()) - (slack * len((g or "").split()) + margin)
        out.append(-round(min(1.0, excess / scale), 4) if excess > 0 else 0.0)
    return out


# -- graph-cost terms ---------------------------------------------------------------------------


@dataclass(frozen=True)
class GraphCostConfig:
    """Weights and options of the combined ``graph_cost`` reward (the seeds' graph regulariser).

    The reward is ``sum(w_t * term_t) / sum(w_t)`` over the terms with a positive weight, so it stays
    in [-1, 0] whatever the weights.
    """

    ops_weight: float = 1.0  # operations per input beyond the gold's count
    nodes_weight: float = 0.5  # entity nodes created beyond the gold's
    edges_weight: float = 0.5  # fact edges created beyond the gold's
    churn_weight: float = 1.0  # existing facts invalidated + entities merged, beyond the gold's
    slack: int = 0  # excess units forgiven per term
    scale: float = 4.0  # excess units (after slack) at which a term reaches -1

    def __post_init__(self) -> None:
        ws = (self.ops_weight, self.nodes_weight, self.edges_weight, self.churn_weight)
        if any(isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0 for w in ws) \
                or sum(ws) <= 0:
            raise ValueError(f"GraphCostConfig weights must be >= 0 with a positive sum, got {ws}")
        if not isinstance(self.slack, int) or self.slack < 0:
            raise ValueError(f"GraphCostConfig.slack must be an int >= 0, got {self.slack!r}")
        if isinstance(self.scale, bool) or not isinstance(self.scale, (int, float)) or not 0 < self.scale < math.inf:
            raise ValueError(f"GraphCostConfig.scale must be > 0, got {self.scale!r}")


def _excess_penalty(pred: int, gold: int, slack: int, scale: float) -> float:
    if not (0 <= slack < math.inf and 0 < scale < math.inf):  # NaN fails every comparison
        raise ValueError(f"graph-cost terms need slack >= 0 and scale > 0, got slack={slack}, scale={scale}")
    excess = max(0, pred - gold - slack)
    return -round(min(1.0, excess / scale), 4) if excess else 0.0


def graph_effects(text: str, context=(), *, embedder="hash", role: str | None = "write",
                  seed: int = 0, _built: dict | None = None) -> dict[str, int]:
    """What storing ``text``'s operations does to a fresh graph of ``context``: counts of ``ops``
    (every operation of the role, lenient parse), ``nodes`` (entity nodes created), ``edges`` (fact edges
    created, valid or stored as rejected history), ``churn`` (existing facts invalidated + new entity
    texts merged into an existing node by similarity).

    >>> graph_effects("<memory_write>blorps,live in,caves</memory_write>", [["blorps", "eat", "figs"]])
    {'ops': 1, 'nodes': 1, 'edges': 1, 'churn': 0}
    """
    parsed = protocol.parse(completion_text(text), role=role, mode="lenient")
    out = {"ops": len(parsed.ops), "nodes": 0, "edges": 0, "churn": 0}
    trips = parsed.triplets
    if not trips:
        return out
    key = tuple(tuple(t) for t in (context or []))
    cache = {} if _built is None else _built
    if key not in cache:
        cache[key] = _graph_for(key, resolve_embedder(embedder), seed)
    g = cache[key].copy()
    rep = g.engram(trips, source="completion")
    out["nodes"] = len(rep.new_nodes)
    out["edges"] = len(rep.new_edges) + len(rep.rejected_edges)
    out["churn"] = len(rep.invalidated_edges) + len(rep.resolved)
    return out


def _graph_terms(completions, response, context, role, embedder, seed, names) -> list[tuple[dict, dict]]:
    n = len(completions)
    golds = _column(response, n, "response", default="")
    contexts = _column(context, n, "context", default=())
    roles = _column(role, n, "role", default="write")
    built: dict = {}
    out = []
    need_graph = bool(set(names) - {"ops"})
    for c, g, ctx, r in zip(completions, golds, contexts, roles):
        if need_graph:
            pe = graph_effects(c, ctx, embedder=embedder, role=r, seed=seed, _built=built)
            ge = graph_effects(g or "", ctx, embedder=embedder, role=r, seed=seed, _built=built)
        else:
            pe = {"ops": len(protocol.parse(completion_text(c), role=r, mode="lenient").ops)}
            ge = {"ops": len(protocol.parse(g or "", role=r, mode="lenient").ops)}
        out.append((pe, ge))
    return out


def ops_cost(completions: Sequence, response: Sequence[str] | str | None = None,
             role: Sequence[str] | str | None = None, *, slack: int = 0, scale: float = 4.0,
             **kwargs) -> list[float]:
    """Penalty in [-1, 0] for operations beyond the gold's count (``-min(1, excess / scale)``).

    >>> gold = "<memory_write>a,b,c</memory_write>"
    >>> ops_cost([gold, gold * 3, gold * 9, ""], response=gold, role="write")
    [0.0, -0.5, -1.0, 0.0]
    """
    _excess_penalty(0, 0, slack, scale)
    return [_excess_penalty(p["ops"], g["ops"], slack, scale)
            for p, g in _graph_terms(completions, response, None, role, None, 0, ("ops",))]


def _graph_term(field: str, completions, response, context, role, embedder, slack, scale, seed) -> list[float]:
    _excess_penalty(0, 0, slack, scale)
    return [_excess_penalty(p[field], g[field], slack, scale)
            for p, g in _graph_terms(completions, response, context, role, embedder, seed, (field,))]


def new_nodes_cost(completions: Sequence, response: Sequence[str] | str | None = None,
                   context: Sequence | None = None, role: Sequence[str] | str | None = None, *,
                   embedder="hash", slack: int = 0, scale: float = 4.0, seed: int = 0, **kwargs) -> list[float]:
    """Penalty in [-1, 0] for entity nodes the completion creates in a graph of ``context`` beyond
    those the gold creates (see :func:`graph_effects`; ``embedder="hash"`` by default: entity
    resolution is by exact key, near-duplicates by the hash embedder's cosine).

    >>> ctx = [["blorps", "eat", "figs"]]
    >>> new_nodes_cost(["<memory_write>blorps,live in,caves</memory_write>",
    ...                 "<memory_write>zorgs,live in,caves</memory_write>"],
    ...                response="<memory_write>blorps,live in,caves</memory_write>", context=[ctx, ctx])
    [0.0, -0.25]
    """
    return _graph_term("nodes", completions, response, context, role, embedder, slack, scale, seed)


def new_edges_cost(completions: Sequence, response: Sequence[str] | str | None = None,
                   context: Sequence | None = None, role: Sequence[str] | str | None = None, *,
                   embedder="hash", slack: int = 0, scale: float = 4.0, seed: int = 0, **kwargs) -> list[float]:
    """Penalty in [-1, 0] for fact edges the completion creates beyond the gold's (restating a fact
    already in ``context`` reinforces it and creates none).

    >>> ctx = [["blorps", "eat", "figs"]]
    >>> new_edges_cost(["<memory_write>blorps,eat,figs</memory_write><memory_write>a,b,c</memory_write>",
    ...                 "<memory_write>a,b,c</memory_write><memory_write>d,e,f</memory_write>"],
    ...                response="<memory_write>a,b,c</memory_write>", context=[ctx, ctx])
    [0.0, -0.25]
    """
    return _graph_term("edges", completions, response, context, role, embedder, slack, scale, seed)


def churn_cost(completions: Sequence, response: Sequence[str] | str | None = None,
               context: Sequence | None = None, role: Sequence[str] | str | None = None, *,
               embedder="hash", slack: int = 0, scale: float = 4.0, seed: int = 0, **kwargs) -> list[float]:
    """Penalty in [-1, 0] for churn of existing facts beyond the gold's: facts of ``context`` the
    completion invalidates (a new object for a single-valued relation) plus entity texts merged into an
    existing node by similarity.

    >>> ctx = [["blorps", "eat", "figs"], ["blorps", "live in", "caves"]]
    >>> churn_cost(["<memory_write>blorps,eat,lemons</memory_write>", "<memory_write>blorps,fear,owls</memory_write>"],
    ...            response="", context=[ctx, ctx])
    [-0.25, 0.0]
    """
    return _graph_term("churn", completions, response, context, role, embedder, slack, scale, seed)


def graph_cost_reward(completions: Sequence, response: Sequence[str] | str | None = None,
                      context: Sequence | None = None, role: Sequence[str] | str | None = None, *,
                      config: GraphCostConfig | None = None, embedder="hash", seed: int = 0,
                      **weights) -> list[float]:
    """Weighted mean in [-1, 0] of ``ops_cost``, ``new_nodes_cost``, ``new_edges_cost`` and
    ``churn_cost``; the weights, ``slack`` and ``scale`` come from ``config`` or from keyword options
    named like :class:`GraphCostConfig`'s fields (``get_reward("graph_cost", ops_weight=2.0)``).

    >>> gold = "<memory_write>a,b,c</memory_write>"
    >>> graph_cost_reward([gold, gold + "<memory_write>d,e,f</memory_write>"], response=gold, role="write",
    ...                   ops_weight=1.0, nodes_weight=0.0, edges_weight=1.0, churn_weight=0.0)
    [0.0, -0.25]
    """
    known = set(GraphCostConfig.__dataclass_fields__)
    opts = {k: v for k, v in weights.items() if k in known}
    if config is not None and opts:
        raise ValueError(f"graph_cost takes a config or keyword weights, not both (got {sorted(opts)})")
    cfg = config if config is not None else GraphCostConfig(**opts)
    w = {"ops": cfg.ops_weight, "nodes": cfg.nodes_weight, "edges": cfg.edges_weight, "churn": cfg.churn_weight}
    names = tuple(k for k, v in w.items() if v > 0)
    total = sum(w[k] for k in names)
    out = []
    for p, g in _graph_terms(completions, response, context, role, embedder, seed, names):
        s = sum(w[k] * _excess_penalty(p[k], g[k], cfg.slack, cfg.scale) for k in names)
        out.append(round(s / total, 4))
    return out


# -- outcome rewards (the seeds' prediction term) -------------------------------------------------


def _outcome(completions, scenario, reader, model, n_threads, memory_fn) -> list[float]:
    from .data import outcome

    n = len(completions)
    if scenario is None:
        raise ValueError("the outcome rewards need the dataset column 'scenario' (rows from "
                         "mags_lib.data.outcome.build_outcome_rows)")
    scenarios = _column(scenario, n, "scenario")
    read = outcome.resolve_reader(reader, model=model, n_threads=n_threads)
    out = []
    for c, sc in zip(completions, scenarios):
        sc = outcome.parse_scenario(sc)
        out.append(outcome.score_questions(read, sc, memory_fn(completion_text(c), sc)))
    return out


def outcome_write_reward(completions: Sequence, scenario: Sequence | None = None, *, reader="llamacpp",
                         model=None, n_threads: int = 1, embedder="minilm", seed: int = 0,
                         **kwargs) -> list[float]:
    """Write role, in [0, 1]: the share of the ``scenario``'s questions a frozen ``reader`` answers
    correctly (the game's rule) from the current facts of a graph of the scenario's prior memory after
    the completion's writes are stored (:func:`mags_lib.data.outcome.write_memory`). ``reader`` is
    ``"llamacpp"`` (the answer prompt of ``ROLE_SPECS`` on ``model``, default the embedded SmolLM2,
    loaded once per process with ``n_threads``) or a callable ``reader(question, items) -> answer``.

    >>> sc = {"memory": [["blorps", "live in", "caves"]], "questions": [{"question": "Where do blorps live?",
    ...       "aliases": ["copper mines"]}]}
    >>> def oracle(q, items):   # exact lookup of the (subject, relation) the question needs
    ...     return next((t[len("blorps live in "):] for t in items if t.startswith("blorps live in ")), "")
    >>> outcome_write_reward(["<memory_write>blorps,live in,copper mines</memory_write>", "junk"],
    ...                      scenario=[sc, sc], reader=oracle, embedder="hash")
    [1.0, 0.0]
    """
    from .data.outcome import write_memory

    emb = resolve_embedder(embedder)
    return _outcome(completions, scenario, reader, model, n_threads,
                    lambda text, sc: write_memory(text, sc, embedder=emb, seed=seed))


def outcome_ask_reward(completions: Sequence, scenario: Sequence | None = None, *, reader="llamacpp",
                       model=None, n_threads: int = 1, embedder="minilm", k: int = 1, max_queries: int = 8,
                       seed: int = 0, **kwargs) -> list[float]:
    """Ask role, in [0, 1]: the share of the ``scenario``'s questions the ``reader`` answers from the
    facts the completion's queries recall (top-``k`` per query) from a graph of the scenario's memory
    (:func:`mags_lib.data.outcome.ask_memory`); no query recalls nothing. ``reader`` as in
    :func:`outcome_write_reward`.

    >>> sc = {"memory": [["blorps", "eat", "frozen lemons"], ["Odalie", "works as", "glassblower"]],
    ...       "questions": [{"question": "What do blorps eat?", "aliases": ["frozen lemons"]}]}
    >>> def reader(q, items):   # answers with whatever it was shown
    ...     return "; ".join(items) or "I don't know"
    >>> outcome_ask_reward(["<memory_ask>blorps eat</memory_ask>", "<memory_ask>Odalie job</memory_ask>", ""],
    ...                    scenario=[sc] * 3, reader=reader, embedder="hash")
    [1.0, 0.0, 0.0]
    """
    from .data.outcome import ask_memory

    emb = resolve_embedder(embedder)
    return _outcome(completions, scenario, reader, model, n_threads,
                    lambda text, sc: ask_memory(text, sc, embedder=emb, k=k, max_queries=max_queries, seed=seed))


# -- watching the signal (issue 15, item 4) -------------------------------------------------------


def _curve(rows: list[dict], name: str) -> dict | None:
    v = []
    for r in rows:
        x = r.get(name)
        if x in (None, ""):
            continue
        try:
            v.append(float(x))
        except (TypeError, ValueError):
            raise ValueError(f"log column {name!r} holds a non-number: {x!r:.40}") from None
    if not v:
        return None
    return {"first": v[0], "last": v[-1], "mean": sum(v) / len(v), "max": max(v), "n": len(v)}


def _norm_words(text: str) -> str:
    return " ".join("".join(ch if ch.isalnum() else " " for ch in text.lower()).split())


def group_push(rewards: Sequence[Sequence[float]], sizes: Sequence[Sequence[float]]) -> tuple[float, int]:
    """Which way GRPO's group-normalised advantages push a size (e.g. the number of operations stated).

    For each group (one prompt's completions) with reward variance: the mean of advantage x (size - the
    group's mean size), advantages ``(r - mean) / std`` as GRPO normalises them (TRL's sample std only
    rescales them); then the mean over those groups, and how many groups had variance. Positive: completions larger than their group's mean are
    rewarded, so the update makes outputs larger; negative: smaller; 0: the rewards do not care.

    >>> group_push([[1, 0], [0.8, 0.8]], [[3, 2], [2, 1]])   # the 3-op completion won; group 2 carries no signal
    (0.5, 1)
    >>> # 3 gold facts; samples: a wrong third, the third left out, all right, a wrong third. F1 (0.67 / 0.8 / 1)
    >>> # pushes towards stopping early; min(precision, recall) (0.67 / 0.67 / 1) towards the third fact
    >>> f1, low = group_push([[2 / 3, 0.8, 1, 2 / 3]], [[3, 2, 3, 3]]), group_push([[2 / 3, 2 / 3, 1, 2 / 3]], [[3, 2, 3, 3]])
    >>> round(f1[0], 3), round(low[0], 3)
    (-0.031, 0.144)
    """
    import numpy as np

    if len(rewards) != len(sizes):
        raise ValueError(f"need one size list per reward group, got {len(rewards)} groups and {len(sizes)}")
    pushes = []
    for r, n in zip(rewards, sizes):
        r, n = np.asarray(r, dtype=float), np.asarray(n, dtype=float)
        if r.shape != n.shape:
            raise ValueError(f"a group has {r.size} rewards and {n.size} sizes")
        if r.size < 2 or r.std() == 0:
            continue
        pushes.append(float(np.mean((r - r.mean()) / r.std() * (n - n.mean()))))
    return (float(np.mean(pushes)) if pushes else 0.0), len(pushes)


def signal_report(log, samples: Sequence[Mapping] | None = None, *, min_reward: float = 0.5,
                  copy_chars: int = 16, max_examples: int = 3) -> dict:
    """The GRPO signal of one run: zero-variance share, KL and reward curves from ``log`` (the stage's
    ``log.csv`` path, or its rows as dicts), and reward-hacking patterns in sampled completions.

    ``samples`` (optional) are mappings with ``completion`` (text), ``reward`` (its total reward),
    ``input`` (the user text) and ``role``. A sample is flagged when it

    * ``empty_scores``: holds no operation of its role yet earns ``reward >= min_reward``;
    * ``degenerate``: one word fills more than half of its (at least 8) words, or a tag's content
      repeats itself;
    * ``repeated_tags``: stores the same operation twice or more;
    * ``copies_input``: one operation's content is (normalised) the whole input, or holds a
      ``copy_chars``-character run of the input verbatim and more than 80 % of the input's words.

    Returns ``{"zero_std": curve, "kl": curve, "reward": curve, "n_samples", "flags": {name: count},
    "hacking": share of samples with a flag and reward >= min_reward, "examples": {name: [texts]}}``
    (a curve: first, last, mean, max, n; None when the column is absent).

    >>> rep = signal_report([{"step": 1, "reward": .2, "kl": 0.0, "frac_reward_zero_std": .5},
    ...                      {"step": 2, "reward": .4, "kl": .01, "frac_reward_zero_std": .25}],
    ...                     [{"role": "ask", "input": "What do blorps eat?", "reward": 1.0, "completion": ""}])
    >>> rep["zero_std"]["mean"], rep["kl"]["last"], rep["flags"]["empty_scores"], rep["hacking"]
    (0.375, 0.01, 1, 1.0)
    """
    import csv
    from pathlib import Path

    if isinstance(log, (str, Path)):
        path = Path(log)
        if not path.is_file():
            raise FileNotFoundError(f"no GRPO log at {path}: pass the stage folder's log.csv")
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    else:
        rows = [dict(r) for r in (log or [])]
    out: dict[str, Any] = {"zero_std": _curve(rows, "frac_reward_zero_std"), "kl": _curve(rows, "kl"),
                           "reward": _curve(rows, "reward")}
    names = ("empty_scores", "degenerate", "repeated_tags", "copies_input")
    flags = dict.fromkeys(names, 0)
    examples: dict[str, list[str]] = {n: [] for n in names}
    hacked = 0
    samples = list(samples or [])
    for i, smp in enumerate(samples):
        if not isinstance(smp, Mapping) or "completion" not in smp or "reward" not in smp:
            raise ValueError(f"sample #{i} needs 'completion' and 'reward' (and 'input', 'role'), got {smp!r:.80}")
        text = completion_text(smp["completion"])
        reward = float(smp["reward"])
        ops = protocol.parse(text, role=smp.get("role"), mode="lenient").ops
        contents = [_norm_words(op.content) for op in ops]
        words = _norm_words(text).split()
        hit = set()
        if not ops and reward >= min_reward:
            hit.add("empty_scores")
        if (len(words) >= 8 and max(words.count(w) for w in set(words)) > len(words) / 2) or any(
                len(c.split()) >= 4 and len(set(c.split())) <= len(c.split()) / 2 for c in contents):
            hit.add("degenerate")
        if len(contents) != len(set(contents)):
            hit.add("repeated_tags")
        inp = _norm_words(str(smp.get("input") or ""))
        inp_words = inp.split()
        for c in contents:
            verbatim = len(c) >= copy_chars and any(c[j:j + copy_chars] in inp for j in range(len(c) - copy_chars + 1))
            covered = sum(w in c.split() for w in inp_words) > 0.8 * len(inp_words) if inp_words else False
            if inp and (c == inp or (verbatim and covered)):
                hit.add("copies_input")
                break
        for n in hit:
            flags[n] += 1
            if len(examples[n]) < max_examples:
                examples[n].append(text)
        hacked += bool(hit) and reward >= min_reward
    out.update(n_samples=len(samples), flags=flags, hacking=hacked / len(samples) if samples else None,
               examples=examples)
    return out


def by_role_reward(completions: Sequence, role: Sequence[str] | str | None = None, *,
                   roles: Mapping[str, Mapping[str, Any]], **kwargs) -> list[float]:
    """One model for several roles: each completion scored by the rewards of its own row's ``role``.

    ``roles`` maps a role to ``{"rewards": {name: weight}, "options": {name: {keyword: value}}}``
    (a role's :class:`~mags_lib.training.GRPOConfig` ``rewards`` and ``reward_options``); a completion's
    reward is the weighted sum of its role's rewards, as TRL sums a specialised run's weighted rewards.
    Every other keyword that is a list of one value per completion (the dataset's columns) is
    subset to the completions of each role; the rest (TRL's trainer state, loggers) pass through.

    >>> spec = {"rewards": {"answer_correct": 1.0, "brevity": 0.5}, "options": {}}
    >>> by_role_reward(["Gus.", "<memory_ask>Gus</memory_ask>", "Velvet moss."], role=["answer", "ask", "answer"],
    ...                aliases=[["Gus"], [], ["Gus"]], response=["Gus", "<memory_ask>Gus</memory_ask>", "Gus"],
    ...                roles={"answer": spec, "ask": {"rewards": {"format": 0.5}, "options": {}}})
    [1.0, 0.5, 0.0]
    """
    n = len(completions)
    labels = [role] * n if isinstance(role, str) or role is None else list(role)
    if len(labels) != n:
        raise ValueError(f"by_role_reward needs one role per completion, got {len(labels)} for {n}")
    unknown = sorted({str(r) for r in labels} - set(roles))
    if unknown:
        raise ValueError(f"completions of roles {unknown} have no rewards here: by_role_reward scores {sorted(roles)}")
    out = [0.0] * n
    for name_role in sorted(set(labels)):
        idx = [i for i, r in enumerate(labels) if r == name_role]
        sub = {k: [v[i] for i in idx] if isinstance(v, list) and len(v) == n else v for k, v in kwargs.items()}
        spec = roles[name_role]
        options = spec.get("options") or {}
        for name, weight in spec["rewards"].items():
            fn = get_reward(name, **options.get(name, {}))
            for i, value in zip(idx, fn([completions[i] for i in idx], role=[name_role] * len(idx), **sub)):
                out[i] += weight * (0.0 if value is None else float(value))
    return out


REGISTRY: dict[str, Callable[..., list[float]]] = {
    "format": format_reward,
    "role": role_reward,
    "exact_f1": exact_f1_reward,
    "op_f1": op_f1_reward,
    "ask_retrieval": ask_retrieval_reward,
    "length": length_penalty,
    "answer_correct": answer_correct_reward,
    "abstention": abstention_reward,
    "brevity": brevity_reward,
    "ops_cost": ops_cost,
    "new_nodes_cost": new_nodes_cost,
    "new_edges_cost": new_edges_cost,
    "churn_cost": churn_cost,
    "graph_cost": graph_cost_reward,
    "outcome_write": outcome_write_reward,
    "outcome_ask": outcome_ask_reward,
    "by_role": by_role_reward,
}


_CALL_ARGS = frozenset({"completions", "prompts", "kwargs"})  # what the trainer passes, not options


def check_reward_options(name: str, options: dict) -> None:
    """Raise ``ValueError`` naming any option reward ``name`` does not take (its keyword parameters other than
    the trainer's own columns): the reward functions take ``**kwargs``, so a misspelt option was bound and
    silently ignored."""
    import inspect

    if name not in REGISTRY:
        raise KeyError(f"unknown reward {name!r}: choose from {sorted(REGISTRY)}")
    if not isinstance(options, dict):
        raise TypeError(f"options of reward {name!r} must be a dict, got {type(options).__name__}")
    params = inspect.signature(REGISTRY[name]).parameters
    takes = sorted({p for p, v in params.items() if p not in _CALL_ARGS and v.kind != v.VAR_KEYWORD}
                   | (set(GraphCostConfig.__dataclass_fields__) if name == "graph_cost" else set()))
    unknown = sorted(set(options) - set(takes))
    if unknown:
        raise ValueError(f"reward {name!r} takes no option {', '.join(map(repr, unknown))}; its options: "
                         f"{', '.join(takes) or 'none'}")


def get_reward(name: str, **options) -> Callable[..., list[float]]:
    """The reward ``name`` with ``options`` bound (picklable ``functools.partial``, ``__name__`` kept).

    >>> f = get_reward("op_f1", embedder="hash")
    >>> f.__name__, f(["<memory_ask>x y</memory_ask>"], response=["<memory_ask>x y</memory_ask>"], role="ask")
    ('op_f1_reward', [1.0])
    >>> import pickle; pickle.loads(pickle.dumps(f)).__name__
    'op_f1_reward'
    """
    if name not in REGISTRY:
        raise KeyError(f"unknown reward {name!r}: choose from {sorted(REGISTRY)}")
    fn = REGISTRY[name]
    if not options:
        return fn
    check_reward_options(name, options)
    return functools.update_wrapper(functools.partial(fn, **options), fn)
