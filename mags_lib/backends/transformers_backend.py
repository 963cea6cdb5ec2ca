"""transformers backend: batched generation with left padding (CPU or GPU torch).

The embedded SmolLM2 is loaded from its de-quantized safetensors copy
(:func:`mags_lib.models.base_model_dir`, converted once). A folder holding a PEFT LoRA adapter
(``adapter_config.json``) is loaded onto its base model and merged for inference. PEFT adapters can
also be switched at run time over one loaded base (:meth:`~mags_lib.backends.Backend.load_adapter`,
``set_adapter``, ``unload_adapter``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .base import Backend, Generation, _truncate_at_stop, first_repeat

__all__ = ["TransformersBackend"]

_EMBEDDED = (None, "smollm2", "smollm2-gguf", "smollm2-hf", "embedded", "base")


class TransformersBackend(Backend):
    """A causal LM served by transformers, generating in left-padded batches.

    Parameters
    ----------
    model : str or Path, optional
        ``None`` = the embedded SmolLM2 (de-quantized copy under ``models/base/``); a transformers
        folder, a LoRA adapter folder, or a ``.gguf`` file (de-quantized on load, slow).
    device : str
        torch device (``"cpu"``, ``"cuda"``, ...).
    dtype : str
        ``"float32"`` (CPU default), ``"bfloat16"`` or ``"float16"``.
    batch_size : int
        Prompts generated together (left padding).
    n_threads : int, optional
        ``torch.set_num_threads`` (process-wide) when given.
    """

    name = "transformers"
    stops_at_repeats = True
    supports_grammar = False
    supports_adapters = True

    def __init__(self, model: Any = None, *, device: str = "cpu", dtype: str = "float32",
                 batch_size: int = 8, n_threads: int | None = None, models_root: Any = None) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from ..models import base_model_dir, resolve_model

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"dtype must be float32, bfloat16 or float16, got {dtype!r}")
        torch_dtype = getattr(torch, dtype)
        if n_threads:
            torch.set_num_threads(int(n_threads))
        gguf_file = None
        adapter_dir: Path | None = None
        if model is None or (isinstance(model, str) and model.lower() in _EMBEDDED):
            path = base_model_dir(models_root)
        else:
            spec = resolve_model(model, models_root=models_root)
            path = spec.path
            if spec.kind == "gguf":
                from .llamacpp_backend import gguf_type

                if gguf_type(path) == "adapter":
                    raise ValueError(f"{path} is a GGUF LoRA adapter, which transformers cannot load: "
                                     "use backend='llamacpp', or the PEFT adapter folder it was made from")
                gguf_file = path.name
                path = path.parent
            elif not (path / "config.json").is_file() and (path / "adapter_config.json").is_file():
                from ..models import check_adapter_folder

                adapter_dir = check_adapter_folder(path)
                base = json.loads((path / "adapter_config.json").read_text()).get(
                    "base_model_name_or_path")
                path = Path(base) if base and Path(base).is_dir() else base_model_dir(models_root)
        super().__init__()
        self.model_path = str(adapter_dir or (path / gguf_file if gguf_file else path))
        self.device = device
        self.batch_size = int(batch_size)
        self._torch = torch
        tok_src = adapter_dir if adapter_dir and (adapter_dir / "tokenizer_config.json").is_file() else path
        kw = {"gguf_file": gguf_file} if gguf_file else {}
        self.tokenizer = AutoTokenizer.from_pretrained(str(tok_src), **kw)
        self.tokenizer.padding_side = "left"
        self._closes: dict[int, bool] = {}  # token id -> its text holds a ">" (the repeat stop asks per token)
        # stop strings -> transformers' StopStringCriteria, built once per backend: transformers' own cache keys it
        # on the vocabulary's order, which get_vocab() does not keep from call to call, so
        # generate(stop_strings=...) rebuilt it on every call (0.5 s each on the 2-core machine)
        self._stop_criteria: dict[tuple[str, ...], Any] = {}
        self.tokenizer.clean_up_tokenization_spaces = False
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        net = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch_dtype, **kw)
        if adapter_dir is not None:
            from peft import PeftModel

            net = PeftModel.from_pretrained(net, str(adapter_dir)).merge_and_unload()
        self.model = net.to(device).eval()
        eos = self.model.generation_config.eos_token_id
        eos = eos if isinstance(eos, (list, tuple)) else [eos]
        self._eos_ids = {int(e) for e in eos if e is not None} | {int(self.tokenizer.eos_token_id)}

    # -- Backend API ---------------------------------------------------------------------------
    def render(self, messages: Sequence[dict]) -> str:
        self._check_open()
        return self.tokenizer.apply_chat_template(list(messages), tokenize=False,
                                                  add_generation_prompt=True)

    def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text`` (special-token text parsed, nothing added)."""
        self._check_open()
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def count_tokens(self, text: str) -> int:
        self._check_open()
        if not text:
            return 0
        return len(self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"])

    def _n_new(self, row: list[int]) -> int:
        """Tokens generated, the end-of-sequence token not counted (as llama.cpp's loop and llama-cpp-python's
        completion count them: the two backends' counts and tokens/s compare)."""
        for i, t in enumerate(row):
            if t in self._eos_ids:
                return i
        pad = self.tokenizer.pad_token_id
        if pad is not None and pad not in self._eos_ids:
            while row and row[-1] == pad:
                row = row[:-1]
        return len(row)

    def _generate(self, prompts: list, *, max_new_tokens: int, temperature: float,
                  grammar: str | None, stop: list[str], seed: int | None,
                  stop_repeats: bool = False) -> list[Generation]:
        torch = self._torch
        texts = [p if isinstance(p, str) else self.render(p) for p in prompts]
        out: list[Generation] = []
        for start in range(0, len(texts), self.batch_size):
            chunk = texts[start:start + self.batch_size]
            enc = self.tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False)
            enc = {k: v.to(self.device) for k, v in enc.items()}
            n_prompt = enc["attention_mask"].sum(dim=1).tolist()
            limit = getattr(self.model.config, "max_position_embeddings", None)
            if limit and max(n_prompt) + max_new_tokens > limit:  # as llama.cpp's context check (transformers
                # only logs it and decodes garbage past the trained positions)
                raise ValueError(f"prompt of {max(n_prompt)} tokens and max_new_tokens={max_new_tokens} do not fit "
                                 f"the model's {limit} positions; shorten the prompt or ask for fewer tokens")
            kw: dict[str, Any] = {"max_new_tokens": max_new_tokens,
                                  "pad_token_id": self.tokenizer.pad_token_id}
            if temperature > 0:
                kw.update(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
            else:
                kw.update(do_sample=False, temperature=None, top_k=None, top_p=None)
            repeats = (_repeat_stopping(self.tokenizer, enc["input_ids"].shape[1], self._closes)
                       if stop_repeats else None)
            criteria = ([self._stop_criterion(stop)] if stop else []) + ([repeats] if repeats is not None else [])
            if criteria:
                from transformers import StoppingCriteriaList

                kw["stopping_criteria"] = StoppingCriteriaList(criteria)
            t0 = time.perf_counter()
            with torch.inference_mode(), torch.random.fork_rng(devices=[]):
                if temperature > 0 and seed is not None:
                    torch.manual_seed(int(seed) + start)
                ids = self.model.generate(**enc, **kw)
            dt = time.perf_counter() - t0
            new = ids[:, enc["input_ids"].shape[1]:].tolist()
            for i, (row, npt) in enumerate(zip(new, n_prompt)):
                n = self._n_new(row)
                if repeats is not None and i in repeats.stopped_at:
                    n = min(n, repeats.stopped_at[i])  # the padding after a stop is not generated
                text = self.tokenizer.decode(row[:n], skip_special_tokens=True)
                if stop:
                    text, _ = _truncate_at_stop(text, stop)
                out.append(Generation(text=text, n_prompt_tokens=int(npt), n_new_tokens=n, seconds=dt))
        return out

    def _stop_criterion(self, stop: Sequence[str]):
        """transformers' stop-string criterion for ``stop``, built on the first call and kept (it holds no state
        of a generation: what ``generate(stop_strings=...)`` builds, without rebuilding its vocabulary tables)."""
        key = tuple(stop)
        if key not in self._stop_criteria:
            from transformers import StopStringCriteria

            if len(self._stop_criteria) >= 32:  # a role has one stop list; callers passing ever new ones stay bounded
                self._stop_criteria.clear()
            self._stop_criteria[key] = StopStringCriteria(self.tokenizer, list(key))
        return self._stop_criteria[key]

    # -- adapters (PEFT, through transformers' adapter integration) ------------------------------
    def _load_adapter(self, name: str, path: str, scale: float) -> None:
        if scale != 1.0:
            raise ValueError(f"the transformers backend applies PEFT adapters at scale 1.0, got {scale}")
        from ..models import check_adapter_folder

        check_adapter_folder(path)
        import warnings

        from transformers.utils import logging as hf_logging

        level = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # its load report lists the other adapters' keys as missing
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*peft_config.*multiple adapters")
                self.model.load_adapter(path, adapter_name=name)
        finally:
            hf_logging.set_verbosity(level)
        self._set_adapter(self.active_adapter)  # loading activates the new adapter: undo that

    def _set_adapter(self, name: str | None) -> None:
        if not getattr(self.model, "_hf_peft_config_loaded", False):
            return  # no adapter was ever loaded: the model is the base model
        if name is None:
            self.model.disable_adapters()
        else:
            self.model.set_adapter(name)
            self.model.enable_adapters()

    def _unload_adapter(self, name: str) -> None:
        import warnings

        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*was active which is now deleted")
            self.model.delete_adapter(name)
        self._set_adapter(self.active_adapter)

    def top1(self, ids: Sequence[int]) -> list[int]:
        self._check_open()
        torch = self._torch
        ids = [int(t) for t in ids]
        if not ids:
            return []
        with torch.inference_mode():
            logits = self.model(torch.tensor([ids], device=self.device)).logits[0]
        return logits.argmax(dim=-1).tolist()

    def _release(self) -> None:
        self.model = None
        self.tokenizer = None
        import gc

        gc.collect()


def _repeat_stopping(tokenizer, prompt_len: int, closes: dict[int, bool]):
    """A stopping criterion that ends each row of a batch once its completion repeats an element.

    A row is decoded only when its last token holds a ``>`` (the only token that closes an element);
    ``closes`` remembers that per token id across calls (the backend's, for its tokenizer);
    ``stopped_at`` maps a row to the number of tokens it had generated when it stopped.
    """
    import torch
    from transformers import StoppingCriteria

    class RepeatStopping(StoppingCriteria):
        def __init__(self) -> None:
            self.stopped_at: dict[int, int] = {}

        def _closes_element(self, token: int) -> bool:
            if token not in closes:
                closes[token] = ">" in tokenizer.decode([token])
            return closes[token]

        def __call__(self, input_ids, scores, **kwargs):
            done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
            for i, last in enumerate(input_ids[:, -1].tolist()):
                if i in self.stopped_at:
                    done[i] = True
                elif self._closes_element(last):
                    new = input_ids[i, prompt_len:].tolist()
                    if first_repeat(tokenizer.decode(new, skip_special_tokens=True)) is not None:
                        self.stopped_at[i] = len(new)
                        done[i] = True
            return done

    return RepeatStopping()
