"""Retrievers behind one interface: BM25, flat dense, reciprocal rank fusion, and MAGS recall.

Every retriever has ``name``, ``fit(docs)`` (a sequence of :class:`Doc`: an id and a text) and
``search(query, k) -> list[Hit]`` (best first; a :class:`Hit` carries the source ids it stands for).
The turn retrievers return one hit per turn, whose only source is the turn's id; MAGS recall returns
memory items (facts and episodes) whose sources are the ids of the observations they came from.

>>> docs = [Doc("D1:1", "Caroline: I adopted a puppy called Rex."),
...         Doc("D1:2", "Melanie: My kids love painting."),
...         Doc("D1:3", "Caroline: Rex chews my shoes.")]
>>> bm25 = BM25Retriever().fit(docs)
>>> [h.sources[0] for h in bm25.search("What is the name of Caroline's puppy?", k=2)]
['D1:1', 'D1:3']
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

__all__ = ["BM25Retriever", "DenseRetriever", "Doc", "Hit", "MAGSRetriever", "RRFRetriever", "rrf_fuse",
           "tokenize"]


@dataclass(frozen=True)
class Doc:
    """A retrievable unit: an id (e.g. a dia_id) and its text."""

    id: str
    text: str


@dataclass(frozen=True)
class Hit:
    """One retrieved item: its text, score, and the source ids it stands for."""

    text: str
    score: float
    sources: tuple[str, ...]


# ------------------------------------------------------------------------------------------------
# BM25
_WORD = re.compile(r"\b\w\w+\b")  # bm25s's default token pattern: words of two or more characters


@lru_cache(maxsize=2)
def _stopwords(which: str = "en") -> frozenset:
    from bm25s.stopwords import STOPWORDS_EN, STOPWORDS_EN_PLUS

    return frozenset(STOPWORDS_EN_PLUS if which == "en_plus" else STOPWORDS_EN)


@lru_cache(maxsize=1 << 16)
def _stem(word: str) -> str:
    from ..graph.lexical import porter_stemmer

    return porter_stemmer().stem(word)


def tokenize(text: str, *, stopwords: bool | str = True, stem: bool = True) -> list[str]:
    """Lower-cased words of two or more characters, English stopwords (``bm25s``'s list: ``True`` or
    ``"en"``, 33 words; ``"en_plus"``, its 179-word list) removed, Porter-stemmed.

    >>> tokenize("Caroline's puppies were running in the park")
    ['carolin', 'puppi', 'were', 'run', 'park']
    """
    words = _WORD.findall(str(text).lower())
    if stopwords:
        stop = _stopwords("en_plus" if stopwords == "en_plus" else "en")
        words = [w for w in words if w not in stop]
    return [_stem(w) for w in words] if stem else words


class BM25Retriever:
    """Okapi BM25 over the documents (the ``bm25s`` library; tokens from :func:`tokenize`).

    Parameters
    ----------
    k1, b : float
        BM25's term-frequency saturation and length normalisation.
    stopwords : bool or str
        ``True`` / ``"en"``, ``"en_plus"`` or ``False`` (see :func:`tokenize`).
    stem : bool
        Porter stems (see :func:`tokenize`).
    """

    name = "bm25"

    def __init__(self, k1: float = 1.5, b: float = 0.75, *, stopwords: bool | str = True, stem: bool = True,
                 name: str | None = None):
        if k1 <= 0 or not 0.0 <= b <= 1.0:
            raise ValueError(f"need k1 > 0 and 0 <= b <= 1, got k1={k1}, b={b}")
        if stopwords not in (True, False, "en", "en_plus"):
            raise ValueError(f"stopwords must be True, False, 'en' or 'en_plus', got {stopwords!r}")
        self.k1, self.b, self.stopwords, self.stem = float(k1), float(b), stopwords, stem
        if name is not None:
            self.name = name
        self._docs: list[Doc] = []
        self._model: Any = None

    def fit(self, docs: Sequence[Doc]) -> BM25Retriever:
        import bm25s

        docs = _check_docs(docs)
        toks = [tokenize(d.text, stopwords=self.stopwords, stem=self.stem) or ["\u2205"] for d in docs]
        vocab: dict[str, int] = {}
        ids = [[vocab.setdefault(t, len(vocab)) for t in ts] for ts in toks]
        model = bm25s.BM25(k1=self.k1, b=self.b)
        model.index(bm25s.tokenization.Tokenized(ids=ids, vocab=vocab), show_progress=False)
        self._docs, self._model, self._vocab = docs, model, vocab
        return self

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document for ``query``."""
        if self._model is None:
            raise RuntimeError("call fit(docs) before search")
        ids = [self._vocab[t] for t in tokenize(query, stopwords=self.stopwords, stem=self.stem) if t in self._vocab]
        if not ids:
            return np.zeros(len(self._docs), dtype=np.float32)
        return np.asarray(self._model.get_scores(ids), dtype=np.float32)

    def search(self, query: str, k: int) -> list[Hit]:
        return _top(self._docs, self.scores(query), k)


