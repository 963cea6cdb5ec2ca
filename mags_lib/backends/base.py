"""The small interface every inference backend implements, and :func:`load_backend`.

A backend wraps one language model and turns prompts into :class:`Generation` records. Prompts are
either chat messages (``[{"role": "user", "content": ...}, ...]``), rendered with the model's own
chat template and a generation prompt, or raw strings, sent as they are (no template).

Backends know nothing of the memory graph or of the agent. They hold native resources (a llama.cpp
context, torch tensors), so they are closed explicitly: ``b.close()`` or ``with load_backend(...)
as b:``. Open backends are also closed by an :mod:`atexit` hook, before the interpreter tears its
modules down (llama-cpp-python prints a ``TypeError`` when a model is left to the garbage collector
at exit).
"""

from __future__ import annotations

import abc
import atexit
import contextlib
import contextvars
import hashlib
import json
import re
import threading
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Union

__all__ = [
    "BACKENDS",
    "Backend",
    "BackendUnavailableError",
    "Generation",
    "GenerationMemo",
    "Prompt",
    "close_all",
    "generation_memo",
    "load_backend",
]

Prompt = Union[list[dict[str, str]], str]
"""A prompt: chat messages (rendered with the model's chat template) or a raw string."""


class BackendUnavailableError(RuntimeError):
    """A backend cannot run here (missing package or hardware); the message says what to do."""


@dataclass(frozen=True)
class Generation:
    """One completion.

    Attributes
    ----------
    text : str
        The generated text (special tokens and the stop string removed; with ``stop_repeats``, the
        repeated element and what followed it removed too).
    n_prompt_tokens : int
        Tokens in the prompt as the model saw it (chat template included).
    n_new_tokens : int
        Tokens generated; an end-of-sequence token that ended the generation is not counted (every backend
        counts so, as llama-cpp-python's completion does).
    seconds : float
        Wall time spent producing it. In a batched call every member of the batch reports the time
        of its whole batch. 0 for a generation answered by a :class:`GenerationMemo`.
    cached : bool
        True when a :class:`GenerationMemo` answered it (the text of an identical earlier call).
    """

    text: str
    n_prompt_tokens: int
    n_new_tokens: int
    seconds: float
    cached: bool = False

    @property
    def tokens_per_second(self) -> float:
        """Generated tokens per second of wall time (0 when no time elapsed)."""
        return self.n_new_tokens / self.seconds if self.seconds > 0 else 0.0


class GenerationMemo:
    """Greedy generations remembered by everything that decides them, for runs that repeat calls.

    A sweep plays one scenario under many configurations of the same models (ablations, recall k,
    token budgets): the write and ask models see the same observations and questions in every one,
    and greedy decoding gives the same text each time. Inside :func:`generation_memo` every backend
    answers a greedy call it has already made from the memo. The key is the model file, the applied
    adapter (name and file), the prompt, ``max_new_tokens``, the grammar, the stop strings,
    ``stop_repeats`` and the context size; sampled calls (``temperature > 0``) are never remembered.
    A hit returns the stored text and token counts with ``seconds=0`` and ``cached=True``: latencies
    measured under a memo are not the model's.
    """

    def __init__(self, max_entries: int | None = 100_000) -> None:
        if max_entries is not None and max_entries < 1:
            raise ValueError(f"max_entries must be None or >= 1, got {max_entries}")
        self.max_entries = max_entries
        self._store: dict[str, Generation] = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._store)

    @staticmethod
    def key(backend: Backend, prompt: Any, max_new_tokens: int, grammar: str | None,
            stop: Sequence[str], stop_repeats: bool = False) -> str:
        active = backend.active_adapter
        ident = [backend.name, backend.model_path, active, backend.adapters.get(active) if active else None,
                 getattr(backend, "n_ctx", None), prompt, int(max_new_tokens), grammar, list(stop)]
        extra = backend.memo_identity()  # what else decides the output (an adapter's scale, the base under a LoRA)
        if extra:  # appended only when there is some: the keys of every other backend are what they were
            ident.append(extra)
        if stop_repeats:  # appended only when set: the keys of every other call are what they were
            ident.append("stop_repeats")
        return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()

    def get(self, key: str) -> Generation | None:
        return self._store.get(key)

    def put(self, key: str, gen: Generation) -> None:
        if self.max_entries is not None and len(self._store) >= self.max_entries:
            self._store.pop(next(iter(self._store)))  # the oldest first
        self._store[key] = gen

    def stats(self) -> dict:
        total = self.hits + self.misses
        return {"hits": self.hits, "misses": self.misses, "entries": len(self._store),
                "hit_rate": self.hits / total if total else 0.0}


# the active memos of this thread / task (a stack: scopes nest). A context variable, not a list of the process:
# under joblib's threading backend two scenarios' blocks ran at once and each read the other's memo (its counts)
_MEMO: contextvars.ContextVar[tuple[GenerationMemo, ...]] = contextvars.ContextVar("mags_generation_memo", default=())


