"""Unsloth's GGUF export beside this project's exporter (issue 11, item 6: "where a CUDA GPU is available,
also export with Unsloth's GGUF path and compare its files with yours (parity as above)").

One trained adapter is exported twice, per quantization: by :func:`mags_lib.export.export_adapter` (the
``gguf`` package, llama.cpp's quantizer for the k-quants) and by Unsloth (``save_pretrained_gguf``: its
16-bit merge, llama.cpp's ``convert_hf_to_gguf.py`` and ``llama-quantize``). Then, for every file:

- the file itself: size, sha256, tensor types;
- :func:`compare_gguf` of the two files of one quantization: metadata keys present in one only or with
  other values (tokenizer, chat template, pre-tokenizer, special tokens), tensors in one only, of
  another shape or type, byte-identical, and the largest difference of their de-quantized values;
- :func:`weight_error`: each file's de-quantized weights against the exact float32 merge of the base and
  the adapter (the same reference for both exporters, so it says which file is closer to the model);
- :func:`mags_lib.export.parity`: teacher-forced top-1 agreement and greedy equality with transformers,
  and the role's quality figures, on held-out prompts.

Unsloth needs CUDA (``pip install -e ".[gpu]"``); without it the command stops with that message before
anything is written. It reaches no network: llama.cpp's converter and quantizer come from a local
llama.cpp folder (``--llama-cpp DIR``: ``convert_hf_to_gguf.py``, ``gguf-py/``, ``conversion/`` and a built
``llama-quantize``; the llama.cpp that llama-cpp-python vendors will do)::

    python -m mags_lib.bench.unsloth_gguf --role write --run-tag default --llama-cpp ~/llama.cpp \\
        --out results/bench/unsloth_gguf_write.json

A machine without MiniLM can score with ``--embedder hash`` and re-score the outputs later where MiniLM
is installed: ``python -m mags_lib.bench.unsloth_gguf --rescore parity_write.jsonl --out F.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .. import repro

__all__ = ["compare_gguf", "file_summary", "main", "rescore", "unsloth_export", "weight_error"]

_SKIP_KEYS = ("GGUF.",)  # the reader's own header fields (version, counts), not metadata


def _value(field: Any) -> Any:
    """A metadata field as a plain Python value (strings decoded, arrays as lists)."""
    v = field.contents()
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).decode("utf-8", "replace")
    return v


def _short(v: Any) -> Any:
    """A value small enough to print: long lists and strings become their length and a digest."""
    if isinstance(v, list) and len(v) > 8 or isinstance(v, str) and len(v) > 120:
        digest = hashlib.sha256(json.dumps(v, sort_keys=True, default=str).encode()).hexdigest()[:12]
        return {"len": len(v), "sha256_12": digest, "head": v[:3] if isinstance(v, list) else v[:60]}
    return v


def _reader(path: str | os.PathLike) -> Any:
    from gguf import GGUFReader

    return GGUFReader(str(path))


def _dequant(t: Any) -> np.ndarray:
    """A reader tensor's values as float32, in the row-major shape of its data (``[..., ne0]``)."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    return dequantize(np.asarray(t.data), GGMLQuantizationType(int(t.tensor_type))).astype(np.float32)


def _type_name(t: Any) -> str:
    from gguf import GGMLQuantizationType

    return GGMLQuantizationType(int(t.tensor_type)).name


def file_summary(path: str | os.PathLike) -> dict:
    """Size, sha256, ``general.file_type`` and the count of tensors per type of one GGUF file."""
    from collections import Counter

    from ..models import file_sha256

    r = _reader(path)
    types = dict(Counter(_type_name(t) for t in r.tensors))
    ft = r.fields.get("general.file_type")
    return {"file": str(path), "size_mb": round(Path(path).stat().st_size / 2**20, 2), "sha256": file_sha256(path),
            "file_type": _value(ft) if ft is not None else None, "n_tensors": len(r.tensors), "tensor_types": types}


