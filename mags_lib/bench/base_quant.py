"""The base model's GGUF type on this CPU: prompt and generation speed, and how far its outputs move.

Usage::

    python -m mags_lib.bench.base_quant                 # ~10 minutes (five files, one thread)
    python -m mags_lib.bench.base_quant --quick         # small sizes (~1 minute)
    python -m mags_lib.bench.base_quant --types Q8_0,Q4_0 --threads 1

The base-model systems (the before row of notebook 10, the game's ``graph_base``, ``rag`` and
``full_context``, TextWorld's ``mags_base``, LoCoMo on the base models) run the embedded SmolLM2-135M-Instruct,
which ships as a Q4_1 GGUF. Most of their llama.cpp time is prompt evaluation (a reader's memory block, a
few-shot write prompt), and how fast llama.cpp evaluates a prompt depends on the file's type and the CPU's
instruction sets (llama.cpp repacks some types, Q4_0 among them, for its AVX2 / AVX-512 kernels).

This bench writes the base model (``models/base``, the embedded file de-quantized) as F16 with the exporter
(:func:`mags_lib.export.gguf_write.write_model_gguf`), quantizes it to each ``--types`` entry
(:func:`mags_lib.export.gguf_write.quantize_gguf`), and runs the embedded file and each written one on the
same inputs, llama.cpp backend, ``--threads`` threads:

* **prompt tokens/s**: each role's base prompt (the agent's: system prompt, few-shot block) on generated
  test inputs (ask, write; answer with its recalled items), evaluated afresh (no prefix reuse), one output
  token; prompt tokens over wall time, the best of ``--repeats`` passes over the prompts;
* **generation tokens/s**: greedy, ``--max-new-tokens`` on fixed chat prompts after a warm-up call, less the
  same prompts with one token (so the prompts' evaluation is left out);
* **equal to the embedded file**: the share of greedy role outputs (the agent's grammar for ask and write,
  free text for the answer role) identical to the embedded file's, per role: what switching the file would
  change in the base-model results.

Writes ``results/bench/base_quant.json`` (``--out``), with the CPU's model name and vector instruction
sets and the load average before and after (figures from a busy machine are not comparable).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["GEN_PROMPTS", "cpu_info", "main", "role_prompts", "run", "write_base_variants"]

GEN_PROMPTS = (
    "Write a long story about a cat who lives in a lighthouse.",
    "Explain, step by step, how bread is baked.",
    "Describe a walk through a forest in autumn.",
)
ROLES = ("ask", "write", "answer")


def cpu_info() -> dict:
    """The CPU's model name and the vector instruction sets it lists (``/proc/cpuinfo``; empty elsewhere)."""
    from ..repro import cpu_model

    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    line = next((ln for ln in text.splitlines() if ln.split(":", 1)[0].strip() == "flags"), ":")
    flags = sorted(f for f in line.split(":", 1)[1].split() if f.startswith(("avx", "amx", "fma", "f16c")))
    return {"model": cpu_model() or platform.processor() or "", "flags": flags}


def write_base_variants(folder: str | os.PathLike, types: Sequence[str], *, threads: int = 1) -> dict[str, Path]:
    """The base model as F16 (written by the exporter) and quantized to each of ``types`` under ``folder``;
    files already there are kept (``{type: path}``, F16 included)."""
    from transformers import AutoModelForCausalLM

    from ..export.gguf_write import quantize_gguf, write_model_gguf
    from ..models import base_model_dir

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    base = base_model_dir()
    f16 = folder / "base-f16.gguf"
    if not f16.exists():
        model = AutoModelForCausalLM.from_pretrained(base)
        write_model_gguf(model, f16, "F16", tokenizer_dir=base, base_dir=base, name="base", progress=False)
        del model
    out = {"F16": f16}
    for t in types:
        if t.upper() == "F16":
            continue
        path = folder / f"base-{t.lower()}.gguf"
        if not path.exists():
            quantize_gguf(f16, path, t.upper(), n_threads=threads)
        out[t.upper()] = path
    return out


