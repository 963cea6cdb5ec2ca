"""Importance matrices for llama.cpp's low-bit quantization, computed with transformers.

llama.cpp quantizes a weight row block by block; without an importance matrix every input column of
a row counts the same in the rounding error it minimises. With one (``llama-imatrix`` /
``llama-quantize --imatrix``), column ``j`` of a weight counts by the mean square of the activation
that multiplies it, ``E[x_j**2]``, over calibration text: the error is moved to the columns that
matter least for the outputs. This module computes that matrix for a transformers llama model with
forward hooks on its linear layers (the same statistic ``llama-imatrix`` collects, the mean of the
squared input per column over every token), named by the GGUF tensors it weighs
(``blk.<i>.attn_q.weight``, ...), and :func:`mags_lib.export.quantize_gguf` hands it to llama.cpp's
quantizer through ``llama_model_quantize_params.imatrix``. The file types and the type chosen for
each tensor are the same with and without it (llama.cpp changes a type on an importance matrix only
for the Q4_0 / Q5_0 file types); only the rounding differs.

The export calibrates each trained role on rows of its own training split, rendered exactly as the
role's model is prompted (:func:`calibration_texts`): the model is served on that distribution, and
no held-out row is ever used.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["ImportanceMatrix", "calibration_texts", "importance_matrix"]


@dataclass
class ImportanceMatrix:
    """Mean squared input activation per column of each linear weight, by GGUF tensor name.

    Attributes
    ----------
    values : dict of str to numpy.ndarray
        ``blk.<i>.<tensor>.weight`` -> float32 vector of length ``in_features`` (the GGUF tensor's
        ``ne[0]``, the row length the quantizer blocks).
    n_texts, n_tokens : int
        Calibration texts and tokens the means are over.
    dataset : str
        What the texts were (written into the quantized file as ``quantize.imatrix.dataset``).
    """

    values: dict[str, np.ndarray]
    n_texts: int
    n_tokens: int
    dataset: str = ""

    def sha256(self) -> str:
        """A content hash of the matrix (names, values), for manifests."""
        h = hashlib.sha256()
        for name in sorted(self.values):
            h.update(name.encode())
            h.update(np.ascontiguousarray(self.values[name], dtype=np.float32).tobytes())
        return h.hexdigest()

    def summary(self) -> dict[str, Any]:
        """What a manifest records of it."""
        return {"dataset": self.dataset, "entries": len(self.values), "texts": self.n_texts,
                "tokens": self.n_tokens, "sha256": self.sha256()}


def _gguf_linear_names(model: Any) -> dict[str, str]:
    """transformers module name -> GGUF tensor name, for every linear layer inside the decoder blocks."""
    import gguf
    import torch

    config = model.config
    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, int(config.num_hidden_layers))
    out = {}
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear) or name.endswith("lm_head"):
            continue
        new = tmap.get_name(f"{name}.weight", try_suffixes=(".weight",))
        if new is None or not new.startswith("blk."):
            raise ValueError(f"linear layer {name!r} has no llama GGUF block tensor name")
        out[name] = new
    if not out:
        raise ValueError("the model has no linear layers inside its decoder blocks")
    return out


def importance_matrix(model: Any, tokenizer: Any, texts: Sequence[str], *, dataset: str = "",
                      batch_size: int = 8, max_length: int = 2048, progress: bool = True) -> ImportanceMatrix:
    """The importance matrix of ``model`` (a transformers llama model) on ``texts``.

    Each text is tokenized as it is (special tokens written in it, such as a chat template's, are
    kept; nothing is added) and cut to ``max_length`` tokens; padding never counts.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        A ``LlamaForCausalLM`` (a merged model: the adapter's layers would be hooked as well as the
        base's otherwise).
    tokenizer : transformers tokenizer
    texts : list of str
        Calibration texts (not empty).
    dataset : str
        Label stored with the matrix.

    Returns
    -------
    ImportanceMatrix

    Examples
    --------
    The value of a column is the mean of its squared input over all tokens: for a text of two tokens
    whose input to ``q_proj`` is ``[1, 2]`` and ``[3, 0]``, column 0 gets ``(1 + 9) / 2 = 5`` and
    column 1 ``(4 + 0) / 2 = 2``.
    """
    import torch
    from tqdm.auto import tqdm

    if not texts:
        raise ValueError("importance_matrix needs at least one calibration text")
    names = _gguf_linear_names(model)
    sums: dict[str, torch.Tensor] = {}
    counts: dict[str, int] = dict.fromkeys(names.values(), 0)
    mask_box: list[torch.Tensor] = []

    def hook(gguf_name: str):
        def fn(_module, args):
            x = args[0].detach()
            keep = mask_box[0].reshape(-1)
            flat = x.reshape(-1, x.shape[-1])[keep].double()
            s = (flat * flat).sum(0)
            sums[gguf_name] = sums[gguf_name] + s if gguf_name in sums else s
            counts[gguf_name] += int(flat.shape[0])
        return fn

    modules = dict(model.named_modules())
    handles = [modules[n].register_forward_pre_hook(hook(g)) for n, g in names.items()]
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"][:max_length] for t in texts]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))  # batches of similar lengths: little padding
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else model  # the blocks only: no 49k-vocab head
    was_training = model.training
    model.eval()
    n_tokens = 0
    try:
        with torch.no_grad():
            for start in tqdm(range(0, len(order), batch_size), desc="importance matrix", disable=not progress,
                              leave=False):
                batch = [ids[i] for i in order[start:start + batch_size]]
                width = max(len(b) for b in batch)
                input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
                attn = torch.zeros((len(batch), width), dtype=torch.long)
                for k, b in enumerate(batch):
                    input_ids[k, :len(b)] = torch.tensor(b, dtype=torch.long)
                    attn[k, :len(b)] = 1
                mask_box[:] = [attn.bool()]
                decoder(input_ids=input_ids, attention_mask=attn, use_cache=False)
                n_tokens += int(attn.sum())
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    missing = [g for g, c in counts.items() if c == 0]
    if missing:
        raise RuntimeError(f"no activation reached {missing[:3]} (and {max(0, len(missing) - 3)} more)")
    values = {g: (sums[g] / counts[g]).float().numpy() for g in names.values()}
    return ImportanceMatrix(values=values, n_texts=len(texts), n_tokens=n_tokens, dataset=dataset)


def calibration_texts(role: str, rows: Sequence[Mapping[str, Any]], tokenizer: Any, *, spec: Any = None,
                      adapter: Any = None) -> list[str]:
    """``rows`` of ``role`` rendered as its model sees them: the prompt (chat template, the role's
    trained prompt or ``spec``) followed by the gold response and the end-of-turn token.

    ``adapter``: a trained adapter folder whose recorded prompt is used (as the export's parity does).
    """
    from .parity import parity_spec

    spec = spec or parity_spec(role, adapter)
    if spec.role != role:
        raise ValueError(f"the prompt spec is for the {spec.role!r} role, not {role!r}")
    eos = tokenizer.eos_token or ""
    out = []
    for r in rows:
        msgs = spec.messages(r["input"], facts=r.get("memory") if role == "answer" else None)
        prompt = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        out.append(prompt + (r.get("response") or "") + eos)
    return out
