"""Mini-scenarios for the outcome reward (issue 15): does a frozen reader answer from the memory?

A mini-scenario is a small prior memory (triplets of one world), and questions whose answers the
example's gold operations carry: for a write row the facts its input states (an update's new value
among them, with the old value in the prior memory), for an ask row the facts its questions need
(the row's ``context`` is the memory). Scenarios come from the **training worlds only**: the worlds
:func:`mags_lib.data.render.generate_role_splits` assigns to ``train`` (the first split drawn from a
fresh name registry, so :func:`training_worlds` rebuilds exactly them and no validation or test
entity ever appears here).

The scoring side lives here too, so the rewards in :mod:`mags_lib.rewards` stay thin:
:func:`write_memory` (what the reader sees after the completion's writes are stored into a
:class:`~mags_lib.graph.LiquidGraph` of the prior memory), :func:`ask_memory` (what the completion's
queries recall), :func:`score_questions` (the share answered correctly by the game's rule,
:func:`mags_lib.metrics.answer_correct`) and the default frozen reader :func:`llama_reader`
(the ``answer`` prompt of :data:`mags_lib.roles.ROLE_SPECS` on llama.cpp, loaded once per process).

Examples
--------
>>> rows = build_outcome_rows(OutcomeConfig(n=2, worlds=3, roles=("write",)), progress=False)
>>> sc = parse_scenario(rows["write"][0]["scenario"])
>>> sorted(sc), all(w.startswith("tr") for w in {r["world_id"] for r in rows["write"]})
(['memory', 'questions', 'world_id'], True)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from tqdm.auto import tqdm

from .. import protocol
from .render import ASK_KINDS, EMPTY_KINDS, WRITE_KINDS, GenerationConfig, _question, render_example
from .templates import RELATIONS_BY_KEY
from .worlds import NameRegistry, World, WorldConfig, _check_int, generate_worlds

__all__ = [
    "OutcomeConfig",
    "Reader",
    "ask_memory",
    "build_outcome_rows",
    "heldout_worlds",
    "llama_reader",
    "outcome_grpo_rows",
    "parse_scenario",
    "resolve_reader",
    "score_questions",
    "training_worlds",
    "write_memory",
]

Reader = Callable[[str, Sequence[str]], str]  # reader(question, memory_items) -> answer
_OUTCOME_ROLES = ("write", "ask")


@dataclass
class OutcomeConfig:
    """Size and mix of the outcome-reward GRPO rows (mini-scenarios from the training worlds)."""

    n: int = 200  # rows per role
    worlds: int = 300  # training worlds (GenerationConfig.worlds_train: the same worlds)
    seed: int = 0  # GenerationConfig.seed of the worlds, and the rendering seed
    memory_size: int = 8  # prior facts of a write scenario (old values of updated facts included)
    max_questions: int = 4  # questions per scenario (one per gold fact, at most this many)
    roles: tuple[str, ...] = ("write", "ask")  # roles to build rows for
    write_kinds: dict[str, float] = field(default_factory=lambda: {
        k: v for k, v in WRITE_KINDS.items() if k not in EMPTY_KINDS["write"]})  # kinds with facts
    ask_kinds: dict[str, float] = field(default_factory=lambda: {
        k: v for k, v in ASK_KINDS.items() if k not in EMPTY_KINDS["ask"]})
    world: WorldConfig = field(default_factory=WorldConfig)

    def __post_init__(self) -> None:
        for name in ("n", "worlds", "seed", "memory_size", "max_questions"):
            setattr(self, name, _check_int(getattr(self, name), f"OutcomeConfig.{name}"))
        if self.seed < 0:
            raise ValueError(f"OutcomeConfig.seed must be >= 0 (it seeds numpy), got {self.seed}")
        if self.n < 1 or self.worlds < 1:
            raise ValueError(f"OutcomeConfig needs n >= 1 and worlds >= 1, got n={self.n}, worlds={self.worlds}")
        if self.memory_size < 0 or self.max_questions < 1:
            raise ValueError("OutcomeConfig needs memory_size >= 0 and max_questions >= 1")
        self.roles = tuple(self.roles)
        if not self.roles or set(self.roles) - set(_OUTCOME_ROLES):
            raise ValueError(f"OutcomeConfig.roles must be a non-empty subset of {_OUTCOME_ROLES}, got {self.roles}")
        for label, kinds, known in (("write_kinds", self.write_kinds, WRITE_KINDS),
                                    ("ask_kinds", self.ask_kinds, ASK_KINDS)):
            unknown = set(kinds) - set(known)
            if unknown:
                raise ValueError(f"unknown {label} {sorted(unknown)}: choose from {sorted(known)}")
            if not kinds or any(v < 0 for v in kinds.values()) or sum(kinds.values()) <= 0:
                raise ValueError(f"{label} needs non-negative weights with a positive sum, got {kinds}")


def training_worlds(n: int, *, seed: int = 0, config: WorldConfig | None = None) -> list[World]:
    """The ``train`` worlds of :func:`~mags_lib.data.render.generate_role_splits` with
    ``worlds_train=n`` and this ``seed`` (ids ``tr...``): the train split is drawn first from a fresh
    registry, so these are the same worlds and share no invented name with validation or test."""
    return generate_worlds(n, seed=seed, prefix="tr", registry=NameRegistry(), config=config or WorldConfig())


def heldout_worlds(split: str = "test", *, profile: str = "default", seed: int = 0,
                   config: GenerationConfig | None = None) -> list[World]:
    """The ``validation`` or ``test`` worlds of the generated datasets of ``profile`` (the same worlds as
    :func:`~mags_lib.data.render.generate_role_splits`: the splits are drawn in order from one name
    registry), for evaluating an objective on mini-scenarios no training row ever saw.

    ``config``: the :class:`GenerationConfig` the datasets were built with (:func:`mags_lib.data.
    generation_config` reads it from their card); without it, the profile's with this ``seed``. A model
    trained on datasets of another seed would be evaluated on worlds that are not its data's held-out
    ones, so pass the card's when the datasets exist."""
    from . import profile_config

    if split not in ("validation", "test"):
        raise ValueError(f"held-out worlds are 'validation' or 'test', got {split!r}")
    cfg = config if config is not None else profile_config(profile, seed=seed)
    registry = NameRegistry()
    out = {}
    for name, n in cfg.n_worlds().items():  # train, validation, test: the order generate_role_splits draws them
        out[name] = generate_worlds(n, seed=cfg.seed, prefix=name[:2], registry=registry, config=cfg.world)
        if name == split:
            return out[name]
    raise AssertionError("unreachable")