@contextlib.contextmanager
def generation_memo(memo: GenerationMemo | None = None) -> Iterator[GenerationMemo]:
    """Inside the block every backend called from this thread (or task) answers repeated greedy calls from
    ``memo`` (a new one by default), which the block yields (its ``stats()`` count hits and misses). Blocks
    open in other threads at the same time keep their own memos."""
    memo = GenerationMemo() if memo is None else memo
    token = _MEMO.set((*_MEMO.get(), memo))
    try:
        yield memo
    finally:
        _MEMO.reset(token)


_OPEN: weakref.WeakSet[Backend] = weakref.WeakSet()
_OPEN_LOCK = threading.Lock()


def close_all() -> None:
    """Close every backend still open (registered with :mod:`atexit`)."""
    with _OPEN_LOCK:
        backends = list(_OPEN)
    for b in backends:
        try:
            b.close()
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            pass


atexit.register(close_all)


class Backend(abc.ABC):
    """A language model behind one small interface.

    Subclasses implement :meth:`_generate`, :meth:`count_tokens`, :meth:`render` and
    :meth:`_release`; argument checks, closing and the context-manager protocol live here.

    Attributes
    ----------
    name : str
        The backend's registry name (``"llamacpp"``, ``"transformers"``, ``"vllm"``).
    model_path : str
        What was loaded (a file or a folder).
    supports_grammar : bool
        Whether :meth:`generate` accepts a GBNF ``grammar``.
    stops_at_repeats : bool
        Whether :meth:`_generate` takes ``stop_repeats=True`` and stops decoding at the first
        repeated element (otherwise :meth:`generate` only cuts the text there).
    """

    name: str = "base"
    supports_grammar: bool = False
    stops_at_repeats: bool = False

    def __init__(self) -> None:
        self.model_path: str = ""
        self._closed = False
        self._adapter_paths: dict[str, str] = {}
        self._active_adapter: str | None = None
        with _OPEN_LOCK:
            _OPEN.add(self)

    # -- public API --------------------------------------------------------------------------
    def generate(
        self,
        prompts: Sequence[Any],
        *,
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        grammar: str | None = None,
        stop: Sequence[str] | None = None,
        seed: int | None = None,
        stop_repeats: bool = False,
    ) -> list[Generation]:
        """Complete each prompt.

        Parameters
        ----------
        prompts : list of chat-message lists, or list of str
            A message list is rendered with the model's chat template (generation prompt added);
            a string is sent as is. A single prompt must still be wrapped in a list.
        max_new_tokens : int
            Upper bound on generated tokens per prompt (>= 1).
        temperature : float
            0 means greedy decoding; > 0 samples (no top-k / top-p truncation).
        grammar : str, optional
            A GBNF grammar constraining the output (backends with ``supports_grammar`` only).
        stop : list of str, optional
            Strings that end a completion; they are not included in the text.
        seed : int, optional
            Sampling seed (ignored when greedy).
        stop_repeats : bool
            End a completion as soon as it repeats, verbatim, an element ``<name>...</name>`` it
            already holds (a small model's greedy loop: one memory tag again and again until the
            budget runs out); the repeat is not part of the text (see :func:`cut_at_repeat`). For
            the tag roles (ask, write) a repeated tag adds no operation, so the text keeps every
            operation the model produced before it started looping. Backends stop decoding there;
            one that cannot (vLLM) decodes on and has its text cut the same way.

        Returns
        -------
        list of Generation
            One per prompt, in order.
        """
        self._check_open()
        if isinstance(prompts, (str, bytes)) or (
            isinstance(prompts, list) and prompts and isinstance(prompts[0], dict)
        ):
            raise TypeError("prompts must be a list of prompts: wrap a single prompt as [prompt] "
                            "(a prompt is a list of chat messages or a raw string)")
        prompts = list(prompts)
        for i, p in enumerate(prompts):
            if isinstance(p, str):
                continue
            if not isinstance(p, (list, tuple)) or not all(
                isinstance(m, dict) and "role" in m and "content" in m for m in p
            ):
                raise TypeError(f"prompt {i} is neither a string nor a list of {{'role', 'content'}} "
                                f"messages: {p!r:.200}")
        if int(max_new_tokens) < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if grammar is not None and not self.supports_grammar:
            raise ValueError(f"the {self.name!r} backend has no grammar-constrained decoding; use the "
                             "'llamacpp' backend (or 'vllm' on a GPU), or pass grammar=None")
        if grammar is not None and not grammar.strip():
            raise ValueError("grammar is an empty string; pass a GBNF grammar or None")
        if not isinstance(stop_repeats, bool):
            raise TypeError(f"stop_repeats must be True or False, got {stop_repeats!r}")
        if isinstance(stop, str):  # one stop string, not its characters (llama-cpp-python takes a string too)
            stop = [stop]
        if stop is not None and not all(isinstance(s, str) for s in stop):
            raise TypeError(f"stop must be a string or a list of strings, got {stop!r:.80}")
        stop = [s for s in (stop or []) if s]
        for i, p in enumerate(prompts):
            if isinstance(p, str) and not p:
                raise ValueError(f"prompt {i} is empty: a completion needs at least one token of prompt")
        if not prompts:
            return []
        active = _MEMO.get()
        memo = active[-1] if active and temperature == 0 else None
        if memo is None:
            return self._run(prompts, max_new_tokens=int(max_new_tokens), temperature=float(temperature),
                             grammar=grammar, stop=stop, seed=seed, stop_repeats=stop_repeats)
        keys = [memo.key(self, p, max_new_tokens, grammar, stop, stop_repeats) for p in prompts]
        out: list[Generation | None] = [memo.get(k) for k in keys]
        todo = [i for i, g in enumerate(out) if g is None]
        memo.hits += len(prompts) - len(todo)
        memo.misses += len(todo)
        if todo:
            fresh = self._run([prompts[i] for i in todo], max_new_tokens=int(max_new_tokens),
                              temperature=0.0, grammar=grammar, stop=stop, seed=seed, stop_repeats=stop_repeats)
            for i, g in zip(todo, fresh):
                memo.put(keys[i], g)
                out[i] = g
        computed = set(todo)
        return [g if i in computed else replace(g, seconds=0.0, cached=True) for i, g in enumerate(out)]

    def _run(self, prompts: list, *, stop_repeats: bool, **kw: Any) -> list[Generation]:
        """:meth:`_generate`, which a backend that can stop at a repeat is asked to; the cut is made here."""
        if not stop_repeats:
            return self._generate(prompts, **kw)
        gens = (self._generate(prompts, stop_repeats=True, **kw) if self.stops_at_repeats
                else self._generate(prompts, **kw))
        return [replace(g, text=cut_at_repeat(g.text)[0]) for g in gens]

    @abc.abstractmethod
    def count_tokens(self, text: str) -> int:
        """Number of tokens the model's tokenizer gives ``text`` (no special tokens added)."""

    # -- LoRA adapters switched at run time over one loaded base model ------------------------
    supports_adapters: bool = False

    @property
    def adapters(self) -> dict[str, str]:
        """Loaded LoRA adapters, name -> path."""
        return dict(self._adapter_paths)

    @property
    def active_adapter(self) -> str | None:
        """The adapter applied to generation, or None (the base model alone)."""
        return self._active_adapter

    def load_adapter(self, name: str, path: Any, *, scale: float = 1.0) -> None:
        """Load a LoRA adapter under ``name`` (not applied until :meth:`set_adapter`).

        ``path`` is what the backend runs: a GGUF LoRA adapter file (``llamacpp``) or a PEFT
        adapter folder (``transformers``).
        """
        self._check_open()
        self._check_adapters()
        if not isinstance(name, str) or not name:
            raise ValueError(f"an adapter name must be a non-empty string, got {name!r}")
        if name in self.adapters:
            raise ValueError(f"an adapter named {name!r} is already loaded ({self.adapters[name]}); "
                             "unload_adapter() it first or pick another name")
        from pathlib import Path

        if not Path(path).exists():
            raise FileNotFoundError(f"LoRA adapter {path} does not exist")
        self._load_adapter(name, str(path), float(scale))
        self._adapter_paths[name] = str(path)

    def set_adapter(self, name: str | None) -> None:
        """Apply adapter ``name`` to the following generations (``None``: the base model alone)."""
        self._check_open()
        self._check_adapters()
        if name is not None and name not in self.adapters:
            raise KeyError(f"no adapter named {name!r} is loaded; loaded: {sorted(self.adapters)}")
        if name != self.active_adapter:
            self._set_adapter(name)
            self._active_adapter = name

    def unload_adapter(self, name: str) -> None:
        """Free adapter ``name`` (removed from generation first if it is active)."""
        self._check_open()
        self._check_adapters()
        if name not in self.adapters:
            raise KeyError(f"no adapter named {name!r} is loaded; loaded: {sorted(self.adapters)}")
        if self.active_adapter == name:
            self.set_adapter(None)
        self._unload_adapter(name)
        del self._adapter_paths[name]

    def _check_adapters(self) -> None:
        if not self.supports_adapters:
            raise NotImplementedError(
                f"the {self.name!r} backend cannot switch LoRA adapters at run time; use 'llamacpp' "
                "(GGUF LoRA adapters) or 'transformers' (PEFT adapters), or load a merged model")

    def _load_adapter(self, name: str, path: str, scale: float) -> None:
        raise NotImplementedError

    def _set_adapter(self, name: str | None) -> None:
        raise NotImplementedError

    def _unload_adapter(self, name: str) -> None:
        raise NotImplementedError

    def top1(self, ids: Sequence[int]) -> list[int]:
        """Teacher forcing: the model's most likely next token after every prefix of ``ids``.

        ``out[i]`` is the argmax of the next-token distribution given ``ids[: i + 1]``; the tokens
        are fed as they are (no BOS added, no template). Used to compare two copies of one model.
        """
        raise NotImplementedError(f"the {self.name!r} backend has no teacher-forced top-1")

    @abc.abstractmethod
    def render(self, messages: Sequence[dict]) -> str:
        """The prompt text the model sees for chat ``messages`` (template + generation prompt)."""

    def memo_identity(self) -> list:
        """What decides this backend's greedy output beyond its name, model path, active adapter's path and
        ``n_ctx`` (part of :meth:`GenerationMemo.key`); empty by default."""
        return []

    def close(self) -> None:
        """Release the model (idempotent). The backend is unusable afterwards."""
        if self._closed:
            return
        self._closed = True
        with _OPEN_LOCK:
            _OPEN.discard(self)
        self._release()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._closed

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"{type(self).__name__}(model={self.model_path!r}, {state})"

    # -- for subclasses ----------------------------------------------------------------------
    @abc.abstractmethod
    def _generate(self, prompts: list, *, max_new_tokens: int, temperature: float,
                  grammar: str | None, stop: list[str], seed: int | None) -> list[Generation]:
        ...

    @abc.abstractmethod
    def _release(self) -> None:
        ...

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self!r} is closed; load a new backend with load_backend()")


