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
``ask_retrieval``         [0, 1]        share of ``gold_facts`` that the asked queries retrieve
                                        from a small LiquidGraph built from ``context``
``length``                [-1, 0]       penalty for output longer than ``slack`` x gold + margin
``answer_correct``        {0, 1}        answer role: the game's rule (an alias as a whole-word run;
                                        with no alias, an abstention)
``abstention``            {0, 1}        answer role: abstains exactly when there is no alias
``brevity``               [-1, 0]       answer role: penalty for words beyond ``slack`` x the gold
                                        answer's words + ``margin``
========================  ============  ===========================================================
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from . import protocol
from .metrics import (
    SIM_THRESHOLD,
    answer_correct,
    exact_matches,
    is_abstention,
    prf,
    resolve_embedder,
    semantic_matches,
)

__all__ = [
    "REGISTRY",
    "abstention_reward",
    "answer_correct_reward",
    "ask_retrieval_reward",
    "brevity_reward",
    "completion_text",
    "exact_f1_reward",
    "format_reward",
    "get_reward",
    "length_penalty",
    "op_f1_reward",
    "role_reward",
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


def _pred_gold(completions, response, role):
    golds = _column(response, len(completions), "response", default=_REQUIRED)
    roles = _column(role, len(completions), "role")
    pairs = []
    for c, g, r in zip(completions, golds, roles):
        gp = protocol.parse(g, role=r, mode="lenient")  # lenient: a reward must not raise mid-training
        pairs.append((protocol.parse(completion_text(c), role=r, mode="lenient").ops, gp.ops))
    return pairs


def exact_f1_reward(completions: Sequence, response: Sequence[str] | str | None = None,
                    role: Sequence[str] | str | None = None, **kwargs) -> list[float]:
    """Per-example F1 of exactly matching operations (fields normalised) against the gold ``response``.

    >>> gold = "<memory_write>Blorps,eat,lemons</memory_write><memory_write>Blorps,live in,caves</memory_write>"
    >>> exact_f1_reward(["<memory_write>blorps,eat,Lemons</memory_write>", gold, "", "gibberish"],
    ...                 response=gold, role="write")
    [0.6666666666666666, 1.0, 0.0, 0.0]
    >>> exact_f1_reward([""], response=[""], role="ask")   # nothing to store, nothing stored
    [1.0]
    """
    return [prf(exact_matches(p, g), len(p), len(g)).f1 for p, g in _pred_gold(completions, response, role)]


def op_f1_reward(completions: Sequence, response: Sequence[str] | str | None = None,
                 role: Sequence[str] | str | None = None, *, embedder="minilm",
                 threshold: float = SIM_THRESHOLD, **kwargs) -> list[float]:
    """Per-example semantic op F1 (the seed's metric): Hungarian matching of same-tag operations whose
    contents have cosine >= ``threshold`` (MiniLM by default; ``embedder="hash"`` for tests).

    >>> op_f1_reward(["<memory_ask>blorps diet</memory_ask>", "<memory_ask>tax law</memory_ask>"],
    ...              response="<memory_ask>the blorps diet</memory_ask>", role="ask", embedder="hash")
    [1.0, 0.0]
    """
    pairs = _pred_gold(completions, response, role)
    from .metrics import _embed_ops

    vectors = _embed_ops([p for p, _ in pairs] + [g for _, g in pairs], embedder)
    return [prf(semantic_matches(p, g, vectors, threshold), len(p), len(g)).f1 for p, g in pairs]


def _graph_for(context: tuple, embedder, seed: int):
    from .graph import LiquidGraph

    g = LiquidGraph(embedder, seed=seed)
    if context:
        g.engram([tuple(t) for t in context], source="context")
    return g


def ask_retrieval_reward(completions: Sequence, context: Sequence | None = None,
                         gold_facts: Sequence | None = None, *, embedder="minilm", k: int = 1,
                         per_query: bool = True, max_queries: int = 8, seed: int = 0,
                         **kwargs) -> list[float]:
    """Share of the gold facts that the completion's queries retrieve from a graph of the context.

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
    """
    n = len(completions)
    contexts = _column(context, n, "context", default=_REQUIRED)
    golds = _column(gold_facts, n, "gold_facts", default=_REQUIRED)
    emb = resolve_embedder(embedder)
    built: dict[tuple, Any] = {}
    out = []
    for c, ctx, gold in zip(completions, contexts, golds):
        queries = protocol.parse(completion_text(c), role="ask", mode="lenient").asks[:max_queries]
        gold_keys = {protocol.normalize_triplet(t) for t in (gold or [])}
        if not gold_keys:
            out.append(0.0 if queries else 1.0)
            continue
        if not queries:
            out.append(0.0)
            continue
        key = tuple(tuple(t) for t in (ctx or []))
        if key not in built:
            built[key] = _graph_for(key, emb, seed)
        g = built[key].copy()
        found = set()
        for q in (queries if per_query else [queries]):
            res = g.recall(q if per_query or len(q) > 1 else q[0], k=k)
            found |= {protocol.normalize_triplet(it.triplet) for it in res.items if it.triplet is not None}
        out.append(len(gold_keys & found) / len(gold_keys))
    return out


def length_penalty(completions: Sequence, response: Sequence[str] | str | None = None, *,
                   slack: float = 1.5, margin: int = 40, scale: float = 200.0, **kwargs) -> list[float]:
    """Penalty in [-1, 0] for characters beyond ``slack`` x len(gold) + ``margin``, reaching -1 after
    ``scale`` more characters. Without a gold ``response`` the allowance is ``margin`` alone.

    >>> gold = "<memory_ask>blorps diet</memory_ask>"   # 36 characters -> allowance 94
    >>> length_penalty([gold, gold * 3, gold * 12], response=gold)
    [0.0, -0.07, -1.0]
    """
    if slack < 0 or margin < 0 or scale <= 0:
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
                          **kwargs) -> list[float]:
    """1.0 when the answer is correct by the game's rule (:func:`mags_lib.metrics.answer_correct`).

    >>> answer_correct_reward(["Frozen lemons.", "lemons", "I don't know", "I don't know"],
    ...                       aliases=[["frozen lemons"], ["frozen lemons"], [], ["figs"]])
    [1.0, 0.0, 1.0, 0.0]
    """
    return [float(answer_correct(completion_text(c), a)) for c, a in zip(completions, _aliases(aliases, len(completions)))]


