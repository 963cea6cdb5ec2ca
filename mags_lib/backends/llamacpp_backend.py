"""llama.cpp backend (llama-cpp-python): GGUF models on CPU, grammar-constrained decoding.

Chat messages are rendered with the chat template embedded in the GGUF metadata (the same Jinja
template transformers uses for the de-quantized copy), then completed as raw text, so both backends
see the same prompt. Greedy decoding disables llama.cpp's default repetition penalty and top-k/top-p
filters so its output is comparable with transformers' greedy output.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from .base import Backend, BackendUnavailableError, Generation, _truncate_at_stop

__all__ = ["LlamaCppBackend", "default_threads", "gguf_type"]

# ChatML, the template family of SmolLM2; used only when a GGUF carries no template.
_CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
           " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n'"
           " }}{% endif %}")


@contextlib.contextmanager
def _quiet_stderr():
    """Silence native stderr (llama.cpp's grammar parser logs its errors there)."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, ValueError, io.UnsupportedOperation):  # captured stderr (pytest, notebooks)
        yield
        return
    sys.stderr.flush()
    saved = os.dup(fd)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), fd)
            yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


_GGUF_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def gguf_type(path: str | os.PathLike) -> str:
    """The ``general.type`` of a GGUF file (``"model"`` when absent, ``"adapter"`` for a LoRA).

    Reads the key/value header only (milliseconds; ``gguf.GGUFReader`` maps every tensor too).

    Raises
    ------
    ValueError
        When the file is not a GGUF file or its header is truncated.
    """
    import struct

    def read(f, n: int) -> bytes:
        b = f.read(n)
        if len(b) != n:
            raise ValueError(f"{path}: truncated GGUF header")
        return b

    def read_str(f) -> bytes:
        (n,) = struct.unpack("<Q", read(f, 8))
        return read(f, n)

    def skip_value(f, vtype: int) -> None:
        if vtype == 8:
            read_str(f)
        elif vtype == 9:
            etype, count = struct.unpack("<IQ", read(f, 12))
            if etype in _GGUF_SIZES:
                f.seek(_GGUF_SIZES[etype] * count, 1)
            else:
                for _ in range(count):
                    skip_value(f, etype)
        elif vtype in _GGUF_SIZES:
            f.seek(_GGUF_SIZES[vtype], 1)
        else:
            raise ValueError(f"{path}: unknown GGUF value type {vtype}")

    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file (bad magic number)")
        _version, _n_tensors, n_kv = struct.unpack("<IQQ", read(f, 20))
        for _ in range(n_kv):
            key = read_str(f)
            (vtype,) = struct.unpack("<I", read(f, 4))
            if key == b"general.type" and vtype == 8:
                return read_str(f).decode("utf-8", errors="replace")
            skip_value(f, vtype)
    return "model"


def default_threads() -> int:
    """Threads for llama.cpp: ``$MAGS_THREADS`` if set, else the usable CPUs minus one (at least 1).

    llama.cpp's worker threads spin-wait at barriers: when every core is busy (the embedder, a
    notebook kernel, another process) a thread that loses its core stalls all the others, and
    generation slows down tenfold (measured on 2 cores: 90 tok/s with 1 thread vs 10 tok/s with 2
    under load). Leaving one core free keeps latency stable.
    """
    env = os.environ.get("MAGS_THREADS")
    if env:
        return max(1, int(env))
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        n = os.cpu_count() or 1
    return max(1, n - 1)


