"""MAGS turn latency and adapter switching on the exported GGUF files of trained roles.

Command line (the figures of the issue's targets; run it on a quiet machine)::

    python -m mags_lib.export.latency --trained-tag default                  # Q8_0 files (the default)
    python -m mags_lib.export.latency --trained-tag default --variant lora   # one base + an adapter per role
    python -m mags_lib.export.latency --trained-tag default --switch        # also adapter switch vs model load

Writes ``results/bench/export/latency_<tag>_<variant>.json``: observe / ask p50 and p95 (the fixed story and
questions of :mod:`mags_lib.bench.inference`), the files used, the load average before and after,
and with ``--switch`` the table of :func:`mags_lib.export.switch.time_switch`.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

from .layout import trained_gguf

__all__ = ["TARGETS", "main", "trained_latency"]

TARGETS = {"ask_p50_s": 1.0, "observe_p50_s": 0.7, "switch_p50_s": 0.05}


def trained_latency(trained_tag: str = "default", *, roles: Sequence[str] = ("ask", "write", "answer"),
                    variant: str | None = None, n_threads: int | None = None, seed: int = 0,
                    models_root: str | os.PathLike | None = None, switch: bool = False) -> dict:
    """Latency of MAGS (llama.cpp) on the exported files of ``roles`` (other roles: the embedded base)."""
    from .. import MAGS
    from ..bench.inference import QUESTIONS, STORY, bench_mags_latency

    files = {r: trained_gguf(r, trained_tag, variant, models_root=models_root) for r in roles}
    load = os.getloadavg()
    kw = {f"{r}_model": str(f) for r, f in files.items()}
    with MAGS.default(backend="llamacpp", n_threads=n_threads, seed=seed, **kw) as m:
        out = bench_mags_latency(m, story=STORY, questions=QUESTIONS)
    out = {"trained_tag": trained_tag, "variant": variant or "default", "files": {r: str(f) for r, f in files.items()},
           "n_threads": n_threads, **out, "loadavg_before": load, "loadavg_after": os.getloadavg()}
    if switch:
        from .switch import time_switch

        loras = {r: trained_gguf(r, trained_tag, "lora", models_root=models_root) for r in roles}
        merged = {f"{roles[0]} q8_0": trained_gguf(roles[0], trained_tag, "q8_0", models_root=models_root)}
        df = time_switch(None, loras, merged=merged, n_threads=n_threads or 1)
        out["switch"] = df.to_dict(orient="records")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    from ..repro import atomic_write_text, run_dir

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trained-tag", default="default")
    ap.add_argument("--roles", default="ask,write,answer")
    ap.add_argument("--variant", default=None, help="f16 | q8_0 | q4_k_m | q4_1 | lora (default: the export's)")
    ap.add_argument("--threads", type=int, default=None, help="llama.cpp threads (default: cores - 1)")
    ap.add_argument("--switch", action="store_true", help="also time adapter switches against a model load")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    t0 = time.time()
    res = trained_latency(a.trained_tag, roles=tuple(a.roles.split(",")), variant=a.variant, n_threads=a.threads,
                          switch=a.switch)
    res["wall_s"] = time.time() - t0
    name = f"latency_{a.trained_tag}_{a.variant or 'default'}.json"
    out = Path(a.out) if a.out else run_dir("bench", "export") / name
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, json.dumps(res, indent=1, default=str))
    print(f"observe p50 {res['observe_p50_s']:.3f} s (target <= {TARGETS['observe_p50_s']}), ask p50 "
          f"{res['ask_p50_s']:.3f} s (target <= {TARGETS['ask_p50_s']}); load average {res['loadavg_before']}")
    for row in res.get("switch", []):
        print(f"{row['backend']:12s} {row['what']:70s} p50 {row['p50_s'] * 1000:9.2f} ms")
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
