"""Seeded procedural worlds: invented entities and the facts that hold about them.

A :class:`World` holds invented creatures (species), people (persona facts), places, a game with
rules, events and artifacts, and a list of :class:`Fact` triplets about them, drawn from the
relation schema in :mod:`mags_lib.data.templates`. Names come from a syllable generator and are
unique across every world made by one :class:`NameRegistry`, so worlds assigned to different splits
share no invented entity (the leak-free split guarantee; see ``tests/test_data_worlds.py``).

Examples
--------
>>> reg = NameRegistry()
>>> w = generate_world("w0", seed=3, registry=reg)
>>> w.world_id, len(w.entities) > 8, len(w.facts) > 20
('w0', True, True)
>>> generate_world("w0", seed=3, registry=NameRegistry()).facts == w.facts   # deterministic
True
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass, field

import numpy as np

from .templates import RELATIONS_BY_TYPE, Relation

__all__ = [
    "GENERATOR_VERSION",
    "VALUE_POOLS",
    "Entity",
    "Fact",
    "NameRegistry",
    "World",
    "WorldConfig",
    "draw_value",
    "generate_world",
    "generate_worlds",
]

GENERATOR_VERSION = "1.4.3"  # 1.3.0: answer memory blocks list dated items oldest first
# 1.4.0: no input repeats across splits (noise); a symmetric fact read backwards is no answer distractor
# 1.4.1: nor a second first hop of a multihop question (it made a second chain, with another answer)
# 1.4.2: nor a second answer to the second hop ("Staquie Marsh is near Zubrand Bridge" beside the gold "Zubrand
#        Bridge is near Kroork Crossing": 23 of 570 default multihop rows had two right answers, one accepted)
# 1.4.3: a pronoun only after a sentence its subject opens ("Flojouits prey on kloolixes. They run away from
#        loud clocks." meant the kloolixes: 14 of 982 write/multi and 14 of 834 ask/mixed rows); no unanswerable
#        row keeps a symmetric fact read backwards, nor an item its answer says in the first person

_ONSETS = ("b", "bl", "br", "d", "dr", "f", "fl", "g", "gl", "gr", "k", "kl", "kr", "l", "m", "n",
           "p", "pl", "pr", "qu", "r", "s", "sk", "sn", "sp", "st", "t", "tr", "v", "z", "zh", "th",
           "sh", "w", "j", "h", "c", "ch")
_NUCLEI = ("a", "e", "i", "o", "u", "a", "e", "o", "ai", "oo", "ea", "ou", "y", "ie")
_CODAS = ("", "", "", "n", "r", "rk", "l", "m", "s", "x", "nd", "sh", "th", "k", "p", "rn", "lt", "v")
_SPECIES_ENDINGS = ("", "", "le", "ix", "on", "ik", "el", "it")
_PERSON_ENDINGS = ("", "a", "o", "ik", "ene", "ia", "an", "el", "is")
_PLACE_SUFFIXES = ("Hollow", "Ridge", "Bay", "Falls", "Crossing", "Marsh", "Harbor", "Vale",
                   "Heights", "Springs", "Bridge", "Gate", "Reach", "Fen")
_GAME_SUFFIXES = ("Dice", "Cards", "Stones", "Tiles", "Chess", "Arena", "Quest", "Rings")
_EVENT_FORMS = ("{N} Festival", "{N} Fair", "Feast of {N}", "{N} Parade", "{N} Games", "{N} Lantern Night")
_ARTIFACT_FORMS = ("{N} Stone", "{N} Lantern", "{N} Crown", "{N} Compass", "{N} Mirror", "{N} Horn",
                   "{N} Chalice", "{N} Map")

_NUMBER_WORDS = ("two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                 "twelve", "fifteen", "twenty", "thirty", "forty", "fifty", "sixty")


def _combos(a, b, sep=" "):
    return tuple(f"{x}{sep}{y}" for x in a for y in b)


# Value pools: real words, combined for variety. Invented names are never drawn from here.
VALUE_POOLS: dict[str, tuple[str, ...]] = {
    "food": _combos(("frozen", "salted", "roasted", "sour", "pickled", "dried", "sweet", "smoked",
                     "bitter", "glazed", "spiced", "raw", "candied", "boiled", "crushed"),
                    ("lemons", "moss", "beetles", "mushrooms", "berries", "fern roots", "seaweed",
                     "crickets", "acorns", "figs", "turnips", "clover", "snails", "pine needles",
                     "plums", "barley", "pears", "onions", "walnuts", "radishes")),
    "habitat": _combos(("copper", "glass", "velvet", "mossy", "frozen", "hollow", "sunken", "amber",
                        "silver", "misty", "crystal", "muddy", "windy", "dark"),
                       ("caves", "marshes", "dunes", "towers", "forests", "cliffs", "lagoons", "tunnels",
                        "meadows", "ruins", "canyons", "swamps", "hills", "reefs")),
    "color": ("bright orange", "pale blue", "deep violet", "silver", "jet black", "lime green",
              "rusty red", "golden", "teal", "pearl white", "striped purple", "speckled grey",
              "sandy yellow", "emerald green", "pink", "dark brown", "turquoise", "crimson"),
    "fear": _combos(("purple", "red", "loud", "shiny", "tiny", "giant", "old", "spinning", "wet"),
                    ("umbrellas", "whistles", "mirrors", "bells", "lanterns", "clocks", "kites",
                     "drums", "boots", "balloons")),
    "ability": ("hum at dawn", "glow in the dark", "swim backwards", "climb glass walls",
                "whistle in two tones", "see in the dark", "change color in winter", "sleep standing up",
                "mimic voices", "carry twice their weight", "smell rain a day early", "walk on water",
                "count to ten", "dig through stone", "hover for a minute", "sing in harmony",
                "hold their breath for an hour", "roll into a ball"),
    "material": ("glass straws", "copper wire", "dried kelp", "woven grass", "feathers", "paper scraps",
                 "river clay", "silk threads", "pine cones", "bottle caps", "old socks", "seashells",
                 "twigs and mud", "spider silk", "dry leaves", "sheep wool"),
    "duration": _combos(_NUMBER_WORDS[:10], ("days", "weeks", "hours")),
    "lifespan": _combos(_NUMBER_WORDS[4:], ("years", "months")),
    "job": ("marine biologist", "glassblower", "baker", "cartographer", "beekeeper", "nurse",
            "carpenter", "violin teacher", "astronomer", "librarian", "firefighter", "potter",
            "translator", "chef", "pilot", "gardener", "blacksmith", "architect", "dentist",
            "bookbinder", "tailor", "plumber", "geologist", "journalist", "watchmaker", "florist",
            "mechanic", "pharmacist", "sculptor", "lighthouse keeper"),
    "allergen": ("peanuts", "cats", "pollen", "shellfish", "dust", "strawberries", "wool", "bee stings",
                 "latex", "eggs", "sesame", "mold", "horses", "kiwis"),
    "hobby": ("bouldering", "kayaking", "birdwatching", "fishing", "hiking", "sailing", "skating",
              "camping", "dancing", "cycling", "swimming", "fencing", "gardening", "stargazing",
              "knitting", "baking", "surfing", "painting"),
    "instrument": ("violin", "cello", "flute", "drums", "harp", "accordion", "banjo", "trumpet",
                   "piano", "clarinet", "ukulele", "oboe", "bagpipes", "harmonica"),
    "age": tuple(str(n) for n in range(16, 90)),
    "climate": ("foggy", "rainy", "dry", "windy", "snowy", "humid", "mild", "stormy", "sunny",
                "freezing", "hot", "cloudy"),
    "landmark": ("its floating markets", "glowing lakes", "singing bridges", "salt mines",
                 "clockmakers", "giant mushrooms", "night fairs", "hot springs", "a leaning tower",
                 "purple sand", "an endless staircase", "talking statues", "honey wine", "paper boats"),
    "points": tuple(f"{n} points" for n in range(5, 505, 5)),
    "dice": _combos(("one", "two", "three", "four", "five"),
                    ("six-sided dice", "ten-sided dice", "four-sided dice", "twelve-sided dice",
                     "coloured dice", "wooden dice")),
    "penalty": ("lose a turn", "skip the next round", "give a card to the left", "sing a song",
                "move back three squares", "pay five points", "swap seats", "draw two cards",
                "roll again", "double their score", "return to start", "hop on one foot"),
    "month": ("January", "February", "March", "April", "May", "June", "July", "August", "September",
              "October", "November", "December"),
    "artifact_material": ("blue glass", "black iron", "river stone", "carved bone", "polished brass",
                          "white jade", "red clay", "old oak", "meteorite", "silver wire", "amber",
                          "green marble"),
}
_ENTITY_VALUE_TYPES = ("species", "person", "place")


@dataclass(frozen=True)
class Entity:
    """An invented entity. ``name`` is how it is written; ``core`` is the invented word in it."""

    name: str
    type: str  # species | person | place | game | event | artifact | pet
    core: str
    gender: str = ""  # persons: "f" or "m" (picks she/he)


@dataclass(frozen=True)
class Fact:
    """One true statement of a world: ``(subject, label, object)`` of relation ``relation``."""

    subject: str
    relation: str  # Relation.key
    label: str
    object: str

    @property
    def triplet(self) -> tuple[str, str, str]:
        return (self.subject, self.label, self.object)


@dataclass
class World:
    """A small invented world: its entities and the facts that hold in it."""

    world_id: str
    seed: int
    entities: list[Entity] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)

    def by_type(self, type_: str) -> list[Entity]:
        return [e for e in self.entities if e.type == type_]

    def entity(self, name: str) -> Entity:
        for e in self.entities:
            if e.name == name:
                return e
        raise KeyError(f"no entity {name!r} in world {self.world_id}")

    def facts_about(self, subject: str) -> list[Fact]:
        return [f for f in self.facts if f.subject == subject]

    def fact(self, subject: str, relation: str) -> Fact | None:
        for f in self.facts:
            if f.subject == subject and f.relation == relation:
                return f
        return None

    @property
    def invented_names(self) -> set[str]:
        """The invented words of this world (lower case), for leak checks."""
        return {e.core.lower() for e in self.entities}


class NameRegistry:
    """Hands out invented words, never the same one twice (across all worlds sharing it).

    A word is refused when it, or its plural, is already taken or is a word of the templates and
    value pools (so "fern" can never be an invented species next to "fern roots").
    """

    def __init__(self) -> None:
        self.used: set[str] = set()

    @staticmethod
    def _forms(w: str) -> set[str]:
        return {w, w + "s", w + "es"}

    def word(self, rng: np.random.Generator, *, min_syl: int = 1, max_syl: int = 3,
             endings: tuple[str, ...] = ("",), min_len: int = 4, max_tries: int = 10_000) -> str:
        for _ in range(max_tries):
            n = int(rng.integers(min_syl, max_syl + 1))
            w = "".join(str(rng.choice(_ONSETS)) + str(rng.choice(_NUCLEI)) for _ in range(n))
            w += str(rng.choice(_CODAS)) + str(rng.choice(endings))
            if len(w) < min_len or len(w) > 11 or _bad_word(w):
                continue
            forms = self._forms(w)
            if forms & self.used or w.rstrip("s") in self.used:
                continue
            self.used |= forms
            return w
        raise RuntimeError("name space exhausted: use fewer worlds or a larger syllable inventory")


def _bad_word(w: str) -> bool:
    # Reject triple letters, and words (or plurals) that occur in the templates and value pools.
    if any(w[i] == w[i + 1] == w[i + 2] for i in range(len(w) - 2)):
        return True
    return bool(NameRegistry._forms(w) & _vocabulary()) or w.rstrip("s") in _vocabulary()


_REAL_WORDS = frozenset(
    ["blob", "bloom", "bread", "break", "bring", "brush", "chair", "cheap", "clear", "cloud", "dream", "drink", "feel", "flash", "float", "floor", "glass", "gloom", "grain", "green", "hair", "hear", "heat", "jail", "joke", "kite", "klan", "lean", "leap", "mail", "main", "meat", "mole", "moon", "near", "noon", "pain", "pair", "plan", "play", "plea", "pool", "poor", "rain", "read", "real", "road", "roam", "room", "sail", "seat", "seen", "shoe", "shop", "skin", "slap", "slip", "snap", "soon", "soup", "span", "spin", "star", "stop", "tail", "teal", "team", "tear", "that", "them", "then", "they", "this", "thou", "train", "tree", "trip", "vain", "wait", "wall", "wear", "week", "weep", "well", "what", "when", "word", "year", "your", "zoom", "sexo", "lorem", "ipsum", "dolor", "amet", "consectetur", "adipiscing", "elit", "tempor"])


@functools.lru_cache(maxsize=1)
def _vocabulary() -> frozenset[str]:
    from . import templates as T

    texts = [v for pool in VALUE_POOLS.values() for v in pool]
    texts += [t for r in T.RELATIONS for t in (r.statements + r.questions + r.updates + r.first_person
                                                + r.first_person_questions + (r.label, r.noun))]
    texts += list(T.CHIT_CHAT + T.CORRECTION_FRAMES + T.PERSONA_INTROS + T.UPDATE_PREFIXES
                  + T.RULE_CHANGE_PREFIXES + T.CONNECTIVES + T.QUESTION_JOINERS + T.STATEMENT_LEADS
                  + T.QUESTION_LEADS + T.QUESTION_TAILS) + [T.EXCHANGE_FRAME]
    texts += list(_PLACE_SUFFIXES + _GAME_SUFFIXES + _EVENT_FORMS + _ARTIFACT_FORMS)
    words = {w for t in texts for w in re.findall(r"[a-z]+", t.lower())}
    return frozenset(words | _REAL_WORDS)


@dataclass
class WorldConfig:
    """How big a world is: ranges (inclusive) of entities per type and the chance a fact exists."""

    species: tuple[int, int] = (3, 5)
    persons: tuple[int, int] = (3, 5)
    places: tuple[int, int] = (2, 4)
    games: tuple[int, int] = (1, 1)
    events: tuple[int, int] = (1, 2)
    artifacts: tuple[int, int] = (1, 2)
    fact_prob: float = 0.85

    def __post_init__(self) -> None:
        for name in ("species", "persons", "places", "games", "events", "artifacts"):
            pair = getattr(self, name)
            if isinstance(pair, (str, bytes)) or len(pair) != 2 or not all(map(_is_int, pair)):
                raise TypeError(f"WorldConfig.{name} must be a (lo, hi) pair of integers, got {pair!r}")
            lo, hi = pair
            if not 0 <= lo <= hi:
                raise ValueError(f"WorldConfig.{name} must be (lo, hi) with 0 <= lo <= hi, got {(lo, hi)}")
        if self.species[0] < 2 or self.persons[0] < 2 or self.places[0] < 2:
            raise ValueError("worlds need at least 2 species, 2 persons and 2 places (linking relations)")
        if not 0.0 < self.fact_prob <= 1.0:
            raise ValueError(f"fact_prob must be in (0, 1], got {self.fact_prob}")


def _is_int(x) -> bool:
    """An integer (Python or numpy), not a bool: ``2.5``, ``"3"``, ``True`` and ``None`` are not."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _check_int(value, name: str, minimum: int | None = None) -> int:
    """``value`` as an int, or a TypeError / ValueError naming ``name``, what it got and what it needs."""
    if not _is_int(value):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}"
                         + (f": pass int({value!r})" if isinstance(value, float) and value.is_integer() else ""))
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _seed_for(world_id: str, seed: int) -> int:
    # the seed is hashed as text: 3.0, "3" or True would silently give other worlds than 3
    seed = _check_int(seed, "seed")
    h = hashlib.sha256(f"{seed}:{world_id}".encode()).digest()
    return int.from_bytes(h[:8], "little")


