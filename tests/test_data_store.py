"""Saving processed datasets with a card; loading; cache by content hash."""

import json

import pytest

from mags_lib.data import GenerationConfig, generate_role_splits
from mags_lib.data.store import content_hash, dataset_name, load_card, load_processed, save_dataset


@pytest.fixture(scope="module")
def rows():
    cfg = GenerationConfig(n_train=30, n_validation=6, n_test=6, worlds_train=4, worlds_validation=2,
                           worlds_test=2)
    return generate_role_splits(cfg, progress=False)[0]


def test_roundtrip_and_card(tmp_path, rows):
    path = save_dataset(rows["ask"], "gen_ask_t", source="generated", seed=0, generator_version="9.9",
                        params={"n_train": 30}, root=tmp_path)
    assert path == tmp_path / "data" / "processed" / "gen_ask_t"
    ds = load_processed("gen_ask_t", root=tmp_path)
    assert set(ds) == {"train", "validation", "test"} and len(ds["train"]) == 30
    back = ds["train"].to_list()
    assert back[0]["ops"] == rows["ask"]["train"][0]["ops"]
    assert back[0]["context"] == rows["ask"]["train"][0]["context"]
    card = load_card("gen_ask_t", root=tmp_path)
    assert card["generator_version"] == "9.9" and card["seed"] == 0
    assert card["content_hash"] == content_hash(rows["ask"])
    assert card["statistics"]["train"]["n"] == 30
    assert "distinct_2" in card["statistics"]["train"]
    assert (path / "README.md").read_text().startswith("# gen_ask_t")


def test_same_content_is_not_rewritten(tmp_path, rows):
    path = save_dataset(rows["write"], "w", source="generated", seed=0, generator_version="1", root=tmp_path)
    stamp = (path / "card.json").stat().st_mtime_ns
    save_dataset(rows["write"], "w", source="generated", seed=0, generator_version="1", root=tmp_path)
    assert (path / "card.json").stat().st_mtime_ns == stamp
    changed = {k: v[:-1] for k, v in rows["write"].items()}
    save_dataset(changed, "w", source="generated", seed=0, generator_version="1", root=tmp_path)
    assert json.loads((path / "card.json").read_text())["statistics"]["train"]["n"] == 29


def test_errors(tmp_path, rows):
    with pytest.raises(FileNotFoundError, match="10_generate_datasets"):
        load_processed("missing", root=tmp_path)
    with pytest.raises(ValueError, match="plain folder"):
        save_dataset(rows["ask"], "../x", source="g", seed=0, generator_version="1", root=tmp_path)
    bad = {"train": [{"input": "x"}]}
    with pytest.raises(ValueError, match="lacks columns"):
        save_dataset(bad, "bad", source="g", seed=0, generator_version="1", root=tmp_path)


def test_dataset_names():
    assert dataset_name("gen", "ask") == "gen_ask"
    assert dataset_name("seed", "write", "smoke") == "seed_write_smoke"
    with pytest.raises(ValueError):
        dataset_name("other", "ask")
