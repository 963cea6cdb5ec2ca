"""The LoCoMo benchmark runner: evidence recall@k, latency, memory tokens, QA F1, evidence survival.

Usage::

    python -m mags_lib.bench.locomo_eval --profile smoke            # one conversation, seconds
    python -m mags_lib.bench.locomo_eval --profile default          # all ten (see README for the cost)
    python -m mags_lib.bench.locomo_eval --profile default --out results/try/70_locomo_benchmark
    # evidence recall only (no language model), MAGS over episodes with its recall ablations:
    python -m mags_lib.bench.locomo_eval --profile default --writes episodes --no-qa --tokens words \
        --recall-variants legacy,dense,no-context,fixed-anchors --bm25-extra-stopwords en_plus \
        --tuned-on conv-26,conv-30 --summary-json results/bench/locomo_recall_episodes.json

Notebook ``70_locomo_benchmark`` calls :func:`run_benchmark` and displays what it returns.

What one run does, per selected conversation (a *unit* of work, cached on disk so an interrupted
run resumes where it stopped):

1. **turn retrievers** -- BM25, flat dense retrieval with the configured embedder(s) and their
   reciprocal rank fusion -- index the conversation's turns, rendered ``"<speaker>: <text>"`` (an
   image turn adds ``[shares <caption>]``), and answer every selected question;
2. **MAGS memories** are built by observing the conversation turn by turn, then queried with
   ``m.recall(question, k)``. Two ways to build one (``write``), labelled in every row:

   * ``"episodes"``: ``m.graph.add_episode`` only -- one episode per turn, no write model, the
     agent's maintenance schedule (``maintain()`` every ``maintain_every`` turns) kept. It measures
     what the retrieval structure and its dynamics keep and find on their own;
   * ``"model"``: ``m.observe`` -- the write model turns each turn into triplets (the full system;
     expensive: a language-model call per turn, cost per turn reported);

   today's ``observe`` / ``add_episode`` take no ``speaker``, so the speaker's name is written into
   the text (``"Caroline: ..."``), exactly as the turn retrievers see it; when a ``speaker``
   argument exists the raw utterance and the speaker are passed separately (``speaker_mode`` in the
   rows says which). ``time`` is the session date as ISO 8601 text (``"2023-05-08T13:56"``);
   ``recall_variants`` (:data:`RECALL_VARIANTS`) evaluate recall ablations on the same memory,
   and every MAGS row also times the recall alone with the query embedding given
   (``recall_s_embedding_given``);
3. per question and retriever: evidence recall@k for each k (:func:`~.locomo.evidence_recall`;
   one search call per k, since a memory's top 5 need not be its top 10's prefix), the latency of
   the ``latency_k`` call, and the memory tokens of the top ``latency_k`` items formatted as the
   reader's memory block (:func:`mags_lib.protocol.format_facts`, unbudgeted; a MAGS memory's items as
   its reader is shown them, :func:`reader_memory_block`: dated, with the speaker) with the answer
   model's tokenizer;
4. **evidence survival**: an evidence turn (a dia_id some selected question cites) *survives* when,
   at the end of ingestion, the memory still holds an alive episode with that source or an alive,
   valid fact whose sources include it (:func:`alive_sources`); measured after every session too;
5. **QA** (``qa_questions`` per conversation, stratified by category): the same reader
   (``MAGS.ask``) with each memory; LoCoMo's question conventions (a temporal question asks for
   an approximate date from the conversation's dates; an adversarial one offers "(a) / (b)" with
   "Not mentioned in the conversation" as one option, order seeded) and its scoring
   (:func:`~.locomo.qa_score`). The memory modes ``"none" | "rag" | "full_context"`` are run when
   ``MAGSConfig`` has a ``memory`` field and reported as skipped otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import inspect
import json
import math
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..protocol import abstains
from .embedders import bench_embedder
from .locomo import (
    CAT5_NOT_MENTIONED,
    CATEGORIES,
    Conversation,
    LoCoMo,
    Question,
    Turn,
    evidence_recall,
    normalize_answer,
    qa_score,
)
from .retrieval import BM25Retriever, DenseRetriever, Doc, Hit, MAGSRetriever, RRFRetriever

__all__ = [
    "PROFILES",
    "PUBLISHED",
    "RECALL_VARIANTS",
    "BenchResult",
    "LoCoMoBenchConfig",
    "MemoryBuild",
    "alive_sources",
    "build_memory",
    "evaluate_retriever",
    "mags_recall_latency",
    "map_cat5_reply",
    "memory_modes_available",
    "reader_memory_block",
    "reader_question",
    "run_benchmark",
    "select_questions",
    "summarise_by_conversation",
    "summarise_qa",
    "summarise_recall",
    "truncate_conversation",
]

PUBLISHED = {
    "dragon_dialog_recall": {5: 0.567, 10: 0.662, 25: 0.767},  # LoCoMo paper, DRAGON over dialog turns
    "mem0_search_p50_s": 0.148,
    "mem0_search_p95_s": 0.200,
    "zep_search_p95_s": 0.155,
    "mem0_memory_tokens_per_query": 1700,
    # measured elsewhere on LoCoMo with the same recall metric (issue 13)
    "issue13_recall10": {"bm25": 0.525, "dense-minilm": 0.421, "rrf": 0.541},
}
"""Published reference numbers the notebook puts beside ours."""

RECALL_VARIANTS: dict[str, dict[str, Any]] = {
    # recall as before issue 13's fix: 4 anchors whatever k, cosine only, episodes on their own
    "legacy": {"anchors_per_k": 0.0, "lexical_weight": 0.0, "episode_context": 0.0},
    "dense": {"lexical_weight": 0.0},  # no BM25: anchors scale with k, episode context on
    "no-context": {"episode_context": 0.0},  # hybrid anchors, each episode on its own
    "window-1": {"episode_window": 1},  # context from the turns just before and after only (before 2026-11-29)
    "no-routing": {"max_episode_share": 1.0},  # facts and episodes ranked by score alone, whatever the memory holds
    # the default before 2026-12-04: facts keep ceil(f * k) places however few they are, each fact on its own
    "reserve": {"min_fact_share": 0.0, "source_weight": 0.0},
    "ungrounded": {"source_weight": 0.0},  # a fact's relevance its own, not grounded in the turns that said it
    "fixed-share": {"episode_share_by_memory": False},  # at most half of k episodes, whatever the memory holds
    "anchor-episodes": {"candidate_episodes": False},  # only episodes chosen as anchors or reached (before 2026-12-01)
    "fixed-anchors": {"anchors_per_k": 0.0},  # hybrid + context, but n_anchors whatever k
}
"""Ablations of MAGS recall (``RecallConfig`` overrides), each evaluated on the same memory as the
default recall and labelled ``"mags (...) [<name>]"``."""

CAT2_SUFFIX = " Use DATE of CONVERSATION to answer with an approximate date."
CAT5_TEMPLATE = "{question} Select the correct answer: (a) {a} (b) {b}."

PROFILES: dict[str, dict[str, Any]] = {
    # one conversation's first session, its questions, a few read: seconds to a minute
    "smoke": {"conversations": ("conv-26",), "max_sessions": 1, "qa_questions": 4, "model_conversations": 1},
    # all ten conversations, every question for recall; QA on a stratified sample, full context left out
    # (the base reader over ~2,000-token prompts: 8-16 s a question, the QA's slowest row by far); the
    # write model on the shortest conversation (about 0.7 s per turn on 2 quiet cores)
    "default": {"conversations": (), "max_sessions": 0, "qa_questions": 20, "model_conversations": 1,
                "qa_systems": ("none", "rag", "graph")},
    # everything: every question read by every memory, the write model over all ten conversations
    "full": {"conversations": (), "max_sessions": 0, "qa_questions": 0, "model_conversations": 10},
}


_TUPLE_FIELDS = ("conversations", "ks", "extra_embedders", "bm25_extra_stopwords", "mags_writes", "qa_systems",
                 "recall_variants")


# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LoCoMoBenchConfig:
    """Everything one LoCoMo benchmark run depends on (a stage config, checks in ``__post_init__``)."""

    conversations: tuple[str, ...] = ()  # sample ids to run; () = all
    max_sessions: int = 0  # keep each conversation's first N sessions and the questions about them (0: all)
    ks: tuple[int, ...] = (5, 10, 25)  # recall@k cut-offs
    latency_k: int = 10  # k of the timed search call and of the memory-token count
    embedder: str = "minilm"  # embedder of the dense retriever and of MAGS ("minilm" | "hash" | "e5-small")
    extra_embedders: tuple[str, ...] = ()  # more dense-retriever rows (e.g. ("e5-small",)); never MAGS
    bm25: bool = True  # BM25 row
    bm25_extra_stopwords: tuple[str, ...] = ()  # more BM25 rows with other stopword lists (e.g. ("en_plus",))
    hybrid: bool = True  # RRF(BM25 + dense) row
    rrf_k: int = 60  # reciprocal rank fusion constant
    rrf_depth: int = 100  # hits of each retriever fused
    mags_writes: tuple[str, ...] = ("episodes", "model")  # MAGS memories to build: "episodes" and/or "model"
    model_conversations: int = 1  # conversations given the write-model memory (shortest first; 0: none)
    dynamics: bool = True  # the agent's default dynamics (maintain every `maintain_every` turns)
    qa_questions: int = 20  # questions read per conversation, stratified by category (0: all)
    qa_systems: tuple[str, ...] = ("none", "rag", "full_context", "graph")  # reader memories compared
    seed: int = 0  # question sampling, option order of adversarial questions, the models' seed
    n_threads: int = 0  # llama.cpp threads (0: the backend's default)
    mags_kwargs: dict = field(default_factory=dict)  # extra MAGSConfig fields for every MAGS built
    date_style: str = "day_month_year"  # dates in the reader's memory (MAGSConfig.date_style): LoCoMo's gold answers
    # write "8 May 2023"; a date copied as 2023-05-08 scores 0 (normalised to "20230508")
    recall_variants: tuple[str, ...] = ()  # RECALL_VARIANTS also evaluated on each MAGS memory (same memory)

    def __post_init__(self) -> None:
        for name in _TUPLE_FIELDS:
            v = getattr(self, name)
            if isinstance(v, (str, bytes)):  # tuple("conv-26") would be its characters
                raise TypeError(f"{name} takes a tuple, got the str {v!r}: pass a tuple, e.g. {name}=({v!r},)")
        object.__setattr__(self, "conversations", tuple(self.conversations))
        object.__setattr__(self, "ks", tuple(sorted({int(k) for k in self.ks})))
        object.__setattr__(self, "extra_embedders", tuple(self.extra_embedders))
        object.__setattr__(self, "mags_writes", tuple(self.mags_writes))
        object.__setattr__(self, "qa_systems", tuple(self.qa_systems))
        object.__setattr__(self, "recall_variants", tuple(self.recall_variants))
        object.__setattr__(self, "bm25_extra_stopwords", tuple(self.bm25_extra_stopwords))
        if set(self.bm25_extra_stopwords) - {"en_plus"}:
            raise ValueError(f"bm25_extra_stopwords takes 'en_plus', got {list(self.bm25_extra_stopwords)}")
        bad = set(self.recall_variants) - set(RECALL_VARIANTS)
        if bad:
            raise ValueError(f"recall_variants takes {sorted(RECALL_VARIANTS)}, got {sorted(bad)}")
        if not self.ks or self.ks[0] < 1:
            raise ValueError(f"ks must be positive cut-offs, got {self.ks}")
        if self.latency_k < 1:
            raise ValueError(f"latency_k must be >= 1, got {self.latency_k}")
        for name in ("max_sessions", "model_conversations", "qa_questions", "n_threads", "rrf_k"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.rrf_depth < 1:
            raise ValueError(f"rrf_depth must be >= 1, got {self.rrf_depth}")
        bad = set(self.mags_writes) - {"episodes", "model"}
        if bad:
            raise ValueError(f"mags_writes takes 'episodes' and/or 'model', got {sorted(bad)}")
        bad = set(self.qa_systems) - {"none", "rag", "full_context", "graph"}
        if bad:
            raise ValueError(f"qa_systems takes 'none', 'rag', 'full_context', 'graph', got {sorted(bad)}")
        if not isinstance(self.mags_kwargs, dict):
            raise TypeError("mags_kwargs must be a dict of MAGSConfig fields")
        if self.date_style not in ("iso", "day_month_year"):  # MAGSConfig's DATE_STYLES (checked here, before a run)
            raise ValueError(f"date_style must be 'iso' or 'day_month_year', got {self.date_style!r}")

    @classmethod
    def for_profile(cls, profile: str, **overrides: Any) -> LoCoMoBenchConfig:
        """The profile's settings (:data:`PROFILES`), then ``overrides``."""
        if profile not in PROFILES:
            raise ValueError(f"profile must be one of {sorted(PROFILES)}, got {profile!r}")
        return cls(**{**PROFILES[profile], **overrides})

    def to_dict(self) -> dict:
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v)
                for f in dataclasses.fields(self)}


