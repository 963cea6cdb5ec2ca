"""Audit of the held-out evaluation (evaluate.py, training/report.py, 2026-12-08): each test here fails on the
code before the audit.

* per-kind scores use today's labels of the rows, not those cached with the predictions;
* a LoRA's cached predictions belong to the base model it was applied onto;
* a trained stage decoded on llama.cpp (its LoRA GGUF) is prompted as its meta.json records, as the agent does;
* the example table and the variants' tables read the sets the last evaluation scored, not leftover files;
* an empty set is refused with a message naming it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from mags_lib.evaluate import EvalConfig, _model_id, evaluate_sets, evaluated_sets
from mags_lib.roles import ROLE_SPECS
from tests.test_data_evaluate import EchoBackend, _rows


def test_per_kind_scores_follow_the_rows_labels_not_the_cache(tmp_path):
    rows = _rows("write", 4)
    be = EchoBackend({r["input"]: r["response"] for r in rows})
    cfg = EvalConfig(n_per_set=0, embedder="hash", modes=("free",))
    evaluate_sets({"gen_write": rows}, tmp_path, cfg, backend=be, progress=False)
    n = len(be.calls)
    relabelled = [{**r, "kind": "relabelled"} for r in rows]  # the data rebuilt: same rows, kinds renamed
    evaluate_sets({"gen_write": relabelled}, tmp_path, cfg, backend=be, progress=False)
    assert len(be.calls) == n  # the predictions are still reused...
    assert set(pd.read_csv(tmp_path / "by_kind.csv")["kind"]) == {"relabelled"}  # ...under today's labels


def test_a_lora_prediction_cache_names_its_base_model(tmp_path):
    lora, base_a, base_b = (tmp_path / n for n in ("lora.gguf", "a.gguf", "b.gguf"))
    for p in (lora, base_a, base_b):
        p.write_bytes(p.name.encode())

    class Lora:
        model_path = str(lora)

        def __init__(self, base, scale=1.0):
            self.base, self.scale = str(base), scale

        def memo_identity(self):
            return [self.base, self.scale]

    assert _model_id(Lora(base_a)) == _model_id(Lora(base_a))
    assert _model_id(Lora(base_a)) != _model_id(Lora(base_b))  # another base under the same LoRA file
    assert _model_id(Lora(base_a)) != _model_id(Lora(base_a, 0.5))
    before = _model_id(Lora(base_a))
    base_a.write_bytes(b"re-exported base")
    assert _model_id(Lora(base_a)) != before


def test_an_empty_set_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="'seed_write_smoke' holds no rows"):
        evaluate_sets({"gen_write": _rows("write", 2), "seed_write_smoke": []}, tmp_path,
                      EvalConfig(n_per_set=0, embedder="hash", modes=("free",)), backend=EchoBackend({}),
                      progress=False)


def test_trained_stages_on_llamacpp_use_the_prompt_their_run_recorded(tmp_path, monkeypatch):
    import mags_lib.evaluate as ev
    import mags_lib.training.report as rep

    old = ROLE_SPECS["write"].trained
    recorded = old.to_dict() | {"system": "The prompt this run was trained with.", "max_new_tokens": 200}
    folder = tmp_path / "models" / "write" / "t"
    for stage in ("sft", "grpo"):
        (folder / stage).mkdir(parents=True)
        (folder / stage / "adapter_config.json").write_text("{}")
        (folder / stage / "meta.json").write_text(json.dumps({"format": "mags-trained-model", "role": "write",
                                                              "prompt": recorded, "content_hash": stage}))
    (folder / "meta.json").write_text(json.dumps({"format": "mags-trained-model", "role": "write",
                                                  "final_stage": "sft"}))
    seen = {}

    def fake_sets(sets, out, cfg, **kw):
        seen[Path(out).name] = cfg
        return pd.DataFrame([{"set": "gen_write", "mode": "free", "n": 1, "exact_f1": 0.5}])

    monkeypatch.setattr(ev, "before_sets", lambda *a, **k: {"gen_write": [{"role": "write"}]})
    monkeypatch.setattr(ev, "evaluate_sets", fake_sets)
    monkeypatch.setattr(rep, "_lora_gguf", lambda adapter, out, note: Path(out) / "lora.gguf")
    monkeypatch.setattr(rep, "_not_the_runs", lambda folder, stage: None)
    rep.evaluate_run("write", "t", "default", tmp_path / "out", stages=("sft",), models_root=tmp_path / "models",
                     threads=2, progress=False, note=lambda _: None)
    cfg = seen["sft"]
    assert cfg.model == str(tmp_path / "out" / "sft" / "lora.gguf")  # the model metrics.json records
    spec = cfg.prompt_spec("write", cfg.model)
    assert spec.system == "The prompt this run was trained with." and spec.max_new_tokens == 200


def test_the_example_table_reads_the_sets_of_the_last_evaluation_only(tmp_path):
    from mags_lib.training.report import example_table

    for stage in ("base", "sft"):
        d = tmp_path / stage
        d.mkdir()
        for name, who in (("gen_write", "an earlier default-profile run"), ("gen_write_smoke", "this run")):
            (d / f"predictions_{name}_free.jsonl").write_text(
                json.dumps({"cache_key": "k"}) + "\n"
                + json.dumps({"id": "g1", "input": "x", "gold": "", "output": f"{who} {stage}"}) + "\n")
        (d / "metrics.json").write_text(json.dumps({"rows": [{"set": "gen_write_smoke", "mode": "free"},
                                                             {"set": "gen_write_smoke", "mode": "grammar"}]}))
    assert evaluated_sets(tmp_path / "sft") == ["gen_write_smoke"]
    table = example_table(tmp_path, stages=("base", "sft"))
    assert list(table["base"]) == ["this run base"] and list(table["sft"]) == ["this run sft"]
