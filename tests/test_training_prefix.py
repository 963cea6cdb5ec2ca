"""Shared-prefix batching (mags_lib.training.prefix) on a tiny Llama with SmolLM2's tokenizer.

The prefix of a batch runs once and its cache is expanded to the batch: the loss and every LoRA gradient
must equal the per-row computation over whole sequences; the loop must lower the loss of its rows and log
each step.
"""

from __future__ import annotations

import csv

import pytest
from fakes import make_tiny_llama

from mags_lib.roles import ROLE_SPECS
from mags_lib.training.prefix import (
    batch_loss,
    batch_loss_per_row,
    common_prefix_len,
    tokenize_examples,
    train_lora,
)
from mags_lib.training.run import sft_examples


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = make_tiny_llama(tmp_path_factory.mktemp("tiny_prefix"))
    tok = AutoTokenizer.from_pretrained(str(folder))

    def fresh():
        torch.manual_seed(1)
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
        # random A and B (PEFT's default B = 0 would leave half the gradients zero and the test weaker)
        return get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj",
                                                                                    "down_proj"],
                                                init_lora_weights=False))
    return fresh, tok


ROWS = [
    {"input": "What do blorps eat?", "response": "frozen lemons", "memory": []},
    {"input": "Where does Captain Perrow live?", "response": "Vennick", "memory": []},
    {"input": "Who guards the gate?", "response": "not in memory", "memory": []},
    {"input": "What is the name of the lobster?", "response": "Gus",
     "memory": [{"text": "Captain Perrow keeps a pet lobster named Gus", "time": None, "current": None,
                 "speaker": None}]},
]


def _grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def test_shared_prefix_loss_and_gradients_equal_the_per_row_computation(tiny):
    import torch

    fresh, tok = tiny
    batch = tokenize_examples(tok, sft_examples(ROWS, ROLE_SPECS["answer"].base))
    shared = common_prefix_len([ids for ids, _ in batch])
    assert shared >= 20, "the rows share the chat template and system prompt: the test needs a real prefix"
    assert all(len(ids) > n_p for ids, n_p in batch)

    a = fresh()
    seen: list[tuple] = []  # what goes through the model: the prefix once (one row), then every row's rest
    hook = a.get_input_embeddings().register_forward_hook(lambda m, args, out: seen.append(tuple(args[0].shape)))
    loss_a, n_a = batch_loss(a, batch, pad_id=tok.pad_token_id)
    hook.remove()
    c = min(shared, min(n_p for _, n_p in batch) - 1)
    assert seen == [(1, c), (len(batch), max(len(ids) for ids, _ in batch) - c)], seen
    loss_a.backward()
    b = fresh()
    loss_b, n_b = batch_loss_per_row(b, batch)
    loss_b.backward()
    assert n_a == n_b == sum(len(ids) - n_p for ids, n_p in batch)
    assert torch.allclose(loss_a, loss_b, rtol=1e-5, atol=1e-5), (float(loss_a), float(loss_b))
    ga, gb = _grads(a), _grads(b)
    assert ga.keys() == gb.keys() and len(ga) == 2 * 4 * 2  # A and B of 4 module kinds in 2 layers
    for name in ga:
        assert float(gb[name].abs().max()) > 0, name
        assert torch.allclose(ga[name], gb[name], rtol=1e-4, atol=1e-6), name


def test_single_row_and_rows_without_a_common_prefix(tiny):
    import torch

    fresh, tok = tiny
    one = tokenize_examples(tok, sft_examples(ROWS[:1], ROLE_SPECS["answer"].base))
    m = fresh()
    la, na = batch_loss(m, one, pad_id=tok.pad_token_id)
    lb, nb = batch_loss_per_row(m, one)
    assert na == nb and torch.allclose(la, lb, rtol=1e-5, atol=1e-5)
    # two rows that differ from the first token: no shared prefix, plain batched computation
    other = [(ids[:], n_p) for ids, n_p in one] + [([7] + one[0][0][1:], one[0][1])]
    assert common_prefix_len([ids for ids, _ in other]) == 0
    la, na = batch_loss(m, other, pad_id=tok.pad_token_id)
    lb, nb = batch_loss_per_row(m, other)
    assert na == nb and torch.allclose(la, lb, rtol=1e-5, atol=1e-5)


