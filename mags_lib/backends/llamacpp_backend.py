"""llama.cpp backend (llama-cpp-python): GGUF models on CPU, grammar-constrained decoding.

Chat messages are rendered with the chat template embedded in the GGUF metadata (the same Jinja
template transformers uses for the de-quantized copy), then completed as raw text, so both backends
see the same prompt. Decoding runs on llama.cpp's low-level API (``llama_decode`` and samplers; see
:meth:`LlamaCppBackend._decode`): the outputs are those of llama-cpp-python's ``create_completion``
with its repetition penalty and top-k/top-p filters turned off (so greedy output is comparable with
transformers'), token for token (a test holds the two together), but greedy decoding under a grammar
checks the grammar on the top token before masking the whole vocabulary (1.8x the tokens/s), and
several prompts can be decoded together (``n_parallel``).
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .base import Backend, BackendUnavailableError, Generation, _truncate_at_stop, first_repeat

__all__ = ["GGUFError", "GGUFHeader", "LlamaCppBackend", "default_threads", "gguf_type", "llama_load_reason",
           "read_gguf_header", "shared_models"]

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


class GGUFError(ValueError):
    """A file is not a usable GGUF file: foreign, truncated or corrupt. The message says which."""


_SCALAR_FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
                   11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_MAX_DIMS = 4


@dataclass(frozen=True)
class GGUFHeader:
    """What the header of a GGUF file says (scalar metadata only; arrays as ``(type, length)``).

    Attributes
    ----------
    version : int
    metadata : dict
        Key -> value for scalar and string keys; key -> ``("array", element_type, length)`` for arrays.
    tensors : list of tuple
        ``(name, shape, ggml_type, offset)`` per tensor, ``shape`` in GGUF order (fastest dim first).
    data_offset : int
        Where the tensor data starts.
    file_size : int
    """

    version: int
    metadata: dict
    tensors: list
    data_offset: int
    file_size: int

    @property
    def type(self) -> str:
        """``general.type``: ``"model"`` (also when absent) or ``"adapter"`` (a LoRA)."""
        t = self.metadata.get("general.type")
        return t if isinstance(t, str) else "model"

    @property
    def architecture(self) -> str | None:
        a = self.metadata.get("general.architecture")
        return a if isinstance(a, str) else None


def read_gguf_header(path: str | os.PathLike) -> GGUFHeader:
    """Read and check the header of a GGUF file (milliseconds; no tensor data is read).

    Checks the magic number and version, every metadata entry, every tensor's shape, type and
    alignment, and that every tensor's data lies inside the file, so a foreign, truncated or corrupt
    file is refused with a message that says which, before llama.cpp sees it (llama.cpp itself only
    says "failed to load model").

    Raises
    ------
    GGUFError
        The file is not GGUF, is truncated, or its header is corrupt.
    """
    path = os.fspath(path)
    st = os.stat(path)
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
    header = _HEADERS.get(key)
    if header is None:
        header = _read_gguf_header(path)
        if len(_HEADERS) > 64:
            _HEADERS.clear()
        _HEADERS[key] = header
    return header


_HEADERS: dict[tuple, GGUFHeader] = {}


def _read_gguf_header(path: str) -> GGUFHeader:
    import mmap
    import struct

    import gguf

    size = os.path.getsize(path)
    what = f"{path} ({size:,} bytes)"
    if size < 24:
        with open(path, "rb") as f:
            head = f.read(4)
        if head != b"GGUF":
            raise GGUFError(f"{what} is not a GGUF file (it starts with {head!r}, a GGUF file with "
                            "b'GGUF'); pass a .gguf model written by mags_lib.export or llama.cpp")
        raise GGUFError(f"{what} is truncated inside its header; export or copy it again")
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        pos = 0

        def unpack(fmt: str, part: str):
            nonlocal pos
            n = struct.calcsize(fmt)
            if pos + n > size:
                raise GGUFError(f"{what} is truncated inside its header ({part}); export or copy it again")
            out = struct.unpack_from(fmt, buf, pos)
            pos += n
            return out

        def read_str(part: str) -> str:
            nonlocal pos
            (n,) = unpack("<Q", part)
            if pos + n > size:
                raise GGUFError(f"{what} is truncated or corrupt inside its header ({part}: a string of "
                                f"{n:,} bytes); export or copy it again")
            pos += n
            return bytes(buf[pos - n:pos]).decode("utf-8", errors="replace")

        def skip_strings(count: int, key: str) -> None:
            nonlocal pos
            at, read_len = pos, struct.Struct("<Q").unpack_from
            try:
                for _ in range(count):
                    at += 8 + read_len(buf, at)[0]
            except struct.error:
                at = size + 1
            if at > size:
                raise GGUFError(f"{what} is truncated inside its header (array {key!r})")
            pos = at

        def read_value(vtype: int, key: str):
            nonlocal pos
            if vtype in _SCALAR_FORMATS:
                return unpack(_SCALAR_FORMATS[vtype], f"value of {key!r}")[0]
            if vtype == _STRING:
                return read_str(f"value of {key!r}")
            if vtype == _ARRAY:
                etype, count = unpack("<IQ", f"array {key!r}")
                if etype in _SCALAR_FORMATS:
                    pos += struct.calcsize(_SCALAR_FORMATS[etype]) * count
                    if pos > size:
                        raise GGUFError(f"{what} is truncated inside its header (array {key!r} of "
                                        f"{count:,} items); export or copy it again")
                elif etype == _STRING:
                    skip_strings(count, key)
                elif etype == _ARRAY:
                    for _ in range(count):
                        read_value(etype, key)
                else:
                    raise GGUFError(f"{what} is corrupt: array {key!r} has unknown element type {etype}")
                return ("array", etype, count)
            raise GGUFError(f"{what} is corrupt: metadata {key!r} has unknown value type {vtype}")

        magic = bytes(buf[:4])
        if magic != b"GGUF":
            raise GGUFError(f"{what} is not a GGUF file (it starts with {magic!r}, a GGUF file with "
                            "b'GGUF'); pass a .gguf model written by mags_lib.export or llama.cpp")
        pos = 4
        (version,) = unpack("<I", "version")
        if version not in (2, 3):
            raise GGUFError(f"{what}: GGUF version {version} is not supported (2 or 3); the file is "
                            "corrupt or from an unknown writer")
        n_tensors, n_kv = unpack("<QQ", "counts")
        if n_tensors > 1 << 24 or n_kv > 1 << 24:
            raise GGUFError(f"{what} is corrupt: its header claims {n_tensors:,} tensors and {n_kv:,} "
                            "metadata entries")
        meta: dict = {}
        for _ in range(n_kv):
            key = read_str("a metadata key")
            (vtype,) = unpack("<I", f"type of {key!r}")
            meta[key] = read_value(vtype, key)
        align = meta.get("general.alignment", gguf.GGUF_DEFAULT_ALIGNMENT)
        if not isinstance(align, int) or align <= 0 or align & (align - 1):
            raise GGUFError(f"{what} is corrupt: general.alignment = {align!r} is not a power of two")
        tensors = []
        for _ in range(n_tensors):
            name = read_str("a tensor name")
            (n_dims,) = unpack("<I", f"tensor {name!r}")
            if not 1 <= n_dims <= _MAX_DIMS:
                raise GGUFError(f"{what} is corrupt: tensor {name!r} has {n_dims} dimensions")
            shape = unpack(f"<{n_dims}Q", f"tensor {name!r}")
            ttype, offset = unpack("<IQ", f"tensor {name!r}")
            tensors.append((name, tuple(int(d) for d in shape), int(ttype), int(offset)))
        data_offset = -(-pos // align) * align
    for name, shape, ttype, offset in tensors:
        try:
            block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(ttype)]
        except (ValueError, KeyError):
            raise GGUFError(f"{what} is corrupt: tensor {name!r} has unknown type {ttype}") from None
        n = 1
        for d in shape:
            n *= d
        if n == 0 or shape[0] % block or offset % align:
            raise GGUFError(f"{what} is corrupt: tensor {name!r} (shape {list(shape)}, type {ttype}, "
                            f"offset {offset}) is malformed")
        end = data_offset + offset + n // block * type_size
        if end > size:
            raise GGUFError(f"{what} is truncated: tensor {name!r} ends at byte {end:,} (an interrupted "
                            "copy or export?); export or copy it again")
    return GGUFHeader(version=version, metadata=meta, tensors=tensors, data_offset=data_offset,
                      file_size=size)


def gguf_type(path: str | os.PathLike) -> str:
    """The ``general.type`` of a GGUF file (``"model"`` when absent, ``"adapter"`` for a LoRA).

    Raises
    ------
    GGUFError
        When the file is not a (complete) GGUF file.
    """
    return read_gguf_header(path).type


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
    return max(1, usable_cores() - 1)


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity mask; ``os.cpu_count()`` where there is none)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


_MAX_SEQ = 256  # llama.cpp's LLAMA_MAX_SEQ: sequences one context decodes together


class _SharedModel:
    """One llama.cpp model (the weights) that several backends' contexts run on.

    llama.cpp keeps the weights (``llama_model``) apart from the state of a conversation
    (``llama_context``: KV cache, compute buffers, and the LoRA adapters applied). llama-cpp-python's
    ``Llama`` owns one of each; here one ``Llama`` with a minimal context holds the weights and every
    backend gets its own context on them (:func:`_context_on`), so three roles with three adapters
    keep one copy of the base in memory and each role keeps its adapter and its KV cache.
    """

    def __init__(self, key: tuple, path: str, verbose: bool) -> None:
        import llama_cpp

        self.key = key
        self.path = path
        self.users = 0
        self.holder = llama_cpp.Llama(model_path=path, n_ctx=64, n_batch=8, n_threads=1, verbose=verbose)

    def close(self) -> None:
        if self.holder is not None:
            self.holder.close()
            self.holder = None


_SHARED: dict[tuple, _SharedModel] = {}
_SHARED_LOCK = threading.Lock()


def llama_load_reason(path: str | os.PathLike) -> str:
    """llama.cpp's own words for why it cannot load the model at ``path`` ("" when it loads).

    llama-cpp-python answers any failed load with "Failed to load model from file" and, unless
    verbose, hides llama.cpp's log, which says why ("unknown model architecture: 'foo'", "missing
    tensor 'output_norm.weight'", ...). This loads the file once more with a log callback that keeps
    llama.cpp's warnings and errors, then gives llama-cpp-python its own callback back.
    """
    import ctypes

    import llama_cpp
    from llama_cpp import _logger

    lines: list[str] = []
    keep = [False]

    @llama_cpp.llama_log_callback
    def _log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:  # pragma: no cover - native
        if level != 5:  # 5: the previous message goes on
            keep[0] = level in (3, 4)  # ggml's warn and error (2 is info)
        if keep[0]:
            lines.append(text.decode("utf-8", "replace"))

    llama_cpp.llama_log_set(_log, ctypes.c_void_p(0))
    try:
        params = llama_cpp.llama_model_default_params()
        model = llama_cpp.llama_model_load_from_file(os.fspath(path).encode("utf-8"), params)
        if model:
            llama_cpp.llama_model_free(model)
            return ""
    finally:
        llama_cpp.llama_log_set(_logger.llama_log_callback, ctypes.c_void_p(0))
    text = " ".join(" ".join(lines).split())
    # "llama_model_load: error loading model: <why>" says it; "... failed to load model" repeats the failure
    why = text.split("error loading model: ", 1)[1] if "error loading model: " in text else text
    why = why.split(" llama_model_load_from_file_impl: failed to load model")[0].strip()
    return why or "llama.cpp gave no reason"


def _load_failed(path: str, header: GGUFHeader, err: BaseException) -> GGUFError:
    """A clear error for a GGUF file that passed the header checks but that llama.cpp would not load."""
    import llama_cpp

    reason = llama_load_reason(path)
    what = (f"{path} (GGUF v{header.version}, general.architecture={header.architecture!r}, "
            f"{len(header.tensors)} tensors)")
    if "unknown model architecture" in reason:
        hint = (f"This llama.cpp (llama-cpp-python {llama_cpp.__version__}) does not run the "
                f"{header.architecture!r} architecture: use a model of one it runs (SmolLM2 and other "
                "llama models are exported by notebook 30) or a llama-cpp-python that supports it")
    else:
        hint = ("The file does not hold what its architecture needs, or was written for another llama.cpp: "
                "export it again (notebook 30_export_gguf, or python -m mags_lib.export)")
    return GGUFError(f"llama.cpp cannot load {what}: {reason or err}. {hint}")


def _shared_model(path: str, verbose: bool) -> _SharedModel:
    """The process's shared model for ``path`` (loaded on first use), its user count raised."""
    st = os.stat(path)
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
    with _SHARED_LOCK:
        sm = _SHARED.get(key)
        if sm is None:
            sm = _SharedModel(key, path, verbose)
            _SHARED[key] = sm
        sm.users += 1
        return sm


