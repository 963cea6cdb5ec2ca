"""What notebook 30 (``30_export_gguf``) calls: which adapters to export, the export of every role, the
held-out rows of parity, and the size / speed / quality figure per quantization.

A role's adapter is the final stage of its trained run (``models/<role>/<tag>/``). In the smoke
profile a role without a trained run gets a **stand-in**: a random LoRA (non-zero A and B, seeded),
made and exported under the notebook's results folder -- never under ``models/`` -- so every step of
the export runs; its parity figures measure the exporter, not training, and every table says so.
In the default and full profiles a missing trained model is an error that names the notebook that
makes it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..models import ModelNotFoundError
from .gguf_write import random_lora
from .layout import _QUANTIZED, ExportConfig, export_adapter, final_adapter, read_manifest, role_calibration

__all__ = ["Source", "export_all", "held_out_rows", "parity_all", "quant_figure", "sources"]


@dataclass(frozen=True)
class Source:
    """The adapter of one role and where its export goes."""

    role: str
    adapter: Path
    gguf_dir: Path
    stand_in: bool
    note: str = ""


def sources(roles: Sequence[str], trained_tag: str, *, profile: str, work_dir: str | os.PathLike, seed: int = 0,
            models_root: str | os.PathLike | None = None) -> dict[str, Source]:
    """The adapter to export per role: the trained one, or (smoke profile only) a stand-in."""
    out = {}
    for i, role in enumerate(roles):
        try:
            adapter = final_adapter(role, trained_tag, models_root=models_root)
            out[role] = Source(role, adapter, adapter.parent / "gguf", False)
        except ModelNotFoundError as e:
            if profile != "smoke":
                raise
            folder = Path(work_dir) / "stand_in" / role
            adapter = folder / "adapter"
            if not (adapter / "adapter_config.json").is_file():
                random_lora(adapter, seed=seed + i)
            out[role] = Source(role, adapter, folder / "gguf", True,
                               f"no trained {role} model for tag {trained_tag!r} ({str(e).split(';')[0]}): a random "
                               "stand-in LoRA exercises the export; its figures say nothing about training")
    return out


def export_all(srcs: Mapping[str, Source], config: ExportConfig | None = None, *, profile: str | None = None,
               seed: int = 0, data_root: str | os.PathLike | None = None, progress: bool = True) -> tuple:
    """Export every role; return ``(table, manifests)``: one row per file, and the manifests by role.

    The 4-bit files of each role are weighed by ``config.imatrix_rows`` rows of the role's training split
    of ``profile`` (:func:`~mags_lib.export.layout.role_calibration`; ``None``: the profile each adapter was
    trained in).
    """
    import pandas as pd

    cfg = config or ExportConfig()
    weighed = any(v in cfg.variants for v in _QUANTIZED)  # the files an importance matrix weighs
    rows, manifests = [], {}
    for role, s in srcs.items():
        texts, label = role_calibration(role, s.adapter, cfg.imatrix_rows if weighed else 0, profile=profile,
                                        seed=seed, data_root=data_root)
        m = export_adapter(s.adapter, s.gguf_dir, cfg, name=f"mags-{role}",
                           info={"role": role, "stand_in": s.stand_in}, calibration=texts,
                           calibration_label=label, progress=progress)
        manifests[role] = m
        for variant, e in m["files"].items():
            rows.append({"role": role, "stand_in": s.stand_in, "variant": variant, "file": e["file"],
                         "size_mib": e["size"] / 2**20, "made_by": e.get("made_by", "gguf package (LoRA)"),
                         "imatrix": e.get("imatrix"),
                         "seconds": e.get("seconds"), "sha256": e["sha256"][:12]})
        for variant, why in m.get("skipped", {}).items():
            rows.append({"role": role, "stand_in": s.stand_in, "variant": variant, "file": None,
                         "size_mib": None, "made_by": f"skipped: {why}", "seconds": None, "sha256": None})
    return pd.DataFrame(rows), manifests


def held_out_rows(role: str, profile: str, *, root: str | os.PathLike | None = None) -> list[dict]:
    """The test split of the generated dataset of ``role`` (worlds never seen in training)."""
    from ..data import dataset_name, load_processed

    return load_processed(dataset_name("gen", role, profile), root=root)["test"].to_list()


def parity_all(srcs: Mapping[str, Source], variants: Sequence[str], config: Any = None, *, profile: str,
               out_dir: str | os.PathLike | None = None, n_jobs: int = 1, data_root: str | os.PathLike | None = None,
               progress: bool = True) -> Any:
    """:func:`~mags_lib.export.parity.parity` of every role's files (``variants``) against its adapter, on the
    role's held-out rows; each summary recorded in the role's manifest. Returns the rows of every role,
    with ``stand_in``.

    With ``n_jobs`` > 1 the roles run in that many processes (joblib; each keeps ``config.n_threads``),
    the writer first (its long outputs make it the longest): the same figures, except that tokens/s and
    load times are then measured beside another role's parity on the other core.
    """
    import pandas as pd

    from .layout import record_parity
    from .parity import parity_summary

    if n_jobs < 1:
        raise ValueError(f"n_jobs must be >= 1, got {n_jobs}")
    roles = sorted(srcs, key=lambda r: r != "write")
    if n_jobs > 1 and len(roles) > 1:
        from joblib import Parallel, delayed
        from tqdm.auto import tqdm

        par = Parallel(n_jobs=min(n_jobs, len(roles)), return_as="generator")  # in order, as each finishes
        bar = tqdm(total=len(roles), desc=f"parity of {len(roles)} roles, {min(n_jobs, len(roles))} processes",
                   disable=not progress)
        frames = []
        for df in par(delayed(_parity_job)(srcs[r], variants, config, profile, out_dir, data_root, False) for r in roles):
            frames.append(df)
            bar.update(1)
        bar.close()
    else:
        frames = [_parity_job(srcs[r], variants, config, profile, out_dir, data_root, progress) for r in roles]
    tables = []
    for role, df in zip(roles, frames):
        record_parity(srcs[role].gguf_dir, parity_summary(df))
        tables.append(df.assign(stand_in=srcs[role].stand_in))
    order = {r: i for i, r in enumerate(srcs)}  # the caller's role order
    return pd.concat(sorted(tables, key=lambda d: order[d["role"].iloc[0]]), ignore_index=True)


def _parity_job(src: Source, variants: Sequence[str], config: Any, profile: str,
                out_dir: str | os.PathLike | None, data_root: str | os.PathLike | None, progress: bool) -> Any:
    """One role's parity (in this process or a worker of :func:`parity_all`)."""
    from .parity import parity

    return parity(src.role, held_out_rows(src.role, profile, root=data_root), src.adapter, files_of(src, variants),
                  config, out_dir=out_dir, progress=progress)


