"""Rendering worlds into examples: ground truth that parses, every kind, variety, sizes."""

from collections import Counter

import numpy as np
import pytest

from mags_lib import protocol
from mags_lib.data import ASK_KINDS, WRITE_KINDS, GenerationConfig, generate_role_splits, render_example
from mags_lib.data.render import gibberish
from mags_lib.data.stats import distinct_ngram_ratio
from mags_lib.data.worlds import NameRegistry, generate_worlds

COLUMNS = {"id", "role", "kind", "input", "response", "ops", "n_ops", "world_id", "template_ids", "context",
           "gold_facts", "source"}


@pytest.fixture(scope="module")
def worlds():
    return generate_worlds(12, seed=0, registry=NameRegistry())


@pytest.fixture(scope="module")
def rows():
    cfg = GenerationConfig(n_train=600, n_validation=60, n_test=60, worlds_train=40, worlds_validation=6,
                           worlds_test=6, seed=11)
    return generate_role_splits(cfg, progress=False)[0]


@pytest.mark.parametrize("role,kind", [("write", k) for k in WRITE_KINDS] + [("ask", k) for k in ASK_KINDS])
def test_every_kind_renders_parsable_ground_truth(worlds, role, kind):
    rng = np.random.default_rng(0)
    made = 0
    for w in worlds:
        try:
            ex = render_example(w, role, kind, rng)
        except LookupError:
            continue
        made += 1
        assert COLUMNS - {"id"} <= set(ex)  # ids are given by render_split
        parsed = protocol.parse(ex["response"], role=role, mode="strict")
        assert parsed.ok, parsed.problems
        assert len(parsed.ops) == ex["n_ops"] == len(ex["ops"])
        if role == "write":
            assert [list(t) for t in parsed.triplets] == [op["triplet"] for op in ex["ops"]]
        else:
            assert parsed.asks == [op["content"] for op in ex["ops"]]
        assert ex["input"].strip()
    assert made >= len(worlds) // 2, f"{role}/{kind} rendered only {made} times"


def test_empty_output_kinds(rows):
    for role, empty_kinds in (("write", {"noise", "question_only", "small_talk"}), ("ask", {"noise", "no_question"})):
        for r in rows[role]["train"]:
            assert (r["n_ops"] == 0) == (r["kind"] in empty_kinds), (r["kind"], r["input"], r["response"])


def test_write_gold_is_true_in_its_world_except_updates(worlds):
    rng = np.random.default_rng(1)
    for w in worlds:
        facts = {f.triplet for f in w.facts}
        for kind in ("single", "multi", "persona", "mixed", "distractor", "exchange"):
            try:
                ex = render_example(w, "write", kind, rng)
            except LookupError:
                continue
            assert all(tuple(t) in facts for t in ex["gold_facts"])
        for kind in ("update", "contradiction"):
            ex = render_example(w, "write", kind, rng)
            new = tuple(ex["gold_facts"][0])
            assert new not in facts  # the new value differs from the world's old one
            assert any((f.subject, f.label) == new[:2] for f in w.facts)


def test_ask_gold_facts_are_in_the_context(rows):
    for r in rows["ask"]["train"]:
        ctx = {tuple(t) for t in r["context"]}
        assert all(tuple(g) in ctx for g in r["gold_facts"])
        assert 0 < len(r["context"]) <= 12
        if r["kind"] == "multihop":
            assert len(r["gold_facts"]) == 2 and r["n_ops"] == 2
            # the second hop's subject is the first hop's object
            assert r["gold_facts"][1][0] == r["gold_facts"][0][2]


def test_exchange_does_not_rewrite_memory_facts(worlds):
    rng = np.random.default_rng(2)
    for w in worlds[:5]:
        ex = render_example(w, "write", "exchange", rng)
        memory = ex["input"].split("Memory:\n")[1].split("\nGenerated")[0]
        for t in ex["gold_facts"]:
            assert ",".join(t) not in memory


def test_sizes_distinct_inputs_and_kind_mix(rows):
    assert set(rows) == {"ask", "write", "answer"}
    for role in ("ask", "write"):  # the answer role: tests/test_data_answer.py
        assert [len(rows[role][s]) for s in ("train", "validation", "test")] == [600, 60, 60]
        inputs = [r["input"] for r in rows[role]["train"]]
        assert len(set(inputs)) == len(inputs)
        kinds = Counter(r["kind"] for r in rows[role]["train"])
        assert set(kinds) == set(WRITE_KINDS if role == "write" else ASK_KINDS)
        assert max(kinds.values()) / len(inputs) < 0.3


