"""Every committed notebook is clean and follows the conventions; the smoke profile runs them all."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from mags_lib import pipeline

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
FIXTURE_NOTEBOOKS = sorted((ROOT / "tests" / "fixtures").rglob("*.ipynb"))


def test_there_are_notebooks_and_all_are_numbered():
    assert NOTEBOOKS, "notebooks/ is empty"
    names = [p.name for p in NOTEBOOKS]
    assert [nb.path.name for nb in pipeline.discover_notebooks(ROOT / "notebooks")] == names, (
        "every notebook must be named NN_name.ipynb")


@pytest.mark.parametrize("path", NOTEBOOKS + FIXTURE_NOTEBOOKS, ids=lambda p: p.name)
def test_committed_notebook_is_clean(path):
    nb = nbformat.read(path, as_version=4)
    dirty = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"
             and (c.get("outputs") or c.get("execution_count") is not None)]
    assert not dirty, f"{path.name}: cells {dirty} have outputs; run python scripts/clean_notebooks.py"
    assert "papermill" not in nb.metadata
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_follows_the_conventions(path):
    nb = nbformat.read(path, as_version=4)
    assert nb.cells[0].cell_type == "markdown", "first cell: purpose, inputs, outputs"
    first = nb.cells[0].source.lower()
    assert all(word in first for word in ("purpose", "inputs", "outputs")), first[:200]
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged 'parameters'"
    specs = pipeline.inspect_parameters(path)
    for name in pipeline.REQUIRED_PARAMETERS:
        assert name in specs, f"parameters cell lacks {name}"
    assert specs["profile"]["choices"] == list(pipeline.PROFILES)
    # only typed, commented literals (derived values belong in the next cell)
    source = tagged[0].source
    for node in ast.parse(source).body:
        assert isinstance(node, ast.AnnAssign), f"line {node.lineno}: not `name: type = literal`"
        ast.literal_eval(node.value)  # raises for anything computed
        line = source.splitlines()[node.lineno - 1]
        assert "#" in line, f"line {node.lineno} has no comment: {line}"
    assert "write_meta(" in "".join(c.source for c in nb.cells), "outputs need a meta.json"


@pytest.mark.slow
def test_every_notebook_runs_in_the_smoke_profile(tmp_path):
    """The whole sequence through the real command line, into a temporary results root."""
    results = tmp_path / "results"
    cmd = [sys.executable, "-m", "mags_lib.pipeline", "--profile", "smoke", "--run-tag", "test-smoke",
           "--results-root", str(results), "--no-progress"]
    env = {**os.environ, "MAGS_RESULTS": str(results)}
    proc = subprocess.run(cmd, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3000)
    state_file = results / "test-smoke" / "pipeline.json"
    assert proc.returncode == 0, f"pipeline failed:\n{proc.stderr[-4000:]}"
    state = json.loads(state_file.read_text())
    assert state["profile"] == "smoke"
    for path in NOTEBOOKS:
        rec = state["notebooks"].get(path.stem)
        assert rec and rec["status"] == "done", f"{path.stem}: {rec}"
        assert rec["parameters"]["profile"] == "smoke" and rec["parameters"]["run_tag"] == "test-smoke"
        out = results / "test-smoke" / path.stem
        assert (out / f"{path.stem}.ipynb").is_file()
        meta = json.loads((out / "meta.json").read_text())
        assert meta["seed"] == 0 and meta["params"]["profile"] == "smoke", path.stem
