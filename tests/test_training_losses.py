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
