"""Audit of training runs (2026-12-07, night): what a run again does to the served stage, the recorded metrics,
the warm start a run may continue and the data it may mix. Stages are faked: only the run's bookkeeping is tested."""

from __future__ import annotations

import dataclasses

import pytest

from mags_lib.training import find_trained_model, profile_config, read_run_meta, record_metrics
from mags_lib.training import run as R


class _DS(list):
    def to_list(self):
        return list(self)


@pytest.fixture()
def fake(tmp_path, monkeypatch):
    import mags_lib.models as M

    (tmp_path / "base").mkdir()
    monkeypatch.setattr(M, "base_model_dir", lambda models_root=None: tmp_path / "base")
    monkeypatch.setattr(R, "base_model_dir", lambda models_root=None: tmp_path / "base", raising=False)
    rows = [{"id": f"r{i}", "role": "write", "input": f"x{i}", "response": "y"} for i in range(20)]
    data = {"gen": {"train": _DS(rows)}, "seed": None, "seed_skipped": None, "extra": {},
            "hashes": {"gen_write_smoke": "h"}}

    def done_stage(stage, cfg, rows, folder, **kw):  # a stage already finished with the same content: skipped
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "adapter_config.json").write_text("{}")
        return R.StageResult(stage, folder, True, None, getattr(cfg, stage).max_steps, 0.0, {})

    monkeypatch.setattr(R, "train_stage", done_stage)
    monkeypatch.setattr(R, "grpo_candidates", lambda *a, **k: rows[:4])
    return tmp_path, data


def test_running_a_finished_run_again_keeps_serving_its_grpo_stage_and_its_metrics(fake, monkeypatch):
    # the run's meta was rewritten after the (skipped) warm start with final_stage "sft": until GRPO's skip the
    # warm start was served, and an interruption in between left it so; and the recorded metrics were dropped
    # on every rewrite (a config read back from JSON never equalled to_dict(): a list against a tuple)
    root, data = fake
    cfg = profile_config("write", "smoke")
    R.train_role("write", run_tag="t", config=cfg, data=data, models_root=root, note=lambda s: None)
    record_metrics("write", "t", {"heldout": 0.9}, models_root=root)

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(R, "grpo_candidates", interrupted)
    with pytest.raises(KeyboardInterrupt):
        R.train_role("write", run_tag="t", config=cfg, data=data, models_root=root, note=lambda s: None)
    meta = read_run_meta(root / "write" / "t")
    assert meta["final_stage"] == "grpo" and meta["metrics"] == {"heldout": 0.9}
    assert find_trained_model("write", run_tag="t", backend="transformers", models_root=root).name == "grpo"
    monkeypatch.setattr(R, "grpo_candidates", lambda *a, **k: data["gen"]["train"][:4])
    R.train_role("write", run_tag="t", config=cfg, data=data, models_root=root, note=lambda s: None)
    assert read_run_meta(root / "write" / "t")["metrics"] == {"heldout": 0.9}  # same config, data and stage
    R.train_role("write", run_tag="t", config=cfg, data={**data, "hashes": {"gen_write_smoke": "h2"}},
                 models_root=root, note=lambda s: None)
    assert read_run_meta(root / "write" / "t")["metrics"] == {}  # other data: the evaluations no longer hold


def test_init_from_may_not_name_the_run_itself_whatever_its_final_stage(fake):
    # the guard compared with <run>/sft only: a run whose final stage is GRPO continued its own GRPO adapter
    import dataclasses

    root, data = fake
    cfg = profile_config("write", "smoke")
    R.train_role("write", run_tag="t", config=cfg, data=data, models_root=root, note=lambda s: None)
    assert read_run_meta(root / "write" / "t")["final_stage"] == "grpo"
    again = dataclasses.replace(cfg, sft=dataclasses.replace(cfg.sft, init_from="t"))
    with pytest.raises(ValueError, match="names this run itself"):
        R.train_role("write", run_tag="t", config=again, data=data, models_root=root, note=lambda s: None)


def test_extra_data_of_another_role_is_refused(tmp_path):
    # ask and write cards carry no role: an ask dataset mixed into a write run was trained under the write prompt
    from mags_lib.data import build_all
    from mags_lib.data import profile_config as data_profile

    build_all("smoke", seed_path=None, root=tmp_path, config=data_profile("smoke", roles=("ask", "write")),
              progress=False)
    with pytest.raises(ValueError, match="holds ask rows, not write rows"):
        R.load_role_data("write", "smoke", root=tmp_path, extra=("gen_ask_smoke",))
    assert R.load_role_data("write", "smoke", root=tmp_path, extra=("gen_write_smoke",))["extra"]  # its own role