def test_template_variety(rows):
    for role in ("ask", "write"):
        used = Counter(t for r in rows[role]["train"] for t in r["template_ids"])
        assert len(used) >= 60  # many templates really used, none dominating
        assert used.most_common(1)[0][1] / sum(used.values()) < 0.1
        assert distinct_ngram_ratio([r["input"] for r in rows[role]["train"]], 2) > 0.2


def test_generation_is_deterministic_per_seed():
    cfg = {"n_train": 50, "n_validation": 5, "n_test": 5, "worlds_train": 5, "worlds_validation": 2, "worlds_test": 2}
    a = generate_role_splits(GenerationConfig(**cfg, seed=1), progress=False)[0]
    b = generate_role_splits(GenerationConfig(**cfg, seed=1), progress=False)[0]
    c = generate_role_splits(GenerationConfig(**cfg, seed=2), progress=False)[0]
    assert a == b
    assert a["write"]["train"] != c["write"]["train"]


def test_gibberish_never_contains_vowel_words():
    rng = np.random.default_rng(0)
    for _ in range(200):
        text, tid = gibberish(rng)
        assert tid.startswith("noise.")
        if tid == "noise.clusters":
            assert not set(text.lower()) & set("aeiouy")


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="n_train"):
        GenerationConfig(n_train=-1)
    with pytest.raises(ValueError, match="unknown write_kinds"):
        GenerationConfig(write_kinds={"poetry": 1.0})
    with pytest.raises(ValueError, match="worlds_test"):
        GenerationConfig(worlds_test=0)


def test_unknown_role_or_kind(worlds):
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="unknown role"):
        render_example(worlds[0], "reader", "single", rng)
    with pytest.raises(ValueError, match="unknown answer kind"):
        render_example(worlds[0], "answer", "single", rng)
    with pytest.raises(ValueError, match="unknown ask kind"):
        render_example(worlds[0], "ask", "update", rng)


def test_persona_rows_include_dialogue_turns_addressed_to_someone_else(rows):
    """Half the persona rows are dialogue turns, "<speaker>: <greeting naming another person> <first person>": the
    facts are the speaker's, never the addressee's (the form MAGS.observe gives the write model)."""
    import re

    from mags_lib.data.templates import DIALOGUE_INTROS

    persona = [r for r in rows["write"]["train"] if r["kind"] == "persona"]
    dialogue = [r for r in persona if r["template_ids"][0].startswith("dialogue.")]
    assert 0.3 < len(dialogue) / len(persona) < 0.7
    for r in dialogue:
        speaker = {op["triplet"][0] for op in r["ops"]}
        assert len(speaker) == 1
        name = speaker.pop()
        intro = DIALOGUE_INTROS[int(r["template_ids"][0].split(".")[1])]
        pattern = re.escape(intro).replace(re.escape("{N}"), re.escape(name)).replace(re.escape("{A}"), r"(\w+)")
        m = re.match(pattern + " ", r["input"])
        assert m and m.group(1) != name, r["input"]  # someone else is named, and the facts are not theirs


def test_a_speakers_small_talk_stores_nothing(rows):
    """Small talk by a named speaker ("Jon: Congrats, that's huge!") is a turn of its own kind with no gold,
    and persona turns sometimes carry it among their facts: the gold stays the facts alone."""
    from mags_lib.data.render import _TALK

    talk = [r for r in rows["write"]["train"] if r["kind"] == "small_talk"]
    assert len(talk) >= 10
    for r in talk:
        assert r["n_ops"] == 0 and r["response"].strip() == protocol.writes_to_text([])
        said = [_TALK[int(t.split(".")[1])] for t in r["template_ids"] if t.startswith("talk.")]
        assert said and r["input"].endswith(" ".join(said)), r["input"]
        speaker = r["input"].split(":")[0]
        assert speaker and speaker[0].isupper() and " " not in speaker, r["input"]
    persona = [r for r in rows["write"]["train"] if r["kind"] == "persona"]
    chatty = [r for r in persona if any(t.startswith("talk.") for t in r["template_ids"])]
    assert 0.15 < len(chatty) / len(persona) < 0.45
    for r in chatty:
        j = next(int(t.split(".")[1]) for t in r["template_ids"] if t.startswith("talk."))
        assert _TALK[j] in r["input"] and r["n_ops"] == len(r["gold_facts"]) >= 1
