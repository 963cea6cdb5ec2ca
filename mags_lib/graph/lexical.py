"""Lexical (BM25) index over node texts, kept incrementally beside the vector indexes.

Hybrid recall (:func:`mags_lib.graph.recall.recall`, ``RecallConfig.lexical_weight``) fuses the
cosine of a node with its Okapi BM25 score for the query, so a rare name or a number the embedder
does not tell apart ("Zbigniew", "Route 66") still finds the node that says it. One
:class:`LexicalIndex` per block (entities, episodes), like :class:`~.index.VectorIndex`:

* a document is a node's text as written (an episode with a speaker: ``"<speaker>: <text>"``, as it
  is embedded); it never changes after the node is made, so the index is a function of the set of
  alive nodes and is never saved: load, rollback, replay and compaction rebuild it
  (``LiquidGraph._rebuild_derived``) and get the same statistics, hence the same scores;
* tokens: lower-cased words of two or more characters, English stopwords removed (``bm25s``'s
  lists, ``IndexConfig.lexical_stopwords``: by default the 179-word one, so question words such as
  "what" / "did" / "you" do not match every turn), Porter-stemmed (NLTK's stemmer, :func:`porter_stemmer`) -- with ``"en"`` the
  tokenisation of the LoCoMo benchmark's BM25 baseline (:func:`mags_lib.bench.retrieval.tokenize`);
* writes are cheap: a new row only joins a *pending* list; it is tokenised and posted on the next
  search (so a graph that is written and never searched never tokenises);
* a removed row leaves its postings until a search reads that token's list and finds more dead
  than live entries; document frequencies, the document count and the total length are updated
  at once (integers), so scores never depend on when the dead postings go.

Scoring is Okapi BM25 with Lucene's idf, ``log(1 + (N - df + 0.5) / (df + 0.5))``, and the term
weight ``tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))``; ``k1`` and ``b`` are query-time
parameters (``RecallConfig.bm25_k1`` / ``bm25_b``). A search costs one pass over the postings of
the query's distinct tokens (stopwords carry none) plus one zeroed vector of the rows.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
import threading
import types
from array import array
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache

import numpy as np

__all__ = ["STOPWORD_LISTS", "LexicalIndex", "porter_stemmer", "stopword_set", "text_tokens", "tokenize"]

_WORD = re.compile(r"\b\w\w+\b")  # bm25s's default token pattern: words of two or more characters


STOPWORD_LISTS = ("en", "en_plus", "none")
"""``IndexConfig.lexical_stopwords``: ``"en"``, bm25s's 33 English stopwords (the LoCoMo BM25
baseline's); ``"en_plus"``, bm25s's 179-word list (NLTK's English list: also "what", "did", "you",
"my"...); ``"none"``."""


@lru_cache(maxsize=4)
def stopword_set(which: str = "en_plus") -> frozenset:
    """The words of stopword list ``which`` (:data:`STOPWORD_LISTS`): bm25s's English lists, or none."""
    if which == "none":
        return frozenset()
    from bm25s.stopwords import STOPWORDS_EN, STOPWORDS_EN_PLUS

    if which not in ("en", "en_plus"):
        raise ValueError(f"stopwords must be one of {STOPWORD_LISTS}, got {which!r}")
    return frozenset(STOPWORDS_EN if which == "en" else STOPWORDS_EN_PLUS)


_NLTK_LOCK = threading.Lock()


@lru_cache(maxsize=1)
def porter_stemmer():
    """NLTK's Porter stemmer in its default mode (the one LoCoMo's evaluation stems with), one per process.

    ``import nltk`` runs the package's ``__init__``, which imports most of NLTK and ``scipy.stats``: 2-3 s of CPU
    (measured on the 2-core machine) in every process that tokenises -- the agent's first recall, each notebook
    kernel, each worker process -- for one module of pure Python. When NLTK is not imported yet, that module
    (``nltk/stem/porter.py`` and the three small ones it imports) is loaded alone, beneath stand-ins for the
    ``nltk`` and ``nltk.stem`` packages, and every ``nltk`` entry this adds to ``sys.modules`` is taken out again:
    the stemmer keeps its module, and a later ``import nltk`` loads the package as usual (about 0.03 s).

    >>> porter_stemmer().stem("puppies")
    'puppi'
    """
    with _NLTK_LOCK:
        if "nltk" in sys.modules:  # imported already (or by another thread meanwhile): nothing to save
            from nltk.stem.porter import PorterStemmer

            return PorterStemmer()
        spec = importlib.util.find_spec("nltk")  # finds the package without running its __init__
        if spec is None or not spec.submodule_search_locations:
            raise ModuleNotFoundError("nltk is not installed: it is part of the environment "
                                      "(bash scripts/setup_env.sh installs it)")
        root = next(iter(spec.submodule_search_locations))
        try:
            for name, path in (("nltk", root), ("nltk.stem", f"{root}/stem")):
                stand_in = types.ModuleType(name)
                stand_in.__path__ = [path]
                sys.modules[name] = stand_in
            porter = importlib.import_module("nltk.stem.porter")
        finally:
            for name in [k for k in sys.modules if k == "nltk" or k.startswith("nltk.")]:
                del sys.modules[name]  # none was there before (checked above)
        return porter.PorterStemmer()


