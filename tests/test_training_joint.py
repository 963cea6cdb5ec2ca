"""One model for several roles (issue 15, item 3): its configuration, its reward, and a tiny run end to end."""

from __future__ import annotations

import dataclasses
import json

import pytest

from mags_lib.rewards import by_role_reward
from mags_lib.roles import ROLE_SPECS, prompt_for_model
from mags_lib.training import GRPOConfig, LoraSpec, SFTConfig, TrainConfig, find_trained_model, profile_config
from mags_lib.training.joint import _write_view, joint_config, scaled_config, train_joint


def _cfg(role: str, rewards: dict, steps: int = 2) -> TrainConfig:
    grpo = GRPOConfig(max_steps=1, prompts_per_step=1, num_generations=2, max_completion_length=12 if role == "answer"
                      else 24, rewards=rewards, n_prompts=3, select_hard=True, save_steps=1)
    return TrainConfig(role=role, profile="smoke", seed=0, lora=LoraSpec(r=4, alpha=8),
                       sft=SFTConfig(max_steps=steps, batch_size=2, save_steps=steps, learning_rate=1e-3, n_generated=6,
                                     n_seed=0),
                       grpo=grpo, threads=1)


def test_the_joint_budget_is_the_sum_and_disagreements_are_errors():
    configs = {r: profile_config(r, "default") for r in ("ask", "write", "answer")}
    j = joint_config(configs)
    assert j.sft.max_steps == 200 + 600 + 600 and j.grpo.max_steps == 30
    assert j.sft.n_generated == sum(c.sft.n_generated for c in configs.values())
    assert j.grpo.reward_options["by_role"]["roles"]["write"]["rewards"] == configs["write"].grpo.rewards
    with pytest.raises(ValueError, match="seed"):
        joint_config({**configs, "ask": dataclasses.replace(configs["ask"], seed=1)})
    with pytest.raises(ValueError, match="at least two roles"):
        joint_config({"ask": configs["ask"]})
    with pytest.raises(ValueError, match="is for role"):
        joint_config({"ask": configs["ask"], "write": configs["answer"]})
    with pytest.raises(ValueError, match="outcome"):
        outcome = dataclasses.replace(configs["write"].grpo, rewards={"outcome_write": 1.0}, reward_options={})
        joint_config({**configs, "write": dataclasses.replace(configs["write"], grpo=outcome)})
    s = scaled_config(configs["answer"], 0.1)
    assert (s.sft.max_steps, s.grpo.max_steps, s.sft.n_seed) == (60, 1, 32)
    # a specialised run continuing another run's adapter had that training on top; the joint model (from the base
    # model: train_stage never reads init_from) silently did not
    for role in ("ask", "write"):
        cont = dataclasses.replace(configs[role], sft=dataclasses.replace(configs[role].sft, init_from="earlier"))
        with pytest.raises(ValueError, match=f"the {role} config continues run 'earlier'"):
            joint_config({**configs, role: cont})


def test_each_completion_is_scored_by_its_own_rows_role_and_columns():
    roles = {"answer": {"rewards": {"answer_correct": 1.0}, "options": {}},
             "write": {"rewards": {"exact_f1": 1.0, "format": 0.5}, "options": {}}}
    write_gold = "<memory_write>Gus,is,lobster</memory_write>"
    got = by_role_reward(["Gus", write_gold, "Gus", "<memory_write>Gus,is,crab</memory_write>"],
                         role=["answer", "write", "answer", "write"],
                         aliases=[["Gus"], [], ["Perrow"], []],
                         response=["Gus", write_gold, "Perrow", write_gold], trainer_state=object(), roles=roles)
    assert got == [1.0, 1.5, 0.0, 0.5]  # the third is wrong by its own row's aliases, not the first row's
    with pytest.raises(ValueError, match="no rewards here"):
        by_role_reward(["x"], role=["ask"], roles=roles)


