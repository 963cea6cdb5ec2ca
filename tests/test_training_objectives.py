"""The training-objective variants of issue 15 run through the real training stages (tiny model).

* GRPO with an outcome reward reads each prompt's mini-scenario (the ``scenario`` column reaches the
  reward) and logs that reward per step;
* the GRPO prompt pool of an outcome objective is made of training-world mini-scenarios, that of the
  imitation objective of the generated train split;
* a variant continues another run's warm start only when that warm start has the same content.
"""

from __future__ import annotations

import csv
import dataclasses
import json

import pytest

from mags_lib.data import GenerationConfig, WorldConfig, generate_role_splits
from mags_lib.data.outcome import OutcomeConfig, build_outcome_rows
from mags_lib.roles import ROLE_SPECS
from mags_lib.training import GRPOConfig, LoraSpec, SFTConfig, TrainConfig, profile_config
from mags_lib.training.config import with_objective
from mags_lib.training.run import grpo_pool, grpo_rows, reuse_warm_start, train_stage


def _oracle(question, items):
    """Answers with every recalled item: correct exactly when the needed object was stored."""
    return " ; ".join(items)


@pytest.fixture(scope="module")
def outcome_rows():
    return build_outcome_rows(OutcomeConfig(n=6, worlds=4, seed=0, roles=("write",)), progress=False)["write"]


def _cfg(grpo: GRPOConfig | None = None) -> TrainConfig:
    return TrainConfig(role="write", profile="smoke", seed=0, lora=LoraSpec(r=4, alpha=8), threads=1,
                       sft=SFTConfig(max_steps=2, batch_size=2, save_steps=2, learning_rate=1e-3, n_generated=0),
                       grpo=grpo)


def test_grpo_rows_carry_the_scenario_of_outcome_rows_and_refuse_a_mix(outcome_rows):
    prompt = ROLE_SPECS["write"].trained
    out = grpo_rows(outcome_rows[:2], prompt)
    assert [json.loads(o["scenario"]) for o in out] == [json.loads(r["scenario"]) for r in outcome_rows[:2]]
    plain = {k: v for k, v in outcome_rows[2].items() if k != "scenario"}
    assert "scenario" not in grpo_rows([plain], prompt)[0]  # ordinary rows: no column
    with pytest.raises(ValueError, match="no 'scenario'"):
        grpo_rows([outcome_rows[0], plain], prompt)


def test_outcome_grpo_scores_the_scenarios_and_logs_the_reward(tiny_base, outcome_rows, tmp_path):
    """About 20 s: a 2-step warm start, then 2 GRPO steps whose outcome reward reads the scenarios."""
    prompt = ROLE_SPECS["write"].trained
    cfg = _cfg()
    sft = train_stage("sft", cfg, outcome_rows[:4], tmp_path / "sft", base_dir=tiny_base, prompt=prompt,
                      data_hashes={"t": "1"}, progress=False)
    seen = []

    def reader(question, items):
        seen.append(question)
        return _oracle(question, items)

    g = GRPOConfig(max_steps=2, prompts_per_step=1, num_generations=2, max_completion_length=8,
                   rewards={"outcome_write": 1.0, "format": 0.5}, select_hard=False, save_steps=2,
                   reward_options={"outcome_write": {"reader": reader, "embedder": "hash"}})
    res = train_stage("grpo", dataclasses.replace(cfg, grpo=g), outcome_rows[:2], tmp_path / "grpo",
                      base_dir=tiny_base, prompt=prompt, data_hashes={"t": "1"}, init_adapter=sft.folder,
                      progress=False)
    assert res.steps == 2
    questions = {q["question"] for r in outcome_rows[:2] for q in json.loads(r["scenario"])["questions"]}
    assert seen and set(seen) <= questions  # the reader was asked the scenarios' own questions
    with open(res.folder / "log.csv") as f:
        log = list(csv.DictReader(f))
    col = "rewards/outcome_write_reward/mean"
    assert len(log) == 2 and all(r.get(col) not in (None, "", "nan") for r in log)


