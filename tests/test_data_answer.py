"""The answer role's examples (mags_lib.data.answer): the memory block is ordered as the agent shows it.

The agent lists recalled items with the dated ones oldest first (tests/test_agent.py); the reader is
trained on the same order, so in a ``newest`` example the current value is the later line.
"""

from __future__ import annotations

import numpy as np
import pytest

from mags_lib.data.answer import ANSWER_KINDS, render_answer
from mags_lib.data.worlds import generate_world
from mags_lib.graph.values import chronological_order, time_order_key


@pytest.fixture(scope="module")
def world():
    return generate_world("w0", seed=3)


@pytest.mark.parametrize("kind", sorted(ANSWER_KINDS))
def test_dated_items_are_listed_oldest_first(world, kind):
    """Mutation: render_answer leaves the memory in the order the kinds build it (fails for every kind that
    places items at random)."""
    n_dated = n_multi = 0
    for seed in range(40):
        try:
            row = render_answer(world, kind, np.random.default_rng(seed))
        except LookupError:
            continue
        keys = [time_order_key(m["time"]) for m in row["memory"]]
        dated = [k for k in keys if k is not None]
        assert dated == sorted(dated), (kind, seed, [m["time"] for m in row["memory"]])
        n_dated += bool(dated)
        n_multi += len(dated) >= 2
    assert n_dated >= 10 or kind == "empty"
    assert n_multi >= 5 or kind in ("empty", "superseded_only", "unanswerable")


def test_in_a_newest_example_the_current_value_is_the_later_line(world):
    for seed in range(30):
        row = render_answer(world, "newest", np.random.default_rng(seed))
        subject, label, _ = row["gold_facts"][0]
        same = [i for i, m in enumerate(row["memory"]) if m["text"].startswith(f"{subject} {label} ")]
        assert len(same) == 2, row["memory"]
        assert row["memory"][same[1]]["text"].endswith(row["response"]), (seed, row["memory"])


def test_chronological_order_reads_every_date_style_and_keeps_undated_items_in_place():
    times = ["1:56 pm on 8 May, 2023", None, "2023-05-08", "8 April 2023", "not a date", "2022-12-31T23:59"]
    order = chronological_order(times)
    assert sorted(order) == list(range(len(times)))
    assert order[1] == 1 and order[4] == 4  # undated and unreadable items stay where they were
    assert [times[i] for i in order if i not in (1, 4)] == ["2022-12-31T23:59", "8 April 2023", "2023-05-08",
                                                           "1:56 pm on 8 May, 2023"]
    assert chronological_order([]) == [] and chronological_order([None, None]) == [0, 1]
