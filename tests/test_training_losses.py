"""The warm start's loss average (``SFTConfig.loss_average``, :mod:`mags_lib.training.losses`).

The loss a stage logs at its first step (the LoRA's B matrices start at zero, so the model is still
the base) is recomputed here from the base model's own next-token losses on the completion tokens,
once as TRL's token mean and once as the mean of per-row means: each mode must log its own figure.
"""

from __future__ import annotations

import csv
import math

import pytest
import torch
from fakes import make_tiny_llama

from mags_lib.roles import ROLE_SPECS
from mags_lib.training import LoraSpec, SFTConfig, TrainConfig
from mags_lib.training.losses import sequence_mean
from mags_lib.training.run import _chat_ids, sft_examples, train_stage

ROWS = [{"input": "ok thanks", "response": ""},  # an empty gold: a two-token completion
        {"input": "Blorps eat lemons. Their queen is Mira.",
         "response": "<memory_write>Blorps,eat,lemons</memory_write><memory_write>Blorps,are led by,Mira"
                     "</memory_write>"}]


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    return make_tiny_llama(tmp_path_factory.mktemp("tiny_base_losses"))


def _row_losses(base) -> list[tuple[float, int]]:
    """(summed completion-token loss, completion tokens) per row, from the base model itself."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(base))
    model = AutoModelForCausalLM.from_pretrained(str(base)).eval()
    out = []
    for ex in sft_examples(ROWS, ROLE_SPECS["write"].trained):
        prompt = _chat_ids(tok, ex["prompt"], add_generation_prompt=True)
        full = _chat_ids(tok, ex["prompt"] + ex["completion"])
        assert full[:len(prompt)] == prompt
        with torch.no_grad():
            logits = model(torch.tensor([full])).logits[0]
        logp = torch.log_softmax(logits[:-1].float(), -1)
        nll = -logp[torch.arange(len(full) - 1), torch.tensor(full[1:])]
        out.append((nll[len(prompt) - 1:].sum().item(), len(full) - len(prompt)))
    return out


def _first_logged_row(base, tmp, mode: str) -> dict:
    cfg = TrainConfig(role="write", profile="smoke", seed=0, lora=LoraSpec(r=4, alpha=8),
                      sft=SFTConfig(max_steps=1, batch_size=2, save_steps=1, learning_rate=1e-3, n_generated=0,
                                    loss_average=mode), threads=1)
    train_stage("sft", cfg, ROWS, tmp / mode, base_dir=base, prompt=ROLE_SPECS["write"].trained,
                data_hashes={"t": "1"}, progress=False, note=lambda s: None)
    with open(tmp / mode / "log.csv") as f:
        return [r for r in csv.DictReader(f) if r.get("loss")][0]


def test_each_loss_average_logs_its_own_mean_of_the_completion_tokens(tiny_base, tmp_path):
    rows = _row_losses(tiny_base)
    assert [n for _, n in rows][0] == 2 and rows[1][1] > 20  # <|im_end|> + newline against two triplets
    token = sum(s for s, _ in rows) / sum(n for _, n in rows)
    sequence = sum(s / n for s, n in rows) / len(rows)
    assert abs(token - sequence) > 1e-3  # the random tiny model's rows differ enough to tell the modes apart
    logged = {mode: _first_logged_row(tiny_base, tmp_path, mode) for mode in ("token", "sequence")}
    assert float(logged["token"]["loss"]) == pytest.approx(token, abs=2e-4)
    assert float(logged["sequence"]["loss"]) == pytest.approx(sequence, abs=2e-4)
    # the sequence mode logs what TRL's own loss logs beside it: tokens seen, token accuracy
    for key in ("num_tokens", "mean_token_accuracy"):
        assert float(logged["sequence"][key]) == pytest.approx(float(logged["token"][key])), key


def test_the_sequence_mean_on_hand_made_tokens():
    nll = torch.tensor([math.log(2), math.log(4), math.log(4)], requires_grad=True)
    rows = torch.tensor([0, 0, 2])  # row 0: two tokens, row 1: none (left out), row 2: one
    loss = sequence_mean(nll, rows, 3)
    assert loss.item() == pytest.approx(((math.log(2) + math.log(4)) / 2 + math.log(4)) / 2, abs=1e-6)
    loss.backward()
    assert nll.grad.tolist() == pytest.approx([0.25, 0.25, 0.5])  # the lone token weighs a whole row
    with pytest.raises(ValueError, match="every label is -100"):
        sequence_mean(torch.tensor([]), torch.tensor([], dtype=torch.long), 2)


def test_an_unknown_loss_average_is_refused():
    with pytest.raises(ValueError, match="loss_average must be one of"):
        SFTConfig(loss_average="row")


# -- padding left out of the forward pass (losses.length_chunks, completion_nll) -------------------------------


def _tiny_lm(seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                        pad_token_id=0))


def _padded_batch(lengths, prompt_lens, *, side="right", seed=1):
    """Random rows of the given lengths, padded to the longest; labels -100 on the prompt and the padding."""
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.zeros(len(lengths), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)
    for i, (n, p) in enumerate(zip(lengths, prompt_lens)):
        cols = slice(0, n) if side == "right" else slice(width - n, width)
        ids[i, cols] = torch.randint(1, 97, (n,), generator=g)
        mask[i, cols] = 1
        row = ids[i, cols].clone()
        row[:p] = -100
        labels[i, cols] = row
    return {"input_ids": ids, "attention_mask": mask}, labels


@pytest.mark.parametrize("lengths, slack, chunks", [
    ([40, 400, 38, 390, 100], 1.25, [[1, 3], [4], [0, 2]]),  # the long seed rows, one medium, the chatter
    ([40, 400, 38, 390, 100], None, [[1, 3, 4, 0, 2]]),      # one padded batch, longest first
    ([10, 10, 10], 1.0, [[0, 1, 2]]),                        # equal lengths never split
    ([12, 10, 0], 1.0, [[0], [1]]),                          # an all-padding row is left out
    ([100, 60, 30], 1.5, [[0, 1], [2]]),                     # 200 <= 1.5 x 160, but 300 > 1.5 x 190
    ([], 1.25, []),
])
def test_length_chunks_group_rows_of_similar_length(lengths, slack, chunks):
    from mags_lib.training.losses import length_chunks

    assert length_chunks(lengths, slack) == chunks


def test_length_chunks_refuses_a_slack_below_one():
    from mags_lib.training.losses import length_chunks

    with pytest.raises(ValueError, match="slack must be >= 1"):
        length_chunks([3, 2], 0.9)


@pytest.mark.parametrize("side", ["right", "left"])
def test_the_chunked_loss_and_gradients_are_those_of_the_padded_batch(side):
    """Mutations that fail here: the chunk's rows mapped back without ``idx`` (losses land on the wrong
    rows), the labels not cut to the chunk's width, the chunk cut before its longest row's end."""
    from mags_lib.training.losses import completion_nll, sequence_mean_loss

    lengths, prompts = [9, 61, 23, 60, 5, 33], [4, 40, 15, 41, 3, 20]
    inputs, labels = _padded_batch(lengths, prompts, side=side)
    model = _tiny_lm()
    seen: list[int] = []
    hook = model.get_input_embeddings().register_forward_hook(lambda m, a, out: seen.append(a[0].numel()))
    grads, losses = {}, {}
    for slack in (None, 1.0, 1.25):
        model.zero_grad()
        seen.clear()
        loss, counts = sequence_mean_loss(model, inputs, labels, slack=slack)
        loss.backward()
        losses[slack], grads[slack] = loss.item(), [p.grad.clone() for p in model.parameters()]
        assert counts["n_tokens"] == sum(n - p for n, p in zip(lengths, prompts))
        if slack is None:
            assert seen == [len(lengths) * max(lengths)]  # the padded batch, as the collator made it
        elif side == "right":
            assert sum(seen) < 0.7 * len(lengths) * max(lengths)  # the padding is not computed
        if slack == 1.0 and side == "right":
            assert sum(seen) == sum(lengths)  # every length its own chunk: 122 > 1.0 x (61 + 60)
    hook.remove()
    for slack in (1.0, 1.25):
        assert losses[slack] == pytest.approx(losses[None], rel=1e-5)
        for a, b in zip(grads[slack], grads[None]):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    # each row's tokens stay with their row: the per-row mean of the chunked losses, row by row
    nll, rows, _ = completion_nll(model, inputs, labels, slack=1.0)
    with torch.no_grad():
        for i, (n, p) in enumerate(zip(lengths, prompts)):
            one = {k: v[i:i + 1] for k, v in inputs.items()}
            ref, ref_rows, _ = completion_nll(model, one, labels[i:i + 1], slack=None)
            assert (ref_rows == 0).all() and len(ref) == n - p
            torch.testing.assert_close(nll[rows == i].detach(), ref, rtol=1e-4, atol=1e-5)


# -- the tokens every row begins with run once (losses.shared_prefix_len, completion_nll(share_prefix=True)) ----


def _prefixed_batch(prefix_len, lengths, prompt_lens, *, side="right", seed=2):
    """:func:`_padded_batch` whose rows all begin with the same ``prefix_len`` tokens (a system prompt)."""
    inputs, labels = _padded_batch(lengths, prompt_lens, side=side, seed=seed)
    common = torch.randint(1, 97, (prefix_len,), generator=torch.Generator().manual_seed(seed + 1))
    width = inputs["input_ids"].shape[1]
    for i, n in enumerate(lengths):
        start = 0 if side == "right" else width - n
        inputs["input_ids"][i, start:start + prefix_len] = common
    return inputs, labels


@pytest.mark.parametrize("loss", ["sequence", "token"])
@pytest.mark.parametrize("side", ["right", "left"])
def test_the_shared_prefix_runs_once_with_the_losses_and_gradients_of_whole_rows(side, loss):
    """Mutations that fail here: the cache not expanded to the chunk's rows (a shape error), the suffix's
    positions restarted at 0 (other losses), the labels not shifted by the prefix (other losses), the prefix
    run past a row's first scored output (the row loses a token: ``n_tokens``)."""
    from mags_lib.training.losses import sequence_mean_loss, token_mean_loss

    lengths, prompts = [30, 31, 44, 29, 52, 33], [20, 18, 30, 17, 35, 22]  # the first 16 tokens shared
    inputs, labels = _prefixed_batch(16, lengths, prompts, side=side)
    model = _tiny_lm()
    fn = sequence_mean_loss if loss == "sequence" else token_mean_loss
    seen: list[int] = []
    hook = model.get_input_embeddings().register_forward_hook(lambda m, a, out: seen.append(a[0].numel()))
    out = {}
    for share in (False, True):
        model.zero_grad()
        seen.clear()
        value, counts = fn(model, inputs, labels, share_prefix=share)
        value.backward()
        out[share] = (value.item(), [p.grad.clone() for p in model.parameters()], counts, sum(seen))
    hook.remove()
    assert out[True][2] == out[False][2]  # every completion token counted, each as right or wrong as before
    assert out[True][2]["n_tokens"] == sum(n - p for n, p in zip(lengths, prompts))
    assert out[True][0] == pytest.approx(out[False][0], rel=1e-5)
    for a, b in zip(out[True][1], out[False][1]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    if side == "right":  # the shared 16 tokens went through once per chunk instead of once per row
        assert out[True][3] <= out[False][3] - 16 * (len(lengths) - 2)
    else:  # left padding: the rows begin at different positions, nothing is shared
        assert out[True][3] == out[False][3]


def test_the_shared_prefix_stops_before_the_first_scored_output():
    from mags_lib.training.losses import shared_prefix_len

    inputs, labels = _prefixed_batch(16, [30, 24, 40], [20, 12, 25])
    # row 1's first completion token (position 12) is predicted by the output at 11
    assert shared_prefix_len(inputs["input_ids"], labels, inputs["attention_mask"]) == 11
    inputs, labels = _prefixed_batch(16, [30, 24, 40], [20, 18, 25])
    assert shared_prefix_len(inputs["input_ids"], labels, inputs["attention_mask"]) == 16
    # a row padded inside the shared span (it is shorter than the prefix) ends the prefix at its end
    mask = inputs["attention_mask"].clone()
    mask[1, 10:] = 0
    assert shared_prefix_len(inputs["input_ids"], labels, mask) == 10
    assert shared_prefix_len(inputs["input_ids"][:1], labels[:1]) == 0


def test_under_activation_checkpointing_the_rows_run_whole():
    """A model that checkpoints its activations returns no key/value cache in training mode (Unsloth's does so
    too): the chunk's rows then run whole, with the same loss, instead of failing on the missing cache."""
    from mags_lib.training.losses import sequence_mean_loss

    inputs, labels = _prefixed_batch(16, [30, 31, 44], [20, 18, 30])
    model = _tiny_lm()
    model.gradient_checkpointing_enable()
    model.train()
    shared, _ = sequence_mean_loss(model, inputs, labels, share_prefix=True)
    whole, _ = sequence_mean_loss(model, inputs, labels, share_prefix=False)
    assert shared.item() == pytest.approx(whole.item(), rel=1e-6)