def _release_shared(sm: _SharedModel) -> None:
    with _SHARED_LOCK:
        sm.users -= 1
        if sm.users <= 0:
            _SHARED.pop(sm.key, None)
            sm.close()


def shared_models() -> dict[str, int]:
    """Models loaded once and shared by several backends: path -> number of backends using it."""
    with _SHARED_LOCK:
        return {sm.path: sm.users for sm in _SHARED.values()}


def _context_on(holder: Any, *, n_ctx: int, n_batch: int, n_threads: int, seed: int) -> Any:
    """A ``Llama`` with its own context (KV cache, adapters, sampler) on ``holder``'s weights.

    llama-cpp-python (0.3.36) has no constructor for a second context on a loaded model, so the
    holder's attributes are copied and every per-context one is replaced; the copy's ``close`` frees
    only its own context and batch (the weights stay with the holder).
    """
    import numpy as np
    from llama_cpp import _internals as internals

    # not copy.copy: Llama.__setstate__ would load the model again from disk
    view = object.__new__(type(holder))
    view.__dict__.update(holder.__dict__)
    view._stack = contextlib.ExitStack()
    params = type(holder.context_params).from_buffer_copy(holder.context_params)
    params.n_ctx = n_ctx
    params.n_batch = n_batch
    params.n_ubatch = n_batch
    params.n_threads = params.n_threads_batch = n_threads
    view.context_params = params
    view.n_batch = n_batch
    view.n_threads = view.n_threads_batch = n_threads
    view._ctx = view._stack.enter_context(contextlib.closing(
        internals.LlamaContext(model=holder._model, params=params, verbose=holder.verbose)))
    view._batch = view._stack.enter_context(contextlib.closing(
        internals.LlamaBatch(n_tokens=n_batch, embd=0, n_seq_max=n_ctx, verbose=holder.verbose)))
    view._n_ctx = view.n_ctx()
    view._candidates = internals.LlamaTokenDataArray(n_vocab=view._n_vocab)
    view.n_tokens = 0
    view._requires_eval = True
    view.input_ids = np.ndarray((n_ctx,), dtype=np.intc)
    view.scores = np.ndarray((n_batch, view._n_vocab), dtype=np.single)
    view._logits_all = False
    view._sampler = None
    view._seed = seed
    view.cache = None
    view._lora_adapter = None
    view.lora_path = None
    view._chat_handlers = dict(holder._chat_handlers)
    return view


