"""Inference backends behind one small interface (:class:`Backend`).

>>> from mags_lib.backends import load_backend
>>> with load_backend("llamacpp") as b:                     # doctest: +SKIP
...     g = b.generate([[{"role": "user", "content": "Hi"}]], max_new_tokens=8)[0]

``llamacpp`` (GGUF, CPU, GBNF grammars), ``transformers`` (batched, left padding) and ``vllm``
(optional, CUDA only, imported lazily). Backends know nothing of the memory graph.
"""

from .base import (
    BACKENDS,
    Backend,
    BackendUnavailableError,
    Generation,
    GenerationMemo,
    close_all,
    generation_memo,
    load_backend,
)

__all__ = ["BACKENDS", "Backend", "BackendUnavailableError", "Generation", "GenerationMemo", "close_all",
           "generation_memo", "load_backend"]
