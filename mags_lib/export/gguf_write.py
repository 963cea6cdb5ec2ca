"""Write GGUF files: merged llama models (F16, Q8_0), llama.cpp quantization, LoRA adapters.

The writer is this project's own, on :class:`gguf.GGUFWriter`: the architecture's hyper-parameters,
the tokenizer (BPE tokens, token types, merges, special ids, chat template, pre-tokenizer name) and
the tensors, with the query/key rows reordered for llama.cpp's rotary layout. Only the llama
architecture (``LlamaForCausalLM``: SmolLM2 and kin) is supported; anything else fails with
:class:`UnsupportedModelError` before a byte is written. Every file is written under a temporary
name and renamed when complete and verified (its header parsed, its tokenizer compared with
transformers'), so an interrupted write never leaves a half-written file.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..models import base_model_dir, file_sha256

__all__ = [
    "SUPPORTED_ARCHITECTURES",
    "ExportError",
    "UnsupportedModelError",
    "check_supported",
    "file_sha256",
    "quantize_gguf",
    "random_lora",
    "write_lora_gguf",
    "write_model_gguf",
]

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM",)

# The pre-tokenizer of a BPE tokenizer is not written in tokenizer.json in a form llama.cpp reads: it
# is recognised by the tokens a probe text gets (llama.cpp's converter does the same with its own
# probe). Known fingerprints of this module's probe:
_PROBE = ("Caroline moved to Boston on 2023-05-08; she's   lived\tthere 3 years (since 1999?).\n\n"
          "It's 42 km/h -- don't! ÜBER café naïve 東京 🙂 x=y+1;  'quoted' \"double\" __init__ 0.75%\r\n  end")
_PRE_TOKENIZERS = {"3db74c3b84e56ea9": "smollm"}
_VERIFY_TEXTS = (_PROBE, "<|im_start|>user\nWhat do blorps eat?<|im_end|>\n<|im_start|>assistant\n",
                 "<memory_write>Blorps,eat,frozen lemons</memory_write><memory_ask>Zarn's home</memory_ask>",
                 " 12345  apples\n\n\n- item\t(2024)")


class ExportError(RuntimeError):
    """An export could not be made or verified; the message says why and what to do."""


class UnsupportedModelError(ExportError, ValueError):
    """The model's architecture or tokenizer is one this exporter does not write."""


# ------------------------------------------------------------------------------------------------
# small helpers
def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale(parent: Path, name: str) -> None:
    """Remove ``.<name>.partial-<pid>...`` / ``.<name>.old-<pid>...`` left by a process that was killed
    (a ``finally`` never ran); those of a live process are left alone."""
    import shutil

    for p in list(parent.glob(f".{name}.partial-*")) + list(parent.glob(f".{name}.old-*")):
        tail = p.name[len(name) + 2:].split("-", 1)[-1]
        pid = tail.split("-", 1)[0]
        if pid.isdigit() and _pid_alive(int(pid)):
            continue
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)