def test_train_lora_equals_per_row_training_lowers_the_loss_and_logs_every_step(tiny, tmp_path, monkeypatch):
    import torch

    from mags_lib.training import prefix

    fresh, tok = tiny
    examples = sft_examples(ROWS, ROLE_SPECS["answer"].base)
    data = tokenize_examples(tok, examples)
    m = fresh()

    def mean_loss(model):
        with torch.no_grad():
            total, n = batch_loss_per_row(model, data)
        return float(total) / n

    before = mean_loss(m)
    res = train_lora(m, tok, examples, steps=12, batch_size=2, learning_rate=3e-2, seed=0,
                     log_path=tmp_path / "log.csv", progress=False)
    # (the tiny model's random 49k-row embedding caps how far its loss can fall: ~0.15 nats here)
    assert mean_loss(m) < before - 0.1
    assert res["steps"] == 12 and res["epochs"] == 6.0
    assert res["tokens"] < res["tokens_plain"]  # the prefix ran once per batch
    with open(tmp_path / "log.csv") as f:
        log = list(csv.DictReader(f))
    assert [int(r["step"]) for r in log] == list(range(1, 13))
    assert all(float(r["loss"]) > 0 and int(r["completion_tokens"]) > 0 for r in log)
    # the same loop with the per-row loss ends at the same weights: equal over a whole run, not one batch
    monkeypatch.setattr(prefix, "batch_loss", lambda model, batch, pad_id: batch_loss_per_row(model, batch))
    ref = fresh()
    train_lora(ref, tok, examples, steps=12, batch_size=2, learning_rate=3e-2, seed=0, progress=False)
    got = {n: p for n, p in m.named_parameters() if p.requires_grad}
    for n, p in ref.named_parameters():
        if p.requires_grad:
            assert torch.allclose(got[n], p, rtol=1e-3, atol=1e-5), n
    monkeypatch.undo()
    stopped = train_lora(fresh(), tok, examples, steps=12, batch_size=2, learning_rate=3e-2, seed=0,
                         progress=False, should_stop=lambda s: s >= 3)
    assert stopped["steps"] == 3
    longest = max(len(ids) for ids, _ in data)
    short = train_lora(fresh(), tok, examples, steps=2, batch_size=2, learning_rate=3e-2, seed=0, progress=False,
                       max_length=longest - 1)
    assert short["n_dropped"] == sum(len(ids) == longest for ids, _ in data) >= 1
    with pytest.raises(ValueError, match="max_length=5"):
        train_lora(fresh(), tok, examples, steps=2, batch_size=2, learning_rate=3e-2, progress=False, max_length=5)


def test_length_grouped_batches_cover_every_row_once_per_epoch_with_less_padding(tiny, tmp_path, monkeypatch):
    """``batching="shuffled_length"``: the open-book row (a memory block: the longest) gets a batch with the other
    long row, the short closed-book rows share theirs; each epoch runs every row once, and the forward passes
    compute fewer padded tokens than random batches of the same rows do."""
    fresh, tok = tiny
    rows = ROWS + [dict(ROWS[3], input="Who keeps a pet lobster?", response="Captain Perrow"),
                   dict(ROWS[0], input="What do quindles eat?", response="salt")]
    examples = sft_examples(rows, ROLE_SPECS["answer"].base)
    lengths = [len(ids) for ids, _ in tokenize_examples(tok, examples)]
    long_rows = sorted(range(len(rows)), key=lambda i: -lengths[i])[:2]
    assert min(lengths[i] for i in long_rows) > max(lengths[i] for i in range(len(rows)) if i not in long_rows)
    seen: list[list[int]] = []

    def spy(model, batch, pad_id):
        seen.append(sorted(len(ids) for ids, _ in batch))
        return orig(model, batch, pad_id)

    from mags_lib.training import prefix

    orig = prefix.batch_loss
    monkeypatch.setattr(prefix, "batch_loss", spy)
    grouped = train_lora(fresh(), tok, examples, steps=6, batch_size=2, learning_rate=1e-3, seed=0,
                         progress=False, batching="shuffled_length", log_path=tmp_path / "g.csv")
    monkeypatch.undo()
    assert grouped["epochs"] == 2.0
    for epoch in (seen[:3], seen[3:]):
        assert sorted(n for b in epoch for n in b) == sorted(lengths)  # every row once
        assert sorted(lengths[i] for i in long_rows) in epoch  # the two long rows together
    rand = train_lora(fresh(), tok, examples, steps=6, batch_size=2, learning_rate=1e-3, seed=0, progress=False)
    assert grouped["tokens_padded"] < rand["tokens_padded"]
    with open(tmp_path / "g.csv") as f:
        assert sum(int(r["padded_tokens"]) for r in csv.DictReader(f)) == grouped["tokens_padded"]
    with pytest.raises(ValueError, match="batching"):
        train_lora(fresh(), tok, examples, steps=1, batch_size=2, learning_rate=1e-3, progress=False, batching="x")


