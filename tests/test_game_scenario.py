"""Scenario files: the shared examples load; malformed files name the file, the event and the problem."""

from __future__ import annotations

import json

import pytest

from mags_lib.game import (
    KINDS,
    Scenario,
    ScenarioError,
    example_scenarios,
    load_scenario,
    load_scenarios,
    save_scenario,
    scenario_from_dict,
)
from mags_lib.game.scenario import DEFAULT_SCENARIO_DIR
from mags_lib.models import project_root

SHARED = (project_root() / DEFAULT_SCENARIO_DIR).resolve()


def _good() -> dict:
    return {"name": "t", "description": "d", "events": [
        {"say": "Blorps eat frozen lemons.", "time": "2024-01-02", "speaker": "Ana"},
        {"ask": "What do blorps eat?", "answer": ["frozen lemons"], "kind": "recall", "distance": 1},
        {"ask": "What is the mascot?", "answer": [], "kind": "abstain"},
    ]}


def _write(tmp_path, d, name="s.json"):
    p = tmp_path / name
    p.write_text(json.dumps(d) if not isinstance(d, str) else d)
    return p


def test_good_scenario_loads_and_round_trips(tmp_path):
    sc = load_scenario(_write(tmp_path, _good()))
    assert [e.type for e in sc.events] == ["say", "ask", "ask"]
    assert sc.events[0].time == "2024-01-02" and sc.events[0].speaker == "Ana"
    assert sc.events[1].answer == ("frozen lemons",) and sc.events[1].distance == 1
    out = save_scenario(sc, tmp_path / "copy.json")
    again = load_scenario(out)
    assert again.to_dict() == sc.to_dict() == _good()


BAD = [
    # (mutation of the good dict, event index or None, words the message must contain)
    (lambda d: d["events"][1].pop("kind"), 1, "kind"),
    (lambda d: d["events"][1].update(kind="trivia"), 1, "unknown kind"),
    (lambda d: d["events"][1].pop("answer"), 1, "answer"),
    (lambda d: d["events"][1].update(answer="frozen lemons"), 1, "list of strings"),
    (lambda d: d["events"][1].update(answer=[]), 1, "at least one alias"),
    (lambda d: d["events"][2].update(answer=["x"]), 2, "abstain"),
    (lambda d: d["events"][1].update(answer=["the"]), 1, "empty after normalisation"),
    (lambda d: d["events"][0].update(ask="Q?"), 0, "exactly one of"),
    (lambda d: d["events"][0].pop("say"), 0, "exactly one of"),
    (lambda d: d["events"][0].update(say="   "), 0, "non-empty string"),
    (lambda d: d["events"][1].update(answers=["x"]), 1, "unknown keys"),
    (lambda d: d["events"][0].update(time="yesterday"), 0, "ISO date"),
    (lambda d: d["events"][0].update(time=20240102), 0, "ISO date"),
    # basic-form ISO strings Python parses but the memory keeps as text (sorted before "2024-03-07")
    (lambda d: d["events"][0].update(time="20240306"), 0, "ISO date"),
    (lambda d: d["events"][0].update(time="2024-W10-2"), 0, "ISO date"),
    (lambda d: d["events"][0].update(time="20240305T103000"), 0, "ISO date"),
    (lambda d: d["events"][1].update(distance=-1), 1, "integer >= 0"),
    (lambda d: d["events"].__setitem__(2, "What?"), 2, "must be an object"),
    (lambda d: d.update(events=[]), None, "non-empty list"),
    (lambda d: d.pop("name"), None, "'name'"),
    (lambda d: d.update(extra=1), None, "unknown top-level keys"),
    # top-level parts an audit found unchecked (raw TypeErrors, or silently emptied)
    (lambda d: d.update(gold=5), None, "'gold' must be a list"),
    (lambda d: d.update(entities=7), None, "'entities' must be a list"),
    (lambda d: d.update(meta=[]), None, "'meta' must be an object"),
    (lambda d: d.update(gold=["x"]), None, "gold fact 0: needs subject"),
    (lambda d: d.update(gold=[{"subject": 1, "relation": "eat", "object": "x", "stated": 0}]), None,
     "'subject' must be a non-empty string"),
    (lambda d: d.update(gold=[{"subject": "a", "relation": "eat", "object": "x", "stated": 0, "superseded": 0}]),
     None, "must come after 'stated'"),
    (lambda d: d.update(entities=[{"name": 1, "core": None}]), None, "entity 0: name, core and type must be"),
]


