"""Audit of the procedural data generators and the dataset store: gold labels, split leaks, atomic saves,
bad input."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from mags_lib import protocol
from mags_lib.data import GenerationConfig, generate_role_splits, generate_world, generate_worlds, store
from mags_lib.data.answer import render_answer
from mags_lib.data.outcome import OutcomeConfig
from mags_lib.data.worlds import Entity, Fact, World


def _sibling_world() -> World:
    """Baisis's only sibling fact is the backwards one: Snabroel has sibling Baisis."""
    w = World("wsym", 0)
    w.entities = [Entity("Baisis", "person", "Baisis", "f"), Entity("Snabroel", "person", "Snabroel", "m"),
                  Entity("Trosnuia", "person", "Trosnuia", "f"), Entity("Pell Ridge", "place", "Pell"),
                  Entity("Quejav Hollow", "place", "Quejav")]
    w.facts = [Fact("Baisis", "sibling", "has sibling", "Trosnuia"),
               Fact("Snabroel", "sibling", "has sibling", "Baisis"),
               Fact("Pell Ridge", "near", "is near", "Quejav Hollow"),
               Fact("Quejav Hollow", "near", "is near", "Pell Ridge")]  # both ways: the same answer
    return w


@pytest.mark.parametrize("kind", ["unanswerable", "fact", "episode", "persona"])
def test_a_symmetric_fact_read_backwards_is_never_a_wrong_answer_distractor(kind):
    # "Snabroel has sibling Baisis" answers "Who is the sibling of Baisis?" (Snabroel): an unanswerable
    # row showing it must not say "abstain", and a fact row must not show it beside the gold Trosnuia
    w = _sibling_world()
    seen = 0
    for s in range(300):
        try:
            row = render_answer(w, kind, np.random.default_rng(s))
        except LookupError:
            continue
        if "Baisis" not in row["input"] or "sibling" not in row["input"]:
            continue
        seen += 1
        texts = [f"{it['speaker'] or ''}: {it['text']}" for it in row["memory"]]
        assert not any("Snabroel" in t and "Baisis" in t for t in texts), (row["input"], row["response"], texts)
    assert seen > 5


def test_answer_splits_hold_no_answerable_unanswerable_row():
    cfg = GenerationConfig(n_train=400, n_validation=0, n_test=0, worlds_train=30, worlds_validation=1,
                           worlds_test=1, roles=("answer",), answer_kinds={"unanswerable": 1.0})
    rows, worlds = generate_role_splits(cfg, progress=False)
    facts = {w.world_id: w.facts for w in worlds["train"]}
    bad = []
    for r in rows["answer"]["train"]:
        for f in facts[r["world_id"]]:
            if f.relation not in ("sibling", "near"):
                continue
            # the row asks for f.object's sibling / neighbour and shows "<f.subject> ... <f.object>"
            q = r["input"]
            if (r["template_ids"][0].split(".")[0] == f.relation and f.object in q and f.subject not in q
                    and any(f.subject in it["text"] and f.object in it["text"] for it in r["memory"])):
                bad.append((q, [it["text"] for it in r["memory"]]))
    assert {r["response"] for r in rows["answer"]["train"]} == {protocol.ABSTAIN_ANSWER}
    assert not bad, bad[:3]


def test_no_input_is_in_two_splits():
    # noise ("ok", "lol", "123") belongs to no world: without a check it repeats across splits
    cfg = GenerationConfig(n_train=400, n_validation=150, n_test=150, worlds_train=10, worlds_validation=4,
                           worlds_test=4, roles=("ask", "write"),
                           ask_kinds={"noise": 0.5, "single": 0.5}, write_kinds={"noise": 0.5, "single": 0.5})
    rows, _ = generate_role_splits(cfg, progress=False)
    for role in ("ask", "write"):
        inputs = {s: {r["input"] for r in rows[role][s]} for s in rows[role]}
        for a, b in (("train", "validation"), ("train", "test"), ("validation", "test")):
            common = inputs[a] & inputs[b]
            assert not common, f"{role}: {sorted(common)[:5]} in both {a} and {b}"
        assert all(len(rows[role][s]) == cfg.sizes()[s] for s in rows[role])