class LlamaCppBackend(Backend):
    """A GGUF model served by llama-cpp-python.

    Parameters
    ----------
    model : str or Path, optional
        ``None`` = the embedded SmolLM2 GGUF; a ``.gguf`` file or a folder holding exactly one. A GGUF
        LoRA adapter (``general.type == "adapter"``, e.g. from :func:`mags_lib.export.write_lora_gguf`)
        is loaded onto ``base_model`` under the name ``"default"`` and applied.
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
        Scale of that adapter.
    share_model : bool
        Backends of one process that load the same GGUF file share its weights, each with its own
        context (KV cache, adapters). ``False`` loads a private copy.
    prefix_cache : bool
        Greedy generations reuse the KV cache of the longest prompt prefix already evaluated (the
        agent's fixed system prompt and few-shot block are processed once). The last prompt token is
        then evaluated alone, which can flip a near-tied token compared with a fresh evaluation:
        ``False`` evaluates every prompt afresh, so an output never depends on what came before.
        Sampled generations (``temperature > 0``) always start afresh, so a seed reproduces them.
    n_parallel : int
        Prompts decoded together when :meth:`generate` gets several (default ``1``: one after another,
        each output exactly what the prompt gets alone). With more, a group of prompts shares one
        llama.cpp context of its own (one sequence each; their common prefix, e.g. the system prompt,
        evaluated once and shared) and each step evaluates one token of every unfinished sequence in
        one batch. Each sequence keeps its own sampler (grammar, greedy or seeded sampling), but the
        batched matrix products round differently from one prompt's, so a near-tied greedy token can
        flip. Measured on 2 AVX-512 cores (28 write-role prompts, grammar, greedy; ``python -m
        mags_lib.bench.inference``): 8 together give +4 % tokens/s with 1 thread (the step is
        compute-bound) and 1.47x with 2, and 32 % of the base model's outputs equal to one at a time.
        A single prompt always takes the one-at-a-time path.

    LoRA adapters (:meth:`load_adapter`, :meth:`set_adapter`, :meth:`unload_adapter`) are loaded onto
    the model and applied to this backend's context only: two backends sharing one base model can
    run two different adapters at once.
    """

    name = "llamacpp"
    supports_grammar = True
    supports_adapters = True
    stops_at_repeats = True

    def __init__(self, model: Any = None, *, n_threads: int | None = None, n_ctx: int = 2048,
                 n_batch: int = 512, seed: int = 0, base_model: Any = None, lora_scale: float = 1.0,
                 share_model: bool = True, prefix_cache: bool = True, n_parallel: int = 1,
                 verbose: bool = False) -> None:
        from ..models import resolve_model

        spec = resolve_model(model)
        if spec.kind != "gguf":
            raise ValueError(f"the llamacpp backend loads .gguf files; {spec.path} is a transformers "
                             "folder. Export it to GGUF first (notebook 30_export_gguf) or use "
                             "backend='transformers'")
        lora_path = None
        header = read_gguf_header(spec.path)
        if header.type == "adapter":  # a LoRA adapter: applied onto its base model
            lora_path = str(spec.path)
            spec = resolve_model(base_model)
            header = read_gguf_header(spec.path)
            if header.type == "adapter":
                raise ValueError(f"base_model {spec.path} is itself a LoRA adapter")
        if header.type != "model" or not header.architecture:
            raise GGUFError(f"{spec.path} is a GGUF file but not a language model (general.type="
                            f"{header.type!r}, general.architecture={header.architecture!r})")
        try:
            import llama_cpp
        except ImportError as e:  # pragma: no cover - dependency of the project
            raise BackendUnavailableError("llama-cpp-python is not installed: pip install "
                                          "llama-cpp-python==0.3.36") from e
        if n_ctx < 64:
            raise ValueError(f"n_ctx must be >= 64, got {n_ctx}")
        if isinstance(n_parallel, bool) or not isinstance(n_parallel, int) or not 1 <= n_parallel <= _MAX_SEQ:
            raise ValueError(f"n_parallel must be an integer in [1, {_MAX_SEQ}] (llama.cpp's sequences per "
                             f"context), got {n_parallel!r}")
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
        self.prefix_cache = bool(prefix_cache)
        self.n_parallel = n_parallel
        self._par: _Decoder | None = None  # the context of batched decoding (made on first use)
        self._dec: _Decoder | None = None  # decoding on this backend's own context
        self._grammars: dict[str, Any] = {}
        self._closes: dict[int, bool] = {}  # token id -> its text holds a ">" (see _closes_element)
        self._lora: dict[str, tuple[Any, float]] = {}
        self._llm = None
        self._shared: _SharedModel | None = None
        try:
            if share_model:
                self._shared = _shared_model(self.base_model_path, verbose)
                self._llm = _context_on(self._shared.holder, n_ctx=self.n_ctx, n_batch=int(n_batch),
                                        n_threads=self.n_threads, seed=self.seed)
            else:
                self._llm = llama_cpp.Llama(model_path=self.base_model_path, n_ctx=self.n_ctx,
                                            n_batch=int(n_batch), n_threads=self.n_threads,
                                            n_threads_batch=self.n_threads, seed=self.seed, verbose=verbose)
            self._dec = _Decoder(llama_cpp, self._llm._ctx.ctx, self._llm._batch, self._llm.n_batch,
                                 n_ctx=self.n_ctx, n_seq=1)
            if lora_path is not None:
                self.load_adapter("default", lora_path, scale=lora_scale)
                self.set_adapter("default")
        except ValueError as e:
            self.close()
            if self._llm is None and str(e).startswith("Failed to load model"):
                raise _load_failed(self.base_model_path, header, e) from e
            raise
        except BaseException:
            self.close()
            raise
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

    @property
    def shares_model(self) -> bool:
        """Whether this backend's context runs on a model shared with other backends."""
        return self._shared is not None

    @property
    def model_handle(self) -> int:
        """Address of the loaded ``llama_model`` (equal for backends that share one)."""
        self._check_open()
        import ctypes

        return ctypes.cast(self._llm._model.model, ctypes.c_void_p).value or 0

    # -- adapters --------------------------------------------------------------------------------
    def _load_adapter(self, name: str, path: str, scale: float) -> None:
        header = read_gguf_header(path)
        if header.type != "adapter":
            raise ValueError(f"{path} is a GGUF {header.type}, not a LoRA adapter (general.type must "
                             "be 'adapter'); write one with mags_lib.export.write_lora_gguf")
        lc = self._llama_cpp
        with _quiet_stderr():
            handle = lc.llama_adapter_lora_init(self._llm._model.model, path.encode("utf-8"))
        if not handle:
            raise ValueError(f"llama.cpp refused the LoRA adapter {path} for the base model "
                             f"{self.base_model_path} (wrong base architecture or tensor shapes?)")
        self._lora[name] = (handle, scale)

    def memo_identity(self) -> list:
        # the base a LoRA file is applied onto, and the scale the active adapter was loaded at
        active = self.active_adapter
        scale = self._lora[active][1] if active in self._lora else None
        return [self.base_model_path, scale] if self.lora_path or scale not in (None, 1.0) else []

    def _apply_lora(self, ctx: Any, name: str | None) -> None:
        """Apply loaded adapter ``name`` (``None``: none) to the llama.cpp context ``ctx``."""
        import ctypes

        lc = self._llama_cpp
        if name is None:
            rc = lc.llama_set_adapters_lora(ctx, None, 0, None)
        else:
            handle, scale = self._lora[name]
            rc = lc.llama_set_adapters_lora(ctx, (lc.llama_adapter_lora_p_ctypes * 1)(handle), 1,
                                            (ctypes.c_float * 1)(scale))
        if rc != 0:
            raise RuntimeError(f"llama_set_adapters_lora failed ({rc}) for adapter {name!r}")

    def _set_adapter(self, name: str | None) -> None:
        self._apply_lora(self._llm._ctx.ctx, name)
        # the KV cache holds keys and values computed with the previous weights: never reuse it
        self._llm.reset()
        self._dec.forget()

    def _unload_adapter(self, name: str) -> None:
        handle, _ = self._lora.pop(name)
        if self._par is not None and self._par.adapter is not None and self._par.adapter[0] is handle:
            self._llama_cpp.llama_set_adapters_lora(self._par.ctx, None, 0, None)  # before it is freed
            self._par.adapter = None
        self._llama_cpp.llama_adapter_lora_free(handle)

    def top1(self, ids: Sequence[int]) -> list[int]:
        self._check_open()
        import numpy as np

        ids = [int(t) for t in ids]
        if not ids:
            return []
        if len(ids) > self.n_ctx:
            raise ValueError(f"{len(ids)} tokens do not fit the context window n_ctx={self.n_ctx}")
        llm, lc = self._llm, self._llama_cpp
        n_vocab = llm._n_vocab
        llm.reset()
        self._dec.forget()
        out: list[int] = []
        try:
            for start in range(0, len(ids), llm.n_batch):
                chunk = ids[start:start + llm.n_batch]
                llm._batch.set_batch(batch=chunk, n_past=start, logits_all=True)
                llm._ctx.decode(llm._batch)
                logits = np.ctypeslib.as_array(lc.llama_get_logits(llm._ctx.ctx),
                                               shape=(len(chunk), n_vocab))
                out.extend(int(t) for t in logits.argmax(axis=1))
        finally:
            llm.reset()  # what is in the KV cache is not recorded as a reusable prefix
        return out

    def _token_text(self, token: int) -> str:
        if token is None or token < 0:
            return ""
        return self._text_of([token])

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
                  grammar: str | None, stop: list[str], seed: int | None,
                  stop_repeats: bool = False) -> list[Generation]:
        if grammar is not None:
            self.grammar(grammar)  # parsed once here: a grammar llama.cpp rejects fails cleanly
        texts = [p if isinstance(p, str) else self.render(p) for p in prompts]
        ids = [self.tokenize(t) for t in texts]
        for x in ids:
            if len(x) >= self.n_ctx:
                raise ValueError(f"prompt of {len(x)} tokens does not fit the context window n_ctx={self.n_ctx}; "
                                 "shorten it or load the backend with a larger n_ctx")
        seed = self.seed if seed is None else int(seed)
        out: list[Generation] = []
        step = self.n_parallel if len(ids) > 1 else 1
        for start in range(0, len(ids), step):
            group = [_Seq(i, x, min(max_new_tokens, self.n_ctx - len(x))) for i, x in enumerate(ids[start:start + step])]
            dec = self._dec if len(group) == 1 else self._parallel_decoder(group)
            t0 = time.perf_counter()
            self._decode(dec, group, temperature=temperature, grammar=grammar, stop=stop, seed=seed,
                         stop_repeats=stop_repeats, reuse_prefix=self.prefix_cache and temperature == 0)
            dt = time.perf_counter() - t0
            for q in group:
                text = self._text_of(q.tokens)
                if stop:
                    text, _ = _truncate_at_stop(text, stop)
                out.append(Generation(text=text, n_prompt_tokens=len(q.prompt), n_new_tokens=len(q.tokens),
                                      seconds=dt))
        return out

    # -- the decoding loop ---------------------------------------------------------------------------
    def _parallel_decoder(self, group: list[_Seq]) -> _Decoder:
        """The context of batched decoding, (re)made when too small for ``group``; the active adapter applied."""
        n_pre = _common_prefix([q.prompt for q in group])
        need = n_pre + sum(len(q.prompt) - n_pre + q.budget for q in group)
        par = self._par
        if par is None or par.n_ctx < need or par.n_seq < len(group):
            if par is not None:
                self._par = None
                par.close()
            n_ctx = -(-max(need, par.n_ctx if par else 0, self.n_ctx) // 512) * 512
            par = self._par = _Decoder.own(self._llm, n_ctx=n_ctx, n_seq=max(len(group), self.n_parallel),
                                           n_threads=self.n_threads)
        want = self._lora[self._active_adapter] if self._active_adapter is not None else None
        if par.adapter != want:
            self._apply_lora(par.ctx, self._active_adapter)
            par.adapter = want
            par.forget()
        return par

    def _sampler(self, grammar: str | None, temperature: float, seed: int) -> _Sampler:
        """One sequence's sampler: greedy (the grammar checked on the top token first) or the chain
        ``Llama.create_completion`` builds for ``temperature > 0`` (grammar, then the top-k 0 / typical 1 /
        top-p 1 / min-p 0 filters, which change nothing, temperature and a seeded draw)."""
        lc = self._llama_cpp
        gram = None
        if grammar is not None:
            gram = lc.llama_sampler_init_grammar(self._llm._model.vocab, grammar.encode("utf-8"), b"root")
            if not gram:  # self.grammar() parsed it already: only an exhausted process gets here
                raise ValueError("llama.cpp could not build the grammar sampler")
        if temperature == 0:
            return _Sampler(lc, self._llm._n_vocab, grammar=gram)
        chain = lc.llama_sampler_chain_init(lc.llama_sampler_chain_default_params())
        if gram is not None:
            lc.llama_sampler_chain_add(chain, gram)
        for smpl in (lc.llama_sampler_init_top_k(0), lc.llama_sampler_init_typical(1.0, 1),
                     lc.llama_sampler_init_top_p(1.0, 1), lc.llama_sampler_init_min_p(0.0, 1),
                     lc.llama_sampler_init_temp(temperature), lc.llama_sampler_init_dist(seed)):
            lc.llama_sampler_chain_add(chain, smpl)
        return _Sampler(lc, self._llm._n_vocab, chain=chain)

    def _decode(self, dec: _Decoder, group: list[_Seq], *, temperature: float, grammar: str | None,
                stop: list[str], seed: int, stop_repeats: bool, reuse_prefix: bool) -> None:
        """Complete the prompts of ``group`` on ``dec`` (one sequence each; their tokens land in ``q.tokens``).

        One prompt alone reuses the cells of the longest prefix it shares with the previous prompt
        (``reuse_prefix``); several share their common prefix, evaluated once in sequence 0. Then each
        step evaluates the last token of every unfinished sequence in one batch and samples the next. A
        completion ends at an end-of-generation token (not kept), a stop string, a repeated element
        (``stop_repeats``; the token that closes it kept, cut by :meth:`Backend._run`) or its budget.
        """
        lc, vocab = self._llama_cpp, self._llm._model.vocab
        ok = False
        try:
            if len(group) == 1 and reuse_prefix:
                q = group[0]
                n_pre = min(_common_prefix([dec.cached, q.prompt]), len(q.prompt) - 1)
                lc.llama_memory_seq_rm(dec.memory, 0, n_pre, -1)
            else:  # alone, a prompt is evaluated whole, in one batch (as llama-cpp-python's fresh completion does)
                dec.forget()
                n_pre = min(_common_prefix([q.prompt for q in group]), min(len(q.prompt) for q in group) - 1) \
                    if len(group) > 1 else 0
                dec.decode([(t, j, 0, False) for j, t in enumerate(group[0].prompt[:n_pre])], None)
                for q in group[1:]:
                    lc.llama_memory_seq_cp(dec.memory, 0, q.i, -1, -1)
            dec.cached = []  # until the prompt is in place again
            for q in group:
                q.sampler = self._sampler(grammar, temperature, seed)

            def take(i: int, idx: int) -> None:  # sequence i's next token, from output idx of the last batch
                q = group[i]
                tok = q.sampler.sample(dec.ctx, idx)
                if lc.llama_vocab_is_eog(vocab, tok):
                    q.done = True
                    return
                q.tokens.append(tok)
                text = None
                if stop:
                    text = self._text_of(q.tokens)
                    q.done = any(s in text for s in stop)
                if stop_repeats and not q.done and self._closes_element(tok):
                    q.done = first_repeat(text if text is not None else self._text_of(q.tokens)) is not None
                q.done = q.done or len(q.tokens) >= q.budget

            dec.decode([(t, n_pre + j, q.i, j == len(q.prompt) - n_pre - 1)
                        for q in group for j, t in enumerate(q.prompt[n_pre:])], take)
            while live := [q for q in group if not q.done]:
                dec.decode([(q.tokens[-1], len(q.prompt) + len(q.tokens) - 1, q.i, True) for q in live], take)
            ok = True
        finally:
            for q in group:
                if q.sampler is not None:
                    q.sampler.close()
                    q.sampler = None
            if ok and len(group) == 1 and reuse_prefix:
                lc.llama_memory_seq_rm(dec.memory, 0, len(group[0].prompt), -1)  # keep the prompt's cells
                dec.cached = list(group[0].prompt)
            else:
                dec.forget()

    def _closes_element(self, token: int) -> bool:
        """Whether ``token``'s text holds a ``>`` (remembered per token: it is asked once per generated token)."""
        closes = self._closes.get(token)
        if closes is None:
            closes = self._closes[token] = ">" in self._token_text(token)
        return closes

    def _text_of(self, tokens: Sequence[int]) -> str:
        """The text of ``tokens``, special tokens written out."""
        try:
            return self._llm.detokenize(list(tokens), special=True).decode("utf-8", errors="ignore")
        except TypeError:  # older signature without `special`
            return self._llm.detokenize(list(tokens)).decode("utf-8", errors="ignore")

    def _release(self) -> None:
        llm = getattr(self, "_llm", None)
        self._grammars.clear()
        par = getattr(self, "_par", None)
        if par is not None:
            self._par = None
            par.close()
        if llm is not None:
            if self._lora:
                self._llama_cpp.llama_set_adapters_lora(llm._ctx.ctx, None, 0, None)
            for handle, _ in self._lora.values():
                self._llama_cpp.llama_adapter_lora_free(handle)
            self._lora.clear()
            close = getattr(llm, "close", None)
            if close is not None:
                close()
            self._llm = None
        if self._shared is not None:
            _release_shared(self._shared)
            self._shared = None


def _common_prefix(seqs: Sequence[Sequence[int]]) -> int:
    """Length of the longest common prefix of token lists."""
    n = min(map(len, seqs), default=0)
    for k in range(n):
        t = seqs[0][k]
        if any(x[k] != t for x in seqs[1:]):
            return k
    return n


@dataclass(eq=False)
class _Seq:
    """One prompt being completed: its tokens, its budget and its sampler."""

    i: int  # its sequence id in the context (and index in the group)
    prompt: list
    budget: int
    tokens: list = field(default_factory=list)
    done: bool = False
    sampler: Any = None


class _Sampler:
    """Next-token choice for one sequence: greedy, or a llama.cpp sampler chain (sampling).

    Greedy with a grammar checks the grammar on the highest-logit token first and masks the whole
    vocabulary only when that token is not allowed: the same token as masking first then taking the
    maximum (llama.cpp's greedy sampler, like ``argmax``, takes the first of equal maxima; an allowed
    first maximum is also the first among the allowed tokens), and for SmolLM2's 49,152 tokens the full
    mask cost as much as the model's forward pass (greedy write-role decoding with the grammar: 54
    tokens/s against 103 without it, 1 thread).
    """

    def __init__(self, lc: Any, n_vocab: int, *, grammar: Any = None, chain: Any = None) -> None:
        self._lc, self._n_vocab, self._grammar, self._chain = lc, n_vocab, grammar, chain
        if grammar is not None and chain is None:
            from llama_cpp import _internals as internals

            self._one = (lc.llama_token_data * 1)()
            self._one_arr = lc.llama_token_data_array(data=self._one, size=1, selected=-1, sorted=False)
            self._all = internals.LlamaTokenDataArray(n_vocab=n_vocab)

    def sample(self, ctx: Any, idx: int) -> int:
        import ctypes

        import numpy as np

        lc = self._lc
        if self._chain is not None:
            return int(lc.llama_sampler_sample(self._chain, ctx, idx))
        logits = np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx, idx), shape=(self._n_vocab,))
        tok = int(logits.argmax())
        if self._grammar is None:
            return tok
        one = self._one[0]
        one.id, one.logit, one.p = tok, float(logits[tok]), 0.0
        self._one_arr.size, self._one_arr.selected, self._one_arr.sorted = 1, -1, False
        lc.llama_sampler_apply(self._grammar, ctypes.byref(self._one_arr))
        if one.logit == float("-inf"):  # not allowed here: mask every token
            self._all.copy_logits(logits)
            lc.llama_sampler_apply(self._grammar, ctypes.byref(self._all.candidates))
            tok = int(self._all.candidates_data.logit.argmax())
        lc.llama_sampler_accept(self._grammar, tok)
        return tok

    def close(self) -> None:
        for handle in (self._chain if self._chain is not None else self._grammar,):
            if handle is not None:
                self._lc.llama_sampler_free(handle)  # a chain frees its members
        self._chain = self._grammar = None