@pytest.mark.parametrize("mutate,index,words", BAD)
def test_malformed_file_names_file_event_and_problem(tmp_path, mutate, index, words):
    d = _good()
    mutate(d)
    p = _write(tmp_path, d, "broken.json")
    with pytest.raises(ScenarioError) as exc:
        load_scenario(p)
    msg = str(exc.value)
    assert str(p) in msg
    if index is not None:
        assert f"event {index}:" in msg
    assert words in msg


def test_a_file_that_is_not_utf8_is_a_scenario_error(tmp_path):
    p = tmp_path / "latin1.json"
    p.write_bytes(json.dumps(_good(), ensure_ascii=False).replace("Blorps", "Bl\u00f6rps").encode("latin-1"))
    with pytest.raises(ScenarioError, match=r"latin1\.json: not UTF-8 text.*save the file as UTF-8"):
        load_scenario(p)


def test_invalid_json_names_the_line(tmp_path):
    p = _write(tmp_path, '{"name": "x",\n "events": [}', "syntax.json")
    with pytest.raises(ScenarioError, match=r"syntax\.json: not valid JSON \(line 2"):
        load_scenario(p)


def test_missing_file_and_duplicate_names(tmp_path):
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "nope.json")
    _write(tmp_path, _good(), "a.json")
    _write(tmp_path, _good(), "b.json")
    with pytest.raises(ScenarioError, match=r"unique, repeated: 't' in .*a\.json, .*b\.json"):
        load_scenarios(tmp_path)


def test_gold_indices_must_point_at_observations():
    d = _good()
    d["gold"] = [{"subject": "blorps", "relation": "eat", "object": "frozen lemons", "stated": 1,
                  "superseded": None}]
    with pytest.raises(ScenarioError, match="gold fact 0: 'stated' must be the index of a 'say'"):
        scenario_from_dict(d)
    d["gold"][0]["stated"] = 0
    assert scenario_from_dict(d).gold[0].stated == 0


def test_what_save_writes_loads_back_equal(tmp_path):
    """Loading strips names and texts; saving writes that checked form, so the file loads back as written
    (the docstring promised "it loads back equal" while " lena " came back "lena"; found by an audit)."""
    d = _good()
    d["name"], d["events"][0]["say"] = " lena ", "\u00a0Hi, I'm Lena.\n"
    p = save_scenario(scenario_from_dict(d), tmp_path / "s.json")
    sc = load_scenario(p)
    assert sc.name == "lena" and sc.events[0].text == "Hi, I'm Lena."
    assert json.loads(p.read_text()) == sc.to_dict()
    assert save_scenario(sc, tmp_path / "again.json").read_bytes() == p.read_bytes()


def test_save_refuses_what_could_not_be_loaded(tmp_path):
    sc = scenario_from_dict(_good())
    bad = Scenario(name="", description="", events=sc.events)
    with pytest.raises(ScenarioError):
        save_scenario(bad, tmp_path / "bad.json")
    assert not (tmp_path / "bad.json").exists()


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"optional input {SHARED} absent")
def test_shared_examples_load_with_every_kind():
    scs = example_scenarios()
    assert len(scs) >= 3
    kinds = {e.kind for sc in scs for e in sc.events if e.is_ask}
    assert kinds == set(KINDS)


def test_absent_examples_folder_is_skipped_in_one_line(tmp_path, capsys):
    assert example_scenarios(tmp_path / "none") == []
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "skipped" in out[0]