def test_the_anchor_regulariser_pulls_the_adapter_towards_the_base_model_on_general_text(tiny, tmp_path):
    """``anchor_weight``: each step adds the KL divergence from the model without its adapter on plain sentences;
    after the same training the adapted model is much closer to the base there than without the anchor."""
    import torch

    from mags_lib.training import prefix

    fresh, tok = tiny
    examples = sft_examples(ROWS, ROLE_SPECS["answer"].base)
    text = ["The train was late again, and the passengers waited on the platform.",
            "She keeps a small notebook in her bag to write down ideas."]
    ids = [tok(t)["input_ids"] for t in text]
    pad = tok.pad_token_id

    def kl(model):
        with torch.no_grad():
            return float(prefix._anchor_kl(model, ids, pad, False))

    plain = fresh()
    start = kl(plain)
    # random A and B: the adapter changes the model from the first step (the tiny random model's distributions
    # are near uniform, so the KL is ~0.01 nats against a task loss of ~10: hence the large weight)
    assert start > 0
    train_lora(plain, tok, examples, steps=8, batch_size=2, learning_rate=3e-2, seed=0, progress=False)
    anchored = fresh()
    train_lora(anchored, tok, examples, steps=8, batch_size=2, learning_rate=3e-2, seed=0, progress=False,
               anchor=text, anchor_weight=1000.0, log_path=tmp_path / "a.csv")
    assert kl(anchored) < 0.5 * min(kl(plain), start), (start, kl(plain), kl(anchored))
    with open(tmp_path / "a.csv") as f:
        logged = [float(r["anchor_kl"]) for r in csv.DictReader(f)]
    assert len(logged) == 8 and logged[-1] < logged[0]
    with pytest.raises(ValueError, match="anchor"):
        train_lora(fresh(), tok, examples, steps=1, batch_size=2, learning_rate=1e-3, progress=False, anchor_weight=1.0)


def test_a_completion_that_cannot_be_separated_is_a_clear_error(tiny):
    _, tok = tiny
    with pytest.raises(ValueError, match="completion"):
        tokenize_examples(tok, [{"prompt": [{"role": "user", "content": "hi"}], "completion": []}])


def test_consolidation_trainer_adapts_only_the_chosen_layers(tiny, tmp_path):
    """The consolidation path (mags_lib.consolidation._train_shared_prefix) on the tiny model: with
    ``layers=(1,)`` the saved PEFT adapter holds layer 1's LoRA weights only; its meta and log are written."""
    import json

    from safetensors.torch import load_file

    from mags_lib.consolidation import _train_shared_prefix
    from mags_lib.training import LoraSpec, SFTConfig, TrainConfig

    base = make_tiny_llama(tmp_path / "base")
    tcfg = TrainConfig(role="answer", profile="default", seed=0, lora=LoraSpec(r=4, alpha=8),
                       sft=SFTConfig(max_steps=3, batch_size=2, learning_rate=1e-3, n_generated=0), grpo=None,
                       n_eval=0, threads=1)
    notes = []
    metrics = _train_shared_prefix(tcfg, ROWS, tmp_path / "v1", base_dir=base, prompt=ROLE_SPECS["answer"].base,
                                   layers=(1,), progress=False, note=notes.append)
    assert metrics["steps"] == 3
    keys = list(load_file(str(tmp_path / "v1" / "adapter_model.safetensors")))
    assert keys and all(".layers.1." in k for k in keys), keys
    meta = json.loads((tmp_path / "v1" / "meta.json").read_text())
    assert meta["layers"] == [1] and meta["train_metrics"]["steps"] == 3
    assert len((tmp_path / "v1" / "log.csv").read_text().splitlines()) == 4
    with pytest.raises(ValueError, match="decoder layers"):
        _train_shared_prefix(tcfg, ROWS, tmp_path / "v2", base_dir=base, prompt=ROLE_SPECS["answer"].base,
                             layers=(5,), progress=False, note=notes.append)