def role_prompts(n: int, *, seed: int = 0) -> dict[str, tuple[list, str | None, int]]:
    """``{role: (chat prompts, grammar or None, max_new_tokens)}``: the agent's base prompt of each role on
    ``n`` generated test inputs."""
    from ..data import GenerationConfig, generate_role_splits
    from ..roles import ROLE_SPECS

    rows = generate_role_splits(GenerationConfig(n_train=2, n_validation=2, n_test=n, worlds_train=1,
                                                 worlds_validation=1, worlds_test=2, seed=seed, roles=ROLES),
                                progress=False)[0]
    out = {}
    for role in ROLES:
        spec = ROLE_SPECS[role].base
        prompts = [spec.messages(r["input"], facts=r["memory"] if role == "answer" else None)
                   for r in rows[role]["test"][:n]]
        out[role] = (prompts, spec.grammar(), spec.max_new_tokens)
    return out


def _measure(model: str | None, prompts: dict, *, threads: int, repeats: int, max_new_tokens: int,
             max_role_tokens: int | None) -> dict:
    from ..backends import load_backend

    res: dict = {}
    with load_backend("llamacpp", model, n_threads=threads, prefix_cache=False) as b:
        all_prompts = [p for role in ROLES for p in prompts[role][0]]
        b.generate(all_prompts[:1], max_new_tokens=1)  # warm-up
        best = None
        for _ in range(repeats):
            t0 = time.perf_counter()
            gens = b.generate(all_prompts, max_new_tokens=1)
            dt = time.perf_counter() - t0
            best = dt if best is None else min(best, dt)
        n_prompt = sum(g.n_prompt_tokens for g in gens)
        res["prompt_tokens"] = n_prompt
        res["prompt_tokens_per_s"] = round(n_prompt / best, 1)
        chats = [[{"role": "user", "content": p}] for p in GEN_PROMPTS]
        b.generate(chats[:1], max_new_tokens=8)  # warm-up
        spent = {}
        for budget in (1, max_new_tokens):  # the difference leaves the prompts' evaluation out
            t0 = time.perf_counter()
            gens = b.generate(chats, max_new_tokens=budget)
            spent[budget] = (time.perf_counter() - t0, sum(g.n_new_tokens for g in gens))
        extra = spent[max_new_tokens][1] - spent[1][1]
        res["generated_tokens"] = spent[max_new_tokens][1]
        res["generation_tokens_per_s"] = (round(extra / (spent[max_new_tokens][0] - spent[1][0]), 1)
                                          if extra > 0 else None)
        res["outputs"] = {}
        t0 = time.perf_counter()
        for role in ROLES:
            ps, grammar, budget = prompts[role]
            budget = min(budget, max_role_tokens) if max_role_tokens else budget
            res["outputs"][role] = [g.text for g in b.generate(ps, max_new_tokens=budget, grammar=grammar,
                                                               stop_repeats=grammar is not None)]
        res["role_outputs_seconds"] = round(time.perf_counter() - t0, 2)
    return res


