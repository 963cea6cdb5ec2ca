"""Outcome rewards (issue 15, items 2 and 6): a frozen reader answers a mini-scenario's questions from
the memory the completion builds (write) or recalls (ask). The fast tests use an oracle reader that
answers by exact lookup of the (subject, relation) each question needs; one slow test runs SmolLM2."""

from __future__ import annotations

import json
import pickle

import pytest

from mags_lib import rewards
from mags_lib.data import outcome
from mags_lib.data.render import GenerationConfig, generate_role_splits


def make_oracle(scenario: dict):
    """Answers a question from the memory items by exact lookup: the objects of every item that starts
    with the needed 'subject relation ' (joined), or an abstention when there is none."""
    needs = {q["question"]: q["needs"] for q in scenario["questions"]}
    seen: list[list[str]] = []

    def oracle(question, items):
        seen.append(list(items))
        s, r, _ = needs[question]
        head = f"{s} {r} "
        found = [t[len(head):] for t in items if t.startswith(head)]
        return ", ".join(found) if found else "I don't know"

    oracle.seen = seen
    return oracle


def W(*trips) -> str:
    return "".join(f"<memory_write>{s},{r},{o}</memory_write>" for s, r, o in trips)


TINY = {
    "memory": [["blorps", "live in", "copper caves"], ["quindles", "fear", "purple umbrellas"],
               ["Odalie", "works as", "glassblower"]],
    "questions": [{"question": "Where do blorps live now?", "aliases": ["salt mines"],
                   "needs": ["blorps", "live in", "salt mines"]},
                  {"question": "What do blorps eat?", "aliases": ["frozen lemons"],
                   "needs": ["blorps", "eat", "frozen lemons"]}],
}
GOLD_WRITE = W(("blorps", "live in", "salt mines"), ("blorps", "eat", "frozen lemons"))


@pytest.mark.parametrize("completion,expected", [
    (GOLD_WRITE, 1.0),  # both facts stored; the update supersedes copper caves
    ("", 0.0),  # nothing stored: the old home is wrong, the diet unknown
    ("Sure! Blorps are great.", 0.0),  # junk without tags
    (W(("quindles", "eat", "frozen lemons")), 0.0),  # a wrong subject answers nothing
    (W(("blorps", "eat", "frozen lemons")), 0.5),  # one of two questions
    (W(("blorps", "live in", "salt mines")), 0.5),
])
def test_outcome_write_oracle_on_a_tiny_scenario(completion, expected):
    oracle = make_oracle(TINY)
    got = rewards.outcome_write_reward([completion], scenario=[json.dumps(TINY)], reader=oracle, embedder="hash")
    assert got == [expected]
    assert len(oracle.seen) == 2  # one reading per question


def test_outcome_write_reader_sees_the_current_memory_only():
    oracle = make_oracle(TINY)
    rewards.outcome_write_reward([GOLD_WRITE], scenario=TINY, reader=oracle, embedder="hash")
    items = oracle.seen[0]
    assert "blorps live in salt mines" in items and "blorps eat frozen lemons" in items
    assert "blorps live in copper caves" not in items  # superseded by the write
    assert "Odalie works as glassblower" in items


ASK = {"memory": TINY["memory"] + [["blorps", "eat", "frozen lemons"], ["Odalie", "lives in", "Brask"]],
       "questions": [{"question": "What do blorps eat?", "aliases": ["frozen lemons"],
                      "needs": ["blorps", "eat", "frozen lemons"]},
                     {"question": "What is Odalie's job?", "aliases": ["glassblower"],
                      "needs": ["Odalie", "works as", "glassblower"]}]}


@pytest.mark.parametrize("completion,expected", [
    ("<memory_ask>blorps eat</memory_ask><memory_ask>Odalie works as</memory_ask>", 1.0),
    ("<memory_ask>blorps eat</memory_ask>", 0.5),
    ("", 0.0),  # no query recalls nothing
    ("I have no idea", 0.0),
    ("<memory_ask>quindles fear</memory_ask>", 0.0),  # recalls the wrong fact
])
def test_outcome_ask_oracle_on_a_tiny_scenario(completion, expected):
    oracle = make_oracle(ASK)
    got = rewards.outcome_ask_reward([completion], scenario=[ASK], reader=oracle, embedder="hash", k=1)
    assert got == [expected]


@pytest.fixture(scope="module")
def built():
    return outcome.build_outcome_rows(outcome.OutcomeConfig(n=12, worlds=6, seed=3), progress=False)


def test_built_write_rows_gold_scores_one_junk_scores_zero(built):
    rows = built["write"]
    assert len(rows) == 12 and {r["kind"] for r in rows} <= set(outcome.OutcomeConfig().write_kinds)
    for r in rows:
        sc = outcome.parse_scenario(r["scenario"])
        oracle = make_oracle(sc)
        got = rewards.outcome_write_reward([r["response"], "", "<memory_write>x,y,z</memory_write>"],
                                           scenario=[r["scenario"]] * 3, reader=oracle, embedder="hash")
        assert got == [1.0, 0.0, 0.0], (r["input"], r["response"], sc)