def compare_gguf(a: str | os.PathLike, b: str | os.PathLike, *, worst: int = 5) -> dict:
    """What differs between two GGUF files of one model.

    Returns
    -------
    dict
        ``metadata``: keys only in ``a`` / only in ``b`` and the keys whose values differ (each with both
        values, long ones shortened to their length and a digest); ``tensors``: names only in one file,
        tensors of another shape or type, how many are byte-identical, and over the tensors both hold
        with one shape the largest absolute difference of their de-quantized values, its tensor, the mean
        absolute difference, and the ``worst`` tensors by relative difference (max |a - b| / max |a|).
    """
    ra, rb = _reader(a), _reader(b)
    fa = {k: f for k, f in ra.fields.items() if not k.startswith(_SKIP_KEYS)}
    fb = {k: f for k, f in rb.fields.items() if not k.startswith(_SKIP_KEYS)}
    differ = []
    for k in sorted(set(fa) & set(fb)):
        va, vb = _value(fa[k]), _value(fb[k])
        if va != vb:
            differ.append({"key": k, "a": _short(va), "b": _short(vb)})
    ta, tb = {t.name: t for t in ra.tensors}, {t.name: t for t in rb.tensors}
    common = sorted(set(ta) & set(tb))
    shape, types, per = [], [], []
    identical = 0
    total_abs = 0.0
    n_values = 0
    for name in common:
        x, y = ta[name], tb[name]
        sx, sy = [int(d) for d in x.shape], [int(d) for d in y.shape]
        if sx != sy:
            shape.append({"tensor": name, "a": sx, "b": sy})
            continue
        if int(x.tensor_type) != int(y.tensor_type):
            types.append({"tensor": name, "a": _type_name(x), "b": _type_name(y)})
        elif np.array_equal(np.asarray(x.data).view(np.uint8), np.asarray(y.data).view(np.uint8)):
            identical += 1
            per.append({"tensor": name, "max_abs": 0.0, "rel": 0.0})
            n_values += int(np.prod(sx))
            continue
        dx, dy = _dequant(x).reshape(-1), _dequant(y).reshape(-1)
        d = np.abs(dx - dy)
        scale = float(np.abs(dx).max()) or 1.0
        per.append({"tensor": name, "max_abs": float(d.max()), "rel": float(d.max()) / scale})
        total_abs += float(d.sum(dtype=np.float64))
        n_values += d.size
    top = sorted(per, key=lambda p: -p["rel"])[:worst]
    biggest = max(per, key=lambda p: p["max_abs"], default=None)
    return {
        "a": str(a), "b": str(b),
        "metadata": {"only_a": sorted(set(fa) - set(fb)), "only_b": sorted(set(fb) - set(fa)), "differ": differ},
        "tensors": {"n_a": len(ta), "n_b": len(tb), "only_a": sorted(set(ta) - set(tb)),
                    "only_b": sorted(set(tb) - set(ta)), "shape_differs": shape, "type_differs": types,
                    "byte_identical": identical, "compared": len(per),
                    "max_abs_diff": biggest["max_abs"] if biggest else None,
                    "max_abs_diff_tensor": biggest["tensor"] if biggest else None,
                    "mean_abs_diff": total_abs / n_values if n_values else None,
                    "worst_relative": top},
    }


def weight_error(path: str | os.PathLike, reference: Mapping[str, np.ndarray]) -> dict:
    """A GGUF file's de-quantized weights against exact ones (GGUF name -> float32 array in llama.cpp's
    layout, e.g. from :func:`mags_lib.export.gguf_write._gguf_tensors` of a float32 merge).

    Returns the relative RMS error over all weights (sqrt(sum (w - w*)^2 / sum w*^2)), the largest
    absolute error and its tensor, and the reference tensors the file lacks or holds in another shape.
    """
    r = _reader(path)
    held = {t.name: t for t in r.tensors}
    missing, shape = [], []
    err2 = ref2 = 0.0
    worst = (0.0, None)
    for name, w in reference.items():
        t = held.get(name)
        if t is None:
            missing.append(name)
            continue
        v = _dequant(t).reshape(-1)
        w = np.asarray(w, dtype=np.float32).reshape(-1)
        if v.size != w.size:
            shape.append(name)
            continue
        d = v - w
        err2 += float(np.dot(d, d))
        ref2 += float(np.dot(w, w))
        m = float(np.abs(d).max())
        if m > worst[0]:
            worst = (m, name)
    return {"file": str(path), "rel_rms_error": (err2 / ref2) ** 0.5 if ref2 else None, "max_abs_error": worst[0],
            "max_abs_error_tensor": worst[1], "missing": missing, "shape_differs": shape,
            "n_reference": len(reference)}


