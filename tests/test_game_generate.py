"""The scenario generator: deterministic, every kind, dated, ground truth consistent, disjoint from training."""

from __future__ import annotations

from dataclasses import replace
from datetime import date
from types import SimpleNamespace

import pytest

from mags_lib.data import GenerationConfig, generate_role_splits, name_words
from mags_lib.game import (
    FAMILIES,
    KINDS,
    GeneratorConfig,
    generate_scenarios,
    generator_config,
    is_correct,
    scenario_from_dict,
)
from mags_lib.game.generate import training_names

CFG = GeneratorConfig(n_scenarios=8, train_profiles=("smoke",))


@pytest.fixture(scope="module")
def scenarios():
    return generate_scenarios(CFG)


def test_same_seed_same_scenarios_other_seed_other_scenarios(scenarios):
    again = generate_scenarios(CFG)
    assert [s.to_dict() for s in again] == [s.to_dict() for s in scenarios]
    other = generate_scenarios(replace(CFG, seed=1))
    assert [s.to_dict() for s in other] != [s.to_dict() for s in scenarios]


def test_every_family_and_kind_and_scenarios_round_trip(scenarios):
    assert {s.meta["family"] for s in scenarios} == set(FAMILIES)
    assert {e.kind for s in scenarios for e in s.events if e.is_ask} == set(KINDS)
    for s in scenarios:
        assert scenario_from_dict(s.to_dict()).to_dict() == s.to_dict()


def test_observations_are_dated_in_order_and_sourced(scenarios):
    for s in scenarios:
        says = [e for e in s.events if not e.is_ask]
        days = [date.fromisoformat(e.time) for e in says]
        assert days == sorted(days) and len(set(days)) == len(days), s.name  # strictly increasing
        assert all(e.source for e in says)
        for i, e in enumerate(s.events):
            if e.is_ask:  # a question is asked on the day of the observation before it
                assert e.time == max(x.time for x in s.events[:i] if not x.is_ask)


def test_persona_speaks_in_first_person(scenarios):
    persona = [s for s in scenarios if s.meta["family"] == "persona"]
    assert persona
    for s in persona:
        speaker = s.meta["speaker"]
        assert all(e.speaker == speaker for e in s.events if not e.is_ask)
        assert any(e.text.startswith(("I ", "I'", "My ")) for e in s.events if not e.is_ask)


def test_ground_truth_is_consistent_with_the_events(scenarios):
    n_changes_seen, distances = set(), set()
    for s in scenarios:
        gold = s.gold
        assert gold and s.entities
        for g in gold:
            assert g.object.lower() in s.events[g.stated].text.lower()  # the statement says it
            if g.superseded is not None:
                assert g.superseded > g.stated
                successor = [h for h in gold if h.stated == g.superseded and (h.subject, h.relation) ==
                             (g.subject, g.relation)]
                assert len(successor) == 1  # replaced by exactly one newer value of the same relation
        for i, e in s.asks:
            if e.kind == "abstain":
                assert e.answer == ()
                continue
            assert e.distance is not None and e.distance >= 1
            stated = i - e.distance
            assert not s.events[stated].is_ask
            # the asked value was stated at `stated` and still holds when asked
            holds = [g for g in gold if g.stated == stated and is_correct(g.object, e.answer)]
            assert holds, (s.name, i, e)
            assert all(g.superseded is None or g.superseded > i for g in holds)
            if e.kind == "update":
                assert e.n_changes >= 1
                n_changes_seen.add(e.n_changes)
            if e.kind == "retention":
                distances.add(e.distance)
    assert max(n_changes_seen) >= 2  # several changes of one rule
    assert len(distances) >= 3 and max(distances) >= 16  # growing distances


def test_dice_arena_rules_change_several_times(scenarios):
    dice = [s for s in scenarios if s.meta["family"] == "dice_arena"]
    for s in dice:
        chains = {}
        for g in s.gold:
            chains.setdefault((g.subject, g.relation), []).append(g)
        assert max(len(c) for c in chains.values()) >= 2
        assert any(e.text.startswith(("Rule change", "Attention players", "New rule")) or "Rule change" in e.text
                   for e in s.events if not e.is_ask)


def test_abstain_questions_ask_what_was_never_said(scenarios):
    for s in scenarios:
        said = " ".join(e.text.lower() for e in s.events if not e.is_ask)
        for i, e in s.asks:
            if e.kind != "abstain":
                continue
            named = [x.name for x in s.entities if x.name.lower() in e.text.lower()]
            if not named:  # an entity never mentioned: its invented word appears nowhere before
                words = [w.strip("?.,").lower() for w in e.text.split() if w[:1].isupper() or w.endswith("s?")]
                assert words and not all(w in said for w in words)