def test_built_ask_rows_gold_beats_no_query(built):
    scores, empty = [], []
    for r in built["ask"]:
        oracle = make_oracle(outcome.parse_scenario(r["scenario"]))
        a, b = rewards.outcome_ask_reward([r["response"], ""], scenario=[r["scenario"]] * 2, reader=oracle,
                                          embedder="hash", k=2)
        scores.append(a)
        empty.append(b)
    assert set(empty) == {0.0}
    assert sum(scores) / len(scores) >= 0.5  # the gold queries recall most of what the reader needs


def test_rows_are_seeded_and_come_from_training_worlds_only():
    cfg = outcome.OutcomeConfig(n=6, worlds=4, seed=5, roles=("write",))
    a = outcome.build_outcome_rows(cfg, progress=False)["write"]
    assert a == outcome.build_outcome_rows(cfg, progress=False)["write"]
    assert a != outcome.build_outcome_rows(outcome.OutcomeConfig(n=6, worlds=4, seed=6, roles=("write",)),
                                           progress=False)["write"]
    _, worlds = generate_role_splits(GenerationConfig(n_train=0, n_validation=0, n_test=0, worlds_train=4,
                                                      worlds_validation=3, worlds_test=3, seed=5,
                                                      roles=("write",)), progress=False)
    mine = outcome.training_worlds(4, seed=5)
    assert [w.facts for w in mine] == [w.facts for w in worlds["train"]]  # the very train split
    held_out = set().union(*(w.invented_names for s in ("validation", "test") for w in worlds[s]))
    train_ids = {w.world_id for w in mine}
    for r in a:
        assert r["world_id"] in train_ids
        sc = outcome.parse_scenario(r["scenario"])
        words = {x for t in sc["memory"] for x in (t[0], t[2])} | {q["needs"][0] for q in sc["questions"]}
        assert not words & held_out


def test_grpo_rows_carry_the_scenario(built):
    from mags_lib.roles import ROLE_SPECS

    g = outcome.outcome_grpo_rows(built["write"][:2], ROLE_SPECS["write"].trained)
    assert [m["role"] for m in g[0]["prompt"]] == ["system", "user"]
    assert json.loads(g[0]["scenario"]) == json.loads(built["write"][0]["scenario"])
    with pytest.raises(ValueError, match="build_outcome_rows"):
        outcome.outcome_grpo_rows([{"input": "x", "role": "write", "response": ""}], ROLE_SPECS["write"].trained)


def test_bad_inputs_say_what_is_wrong():
    with pytest.raises(ValueError, match="column 'scenario'"):
        rewards.outcome_write_reward(["x"], reader=lambda q, i: "", embedder="hash")
    with pytest.raises(ValueError, match="'questions'"):
        rewards.outcome_write_reward(["x"], scenario=[{"memory": [], "questions": []}], reader=lambda q, i: "",
                                     embedder="hash")
    with pytest.raises(ValueError, match="unknown reader"):
        rewards.outcome_write_reward(["x"], scenario=[TINY], reader="gpt", embedder="hash")
    with pytest.raises(ValueError, match="n_threads"):
        outcome.llama_reader(n_threads=0)
    with pytest.raises(ValueError, match="roles"):
        outcome.OutcomeConfig(roles=("answer",))


def test_outcome_rewards_are_registered_and_picklable():
    f = rewards.get_reward("outcome_write", embedder="hash", n_threads=1)
    assert pickle.loads(pickle.dumps(f)).__name__ == "outcome_write_reward"
    assert rewards.REGISTRY["outcome_ask"] is rewards.outcome_ask_reward


@pytest.mark.slow
def test_outcome_write_with_the_real_smollm2_reader(monkeypatch):
    """~10 s under load: SmolLM2-135M (llama.cpp, 1 thread) reads a small memory for 2 x 2 questions.
    The model may answer wrong; what is checked is that the reward runs end to end, stays in range, and
    that the prompts the model saw hold the memory the completion built."""
    reader = outcome.llama_reader(n_threads=1)
    assert outcome.resolve_reader("llamacpp", n_threads=1) is reader  # loaded once per process
    prompts = []
    original = reader.backend.generate

    def spy(batch, **kw):
        prompts.extend(batch)
        return original(batch, **kw)

    monkeypatch.setattr(reader.backend, "generate", spy)
    got = rewards.outcome_write_reward([GOLD_WRITE, ""], scenario=[TINY, TINY], reader="llamacpp",
                                       n_threads=1, embedder="hash")
    assert len(got) == 2 and all(0.0 <= x <= 1.0 for x in got)
    assert len(prompts) == 4
    users = [next(m["content"] for m in p if m["role"] == "user") for p in prompts]
    assert "blorps live in salt mines" in users[0] and "copper caves" not in users[0]
    assert "blorps live in copper caves" in users[2] and "salt mines" not in users[2]
