"""Training stages on a tiny model (fast) and one warm start of the real SmolLM2 (slow).

* a run killed mid-way (SIGKILL, in a subprocess) and resumed ends with the same adapter and the same
  per-step losses as an uninterrupted run of the same steps;
* a tiny GRPO run changes the LoRA weights and logs every reward component, KL and the zero-variance
  share per step;
* a warm start of the real model raises adherence (strict protocol) on held-out inputs.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mags_lib.roles import ROLE_SPECS
from mags_lib.training import GRPOConfig, LoraSpec, SFTConfig, TrainConfig
from mags_lib.training.run import _select_hard, _token_lengths, sft_examples, train_stage

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def rows(tiny_rows):
    return tiny_rows


def _tiny_cfg(role="write", **sft):
    sft = {"max_steps": 6, "batch_size": 2, "save_steps": 2, "save_total_limit": 5, "learning_rate": 1e-3,
           "n_generated": 0, **sft}
    return TrainConfig(role=role, profile="smoke", seed=0, lora=LoraSpec(r=4, alpha=8), sft=SFTConfig(**sft),
                       threads=1)


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "adapter_model.safetensors"))


def _losses(folder: Path) -> list[tuple[int, float]]:
    with open(folder / "log.csv") as f:
        return [(int(float(r["step"])), float(r["loss"])) for r in csv.DictReader(f) if r.get("loss")]


_DRIVER = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from transformers import TrainerCallback
    from mags_lib.roles import ROLE_SPECS
    from mags_lib.training import TrainConfig
    from mags_lib.training.run import _select_hard, _token_lengths, sft_examples, train_stage

    args = json.loads(Path(sys.argv[1]).read_text())

    class Slow(TrainerCallback):  # leaves time to kill the process between two steps
        def on_step_end(self, *a, **k):
            time.sleep(1.0)

    train_stage("sft", TrainConfig.from_dict(args["cfg"]), args["rows"], Path(args["out"]),
                base_dir=Path(args["base"]), prompt=ROLE_SPECS["write"].trained, data_hashes={"t": "1"},
                progress=False, callbacks=[Slow()])
""")