def test_the_grpo_pool_follows_the_objective():
    gen = GenerationConfig(n_train=12, n_validation=2, n_test=2, worlds_train=20, worlds_validation=1,
                           worlds_test=1, seed=0)
    splits = generate_role_splits(gen, progress=False)[0]

    class _Split(list):
        def to_list(self):
            return list(self)

    data = {"gen": {"train": _Split(splits["write"]["train"])}, "seed": None, "generation": gen}
    base = profile_config("write", "smoke")
    assert grpo_pool(base, data) == splits["write"]["train"]
    outcome = with_objective(base, "outcome")
    pool = grpo_pool(outcome, data)
    assert len(pool) == outcome.grpo.n_prompts and all("scenario" in r for r in pool)
    assert all(r["world_id"].startswith("tr") for r in pool)  # training worlds only
    with pytest.raises(ValueError, match="GenerationConfig"):
        grpo_pool(outcome, {k: v for k, v in data.items() if k != "generation"})


def test_outcome_worlds_are_those_of_the_datasets_whatever_seed_built_them(tmp_path):
    """Datasets built with seed 3, a run with seed 0: the GRPO outcome pool is drawn from the datasets'
    training worlds (not seed 0's) and the held-out outcome from their test worlds."""
    from mags_lib.data import build_all, generation_config, outcome
    from mags_lib.data import profile_config as data_profile
    from mags_lib.training.run import load_role_data

    cfg = data_profile("smoke", seed=3, roles=("write",), world=WorldConfig(persons=(2, 3)))
    built = build_all("smoke", seed_path=None, root=tmp_path, config=cfg, progress=False)
    gen = generation_config("write", "smoke", root=tmp_path)
    assert gen == cfg
    data = load_role_data("write", "smoke", root=tmp_path)
    assert data["generation"] == cfg
    names = {split: set().union(*(w.invented_names for w in built["worlds"][split])) for split in built["worlds"]}
    run = with_objective(profile_config("write", "smoke"), "outcome")
    assert run.seed == 0
    pool = grpo_pool(run, data)
    text = " ".join(r["input"] + r["scenario"] for r in pool)
    used = {n for n in set().union(*names.values()) if len(n) > 4 and n in text}
    assert used and used <= names["train"]  # the datasets' own training worlds, none of their held-out ones
    test = outcome.heldout_worlds("test", config=gen)
    assert [w.invented_names for w in test] == [w.invented_names for w in built["worlds"]["test"]]


def test_a_variant_reuses_a_warm_start_of_the_same_content_only(tiny_base, outcome_rows, tmp_path):
    prompt = ROLE_SPECS["write"].trained
    sft = train_stage("sft", _cfg(), outcome_rows[:4], tmp_path / "a" / "sft", base_dir=tiny_base, prompt=prompt,
                      data_hashes={"t": "1"}, progress=False)
    digest = json.loads((sft.folder / "meta.json").read_text())["content_hash"]
    dest = tmp_path / "b" / "sft"
    with pytest.raises(ValueError, match="another content"):
        reuse_warm_start(sft.folder, dest, "0" * 16, note=lambda s: None)
    assert not dest.exists()  # nothing written on refusal
    assert reuse_warm_start(sft.folder, dest, digest, note=lambda s: None)
    assert (dest / "adapter_model.safetensors").read_bytes() == (sft.folder / "adapter_model.safetensors").read_bytes()
    assert not (dest / "checkpoints").exists()
    again = train_stage("sft", _cfg(), outcome_rows[:4], dest, base_dir=tiny_base, prompt=prompt,
                        data_hashes={"t": "1"}, progress=False)
    assert again.skipped  # the copy is recognised as this stage, not retrained


def test_heldout_outcome_scenarios_come_from_the_test_worlds_only():
    from mags_lib.data import outcome, profile_config

    _, worlds = generate_role_splits(profile_config("smoke", seed=0), progress=False)
    test = outcome.heldout_worlds("test", profile="smoke", seed=0)
    assert [w.invented_names for w in test] == [w.invented_names for w in worlds["test"]]
    train_names = set().union(*(w.invented_names for w in worlds["train"]))
    rows = outcome.build_outcome_rows(OutcomeConfig(n=4, roles=("write",)), worlds=test, split="test",
                                      progress=False)["write"]
    assert all(r["world_id"].startswith("te") and r["id"].startswith("outcome-write-test-") for r in rows)
    text = " ".join(r["input"] + r["scenario"] for r in rows)
    assert not any(n in text for n in train_names if len(n) > 4)  # no training entity leaks into them
    with pytest.raises(ValueError, match="held-out"):
        outcome.heldout_worlds("train", profile="smoke")