# ------------------------------------------------------------------------------------------------
# dense
class DenseRetriever:
    """Flat (exact) cosine search over embedded documents.

    Parameters
    ----------
    embedder : Embedder
        Anything with ``encode(texts)`` returning L2-normalised rows; an embedder that tells queries
        from passages (``encode_queries`` / ``encode_passages``, e.g. E5) gets each its own.
    name : str, optional
        Row label (default ``"dense-<embedder name>"``).
    """

    def __init__(self, embedder: Any, name: str | None = None):
        self.embedder = embedder
        self.name = name or f"dense-{getattr(embedder, 'name', type(embedder).__name__)}"
        self._docs: list[Doc] = []
        self._E: np.ndarray | None = None

    def fit(self, docs: Sequence[Doc]) -> DenseRetriever:
        docs = _check_docs(docs)
        enc = getattr(self.embedder, "encode_passages", self.embedder.encode)
        self._E = np.asarray(enc([d.text for d in docs]), dtype=np.float32)
        self._docs = docs
        return self

    def scores(self, query: str) -> np.ndarray:
        if self._E is None:
            raise RuntimeError("call fit(docs) before search")
        enc = getattr(self.embedder, "encode_queries", self.embedder.encode)
        q = np.asarray(enc([query]), dtype=np.float32)[0]
        return self._E @ q

    def search(self, query: str, k: int) -> list[Hit]:
        return _top(self._docs, self.scores(query), k)


# ------------------------------------------------------------------------------------------------
# fusion
def rrf_fuse(rankings: Sequence[Sequence[str]], k: int = 60) -> list[tuple[str, float]]:
    """Reciprocal rank fusion: ``score(d) = sum over rankings of 1 / (k + rank of d)``, rank from 1.

    Ties are broken by the best rank reached in any list, then by first appearance.

    >>> rrf_fuse([["a", "b", "c"], ["c", "a"]], k=1)  # a: 1/2 + 1/3, c: 1/4 + 1/2, b: 1/3
    [('a', 0.8333333333333333), ('c', 0.75), ('b', 0.3333333333333333)]
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    score: dict[str, float] = {}
    best: dict[str, int] = {}
    for ranking in rankings:
        for r, d in enumerate(ranking, start=1):
            score[d] = score.get(d, 0.0) + 1.0 / (k + r)
            best[d] = min(best.get(d, r), r)
    order = {d: i for i, d in enumerate(score)}
    return sorted(score.items(), key=lambda x: (-x[1], best[x[0]], order[x[0]]))


class RRFRetriever:
    """Hybrid retrieval: reciprocal rank fusion of the rankings of several fitted retrievers.

    Parameters
    ----------
    retrievers : sequence
        Turn retrievers (one source per hit) over the same documents.
    k : int
        RRF's rank constant (60 in Cormack et al., 2009).
    depth : int
        How many hits of each retriever are fused.
    """

    def __init__(self, retrievers: Sequence[Any], k: int = 60, depth: int = 100, name: str | None = None):
        if not retrievers:
            raise ValueError("RRFRetriever needs at least one retriever")
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self.retrievers, self.k, self.depth = list(retrievers), int(k), int(depth)
        self.name = name or "rrf(" + "+".join(r.name for r in self.retrievers) + ")"

    def fit(self, docs: Sequence[Doc]) -> RRFRetriever:
        for r in self.retrievers:
            r.fit(docs)
        return self

    def search(self, query: str, k: int) -> list[Hit]:
        hits: dict[str, Hit] = {}
        rankings = []
        for r in self.retrievers:
            rs = r.search(query, max(self.depth, k))
            rankings.append([h.sources[0] for h in rs])
            for h in rs:
                hits.setdefault(h.sources[0], h)
        fused = rrf_fuse(rankings, k=self.k)[: int(k)]
        return [Hit(hits[d].text, s, hits[d].sources) for d, s in fused]


# ------------------------------------------------------------------------------------------------
# MAGS
class MAGSRetriever:
    """MAGS recall (``m.recall(query, k)``) as a retriever; the memory is built beforehand.

    ``config``: a :class:`~mags_lib.graph.RecallConfig` to recall with instead (an ablation; the
    graph's ``recall`` is called directly).

    ``fit`` is not supported: how the memory is built (the write model, or episodes only) is the
    caller's choice and part of the row's label (see :func:`mags_lib.bench.locomo_eval.build_memory`).
    """

    def __init__(self, mags: Any, name: str = "mags", config: Any = None):
        self.mags, self.name, self.config = mags, name, config

    def fit(self, docs: Sequence[Doc]) -> MAGSRetriever:
        raise TypeError("MAGSRetriever searches a memory built by observing the conversation; build it with "
                        "mags_lib.bench.locomo_eval.build_memory")

    def search(self, query: str, k: int) -> list[Hit]:
        if self.config is None:
            items = self.mags.recall(query, k=int(k))
        else:  # a recall ablation (a RecallConfig) on the same memory
            items = self.mags.graph.recall(query, k=int(k), config=self.config).items
        return [Hit(it.text, float(it.score), tuple(it.sources)) for it in items]


# ------------------------------------------------------------------------------------------------
def _check_docs(docs: Sequence[Doc]) -> list[Doc]:
    docs = list(docs)
    if not docs:
        raise ValueError("fit needs at least one document")
    if not all(isinstance(d, Doc) for d in docs):
        raise TypeError("fit takes a sequence of Doc(id, text)")
    return docs


def _top(docs: list[Doc], scores: np.ndarray, k: int) -> list[Hit]:
    if int(k) < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    k = min(int(k), len(docs))
    idx = np.argpartition(-scores, k - 1)[:k] if k < len(docs) else np.arange(len(docs))
    idx = idx[np.lexsort((idx, -scores[idx]))]  # best first, ties by document order
    return [Hit(docs[i].text, float(scores[i]), (docs[i].id,)) for i in idx.tolist()]