@pytest.mark.slow
def test_resume_after_a_kill_equals_an_uninterrupted_run(tiny_base, rows, tmp_path):
    """About 60 s on 2 cores (two Python start-ups and 12 tiny steps)."""
    cfg = _tiny_cfg()
    train = rows["write"]["train"][:12]
    prompt = ROLE_SPECS["write"].trained
    # the reference: 6 steps without interruption
    ref = train_stage("sft", cfg, train, tmp_path / "ref", base_dir=tiny_base, prompt=prompt,
                      data_hashes={"t": "1"}, progress=False)
    assert ref.steps == 6 and not ref.skipped
    # the same run in a subprocess, killed (SIGKILL) once checkpoint-2 is complete
    out = tmp_path / "killed"
    spec = tmp_path / "args.json"
    spec.write_text(json.dumps({"cfg": cfg.to_dict(), "rows": train, "out": str(out), "base": str(tiny_base)}))
    driver = tmp_path / "driver.py"
    driver.write_text(_DRIVER)
    proc = subprocess.Popen([sys.executable, str(driver), str(spec)], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env={**os.environ, "OMP_NUM_THREADS": "1"})
    marker = out / "checkpoints" / "checkpoint-2" / "meta.json"
    deadline = time.time() + 600
    while not marker.exists():
        if proc.poll() is not None:
            pytest.fail(f"the driver ended before checkpoint-2: {proc.stderr.read().decode()[-2000:]}")
        if time.time() > deadline:
            proc.kill()
            pytest.fail("no checkpoint-2 within 10 minutes")
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "meta.json").exists()  # the stage did not finish
    assert not (out / "checkpoints" / "checkpoint-6").exists()
    # resuming in this process finishes the remaining steps from checkpoint-2 (and runs only those)
    from transformers import TrainerCallback

    class Count(TrainerCallback):
        n = 0

        def on_step_end(self, *a, **k):
            Count.n += 1

    res = train_stage("sft", cfg, train, out, base_dir=tiny_base, prompt=prompt, data_hashes={"t": "1"},
                      progress=False, callbacks=[Count()])
    assert res.resumed_from is not None and res.resumed_from >= 2 and res.steps == 6
    assert Count.n == 6 - res.resumed_from
    a, b = _weights(tmp_path / "ref"), _weights(out)
    assert a.keys() == b.keys() and a
    # the steps moved the adapter (LoRA B starts at zero), so equality below is not trivial
    assert max(v.abs().max().item() for k, v in a.items() if "lora_B" in k) > 1e-4
    for k in a:
        assert (a[k] - b[k]).abs().max().item() <= 1e-6, k
    # one log row per step, the repeated steps replaced, the same losses
    ref_losses, res_losses = _losses(tmp_path / "ref"), _losses(out)
    assert [s for s, _ in res_losses] == [1, 2, 3, 4, 5, 6]
    assert [s for s, _ in ref_losses] == [1, 2, 3, 4, 5, 6]
    assert [v for _, v in res_losses] == pytest.approx([v for _, v in ref_losses], abs=1e-6)
    # a third call finds the finished stage and skips it
    again = train_stage("sft", cfg, train, out, base_dir=tiny_base, prompt=prompt, data_hashes={"t": "1"},
                        progress=False)
    assert again.skipped
    # a changed configuration does not reuse it, and the finished stage is moved aside, not deleted
    cfg2 = dataclasses.replace(cfg, sft=dataclasses.replace(cfg.sft, max_steps=2))
    res2 = train_stage("sft", cfg2, train, out, base_dir=tiny_base, prompt=prompt, data_hashes={"t": "1"},
                       progress=False, note=lambda s: None)
    assert res2.steps == 2 and not res2.skipped
    assert len(list((tmp_path / "replaced").glob("killed-*/adapter_model.safetensors"))) == 1


def test_tiny_grpo_changes_the_lora_and_logs_every_reward(tiny_base, rows, tmp_path):
    """About 20 s: a 2-step warm start, then 3 GRPO steps of 2 prompts x 4 completions."""
    cfg = _tiny_cfg("answer", max_steps=2, save_steps=2)
    train = rows["answer"]["train"]
    prompt = ROLE_SPECS["answer"].trained
    sft = train_stage("sft", cfg, train[:4], tmp_path / "sft", base_dir=tiny_base, prompt=prompt,
                      data_hashes={"t": "1"}, progress=False)
    rewards = {"answer_correct": 1.0, "abstention": 0.5, "brevity": 1.0}
    g = GRPOConfig(max_steps=3, prompts_per_step=2, num_generations=4, learning_rate=5e-3, beta=0.05,
                   max_completion_length=8, rewards=rewards, save_steps=3, select_hard=False)
    cfg = dataclasses.replace(cfg, grpo=g)
    res = train_stage("grpo", cfg, train[:6], tmp_path / "grpo", base_dir=tiny_base, prompt=prompt,
                      data_hashes={"t": "1"}, init_adapter=sft.folder, progress=False)
    assert res.steps == 3
    before, after = _weights(sft.folder), _weights(res.folder)
    assert before.keys() == after.keys()
    changed = max((before[k] - after[k]).abs().max().item() for k in before)
    assert changed > 1e-4, "GRPO left the LoRA weights unchanged"
    with open(res.folder / "log.csv") as f:
        log = list(csv.DictReader(f))
    assert [int(float(r["step"])) for r in log] == [1, 2, 3]
    for name in ("answer_correct_reward", "abstention_reward", "brevity_reward"):
        col = f"rewards/{name}/mean"
        assert all(r.get(col) not in (None, "", "nan") for r in log), col
    assert all(r.get("kl") not in (None, "") for r in log) and all("frac_reward_zero_std" in r for r in log)
    assert min(float(r["frac_reward_zero_std"]) for r in log) < 1.0  # some group had a signal to learn from
    meta = json.loads((res.folder / "meta.json").read_text())
    assert meta["stage"] == "grpo" and meta["init"] == json.loads((sft.folder / "meta.json").read_text())["content_hash"]