def test_ops_per_input_counts_the_model_and_the_gold(tmp_path):
    from mags_lib.training.objectives import ops_per_input

    w = "<memory_write>{}</memory_write>"
    recs = [{"gold": w.format("a,b,c") + w.format("a,d,e"), "output": w.format("a,b,c")},
            {"gold": w.format("x,y,z"), "output": w.format("x,y,z") * 3}]
    p = tmp_path / "predictions_gen_write_free.jsonl"
    p.write_text("\n".join([json.dumps({"cache_key": "k"})] + [json.dumps(r) for r in recs]) + "\n")
    got = ops_per_input(p)
    assert (got["n"], got["pred_ops"], got["gold_ops"]) == (2, 2.0, 1.5)  # (1 + 3) / 2 and (2 + 1) / 2


def test_heldout_outcome_scores_gold_writes_and_junk_and_is_read_back_while_its_inputs_hold(tmp_path):
    """The held-out outcome on 3 smoke test-world scenarios with an oracle reader: gold writes answer every
    question (1.0), junk none (0.0); a second call with the same model file, prompt and scenarios reads the
    file back (the reader is not asked again), a changed model file or prompt computes it again."""
    import os

    from mags_lib.data import outcome
    from mags_lib.training.objectives import heldout_outcome
    from tests.fakes import TableBackend

    worlds = outcome.heldout_worlds("test", profile="smoke", seed=0)
    rows = outcome.build_outcome_rows(OutcomeConfig(n=3, worlds=len(worlds), seed=0, roles=("write",)),
                                      worlds=worlds, split="test", progress=False)["write"]
    asked = []

    def reader(question, items):
        asked.append(question)
        return _oracle(question, items)

    model = tmp_path / "model.gguf"
    model.write_text("v1")
    gold = TableBackend({r["input"]: r["response"] for r in rows})
    gold.model_path = str(model)
    prompt = ROLE_SPECS["write"].trained
    kw = {"profile": "smoke", "n": 3, "reader": reader, "embedder": "hash", "out": tmp_path / "v"}
    first = heldout_outcome("write", gold, prompt, **kw)
    assert (first["outcome"], first["cached"], len(gold.calls)) == (1.0, False, 3)
    n_asked = len(asked)
    again = heldout_outcome("write", gold, prompt, **kw)
    assert (again["per_row"], again["cached"], len(gold.calls), len(asked)) == (first["per_row"], True, 3, n_asked)
    junk = TableBackend({}, default="<memory_write>nothing,is,here</memory_write>")
    junk.model_path = str(model)
    model.write_text("v2 (re-exported)")
    os.utime(model, ns=(1, 1))
    res = heldout_outcome("write", junk, prompt, **kw)  # same path, another file: computed again
    assert (res["outcome"], res["cached"], len(junk.calls)) == (0.0, False, 3)
    other = dataclasses.replace(prompt, system=prompt.system + " Be brief.")
    assert heldout_outcome("write", junk, other, **kw)["cached"] is False


def test_paired_with_compares_the_same_inputs_and_refuses_other_ones(tmp_path):
    from mags_lib.training.objectives import paired_with

    w = "<memory_write>{}</memory_write>"
    golds = [w.format(f"s{i},r,o{i}") for i in range(40)]

    def write(variant, outputs, scores, ids=None, inputs="x", gold=golds):
        d = tmp_path / variant
        (d / "eval" / "grpo").mkdir(parents=True)
        recs = [{"id": f"g{i}", "input": f"in{i}", "gold": g, "output": o} for i, (g, o) in enumerate(zip(gold, outputs))]
        (d / "eval" / "grpo" / "predictions_gen_write_free.jsonl").write_text(
            "\n".join([json.dumps({"cache_key": "k"})] + [json.dumps(r) for r in recs]) + "\n")
        (d / "eval" / "grpo" / "metrics.json").write_text(json.dumps({"rows": [{"set": "gen_write", "mode": "free"}]}))
        ids = ids or [f"o{i}" for i in range(len(scores))]
        (d / "heldout_outcome.jsonl").write_text("\n".join(
            [json.dumps({"cache_key": "k"})] + [json.dumps({"id": i, "input": inputs, "output": "y", "score": s})
                                                for i, s in zip(ids, scores)]) + "\n")

    write("imitation", golds, [1.0] * 20 + [0.0] * 20)
    write("better", golds, [1.0] * 30 + [0.0] * 10)  # 10 more scenarios answered, same writes
    write("worse", golds[:20] + [""] * 20, [1.0] * 20 + [0.0] * 20)  # half the facts left unwritten
    write("other", golds, [1.0] * 40, ids=[f"z{i}" for i in range(40)])
    b = paired_with(tmp_path, "better", role="write")
    assert b["outcome_minus_imitation"] == pytest.approx(0.25) and 0.1 < b["outcome_diff_lo"] <= 0.25 <= b["outcome_diff_hi"]
    assert b["op_f1_minus_imitation"] == 0.0 and b["op_f1_diff_lo"] == b["op_f1_diff_hi"] == 0.0
    worse = paired_with(tmp_path, "worse", role="write")
    assert worse["op_f1_minus_imitation"] == pytest.approx(2 * 20 / 60 - 1) and worse["op_f1_diff_hi"] < 0
    assert "outcome_minus_imitation" not in paired_with(tmp_path, "other", role="write")  # other scenarios
    # the ids are positions: files built from other scenarios (another seed or profile) carry the same ones
    write("reseeded", golds, [1.0] * 40, inputs="another world's input",
          gold=[w.format(f"t{i},r,o{i}") for i in range(40)])
    assert paired_with(tmp_path, "reseeded", role="write") == {}
    from mags_lib.training.objectives import variant_table

    res = {v: {"scores": [], "ops": {}, "outcome": {"outcome": 0.5, "n": 40}} for v in ("imitation", "better")}
    t = variant_table(res, {}, out_dir=tmp_path, role="write")
    rec = {r["variant"]: r for r in t.to_dict(orient="records")}
    assert rec["imitation"]["outcome_minus_imitation"] is None  # null in metrics.json, not NaN
    assert rec["better"]["outcome_minus_imitation"] == 0.25 and rec["better"]["op_f1_minus_imitation"] == 0.0


