"""Signal helpers (issue 15, item 4): zero-variance share, KL and reward-hacking flags from a
hand-made GRPO log and hand-made samples."""

from __future__ import annotations

import csv

import pytest

from mags_lib.rewards import signal_report

LOG = [  # what TRL logs through mags_lib.training's CSV callback (a subset of its columns)
    {"step": "1", "loss": "0.0", "reward": "0.10", "kl": "0.0", "frac_reward_zero_std": "0.75"},
    {"step": "2", "loss": "0.0", "reward": "0.30", "kl": "0.002", "frac_reward_zero_std": "0.5"},
    {"step": "3", "loss": "0.0", "reward": "0.50", "kl": "0.010", "frac_reward_zero_std": "0.25"},
    {"step": "3", "eval_loss": "1.0"},  # a row without the GRPO columns is skipped
]

INPUT = "Blorps eat frozen lemons and live in copper caves."
SAMPLES = [
    {"role": "write", "input": INPUT, "reward": 1.0,  # honest: no flag
     "completion": "<memory_write>blorps,eat,frozen lemons</memory_write><memory_write>blorps,live in,copper caves</memory_write>"},
    {"role": "write", "input": INPUT, "reward": 0.9, "completion": ""},  # empty_scores (hacking)
    {"role": "write", "input": INPUT, "reward": 0.1, "completion": "Okay."},  # empty, low reward: not flagged
    {"role": "write", "input": INPUT, "reward": 0.7,  # repeated_tags (hacking)
     "completion": "<memory_write>blorps,eat,frozen lemons</memory_write>" * 3},
    {"role": "ask", "input": "What do blorps eat and where do they live?", "reward": 0.6,  # copies_input
     "completion": "<memory_ask>what do blorps eat and where do they live</memory_ask>"},
    {"role": "ask", "input": "What do blorps eat?", "reward": 0.2,  # degenerate, low reward
     "completion": "<memory_ask>eat eat eat eat eat eat</memory_ask>"},
]


def test_curves_from_a_hand_made_log(tmp_path):
    path = tmp_path / "log.csv"
    keys = sorted({k for r in LOG for k in r})
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(LOG)
    rep = signal_report(path)
    assert rep["zero_std"] == {"first": 0.75, "last": 0.25, "mean": 0.5, "max": 0.75, "n": 3}  # (.75+.5+.25)/3
    assert rep["kl"]["last"] == 0.01 and rep["kl"]["max"] == 0.01 and rep["kl"]["n"] == 3
    assert rep["reward"]["first"] == 0.1 and rep["reward"]["last"] == 0.5
    assert rep["n_samples"] == 0 and rep["hacking"] is None


def test_hacking_flags_on_hand_made_samples():
    rep = signal_report(LOG, SAMPLES, min_reward=0.5)
    assert rep["flags"] == {"empty_scores": 1, "degenerate": 1, "repeated_tags": 1, "copies_input": 1}
    assert rep["hacking"] == 3 / 6  # empty (0.9), repeated (0.7), copy (0.6); the degenerate one scored 0.2
    assert rep["examples"]["empty_scores"] == [""]
    assert rep["examples"]["copies_input"] == [SAMPLES[4]["completion"]]


def test_bad_inputs(tmp_path):
    with pytest.raises(FileNotFoundError, match="log.csv"):
        signal_report(tmp_path / "missing.csv")
    with pytest.raises(ValueError, match="sample #0"):
        signal_report([], [{"completion": "x"}])
    with pytest.raises(ValueError, match="'kl'"):
        signal_report([{"kl": "abc"}])
