"""The seed importer: ids, deterministic split by id, failures reported with reasons."""

import json
from pathlib import Path

import pytest

from mags_lib import protocol
from mags_lib.data.seed_import import DEFAULT_SEED_PATH, import_seed, resolve_seed_path, split_of


def _write(root: Path, folder: str, name: str, examples) -> None:
    (root / folder).mkdir(parents=True, exist_ok=True)
    (root / folder / name).write_text(json.dumps({"examples": examples}))


@pytest.fixture
def fake_seed(tmp_path):
    _write(tmp_path, "asks", "a.json", [
        {"input": "What do blorps eat?", "response": "<memory_ask>blorps diet</memory_ask>", "id": 1},
        {"input": "Hi", "response": "", "id": 2},
        {"input": "Where?", "response": "<memory_ask>where</memory_ask", "id": 3},  # unclosed tag
    ])
    _write(tmp_path, "writes", "w.json", [  # no ids: derived from file name + index
        {"input": "Blorps eat lemons.", "response": "<memory_write>Blorps,eat,lemons</memory_write>"},
        {"input": "Pluto.", "response": "<memory_write,contradict>Pluto,is,planet</memory_write>"},
        {"input": "Sun.", "response": "<memory_write>Sun,hot</memory_write>"},  # two fields
        {"input": "Blorps eat lemons.", "response": "<memory_write>Blorps,eat,lemons</memory_write>"},  # repeat
        {"response": "<memory_write>a,b,c</memory_write>"},  # no input
    ])
    return tmp_path


def test_ids_rows_and_failures(fake_seed):
    imp = import_seed(fake_seed)
    rows = {r["id"]: r for role in imp.rows.values() for split in role.values() for r in split}
    assert set(rows) == {"asks/a:1", "asks/a:2", "writes/w#0"}
    assert rows["writes/w#0"]["gold_facts"] == [["Blorps", "eat", "lemons"]]
    assert rows["asks/a:2"]["n_ops"] == 0 and rows["asks/a:2"]["response"] == ""
    failed = {f["id"]: f for f in imp.failures}
    assert set(failed) == {"asks/a:3", "writes/w#1", "writes/w#2", "writes/w#4"}
    assert "contradict" in failed["writes/w#1"]["category"]
    assert failed["writes/w#2"]["category"] == "write with fewer than three fields"
    assert any("input" in r for r in failed["writes/w#4"]["reasons"])
    assert imp.duplicate_inputs == 1
    assert sum(imp.failure_reasons().values()) == 4


def test_dedupe_can_be_switched_off(fake_seed):
    imp = import_seed(fake_seed, dedupe=False)
    n = sum(len(s) for role in imp.rows.values() for s in role.values())
    assert n == 4 and imp.duplicate_inputs == 1


def test_split_depends_on_id_only(fake_seed, tmp_path):
    a = import_seed(fake_seed)
    # reversing the file order changes indices but not the split of an example with an id
    data = json.loads((fake_seed / "asks" / "a.json").read_text())
    data["examples"].reverse()
    (fake_seed / "asks" / "a.json").write_text(json.dumps(data))
    b = import_seed(fake_seed)
    where = lambda imp: {r["id"]: s for s, rows in imp.rows["ask"].items() for r in rows}
    assert where(a) == where(b)
    assert all(split_of(i) == s for i, s in where(a).items())


def test_split_fraction_is_about_ten_percent():
    n_test = sum(split_of(f"asks/x:{i}") == "test" for i in range(5000))
    assert 400 < n_test < 600
    assert split_of("anything", 0.0) == "train" and split_of("anything", 1.0) == "test"
    with pytest.raises(ValueError):
        split_of("x", 1.5)


def test_missing_folder_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        import_seed(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="asks"):
        import_seed(tmp_path)


@pytest.mark.skipif(not resolve_seed_path(DEFAULT_SEED_PATH).exists(), reason="seed_syn_dual not available")
def test_real_seed_dataset():
    imp = import_seed(DEFAULT_SEED_PATH)
    counts = imp.counts()
    assert counts["ask"]["train"] > 500 and counts["write"]["train"] > 500
    assert 0 < len(imp.failures) < 50
    for role, splits in imp.rows.items():
        for rows in splits.values():
            for r in rows:
                assert protocol.parse(r["response"], role=role).ok
    ids = [r["id"] for role in imp.rows.values() for s in role.values() for r in s]
    assert len(ids) == len(set(ids))
    # no input in both splits (repeats are dropped by default)
    for role in imp.rows.values():
        train = {" ".join(r["input"].split()).lower() for r in role["train"]}
        assert not any(" ".join(r["input"].split()).lower() in train for r in role["test"])
