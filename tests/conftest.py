"""Shared test setup: no test may reach a model hub, and outputs never land in results/."""

from __future__ import annotations

import os
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


@pytest.fixture
def results_root(tmp_path, monkeypatch) -> Path:
    """A temporary results root, also seen by ``repro.run_dir`` and by notebook kernels."""
    root = tmp_path / "results"
    root.mkdir()
    monkeypatch.setenv("MAGS_RESULTS", str(root))
    return root


def pytest_collection_modifyitems(config, items):
    """Start the slow tests first: with ``-n 2`` the long ones then overlap with the many short ones
    instead of running alone at the end (a stable sort: order within each group is unchanged)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
