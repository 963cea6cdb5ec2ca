"""Procedural worlds: determinism, unique invented names, leak-free splits by world."""

import re

import numpy as np
import pytest

from mags_lib.data import GenerationConfig, generate_role_splits
from mags_lib.data.templates import RELATIONS, RELATIONS_BY_KEY, template_counts
from mags_lib.data.worlds import NameRegistry, WorldConfig, generate_world, generate_worlds


@pytest.fixture(scope="module")
def small():
    cfg = GenerationConfig(n_train=400, n_validation=80, n_test=80, worlds_train=30, worlds_validation=6,
                           worlds_test=6, seed=3)
    return generate_role_splits(cfg, progress=False)


def test_world_is_deterministic_and_seed_dependent():
    a = generate_world("w1", seed=5)
    b = generate_world("w1", seed=5)
    c = generate_world("w1", seed=6)
    assert a.facts == b.facts and a.entities == b.entities
    assert a.facts != c.facts


def test_world_facts_follow_the_schema():
    w = generate_world("w2", seed=0)
    names = {e.name for e in w.entities}
    for f in w.facts:
        rel = RELATIONS_BY_KEY[f.relation]
        assert w.entity(f.subject).type == rel.subject_type
        assert f.label == rel.label
        if rel.linking:  # objects of linking relations are entities of the same world
            assert f.object in names and f.object != f.subject
    # at most one fact per (subject, relation): functional relations are unambiguous
    keys = [(f.subject, f.relation) for f in w.facts]
    assert len(keys) == len(set(keys))


def test_registry_never_repeats_a_name_or_its_plural():
    reg = NameRegistry()
    rng = np.random.default_rng(0)
    words = [reg.word(rng) for _ in range(3000)]
    assert len(set(words)) == len(words)
    stems = set(words)
    assert not any(w + "s" in stems or w + "es" in stems for w in words)


def test_invented_names_avoid_template_vocabulary():
    worlds = generate_worlds(40, seed=1)
    vocab = {"fern", "lemons", "glass", "bridge", "player", "dice"}
    for w in worlds:
        assert not (w.invented_names & vocab)


def test_world_config_checks():
    with pytest.raises(ValueError, match="species"):
        WorldConfig(species=(3, 1))
    with pytest.raises(ValueError, match="at least 2"):
        WorldConfig(persons=(1, 2))
    with pytest.raises(ValueError, match="fact_prob"):
        WorldConfig(fact_prob=0.0)


def test_splits_share_no_invented_entity(small):
    rows, worlds = small
    names = {split: set().union(*(w.invented_names for w in ws)) for split, ws in worlds.items()}
    assert not names["train"] & names["test"]
    assert not names["train"] & names["validation"]
    assert not names["validation"] & names["test"]
    # and no test entity is ever mentioned in a training input (whole-word check on the text)
    train_words = {w for role in rows for r in rows[role]["train"] for w in re.findall(r"[a-z]+", r["input"].lower())}
    for split in ("validation", "test"):
        assert not names[split] & train_words, f"{split} entity names leak into train inputs"


def test_world_ids_are_split_specific(small):
    rows, _ = small
    for role in rows:
        ids = {s: {r["world_id"] for r in rows[role][s] if r["world_id"]} for s in rows[role]}
        assert not ids["train"] & ids["test"] and not ids["train"] & ids["validation"]


def test_at_least_30_templates_per_role():
    counts = template_counts()
    assert counts["write"] >= 30 and counts["ask"] >= 30
    assert len(RELATIONS) >= 25