def draw_value(rel: Relation, world: World, subject: str, rng: np.random.Generator,
               exclude: tuple[str, ...] = ()) -> str:
    """Draw an object for ``rel`` about ``subject`` (another entity for linking relations)."""
    if rel.values in _ENTITY_VALUE_TYPES:
        pool = [e.name for e in world.by_type(rel.values) if e.name != subject and e.name not in exclude]
    elif rel.values == "pet":
        raise ValueError("pet names are invented: use NameRegistry")
    else:
        pool = [v for v in VALUE_POOLS[rel.values] if v not in exclude]
    if not pool:
        raise ValueError(f"no value left for relation {rel.key!r} in world {world.world_id}")
    return str(pool[int(rng.integers(len(pool)))])


def generate_world(world_id: str, seed: int = 0, registry: NameRegistry | None = None,
                   config: WorldConfig | None = None) -> World:
    """Generate one world deterministically from ``(world_id, seed)``.

    Parameters
    ----------
    world_id : str
        Identifier recorded in every example rendered from the world.
    seed : int
        Generator seed; the world's own stream is derived from ``(seed, world_id)``.
    registry : NameRegistry, optional
        Shared registry that keeps invented names unique across worlds (a fresh one when omitted).
    config : WorldConfig, optional

    Returns
    -------
    World
    """
    cfg = config or WorldConfig()
    reg = registry if registry is not None else NameRegistry()
    rng = np.random.default_rng(_seed_for(world_id, seed))
    w = World(world_id=world_id, seed=seed)

    def count(r):
        return int(rng.integers(r[0], r[1] + 1))

    for _ in range(count(cfg.species)):
        core = reg.word(rng, min_syl=1, max_syl=2, endings=_SPECIES_ENDINGS)
        w.entities.append(Entity(core + ("es" if core.endswith(("s", "x", "sh")) else "s"), "species", core))
    for _ in range(count(cfg.persons)):
        core = reg.word(rng, min_syl=1, max_syl=3, endings=_PERSON_ENDINGS).capitalize()
        w.entities.append(Entity(core, "person", core, gender=str(rng.choice(["f", "m"]))))
    for _ in range(count(cfg.places)):
        core = reg.word(rng, min_syl=1, max_syl=2).capitalize()
        w.entities.append(Entity(f"{core} {rng.choice(_PLACE_SUFFIXES)}", "place", core))
    for _ in range(count(cfg.games)):
        core = reg.word(rng, min_syl=2, max_syl=3).capitalize()
        w.entities.append(Entity(f"{core} {rng.choice(_GAME_SUFFIXES)}", "game", core))
    for _ in range(count(cfg.events)):
        core = reg.word(rng, min_syl=1, max_syl=2).capitalize()
        w.entities.append(Entity(str(rng.choice(_EVENT_FORMS)).format(N=core), "event", core))
    for _ in range(count(cfg.artifacts)):
        core = reg.word(rng, min_syl=1, max_syl=2).capitalize()
        w.entities.append(Entity(str(rng.choice(_ARTIFACT_FORMS)).format(N=core), "artifact", core))

    for ent in list(w.entities):
        for rel in RELATIONS_BY_TYPE.get(ent.type, ()):
            if rng.random() > cfg.fact_prob:
                continue
            if rel.values == "pet":
                core = reg.word(rng, min_syl=1, max_syl=2, endings=("", "y", "o", "ie")).capitalize()
                w.entities.append(Entity(core, "pet", core))
                obj = core
            else:
                try:
                    obj = draw_value(rel, w, ent.name, rng)
                except ValueError:
                    continue
            w.facts.append(Fact(ent.name, rel.key, rel.label, obj))
    return w


def generate_worlds(n: int, *, seed: int = 0, prefix: str = "w", registry: NameRegistry | None = None,
                    config: WorldConfig | None = None) -> list[World]:
    """``n`` worlds ``<prefix>0000 ...`` sharing one name registry (no invented name repeats)."""
    n = _check_int(n, "n", 0)
    reg = registry if registry is not None else NameRegistry()
    return [generate_world(f"{prefix}{i:04d}", seed=seed, registry=reg, config=config) for i in range(n)]