def _relation_key(world: World, subject: str, label: str) -> str | None:
    for f in world.facts:
        if f.subject == subject and f.label == label:
            return f.relation
    return None


def _questions(world: World, gold: Sequence[Sequence[str]], rng, max_questions: int) -> list[dict]:
    out = []
    for s, label, o in gold:
        key = _relation_key(world, s, label)
        if key is None or key not in RELATIONS_BY_KEY:
            continue
        text, _ = _question(RELATIONS_BY_KEY[key], s, rng)
        out.append({"question": text, "aliases": [o], "needs": [s, label, o]})
        if len(out) >= max_questions:
            break
    return out


def _add_reverse_answers(world: World, questions: list[dict], known: Sequence[Sequence[str]]) -> None:
    """Extend each question's aliases with the other values a symmetric relation gives its subject in ``known``
    (the scenario's memory and gold facts): with "Zhasia and Stathiwan are siblings" beside the gold
    "Stathiwan and Blochaimixo are siblings", "Does Stathiwan have a brother or sister?" has two right answers."""
    from .answer import _SYMMETRIC

    key_of = {r.label: r.key for r in RELATIONS_BY_KEY.values()}
    for q in questions:
        s, label, _ = q["needs"]
        key = _relation_key(world, s, label)
        if key not in _SYMMETRIC:
            continue
        for x, lab, y in known:
            if key_of.get(lab) == key and s in (x, y):
                other = y if x == s else x
                if other != s and other not in q["aliases"]:
                    q["aliases"].append(other)


def _write_prior(world: World, gold: Sequence[Sequence[str]], size: int, rng) -> list[list[str]]:
    gold_t = {tuple(t) for t in gold}
    slots = {(t[0], t[1]) for t in gold}
    old = [f for f in world.facts if (f.subject, f.label) in slots and f.triplet not in gold_t]
    others = [f for f in world.facts if (f.subject, f.label) not in slots and f.triplet not in gold_t]
    k = max(0, min(len(others), size - len(old)))
    picked = old + ([others[i] for i in rng.choice(len(others), size=k, replace=False)] if k else [])
    return [list(picked[i].triplet) for i in rng.permutation(len(picked))]