@contextlib.contextmanager
def _atomic_file(final: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``final``; rename it to ``final`` only when the block succeeds."""
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(final.parent, final.name)
    tmp = final.with_name(f".{final.name}.partial-{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            tmp.unlink()


def _quiet():
    from ..backends.llamacpp_backend import _quiet_stderr

    return _quiet_stderr()

# ------------------------------------------------------------------------------------------------
# what is supported
def check_supported(config: Mapping[str, Any]) -> None:
    """Raise :class:`UnsupportedModelError` unless the transformers ``config`` is one this writer handles.

    Supported: ``LlamaForCausalLM`` (SmolLM2 and other llama models) with SiLU MLPs, no biases,
    ``head_dim == hidden_size / num_attention_heads`` and default rotary embeddings.

    >>> check_supported({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"})
    Traceback (most recent call last):
    ...
    mags_lib.export.gguf_write.UnsupportedModelError: cannot export GPT2LMHeadModel (model_type 'gpt2'): this exporter writes LlamaForCausalLM models (SmolLM2 and other llama models) only. Use llama.cpp's convert_hf_to_gguf.py for other architectures.
    """
    archs = list(config.get("architectures") or [])
    what = f"{archs[0] if archs else '?'} (model_type {config.get('model_type')!r})"
    if config.get("model_type") != "llama" or archs[:1] != list(SUPPORTED_ARCHITECTURES):
        raise UnsupportedModelError(
            f"cannot export {what}: this exporter writes {', '.join(SUPPORTED_ARCHITECTURES)} models (SmolLM2 "
            "and other llama models) only. Use llama.cpp's convert_hf_to_gguf.py for other architectures.")
    problems = []
    if config.get("attention_bias") or config.get("mlp_bias"):
        problems.append("biases in attention or MLP layers")
    if config.get("hidden_act", "silu") != "silu":
        problems.append(f"activation {config.get('hidden_act')!r} (llama is SiLU)")
    heads = int(config.get("num_attention_heads", 0) or 0)
    hidden = int(config.get("hidden_size", 0) or 0)
    head_dim = config.get("head_dim") or (hidden // heads if heads else 0)
    if not heads or head_dim * heads != hidden:
        problems.append(f"head_dim {head_dim} x {heads} heads != hidden_size {hidden}")
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if (rope.get("rope_type") or rope.get("type") or "default") != "default":
        problems.append(f"rotary scaling {rope.get('rope_type') or rope.get('type')!r}")
    if problems:
        raise UnsupportedModelError(f"cannot export {what}: {'; '.join(problems)} are not supported by "
                                    "this exporter (llama.cpp's convert_hf_to_gguf.py handles more)")


def _rope_theta(config: Mapping[str, Any]) -> float:
    rope = config.get("rope_parameters") or {}
    return float(rope.get("rope_theta", config.get("rope_theta", 10000.0)))


def _pre_tokenizer(tokenizer: Any, base_dir: Path | None) -> str:
    """The llama.cpp pre-tokenizer name of a BPE tokenizer (or :class:`UnsupportedModelError`).

    When the base model was converted from a GGUF (``models/base/``), the name that GGUF carries;
    otherwise recognised from the tokens of a probe text.
    """
    source = None
    if base_dir is not None and (base_dir / "mags_manifest.json").is_file():
        source = json.loads((base_dir / "mags_manifest.json").read_text()).get("source")
    if source and Path(source).is_file():
        from ..backends.llamacpp_backend import read_gguf_header

        pre = read_gguf_header(source).metadata.get("tokenizer.ggml.pre")
        if isinstance(pre, str):
            return pre
    ids = tokenizer(_PROBE, add_special_tokens=False)["input_ids"]
    key = hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:16]
    if key not in _PRE_TOKENIZERS:
        raise UnsupportedModelError(
            f"the tokenizer's pre-tokenizer is not one this exporter knows (fingerprint {key}; known: "
            f"{_PRE_TOKENIZERS}); llama.cpp would split text differently from transformers")
    return _PRE_TOKENIZERS[key]


def _token_table(tokenizer: Any) -> tuple[list[str], list[int]]:
    """Token strings by id and their GGUF token types (normal, control for special added tokens,
    user-defined for other added tokens)."""
    import gguf

    vocab = tokenizer.get_vocab()
    n = max(vocab.values()) + 1
    tokens = [""] * n
    for text, i in vocab.items():
        tokens[i] = text
    if any(t == "" for t in tokens):
        missing = [i for i, t in enumerate(tokens) if t == ""][:5]
        raise UnsupportedModelError(f"the vocabulary has holes (no token for ids {missing}...)")
    types = [int(gguf.TokenType.NORMAL)] * n
    for i, added in tokenizer.added_tokens_decoder.items():
        types[i] = int(gguf.TokenType.CONTROL if added.special else gguf.TokenType.USER_DEFINED)
    return tokens, types


def _special_ids(config: Mapping[str, Any], generation: Mapping[str, Any], tokenizer: Any) -> dict[str, int]:
    """bos / eos / unk / pad ids: the model's (generation) config first, then the tokenizer's."""
    def first(*vals):
        for v in vals:
            if isinstance(v, (list, tuple)):
                v = v[0] if v else None
            if isinstance(v, int) and v >= 0:
                return v
        return None

    out = {"bos": first(generation.get("bos_token_id"), config.get("bos_token_id"), tokenizer.bos_token_id),
           "eos": first(generation.get("eos_token_id"), config.get("eos_token_id"), tokenizer.eos_token_id),
           "unk": first(tokenizer.unk_token_id, config.get("unk_token_id")),
           "pad": first(generation.get("pad_token_id"), config.get("pad_token_id"), tokenizer.pad_token_id)}
    return {k: v for k, v in out.items() if v is not None}


def _add_tokenizer(w: Any, tokenizer_dir: Path, config: Mapping, base_dir: Path | None) -> Any:
    """Write the tokenizer metadata; return the transformers tokenizer it came from."""
    import gguf
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    tj = tokenizer_dir / "tokenizer.json"
    spec = json.loads(tj.read_text()) if tj.is_file() else {}
    if spec.get("model", {}).get("type") != "BPE" or '"ByteLevel"' not in json.dumps(spec.get("pre_tokenizer")):
        raise UnsupportedModelError(f"the tokenizer in {tokenizer_dir} is not a byte-level BPE tokenizer "
                                    f"(model {spec.get('model', {}).get('type')!r}); only GPT-2-style BPE is "
                                    "exported")
    pre = _pre_tokenizer(tok, base_dir)
    tokens, types = _token_table(tok)
    if len(tokens) != int(config["vocab_size"]):
        raise UnsupportedModelError(f"the tokenizer has {len(tokens)} tokens but the model {config['vocab_size']}")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    special = gguf.SpecialVocab(tokenizer_dir, load_merges=True, n_vocab=len(tokens))
    if not special.merges:
        raise UnsupportedModelError(f"no BPE merges found in {tokenizer_dir}")
    w.add_token_merges(special.merges)
    gen_path = tokenizer_dir / "generation_config.json"
    generation = json.loads(gen_path.read_text()) if gen_path.is_file() else {}
    if not generation and base_dir is not None and (base_dir / "generation_config.json").is_file():
        generation = json.loads((base_dir / "generation_config.json").read_text())
    ids = _special_ids(config, generation, tok)
    for kind, tid in ids.items():
        getattr(w, f"add_{kind}_token_id")(tid)
    bos_added = bool(tok("a")["input_ids"][:1] == [ids.get("bos")]) if "bos" in ids else False
    w.add_add_bos_token(bos_added)
    w.add_add_space_prefix(False)
    template = tok.chat_template or special.chat_template
    if isinstance(template, str) and template:
        w.add_chat_template(template)
    return tok

# ------------------------------------------------------------------------------------------------
# tensors
def _permute_rotary(w: np.ndarray, n_head: int) -> np.ndarray:
    """Reorder the rows of a query/key projection from transformers' rotary layout (the two halves of
    each head rotated together) to llama.cpp's (adjacent pairs rotated together)."""
    rows = w.shape[0]
    half = rows // n_head // 2
    return w.reshape(n_head, 2, half, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _gguf_tensors(state: Mapping[str, Any], config: Mapping[str, Any]) -> Iterator[tuple[str, np.ndarray]]:
    """(GGUF name, float32 array) for every tensor of a merged llama state dict, in llama.cpp's layout."""
    import gguf

    n_layer = int(config["num_hidden_layers"])
    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, n_layer)
    tied = bool(config.get("tie_word_embeddings", False))
    for name, t in state.items():
        if name.endswith(".rotary_emb.inv_freq") or (tied and name == "lm_head.weight"):
            continue
        new = tmap.get_name(name, try_suffixes=(".weight", ".bias"))
        if new is None:
            raise UnsupportedModelError(f"tensor {name!r} has no llama GGUF name (an extra module?)")
        a = t.detach().to("cpu").float().numpy() if hasattr(t, "detach") else np.asarray(t, dtype=np.float32)
        if name.endswith("self_attn.q_proj.weight"):
            a = _permute_rotary(a, int(config["num_attention_heads"]))
        elif name.endswith("self_attn.k_proj.weight"):
            a = _permute_rotary(a, int(config.get("num_key_value_heads") or config["num_attention_heads"]))
        yield new, a


def _add_llama_hparams(w: Any, config: Mapping[str, Any], name: str) -> None:
    heads = int(config["num_attention_heads"])
    w.add_name(name)
    w.add_type("model")
    w.add_context_length(int(config.get("max_position_embeddings", 2048)))
    w.add_embedding_length(int(config["hidden_size"]))
    w.add_block_count(int(config["num_hidden_layers"]))
    w.add_feed_forward_length(int(config["intermediate_size"]))
    w.add_head_count(heads)
    w.add_head_count_kv(int(config.get("num_key_value_heads") or heads))
    w.add_rope_freq_base(_rope_theta(config))
    w.add_layer_norm_rms_eps(float(config.get("rms_norm_eps", 1e-6)))
    w.add_rope_dimension_count(int(config["hidden_size"]) // heads)
    w.add_vocab_size(int(config["vocab_size"]))


def _verify_tokenizer(path: Path, tokenizer: Any) -> None:
    """Tokenize sample texts with llama.cpp on ``path`` and with transformers; raise on any difference."""
    import llama_cpp

    with _quiet():
        llm = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    try:
        for text in _VERIFY_TEXTS:
            a = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
            b = tokenizer(text, add_special_tokens=False)["input_ids"]
            if list(a) != list(b):
                raise ExportError(f"{path.name}: llama.cpp tokenizes {text[:40]!r} differently from "
                                  f"transformers ({list(a)[:12]} vs {list(b)[:12]}); the file was not kept")
    finally:
        llm.close()


def write_model_gguf(model: Any, path: str | os.PathLike, qtype: str = "F16", *, tokenizer_dir: str | os.PathLike,
                     base_dir: str | os.PathLike | None = None, name: str = "model",
                     extra: Mapping[str, str] | None = None, verify_tokenizer: bool = True,
                     progress: bool = True) -> Path:
    """Write a transformers llama model (merged weights) as a GGUF file, atomically.

    Parameters
    ----------
    model : transformers model or dict
        A ``LlamaForCausalLM`` (e.g. after ``merge_and_unload()``) or a ``{"config": dict, "state":
        state_dict}`` pair.
    path : path
        The ``.gguf`` file to write (replaced only when the new one is complete and verified).
    qtype : {"F16", "Q8_0", "F32"}
        Type of the 2-D weight tensors (norms are always F32).
    tokenizer_dir : path
        Folder with ``tokenizer.json`` / ``tokenizer_config.json`` (and ``chat_template.jinja``).
    base_dir : path, optional
        The base model folder (its ``mags_manifest.json`` names the GGUF the base came from).
    extra : dict, optional
        String metadata added as ``mags.<key>``.

    Raises
    ------
    UnsupportedModelError
        Before anything is written, for an architecture or tokenizer this writer does not handle.
    """
    import gguf
    from gguf.quants import quantize
    from tqdm.auto import tqdm

    qtype = qtype.upper()
    kinds = {"F32": gguf.LlamaFileType.ALL_F32, "F16": gguf.LlamaFileType.MOSTLY_F16,
             "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}
    if qtype not in kinds:
        raise ValueError(f"qtype must be one of {sorted(kinds)} (Q4_K_M and Q4_1 come from quantize_gguf)")
    if isinstance(model, Mapping):
        config, state = dict(model["config"]), model["state"]
    else:
        config, state = model.config.to_dict(), model.state_dict()
    check_supported(config)
    path = Path(path)
    tokenizer_dir = Path(tokenizer_dir)
    base_dir = Path(base_dir) if base_dir is not None else None
    with _atomic_file(path) as tmp:
        w = gguf.GGUFWriter(str(tmp), arch=gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.LLAMA])
        _add_llama_hparams(w, config, name)
        w.add_file_type(int(kinds[qtype]))
        if qtype == "Q8_0":
            w.add_quantization_version(gguf.GGML_QUANT_VERSION)
        tok = _add_tokenizer(w, tokenizer_dir, config, base_dir)
        for k, v in (extra or {}).items():
            w.add_string(f"mags.{k}", str(v))
        tensors = list(_gguf_tensors(state, config))
        for tname, a in tqdm(tensors, desc=f"{path.name}", disable=not progress, leave=False):
            if a.ndim == 1 or qtype == "F32":
                w.add_tensor(tname, a.astype(np.float32))
            elif qtype == "F16":
                w.add_tensor(tname, a.astype(np.float16))
            else:
                w.add_tensor(tname, quantize(a, gguf.GGMLQuantizationType.Q8_0),
                             raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        from ..backends.llamacpp_backend import read_gguf_header

        read_gguf_header(tmp)  # complete and well formed
        if verify_tokenizer:
            _verify_tokenizer(tmp, tok)
    return path


def _imatrix_params(src: Path, imatrix: Any, llama_cpp: Any) -> tuple[Any, Any, list]:
    """The ctypes arrays llama.cpp's quantizer reads an importance matrix (and the file's
    ``quantize.imatrix.*`` keys) from, checked against the tensors of ``src``; the third item keeps
    the buffers alive while the quantizer runs."""
    from ..backends.llamacpp_backend import read_gguf_header

    values = imatrix if isinstance(imatrix, Mapping) else imatrix.values
    if not values:
        raise ValueError("the importance matrix is empty")
    # the tensors' shapes from the header alone (gguf.GGUFReader parses every metadata field in Python first:
    # the tokenizer's 49,152 tokens and merges, about 5 s a file)
    widths = {name: int(shape[0]) for name, shape, _, _ in read_gguf_header(src).tensors if len(shape) >= 2}
    keep = []
    entries = (llama_cpp.llama_model_imatrix_data * (len(values) + 1))()
    for k, (name, vec) in enumerate(sorted(values.items())):
        a = np.ascontiguousarray(np.asarray(vec, dtype=np.float32).reshape(-1))
        if name not in widths:
            raise ValueError(f"importance matrix entry {name!r} names no 2-D tensor of {Path(src).name}")
        if a.size != widths[name]:
            raise ValueError(f"importance matrix entry {name!r} has {a.size} values; the tensor's rows have "
                             f"{widths[name]} (an importance matrix of another model?)")
        if not np.all(np.isfinite(a)) or np.any(a < 0):
            raise ValueError(f"importance matrix entry {name!r} holds a negative or non-finite value")
        bname = name.encode()
        keep += [a, bname]
        entries[k].name = bname
        entries[k].data = a.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        entries[k].size = a.size
    # the last entry stays zeroed: the terminator (name NULL)
    kv = []
    dataset = str(getattr(imatrix, "dataset", "") or "")
    if dataset:
        kv.append(("quantize.imatrix.dataset", llama_cpp.LLAMA_KV_OVERRIDE_TYPE_STR, dataset.encode()[:127]))
    kv.append(("quantize.imatrix.entries_count", llama_cpp.LLAMA_KV_OVERRIDE_TYPE_INT, len(values)))
    n_texts = getattr(imatrix, "n_texts", None)
    if n_texts:
        kv.append(("quantize.imatrix.chunks_count", llama_cpp.LLAMA_KV_OVERRIDE_TYPE_INT, int(n_texts)))
    overrides = (llama_cpp.llama_model_kv_override * (len(kv) + 1))()
    for k, (key, tag, val) in enumerate(kv):
        overrides[k].key = key.encode()
        overrides[k].tag = tag
        if tag == llama_cpp.LLAMA_KV_OVERRIDE_TYPE_STR:
            overrides[k].value.val_str = val
        else:
            overrides[k].value.val_i64 = val
    keep += [entries, overrides]
    return entries, overrides, keep


def llama_ftype(qtype: str) -> int:
    """llama.cpp's file type number for a type name (``"Q4_K_M"`` -> ``LLAMA_FTYPE_MOSTLY_Q4_K_M``); a
    ``ValueError`` for a name llama.cpp does not know."""
    import llama_cpp

    ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{qtype.upper()}", None)
    if ftype is None:
        raise ValueError(f"llama.cpp has no file type {qtype!r} (LLAMA_FTYPE_MOSTLY_{qtype.upper()})")
    return int(ftype)


def quantize_gguf(src: str | os.PathLike, dst: str | os.PathLike, qtype: str, *, n_threads: int = 1,
                  imatrix: Any = None) -> Path:
    """Quantize a GGUF model with llama.cpp's quantizer (``llama_model_quantize``), atomically.

    ``qtype`` is a llama.cpp file type name: ``"Q4_K_M"``, ``"Q4_1"``, ``"Q8_0"``, ``"Q5_K_M"``, ...
    (``LLAMA_FTYPE_MOSTLY_<qtype>``). Tensors whose rows do not fit the type's block size get
    llama.cpp's fallback type (e.g. SmolLM2's 576-wide rows are not a multiple of Q4_K's 256).

    ``imatrix``: an :class:`~mags_lib.export.imatrix.ImportanceMatrix` (or a dict GGUF tensor name ->
    vector of its row length) that weighs each column's rounding error, as ``llama-quantize --imatrix``
    does; its dataset label and size are written as ``quantize.imatrix.*`` keys. Every entry is
    checked against ``src`` (a tensor of that name, one value per column, finite and >= 0) before
    anything is written; a tensor without an entry is quantized unweighted.
    """
    import llama_cpp

    from ..backends.llamacpp_backend import read_gguf_header

    ftype = llama_ftype(qtype)
    header = read_gguf_header(src)
    if header.type != "model":
        raise ValueError(f"{src} is a GGUF {header.type}, not a model")
    weights = _imatrix_params(Path(src), imatrix, llama_cpp) if imatrix is not None else None
    dst = Path(dst)
    with _atomic_file(dst) as tmp:
        params = llama_cpp.llama_model_quantize_default_params()
        params.nthread = int(n_threads)
        params.ftype = ftype
        if weights is not None:
            params.imatrix = ctypes.cast(weights[0], type(params.imatrix))
            params.kv_overrides = ctypes.cast(weights[1], type(params.kv_overrides))
        with _quiet():
            rc = llama_cpp.llama_model_quantize(os.fsencode(src), os.fsencode(tmp), ctypes.byref(params))
        if rc != 0:
            raise ExportError(f"llama.cpp could not quantize {src} to {qtype} (return code {rc})")
        read_gguf_header(tmp)
    return dst

# ------------------------------------------------------------------------------------------------
# LoRA adapters
def _lora_layers(peft_model: Any, adapter: str = "default") -> Iterator[tuple[str, Any]]:
    """(transformers module name, LoRA layer) for every LoRA layer of a PEFT model."""
    from peft.tuners.lora import LoraLayer

    for name, module in peft_model.named_modules():
        if isinstance(module, LoraLayer) and adapter in getattr(module, "lora_A", {}):
            yield name, module


def write_lora_gguf(peft_model: Any, path: str | os.PathLike, *, dtype: str = "F32", adapter: str = "default",
                    name: str = "lora", extra: Mapping[str, str] | None = None) -> Path:
    """Write the LoRA of a PEFT model as a GGUF LoRA adapter for llama.cpp, atomically.

    Each LoRA layer gives ``<gguf tensor>.lora_a`` (A, ``r x in``) and ``.lora_b`` (B, ``out x r``).
    PEFT's scaling of the layer (``lora_alpha / r``, rsLoRA, or a per-module pattern) is folded into
    B and ``adapter.lora.alpha`` is 0, which tells llama.cpp to apply the product unscaled (times the
    run-time scale); B of query and key projections gets the rotary row order of the base tensors.

    Raises
    ------
    UnsupportedModelError
        For DoRA, LoRA on embeddings, extra trained modules (``modules_to_save``) or a base
        architecture this module does not write.
    """
    import gguf

    base_config = peft_model.get_base_model().config.to_dict()
    check_supported(base_config)
    pcfg = peft_model.peft_config[adapter]
    if getattr(pcfg, "use_dora", False):
        raise UnsupportedModelError("DoRA adapters have no GGUF LoRA form; export the merged model instead")
    if getattr(pcfg, "modules_to_save", None):
        raise UnsupportedModelError(f"the adapter also trains whole modules {pcfg.modules_to_save}, which a GGUF "
                                    "LoRA cannot carry; export the merged model instead")
    if getattr(pcfg, "bias", "none") != "none":
        raise UnsupportedModelError(f"LoRA bias={pcfg.bias!r} has no GGUF LoRA form; export the merged model")
    n_layer = int(base_config["num_hidden_layers"])
    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, n_layer)
    np_dtype = np.float32 if dtype.upper() == "F32" else np.float16
    pairs = []
    for mname, layer in _lora_layers(peft_model, adapter):
        if adapter in getattr(layer, "lora_embedding_A", {}):
            raise UnsupportedModelError(f"LoRA on the embedding {mname} is not exported as a GGUF LoRA")
        short = mname.split("base_model.model.", 1)[-1]
        target = tmap.get_name(short + ".weight", try_suffixes=(".weight",))
        if target is None:
            raise UnsupportedModelError(f"LoRA module {short!r} has no llama GGUF tensor")
        a = layer.lora_A[adapter].weight.detach().float().cpu().numpy()
        b = layer.lora_B[adapter].weight.detach().float().cpu().numpy() * float(layer.scaling[adapter])
        if short.endswith("self_attn.q_proj"):
            b = _permute_rotary(b, int(base_config["num_attention_heads"]))
        elif short.endswith("self_attn.k_proj"):
            b = _permute_rotary(b, int(base_config.get("num_key_value_heads") or base_config["num_attention_heads"]))
        pairs.append((target, a, b))
    if not pairs:
        raise ExportError("the PEFT model holds no LoRA layer to export")
    path = Path(path)
    with _atomic_file(path) as tmp:
        w = gguf.GGUFWriter(str(tmp), arch=gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.LLAMA])
        w.add_name(name)
        w.add_type("adapter")
        w.add_string("adapter.type", "lora")
        w.add_float32("adapter.lora.alpha", 0.0)
        w.add_string("mags.lora.scaling", "folded into lora_b")
        for k, v in (extra or {}).items():
            w.add_string(f"mags.{k}", str(v))
        for target, a, b in pairs:
            w.add_tensor(f"{target}.lora_a", a.astype(np_dtype))
            w.add_tensor(f"{target}.lora_b", b.astype(np_dtype))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        from ..backends.llamacpp_backend import read_gguf_header

        read_gguf_header(tmp)
    return path


def random_lora(out_dir: str | os.PathLike, *, base_dir: str | os.PathLike | None = None, r: int = 8,
                alpha: int = 16, b_std: float = 0.02, seed: int = 0,
                target_modules: Sequence[str] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                 "up_proj", "down_proj")) -> Path:
    """A stand-in PEFT LoRA adapter with random non-zero A and B, saved to ``out_dir``.

    For tests and for the smoke profile when no trained adapter exists: it exercises every step of
    the export (its numbers say nothing about a trained model). ``b_std`` sets how far the model moves
    from its base (0.02 changes greedy outputs without destroying them).
    """
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = Path(base_dir) if base_dir is not None else base_model_dir()
    gen = torch.Generator().manual_seed(int(seed))
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    peft_model = get_peft_model(model, LoraConfig(r=r, lora_alpha=alpha, target_modules=list(target_modules),
                                                  lora_dropout=0.0, init_lora_weights=True))
    with torch.no_grad():
        for _, layer in _lora_layers(peft_model):
            a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight
            a.copy_(torch.randn(a.shape, generator=gen) / a.shape[1] ** 0.5)
            b.copy_(torch.randn(b.shape, generator=gen) * b_std)
    out = Path(out_dir)
    peft_model.save_pretrained(str(out))
    cfg = json.loads((out / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = str(base)
    (out / "adapter_config.json").write_text(json.dumps(cfg, indent=2))
    return out