# ------------------------------------------------------------------------------------------------
# selection
def truncate_conversation(conv: Conversation, max_sessions: int) -> Conversation:
    """The first ``max_sessions`` sessions (0: all) and the questions whose evidence lies in them.

    Questions without evidence are dropped when truncating (nothing says they are answerable from
    the kept sessions).
    """
    if max_sessions <= 0 or max_sessions >= len(conv.sessions):
        return conv
    sessions = conv.sessions[:max_sessions]
    kept = {t.dia_id for s in sessions for t in s.turns}
    qs = tuple(q for q in conv.questions if q.evidence and set(q.evidence) <= kept)
    return dataclasses.replace(conv, sessions=sessions, questions=qs)


def select_questions(questions: Sequence[Question], n: int, seed: int = 0) -> list[Question]:
    """Up to ``n`` questions (0: all), stratified by category: seeded shuffle per category, then
    round-robin over the categories; returned in file order.

    >>> from mags_lib.bench.locomo import Question
    >>> qs = [Question("c", i, f"q{i}", "a", 4 if i < 6 else 5, ("D1:1",)) for i in range(8)]
    >>> sorted({q.category for q in select_questions(qs, 2)}), len(select_questions(qs, 0))
    ([4, 5], 8)
    """
    qs = list(questions)
    if n <= 0 or n >= len(qs):
        return qs
    rng = np.random.default_rng(seed)
    by_cat: dict[int, list[Question]] = {}
    for q in qs:
        by_cat.setdefault(q.category, []).append(q)
    pools = [list(np.array(by_cat[c], dtype=object)[rng.permutation(len(by_cat[c]))]) for c in sorted(by_cat)]
    picked: list[Question] = []
    while len(picked) < n:
        for pool in pools:
            if pool and len(picked) < n:
                picked.append(pool.pop(0))
    return sorted(picked, key=lambda q: q.index)


# ------------------------------------------------------------------------------------------------
# turn retrievers
def turn_docs(conv: Conversation) -> list[Doc]:
    """The conversation's turns as retrievable documents (``Turn.render``, id = dia_id)."""
    return [Doc(t.dia_id, t.render()) for t in conv.turns]


def evaluate_retriever(retriever: Any, questions: Sequence[Question], *, ks: Sequence[int] = (5, 10, 25),
                       latency_k: int = 10, token_counter: Callable[[str], int] | None = None,
                       label: str | None = None, extra: dict | None = None,
                       before_timed: Callable[[str], None] | None = None,
                       memory_block: Callable[[Sequence[Any]], str] | None = None) -> list[dict]:
    """Evidence recall@k, latency and memory tokens of a fitted retriever, one row per question.

    For each question the retriever is searched once per k (the ``latency_k`` call first, timed).
    ``token_counter`` counts the tokens of the memory block made of the top ``latency_k`` hits:
    ``memory_block(hits)``, by default :func:`mags_lib.protocol.format_facts` of the hits' texts (a
    MAGS memory passes :func:`reader_memory_block`'s, the lines its reader is shown); omitted, the
    tokens are not counted. ``before_timed(query)`` runs before the timed call (the runner uses it to
    drop the query from the embedders' caches, so every timed call pays for its query embedding).
    """
    from ..protocol import format_facts

    ks = sorted({int(k) for k in ks})
    order = [latency_k] + [k for k in ks if k != latency_k]
    rows = []
    for q in questions:
        hits_by_k: dict[int, list] = {}
        seconds = 0.0
        for k in order:
            if k == latency_k and before_timed is not None:
                before_timed(q.question)
            t0 = time.perf_counter()
            hits = retriever.search(q.question, k)
            if k == latency_k:
                seconds = time.perf_counter() - t0
            hits_by_k[k] = hits
        top = hits_by_k[latency_k]
        row = {"retriever": label or retriever.name, "sample_id": q.sample_id, "question": q.index,
               "category": q.category, "n_evidence": len(q.evidence), "latency_s": seconds,
               "memory_tokens": (token_counter(memory_block(top) if memory_block is not None
                                               else format_facts([h.text for h in top])) if token_counter else None),
               "sources_per_item": float(np.mean([len(h.sources) for h in top])) if top else 0.0,
               "items": len(top)}
        for k in ks:
            row[f"recall@{k}"] = evidence_recall(q.evidence, [h.sources for h in hits_by_k[k]], k)
        row.update(extra or {})
        rows.append(row)
    return rows