def abstention_reward(completions: Sequence, aliases: Sequence[Sequence[str]] | None = None,
                      **kwargs) -> list[float]:
    """1.0 when the output abstains exactly when nothing answers (no alias), whatever else it says.

    >>> abstention_reward(["figs", "I don't know", "figs", "not in memory"], aliases=[["figs"], ["figs"], [], []])
    [1.0, 0.0, 0.0, 1.0]
    """
    return [float(is_abstention(completion_text(c)) == (not a))
            for c, a in zip(completions, _aliases(aliases, len(completions)))]


def brevity_reward(completions: Sequence, response: Sequence[str] | str | None = None, *, slack: float = 1.5,
                   margin: int = 2, scale: int = 10, **kwargs) -> list[float]:
    """Penalty in [-1, 0] for words beyond ``slack`` x the gold answer's words + ``margin``, reaching -1
    after ``scale`` more words (the reader answers in a few words; hedges and sentences cost).

    >>> brevity_reward(["frozen lemons", "they eat frozen lemons every day", "a " * 30],
    ...                response="frozen lemons")
    [0.0, -0.1, -1.0]
    """
    if slack < 0 or margin < 0 or scale <= 0:
        raise ValueError("brevity_reward needs slack >= 0, margin >= 0 and scale > 0")
    golds = _column(response, len(completions), "response", default="")
    out = []
    for c, g in zip(completions, golds):
        excess = len(completion_text(c).split()) - (slack * len((g or "").split()) + margin)
        out.append(-round(min(1.0, excess / scale), 4) if excess > 0 else 0.0)
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
}


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
    return functools.update_wrapper(functools.partial(fn, **options), fn)