_PROBE = """
import sys
from transformers import AutoTokenizer
from mags_lib.export.gguf_write import _verify_tokenizer
_verify_tokenizer(__import__("pathlib").Path(sys.argv[1]), AutoTokenizer.from_pretrained(sys.argv[2]))
"""


def tokenizer_probe(path: str | os.PathLike, tokenizer_dir: str | os.PathLike, *, timeout_s: float = 300) -> dict:
    """Whether llama.cpp tokenizes sample texts with ``path``'s tokenizer as transformers does with
    ``tokenizer_dir``'s, in a child process (llama.cpp aborts the whole process on some broken vocabularies).

    Returns ``{"status": "same" | "differs" | "aborted", "detail": ...}``.
    """
    import subprocess

    r = subprocess.run([sys.executable, "-c", _PROBE, str(path), str(tokenizer_dir)], check=False, capture_output=True,
                       text=True,
                       timeout=timeout_s)
    tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
    if r.returncode == 0:
        return {"status": "same", "detail": ""}
    if r.returncode < 0 or r.returncode in (134, 139):  # killed by a signal (abort, segfault)
        return {"status": "aborted", "detail": f"exit {r.returncode}: " + " | ".join(tail)}
    return {"status": "differs", "detail": " | ".join(tail)}


def _exact_reference(adapter_dir: Path, base_dir: Path) -> dict[str, np.ndarray]:
    """The base plus the adapter merged in float32, as GGUF name -> array in llama.cpp's layout."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from ..export.gguf_write import _gguf_tensors

    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    with torch.no_grad():
        merged = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    config = json.loads((base_dir / "config.json").read_text())
    return dict(_gguf_tensors(merged.state_dict(), config))


def _require_cuda(allow_cpu: bool = False) -> None:
    import importlib.util

    import torch

    if not torch.cuda.is_available() and not allow_cpu:
        raise RuntimeError("Unsloth's GGUF path needs a CUDA GPU, and torch sees none here: run this on a "
                           "machine with one (pip install -e '.[gpu]'), or compare files exported elsewhere "
                           "with compare_gguf (or run Unsloth's own CPU fallback: --allow-cpu)")
    if importlib.util.find_spec("unsloth") is None:
        raise RuntimeError("the unsloth package is not installed: pip install -e '.[gpu]'")


def unsloth_export(adapter_dir: str | os.PathLike, out_dir: str | os.PathLike, variants: Sequence[str], *,
                   base_dir: str | os.PathLike, dtype: str | None = None,
                   llama_cpp: str | os.PathLike | None = None,
                   allow_cpu: bool = False) -> dict:  # pragma: no cover - needs Unsloth
    """Export ``adapter_dir`` with Unsloth's ``save_pretrained_gguf``; returns the files per variant and
    the seconds taken (the 16-bit merge, conversion and quantization; loading not counted).

    The model is loaded the way :mod:`mags_lib.training` loads it on the Unsloth backend (base + LoRA of
    the adapter's rank and targets), the adapter's weights set into it; ``dtype`` ``None`` lets Unsloth
    pick (bfloat16 where the GPU has it), ``"float16"`` forces half precision. ``allow_cpu``: without CUDA,
    Unsloth's CPU fallback (its own loader and ``save_pretrained_gguf``) instead of an error; the result's
    ``path`` says which ran.
    """
    import torch

    _require_cuda(allow_cpu)
    if llama_cpp is not None:  # read by unsloth_zoo at import: set before it
        os.environ["UNSLOTH_LLAMA_CPP_PATH"] = str(llama_cpp)
        os.environ["UNSLOTH_LLAMA_CPP_SCRIPTS_DIR"] = str(llama_cpp)
    os.environ.setdefault("UNSLOTH_OFFLINE", "1")
    os.environ.setdefault("UNSLOTH_LLAMA_CPP_OFFLINE", "1")
    os.environ.setdefault("UNSLOTH_AUTO_INSTALL", "0")
    from unsloth import FastLanguageModel  # noqa: I001  (before peft / transformers, so its patches apply)
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    from ..training.run import _fix_special_tokens

    adapter_dir, out_dir = Path(adapter_dir), Path(out_dir)
    acfg = json.loads((adapter_dir / "adapter_config.json").read_text())
    torch_dtype = {None: None, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    t0 = time.perf_counter()
    model, tok = FastLanguageModel.from_pretrained(model_name=str(base_dir), max_seq_length=2048, dtype=torch_dtype,
                                                   load_in_4bit=False)
    model = FastLanguageModel.get_peft_model(model, r=int(acfg["r"]), lora_alpha=acfg["lora_alpha"], lora_dropout=0,
                                             target_modules=sorted(acfg["target_modules"]), bias="none",
                                             use_gradient_checkpointing=False, random_state=0)
    res = set_peft_model_state_dict(model, load_file(str(adapter_dir / "adapter_model.safetensors")))
    unexpected = list(getattr(res, "unexpected_keys", []) or [])
    if unexpected:
        raise RuntimeError(f"the adapter's weights did not fit Unsloth's LoRA: {len(unexpected)} unexpected keys, "
                           f"e.g. {unexpected[:3]}")
    tok = _fix_special_tokens(tok, model)
    load_s = time.perf_counter() - t0
    model_dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    t0 = time.perf_counter()
    out = model.save_pretrained_gguf(str(out_dir), tok, quantization_method=list(variants))
    seconds = time.perf_counter() - t0
    paths = [Path(p) for p in (out.get("gguf_files") if isinstance(out, dict) else out) or []]
    files = {}
    for v in variants:
        hit = [p for p in paths if p.name.lower().endswith(f".{v.lower()}.gguf")]
        if hit:
            files[v] = str(hit[0])
    return {"path": "cuda" if torch.cuda.is_available() else "cpu-fallback", "files": files,
            "all_files": [str(p) for p in paths], "export_s": round(seconds, 2),
            "load_s": round(load_s, 2), "model_dtype": model_dtype}


def rescore(jsonl: str | os.PathLike, *, embedder: str = "minilm") -> dict:
    """The role's quality figures of every output in a ``parity_<role>.jsonl`` (written by
    :func:`mags_lib.export.parity`), scored again with ``embedder``: label -> figures."""
    from ..export.parity import _role_metrics

    lines = repro.jsonl_lines(Path(jsonl).read_text())
    head, rows = json.loads(lines[0]), [json.loads(x) for x in lines[1:]]
    role = head["role"]
    if role == "answer":
        raise ValueError("answer outputs are scored by aliases, which the parity file does not keep: "
                         "re-run parity on a machine with the data instead")
    labels = [lab for lab in ["transformers"] + list(head["files"]) if rows and lab in rows[0]]  # top1-only: none
    gold = [{"response": r["gold"]} for r in rows]
    return {lab: _role_metrics(role, [r[lab] for r in rows], gold, embedder) for lab in labels}


def _device() -> dict:
    from .training_profile import _device as dev

    return dev()


def run(role: str, adapter_dir: Path, variants: Sequence[str], *, work_dir: Path, out_path: Path, n_prompts: int,
        threads: int, embedder: str, dtype: str | None, llama_cpp: Path | None, data_root: Path | None,
        profile: str, allow_cpu: bool = False, unsloth_timeout_s: float = 900,
        parity_of: str = "all") -> dict:  # pragma: no cover - needs Unsloth
    """Both exports, their comparison and parity; ``out_path`` is rewritten after every phase, so a phase
    that fails (or aborts the process) leaves the figures of the phases before it."""
    import subprocess

    from .. import export as E
    from ..export.parity import ParityConfig, parity
    from ..export.report import held_out_rows
    from ..models import base_model_dir

    _require_cuda(allow_cpu)  # before anything is written
    base = base_model_dir()
    work_dir.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {"role": role, "adapter": str(adapter_dir), "variants": list(variants), "files": {},
                           "compare": {}, "weight_error": {}, "tokenizer_probe": {}, "errors": {}}

    def save(phase: str) -> None:
        out["phase_done"] = phase
        repro.atomic_write_text(out_path, json.dumps(out, indent=1, default=str))

    t0 = time.perf_counter()
    E.export_adapter(adapter_dir, work_dir / "ours", E.ExportConfig(variants=tuple(variants), n_threads=threads,
                                                                    force=True), base_dir=base, progress=True)
    out["ours_export_s"] = round(time.perf_counter() - t0, 2)
    manifest = E.read_manifest(work_dir / "ours", verify="sha256")
    ours = {v: work_dir / "ours" / manifest["files"][v]["file"] for v in variants}
    save("ours")
    # Unsloth patches transformers and PEFT when imported: it runs in a process of its own, so this one's
    # export, exact merge and transformers reference are the plain libraries'.
    cmd = [sys.executable, "-m", "mags_lib.bench.unsloth_gguf", "--unsloth-only", "--adapter", str(adapter_dir),
           "--variants", ",".join(variants), "--work-dir", str(work_dir / "unsloth"),
           "--out", str(work_dir / "unsloth.json")]
    cmd += ["--dtype", dtype] if dtype else []
    cmd += ["--llama-cpp", str(llama_cpp)] if llama_cpp else []
    cmd += ["--allow-cpu"] if allow_cpu else []
    t0 = time.perf_counter()
    try:
        code = subprocess.run(cmd, check=False, timeout=unsloth_timeout_s).returncode
    except subprocess.TimeoutExpired:
        code = "timeout"
    if code != 0 or not (work_dir / "unsloth.json").is_file():
        out["errors"]["unsloth_export"] = f"exit {code} after {time.perf_counter() - t0:.0f} s (see its log)"
        uns: dict[str, Any] = {"files": {}}
    else:
        uns = json.loads((work_dir / "unsloth.json").read_text())
    out["unsloth"] = uns
    save("unsloth")
    ref = _exact_reference(adapter_dir, base)
    for v in variants:
        out["files"][f"ours-{v}"] = file_summary(ours[v])
        out["weight_error"][f"ours-{v}"] = weight_error(ours[v], ref)
        if v in uns["files"]:
            out["files"][f"unsloth-{v}"] = file_summary(uns["files"][v])
            out["weight_error"][f"unsloth-{v}"] = weight_error(uns["files"][v], ref)
            out["compare"][v] = compare_gguf(ours[v], uns["files"][v])
    del ref
    save("compare")
    files = {f"unsloth-{v}": str(uns["files"][v]) for v in variants if v in uns["files"]}
    files.update({f"ours-{v}": str(ours[v]) for v in variants})
    for label, path in files.items():  # every file is probed; parity_of="unsloth" leaves ours out of parity
        out["tokenizer_probe"][label] = tokenizer_probe(path, base)
    save("probe")
    # A file whose tokenizer aborts llama.cpp is measured on transformers' token ids alone (teacher-forced top-1).
    top1_only = [lab for lab, p in out["tokenizer_probe"].items() if p["status"] == "aborted"]
    if parity_of == "unsloth":
        files = {lab: p for lab, p in files.items() if lab.startswith("unsloth-")}
    rows = held_out_rows(role, profile, root=data_root)
    t0 = time.perf_counter()
    df = parity(role, rows, adapter_dir, files, ParityConfig(n_prompts=n_prompts, n_threads=threads, embedder=embedder),
                out_dir=work_dir / "parity", top1_only=top1_only)
    out["parity_s"] = round(time.perf_counter() - t0, 1)
    out["parity"] = json.loads(df.to_json(orient="records"))
    out["parity_embedder"] = embedder
    out["parity_top1_only"] = top1_only
    save("parity")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--role", choices=("ask", "write", "answer"))
    ap.add_argument("--run-tag", default="default", help="the trained run whose final adapter is exported")
    ap.add_argument("--adapter", default=None, help="a PEFT adapter folder instead of the run's final one")
    ap.add_argument("--variants", default="f16,q8_0,q4_k_m")
    ap.add_argument("--n-prompts", type=int, default=100)
    ap.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    ap.add_argument("--embedder", default="minilm", choices=("minilm", "hash"))
    ap.add_argument("--dtype", default=None, choices=("float16", "bfloat16"),
                    help="Unsloth's load dtype (default: Unsloth's choice)")
    ap.add_argument("--llama-cpp", default=None, help="a llama.cpp folder with the converter and llama-quantize")
    ap.add_argument("--profile", default="default", help="whose held-out split is used for parity")
    ap.add_argument("--data-root", default=None)
    ap.add_argument("--work-dir", default=None, help="where both exports are written (default: a temporary one)")
    ap.add_argument("--rescore", default=None, help="a parity_<role>.jsonl to score again (no export)")
    ap.add_argument("--allow-cpu", action="store_true",
                    help="without CUDA, run Unsloth's CPU fallback instead of stopping (the JSON says which ran)")
    ap.add_argument("--parity-of", default="all", choices=("all", "unsloth"),
                    help="which files parity measures (unsloth: Unsloth's alone, e.g. when ours were measured before)")
    ap.add_argument("--unsloth-timeout-s", type=float, default=900, help="time limit of Unsloth's export")
    ap.add_argument("--unsloth-only", action="store_true", help=argparse.SUPPRESS)  # run()'s child process
    ap.add_argument("--out", required=True, help="the JSON written")
    a = ap.parse_args(argv)
    if a.unsloth_only:
        from ..models import base_model_dir

        res = unsloth_export(a.adapter, a.work_dir, [v.strip().lower() for v in a.variants.split(",")],
                             base_dir=base_model_dir(), dtype=a.dtype, llama_cpp=a.llama_cpp, allow_cpu=a.allow_cpu)
    elif a.rescore:
        res: dict[str, Any] = {"rescored": str(a.rescore), "embedder": a.embedder,
                               "figures": rescore(a.rescore, embedder=a.embedder)}
    else:
        if not a.role:
            ap.error("--role is needed (or --rescore FILE)")
        import tempfile

        from ..export.layout import final_adapter

        adapter = Path(a.adapter) if a.adapter else final_adapter(a.role, a.run_tag)
        work = Path(a.work_dir) if a.work_dir else Path(tempfile.mkdtemp(prefix="unsloth_gguf-"))
        variants = [v.strip().lower() for v in a.variants.split(",") if v.strip()]
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        res = run(a.role, adapter, variants, work_dir=work, out_path=Path(a.out), n_prompts=a.n_prompts,
                  threads=a.threads,
                  embedder=a.embedder, dtype=a.dtype, llama_cpp=Path(a.llama_cpp) if a.llama_cpp else None,
                  data_root=Path(a.data_root) if a.data_root else None, profile=a.profile, allow_cpu=a.allow_cpu,
                  unsloth_timeout_s=a.unsloth_timeout_s, parity_of=a.parity_of)
        res.update({"wall_time_s": round(time.perf_counter() - t0, 1), "device": _device(),
                    "packages": repro.package_versions(("torch", "transformers", "peft", "gguf", "unsloth",
                                                        "unsloth_zoo", "llama_cpp_python")),
                    "git_sha": repro.git_sha(), "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    repro.atomic_write_text(Path(a.out), json.dumps(res, indent=1, default=str))
    print(json.dumps(res, indent=1, default=str)[:4000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