@dataclass(frozen=True)
class _ItemHit(Hit):
    """A MAGS hit that keeps its recall item (for the lines the reader is shown of it)."""

    item: Any = None


class _ReaderMAGSRetriever(MAGSRetriever):
    """:class:`~.retrieval.MAGSRetriever` whose hits keep their recall items, so the memory tokens count
    the block the reader is shown (:func:`reader_memory_block`)."""

    def search(self, query: str, k: int) -> list[Hit]:
        if self.config is None:
            items = self.mags.recall(query, k=int(k))
        else:  # a recall ablation (a RecallConfig) on the same memory
            items = self.mags.graph.recall(query, k=int(k), config=self.config).items
        return [_ItemHit(it.text, float(it.score), tuple(it.sources), it) for it in items]

    def memory_block(self, hits: Sequence[Any]) -> str:
        return reader_memory_block(self.mags, [h.item for h in hits])


def reader_memory_block(mags: Any, items: Sequence[Any]) -> str:
    """The memory block a MAGS reader is shown for these recall items, unbudgeted: as :meth:`MAGS.ask`
    builds it (:meth:`MAGS.pack_facts` then :meth:`MAGS.in_time_order`): each item rendered by
    :meth:`MAGS.render_item` (date, speaker, ``no longer true``), empty items and repeated lines left out,
    dated lines oldest first, formatted by :func:`mags_lib.protocol.format_facts`. Only the token budget
    is not applied (the harness reports the memory of the top ``latency_k`` items), and no model is loaded.
    """
    from ..protocol import format_facts, normalize_text

    lines: list[str] = []
    kept: list[Any] = []
    seen: set[str] = set()
    for it in items:
        if not it.text.strip():
            continue
        line = mags.render_item(it)
        key = normalize_text(line)
        if key in seen:
            continue
        seen.add(key)
        lines.append(line)
        kept.append(it)
    lines, _, _ = mags.in_time_order(lines, 0, kept)
    return format_facts(lines)


def mags_recall_latency(mags: Any, questions: Sequence[Question], k: int = 10, config: Any = None) -> list[float]:
    """Seconds of ``mags.graph.recall(question, k)`` per question with the query embedding given
    (computed before the clock starts): the recall itself, without the embedder."""
    out = []
    for q in questions:
        v = np.asarray(mags.embedder.encode([q.question]), dtype=np.float32)
        t0 = time.perf_counter()
        mags.graph.recall(q.question, k=k, query_embeddings=v, config=config)
        out.append(time.perf_counter() - t0)
    return out


