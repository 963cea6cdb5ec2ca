"""Answer rows in TextWorld's register (mags_lib.data.textworld) and the training options that mix them in.

The rows are checked against the game they came from: the answer of every answerable row is in its memory
block, an abstention's object never is, and the block is the play's own observations in play order. The
training half checks that ``SFTConfig.extra_data`` rows reach the trainer, that a missing dataset or a
missing ``init_from`` run is a clear error, and that the new fields at their defaults leave the stage
hashes of earlier runs alone. Generated games are skipped, in one line, when TextWorld is not installed.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from mags_lib import protocol
from mags_lib import textworld as T
from mags_lib.data.textworld import (
    TRAIN_SEED_OFFSET,
    TextWorldAnswerConfig,
    build_textworld_answer,
    dataset_name_tw,
    game_answer_rows,
)
from mags_lib.training.config import SFTConfig, TrainConfig
from mags_lib.training.run import _stage_ident, load_role_data, train_role, training_rows

needs_tw = pytest.mark.skipif(not T.textworld_available(), reason=T.skip_reason() or "")


@pytest.mark.parametrize("kwargs, match", [
    ({"n_games": 2, "test_games": 2}, "test_games"),
    ({"sizes": ()}, "sizes"),
    ({"steps": (5, 3)}, "steps"),
    ({"max_chars": 50}, "max_chars"),
    ({"drop_evidence": 1.0}, "drop_evidence"),
    ({"drop_exit_evidence": 1.0}, "drop_exit_evidence"),
    ({"unseen_exits": 1.5}, "unseen_exits"),
])
def test_config_checks(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TextWorldAnswerConfig(**kwargs)


def test_training_games_never_take_the_evaluation_seeds(tmp_path):
    assert min(TextWorldAnswerConfig().seeds()) >= TRAIN_SEED_OFFSET
    assert dataset_name_tw("smoke") == "gen_answer_textworld_smoke"
    if T.textworld_available():
        with pytest.raises(ValueError, match="seeds >= 100000"):
            build_textworld_answer("smoke", config=TextWorldAnswerConfig(n_games=2, test_games=1, seed=-11),
                                   root=tmp_path, cache_dir=tmp_path / "games", progress=False)
        assert not (tmp_path / "data").exists()


@pytest.fixture(scope="module")
def tw_rows(tmp_path_factory):
    if not T.textworld_available():
        pytest.skip(T.skip_reason())
    cache = tmp_path_factory.mktemp("tw_games")
    cfg = TextWorldAnswerConfig(n_games=3, test_games=1, steps=(14, 18), drop_evidence=0.3,
                                drop_exit_evidence=0.3)
    out = []
    for i, s in enumerate(cfg.seeds()):
        gf = T.make_game(T.GameSpec(kind="custom", n_rooms=3 + i, n_objects=6 + i, quest_length=2, seed=s),
                         cache_dir=cache)
        out.append((gf, game_answer_rows(gf, cfg, seed=s)))
    return cfg, cache, out


@needs_tw
def test_every_answer_is_in_its_block_and_no_abstention_names_its_object(tw_rows):
    cfg, _, games = tw_rows
    rows = [r for _, rs in games for r in rs]
    families = {r["kind"].split("_")[1] for r in rows}
    assert {"where", "exit"} <= families and len(rows) >= 20
    assert any(r["kind"].endswith("missing_evidence") for r in rows) and any(r["kind"].endswith("abstain") for r in rows)
    assert any(r["kind"] == "tw_exit_unseen" for r in rows)
    assert any(r["kind"] == "tw_exit_missing_evidence" for r in rows)
    for gf, rs in games:
        exits = T.play(gf, T.PlayConfig(n_steps=1), seed=0)[0][0].state.exits  # the map never changes
        for r in rs:
            blob = " ".join(m["text"] for m in r["memory"]).lower()
            assert 1 <= len(r["memory"]) <= cfg.max_items or not r["memory"] and not r["aliases"]
            if not r["aliases"] and r["kind"].startswith("tw_exit"):  # the room, and no crossing to where it leads
                assert r["response"] == protocol.ABSTAIN_ANSWER
                d, room = r["input"][len("Which room lies "):-1].split(" of the ", 1)
                dest = exits[(room, d)]
                assert room.lower() in blob
                back = T.OPPOSITE[d]
                for m in r["memory"]:
                    t = m["text"].lower()
                    assert not (t.startswith(f"> go {d} ") and f"-= {dest.lower()} =-" in t), r
                    assert not (t.startswith(f"> go {back} ") and f"-= {room.lower()} =-" in t), r
            elif not r["aliases"]:
                assert r["response"] == protocol.ABSTAIN_ANSWER
                entity = r["input"][len("Where is the "):-1].lower()
                assert entity not in blob, r
            elif r["aliases"] != ["nothing", "empty handed"]:
                assert all(a.lower() in blob for a in r["aliases"]), r
                assert all(a in r["response"] for a in r["aliases"])
            if r["kind"].startswith("tw_exit") and r["aliases"]:  # both rooms of the crossing are shown
                room = r["input"].split(" of the ", 1)[1][:-1].lower()
                assert room in blob and r["aliases"][0].lower() in blob


@needs_tw
def test_blocks_are_the_plays_observations_in_play_order_and_seeded(tw_rows):
    cfg, _, games = tw_rows
    gf, rows = games[0]
    seed = cfg.seeds()[0]
    assert game_answer_rows(gf, cfg, seed=seed) == rows  # same game, same seed: same rows
    steps, _ = T.play(gf, T.PlayConfig(n_steps=cfg.steps[1]), seed=seed)  # a longer play has the same prefix
    texts = [" ".join(s.observation.split()) for s in steps]
    for r in rows:
        assert all(m["time"] == "2024-01-01" for m in r["memory"])  # the agent shows an ISO stamp's date
        at = -1
        for m in r["memory"]:  # each item is an observation of the play, in play order, shown once
            at = texts.index(m["text"], at + 1)
        assert len({m["text"] for m in r["memory"]}) == len(r["memory"])


@needs_tw
def test_the_dataset_is_saved_with_a_test_split_of_its_last_games(tw_rows, tmp_path):
    _, cache, _ = tw_rows
    cfg = TextWorldAnswerConfig(n_games=3, test_games=1, steps=(10, 12))
    path = build_textworld_answer("smoke", config=cfg, root=tmp_path, cache_dir=cache, progress=False)
    card = json.loads((path / "card.json").read_text())
    assert card["role"] == "answer" and path.name == "gen_answer_textworld_smoke"
    from mags_lib.data import load_processed

    ds = load_processed(path.name, root=tmp_path)
    test_games = {r["world_id"] for r in ds["test"]}
    assert len(test_games) == 1 and test_games.isdisjoint({r["world_id"] for r in ds["train"]})
    assert all(r["id"].startswith("tw-") for r in ds["train"])


def _answer_data(tmp_path, n=6):
    """A gen_answer dataset and a small extra one, saved under tmp_path."""
    from mags_lib.data import GenerationConfig, generate_role_splits
    from mags_lib.data.store import save_dataset

    cfg = GenerationConfig(n_train=n, n_validation=2, n_test=2, worlds_train=2, worlds_validation=1, worlds_test=1,
                           seed=1, roles=("answer",))
    rows = generate_role_splits(cfg, progress=False)[0]["answer"]
    save_dataset(rows, "gen_answer_smoke", source="generated", seed=1, generator_version="t", root=tmp_path)
    extra = {"train": [{**r, "id": f"x{i}", "source": "textworld"} for i, r in enumerate(rows["train"][:3])],
             "test": [{**rows["test"][0], "id": "xt"}]}
    save_dataset(extra, "gen_answer_textworld_smoke", source="generated", seed=1, generator_version="t", root=tmp_path)
    return rows


def test_extra_data_reaches_the_training_rows_and_its_hash_the_meta(tmp_path):
    _answer_data(tmp_path)
    cfg = TrainConfig(role="answer", profile="smoke", sft=SFTConfig(n_generated=4, extra_data={"gen_answer_textworld_smoke": 2}))
    data = load_role_data("answer", "smoke", root=tmp_path, extra=["gen_answer_textworld_smoke"])
    assert set(data["hashes"]) == {"gen_answer_smoke", "gen_answer_textworld_smoke"}
    rows = training_rows(data, cfg)
    assert len(rows) == 6 and sum(r["id"].startswith("x") for r in rows) == 2
    plain = load_role_data("answer", "smoke", root=tmp_path)
    with pytest.raises(ValueError, match="lacks"):
        training_rows(plain, cfg)
    with pytest.raises(FileNotFoundError, match="build_textworld_answer"):
        load_role_data("answer", "smoke", root=tmp_path, extra=["gen_answer_textworld"])
    with pytest.raises(ValueError, match="not ask rows|not write rows|mix only"):
        load_role_data("write", "smoke", root=tmp_path, extra=["gen_answer_textworld_smoke"])


@pytest.mark.parametrize("kwargs, match", [
    ({"extra_data": {"x": 0}}, "extra_data"),
    ({"extra_data": {"a/b": 3}}, "extra_data"),
    ({"init_from": " "}, "init_from"),
])
def test_sft_config_checks_the_new_fields(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SFTConfig(**kwargs)


def test_new_fields_at_their_defaults_keep_earlier_stage_hashes(tmp_path):
    cfg = TrainConfig(role="answer", profile="smoke")
    ident = _stage_ident("sft", cfg, [], base_dir=tmp_path, prompt=_prompt(), data_hashes={},
                         init_adapter=None)
    assert "extra_data" not in ident["stage_config"] and "init_from" not in ident["stage_config"]
    mixed = dataclasses.replace(cfg, sft=dataclasses.replace(cfg.sft, extra_data={"d": 3}))
    ident2 = _stage_ident("sft", mixed, [], base_dir=tmp_path, prompt=_prompt(), data_hashes={}, init_adapter=None)
    assert ident2["stage_config"]["extra_data"] == {"d": 3}


def _prompt():
    from mags_lib.roles import ROLE_SPECS

    return ROLE_SPECS["answer"].trained


def test_init_from_a_missing_run_is_a_clear_error(tmp_path):
    _answer_data(tmp_path)
    cfg = TrainConfig(role="answer", profile="smoke", sft=SFTConfig(max_steps=1, n_generated=2, init_from="nope"))
    with pytest.raises(FileNotFoundError, match="init_from='nope'"):
        train_role("answer", run_tag="v", config=cfg, models_root=tmp_path / "models", data_root=tmp_path,
                   progress=False, note=lambda s: None)
    # checked before anything is made: no run folder, and no base model converted into this models root
    assert not (tmp_path / "models").exists(), sorted(p.name for p in (tmp_path / "models").iterdir())


@pytest.mark.parametrize("notes", [False, True])
def test_exit_evidence_is_found_with_and_without_move_notes(notes):
    """With move notes each observation begins with the note, so the crossing's command is not the text's first
    line: the builder took every crossing for a reverse one and dropped the exit rows that the note states
    outright (102 of 1,094 exit questions over 10 plays, found by an audit)."""
    import types

    from mags_lib.data.textworld import _evidence

    note = "Going west from the cellar leads to the shower.\n" if notes else ""
    obs = [(0, "-= Cellar =-\nYou are in the cellar."), (1, note + "> go west\n-= Shower =-\nA shower stall.")]
    witness = types.SimpleNamespace(edges={("cellar", "west"): ("shower", 1)})
    q = {"family": "exit", "ask": "Which room lies west of the cellar?", "answer": ["shower"]}
    assert _evidence(q, obs, witness, T._mentions) == [0, 1]
    back = {"family": "exit", "ask": "Which room lies east of the shower?", "answer": ["cellar"]}
    witness.edges[("shower", "east")] = ("cellar", 1)  # the reverse crossing, recorded at the same step
    assert _evidence(back, obs, witness, T._mentions) == [0, 1]  # departure: the cellar, named before it


def test_a_block_is_never_built_past_its_caps():
    # seven evidence observations raised (rng.integers(7, 7)); evidence of 1,400 characters made a block past
    # the 1,000-character cap the README states (11 of 1,234 rows of 50 training games)
    import numpy as np

    from mags_lib.data.textworld import _block

    cfg = TextWorldAnswerConfig()
    obs = [(i, f"observation {i} " + "x" * 10) for i in range(10)]
    rng = np.random.default_rng(0)
    assert _block(list(range(7)), obs, rng, cfg, [], T._mentions) is None
    long = [(0, "a" * 700), (1, "b" * 700), (2, "c")]
    assert _block([0, 1], long, rng, cfg, [], T._mentions) is None
    ok = _block([0], long, rng, cfg, [], T._mentions)
    assert ok is not None and 0 in ok and 1 not in ok  # the other long one does not fit beside it


@needs_tw
def test_an_abstain_row_shows_nothing_naming_its_object(tmp_path):
    # the second training game of the default config: "Where is the Microsoft latchkey?" (gold: not in memory, the
    # witness missed it in the echo of the agent's own command) was shown "> unlock Microsoft box with Microsoft
    # latchkey ..." (1 of 49 "where" abstain rows of 40 games)
    cfg = TextWorldAnswerConfig(n_games=40, test_games=8)
    s = cfg.seeds()[1]
    size = cfg.sizes[1 % len(cfg.sizes)]
    gf = T.make_game(T.GameSpec(kind="custom", n_rooms=size, n_objects=size + 3, quest_length=2, seed=s),
                     cache_dir=tmp_path)
    rows = game_answer_rows(gf, cfg, seed=s)
    abstain = [r for r in rows if not r["aliases"] and r["input"].startswith("Where is the ")]
    assert "Where is the Microsoft latchkey?" in {r["input"] for r in abstain}
    for r in abstain:
        entity = r["input"][len("Where is the "):-1].lower()
        assert entity not in " ".join(m["text"] for m in r["memory"]).lower(), r