def _rows():
    rows, _ = generate_role_splits(GenerationConfig(n_train=20, n_validation=5, n_test=5, worlds_train=3,
                                                    worlds_validation=1, worlds_test=1, roles=("ask",)),
                                   progress=False)
    return rows["ask"]


def test_an_interrupted_resave_leaves_a_whole_dataset_that_the_next_save_repairs(tmp_path, monkeypatch):
    rows = _rows()
    kw = {"source": "generated", "seed": 0, "generator_version": "1", "root": tmp_path}
    store.save_dataset(rows, "gen_ask", **kw)
    new = {k: v[:-1] for k, v in rows.items()}
    real = shutil.rmtree

    def interrupted(path, *a, **k):  # Ctrl-C while the replaced folder is being deleted
        p = Path(path)
        if p.name in ("gen_ask", ".gen_ask.old") and (p / "data" / "train").exists():
            real(p / "data" / "train")
            raise KeyboardInterrupt
        return real(path, *a, **k)

    monkeypatch.setattr(store.shutil, "rmtree", interrupted)
    with pytest.raises(KeyboardInterrupt):
        store.save_dataset(new, "gen_ask", **kw)
    monkeypatch.setattr(store.shutil, "rmtree", real)
    d = store.load_processed("gen_ask", root=tmp_path)  # the old or the new data, whole
    assert {k: len(v) for k, v in d.items()} in ({k: len(v) for k, v in rows.items()},
                                                 {k: len(v) for k, v in new.items()})
    store.save_dataset(rows, "gen_ask", **kw)  # re-running the notebook restores the data
    d = store.load_processed("gen_ask", root=tmp_path)
    assert {k: len(v) for k, v in d.items()} == {k: len(v) for k, v in rows.items()}


def test_a_half_deleted_folder_with_a_matching_card_is_not_taken_as_saved(tmp_path):
    rows = _rows()
    kw = {"source": "generated", "seed": 0, "generator_version": "1", "root": tmp_path}
    path = store.save_dataset(rows, "gen_ask", **kw)
    shutil.rmtree(path / "data" / "train")  # what an interrupted delete (older versions) left behind
    store.save_dataset(rows, "gen_ask", **kw)
    assert len(store.load_processed("gen_ask", root=tmp_path)["train"]) == len(rows["train"])


@pytest.mark.parametrize("make", [
    lambda: generate_world("w0", seed=3.0),
    lambda: generate_world("w0", seed="3"),
    lambda: generate_world("w0", seed=None),
    lambda: generate_world("w0", seed=True),
    lambda: generate_worlds(2.0),
    lambda: GenerationConfig(n_train=2.5),
    lambda: GenerationConfig(worlds_train=2.5),
    lambda: GenerationConfig(seed=1.0),
    lambda: OutcomeConfig(n=2.5),
    lambda: OutcomeConfig(seed="0"),
])
def test_non_integer_sizes_and_seeds_are_refused_clearly(make):
    # a seed 3.0 used to give other worlds than 3 (hashed as text), 2.5 rows gave 3, 2.5 worlds crashed deep inside
    with pytest.raises(TypeError, match="must be an integer"):
        make()


def test_negative_seed_is_refused_by_the_config_not_by_numpy():
    with pytest.raises(ValueError, match="GenerationConfig.seed must be >= 0"):
        GenerationConfig(seed=-1)


def test_numpy_integers_stay_accepted_and_give_the_same_worlds():
    assert generate_world("w0", seed=np.int64(3)).facts == generate_world("w0", seed=3).facts
    assert GenerationConfig(n_train=np.int64(5)).n_train == 5


