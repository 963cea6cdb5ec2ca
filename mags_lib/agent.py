"""The MAGS agent: a small language model with a Liquid Knowledge Graph memory it reads and writes.

``MAGS`` composes three parts that know nothing of one another: the graph (:mod:`mags_lib.graph`),
the protocol (:mod:`mags_lib.protocol`: tags, parser, grammars, prompts) and the inference backends
(:mod:`mags_lib.backends`). One turn:

* ``observe(text, source=, time=)``: an episodic node for the input, then the **write** model turns
  the input into ``<memory_write>`` triplets, engrammed into the graph with the same ``source`` id
  (so every derived node and fact traces back to what was said, and when); ``observe_many(items)``
  does the same for a list of turns, batching the write model's calls;
* ``ask(question)``: the **ask** model turns the question into ``<memory_ask>`` queries, the graph
  recalls facts (with a trace), and the **answer** model answers from the recalled facts, packed
  into the prompt within a token budget (the memory tokens of every query are recorded);
* ``turn(text)``: a router decides between the two (rule-based by default, model-based option).

Baselines and ablations are configurations (:class:`MAGSConfig`, ``dataclasses.replace``) of this one
class: backend, model files, dynamics switches, recall k, token budget, grammar on/off.

>>> from mags_lib import MAGS                                # doctest: +SKIP
>>> m = MAGS.default()                                       # doctest: +SKIP
>>> m.observe("Blorps eat frozen lemons.", source="D1:3")    # doctest: +SKIP
>>> m.ask("What do blorps eat?").answer                      # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import protocol as P

__all__ = [
    "MAGS",
    "MEMORY_MODES",
    "ROUTER_GRAMMAR",
    "Answer",
    "Extraction",
    "MAGSConfig",
    "MAGSFormatError",
    "Observation",
    "find_trained_model",
    "grounded",
    "resolve_speaker",
    "resolve_triplet_dates",
    "rule_route",
]

_FORMAT = "mags-agent"
_FORMAT_VERSION = 2  # 2: mags.json carries a checksum; version 1 saves still load
_PROMPT_ROOM = 256  # tokens n_ctx must leave for a system prompt, few-shot examples and a short input
MEMORY_MODES = ("graph", "none", "full_context", "rag")
"""``MAGSConfig.memory``: what the reader is given. ``graph``: MAGS (the Liquid Knowledge Graph, write
model, recall); ``none``: nothing (the reader alone); ``full_context``: the raw observations, newest
kept, as many as fit the reader's window; ``rag``: the ``recall_k`` raw observations most similar to
the question by embedding (static: never updated, no write or ask model call)."""
CONSOLIDATED_WHEN = ("always", "closed_book", "fallback")  # MAGSConfig.consolidated_when
DATE_STYLES = ("iso", "day_month_year")  # MAGSConfig.date_style: how the reader's memory block writes a date


class MAGSFormatError(ValueError):
    """A saved MAGS folder's ``mags.json`` is corrupt, hand-edited, foreign or of an unknown version."""
_ROLES = ("ask", "write", "answer", "router")
_EMBEDDED = ("base", "smollm2", "embedded")

ROUTER_GRAMMAR = 'root ::= "store" | "answer"\n'
"""GBNF of the model-based router's reply."""