def test_a_joint_models_view_never_deletes_an_unfinished_specialised_run(tmp_path):
    # read_run_meta is None for a run not finished: the view's copy then removed that run's sft/ and its checkpoints
    from mags_lib.training.joint import _refuse_specialised

    ck = tmp_path / "write" / "t" / "sft" / "checkpoints" / "checkpoint-300"
    ck.mkdir(parents=True)
    with pytest.raises(ValueError, match="unfinished specialised write run"):
        _refuse_specialised("write", "t", tmp_path)
    assert ck.is_dir()
    assert _refuse_specialised("write", "other", tmp_path) is None  # nothing there: the view may be written


@pytest.mark.parametrize("make, word", [
    (lambda: __import__("mags_lib.training", fromlist=["x"]).SFTConfig(n_generated=2.5), "n_generated"),
    (lambda: __import__("mags_lib.training", fromlist=["x"]).SFTConfig(n_seed=True), "n_seed"),
    (lambda: __import__("mags_lib.training", fromlist=["x"]).SFTConfig(learning_rate="1e-4"), "learning_rate"),
    (lambda: __import__("mags_lib.training", fromlist=["x"]).GRPOConfig(learning_rate=float("nan")), "learning_rate"),
    (lambda: __import__("dataclasses").replace(profile_config("write", "smoke"), n_eval=float("nan")), "n_eval"),
    (lambda: __import__("dataclasses").replace(profile_config("write", "smoke"), threads=1.5), "threads"),
])
def test_config_values_that_would_fail_deep_in_numpy_or_torch_are_refused_at_once(make, word):
    with pytest.raises(ValueError, match=word):
        make()


def test_a_half_written_run_is_refused_for_llama_cpp_too_when_its_gguf_files_are_picked_by_name(tmp_path):
    # with a damaged or foreign export manifest the GGUF was picked by file name, the half-written check skipped
    import json

    from mags_lib.models import ModelNotFoundError
    from mags_lib.training.layout import FORMAT

    run = tmp_path / "write" / "v1"
    for st in ("sft", "grpo"):
        (run / st).mkdir(parents=True)
    (run / "grpo" / "adapter_config.json").write_text("{}")  # sft/ being trained again: no adapter yet
    (run / "meta.json").write_text(json.dumps({"format": FORMAT, "final_stage": "grpo"}))
    (run / "gguf").mkdir()
    (run / "gguf" / "write-q8_0.gguf").write_bytes(b"GGUF")
    (run / "gguf" / "manifest.json").write_text("{not json")
    for backend in ("transformers", "llamacpp"):
        with pytest.raises(ModelNotFoundError, match="half-written"):
            find_trained_model("write", run_tag="v1", backend=backend, models_root=tmp_path)
    (run / "sft" / "adapter_config.json").write_text("{}")  # finished: the file is served
    assert find_trained_model("write", run_tag="v1", backend="llamacpp", models_root=tmp_path).name == "write-q8_0.gguf"


def test_running_a_finished_run_again_leaves_its_meta_untouched(fake):
    # notebook 25's imitation variant reruns notebook 20's run: every stage skipped, yet meta.json was rewritten
    # (a new time stamp, the stages as "skipped"), so every notebook declaring it as an input ran again on resume
    root, data = fake
    cfg = profile_config("write", "smoke")
    R.train_role("write", run_tag="t", config=cfg, data=data, models_root=root, note=lambda s: None)
    path = root / "write" / "t" / "meta.json"
    before = (path.read_bytes(), path.stat().st_ino, path.stat().st_mtime_ns)
    again = R.train_role("write", run_tag="t", config=cfg, data=data, models_root=root, note=lambda s: None)
    assert (path.read_bytes(), path.stat().st_ino, path.stat().st_mtime_ns) == before  # not written again
    assert again["final_stage"] == "grpo"
    other = dataclasses.replace(cfg, seed=cfg.seed + 1)  # another configuration: the meta says so
    R.train_role("write", run_tag="t", config=other, data=data, models_root=root, note=lambda s: None)
    assert read_run_meta(root / "write" / "t")["config"]["seed"] == cfg.seed + 1