def test_a_multihop_question_has_one_chain_when_its_first_hop_is_symmetric():
    """"Where does the sibling of Ana live?" over "Ana has sibling Bo", "Bo lives in Pell Ridge": a distractor
    "Cob has sibling Ana" (Cob is Ana's sibling too, read backwards) beside "Cob lives in Quejav Hollow" made a
    second chain with another answer (1 of the default profile's 570 multihop rows before generator 1.4.1)."""
    w = World("wchain", 0)
    w.entities = [Entity(n, "person", n, "f") for n in ("Ana", "Bo", "Cob")] + [
        Entity("Pell Ridge", "place", "Pell"), Entity("Quejav Hollow", "place", "Quejav")]
    w.facts = [Fact("Ana", "sibling", "has sibling", "Bo"), Fact("Bo", "home", "lives in", "Pell Ridge"),
               Fact("Cob", "sibling", "has sibling", "Ana"), Fact("Cob", "home", "lives in", "Quejav Hollow")]
    rows = _multihop_rows(w, lambda row: "sibling of Ana" in row["input"])
    for row in rows:
        texts = [it["text"] for it in row["memory"]]
        assert not any("Cob" in t and "Ana" in t for t in texts), (row["input"], row["response"], texts)
    assert len(rows) > 5


def _multihop_rows(world, asked, n_seeds: int = 300) -> list[dict]:
    """The multihop answer rows ``world`` renders over ``n_seeds`` seeds for which ``asked(row)`` holds."""
    out = []
    for s in range(n_seeds):
        try:
            row = render_answer(world, "multihop", np.random.default_rng(s))
        except LookupError:
            continue
        if asked(row):
            out.append(row)
    return out


def test_a_multihop_question_has_one_answer_when_its_second_hop_is_symmetric():
    """"Which place lies close to the town where Cooia lives?" over "Cooia lives in Zubrand Bridge", "Zubrand Bridge
    is near Kroork Crossing": a distractor "Staquie Marsh is near Zubrand Bridge" (near, read backwards) was a second
    right answer with one accepted (23 of the default profile's 570 multihop rows before generator 1.4.2)."""
    w = World("wnear", 0)
    w.entities = [Entity("Cooia", "person", "Cooia", "f")] + [
        Entity(n, "place", n.split()[0]) for n in ("Zubrand Bridge", "Kroork Crossing", "Staquie Marsh")]
    w.facts = [Fact("Cooia", "home", "lives in", "Zubrand Bridge"),
               Fact("Zubrand Bridge", "near", "is near", "Kroork Crossing"),
               Fact("Staquie Marsh", "near", "is near", "Zubrand Bridge")]
    rows = _multihop_rows(w, lambda row: "Cooia" in row["input"] and row["response"] == "Kroork Crossing")
    for row in rows:
        texts = [it["text"] for it in row["memory"]]
        assert not any("Staquie" in t for t in texts), (row["input"], row["response"], texts)
    assert len(rows) > 5


def test_build_all_refuses_an_unknown_profile_and_a_seed_its_config_overrides(tmp_path):
    # build_all("smok", config=...) saved gen_*_smok datasets; build_all(seed=5, config=<seed 0>) built seed 0
    from mags_lib.data import WorldConfig, build_all, profile_config

    with pytest.raises(ValueError, match="unknown profile 'smok'"):
        build_all("smok", config=profile_config("smoke"), root=tmp_path, seed_path=None, progress=False)
    with pytest.raises(ValueError, match="disagree"):
        build_all("smoke", seed=5, config=profile_config("smoke"), root=tmp_path, seed_path=None, progress=False)
    assert not (tmp_path / "processed").exists() and not any(tmp_path.iterdir())
    with pytest.raises(TypeError, match="pair of integers"):
        WorldConfig(species=(2.5, 4))  # drew 2 species


