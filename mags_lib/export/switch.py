"""Switching trained iterations over one loaded base model: time and memory, adapters vs whole models.

Two ways to serve several trained roles (or several iterations of one role) from one base:

* **one context, adapters switched** -- ``set_adapter(name)`` on one llama.cpp context (or one PEFT
  model in transformers). Cheap by itself, but the KV cache holds keys and values computed under the
  previous adapter, so the next prompt is processed from scratch;
* **one context per role, each with its own adapter, over one model** -- llama.cpp applies adapters
  per context, so nothing is switched at all and each role keeps its prompt prefix cached
  (:class:`mags_lib.backends.llamacpp_backend.LlamaCppBackend` shares one loaded model between
  backends of the same file).

:func:`time_switch` measures both against loading a whole (merged) model; :func:`memory_footprint`
measures, each in a fresh process, the resident memory of three merged models against one base plus
three adapters.

Command line (one footprint, used by :func:`memory_footprint`)::

    python -m mags_lib.export.switch '{"setup": "adapters_per_context", "base": ..., "files": [...]}'
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["SETUPS", "memory_footprint", "time_switch"]

SETUPS = ("merged_models", "adapters_per_context", "adapters_one_context", "transformers_merged",
          "transformers_adapters")
"""What :func:`memory_footprint` can load: ``merged_models`` (one llama.cpp model per file),
``adapters_per_context`` (one base, one context per adapter), ``adapters_one_context`` (one base,
one context, the adapters switched), ``transformers_merged`` (one merged float32 model per PEFT
adapter), ``transformers_adapters`` (one float32 base, the PEFT adapters switched)."""

_PROMPT = [{"role": "user", "content": "Blorps eat only frozen lemons. What do blorps eat?"}]


def _stats(xs: Sequence[float]) -> dict:
    xs = sorted(xs)
    return {"p50_s": statistics.median(xs), "min_s": xs[0], "max_s": xs[-1], "n": len(xs)}


def time_switch(base: str | os.PathLike | None, adapters: Mapping[str, str | os.PathLike], *,
                merged: Mapping[str, str | os.PathLike] | None = None,
                peft_adapters: Mapping[str, str | os.PathLike] | None = None,
                prompt: Sequence[dict] | str | None = None, repeats: int = 10, n_threads: int = 1,
                n_ctx: int = 2048, max_new_tokens: int = 8) -> Any:
    """Time adapter switches and whole-model loads.

    Parameters
    ----------
    base : path or None
        The base GGUF the GGUF adapters apply onto (None: the embedded SmolLM2).
    adapters : dict
        Name -> GGUF LoRA adapter (at least one; two or more to switch between).
    merged : dict, optional
        Label -> merged GGUF model, whose load time is the alternative to a switch.
    peft_adapters : dict, optional
        Name -> PEFT adapter folder, for the same figures in transformers.
    prompt : chat messages or str, optional
        What is generated after a switch.

    Returns
    -------
    pandas.DataFrame
        Rows ``backend, what, p50_s, min_s, max_s, n``.
    """
    import pandas as pd

    from ..backends import load_backend

    if not adapters:
        raise ValueError("time_switch needs at least one GGUF adapter")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    prompt = prompt if prompt is not None else _PROMPT
    names = list(adapters)
    rows = []

    def add(backend: str, what: str, xs: Sequence[float]) -> None:
        rows.append({"backend": backend, "what": what, **_stats(xs)})

    for label, path in (merged or {}).items():
        xs = []
        for _ in range(min(repeats, 3)):
            t0 = time.perf_counter()
            b = load_backend("llamacpp", model=path, n_threads=n_threads, n_ctx=n_ctx, share_model=False)
            xs.append(time.perf_counter() - t0)
            b.close()
        add("llamacpp", f"load a whole model ({label})", xs)

    with load_backend("llamacpp", model=base, n_threads=n_threads, n_ctx=n_ctx) as b:
        xs = []
        for i in range(repeats):
            t0 = time.perf_counter()
            b.load_adapter("probe", adapters[names[i % len(names)]])
            xs.append(time.perf_counter() - t0)
            b.unload_adapter("probe")
        add("llamacpp", "load an adapter", xs)
        for n in names:
            b.load_adapter(n, adapters[n])
        sw, after, cached = [], [], []
        b.set_adapter(names[0])
        b.generate([prompt], max_new_tokens=max_new_tokens)
        for i in range(repeats):
            t0 = time.perf_counter()
            b.generate([prompt], max_new_tokens=max_new_tokens)
            cached.append(time.perf_counter() - t0)
            nxt = names[(i + 1) % len(names)] if len(names) > 1 else (None if b.active_adapter else names[0])
            t0 = time.perf_counter()
            b.set_adapter(nxt)
            sw.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            b.generate([prompt], max_new_tokens=max_new_tokens)
            after.append(time.perf_counter() - t0)
        add("llamacpp", "switch adapter (one context)", sw)
        add("llamacpp", "generation right after a switch (prompt processed again)", after)
        add("llamacpp", "generation without a switch (prompt prefix cached)", cached)

    per_role = [load_backend("llamacpp", model=adapters[n], base_model=base, n_threads=n_threads, n_ctx=n_ctx)
                for n in names]
    try:
        for b in per_role:
            b.generate([prompt], max_new_tokens=max_new_tokens)
        xs = []
        for i in range(repeats):
            b = per_role[i % len(per_role)]
            t0 = time.perf_counter()
            b.generate([prompt], max_new_tokens=max_new_tokens)
            xs.append(time.perf_counter() - t0)
        add("llamacpp", "change of role, one context per role on one model (no switch)", [0.0] * repeats)
        add("llamacpp", "generation after a change of role (context per role)", xs)
    finally:
        for b in per_role:
            b.close()

    if peft_adapters:
        pnames = list(peft_adapters)
        xs = []
        for _ in range(min(repeats, 2)):
            t0 = time.perf_counter()
            b = load_backend("transformers", model=peft_adapters[pnames[0]], n_threads=n_threads)
            xs.append(time.perf_counter() - t0)
            b.close()
        add("transformers", "load a whole model (base + adapter merged)", xs)
        with load_backend("transformers", n_threads=n_threads) as b:
            xs = []
            for n in pnames:
                t0 = time.perf_counter()
                b.load_adapter(n, peft_adapters[n])
                xs.append(time.perf_counter() - t0)
            add("transformers", "load an adapter (PEFT)", xs)
            xs = []
            for i in range(repeats):
                nxt = pnames[(i + 1) % len(pnames)] if len(pnames) > 1 else (None if b.active_adapter else pnames[0])
                t0 = time.perf_counter()
                b.set_adapter(nxt)
                xs.append(time.perf_counter() - t0)
            add("transformers", "switch adapter (PEFT set_adapter)", xs)
    return pd.DataFrame(rows)


def _footprint(spec: Mapping[str, Any]) -> dict:
    """Load what ``spec`` says in this process, generate once per role, and report its memory."""
    import psutil

    from ..backends import load_backend

    proc = psutil.Process()
    setup = spec["setup"]
    files = list(spec["files"])
    kw = {"n_threads": int(spec.get("n_threads", 1))}
    import llama_cpp  # noqa: F401 - imported before the baseline, as the loads below import it
    import torch  # noqa: F401

    before = proc.memory_full_info()
    t0 = time.perf_counter()
    backends = []
    if setup == "merged_models":
        backends = [load_backend("llamacpp", model=f, n_ctx=int(spec.get("n_ctx", 2048)), **kw) for f in files]
    elif setup == "adapters_per_context":
        backends = [load_backend("llamacpp", model=f, base_model=spec.get("base"), n_ctx=int(spec.get("n_ctx", 2048)),
                                 **kw) for f in files]
    elif setup == "adapters_one_context":
        b = load_backend("llamacpp", model=spec.get("base"), n_ctx=int(spec.get("n_ctx", 2048)), **kw)
        for i, f in enumerate(files):
            b.load_adapter(f"a{i}", f)
        backends = [b]
    elif setup == "transformers_merged":
        backends = [load_backend("transformers", model=f, **kw) for f in files]
    elif setup == "transformers_adapters":
        b = load_backend("transformers", **kw)
        for i, f in enumerate(files):
            b.load_adapter(f"a{i}", f)
        backends = [b]
    else:
        raise ValueError(f"setup must be one of {SETUPS}, got {setup!r}")
    for i in range(len(files)):
        b = backends[i % len(backends)]
        if setup in ("adapters_one_context", "transformers_adapters"):
            b.set_adapter(f"a{i}")
        b.generate([_PROMPT], max_new_tokens=4)
    after = proc.memory_full_info()
    return {"setup": setup, "n_models": len(files), "load_s": time.perf_counter() - t0,
            "rss_mb": (after.rss - before.rss) / 2**20, "uss_mb": (after.uss - before.uss) / 2**20,
            "pss_mb": (after.pss - before.pss) / 2**20}


def memory_footprint(setup: str, files: Sequence[str | os.PathLike], *, base: str | os.PathLike | None = None,
                     n_ctx: int = 2048, n_threads: int = 1, timeout: float = 600) -> dict:
    """Resident memory added by loading ``files`` the ``setup`` way (see :data:`SETUPS`), measured in a
    fresh Python process after one generation per file.

    Returns
    -------
    dict
        ``setup, n_models, load_s, rss_mb, uss_mb, pss_mb`` (MiB added over a process that imported
        torch and llama-cpp-python). USS counts pages only this process maps; RSS also counts the
        file-backed weights llama.cpp maps from disk.
    """
    if setup not in SETUPS:
        raise ValueError(f"setup must be one of {SETUPS}, got {setup!r}")
    spec = {"setup": setup, "files": [str(f) for f in files], "base": str(base) if base else None,
            "n_ctx": n_ctx, "n_threads": n_threads}
    res = subprocess.run([sys.executable, "-m", "mags_lib.export.switch", json.dumps(spec)], check=False,
                         capture_output=True, text=True, timeout=timeout)
    if res.returncode != 0:
        raise RuntimeError(f"memory footprint of {setup} failed:\n{res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    print(json.dumps(_footprint(json.loads(sys.argv[1]))))
