"""Embedders, reproducibility helpers and the model locator's happy path."""

import json

import numpy as np
import pytest

from mags_lib import embed, repro
from mags_lib.embed import HashEmbedder, cosine_matrix


def test_hash_embedder_is_deterministic_normalised_and_similarity_aware():
    e1, e2 = HashEmbedder(dim=128, seed=3), HashEmbedder(dim=128, seed=3)
    texts = ["blorps eat frozen lemons", "blorps eat lemons", "the tax code of Norway"]
    a, b = e1.encode(texts), e2.encode(texts)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, rtol=1e-5)
    sims = a @ a.T
    assert sims[0, 1] > 0.6 > sims[0, 2]
    # a different salt gives different vectors
    assert not np.allclose(HashEmbedder(dim=128, seed=4).encode(texts), a)


def test_embedders_reject_a_bare_string():
    with pytest.raises(TypeError, match="sequence of strings"):
        HashEmbedder().encode("one text")


def test_load_embedder_names():
    assert embed.load_embedder("hash-64").dim == 64
    with pytest.raises(ValueError, match="use 'minilm', 'hash'"):
        embed.load_embedder("bert")


def test_cosine_matrix_by_hand():
    a = np.array([[1.0, 0.0], [1.0, 1.0]])
    b = np.array([[2.0, 0.0]])
    np.testing.assert_allclose(cosine_matrix(a, b), [[1.0], [2 ** -0.5]], rtol=1e-6)


def test_minilm_real_model_similarities_and_cache():
    e = embed.get_minilm()
    assert embed.get_minilm() is e  # shared instance
    v = e.encode(["Blorps eat frozen lemons.", "What do blorps eat?", "The tax code of Norway."])
    assert v.shape == (3, 384) and v.dtype == np.float32
    assert v[0] @ v[1] > 0.5 > v[0] @ v[2]
    again = e.encode(["What do blorps eat?"])  # served from the cache, identical
    np.testing.assert_array_equal(again[0], v[1])


def test_seed_everything_makes_python_numpy_torch_repeatable():
    import random

    import torch

    repro.seed_everything(7)
    first = (random.random(), np.random.rand(), torch.rand(1).item())
    repro.seed_everything(7)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == first
    with pytest.raises(TypeError):
        repro.seed_everything("7")


def test_write_meta_records_what_made_the_output(tmp_path):
    out = repro.run_dir("unit", "stage", root=tmp_path)
    assert out == tmp_path / "unit" / "stage" and out.is_dir()
    path = repro.write_meta(out, params={"profile": "smoke", "p": tmp_path}, seed=3, wall_time_s=1.25)
    meta = json.loads(path.read_text())
    assert meta["params"]["profile"] == "smoke" and meta["seed"] == 3 and meta["wall_time_s"] == 1.25
    assert meta["packages"]["numpy"] == np.__version__
    assert "torch" in meta["packages"] and "git_sha" in meta
    assert not list(out.glob(".*tmp*"))  # atomic write left no temporary file
    with pytest.raises(ValueError, match="plain folder name"):
        repro.run_dir("a/b", "stage", root=tmp_path)