def test_token_lengths_and_hard_prompt_selection_read_real_token_ids(tiny_base, rows, tmp_path):
    """The max_length filter and length grouping of the warm start see each example's token count, and
    the GRPO prompt selection scores rows with the warm start (transformers 5's chat template returns a
    dict unless asked for ids: lengths were all 2 and the selection crashed). About 10 s."""
    from transformers import AutoTokenizer

    prompt = ROLE_SPECS["write"].trained
    train = rows["write"]["train"]
    tok = AutoTokenizer.from_pretrained(str(tiny_base))
    examples = sft_examples(train[:6], prompt)
    lengths = _token_lengths(tok, examples)
    for ex, n in zip(examples, lengths):
        text = tok.apply_chat_template(ex["prompt"] + ex["completion"], tokenize=False)
        assert n == len(tok(text, add_special_tokens=False)["input_ids"]) > 20
    cfg = _tiny_cfg("write", max_steps=1, save_steps=1)
    sft = train_stage("sft", cfg, train[:2], tmp_path / "sft", base_dir=tiny_base, prompt=prompt,
                      data_hashes={"t": "1"}, progress=False)
    picked = _select_hard(train[:8], cfg, tiny_base, sft.folder, prompt, 4)
    ids = [r["id"] for r in train[:8]]
    assert len(picked) == 4 and len({r["id"] for r in picked}) == 4
    assert [r["id"] for r in picked] == sorted((r["id"] for r in picked), key=ids.index)  # original order kept
    assert picked == _select_hard(train[:8], cfg, tiny_base, sft.folder, prompt, 4)  # one seed, same pick


@pytest.mark.slow
def test_a_warm_start_raises_adherence_of_the_real_model(tmp_path):
    """SmolLM2-135M, write role, trained prompt (no few-shot): strict adherence on 36 held-out inputs
    before and after 24 steps of 4 examples (48 generated rows, two epochs), measured as the workbench runs
    a trained stage (its evaluation, notebooks 20 / 25, the agent): llama.cpp over the embedded base, the
    adapter as a GGUF LoRA. About 2-3 minutes on 2 quiet cores, most of it the training."""
    from mags_lib.backends import load_backend
    from mags_lib.data import GenerationConfig, generate_role_splits
    from mags_lib.metrics import adherence
    from mags_lib.models import base_model_dir
    from mags_lib.training.report import _lora_gguf

    # Its own rows: 12 held-out inputs and 24 training rows (the shared tiny fixture) made the figure one
    # row set's luck: after the write data gained small-talk rows (2026-11-29) the same recipe gave 0.50 on
    # them, while other seeds' 24 rows gave 0.92. With 48 training rows and 36 held-out inputs, data seeds
    # 3 / 4 / 5 gave 0.78 / 0.81 / 0.75 on the 2-core AVX-512 machine.
    rows = generate_role_splits(GenerationConfig(n_train=48, n_validation=4, n_test=36, worlds_train=4,
                                                 worlds_validation=1, worlds_test=2, seed=3, roles=("write",)),
                                progress=False)[0]
    prompt = ROLE_SPECS["write"].trained
    test = rows["write"]["test"]
    assert len(test) == 36

    prompts = [prompt.messages(r["input"]) for r in test]

    def measure(model):
        with load_backend("llamacpp", model, n_threads=1) as b:
            gens = b.generate(prompts, max_new_tokens=96)
        return adherence([g.text for g in gens], "write")

    def measure_untrained():
        """``measure(None)`` in a third of the time (14 s against 48 on one quiet core, the same 0.0): strict
        adherence admits nothing but whitespace before the first ``<memory_write>``, so an output whose first 8
        greedy tokens (the start of its 96) say anything else fails whatever follows; only the others (none here:
        the untrained model writes prose) are decoded to 96 tokens."""
        tag = "<memory_write>"
        with load_backend("llamacpp", None, n_threads=1) as b:
            head = b.generate(prompts, max_new_tokens=8)
            texts = [g.text for g in head]
            rest = [i for i, g in enumerate(head) if g.n_new_tokens >= 8
                    and (g.text.lstrip().startswith(tag) or tag.startswith(g.text.lstrip()))]
            for i, g in zip(rest, b.generate([prompts[i] for i in rest], max_new_tokens=96)):
                texts[i] = g.text
        return adherence(texts, "write")

    before = measure_untrained()
    # 24 steps: 16 passed the floor below on earlier machines but reached 0.67 (8 of 12) on a CPU with AMX
    # (2026-11-24: other bf16 kernels, another trajectory), so the steps were raised then (see the floor below).
    # Measured on an AVX2 machine (fp32) from one adapter, on the fixture's 12 rows then: 0.0 -> 0.83.
    cfg = _tiny_cfg(max_steps=24, batch_size=4, save_steps=24, learning_rate=1e-3)
    cfg = dataclasses.replace(cfg, lora=LoraSpec(), threads=1)
    res = train_stage("sft", cfg, rows["write"]["train"], tmp_path / "sft", base_dir=base_model_dir(),
                      prompt=prompt, data_hashes={"t": "1"}, progress=False)
    lora = _lora_gguf(res.folder, tmp_path / "gguf", note=pytest.fail)
    assert lora is not None, "no GGUF LoRA writer (mags_lib.export)"
    after = measure(str(lora))
    assert after >= before + 0.3, (before, after)
    # The floor sits below the spread measured across machines, not at its bottom: 0.75 / 0.78 / 0.81 on the
    # 2-core AVX-512 AMD machine (data seeds 5 / 3 / 4), and 0.72 (26 of 36) for seed 3 on an Intel Xeon with
    # AMX (2026-12-01; the same with 32 steps and with decoding stopped at a repeated tag: its ten misses are
    # triplets of two fields, not loops). Untrained, or with the adapter not applied, adherence is 0.0.
    assert after >= 0.65, (before, after)


