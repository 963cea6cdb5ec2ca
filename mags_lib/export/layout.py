"""Exports of trained roles on disk: ``models/<role>/<run_tag>/gguf/``, its manifest, and resolution.

See :mod:`mags_lib.export` for the layout.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..models import BASE_DIR_NAME, ModelNotFoundError, base_model_dir, check_adapter_folder
from .gguf_write import (
    ExportError,
    UnsupportedModelError,
    _remove_stale,
    _verify_tokenizer,
    check_supported,
    file_sha256,
    quantize_gguf,
    write_lora_gguf,
    write_model_gguf,
)

__all__ = [
    "EXPORT_FORMAT",
    "FILES",
    "VARIANTS",
    "ExportConfig",
    "export_adapter",
    "export_role",
    "final_adapter",
    "main",
    "read_manifest",
    "record_parity",
    "role_calibration",
    "trained_gguf",
]

EXPORT_FORMAT = "mags-gguf-export"
EXPORT_VERSION = 2  # 2: the manifest records the importance matrix of the 4-bit files (or its absence)
VARIANTS = ("f16", "q8_0", "q4_k_m", "q4_1", "lora")
"""What an export can hold: four merged models and the LoRA adapter alone."""
FILES = {"f16": "model-f16.gguf", "q8_0": "model-q8_0.gguf", "q4_k_m": "model-q4_k_m.gguf",
         "q4_1": "model-q4_1.gguf", "lora": "lora-f32.gguf"}
_WRITTEN = ("f16", "q8_0")  # by this module with the gguf package
_QUANTIZED = ("q4_k_m", "q4_1")  # by llama.cpp's quantizer, from the F16 file


@dataclass
class ExportConfig:
    """What :func:`export_adapter` / :func:`export_role` write.

    Attributes
    ----------
    variants : tuple of str
        Any of :data:`VARIANTS`. ``q4_k_m`` and ``q4_1`` are quantized from the F16 file (written to
        a temporary name when ``f16`` is not asked for).
    lora_dtype : str
        ``"F32"`` (exact) or ``"F16"`` (half the size) for the LoRA adapter's tensors.
    n_threads : int
        Threads of llama.cpp's quantizer.
    verify_tokenizer : bool
        Tokenize sample texts with llama.cpp on every written file and compare with the transformers
        tokenizer; a difference fails the export.
    force : bool
        Export again even when ``gguf/manifest.json`` already records this adapter and base.
    imatrix_rows : int
        Calibration texts (rows of the role's training split, rendered as its model is prompted) whose
        activations weigh the rounding of the llama.cpp-quantized files (``q4_k_m``, ``q4_1``): llama.cpp's
        importance matrix (:mod:`mags_lib.export.imatrix`). ``0`` (the default): quantize unweighted, as
        llama.cpp does without one. Measured with 128 rows (README, "Importance matrix"): Q4_1 of the
        trained ask model from unusable (op F1 0.00) to 0.63; Q4_K_M's op F1 -3.5 points for ask and +1.2
        for write against the unweighted file, inside the noise of 100 prompts. An export given no
        calibration texts quantizes unweighted and its manifest says so.
    default : str
        The variant the manifest names as ``default`` (what the agent runs when no variant is asked
        for; the first exported of q8_0, f16, q4_k_m, q4_1, lora when this one is not exported). Q8_0:
        on this CPU it generates as fast as the 4-bit files with F16's agreement, while the LoRA
        applied at run time costs about a fifth of the speed.
    """

    variants: tuple[str, ...] = VARIANTS
    lora_dtype: str = "F32"
    n_threads: int = 1
    verify_tokenizer: bool = True
    force: bool = False
    imatrix_rows: int = 0
    default: str = "q8_0"

    def __post_init__(self) -> None:
        self.variants = tuple(dict.fromkeys(str(v).lower() for v in self.variants))
        bad = set(self.variants) - set(VARIANTS)
        if bad or not self.variants:
            raise ValueError(f"variants must be a non-empty subset of {VARIANTS}, got {self.variants}")
        if self.lora_dtype not in ("F32", "F16"):
            raise ValueError(f"lora_dtype must be 'F32' or 'F16', got {self.lora_dtype!r}")
        if self.n_threads < 1:
            raise ValueError(f"n_threads must be >= 1, got {self.n_threads}")
        if self.imatrix_rows < 0:
            raise ValueError(f"imatrix_rows must be >= 0, got {self.imatrix_rows}")
        self.default = str(self.default).lower()
        if self.default not in VARIANTS:
            raise ValueError(f"default must be one of {VARIANTS}, got {self.default!r}")


def _adapter_sha256(adapter_dir: Path) -> str:
    """SHA-256 over the adapter's config and weights (what defines it)."""
    h = hashlib.sha256()
    for name in ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin"):
        p = adapter_dir / name
        if p.is_file():
            h.update(name.encode())
            h.update(file_sha256(p).encode())
    return h.hexdigest()



# ------------------------------------------------------------------------------------------------
# export of one adapter / one role
def _adapter_base(adapter_dir: Path, base_dir: Path | None) -> Path:
    if base_dir is not None:
        return Path(base_dir)
    cfg = json.loads((adapter_dir / "adapter_config.json").read_text())
    named = cfg.get("base_model_name_or_path")
    if named and Path(named).name == BASE_DIR_NAME:
        return base_model_dir()  # this checkout's copy, not the folder of the checkout that trained it
    if named and Path(named).is_dir() and (Path(named) / "config.json").is_file():
        return Path(named)
    return base_model_dir()


def _tokenizer_dir(adapter_dir: Path, base: Path) -> Path:
    """Where the tokenizer of an adapter's model lives: the adapter folder when it carries one, else its base."""
    return adapter_dir if (adapter_dir / "tokenizer.json").is_file() else base


def _lora_base_gguf(base_dir: Path) -> Path | None:
    """The GGUF a LoRA trained on ``base_dir`` applies onto: the file the base was converted from."""
    m = base_dir / "mags_manifest.json"
    if m.is_file():
        src = json.loads(m.read_text()).get("source")
        if src and Path(src).is_file():
            return Path(src)
    return None


def _entry(path: Path, **info: Any) -> dict:
    return {"file": path.name, "size": path.stat().st_size, "sha256": file_sha256(path), **info}


def _calibration_info(texts: Sequence[str], label: str, rows: int) -> dict | None:
    """What the manifest records of the calibration (and compares to reuse an export)."""
    if rows == 0 or not texts:
        return None
    h = hashlib.sha256()
    for t in texts[:rows]:
        h.update(hashlib.sha256(t.encode()).digest())
    return {"dataset": label, "texts": min(rows, len(texts)), "texts_sha256": h.hexdigest()}


def export_adapter(adapter_dir: str | os.PathLike, out_dir: str | os.PathLike, config: ExportConfig | None = None,
                   *, base_dir: str | os.PathLike | None = None, name: str | None = None,
                   info: Mapping[str, Any] | None = None, calibration: Sequence[str] = (),
                   calibration_label: str = "", progress: bool = True) -> dict:
    """Export one PEFT LoRA adapter folder to ``out_dir`` (the files of :data:`FILES` and a manifest).

    The folder is built beside ``out_dir`` and swapped in when complete. When ``out_dir`` already holds
    a manifest for the same adapter, base, exporter version, variants and calibration, nothing is redone
    (unless ``config.force``).

    ``calibration``: texts the merged model reads to weigh the 4-bit quantization (the first
    ``config.imatrix_rows`` of them; :func:`role_calibration` gives a role's), ``calibration_label``
    what they are. Without any, ``q4_k_m`` and ``q4_1`` are quantized unweighted.

    Returns
    -------
    dict
        The manifest (also written to ``out_dir/manifest.json``).
    """
    cfg = config or ExportConfig()
    adapter_dir = Path(adapter_dir)
    check_adapter_folder(adapter_dir)
    base = _adapter_base(adapter_dir, Path(base_dir) if base_dir is not None else None)
    base_config = json.loads((base / "config.json").read_text())
    check_supported(base_config)  # before anything is written
    out_dir = Path(out_dir)
    source = {"path": str(adapter_dir), "sha256": _adapter_sha256(adapter_dir)}
    base_info = {"path": str(base)}
    bm = base / "mags_manifest.json"
    if bm.is_file():
        base_info["model.safetensors_sha256"] = json.loads(bm.read_text()).get("model.safetensors_sha256")
    quantized = [v for v in _QUANTIZED if v in cfg.variants]
    calib = _calibration_info(list(calibration), calibration_label, cfg.imatrix_rows) if quantized else None
    _check_out_dir(out_dir, adapter_dir)
    try:  # an export already there is reused when it is this one; a damaged one is simply made again
        old = None if cfg.force else read_manifest(out_dir, verify="size", missing_ok=True)
    except ExportError:
        old = None
    if (old is not None and not cfg.force and old.get("source_adapter", {}).get("sha256") == source["sha256"]
            and old.get("base", {}).get("model.safetensors_sha256") == base_info.get("model.safetensors_sha256")
            and old.get("exporter_version") == EXPORT_VERSION and set(cfg.variants) <= set(old["files"])
            and (not quantized or (old.get("imatrix") or {}).get("texts_sha256") == (calib or {}).get("texts_sha256"))):
        return old
    import torch
    from peft import PeftModel
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM

    from .. import repro

    t_start = time.perf_counter()
    name = name or adapter_dir.parent.name
    tok_dir = _tokenizer_dir(adapter_dir, base)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(out_dir.parent, out_dir.name)  # left by a killed export
    work = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-{os.getpid()}-", dir=out_dir.parent))
    files: dict[str, dict] = {}
    skipped: dict[str, str] = {}
    imatrix = None
    imatrix_record: dict | None = None
    steps = [v for v in VARIANTS if v in cfg.variants]
    bar = tqdm(total=len(steps) + 1, desc=f"export {name}", disable=not progress)
    try:
        t0 = time.perf_counter()
        model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
        peft_model = PeftModel.from_pretrained(model, str(adapter_dir))
        peft_model.eval()
        load_s = time.perf_counter() - t0
        if "lora" in cfg.variants:
            t0 = time.perf_counter()
            lora_base = _lora_base_gguf(base)
            if lora_base is None:
                skipped["lora"] = (f"the base {base} was not converted from a GGUF, so there is no base GGUF "
                                   "for the adapter to apply onto; use a merged variant")
            else:
                try:
                    p = write_lora_gguf(peft_model, work / FILES["lora"], dtype=cfg.lora_dtype, name=name,
                                        extra={"source_adapter": source["sha256"]})
                    files["lora"] = _entry(p, kind="lora", dtype=cfg.lora_dtype, base_gguf=str(lora_base),
                                           seconds=time.perf_counter() - t0)
                except UnsupportedModelError as e:
                    skipped["lora"] = str(e)
            bar.update(1)
        need_f16 = "f16" in cfg.variants or any(v in cfg.variants for v in _QUANTIZED)
        merge_s = load_s
        if need_f16 or "q8_0" in cfg.variants:
            t0 = time.perf_counter()
            with torch.no_grad():
                merged = peft_model.merge_and_unload()
            merge_s += time.perf_counter() - t0
            if calib is not None:
                from transformers import AutoTokenizer

                from .imatrix import importance_matrix

                t0 = time.perf_counter()
                imatrix = importance_matrix(merged, AutoTokenizer.from_pretrained(str(tok_dir)),
                                            list(calibration)[:calib["texts"]], dataset=calibration_label,
                                            progress=progress)
                imatrix_record = {**calib, **imatrix.summary(), "seconds": time.perf_counter() - t0}
            for variant in _WRITTEN:
                if variant == "f16" and not need_f16 or variant == "q8_0" and "q8_0" not in cfg.variants:
                    continue
                t0 = time.perf_counter()
                p = write_model_gguf(merged, work / FILES[variant], variant.upper(), tokenizer_dir=tok_dir,
                                     base_dir=base, name=name, extra={"source_adapter": source["sha256"]},
                                     verify_tokenizer=cfg.verify_tokenizer, progress=progress)
                files[variant] = _entry(p, kind="merged", quant=variant.upper(), made_by="gguf package",
                                        seconds=time.perf_counter() - t0)
                if variant in cfg.variants:
                    bar.update(1)
            del merged
        bar.update(1)
        del peft_model, model
        for variant in _QUANTIZED:
            if variant not in cfg.variants:
                continue
            t0 = time.perf_counter()
            p = quantize_gguf(work / FILES["f16"], work / FILES[variant], variant.upper(), n_threads=cfg.n_threads,
                              imatrix=imatrix)
            if cfg.verify_tokenizer:
                from transformers import AutoTokenizer

                _verify_tokenizer(p, AutoTokenizer.from_pretrained(str(tok_dir)))
            files[variant] = _entry(p, kind="merged", quant=variant.upper(), made_by="llama.cpp quantizer",
                                    from_file=FILES["f16"], imatrix=imatrix is not None,
                                    seconds=time.perf_counter() - t0)
            bar.update(1)
        if "f16" not in cfg.variants and "f16" in files:
            (work / FILES["f16"]).unlink()
            del files["f16"]
        default = next((v for v in (cfg.default, "q8_0", "f16", "q4_k_m", "q4_1", "lora") if v in files), None)
        manifest = {"format": EXPORT_FORMAT, "version": 1, "exporter_version": EXPORT_VERSION,
                    "name": name, **dict(info or {}), "source_adapter": source, "base": base_info,
                    "default": files[default]["file"] if default else None,
                    "files": files, "skipped": skipped, "merge_seconds": merge_s,
                    "imatrix": imatrix_record,
                    "imatrix_note": None if imatrix_record or not quantized else (
                        "quantized without an importance matrix: " + ("imatrix_rows=0" if cfg.imatrix_rows == 0
                                                                      else "no calibration texts were given")),
                    "export_seconds": time.perf_counter() - t_start, "parity": {},
                    "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        (work / "manifest.json").write_text(json.dumps(manifest, indent=1))
        repro.write_meta(work, params={"adapter": str(adapter_dir), "base": str(base), **asdict(cfg)},
                         seed=0, wall_time_s=manifest["export_seconds"])
        _swap_in(work, out_dir)
    finally:
        bar.close()
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return manifest


def _check_out_dir(out_dir: Path, adapter_dir: Path) -> None:
    """Refuse an output folder the export would destroy: it replaces ``out_dir`` as a whole, which is right for
    an earlier export (its manifest, or only the files an export writes) and wrong for anything else (a run
    folder, the adapter itself)."""
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise ExportError(f"--out {out_dir} is a file; give a folder for the export")
    a, o = adapter_dir.resolve(), out_dir.resolve()
    if a == o or o in a.parents:
        raise ExportError(f"--out {out_dir} holds the adapter being exported ({adapter_dir}); the export replaces its "
                          "folder as a whole: give another folder, e.g. <run>/gguf")
    if (out_dir / "manifest.json").is_file():
        return
    ours = set(FILES.values()) | {"manifest.json", "meta.json"}
    foreign = sorted(p.name for p in out_dir.iterdir() if p.name not in ours)
    if foreign:
        raise ExportError(f"--out {out_dir} is not an export folder and holds {', '.join(foreign[:5])}"
                          f"{' ...' if len(foreign) > 5 else ''}; the export replaces its folder as a whole: give an "
                          "empty or new folder, e.g. <run>/gguf")


def _swap_in(work: Path, final: Path) -> None:
    """Replace folder ``final`` by ``work`` (two renames; the old folder is removed afterwards)."""
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        os.replace(final, old)
        os.replace(work, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(work, final)


def read_manifest(gguf_dir: str | os.PathLike, *, verify: str = "size", missing_ok: bool = False) -> dict | None:
    """The manifest of an export folder, checked against the files on disk.

    Parameters
    ----------
    verify : {"none", "size", "sha256"}
        ``size``: every listed file exists with its recorded size (cheap); ``sha256``: and its
        content hash matches (reads every byte).
    missing_ok : bool
        Return ``None`` instead of raising when there is no manifest.

    Raises
    ------
    ExportError
        A file is missing, has another size or another hash (the message says to export again).
    """
    gguf_dir = Path(gguf_dir)
    path = gguf_dir / "manifest.json"
    if not path.is_file():
        if missing_ok:
            return None
        raise ModelNotFoundError(f"no GGUF export in {gguf_dir} (no manifest.json); run notebooks/30_export_gguf.ipynb "
                                 "or python -m mags_lib.export")
    try:
        manifest = json.loads(path.read_text())
    except ValueError as e:
        raise ExportError(f"{path} is corrupt ({e}); export again (python -m mags_lib.export --force)") from e
    if manifest.get("format") != EXPORT_FORMAT:
        raise ExportError(f"{path} is not a mags GGUF export manifest (format={manifest.get('format')!r})")
    if verify not in ("none", "size", "sha256"):
        raise ValueError(f"verify must be 'none', 'size' or 'sha256', got {verify!r}")
    if verify != "none":
        for entry in manifest.get("files", {}).values():
            f = gguf_dir / entry["file"]
            if not f.is_file():
                raise ExportError(f"{f} listed in {path} is missing; export again (python -m mags_lib.export --force)")
            if f.stat().st_size != entry["size"]:
                raise ExportError(f"{f} has {f.stat().st_size:,} bytes but the export wrote {entry['size']:,} "
                                  "(truncated or replaced); export again (python -m mags_lib.export --force)")
            if verify == "sha256" and file_sha256(f) != entry["sha256"]:
                raise ExportError(f"{f} changed since it was exported (sha256 differs); export again "
                                  "(python -m mags_lib.export --force)")
    return manifest


def record_parity(gguf_dir: str | os.PathLike, summary: Mapping[str, Any]) -> dict:
    """Store a parity summary (variant -> figures) in the manifest of an export folder, atomically."""
    from ..repro import atomic_write_text

    gguf_dir = Path(gguf_dir)
    manifest = read_manifest(gguf_dir, verify="size")
    manifest["parity"] = json.loads(json.dumps(dict(summary), default=float))
    atomic_write_text(gguf_dir / "manifest.json", json.dumps(manifest, indent=1))
    return manifest


# ------------------------------------------------------------------------------------------------
# trained models: models/<role>/<run_tag>/
def final_adapter(role: str, run_tag: str = "default", *, models_root: str | os.PathLike | None = None) -> Path:
    """The PEFT adapter folder of the final stage of ``models/<role>/<run_tag>/``.

    Resolved by :func:`mags_lib.training.layout.find_trained_model` (the run's ``meta.json`` names the
    final stage; a run without one is unfinished and never exported).

    Raises
    ------
    mags_lib.models.ModelNotFoundError
        No finished run of that tag (the message lists the runs that exist and how to train one).
    """
    from ..training.layout import find_trained_model

    return find_trained_model(role, run_tag=run_tag, backend="transformers", models_root=models_root)


def role_calibration(role: str, adapter: str | os.PathLike, rows: int, *, profile: str | None = None,
                     seed: int = 0, data_root: str | os.PathLike | None = None) -> tuple[list[str], str]:
    """``rows`` rows of the training split of ``role``'s generated dataset, rendered as ``adapter``'s
    model is prompted (prompt, gold response, end of turn), and their label: the calibration texts of
    the importance matrix. ``profile``: the dataset's profile (default: the one the adapter's run was
    trained in, else ``default``). Held-out rows are never used.

    Raises
    ------
    FileNotFoundError
        The dataset is not built (the message says how to build it, or to export unweighted).
    """
    from transformers import AutoTokenizer

    from ..data import dataset_name, load_processed, processed_root
    from ..evaluate import sample_rows
    from ..roles import trained_meta
    from .imatrix import calibration_texts

    if rows <= 0:
        return [], ""
    adapter = Path(adapter)
    if profile is None:
        profile = ((trained_meta(adapter) or {}).get("config") or {}).get("profile") or "default"
    name = dataset_name("gen", role, profile)
    if not (processed_root(data_root) / name / "data").exists():
        raise FileNotFoundError(
            f"the {role} role's training data {name} is not in {processed_root(data_root)}: build it (notebook 10, "
            f"`python -m mags_lib.pipeline --only 10 --profile {profile}`) to weigh the 4-bit files by it, or export "
            "unweighted with ExportConfig(imatrix_rows=0) / --imatrix-rows 0")
    picked = sample_rows(load_processed(name, root=data_root)["train"].to_list(), rows, seed)
    tok_dir = _tokenizer_dir(adapter, _adapter_base(adapter, None))
    texts = calibration_texts(role, picked, AutoTokenizer.from_pretrained(str(tok_dir)), adapter=adapter)
    return texts, f"{name} train, {len(texts)} rows"


def export_role(role: str, run_tag: str = "default", config: ExportConfig | None = None, *,
                models_root: str | os.PathLike | None = None, data_root: str | os.PathLike | None = None,
                progress: bool = True) -> dict:
    """Export the final adapter of ``models/<role>/<run_tag>/`` to ``models/<role>/<run_tag>/gguf/``,
    its 4-bit files weighed by :func:`role_calibration` when ``config.imatrix_rows`` asks for training rows."""
    cfg = config or ExportConfig()
    adapter = final_adapter(role, run_tag, models_root=models_root)
    texts, label = role_calibration(role, adapter, cfg.imatrix_rows, data_root=data_root)
    return export_adapter(adapter, adapter.parent / "gguf", cfg, name=f"mags-{role}-{run_tag}",
                          info={"role": role, "run_tag": run_tag, "stage": adapter.name}, calibration=texts,
                          calibration_label=label, progress=progress)


def trained_gguf(role: str, run_tag: str = "default", variant: str | None = None, *,
                 models_root: str | os.PathLike | None = None) -> Path:
    """The exported GGUF of a trained role, checked against the adapter it came from.

    Parameters
    ----------
    variant : str, optional
        One of :data:`VARIANTS` (``"lora"``: the adapter alone, which the llama.cpp backend applies
        onto the embedded base model); ``None``: the export's ``default`` (Q8_0 unless asked otherwise).

    Raises
    ------
    mags_lib.models.ModelNotFoundError
        No trained model, or no export of it (the message says which notebook makes it).
    ExportError
        The export is stale (the adapter changed since) or damaged.
    """
    if variant is not None and variant.lower() not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    adapter = final_adapter(role, run_tag, models_root=models_root)
    gdir = adapter.parent / "gguf"
    manifest = read_manifest(gdir, verify="size", missing_ok=True)
    if manifest is None:
        raise ModelNotFoundError(
            f"the trained {role} model {adapter} has no GGUF export ({gdir} is missing). Export it with "
            f"notebooks/30_export_gguf.ipynb or `python -m mags_lib.export --role {role} --run-tag {run_tag}`, "
            "or use backend='transformers'.")
    if manifest.get("source_adapter", {}).get("sha256") != _adapter_sha256(adapter):
        raise ExportError(f"the GGUF export in {gdir} was made from another version of {adapter} (the adapter "
                          f"changed since); export again: python -m mags_lib.export --role {role} "
                          f"--run-tag {run_tag}")
    if variant is None:
        by_file = {e["file"]: v for v, e in manifest["files"].items()}
        variant = by_file.get(manifest.get("default"), next(iter(manifest["files"]), None))
    variant = str(variant).lower()
    if variant not in manifest["files"]:
        why = manifest.get("skipped", {}).get(variant, "it was not asked for")
        raise ModelNotFoundError(f"the export in {gdir} has no {variant!r} file ({why}); it has "
                                 f"{sorted(manifest['files'])}")
    return gdir / manifest["files"][variant]["file"]

# ------------------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    """CLI: export one role's trained adapter, or any PEFT adapter folder."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--role", choices=["ask", "write", "answer"])
    ap.add_argument("--run-tag", default="default")
    ap.add_argument("--adapter", help="a PEFT adapter folder (instead of --role)")
    ap.add_argument("--out", help="output folder with --adapter")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--imatrix-rows", type=int, default=ExportConfig.imatrix_rows,
                    help="training rows of the role that weigh the 4-bit files (0: unweighted; --adapter: unweighted)")
    a = ap.parse_args(argv)
    cfg = ExportConfig(variants=tuple(a.variants.split(",")), n_threads=a.threads, force=a.force,
                       imatrix_rows=a.imatrix_rows)
    if a.adapter:
        if not a.out:
            ap.error("--adapter needs --out")
        m = export_adapter(a.adapter, a.out, cfg)
    elif a.role:
        m = export_role(a.role, a.run_tag, cfg)
    else:
        ap.error("give --role (a trained model under models/<role>/<run_tag>/) or --adapter and --out")
    for v, e in m["files"].items():
        print(f"{v:7s} {e['file']:20s} {e['size'] / 2**20:8.1f} MiB  {e['sha256'][:12]}")
    for v, why in m.get("skipped", {}).items():
        print(f"{v:7s} skipped: {why}")
    print(f"export took {m['export_seconds']:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
