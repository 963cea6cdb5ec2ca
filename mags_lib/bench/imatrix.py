"""What an importance matrix buys the 4-bit files of a trained role: Q4_K_M (and Q4_1) quantized unweighted
(llama.cpp's plain rounding) against weighted by ``rows`` calibration rows of the role's training split, each
against the F16 file and the transformers model they all came from.

For every file: the parity figures of :func:`mags_lib.export.parity` on the same held-out prompts (teacher-forced
top-1 agreement, greedy equality, adherence / op F1 / exact F1 or answer accuracy), the relative RMS error of its
block weights (every 2-D ``blk.*`` tensor) against the exact float32 merge, and for ask / write a paired bootstrap interval of its op-F1 difference to
F16 over the prompts (micro F1 recomputed on each resample).

Command line::

    python -m mags_lib.bench.imatrix --role ask --run-tag default --rows 0,128 --n-prompts 100 \\
        --out results/bench/imatrix_ask.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from ..metrics import op_f1_difference
from ..repro import jsonl_lines

__all__ = ["op_f1_difference", "run"]


def run(role: str, run_tag: str, *, rows: Sequence[int] = (0, 128), n_prompts: int = 100, max_new_tokens: int = 128,
        n_threads: int = 1, variants: Sequence[str] = ("q4_k_m",), profile: str = "default", seed: int = 0,
        work_dir: str | Path | None = None, out: str | Path | None = None) -> dict:
    """Export ``role``'s trained adapter once per value of ``rows`` (0: unweighted) and measure every file."""
    from .. import metrics, repro
    from ..export import ExportConfig, export_adapter, final_adapter, role_calibration
    from ..export.gguf_write import _gguf_tensors
    from ..export.layout import _adapter_base
    from ..export.parity import ParityConfig, parity
    from ..export.report import held_out_rows
    from .unsloth_gguf import weight_error

    t_start = time.perf_counter()
    adapter = final_adapter(role, run_tag)
    work = Path(work_dir or tempfile.mkdtemp(prefix=f"imatrix-{role}-"))
    files, exports = {}, {}
    for r in rows:
        texts, label = role_calibration(role, adapter, r, profile=profile, seed=seed)
        cfg = ExportConfig(variants=("f16", *variants), imatrix_rows=r)
        m = export_adapter(adapter, work / f"rows{r}", cfg, calibration=texts, calibration_label=label)
        exports[r] = {"imatrix": m["imatrix"], "export_seconds": m["export_seconds"], "note": m["imatrix_note"]}
        files.setdefault("f16", work / f"rows{r}" / m["files"]["f16"]["file"])
        for v in variants:
            files[f"{v} rows={r}"] = work / f"rows{r}" / m["files"][v]["file"]
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(str(_adapter_base(adapter, None)), dtype=torch.float32)
    merged = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()
    # the blocks' weights only: the tied embedding matrix (a fifth of the weights, 8-bit in every file here, never
    # weighed) would otherwise dominate the sums
    reference = {n: a for n, a in _gguf_tensors(merged.state_dict(), merged.config.to_dict())
                 if n.startswith("blk.") and a.ndim == 2}
    del merged, base
    errors = {label: weight_error(path, reference)["rel_rms_error"] for label, path in files.items()}
    del reference
    held = held_out_rows(role, profile)
    df = parity(role, held, adapter, files, ParityConfig(n_prompts=n_prompts, max_new_tokens=max_new_tokens,
                                                          n_threads=n_threads, seed=seed), out_dir=work)
    table = df.drop(columns=["file"]).to_dict(orient="records")
    for row in table:
        row["rel_rms_error_blocks"] = errors.get(row["label"])
    paired = {}
    if role in ("ask", "write"):
        lines = jsonl_lines((work / f"parity_{role}.jsonl").read_text())
        per = [json.loads(x) for x in lines[1:]]
        golds = [e["gold"] for e in per]
        scored = {label: metrics.evaluate_predictions([e[label] for e in per], golds, role).per_example
                  for label in files}
        paired = {label: op_f1_difference(scored[label], scored["f16"], seed=seed)
                  for label in files if label != "f16"}
    result = {"role": role, "run_tag": run_tag, "adapter": str(adapter), "profile": profile, "rows": list(rows),
              "n_prompts": n_prompts, "max_new_tokens": max_new_tokens, "n_threads": n_threads, "exports": exports,
              "table": table, "op_f1_minus_f16": paired, "work_dir": str(work),
              "wall_s": time.perf_counter() - t_start}
    result["meta"] = repro.run_meta(params={k: result[k] for k in ("role", "run_tag", "rows", "n_prompts", "n_threads")},
                                    seed=seed, wall_time_s=result["wall_s"])
    if out is not None:
        repro.atomic_write_text(Path(out), json.dumps(result, indent=1, default=float) + "\n")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--role", required=True, choices=["ask", "write", "answer"])
    ap.add_argument("--run-tag", default="default")
    ap.add_argument("--rows", default="0,128", help="calibration rows per export, comma-separated (0: unweighted)")
    ap.add_argument("--variants", default="q4_k_m")
    ap.add_argument("--n-prompts", type=int, default=100)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--profile", default="default")
    ap.add_argument("--work-dir")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    res = run(a.role, a.run_tag, rows=[int(x) for x in a.rows.split(",")], n_prompts=a.n_prompts,
              max_new_tokens=a.max_new_tokens, n_threads=a.threads, variants=a.variants.split(","),
              profile=a.profile, work_dir=a.work_dir, out=a.out)
    keys = ("label", "top1_agreement", "greedy_equal", "adherence", "op_f1", "exact_f1", "accuracy", "rel_rms_error_blocks")
    for row in res["table"]:
        print("  ".join(f"{k}={row[k]:.4f}" if isinstance(row.get(k), float) else f"{k}={row.get(k)}"
                        for k in keys if k in row))
    for label, d in res["op_f1_minus_f16"].items():
        print(f"{label} - f16 op F1: {d['difference']:+.3f} [{d['interval'][0]:+.3f}, {d['interval'][1]:+.3f}]")
    print(f"wall {res['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