class LlamaCppBackend(Backend):
    """A GGUF model served by llama-cpp-python.

    Parameters
    ----------
    model : str or Path, optional
        ``None`` = the embedded SmolLM2 GGUF; a ``.gguf`` file or a folder holding exactly one. A GGUF
        LoRA adapter (``general.type == "adapter"``, as written by llama.cpp's
        ``convert_lora_to_gguf.py``) is applied onto ``base_model``.
    n_threads : int, optional
        CPU threads for generation and prompt processing (default: :func:`default_threads`).
    n_ctx : int
        Context window in tokens.
    n_batch : int
        Prompt-processing batch size.
    seed : int
        Default sampling seed.
    base_model : str or Path, optional
        Base model of a LoRA-adapter ``model`` (default: the embedded SmolLM2).
    lora_scale : float
        Scale of the adapter.
    """

    name = "llamacpp"
    supports_grammar = True

    def __init__(self, model: Any = None, *, n_threads: int | None = None, n_ctx: int = 2048,
                 n_batch: int = 512, seed: int = 0, base_model: Any = None, lora_scale: float = 1.0,
                 verbose: bool = False) -> None:
        from ..models import resolve_model

        spec = resolve_model(model)
        if spec.kind != "gguf":
            raise ValueError(f"the llamacpp backend loads .gguf files; {spec.path} is a transformers "
                             "folder. Export it to GGUF first (notebook 30_export_gguf) or use "
                             "backend='transformers'")
        lora_path = None
        if gguf_type(spec.path) == "adapter":  # a LoRA adapter: applied onto its base model
            lora_path = str(spec.path)
            spec = resolve_model(base_model)
            if gguf_type(spec.path) == "adapter":
                raise ValueError(f"base_model {spec.path} is itself a LoRA adapter")
        try:
            import llama_cpp
        except ImportError as e:  # pragma: no cover - dependency of the project
            raise BackendUnavailableError("llama-cpp-python is not installed: pip install "
                                          "llama-cpp-python==0.3.36") from e
        if n_ctx < 64:
            raise ValueError(f"n_ctx must be >= 64, got {n_ctx}")
        super().__init__()
        self._llama_cpp = llama_cpp
        self.n_threads = int(n_threads) if n_threads else default_threads()
        if self.n_threads < 1:
            raise ValueError(f"n_threads must be >= 1, got {n_threads}")
        self.model_path = lora_path or str(spec.path)
        self.base_model_path = str(spec.path)
        self.lora_path = lora_path
        self.n_ctx = int(n_ctx)
        self.seed = int(seed)
        self._grammars: dict[str, Any] = {}
        self._llm = None
        self._llm = llama_cpp.Llama(model_path=self.base_model_path, n_ctx=self.n_ctx, n_batch=int(n_batch),
                                    n_threads=self.n_threads, n_threads_batch=self.n_threads,
                                    seed=self.seed, lora_path=lora_path, lora_scale=float(lora_scale),
                                    verbose=verbose)
        meta = dict(getattr(self._llm, "metadata", {}) or {})
        self._template_src = meta.get("tokenizer.chat_template") or _CHATML
        self._bos = self._token_text(self._llm.token_bos())
        self._eos = self._token_text(self._llm.token_eos())
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=["jinja2.ext.loopcontrols"])

        def _raise(msg: str) -> None:
            raise ValueError(msg)

        env.globals["raise_exception"] = _raise
        self._template = env.from_string(self._template_src)

    def _token_text(self, token: int) -> str:
        if token is None or token < 0:
            return ""
        try:
            return self._llm.detokenize([token], special=True).decode("utf-8", errors="ignore")
        except TypeError:  # older signature without `special`
            return self._llm.detokenize([token]).decode("utf-8", errors="ignore")

    # -- Backend API ---------------------------------------------------------------------------
    def render(self, messages: Sequence[dict]) -> str:
        self._check_open()
        return self._template.render(messages=list(messages), add_generation_prompt=True,
                                     bos_token=self._bos, eos_token=self._eos)

    def tokenize(self, text: str, *, special: bool = True) -> list[int]:
        """Token ids of ``text`` (no BOS added; special-token text parsed when ``special``)."""
        self._check_open()
        return list(self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=special))

    def count_tokens(self, text: str) -> int:
        return len(self.tokenize(text, special=False)) if text else 0

    def grammar(self, gbnf: str) -> Any:
        """Compile (once) and return the :class:`llama_cpp.LlamaGrammar` for a GBNF string."""
        self._check_open()
        g = self._grammars.get(gbnf)
        if g is None:
            # llama-cpp-python defers parsing to sampling time, where a grammar llama.cpp rejects
            # becomes a NULL sampler and a segmentation fault: parse it here, once, and fail cleanly.
            lc = self._llama_cpp
            with _quiet_stderr():
                sampler = lc.llama_sampler_init_grammar(self._llm._model.vocab, gbnf.encode("utf-8"),
                                                        b"root")
            if not sampler:
                raise ValueError("invalid GBNF grammar (llama.cpp could not parse it; it needs a "
                                 f"'root' rule); first line: {gbnf.strip().splitlines()[0]!r}")
            lc.llama_sampler_free(sampler)
            g = lc.LlamaGrammar.from_string(gbnf, verbose=False)
            self._grammars[gbnf] = g
        return g

    def _generate(self, prompts: list, *, max_new_tokens: int, temperature: float,
                  grammar: str | None, stop: list[str], seed: int | None) -> list[Generation]:
        compiled = self.grammar(grammar) if grammar is not None else None
        out: list[Generation] = []
        for p in prompts:
            text = p if isinstance(p, str) else self.render(p)
            n_prompt = len(self.tokenize(text))
            if n_prompt >= self.n_ctx:
                raise ValueError(f"prompt of {n_prompt} tokens does not fit the context window "
                                 f"n_ctx={self.n_ctx}; shorten it or load the backend with a larger "
                                 "n_ctx")
            budget = min(max_new_tokens, self.n_ctx - n_prompt)
            t0 = time.perf_counter()
            res = self._llm.create_completion(
                prompt=text, max_tokens=budget, temperature=temperature, top_k=0, top_p=1.0,
                min_p=0.0, typical_p=1.0, repeat_penalty=1.0, frequency_penalty=0.0,
                presence_penalty=0.0, stop=list(stop) or None, grammar=compiled,
                seed=self.seed if seed is None else int(seed),
            )
            dt = time.perf_counter() - t0
            usage = res.get("usage", {})
            gen_text, _ = _truncate_at_stop(res["choices"][0]["text"], stop) if stop else (
                res["choices"][0]["text"], False)
            out.append(Generation(text=gen_text, n_prompt_tokens=int(usage.get("prompt_tokens", n_prompt)),
                                  n_new_tokens=int(usage.get("completion_tokens", 0)), seconds=dt))
        return out

    def _release(self) -> None:
        llm = getattr(self, "_llm", None)
        self._grammars.clear()
        if llm is not None:
            close = getattr(llm, "close", None)
            if close is not None:
                close()
            self._llm = None