# ------------------------------------------------------------------------------------------------
# MAGS memories
def _accepts(fn: Callable, name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _iso(t: Turn) -> str:
    return t.time.isoformat(timespec="minutes")


def alive_sources(g: Any) -> tuple[set[str], set[str]]:
    """Source ids still in memory: those of alive episodes, and those of alive, valid facts.

    Uses the graph's public inspection API (``to_networkx``: alive nodes, alive valid edges).
    """
    G = g.to_networkx()
    eps = {str(d["source"]) for _, d in G.nodes(data=True) if d.get("block") == "episodic" and d.get("source")}
    facts = {str(s) for _, _, d in G.edges(data=True) if d.get("kind") == "fact" for s in d.get("sources", ())}
    return eps, facts


@dataclass
class MemoryBuild:
    """A MAGS memory built over one conversation, with what it cost and what survived."""

    mags: Any
    write: str
    speaker_mode: str
    seconds: float
    n_turns: int
    curve: list[dict]  # after each session: evidence turns seen so far, and the share still in memory
    survival: list[dict]  # per evidence turn at the end: position, episode alive, fact alive

    @property
    def seconds_per_turn(self) -> float:
        return self.seconds / max(1, self.n_turns)


def build_memory(mags: Any, conv: Conversation, *, write: str = "episodes", evidence: set[str] | None = None,
                 progress: bool = True) -> MemoryBuild:
    """Observe a conversation turn by turn into ``mags``'s memory (see the module docstring).

    Parameters
    ----------
    mags : MAGS
        A fresh agent (its configuration decides the dynamics and the maintenance schedule).
    conv : Conversation
    write : {"episodes", "model"}
        ``"model"``: ``mags.observe`` (write model -> triplets); ``"episodes"``: episodes only, no
        write model, ``mags.maintain()`` every ``maintain_every`` turns when dynamics are on.
    evidence : set of str, optional
        The evidence dia_ids whose survival is tracked (default: every turn).
    """
    from tqdm.auto import tqdm

    if write not in ("episodes", "model"):
        raise ValueError(f"write must be 'episodes' or 'model', got {write!r}")
    turns = conv.turns
    evidence = {t.dia_id for t in turns} if evidence is None else set(evidence)
    target = mags.observe if write == "model" else mags.graph.add_episode
    speaker_arg = _accepts(target, "speaker")
    c = mags.config
    every = c.maintain_every if c.dynamics_on else 0
    if write == "episodes":  # one batched encoding warms the embedder's cache (MiniLM keeps 50k texts)
        mags.embedder.encode([t.utterance() if speaker_arg else t.render() for t in turns])
    curve: list[dict] = []
    seen_ev: list[str] = []
    checking = 0.0  # time spent measuring survival, not counted as ingestion
    t0 = time.perf_counter()
    bar = tqdm(total=len(turns), desc=f"{conv.sample_id} {write}", disable=not progress, leave=False)
    try:
        n = 0
        for s in conv.sessions:
            for t in s.turns:
                text = t.utterance() if speaker_arg else t.render()
                kw = {"speaker": t.speaker} if speaker_arg else {}
                if write == "model":
                    mags.observe(text, source=t.dia_id, time=_iso(t), **kw)
                else:
                    mags.graph.add_episode(text, source=t.dia_id, time=_iso(t), **kw)
                    n += 1
                    if every and n % every == 0:
                        mags.maintain()
                if t.dia_id in evidence:
                    seen_ev.append(t.dia_id)
                bar.update(1)
            tc = time.perf_counter()
            eps, facts = alive_sources(mags.graph)
            alive = eps | facts
            checking += time.perf_counter() - tc
            curve.append({"sample_id": conv.sample_id, "write": write, "session": s.number,
                          "turns_seen": s.turns[-1].position + 1, "evidence_seen": len(seen_ev),
                          "evidence_alive": sum(d in alive for d in seen_ev),
                          "share_alive": (sum(d in alive for d in seen_ev) / len(seen_ev)) if seen_ev else None})
    finally:
        bar.close()
    seconds = time.perf_counter() - t0 - checking
    eps, facts = alive_sources(mags.graph)
    survival = [{"sample_id": conv.sample_id, "write": write, "dia_id": t.dia_id, "position": t.position,
                 "relative_position": t.position / max(1, len(turns) - 1), "episode_alive": t.dia_id in eps,
                 "fact_alive": t.dia_id in facts, "alive": t.dia_id in eps or t.dia_id in facts}
                for t in turns if t.dia_id in evidence]
    return MemoryBuild(mags=mags, write=write, speaker_mode="argument" if speaker_arg else "in text",
                       seconds=seconds, n_turns=len(turns), curve=curve, survival=survival)


# ------------------------------------------------------------------------------------------------
# QA
def memory_modes_available() -> bool:
    """Whether ``MAGSConfig`` has the ``memory`` field (modes ``none | rag | full_context | graph``)."""
    from ..agent import MAGSConfig

    return "memory" in {f.name for f in dataclasses.fields(MAGSConfig)}


def reader_question(q: Question, seed: int = 0) -> tuple[str, dict[str, str] | None]:
    """The question as LoCoMo's evaluation puts it to the reader, and the options of an adversarial one.

    Temporal (2): the question plus "Use DATE of CONVERSATION to answer with an approximate date.";
    adversarial (5): "Select the correct answer: (a) ... (b) ...", one option "Not mentioned in the
    conversation", the other the adversarial answer, their order drawn from ``seed`` and the
    question's key; others: the question as is.

    >>> from mags_lib.bench.locomo import Question
    >>> reader_question(Question("c", 0, "Is Oscar Melanie's pet?", None, 5, ("D1:1",), (), "Yes"), seed=0)[1]
    {'a': 'Not mentioned in the conversation', 'b': 'Yes'}
    """
    if q.category == 2:
        return q.question + CAT2_SUFFIX, None
    if q.category != 5:
        return q.question, None
    wrong = q.adversarial_answer or q.answer
    if not wrong:  # the loader refuses such a question; one made by hand gets no invented option
        raise ValueError(f"{q.key}: a category-5 question needs its adversarial_answer (or answer) as the wrong "
                         "option; it has neither")
    h = int(hashlib.sha256(f"{seed}:{q.key}".encode()).hexdigest(), 16)
    opts = {"a": CAT5_NOT_MENTIONED, "b": wrong} if h % 2 == 0 else {"a": wrong, "b": CAT5_NOT_MENTIONED}
    return CAT5_TEMPLATE.format(question=q.question, a=opts["a"], b=opts["b"]), opts


def map_cat5_reply(reply: str, options: dict[str, str], abstain: str | None = None) -> str:
    """An adversarial question's reply as the option it names (LoCoMo maps "a" / "(a)" this way).

    A reply that is only an option letter, with or without parentheses, becomes that option's
    text; the reader's own abstention sentence (``abstain``, the protocol's "not in my memory"
    reply, compared after LoCoMo's normalisation: case, punctuation) or any other abstention
    (:func:`mags_lib.protocol.abstains`, the one list every scorer uses) becomes "Not mentioned in
    the conversation" -- unless the reply also names the other (adversarial) option, by its letter
    (``"(b)"``, ``"b)"``, a lone ``"b"``; for ``"a"``, which is also a word, only ``"(a)"``, ``"a)"`` or an
    opening ``"a."`` / ``"a:"``) or by its text (:func:`mags_lib.protocol.matching_alias`: not inside an
    abstention phrase, not denied): a reply that picks the wrong option and hedges ("(b) Yes, but I am
    not sure.") is kept as it is, and scores 0 as in LoCoMo; anything else is kept as it is.

    >>> opts = {"a": "Yes", "b": "Not mentioned in the conversation"}
    >>> map_cat5_reply("(b)", opts), map_cat5_reply("a", opts), map_cat5_reply("Maybe", opts)
    ('Not mentioned in the conversation', 'Yes', 'Maybe')
    >>> map_cat5_reply("I don't know.", opts, abstain="I don't know.")
    'Not mentioned in the conversation'
    >>> map_cat5_reply("i don't know: that is not in my memory", opts, abstain="I don't know: that is not in my memory.")
    'Not mentioned in the conversation'
    >>> map_cat5_reply("(a) Yes, but I am not sure.", opts, abstain="I don't know.")
    '(a) Yes, but I am not sure.'
    """
    r = reply.strip().lower().rstrip(".")
    if r in ("a", "(a)", "b", "(b)"):
        return options[r.strip("()")]
    if abstain and (normalize_answer(reply) == normalize_answer(abstain) or abstains(reply)):
        if normalize_answer(reply) != normalize_answer(abstain) and _names_adversarial_option(reply, options):
            return reply  # picks the wrong option and hedges: not an abstention
        return CAT5_NOT_MENTIONED
    return reply


def _names_adversarial_option(reply: str, options: Mapping[str, str]) -> bool:
    """Whether ``reply`` names the option that is not "Not mentioned in the conversation": its letter
    (``(b)``, ``b)``, a lone ``b``; ``a`` only as ``(a)``, ``a)`` or an opening ``a.`` / ``a:``, the article
    aside) or its text, as :func:`mags_lib.protocol.matching_alias` finds it (outside abstention phrases)."""
    from ..protocol import matching_alias

    low = reply.strip().lower()
    for letter, text in options.items():
        if text == CAT5_NOT_MENTIONED:
            continue
        x = re.escape(letter)
        pattern = (rf"\(\s*{x}\s*\)|(?<![\w'’]){x}\)|^{x}\s*[.:]" if letter == "a"
                   else rf"\(\s*{x}\s*\)|(?<![\w'’]){x}(?![\w'’])")
        if re.search(pattern, low) or matching_alias(reply, [text]) is not None:
            return True
    return False


def answer_questions(mags: Any, questions: Sequence[Question], *, system: str, seed: int = 0,
                     progress: bool = True, extra: dict | None = None) -> list[dict]:
    """Ask every question through ``mags.ask`` and score the reply (one row per question)."""
    from tqdm.auto import tqdm

    from ..protocol import ABSTAIN_ANSWER

    rows = []
    for q in tqdm(questions, desc=f"QA {system}", disable=not progress, leave=False):
        text, opts = reader_question(q, seed)
        r = mags.ask(text)
        pred = map_cat5_reply(r.answer, opts, ABSTAIN_ANSWER) if opts else r.answer
        rows.append({"system": system, "sample_id": q.sample_id, "question": q.index, "category": q.category,
                     "prompt": text, "reply": r.answer, "prediction": pred, "gold": q.answer,
                     "f1": qa_score(pred, q.answer, q.category),
                     "context_recall": evidence_recall(q.evidence, [r.sources], 1),
                     "memory_tokens": int(r.memory_tokens), "seconds": float(r.seconds), **(extra or {})})
    return rows


# ------------------------------------------------------------------------------------------------
# summaries
def _mean(xs: Sequence[Any]) -> float | None:
    v = [float(x) for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return float(np.mean(v)) if v else None


def summarise_recall(rows: Sequence[dict], ks: Sequence[int] = (5, 10, 25)) -> list[dict]:
    """Per retriever: recall@k per category and overall, latency p50/p95, memory tokens.

    Questions without evidence (recall ``None``) are left out of the recall means and counted in
    ``n_no_evidence``.
    """
    out = []
    for name in dict.fromkeys(r["retriever"] for r in rows):
        rs = [r for r in rows if r["retriever"] == name]
        lat = np.array([r["latency_s"] for r in rs], dtype=float)
        toks = [r["memory_tokens"] for r in rs if r["memory_tokens"] is not None]
        d: dict[str, Any] = {"retriever": name, "n_questions": len(rs),
                             "n_no_evidence": sum(r[f"recall@{ks[0]}"] is None for r in rs),
                             "latency_p50_ms": float(np.percentile(lat, 50) * 1e3) if lat.size else None,
                             "latency_p95_ms": float(np.percentile(lat, 95) * 1e3) if lat.size else None,
                             "memory_tokens_mean": float(np.mean(toks)) if toks else None,
                             "sources_per_item": _mean([r["sources_per_item"] for r in rs])}
        given = np.array([r["recall_s_embedding_given"] for r in rs if r.get("recall_s_embedding_given") is not None])
        if given.size:
            d["recall_p50_ms_embedding_given"] = float(np.percentile(given, 50) * 1e3)
            d["recall_p95_ms_embedding_given"] = float(np.percentile(given, 95) * 1e3)
        for k in ks:
            d[f"recall@{k}"] = _mean([r[f"recall@{k}"] for r in rs])
            for c in CATEGORIES:
                d[f"recall@{k} cat{c}"] = _mean([r[f"recall@{k}"] for r in rs if r["category"] == c])
        for key in ("write", "speaker_mode", "embedder"):
            vals = {r.get(key) for r in rs if r.get(key) is not None}
            if vals:
                d[key] = ", ".join(sorted(map(str, vals)))
        out.append(d)
    return out


def summarise_by_conversation(rows: Sequence[dict], ks: Sequence[int] = (5, 10, 25)) -> dict[str, list[dict]]:
    """:func:`summarise_recall` per conversation (``sample_id``), in the rows' order."""
    return {sid: summarise_recall([r for r in rows if r["sample_id"] == sid], ks)
            for sid in dict.fromkeys(r["sample_id"] for r in rows)}


def _post_stratified(cells: Mapping[tuple[str, int], list[float]], population: Mapping[tuple[str, int], int],
                     category: int | None) -> tuple[float | None, int]:
    """The mean of the sampled cells' means (of one category, or all), each weighted by its population; and
    the population the sampled cells stand for."""
    w = {cell: population[cell] for cell in cells if category is None or cell[1] == category}
    tot = sum(w.values())
    return (sum(w[cell] * float(np.mean(cells[cell])) for cell in w) / tot if tot else None), tot


def summarise_qa(rows: Sequence[dict], population: Mapping[tuple[str, int], int] | None = None) -> list[dict]:
    """Per system: QA F1 per category and overall, memory tokens, seconds per question.

    ``population``: how many questions each (conversation, category) cell of the benchmark holds. The QA sample
    (:func:`select_questions`) takes the same number of questions from each category of a conversation, so its
    plain mean over-weights the rare categories (open-domain is 5 % of LoCoMo's questions and a fifth of a
    default sample) and under-weights single-hop (42 %). Given the population, ``f1`` and ``f1 cat<c>`` are
    post-stratified: the mean F1 of each sampled cell weighted by the questions it stands for, an estimate of
    the mean over every question of the conversations read (LoCoMo's overall); ``f1_sample`` is the plain mean
    of the sample, ``n_population`` the questions the sampled cells stand for and ``n_population_unsampled``
    those of cells with no sampled question (left out). Without it ``f1`` is the plain mean (equal when every
    question was read).

    >>> rows = [{"system": "s", "sample_id": "c", "category": c, "f1": f, "context_recall": None,
    ...          "memory_tokens": 0, "seconds": 0.0} for c, f in ((4, 1.0), (3, 0.0))]
    >>> d = summarise_qa(rows, {("c", 4): 9, ("c", 3): 1})[0]
    >>> d["f1_sample"], round(d["f1"], 3), d["n_population"]
    (0.5, 0.9, 10)
    """
    out = []
    for name in dict.fromkeys(r["system"] for r in rows):
        rs = [r for r in rows if r["system"] == name]
        d: dict[str, Any] = {"system": name, "n_questions": len(rs), "f1": _mean([r["f1"] for r in rs]),
                             "context_recall": _mean([r["context_recall"] for r in rs]),
                             "memory_tokens_mean": _mean([r["memory_tokens"] for r in rs]),
                             "seconds_per_question": _mean([r["seconds"] for r in rs])}
        for c in CATEGORIES:
            d[f"f1 cat{c}"] = _mean([r["f1"] for r in rs if r["category"] == c])
            d[f"n cat{c}"] = sum(r["category"] == c for r in rs)
        if population is not None:
            d["f1_sample"] = d["f1"]
            cells: dict[tuple[str, int], list[float]] = {}
            for r in rs:
                if r["f1"] is not None:
                    cells.setdefault((r["sample_id"], r["category"]), []).append(float(r["f1"]))
            missing = [cell for cell in cells if cell not in population]
            if missing:
                raise ValueError(f"population has no count for the sampled cells {missing[:3]}: pass the question "
                                 "counts of every (conversation, category) the rows come from")

            d["f1"], d["n_population"] = _post_stratified(cells, population, None)
            convs = {cell[0] for cell in cells}
            d["n_population_unsampled"] = sum(n for (sid, c), n in population.items()
                                              if sid in convs and (sid, c) not in cells)
            for c in CATEGORIES:
                d[f"f1 cat{c}"] = _post_stratified(cells, population, c)[0]
        out.append(d)
    return out


# ------------------------------------------------------------------------------------------------
# the run
@dataclass
class BenchResult:
    """Everything a run measured (rows are plain dicts; the notebook makes DataFrames)."""

    config: LoCoMoBenchConfig
    recall_rows: list[dict]
    qa_rows: list[dict]
    survival_rows: list[dict]
    curve_rows: list[dict]
    ingest: list[dict]
    skipped: list[str]
    quirks: dict[str, int]
    embedders: list[dict]
    memories: dict[str, Any] = field(default_factory=dict)  # "<sample_id>/<write>" -> MAGS (this process only)
    qa_population: dict[tuple[str, int], int] = field(default_factory=dict)  # (sample_id, category) -> questions

    def recall_summary(self) -> list[dict]:
        return summarise_recall(self.recall_rows, self.config.ks)

    def qa_summary(self) -> list[dict]:
        return summarise_qa(self.qa_rows, self.qa_population or None)

    def metrics(self) -> dict:
        """The headline numbers (``metrics.json``)."""
        rec = {d["retriever"]: {k: v for k, v in d.items() if k != "retriever"} for d in self.recall_summary()}
        qa = {d["system"]: {k: v for k, v in d.items() if k != "system"} for d in self.qa_summary()}
        surv: dict[str, Any] = {}
        for w in dict.fromkeys(r["write"] for r in self.survival_rows):
            rs = [r for r in self.survival_rows if r["write"] == w]
            per_conv = {}
            for sid in dict.fromkeys(r["sample_id"] for r in rs):
                cs = [r["alive"] for r in rs if r["sample_id"] == sid]
                per_conv[sid] = float(np.mean(cs))
            surv[w] = {"overall": float(np.mean([r["alive"] for r in rs])),
                       "episode_alive": float(np.mean([r["episode_alive"] for r in rs])),
                       "fact_alive": float(np.mean([r["fact_alive"] for r in rs])),
                       "min_conversation": min(per_conv.values()), "per_conversation": per_conv}
        return {"status": "done", "config": self.config.to_dict(), "recall": rec, "qa": qa,
                "evidence_survival": surv, "ingest": self.ingest, "skipped": self.skipped,
                "quirks": self.quirks, "embedders": self.embedders, "published": _jsonable(PUBLISHED)}


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def _code_hash() -> str:
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        h.update(p.relative_to(root).as_posix().encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def _conv_hash(conv: Conversation) -> str:
    h = hashlib.sha256()
    for t in conv.turns:
        h.update(f"{t.dia_id}\x00{t.render()}\x00{t.time.isoformat()}\x01".encode())
    for q in conv.questions:
        h.update(f"{q.index}\x00{q.question}\x00{q.answer}\x00{q.evidence}\x00{q.category}\x00"
                 f"{q.adversarial_answer}\x01".encode())
    return h.hexdigest()[:16]


_TOKEN_PROBES = ("Caroline: I went to the LGBTQ support group yesterday [shares a photo of a sign].",
                 "- (Melanie, likes, pottery, 8 May 2023)", "What did Caroline research? 42 self-care")


def _token_counter_key(token_counter: Callable[[str], int] | None, models: dict) -> dict:
    """What decides the memory-token counts of a unit: the default counter is the answer model's tokenizer
    (its file, from ``models``); another counter is known by its name and its counts on a few probe texts
    (whitespace words and the answer model's tokens give different counts on them)."""
    if token_counter is None:
        return {"counter": "answer model tokenizer", "model": models.get("answer")}
    return {"counter": getattr(token_counter, "__qualname__", type(token_counter).__name__),
            "probe": [int(token_counter(s)) for s in _TOKEN_PROBES]}


def _file_stamp(path: Path) -> Any:
    """A model file or folder as (name, size, mtime_ns) per file: a model retrained in place changes it."""
    if path.is_file():
        st = path.stat()
        return [str(path), st.st_size, st.st_mtime_ns]
    if path.is_dir():
        return [[str(f), f.stat().st_size, f.stat().st_mtime_ns] for f in sorted(path.rglob("*")) if f.is_file()]
    return [str(path), "absent"]


def _model_files_key(mags_kw: dict) -> dict:
    """Per role, the model files an agent built with these ``MAGSConfig`` fields would load (``"embedded"``
    for the packaged base model), stamped by :func:`_file_stamp`: part of every unit key that a model's
    output or tokenizer decides, so a rerun after a model is retrained (same path, new weights) recomputes
    instead of reusing the old model's results."""
    from types import SimpleNamespace

    from ..agent import MAGS, MAGSConfig
    from ..models import resolve_model

    try:
        c = MAGSConfig(**mags_kw)
    except (TypeError, ValueError):  # a custom factory's own keywords: nothing to resolve (make_mags decides)
        return {}
    try:
        specs = MAGS._resolve_models(SimpleNamespace(config=c))  # the agent's own resolution (fails fast)
    except (FileNotFoundError, ValueError) as e:  # building the agent will say so; the key only records it
        return {"unresolved": str(e)}
    out: dict[str, Any] = {}
    for role, spec in sorted(specs.items()):
        out[role] = "embedded" if spec is None else _file_stamp(Path(resolve_model(spec, models_root=c.models_root).path))
    return out


class _SharedBackend:
    """Another agent's backend for one role, loaded by that agent on first use (so agents that never
    call a model never load one)."""

    def __init__(self, owner: Any, role: str):
        self._owner, self._role = owner, role

    def __getattr__(self, name: str) -> Any:
        return getattr(self._owner.backend(self._role), name)


class _UnitCache:
    """Finished units of work as JSON files keyed by their inputs and the library's code, so an
    interrupted run resumes; a changed input, parameter or source file recomputes the unit."""

    def __init__(self, folder: Path | None):
        self.folder = folder
        self.code = _code_hash() if folder is not None else ""

    def _path(self, name: str, key: dict) -> Path | None:
        if self.folder is None:
            return None
        digest = hashlib.sha256(json.dumps({**key, "code": self.code}, sort_keys=True, default=str).encode())
        return self.folder / f"{name}-{digest.hexdigest()[:16]}.json"

    def get(self, name: str, key: dict) -> dict | None:
        p = self._path(name, key)
        if p is None or not p.is_file():
            return None
        try:
            return json.loads(p.read_text())
        except ValueError:
            return None  # a damaged file is recomputed

    def put(self, name: str, key: dict, value: dict) -> None:
        p = self._path(name, key)
        if p is not None:
            from ..repro import atomic_write_text

            atomic_write_text(p, json.dumps(value, default=str))


def run_benchmark(data: LoCoMo, config: LoCoMoBenchConfig, *, out_dir: str | Path | None = None,
                  token_counter: Callable[[str], int] | None = None, mags_factory: Callable[..., Any] | None = None,
                  progress: bool = True, keep_memories: int = 1, n_jobs: int = 1) -> BenchResult:
    """Run the benchmark described by ``config`` on ``data`` (see the module docstring).

    Parameters
    ----------
    data : LoCoMo
        From :func:`mags_lib.bench.locomo.load_locomo`.
    config : LoCoMoBenchConfig
    out_dir : path, optional
        Where finished units are cached (``<out_dir>/units/``) so a rerun resumes; none: no cache.
    token_counter : callable, optional
        ``str -> int`` for memory tokens; default: the answer model's tokenizer (loads it).
    mags_factory : callable, optional
        ``(**MAGSConfig fields) -> MAGS``; default ``MAGS.default`` sharing one set of loaded backends.
    keep_memories : int
        How many MAGS memories to keep in ``BenchResult.memories`` (for drawing); the rest are closed.
    n_jobs : int
        With ``out_dir`` and more than one conversation: the units of every conversation but the first
        are computed first by this many processes (joblib; llama.cpp on one thread each), each running
        this function on one conversation into the same unit cache; then this process computes the first
        conversation (whose memory it keeps for drawing) and reads the others' units back. The results
        are the units of one process; the latencies of those conversations are measured beside another
        process on the other core.
    """
    from ..agent import MAGS
    from ..models import ModelNotFoundError

    cfg = config
    convs = [truncate_conversation(c, cfg.max_sessions) for c in data.conversations
             if not cfg.conversations or c.sample_id in cfg.conversations]
    missing = set(cfg.conversations) - {c.sample_id for c in data.conversations}
    if missing:
        raise ValueError(f"unknown conversations {sorted(missing)}; the file has "
                         f"{[c.sample_id for c in data.conversations]}")
    if n_jobs < 1:
        raise ValueError(f"n_jobs must be >= 1, got {n_jobs}")
    skipped: list[str] = []
    cache = _UnitCache(Path(out_dir) / "units" if out_dir is not None else None)
    if n_jobs > 1 and out_dir is not None and len(convs) > 2 and mags_factory is None:
        from joblib import Parallel, delayed
        from tqdm.auto import tqdm

        shortest = sorted(convs, key=lambda c: (c.n_turns, c.sample_id))[: cfg.model_conversations]
        rest = convs[1:]
        if progress:
            print(f"units of {len(rest)} conversations in {n_jobs} processes, then {convs[0].sample_id} here",
                  flush=True)
        # the workers' own bars do not reach a notebook: one bar here, moved as each conversation finishes
        bar = tqdm(total=len(rest), desc=f"conversations in {min(n_jobs, len(rest))} processes", unit="conv",
                   disable=not progress)
        par = Parallel(n_jobs=min(n_jobs, len(rest)), return_as="generator_unordered")
        for sample_id in par(delayed(_units_of)(data, dataclasses.replace(
                cfg, conversations=(c.sample_id,), n_threads=1,
                model_conversations=int(c in shortest)), out_dir, token_counter) for c in rest):
            bar.set_postfix_str(f"{sample_id} done", refresh=False)
            bar.update(1)
        bar.close()

    shared: dict[str, Any] = {}

    def mags_kw(**kw: Any) -> dict:
        return {"seed": cfg.seed, "embedder": cfg.embedder, "dynamics": cfg.dynamics, "date_style": cfg.date_style,
                **cfg.mags_kwargs, **kw}

    def make_mags(**kw: Any) -> Any:
        kw = mags_kw(**kw)
        if cfg.n_threads:
            kw.setdefault("n_threads", cfg.n_threads)
        if mags_factory is not None:
            return mags_factory(**kw)
        from ..agent import MAGSConfig

        m = MAGS(MAGSConfig(**kw), embedder=embedder(cfg.embedder), backends=shared.get("backends"))
        if "backends" not in shared:  # later agents share this one's models, loaded on first use
            shared["backends"] = {r: _SharedBackend(m, r) for r in ("ask", "write", "answer")}
            shared["owner"] = m
        return m

    models_key = _model_files_key(mags_kw())  # the model files the units' figures come from
    tokens_key = _token_counter_key(token_counter, models_key)
    if token_counter is None:
        def token_counter(s: str, _cache: dict = {}) -> int:  # noqa: B006 - one tokenizer per run
            if "b" not in _cache:
                _cache["b"] = make_mags().backend("answer")
            return int(_cache["b"].count_tokens(s))

    embedders: dict[str, Any] = {}
    emb_info: list[dict] = []
    dense_names = [cfg.embedder, *[e for e in cfg.extra_embedders if e != cfg.embedder]]

    def embedder(name: str) -> Any:
        if name not in embedders:
            embedders[name], info = bench_embedder(name)
            emb_info.append(info)
        return embedders[name]

    unavailable: set[str] = set()  # extra embedders whose package is missing (their rows are skipped)

    def evict(text: str) -> None:
        """Forget ``text`` in the embedders' caches (MiniLM keeps an LRU cache of encoded texts)."""
        for e in embedders.values():
            cache_ = getattr(e, "_cache", None)
            if cache_ is not None:
                cache_.pop(text, None)

    by_len = sorted(convs, key=lambda c: (c.n_turns, c.sample_id))
    model_convs = {c.sample_id for c in by_len[: cfg.model_conversations]} if "model" in cfg.mags_writes else set()
    modes_ok = memory_modes_available()
    other_modes = [s for s in cfg.qa_systems if s != "graph"]
    if other_modes and not modes_ok:
        skipped.append(f"QA with memory modes {other_modes}: MAGSConfig has no `memory` field yet "
                       "(the agent's memory modes are not implemented); run again when it exists")
    if "model" in cfg.mags_writes and cfg.model_conversations < len(convs):
        rest = [c.sample_id for c in by_len[cfg.model_conversations:]]
        skipped.append(f"MAGS with the write model on {len(rest)} conversations ({', '.join(rest)}): "
                       f"model_conversations={cfg.model_conversations} (cost per turn in `ingest`)")

    recall_rows: list[dict] = []
    qa_rows: list[dict] = []
    survival_rows: list[dict] = []
    curve_rows: list[dict] = []
    ingest: list[dict] = []
    memories: dict[str, Any] = {}
    t_start = time.perf_counter()
    for ci, conv in enumerate(convs):
        qa_qs = select_questions(conv.questions, cfg.qa_questions, cfg.seed)
        evidence = {d for q in conv.questions for d in q.evidence}
        base_key = {"conv": _conv_hash(conv), "ks": list(cfg.ks), "latency_k": cfg.latency_k}
        if progress:
            print(f"[{ci + 1}/{len(convs)}] {conv.sample_id}: {conv.n_turns} turns, {len(conv.questions)} "
                  f"questions ({len(qa_qs)} read), {time.perf_counter() - t_start:.0f} s so far", flush=True)
        # -- turn retrievers --------------------------------------------------------------------
        key = {**base_key, "unit": "turns", "dense": dense_names, "bm25": cfg.bm25, "hybrid": cfg.hybrid,
               "rrf": [cfg.rrf_k, cfg.rrf_depth], "bm25_extra": list(cfg.bm25_extra_stopwords),
               "tokens": tokens_key}
        unit = cache.get(f"{conv.sample_id}-turns", key)
        if unit is None:
            docs = turn_docs(conv)
            rows: list[dict] = []
            incomplete = False  # a dense row skipped (its package missing): not cached, so a rerun adds it
            bm25 = BM25Retriever().fit(docs) if (cfg.bm25 or cfg.hybrid) else None
            if cfg.bm25:
                rows += evaluate_retriever(bm25, conv.questions, ks=cfg.ks, latency_k=cfg.latency_k,
                                           token_counter=token_counter, before_timed=evict, extra={"embedder": None})
            for sw in cfg.bm25_extra_stopwords:
                other = BM25Retriever(stopwords=sw, name=f"bm25 ({sw} stopwords)").fit(docs)
                rows += evaluate_retriever(other, conv.questions, ks=cfg.ks, latency_k=cfg.latency_k,
                                           token_counter=token_counter, before_timed=evict, extra={"embedder": None})
            for name in dense_names:
                if name in unavailable:
                    incomplete = True
                    continue
                try:
                    emb = embedder(name)
                except ModelNotFoundError as e:
                    if name == cfg.embedder:
                        raise  # MAGS needs it too
                    unavailable.add(name)
                    incomplete = True
                    skipped.append(f"dense retrieval with {name!r}: {e}")
                    continue
                dense = DenseRetriever(emb, name=f"dense-{name}").fit(docs)
                rows += evaluate_retriever(dense, conv.questions, ks=cfg.ks, latency_k=cfg.latency_k,
                                           token_counter=token_counter, before_timed=evict, extra={"embedder": name})
                if cfg.hybrid and bm25 is not None:
                    rrf = RRFRetriever([bm25, dense], k=cfg.rrf_k, depth=cfg.rrf_depth,
                                       name=f"rrf(bm25+dense-{name})")
                    rows += evaluate_retriever(rrf, conv.questions, ks=cfg.ks, latency_k=cfg.latency_k,
                                               token_counter=token_counter, before_timed=evict, extra={"embedder": name})
            unit = {"rows": rows}
            if not incomplete:
                cache.put(f"{conv.sample_id}-turns", key, unit)
        recall_rows += unit["rows"]
        # -- MAGS memories ----------------------------------------------------------------------
        for write in cfg.mags_writes:
            if write == "model" and conv.sample_id not in model_convs:
                continue
            label = f"mags ({'write model' if write == 'model' else 'episodes only'})"
            key = {**base_key, "unit": "mags", "write": write, "embedder": cfg.embedder, "dynamics": cfg.dynamics,
                   "mags_kwargs": cfg.mags_kwargs, "date_style": cfg.date_style, "seed": cfg.seed,
                   "qa": [q.index for q in qa_qs],
                   "graph_qa": "graph" in cfg.qa_systems, "recall_variants": list(cfg.recall_variants),
                   "tokens": tokens_key,
                   "models": models_key if (write == "model" or "graph" in cfg.qa_systems) else None}
            unit = cache.get(f"{conv.sample_id}-mags-{write}", key)
            if unit is None:
                m = make_mags()
                mb = build_memory(m, conv, write=write, evidence=evidence, progress=progress)
                extra = {"write": write, "speaker_mode": mb.speaker_mode, "embedder": cfg.embedder}
                retr = _ReaderMAGSRetriever(m, name=label)
                rows = evaluate_retriever(retr, conv.questions, ks=cfg.ks, latency_k=cfg.latency_k,
                                          token_counter=token_counter, before_timed=evict, extra=extra,
                                          memory_block=retr.memory_block)
                variants = [(label, None)]
                for vname in cfg.recall_variants:
                    vcfg = dataclasses.replace(m.graph.config.recall, **RECALL_VARIANTS[vname])
                    variants.append((f"{label} [{vname}]", vcfg))
                    retr = _ReaderMAGSRetriever(m, name=variants[-1][0], config=vcfg)
                    rows += evaluate_retriever(retr, conv.questions, ks=cfg.ks, latency_k=cfg.latency_k,
                                               token_counter=token_counter, before_timed=evict,
                                               extra={**extra, "recall_variant": vname},
                                               memory_block=retr.memory_block)
                for vlabel, vcfg in variants:  # the recall alone, query embedding given
                    secs = iter(mags_recall_latency(m, conv.questions, cfg.latency_k, vcfg))
                    for r in rows:
                        if r["retriever"] == vlabel:
                            r["recall_s_embedding_given"] = next(secs)
                qrows = (answer_questions(m, qa_qs, system=f"graph: {label}", seed=cfg.seed, progress=progress,
                                          extra={"write": write}) if "graph" in cfg.qa_systems else [])
                unit = {"rows": rows, "qa": qrows, "survival": mb.survival, "curve": mb.curve,
                        "ingest": {"sample_id": conv.sample_id, "write": write, "turns": mb.n_turns,
                                   "seconds": mb.seconds, "seconds_per_turn": mb.seconds_per_turn,
                                   "speaker_mode": mb.speaker_mode, "graph": m.graph.stats()}}
                cache.put(f"{conv.sample_id}-mags-{write}", key, unit)
                if len(memories) < keep_memories:
                    memories[f"{conv.sample_id}/{write}"] = m
                elif m is not shared.get("owner"):
                    m.close()
            recall_rows += unit["rows"]
            qa_rows += unit["qa"]
            survival_rows += unit["survival"]
            curve_rows += unit["curve"]
            ingest.append(unit["ingest"])
        # -- reader with the agent's other memory modes -----------------------------------------
        if modes_ok:
            for mode in other_modes:
                key = {**base_key, "unit": "qa", "mode": mode, "seed": cfg.seed, "qa": [q.index for q in qa_qs],
                       "mags_kwargs": cfg.mags_kwargs, "date_style": cfg.date_style, "embedder": cfg.embedder,
                       "models": models_key}
                unit = cache.get(f"{conv.sample_id}-qa-{mode}", key)
                if unit is None:
                    m = make_mags(memory=mode)
                    t0 = time.perf_counter()
                    speaker_arg = _accepts(m.observe, "speaker")
                    for t in conv.turns:
                        kw = {"speaker": t.speaker} if speaker_arg else {}
                        m.observe(t.utterance() if speaker_arg else t.render(), source=t.dia_id, time=_iso(t), **kw)
                    secs = time.perf_counter() - t0
                    unit = {"qa": answer_questions(m, qa_qs, system=mode, seed=cfg.seed, progress=progress),
                            "ingest": {"sample_id": conv.sample_id, "write": f"memory={mode}",
                                       "turns": conv.n_turns, "seconds": secs,
                                       "seconds_per_turn": secs / max(1, conv.n_turns)}}
                    cache.put(f"{conv.sample_id}-qa-{mode}", key, unit)
                    if m is not shared.get("owner"):
                        m.close()
                qa_rows += unit["qa"]
                ingest.append(unit["ingest"])
    population = Counter((conv.sample_id, q.category) for conv in convs for q in conv.questions)
    return BenchResult(config=cfg, recall_rows=recall_rows, qa_rows=qa_rows, survival_rows=survival_rows,
                       curve_rows=curve_rows, ingest=ingest, skipped=skipped, quirks=dict(data.quirks),
                       embedders=emb_info, memories=memories, qa_population=dict(population))


def _units_of(data: LoCoMo, config: LoCoMoBenchConfig, out_dir: str | Path,
              token_counter: Callable[[str], int] | None) -> str:
    """One worker of :func:`run_benchmark`'s ``n_jobs``: compute (and cache) the units of ``config``'s one
    conversation, and return its sample id. ``model_conversations`` is 1 exactly when the whole run gives
    this conversation the write model (the unit keys do not depend on it)."""
    run_benchmark(data, config, out_dir=out_dir, token_counter=token_counter, progress=False, keep_memories=0)
    return config.conversations[0]


# ------------------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    from ..repro import atomic_write_text, run_dir
    from .locomo import load_locomo

    p = argparse.ArgumentParser(prog="python -m mags_lib.bench.locomo_eval", description=__doc__.split("\n")[0])
    p.add_argument("--data", default=None,
                   help="the file locomo10.json, or a folder holding it (default $MAGS_LOCOMO, else "
                        "../shared/data/locomo/locomo10.json beside the project; absent there: skipped)")
    p.add_argument("--profile", choices=sorted(PROFILES), default="default")
    p.add_argument("--run-tag", default=None, help="results/<run_tag>/70_locomo_benchmark/ (default: profile)")
    p.add_argument("--out", default=None, help="output folder (overrides --run-tag)")
    p.add_argument("--conversations", default="", help="comma-separated sample ids (default: the profile's)")
    p.add_argument("--embedder", default=None,
                   help="embedder of MAGS and of the dense row: minilm (default) | e5-small | hash")
    p.add_argument("--extra-embedders", default="", help="comma-separated, e.g. e5-small")
    p.add_argument("--writes", default="episodes,model")
    p.add_argument("--recall-variants", default="",
                   help=f"comma-separated MAGS recall ablations on the same memory: {', '.join(RECALL_VARIANTS)}")
    p.add_argument("--bm25-extra-stopwords", default="",
                   help="more BM25 rows with other stopword lists: en_plus (the 179-word list MAGS's index uses)")
    p.add_argument("--no-qa", action="store_true", help="recall only: no reader (no language model is loaded)")
    p.add_argument("--tokens", choices=("model", "words"), default="model",
                   help="memory tokens counted with the answer model's tokenizer, or as whitespace words")
    p.add_argument("--summary-json", default=None,
                   help="also write recall@k per conversation and overall, per retriever, to this file")
    p.add_argument("--tuned-on", default="",
                   help="comma-separated conversations the recall settings were tuned on (recorded in the "
                        "summary, which also averages the others: the held-out figure)")
    p.add_argument("--no-dynamics", action="store_true",
                   help="MAGS memories without maintenance (nothing decays or is pruned): recall over every turn")
    p.add_argument("--models", choices=("base", "trained"), default="base",
                   help="the MAGS models: embedded base, or trained (models/<role>/default/, notebook 20)")
    p.add_argument("--write-model", default=None,
                   help="the write model of the write-model memory: a .gguf file or an adapter folder "
                        "(overrides --models for the write role)")
    p.add_argument("--model-conversations", type=int, default=None,
                   help="conversations given the write-model memory, shortest first (default: the profile's; "
                        "10: all)")
    p.add_argument("--qa-systems", default="",
                   help="comma-separated reader memories to compare (default: the profile's, "
                        "none,rag,full_context,graph; none,rag,graph in the default profile)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--jobs", type=int, default=1,
                   help="processes computing the conversations' units at once (one llama.cpp thread each)")
    a = p.parse_args(argv)
    try:
        data = load_locomo(a.data)
    except FileNotFoundError as e:
        # a path asked for (--data, or $MAGS_LOCOMO set) and missing is a mistake, not an optional input left out
        if a.data is not None:
            p.error(f"--data: {e}")
        if getattr(e, "explicit", False) or os.environ.get("MAGS_LOCOMO"):
            p.error(f"$MAGS_LOCOMO: {e}")
        print(f"skipped: {e}", file=sys.stderr)
        return 0
    over: dict[str, Any] = {"seed": a.seed, "n_threads": a.threads, "mags_writes": tuple(a.writes.split(","))}
    if a.conversations:
        over["conversations"] = tuple(a.conversations.split(","))
    if a.embedder:
        over["embedder"] = a.embedder
    if a.extra_embedders:
        over["extra_embedders"] = tuple(a.extra_embedders.split(","))
    if a.recall_variants:
        over["recall_variants"] = tuple(a.recall_variants.split(","))
    if a.bm25_extra_stopwords:
        over["bm25_extra_stopwords"] = tuple(a.bm25_extra_stopwords.split(","))
    if a.qa_systems:
        over["qa_systems"] = tuple(x for x in a.qa_systems.split(",") if x)
    if a.no_qa:
        over["qa_systems"] = ()
    if a.models != "base":
        over["mags_kwargs"] = {"models": a.models}
    if a.write_model:
        over["mags_kwargs"] = {**over.get("mags_kwargs", {}), "write_model": a.write_model}
    if a.model_conversations is not None:
        over["model_conversations"] = a.model_conversations
    if a.no_dynamics:
        over["dynamics"] = False
    cfg = LoCoMoBenchConfig.for_profile(a.profile, **over)
    tuned_on = tuple(filter(None, a.tuned_on.split(",")))
    run_ids = ([c.sample_id for c in data.conversations if not cfg.conversations or c.sample_id in cfg.conversations]
               if tuned_on else [])
    if set(tuned_on) - set(run_ids):  # checked now, not after the run: the held-out figure depends on it
        p.error(f"--tuned-on {a.tuned_on}: {sorted(set(tuned_on) - set(run_ids))} not among the conversations "
                f"this run evaluates ({', '.join(run_ids)})")
    out = Path(a.out) if a.out else run_dir(a.run_tag or a.profile, "70_locomo_benchmark")
    t0 = time.perf_counter()
    res = run_benchmark(data, cfg, out_dir=out, token_counter=(lambda s: len(s.split())) if a.tokens == "words" else None,
                        n_jobs=a.jobs)
    atomic_write_text(out / "metrics.json", json.dumps(res.metrics(), indent=1, default=str) + "\n")
    for d in res.recall_summary():
        given = d.get("recall_p95_ms_embedding_given")
        print(f"{d['retriever']:>44}  " + "  ".join(f"R@{k} {d[f'recall@{k}']:.3f}" for k in cfg.ks)
              + f"  p95 {d['latency_p95_ms']:.1f} ms" + (f" ({given:.1f} ms embedding given)" if given else "")
              + f"  tokens {d['memory_tokens_mean'] or 0:.0f}")
    for d in res.qa_summary():
        print(f"QA {d['system']:>40}  F1 {d['f1']:.3f}  n={d['n_questions']}")
    for s in res.skipped:
        print(f"skipped: {s}")
    print(f"wrote {out / 'metrics.json'}")
    if a.summary_json:
        summary = recall_summary_json(res, tuned_on=tuned_on,
                                      command="python -m mags_lib.bench.locomo_eval " + " ".join(
                                          sys.argv[1:] if argv is None else argv),
                                      seconds=time.perf_counter() - t0)
        Path(a.summary_json).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(Path(a.summary_json), json.dumps(summary, indent=1, default=str) + "\n")
        print(f"wrote {a.summary_json}")
    return 0


def recall_summary_json(res: BenchResult, *, tuned_on: Sequence[str] = (), command: str = "",
                        seconds: float | None = None) -> dict:
    """Recall@k per conversation and overall (all, and the conversations not in ``tuned_on``), per
    retriever, with latency, and whether MAGS meets issue 13's recall targets."""
    import platform
    import subprocess

    ks = res.config.ks
    run_ids = list(dict.fromkeys(r["sample_id"] for r in res.recall_rows))
    unknown = sorted(set(tuned_on) - set(run_ids))
    if unknown:  # a mistyped name would silently make the held-out figure the overall one
        raise ValueError(f"tuned_on names conversations this run did not evaluate: {unknown}; it ran {run_ids}")
    keep = ("n_questions", "n_no_evidence", *(f"recall@{k}" for k in ks), "latency_p50_ms", "latency_p95_ms",
            "recall_p50_ms_embedding_given", "recall_p95_ms_embedding_given")

    def table(rows: Sequence[dict]) -> dict:
        return {d["retriever"]: {k: d[k] for k in keep if d.get(k) is not None} for d in summarise_recall(rows, ks)}

    per_conv = {sid: table([r for r in res.recall_rows if r["sample_id"] == sid])
                for sid in dict.fromkeys(r["sample_id"] for r in res.recall_rows)}
    held = [r for r in res.recall_rows if r["sample_id"] not in set(tuned_on)]
    overall = table(res.recall_rows)
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], check=False, capture_output=True, text=True,
                                cwd=Path(__file__).resolve().parents[2]).stdout.strip() or None
    except OSError:
        commit = None
    out: dict[str, Any] = {
        "command": command, "git_commit": commit, "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores", "seconds": seconds,
        "config": res.config.to_dict(), "tuned_on": list(tuned_on),
        "metric": "evidence recall@k: share of a question's evidence dia_ids among the sources of the top k",
        "overall": overall, "held_out": table(held) if tuned_on else None, "per_conversation": per_conv,
        "published": _jsonable(PUBLISHED), "recall_variants": {k: RECALL_VARIANTS[k] for k in res.config.recall_variants},
        "ingest": _jsonable(res.ingest),
    }
    dense = f"dense-{res.config.embedder}"
    mags = next((n for n in overall if n.startswith("mags (episodes only)") and "[" not in n), None)
    if mags and dense in overall and 10 in ks:
        worse = [sid for sid, t in per_conv.items() if mags in t and dense in t
                 and t[mags]["recall@10"] < t[dense]["recall@10"]]
        out["targets"] = {
            "mags_recall@10_ge_dense_on_every_conversation": not worse, "conversations_below_dense": worse,
            "mags_recall@10_overall": overall[mags]["recall@10"], "target_recall@10": 0.75,
            "mags_recall_p95_ms_embedding_given": overall[mags].get("recall_p95_ms_embedding_given"),
            "target_p95_ms": 50.0}
    return out


if __name__ == "__main__":
    raise SystemExit(main())
