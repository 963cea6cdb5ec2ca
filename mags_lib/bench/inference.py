"""Benchmark of inference and of the MAGS loop on the embedded base models (CPU).

Usage::

    python -m mags_lib.bench.inference                  # ~3 minutes on 2 cores
    python -m mags_lib.bench.inference --quick          # small sizes, for tests (~1 minute)
    python -m mags_lib.bench.inference --threads 2 --max-new-tokens 128

Writes ``results/bench/inference.json`` (``--out`` changes the file). Three parts, all on the
embedded SmolLM2-135M-Instruct, in one run:

* **tokens/s**: the same fixed chat prompts, greedy, single stream (batch of one), with the
  transformers backend (de-quantized float32 torch) and the llama.cpp backend (Q4_1 GGUF), the same
  thread count for both (``--threads``; default that of the llama.cpp backend: the usable cores minus
  one, see :func:`mags_lib.backends.llamacpp_backend.default_threads`); generated tokens divided by
  wall time (prompt processing included), after
  one warm-up call each, every prompt evaluated afresh (the llama.cpp backend's prefix cache off: transformers has
  none); and the ratio llama.cpp / transformers (target >= 5);
* **MAGS turn latency** with the llama.cpp backend and MiniLM: a fixed story is observed and fixed
  questions asked; p50/p95 of ``observe`` and ``ask`` turns (target: ask p50 <= 2 s on 2 cores), the
  ask-turn breakdown (ask model, recall, answer model) and memory tokens per query;
* **adherence** of the base model: the share of outputs parsing under the strict protocol, for the
  ask and write roles on a small fixed set of inputs, with the agent's grammar-constrained decoding
  (target 100%), with the protocol's own grammar, and without any grammar (the number that training
  must raise);
* **grammar-constrained write decoding** (what ingesting a conversation costs): the write role's trained
  prompt and grammar on the story's turns and the write inputs, greedy, with llama-cpp-python's own
  ``create_completion`` (its grammar sampler masks the whole vocabulary at every token: how the backend
  decoded before 2026-11-28) and with the backend at each ``n_parallel`` (prompts decoded together);
  tokens/s, seconds per prompt and the share of outputs equal to the reference's.

Figures taken on a busy machine are not comparable: the JSON records the load average before and
after the run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = [
    "ADHERENCE_INPUTS",
    "QUESTIONS",
    "STORY",
    "TARGETS",
    "TOKENS_PROMPTS",
    "bench_adherence",
    "bench_constrained_decoding",
    "bench_mags_latency",
    "bench_tokens_per_second",
    "main",
    "run",
]

TARGETS = {"llamacpp_over_transformers": 5.0, "ask_p50_s": 2.0, "adherence_with_grammar": 1.0}

# Open-ended prompts, so both backends generate up to max_new_tokens.
TOKENS_PROMPTS = [
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how a bicycle stays upright while it is moving.",
    "Describe a busy market in a coastal town early in the morning.",
    "Give some advice to someone who is learning to cook for the first time.",
    "Tell me about the history of paper and how it changed the world.",
    "Describe the life cycle of a frog, step by step.",
    "Write a letter to a friend describing a trip to the mountains.",
    "Explain why the sky changes colour at sunset.",
]

STORY = [
    "Blorps are small creatures that live in copper caves.",
    "Blorps eat only frozen lemons.",
    "Quindles are the natural enemies of blorps.",
    "Quindles live under the Teal Bridge.",
    "Snarfs are tall birds that hum at dawn.",
    "Snarfs build nests out of glass straws.",
    "The chief of the quindles is named Larrowick.",
    "Snarfs are afraid of purple umbrellas.",
    "Blorps sleep for exactly nine days after a feast.",
    "My neighbour Ilsa repairs clocks in a shop on Mill Street.",
    "Ilsa's brother Teodor plays the cello in the city orchestra.",
    "The Mill Street shop closes every Tuesday.",
    "Every winter, blorps turn bright orange.",
    "Teodor moved to Brightwater last spring.",
    "Quindles collect shiny buttons.",
    "Snarfs migrate south when the river freezes.",
]

QUESTIONS = [
    "What do blorps eat?",
    "Where do quindles live?",
    "What do snarfs build their nests from?",
    "Who is the chief of the quindles?",
    "What are snarfs afraid of?",
    "How long do blorps sleep after a feast?",
    "What does Ilsa repair?",
    "Which instrument does Teodor play?",
    "When does the Mill Street shop close?",
    "What colour do blorps turn in winter?",
    "Where did Teodor move?",
    "What do quindles collect?",
]

ADHERENCE_INPUTS = {
    "write": [
        "Blorps eat only frozen lemons.",
        "Quindles live under the Teal Bridge.",
        "My brother Tomas moved to Lisbon in 2019 and works as a nurse.",
        "The library on Elm Road opens at nine.",
        "Marta's cat is called Pepper and it hates thunder.",
        "The Grolt festival moved from May to October.",
        "Ilsa repairs clocks in a shop on Mill Street.",
        "Snarfs build nests out of glass straws.",
        "What time is it?",
        "Good morning!",
        "Our team lost the final 2-1, which was disappointing.",
        "Dr. Okafor, my dentist, retired last year.",
    ],
    "ask": [
        "What do blorps eat?",
        "Where does Tomas work?",
        "When does the library on Elm Road open?",
        "Who is Marta's cat afraid of?",
        "Which month is the Grolt festival in now?",
        "What does Ilsa repair, and where is her shop?",
        "How did the final end?",
        "Who was my dentist?",
        "Blorps eat lemons.",
        "Hello there!",
        "Where do the enemies of blorps live?",
        "What is the name of Marta's cat?",
    ],
}


def _pct(xs: Sequence[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(xs, dtype=float), q)) if len(xs) else None


def bench_tokens_per_second(backend_names: Sequence[str], *, prompts: Sequence[str], max_new_tokens: int,
                            threads: int) -> dict:
    """Single-stream greedy tokens/s per backend on the same chat prompts (one warm-up call each; every prompt's
    processing timed: the llama.cpp backend is loaded without its prefix cache)."""
    from tqdm.auto import tqdm

    from ..backends import load_backend

    out: dict = {"n_prompts": len(prompts), "max_new_tokens": max_new_tokens, "threads": threads}
    msgs = [[{"role": "user", "content": p}] for p in prompts]
    for name in backend_names:
        kw = {"n_threads": threads}
        if name == "transformers":
            kw["batch_size"] = 1
        if name == "llamacpp":
            # every prompt evaluated afresh, as transformers does: with the prefix cache on, the first timed
            # prompt (the warm-up's) and the chat template's system block of the others would be cache hits,
            # prompt processing left out of llama.cpp's rate only
            kw["prefix_cache"] = False
        t0 = time.perf_counter()
        with load_backend(name, **kw) as b:
            load_s = time.perf_counter() - t0
            b.generate(msgs[:1], max_new_tokens=8)  # warm-up
            gens = [b.generate([m], max_new_tokens=max_new_tokens)[0]
                    for m in tqdm(msgs, desc=f"tokens/s {name}", leave=False)]
            model = b.model_path
        new = sum(g.n_new_tokens for g in gens)
        secs = sum(g.seconds for g in gens)
        out[name] = {
            "model": model,
            "prefix_cache": kw.get("prefix_cache"),
            "load_s": round(load_s, 3),
            "new_tokens": new,
            "prompt_tokens": sum(g.n_prompt_tokens for g in gens),
            "seconds": round(secs, 3),
            "tokens_per_s": round(new / secs, 2) if secs else None,
            "per_prompt_tokens_per_s": [round(g.tokens_per_second, 2) for g in gens],
        }
    if "llamacpp" in out and "transformers" in out and out["transformers"]["tokens_per_s"]:
        out["ratio_llamacpp_over_transformers"] = round(
            out["llamacpp"]["tokens_per_s"] / out["transformers"]["tokens_per_s"], 2)
    return out


def bench_mags_latency(mags, *, story: Sequence[str], questions: Sequence[str]) -> dict:
    """Observe ``story`` then ask ``questions``; p50/p95 per turn kind (one warm-up turn each first)."""
    from tqdm.auto import tqdm

    sid = mags.snapshot()
    mags.observe("Warm-up: the kettle is blue.", source="warmup")
    mags.ask("What colour is the kettle?")
    mags.rollback(sid)
    obs, asks, steps, mem = [], [], {"ask": [], "recall": [], "answer": []}, []
    triplets = 0
    for i, text in enumerate(tqdm(story, desc="observe turns", leave=False)):
        o = mags.observe(text, source=f"B{i + 1}")
        obs.append(o.seconds)
        triplets += len(o.triplets)
    answers = []
    for q in tqdm(questions, desc="ask turns", leave=False):
        a = mags.ask(q)
        asks.append(a.seconds)
        mem.append(a.memory_tokens)
        for k in steps:
            steps[k].append(a.timings[k])
        answers.append({"question": q, "answer": a.answer, "facts": a.facts[:3], "sources": a.sources[:5]})
    return {
        "n_observe": len(obs), "n_ask": len(asks),
        "observe_p50_s": _pct(obs, 50), "observe_p95_s": _pct(obs, 95),
        "ask_p50_s": _pct(asks, 50), "ask_p95_s": _pct(asks, 95),
        "ask_step_p50_s": {k: _pct(v, 50) for k, v in steps.items()},
        "memory_tokens_mean": float(np.mean(mem)) if mem else None,
        "memory_tokens_max": int(max(mem)) if mem else None,
        "triplets_per_observation": triplets / max(1, len(obs)),
        "graph": mags.graph.stats(),
        "answers": answers,
    }


def bench_adherence(mags, inputs: dict[str, Sequence[str]], *, max_new_tokens: int = 128) -> dict:
    """Strict-protocol adherence per role: agent grammar, protocol grammar, no grammar."""
    from tqdm.auto import tqdm

    from .. import protocol as P

    out: dict = {"max_new_tokens": max_new_tokens, "few_shot": {r: mags.prompt_spec(r).few_shot
                                                                 for r in ("ask", "write")}}
    for role, texts in inputs.items():
        b = mags.backend(role)
        prompts = [mags.prompt_spec(role).messages(t) for t in texts]
        res = {}
        for mode, gbnf in tqdm([("agent_grammar", mags.grammar_for(role)),
                                ("protocol_grammar", P.GRAMMARS[role]), ("no_grammar", None)],
                               desc=f"adherence {role}", leave=False):
            gens = b.generate(prompts, max_new_tokens=max_new_tokens, grammar=gbnf, seed=mags.config.seed,
                              stop_repeats=mags.config.stop_repeats)
            ok = [P.parse(g.text, role=role, mode="strict").ok for g in gens]
            res[mode] = {
                "adherence": sum(ok) / len(ok),
                "n": len(ok),
                "truncated": sum(g.n_new_tokens >= max_new_tokens for g in gens),
                "mean_new_tokens": float(np.mean([g.n_new_tokens for g in gens])),
                "examples": [{"input": t, "output": g.text, "ok": k}
                             for t, g, k in list(zip(texts, gens, ok))[:4]],
            }
        out[role] = res
    for mode in ("agent_grammar", "protocol_grammar", "no_grammar"):
        ok = sum(out[r][mode]["adherence"] * out[r][mode]["n"] for r in inputs)
        n = sum(out[r][mode]["n"] for r in inputs)
        out[f"overall_{mode}"] = ok / n if n else None
    return out


def bench_constrained_decoding(texts: Sequence[str], *, threads: int, max_new_tokens: int = 96,
                               n_parallel: Sequence[int] = (1, 8)) -> dict:
    """Greedy write-role decoding under the trained prompt's grammar: llama-cpp-python's ``create_completion``
    (reference, one prompt after another, its prefix cache on) against the backend at each ``n_parallel``."""
    import llama_cpp

    from ..backends import load_backend
    from ..models import smollm2_gguf_path
    from ..roles import ROLE_SPECS

    spec = ROLE_SPECS["write"].trained
    gbnf = spec.grammar()
    prompts = [spec.messages(t) for t in texts]
    out: dict = {"n_prompts": len(prompts), "max_new_tokens": max_new_tokens, "threads": threads,
                 "prompt": "write role, trained prompt spec, its grammar, greedy"}

    def row(texts_out: list[str], n_new: int, secs: float, ref: list[str] | None) -> dict:
        r = {"new_tokens": n_new, "seconds": round(secs, 3), "tokens_per_s": round(n_new / secs, 2) if secs else None,
             "seconds_per_prompt": round(secs / len(prompts), 4)}
        if ref is not None:
            r["equal_to_reference"] = sum(a == b for a, b in zip(texts_out, ref)) / len(ref)
        return r

    llm = llama_cpp.Llama(model_path=str(smollm2_gguf_path()), n_ctx=2048, n_threads=threads,
                          n_threads_batch=threads, verbose=False)
    try:
        with load_backend("llamacpp", n_threads=threads) as renderer:
            rendered = [renderer.render(p) for p in prompts]
        grammar = llama_cpp.LlamaGrammar.from_string(gbnf, verbose=False)
        llm.create_completion(prompt=rendered[0], max_tokens=4, temperature=0.0)  # warm-up
        ref, n_new, t0 = [], 0, time.perf_counter()
        for text in rendered:
            res = llm.create_completion(prompt=text, max_tokens=max_new_tokens, temperature=0.0, top_k=0, top_p=1.0,
                                        min_p=0.0, typical_p=1.0, repeat_penalty=1.0, grammar=grammar,
                                        stop=list(spec.stop) or None)
            ref.append(res["choices"][0]["text"])
            n_new += res["usage"]["completion_tokens"]
        out["llama_cpp_python_completion"] = row(ref, n_new, time.perf_counter() - t0, None)
    finally:
        llm.close()
    for k in n_parallel:
        with load_backend("llamacpp", n_threads=threads, n_parallel=int(k)) as b:
            b.generate(prompts[:2], max_new_tokens=4, grammar=gbnf)  # warm-up (and the group context)
            t0 = time.perf_counter()
            gens = b.generate(prompts, max_new_tokens=max_new_tokens, grammar=gbnf, stop=list(spec.stop) or None)
            secs = time.perf_counter() - t0
        out[f"backend_n_parallel_{k}"] = row([g.text for g in gens], sum(g.n_new_tokens for g in gens), secs, ref)
    base = out["llama_cpp_python_completion"]["tokens_per_s"]
    for k in n_parallel:
        r = out[f"backend_n_parallel_{k}"]
        r["speedup_over_reference"] = round(r["tokens_per_s"] / base, 2) if base and r["tokens_per_s"] else None
    return out


def run(*, out: Path, threads: int | None = None, max_new_tokens: int = 64, n_prompts: int = 4,
        n_story: int = len(STORY), n_questions: int = len(QUESTIONS), n_adherence: int = 12,
        adherence_max_new_tokens: int = 128, backends: Sequence[str] = ("transformers", "llamacpp"),
        embedder: str = "minilm", seed: int = 0, n_constrained: int | None = None,
        constrained_max_new_tokens: int = 96, n_parallel: Sequence[int] = (1, 8)) -> dict:
    """Run the four parts and write the JSON; returns the result. ``n_constrained``: prompts of the
    constrained-decoding part (default: every story turn and write input)."""
    from .. import repro
    from ..agent import MAGS
    from ..models import smollm2_gguf_path

    smollm2_gguf_path()  # fail now, not after minutes, when the model is missing
    if threads is None:
        from ..backends.llamacpp_backend import default_threads

        threads = default_threads()
    if not (1 <= n_prompts <= len(TOKENS_PROMPTS)):
        raise ValueError(f"n_prompts must be in [1, {len(TOKENS_PROMPTS)}], got {n_prompts}")
    repro.seed_everything(seed)
    t_start = time.perf_counter()
    load_before = repro.load_average()
    result: dict = {"targets": TARGETS}
    result["tokens_per_second"] = bench_tokens_per_second(
        backends, prompts=TOKENS_PROMPTS[:n_prompts], max_new_tokens=max_new_tokens, threads=threads)
    with MAGS.default(backend="llamacpp", embedder=embedder, n_threads=threads, seed=seed) as m:
        result["mags_latency"] = bench_mags_latency(m, story=STORY[:n_story],
                                                    questions=QUESTIONS[:n_questions])
        result["mags_latency"]["config"] = m.config.to_dict()
        result["adherence"] = bench_adherence(
            m, {r: v[:n_adherence] for r, v in ADHERENCE_INPUTS.items()},
            max_new_tokens=adherence_max_new_tokens)
    pool = [*STORY, *ADHERENCE_INPUTS["write"]]
    result["constrained_decoding"] = bench_constrained_decoding(
        pool[:n_constrained] if n_constrained is not None else pool, threads=threads,
        max_new_tokens=constrained_max_new_tokens, n_parallel=n_parallel)
    tps = result["tokens_per_second"]
    lat = result["mags_latency"]
    cd = result["constrained_decoding"]
    result["summary"] = {
        "llamacpp_tokens_per_s": tps.get("llamacpp", {}).get("tokens_per_s"),
        "transformers_tokens_per_s": tps.get("transformers", {}).get("tokens_per_s"),
        "ratio_llamacpp_over_transformers": tps.get("ratio_llamacpp_over_transformers"),
        "observe_p50_s": lat["observe_p50_s"], "observe_p95_s": lat["observe_p95_s"],
        "ask_p50_s": lat["ask_p50_s"], "ask_p95_s": lat["ask_p95_s"],
        "adherence_agent_grammar": result["adherence"]["overall_agent_grammar"],
        "adherence_protocol_grammar": result["adherence"]["overall_protocol_grammar"],
        "adherence_no_grammar": result["adherence"]["overall_no_grammar"],
        "write_grammar_tokens_per_s_reference": cd["llama_cpp_python_completion"]["tokens_per_s"],
        **{f"write_grammar_tokens_per_s_n_parallel_{k}": cd[f"backend_n_parallel_{k}"]["tokens_per_s"]
           for k in n_parallel},
        **{f"write_grammar_equal_to_reference_n_parallel_{k}": cd[f"backend_n_parallel_{k}"]["equal_to_reference"]
           for k in n_parallel},
    }
    s = result["summary"]
    result["targets_met"] = {
        "llamacpp_over_transformers": None if s["ratio_llamacpp_over_transformers"] is None
        else s["ratio_llamacpp_over_transformers"] >= TARGETS["llamacpp_over_transformers"],
        "ask_p50_s": s["ask_p50_s"] <= TARGETS["ask_p50_s"],
        "adherence_with_grammar": s["adherence_agent_grammar"] >= TARGETS["adherence_with_grammar"],
    }
    result["meta"] = {
        "params": {"threads": threads, "max_new_tokens": max_new_tokens, "n_prompts": n_prompts,
                   "n_story": n_story, "n_questions": n_questions, "n_adherence": n_adherence,
                   "adherence_max_new_tokens": adherence_max_new_tokens,
                   "backends": list(backends), "embedder": embedder, "n_constrained": n_constrained,
                   "constrained_max_new_tokens": constrained_max_new_tokens, "n_parallel": list(n_parallel)},
        "seed": seed, "git_sha": repro.git_sha(), "packages": repro.package_versions(),
        "python": sys.version.split()[0], "platform": platform.platform(), "cpu_count": os.cpu_count(),
        "load_average_before": load_before, "load_average_after": repro.load_average(),
        "wall_time_s": round(time.perf_counter() - t_start, 2), "peak_rss_mb": round(repro.peak_rss_mb(), 1),
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    repro.atomic_write_text(out, json.dumps(result, indent=1, default=str) + "\n")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point (``python -m mags_lib.bench.inference --help``)."""
    from ..models import project_root

    p = argparse.ArgumentParser(prog="python -m mags_lib.bench.inference",
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=None, help="default: results/bench/inference.json")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads for every model, both backends alike (default: $MAGS_THREADS "
                   "or the usable cores minus one, as the llama.cpp backend)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="tokens generated per tokens/s prompt")
    p.add_argument("--prompts", type=int, default=4, help=f"tokens/s prompts (1-{len(TOKENS_PROMPTS)})")
    p.add_argument("--skip-transformers", action="store_true", help="tokens/s of llama.cpp only")
    p.add_argument("--embedder", default="minilm", help="minilm | hash")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n-parallel", default="1,8",
                   help="comma-separated n_parallel values of the constrained-decoding part (default 1,8)")
    p.add_argument("--quick", action="store_true", help="small sizes (tests): 2 prompts of 16 tokens, "
                   "6 observations, 4 questions, 4 inputs per role, 4 constrained prompts of 16 tokens")
    a = p.parse_args(argv)
    out = a.out or project_root() / "results" / "bench" / "inference.json"
    if a.quick:
        sizes = {"max_new_tokens": 16, "n_prompts": 2, "n_story": 6, "n_questions": 4, "n_adherence": 4,
                 "n_constrained": 4, "constrained_max_new_tokens": 16}
    else:
        sizes = {"max_new_tokens": a.max_new_tokens, "n_prompts": a.prompts}
    if sizes["max_new_tokens"] < 1:
        p.error("--max-new-tokens must be >= 1")
    if a.threads is not None and a.threads < 1:
        p.error("--threads must be >= 1")
    try:
        n_par = tuple(int(x) for x in a.n_parallel.split(",") if x.strip())
    except ValueError:
        p.error(f"--n-parallel takes comma-separated integers, got {a.n_parallel!r}")
    if not n_par or min(n_par) < 1:
        p.error("--n-parallel needs integers >= 1")
    backends = ("llamacpp",) if a.skip_transformers else ("transformers", "llamacpp")
    res = run(out=out, threads=a.threads, backends=backends, embedder=a.embedder, seed=a.seed, n_parallel=n_par,
              **sizes)
    print(json.dumps(res["summary"], indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
