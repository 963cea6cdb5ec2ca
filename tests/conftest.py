"""Shared test setup: no test may reach a model hub, and outputs never land in results/."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

# Set before any test module imports transformers / sentence-transformers / datasets.
for _name, _value in {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
}.items():
    os.environ[_name] = _value

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _build_once(tmp_path_factory, name: str, build: Callable[[Path], dict]) -> tuple[Path, dict]:
    """Run ``build(folder)`` once per test session, whichever pytest-xdist worker asks first.

    A module-scoped fixture runs once per worker that gets one of the module's tests (``--dist load``
    spreads a module's tests over both workers, and the smoke run of every notebook was seen running on
    both at once): expensive builds go through here instead. The folder lives in the session's shared
    base temp directory, an exclusive file lock makes the other workers wait for the first, and a marker
    written after ``build`` returns (with its JSON result) makes them reuse it. A build that raised
    leaves no marker: the next worker builds afresh and fails the same way, loudly.
    """
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # popen-gwN's parent: one per session, shared by the workers
    folder, marker = base / f"shared-{name}", base / f"shared-{name}.built.json"
    with open(base / f"shared-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if marker.is_file():
                return folder, json.loads(marker.read_text())
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            result = build(folder)
            marker.write_text(json.dumps(result))
            return folder, result
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def build_once(tmp_path_factory) -> Callable[[str, Callable[[Path], dict]], tuple[Path, dict]]:
    """``build_once(name, build)``: see :func:`_build_once` (one build per session, shared by the workers)."""
    return lambda name, build: _build_once(tmp_path_factory, name, build)


@pytest.fixture
def results_root(tmp_path, monkeypatch) -> Path:
    """A temporary results root, also seen by ``repro.run_dir`` and by notebook kernels."""
    root = tmp_path / "results"
    root.mkdir()
    monkeypatch.setenv("MAGS_RESULTS", str(root))
    return root


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    """A 2-layer Llama with SmolLM2's tokenizer and chat template (random weights, seconds to train)."""
    from fakes import make_tiny_llama

    return make_tiny_llama(tmp_path_factory.mktemp("tiny_base"))


@pytest.fixture(scope="module")
def tiny_rows() -> dict:
    """Generated rows of every role (``{role: {split: rows}}``): 24 train, 4 validation, 12 test."""
    from mags_lib.data import GenerationConfig, generate_role_splits

    cfg = GenerationConfig(n_train=24, n_validation=4, n_test=12, worlds_train=4, worlds_validation=1, worlds_test=2,
                           seed=3)
    return generate_role_splits(cfg, progress=False)[0]


# The file whose module fixture is the longest single piece of the suite (the smoke run of every notebook, ~11 min
# in CI): dispatched first, so the other worker runs the rest beside it instead of waiting for it at the end.
LONGEST_FILE = "tests/test_notebooks.py"


# Seconds each of the longest files took on one worker (2-core AMD EPYC, AVX2, `bash scripts/test.sh` at fab28b6,
# 2026-12-07): they go out longest first, right after the smoke-run file, then every other file with a slow test,
# then the rest. Two long files without a slow test (the graph's property tests, the pipeline's kernels) used to go
# out last, in name order: one worker ran them alone for the last 85 s of that 19.4-minute run. The figures only
# order the dispatch (a file missing here, or slower since, still runs).
FILE_SECONDS = {
    "tests/test_backends.py": 255, "tests/test_training.py": 231, "tests/test_export.py": 193,
    "tests/test_reliability_consistency.py": 129, "tests/test_agent.py": 87, "tests/test_consolidation.py": 77,
    "tests/test_bench_base_quant.py": 75, "tests/test_locomo_eval.py": 64, "tests/test_pipeline.py": 60,
    "tests/test_training_objectives.py": 54, "tests/test_game_run.py": 49, "tests/test_reliability_save.py": 46,
    "tests/test_data_evaluate.py": 41, "tests/test_reliability_agent.py": 35, "tests/test_audit_bench.py": 28,
    "tests/test_textworld.py": 27, "tests/test_export_imatrix.py": 19, "tests/test_chat.py": 19,
}


def _dispatch_key(item) -> tuple:
    path = item.nodeid.split("::")[0]
    return (path != LONGEST_FILE, -FILE_SECONDS.get(path, 0), item.get_closest_marker("slow") is None)


def pytest_collection_modifyitems(config, items):
    """Start the long files first, the smoke-run file first of all, then the others longest first
    (``FILE_SECONDS``), then the rest of the slow tests: with ``-n 2`` the long ones then overlap with the many
    short ones instead of running alone at the end (a stable sort: order within each group is unchanged). Under
    ``--dist loadfile`` files are dispatched in this order only with ``--no-loadscope-reorder``
    (scripts/test.sh passes it); xdist otherwise sends the files with the most tests first."""
    items.sort(key=_dispatch_key)
