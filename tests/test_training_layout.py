"""Trained-model layout: resolution by run tag, errors that list what exists, the agent using the
prompt a model was trained with, configs and their checks."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest

from mags_lib import MAGS
from mags_lib.agent import MAGSConfig
from mags_lib.backends import Generation
from mags_lib.models import ModelNotFoundError
from mags_lib.roles import ROLE_SPECS, PromptSpec, prompt_for_model
from mags_lib.training import GRPOConfig, SFTConfig, TrainConfig, find_trained_model, help_text, list_runs
from mags_lib.training import LoraSpec, profile_config
from mags_lib.training.run import last_complete_checkpoint


def _run(root, role, tag, final="grpo", prompt=None, gguf=()):
    folder = root / role / tag
    for stage in ("sft", "grpo")[: 2 if final == "grpo" else 1]:
        (folder / stage).mkdir(parents=True, exist_ok=True)
        (folder / stage / "adapter_config.json").write_text("{}")
    meta = {"format": "mags-trained-model", "role": role, "final_stage": final,
            "prompt": (prompt or ROLE_SPECS[role].trained).to_dict()}
    (folder / "meta.json").write_text(json.dumps(meta))
    for name in gguf:
        (folder / "gguf").mkdir(exist_ok=True)
        (folder / "gguf" / name).write_bytes(b"GGUF")
    return folder


def test_resolves_the_final_stage_of_the_asked_tag_only(tmp_path):
    smoke = _run(tmp_path, "write", "smoke", final="sft")
    default = _run(tmp_path, "write", "default")
    assert find_trained_model("write", run_tag="default", backend="transformers", models_root=tmp_path) == \
        default / "grpo"
    assert find_trained_model("write", run_tag="smoke", backend="transformers", models_root=tmp_path) == \
        smoke / "sft"
    # a tag that does not exist is an error, even though other tags exist: tags are never mixed
    with pytest.raises(ModelNotFoundError) as err:
        find_trained_model("write", run_tag="try2", backend="transformers", models_root=tmp_path)
    msg = str(err.value)
    assert "try2" in msg and "write: default (grpo), smoke (sft)" in msg and "20_train_ask_write" in msg


def test_an_unfinished_run_is_never_served(tmp_path):
    folder = tmp_path / "ask" / "default" / "sft"
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text("{}")  # adapter saved, run meta.json not written yet
    with pytest.raises(ModelNotFoundError, match="no trained ask model of run tag 'default'"):
        find_trained_model("ask", backend="transformers", models_root=tmp_path)
    assert list_runs(tmp_path) == {}


def test_llamacpp_needs_the_exported_gguf(tmp_path):
    _run(tmp_path, "answer", "default")
    with pytest.raises(ModelNotFoundError, match="30_export_gguf"):
        find_trained_model("answer", backend="llamacpp", models_root=tmp_path)
    folder = _run(tmp_path, "answer", "default", gguf=("model-f16.gguf", "model-q8_0.gguf", "lora.gguf"))
    assert find_trained_model("answer", models_root=tmp_path).name == "model-q8_0.gguf"
    (folder / "gguf" / "manifest.json").write_text(json.dumps({"default": "model-f16.gguf"}))
    assert find_trained_model("answer", models_root=tmp_path).name == "model-f16.gguf"


def test_prompt_for_model_reads_the_trained_prompt(tmp_path):
    odd = dataclasses.replace(ROLE_SPECS["ask"].trained, system="Queries only.")
    folder = _run(tmp_path, "ask", "default", prompt=odd, gguf=("model-q8_0.gguf",))
    assert prompt_for_model("ask", folder / "grpo") == odd
    assert prompt_for_model("ask", folder / "gguf" / "model-q8_0.gguf") == odd
    assert prompt_for_model("ask", None) == ROLE_SPECS["ask"].base  # an untrained model: base prompt
    with pytest.raises(ValueError, match="trained for the 'ask' role"):
        prompt_for_model("write", folder / "grpo")
    (folder / "meta.json").write_text(json.dumps({"format": "mags-trained-model", "role": "ask", "prompt": {}}))
    with pytest.raises(ValueError, match="no valid 'prompt'"):
        prompt_for_model("ask", folder / "sft")


class _Spy:
    name = "fake"
    supports_grammar = False

    def __init__(self, reply):
        self.reply, self.prompts, self.kw = reply, [], []
        self.model_path = ""

    def generate(self, prompts, **kw):
        self.prompts.extend(prompts)
        self.kw.append(kw)
        return [Generation(self.reply, 5, 3, 0.01) for _ in prompts]

    def count_tokens(self, text):
        return len(text.split())

    def close(self):
        pass


def test_the_agent_prompts_trained_models_as_they_were_trained(tmp_path):
    for role in ("ask", "write", "answer"):
        _run(tmp_path, role, "t1")
    cfg = MAGSConfig(models="trained", trained_tag="t1", backend="transformers", models_root=str(tmp_path),
                     embedder="hash")
    spies = {"write": _Spy("<memory_write>blorps,eat,lemons</memory_write>"),
             "ask": _Spy("<memory_ask>blorps diet</memory_ask>"), "answer": _Spy("lemons")}
    m = MAGS(cfg, backends=spies)
    assert m.model_paths["answer"] == str(tmp_path / "answer" / "t1" / "grpo")
    m.observe("Blorps eat lemons.")
    a = m.ask("What do blorps eat?")
    for role, spy in spies.items():
        assert spy.prompts[0][0]["content"] == ROLE_SPECS[role].trained.system, role
        assert len(spy.prompts[0]) == 2, role  # system + user: no few-shot block
        assert spy.kw[0]["max_new_tokens"] == ROLE_SPECS[role].trained.max_new_tokens, role
    assert a.answer == "lemons" and spies["answer"].kw[0]["stop"] == ["\n"]
    # the base models keep the base prompt (few-shot block)
    base = MAGS(MAGSConfig(embedder="hash"), backends={"write": _Spy("")})
    base.extract_many(["Blorps eat lemons."], "write", grammar=False)
    assert len(base.backend("write").prompts[0]) == 2 + 2 * ROLE_SPECS["write"].base.few_shot
    # an explicit override still applies (ablations are configurations)
    m2 = MAGS(dataclasses.replace(cfg, few_shot_write=1), backends={"write": _Spy("")})
    m2.extract_many(["x y"], "write", grammar=False)
    assert len(m2.backend("write").prompts[0]) == 4


def test_trained_tag_is_checked():
    with pytest.raises(ValueError, match="trained_tag"):
        MAGSConfig(trained_tag="a/b")


@pytest.mark.parametrize("kwargs,match", [
    ({"max_steps": 0}, "max_steps"),            # no training at all
    ({"learning_rate": 2.0}, "learning_rate"),  # out of range
    ({"n_seed": -2}, "n_seed"),                 # -1 means all, below is nonsense
    # an audit found these accepted, and a NaN weight decay trained, saved and served an all-NaN adapter
    ({"weight_decay": float("nan")}, "weight_decay must be a finite number"),
    ({"weight_decay": float("inf")}, "weight_decay must be a finite number"),
])
def test_sft_config_checks(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SFTConfig(**kwargs)


@pytest.mark.parametrize("kwargs,match", [
    ({"rewards": {"nope": 1.0}}, "REGISTRY"),                               # unknown reward name
    ({"rewards": {}}, "REGISTRY"),                                          # no reward at all
    ({"rewards": {"format": 1.0}, "num_generations": 1}, "num_generations"),  # no group to compare
    ({"rewards": {"format": 1.0}, "reward_options": {"op_f1": {}}}, "not used"),  # options of an unused reward
    ({"rewards": {"format": 1.0}, "beta": float("nan")}, "beta must be a finite number"),
    ({"rewards": {"format": 1.0}, "temperature": float("nan")}, "temperature must be a finite number"),
    ({"rewards": {"format": 1.0}, "num_generations": 2.5}, "num_generations must be an int"),
    ({"rewards": {"format": float("nan")}}, "reward weights must be finite"),
    ({"rewards": {"format": "1"}}, "reward weights must be finite"),
    # a misspelt option was bound and ignored by the reward's **kwargs: a wrong guess still scored 1.0
    ({"rewards": {"abstention": 1.0}, "reward_options": {"abstention": {"wrong_anwser": -1.0}}},
     "takes no option 'wrong_anwser'; its options: aliases, input, wrong_answer"),
    ({"rewards": {"brevity": 1.0}, "reward_options": {"brevity": {"slak": 2}}}, "takes no option 'slak'"),
])
def test_grpo_config_checks(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GRPOConfig(**kwargs)


def test_lora_and_seed_checks():
    assert LoraSpec(target_modules="q_proj").target_modules == ("q_proj",)  # one name, not its characters
    for kw, match in (({"r": 4.5}, "r must be an int"), ({"alpha": float("nan")}, "alpha must be a finite")):
        with pytest.raises(ValueError, match=match):
            LoraSpec(**kw)
    for seed in (-1, 1.5, True):
        with pytest.raises(ValueError, match="seed must be an integer"):
            TrainConfig(role="write", seed=seed)
    from mags_lib.rewards import get_reward

    assert get_reward("graph_cost", ops_weight=2.0)  # GraphCostConfig's fields are its options
    with pytest.raises(ValueError, match="takes no option 'opsweight'"):
        get_reward("graph_cost", opsweight=2.0)


def test_profiles_and_help():
    for role in ("ask", "write", "answer"):
        smoke, default = profile_config(role, "smoke"), profile_config(role, "default")
        assert smoke.sft.max_steps < default.sft.max_steps and smoke.grpo.max_steps < default.grpo.max_steps
        assert TrainConfig.from_dict(default.to_dict()) == default
    assert "answer_correct" in profile_config("answer").grpo.rewards
    assert help_text(GRPOConfig, "beta").startswith("KL coefficient")
    with pytest.raises(ValueError, match="role"):
        profile_config("router")


def test_only_complete_checkpoints_of_the_same_config_resume(tmp_path):
    ck = tmp_path / "checkpoints"
    for step, h in ((2, "aaa"), (4, "aaa"), (6, None), (8, "bbb")):
        d = ck / f"checkpoint-{step}"
        d.mkdir(parents=True)
        if h:
            (d / "meta.json").write_text(json.dumps({"content_hash": h, "step": step}))
    assert last_complete_checkpoint(ck, "aaa") == ck / "checkpoint-4"
    # the interrupted save (no meta.json) and the other configuration's checkpoint are gone
    assert sorted(p.name for p in ck.iterdir()) == ["checkpoint-2", "checkpoint-4"]


def test_prompt_spec_round_trip_and_checks():
    spec = ROLE_SPECS["write"].trained
    assert PromptSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    with pytest.raises(ValueError, match="exactly the keys"):
        PromptSpec.from_dict({"role": "write"})
    with pytest.raises(ValueError, match="no grammar"):
        PromptSpec("answer", "x", max_ops=3)


@pytest.mark.parametrize("batch", [True, False])
def test_batch_kernels_show_the_trainers_text_progress_bar(monkeypatch, batch):
    """Inside a kernel transformers picks an HTML progress table, invisible in the pipeline's log; in the
    pipeline's batch kernels (flagged by its environment) the trainer gets the text bar instead."""
    from transformers.trainer_callback import ProgressCallback
    from transformers.utils.notebook import NotebookProgressCallback

    from mags_lib.pipeline import BATCH_ENV
    from mags_lib.training.run import _text_progress

    class FakeTrainer:  # the part of transformers.Trainer's callback API that _text_progress uses
        def __init__(self):
            self.callback_handler = SimpleNamespace(callbacks=[object(), NotebookProgressCallback()])

        def remove_callback(self, cls):
            self.callback_handler.callbacks = [c for c in self.callback_handler.callbacks if not isinstance(c, cls)]

        def add_callback(self, cls):
            self.callback_handler.callbacks.append(cls())

    for k in BATCH_ENV:
        monkeypatch.delenv(k, raising=False)
    if batch:
        for k, v in BATCH_ENV.items():
            monkeypatch.setenv(k, v)
    t = FakeTrainer()
    _text_progress(t)
    kinds = [type(c) for c in t.callback_handler.callbacks]
    assert (ProgressCallback in kinds) is batch and (NotebookProgressCallback in kinds) is not batch