@pytest.mark.parametrize(("ops", "reach"), [(1.5, "out of reach"), (2.2, "within reach")])
def test_findings_say_when_a_30_percent_cut_cannot_keep_op_f1(ops, reach):
    import pandas as pd

    from mags_lib.training.objectives import findings

    t = pd.DataFrame([{"variant": "imitation", "op_f1_gen": .97, "ops_per_input": ops, "gold_ops_per_input": 1.5,
                       "heldout_outcome": .5},
                      {"variant": "graph_cost-2", "op_f1_gen": .96, "ops_per_input": ops * .95,
                       "gold_ops_per_input": 1.5, "heldout_outcome": .5, "op_f1_diff_lo": -.03, "op_f1_diff_hi": .01}])
    lines = findings(t)
    assert any(line.startswith("bound:") and line.endswith(reach) for line in lines), lines
    assert "[-0.030, +0.010]" in lines[0] and lines[0].endswith("missed")  # -5 % of operations only


@pytest.mark.slow
def test_heldout_outcome_in_two_processes_scores_as_one(tmp_path):
    """n_jobs=2, the embedded model as the writer (its few-shot base prompt) and as the reader (llama.cpp):
    8 smoke scenarios are generated and scored in three parts on two worker processes (the caller's
    backend is never asked) to the same outputs and scores as in one process."""
    from mags_lib.backends import load_backend
    from mags_lib.training.objectives import heldout_outcome

    class Refusing:  # the caller's backend as the workers see it: its name and model file, never its generate
        name = "llamacpp"

        def __init__(self, real):
            self.model_path, self.base_model_path = real.model_path, real.base_model_path

        def generate(self, *a, **k):
            raise AssertionError("with n_jobs=2 the workers generate, not the caller's backend")

    prompt = dataclasses.replace(ROLE_SPECS["write"].base, max_new_tokens=48)
    # 3 parts on 2 processes; seed 4: scenarios where the untrained writer gets some facts across (four nonzero)
    kw = {"profile": "smoke", "n": 8, "seed": 4, "reader": "llamacpp", "embedder": "hash"}
    with load_backend("llamacpp", n_threads=1) as real:
        one = heldout_outcome("write", real, prompt, out=tmp_path / "one", **kw)
        two = heldout_outcome("write", Refusing(real), prompt, out=tmp_path / "two", n_jobs=2, **kw)
    assert max(one["per_row"]) > 0  # not all zero: the scores, not only the outputs, must land in their places
    assert two["per_row"] == one["per_row"] and two["cached"] is False and two["n"] == 8
    lines = [(tmp_path / d / "heldout_outcome.jsonl").read_text().splitlines() for d in ("one", "two")]
    assert lines[0][1:] == lines[1][1:] and len(lines[0]) == 9  # header + one line per scenario, same outputs
