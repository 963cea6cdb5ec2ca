"""Export trained LoRA adapters to GGUF for llama.cpp: merge, quantize, LoRA-only adapters, manifest.

A trained role lives in ``models/<role>/<run_tag>/`` (written by :mod:`mags_lib.training`): a
``meta.json`` that says which stage is final and one PEFT adapter folder per stage (``sft/``,
``grpo/``). :func:`export_role` adds ``gguf/`` beside them::

    models/<role>/<run_tag>/gguf/
        model-f16.gguf      the merged model, F16 (norms F32)          -- written with the gguf package
        model-q8_0.gguf     the merged model, Q8_0 (norms F32)         -- written with the gguf package
        model-q4_k_m.gguf   Q4_K_M, from the F16 file                  -- llama.cpp's quantizer (weighed by an
        model-q4_1.gguf     Q4_1 (the embedded base's format), idem       importance matrix when imatrix_rows asks)
        lora-f32.gguf       the LoRA alone, a GGUF adapter that llama.cpp applies at run time onto
                            the base GGUF the adapter was trained on (the embedded SmolLM2)
        manifest.json       per file: size, sha256, how it was made; the source adapter (and its
                            sha256), the base, the parity summary (:func:`record_parity`)
        meta.json           parameters, versions, git SHA, wall time (:func:`mags_lib.repro.write_meta`)

Parts:

* :mod:`~mags_lib.export.gguf_write` -- the GGUF writer (this project's own, on
  :class:`gguf.GGUFWriter`), llama.cpp's quantizer, LoRA adapters as GGUF; only the llama architecture
  (``LlamaForCausalLM``: SmolLM2 and kin), anything else fails before a byte is written;
* :mod:`~mags_lib.export.imatrix` -- importance matrices (mean squared activation per weight column on
  calibration text) computed with transformers, which llama.cpp's quantizer weighs the 4-bit rounding by;
* :mod:`~mags_lib.export.layout` -- the export of one adapter / one trained role into ``gguf/``, its
  manifest, and :func:`trained_gguf`, which the agent uses to find the file of a trained role;
* :mod:`~mags_lib.export.parity` -- each file against the transformers model it came from;
* :mod:`~mags_lib.export.switch` -- adapters switched over one loaded base: time and memory;
* :mod:`~mags_lib.export.latency` -- MAGS turn latency on the exported files of trained roles;
* :mod:`~mags_lib.export.report` -- what notebook 30 calls (sources, export of every role, figure).

Every file is written to a temporary name and renamed when complete, and the whole ``gguf/`` folder
is swapped in at the end, so an interrupted export leaves the previous export (or nothing), never a
half-written file.

Parity (:func:`parity`) compares each file with the transformers model it came from: teacher-forced
top-1 agreement, greedy output equality, the role's metrics, size on disk and tokens/s.

Command line::

    python -m mags_lib.export --role ask --run-tag default         # export one role
    python -m mags_lib.export --adapter path/to/adapter --out dir  # any PEFT LoRA folder
"""

from .gguf_write import (
    SUPPORTED_ARCHITECTURES,
    ExportError,
    UnsupportedModelError,
    check_supported,
    file_sha256,
    quantize_gguf,
    random_lora,
    write_lora_gguf,
    write_model_gguf,
)
from .layout import (
    EXPORT_FORMAT,
    FILES,
    VARIANTS,
    ExportConfig,
    export_adapter,
    export_role,
    final_adapter,
    main,
    read_manifest,
    record_parity,
    role_calibration,
    trained_gguf,
)

__all__ = [
    "EXPORT_FORMAT",
    "FILES",
    "SUPPORTED_ARCHITECTURES",
    "VARIANTS",
    "ExportConfig",
    "ExportError",
    "UnsupportedModelError",
    "check_supported",
    "export_adapter",
    "export_role",
    "file_sha256",
    "final_adapter",
    "main",
    "quantize_gguf",
    "random_lora",
    "read_manifest",
    "record_parity",
    "role_calibration",
    "trained_gguf",
    "write_lora_gguf",
    "write_model_gguf",
]