@lru_cache(maxsize=1 << 17)
def _stem(word: str) -> str:
    return porter_stemmer().stem(word)


def tokenize(text: str, stopwords: str = "en_plus") -> list[str]:
    """Lower-cased words of two or more characters, stopwords removed, Porter-stemmed.

    >>> tokenize("Caroline's puppies were running in the park", "en")
    ['carolin', 'puppi', 'were', 'run', 'park']
    >>> tokenize("What did Caroline's puppies do?")
    ['carolin', 'puppi']
    """
    stop = stopword_set(stopwords)
    return [_stem(w) for w in _WORD.findall(str(text).lower()) if w not in stop]


@lru_cache(maxsize=1 << 16)
def text_tokens(text: str, stopwords: str = "en_plus") -> tuple[str, ...]:
    """:func:`tokenize` of ``text``, cached (entity names and relations recur in every fact)."""
    return tuple(tokenize(text, stopwords))


class LexicalIndex:
    """Okapi BM25 over a subset of node rows, updated incrementally (see the module docstring).

    Parameters
    ----------
    doc_text : callable
        ``row -> str``: the document of a row, read when the row is first tokenised.
    stopwords : str
        Which stopword list (:data:`STOPWORD_LISTS`).
    """

    def __init__(self, doc_text: Callable[[int], str], stopwords: str = "en_plus"):
        stopword_set(stopwords)  # checks the name
        self._doc_text = doc_text
        self.stopwords = stopwords
        self._vocab: dict[str, int] = {}
        self._rows: list[array] = []  # token id -> posted rows (ascending: rows only grow)
        self._tf: list[array] = []  # token id -> term frequency in each posted row
        self._df: list[int] = []  # token id -> live documents holding it
        self._terms: dict[int, tuple[int, ...]] = {}  # live tokenised row -> its distinct token ids
        self._dl = np.zeros(64, dtype=np.float64)  # row -> document length (tokens)
        self._member = np.zeros(64, dtype=bool)
        self._pending: dict[int, None] = {}  # members not tokenised yet (ordered)
        self._n = 0  # live documents
        self._total = 0  # their total length

    def __len__(self) -> int:
        return self._n + len(self._pending)

    def _ensure(self, n: int) -> None:
        if n > self._member.shape[0]:
            size = max(n, 2 * self._member.shape[0])
            for name in ("_dl", "_member"):
                old = getattr(self, name)
                new = np.zeros(size, dtype=old.dtype)
                new[: old.shape[0]] = old
                setattr(self, name, new)

    def add(self, rows: Iterable[int]) -> None:
        """Make ``rows`` members (tokenised at the next search)."""
        for r in rows:
            r = int(r)
            if r not in self._pending and r not in self._terms:
                self._pending[r] = None

    def remove(self, rows: Iterable[int]) -> None:
        """Remove rows (rows that are not members are ignored)."""
        for r in rows:
            r = int(r)
            if self._pending.pop(r, 0) is None:
                continue
            terms = self._terms.pop(r, None)
            if terms is None:
                continue
            for t in terms:
                self._df[t] -= 1
            self._member[r] = False
            self._n -= 1
            self._total -= int(self._dl[r])

    def flush(self) -> None:
        """Tokenise and post the pending rows (in row order)."""
        if not self._pending:
            return
        rows = sorted(self._pending)
        self._pending = {}
        self._ensure(rows[-1] + 1)
        vocab = self._vocab
        for r in rows:
            toks = tokenize(self._doc_text(r), self.stopwords)
            counts: dict[int, int] = {}
            for w in toks:
                t = vocab.get(w)
                if t is None:
                    t = vocab[w] = len(self._df)
                    self._rows.append(array("q"))
                    self._tf.append(array("f"))
                    self._df.append(0)
                counts[t] = counts.get(t, 0) + 1
            for t, c in counts.items():
                self._rows[t].append(r)
                self._tf[t].append(float(c))
                self._df[t] += 1
            self._terms[r] = tuple(counts)
            self._member[r] = True
            self._dl[r] = len(toks)
            self._n += 1
            self._total += len(toks)

    def query_terms(self, query: str) -> list[int]:
        """The distinct known token ids of ``query``, in order of first appearance."""
        self.flush()
        out: dict[int, None] = {}
        for w in tokenize(query, self.stopwords):
            t = self._vocab.get(w)
            if t is not None and self._df[t] > 0:
                out[t] = None
        return list(out)

    def scores(self, query: str, n_rows: int, k1: float = 1.5, b: float = 0.75) -> np.ndarray | None:
        """BM25 score of every row ``< n_rows`` for ``query`` (0 for non-members); None when no
        member holds any of the query's tokens."""
        terms = self.query_terms(query)
        if not terms or self._n == 0:
            return None
        out = np.zeros(max(n_rows, 1), dtype=np.float64)
        n, avgdl = self._n, self._total / self._n
        member, dl = self._member, self._dl
        for t in terms:
            rows = np.frombuffer(self._rows[t], dtype=np.int64)
            tf = np.frombuffer(self._tf[t], dtype=np.float32).astype(np.float64)
            live = member[rows]
            if not live.all():
                rows, tf = rows[live], tf[live]
                if rows.size * 2 < live.size:  # mostly dead: keep only the live postings
                    self._rows[t] = array("q", rows.tolist())
                    self._tf[t] = array("f", tf.tolist())
            df = self._df[t]
            idf = np.log(1.0 + (n - df + 0.5) / (df + 0.5))
            out[rows] += idf * tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * dl[rows] / avgdl))
        return out

    def score_tokens(self, query: Sequence[str], docs: Sequence[Sequence[str]], k1: float = 1.5,
                     b: float = 0.75) -> np.ndarray:
        """BM25 of documents that are not in the index (token lists, e.g. a fact's subject, relation
        and object) with this index's statistics; a query token no member holds has the largest idf,
        ``log(1 + (N + 0.5) / 0.5)``.

        >>> ix = LexicalIndex(["blorps", "frozen lemons"].__getitem__)
        >>> ix.add([0, 1])
        >>> [round(float(x), 3) for x in ix.score_tokens(tokenize("what do blorps eat"),
        ...                                             [text_tokens("blorps eat frozen lemons"), ("lemon",)])]
        [1.42, 0.0]
        """
        self.flush()
        out = np.zeros(len(docs))
        if not docs or not query:
            return out
        n = self._n
        # no member, or members made only of stopwords and one-letter words ("I", "it", "me"): the
        # average length is 0 and BM25's length normalisation undefined; score as for an empty index
        avgdl = self._total / n if n and self._total else 1.0
        idf = {}
        for w in query:
            t = self._vocab.get(w)
            df = self._df[t] if t is not None else 0
            idf[w] = float(np.log(1.0 + (n - df + 0.5) / (df + 0.5)))
        for j, doc in enumerate(docs):
            if not doc:
                continue
            norm = k1 * (1.0 - b + b * len(doc) / avgdl)
            sc = 0.0
            for w, f in idf.items():
                tf = doc.count(w)
                if tf:
                    sc += f * tf * (k1 + 1.0) / (tf + norm)
            out[j] = sc
        return out

    def top(self, scores: np.ndarray | None, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``n`` best rows with a positive score (best first, ties by row) and their scores."""
        if scores is None or n < 1:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        pos = np.flatnonzero(scores > 0.0)
        if pos.size > n:
            cut = np.partition(scores[pos], pos.size - n)[pos.size - n]  # the n-th best score
            above = pos[scores[pos] > cut]
            tied = pos[scores[pos] == cut][: n - above.size]  # ties at the cut: the lowest rows
            pos = np.concatenate([above, tied])
        pos = pos[np.lexsort((pos, -scores[pos]))]
        return pos.astype(np.int64), scores[pos]
