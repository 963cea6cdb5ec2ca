"""vLLM backend (optional, CUDA only), imported lazily.

``pip install "mags_lib[vllm]"`` on a machine with an NVIDIA GPU. Without CUDA, loading it raises a
:class:`~mags_lib.backends.base.BackendUnavailableError` that says so before anything heavy starts.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from .base import Backend, BackendUnavailableError, Generation, _truncate_at_stop

__all__ = ["VLLMBackend"]


def _check_cuda() -> None:
    try:
        import torch
    except ImportError as e:  # pragma: no cover
        raise BackendUnavailableError("the vllm backend needs torch with CUDA") from e
    if not torch.cuda.is_available():
        raise BackendUnavailableError(
            "the vllm backend needs a CUDA GPU and none is visible to torch "
            f"(torch {torch.__version__}, cuda={torch.version.cuda}). On CPU use backend='llamacpp' "
            "(fastest, grammar support) or backend='transformers'.")


class VLLMBackend(Backend):
    """A model served by vLLM on a CUDA GPU.

    Parameters
    ----------
    model : str or Path, optional
        ``None`` = the embedded SmolLM2 (its de-quantized transformers copy); a transformers folder
        or a ``.gguf`` file.
    gpu_memory_utilization : float
        Share of GPU memory vLLM may reserve.
    max_model_len : int
        Context window.
    """

    name = "vllm"
    supports_grammar = True

    def __init__(self, model: Any = None, *, gpu_memory_utilization: float = 0.5,
                 max_model_len: int = 4096, seed: int = 0, **llm_kw: Any) -> None:
        _check_cuda()
        try:
            import vllm
        except ImportError as e:
            raise BackendUnavailableError('vLLM is not installed: pip install "mags_lib[vllm]" (needs '
                                          "a CUDA GPU)") from e
        from ..models import base_model_dir, resolve_model

        if model is None or (isinstance(model, str) and model.lower() in ("smollm2", "base", "embedded")):
            path, tokenizer = base_model_dir(), None
        else:
            spec = resolve_model(model)
            path = spec.path
            tokenizer = str(base_model_dir()) if spec.kind == "gguf" else None
        super().__init__()
        self._vllm = vllm
        self.model_path = str(path)
        self.seed = int(seed)
        self._llm = vllm.LLM(model=str(path), tokenizer=tokenizer, seed=self.seed,
                             gpu_memory_utilization=gpu_memory_utilization,
                             max_model_len=max_model_len, **llm_kw)
        self._tok = self._llm.get_tokenizer()

    def render(self, messages: Sequence[dict]) -> str:
        self._check_open()
        return self._tok.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)

    def count_tokens(self, text: str) -> int:
        self._check_open()
        return len(self._tok(text, add_special_tokens=False)["input_ids"]) if text else 0

    def _sampling(self, max_new_tokens: int, temperature: float, grammar: str | None,
                  stop: list[str], seed: int | None) -> Any:
        vllm = self._vllm
        kw: dict[str, Any] = {"max_tokens": max_new_tokens, "temperature": temperature,
                              "stop": stop or None, "seed": self.seed if seed is None else int(seed)}
        if grammar is not None:
            sp = getattr(vllm.sampling_params, "StructuredOutputsParams", None)
            if sp is not None:
                kw["structured_outputs"] = sp(grammar=grammar)
            else:  # older vLLM
                kw["guided_decoding"] = vllm.sampling_params.GuidedDecodingParams(grammar=grammar)
        return vllm.SamplingParams(**kw)

    def _generate(self, prompts: list, *, max_new_tokens: int, temperature: float,
                  grammar: str | None, stop: list[str], seed: int | None) -> list[Generation]:
        texts = [p if isinstance(p, str) else self.render(p) for p in prompts]
        params = self._sampling(max_new_tokens, temperature, grammar, stop, seed)
        t0 = time.perf_counter()
        results = self._llm.generate(texts, params, use_tqdm=False)
        dt = time.perf_counter() - t0
        out = []
        for r in results:
            c = r.outputs[0]
            text, _ = _truncate_at_stop(c.text, stop) if stop else (c.text, False)
            out.append(Generation(text=text, n_prompt_tokens=len(r.prompt_token_ids),
                                  n_new_tokens=len(c.token_ids), seconds=dt))
        return out

    def _release(self) -> None:
        self._llm = None
        self._tok = None
        import gc

        gc.collect()