def test_generated_worlds_are_disjoint_from_every_training_split():
    """The real training splits (generate_role_splits) share no invented name with the game."""
    train_cfg = GenerationConfig(n_train=0, n_validation=0, n_test=0, worlds_train=20, worlds_validation=5,
                                 worlds_test=5, seed=0)
    _, worlds = generate_role_splits(train_cfg, progress=False)
    train_words = {w for ws in worlds.values() for world in ws for w in name_words(world)}
    assert len(train_words) > 300
    scs = generate_scenarios(GeneratorConfig(n_scenarios=12, train_profiles=("smoke",), seed=0))
    game_words = {e.core.lower() for s in scs for e in s.entities}
    assert game_words and not (game_words & train_words)
    text = " ".join(e.text.lower() for s in scs for e in s.events)
    leaked = {w for w in train_words if f" {w} " in f" {text} " or f" {w}s " in f" {text} "}
    assert not leaked


def test_registration_is_what_keeps_names_apart():
    """A world drawn like a training world reuses its names, unless the training names are registered."""
    from mags_lib.data import NameRegistry, generate_world, profile_config
    from mags_lib.game import game_registry

    _, worlds = generate_role_splits(replace(profile_config("smoke"), n_train=0, n_validation=0, n_test=0),
                                     progress=False)
    first = worlds["train"][0]
    train_words = {e.core.lower() for ws in worlds.values() for w in ws for e in w.entities}
    fresh = generate_world(first.world_id, seed=0, registry=NameRegistry())
    assert {e.core.lower() for e in fresh.entities} & train_words  # without registration: collisions
    guarded = generate_world(first.world_id, seed=0, registry=game_registry(GeneratorConfig(train_profiles=("smoke",))))
    assert not ({e.core.lower() for e in guarded.entities} & train_words)


def test_training_names_match_the_real_splits_and_cache(tmp_path):
    train_cfg = replace(__import__("mags_lib.data", fromlist=["profile_config"]).profile_config("smoke"),
                        n_train=0, n_validation=0, n_test=0)
    _, worlds = generate_role_splits(train_cfg, progress=False)
    words = {e.core.lower() for ws in worlds.values() for w in ws for e in w.entities}
    assert training_names(("smoke",), 0) == frozenset(words)
    assert training_names.__wrapped__(("smoke",), 0, cache=False) == frozenset(words)


def test_smoke_profile_is_tiny_and_config_is_checked():
    cfg = generator_config("smoke")
    scs = generate_scenarios(cfg)
    assert len(scs) == 2 and all(len(s.events) <= 14 for s in scs)
    with pytest.raises(ValueError, match="families"):
        GeneratorConfig(families=("zoo",))
    with pytest.raises(ValueError, match="train_profiles"):
        GeneratorConfig(train_profiles=("huge",))
    with pytest.raises(ValueError, match="profile"):
        generator_config("tiny")
    for bad in (-1, None, 2**32, True):  # failed later, naming no seed
        with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2\*\*32\)"):
            GeneratorConfig(seed=bad)
    with pytest.raises(ValueError, match="train_seed must be"):
        GeneratorConfig(train_seed=-2)


def test_evaluation_scenarios_take_generator_fields_for_long_lived_memories():
    from mags_lib.game import evaluation_scenarios

    short = evaluation_scenarios("default", 0, 2, examples=False)
    long = evaluation_scenarios("default", 0, 2, examples=False, retention_distances=(40, 120))
    for s in long:
        gaps = sorted(e.distance for _, e in s.asks if e.kind == "retention")
        assert gaps and gaps[0] >= 40 and gaps[-1] >= 120, (s.name, gaps)
        assert len(s.events) > 120
    assert max(len(s.events) for s in short) < 60
    with pytest.raises(ValueError, match="retention_distances"):
        evaluation_scenarios("default", 0, 1, examples=False, retention_distances=(0,))


def test_no_abstain_question_is_answered_by_a_two_way_fact():
    """"Who are the natural enemies of X?" is no abstain question once "Y are always at war with X." was said:
    relations between two entities of one type read both ways (seed 0's 120 scenarios had one such question,
    found by an audit)."""
    from mags_lib.data import templates as TT
    from mags_lib.game.generate import _fix, generate_scenarios, generator_config

    two_way = [r for r in TT.RELATIONS if r.values == r.subject_type]
    assert {r.key for r in two_way} >= {"enemy", "sibling", "near"}
    scs = generate_scenarios(generator_config("default", seed=0, n_scenarios=120))
    n_abstain = 0
    for sc in scs:
        for i, e in sc.asks:
            if e.kind != "abstain":
                continue
            n_abstain += 1
            for g in sc.gold:
                for rel in two_way:
                    if g.stated < i and g.relation == rel.label:
                        asked = {TT.sentence_case(_fix(q.format(S=g.object).replace("the the ", "the ")))
                                 for q in rel.questions}
                        assert e.text not in asked, (sc.name, i, e.text, sc.events[g.stated].text)
    assert n_abstain > 100