def test_a_time_limit_stops_the_warm_start_resumably_and_grpo_waits_for_it(tiny_base, rows, tmp_path, monkeypatch):
    """``train_role(callbacks=[Deadline(s)])`` (the GPU benchmark's time limit): the warm start stops with a
    checkpoint, is not marked finished, GRPO is not started on an unfinished warm start; a second call
    without the limit resumes and finishes both stages."""
    from datasets import Dataset, DatasetDict

    from mags_lib import models
    from mags_lib.bench.training_profile import Deadline
    from mags_lib.training import train_role

    monkeypatch.setattr(models, "base_model_dir", lambda models_root=None, **kw: tiny_base)
    grpo = GRPOConfig(max_steps=1, prompts_per_step=1, num_generations=2, max_completion_length=8,
                      rewards={"format": 1.0}, n_prompts=2, select_hard=False)
    cfg = dataclasses.replace(_tiny_cfg(), grpo=grpo)
    # GRPO's prompts must have a gold answer shorter than max_completion_length (8 tokens): empty ones
    train = rows["write"]["train"]
    short = [r for r in train if r["n_ops"] == 0][:2]
    assert len(short) == 2
    data = {"gen": DatasetDict({"train": Dataset.from_list(short + [r for r in train if r["n_ops"]][:10])}), "seed": None,
            "seed_skipped": None, "hashes": {"t": "1"}}
    notes: list[str] = []
    limit = Deadline(0)
    meta = train_role("write", run_tag="t", config=cfg, data=data, models_root=tmp_path, progress=False,
                      note=notes.append, callbacks=[limit])
    assert type(limit).hit
    assert meta["stages"]["sft"]["steps"] == 1 and "grpo" not in meta["stages"]
    assert any("GRPO not started" in n for n in notes), notes
    run = tmp_path / "write" / "t"
    assert not (run / "sft" / "adapter_model.safetensors").exists()
    assert (run / "sft" / "checkpoints" / "checkpoint-1" / "meta.json").is_file()
    # not a finished run: never listed or served, and nothing can continue it (it was listed as a finished "sft"
    # run with no adapter, and init_from failed deep inside, after making the variant's folder; an audit found it)
    from mags_lib.training import list_runs, read_run_meta

    assert meta["final_stage"] is None and read_run_meta(run) is None and list_runs(tmp_path) == {}
    var = dataclasses.replace(cfg, sft=dataclasses.replace(cfg.sft, init_from="t"))
    with pytest.raises(FileNotFoundError, match="no finished write run"):
        train_role("write", run_tag="v", config=var, data=data, models_root=tmp_path, progress=False)
    with pytest.raises(ValueError, match="missing or unfinished"):
        train_role("write", run_tag="w", config=cfg, data=data, models_root=tmp_path, progress=False, warm_start="t")
    assert sorted(p.name for p in (tmp_path / "write").iterdir()) == ["t"]  # nothing left by the refusals
    meta = train_role("write", run_tag="t", config=cfg, data=data, models_root=tmp_path, progress=False,
                      note=notes.append)
    assert meta["stages"]["sft"]["steps"] == 6 and meta["stages"]["sft"]["resumed_from"] == 1
    assert meta["stages"]["grpo"]["steps"] == 1 and meta["final_stage"] == "grpo"
    assert (run / "grpo" / "adapter_model.safetensors").is_file()


