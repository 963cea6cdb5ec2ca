"""Helpers for hand-checkable graphs: an embedder whose vectors you choose.

>>> import numpy as np
>>> e = TableEmbedder({"bob": [1, 0, 0, 0], "robert": [0.96, 0.28, 0, 0]}, dim=4)
>>> round(float(e.encode(["bob"])[0] @ e.encode(["robert"])[0]), 2)
0.96
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["TableEmbedder"]


class TableEmbedder:
    """Embedder with fixed vectors for listed texts; other texts get (nearly) orthogonal vectors.

    Parameters
    ----------
    table : dict
        Text -> vector (normalised on use). Lookup is exact, then case-insensitive.
    dim : int
        Dimension; unlisted texts get a deterministic random unit vector of this size (for
        ``dim >= 64`` two of them have cosine ~0).
    seed : int
        Seed of the fallback vectors.
    """

    def __init__(self, table: dict[str, Sequence[float]] | None = None, dim: int = 64, seed: int = 0):
        self.dim = int(dim)
        self.name = f"table-{self.dim}-{seed}"
        self.seed = int(seed)
        self.table: dict[str, np.ndarray] = {}
        for k, v in (table or {}).items():
            self.add(k, v)

    def add(self, text: str, vector: Sequence[float]) -> None:
        """Fix the vector of ``text``."""
        v = np.asarray(vector, dtype=np.float64).reshape(-1)
        if v.shape != (self.dim,):
            raise ValueError(f"vector for {text!r} has {v.size} values, expected {self.dim}")
        n = np.linalg.norm(v)
        if n == 0:
            raise ValueError(f"vector for {text!r} is zero")
        self.table[text] = (v / n).astype(np.float32)

    def _fallback(self, text: str) -> np.ndarray:
        import hashlib

        h = int.from_bytes(hashlib.blake2b(f"{self.seed}:{text}".encode(), digest_size=8).digest(), "little")
        v = np.random.default_rng(h).standard_normal(self.dim)
        return (v / np.linalg.norm(v)).astype(np.float32)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("encode() takes a sequence of strings")
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        lower = {k.lower(): v for k, v in self.table.items()}
        for i, t in enumerate(texts):
            v = self.table.get(t)
            if v is None:
                v = lower.get(t.lower())
            out[i] = self._fallback(t.lower()) if v is None else v
        return out