def test_one_tiny_model_learns_two_roles_and_serves_as_a_run_of_each(tiny_base, tiny_rows, tmp_path, monkeypatch):
    from datasets import Dataset, DatasetDict

    from mags_lib import models

    monkeypatch.setattr(models, "base_model_dir", lambda models_root=None, **kw: tiny_base)
    configs = {"ask": _cfg("ask", {"format": 1.0, "length": 0.5}),
               "answer": _cfg("answer", {"answer_correct": 1.0, "brevity": 0.5})}
    data = {r: {"gen": DatasetDict({"train": Dataset.from_list(tiny_rows[r]["train"][:10])}), "seed": None,
                "seed_skipped": None, "hashes": {f"t_{r}": "1"}} for r in configs}
    notes: list[str] = []
    meta = train_joint("j", configs, data=data, models_root=tmp_path, progress=False, note=notes.append)
    joint = tmp_path / "joint" / "j"
    assert meta["roles"] == ["ask", "answer"] and meta["final_stage"] == "grpo"
    assert meta["stages"]["sft"]["steps"] == 4 and meta["stages"]["grpo"]["steps"] == 2
    sft_meta = json.loads((joint / "sft" / "meta.json").read_text())
    assert sft_meta["n_rows"] == 12 and set(sft_meta["prompt"]) == {"ask", "answer"}
    log = (joint / "grpo" / "log.csv").read_text()
    assert "rewards/by_role_reward/mean" in log
    for role in configs:  # a run of each role: the same adapter, that role's prompt
        view = tmp_path / role / "j"
        for stage in ("sft", "grpo"):
            assert (view / stage / "adapter_model.safetensors").read_bytes() == \
                (joint / stage / "adapter_model.safetensors").read_bytes()
        served = find_trained_model(role, run_tag="j", backend="transformers", models_root=tmp_path)
        assert served == view / "grpo"
        assert prompt_for_model(role, served) == ROLE_SPECS[role].trained
        assert json.loads((view / "meta.json").read_text())["joint"]["roles"] == ["ask", "answer"]
    # done once: a second call trains nothing
    again = train_joint("j", configs, data=data, models_root=tmp_path, progress=False, note=notes.append)
    assert again["stages"]["sft"]["skipped"] and again["stages"]["grpo"]["skipped"]
    # a later joint run of the tag that ends at its warm start leaves no GRPO adapter of the earlier one in the view
    _write_view("ask", "j", joint, ["sft"], {**meta, "final_stage": "sft"}, tmp_path)
    assert not (tmp_path / "ask" / "j" / "grpo").exists()
    assert find_trained_model("ask", run_tag="j", backend="transformers", models_root=tmp_path) == \
        tmp_path / "ask" / "j" / "sft"
    # a specialised run's tag is refused before anything trains
    spec = tmp_path / "ask" / "s"
    spec.mkdir(parents=True)
    (spec / "meta.json").write_text(json.dumps({"format": "mags-trained-model", "final_stage": "sft", "role": "ask"}))
    with pytest.raises(ValueError, match="holds a specialised ask run"):
        train_joint("s", configs, data=data, models_root=tmp_path, progress=False, note=notes.append)
    assert not (tmp_path / "joint" / "s").exists()


def test_each_row_is_prompted_as_its_own_role(tiny_rows):
    from mags_lib.training.run import grpo_rows, sft_examples

    prompts = {r: ROLE_SPECS[r].trained for r in ("ask", "answer")}
    mixed = [tiny_rows["ask"]["train"][0], tiny_rows["answer"]["train"][0]]
    for build in (sft_examples, grpo_rows):
        got = [ex["prompt"] for ex in build(mixed, prompts)]
        want = [build([row], ROLE_SPECS[row["role"]].trained)[0]["prompt"] for row in mixed]
        assert got == want and got[0] != got[1]
    with pytest.raises(ValueError, match="has no prompt"):
        sft_examples([tiny_rows["write"]["train"][0]], prompts)


def test_the_comparison_reaches_the_report_as_records():
    from mags_lib.results import extract_records

    table = [{"role": "write", "stage": "grpo", "set": "gen_write", "mode": "free", "n": 100, "metric": "exact_f1",
              "specialised": 0.79, "one_model": 0.61, "difference": -0.18}]
    recs = {r["name"]: r for r in extract_records("25_training_objectives", {"role": "write", "variants": [],
                                                                             "one_model": {"table": table}})}
    assert recs["write grpo gen_write free exact_f1 one model"]["value"] == 0.61
    assert recs["write grpo gen_write free exact_f1 specialised"]["value"] == 0.79
    assert recs["write grpo gen_write free exact_f1 one model"]["n"] == 100