class _StopAt:
    """A trainer callback that stops the run (with a checkpoint) after step ``n``, as an interruption would."""

    def __new__(cls, n: int):
        from transformers import TrainerCallback

        class _Stop(TrainerCallback):
            def on_step_end(self, args, state, control, **kw):
                if state.global_step == n:
                    control.should_training_stop = True
                    control.should_save = True
                return control
        return _Stop()


@pytest.mark.parametrize("batching", ["sorted_length", "random"])  # shuffled_length: the kill test above
def test_every_batch_order_resumes_to_the_uninterrupted_run(tiny_base, rows, tmp_path, batching):
    """Stopped after step 3 (first epoch) and after step 8 (second epoch), then resumed: the same adapter and the
    same losses as the run that was never stopped. ``sorted_length`` (transformers' order) drew its order from
    torch's global random state, which a resumed run reaches in another state: it ended ~1e-3 away (an audit's
    finding); now every order is seeded by (seed, epoch)."""
    cfg = _tiny_cfg(batching=batching, max_steps=10, save_steps=1, save_total_limit=20)
    train = [r for r in rows["write"]["train"] if r["n_ops"]][:6] + [r for r in rows["write"]["train"]
                                                                     if not r["n_ops"]][:6]
    prompt = ROLE_SPECS["write"].trained
    kw = dict(base_dir=tiny_base, prompt=prompt, data_hashes={"t": "1"}, progress=False)
    ref = train_stage("sft", cfg, train, tmp_path / "ref", **kw)
    assert ref.steps == 10
    out = tmp_path / "stopped"
    for stop in (3, 8):
        part = train_stage("sft", cfg, train, out, callbacks=[_StopAt(stop)], **kw)
        assert not (out / "meta.json").exists() and (out / "checkpoints" / f"checkpoint-{stop}").is_dir(), part
    res = train_stage("sft", cfg, train, out, **kw)
    assert res.resumed_from == 8 and res.steps == 10
    a, b = _weights(tmp_path / "ref"), _weights(out)
    assert max(v.abs().max().item() for k, v in a.items() if "lora_B" in k) > 1e-4
    assert max((a[k] - b[k]).abs().max().item() for k in a) <= 1e-6
    assert [v for _, v in _losses(out)] == pytest.approx([v for _, v in _losses(tmp_path / "ref")], abs=1e-6)


