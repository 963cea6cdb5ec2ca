"""Wall time and peak memory of one role's training profile (issue 10: "the full profile with Unsloth,
wall time and peak memory recorded beside the CPU figures").

One role per process, so that the peak memory read at the end is that role's::

    python -m mags_lib.bench.training_profile --role answer --profile full --run-tag gpu_full \\
        --out results/bench/train_full_answer.json

It runs :func:`mags_lib.training.train_role` (the notebooks' path: same data, prompts, stages and
checkpoints) and writes one JSON: per stage the steps done, whether the stage finished, its wall time,
and for the process the peak GPU memory (allocated and reserved by torch's allocator), the peak host
RSS, the device, the backend (Unsloth is chosen when CUDA and the package are there) and the package
versions. ``--no-grpo`` trains the warm start alone (a variant: the JSON says so); ``--deadline-s``
stops training at that many seconds (the stage stays resumable and is reported unfinished, never as
done). ``partial`` (with ``partial_reasons``) marks a JSON whose figures are not the whole profile's: a stage
unfinished or not started (a deadline, an error), or skipped or resumed because the run tag already held it
(its wall time then covers none or only part of its training). Figures of runs that shared a device with
others say so through ``--note``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from pathlib import Path

from .. import repro

__all__ = ["Deadline", "main", "profile_role"]


def Deadline(seconds: float):  # noqa: N802 - a factory that returns a TrainerCallback instance
    """A trainer callback that stops training (with a checkpoint) once ``seconds`` have passed since it was made."""
    from transformers import TrainerCallback

    end = time.monotonic() + float(seconds)

    class _Deadline(TrainerCallback):
        hit = False

        def on_step_end(self, args, state, control, **kw):
            if time.monotonic() >= end:
                type(self).hit = True
                control.should_training_stop = True
                control.should_save = True
            return control
    return _Deadline()


def _device() -> dict:
    import torch

    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        return {"kind": "cuda", "name": p.name, "memory_gib": round(p.total_memory / 2**30, 1),
                "torch": torch.__version__, "cuda": torch.version.cuda}
    return {"kind": "cpu", "name": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
            "torch": torch.__version__}


def profile_role(role: str, profile: str, run_tag: str, *, backend: str = "auto", no_grpo: bool = False,
                 deadline_s: float | None = None, note_text: str = "", seed: int = 0) -> dict:
    """Train ``role`` in ``profile`` into ``models/<role>/<run_tag>/``; returns the measurements."""
    import torch

    from .. import training

    if deadline_s is not None and not deadline_s > 0:
        raise ValueError(f"deadline_s must be > 0 seconds (or None: no deadline), got {deadline_s}")
    cfg = training.profile_config(role, profile, seed=seed)
    variant = f"{profile} profile" if not no_grpo else f"{profile} profile, warm start only (its GRPO stage not run)"
    if no_grpo:
        cfg = dataclasses.replace(cfg, grpo=None)
    chosen = training.pick_backend(backend)
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    callbacks = [Deadline(deadline_s)] if deadline_s else []
    t0 = time.perf_counter()
    error = None
    meta: dict = {}
    try:
        meta = training.train_role(role, run_tag=run_tag, config=cfg, backend=chosen, progress=True,
                                   callbacks=callbacks)
    except Exception as e:  # recorded, never hidden: the JSON carries the error and the steps reached
        import traceback

        error = f"{type(e).__name__}: {e}"
        traceback.print_exc()
    wall = time.perf_counter() - t0
    stages, reasons = {}, []
    done = meta.get("stages") or {}
    for name in ("sft", "grpo"):
        stage_cfg = getattr(cfg, name)
        if stage_cfg is None:
            continue
        want = stage_cfg.max_steps
        st = done.get(name)
        if st is None:  # never started: a deadline or an error before it (GRPO waits for a finished warm start)
            stages[name] = {"steps": 0 if error is None else None, "max_steps": want, "finished": False,
                            "started": False if error is None else None, "wall_time_s": None}
            reasons.append(f"{name} not started" if error is None else f"{name}: no record (the run failed)")
            continue
        stages[name] = {"steps": st["steps"], "max_steps": want, "finished": st["steps"] >= want,
                        "started": True, "skipped": bool(st.get("skipped")), "resumed_from": st.get("resumed_from"),
                        "wall_time_s": st["wall_time_s"]}
        if not stages[name]["finished"]:
            reasons.append(f"{name} stopped at step {st['steps']} of {want}")
        if stages[name]["skipped"]:
            reasons.append(f"{name} skipped: already trained under run tag {run_tag!r}, not timed here")
        elif st.get("resumed_from"):
            reasons.append(f"{name} resumed from step {st['resumed_from']}: its wall time covers only the rest")
    if error is not None:
        reasons.append("error")
    hit = bool(callbacks and type(callbacks[0]).hit)
    if hit and reasons:  # a deadline reached on the last step leaves a whole profile
        reasons.append(f"stopped by the {deadline_s} s deadline")
    versions = repro.package_versions(("torch", "transformers", "trl", "peft", "unsloth", "unsloth_zoo"))
    out = {"role": role, "profile": profile, "variant": variant, "run_tag": run_tag, "backend": chosen,
           "device": _device(), "partial": bool(reasons), "partial_reasons": reasons, "stages": stages,
           "wall_time_s": round(wall, 1), "stopped_by_deadline": hit, "deadline_s": deadline_s,
           "peak_gpu_allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 3) if cuda else None,
           "peak_gpu_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 3) if cuda else None,
           "peak_host_rss_gib": round(repro.peak_rss_mb() / 1024, 3),
           "error": error, "note": note_text, "config": cfg.to_dict(), "packages": versions,
           "git_sha": repro.git_sha(), "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--role", required=True, choices=("ask", "write", "answer"))
    ap.add_argument("--profile", default="full", choices=("smoke", "default", "full"))
    ap.add_argument("--run-tag", default=None, help="models/<role>/<run_tag>/ (default: <profile>_<device kind>)")
    ap.add_argument("--backend", default="auto", choices=("auto", "torch", "unsloth"))
    ap.add_argument("--no-grpo", action="store_true", help="the warm start alone (reported as a variant)")
    ap.add_argument("--deadline-s", type=float, default=None, help="stop training after this many seconds")
    ap.add_argument("--note", default="", help="free text kept in the JSON (e.g. what shared the device)")
    ap.add_argument("--out", required=True, help="the JSON written")
    a = ap.parse_args(argv)
    if a.deadline_s is not None and not a.deadline_s > 0:
        ap.error(f"--deadline-s must be > 0 seconds (leave it out for no deadline), got {a.deadline_s}")
    import torch

    tag = a.run_tag or f"{a.profile}_{'cuda' if torch.cuda.is_available() else 'cpu'}"
    res = profile_role(a.role, a.profile, tag, backend=a.backend, no_grpo=a.no_grpo, deadline_s=a.deadline_s,
                       note_text=a.note)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    repro.atomic_write_text(Path(a.out), json.dumps(res, indent=1, default=str))
    print(json.dumps({k: res[k] for k in ("role", "backend", "partial", "partial_reasons", "stages", "wall_time_s",
                                          "peak_gpu_reserved_gib", "peak_host_rss_gib", "error")}, default=str))
    return 0 if res["error"] is None else 1


if __name__ == "__main__":
    sys.exit(main())
