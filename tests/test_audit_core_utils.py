"""Audit of the core utilities (embed, models, repro, roles): each test failed on the code before its fix."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import unicodedata
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from mags_lib import models, repro
from mags_lib.embed import HashEmbedder
from mags_lib.models import ModelNotFoundError
from mags_lib.roles import ROLE_SPECS, PromptSpec

PKG = Path(repro.__file__).resolve().parent


# ------------------------------------------------------------------------------------------- repro.git_sha


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.email=a@b", "-c", "user.name=a", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


def _git_sha_of_copy(site: Path, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("MAGS_ROOT", "PYTHONPATH")}
    env["PYTHONPATH"] = str(site)
    out = subprocess.run([sys.executable, "-c", "from mags_lib import repro; print(repro.git_sha())"], cwd=cwd,
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_sha_of_an_installed_copy_is_not_the_sha_of_the_repo_it_runs_in(tmp_path):
    """An installed copy (no checkout of its own) run from inside another repository recorded that
    repository's commit in every meta.json; it has no commit to record."""
    site = tmp_path / "site-packages"
    shutil.copytree(PKG, site / "mags_lib", ignore=shutil.ignore_patterns("__pycache__"))
    other = tmp_path / "other"
    other.mkdir()
    _git(other, "init", "-q")
    _git(other, "commit", "-q", "--allow-empty", "-m", "x")
    assert _git_sha_of_copy(site, other) == "None"


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_sha_says_dirty_for_an_untracked_module(tmp_path):
    """A new module that is not committed changes what runs: the SHA alone would not reproduce the run."""
    repo = tmp_path / "checkout"
    shutil.copytree(PKG, repo / "mags_lib", ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    # as the project's own .gitignore: importing the copy writes bytecode (the test command allows it), which is
    # no change to what runs
    (repo / ".gitignore").write_text("__pycache__/\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "x")
    head = _git(repo, "rev-parse", "HEAD")
    assert _git_sha_of_copy(repo, tmp_path) == head
    (repo / "mags_lib" / "new_module.py").write_text("X = 1\n")
    assert _git_sha_of_copy(repo, tmp_path) == head + "-dirty"


# ------------------------------------------------------------------------------------ repro.atomic_write_text


def test_atomic_write_text_two_threads_on_one_path_both_succeed_whole(tmp_path):
    """Both threads used the same temporary name (pid only): one truncated the other's file and the
    loser's os.replace failed with FileNotFoundError."""
    path = tmp_path / "out.json"
    texts = ["A" * 1_000_000, "B" * 1_000_000]
    errors: list[BaseException] = []

    def write(text: str) -> None:
        try:
            repro.atomic_write_text(path, text)
        except BaseException as exc:  # noqa: BLE001 -- recorded, asserted below
            errors.append(exc)

    for _ in range(10):
        threads = [threading.Thread(target=write, args=(t,)) for t in texts]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert path.read_text() in texts
    assert errors == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_atomic_write_text_keeps_the_mode_and_writes_through_a_symlink(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("old")
    os.chmod(script, 0o750)
    repro.atomic_write_text(script, "new")
    assert stat.S_IMODE(script.stat().st_mode) == 0o750 and script.read_text() == "new"
    real, link = tmp_path / "real.json", tmp_path / "link.json"
    real.write_text("{}")
    link.symlink_to(real)
    repro.atomic_write_text(link, "[1]")
    assert link.is_symlink() and real.read_text() == "[1]"


# ------------------------------------------------------------------------------------ models.base_model_dir


@pytest.fixture
def fake_conversion(monkeypatch):
    """base_model_dir with transformers' loaders replaced by fakes that write small files (no 20 s conversion)."""
    transformers = pytest.importorskip("transformers")
    hooks: dict = {"on_save": None}

    class Tok:
        clean_up_tokenization_spaces = True

        @classmethod
        def from_pretrained(cls, *a, **k):
            return cls()

        def save_pretrained(self, folder):
            (Path(folder) / "tokenizer.json").write_text("{}")

    class Model:
        config = SimpleNamespace()

        @classmethod
        def from_pretrained(cls, *a, **k):
            return cls()

        def save_pretrained(self, folder, **k):
            (Path(folder) / "model.safetensors").write_bytes(b"w" * 64)
            if hooks["on_save"]:
                hooks["on_save"]()

    monkeypatch.setattr(transformers, "AutoTokenizer", Tok)
    monkeypatch.setattr(transformers, "AutoModelForCausalLM", Model)
    monkeypatch.setattr(models, "_special_tokens_from_gguf", lambda tok, gguf: None)
    return hooks


def test_base_model_dir_copy_has_the_umask_permissions(tmp_path, fake_conversion):
    """The converted folder came from mkdtemp, 0700 whatever the umask: other users of a shared models/
    folder (or a container running as another user) could not read the base model."""
    old = os.umask(0o022)
    try:
        target = models.base_model_dir(tmp_path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == 0o755
    assert models._intact(target)


def test_base_model_dir_keeps_the_copy_another_process_finished(tmp_path, fake_conversion):
    """Two notebooks converting at once on a fresh checkout: the second to finish deleted the first one's
    folder (which that process may be loading) to put its own in place."""
    target = tmp_path / "base" / models.BASE_DIR_NAME

    def other_process_finishes():
        target.mkdir(parents=True, exist_ok=True)
        (target / "theirs.bin").write_bytes(b"t" * 8)
        (target / models._MANIFEST).write_text(json.dumps(
            {"files": {"theirs.bin": 8}, "conversion_version": models._CONVERSION_VERSION}))

    fake_conversion["on_save"] = other_process_finishes
    assert models.base_model_dir(tmp_path) == target
    assert (target / "theirs.bin").is_file()
    assert [p.name for p in target.parent.iterdir()] == [models.BASE_DIR_NAME]  # no temporary folder left


@pytest.mark.parametrize("manifest", ["null", "[]", '"x"', '{"files": ["a"], "conversion_version": %d}',
                                      '{"files": {"a": "big"}, "conversion_version": %d}'])
def test_a_malformed_manifest_is_a_copy_to_convert_again_not_a_crash(tmp_path, manifest):
    (tmp_path / "a").write_text("x")
    text = manifest % models._CONVERSION_VERSION if "%d" in manifest else manifest
    (tmp_path / models._MANIFEST).write_text(text)
    assert models._intact(tmp_path) is False


# ------------------------------------------------------------------------------------- models.resolve_model


@pytest.mark.parametrize("spec", ["models/write/run1/sft", "results/x/y.gguf", "a/b/c"])
def test_a_mistyped_nested_path_is_not_taken_for_a_hub_id(tmp_path, spec):
    """A local path with several "/" that does not exist was taken for a Hugging Face id, and the message
    said to run `huggingface-cli download models/write/run1/sft` (no such id can exist)."""
    with pytest.raises(ModelNotFoundError, match="no such file or folder") as err:
        models.resolve_model(spec, models_root=tmp_path)
    assert "huggingface-cli" not in str(err.value)


def test_a_hub_id_still_says_what_to_download(tmp_path):
    with pytest.raises(ModelNotFoundError, match="huggingface-cli download HuggingFaceTB/SmolLM2-360M"):
        models.resolve_model("HuggingFaceTB/SmolLM2-360M", models_root=tmp_path)


# --------------------------------------------------------------------------------------- embed.HashEmbedder


def test_hash_embedder_embeds_text_in_any_script():
    """Only [a-z0-9] made tokens: a Russian or Japanese text was the zero vector (cosine 0 with itself,
    never recalled), and "Zoë lives in Zürich" was exactly "zo lives in z rich"."""
    e = HashEmbedder(dim=64)
    ru, ja, zoe, mangled = e.encode(["Москва — столица России", "東京は日本の首都です", "Zoë lives in Zürich",
                                     "zo lives in z rich"])
    assert np.linalg.norm(ru) == pytest.approx(1.0) and np.linalg.norm(ja) == pytest.approx(1.0)
    assert float(ru @ e.encode(["москва столица россии"])[0]) == pytest.approx(1.0, abs=1e-5)
    assert float(zoe @ mangled) < 0.9
    composed, decomposed = e.encode([unicodedata.normalize("NFC", "Zoë café"),
                                     unicodedata.normalize("NFD", "Zoë café")])
    assert float(composed @ decomposed) == pytest.approx(1.0, abs=1e-5)


def test_hash_embedder_ascii_features_are_unchanged():
    """The fix changes nothing for ASCII text (the benchmarks' hash-embedded figures)."""
    import re

    e = HashEmbedder(dim=32)
    for text in ["Blorps eat only frozen LEMONS, 42 of them!", "snake_case and-dashes x1y2", "  \t\n", ""]:
        words = re.findall(r"[a-z0-9]+", text.lower())
        assert [f for f in e._features(text) if f.startswith("w:")] == [f"w:{w}" for w in words]


# -------------------------------------------------------------------------------------------- roles.PromptSpec


def test_prompt_spec_from_dict_rejects_a_string_stop_and_boolean_budgets():
    """tuple("</s>") made the stop list ("<", "/", "s", ">"): the answer would end at its first "s"."""
    d = ROLE_SPECS["answer"].trained.to_dict()
    with pytest.raises(ValueError, match="stop"):
        PromptSpec.from_dict({**d, "stop": "</s>"})
    with pytest.raises(ValueError, match="max_new_tokens"):
        PromptSpec.from_dict({**d, "max_new_tokens": True})
    with pytest.raises(ValueError, match="few_shot"):
        PromptSpec.from_dict({**d, "few_shot": True})
    assert PromptSpec.from_dict(d) == ROLE_SPECS["answer"].trained