def run(*, out: str | os.PathLike, types: Sequence[str] = ("Q8_0", "Q4_0", "Q4_1", "F16"), threads: int = 1,
        n_inputs: int = 8, repeats: int = 3, max_new_tokens: int = 64, max_role_tokens: int | None = None, seed: int = 0,
        work_dir: str | os.PathLike | None = None, progress: bool = True) -> dict:
    """Run the bench (see the module's text) and write its JSON to ``out``; returns it. ``max_role_tokens``
    caps the role outputs' budgets (default: each role's own)."""
    from tqdm.auto import tqdm

    from .. import repro
    from ..export.gguf_write import llama_ftype
    from ..models import project_root, resolve_model

    if threads < 1 or n_inputs < 1 or repeats < 1 or max_new_tokens < 1:
        raise ValueError("threads, n_inputs, repeats and max_new_tokens must be >= 1")
    bad = []
    for t in types:
        try:
            llama_ftype(t)  # the quantizer's own check, before anything is written
        except ValueError:
            bad.append(t)
    if bad:
        raise ValueError(f"unknown GGUF types {bad}: llama.cpp's file type names (LLAMA_FTYPE_MOSTLY_<type>), "
                         "e.g. F16, Q8_0, Q4_0, Q4_1, Q4_K_M")
    t_start = time.perf_counter()
    load_before = repro.load_average()
    work = Path(work_dir) if work_dir else project_root() / "models" / "base" / "bench-gguf"
    files = write_base_variants(work, [t.upper() for t in types], threads=threads)
    files = {t.upper(): files[t.upper()] for t in types}
    prompts = role_prompts(n_inputs, seed=seed)
    rows: dict[str, dict] = {}
    for name, model in tqdm([("embedded (Q4_1)", None), *((t, str(p)) for t, p in files.items())],
                            desc="GGUF files", disable=not progress):
        rows[name] = _measure(model, prompts, threads=threads, repeats=repeats, max_new_tokens=max_new_tokens,
                              max_role_tokens=max_role_tokens)
        path = Path(resolve_model(model).path)
        rows[name]["file"] = str(path)
        rows[name]["size_mb"] = round(path.stat().st_size / 2**20, 1)
    ref = rows["embedded (Q4_1)"]
    for r in rows.values():
        r["equal_to_embedded"] = {role: round(sum(a == b for a, b in zip(r["outputs"][role], ref["outputs"][role]))
                                              / len(ref["outputs"][role]), 3) for role in ROLES}
        r["prompt_speed_vs_embedded"] = round(r["prompt_tokens_per_s"] / ref["prompt_tokens_per_s"], 2)
    result = {
        "summary": {name: {k: r[k] for k in ("prompt_tokens_per_s", "prompt_speed_vs_embedded",
                                             "generation_tokens_per_s", "equal_to_embedded", "size_mb")}
                    for name, r in rows.items()},
        "files": rows,
        "meta": repro.run_meta(
            params={"types": list(types), "threads": threads, "n_inputs": n_inputs, "repeats": repeats,
                    "max_new_tokens": max_new_tokens, "max_role_tokens": max_role_tokens},
            seed=seed, wall_time_s=time.perf_counter() - t_start,
            extra={"cpu": cpu_info(), "load_average_before": load_before,
                   "load_average_after": repro.load_average()}),
    }
    repro.atomic_write_text(out, json.dumps(result, indent=1, default=str) + "\n")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point (``python -m mags_lib.bench.base_quant --help``)."""
    from ..models import project_root

    p = argparse.ArgumentParser(prog="python -m mags_lib.bench.base_quant", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=None, help="default: results/bench/base_quant.json")
    p.add_argument("--types", default="Q8_0,Q4_0,Q4_1,F16", help="comma-separated GGUF types written from the base")
    p.add_argument("--threads", type=int, default=1, help="llama.cpp threads (default 1: the pipeline's "
                   "decoding processes run one thread each)")
    p.add_argument("--inputs", type=int, default=8, help="generated test inputs per role")
    p.add_argument("--repeats", type=int, default=3, help="passes over the prompts for prompt tokens/s (best kept)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="tokens per generation prompt")
    p.add_argument("--work-dir", type=Path, default=None, help="where the written files go (default "
                   "models/base/bench-gguf/; kept, so a second run only measures)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="small sizes: Q8_0 only, 2 inputs, 1 pass, 8 tokens, "
                   "role outputs of 16 tokens at most")
    a = p.parse_args(argv)
    types = ["Q8_0"] if a.quick else [t.strip() for t in a.types.split(",") if t.strip()]
    sizes = ({"n_inputs": 2, "repeats": 1, "max_new_tokens": 8, "max_role_tokens": 16} if a.quick
             else {"n_inputs": a.inputs, "repeats": a.repeats, "max_new_tokens": a.max_new_tokens})
    try:
        res = run(out=a.out or project_root() / "results" / "bench" / "base_quant.json", types=types,
                  threads=a.threads, seed=a.seed, work_dir=a.work_dir, **sizes)
    except ValueError as e:
        p.error(str(e))
    print(json.dumps(res["summary"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