def test_a_copied_models_folder_keeps_its_finished_stages(tiny_base, rows, tmp_path):
    """A stage's content hash names the base model by its weights' sha256, not by the folder it was read from:
    a finished stage copied to another models root (another clone, another ``models_root``) is skipped there,
    not retrained and moved to ``replaced/``."""
    import hashlib
    import shutil

    a, b = tmp_path / "a" / "base", tmp_path / "b" / "base"
    shutil.copytree(tiny_base, a)
    digest = hashlib.sha256((a / "model.safetensors").read_bytes()).hexdigest()
    (a / "mags_manifest.json").write_text(json.dumps({"model.safetensors_sha256": digest}))
    shutil.copytree(a, b)
    cfg = _tiny_cfg(max_steps=1, save_steps=1)
    kw = {"prompt": ROLE_SPECS["write"].trained, "data_hashes": {"t": "1"}, "progress": False, "note": lambda s: None}
    first = train_stage("sft", cfg, rows["write"]["train"][:4], tmp_path / "a" / "run" / "sft", base_dir=a, **kw)
    shutil.copytree(tmp_path / "a" / "run", tmp_path / "b" / "run")
    again = train_stage("sft", cfg, rows["write"]["train"][:4], tmp_path / "b" / "run" / "sft", base_dir=b, **kw)
    assert not first.skipped and again.skipped
    assert not (tmp_path / "b" / "run" / "replaced").exists()
    # other weights under the same folder name are another base: that stage is trained again
    (b / "mags_manifest.json").write_text(json.dumps({"model.safetensors_sha256": "0" * 64}))
    assert not train_stage("sft", cfg, rows["write"]["train"][:4], tmp_path / "b" / "run" / "sft", base_dir=b,
                           **kw).skipped


def test_an_interrupted_grpo_stage_resumes_its_policy(tiny_base, rows, tmp_path):
    """A GRPO checkpoint keeps the policy at its top level and TRL's reference copy in ref/; transformers' resume
    loaded only ref/, so the resumed stage went on from the warm start's weights (found by an audit: KL 0 at the
    first resumed step, other losses, another adapter). Resumed, it equals the uninterrupted run."""
    from transformers import TrainerCallback

    train = rows["answer"]["train"][:8]
    prompt = ROLE_SPECS["answer"].trained
    kw = dict(base_dir=tiny_base, prompt=prompt, data_hashes={"t": "1"}, progress=False, note=lambda s: None)
    cfg = _tiny_cfg("answer", max_steps=2, save_steps=2)
    sft = train_stage("sft", cfg, train[:4], tmp_path / "sft", **kw)
    grpo = GRPOConfig(max_steps=4, prompts_per_step=2, num_generations=4, learning_rate=5e-3, beta=0.05,
                      max_completion_length=8, rewards={"answer_correct": 1.0, "abstention": 0.5, "brevity": 1.0},
                      save_steps=2, select_hard=False)
    cfg = dataclasses.replace(cfg, grpo=grpo)

    class Boom(TrainerCallback):
        def on_step_end(self, args, state, control, **k):
            if state.global_step == 3:
                raise RuntimeError("interrupted at step 3")

    ref = train_stage("grpo", cfg, train, tmp_path / "ref", init_adapter=sft.folder, **kw)
    with pytest.raises(RuntimeError, match="interrupted at step 3"):
        train_stage("grpo", cfg, train, tmp_path / "int", init_adapter=sft.folder, callbacks=[Boom()], **kw)
    assert (tmp_path / "int" / "checkpoints" / "checkpoint-2" / "ref" / "adapter_config.json").is_file()
    res = train_stage("grpo", cfg, train, tmp_path / "int", init_adapter=sft.folder, **kw)
    assert res.resumed_from == 2 and res.steps == 4
    a, b = _weights(tmp_path / "ref"), _weights(tmp_path / "int")
    import torch

    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    with open(tmp_path / "ref" / "log.csv") as f, open(tmp_path / "int" / "log.csv") as g:
        kl = [[(r["step"], r["kl"]) for r in csv.DictReader(h)] for h in (f, g)]
    assert kl[0] == kl[1]
