"""Seeded procedural game scenarios over the datasets' worlds, with their ground truth.

Each scenario is built from one world of :mod:`mags_lib.data.worlds` (the generator of the training
data) in one of four **families** (:data:`FAMILIES`):

* ``creatures`` -- invented species, their diet, habitat, colour, enemies and leaders (zorbland-like);
* ``dice_arena`` -- a game whose rules change again and again (start points, winning score, dice,
  the double-roll rule, the referee): the Paradox Dice Arena of the seed project;
* ``persona`` -- a companion app: one user (the ``speaker`` of every observation) tells their job,
  home, food, hobby, age... in the first person, and some of it changes over time;
* ``town`` -- people, places, events and artifacts linked to one another.

Question kinds: ``recall`` (shortly after the fact), ``update`` (after the 1st, 2nd... change of one
fact: ``n_changes`` is recorded), ``multihop`` (through a linking fact: "Where does the leader of the
blorps live?"), ``retention`` (at growing ``distance``, in events, from the statement) and
``abstain`` (a relation never said about a mentioned entity, or an entity never mentioned). Every
``say`` carries a date (``time``, strictly increasing) and a source id.

**Disjoint from training.** The training data's worlds come from
:func:`mags_lib.data.generate_role_splits` with one :class:`~mags_lib.data.NameRegistry`. The game
registers the invented names of every split of the training profiles first (the real function, run
with no examples rendered: same seed, same names), then draws its own worlds from that registry, so
no invented name of a game scenario occurs in any training split (``tests/test_game_generate.py``).

The ground truth (:class:`~mags_lib.game.scenario.GoldFact`) lists every stated fact, the event
that stated it and the event that superseded it, for :func:`mags_lib.game.quality.operation_quality`.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import asdict, dataclass, field, replace
from datetime import date, timedelta
from typing import Any

import numpy as np

from ..data import templates as T
from ..data.worlds import Fact, NameRegistry, World, WorldConfig, draw_value, generate_world
from .scenario import KINDS, Event, GoldEntity, GoldFact, Scenario

__all__ = [
    "FAMILIES",
    "GeneratorConfig",
    "evaluation_scenarios",
    "game_registry",
    "generate_scenario",
    "generate_scenarios",
    "generator_config",
    "training_names",
]

FAMILIES: dict[str, tuple[str, ...]] = {
    "creatures": ("species",),
    "dice_arena": ("game",),
    "persona": ("person",),
    "town": ("person", "place", "event", "artifact"),
}
"""Family -> the subject types whose facts it states (linked entities' facts join for multi-hop)."""


@dataclass(frozen=True)
class GeneratorConfig:
    """Size and mix of generated scenarios (ranges are inclusive)."""

    n_scenarios: int = 40  # scenarios generated
    seed: int = 0  # one seed for worlds and rendering
    families: tuple[str, ...] = ("creatures", "dice_arena", "persona", "town")  # cycled in order
    n_facts: tuple[int, int] = (5, 8)  # base facts stated (before updates and distractors)
    n_update_chains: tuple[int, int] = (1, 2)  # facts that change during the scenario
    max_changes: int = 3  # each changing fact changes 1..max_changes times (dice_arena: +1)
    n_recall: int = 2  # recall questions (shortly after the statement)
    n_multihop: int = 1  # multi-hop questions (when the world has a two-hop chain)
    n_abstain: int = 1  # abstain questions
    retention_distances: tuple[int, ...] = (4, 8, 16)  # observations between statement and question
    two_fact_prob: float = 0.25  # chance that one observation states two facts
    filler_prob: float = 0.2  # chance of a chit-chat observation between two others
    start_date: str = "2024-01-08"  # date of the first observation of scenario 0
    max_gap_days: int = 3  # days between two observations: 1..max_gap_days
    train_profiles: tuple[str, ...] = ("smoke", "default", "full")  # training splits kept disjoint
    train_seed: int | None = None  # seed of those training splits (None: this seed)
    world: WorldConfig = field(default_factory=WorldConfig)

    def __post_init__(self) -> None:
        for name in ("seed", "train_seed"):  # numpy's generators take 0 .. 2**32 - 1
            v = getattr(self, name)
            if v is None and name == "train_seed":
                continue
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or not 0 <= v < 2**32:
                raise ValueError(f"{name} must be an integer in [0, 2**32), got {v!r}")
            object.__setattr__(self, name, int(v))
        if self.n_scenarios < 0:
            raise ValueError(f"n_scenarios must be >= 0, got {self.n_scenarios}")
        bad = [f for f in self.families if f not in FAMILIES]
        if bad or not self.families:
            raise ValueError(f"families must be a non-empty subset of {sorted(FAMILIES)}, got {self.families}")
        for name in ("n_facts", "n_update_chains"):
            lo, hi = getattr(self, name)
            if not 0 <= lo <= hi:
                raise ValueError(f"{name} must be (lo, hi) with 0 <= lo <= hi, got {(lo, hi)}")
        if self.n_facts[0] < 1:
            raise ValueError("n_facts must state at least one fact")
        for name in ("max_changes", "n_recall", "n_multihop", "n_abstain"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.max_changes < 1 and self.n_update_chains[1] > 0:
            raise ValueError("max_changes must be >= 1 when facts change (n_update_chains)")
        if any(d < 1 for d in self.retention_distances):
            raise ValueError(f"retention_distances must be >= 1, got {self.retention_distances}")
        for name in ("two_fact_prob", "filler_prob"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        date.fromisoformat(self.start_date)
        if self.max_gap_days < 1:
            raise ValueError(f"max_gap_days must be >= 1, got {self.max_gap_days}")
        bad = [p for p in self.train_profiles if p not in ("smoke", "default", "full")]
        if bad:
            raise ValueError(f"unknown train_profiles {bad}; choose from smoke, default, full")


def generator_config(profile: str = "default", seed: int = 0, **overrides) -> GeneratorConfig:
    """The generator configuration of a profile: ``smoke`` makes tiny scenarios (about 10 events)."""
    if profile == "smoke":  # a smoke game meets smoke-trained models only
        base = {"train_profiles": ("smoke",), "n_scenarios": 2, "n_facts": (2, 3), "n_update_chains": (1, 1),
                "max_changes": 1, "n_recall": 1, "n_multihop": 0, "n_abstain": 1, "retention_distances": (2,),
                "two_fact_prob": 0.0, "filler_prob": 0.0}
    elif profile in ("default", "full"):
        base = {"n_scenarios": 40 if profile == "default" else 200}
    else:
        raise ValueError(f"unknown profile {profile!r}: smoke | default | full")
    return GeneratorConfig(seed=seed, **{**base, **overrides})


# ------------------------------------------------------------------------------ disjoint names
def _names_key(profiles: tuple[str, ...], seed: int) -> str:
    """Content hash of what decides the training worlds: the generator's source, the profiles, the seed."""
    import hashlib
    import inspect

    from .. import data
    from ..data import render, templates, worlds

    h = hashlib.sha256()
    for mod in (worlds, templates, render):
        h.update(inspect.getsource(mod).encode())
    h.update(json.dumps([[p, asdict(data.profile_config(p, seed=seed))] for p in profiles], sort_keys=True,
                        default=str).encode())
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=8)
def training_names(profiles: tuple[str, ...] = ("smoke", "default", "full"), seed: int = 0, *,
                   cache: bool = True) -> frozenset[str]:
    """Invented words (lower case) of every world of the training splits of ``profiles``.

    Runs :func:`mags_lib.data.generate_role_splits` itself (with no example rendered), so the
    worlds are exactly the training data's for that seed. The result is cached under
    ``data/generated/game/`` keyed by a hash of the world generator's source, the profiles' sizes
    and the seed (the full profile's 1,500 worlds take seconds to draw).
    """
    from ..data import generate_role_splits, profile_config
    from ..models import project_root

    path = project_root() / "data" / "generated" / "game" / f"training_names-{_names_key(profiles, seed)}.json"
    if cache and path.is_file():
        try:
            return frozenset(json.loads(path.read_text())["words"])
        except (ValueError, KeyError):
            pass  # a damaged cache is rebuilt
    words: set[str] = set()
    for p in profiles:
        cfg = replace(profile_config(p, seed=seed), n_train=0, n_validation=0, n_test=0)
        _, worlds = generate_role_splits(cfg, progress=False)
        words |= {e.core.lower() for ws in worlds.values() for w in ws for e in w.entities}
    if cache:
        from ..repro import atomic_write_text

        atomic_write_text(path, json.dumps({"profiles": list(profiles), "seed": seed, "words": sorted(words)}))
    return frozenset(words)


def game_registry(config: GeneratorConfig | None = None) -> NameRegistry:
    """A :class:`NameRegistry` that already holds every training name (so it never hands one out)."""
    cfg = config or GeneratorConfig()
    reg = NameRegistry()
    seed = cfg.seed if cfg.train_seed is None else cfg.train_seed
    for w in training_names(tuple(cfg.train_profiles), seed):
        reg.used |= {w, w + "s", w + "es"}
    return reg


# ------------------------------------------------------------------------------ rendering
_A_AN = re.compile(r"\b([Aa]) (?=[aeiouAEIOU])")
_DIGITS = {w: str(i) for i, w in enumerate(
    ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"))}
_DIGITS.update({"fifteen": "15", "twenty": "20", "thirty": "30", "forty": "40", "fifty": "50", "sixty": "60"})


def _fix(text: str) -> str:
    return " ".join(_A_AN.sub(lambda m: m.group(1) + "n ", text).split())


def _pick(rng: np.random.Generator, seq):
    return seq[int(rng.integers(len(seq)))]


def _statement_template(rel: T.Relation, rng, *, first_person: bool = False) -> str:
    pool = rel.first_person if first_person and rel.first_person else rel.statements
    return _pick(rng, pool)


def _statement(rel: T.Relation, subj: str, obj: str, rng, *, first_person: bool = False,
               template: str | None = None) -> str:
    tpl = template if template is not None else _statement_template(rel, rng, first_person=first_person)
    return T.sentence_case(_fix(tpl.format(S=subj, O=obj)))


# Relations whose every statement reads both ways ("A and B are siblings": B is a sibling of A and A one of B;
# "A is near B"), as in mags_lib.data.answer; and the phrasings that make another relation between two entities
# of one type read both ways only as said ("X are always at war with Y" does, "Y prey on X" does not)
_BOTH_WAYS = frozenset({"sibling", "near"})
_BOTH_WAYS_PHRASES = ("at war with",)


def _reads_both_ways(rel: T.Relation, template: str) -> bool:
    """Whether a statement of ``rel`` in ``template`` also states the reverse fact (object -> subject)."""
    return rel.values == rel.subject_type and (
        rel.key in _BOTH_WAYS or any(p in template for p in _BOTH_WAYS_PHRASES))


def _update(rel: T.Relation, subj: str, new: str, old: str, rng, *, first_person: bool = False) -> str:
    if first_person and rel.first_person:  # "Update: I live in Brenna Bay now."
        body = _pick(rng, rel.first_person).format(O=new).rstrip(".") + " now."
        pre = _pick(rng, ("Update: ", "Big news: ", "Things have changed. ", "News: ", "Heads up: "))
        return _fix(pre + body)
    pre = _pick(rng, T.RULE_CHANGE_PREFIXES if rel.subject_type == "game" else T.UPDATE_PREFIXES)
    body = T.sentence_case(_pick(rng, rel.updates).format(S=subj, O=new, OLD=old))
    if "Rule change" in body:
        pre = ""
    return _fix(pre + body)


def _question(rel: T.Relation, subj: str, rng) -> str:
    return T.sentence_case(_fix(_pick(rng, rel.questions).format(S=subj).replace("the the ", "the ")))


def _singular(word: str) -> str | None:
    """The singular of a plural noun ("strawberries" -> "strawberry", "dice" -> "die"), or None."""
    w = word.lower()
    if w == "dice":
        return word[:-3] + "ie"
    if len(w) > 4 and w.endswith("ies"):
        return word[:-3] + "y"
    if w.endswith(("ches", "shes", "sses", "xes")):
        return word[:-2]
    if len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        return word[:-1]
    return None


def _aliases(value: str, world: World) -> list[str]:
    """The value; with its numbers in digits or in words, wherever they stand ("move back 3 squares"); with its
    last word in the singular ("frozen lemon", "one six-sided die": a reader that answers in the singular names
    the value); for a named place or game, its invented word."""
    out = [value]
    words = value.split()
    inv = {v: k for k, v in _DIGITS.items()}
    for table in (_DIGITS, inv):
        swapped = [table.get(w.lower() if table is _DIGITS else w, w) for w in words]
        if swapped != words:
            out.append(" ".join(swapped))
    if value.endswith(" points") and (words[0].isdigit() or words[0].lower() in _DIGITS):
        out.append(words[0])  # "470 points" -> "470"; never the verb of "pay five points" ("pay")
    one = _singular(words[-1]) if words else None
    if one is not None:
        out += [" ".join(a.split()[:-1] + [one]) for a in list(out) if a.split()[-1] == words[-1]]
    for e in world.entities:
        if e.name == value and e.core != e.name:
            out.append(e.core)
    return list(dict.fromkeys(out))


# ------------------------------------------------------------------------------ one scenario
@dataclass(eq=False)
class _Say:
    text: str
    facts: list  # Facts stated (or restated with a new value)
    speaker: str | None = None
    changes: list = field(default_factory=list)  # (old Fact, new Fact)


@dataclass(eq=False)
class _Ask:
    text: str
    kind: str
    answer: list
    after: _Say  # asked right after this observation
    fact: Fact | None = None  # the fact whose statement the distance counts from
    n_changes: int = 0


class _Skip(Exception):
    pass


def _chain_pairs(world: World, pool: list[Fact]) -> list[tuple[Fact, Fact]]:
    rels = T.RELATIONS_BY_KEY
    out = []
    for f1 in pool:
        r1 = rels[f1.relation]
        if not r1.linking or not r1.descriptor:
            continue
        for f2 in world.facts_about(f1.object):
            if not rels[f2.relation].linking:
                out.append((f1, f2))
    return out


def generate_scenario(index: int, config: GeneratorConfig | None = None,
                      registry: NameRegistry | None = None) -> Scenario:
    """Scenario ``index`` of a configuration (deterministic given the config and the registry state).

    Use :func:`generate_scenarios`, which keeps the names disjoint from the training data.
    """
    cfg = config or GeneratorConfig()
    reg = registry if registry is not None else game_registry(cfg)
    family = cfg.families[index % len(cfg.families)]
    rng = np.random.default_rng([cfg.seed, 7919, index])
    for attempt in range(20):
        world = generate_world(f"game{index:04d}-{attempt}", seed=cfg.seed, registry=reg, config=cfg.world)
        try:
            return _build(world, family, index, cfg, reg, rng)
        except _Skip:
            continue
    raise RuntimeError(f"could not build a {family} scenario in 20 worlds; relax GeneratorConfig")


def _build(world: World, family: str, index: int, cfg: GeneratorConfig, reg: NameRegistry, rng) -> Scenario:
    rels = T.RELATIONS_BY_KEY
    types = FAMILIES[family]
    speaker = None
    if family == "persona":
        persons = [p for p in world.by_type("person")
                   if sum(1 for f in world.facts_about(p.name) if rels[f.relation].first_person) >= 3]
        if not persons:
            raise _Skip("no person with three first-person facts")
        speaker = _pick(rng, persons).name
        pool = [f for f in world.facts_about(speaker) if rels[f.relation].first_person]
    else:
        pool = [f for f in world.facts if world.entity(f.subject).type in types]
    if not pool:
        raise _Skip("no facts")
    pool = [pool[i] for i in rng.permutation(len(pool))]

    # which facts: two-hop chains first, then changing facts, then the rest
    chosen: list[Fact] = []
    hops = []
    pairs = _chain_pairs(world, pool)
    for k in rng.permutation(len(pairs))[: cfg.n_multihop].tolist():
        f1, f2 = pairs[k]
        if f1 in chosen or any(f2.subject == g.subject and f2.relation == g.relation for g in chosen):
            continue
        chosen += [f for f in (f1, f2) if f not in chosen]
        hops.append((f1, f2))
    hop_facts = {f for p in hops for f in p}
    functional = [f for f in pool if rels[f.relation].functional and f not in hop_facts]
    n_chains = min(int(rng.integers(cfg.n_update_chains[0], cfg.n_update_chains[1] + 1)), len(functional))
    if n_chains < cfg.n_update_chains[0]:
        raise _Skip("too few functional facts")
    chains = functional[:n_chains]
    chosen += [f for f in chains if f not in chosen]
    n_facts = int(rng.integers(cfg.n_facts[0], cfg.n_facts[1] + 1))
    for f in pool:
        if len(chosen) >= max(n_facts, len(chosen)):
            break
        if f not in chosen:
            chosen.append(f)
    if len(chosen) < cfg.n_facts[0]:
        raise _Skip("too few facts")
    order = [chosen[i] for i in rng.permutation(len(chosen))]
    for f1, f2 in hops:  # the link is stated before the linked entity's fact half of the time
        i1, i2 = order.index(f1), order.index(f2)
        if rng.random() < 0.5 and i1 > i2:
            order[i1], order[i2] = f2, f1

    both_ways: set[Fact] = set()  # stated facts whose statement also says the reverse fact

    def say_fact(f: Fact) -> str:
        first = family == "persona" and f.subject == speaker
        tpl = _statement_template(rels[f.relation], rng, first_person=first)
        if _reads_both_ways(rels[f.relation], tpl):
            both_ways.add(f)
        return _statement(rels[f.relation], f.subject, f.object, rng, template=tpl)

    def filler() -> _Say:
        return _Say(_pick(rng, T.CHIT_CHAT), [], speaker)

    # -- observations -------------------------------------------------------------------------
    says: list[_Say] = []
    i = 0
    while i < len(order):
        f = order[i]
        if cfg.filler_prob and rng.random() < cfg.filler_prob:
            says.append(filler())
        two = (i + 1 < len(order) and rng.random() < cfg.two_fact_prob
               and (order[i + 1].subject, order[i + 1].relation) != (f.subject, f.relation))
        if two:
            g = order[i + 1]
            conn = _pick(rng, ("Also, ", "Oh, and ", "By the way, ", "Besides, ", "Plus, "))
            second = say_fact(g)
            if not second.startswith(("I ", "I'")) and not any(second.startswith(e.name) for e in world.entities):
                second = second[:1].lower() + second[1:]
            says.append(_Say(f"{say_fact(f)} {conn}{second}", [f, g], speaker))
            i += 2
        else:
            says.append(_Say(say_fact(f), [f], speaker))
            i += 1

    # changes of the changing facts, each after the previous one
    chain_says: dict[Fact, list[_Say]] = {}
    for f in chains:
        rel = rels[f.relation]
        n_changes = int(rng.integers(1, cfg.max_changes + 1)) + (1 if family == "dice_arena" else 0)
        prev, seen_values, lst = f, [f.object], []
        pos = next(k for k, s in enumerate(says) if f in s.facts)
        for _ in range(n_changes):
            try:
                new = draw_value(rel, world, f.subject, rng, exclude=tuple(seen_values))
            except ValueError:
                break
            nf = Fact(f.subject, f.relation, f.label, new)
            first = family == "persona" and f.subject == speaker
            s = _Say(_update(rel, f.subject, new, prev.object, rng, first_person=first), [nf], speaker,
                     changes=[(prev, nf)])
            pos = int(rng.integers(pos + 1, len(says) + 1))
            says.insert(pos, s)
            lst.append(s)
            prev = nf
            seen_values.append(new)
        chain_says[f] = lst

    # -- questions ------------------------------------------------------------------------------
    def pos_of(s: _Say) -> int:
        return says.index(s)

    def holds_until(f: Fact) -> int:
        """Index of the last observation before ``f`` is replaced (len(says)-1 if never)."""
        p = next(k for k, s in enumerate(says) if f in s.facts)
        for k in range(p + 1, len(says)):
            if any(old == f for old, _ in says[k].changes):
                return k - 1
        return len(says) - 1

    def stated_at(f: Fact) -> int:
        return next(k for k, s in enumerate(says) if f in s.facts)

    def current_values(subj: str, relation: str, p: int) -> list[str]:
        """Every value of ``subj``'s ``relation`` that holds right after observation ``p``, in the order said:
        its own facts' objects, and the subjects of stated facts that read both ways with ``subj`` as object
        ("X and A are siblings" answers "Who is the sibling of A?" with X)."""
        held: list[Fact] = []
        for s in says[: p + 1]:
            for old, _new in s.changes:
                if old in held:
                    held.remove(old)
            held += [h for h in s.facts if h not in held]
        out = [h.object for h in held if h.subject == subj and h.relation == relation]
        out += [h.subject for h in held if h.object == subj and h.relation == relation and h in both_ways]
        return list(dict.fromkeys(out))

    asks: list[_Ask] = []
    used_q: set = set()

    def ask(f: Fact, kind: str, lo: int, hi: int, *, n_changes: int = 0, text: str | None = None,
            answer: list | None = None, gap: int | None = None, via: Fact | None = None) -> bool:
        """Ask about ``f`` (reached through the first hop ``via`` for a multihop question). Every other value
        that holds when asked (a two-way fact read backwards) is accepted too; a multihop question whose
        descriptor ("the sibling of A") also names another entity with a value is not asked (after its draws,
        so that the later ones stay the same)."""
        if hi < lo:
            return False
        g = gap if gap is not None else int(rng.integers(0, min(2, hi - lo) + 1))
        if lo + g > hi:
            return False
        q = text or _question(rels[f.relation], f.subject, rng)
        p = lo + g
        if via is not None and any(current_values(y, f.relation, p)
                                   for y in current_values(via.subject, via.relation, p) if y != via.object):
            return False
        if answer is None:
            values = [f.object] + [v for v in current_values(f.subject, f.relation, p) if v != f.object]
            answer = list(dict.fromkeys(a for v in values for a in _aliases(v, world)))
        asks.append(_Ask(q, kind, answer, says[p], f, n_changes))
        used_q.add((f.subject, f.relation, p))
        return True

    # update: after each change (the last one always, earlier ones half of the time)
    for f, lst in chain_says.items():
        for k, s in enumerate(lst):
            nf = s.facts[0]
            if k == len(lst) - 1 or rng.random() < 0.5:
                ask(nf, "update", pos_of(s), holds_until(nf), n_changes=k + 1)
    # recall: soon after the statement, while the fact holds
    stable = [f for f in order if f not in hop_facts]
    recalled = [stable[i] for i in rng.permutation(len(stable))][: cfg.n_recall]
    for f in recalled:
        ask(f, "recall", stated_at(f), holds_until(f))
    # multihop: after both facts are said, while both hold
    for f1, f2 in hops:
        rel1, rel2 = rels[f1.relation], rels[f2.relation]
        desc = rel1.descriptor.format(S=f1.subject)
        q = T.sentence_case(_fix(_pick(rng, rel2.questions).format(S=desc).replace("the the ", "the ")))
        lo = max(stated_at(f1), stated_at(f2))
        ask(f2, "multihop", lo, min(holds_until(f1), holds_until(f2)), text=q, via=f1)
    # retention: at a chosen distance from the statement of a fact that never changes
    never = [f for f in order if f not in chains and f not in hop_facts]
    fresh = [f for f in never if f not in recalled]  # facts not asked yet first
    never = fresh + [f for f in never if f in recalled] if len(fresh) < len(cfg.retention_distances) else fresh
    dists = list(cfg.retention_distances)
    for j, f in enumerate([never[i] for i in rng.permutation(len(never))][: len(dists)]):
        d = dists[j % len(dists)]
        lo = stated_at(f)
        need = lo + d - (len(says) - 1)
        for _ in range(max(need, 0)):  # lengthen the scenario with chit-chat
            says.append(filler())
        ask(f, "retention", lo, len(says) - 1, gap=d)
    # abstain: a relation never said about a mentioned subject, or an entity never mentioned
    said = {(f.subject, f.relation) for s in says for f in s.facts}
    # relations between two entities of one type read both ways ("X and Y are siblings", "X are at war with Y"):
    # the reverse of a stated one answers its abstain question. Such a draw is drawn again among the others
    # (drawing from a shorter list would move every later draw: scenarios without one stay as they were)
    two_way = {r.key for r in T.RELATIONS if r.values == r.subject_type}
    answered = {(f.object, f.relation) for s in says for f in s.facts if f.relation in two_way}
    subjects = sorted({f.subject for f in order if world.entity(f.subject).type in types} or {order[0].subject})
    for k in range(cfg.n_abstain):
        if k % 2 == 0:
            cand = [(s, r) for s in subjects for r in T.RELATIONS_BY_TYPE.get(world.entity(s).type, ())
                    if (s, r.key) not in said]
            if cand:
                s, rel = cand[int(rng.integers(len(cand)))]
                if (s, rel.key) in answered:
                    cand = [c for c in cand if (c[0], c[1].key) not in answered]
                    if not cand:
                        continue
                    s, rel = cand[int(rng.integers(len(cand)))]
                q = _question(rel, s, rng)
            else:
                continue
        else:
            typ = world.entity(subjects[0]).type
            word = reg.word(rng, min_syl=2, max_syl=2)
            name = word + "s" if typ == "species" else word.capitalize()
            rel = _pick(rng, [r for r in T.RELATIONS_BY_TYPE[typ] if "{S}" in r.questions[0]])
            q = _question(rel, name, rng)
        asks.append(_Ask(q, "abstain", [], says[int(rng.integers(len(says) // 2, len(says)))]))

    # -- assemble -----------------------------------------------------------------------------------
    start = date.fromisoformat(cfg.start_date) + timedelta(days=int(index) * 30)
    name = f"{family}_{index:04d}"
    events: list[Event] = []
    stated_ev: dict[Fact, int] = {}
    superseded_ev: dict[Fact, int] = {}
    day = start
    by_say: dict[int, list[_Ask]] = {}
    for a in asks:
        by_say.setdefault(id(a.after), []).append(a)
    for s in says:
        day = day + timedelta(days=int(rng.integers(1, cfg.max_gap_days + 1)))
        idx = len(events)
        events.append(Event(text=s.text, type="say", time=day.isoformat(), source=f"{name}:{idx}",
                            speaker=s.speaker))
        for f in s.facts:
            stated_ev.setdefault(f, idx)
        for old, _new in s.changes:
            superseded_ev[old] = idx
        for a in by_say.get(id(s), []):
            dist = None if a.fact is None else len(events) - stated_ev[a.fact]
            events.append(Event(text=a.text, type="ask", answer=tuple(a.answer), kind=a.kind, time=day.isoformat(),
                                n_changes=a.n_changes, distance=dist))
    gold = [GoldFact(f.subject, f.label, f.object, stated=i, superseded=superseded_ev.get(f))
            for f, i in sorted(stated_ev.items(), key=lambda kv: kv[1])]
    names = {f.subject for f in stated_ev} | {f.object for f in stated_ev}
    entities = [GoldEntity(e.name, e.core, e.type) for e in world.entities if e.name in names]
    kinds = {k: sum(1 for e in events if e.kind == k) for k in KINDS}
    return Scenario(name=name, description=f"Generated {family} scenario {index} (world {world.world_id}, "
                    f"seed {cfg.seed}): {kinds}", events=events, gold=gold, entities=entities,
                    meta={"family": family, "world_id": world.world_id, "seed": cfg.seed, "speaker": speaker,
                          "generator": "mags_lib.game.generate"})


def generate_scenarios(config: GeneratorConfig | None = None) -> list[Scenario]:
    """``config.n_scenarios`` scenarios, families in turn, names disjoint from every training split."""
    cfg = config or GeneratorConfig()
    reg = game_registry(cfg)
    return [generate_scenario(i, cfg, reg) for i in range(cfg.n_scenarios)]


def evaluation_scenarios(profile: str = "default", seed: int = 0, n_scenarios: int | None = None, *,
                         examples: bool = True, out_dir=None, **generator: Any) -> list[Scenario]:
    """The scenarios a game run evaluates: generated ones (profile sizes) plus the example files.

    The examples of ``../shared/scenarios/`` are optional (one line says when they are skipped)
    and left out of the smoke profile (too long for it). With ``out_dir`` every scenario is saved
    there as JSON. ``generator``: :class:`GeneratorConfig` fields over the profile's, e.g.
    ``retention_distances=(32, 128, 256), filler_prob=0.5`` for memories that live long enough to
    decay and be pruned.
    """
    from .scenario import example_scenarios, save_scenario

    over = dict(generator)
    if n_scenarios is not None:
        over["n_scenarios"] = n_scenarios
    if profile == "smoke" and n_scenarios is not None:
        over["n_scenarios"] = min(n_scenarios, 2)
    scs = generate_scenarios(generator_config(profile, seed=seed, **over))
    if examples and profile != "smoke":
        scs += example_scenarios()
    if out_dir is not None:
        from pathlib import Path

        for sc in scs:
            save_scenario(sc, Path(out_dir) / f"{sc.name}.json")
    return scs
