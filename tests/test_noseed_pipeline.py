"""The seed datasets are an optional input: the smoke pipeline (data, then training) runs with the seed
path pointing at a folder that does not exist, and says in one line what it skipped (issue 9, item 0)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _stdout(nb_path: Path) -> str:
    nb = json.loads(nb_path.read_text())
    return "".join("".join(o.get("text", "")) for c in nb["cells"] if c["cell_type"] == "code"
                   for o in c.get("outputs", []) if o.get("name") == "stdout")


@pytest.mark.slow
def test_smoke_pipeline_without_seed_data(tmp_path):
    """Notebooks 10 and 20 (role ask) in the smoke profile, in a project root of their own (so the data and
    models of other runs are neither used nor touched). About 4 minutes on 2 quiet cores."""
    from mags_lib.models import base_model_dir

    base = base_model_dir()  # converted once, shared through a link
    root = tmp_path / "project"
    (root / "models" / "base").mkdir(parents=True)
    (root / "models" / "base" / base.name).symlink_to(base)
    (root / "notebooks").symlink_to(ROOT / "notebooks")
    missing = tmp_path / "no-shared" / "seed_syn_dual"
    env = {**os.environ, "MAGS_ROOT": str(root), "MAGS_RESULTS": str(root / "results"), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "mags_lib.pipeline", "--profile", "smoke", "--run-tag", "noseed", "--only", "10,20",
           "-p", f"seed_path={missing}", "-p", "run_before=False", "--no-progress"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3000)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out10 = _stdout(root / "results" / "noseed" / "10_generate_datasets" / "10_generate_datasets.ipynb")
    skipped = [line for line in out10.splitlines() if line.startswith("seed datasets skipped")]
    assert skipped and str(missing) in skipped[0] and "seed_syn_dual" in skipped[0]
    processed = sorted(p.name for p in (root / "data" / "processed").iterdir())
    assert processed == ["gen_answer_smoke", "gen_ask_smoke", "gen_write_smoke"]
    nb20 = next((root / "results" / "noseed" / "20_train_ask_write").rglob("20_train_ask_write.ipynb"))
    assert "seed ask data skipped" in _stdout(nb20)
    meta = json.loads((root / "models" / "ask" / "noseed" / "meta.json").read_text())
    assert meta["final_stage"] == "grpo" and list(meta["data"]) == ["gen_ask_smoke"]
    metrics = json.loads((root / "results" / "noseed" / "20_train_ask_write" / "ask" / "metrics.json").read_text())
    assert {r["set"] for r in metrics["scores"]} == {"gen_ask_smoke"}