_ELEMENT = re.compile(r"<([A-Za-z_][\w.-]*)>(.*?)</\1>", re.DOTALL)


def first_repeat(text: str) -> int | None:
    """Offset of the first element ``<name>...</name>`` of ``text`` that repeats an earlier one
    verbatim (same name, same content, character for character), or ``None``.

    >>> first_repeat("<m>a,b,c</m><m>a,b,d</m><m>a,b,c</m><m>x</m>")
    24
    >>> first_repeat("<m>a,b,c</m><n>a,b,c</n>") is None
    True
    """
    seen: set[str] = set()
    for m in _ELEMENT.finditer(text):
        if m.group(0) in seen:
            return m.start()
        seen.add(m.group(0))
    return None


def cut_at_repeat(text: str) -> tuple[str, bool]:
    """``text`` up to its first repeated element (see :func:`first_repeat`), and whether it had one.

    >>> cut_at_repeat("<m>a</m><m>b</m><m>a</m><m>a</m>")
    ('<m>a</m><m>b</m>', True)
    """
    i = first_repeat(text)
    return (text, False) if i is None else (text[:i], True)


def _truncate_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """Cut ``text`` at the earliest stop string; return the text and whether one was found."""
    cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


BACKENDS = ("llamacpp", "transformers", "vllm")