def build_outcome_rows(config: OutcomeConfig | None = None, *, worlds: Sequence[World] | None = None,
                       split: str = "train", progress: bool = True) -> dict[str, list[dict]]:
    """``rows[role]``: ``config.n`` distinct rows per role, each a rendered example of a training world
    with a ``scenario`` column (JSON text: ``memory`` prior triplets, ``questions`` with ``question``,
    ``aliases`` and the ``needs`` triplet, ``world_id``). Seeded by ``config.seed``. ``worlds`` (with the
    ``split`` they come from, for the row ids): other worlds, e.g. :func:`heldout_worlds` for evaluation;
    training uses the default, the training worlds."""
    cfg = config or OutcomeConfig()
    if worlds is None:
        if split != "train":
            raise ValueError("pass the worlds of a held-out split (heldout_worlds) along with split=")
        worlds = training_worlds(cfg.worlds, seed=cfg.seed, config=cfg.world)
    if not worlds:
        raise ValueError("build_outcome_rows needs at least one world")
    out: dict[str, list[dict]] = {}
    for r_i, role in enumerate(_OUTCOME_ROLES):
        if role not in cfg.roles:
            continue
        rng = np.random.default_rng([cfg.seed, 15, r_i])
        kinds = cfg.write_kinds if role == "write" else cfg.ask_kinds
        names = [k for k, w in kinds.items() if w > 0]
        p = np.array([kinds[k] for k in names], dtype=float)
        p /= p.sum()
        rows, seen, attempts = [], set(), 0
        bar = tqdm(total=cfg.n, desc=f"outcome/{role}", disable=not progress, leave=False)
        while len(rows) < cfg.n:
            attempts += 1
            if attempts > 50 * cfg.n:
                raise RuntimeError(f"could only build {len(rows)} distinct outcome {role} rows out of {cfg.n}: "
                                   f"add worlds (OutcomeConfig.worlds)")
            world = worlds[(attempts - 1) % len(worlds)]
            kind = names[int(rng.choice(len(names), p=p))]
            try:
                ex = render_example(world, role, kind, rng)
            except LookupError:
                continue
            if ex["input"] in seen or not ex["gold_facts"]:
                continue
            qs = _questions(world, ex["gold_facts"], rng, cfg.max_questions)
            if not qs:
                continue
            memory = (_write_prior(world, ex["gold_facts"], cfg.memory_size, rng) if role == "write"
                      else [list(t) for t in ex["context"]])
            _add_reverse_answers(world, qs, [*memory, *ex["gold_facts"]])
            seen.add(ex["input"])
            ex["scenario"] = json.dumps({"memory": memory, "questions": qs, "world_id": world.world_id})
            ex["id"] = f"outcome-{role}-{split}-{len(rows):06d}"
            rows.append(ex)
            bar.update(1)
        bar.close()
        out[role] = rows
    return out


def outcome_grpo_rows(rows: Sequence[dict], prompt) -> list[dict]:
    """GRPO rows (``prompt`` chat messages from the role's :class:`~mags_lib.roles.PromptSpec`, plus the
    columns the rewards read: ``role``, ``response``, ``context``, ``gold_facts``, ``scenario``)."""
    out = []
    for r in rows:
        if "scenario" not in r:
            raise ValueError(f"row {r.get('id', '?')!r} has no 'scenario': build rows with build_outcome_rows()")
        out.append({"prompt": prompt.messages(r["input"]), "role": r["role"], "response": r["response"],
                    "context": r.get("context") or [], "gold_facts": r.get("gold_facts") or [],
                    "scenario": r["scenario"] if isinstance(r["scenario"], str) else json.dumps(r["scenario"])})
    return out


