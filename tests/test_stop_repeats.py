"""Decoding that ends at the first repeated tag (``Backend.generate(stop_repeats=True)``): the cut, the memo
key, and the plumbing of the agent and the evaluation. The real models' early stop: tests/test_backends.py."""

from __future__ import annotations

import pytest
from fakes import TableBackend

from mags_lib.agent import MAGS, MAGSConfig
from mags_lib.backends import GenerationMemo, generation_memo
from mags_lib.backends.base import cut_at_repeat, first_repeat
from mags_lib.evaluate import EvalConfig, evaluate_sets
from mags_lib.roles import ROLE_SPECS

T1 = "<memory_write>Gus,is,a lobster</memory_write>"
T2 = "<memory_write>Gus,lives in,a tank</memory_write>"
# a warm-started writer's loop on a long input: one triplet again and again, cut off by the budget mid-tag
LOOP = T1 + T2 + T2 + T2 + "<memory_write>Gus,lives i"


def test_first_repeat_is_the_first_verbatim_repeat_of_an_element():
    assert first_repeat(LOOP) == len(T1 + T2)
    assert cut_at_repeat(LOOP) == (T1 + T2, True)
    assert cut_at_repeat(T1 + T2) == (T1 + T2, False)
    # another tag name, another field, a space: not the same element
    assert first_repeat(T1 + T1.replace("memory_write", "memory_ask")) is None
    assert first_repeat(T1 + T1.replace("lobster", "lobster ")) is None
    # text between the elements does not matter; an A B A cycle ends at the second A
    assert cut_at_repeat(f"{T1}\n{T2}\n{T1}\n{T2}") == (f"{T1}\n{T2}\n", True)
    assert first_repeat("") is None and first_repeat("no tags at all, only </memory_write>") is None


def test_every_backend_cuts_the_text_and_the_memo_keeps_both_kinds_apart():
    b = TableBackend({"loop": LOOP})  # a backend that cannot stop early: generate() still cuts
    assert not b.stops_at_repeats
    free, cut = (b.generate([[{"role": "user", "content": "loop"}]], stop_repeats=s)[0].text for s in (False, True))
    assert free == LOOP and cut == T1 + T2
    with generation_memo(GenerationMemo()) as memo:
        for s in (False, True, False, True):
            b.generate(["loop"], stop_repeats=s)
    assert memo.stats()["misses"] == 2 and memo.stats()["hits"] == 2
    with pytest.raises(TypeError, match="stop_repeats"):
        b.generate(["loop"], stop_repeats="yes")


def test_the_roles_with_tags_stop_at_repeats_the_reader_does_not():
    assert {r: (s.base.stop_repeats, s.trained.stop_repeats) for r, s in ROLE_SPECS.items()} == {
        "ask": (True, True), "write": (True, True), "answer": (False, False)}


@pytest.mark.parametrize("stop_repeats", [True, False])
def test_the_agent_stores_what_came_before_the_loop(stop_repeats, tmp_path):
    write = TableBackend({"Gus": LOOP})
    m = MAGS(MAGSConfig(maintain_every=0, embedder="hash", grammar=False, stop_repeats=stop_repeats),
             backends={"write": write})
    o = m.observe("Gus is a lobster and lives in a tank.", source="S1")
    assert o.extraction.text == (T1 + T2 if stop_repeats else LOOP)
    assert o.extraction.adherent is stop_repeats  # cut off mid-tag: not the strict format
    assert sorted(o.triplets) == [("Gus", "is", "a lobster"), ("Gus", "lives in", "a tank")]
    # the setting is saved with the memory and read back
    m.save(tmp_path / "mem")
    with MAGS.load(tmp_path / "mem", backends={"write": write}) as m2:
        assert m2.config.stop_repeats is stop_repeats
        assert m2.observe("Gus again.", source="S2").extraction.text == o.extraction.text


def test_the_evaluation_decodes_as_configured_and_caches_each_apart(tmp_path):
    row = {"id": "r1", "role": "write", "kind": "single", "input": "Gus is a lobster and lives in a tank.",
           "response": T1 + T2}
    backend = TableBackend({"Gus": LOOP})
    tables = {}
    for stop_repeats in (True, False, True):
        cfg = EvalConfig(modes=("free",), embedder="hash", n_per_set=0, stop_repeats=stop_repeats)
        tables[stop_repeats] = evaluate_sets({"w": [row]}, tmp_path, cfg, backend=backend, progress=False)
    assert tables[True]["adherence"].tolist() == [1.0] and tables[True]["exact_f1"].tolist() == [1.0]
    assert tables[False]["adherence"].tolist() == [0.0]  # the loop, cut off mid-tag by the budget
    assert len(backend.calls) == 3  # decoded anew for each setting (a cache keyed without it would hold 1)