def _pronoun_after_other_lead(world, text: str, tids: list[str], subjects: list[str]) -> bool:
    """Whether a sentence opening with a pronoun follows one its (same) subject does not open alone."""
    import re

    from mags_lib.data.templates import CONNECTIVES, RELATIONS_BY_KEY

    def _subject_led(rel, tid):  # the template opens with its subject alone
        text = rel.statements[int(tid.rsplit(".s", 1)[1])]
        return text.startswith("{S}") and not text.startswith("{S} and {O}")

    sents = re.split(r"(?<=[.?!]) +", text)
    assert len(sents) == len(tids), (text, tids)
    for i in range(1, len(sents)):
        s = sents[i]
        for c in sorted(filter(None, CONNECTIVES), key=len, reverse=True):
            if s.startswith(c):
                s = s[len(c):]
                break
        prev_rel = RELATIONS_BY_KEY[tids[i - 1].rsplit(".s", 1)[0]]
        if (s.split()[0].lower() in {"they", "she", "he", "it"} and subjects[i] == subjects[i - 1]
                and not _subject_led(prev_rel, tids[i - 1])):
            return True
    return False


def test_a_pronoun_follows_only_a_sentence_its_subject_opens():
    # "Flojouits prey on kloolixes. Another thing: they run away from loud clocks." with the gold
    # (kloolixes, are afraid of, loud clocks): 14 of 982 default write/multi rows and 14 of 834 ask/mixed rows
    from mags_lib.data.render import _a_mixed, _Skip, _w_multi

    bad = checked = 0
    for w_i, world in enumerate(generate_worlds(40, seed=7)):
        for k in range(25):
            rng = np.random.default_rng([w_i, k])
            try:
                text, trips, tids = _w_multi(world, rng)
            except (_Skip, LookupError):
                continue
            checked += 1
            bad += _pronoun_after_other_lead(world, text, tids, [t[0] for t in trips])
            try:
                text, _, asked, tids = _a_mixed(world, np.random.default_rng([w_i, k, 1]))
            except (_Skip, LookupError):
                continue
            checked += 1
            subj = asked[0].subject
            bad += _pronoun_after_other_lead(world, text, tids, [subj] * len(tids))
    assert checked > 1000 and bad == 0


def test_no_unanswerable_row_is_answered_by_a_reverse_symmetric_fact():
    # "Does Leneabathia have a brother or sister?" (gold: not in memory) beside "Bian: My sibling is called
    # Leneabathia." -- the answer, said in the first person
    from mags_lib.data.answer import _k_unanswerable

    w = _sibling_world()
    w.facts.append(Fact("Trosnuia", "sibling", "has sibling", "Baisis"))  # the answer's own fact, backwards

    class Clock:
        dated = False

        def at(self, t):
            return None

    asked = Fact("Baisis", "sibling", "has sibling", "Trosnuia")
    for seed in range(200):
        rng = np.random.default_rng(seed)
        try:
            q, answer, _, items, _ = _k_unanswerable(w, rng, Clock())
        except Exception:  # a draw without a usable distractor
            continue
        if "Baisis" not in q or "sibling" not in q.lower() and "brother" not in q.lower():
            continue
        said = " ".join(f"{it['speaker'] or ''}: {it['text']}" for it in items)
        assert "Trosnuia" not in said and "Snabroel" not in said, (q, items)


def test_outcome_questions_accept_every_value_a_symmetric_fact_gives():
    # "Does Stathiwan have a brother or sister?" accepted only Blochaimixo with "Zhasia and Stathiwan are siblings"
    # in the scenario too: 7 of 590 ask questions (n=400, 300 worlds) had a second right answer scored wrong
    import json

    from mags_lib.data import outcome

    sym = {"has sibling", "is near"}
    rows = outcome.build_outcome_rows(OutcomeConfig(n=400, worlds=300, roles=("ask",)), progress=False)["ask"]
    second, widened = 0, 0
    for r in rows:
        sc = json.loads(r["scenario"])
        for q in sc["questions"]:
            s, label, o = q["needs"]
            if label not in sym:
                continue
            others = {y if x == s else x for x, lab, y in map(tuple, sc["memory"]) if lab == label and s in (x, y)}
            second += bool(others - {o, s} - set(q["aliases"]))
            widened += len(q["aliases"]) > 1
    assert second == 0 and widened > 0