def load_backend(name: str = "llamacpp", model: Any = None, **kw: Any) -> Backend:
    """Load an inference backend.

    Parameters
    ----------
    name : {"llamacpp", "transformers", "vllm"}
        ``"llamacpp"`` (GGUF via llama-cpp-python; CPU, grammar-constrained decoding),
        ``"transformers"`` (batched generation with torch), ``"vllm"`` (optional, CUDA only).
        ``"llama.cpp"`` / ``"llama_cpp"`` / ``"hf"`` are accepted aliases.
    model : str or Path, optional
        ``None`` = the embedded SmolLM2-135M-Instruct; else anything
        :func:`mags_lib.models.resolve_model` accepts (a .gguf file, a transformers folder, ...).
    **kw
        Backend options, e.g. ``n_threads``, ``n_ctx`` (llamacpp), ``batch_size``, ``device``
        (transformers), ``gpu_memory_utilization`` (vllm).

    Raises
    ------
    ValueError
        Unknown backend name.
    mags_lib.models.ModelNotFoundError
        The model is not on disk.
    BackendUnavailableError
        The backend cannot run here (e.g. vLLM without CUDA).
    """
    key = str(name).lower().replace("-", "").replace("_", "").replace(".", "")
    key = {"llamacpp": "llamacpp", "llama": "llamacpp", "gguf": "llamacpp", "transformers": "transformers",
           "hf": "transformers", "torch": "transformers", "vllm": "vllm"}.get(key, key)
    if key == "llamacpp":
        from .llamacpp_backend import LlamaCppBackend

        return LlamaCppBackend(model, **kw)
    if key == "transformers":
        from .transformers_backend import TransformersBackend

        return TransformersBackend(model, **kw)
    if key == "vllm":
        from .vllm_backend import VLLMBackend

        return VLLMBackend(model, **kw)
    raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
