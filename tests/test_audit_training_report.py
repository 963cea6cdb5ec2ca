"""Audit of the training comparison's held-out evaluation and run layout (report.py, layout.py): each test here
fails on the code before the audit.

* a GGUF LoRA converted for an evaluation is converted again when the adapter's weights change under the same
  content hash (a stage trained again with the same configuration, a models folder copied from another clone);
* the answer role's primary "generated" figure is the generated set's, not a mean with the TextWorld-register set;
* ``evaluate_run`` never evaluates a stage the run does not have (a GRPO adapter an earlier run of the tag left
  behind) and moves an earlier evaluation's predictions of such a stage aside;
* a run half-written by an interrupted retraining is neither listed as finished nor served.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest


def _stage(folder: Path, content_hash: str, init: str | None = None, weights: bytes = b"w") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 2}))
    (folder / "adapter_model.safetensors").write_bytes(weights)
    (folder / "meta.json").write_text(json.dumps({"content_hash": content_hash, "init": init}))
    return folder


def test_lora_gguf_is_converted_again_when_the_weights_change_under_the_same_content_hash(tmp_path, monkeypatch):
    import peft
    import transformers

    import mags_lib.export
    import mags_lib.models
    from mags_lib.training.report import _lora_gguf

    written = []

    def fake_write(model, target):
        written.append(model)
        Path(target).write_bytes(b"GGUF " + model)

    class FakePeft:
        @staticmethod
        def from_pretrained(base, adapter):
            return (Path(adapter) / "adapter_model.safetensors").read_bytes()

    class FakeAuto:
        @staticmethod
        def from_pretrained(path):
            return "base"

    monkeypatch.setattr(mags_lib.export, "write_lora_gguf", fake_write)
    monkeypatch.setattr(peft, "PeftModel", FakePeft)
    monkeypatch.setattr(transformers, "AutoModelForCausalLM", FakeAuto)
    monkeypatch.setattr(mags_lib.models, "base_model_dir", lambda *a, **k: tmp_path / "base")
    adapter = _stage(tmp_path / "run" / "grpo", "h1", weights=b"run A")
    out = tmp_path / "eval" / "grpo"
    assert _lora_gguf(adapter, out, pytest.fail).read_bytes() == b"GGUF run A"
    assert _lora_gguf(adapter, out, pytest.fail).read_bytes() == b"GGUF run A" and len(written) == 1  # cached
    # the same configuration trained again (another machine, a copied models folder): same hash, other weights
    (adapter / "adapter_model.safetensors").write_bytes(b"run B")
    assert _lora_gguf(adapter, out, pytest.fail).read_bytes() == b"GGUF run B" and len(written) == 2


def test_stage_comparison_scores_the_roles_own_generated_set_only():
    from mags_lib.training.report import stage_comparison

    rows = []
    for stage, gen, tw in (("sft", 0.82, 0.20), ("grpo", 0.78, 0.40)):
        rows.append({"stage": stage, "set": "gen_answer", "mode": "free", "n": 100, "accuracy": gen})
        rows.append({"stage": stage, "set": "gen_answer_textworld", "mode": "free", "n": 221, "accuracy": tw})
        rows.append({"stage": stage, "set": "gen_answer", "mode": "grammar", "n": 100, "accuracy": 0.0})
    c = stage_comparison(pd.DataFrame(rows), "answer")
    assert c["per_stage"] == {"sft": 0.82, "grpo": 0.78}
    assert c["grpo_minus_sft"] == pytest.approx(-0.04) and c["grpo_beats_sft"] is False
    assert c["n"] == {"sft": 100, "grpo": 100}
    smoke = pd.DataFrame([{"stage": "sft", "set": "gen_write_smoke", "mode": "free", "n": 3, "exact_f1": 0.5},
                          {"stage": "sft", "set": "seed_write_smoke", "mode": "free", "n": 3, "exact_f1": 0.1}])
    assert stage_comparison(smoke, "write")["per_stage"] == {"sft": 0.5}


@pytest.fixture
def fake_eval(tmp_path, monkeypatch):
    """evaluate_run with its data, decoding and GGUF conversion stubbed: which stages it evaluates."""
    import mags_lib.backends
    import mags_lib.evaluate as ev
    import mags_lib.training.report as rep

    seen = []

    def fake_sets(sets, out, cfg, **kw):
        seen.append(Path(out).name)
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "predictions_gen_write_free.jsonl").write_text(
            json.dumps({"cache_key": "k"}) + "\n"
            + json.dumps({"id": "g1", "input": "x", "gold": "", "output": f"by {Path(out).name}"}) + "\n")
        (Path(out) / "metrics.json").write_text(json.dumps({"rows": [{"set": "gen_write", "mode": "free"}]}))
        return pd.DataFrame([{"set": "gen_write", "mode": "free", "n": 1, "exact_f1": 0.5}])

    class Dummy:
        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

    monkeypatch.setattr(ev, "before_sets", lambda *a, **k: {"gen_write": [{"role": "write"}]})
    monkeypatch.setattr(ev, "evaluate_sets", fake_sets)
    monkeypatch.setattr(rep, "_lora_gguf", lambda adapter, out, note: None)
    monkeypatch.setattr(mags_lib.backends, "load_backend", lambda *a, **k: Dummy())
    root = tmp_path / "models"

    def run(final: str, grpo_init: str, stages=("sft", "grpo")):
        folder = root / "write" / "t"
        _stage(folder / "sft", "NEW_SFT")
        _stage(folder / "grpo", "GRPO", init=grpo_init)
        (folder / "meta.json").write_text(json.dumps({"format": "mags-trained-model", "role": "write",
                                                      "final_stage": final}))
        seen.clear()
        df = rep.evaluate_run("write", "t", "default", tmp_path / "out", stages=stages, models_root=root, threads=1,
                              progress=False, note=lambda _: None)
        return list(seen), sorted(df["stage"].unique()) if len(df) else []

    return run


def test_evaluate_run_never_evaluates_a_stage_the_run_does_not_have(fake_eval, tmp_path):
    from mags_lib.training.report import example_table

    # the tag's GRPO and warm start belong together: both evaluated
    assert fake_eval("grpo", "NEW_SFT") == (["sft", "grpo"], ["grpo", "sft"])
    assert set(example_table(tmp_path / "out").columns) == {"input", "gold", "sft", "grpo"}
    # notebook 20 again with grpo_steps=0 retrained the warm start: the run's final stage is sft, and grpo/ is an
    # adapter of the earlier run (it continues the old warm start). It is not this run's GRPO row.
    assert fake_eval("sft", "OLD_SFT") == (["sft"], ["sft"])
    assert set(example_table(tmp_path / "out").columns) == {"input", "gold", "sft"}  # no stale grpo column
    assert list((tmp_path / "out" / "replaced").glob("grpo-*/predictions_gen_write_free.jsonl"))
    # a run meta naming grpo while grpo/ continues another warm start than sft/'s: not evaluated either
    assert fake_eval("grpo", "OLD_SFT", stages=("grpo",)) == ([], [])


def test_a_half_written_run_is_neither_listed_nor_served(tmp_path):
    from mags_lib.models import ModelNotFoundError
    from mags_lib.training.layout import find_trained_model, list_runs

    run = tmp_path / "write" / "default"
    # the warm start trains again (a new configuration): the old sft/ went to replaced/, the new one has only
    # checkpoints; the run's meta.json is still the earlier finish's, naming grpo, and grpo/ is the old GRPO
    (run / "sft" / "checkpoints" / "checkpoint-50").mkdir(parents=True)
    (run / "replaced" / "sft-20261201-120000").mkdir(parents=True)
    (run / "grpo").mkdir()
    (run / "grpo" / "adapter_config.json").write_text("{}")
    (run / "meta.json").write_text(json.dumps({"format": "mags-trained-model", "role": "write",
                                               "final_stage": "grpo"}))
    assert list_runs(tmp_path) == {}
    with pytest.raises(ModelNotFoundError, match="half-written"):
        find_trained_model("write", backend="transformers", models_root=tmp_path)
    (run / "sft" / "adapter_config.json").write_text("{}")  # finished: listed and served again
    assert list_runs(tmp_path) == {"write": {"default": "grpo"}}
    assert find_trained_model("write", backend="transformers", models_root=tmp_path) == run / "grpo"