# ------------------------------------------------------------------------------------------------
# configuration
@dataclass(frozen=True)
class MAGSConfig:
    """Everything that makes one MAGS system differ from another (baselines, ablations).

    Model fields accept ``None`` (decided by ``models``), ``"base"`` (the embedded SmolLM2), a
    ``.gguf`` file or a transformers / LoRA-adapter folder.
    """

    backend: str = "llamacpp"  # "llamacpp" | "transformers" | "vllm"
    memory: str = "graph"  # "graph" (MAGS) | "none" | "full_context" | "rag": baselines (see MEMORY_MODES)
    models: str = "base"  # "base": embedded SmolLM2 for every role; "trained": models/<role>/<trained_tag>/
    trained_tag: str = "default"  # run tag of the trained ask/write/answer models (models="trained")
    ask_model: str | None = None  # overrides `models` for the ask role
    write_model: str | None = None  # overrides `models` for the write role
    answer_model: str | None = None  # the reader; None = embedded base model
    router_model: str | None = None  # model-based router; None = the answer model
    models_root: str | None = None  # where models live (default <project>/models)
    embedder: str = "minilm"  # "minilm" | "hash" | "hash-<dim>"
    graph: Any = None  # a mags_lib.graph.GraphConfig; None = its defaults
    dynamics: Any = True  # True/False, or {switch: bool}, or a list of the switches to keep on
    maintain_every: int = 8  # observations between two maintain() ticks (0: never automatically)
    recall_k: int = 10  # items recalled per ask
    memory_token_budget: int = 256  # max tokens of recalled facts in the answer prompt
    router: str = "rule"  # "rule" | "model"
    grammar: bool = True  # grammar-constrained decoding for ask/write/router (backends that support it)
    write_nonempty: bool = False  # with grammar: force at least one triplet (True makes the untrained
    # model invent facts for inputs with nothing to store, e.g. gibberish; False lets it write nothing)
    write_grounding: bool = True  # store a triplet only if its subject or object shares a word with the
    # input (see ``grounded``): an untrained model copies few-shot facts ("Odalie ...") into any input; the
    # speaker's name does not count (a trained writer given "Jon: Ugh, Mondays." wrote (Jon, has age, 18))
    resolve_dates: bool = True  # relative dates against the observation's time (mags_lib.graph.dates): a
    # written subject / object that is only a relative date ("yesterday", "last Saturday") is stored as the
    # date it names ("7 May 2023"), and the reader sees recalled texts with each relative date resolved next
    # to it ("yesterday [7 May 2023]"; the stored text is unchanged). False: both off (ablation)
    write_speaker: bool = True  # the write model reads a turn with a speaker as "<speaker>: <text>" (the
    # training data's persona form, "Caroline: I work as a baker."), so it knows whose "I" it is; without it
    # a dialogue turn's addressee ("Hey Gina! I lost my job") became the subject (README, LoCoMo). False: the
    # text alone (ablation)
    max_ops: int | None = None  # with grammar: most tags per ask/write output (None: the prompt spec's)
    max_field_chars: int | None = None  # with grammar: longest subject / relation / query (None: spec)
    max_object_chars: int | None = None  # with grammar: longest object (None: spec)
    few_shot_write: int | None = None  # None: the model's prompt spec (mags_lib.roles; 0 for a trained model)
    few_shot_ask: int | None = None  # None: the model's prompt spec
    few_shot_router: int = 2
    question_as_query: bool = True  # the question itself is also a recall query
    max_queries: int = 4  # recall queries used per ask (question included)
    max_new_tokens_ask: int | None = None  # None: the model's prompt spec (mags_lib.roles.ROLE_SPECS)
    max_new_tokens_write: int | None = None  # None: the model's prompt spec
    max_new_tokens_answer: int | None = None  # None: the model's prompt spec
    temperature: float = 0.0  # 0: greedy (deterministic)
    n_threads: int | None = None  # llama.cpp / torch threads (None: every usable core)
    n_ctx: int = 2048  # llama.cpp context window
    context_per_role: bool = True  # llama.cpp: one context per role on the same mmapped weights, so each
    # role's fixed prompt prefix (system prompt + few-shot) stays in its KV cache between calls
    stop_repeats: bool = True  # ask / write: decoding ends at the first repeated tag, which adds no operation
    # (a looping model spends its budget on one triplet and is cut off mid-tag; False: decode as it loops)
    answer_stop: tuple | None = None  # strings that end the answer (None: the answer prompt spec's, a newline)
    date_style: str = "iso"  # dates in the reader's memory block: iso (2023-05-08) | day_month_year (8 May 2023,
    # the form LoCoMo's gold answers take: an ISO date copied into an answer scores 0 there); both are in the
    # answer role's training data
    consolidated_when: str = "always"  # when a consolidation adapter (set_consolidated) answers: always |
    # closed_book: only with an empty memory block (recall=False, or nothing recalled); recalled facts are read
    # by the answer model alone, so a value that changed after the consolidation is not fought by the adapter |
    # fallback: as closed_book, and also when the answer model abstains over the recalled facts (they hold no
    # answer: a demoted or pruned fact, a query recall missed); the adapter then answers closed-book
    seed: int = 0
    backend_kwargs: dict = field(default_factory=dict)  # extra load_backend() options

    def __post_init__(self) -> None:
        from .backends import BACKENDS
        from .graph.config import coerce_fields

        if isinstance(self.models_root, os.PathLike):  # a Path is as good as its string (saved as one)
            object.__setattr__(self, "models_root", os.fspath(self.models_root))
        coerce_fields(self)  # every int / float / bool / str field has its type (numpy scalars -> Python)
        if self.backend.lower().replace(".", "").replace("_", "") not in BACKENDS + ("hf",):
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.memory not in MEMORY_MODES:
            raise ValueError(f"memory must be one of {MEMORY_MODES}, got {self.memory!r}")
        if self.models not in ("base", "trained"):
            raise ValueError(f"models must be 'base' or 'trained', got {self.models!r}")
        if self.router not in ("rule", "model"):
            raise ValueError(f"router must be 'rule' or 'model', got {self.router!r}")
        for name in ("recall_k", "memory_token_budget", "max_queries", "max_ops", "max_field_chars",
                     "max_object_chars", "max_new_tokens_ask",
                     "max_new_tokens_write", "max_new_tokens_answer", "n_ctx"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("maintain_every", "few_shot_write", "few_shot_ask", "few_shot_router"):
            if getattr(self, name) is not None and getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not self.trained_tag or "/" in self.trained_tag:
            raise ValueError(f"trained_tag must be a run tag (a plain folder name), got {self.trained_tag!r}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        from .roles import ROLE_SPECS

        def budget(role: str) -> int:  # the explicit budget, else the largest of the role's prompt specs
            v = getattr(self, f"max_new_tokens_{role}")
            return v if v is not None else max(ROLE_SPECS[role].base.max_new_tokens,
                                               ROLE_SPECS[role].trained.max_new_tokens)

        need = _PROMPT_ROOM + max(budget("ask"), budget("write"), self.memory_token_budget + budget("answer"))
        if self.n_ctx < need:
            raise ValueError(f"n_ctx={self.n_ctx} is too small: it must hold a prompt ({_PROMPT_ROOM} tokens for "
                             "the instructions and examples), the memory block (memory_token_budget) and the "
                             f"longest output (max_new_tokens_*): at least {need}")
        if not isinstance(self.backend_kwargs, dict):
            raise TypeError(f"backend_kwargs must be a dict, got {type(self.backend_kwargs).__name__}")
        object.__setattr__(self, "backend_kwargs", _plain_kwargs(self.backend_kwargs))
        if self.n_threads is not None and self.n_threads < 1:
            raise ValueError(f"n_threads must be None or >= 1, got {self.n_threads}")
        if isinstance(self.dynamics, np.bool_):
            object.__setattr__(self, "dynamics", bool(self.dynamics))
        if not isinstance(self.dynamics, (bool, dict, list, tuple, set, frozenset)):
            raise TypeError("dynamics must be a bool, a {switch: bool} dict or a list of switch names")
        if isinstance(self.dynamics, dict):  # saved with the memory: plain bools only ("false" would be true)
            for k, v in self.dynamics.items():
                if not isinstance(v, (bool, np.bool_)):
                    raise TypeError(f"dynamics[{k!r}] must be True or False, got {v!r}")
            object.__setattr__(self, "dynamics", {k: bool(v) for k, v in self.dynamics.items()})
        if self.graph is not None:
            from .graph import GraphConfig

            if not isinstance(self.graph, GraphConfig):
                raise TypeError(f"graph must be a GraphConfig or None, got {type(self.graph).__name__}")
        _dynamics_switches(self.dynamics)  # validates switch names
        if self.date_style not in DATE_STYLES:
            raise ValueError(f"date_style must be one of {DATE_STYLES}, got {self.date_style!r}")
        if self.consolidated_when not in CONSOLIDATED_WHEN:
            raise ValueError(f"consolidated_when must be one of {CONSOLIDATED_WHEN}, got {self.consolidated_when!r}")
        if self.answer_stop is not None:
            if isinstance(self.answer_stop, str) or not isinstance(self.answer_stop, (list, tuple)) \
                    or not all(isinstance(x, str) for x in self.answer_stop):
                raise TypeError("answer_stop must be None or a sequence of strings, e.g. ('\\n',)")
            object.__setattr__(self, "answer_stop", tuple(self.answer_stop))

    def graph_config(self) -> Any:
        """The :class:`~mags_lib.graph.GraphConfig` with the ``dynamics`` switches applied."""
        from .graph import GraphConfig

        cfg = self.graph if self.graph is not None else GraphConfig()
        switches = _dynamics_switches(self.dynamics)
        if switches:
            cfg = dataclasses.replace(cfg, dynamics=dataclasses.replace(cfg.dynamics, **switches))
        return cfg

    @property
    def dynamics_on(self) -> bool:
        """Whether maintain() ticks run at all."""
        return self.dynamics is not False and bool(self.dynamics != [] and self.dynamics != ())

    def to_dict(self) -> dict:
        """Plain-JSON form (the graph config through its own ``to_dict``)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["graph"] = self.graph.to_dict() if self.graph is not None else None
        d["answer_stop"] = None if self.answer_stop is None else list(self.answer_stop)
        if isinstance(self.dynamics, (set, frozenset, tuple)):
            d["dynamics"] = sorted(self.dynamics)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> MAGSConfig:
        """Inverse of :meth:`to_dict`; unknown keys raise ``ValueError``, bad values name their field."""
        if not isinstance(d, dict):
            raise TypeError(f"a MAGSConfig dict must be a mapping of its fields, got {type(d).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        bad = set(d) - known
        if bad:
            raise ValueError(f"unknown MAGSConfig keys {sorted(bad)}; known: {sorted(known)}")
        d = dict(d)
        if isinstance(d.get("answer_stop"), list):
            d["answer_stop"] = tuple(d["answer_stop"])
        if d.get("graph") is not None:
            from .graph import GraphConfig

            if not isinstance(d["graph"], dict):
                raise TypeError(f"graph must be a GraphConfig dict or null, got {d['graph']!r:.60}")
            d["graph"] = GraphConfig.from_dict(d["graph"])
        return cls(**d)


def _plain_kwargs(kw: dict) -> dict:
    """``backend_kwargs`` as plain JSON values (they are saved with the memory): numpy scalars become Python
    numbers, paths strings; anything else that JSON cannot hold is refused, naming its key."""
    out = {}
    for k, v in kw.items():
        if not isinstance(k, str):
            raise TypeError(f"backend_kwargs keys must be strings (keyword names), got {k!r}")
        if isinstance(v, np.generic):
            v = v.item()
        elif isinstance(v, os.PathLike):
            v = os.fspath(v)
        try:
            json.dumps(v, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"backend_kwargs[{k!r}] = {v!r:.80} cannot be saved with the memory ({exc}): pass plain "
                            "JSON values (numbers, strings, booleans, None, lists and dicts of them)") from None
        out[k] = v
    return out


def _dynamics_bools() -> list[str]:
    from .graph import DynamicsConfig

    return [f.name for f in dataclasses.fields(DynamicsConfig) if f.type in (bool, "bool")]


def _dynamics_switches(spec: Any) -> dict[str, bool]:
    """Turn the ``dynamics`` config value into DynamicsConfig switch overrides."""
    if spec is True:
        return {}
    names = _dynamics_bools()
    if spec is False:
        return {n: False for n in names}
    if isinstance(spec, dict):
        bad = set(spec) - set(names)
        if bad:
            raise ValueError(f"unknown dynamics switches {sorted(bad)}; known: {names}")
        return {k: bool(v) for k, v in spec.items()}
    keep = set(spec)
    bad = keep - set(names)
    if bad:
        raise ValueError(f"unknown dynamics switches {sorted(bad)}; known: {names}")
    return {n: n in keep for n in names}


# ------------------------------------------------------------------------------------------------
# results
@dataclass
class Extraction:
    """One raw model output for a role, and its parse (strict, for adherence; lenient, for use)."""

    input: str
    role: str
    text: str
    strict: P.Parsed
    lenient: P.Parsed
    n_new_tokens: int = 0
    seconds: float = 0.0

    @property
    def ops(self) -> list[P.Op]:
        """The operations the agent uses (lenient parse)."""
        return self.lenient.ops

    @property
    def adherent(self) -> bool:
        """The output parses under the strict protocol for its role."""
        return self.strict.ok


@dataclass
class Observation:
    """What :meth:`MAGS.observe` did."""

    text: str
    source: str
    time: str | None
    episode: str | None  # None with memory="none" (nothing is stored)
    triplets: list[tuple[str, str, str]]
    extraction: Extraction | None  # None when no write model ran (memory modes other than "graph")
    report: Any
    maintained: Any = None
    seconds: float = 0.0
    kind: str = "observe"
    dropped: list[tuple[str, str, str]] = field(default_factory=list)  # written but not grounded: not stored
    speaker: str | None = None  # who said it (as given to observe())


@dataclass
class Answer:
    """What :meth:`MAGS.ask` did: the answer, the facts it was given, the recall trace.

    Attributes
    ----------
    memory_tokens : int
        Tokens of the memory block (recalled facts) in the answer prompt.
    timings : dict
        Seconds per step: ``ask`` (the ask model), ``recall`` (reading the memory: retrieval and building
        the memory block; ``full_context``: the whole history), ``answer`` (the answer model).
    """

    question: str
    answer: str
    facts: list[str]
    trace: Any
    recall: Any
    queries: list[str]
    memory_tokens: int
    extraction: Extraction | None  # None when no ask model ran (memory modes other than "graph")
    timings: dict[str, float]
    seconds: float
    items: list = field(default_factory=list)  # the recall items behind ``facts``, same order
    kind: str = "ask"
    time: str | None = None  # when the question was asked (as given to ask())
    consolidated: bool = False  # the consolidation adapter gave the answer (MAGSConfig.consolidated_when)

    @property
    def sources(self) -> list[str]:
        """Source ids of the facts given to the answer model, in order, without repeats."""
        seen: dict[str, None] = {}
        for it in self.items:
            for s in it.sources:
                seen.setdefault(s, None)
        return list(seen)


# ------------------------------------------------------------------------------------------------
# helpers
_QUESTION_START = re.compile(
    r"^\s*(what|who|whom|whose|where|when|why|how|which|do|does|did|is|are|was|were|can|could|will|"
    r"would|should|shall|may|might|have|has|had|am|tell me|remind me|recall|name|list)\b", re.IGNORECASE)


def rule_route(text: str) -> str:
    """Rule-based router: ``"answer"`` for a question, ``"store"`` for anything else.

    A question ends with ``?`` or starts with a question word / auxiliary verb / request
    ("tell me", "remind me").

    >>> rule_route("Blorps eat frozen lemons."), rule_route("What do blorps eat?")
    ('store', 'answer')
    >>> rule_route("Tell me where the quindles live")
    'answer'
    """
    t = text.strip()
    if t.endswith("?"):
        return "answer"
    return "answer" if _QUESTION_START.match(t) and not t.endswith((".", "!")) else "store"


_WORD = re.compile(r"\w+")


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if len(w) >= 2 or w.isdigit()}


def grounded(triplet: Sequence[str], text: str, speaker: str | None = None) -> bool:
    """Whether a triplet's subject or object shares a word with the input ``text``.

    Words are runs of letters and digits, lower-cased; a word matches an input word that is equal
    or shares its first 4 characters (``lemon`` / ``lemons``, ``glassblower`` / ``glassblowing``).
    Facts about nothing the input mentions -- the few-shot examples' people copied into gibberish --
    are not grounded. The words of ``speaker`` never ground a triplet: the name comes with the turn,
    so a fact about the speaker needs its other field in what was said ("Ugh, Mondays." is no
    evidence for ``(Jon, has age, 18)``).

    >>> grounded(("Blorps", "eat", "frozen lemons"), "Blorps eat only frozen lemons.")
    True
    >>> grounded(("Odalie", "is sister of", "me"), "@#! zxq 0x3f")
    False
    >>> grounded(("Jon", "works as", "banker"), "I lost my job as a banker.", speaker="Jon")
    True
    >>> grounded(("Jon", "has age", "18"), "Jon: Ugh, Mondays.", speaker="Jon")
    False
    """
    have = _words(text)
    given = _words(speaker) if speaker else set()
    prefixes = {w[:4] for w in have if len(w) >= 4}
    for field_text in (triplet[0], triplet[2]):
        for w in _words(field_text):
            if w not in given and (w in have or (len(w) >= 4 and w[:4] in prefixes)):
                return True
    return False


_FIRST_PERSON = {"i", "me", "myself", "we", "us", "ourselves"}
_POSSESSIVE = re.compile(r"^(my|mine|our)\b\s*", re.IGNORECASE)


def resolve_speaker(triplet: Sequence[str], speaker: str | None) -> tuple[str, str, str]:
    """A triplet with its first-person subject / object resolved to ``speaker``.

    ``I``, ``me``, ``myself`` (and ``we``, ``us``) become the speaker's name; ``my X`` / ``our X``
    become ``<speaker>'s X``; ``mine`` the speaker. Without a speaker the triplet is unchanged.

    >>> resolve_speaker(("I", "work as", "a baker"), "Caroline")
    ('Caroline', 'work as', 'a baker')
    >>> resolve_speaker(("my sister", "lives in", "Boston"), "Jon")
    ("Jon's sister", 'lives in', 'Boston')
    >>> resolve_speaker(("Mel", "visited", "me"), "Caroline")
    ('Mel', 'visited', 'Caroline')
    """
    s, r, o = (str(x) for x in triplet)
    if not speaker:
        return (s, r, o)

    def one(x: str) -> str:
        t = x.strip()
        if t.lower() in _FIRST_PERSON or t.lower() == "mine":
            return speaker
        m = _POSSESSIVE.match(t)
        if m and t[m.end():]:
            return f"{speaker}'s {t[m.end():]}"
        return x

    return (one(s), r, one(o))


def resolve_triplet_dates(triplet: Sequence[str], time: str | None) -> tuple[str, str, str]:
    """A triplet whose subject or object is only a relative date, with that date resolved against ``time``.

    ``time`` is when it was said (an ISO string); the field becomes the date in words
    (:func:`mags_lib.graph.dates.resolve_date_field`), so the graph types it like any written date and
    never merges it with another date by similarity. A field holding more than a date, a relation, or
    a triplet without an ISO ``time`` is unchanged.

    >>> resolve_triplet_dates(("Caroline", "went to support group on", "yesterday"), "2023-05-08T13:56")
    ('Caroline', 'went to support group on', '7 May 2023')
    >>> resolve_triplet_dates(("Melanie", "ran charity race", "last Saturday"), "2023-05-25")
    ('Melanie', 'ran charity race', '20 May 2023')
    >>> resolve_triplet_dates(("Caroline", "visited", "the park yesterday"), "2023-05-08")
    ('Caroline', 'visited', 'the park yesterday')
    """
    from .graph.dates import resolve_date_field

    s, r, o = (str(x) for x in triplet)
    return (resolve_date_field(s, time) or s, r, resolve_date_field(o, time) or o)


def _date_part(time: str | None, style: str = "iso") -> str | None:
    """The date of an ISO time stamp (``2023-05-08T13:56`` -> ``2023-05-08``, or ``8 May 2023`` in the
    ``day_month_year`` style); other strings as is.

    >>> _date_part("2023-05-08T13:56"), _date_part("2023-05-08", "day_month_year"), _date_part("May", "day_month_year")
    ('2023-05-08', '8 May 2023', 'May')
    """
    m = re.match(r"(\d{4})-(\d{2})-(\d{2})(?:T|$)", time) if time else None
    if m is None:
        return time
    if style == "day_month_year" and 1 <= int(m.group(2)) <= 12:
        from .graph.dates import MONTH_NAMES

        return f"{int(m.group(3))} {MONTH_NAMES[int(m.group(2)) - 1]} {m.group(1)}"
    return time[:10]


def _alive_node(g: Any, node_id: str) -> bool:
    try:
        g._idx(node_id)
    except KeyError:
        return False
    return True


_TURN_KEYS = ("text", "source", "time", "speaker")


def _turn_fields(item: Any, i: int) -> tuple:
    """The :meth:`MAGS.observe` arguments of one :meth:`MAGS.observe_many` item (a text, dict or tuple)."""
    if isinstance(item, str):
        return (item,)
    if isinstance(item, dict):
        bad = set(item) - set(_TURN_KEYS)
        if bad or "text" not in item:
            raise ValueError(f"items[{i}]: a turn dict needs 'text' and may hold {_TURN_KEYS[1:]}, "
                             f"got keys {sorted(item)}")
        return tuple(item.get(k) for k in _TURN_KEYS)
    if isinstance(item, (tuple, list)) and 1 <= len(item) <= 4:
        return tuple(item)
    raise TypeError(f"items[{i}]: a turn is a text, a dict with 'text' (and 'source', 'time', 'speaker') or a "
                    f"tuple (text[, source[, time[, speaker]]]), got {item!r:.80}")


def find_trained_model(role: str, *, run_tag: str = "default", backend: str = "llamacpp",
                       models_root: str | Path | None = None) -> Path:
    """The trained model of ``role`` from run ``run_tag`` (``models/<role>/<run_tag>/``).

    See :func:`mags_lib.training.layout.find_trained_model`: the transformers backend gets the final
    stage's PEFT adapter folder, llama.cpp a GGUF of ``gguf/`` (written by the export notebook); run
    tags are never mixed, and the error lists the runs that exist.
    """
    from .training.layout import find_trained_model as _find

    return _find(role, run_tag=run_tag, backend=backend, models_root=models_root)


# ------------------------------------------------------------------------------------------------
class MAGS:
    """A frozen language model with a Liquid Knowledge Graph memory (see the module docstring).

    Parameters
    ----------
    config : MAGSConfig
    graph : LiquidGraph, optional
        An existing graph (e.g. loaded); a fresh one otherwise.
    embedder : Embedder, optional
        Overrides ``config.embedder``.
    backends : dict, optional
        ``{role: Backend}`` to reuse already loaded backends (not closed by :meth:`close`).
    """

    def __init__(self, config: MAGSConfig | None = None, *, graph: Any = None, embedder: Any = None,
                 backends: dict | None = None) -> None:
        from .embed import load_embedder
        from .graph import LiquidGraph

        self.config = config or MAGSConfig()
        self.embedder = embedder if embedder is not None else load_embedder(self.config.embedder)
        self.graph = graph if graph is not None else LiquidGraph(
            self.embedder, config=self.config.graph_config(), seed=self.config.seed)
        self.model_paths = self._resolve_models()
        self._backends: dict[str, Any] = {}  # cache key -> backend
        self._owned: list[Any] = []
        self._role_backend: dict[str, Any] = dict(backends or {})
        self.n_observations = 0
        self.n_asks = 0
        self.memory_tokens: list[int] = []  # memory tokens per ask, in order
        self.latencies: dict[str, list[float]] = {"observe": [], "ask": []}
        self._turn = 0
        self.consolidated: Path | None = None  # the answer model's consolidation adapter (mags_lib.consolidation)
        self._snapshot_adapter: dict[str, Path | None] = {}  # snapshot id -> the adapter it was taken with

    # -- construction ----------------------------------------------------------------------------
    @classmethod
    def default(cls, **kw: Any) -> MAGS:
        """A MAGS system on the embedded models (CPU, llama.cpp, fresh graph).

        Every keyword is a :class:`MAGSConfig` field, e.g. ``backend="transformers"``,
        ``models="trained"`` (with ``trained_tag="default"``), ``write_model="models/write/run1/gguf/model-q8_0.gguf"``,
        ``dynamics=False`` or ``dynamics={"game_of_life": False}``, ``recall_k=5``,
        ``memory_token_budget=128``, ``router="model"``, ``embedder="hash"``.
        The models are checked now (a missing one raises at once) and loaded on first use.
        """
        return cls(MAGSConfig(**kw))

    def _resolve_models(self) -> dict[str, str | None]:
        """Model spec per role (None = embedded), checking that each exists."""
        from .models import resolve_model

        c = self.config
        out: dict[str, str | None] = {}
        for role in _ROLES:
            explicit = getattr(c, f"{role}_model")
            if explicit is not None and str(explicit).lower() not in _EMBEDDED:
                out[role] = str(explicit)
            elif explicit is None and c.models == "trained" and role in ("ask", "write", "answer"):
                out[role] = str(find_trained_model(role, run_tag=c.trained_tag, backend=c.backend,
                                                   models_root=c.models_root))
            else:
                out[role] = None
        if out["router"] is None:
            out["router"] = out["answer"]
        for spec in out.values():
            if spec is not None:
                resolve_model(spec, models_root=c.models_root)  # fails fast with a clear message
        return out

    def backend(self, role: str) -> Any:
        """The loaded backend serving ``role`` (loaded on first use; one per distinct model)."""
        if role not in _ROLES:
            raise ValueError(f"unknown role {role!r}; roles: {_ROLES}")
        if role in self._role_backend:
            return self._role_backend[role]
        from .backends import load_backend

        c = self.config
        spec = self.model_paths[role]
        key_name = c.backend.lower().replace(".", "").replace("_", "")
        key = (c.backend, spec, role if (c.context_per_role and key_name == "llamacpp") else None)
        b = self._backends.get(key)
        if b is None:
            kw = dict(c.backend_kwargs)
            if key_name == "llamacpp":
                kw.setdefault("n_ctx", c.n_ctx)
                kw.setdefault("seed", c.seed)
            if c.n_threads is not None and key_name in ("llamacpp", "transformers"):
                kw.setdefault("n_threads", c.n_threads)
            b = load_backend(c.backend, spec, **kw)
            self._backends[key] = b
            self._owned.append(b)
        self._role_backend[role] = b
        return b

    def prompt_spec(self, role: str) -> Any:
        """The :class:`~mags_lib.roles.PromptSpec` the agent uses for ``role``: the one the role's model
        was trained with (its meta.json), else the base prompt of :data:`mags_lib.roles.ROLE_SPECS`,
        with this config's explicit overrides (few-shot count, token budget, grammar bounds) applied."""
        from .roles import prompt_for_model

        if role not in ("ask", "write", "answer"):
            raise ValueError(f"prompt specs exist for ask, write and answer, not {role!r}")
        spec = prompt_for_model(role, self.model_paths[role])
        c = self.config
        over = {"few_shot": {"ask": c.few_shot_ask, "write": c.few_shot_write}.get(role),
                "max_new_tokens": getattr(c, f"max_new_tokens_{role}")}
        if role != "answer":
            over.update(max_ops=c.max_ops, max_field_chars=c.max_field_chars, max_object_chars=c.max_object_chars)
        over = {k: v for k, v in over.items() if v is not None}
        return dataclasses.replace(spec, **over) if over else spec

    def grammar_for(self, role: str, *, nonempty: bool = False) -> str:
        """The GBNF grammar the agent uses for ``role`` (its prompt spec's bounds)."""
        if role == "router":
            return ROUTER_GRAMMAR
        return self.prompt_spec(role).grammar(nonempty=nonempty)

    # -- model calls -----------------------------------------------------------------------------
    def extract_many(self, texts: Sequence[str], role: str = "write", *, grammar: bool | None = None,
                     few_shot: int | None = None, nonempty: bool = False) -> list[Extraction]:
        """Raw model outputs for ``role`` ("ask" or "write") on each text, with their parses.

        Parameters
        ----------
        texts : list of str
        role : {"ask", "write"}
        grammar : bool, optional
            Constrain decoding with the role's GBNF grammar (default: ``config.grammar``).
        few_shot : int, optional
            Few-shot examples (default: the role's prompt spec, see :meth:`prompt_spec`).
        nonempty : bool
            With a grammar, require at least one operation.

        With a grammar, decoding uses :meth:`grammar_for` (bounded tags: outputs always end and
        parse strictly); without, the model is free (its strict parse measures adherence).
        """
        if role not in ("ask", "write"):
            raise ValueError(f"role must be 'ask' or 'write', got {role!r}")
        texts = [self._check_text(t) for t in texts]
        c = self.config
        spec = self.prompt_spec(role)
        if few_shot is not None:
            spec = dataclasses.replace(spec, few_shot=few_shot)
        use_grammar = c.grammar if grammar is None else grammar
        gbnf = None
        if use_grammar:
            b = self.backend(role)
            if not b.supports_grammar:
                if grammar:
                    raise ValueError(f"grammar=True but the {b.name!r} backend has no constrained "
                                     "decoding; use backend='llamacpp'")
            else:
                gbnf = spec.grammar(nonempty=nonempty)
        prompts = [spec.messages(t) for t in texts]
        gens = self.backend(role).generate(prompts, max_new_tokens=spec.max_new_tokens, temperature=c.temperature,
                                           grammar=gbnf, stop=list(spec.stop) or None, seed=c.seed,
                                           stop_repeats=c.stop_repeats and spec.stop_repeats)
        return [Extraction(input=t, role=role, text=g.text, strict=P.parse(g.text, role=role),
                           lenient=P.parse(g.text, role=role, mode="lenient"),
                           n_new_tokens=g.n_new_tokens, seconds=g.seconds)
                for t, g in zip(texts, gens)]

    def extract(self, text: str, role: str = "write", *, grammar: bool | None = None) -> list[P.Op]:
        """The model's memory operations for ``text`` (raw, for evaluation): a list of :class:`Op`.

        Parsed leniently; use :meth:`extract_many` for the raw text and the strict parse.
        """
        return self.extract_many([text], role, grammar=grammar)[0].ops

    def route(self, text: str) -> str:
        """``"store"`` or ``"answer"`` for an input (``config.router``: rule or model)."""
        text = self._check_text(text)
        if self.config.router == "rule":
            return rule_route(text)
        c = self.config
        prompt = P.build_messages("router", text, few_shot=c.few_shot_router)
        g = self.backend("router").generate([prompt], max_new_tokens=3, temperature=0.0,
                                            grammar=ROUTER_GRAMMAR if self.config.grammar
                                            and self.backend("router").supports_grammar else None)[0]
        word = g.text.strip().lower()
        if word.startswith("answer") or word.startswith("ask"):
            return "answer"
        if word.startswith("store"):
            return "store"
        return rule_route(text)  # unparseable reply (no grammar): fall back to the rule

    # -- the loop ----------------------------------------------------------------------------------
    def _check_text(self, text: Any) -> str:
        from .graph.values import clean_text

        if not isinstance(text, str):
            raise TypeError(f"expected text (str), got {type(text).__name__}")
        if not text.strip():
            raise ValueError("empty text: pass a non-empty observation or question")
        return clean_text(text.strip())

    def observe(self, text: str, source: str | None = None, time: str | None = None,
                speaker: str | None = None) -> Observation:
        """Store an observation: an episodic node, then the write model's triplets (engram).

        A turn applies whole or not at all: the write model runs before the memory is touched, and
        the memory's changes (episode, facts, the periodic ``maintain``, the log) run in one
        :meth:`LiquidGraph.transaction`; if anything raises, the memory, the turn counter and the
        latencies are as before the call.

        With ``config.memory`` other than ``"graph"`` no model runs: ``"rag"`` and
        ``"full_context"`` store the episode only (never updated by the dynamics), ``"none"``
        stores nothing. :meth:`observe_many` stores a whole list of turns, batching the model calls.

        Parameters
        ----------
        text : str
            Any text; lone surrogates become U+FFFD (see :mod:`mags_lib.graph.values`).
        source : str or int, optional
            Source id (e.g. ``"D1:3"``) carried by the episode and every derived node and fact;
            default ``"T<turn>"``.
        time : str, date or datetime, optional
            When it was said (e.g. ``"2023-05-08"``, ``datetime.date(2023, 5, 8)`` or LoCoMo's
            ``"1:56 pm on 8 May, 2023"``), stored as an ISO string. With ``config.resolve_dates``,
            relative dates are resolved against it: a written subject or object that is only one
            ("yesterday") is stored as the date it names, and the reader sees the turn's text with
            each one's date next to it (see :meth:`render_item`).
        speaker : str, optional
            Who said it: kept on the episode, shown to the reader, given to the write model as
            ``"<speaker>: <text>"`` (``config.write_speaker``), and first-person words of the written
            facts ("I", "me", "my ...") are resolved to this name.
        """
        import time as _time

        t0 = _time.perf_counter()
        turn = self._observation_args(text, source, time, speaker)
        # the model call first: if it fails (context overflow, a broken model file), nothing changed
        ext = self.extract_many([self._write_input(turn[0], turn[3])], "write",
                                nonempty=self.config.write_nonempty)[0] if self.config.memory == "graph" else None
        return self._store_turn(*turn, ext, t0=t0)

    def observe_many(self, items: Sequence[Any], *, batch_size: int = 32,
                     progress: bool | None = None) -> list[Observation]:
        """Store many observations in order: the memory :meth:`observe` called on each would build.

        The write model runs on ``batch_size`` turns per call (the backends' ``generate`` takes a
        list of prompts); each turn's triplets are then engrammed in order, with the periodic
        ``maintain`` where the loop would run it. The graph, its operation log, the episodes and the
        provenance equal the loop's whenever the backend answers a prompt in a batch as it answers it
        alone (llama.cpp decodes the prompts one after another; a transformers batch is left-padded,
        which can change a greedy output in rare cases, and sampling with ``temperature > 0`` draws
        differently).

        **All or nothing for the whole call**: every item is checked before the first model call,
        and the turns' changes run in one :meth:`LiquidGraph.transaction`; if a model call or a turn
        raises, the memory, the turn counter and the latencies are as before the call -- never a
        half-applied turn, and no turn of the call is kept. To keep what a very long list already
        stored when a later turn may fail, call it per chunk (a session, say).

        Parameters
        ----------
        items : sequence
            One per turn: a text, a dict with ``"text"`` and optional ``"source"``, ``"time"``,
            ``"speaker"``, or a tuple ``(text[, source[, time[, speaker]]])`` -- the arguments of
            :meth:`observe`.
        batch_size : int
            Turns per write-model call.
        progress : bool, optional
            Show a progress bar (tqdm); default: for 100 turns or more.

        Returns
        -------
        list of Observation
            One per item, in order; ``seconds`` is the turn's share of its batch's model call plus
            its own memory changes.
        """
        import contextlib
        import time as _time

        from tqdm.auto import tqdm

        if isinstance(items, (str, bytes, dict)) or not isinstance(items, Sequence):
            raise TypeError(f"observe_many takes a list of turns (texts, dicts or tuples), got {type(items).__name__}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        turns = []
        for i, x in enumerate(items):  # every item checked before the first model call
            try:
                turns.append(self._observation_args(*_turn_fields(x, i)))
            except (TypeError, ValueError) as exc:
                raise type(exc)(exc.args[0] if str(exc).startswith("items[") else f"items[{i}]: {exc}") from exc
        c = self.config
        counters = (self._turn, self.n_observations, {k: len(v) for k, v in self.latencies.items()})
        out: list[Observation] = []
        bar = tqdm(total=len(turns), desc="observe", unit="turn",
                   disable=not (len(turns) >= 100 if progress is None else progress))
        try:
            # one transaction for the call (a failure undoes every turn of it); the turns inside need none
            with self.graph.transaction() if c.memory != "none" else contextlib.nullcontext():
                for start in range(0, len(turns), batch_size):
                    chunk = turns[start:start + batch_size]
                    t0 = _time.perf_counter()
                    exts = (self.extract_many([self._write_input(t[0], t[3]) for t in chunk], "write",
                                              nonempty=c.write_nonempty)
                            if c.memory == "graph" else [None] * len(chunk))
                    share = (_time.perf_counter() - t0) / len(chunk)
                    for turn, ext in zip(chunk, exts):
                        out.append(self._store_turn(*turn, ext, t0=_time.perf_counter() - share, atomic=False))
                    bar.update(len(chunk))
        except BaseException:
            self._turn, self.n_observations = counters[0], counters[1]
            for k, n in counters[2].items():
                del self.latencies[k][n:]
            raise
        finally:
            bar.close()
        return out

    def _observation_args(self, text: Any, source: Any = None, time: Any = None,
                          speaker: Any = None) -> tuple[str, str | None, str | None, str | None]:
        """:meth:`observe`'s arguments checked and normalised (nothing changes before this passes)."""
        from .graph.core import _clean_speaker
        from .graph.values import clean_source, clean_time

        return self._check_text(text), clean_source(source), clean_time(time), _clean_speaker(speaker)

    def _write_input(self, text: str, speaker: str | None) -> str:
        """What the write model reads of a turn: ``"<speaker>: <text>"`` with a speaker and
        ``config.write_speaker``, else the text."""
        return f"{speaker}: {text}" if speaker is not None and self.config.write_speaker else text

    def _store_turn(self, text: str, source: str | None, time: str | None, speaker: str | None,
                    ext: Extraction | None, *, t0: float, atomic: bool = True) -> Observation:
        """One observed turn's memory changes, from the write model's output ``ext`` (None: no model).

        ``atomic``: inside its own graph transaction (:meth:`observe`); :meth:`observe_many` runs
        every turn inside one transaction of its own."""
        import contextlib
        import time as _time

        turn = self._turn + 1
        source = source if source is not None else f"T{turn}"
        c = self.config
        triplets, dropped = [], []
        if ext is not None:
            triplets = list(dict.fromkeys(resolve_speaker(t, speaker) for t in ext.lenient.triplets))
            # first person is resolved to the speaker above, and the speaker's name grounds nothing
            dropped = [t for t in triplets if not grounded(t, text, speaker)] if c.write_grounding else []
            triplets = [t for t in triplets if t not in dropped]
            if c.resolve_dates and time is not None:  # after grounding: "yesterday" grounds, its date need not
                triplets = list(dict.fromkeys(resolve_triplet_dates(t, time) for t in triplets))
        maintained = report = ep = None
        if c.memory != "none":
            # the turn's changes to the memory apply whole or not at all
            with self.graph.transaction() if atomic else contextlib.nullcontext():
                ep = self.graph.add_episode(text, source=source, time=time, speaker=speaker)
                if c.memory == "graph":
                    report = self.graph.engram(triplets, episode=ep, source=source, time=time)
                    if c.dynamics_on and c.maintain_every and (self.n_observations + 1) % c.maintain_every == 0:
                        maintained = self.graph.maintain()
        self._turn = turn
        self.n_observations += 1
        dt = _time.perf_counter() - t0
        self.latencies["observe"].append(dt)
        return Observation(text=text, source=source, time=time, episode=ep, triplets=triplets,
                           extraction=ext, report=report, maintained=maintained, seconds=dt, dropped=dropped,
                           speaker=speaker)

    def render_item(self, item: Any) -> str:
        """One recall item as the reader sees it (:func:`mags_lib.protocol.format_item`).

        An episode shows its date and speaker, and ``no longer true since <date>`` when every fact it
        stated was superseded (the date the last of them was); a fact the start of its validity
        interval (when it was first said) and, when superseded, ``no longer true since <date>`` (when
        the superseding observation was said); a date is left out where no time was given (ticks are
        not dates). With ``config.resolve_dates``, each relative date of the text is followed by the date
        it names, resolved against that time (``yesterday [7 May 2023]``,
        :func:`mags_lib.graph.dates.annotate_relative_dates`): the episode's time for an episode, for a
        fact the time it was first said. Items the graph does not know (hand-made) show their text.
        """
        text, time_, current, speaker, until = self._item_fields(item)
        style = self.config.date_style
        return P.format_item(text, time=_date_part(time_, style), current=current, speaker=speaker,
                             until=_date_part(until, style))

    def _item_fields(self, item: Any) -> tuple[str, str | None, bool | None, str | None, str | None]:
        """What :meth:`render_item` shows of ``item``: text, time, current, speaker, until."""
        g = self.graph
        time_, current, speaker, until = None, None, None, None
        node_id = getattr(item, "node_id", None)
        edge_id = getattr(item, "edge_id", None)
        try:
            if getattr(item, "kind", None) == "episode" and node_id is not None:
                d = g.node(node_id)
                time_, speaker = d.get("time"), g.nodes.meta[g._idx(node_id)].get("speaker")
                if self.config.memory == "graph" and g.episode_current(node_id) is False:
                    current, until = False, g.episode_until(node_id)
            elif edge_id is not None:
                e = g.edge(edge_id)
                current = bool(e["valid"])
                time_ = e["valid_from"] if isinstance(e["valid_from"], str) else None
                if time_ is None:  # no time in the interval: the first dated episode that said it
                    times = [g.node(x).get("time") for x in e["episodes"] if _alive_node(g, x)]
                    time_ = next((t for t in times if t), None)
                until = e["valid_to"] if isinstance(e["valid_to"], str) else None
        except KeyError:  # not (or no longer) in this graph: the bare text
            pass
        text = item.text
        if self.config.resolve_dates and time_ is not None:
            from .graph.dates import annotate_relative_dates

            text = annotate_relative_dates(text, time_)
        return text, time_, current, speaker, until

    def pack_facts(self, items: Sequence[Any], budget: int | None = None, *,
                   contiguous: bool = False) -> tuple[list[str], int, list]:
        """Memory lines from ranked recall items, best first, within the token budget.

        Each item is rendered by :meth:`render_item` (date, speaker, ``no longer true``). Returns the
        lines, the token count of the memory block they make (:func:`mags_lib.protocol.format_facts`,
        measured with the answer model's tokenizer) and the items they came from. Items whose
        normalised line repeats an earlier one are skipped, and so is an item that does not fit in
        what is left of the budget: the next ones may still fit. ``contiguous``: packing ends at the
        first item that does not fit instead (a history newest first keeps an unbroken run of the newest
        observations, never a short older one past a gap: the ``full_context`` memory).
        """
        budget = self.config.memory_token_budget if budget is None else int(budget)
        b = self.backend("answer")
        facts: list[str] = []
        used_items: list = []
        seen: set[str] = set()
        used = b.count_tokens(P.format_facts(["x"]).split("\n")[0])  # the "Memory:" header line
        for it in items:
            if not it.text.strip():
                continue
            line = self.render_item(it)
            key = P.normalize_text(line)
            if key in seen:
                continue
            cost = b.count_tokens(f"{len(facts) + 1}. {line}\n")
            if used + cost > budget:
                if contiguous:
                    break  # the rest is older than what did not fit: keeping some of it would leave a gap
                continue  # too long for what is left: a shorter item further down may fit
            facts.append(line)
            used_items.append(it)
            seen.add(key)
            used += cost
        return facts, (b.count_tokens(P.format_facts(facts)) if facts else 0), used_items

    def in_time_order(self, facts: list[str], tokens: int, items: list) -> tuple[list[str], int, list]:
        """:meth:`pack_facts`'s lines (and items) as the reader is shown them: the dated ones oldest first, in
        the places the dated ones held, undated ones where they were
        (:func:`mags_lib.graph.values.chronological_order`); the token count stays (each line keeps its text).

        Recall ranks items best first; the reader is trained on memory blocks in this order (the answer data of
        :mod:`mags_lib.data.answer`), so the later of two dated values of the same thing is the later line.
        """
        from .graph.values import chronological_order

        order = chronological_order([self._item_fields(it)[1] for it in items])
        return [facts[i] for i in order], tokens, [items[i] for i in order]

    def _answer_window(self, b: Any) -> int:
        """The answer model's context window in tokens: the loaded backend's own ``n_ctx`` where it has one
        (llama.cpp: ``backend_kwargs`` or a backend passed in may differ from ``config.n_ctx``), else
        ``config.n_ctx``, capped by the model's ``max_position_embeddings`` where the backend exposes it."""
        n = getattr(b, "n_ctx", None)
        if isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n > 0:
            return int(n)
        limit = getattr(getattr(getattr(b, "model", None), "config", None), "max_position_embeddings", None)
        if isinstance(limit, (int, np.integer)) and not isinstance(limit, bool) and limit > 0:
            return min(self.config.n_ctx, int(limit))
        return self.config.n_ctx

    def _full_context(self, question: str) -> tuple[list[str], int, list]:
        """The ``full_context`` memory: raw observations, newest kept, as many as fit the window.

        The room is what the answer model's window (:meth:`_answer_window`) leaves after the answer and the
        prompt itself: the reader's rendered prompt for this question with an empty memory block, counted by
        its tokenizer (never less than ``memory_token_budget``; a fixed 256-token allowance left ~200 tokens
        of SmolLM2's 2,048 unused); the kept observations are an unbroken run of the newest (packing stops at
        the first that does not fit), shown oldest first.
        """
        from .graph.model import RecallItem

        c = self.config
        b = self.backend("answer")
        spec = self.prompt_spec("answer")
        msgs = spec.messages(question, facts=[])
        render = getattr(b, "render", None)  # a duck-typed backend without a chat template: the messages' text
        prompt = b.count_tokens(render(msgs) if callable(render) else "\n".join(m["content"] for m in msgs))
        # ("Memory:" is counted again by the packing below: a margin of a few tokens)
        room = self._answer_window(b) - spec.max_new_tokens - prompt
        eps = self.graph.episodes()
        items = [RecallItem(text=d["text"], triplet=None, score=0.0,
                            sources=() if d["source"] is None else (d["source"],), path=(d["id"],),
                            kind="episode", edges=(), node_id=d["id"]) for d in reversed(eps)]
        facts, _, used = self.pack_facts(items, budget=max(room, c.memory_token_budget), contiguous=True)
        facts, used = facts[::-1], used[::-1]
        return facts, (b.count_tokens(P.format_facts(facts)) if facts else 0), used

    def ask(self, question: str, *, time: str | None = None, k: int | None = None, recall: bool = True) -> Answer:
        """Answer a question from memory: ask model -> recall -> answer model.

        Like :meth:`observe`, all or nothing: if a model call fails, the memory (touched by the
        recall) and the counters are as before the call.

        Parameters
        ----------
        question : str
        time : str, date or datetime, optional
            When the question is asked; recorded on the returned :class:`Answer` (``.time``, as
            :meth:`observe` records times: an ISO string), not given to the models.
        k : int, optional
            Items recalled (default ``config.recall_k``).
        recall : bool
            ``False``: closed-book -- no ask model, no recall, an empty memory block; the answer model
            answers from its weights (with a consolidation adapter, see :meth:`set_consolidated`).

        Returns
        -------
        Answer
            ``.answer``, ``.facts`` (as given to the answer model), ``.trace`` (the recall trace),
            ``.memory_tokens``, ``.timings``.
        """
        import time as _time

        from .graph.values import clean_time

        t0 = _time.perf_counter()
        question = self._check_text(question)
        if not isinstance(recall, (bool, np.bool_)):
            raise TypeError(f"recall must be True or False, got {recall!r}")
        time = clean_time(time)  # as observe() records it: an ISO string, or the text given
        c = self.config
        if not recall:
            return self._ask_closed_book(question, time, t0)
        k = c.recall_k if k is None else k
        ext = self.extract_many([question], "ask")[0] if c.memory == "graph" else None
        t1 = _time.perf_counter()
        queries = ([question] if c.question_as_query or ext is None else []) + (ext.lenient.asks if ext else [])
        queries = list(dict.fromkeys(q.strip() for q in queries if q.strip()))[: c.max_queries]
        if not queries:
            queries = [question]
        with self.graph.transaction():  # recall touches the memory: undone if the answer model fails
            if c.memory == "graph":
                res = self.graph.recall(queries, k=k, history=self._asks_history(question))
            else:
                from .graph.model import Recall, RecallTrace

                hits = self.graph.search_episodes(question, k=k) if c.memory == "rag" else []
                res = Recall(items=hits, trace=RecallTrace(queries=list(queries)))
            if c.memory == "full_context":
                facts, mem_tokens, used_items = self._full_context(question)
            elif c.memory == "none":
                facts, mem_tokens, used_items = [], 0, []
            else:
                facts, mem_tokens, used_items = self.in_time_order(*self.pack_facts(res.items))
            t2 = _time.perf_counter()  # the memory block is built: reading memory is the recall step's time
            gen, by_adapter = self._answer(question, facts)
        t3 = _time.perf_counter()
        self.n_asks += 1
        self.memory_tokens.append(mem_tokens)
        self.latencies["ask"].append(t3 - t0)
        return Answer(question=question, answer=gen.text.strip(), facts=facts, trace=res.trace, recall=res,
                      queries=queries, memory_tokens=mem_tokens, extraction=ext,
                      timings={"ask": t1 - t0, "recall": t2 - t1, "answer": t3 - t2}, seconds=t3 - t0,
                      items=used_items, time=time, consolidated=by_adapter)

    def _answer(self, question: str, facts: list) -> tuple[Any, bool]:
        """The answer model's generation for ``question`` over ``facts``, through the consolidation adapter as
        ``config.consolidated_when`` says: ``always``; ``closed_book``: only for an empty ``facts``; ``fallback``:
        for an empty ``facts``, or closed-book when the answer model alone abstained over ``facts``. Returns the
        generation and whether the adapter gave it."""
        from .metrics import is_abstention

        c = self.config
        spec = self.prompt_spec("answer")
        b = self.backend("answer")
        kw = {"max_new_tokens": spec.max_new_tokens, "temperature": c.temperature, "seed": c.seed,
              "stop": list(spec.stop if c.answer_stop is None else c.answer_stop) or None}
        name = self.consolidated_adapter_name()
        if name is None or (facts and c.consolidated_when != "always"):
            gen = b.generate([spec.messages(question, facts=facts)], **kw)[0]
            if name is None or c.consolidated_when == "closed_book" or not is_abstention(gen.text):
                return gen, False
            facts = []  # fallback: what was recalled holds no answer; the adapter answers from what it learnt
        prev = b.active_adapter
        b.set_adapter(name)  # only around the answer: ask/write/router may share this backend
        try:
            return b.generate([spec.messages(question, facts=facts)], **kw)[0], True
        finally:
            b.set_adapter(prev)

    def consolidated_adapter_name(self) -> str | None:
        """The answer backend's name for the consolidation adapter in use (loaded on first use), or None."""
        if self.consolidated is None:
            return None
        from .consolidation import runtime_adapter

        b = self.backend("answer")
        path = str(runtime_adapter(self.consolidated, self.config.backend))
        name = next((n for n, p in b.adapters.items() if p == path), None)
        if name is None:
            name = f"consolidated-{len(b.adapters)}"
            b.load_adapter(name, path)
        return name

    def _ask_closed_book(self, question: str, time: str | None, t0: float) -> Answer:
        import time as _time

        gen, by_adapter = self._answer(question, [])
        t3 = _time.perf_counter()
        self.n_asks += 1
        self.memory_tokens.append(0)
        self.latencies["ask"].append(t3 - t0)
        return Answer(question=question, answer=gen.text.strip(), facts=[], trace=None, recall=None, queries=[],
                      memory_tokens=0, extraction=None, timings={"ask": 0.0, "recall": 0.0, "answer": t3 - t0},
                      seconds=t3 - t0, time=time, kind="ask_closed_book", consolidated=by_adapter)

    def set_consolidated(self, adapter: str | Path | None) -> None:
        """Serve the answer model with a consolidation adapter folder (``None``: the model alone).

        :func:`mags_lib.consolidation.consolidate` calls it; :meth:`rollback` restores the adapter a
        snapshot was taken with. Refused for ``memory="none"``: the no-memory baseline would answer from the
        memory's facts written into the weights.
        """
        if adapter is not None:
            from .consolidation import check_adapter_fits

            if self.config.memory == "none":
                raise ValueError(f"memory='none' is the baseline without memory: it cannot answer through the "
                                 f"consolidation adapter {adapter}, which holds a memory's facts in its weights; use "
                                 "memory='graph' (or 'rag' / 'full_context') with it")

            adapter = Path(adapter)
            if not (adapter / "adapter_config.json").is_file():
                raise FileNotFoundError(f"{adapter} is not a PEFT adapter folder (no adapter_config.json)")
            check_adapter_fits(adapter, self)
        self.consolidated = adapter

    def turn(self, text: str, source: str | None = None, time: str | None = None,
             speaker: str | None = None) -> Observation | Answer:
        """One conversational turn: the router decides between :meth:`observe` and :meth:`ask`."""
        return self.ask(text, time=time) if self.route(text) == "answer" else self.observe(
            text, source=source, time=time, speaker=speaker)

    def _asks_history(self, question: str) -> bool | None:
        """True when the question asks about the past and the graph's recall is in ``history="auto"``
        mode: the ask model's queries may drop the words that said so ("before", "used to")."""
        from .graph.recall import asks_about_past

        rc = self.graph.config.recall
        return True if rc.history == "auto" and asks_about_past(question, rc.past_markers) else None

    def recall(self, query: str | Sequence[str], k: int = 10, history: bool | None = None) -> list[Any]:
        """Ranked memory items for a query (no language model involved).

        Each item has ``.text``, ``.score``, ``.sources`` (source ids), ``.path``, ``.kind``, and a
        fact ``.current`` (False: superseded) with its validity interval ``.valid_from`` /
        ``.valid_to``. ``history``: True returns superseded facts too, False never, None when the
        query asks about the past (``RecallConfig.history``; graph memory only).
        """
        if isinstance(query, str):
            query = self._check_text(query)
        elif not query:
            raise ValueError("recall needs a query or a non-empty list of queries")
        mode = self.config.memory
        if mode == "graph":
            return list(self.graph.recall(query, k=k, history=history).items)
        if mode == "rag":
            return self.graph.search_episodes(query, k=k)
        return []  # "none" and "full_context" rank nothing (full context is every observation, in order)

    def feedback(self, answer: Answer, reward: float = 1.0) -> None:
        """Reinforce the recall paths that led to a rewarded answer (negative reward weakens).

        Only the graph memory learns; the other memory modes are static (nothing changes).
        """
        if not isinstance(answer, Answer):
            raise TypeError(f"feedback needs the Answer returned by ask(), got {type(answer).__name__}")
        if self.config.memory == "graph":
            if answer.recall is None:
                raise ValueError("this answer recalled nothing (closed book: ask(..., recall=False), or a consolidated "
                                 "answer without memory): there are no memory paths to reinforce")
            self.graph.reinforce(answer.recall, reward=reward)

    def maintain(self) -> Any:
        """One tick of the enabled graph dynamics (None for the static memory modes: nothing changes)."""
        return self.graph.maintain() if self.config.memory == "graph" else None

    # -- state ---------------------------------------------------------------------------------
    def transaction(self) -> Any:
        """All or nothing for the memory and the consolidation adapter: :meth:`LiquidGraph.transaction` (the graph,
        its log and its snapshots), and the adapter in use and the one each snapshot was taken with. A context
        manager; :func:`mags_lib.consolidation.consolidate` trains and serves a version inside one."""
        import contextlib

        @contextlib.contextmanager
        def block():
            adapter, by_snapshot = self.consolidated, dict(self._snapshot_adapter)
            try:
                with self.graph.transaction():
                    yield self
            except BaseException:  # the graph and its snapshots are back: the adapters go with them
                self.consolidated = adapter
                self._snapshot_adapter = {k: v for k, v in by_snapshot.items() if k in self.graph.snapshots}
                raise

        return block()

    def snapshot(self) -> str:
        """Snapshot the memory (and the consolidation adapter in use); returns its id for :meth:`rollback`."""
        sid = self.graph.snapshot()
        self._snapshot_adapter[sid] = self.consolidated
        for old in set(self._snapshot_adapter) - set(self.graph.snapshots):  # dropped by the graph's limits
            del self._snapshot_adapter[old]
        return sid

    def rollback(self, sid: str) -> None:
        """Restore the memory to snapshot ``sid``, and the consolidation adapter it was taken with (a snapshot
        taken by the graph itself, ``m.graph.snapshot()``, names no adapter: the one in use stays)."""
        self.graph.rollback(sid)
        if sid in self._snapshot_adapter:
            self.consolidated = self._snapshot_adapter[sid]

    def drop_snapshot(self, sid: str) -> None:
        """Free snapshot ``sid`` (``KeyError`` if unknown). ``config.graph.limits`` bounds how many are kept."""
        self.graph.drop_snapshot(sid)
        self._snapshot_adapter.pop(sid, None)

    def save(self, path: str | Path) -> Path:
        """Save memory and configuration to folder ``path`` (``mags.json`` + ``graph/``), crash-safely.

        The folder is written beside ``path`` and swapped in by renames (the mechanism of graph
        saves, :mod:`mags_lib.graph.atomic`): after a crash at any point, :meth:`load` finds the
        previous save or the new one. ``mags.json`` carries a checksum of its content. Models are
        not copied: the configuration names them.
        """
        from .graph import atomic

        state = {"format": _FORMAT, "version": _FORMAT_VERSION, "config": self.config.to_dict(),
                 "n_observations": self.n_observations, "n_asks": self.n_asks, "turn": self._turn,
                 "memory_tokens": list(self.memory_tokens), "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        if self.consolidated is not None:  # the adapter stays where it is: the save names it
            state["consolidated"] = str(self.consolidated.resolve())
        state["checksum"] = atomic.json_checksum(state)
        data = json.dumps(state, indent=1, allow_nan=False).encode("utf-8")

        def fill(tmp: Path) -> None:
            self.graph.save(tmp / "graph")
            atomic.write_file(tmp / "mags.json", data, tmp)  # last: its presence marks a complete save

        return atomic.save_dir(path, fill, is_save=_is_mags_save, what="saved MAGS folder")

    @classmethod
    def load(cls, path: str | Path, *, embedder: Any = None, backends: dict | None = None,
             consolidated: Any = "saved", **overrides: Any) -> MAGS:
        """Load a folder written by :meth:`save`; keywords override configuration fields.

        ``embedder`` is a loaded embedder to reuse, or an embedder name (the config field, e.g.
        ``"hash"``). ``backends`` (``{role: Backend}``) reuses already loaded models. ``consolidated``:
        ``"saved"`` serves the consolidation adapter the save names (a missing one raises, saying so; none with
        ``memory="none"``, the baseline without memory), ``None`` loads the memory without it, a folder serves that
        adapter instead. An interrupted save
        is completed or undone first. A corrupt, hand-edited or foreign ``mags.json`` raises
        :class:`MAGSFormatError` naming the file and the field (to change settings, pass overrides
        instead of editing the file).
        """
        from .graph import LiquidGraph, atomic

        if isinstance(embedder, str):  # a name: the config field, not a loaded embedder
            overrides["embedder"], embedder = embedder, None
        if not (consolidated is None or consolidated == "saved" or isinstance(consolidated, (str, os.PathLike))):
            raise TypeError(f"consolidated must be 'saved', None or an adapter folder, got {consolidated!r}")
        path = Path(path)
        root = atomic.recover(path, is_save=_is_mags_save) if not path.is_file() else None
        meta = (root or path) / "mags.json"
        if root is None or not meta.is_file():
            raise FileNotFoundError(f"{path} is not a saved MAGS folder (no mags.json); save one with "
                                    "MAGS.save(path)")
        state = _read_mags_json(meta)
        try:
            cfg = MAGSConfig.from_dict(state["config"])
        except (TypeError, ValueError) as e:
            raise MAGSFormatError(f"{meta}: field 'config' is invalid: {e}") from e
        if overrides:
            cfg = dataclasses.replace(cfg, **overrides)
        from .embed import load_embedder

        emb = embedder if embedder is not None else load_embedder(cfg.embedder)
        # the (possibly overridden) config's graph and dynamics switches govern the loaded memory
        graph = LiquidGraph.load(root / "graph", emb, config=cfg.graph_config())
        m = cls(cfg, graph=graph, embedder=emb, backends=backends)
        m.n_observations = state["n_observations"]
        m.n_asks = state["n_asks"]
        m._turn = state["turn"]
        m.memory_tokens = list(state["memory_tokens"])
        adapter = state.get("consolidated") if consolidated == "saved" else consolidated
        if consolidated == "saved" and cfg.memory == "none":
            adapter = None  # a save loaded as the no-memory baseline: its memory, the adapter included, goes unused
        if adapter is not None:
            try:
                m.set_consolidated(adapter)
            except FileNotFoundError as e:
                if consolidated != "saved":
                    raise
                raise FileNotFoundError(f"{meta} names the consolidation adapter {adapter}, which is not there any "
                                        f"more ({e}): put the folder back, or load the memory without it with "
                                        "MAGS.load(path, consolidated=None), or with another adapter with "
                                        "consolidated=<folder>") from None
        return m

    def stats(self) -> dict:
        """Graph statistics plus turn counts, memory tokens per query and turn latencies."""
        out = dict(self.graph.stats())
        out.update(n_observations=self.n_observations, n_asks=self.n_asks)
        if self.memory_tokens:
            mt = np.asarray(self.memory_tokens, dtype=float)
            out.update(memory_tokens_mean=float(mt.mean()), memory_tokens_p50=float(np.median(mt)),
                       memory_tokens_max=int(mt.max()))
        for kind, lat in self.latencies.items():
            if lat:
                out[f"{kind}_latency_p50_s"] = float(np.percentile(lat, 50))
                out[f"{kind}_latency_p95_s"] = float(np.percentile(lat, 95))
        return out

    def close(self) -> None:
        """Close the backends this agent loaded (idempotent)."""
        for b in self._owned:
            b.close()
        self._owned.clear()
        self._backends.clear()
        self._role_backend.clear()

    def __enter__(self) -> MAGS:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        c = self.config
        return (f"MAGS(backend={c.backend!r}, models={c.models!r}, observations={self.n_observations}, "
                f"asks={self.n_asks})")


def _is_mags_save(p: Path) -> bool:
    return (p / "mags.json").is_file()


def _read_mags_json(meta: Path) -> dict:
    """Read and check ``mags.json``: format, version, checksum and every field's type."""
    from .graph import atomic

    state = atomic.read_manifest_json(
        meta.read_bytes(), str(meta), fmt=_FORMAT, version=_FORMAT_VERSION, error=MAGSFormatError,
        what="MAGS save", hint="To change settings, pass them to MAGS.load(path, field=value) instead of editing it")
    if not isinstance(state.get("config"), dict):
        raise MAGSFormatError(f"{meta}: field 'config' must be an object of MAGSConfig fields, "
                              f"got {state.get('config')!r:.60}")
    for name in ("n_observations", "n_asks", "turn"):
        v = state.get(name, 0)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise MAGSFormatError(f"{meta}: field {name!r} must be a non-negative integer, got {v!r:.60}")
        state[name] = v
    mt = state.get("memory_tokens", [])
    if not isinstance(mt, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in mt):
        raise MAGSFormatError(f"{meta}: field 'memory_tokens' must be a list of integers")
    state["memory_tokens"] = mt
    ad = state.get("consolidated")
    if ad is not None and (not isinstance(ad, str) or not ad.strip()):
        raise MAGSFormatError(f"{meta}: field 'consolidated' must be an adapter folder (a path string) or null, "
                              f"got {ad!r:.60}")
    return state