def parse_scenario(value) -> dict:
    """A scenario from its JSON text or mapping, checked: ``memory`` (list of triplets) and a non-empty
    ``questions`` list of ``{"question": str, "aliases": [str, ...]}``."""
    sc = json.loads(value) if isinstance(value, str) else value
    if not isinstance(sc, Mapping) or "memory" not in sc or "questions" not in sc:
        raise ValueError(f"a scenario is a mapping (or its JSON) with 'memory' and 'questions', got {value!r:.120}")
    mem = sc["memory"]
    if not isinstance(mem, (list, tuple)) or any(not isinstance(t, (list, tuple)) or len(t) != 3 for t in mem):
        raise ValueError(f"scenario 'memory' must be a list of [subject, relation, object], got {mem!r:.120}")
    qs = sc["questions"]
    if not isinstance(qs, (list, tuple)) or not qs or any(
            not isinstance(q, Mapping) or not isinstance(q.get("question"), str)
            or not isinstance(q.get("aliases"), (list, tuple)) for q in qs):
        raise ValueError(f"scenario 'questions' must be a non-empty list of {{'question': str, 'aliases': "
                         f"[...]}}, got {qs!r:.120}")
    return {**sc, "memory": [[str(x) for x in t] for t in mem]}


def _graph(memory, embedder, seed: int):
    from ..rewards import _graph_for

    return _graph_for(tuple(tuple(t) for t in memory), embedder, seed)


def _text(s, r, o) -> str:
    return f"{s} {r} {o}"


def write_memory(completion: str, scenario: Mapping, *, embedder, seed: int = 0) -> list[str]:
    """The current facts of a graph of the scenario's prior memory after the completion's writes
    (lenient parse) are stored: what a reader can answer from. Superseded facts are left out."""
    g = _graph(scenario["memory"], embedder, seed)
    trips = protocol.parse(completion, role="write", mode="lenient").triplets
    if trips:
        g.engram(trips, source="completion")
    return [_text(f["subject"], f["relation"], f["object"]) for f in g.facts()]


def ask_memory(completion: str, scenario: Mapping, *, embedder, k: int = 1, max_queries: int = 8,
               seed: int = 0) -> list[str]:
    """The facts the completion's queries (lenient parse, at most ``max_queries``) recall, top-``k`` each,
    from a graph of the scenario's memory, in recall order without repeats."""
    queries = protocol.parse(completion, role="ask", mode="lenient").asks[:max_queries]
    if not queries:
        return []
    g = _graph(scenario["memory"], embedder, seed)
    out: list[str] = []
    for q in queries:
        for it in g.recall(q, k=k).items:
            if it.triplet is not None and it.text not in out:
                out.append(it.text)
    return out


def score_questions(reader: Reader, scenario: Mapping, items: Sequence[str]) -> float:
    """Share of the scenario's questions ``reader(question, items)`` answers correctly by the game's rule."""
    from ..metrics import answer_correct

    qs = scenario["questions"]
    return sum(float(answer_correct(str(reader(q["question"], list(items))), list(q["aliases"]))) for q in qs) / len(qs)


_READERS: dict[tuple, Reader] = {}


class _LlamaReader:
    """The frozen reader: the base ``answer`` prompt of ROLE_SPECS, greedy, on a llama.cpp backend."""

    def __init__(self, model, n_threads: int):
        from ..backends import load_backend
        from ..roles import ROLE_SPECS

        self.spec = ROLE_SPECS["answer"].base
        self.backend = load_backend("llamacpp", model, n_threads=n_threads)

    def __call__(self, question: str, items: Sequence[str]) -> str:
        msgs = self.spec.messages(question, facts=list(items))
        return self.backend.generate([msgs], max_new_tokens=self.spec.max_new_tokens, temperature=0.0,
                                     stop=list(self.spec.stop))[0].text


def llama_reader(model=None, *, n_threads: int = 1) -> Reader:
    """The default frozen reader (embedded SmolLM2 when ``model`` is None), loaded once per process
    and per (model, n_threads), lazily on first use."""
    if not isinstance(n_threads, int) or n_threads < 1:
        raise ValueError(f"n_threads must be an int >= 1, got {n_threads!r}")
    key = (None if model is None else str(model), n_threads)
    if key not in _READERS:
        _READERS[key] = _LlamaReader(model, n_threads)
    return _READERS[key]


def resolve_reader(reader, *, model=None, n_threads: int = 1) -> Reader:
    """``"llamacpp"`` -> :func:`llama_reader`; a callable ``reader(question, items) -> answer`` as is."""
    if isinstance(reader, str):
        if reader.lower().replace(".", "").replace("_", "") != "llamacpp":
            raise ValueError(f"unknown reader {reader!r}: use 'llamacpp' or pass a callable reader(question, items)")
        return llama_reader(model, n_threads=n_threads)
    if not callable(reader):
        raise TypeError(f"reader must be 'llamacpp' or a callable reader(question, items) -> answer, got {reader!r:.80}")
    return reader