def test_random_batches_never_hold_a_row_twice_and_the_rates_count_the_rows_run(tiny, monkeypatch):
    """``batching="random"`` with 3 rows in batches of 2: an epoch's leftover row opens the next epoch's first batch,
    filled from the new epoch with another row (it used to be filled with the new permutation's head, the same row
    for seed 1: batches [[1, 2], [0, 0], [2, 1]]). Rows dividing evenly keep the plain order: consecutive slices of
    each epoch's permutation. Fewer rows than ``batch_size``: each step runs all of them once, and ``epochs`` and
    ``rows_per_s`` count those rows, not ``steps * batch_size``."""
    import numpy as np

    from mags_lib.training import prefix

    fresh, tok = tiny
    seen: list[list[int]] = []
    orig = prefix.batch_loss

    def spy(model, batch, pad_id):
        seen.append([data.index(row) for row in batch])
        return orig(model, batch, pad_id)

    monkeypatch.setattr(prefix, "batch_loss", spy)
    m = fresh()
    examples = sft_examples(ROWS[:3], ROLE_SPECS["answer"].base)
    data = tokenize_examples(tok, examples)
    for seed in range(4):
        seen.clear()
        res = train_lora(m, tok, examples, steps=3, batch_size=2, learning_rate=1e-3, seed=seed, progress=False)
        assert all(len(b) == len(set(b)) == 2 for b in seen), (seed, seen)
        assert sorted(i for b in seen for i in b) == [0, 0, 1, 1, 2, 2], (seed, seen)  # two whole epochs
        assert res["epochs"] == 2.0
    seen.clear()
    res = train_lora(m, tok, examples, steps=2, batch_size=8, learning_rate=1e-3, seed=0, progress=False)
    assert [sorted(b) for b in seen] == [[0, 1, 2], [0, 1, 2]]
    assert res["epochs"] == 2.0  # 6 rows run over 3 rows (was 2 * 8 / 3 = 5.33)
    assert res["rows_per_s"] / res["tokens_per_s"] == pytest.approx(6 / res["tokens"], rel=0.02)
    # rows dividing evenly: the batches are consecutive slices of each epoch's permutation, as before
    examples = sft_examples(ROWS, ROLE_SPECS["answer"].base)
    data = tokenize_examples(tok, examples)
    seen.clear()
    train_lora(m, tok, examples, steps=6, batch_size=2, learning_rate=1e-3, seed=5, progress=False)
    rng = np.random.default_rng([5, 7])
    flat = [int(i) for _ in range(3) for i in rng.permutation(4)]
    assert seen == [flat[k:k + 2] for k in range(0, 12, 2)]


def test_train_lora_refuses_no_steps_no_rows_per_batch_and_no_examples(tiny):
    fresh, tok = tiny
    m = fresh()
    examples = sft_examples(ROWS, ROLE_SPECS["answer"].base)
    for batching in ("random", "shuffled_length"):
        with pytest.raises(ValueError, match="steps and batch_size must be >= 1"):
            train_lora(m, tok, examples, steps=0, batch_size=2, learning_rate=1e-3, progress=False, batching=batching)
        with pytest.raises(ValueError, match="steps and batch_size must be >= 1"):
            train_lora(m, tok, examples, steps=2, batch_size=0, learning_rate=1e-3, progress=False, batching=batching)
    with pytest.raises(ValueError, match="no training examples"):
        train_lora(m, tok, [], steps=2, batch_size=2, learning_rate=1e-3, progress=False)


def test_anchor_texts_of_one_token_are_left_out_and_none_left_is_a_clear_error(tiny, tmp_path):
    """A one-token anchor text predicts nothing: a step that drew only such texts used to index with an empty float
    tensor (IndexError). They are left out; when none is left, train_lora and ``_anchor_kl`` say so."""
    import math

    from mags_lib.training import prefix

    fresh, tok = tiny
    assert len(tok("A")["input_ids"]) == 1 and len(tok("")["input_ids"]) == 0
    examples = sft_examples(ROWS, ROLE_SPECS["answer"].base)
    text = "The train was late again, and the passengers waited on the platform."
    train_lora(fresh(), tok, examples, steps=2, batch_size=2, learning_rate=1e-3, seed=0, progress=False,
               anchor=["A", text], anchor_weight=1.0, anchor_per_step=1, log_path=tmp_path / "a.csv")
    with open(tmp_path / "a.csv") as f:
        logged = [float(r["anchor_kl"]) for r in csv.DictReader(f)]
    assert len(logged) == 2 and all(math.isfinite(v) and v >= 0 for v in logged)
    with pytest.raises(ValueError, match="anchor: none of the 2 anchor texts"):
        train_lora(fresh(), tok, examples, steps=1, batch_size=2, learning_rate=1e-3, progress=False,
                   anchor=["A", ""], anchor_weight=1.0)
    with pytest.raises(ValueError, match="2 or more tokens"):
        prefix._anchor_kl(fresh(), [tok("A")["input_ids"]] * 2, tok.pad_token_id, False)
