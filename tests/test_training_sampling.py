"""The warm start's batch order (mags_lib.training.sampling): similar lengths per batch, batches shuffled."""

from __future__ import annotations

import random

import pytest
import torch

from mags_lib.training import SFTConfig
from mags_lib.training.sampling import ShuffledLengthSampler, length_batches


def _lengths(n=1200, empty_share=0.1, seed=0):
    """Row lengths like the write role's: a tenth of the rows are the shortest (empty answers)."""
    rng = random.Random(seed)
    return [rng.randint(5, 8) if rng.random() < empty_share else rng.randint(40, 480) for _ in range(n)]


def test_every_row_once_in_batches_of_similar_lengths():
    lengths = _lengths()
    batches = length_batches(lengths, 8, seed=0)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(lengths)))
    assert all(len(b) == 8 for b in batches)
    # each batch is a slice of its mega-batch sorted by length: far less spread than a random batch
    spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches) / len(batches)
    shuffled = list(range(len(lengths)))
    random.Random(2).shuffle(shuffled)
    rnd = [shuffled[k:k + 8] for k in range(0, len(shuffled), 8)]
    random_spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in rnd) / len(rnd)
    assert spread < 0.2 * random_spread, (spread, random_spread)


def test_the_shortest_rows_are_spread_over_training_not_at_the_end_of_each_block():
    """transformers' LengthGroupedSampler puts them in the last batches of every 50-batch block."""
    lengths = _lengths()
    batches = length_batches(lengths, 8, seed=0)
    short = [p for p, b in enumerate(batches) if max(lengths[i] for i in b) <= 8]
    assert len(short) >= 10
    inside = [p for p in short if p % 50 < 44]  # not in the block's last batches
    assert len(inside) >= 0.6 * len(short), short
    # and they reach the first and the last third of the run
    n = len(batches)
    assert min(short) < n / 3 and max(short) > 2 * n / 3, short


def test_longest_batch_first_short_tail_last_and_one_order_per_seed_and_epoch():
    lengths = _lengths(n=803)
    batches = length_batches(lengths, 8, seed=5)
    assert max(lengths[i] for i in batches[0]) == max(lengths)
    assert len(batches[-1]) == 803 % 8 and all(len(b) == 8 for b in batches[:-1])
    assert batches == length_batches(lengths, 8, seed=5)
    assert batches != length_batches(lengths, 8, seed=5, epoch=1)
    assert batches != length_batches(lengths, 8, seed=6)
    assert length_batches([], 8, seed=0) == []
    assert length_batches([3], 8, seed=0) == [[0]]
    with pytest.raises(ValueError, match="batch_size"):
        length_batches(lengths, 0, seed=0)


def test_a_dataloader_over_the_sampler_yields_exactly_those_batches_per_epoch():
    lengths = _lengths(n=300)
    sampler = ShuffledLengthSampler(lengths, 8, seed=3)
    loader = torch.utils.data.DataLoader(list(range(len(lengths))), sampler=sampler, batch_size=8)
    assert len(sampler) == len(lengths)
    assert [b.tolist() for b in loader] == length_batches(lengths, 8, seed=3)
    sampler.set_epoch(2)
    assert [b.tolist() for b in loader] == length_batches(lengths, 8, seed=3, epoch=2)


def test_batching_is_validated_and_shuffled_length_is_the_default():
    assert SFTConfig().batching == "shuffled_length"
    with pytest.raises(ValueError, match="batching must be one of"):
        SFTConfig(batching="by_length")


def test_a_config_written_before_batching_existed_reads_as_what_it_ran():
    from mags_lib.training import TrainConfig, profile_config

    old = profile_config("write", "smoke").to_dict()
    for flag, batching in ((True, "sorted_length"), (False, "random")):
        d = {**old, "sft": {k: v for k, v in old["sft"].items() if k != "batching"} | {"group_by_length": flag}}
        assert TrainConfig.from_dict(d).sft.batching == batching


def test_the_default_writer_trains_on_random_batches_with_the_row_mean():
    """The recipe the README's write probes chose for the writer; the roles it was not probed on keep theirs."""
    from mags_lib.training.config import profile_config

    got = {r: (profile_config(r, "default").sft.batching, profile_config(r, "default").sft.loss_average)
           for r in ("ask", "write", "answer")}
    assert got == {"ask": ("shuffled_length", "token"), "write": ("random", "sequence"),
                   "answer": ("shuffled_length", "token")}


def test_sorted_length_is_transformers_order_seeded_by_seed_and_epoch():
    from transformers.trainer_pt_utils import get_length_grouped_indices

    from mags_lib.training.sampling import SortedLengthSampler

    lengths = _lengths(n=300)
    s = SortedLengthSampler(lengths, 8, seed=3)
    first = list(s)
    assert first == list(s)  # the same epoch, the same order: what a resumed run skips through
    g = torch.Generator().manual_seed(3 * 1_000_003)
    assert first == get_length_grouped_indices(lengths, 8, generator=g)  # transformers' own order
    s.set_epoch(1)
    assert list(s) != first and sorted(s) == sorted(first)


def test_the_longest_row_leads_even_when_the_last_mega_batch_is_shorter_than_a_batch():
    """A last mega-batch of fewer than ``batch_size`` rows is the short batch; it used to be set aside before the
    first batch was chosen, so when it held the longest row that batch came last (an out-of-memory error at the
    end of the epoch, not at step 1). Now it joins the mega-batch before it: the longest row leads, the short
    batch stays last (a DataLoader of that batch size cuts the flat order back into these batches), every row
    once, one order per (seed, epoch)."""
    lengths = [24, 81, 2, 68, 99, 90, 2, 44, 88, 60, 18, 29, 16, 89, 18, 78, 23, 57, 53, 42, 86, 56, 18, 40, 21, 16]
    batches = length_batches(lengths, 4, seed=3, epoch=2, mega_batches=3)
    assert max(lengths[i] for i in batches[0]) == max(lengths) == 99
    assert [len(b) for b in batches] == [4] * 6 + [2]
    for trial in range(1500):
        r = random.Random(trial)
        n, bs, mb = r.randint(1, 60), r.randint(1, 9), r.randint(1, 4)
        lengths = [r.randint(1, 100) for _ in range(n)]
        seed, epoch = r.randint(0, 5), r.randint(0, 3)
        b = length_batches(lengths, bs, seed=seed, epoch=epoch, mega_batches=mb)
        flat = [i for x in b for i in x]
        key = (n, bs, mb, seed, epoch)
        assert sorted(flat) == list(range(n)), key
        assert max(lengths[i] for i in b[0]) == max(lengths), key
        assert [flat[k:k + bs] for k in range(0, n, bs)] == b, key  # full batches, a short one only last
        assert b == length_batches(lengths, bs, seed=seed, epoch=epoch, mega_batches=mb), key