def test_a_points_value_gets_its_number_as_an_alias_never_its_verb():
    # "pay five points" had the alias "pay": "Players pay the referee a coin." was right
    from mags_lib.game.generate import _aliases

    world = SimpleNamespace(entities=[])
    assert "pay" not in _aliases("pay five points", world)
    assert "470" in _aliases("470 points", world) and "five" in _aliases("five points", world)


@pytest.mark.parametrize("value, alias", [
    ("frozen lemons", "frozen lemon"), ("strawberries", "strawberry"), ("bee stings", "bee sting"),
    ("one six-sided dice", "one six-sided die"), ("one six-sided dice", "1 six-sided die"),
    ("move back three squares", "move back 3 squares"), ("draw two cards", "draw 2 cards"),
    ("12", "twelve"), ("forty years", "40 years"),
])
def test_aliases_hold_the_singular_and_numbers_in_digits_wherever_they_stand(value, alias):
    # a reader that answered "a frozen lemon" or "move back 3 squares" named the value and was scored wrong
    from mags_lib.game.generate import _aliases

    got = _aliases(value, SimpleNamespace(entities=[]))
    assert got[0] == value and alias in got


@pytest.mark.parametrize("value", ["glass", "hummus", "chess", "bouldering", "lose a turn"])
def test_no_singular_is_made_of_a_word_that_is_not_a_plural(value):
    from mags_lib.game.generate import _aliases

    assert _aliases(value, SimpleNamespace(entities=[])) == [value]


def test_no_question_has_a_second_right_answer_through_a_two_way_fact():
    """"Pazhigoorna and Gloreania are siblings." ... "Jielta is the sibling of Gloreania.": "Who is the sibling of
    Gloreania?" accepts Pazhigoorna too; "What is close to the town where Flythiexo lives?" accepts every place
    said to be near that town (an audit found 13 recall/retention questions and 1 multihop question over seeds
    0-2 that accepted one right answer only). Each question is replayed against the facts that hold when it is
    asked, two-way facts read backwards ("X are always at war with Y" reads both ways, "Y prey on X" does not)."""
    from mags_lib.data import templates as TT

    by_label = {r.label: r for r in TT.RELATIONS}

    def values(sc, held, subj, rel):
        out = {h.object for h in held if h.subject == subj and h.relation == rel}
        r = by_label[rel]
        for h in held:
            if h.object == subj and h.relation == rel and r.values == r.subject_type and (
                    r.key in ("sibling", "near") or "at war with" in sc.events[h.stated].text):
                out.add(h.subject)
        return out

    seen = {"recall": 0, "retention": 0, "multihop": 0}
    for seed in (0, 1):
        for sc in generate_scenarios(generator_config("default", seed=seed, n_scenarios=200)):
            for i, e in sc.asks:
                if e.kind not in seen:
                    continue
                seen[e.kind] += 1
                held = [g for g in sc.gold if g.stated < i and (g.superseded is None or g.superseded > i)]
                asked = [g for g in held if g.stated == i - e.distance and is_correct(g.object, e.answer)]
                if e.kind == "multihop":  # every entity the descriptor names, and their values
                    hops = [(h, g) for g in asked for h in held if h.object == g.subject
                            and by_label[h.relation].descriptor
                            and by_label[h.relation].descriptor.format(S=h.subject).lower() in e.text.lower()]
                    assert hops, (sc.name, e.text)
                    f1, g = hops[0]
                    right = set().union(*(values(sc, held, y, g.relation)
                                          for y in values(sc, held, f1.subject, f1.relation)))
                else:
                    right = values(sc, held, asked[0].subject, asked[0].relation)
                missed = sorted(v for v in right if not is_correct(v, e.answer))
                assert not missed, (seed, sc.name, e.kind, e.text, e.answer, missed)
                if (seed, sc.name, e.text) in {(0, "town_0155", "Who is the sibling of Gloreania?"),
                                               (1, "town_0131", "What is close to the town where Flythiexo lives?")}:
                    assert len(right) == 2 and e.answer[0] in {"Jielta", "Giply Vale"}  # the fact asked comes first
    assert seen["recall"] >= 800 and seen["retention"] >= 900 and seen["multihop"] >= 399


@pytest.mark.parametrize("key, template, both", [
    ("sibling", "{O} is the sibling of {S}.", True), ("near", "{S} lies close to {O}.", True),
    ("enemy", "{S} are always at war with {O}.", True), ("enemy", "{O} prey on {S}.", False),
    ("home", "{S} lives in {O}.", False),
])
def test_which_statements_read_both_ways(key, template, both):
    from mags_lib.data import templates as TT
    from mags_lib.game.generate import _reads_both_ways

    assert _reads_both_ways(TT.RELATIONS_BY_KEY[key], template) is both
