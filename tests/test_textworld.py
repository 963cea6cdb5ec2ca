"""TextWorld games: specs, the engine's state, questions from what the player witnessed, scoring, the agent.

The first half needs no engine (hand-made states and trajectories, values checked by hand). The
second half plays real games through TextWorld and jericho: a three-room game built with
TextWorld's GameMaker (compiled once per module) and generated games; it is skipped, in one line,
when TextWorld is not installed.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from fakes import TableBackend

from mags_lib import protocol
from mags_lib import textworld as T
from mags_lib.textworld import INVENTORY, GameSpec, QuestionConfig, Step, Witness, WorldState


# ------------------------------------------------------------------------------------------------
# hand-made states (the engine's facts faked with the same shape: named, typed variables)
@dataclass(frozen=True)
class V:
    name: str
    type: str


@dataclass(frozen=True)
class F:
    name: str
    arguments: tuple


def facts(*spec):
    """("at", ("key", "k"), ("kitchen", "r")) -> a Proposition-like fact."""
    return [F(name, tuple(V(*a) for a in args)) for name, *args in spec]


P, I = ("P", "P"), ("I", "I")
KITCHEN, HALL, GARDEN = ("kitchen", "r"), ("hall", "r"), ("garden", "r")
MAP = [("north_of", HALL, KITCHEN), ("south_of", KITCHEN, HALL), ("east_of", GARDEN, HALL),
       ("west_of", HALL, GARDEN)]


def state(player, *located, opened=("chest",)):
    """A three-room world: kitchen -north-> hall -east-> garden; chest in the hall, drawer (closed) in the garden."""
    base = [("at", P, player), ("at", ("chest", "c"), HALL), ("at", ("drawer", "c"), GARDEN),
            ("in", ("spoon", "o"), ("drawer", "c")), ("in", ("coin", "o"), ("drawer", "c")),
            ("at", ("table", "s"), GARDEN)]
    base += [("open", ("chest", "c"))] if "chest" in opened else []
    return WorldState.from_facts(facts(*MAP, *base, *located))


def step(i, command, text, st):
    return Step(index=i, command=command, text=text, state=st, admissible=[])


KEY_KITCHEN = ("at", ("key", "k"), KITCHEN)
APPLE_CHEST = ("in", ("apple", "f"), ("chest", "c"))
ENTITIES = ["apple", "chest", "coin", "drawer", "garden", "hall", "key", "kitchen", "spoon", "table"]


def trajectory():
    """Take the key in the kitchen, go north, put it in the open chest, go east, then walk about."""
    return [
        step(0, None, "Find the coin!\n-= Kitchen =-\nThere is a key on the floor.",
             state(KITCHEN, KEY_KITCHEN, APPLE_CHEST)),
        step(1, "take key", "You pick up the key.", state(KITCHEN, ("in", ("key", "k"), I), APPLE_CHEST)),
        step(2, "go north", "-= Hall =-\nYou see an open chest. The chest contains an apple.",
             state(HALL, ("in", ("key", "k"), I), APPLE_CHEST)),
        step(3, "put key in chest", "You put the key into the chest.",
             state(HALL, ("in", ("key", "k"), ("chest", "c")), APPLE_CHEST)),
        step(4, "go east", "-= Garden =-\nYou see a drawer and a table.",
             state(GARDEN, ("in", ("key", "k"), ("chest", "c")), APPLE_CHEST)),
        step(5, "inventory", "You are carrying nothing.",
             state(GARDEN, ("in", ("key", "k"), ("chest", "c")), APPLE_CHEST)),
    ]


def witnessed(steps):
    w = Witness()
    for s in steps:
        w.update(s, ENTITIES)
    return w


def by_question(qs):
    return {q["ask"]: q for q in qs}


# ------------------------------------------------------------------------------------------------
def test_spec_validation_and_names():
    assert GameSpec(kind="cooking", n_rooms=6, recipe=2, take=1, seed=4).name == "tw-cooking-r6-i2t1o-s4"
    assert GameSpec(kind="custom", n_rooms=3, n_objects=5, quest_length=2).name == "tw-custom-r3-o5-q2-s0"
    for bad in (dict(kind="maze"), dict(kind="cooking", n_rooms=5), dict(n_rooms=0), dict(seed=-1),
                dict(kind="cooking", n_rooms=6, recipe=1, take=2), dict(mode="insane")):
        with pytest.raises(ValueError):
            GameSpec(**bad)
    assert GameSpec(seed=1).key() != GameSpec(seed=2).key()
    assert GameSpec(seed=1).key() == GameSpec(seed=1).key()
    import numpy as np  # a numpy seed is a seed ("got np.int64(3)" refused it); numpy's own bound is checked here

    assert GameSpec(seed=np.int64(3)) == GameSpec(seed=3) and type(GameSpec(seed=np.int64(3)).seed) is int
    for bad in (2**32, True, 1.5, None):
        with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2\*\*32\)"):
            GameSpec(seed=bad)


def test_clean_text_drops_banner_prompt_and_status_bar():
    raw = ("  ________  ________\n |        \\|        \\\n  \\$$$$$$$$| $$$$$$$$\n\nWelcome! Find the key.\n\n\n\n"
           "-= Kitchen =-\nA kitchen.\n\n>     -= Kitchen =-0/1")
    assert T.clean_text(raw) == "Welcome! Find the key.\n\n-= Kitchen =-\nA kitchen."


def test_world_state_from_facts_holders_exits_and_visibility():
    s = state(HALL, KEY_KITCHEN, APPLE_CHEST, ("in", ("coin", "o"), I))
    assert s.player == "hall"
    assert s.holders["key"] == "kitchen" and s.holders["apple"] == "chest" and s.holders["coin"] == INVENTORY
    assert s.exits[("kitchen", "north")] == "hall" and s.exits[("hall", "east")] == "garden"
    assert s.exits[("hall", "south")] == "kitchen"
    assert s.kinds["chest"] == "container" and s.kinds["table"] == "supporter" and s.kinds["hall"] == "room"
    # in the hall: the chest and what the open chest holds, and what is carried; not the kitchen's key
    assert s.visible() == {"chest", "apple", "coin"}
    assert s.room_of("apple") == "hall" and s.room_of("coin") is None
    # the drawer is closed: its spoon is not visible from the garden
    g = state(GARDEN, APPLE_CHEST)
    assert "spoon" not in g.visible() and {"drawer", "table"} <= g.visible()
    closed = state(HALL, APPLE_CHEST, opened=())
    assert "apple" not in closed.visible()
    with pytest.raises(ValueError, match="player"):
        WorldState.from_facts(facts(*MAP))


def test_witness_records_holders_changes_and_exits():
    w = witnessed(trajectory())
    assert w.history["key"] == [(0, "kitchen"), (1, INVENTORY), (3, "chest")]
    assert w.n_changes("key") == 2 and w.inventory_removals == 1
    assert w.history["apple"] == [(2, "chest")] and w.known_contents("chest") == ["apple", "key"]
    assert w.edges[("kitchen", "north")] == ("hall", 2) and w.edges[("hall", "south")] == ("kitchen", 2)
    assert w.edges[("hall", "east")] == ("garden", 4)
    assert "spoon" not in w.mentioned  # in a closed drawer, never named
    assert w.route("garden", "kitchen") == ["west", "south"]
    assert w.route("kitchen", "nowhere") is None


def test_questions_from_a_hand_made_trajectory():
    steps = trajectory()
    w = witnessed(steps)
    qs = by_question(T.questions_at(w, steps[-1].state, entities=ENTITIES, config=QuestionConfig(retention_gap=3)))
    # moved twice since first seen: an update; the old places (kitchen, carried) are not the answer; the
    # chest's room is (the key is in the hall too)
    assert qs["Where is the key?"]["answer"] == ["chest", "hall"] and qs["Where is the key?"]["kind"] == "update"
    assert qs["Where is the key?"]["n_changes"] == 2
    # seen at step 2, asked at step 5 with gap 3: retention
    assert qs["Where is the apple?"]["answer"] == ["chest", "hall"] and qs["Where is the apple?"]["kind"] == "retention"
    assert qs["Where is the apple?"]["distance"] == 3
    # the chest's contents changed (the key went in): update, the answer is both of them
    assert qs["What is in the chest?"]["answer"] == ["apple", "key"]
    assert qs["What is in the chest?"]["kind"] == "update"
    # exits: walked at step 2 (distance 3: retention) and step 4 (distance 1: recall)
    assert qs["Which room lies north of the kitchen?"]["answer"] == ["hall"]
    assert qs["Which room lies north of the kitchen?"]["kind"] == "retention"
    assert qs["Which room lies west of the garden?"]["kind"] == "recall"
    # carried something then put it away: "nothing" is the answer, an update
    assert qs["What are you carrying?"]["answer"][0] == "nothing"
    assert qs["What are you carrying?"]["kind"] == "update"
    # the spoon was never seen: abstain; the drawer was seen: where, not abstain
    assert qs["Where is the spoon?"]["kind"] == "abstain" and qs["Where is the spoon?"]["answer"] == []
    assert qs["Where is the drawer?"]["answer"] == ["garden"]
    # the coin was named (by the task) but never perceived: its place is unknown, yet it is no abstain
    assert "Where is the coin?" not in qs
    # the drawer holds an unseen spoon: its contents are not asked
    assert "What is in the drawer?" not in qs
    # nothing is asked about exits never walked
    assert "Which room lies east of the kitchen?" not in qs


def test_list_answers_are_scored_as_the_set_of_objects_they_name():
    # any one alias used to do: a stale inventory that still named a dropped object was right
    objs = ["Cat Calendar", "Microsoft style key", "key", "poem", "sock", "locker"]
    inv = ["Microsoft style key"]
    assert not T.score_state_answer("You are carrying a Cat Calendar and a Microsoft style key.", inv, "update",
                                    "inventory", objs)
    assert T.score_state_answer("A Microsoft style key.", inv, "update", "inventory", objs)  # not also "key"
    both = ["poem", "sock"]
    assert T.score_state_answer("The locker holds a poem and a sock.", both, "recall", "contents", objs, "locker")
    assert not T.score_state_answer("A poem.", both, "recall", "contents", objs, "locker")
    empty = ["nothing", "empty handed"]
    for reply in ("I am not carrying anything.", "Your hands are empty.", "I have no items.", "You carry nothing."):
        assert T.score_state_answer(reply, empty, "update", "inventory", objs), reply
    assert not T.score_state_answer("Nothing but a poem.", empty, "update", "inventory", objs)
    assert not T.score_state_answer("I don't know.", empty, "update", "inventory", objs)
    # the other families as before; a list question without the game's objects is refused, not guessed
    assert T.score_state_answer("It is in the cellar.", ["locker", "cellar"], "recall", "where", objs)
    with pytest.raises(ValueError, match="meta\\['objects'\\]"):
        T.score_state_answer("A poem.", ["poem"], "recall", "contents", None)


def test_the_inventory_question_needs_what_is_carried_to_be_what_was_seen_carried():
    # an object that left the inventory unseen (consumed by a recipe) gave a gold answer no one could know
    steps = trajectory()
    w = witnessed(steps[:2])  # the key was seen taken
    gone = state(KITCHEN, APPLE_CHEST)  # ... and is gone without a word
    assert "What are you carrying?" not in by_question(T.questions_at(w, gone, entities=ENTITIES))
    assert by_question(T.questions_at(w, steps[1].state, entities=ENTITIES))["What are you carrying?"]["answer"] \
        == ["key"]


def test_no_question_about_a_move_the_player_did_not_witness():
    steps = trajectory()
    w = witnessed(steps)
    # the engine says the apple is now in the kitchen, but the player never saw it go there
    moved = state(GARDEN, ("in", ("key", "k"), ("chest", "c")), ("at", ("apple", "f"), KITCHEN))
    qs = by_question(T.questions_at(w, moved, entities=ENTITIES))
    assert "Where is the apple?" not in qs
    assert "What is in the chest?" not in qs  # its true contents (the key) differ from the witnessed ones
    assert qs["Where is the key?"]["answer"] == ["chest", "hall"]


def test_question_config_and_play_config_checks():
    with pytest.raises(ValueError):
        QuestionConfig(ask_every=0)
    with pytest.raises(ValueError):
        QuestionConfig(kinds=("where", "colour"))
    with pytest.raises(ValueError):
        T.PlayConfig(policy="teleport")
    with pytest.raises(ValueError):
        T.PlayConfig(start_time="yesterday")
    assert T.PlayConfig().time_of(0) == "2024-01-01T09:00"
    assert T.PlayConfig().time_of(75) == "2024-01-01T10:15"


@pytest.mark.parametrize("response, aliases, expected", [
    ("It is in the wooden chest.", ["wooden chest"], True),  # whole-word run after normalisation
    ("It is in the chest.", ["wooden chest"], False),  # a shorter run is not the alias
    ("The chestnut.", ["chest"], False),  # no partial words
    ("You are carrying nothing.", ["nothing", "empty handed"], True),
    ("Nothing.", ["nothing", "empty handed"], True),
    # an abstention's words are no answer: "nothing" of "I know nothing about it" is not the empty inventory
    ("I know nothing about it.", ["nothing", "empty handed"], False),
    ("I don't know: that is not in my memory.", ["memory"], False),
    ("I don't know: that is not in my memory.", [], True),  # abstain
    ("In the hall.", [], False),  # an answer where none was known
])
def test_score_answer(response, aliases, expected):
    assert T.score_answer(response, aliases, "abstain" if not aliases else "recall") is expected


def test_accuracy_table_counts_and_intervals():
    rows = [{"kind": "recall", "correct": True}] * 8 + [{"kind": "recall", "correct": False}] * 2 + \
           [{"kind": "update", "correct": False}] * 5
    t = T.accuracy_table(rows, n_boot=500, seed=0).set_index("kind")
    assert t.loc["recall", "n"] == 10 and t.loc["recall", "accuracy"] == pytest.approx(0.8)
    assert t.loc["update", "accuracy"] == 0.0 and t.loc["update", "ci_high"] == 0.0
    assert t.loc["overall", "accuracy"] == pytest.approx(8 / 15)
    assert 0.4 <= t.loc["recall", "ci_low"] < 0.8 < t.loc["recall", "ci_high"] <= 1.0


def test_accuracy_table_resamples_games_when_clustered():
    """Questions of one game share one memory: 10 games all right and 10 all wrong is a wide interval
    over games, while the same 200 answers as independent questions give a narrow one."""
    rows = [{"kind": "recall", "game": f"g{g}", "correct": g < 10} for g in range(20) for _ in range(10)]
    flat = T.accuracy_table(rows, n_boot=2000, seed=0).set_index("kind")
    games = T.accuracy_table(rows, n_boot=2000, seed=0, cluster="game").set_index("kind")
    assert flat.loc["overall", "accuracy"] == games.loc["overall", "accuracy"] == 0.5
    assert games.loc["overall", "n_clusters"] == 20 and games.loc["overall", "n"] == 200
    flat_width = flat.loc["overall", "ci_high"] - flat.loc["overall", "ci_low"]
    game_width = games.loc["overall", "ci_high"] - games.loc["overall", "ci_low"]
    assert flat_width < 0.16 < 0.3 < game_width  # about 0.14 against about 0.4
    by_system = T.accuracy_table([{**r, "system": "a"} for r in rows], group="system", cluster="game")
    assert list(by_system.columns) == ["system", "kind", "n", "accuracy", "ci_low", "ci_high", "n_clusters"]


def test_perfect_memory_answers_from_what_was_witnessed():
    pm = T.PerfectMemory(ENTITIES)
    for s in trajectory():
        pm.witness_step(s)
    assert T.score_answer(pm.ask("Where is the key?"), ["chest"])
    assert T.score_answer(pm.ask("Where is the spoon?"), [])
    assert T.score_answer(pm.ask("Which room lies east of the hall?"), ["garden"])
    assert pm.ask("Which way from the garden leads to the kitchen?") == "Go west."


# ------------------------------------------------------------------------------------------------
# every memory mode of the game issue on the hand-made game, with fake models: what is under test is
# what each mode lets the reader see (and which models it runs), not what a model makes of it
MAGS_MODES = {"none": "none", "full_context": "full_context", "rag": "rag", "mags_base": "graph",
              "mags_trained": "graph", "rag_trained": "rag"}
OBSERVED = ("There is a key on the floor", "You pick up the key", "The chest contains an apple",
            "You put the key into the chest", "You see a drawer and a table", "You are carrying nothing")
WRITES = {"There is a key on the floor": protocol.writes_to_text([("key", "is in", "kitchen")]),
          "You put the key into the chest": protocol.writes_to_text([("key", "is in", "chest")]),
          "The chest contains an apple": protocol.writes_to_text([("apple", "is in", "chest")])}


def hand_scenario():
    """The hand-made trajectory as a scenario: two rounds of questions (after steps 3 and 5)."""
    cfg = T.PlayConfig(n_steps=5, questions=QuestionConfig(ask_every=3, per_round=6, retention_gap=3))
    return T.make_scenario(T.GameFile(path=Path("hand.z8"), name="hand"), cfg, steps=trajectory(),
                           entities=ENTITIES)


def fake_trained_models(root: Path) -> Path:
    """models/<role>/default/ for ask, write and answer: a finished run (meta.json with the trained
    prompt) and an empty GGUF file (never loaded: the tests hand MAGS fake backends)."""
    from mags_lib.roles import ROLE_SPECS

    for role in ("ask", "write", "answer"):
        run = root / role / "default"
        (run / "gguf").mkdir(parents=True)
        (run / "gguf" / "model-q8_0.gguf").write_bytes(b"")
        (run / "meta.json").write_text(json.dumps({"format": "mags-trained-model", "final_stage": "sft",
                                                   "role": role, "prompt": ROLE_SPECS[role].trained.to_dict()}))
    return root


@pytest.fixture(scope="module")
def modes_run(tmp_path_factory):
    """Each MAGS mode through the hand-made scenario (recall_k=2, so a top-k is not the whole history)."""
    root = fake_trained_models(tmp_path_factory.mktemp("models"))
    sc = hand_scenario()
    out = {}
    for name in MAGS_MODES:
        backends = {"write": TableBackend(WRITES), "ask": TableBackend({}),
                    "answer": TableBackend({}, default="I don't know."), "router": TableBackend({})}
        m = T.make_system(name, backends=backends, embedder="hash", recall_k=2, models_root=str(root))
        try:
            rows = T.run_scenario(m, sc)
            out[name] = {"rows": rows, "backends": backends, "paths": dict(m.model_paths), "config": m.config,
                         "answer_spec": m.prompt_spec("answer"), "episodes": len(m.graph.episodes()),
                         "facts": len(m.graph.facts())}
        finally:
            m.close()
    return sc, root, out


def test_systems_are_the_game_memory_modes():
    from mags_lib.game.run import SYSTEMS as GAME
    from mags_lib.game.run import make_config

    assert set(T.SYSTEMS) == {"perfect", *MAGS_MODES} and T.SYSTEMS["perfect"] is None
    configs = {}
    for name, memory in MAGS_MODES.items():
        cfg = T.system_config(name)
        assert cfg.memory == memory, name
        # the game's configuration of the same mode, not a copy that could drift
        assert cfg.to_dict() == make_config(GAME[T.GAME_NAMES[name]]).to_dict(), name
        configs[name] = json.dumps(cfg.to_dict(), sort_keys=True)
    assert len(set(configs.values())) == len(MAGS_MODES)  # no two modes are one configuration
    assert T.system_config("mags_trained").models == "trained" and T.system_config("mags_base").models == "base"
    assert T.system_config("rag", n_threads=1, recall_k=3).recall_k == 3  # shared settings on top
    with pytest.raises(ValueError, match="PerfectMemory"):
        T.system_config("perfect")
    with pytest.raises(ValueError, match="unknown system"):
        T.make_system("graph_base")


def test_every_memory_mode_answers_every_question_of_the_hand_made_game(modes_run):
    sc, _, out = modes_run
    asks = [e["ask"] for e in sc["events"] if "ask" in e]
    perfect = T.run_scenario(T.PerfectMemory(ENTITIES, trajectory()), sc)
    assert all(r["correct"] for r in perfect) and "Where is the spoon?" in asks
    for name, run in out.items():
        assert [r["question"] for r in run["rows"]] == asks, name
        assert len(run["backends"]["answer"].calls) == len(asks), name  # the reader answers each question
        assert [r["kind"] for r in run["rows"]] == [r["kind"] for r in perfect], name
        # the fake reader never knows: the abstain question is right, the others wrong, in every mode
        assert [r["correct"] for r in run["rows"]] == [r["kind"] == "abstain" for r in run["rows"]], name


def _seen(call) -> list[str]:
    """The observations (by their marker phrase) in one prompt to the reader."""
    return [o for o in OBSERVED if o in call["content"]]


def test_each_memory_mode_shows_the_reader_what_it_should(modes_run):
    _, root, out = modes_run
    n_asks = len(out["none"]["rows"])
    for name in ("none", "full_context", "rag"):  # no write nor ask model runs in the baselines
        assert not out[name]["backends"]["write"].calls and not out[name]["backends"]["ask"].calls, name
        assert out[name]["facts"] == 0, name
    # none: the reader alone; not one observation reaches it, nothing is stored
    assert out["none"]["episodes"] == 0
    assert all(_seen(c) == [] for c in out["none"]["backends"]["answer"].calls)
    # full context: every observation so far, in order (the tiny game fits the window)
    full = out["full_context"]["backends"]["answer"].calls
    assert _seen(full[0]) == list(OBSERVED[:4]) and _seen(full[-1]) == list(OBSERVED)
    assert out["full_context"]["episodes"] == len(OBSERVED)
    # static RAG: the recall_k=2 observations nearest the question, never the whole history
    rag = out["rag"]["backends"]["answer"].calls
    assert all(1 <= len(_seen(c)) <= 2 for c in rag) and out["rag"]["episodes"] == len(OBSERVED)
    # MAGS: the write model runs on every observation, the ask model on every question, and the
    # reader sees the written facts
    for name in ("mags_base", "mags_trained"):
        b = out[name]["backends"]
        assert len(b["write"].calls) == len(OBSERVED) and len(b["ask"].calls) == n_asks, name
        assert out[name]["facts"] >= 2, name
        assert any("key is in chest" in c["content"] for c in b["answer"].calls), name
    # one reader and one answer prompt for none, full context, static RAG and MAGS base (the
    # embedded model); MAGS trained reads with the trained answer model and the prompt it was trained
    # with, as in the game (mags_lib.game.run.SYSTEMS: graph_trained = models="trained")
    from mags_lib.roles import ROLE_SPECS

    for name in ("none", "full_context", "rag", "mags_base"):
        assert out[name]["paths"] == {"ask": None, "write": None, "answer": None, "router": None}, name
        assert out[name]["answer_spec"] == ROLE_SPECS["answer"].base, name
        assert {c["prompt"][0]["content"] for c in out[name]["backends"]["answer"].calls} == \
            {ROLE_SPECS["answer"].base.system}, name
    for role in ("ask", "write", "answer"):
        assert Path(out["mags_trained"]["paths"][role]).is_relative_to(root / role / "default")
    assert out["mags_trained"]["answer_spec"] == ROLE_SPECS["answer"].trained


def test_no_two_memory_modes_are_silently_the_same(modes_run):
    """What reaches the models differs between every two modes: the reader's prompts, or (MAGS base
    against trained, same fake writes) the models and the prompts of every role."""
    _, _, out = modes_run
    views = {}
    for name, run in out.items():
        b = run["backends"]
        views[name] = json.dumps({"paths": run["paths"],
                                  **{role: [c["prompt"] for c in b[role].calls] for role in ("write", "ask", "answer")}})
    assert len(set(views.values())) == len(MAGS_MODES), [n for n in views if list(views.values()).count(views[n]) > 1]
    reader = {n: [c["content"] for c in run["backends"]["answer"].calls] for n, run in out.items()}
    assert len({json.dumps(reader[n]) for n in ("none", "full_context", "rag", "mags_base")}) == 4


def test_state_question_study_names_unknown_systems_and_skips_missing_models(tmp_path):
    with pytest.raises(ValueError, match="unknown systems"):
        T.state_question_study([], ["perfect", "graph_trained"])
    records, scenarios, skipped = T.state_question_study([], ["perfect", "mags_trained"], progress=False,
                                                         base={"models_root": str(tmp_path), "embedder": "hash"})
    assert records == [] and scenarios == []
    assert set(skipped) == {"mags_trained"} and "no trained" in skipped["mags_trained"]


# ------------------------------------------------------------------------------------------------
# the real engine
needs_tw = pytest.mark.skipif(not T.textworld_available(), reason=T.skip_reason() or "")


def _tiny_game(folder: Path) -> T.GameFile:
    """Three rooms (kitchen -north-> hall -east-> garden); key on the kitchen floor, an apple in a
    closed chest in the hall, a table in the garden, a spoon in a closed drawer; quest: take the apple."""
    import textworld
    from textworld import GameMaker

    M = GameMaker()
    kitchen, hall, garden = M.new_room("kitchen"), M.new_room("hall"), M.new_room("garden")
    M.connect(kitchen.north, hall.south)
    M.connect(hall.east, garden.west)
    M.set_player(kitchen)
    chest = M.new(type="c", name="chest")
    chest.add_property("closed")
    hall.add(chest)
    key = M.new(type="k", name="key")
    kitchen.add(key)
    apple = M.new(type="f", name="apple")
    chest.add(apple)
    garden.add(M.new(type="s", name="table"))
    drawer = M.new(type="c", name="drawer")
    drawer.add_property("closed")
    garden.add(drawer)
    drawer.add(M.new(type="o", name="spoon"))
    M.set_quest_from_commands(["go north", "open chest", "take apple from chest"])
    game = M.build()
    T._compile(game, folder)
    del textworld
    return T.load_game(folder / "game.z8")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    if not T.textworld_available():
        pytest.skip(T.skip_reason())
    return _tiny_game(tmp_path_factory.mktemp("tw") / "tiny")


SCRIPT = ["take key", "go north", "open chest", "put key in chest", "go east", "go west", "go south", "go north",
          "go east"]


@pytest.fixture(scope="module")
def tiny_play(tiny):
    with T.TWGame(tiny) as g:
        steps = [g.reset()]
        for cmd in SCRIPT:
            steps.append(g.step(cmd))
        return steps, g.entities


@needs_tw
def test_real_engine_state_and_questions_on_the_three_room_game(tiny_play):
    steps, entities = tiny_play
    assert set(entities) >= {"kitchen", "hall", "garden", "key", "apple", "chest", "spoon", "drawer", "table"}
    s0 = steps[0].state
    assert s0.player == "kitchen" and s0.holders["key"] == "kitchen" and s0.holders["apple"] == "chest"
    assert s0.exits[("kitchen", "north")] == "hall" and s0.exits[("hall", "east")] == "garden"
    assert "Kitchen" in steps[0].text and "$$" not in steps[0].text and ">" not in steps[0].text
    assert steps[1].state.holders["key"] == INVENTORY
    assert steps[4].state.holders["key"] == "chest" and "chest" in steps[4].state.open
    assert not any(s.done for s in steps)
    w = Witness()
    for s in steps:
        w.update(s, entities)
    qs = by_question(T.questions_at(w, steps[-1].state, entities=entities, config=QuestionConfig(retention_gap=4)))
    assert qs["Where is the key?"]["answer"] == ["chest", "hall"] and qs["Where is the key?"]["kind"] == "update"
    assert sorted(qs["What is in the chest?"]["answer"]) == ["apple", "key"]
    assert qs["Which room lies north of the kitchen?"]["answer"] == ["hall"]
    assert qs["Which room lies east of the hall?"]["answer"] == ["garden"]
    assert qs["Where is the spoon?"]["kind"] == "abstain"  # in the closed drawer, never seen
    assert qs["Where is the table?"]["answer"] == ["garden"]
    assert qs["What are you carrying?"]["kind"] == "update"


@needs_tw
def test_scorer_end_to_end_on_the_three_room_game(tiny, tiny_play):
    steps, entities = tiny_play
    cfg = T.PlayConfig(n_steps=len(SCRIPT), questions=QuestionConfig(ask_every=3, per_round=6, retention_gap=4))
    sc = T.make_scenario(tiny, cfg, steps=steps, entities=entities)
    asks = [e for e in sc["events"] if "ask" in e]
    says = [e for e in sc["events"] if "say" in e]
    assert len(says) == len(steps) and says[1]["say"].startswith("> take key")
    assert says[3]["source"] == f"{tiny.name}:3" and says[3]["time"] == "2024-01-01T09:03"
    kinds = {q["kind"] for q in asks}
    assert {"update", "abstain", "recall"} <= kinds, kinds
    assert set(sc) == {"name", "description", "events", "meta"}
    assert len(sc["meta"]["families"]) == len(asks)
    # a perfect memory of what the player saw answers every question
    perfect = T.run_scenario(T.PerfectMemory(entities, steps), sc)
    assert len(perfect) == len(asks) and all(r["correct"] for r in perfect), \
        [r for r in perfect if not r["correct"]]

    class Stale(T.PerfectMemory):
        """Remembers where things were first seen, never where they went."""

        def ask(self, question, time=None):
            e = question[len("Where is the "):-1] if question.startswith("Where is the ") else None
            if e in self.witness.history:
                return f"In the {self.witness.history[e][0][1]}."
            return super().ask(question, time)

    class Forgetful:
        def observe(self, text, source=None, time=None):
            pass

        def ask(self, question, time=None):
            return "I don't know: that is not in my memory."

    table = T.accuracy_table(T.run_scenario(Stale(entities, steps), sc), by="kind").set_index("kind")
    where_updates = [r for r in T.run_scenario(Stale(entities, steps), sc)
                     if r["kind"] == "update" and r["question"].startswith("Where is")]
    assert where_updates and not any(r["correct"] for r in where_updates)
    assert table.loc["overall", "accuracy"] < 1.0
    none = T.accuracy_table(T.run_scenario(Forgetful(), sc), by="kind").set_index("kind")
    assert none.loc["abstain", "accuracy"] == 1.0
    assert none.loc["recall", "accuracy"] == 0.0 and none.loc["update", "accuracy"] == 0.0


@needs_tw
@pytest.mark.slow
def test_same_seed_same_game_and_the_cache(tmp_path):
    spec = GameSpec(kind="treasure_hunter", n_rooms=3, quest_length=2, seed=5)
    a, b = T.build_game(spec).serialize(), T.build_game(spec).serialize()
    assert a == b
    other = T.build_game(GameSpec(kind="treasure_hunter", n_rooms=3, quest_length=2, seed=6)).serialize()
    assert other != a
    custom = GameSpec(kind="custom", n_rooms=2, n_objects=3, quest_length=1, seed=2)
    assert T.build_game(custom).serialize() == T.build_game(custom).serialize()
    gf = T.make_game(spec, cache_dir=tmp_path)
    assert gf.path.is_file() and gf.json_path.is_file() and gf.name == spec.name
    mtime = gf.path.stat().st_mtime_ns
    again = T.make_game(spec, cache_dir=tmp_path)
    assert again.path == gf.path and again.path.stat().st_mtime_ns == mtime  # reused, not recompiled
    good = gf.path.read_bytes()
    gf.path.write_bytes(good[:4000])  # a damaged cache (an interrupted copy) is compiled again, not trusted
    assert T.make_game(spec, cache_dir=tmp_path).path.read_bytes() == good
    assert T.load_game(gf.path).spec == spec
    # the same game plays the same: same texts, same states, under the same policy seed
    s1, _ = T.play(gf, T.PlayConfig(n_steps=6), seed=1)
    s2, _ = T.play(gf, T.PlayConfig(n_steps=6), seed=1)
    assert [(s.command, s.text, s.state) for s in s1] == [(s.command, s.text, s.state) for s in s2]
    assert not s1[-1].done  # avoid_win keeps the game going


@needs_tw
def test_missing_foreign_and_corrupt_game_files(tmp_path, tiny):
    with pytest.raises(T.GameFileError, match="does not exist"):
        T.load_game(tmp_path / "nope.z8")
    (tmp_path / "game.txt").write_text("hello")
    with pytest.raises(T.GameFileError, match="unsupported game format"):
        T.load_game(tmp_path / "game.txt")
    (tmp_path / "old.ulx").write_bytes(b"Glul" + bytes(60))
    with pytest.raises(T.GameFileError, match="Glulx"):
        T.load_game(tmp_path / "old.ulx")
    foreign = tmp_path / "zork.z5"
    foreign.write_bytes(tiny.path.read_bytes())
    with pytest.raises(T.GameFileError, match="no zork.json"):
        T.load_game(foreign)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "game.z8").write_bytes(b"\x00garbage" * 20)
    (bad / "game.json").write_text(tiny.json_path.read_text())
    with pytest.raises(T.GameFileError, match="not a Z-machine game"):
        T.load_game(bad / "game.z8")
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "game.z8").write_bytes(tiny.path.read_bytes()[:4096])
    (cut / "game.json").write_text(tiny.json_path.read_text())
    with pytest.raises(T.GameFileError, match="truncated"):
        T.load_game(cut / "game.z8")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "game.z8").write_bytes(tiny.path.read_bytes())
    (broken / "game.json").write_text("{not json")
    with pytest.raises(T.GameFileError, match="corrupt"):
        T.load_game(broken / "game.z8")
    # header and length intact, body damaged: jericho died of it (SIGFPE, no exception); the checksum catches it
    import random

    data = bytearray(tiny.path.read_bytes())
    body = random.Random(0).randbytes(len(data) - 64)
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "game.z8").write_bytes(bytes(data[:64]) + body)
    (damaged / "game.json").write_text(tiny.json_path.read_text())
    with pytest.raises(T.GameFileError, match="header checksum"):
        T.load_game(damaged / "game.z8")
    with pytest.raises(T.GameFileError, match="header checksum"):  # a GameFile handed in is checked too
        T.TWGame(T.GameFile(path=damaged / "game.z8", name="damaged"))
    T._check_zmachine(tiny.path)  # the real game passes


@needs_tw
@pytest.mark.slow
def test_ulx_with_its_json_is_recompiled_to_z8(tmp_path, tiny):
    ulx = tmp_path / "old.ulx"
    ulx.write_bytes(b"Glul" + bytes(60))
    (tmp_path / "old.json").write_text(tiny.json_path.read_text())
    gf = T.load_game(ulx, cache_dir=tmp_path / "cache")
    assert gf.path.suffix == ".z8" and gf.path.is_file()
    with T.TWGame(gf) as g:
        assert g.reset().state.player == "kitchen"


class _Answers:
    """A memory that answers from a table of question -> answer and records what it was asked."""

    def __init__(self, table: dict[str, str]) -> None:
        self.table, self.asked = table, []

    def observe(self, text, source=None, time=None):
        pass

    def ask(self, question, time=None):
        self.asked.append(question)
        return self.table.get(question, "It is not in memory.")


def _hall_step() -> Step:
    kinds = {"hall": "room", "attic": "room", "cellar": "room", "garden": "room", "key": "object",
             "chest": "container"}
    state = WorldState(player="hall", holders={"key": "chest", "chest": "garden"}, kinds=kinds,
                       exits={("hall", "north"): "attic", ("hall", "south"): "garden"})
    return Step(index=3, command="go north", text="-= Hall =-", state=state,
                admissible=["go north", "go south", "open door", "look"])


def test_memory_agent_moves_by_the_direction_questions_memory_is_scored_on():
    """The room memory names for the target lies behind an exit that memory knows: the agent takes it
    from the per-exit question ("Which room lies south of the hall?"), without the multi-hop one."""
    names = list(_hall_step().state.kinds)
    mem = _Answers({"Where is the key?": "In the chest.", "Where is the chest?": "In the garden.",
                    "Which room lies north of the hall?": "The attic.",
                    "Which room lies south of the hall?": "The garden."})
    agent = T.MemoryAgent(mem, T.AgentConfig(seed=0))
    step = _hall_step()
    assert agent._memory_move(step, ["key"], None, names, ["go north", "go south"], 3) == "go south"
    assert not any(q.startswith("Which way") for q in mem.asked)
    assert agent.answers == {"where/right": 2, "exit/right": 2}  # judged against the engine's state
    # back in the hall looking for the same key: memory led in a circle, so it is not followed again
    # (both exits are known to memory: no unknown exit to prefer either)
    assert agent._memory_move(step, ["key"], None, names, ["go north", "go south"], 9) is None
    # the destination is further away: no exit names it, so the agent asks the way and follows the answer
    mem = _Answers({"Where is the key?": "In the chest.", "Where is the chest?": "In the garden.",
                    "Which room lies north of the hall?": "The attic.",
                    "Which way from the hall leads to the garden?": "Go north."})
    agent = T.MemoryAgent(mem, T.AgentConfig(seed=0))
    assert agent._memory_move(step, ["key"], None, names, ["go north", "go south"], 3) == "go north"
    assert mem.asked[-1] == "Which way from the hall leads to the garden?"
    # nothing to look for: the exit memory knows nothing about is preferred
    mem = _Answers({"Which room lies north of the hall?": "The attic."})
    agent = T.MemoryAgent(mem, T.AgentConfig(seed=0))
    assert agent._memory_move(step, [], None, names, ["go north", "go south"], 3) == "go south"
    # memory that names no room anywhere gives no move (the agent then walks at random)
    agent = T.MemoryAgent(_Answers({}), T.AgentConfig(seed=0))
    assert agent._memory_move(step, ["key"], None, names, ["go north", "go south"], 3) is None
    assert agent.answers == {"where/unknown": 1, "exit/unknown": 2}
    # a wrong room for an exit, and a wrong place for the key, are counted as wrong
    agent = T.MemoryAgent(_Answers({"Where is the key?": "In the cellar.", "Which room lies south of the hall?":
                                    "The attic."}), T.AgentConfig(seed=0))
    agent._memory_move(step, ["key"], None, names, ["go north", "go south"], 3)
    assert agent.answers == {"where/wrong": 1, "exit/unknown": 1, "exit/wrong": 1}
    table = T.episode_table([{"agent": "m", "won": True, "steps": 4, "n_asks": 4, "answers": agent.answers}])
    assert table["exit_wrong"].iloc[0] == 0.5 and table["where_wrong"].iloc[0] == 1.0


def test_move_note_names_the_rooms_on_both_sides_of_a_move_and_nothing_else():
    hall = _hall_step()
    attic = Step(index=4, command="go north", text="-= Attic =-", admissible=[],
                 state=dataclasses.replace(hall.state, player="attic"))
    assert T.move_note(hall, attic) == "Going north from the hall leads to the attic."
    assert T.move_note(None, attic) == ""  # no step before it: nothing is known of where it came from
    stay = Step(index=4, command="go north", text="You can't go that way.", admissible=[], state=hall.state)
    assert T.move_note(hall, stay) == ""  # a blocked move crosses nothing
    opened = Step(index=4, command="open door", text="Opened.", admissible=[], state=attic.state)
    assert T.move_note(hall, opened) == ""


class _Recorder(_Answers):
    def __init__(self) -> None:
        super().__init__({})
        self.seen: list[str] = []

    def observe(self, text, source=None, time=None):
        self.seen.append(text)


@needs_tw
@pytest.mark.parametrize("notes", [True, False])
def test_the_agent_tells_memory_its_moves_as_the_engine_mapped_them(tiny, notes):
    rec = _Recorder()
    T.run_episode(tiny, rec, T.AgentConfig(max_steps=6, seed=0, explore_first=6, move_notes=notes))
    with T.TWGame(tiny) as g:
        exits = g.reset().state.exits
    found = [re.match(r"Going (\w+) from the (\w+) leads to the (\w+)\.\n> go \1\n", t) for t in rec.seen]
    found = [m.groups() for m in found if m]
    assert len(found) == sum(t.startswith("Going ") for t in rec.seen)  # a note heads the move's own text
    if notes:
        assert found and all(exits[(a, d)] == b for d, a, b in found)
    else:
        assert not found


@needs_tw
@pytest.mark.slow
def test_memory_agent_uses_memory_to_finish_sooner(tiny):
    """Second visit: the walk saw the apple in the chest; with perfect memory the agent goes straight there."""
    cfg = T.AgentConfig(max_steps=25, seed=0, explore_first=8)
    with_memory = T.run_episode(tiny, config=cfg, perfect_memory=True)
    without = T.run_episode(tiny, None, cfg)
    assert with_memory.won and with_memory.memory_moves >= 1 and with_memory.n_asks >= 1
    assert with_memory.answers and not any(k.endswith("/wrong") for k in with_memory.answers)  # it never errs
    assert not without.use_memory and without.n_asks == 0 and without.memory_moves == 0
    assert with_memory.steps <= without.steps
    assert with_memory.commands[-1] == "take apple from chest"
    table = T.episode_table([{**vars(with_memory), "agent": "memory"}, {**vars(without), "agent": "none"}])
    assert list(table["agent"]) == ["memory", "none"] and table["success"].iloc[0] == 1.0


@needs_tw
@pytest.mark.slow
def test_state_question_study_in_parallel_equals_serial(tmp_path):
    """Generated games, a real reader (the none mode: no write model, so it stays short) and the
    perfect memory: two processes give the records of one, in the same order."""
    specs = [GameSpec(kind="custom", n_rooms=2, n_objects=3, quest_length=1, seed=s) for s in (2, 3)]
    cfg = T.PlayConfig(n_steps=6, questions=QuestionConfig(ask_every=3, per_round=2))
    base = {"embedder": "hash", "max_new_tokens_answer": 12}
    saved = tmp_path / "memories"
    runs = [T.state_question_study(specs, ["perfect", "none"], cfg, cache_dir=tmp_path, base=base, n_jobs=n,
                                   progress=False, save_memories=saved if n == 2 else None) for n in (1, 2)]
    (serial, sc1, sk1), (parallel, sc2, sk2) = runs
    assert not sk1 and not sk2 and sc1 == sc2
    # each MAGS system's final memory of each game was saved (by the worker processes) and loads back;
    # the perfect memory is no MAGS and saves nothing
    from mags_lib import MAGS

    assert sorted(p.name for p in saved.iterdir()) == ["none"]
    for sc in sc2:
        with MAGS.load(T.memory_path(saved, "none", sc["meta"]["game"])) as m:
            assert m.n_observations == sum("say" in ev for ev in sc["events"])
            assert m.n_asks == sum("ask" in ev for ev in sc["events"])
    # game by game, and within a game system by system, in the order given
    order = [(r["game"], r["system"]) for r in serial]
    assert list(dict.fromkeys(order)) == [(s.name, n) for s in specs for n in ("perfect", "none")]
    drop = ("game_seconds",)
    assert [{k: v for k, v in r.items() if k not in drop} for r in serial] == \
        [{k: v for k, v in r.items() if k not in drop} for r in parallel]
    assert all(r["game_seconds"] > 0 for r in serial + parallel)
    assert all(r["correct"] for r in serial if r["system"] == "perfect")


@needs_tw
@pytest.mark.slow
def test_agent_study_in_parallel_equals_serial(tmp_path):
    spec = GameSpec(kind="treasure_hunter", n_rooms=3, quest_length=2, mode="easy", seed=4)
    cfg = T.AgentConfig(max_steps=8, seed=0, explore_first=4)
    runs = [T.agent_study([spec], ["none", "perfect", "graph_base"], cfg, episodes=2, cache_dir=tmp_path,
                          n_jobs=n, progress=False) for n in (1, 2)]
    (serial, sk1), (parallel, sk2) = runs
    assert sk1 == sk2 and set(sk1) == {"graph_base"} and "unknown system" in sk1["graph_base"]
    assert [(r["agent"], r["episode"]) for r in serial] == [(a, i) for i in (0, 1) for a in ("none", "perfect")]
    drop = ("seconds",)
    assert [{k: v for k, v in r.items() if k not in drop} for r in serial] == \
        [{k: v for k, v in r.items() if k not in drop} for r in parallel]


@needs_tw
def test_an_episode_lost_early_counts_the_whole_budget(tmp_path):
    # a one-room game where taking the pear loses: the agent's 1 step used to count as a quick finish
    from textworld import GameMaker
    from textworld.generator.game import Event, Quest

    M = GameMaker()
    kitchen = M.new_room("kitchen")
    M.set_player(kitchen)
    chest = M.new(type="c", name="chest")
    chest.add_property("locked")
    kitchen.add(chest)
    apple = M.new(type="f", name="apple")
    chest.add(apple)
    pear = M.new(type="f", name="pear")
    kitchen.add(pear)
    M.quests = [Quest(win_events=[Event(conditions={M.new_fact("in", apple, M.inventory)})],
                      fail_events=[Event(conditions={M.new_fact("in", pear, M.inventory)})])]
    game = M.build()
    game.objective = "Take the apple."
    T._compile(game, tmp_path)
    r = T.run_episode(T.load_game(tmp_path / "game.z8"), None, T.AgentConfig(max_steps=30, seed=0))
    assert not r.won and len(r.commands) < 30
    assert r.steps == 30
    tab = T.episode_table([{**dataclasses.asdict(r), "agent": "none"}])
    assert tab.loc[0, "steps"] == 30 and tab.loc[0, "success"] == 0.0