class _Decoder:
    """Token-level decoding on one llama.cpp context and its token batch.

    :meth:`own` makes a context of its own for several sequences at once, with one KV cache for all of
    them (``kv_unified``): the cells of their common prefix, evaluated once, belong to every sequence
    (``llama_memory_seq_cp`` adds sequence ids to cells; nothing is copied). ``cached``: the tokens whose
    cells sequence 0 holds, for the next prompt's prefix reuse.
    """

    def __init__(self, lc: Any, ctx: Any, batch: Any, n_batch: int, *, n_ctx: int, n_seq: int,
                 stack: contextlib.ExitStack | None = None) -> None:
        self._lc, self.ctx, self._batch, self.n_batch = lc, ctx, batch, n_batch
        self.memory = lc.llama_get_memory(ctx)
        self.n_ctx, self.n_seq = n_ctx, n_seq
        self.cached: list[int] = []
        self.adapter: tuple | None = None  # (handle, scale) applied to an own context
        self._stack = stack

    @classmethod
    def own(cls, llm: Any, *, n_ctx: int, n_seq: int, n_threads: int, n_batch: int = 512) -> _Decoder:
        from llama_cpp import _internals as internals

        params = type(llm.context_params).from_buffer_copy(llm.context_params)
        params.n_ctx = n_ctx
        params.n_batch = params.n_ubatch = n_batch
        params.n_seq_max = n_seq
        params.kv_unified = True
        params.n_threads = params.n_threads_batch = n_threads
        stack = contextlib.ExitStack()
        try:
            with _quiet_stderr():
                ctx = stack.enter_context(contextlib.closing(
                    internals.LlamaContext(model=llm._model, params=params, verbose=False)))
            batch = stack.enter_context(contextlib.closing(
                internals.LlamaBatch(n_tokens=n_batch, embd=0, n_seq_max=1, verbose=False)))
        except BaseException:
            stack.close()
            raise
        lc = internals.llama_cpp
        return cls(lc, ctx.ctx, batch, n_batch, n_ctx=int(lc.llama_n_ctx(ctx.ctx)), n_seq=n_seq, stack=stack)

    def forget(self) -> None:
        """Empty the KV cache (every sequence)."""
        self._lc.llama_memory_clear(self.memory, True)
        self.cached = []

    def decode(self, entries: list[tuple[int, int, int, bool]], on_output) -> None:
        """Evaluate ``(token, position, sequence, wants_logits)`` entries, :attr:`n_batch` at a time; after
        each batch, ``on_output(sequence, index)`` for each of its entries that wants logits."""
        b = self._batch.batch
        for start in range(0, len(entries), self.n_batch):
            chunk = entries[start:start + self.n_batch]
            for k, (tok, pos, seq, want) in enumerate(chunk):
                b.token[k], b.pos[k], b.n_seq_id[k], b.logits[k] = tok, pos, 1, want
                b.seq_id[k][0] = seq
            b.n_tokens = len(chunk)
            rc = self._lc.llama_decode(self.ctx, b)
            if rc != 0:
                raise RuntimeError(f"llama_decode failed ({rc}) on a batch of {len(chunk)} tokens")
            if on_output is not None:
                for k, (_, _, seq, want) in enumerate(chunk):
                    if want:
                        on_output(seq, k)

    def close(self) -> None:
        if self._stack is not None:
            self._stack.close()
            self._stack = None