def files_of(src: Source, variants: Sequence[str]) -> dict[str, Path]:
    """Variant -> file of an export, in the order asked."""
    m = read_manifest(src.gguf_dir, verify="size")
    return {v: src.gguf_dir / m["files"][v]["file"] for v in variants if v in m["files"]}


def quant_figure(parity_df: Any, *, quality: str = "op_f1") -> Any:
    """Size, speed and quality per quantization (bars grouped by variant, one colour per role).

    ``quality`` is the role metric drawn beside teacher-forced top-1 agreement for ask and write
    (``op_f1``); the answer role draws its accuracy there. The transformers reference's value is drawn as
    a dotted line in the role's colour.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    df = parity_df[parity_df["label"] != "transformers"]
    labels = list(dict.fromkeys(df["label"]))
    roles = list(dict.fromkeys(df["role"]))
    x = np.arange(len(labels))
    width = 0.8 / max(1, len(roles))
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    panels = [("size_mb", "size on disk (MiB)"), ("tokens_per_s", "tokens/s (greedy, prompt included)"),
              ("top1_agreement", "teacher-forced top-1 agreement"),
              (quality, f"{quality} (answer: accuracy) of greedy outputs")]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (panel, title) in zip(axes, panels):
        for k, role in enumerate(roles):
            col = "accuracy" if role == "answer" and panel == quality else panel
            grp = df[df["role"] == role].set_index("label").reindex(labels)
            if col not in grp or grp[col].isna().all():
                continue
            c = colors[k % len(colors)]
            ax.bar(x + (k - (len(roles) - 1) / 2) * width, grp[col].to_numpy(dtype=float), width, label=role,
                   color=c)
            ref = parity_df[(parity_df["role"] == role) & (parity_df["label"] == "transformers")]
            if panel == quality and len(ref) and col in ref and ref[col].notna().all():
                ax.axhline(float(ref[col].iloc[0]), ls=":", lw=1.2, color=c)
        if panel == "top1_agreement" and df[panel].notna().any():
            ax.set_ylim(max(0.0, float(df[panel].min()) - 0.05), 1.005)
        ax.set_xticks(x, labels, rotation=30)
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3, axis="y")
    axes[0].legend(fontsize=8)
    axes[3].text(0.01, 0.01, "dotted: the transformers reference", transform=axes[3].transAxes, fontsize=7)
    fig.tight_layout()
    return fig
