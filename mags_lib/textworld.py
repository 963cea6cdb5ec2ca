"""TextWorld games: worlds nobody here wrote, scored against the game engine's own state.

TextWorld (Microsoft, PyPI ``textworld``) generates text games and knows their true state at every
step (which object is where, which room lies north of which). This module turns that into memory
tests and into an agent benchmark for any ``MAGS`` configuration:

* **games** -- :func:`make_game` generates a seeded game with TextWorld's own generator
  (:class:`GameSpec`: ``treasure_hunter``, ``cooking`` or ``custom``; rooms, objects, quest length as
  parameters) and compiles it to a Z-machine ``.z8`` file, cached by content under
  ``data/generated/textworld/``; :func:`load_game` opens an existing ``.z8`` (or a TextWorld ``.ulx``
  whose ``.json`` lies beside it, recompiled to ``.z8``: TextWorld 1.7 no longer plays Glulx). A
  missing, foreign or corrupt file raises :class:`GameFileError` saying what is wrong.
* **play** -- :class:`TWGame` plays a game through jericho and returns, per step, the cleaned
  observation text, the admissible commands and the engine's :class:`WorldState`. :func:`play`
  drives it with an exploration policy (the walkthrough, a seeded random walk over admissible
  commands, or ``explore``: a seeded walk that prefers unvisited rooms and moves objects around).
* **questions** -- :class:`Witness` records what the player has *witnessed* (an object counts as
  seen at a step when it was perceivable in the engine's state and its name occurs in that step's
  text); :func:`questions_at` asks, from the engine's true state, where an object is, what a
  container holds, which room lies in a direction of another and what the player carries. Kinds
  follow DESIGN.md: ``update`` (the object or the container's contents moved after first seen),
  ``retention`` (last seen at least ``retention_gap`` steps ago), ``recall`` (otherwise),
  ``abstain`` (an object of the game that was never seen). Questions whose answer the player could
  not know are never asked. :func:`make_scenario` writes the play and its questions in DESIGN.md's
  game-scenario shape (``say`` events carry ``source`` = ``"<game>:<step>"`` and ``time``, the step
  as a date-time: ``start_time`` plus one minute per step), so the game module's scorer and runner
  score it like any other scenario.
* **systems** -- :data:`SYSTEMS`: every memory mode of the game (``none``, ``full_context``, ``rag``,
  ``mags_base``, ``mags_trained``: configurations of ``MAGS`` read from :data:`mags_lib.game.run.SYSTEMS`,
  see :data:`GAME_NAMES`) and ``perfect``; :func:`state_question_study` runs every (game, system) pair
  over processes, :func:`accuracy_table` (``cluster="game"``) gives intervals over games.
* **agent** -- :class:`MemoryAgent` plays a game and uses ``system.ask`` to choose its next command
  (where is the thing the task needs; which exit leads to the room memory names), against the same
  agent without memory; :func:`run_episode` returns steps to finish and success.
  :class:`PerfectMemory` answers the agent's and the scenarios' questions from the witnessed facts
  (no language model): the upper bound of what memory can give this agent, and the check that every
  generated question is answerable.

TextWorld is a pinned dependency (it installs from PyPI alone: the Inform 7 compilers ship inside its
wheel, jericho compiles its Z-machine interpreter from source with the C compiler the machine
already needs for llama-cpp-python). When it is missing anyway, :func:`skip_reason` says so in one line
and :func:`require_textworld` raises :class:`TextWorldMissingError` with the command to install it.

>>> from mags_lib.textworld import GameSpec
>>> GameSpec(kind="treasure_hunter", n_rooms=4, quest_length=2, seed=3).name
'tw-treasure_hunter-r4-q2-medium-s3'
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
import re
import shutil
import tempfile
import warnings
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "ARIGRAPH_ANCHOR",
    "GAME_NAMES",
    "INSTALL_HINT",
    "INVENTORY",
    "LIST_FAMILIES",
    "SYSTEMS",
    "AgentConfig",
    "EpisodeResult",
    "GameFile",
    "GameFileError",
    "GameSpec",
    "MemoryAgent",
    "PerfectMemory",
    "PlayConfig",
    "QuestionConfig",
    "Step",
    "TWGame",
    "TextWorldMissingError",
    "Witness",
    "WorldState",
    "accuracy_table",
    "agent_observation",
    "agent_study",
    "build_game",
    "clean_text",
    "crossing",
    "draw_map",
    "episode_table",
    "load_game",
    "make_game",
    "make_scenario",
    "make_system",
    "move_note",
    "named_objects",
    "play",
    "questions_at",
    "require_textworld",
    "run_episode",
    "run_scenario",
    "score_answer",
    "score_state_answer",
    "skip_reason",
    "state_question_study",
    "system_config",
    "textworld_available",
]

INSTALL_HINT = 'pip install -e . (TextWorld is pinned: textworld==1.7.0; jericho builds with a C compiler)'
INVENTORY = "inventory"  # holder name of what the player carries
DIRECTIONS = ("north", "south", "east", "west")
OPPOSITE = {"north": "south", "south": "north", "east": "west", "west": "east"}

ARIGRAPH_ANCHOR = {
    "source": "Anokhin et al., AriGraph: Learning Knowledge Graph World Models with Episodic Memory for LLM "
              "Agents (arXiv 2407.04363, 2024), README table of the AIRI-Institute/AriGraph repository",
    "model": "GPT-4 (gpt-4-0125-preview in the authors' pipeline scripts), Ariadne agent (planning + ReAct "
             "decision making); every baseline uses the same decision module and differs only in memory",
    "setting": "the authors' own hand-built TextWorld games (Treasure Hunt: keys, locked lockers and notes in a "
               "multi-room house; Cleaning; Cooking), up to 150 steps per attempt; metric: mean normalised game "
               "score (score / max score), not steps",
    "normalised_score": {
        "AriGraph": {"treasure_hunt": 1.0, "cleaning": 0.79, "cooking": 1.0, "treasure_hunt_hard": 1.0,
                     "cooking_hard": 1.0},
        "full history": {"treasure_hunt": 0.49, "cleaning": 0.05, "cooking": 0.18},
        "summary": {"treasure_hunt": 0.33, "cleaning": 0.39, "cooking": 0.52, "treasure_hunt_hard": 0.17,
                    "cooking_hard": 0.21},
        "RAG": {"treasure_hunt": 0.33, "cleaning": 0.35, "cooking": 0.36, "treasure_hunt_hard": 0.17,
                "cooking_hard": 0.17},
        "human players (all)": {"treasure_hunt": 0.96, "cleaning": 0.59, "cooking": 0.32},
    },
}
"""AriGraph's published TextWorld results, the anchor beside this module's agent numbers. Their games,
model (GPT-4) and metric differ from ours (generated games, SmolLM2-135M, steps and success)."""


# ------------------------------------------------------------------------------------------------
# availability
class TextWorldMissingError(ImportError):
    """TextWorld (or jericho, which plays its games) is not installed."""


def textworld_available() -> bool:
    """Whether ``textworld`` and ``jericho`` import."""
    return skip_reason() is None


def skip_reason() -> str | None:
    """``None`` when TextWorld can be used, else one line saying what is missing and how to add it."""
    try:
        import jericho  # noqa: F401
        import textworld  # noqa: F401
    except ImportError as e:
        return f"TextWorld games skipped: {e.name or e} is not installed ({INSTALL_HINT})"
    return None


def require_textworld():
    """The ``textworld`` module, or :class:`TextWorldMissingError` saying how to install it."""
    reason = skip_reason()
    if reason is not None:
        raise TextWorldMissingError(reason)
    import textworld
    import textworld.challenges

    return textworld


class GameFileError(ValueError):
    """A game file that is missing, of a format TextWorld cannot play, or corrupt."""


# ------------------------------------------------------------------------------------------------
# games
_KINDS = ("treasure_hunter", "cooking", "custom")
_MODES = ("easy", "medium", "hard")
_COOKING_ROOMS = (1, 6, 9, 12)


@dataclass(frozen=True)
class GameSpec:
    """A game for TextWorld's generator: same spec (seed included), same game.

    ``treasure_hunter``: find and take one object in a maze of ``n_rooms`` (``mode`` easy: no doors
    nor containers; medium: closed doors and containers, distractor furniture; hard: locked ones and
    their keys); ``quest_length`` actions. ``cooking``: fetch ``take`` of the ``recipe``'s ingredients
    across ``n_rooms`` (1, 6, 9 or 12), prepare the meal in the kitchen and eat it; ``open``,
    ``cook``, ``cut`` add those skills. ``custom``: TextWorld's generic generator, ``n_objects``
    objects and a quest of ``quest_length`` actions.
    """

    kind: str = "treasure_hunter"  # treasure_hunter | cooking | custom
    n_rooms: int = 5  # rooms (cooking: 1, 6, 9 or 12)
    quest_length: int = 3  # actions of the quest (treasure_hunter, custom)
    mode: str = "medium"  # treasure_hunter: easy | medium | hard
    n_objects: int = 6  # custom: objects in the world
    recipe: int = 1  # cooking: ingredients in the recipe (1-5)
    take: int = 1  # cooking: ingredients to fetch (<= recipe)
    open: bool = True  # cooking: containers and doors start closed
    cook: bool = False  # cooking: ingredients must be cooked
    cut: bool = False  # cooking: ingredients must be cut
    seed: int = 0  # TextWorld's generator seed (map, objects, quest, text)

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"kind must be one of {_KINDS}, got {self.kind!r}")
        if self.mode not in _MODES:
            raise ValueError(f"mode must be one of {_MODES}, got {self.mode!r}")
        for name in ("n_rooms", "quest_length", "n_objects", "recipe"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {getattr(self, name)!r}")
        if isinstance(self.seed, (bool, np.bool_)) or not isinstance(self.seed, (int, np.integer)) \
                or not 0 <= self.seed < 2**32:  # numpy's generators (TextWorld's) take 0 .. 2**32 - 1
            raise ValueError(f"seed must be an integer in [0, 2**32), got {self.seed!r}")
        object.__setattr__(self, "seed", int(self.seed))
        if self.kind == "cooking":
            if self.n_rooms not in _COOKING_ROOMS:
                raise ValueError(f"cooking games have {_COOKING_ROOMS} rooms, got n_rooms={self.n_rooms}")
            if not 1 <= self.recipe <= 5:
                raise ValueError(f"recipe must be 1-5 ingredients, got {self.recipe}")
            if not 0 <= self.take <= self.recipe:
                raise ValueError(f"take must be between 0 and recipe ({self.recipe}), got {self.take}")
        if self.kind == "treasure_hunter" and self.n_rooms < 2:
            raise ValueError("a treasure hunt needs n_rooms >= 2")

    @property
    def name(self) -> str:
        """A readable id: kind, size and seed."""
        if self.kind == "cooking":
            skills = "".join(k[0] for k in ("open", "cook", "cut") if getattr(self, k))
            return f"tw-cooking-r{self.n_rooms}-i{self.recipe}t{self.take}{skills}-s{self.seed}"
        if self.kind == "custom":
            return f"tw-custom-r{self.n_rooms}-o{self.n_objects}-q{self.quest_length}-s{self.seed}"
        return f"tw-treasure_hunter-r{self.n_rooms}-q{self.quest_length}-{self.mode}-s{self.seed}"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def key(self) -> str:
        """Content hash of the spec and the TextWorld version (the cache key)."""
        blob = json.dumps({"spec": self.to_dict(), "textworld": _tw_version()}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _tw_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("textworld")
    except metadata.PackageNotFoundError:
        return None


def build_game(spec: GameSpec):
    """The ``textworld.Game`` for ``spec`` (generated, not compiled). Same spec, same game."""
    tw = require_textworld()
    from textworld.generator.data import KnowledgeBase
    from textworld.generator.game import GameOptions

    options = GameOptions()
    options.seeds = int(spec.seed)
    if spec.kind == "treasure_hunter":
        from textworld.challenges.tw_treasure_hunter import treasure_hunter as th

        options.kb = KnowledgeBase.load(th.KB_PATH)
        options.nb_rooms = spec.n_rooms
        options.quest_length = spec.quest_length
        game = th.make_game(spec.mode, options)
    elif spec.kind == "cooking":
        from textworld.challenges.tw_cooking import cooking

        settings = {"recipe": spec.recipe, "take": spec.take, "go": spec.n_rooms, "open": spec.open,
                    "cook": spec.cook, "cut": spec.cut, "drop": False, "recipe_seed": 0, "split": ""}
        game = cooking.make(settings, options)
    else:
        options.nb_rooms = spec.n_rooms
        options.nb_objects = spec.n_objects
        options.quest_length = spec.quest_length
        game = tw.generator.make_game(options)
    game.metadata["mags_spec"] = spec.to_dict()
    return game


@dataclass(frozen=True)
class GameFile:
    """A playable game: the ``.z8`` file and the TextWorld ``.json`` beside it (the engine's state)."""

    path: Path
    name: str
    spec: GameSpec | None = None

    @property
    def json_path(self) -> Path:
        return self.path.with_suffix(".json")


def _default_cache() -> Path:
    from .models import project_root

    return project_root() / "data" / "generated" / "textworld"


def _compile(game, folder: Path, stem: str = "game") -> Path:
    """Compile ``game`` into ``folder/<stem>.z8`` (+ ``.json``) through a temporary folder (atomic)."""
    tw = require_textworld()
    from textworld.generator.game import GameOptions

    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        options = GameOptions()
        options.path = str(tmp / f"{stem}.z8")
        options.force_recompile = True
        out = Path(tw.generator.compile_game(game, options))
        if not out.is_file() or not out.with_suffix(".json").is_file():
            raise GameFileError(f"TextWorld's compiler produced no game in {tmp}")
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return folder / f"{stem}.z8"


def make_game(spec: GameSpec, *, cache_dir: str | Path | None = None, force: bool = False) -> GameFile:
    """Generate and compile the game of ``spec``, or reuse the cached one.

    The game lands in ``<cache_dir>/<spec.name>-<spec.key()>/game.z8`` (default cache
    ``data/generated/textworld/``) with ``game.json`` (TextWorld's description of the world) and a
    ``meta.json`` (the spec and the TextWorld version). Compiling runs Inform 7 (a few seconds);
    an interrupted compile leaves nothing behind, and a cached game that fails the file checks
    (:func:`_check_zmachine`) is compiled again.
    """
    if not isinstance(spec, GameSpec):
        raise TypeError(f"spec must be a GameSpec, got {type(spec).__name__}")
    cache = Path(cache_dir) if cache_dir is not None else _default_cache()
    folder = cache / f"{spec.name}-{spec.key()}"
    path = folder / "game.z8"
    cached = path.is_file() and path.with_suffix(".json").is_file() and (folder / "meta.json").is_file()
    if cached and not force:
        try:
            _check_zmachine(path)
        except GameFileError:  # a damaged cache (a disk error, a half-copied folder): made again, not trusted
            cached = False
    if force or not cached:
        game = build_game(spec)
        _compile(game, folder)
        meta = {"spec": spec.to_dict(), "textworld": _tw_version(), "objective": game.objective,
                "walkthrough": list(game.metadata.get("walkthrough") or [])}
        from .repro import atomic_write_text

        atomic_write_text(folder / "meta.json", json.dumps(meta, indent=1) + "\n")
    return GameFile(path=path, name=spec.name, spec=spec)


_ZMACHINE = re.compile(r"\.z[1-8]$")


def _check_zmachine(path: Path) -> None:
    """Header checks before jericho sees the file (a corrupt story file can crash the interpreter: a damaged
    body with an intact header killed the process with SIGFPE): version, declared length, and the header's
    checksum (the Z-machine standard's: the sum of the bytes from 0x40 to the declared length, mod 0x10000;
    0 in the header means the game records none)."""
    whole = path.read_bytes()
    data = whole[:64]
    if len(data) < 64:
        raise GameFileError(f"{path} is not a Z-machine game: {len(data)} bytes, shorter than its 64-byte header")
    version = data[0]
    if not 1 <= version <= 8:
        raise GameFileError(f"{path} is not a Z-machine game: header version byte is {version}, expected 1-8; "
                            "the file is corrupt or of another format")
    scale = 2 if version <= 3 else 4 if version <= 5 else 8
    declared = int.from_bytes(data[0x1A:0x1C], "big") * scale
    actual = path.stat().st_size
    if declared and actual < declared:
        raise GameFileError(f"{path} is truncated: its header declares {declared} bytes, the file has {actual}")
    stored = int.from_bytes(data[0x1C:0x1E], "big")
    if stored and declared:
        computed = sum(whole[0x40:declared]) % 0x10000
        if computed != stored:
            raise GameFileError(f"{path} is corrupt: its header checksum is {stored}, its bytes sum to {computed}; "
                                "make or copy the game again")


def load_game(path: str | Path, *, cache_dir: str | Path | None = None) -> GameFile:
    """Open an existing game: a TextWorld ``.z8`` (with its ``.json``), or a TextWorld ``.ulx``.

    TextWorld 1.7 plays only Z-machine games; a ``.ulx`` made by TextWorld is recompiled to ``.z8``
    from the ``.json`` beside it (into the cache). Raises :class:`GameFileError` for a missing file,
    a format TextWorld cannot play, a game without its ``.json`` (the engine's state is unknown:
    questions need it) or a corrupt file.
    """
    p = Path(path)
    if not p.is_file():
        raise GameFileError(f"game file {p} does not exist; make one with make_game(GameSpec(...)) or "
                            "`tw-make tw-treasure_hunter --level 5 --output games/th.z8`")
    sidecar = p.with_suffix(".json")
    if p.suffix == ".ulx":
        if not sidecar.is_file():
            raise GameFileError(f"{p}: TextWorld 1.7 no longer plays Glulx (.ulx) games, and there is no "
                                f"{sidecar.name} beside it to recompile it to .z8; recompile it with "
                                "`tw-make ... --format z8` or use TextWorld < 1.7")
        tw = require_textworld()
        try:
            game = tw.Game.load(str(sidecar))
        except Exception as e:
            raise GameFileError(f"{sidecar} is not a TextWorld game description ({type(e).__name__}: {e})") from e
        digest = hashlib.sha256(sidecar.read_bytes()).hexdigest()[:12]
        cache = Path(cache_dir) if cache_dir is not None else _default_cache()
        folder = cache / f"{p.stem}-ulx-{digest}"
        z8 = folder / "game.z8"
        if not z8.is_file():
            _compile(game, folder)
        return GameFile(path=z8, name=p.stem)
    if not _ZMACHINE.search(p.name):
        raise GameFileError(f"{p}: unsupported game format {p.suffix!r}; TextWorld plays Z-machine files "
                            "(.z1-.z8, with TextWorld's .json beside them) and this module recompiles "
                            "TextWorld .ulx games")
    if not sidecar.is_file():
        raise GameFileError(f"{p} has no {sidecar.name} beside it: only games made by TextWorld carry the "
                            "engine state that questions and scoring need")
    _check_zmachine(p)
    try:
        json.loads(sidecar.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise GameFileError(f"{sidecar} is corrupt: not JSON ({e})") from e
    spec = None
    meta = p.parent / "meta.json"
    if meta.is_file():
        try:
            spec = GameSpec(**json.loads(meta.read_text())["spec"])
        except (ValueError, KeyError, TypeError):
            spec = None
    return GameFile(path=p, name=spec.name if spec else p.stem, spec=spec)


# ------------------------------------------------------------------------------------------------
# the engine's state
_BANNER = re.compile(r"^[\s$\\/|_<>]*$")


def clean_text(raw: str) -> str:
    """A game's output as a reader would quote it: no ASCII-art banner, no prompt or status line.

    >>> clean_text("You pick up the key.\\n\\n\\n>   -= Hall =-0/1")
    'You pick up the key.'
    """
    lines = []
    for line in raw.replace("\r", "").split("\n"):
        if line.lstrip().startswith(">"):
            break  # the prompt; what follows is the status bar
        if "$$" in line or (line.strip() and _BANNER.match(line)):
            continue
        lines.append(line.rstrip())
    text = "\n".join(lines)
    text = re.sub(r"\n{3,}", "\n\n", text).strip()
    return text


def _kind_of_type(types: Any, t: str) -> str:
    """Map a TextWorld type name to room | door | container | supporter | object | player | inventory | other."""
    simple = {"r": "room", "d": "door", "c": "container", "s": "supporter", "P": "player", "I": "inventory"}
    if t in simple:
        return simple[t]
    if types is not None:
        try:
            for parent, kind in (("c", "container"), ("s", "supporter"), ("d", "door"), ("r", "room")):
                if types.is_descendant_of(t, parent):
                    return kind
            if types.is_descendant_of(t, "o") or types.is_descendant_of(t, "t"):
                return "object"
        except (KeyError, ValueError, AttributeError):
            pass
    return "object" if t in ("o", "k", "f", "t") else "other"


@dataclass(frozen=True)
class WorldState:
    """What the engine knows at one step (names are the game's display names).

    Attributes
    ----------
    player : str
        The room the player is in.
    holders : dict
        Every located entity -> its holder: a room, a container, a supporter or :data:`INVENTORY`.
    kinds : dict
        Entity -> ``room | door | container | supporter | object``.
    exits : dict
        ``(room, direction) -> room``: ``exits[("hall", "north")] == "attic"`` when the attic lies
        north of the hall.
    open, locked : frozenset
        Open and locked containers and doors.
    """

    player: str
    holders: Mapping[str, str]
    kinds: Mapping[str, str]
    exits: Mapping[tuple[str, str], str] = field(default_factory=dict)
    open: frozenset = frozenset()
    locked: frozenset = frozenset()

    @classmethod
    def from_facts(cls, facts: Iterable[Any], types: Any = None) -> WorldState:
        """Build from TextWorld's human-readable facts (``Proposition`` with named ``Variable`` s)."""
        player, holders, kinds, exits = None, {}, {}, {}
        opened, locked = set(), set()
        for f in facts:
            args = [(v.name, v.type) for v in f.arguments]
            for name, t in args:
                if t not in ("P", "I"):
                    kinds.setdefault(name, _kind_of_type(types, t))
            if f.name == "at" and args[0][1] == "P":
                player = args[1][0]
            elif f.name in ("at", "in", "on") and len(args) == 2:
                holder_kind = _kind_of_type(types, args[1][1])
                if holder_kind in ("room", "container", "supporter", "inventory"):
                    holders[args[0][0]] = INVENTORY if holder_kind == "inventory" else args[1][0]
            elif f.name.endswith("_of") and f.name[:-3] in DIRECTIONS:
                exits[(args[1][0], f.name[:-3])] = args[0][0]
            elif f.name == "open":
                opened.add(args[0][0])
            elif f.name == "locked":
                locked.add(args[0][0])
        if player is None:
            raise ValueError("the facts do not say where the player is (no at(P, room))")
        kinds = {k: v for k, v in kinds.items() if v != "other"}
        return cls(player=player, holders=holders, kinds=kinds, exits=exits, open=frozenset(opened),
                   locked=frozenset(locked))

    @property
    def rooms(self) -> list[str]:
        return sorted(n for n, k in self.kinds.items() if k == "room")

    def holders_of(self, entity: str) -> list[str]:
        """What holds ``entity``, then what holds that, and so on (up to its room or :data:`INVENTORY`).

        >>> WorldState("hall", {"key": "chest", "chest": "hall"}, {"hall": "room"}).holders_of("key")
        ['chest', 'hall']
        """
        out, h = [], self.holders.get(entity)
        while h is not None and h not in out:
            out.append(h)
            h = self.holders.get(h)
        return out

    def room_of(self, entity: str) -> str | None:
        """The room an entity is in (through containers and supporters); None for carried things."""
        for h in self.holders_of(entity):
            if h == INVENTORY:
                return None
            if self.kinds.get(h) == "room":
                return h
        return None

    def contents(self, holder: str) -> list[str]:
        """What ``holder`` (a room, container, supporter or :data:`INVENTORY`) directly holds, sorted."""
        return sorted(e for e, h in self.holders.items() if h == holder)

    def visible(self) -> set[str]:
        """Entities the player can perceive now: in the room (not inside closed containers) or carried."""
        out = set()
        for e in self.holders:
            h, ok, seen = self.holders[e], True, set()
            while ok and h not in seen:
                seen.add(h)
                if h == INVENTORY or h == self.player:
                    break
                kind = self.kinds.get(h)
                if kind == "room" or kind == "container" and h not in self.open:
                    ok = False
                else:
                    h = self.holders.get(h)
                    ok = h is not None
            if ok:
                out.add(e)
        return out


@dataclass
class Step:
    """One step of play: the command (None at reset), the cleaned text and the engine's state."""

    index: int
    command: str | None
    text: str
    state: WorldState
    admissible: list[str]
    done: bool = False
    won: bool = False
    lost: bool = False
    score: int = 0
    policy: list[str] = field(default_factory=list)  # the engine's shortest winning commands from here

    @property
    def observation(self) -> str:
        """What the player saw: the command echoed before the game's answer (``"> take key\nYou pick up
        the key."``), the opening text alone at reset."""
        return self.text if self.command is None else f"> {self.command}\n{self.text}"


class TWGame:
    """A TextWorld game played through jericho, with the engine's state at every step.

    >>> g = TWGame(make_game(GameSpec(seed=1)))     # doctest: +SKIP
    >>> first = g.reset(); first.state.player       # doctest: +SKIP
    """

    def __init__(self, game: GameFile | str | Path) -> None:
        tw = require_textworld()
        self.game = game if isinstance(game, GameFile) else load_game(game)
        if _ZMACHINE.search(self.game.path.name):  # a cached or handed-in GameFile is checked too
            _check_zmachine(self.game.path)
        infos = tw.EnvInfos(facts=True, admissible_commands=True, policy_commands=True, objective=True,
                            entities=True, max_score=True, won=True, lost=True, score=True)
        try:
            with warnings.catch_warnings():  # jericho: "not fully supported" (its own score detection; TextWorld's is used)
                warnings.simplefilter("ignore")
                self.env = tw.start(str(self.game.path), infos)
            self._tw_game = self.env._game  # loaded once by TextWorld's wrappers (parsing it again costs seconds)
            self._types = self._tw_game.kb.types
            self._inform7 = self.env._inform7
        except GameFileError:
            raise
        except Exception as e:
            raise GameFileError(f"{self.game.path} could not be loaded ({type(e).__name__}: {e})") from e
        self.objective = ""
        self.max_score = 0
        self.walkthrough: list[str] = list(self._tw_game.metadata.get("walkthrough") or [])
        self._index = -1
        self._gs = None

    @property
    def entities(self) -> list[str]:
        """Names of every room, door, container, supporter and object of the game."""
        return sorted(info.name for info in self._tw_game.infos.values()
                      if info.name and info.type not in ("P", "I"))

    def ends_game(self, command: str) -> bool:
        """Whether ``command``, sent now, would end the game (won or lost), by the engine's quest logic."""
        gs = self._gs
        prog = gs.get("_game_progression") if gs is not None else None
        if prog is None:
            return False
        actions = gs.get("_valid_actions") or []
        for action, cmd in zip(actions, self._inform7.gen_commands_from_actions(actions)):
            if cmd == command:
                trial = prog.copy()
                trial.update(action)
                if trial.completed or trial.failed:
                    return True
        return False

    def _step(self, gs: Any, command: str | None) -> Step:
        self._index += 1
        self._gs = gs
        state = WorldState.from_facts(gs["facts"], self._types)
        return Step(index=self._index, command=command, text=clean_text(gs.feedback or ""), state=state,
                    admissible=list(gs["admissible_commands"] or []), done=bool(gs["done"] if command else False),
                    won=bool(gs["won"]), lost=bool(gs["lost"]), score=int(gs["score"] or 0),
                    policy=list(gs["policy_commands"] or []))

    def reset(self) -> Step:
        """Start (or restart) the game; step 0 holds the opening text (objective and first room)."""
        gs = self.env.reset()
        self._index = -1
        self.objective = str(gs["objective"] or "")
        self.max_score = int(gs["max_score"] or 0)
        return self._step(gs, None)

    def step(self, command: str) -> Step:
        """Send one command; the returned step has the game's answer and the new state."""
        if not isinstance(command, str) or not command.strip():
            raise ValueError("a command must be a non-empty string, e.g. 'go north'")
        gs, _, _ = self.env.step(command.strip())
        return self._step(gs, command.strip())

    def close(self) -> None:
        self.env.close()

    def __enter__(self) -> TWGame:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ------------------------------------------------------------------------------------------------
# what the player has witnessed
def _name_runs(text: str, name: str):
    """Where ``text`` names ``name``: whole words (not inside a word or a hyphenated one), any case."""
    return re.finditer(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text, re.IGNORECASE)


def _mentions(text: str, name: str) -> bool:
    return next(_name_runs(text, name), None) is not None


class Witness:
    """What the player has perceived so far, built step by step from the engine's state and the text.

    An entity is *witnessed* at a step when it is perceivable (:meth:`WorldState.visible`) and its
    name occurs in the text of that step; its holder at that moment is recorded. A move between two
    rooms through ``go <direction>`` records that exit (and the way back when the engine agrees).
    Only the player moves things in these games, so a witnessed holder stays true until the player
    witnesses a change.
    """

    def __init__(self) -> None:
        self.step = -1
        self.history: dict[str, list[tuple[int, str]]] = {}  # entity -> [(step, holder)] at each change
        self.last_seen: dict[str, int] = {}
        self.mentioned: set[str] = set()
        self.edges: dict[tuple[str, str], tuple[str, int]] = {}  # (room, dir) -> (room, step)
        self.room_seen: dict[str, int] = {}  # room -> last step the player was there
        self.inventory_removals = 0
        self.inventory_ever = False
        self.state: WorldState | None = None

    def update(self, step: Step, entities: Iterable[str] = ()) -> None:
        """Record one step (``entities``: the game's names, to track mentions of unseen ones)."""
        prev = self.state
        s = step.state
        self.step = step.index
        text = step.text
        for name in entities:
            if name not in self.mentioned and _mentions(text, name):
                self.mentioned.add(name)
        self.room_seen[s.player] = step.index
        if _mentions(text, s.player):
            self.mentioned.add(s.player)
        for e in s.visible():
            if not _mentions(text, e):
                continue
            self.mentioned.add(e)
            holder = s.holders[e]
            hist = self.history.setdefault(e, [])
            if not hist or hist[-1][1] != holder:
                if hist and hist[-1][1] == INVENTORY:
                    self.inventory_removals += 1
                hist.append((step.index, holder))
            if holder == INVENTORY:
                self.inventory_ever = True
            self.last_seen[e] = step.index
        if prev is not None and step.command and prev.player != s.player:
            m = re.match(r"go (north|south|east|west)$", step.command)
            if m:
                d = m.group(1)
                self.edges[(prev.player, d)] = (s.player, step.index)
                if s.exits.get((s.player, OPPOSITE[d])) == prev.player:
                    self.edges[(s.player, OPPOSITE[d])] = (prev.player, step.index)
        self.state = s

    def holder(self, entity: str) -> str | None:
        """The last witnessed holder of ``entity`` (None if never witnessed)."""
        hist = self.history.get(entity)
        return hist[-1][1] if hist else None

    def n_changes(self, entity: str) -> int:
        return max(0, len(self.history.get(entity, [])) - 1)

    def known_contents(self, holder: str) -> list[str]:
        return sorted(e for e, h in self.history.items() if h[-1][1] == holder)

    def contents_changes(self, holder: str) -> int:
        """Witnessed moves into or out of ``holder`` (an object first seen there is no change)."""
        n = 0
        for hist in self.history.values():
            for (_, a), (_, b) in itertools.pairwise(hist):
                n += (a == holder) + (b == holder)
        return n

    def route(self, start: str, goal: str) -> list[str] | None:
        """Directions along witnessed exits from ``start`` to ``goal`` (shortest), or None."""
        if start == goal:
            return []
        prev: dict[str, tuple[str, str]] = {}
        q = deque([start])
        seen = {start}
        while q:
            r = q.popleft()
            for (a, d), (b, _) in self.edges.items():
                if a == r and b not in seen:
                    seen.add(b)
                    prev[b] = (a, d)
                    if b == goal:
                        path = []
                        while b != start:
                            a, d = prev[b]
                            path.append(d)
                            b = a
                        return path[::-1]
                    q.append(b)
        return None


# ------------------------------------------------------------------------------------------------
# questions from the engine's state
@dataclass(frozen=True)
class QuestionConfig:
    """Which questions are asked, when, and how kinds are told apart."""

    ask_every: int = 6  # a round of questions every this many steps (and after the last step)
    per_round: int = 4  # most questions per round
    retention_gap: int = 8  # steps since last seen from which a question is "retention"
    abstain_per_round: int = 1  # most abstain questions per round
    kinds: tuple[str, ...] = ("where", "contents", "exit", "inventory")  # question families

    def __post_init__(self) -> None:
        for name in ("ask_every", "per_round", "retention_gap"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.abstain_per_round < 0:
            raise ValueError(f"abstain_per_round must be >= 0, got {self.abstain_per_round}")
        bad = set(self.kinds) - {"where", "contents", "exit", "inventory"}
        if bad or not self.kinds:
            raise ValueError(f"kinds must be a non-empty subset of where, contents, exit, inventory; got {self.kinds}")


def _kind(n_changes: int, distance: int, gap: int) -> str:
    return "update" if n_changes > 0 else "retention" if distance >= gap else "recall"


def _q(text: str, answer: list[str], kind: str, family: str, *, n_changes: int | None = None,
       distance: int | None = None) -> dict:
    q = {"ask": text, "answer": answer, "kind": kind, "family": family}
    if n_changes is not None:
        q["n_changes"] = int(n_changes)
    if distance is not None:
        q["distance"] = int(distance)
    return q


def questions_at(witness: Witness, state: WorldState, *, entities: Sequence[str] = (),
                 config: QuestionConfig | None = None) -> list[dict]:
    """Every answerable question now, from the engine's ``state`` and what the player witnessed.

    Returns dicts ``{"ask", "answer" (aliases), "kind", "family", "n_changes"?, "distance"?}`` (the
    ``family`` is one of where / contents / exit / inventory; drop it for the scenario file).

    * where: "Where is the X?" for each witnessed object not carried whose witnessed holder is its
      true holder; answer: the holder (a room, container or supporter), or what holds that up to the
      room (a sock in a locker in the cellar: "locker" or "cellar");
    * contents: "What is in the Y?" for containers and supporters whose true contents are all
      witnessed there (and nothing witnessed there left unseen); answer: exactly those objects
      (:func:`score_state_answer`);
    * exit: "Which room lies north of Z?" for each witnessed exit; answer: that room;
    * inventory: "What are you carrying?" once the player has carried something and what is carried
      is what the player saw carried; answer: exactly those objects, or "nothing";
    * abstain: "Where is the X?" for objects of the game never mentioned nor perceived.
    """
    cfg = config or QuestionConfig()
    t, gap = witness.step, cfg.retention_gap
    out: list[dict] = []
    if "where" in cfg.kinds:
        for e in sorted(witness.history):
            true = state.holders.get(e)
            if true is None or true == INVENTORY or state.kinds.get(e) not in ("object", "container", "supporter"):
                continue
            if witness.holder(e) != true:
                continue  # moved without the player seeing it: not answerable
            n, dist = witness.n_changes(e), t - witness.last_seen[e]
            # the direct holder, then what holds it up to the room: "in the cellar" is true of a sock in its locker
            around = [true] + [h for h in state.holders_of(e)[1:] if h != INVENTORY]
            out.append(_q(f"Where is the {e}?", around, _kind(n, dist, gap), "where", n_changes=n, distance=dist))
    if "contents" in cfg.kinds:
        for y in sorted(h for h in set(state.holders.values()) if state.kinds.get(h) in ("container", "supporter")):
            true = state.contents(y)
            if not true or witness.known_contents(y) != true:
                continue
            n = witness.contents_changes(y)
            dist = t - max(witness.last_seen[e] for e in true)
            out.append(_q(f"What is in the {y}?" if state.kinds[y] == "container" else f"What is on the {y}?",
                          true, _kind(n, dist, gap), "contents", n_changes=n, distance=dist))
    if "exit" in cfg.kinds:
        for (room, d), (dest, when) in sorted(witness.edges.items()):
            if state.exits.get((room, d)) != dest:
                continue
            dist = t - when
            out.append(_q(f"Which room lies {d} of the {room}?", [dest], _kind(0, dist, gap), "exit",
                          n_changes=0, distance=dist))
    if "inventory" in cfg.kinds and witness.inventory_ever:
        carried = state.contents(INVENTORY)
        if set(witness.known_contents(INVENTORY)) == set(carried):  # both ways: nothing left it unseen either
            n = witness.inventory_removals
            out.append(_q("What are you carrying?", carried or ["nothing", "empty handed"],
                          "update" if n else "recall", "inventory", n_changes=n, distance=0))
    for e in sorted(entities):
        kind = state.kinds.get(e)
        if kind == "object" and e not in witness.mentioned and e not in witness.history:
            out.append(_q(f"Where is the {e}?", [], "abstain", "where"))
    return out


def _pick(candidates: list[dict], asked: set, cfg: QuestionConfig, rng: np.random.Generator) -> list[dict]:
    """One round: round-robin over kinds (update, retention, abstain, recall), new questions only."""
    by_kind: dict[str, list[dict]] = {}
    for q in candidates:
        key = (q["ask"], tuple(q["answer"]), q["kind"])
        if key not in asked:
            by_kind.setdefault(q["kind"], []).append(q)
    for qs in by_kind.values():
        order = rng.permutation(len(qs))
        qs[:] = [qs[i] for i in order]
    picked, n_abstain = [], 0
    while len(picked) < cfg.per_round and any(by_kind.values()):
        for kind in ("update", "retention", "abstain", "recall"):
            if len(picked) >= cfg.per_round or not by_kind.get(kind):
                continue
            if kind == "abstain" and n_abstain >= cfg.abstain_per_round:
                by_kind[kind] = []
                continue
            q = by_kind[kind].pop()
            n_abstain += kind == "abstain"
            picked.append(q)
            asked.add((q["ask"], tuple(q["answer"]), q["kind"]))
    return picked


# ------------------------------------------------------------------------------------------------
# play
_POLICIES = ("explore", "random", "walkthrough")


@dataclass(frozen=True)
class PlayConfig:
    """How the exploration policy plays and when questions are asked."""

    policy: str = "explore"  # explore | random | walkthrough
    n_steps: int = 40  # commands played (walkthrough: at most its length)
    avoid_win: bool = True  # never send a command that ends the game, won or lost (so play goes on)
    move_objects: bool = True  # explore/random may take, put and drop things (False: only walk and open)
    start_time: str = "2024-01-01T09:00"  # time of step 0; each step is one minute later
    questions: QuestionConfig = field(default_factory=QuestionConfig)

    def __post_init__(self) -> None:
        if self.policy not in _POLICIES:
            raise ValueError(f"policy must be one of {_POLICIES}, got {self.policy!r}")
        if self.n_steps < 1:
            raise ValueError(f"n_steps must be >= 1, got {self.n_steps}")
        datetime.fromisoformat(self.start_time)

    def time_of(self, step: int) -> str:
        """The date-time of a step: ``start_time`` plus ``step`` minutes (ISO, minutes)."""
        return (datetime.fromisoformat(self.start_time) + timedelta(minutes=step)).isoformat(timespec="minutes")


def _choose(step: Step, visits: Counter, cfg: PlayConfig, rng: np.random.Generator,
            ends: Any = lambda c: False) -> str | None:
    """The exploration policy's next command (None: nothing left to do); ``ends(c)``: c would end the game."""
    skip = ("eat ", "drink ", "examine ", "look", "read ", "close ")
    if not cfg.move_objects:
        skip += ("take ", "put ", "insert ", "drop ")
    cmds = [c for c in step.admissible if not c.startswith(skip)]
    while cmds:
        c = _draw(step, cmds, visits, cfg, rng)
        if not (cfg.avoid_win and ends(c)):
            return c
        cmds.remove(c)
    return None


def _draw(step: Step, cmds: list[str], visits: Counter, cfg: PlayConfig, rng: np.random.Generator) -> str:
    if cfg.policy == "random":
        return str(cmds[rng.integers(len(cmds))])
    # explore: weights favour unvisited rooms, opening things and moving objects about
    weights = []
    for c in cmds:
        if c.startswith("go "):
            dest = step.state.exits.get((step.state.player, c[3:]))
            w = 4.0 / (1 + visits[dest]) if dest else 0.5
        elif c.startswith(("open ", "unlock ")):
            w = 3.0
        elif c.startswith(("take ", "put ", "insert ", "drop ")):
            w = 1.5
        elif c == "inventory":
            w = 0.1
        else:
            w = 0.2
        weights.append(w)
    p = np.asarray(weights) / sum(weights)
    return str(cmds[rng.choice(len(cmds), p=p)])


def play(game: GameFile | str | Path | TWGame, config: PlayConfig | None = None, *, seed: int = 0,
         progress: bool = False) -> tuple[list[Step], list[str]]:
    """Play a game with the configured policy; returns the steps (reset first) and the game's entity names."""
    cfg = config or PlayConfig()
    g = game if isinstance(game, TWGame) else TWGame(game)
    rng = np.random.default_rng(seed)
    steps = [g.reset()]
    visits = Counter({steps[0].state.player: 1})
    plan = list(g.walkthrough)
    from tqdm.auto import tqdm

    bar = tqdm(total=cfg.n_steps, desc=f"play {g.game.name}", disable=not progress, leave=False)
    try:
        for _ in range(cfg.n_steps):
            if steps[-1].done:
                break
            if cfg.policy == "walkthrough":
                if not plan or (cfg.avoid_win and g.ends_game(plan[0])):
                    break
                cmd = plan.pop(0)
            else:
                cmd = _choose(steps[-1], visits, cfg, rng, g.ends_game)
                if cmd is None:
                    break
            steps.append(g.step(cmd))
            visits[steps[-1].state.player] += 1
            bar.update(1)
    finally:
        bar.close()
        if not isinstance(game, TWGame):
            g.close()
    return steps, g.entities


def make_scenario(game: GameFile | str | Path, config: PlayConfig | None = None, *, seed: int = 0,
                  steps: list[Step] | None = None, entities: Sequence[str] | None = None,
                  progress: bool = False) -> dict:
    """Play ``game`` and write the play and its questions as a DESIGN.md game scenario (a dict).

    Every step's text is a ``say`` (``source`` ``"<game>:<step>"``, ``time`` from
    :meth:`PlayConfig.time_of`); the command is written in front of the game's answer
    (``"> take key\\nYou pick up the key."``). After every ``ask_every`` steps and after the last, a
    round of questions from :func:`questions_at` follows (``time`` of that step). ``meta`` keeps the
    game, the policy and the seed; each question's ``family`` is kept in ``meta["families"]``.
    Pass ``steps`` and ``entities`` (from :func:`play`) to reuse a play.
    """
    cfg = config or PlayConfig()
    gf = game if isinstance(game, GameFile) else load_game(game)
    if steps is None:
        steps, entities = play(gf, cfg, seed=seed, progress=progress)
    entities = list(entities or [])
    rng = np.random.default_rng(seed + 1)
    witness, asked = Witness(), set()
    events: list[dict] = []
    families: list[str] = []
    last = len(steps) - 1
    for step in steps:
        witness.update(step, entities)
        text = step.observation
        if text.strip():
            events.append({"say": text.strip(), "source": f"{gf.name}:{step.index}",
                           "time": cfg.time_of(step.index)})
        if step.index and (step.index % cfg.questions.ask_every == 0 or step.index == last):
            cands = questions_at(witness, step.state, entities=entities, config=cfg.questions)
            for q in _pick(cands, asked, cfg.questions, rng):
                families.append(q.pop("family"))
                q["time"] = cfg.time_of(step.index)
                events.append(q)
    desc = (f"TextWorld game {gf.name} played by the {cfg.policy} policy (seed {seed}, {last} steps); "
            "questions from the engine's state")
    kinds = steps[-1].state.kinds if steps else {}
    meta = {"game": gf.name, "game_path": str(gf.path), "spec": gf.spec.to_dict() if gf.spec else None,
            "policy": cfg.policy, "seed": seed, "n_steps": last, "families": families,
            "objects": sorted(e for e in entities if kinds.get(e) != "room"),  # what a list answer may name
            "textworld": _tw_version()}
    return {"name": f"{gf.name}-{cfg.policy}-p{seed}", "description": desc, "events": events, "meta": meta}


# ------------------------------------------------------------------------------------------------
# scoring: the game's rule (mags_lib.game.score)
def score_answer(response: str, aliases: Sequence[str], kind: str | None = None) -> bool:
    """DESIGN.md's rule: an alias occurs in the normalised response as a whole-word run; an abstain
    question (no aliases) is right when the response says the information is unknown.

    >>> score_answer("It is in the wooden chest.", ["wooden chest"]), score_answer("I don't know.", [])
    (True, True)
    """
    from .game import is_correct

    return bool(is_correct(response, list(aliases), kind))


_EMPTY_HANDS = re.compile(r"\b(?:nothing|empty|no\s+(?:items?|objects?|things?)|not\s+(?:carrying|holding)"
                          r"\s+anything|none)\b", re.IGNORECASE)
LIST_FAMILIES = ("inventory", "contents")
"""Question families whose answer is a list: scored as the set of objects named (:func:`score_state_answer`)."""


def named_objects(response: str, objects: Sequence[str]) -> set[str]:
    """The objects of ``objects`` that ``response`` names, longest names first: "Microsoft style key" is one
    object, not also the "key" inside it.

    >>> sorted(named_objects("A Microsoft style key and a sock.", ["key", "Microsoft style key", "sock", "poem"]))
    ['Microsoft style key', 'sock']
    """
    claimed: list[tuple[int, int]] = []
    out = set()
    for name in sorted(set(objects), key=len, reverse=True):
        for m in _name_runs(response, name):
            if not any(a < m.end() and m.start() < b for a, b in claimed):
                claimed.append((m.start(), m.end()))
                out.add(name)
    return out


def score_state_answer(response: str, aliases: Sequence[str], kind: str | None = None, family: str | None = None,
                       objects: Sequence[str] | None = None, subject: str | None = None) -> bool:
    """A state question's answer against the engine's truth.

    A list question (``family`` in :data:`LIST_FAMILIES`: what is carried, what a container holds) is right
    when the objects the response names (:func:`named_objects` over the game's ``objects``, the asked
    container ``subject`` left out) are exactly the true ones: a stale list that still names a dropped
    object, or one true object of three, is wrong. For an empty inventory the response must name no object
    and say so ("nothing", "empty", "not carrying anything", "no items"). Every other question:
    :func:`score_answer` (an alias as a whole-word run; abstain: the response says it does not know).

    >>> objs = ["Cat Calendar", "key", "poem", "sock"]
    >>> score_state_answer("You carry a Cat Calendar and a key.", ["key"], "update", "inventory", objs)
    False
    >>> score_state_answer("A key.", ["key"], "update", "inventory", objs)
    True
    >>> score_state_answer("I am not carrying anything.", ["nothing", "empty handed"], "update", "inventory", objs)
    True
    """
    if family not in LIST_FAMILIES or kind == "abstain":
        return score_answer(response, aliases, kind)
    if objects is None:
        raise ValueError(f"a {family!r} question is scored on the objects its answer names: the scenario's "
                         "meta['objects'] is missing (make it again with make_scenario)")
    named = named_objects(response, [o for o in objects if o != subject])
    if family == "inventory" and set(aliases) == {"nothing", "empty handed"}:
        return not named and bool(_EMPTY_HANDS.search(response) or score_answer(response, aliases, kind))
    return named == set(aliases)


def run_scenario(system: Any, scenario: Mapping, *, progress: bool = False) -> list[dict]:
    """Feed a scenario dict through ``system`` (``observe(text, source=, time=)`` / ``ask(text, time=)``).

    Returns one record per question: kind, question, aliases, response, correct, n_changes, distance.
    """
    from tqdm.auto import tqdm

    rows = []
    meta = scenario.get("meta") or {}
    families = list(meta.get("families") or [])
    objects = meta.get("objects")
    i_ask = 0
    for ev in tqdm(scenario["events"], desc=scenario["name"], disable=not progress, leave=False):
        if "say" in ev:
            system.observe(ev["say"], source=ev.get("source"), time=ev.get("time"))
            continue
        ans = system.ask(ev["ask"], time=ev.get("time"))
        text = getattr(ans, "answer", ans)
        family = families[i_ask] if i_ask < len(families) else None
        subject = re.match(r"What is (?:in|on) the (.+)\?$", ev["ask"]) if family == "contents" else None
        rows.append({"scenario": scenario["name"], "kind": ev["kind"],
                     "family": family, "question": ev["ask"],
                     "answer": list(ev["answer"]), "response": str(text),
                     "correct": score_state_answer(str(text), ev["answer"], ev["kind"], family, objects,
                                                   subject.group(1) if subject else None),
                     "n_changes": ev.get("n_changes"), "distance": ev.get("distance")})
        i_ask += 1
    return rows


def _bootstrap(values: np.ndarray, n_boot: int, rng: np.random.Generator) -> tuple[float, float]:
    if len(values) == 0:
        return (float("nan"), float("nan"))
    means = rng.choice(values, size=(n_boot, len(values)), replace=True).mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def accuracy_table(records: Sequence[Mapping], *, by: str = "kind", n_boot: int = 1000, seed: int = 0,
                   group: str | None = None, cluster: str | None = None):
    """Accuracy per ``by`` value and overall, with 95% percentile-bootstrap intervals (pandas frame).

    ``group`` (e.g. ``"system"``) adds one block of rows per value of that column. ``cluster`` (e.g.
    ``"game"``): resample that column's values, not single questions (questions of one game share one
    memory), pooling the accuracy over the resampled clusters' questions (as the game's report does,
    :func:`mags_lib.game.report.bootstrap_ci`); ``n_clusters`` then counts them.
    """
    import pandas as pd

    df = pd.DataFrame(list(records))
    cols = [group or "all", by, "n", "accuracy", "ci_low", "ci_high"] + (["n_clusters"] if cluster else [])
    if df.empty:
        return pd.DataFrame(columns=cols)
    rng = np.random.default_rng(seed)
    rows = []
    for gname, gdf in (df.groupby(group, sort=False) if group else [("all", df)]):
        parts = list(gdf.groupby(by, sort=True)) + [("overall", gdf)]
        for key, sub in parts:
            vals = sub["correct"].astype(float).to_numpy()
            row = {group or "all": gname, by: key, "n": len(vals), "accuracy": float(vals.mean())}
            if cluster:
                from .game.report import bootstrap_ci

                per = sub.assign(correct=sub["correct"].astype(float)).groupby(cluster)["correct"].agg(["sum", "count"])
                _, lo, hi = bootstrap_ci(per["sum"].to_numpy(), per["count"].to_numpy(), n_boot=n_boot,
                                         seed=int(rng.integers(2**31)))
                row.update(ci_low=lo, ci_high=hi, n_clusters=len(per))
            else:
                lo, hi = _bootstrap(vals, n_boot, rng)
                row.update(ci_low=lo, ci_high=hi)
            rows.append(row)
    return pd.DataFrame(rows, columns=cols)


# ------------------------------------------------------------------------------------------------
# a perfect memory of what was witnessed (no language model): the upper bound and the question check
class PerfectMemory:
    """Answers from the witnessed facts, as a perfect memory would; ``observe`` feeds it the play.

    It answers the question forms of :func:`questions_at` and of :class:`MemoryAgent` ("Where is
    the X?", "What is in the Y?", "Which room lies north of the Z?", "What are you carrying?",
    "Which way from the Z leads to the R?"), and says it does not know otherwise. It reads the
    world only through a :class:`Witness` updated with the engine's steps (:meth:`witness_step`, or
    by :meth:`observe` when built with the play's ``steps``: then it runs a scenario of
    :func:`make_scenario` like any system), so it knows exactly what the player has perceived.
    """

    def __init__(self, entities: Sequence[str] = (), steps: Sequence[Step] | None = None) -> None:
        self.witness = Witness()
        self.entities = list(entities)
        self.steps = list(steps) if steps is not None else None
        self.n_observations = 0
        self.n_asks = 0

    def witness_step(self, step: Step) -> None:
        self.witness.update(step, self.entities)

    def observe(self, text: str, source: str | None = None, time: str | None = None) -> None:
        """Count the observation; with ``steps`` given, witness the step its source names (``"<game>:<i>"``)."""
        self.n_observations += 1
        if self.steps is not None and source is not None:
            i = int(str(source).rsplit(":", 1)[1])
            self.witness_step(self.steps[i])

    def ask(self, question: str, time: str | None = None) -> str:
        self.n_asks += 1
        w, unknown = self.witness, "I don't know: that is not in my memory."
        m = re.match(r"where is the (.+?)\?$", question, re.IGNORECASE)
        if m:
            h = w.holder(m.group(1))
            return unknown if h is None else ("You are carrying it." if h == INVENTORY else f"In the {h}.")
        m = re.match(r"what is (?:in|on) the (.+?)\?$", question, re.IGNORECASE)
        if m:
            items = w.known_contents(m.group(1))
            return ", ".join(items) if items else unknown
        m = re.match(r"which room lies (north|south|east|west) of the (.+?)\?$", question, re.IGNORECASE)
        if m:
            e = w.edges.get((m.group(2), m.group(1).lower()))
            return f"The {e[0]}." if e else unknown
        if re.match(r"what are you carrying\?$", question, re.IGNORECASE):
            items = w.known_contents(INVENTORY)
            return ", ".join(items) if items else "Nothing."
        m = re.match(r"which way from the (.+?) leads to the (.+?)\?$", question, re.IGNORECASE)
        if m:
            path = w.route(m.group(1), m.group(2))
            return f"Go {path[0]}." if path else unknown
        return unknown


# ------------------------------------------------------------------------------------------------
# an agent that asks its memory what to do
@dataclass(frozen=True)
class AgentConfig:
    """The agent's budget and habits (the same with and without memory)."""

    max_steps: int = 40  # commands before the episode counts as failed
    use_memory: bool = True  # observe every step and ask memory where to go; False: the same agent, no memory
    seed: int = 0  # the exploration choices (ties and unknowns)
    explore_first: int = 0  # steps of a seeded exploration walk observed before the episode (0: none)
    start_time: str = "2024-01-01T09:00"  # time of step 0 given to observe/ask (one minute per step)
    move_notes: bool = True  # after a move, the agent's own note "Going <d> from the <A> leads to the <B>." heads
    #                          the observation it gives memory (what it did; the game's text leaves it implicit)

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}")
        if self.explore_first < 0:
            raise ValueError(f"explore_first must be >= 0, got {self.explore_first}")
        datetime.fromisoformat(self.start_time)


@dataclass
class EpisodeResult:
    """One episode: the game, whether it was won, in how many steps, and what the agent did."""

    game: str
    won: bool
    steps: int  # to finish; the budget (AgentConfig.max_steps) when not won (``commands`` holds what was played)
    score: int
    max_score: int
    commands: list[str]
    n_asks: int
    memory_moves: int  # commands chosen because of a memory answer
    seconds: float
    use_memory: bool
    answers: dict[str, int] = field(default_factory=dict)  # memory's answers judged against the engine's state:
    # "<family>/<verdict>" counts, family where | exit, verdict right | wrong | unknown (said it does not know)


def _targets(objective: str, entities: Sequence[str]) -> list[str]:
    """Objects the task text names (longest names first, so "red apple" wins over "apple")."""
    found = [e for e in sorted(entities, key=len, reverse=True) if _mentions(objective, e)]
    out: list[str] = []
    for e in found:
        if not any(_mentions(o, e) for o in out):
            out.append(e)
    return out


class MemoryAgent:
    """Plays a game; with memory it asks ``system`` where what it needs is and which way to go.

    Every step, both agents: prepare or eat the meal when possible; read the cookbook once; take an
    object the task needs (named by the objective, or by the cookbook once read); open or unlock what
    is closed. Otherwise the agent must move. **With memory** it asks ``"Where is the <target>?"``
    (and, when the answer names a container, where that is), and ``"Which room lies <direction> of
    the <here>?"`` for each exit (the question family :func:`questions_at` scores memory on). When an
    exit leads to the room memory named, it takes it; when none does, it asks ``"Which way from the
    <here> leads to the <room>?"`` (a room further away) and takes the exit the answer names. It follows
    memory to a destination from a room once: back in that room with the same destination, memory was
    wrong (a perfect memory never leads in a circle), so it explores instead. Otherwise (nothing to look
    for, or no usable answer) it prefers exits memory knows nothing about. **Without memory**, or when
    memory gives no usable answer, it takes a random exit, avoiding the way it came. With memory, every
    observation goes to ``system.observe`` (source ``"<game>:<step>"``, one minute per step), a move's headed
    by the agent's note of it (:func:`move_note`, ``AgentConfig.move_notes``). Each answer
    memory gives to "where" and "which room lies" is judged against the engine's state (``answers``).

    ``system`` is anything with ``observe(text, source=, time=)`` and ``ask(text, time=)`` returning
    text or an object with ``.answer``: any ``MAGS`` configuration, or :class:`PerfectMemory`.
    """

    def __init__(self, system: Any = None, config: AgentConfig | None = None) -> None:
        self.config = config or AgentConfig()
        if self.config.use_memory and system is None:
            raise ValueError("use_memory=True needs a system (a MAGS instance or PerfectMemory)")
        self.system = system if self.config.use_memory else None
        self.rng = np.random.default_rng(self.config.seed)
        self.n_asks = 0
        self.memory_moves = 0
        self.read_cookbook = False
        self.tried: set[tuple[str, str]] = set()  # (room, destination) pairs memory already chose a way from
        self.answers: Counter = Counter()  # "<family>/<verdict>": memory's answers judged against the engine

    def _time(self, i: int) -> str:
        return (datetime.fromisoformat(self.config.start_time) + timedelta(minutes=i)).isoformat(timespec="minutes")

    def _ask(self, question: str, when: int) -> str:
        self.n_asks += 1
        ans = self.system.ask(question, time=self._time(when))
        return str(getattr(ans, "answer", ans))

    def _judge(self, family: str, answer: str, truths: Sequence[str]) -> None:
        """Count memory's ``answer`` as right (it names one of ``truths``: the engine's state), unknown (it
        says it does not know) or wrong; never used to act, only to show how far memory can be trusted."""
        verdict = ("right" if any(_mentions(answer, t) for t in truths) else
                   "unknown" if score_answer(answer, [], "abstain") else "wrong")
        self.answers[f"{family}/{verdict}"] += 1

    def _named(self, answer: str, names: Sequence[str], kinds: Mapping[str, str], kind: tuple[str, ...],
               exclude: Sequence[str] = ()) -> str | None:
        for n in sorted(names, key=len, reverse=True):
            if n not in exclude and kinds.get(n) in kind and _mentions(answer, n):
                return n
        return None

    def _memory_move(self, step: Step, wanted: list[str], goal_room: str | None, names: Sequence[str],
                     exits: list[str], when: int) -> str | None:
        here, kinds = step.state.player, step.state.kinds
        dest = None
        if wanted:
            answer = self._ask(f"Where is the {wanted[0]}?", when)
            self._judge("where", answer, step.state.holders_of(wanted[0]))  # any holder up to the room is right
            dest = self._named(answer, names, kinds, ("room",), exclude=(here,))
            holder = self._named(answer, names, kinds, ("container", "supporter"), exclude=wanted)
            if dest is None and holder is not None:
                answer = self._ask(f"Where is the {holder}?", when)
                self._judge("where", answer, step.state.holders_of(holder))
                dest = self._named(answer, names, kinds, ("room",), exclude=(here,))
        elif goal_room is not None and goal_room != here:
            dest = goal_room
        beyond, unknown = {}, []  # what memory says lies past each exit
        for c in exits:
            answer = self._ask(f"Which room lies {c[3:]} of the {here}?", when)
            if (here, c[3:]) in step.state.exits:
                self._judge("exit", answer, [step.state.exits[(here, c[3:])]])
            beyond[c] = self._named(answer, names, kinds, ("room",), exclude=(here,))
            if beyond[c] is None:
                unknown.append(c)
        if dest is not None and (here, dest) not in self.tried:  # back where memory sent us: it was wrong
            c = next((c for c in exits if beyond[c] == dest), None)  # the destination next door
            if c is None:  # further away
                way = self._ask(f"Which way from the {here} leads to the {dest}?", when)
                c = next((c for c in exits if _mentions(way, c[3:])), None)
            if c is not None:
                self.tried.add((here, dest))
                return c
        if unknown and len(unknown) < len(exits):
            return str(unknown[self.rng.integers(len(unknown))])
        return None

    def act(self, step: Step, targets: Sequence[str], names: Sequence[str], last_move: str | None,
            goal_room: str | None = None, when: int | None = None) -> str:
        """The next command for ``step`` (``names``: every entity name, to read memory's answers)."""
        cmds = step.admissible
        carried = set(step.state.contents(INVENTORY))
        wanted = [t for t in targets if t not in carried]
        for c in cmds:
            if c in ("prepare meal", "eat meal"):
                return c
        if not self.read_cookbook and "examine cookbook" in cmds:
            self.read_cookbook = True
            return "examine cookbook"
        for t in wanted:
            for c in cmds:
                if c.startswith("take ") and _mentions(c.split(" from ")[0], t):
                    return c
        for c in cmds:
            if c.startswith(("open ", "unlock ")):
                return c
        exits = [c for c in cmds if c.startswith("go ")]
        if self.system is not None and exits:
            c = self._memory_move(step, wanted, goal_room, names, exits, step.index if when is None else when)
            if c is not None:
                self.memory_moves += 1
                return c
        if not exits:
            others = [c for c in cmds if not c.startswith(("examine", "look", "inventory", "eat", "drink", "close"))]
            return str(others[self.rng.integers(len(others))]) if others else "look"
        back = f"go {OPPOSITE[last_move]}" if last_move else None
        forward = [c for c in exits if c != back] or exits
        return str(forward[self.rng.integers(len(forward))])


def crossing(prev: Step | None, step: Step) -> tuple[str, str, str] | None:
    """``(direction, room left, room entered)`` when ``step`` was a ``go <direction>`` from ``prev`` into
    another room; None otherwise (no step before it, another command, or a blocked move)."""
    m = re.match(r"go (north|south|east|west)$", step.command or "")
    if prev is None or m is None or prev.state.player == step.state.player:
        return None
    return m.group(1), prev.state.player, step.state.player


def move_note(prev: Step | None, step: Step) -> str:
    """The agent's note of the move from ``prev`` to ``step`` ("" when the step was no move between rooms)."""
    c = crossing(prev, step)
    return f"Going {c[0]} from the {c[1]} leads to the {c[2]}." if c else ""


def agent_observation(prev: Step | None, step: Step, notes: bool) -> str:
    """What the agent tells memory of ``step``: the game's text, headed by :func:`move_note` when ``notes``."""
    text = step.observation.strip()
    note = move_note(prev, step) if notes else ""
    return f"{note}\n{text}" if note and text else note or text


def _observe(system: Any, step: Step, name: str, when: str, prev: Step | None = None, notes: bool = False) -> None:
    if isinstance(system, PerfectMemory):
        system.witness_step(step)
    text = agent_observation(prev, step, notes)
    if text:
        system.observe(text, source=f"{name}:{step.index}", time=when)


def run_episode(game: GameFile | str | Path, system: Any = None, config: AgentConfig | None = None, *,
                perfect_memory: bool = False) -> EpisodeResult:
    """Play one episode of ``game`` with :class:`MemoryAgent` and ``system`` (None: no memory).

    With ``config.explore_first`` > 0 the episode is a second visit: a seeded exploration walk of
    that many steps (the ``explore`` policy of :func:`play` that walks and opens but moves nothing,
    so what it saw is still true after the restart; it never ends the game) is observed by
    the memory agent, then the game restarts (the world as it was) and the counted episode begins.
    The agent without memory observes nothing, so the walk changes nothing for it.
    ``perfect_memory=True`` uses a fresh :class:`PerfectMemory` as the system (the upper bound).
    """
    import time as _time

    cfg = config or AgentConfig()
    t0 = _time.perf_counter()
    g = TWGame(game)
    try:
        step = g.reset()
        names = g.entities
        if perfect_memory:
            system = PerfectMemory(names)
        if system is None and cfg.use_memory:
            cfg = dataclasses.replace(cfg, use_memory=False)
        agent = MemoryAgent(system, cfg)
        clock = 0
        if cfg.explore_first and agent.system is not None:
            walk, _ = play(g, PlayConfig(policy="explore", n_steps=cfg.explore_first, move_objects=False),
                           seed=cfg.seed)
            for prev, s in zip([None, *walk], walk, strict=False):
                _observe(agent.system, s, g.game.name, agent._time(clock), prev, cfg.move_notes)
                clock += 1
            step = g.reset()
        objects = [n for n in names if step.state.kinds.get(n) == "object" and n in step.state.holders]
        targets = [t for t in _targets(g.objective, objects) if t != "cookbook"]
        goal_room = "kitchen" if "kitchen" in step.state.kinds and "meal" in g.objective.lower() else None
        commands: list[str] = []
        last_move, prev = None, None
        for _ in range(cfg.max_steps):
            if agent.system is not None:
                _observe(agent.system, step, g.game.name, agent._time(clock), prev, cfg.move_notes)
            if step.done:
                break
            if step.command == "examine cookbook":
                targets = _targets(step.text, objects) or targets
            cmd = agent.act(step, targets, names, last_move, goal_room=goal_room, when=clock)
            commands.append(cmd)
            m = re.match(r"go (north|south|east|west)$", cmd)
            last_move = m.group(1) if m else last_move
            prev, step = step, g.step(cmd)
            clock += 1
        # steps to finish, censored at the budget: an episode lost early (game over) is no quick finish
        return EpisodeResult(game=g.game.name, won=bool(step.won),
                             steps=len(commands) if step.won else cfg.max_steps, score=step.score,
                             max_score=g.max_score, commands=commands, n_asks=agent.n_asks,
                             memory_moves=agent.memory_moves, seconds=_time.perf_counter() - t0,
                             answers=dict(sorted(agent.answers.items())),
                             use_memory=agent.system is not None)
    finally:
        g.close()


def episode_table(results: Sequence[EpisodeResult | Mapping], *, group: str = "agent", n_boot: int = 1000,
                  seed: int = 0):
    """Success rate and steps to finish per agent, with 95% bootstrap intervals (pandas frame).

    Steps of a failed episode count as its budget (``max_steps``), so "steps" is steps-to-finish with
    failures censored at the budget; ``steps_won`` averages the won episodes only. ``where_right``,
    ``where_wrong``, ``exit_right``, ``exit_wrong``: shares of memory's answers to the agent's "Where is
    the ...?" and "Which room lies ... of the ...?" that the engine's state confirms or contradicts (the
    rest said they did not know; NaN: no such answer).
    """
    import pandas as pd

    df = pd.DataFrame([dataclasses.asdict(r) if isinstance(r, EpisodeResult) else dict(r) for r in results])
    rng = np.random.default_rng(seed)
    rows = []
    for key, sub in df.groupby(group, sort=False):
        won = sub["won"].astype(float).to_numpy()
        steps = sub["steps"].astype(float).to_numpy()
        lo_w, hi_w = _bootstrap(won, n_boot, rng)
        lo_s, hi_s = _bootstrap(steps, n_boot, rng)
        won_steps = sub.loc[sub["won"].astype(bool), "steps"]
        rows.append({group: key, "episodes": len(sub), "success": won.mean(), "success_ci": (lo_w, hi_w),
                     "steps": steps.mean(), "steps_ci": (lo_s, hi_s),
                     "steps_won": float(won_steps.mean()) if len(won_steps) else float("nan"),
                     "asks_per_episode": float(sub["n_asks"].mean())})
        counts: Counter = Counter()
        for a in sub.get("answers", ()):
            counts.update(a if isinstance(a, dict) else {})  # rows without answers (older runs): NaN
        for fam in ("where", "exit"):
            n = sum(v for k, v in counts.items() if k.startswith(f"{fam}/"))
            for verdict in ("right", "wrong"):
                rows[-1][f"{fam}_{verdict}"] = counts[f"{fam}/{verdict}"] / n if n else float("nan")
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------------------
# the map the engine knows
_DELTA = {"north": (0, 1), "south": (0, -1), "east": (1, 0), "west": (-1, 0)}


def _layout(state: WorldState) -> dict[str, tuple[float, float]]:
    """Grid positions of the rooms from the exits (breadth-first from the player's room)."""
    rooms = state.rooms or [state.player]
    pos: dict[str, tuple[float, float]] = {}
    taken: set[tuple[float, float]] = set()
    for start in [state.player] + rooms:
        if start in pos:
            continue
        x0 = max((p[0] for p in pos.values()), default=-2) + 2
        pos[start] = (x0, 0)
        taken.add(pos[start])
        q = deque([start])
        while q:
            r = q.popleft()
            for (a, d), b in sorted(state.exits.items()):
                if a != r or b in pos:
                    continue
                x, y = pos[r][0] + _DELTA[d][0], pos[r][1] + _DELTA[d][1]
                while (x, y) in taken:
                    x, y = x + 0.4, y + 0.4
                pos[b] = (x, y)
                taken.add((x, y))
                q.append(b)
    return pos


def draw_map(state: WorldState, ax: Any = None, *, title: str | None = None, witness: Witness | None = None):
    """Draw the engine's map: rooms on a grid by their exits, what each room holds, the player's room.

    With ``witness``, rooms the player never entered are drawn faded and unseen objects in grey.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 6))
    pos = _layout(state)
    for (a, _d), b in state.exits.items():
        if a in pos and b in pos:
            ax.plot([pos[a][0], pos[b][0]], [pos[a][1], pos[b][1]], color="#999999", lw=2, zorder=1)
    for room, (x, y) in pos.items():
        visited = witness is None or room in witness.room_seen
        color = "#ffd27f" if room == state.player else "#cfe3ff" if visited else "#eeeeee"
        ax.add_patch(plt.Rectangle((x - 0.42, y - 0.3), 0.84, 0.6, facecolor=color, edgecolor="#333333",
                                   zorder=2, alpha=1.0 if visited else 0.6))
        lines = [room + (" (you)" if room == state.player else "")]
        for e in state.contents(room):
            inner = state.contents(e)
            label = e + (f": {', '.join(inner)}" if inner else "")
            if state.kinds.get(e) == "container" and e not in state.open:
                label += " [closed]"
            lines.append(("  " if witness is None or e in witness.history else "  ? ") + label)
        ax.text(x, y, "\n".join(lines[:7]), ha="center", va="center", fontsize=7, zorder=3)
    carried = state.contents(INVENTORY)
    ax.set_title(title or f"engine map (carrying: {', '.join(carried) or 'nothing'})", fontsize=9)
    xs = [p[0] for p in pos.values()] or [0]
    ys = [p[1] for p in pos.values()] or [0]
    ax.set_xlim(min(xs) - 0.7, max(xs) + 0.7)
    ax.set_ylim(min(ys) - 0.6, max(ys) + 0.6)
    ax.set_aspect("equal")
    ax.axis("off")
    return ax


# ------------------------------------------------------------------------------------------------
# studies the notebook runs
GAME_NAMES: dict[str, str] = {
    "none": "none",  # the reader alone, same answer prompt, an empty memory block
    "full_context": "full_context",  # the raw observations, newest kept, as many as fit the reader's window
    "rag": "rag",  # static RAG: the recall_k raw observations most similar to the question, never updated
    "mags_base": "graph_base",  # MAGS: the Liquid Knowledge Graph on the embedded base models
    "mags_trained": "graph_trained",  # MAGS with the trained ask / write / answer models (skipped when absent)
    "rag_trained": "rag_trained",  # static RAG read by the trained answer model: mags_trained's reader, no graph
}
"""This module's system names -> the game's (:data:`mags_lib.game.run.SYSTEMS`): the memory modes of
issue 12, the same configurations, read from the game's table so the two never drift apart."""


def _systems() -> dict[str, dict | None]:
    from .game.run import SYSTEMS as game_systems

    out: dict[str, dict | None] = {"perfect": None}
    out.update({ours: dict(game_systems[theirs]) for ours, theirs in GAME_NAMES.items()})
    return out


SYSTEMS: dict[str, dict | None] = _systems()
"""Systems by name: ``None`` is :class:`PerfectMemory` (the upper bound, no language model); a dict is
the ``MAGSConfig`` keywords of one memory mode, as the game names them (see :data:`GAME_NAMES`):
``none``, ``full_context``, ``rag``, ``mags_base`` (``{}``: MAGS on the base models) and
``mags_trained`` (``{"models": "trained"}``). Every mode is a configuration of the one ``MAGS`` class.
The reader, as in the game: ``none``, ``full_context``, ``rag`` and ``mags_base`` share one reader (the
embedded base model) and one answer prompt; ``mags_trained`` reads with the trained answer model and the
prompt it was trained with (``models="trained"`` covers the ask, write and answer roles), and so does
``rag_trained`` (static RAG, trained reader): the two differ by the memory alone."""


def system_config(name: str, **overrides: Any):
    """The :class:`~mags_lib.agent.MAGSConfig` of system ``name`` (not ``perfect``), ``overrides`` on top
    (settings shared by every system of a run: ``n_threads``, ``seed``, ``embedder``, output lengths).

    >>> system_config("rag", embedder="hash").memory
    'rag'
    """
    if name not in SYSTEMS:
        raise ValueError(f"unknown system {name!r}; choose from {sorted(SYSTEMS)}")
    spec = SYSTEMS[name]
    if spec is None:
        raise ValueError(f"{name!r} is PerfectMemory, not a MAGS configuration")
    from .game.run import make_config

    return make_config(spec, overrides)


def make_system(name: str, *, entities: Sequence[str] = (), steps: Sequence[Step] | None = None,
                seed: int = 0, n_threads: int = 1, backends: Mapping[str, Any] | None = None,
                **overrides: Any) -> Any:
    """A fresh system for ``name`` in :data:`SYSTEMS` (MAGS on ``n_threads`` llama.cpp threads).

    ``overrides`` are ``MAGSConfig`` fields applied over the system's own (e.g. ``embedder="hash"``,
    ``max_new_tokens_answer=16``); ``backends`` (``{role: Backend}``) go to ``MAGS`` as they are (tests
    inject fake models). ``entities`` and ``steps`` are for ``perfect``.
    Raises ``FileNotFoundError`` when the models of ``name`` are missing (``mags_trained`` before training).
    """
    if name not in SYSTEMS:
        raise ValueError(f"unknown system {name!r}; choose from {sorted(SYSTEMS)}")
    if SYSTEMS[name] is None:
        return PerfectMemory(entities, steps)
    from .agent import MAGS

    cfg = system_config(name, **{"n_threads": n_threads, "seed": seed, **overrides})
    return MAGS(cfg, backends=dict(backends) if backends else None)


def _base_of(name: str, base: Mapping[str, Any] | None, trained: Mapping[str, Any] | None) -> dict:
    """The shared ``base`` fields, and ``trained`` on top for a system that reads with the trained models.

    >>> _base_of("rag", {"n_threads": 1}, {"trained_tag": "tw"}), _base_of("rag_trained", None, {"trained_tag": "tw"})
    ({'n_threads': 1}, {'trained_tag': 'tw'})
    """
    spec = SYSTEMS.get(name)
    out = dict(base or {})
    if trained and isinstance(spec, dict) and spec.get("models") == "trained":
        out.update(trained)
    return out


def _unavailable(name: str, base: Mapping[str, Any] | None) -> str | None:
    """None when system ``name`` can be built here, else why not (models checked, not loaded)."""
    if SYSTEMS[name] is None:
        return None
    from .agent import MAGS
    from .embed import HashEmbedder
    from .export import ExportError

    try:
        MAGS(system_config(name, **dict(base or {})), embedder=HashEmbedder(dim=16)).close()
    except (FileNotFoundError, ValueError, ImportError, ExportError) as e:  # missing / stale trained models
        return f"{type(e).__name__}: {e}"
    return None


def _system_on_game(name: str, scenario: dict, steps: list[Step], entities: list[str], seed: int,
                    base: Mapping[str, Any] | None, save_to: str | None = None) -> tuple[list[dict], float]:
    """One system, built fresh, through one game's scenario: its records and the wall time (the final
    memory of a MAGS system is saved to ``save_to`` when given, outside the timed part)."""
    import time as _time

    t0 = _time.perf_counter()
    system = make_system(name, entities=entities, steps=steps, seed=seed, **dict(base or {}))
    try:
        rows = run_scenario(system, scenario)
        took = _time.perf_counter() - t0
        if save_to is not None and hasattr(system, "save"):
            system.save(save_to)
    finally:
        if hasattr(system, "close"):
            system.close()
    return rows, took


def memory_path(root: str | Path, system: str, game: str) -> Path:
    """Where :func:`state_question_study` saves ``system``'s final memory of ``game`` under ``root``."""
    return Path(root) / system / game


def state_question_study(specs: Sequence[GameSpec], systems: Sequence[str], config: PlayConfig | None = None, *,
                         seed: int = 0, cache_dir: str | Path | None = None, base: Mapping[str, Any] | None = None,
                         n_jobs: int = 1, progress: bool = True, save_memories: str | Path | None = None,
                         trained: Mapping[str, Any] | None = None) -> tuple[list[dict], list[dict], dict[str, str]]:
    """Play each game once, ask its questions to every system; returns (records, scenarios, skipped).

    ``systems`` are names of :data:`SYSTEMS` (an unknown name raises ``ValueError`` before anything
    plays); ``base`` holds ``MAGSConfig`` fields shared by every MAGS system (e.g. shorter outputs);
    ``trained`` more fields for the systems that read with the trained models only (``mags_trained``,
    ``rag_trained``), e.g. ``{"answer_model": "models/answer/tw/gguf/model-q8_0.gguf"}`` to try another
    trained reader while the base-model systems stay as they are.
    The games are generated and played here; the (game, system) pairs then run over ``n_jobs``
    processes (joblib; 1: in this process), each from a fresh system with the same seed, so the
    records are the same, in the same order, for any ``n_jobs`` (greedy decoding).
    Each record carries ``system``, ``rooms``, ``game`` and ``game_seconds``: the wall time of that
    system on that whole game (building it, every observation, every question).
    ``skipped`` maps a system that cannot be built (no trained model yet, a stale export) to the reason.
    ``save_memories``: save each MAGS system's final memory (after the game's observations and
    questions) to ``<save_memories>/<system>/<game>/`` (:meth:`mags_lib.MAGS.load` reads it), so a
    figure or an inspection reuses it instead of playing the game again.
    """
    from joblib import Parallel, delayed
    from tqdm.auto import tqdm

    unknown = [n for n in systems if n not in SYSTEMS]
    if unknown:
        raise ValueError(f"unknown systems {unknown}; choose from {sorted(SYSTEMS)}")
    cfg = config or PlayConfig()
    skipped = {n: why for n in dict.fromkeys(systems) if (why := _unavailable(n, _base_of(n, base, trained))) is not None}
    runnable = [n for n in dict.fromkeys(systems) if n not in skipped]
    games, scenarios = [], []
    for spec in tqdm(list(specs), desc="games", disable=not progress):
        gf = make_game(spec, cache_dir=cache_dir)
        steps, ents = play(gf, cfg, seed=seed + spec.seed)
        sc = make_scenario(gf, cfg, seed=seed + spec.seed, steps=steps, entities=ents)
        scenarios.append(sc)
        games.append((spec, gf, steps, ents, sc))
    tasks = [(g, name) for g in games for name in runnable]
    par = Parallel(n_jobs=n_jobs, return_as="generator")
    out = par(delayed(_system_on_game)(name, sc, steps, ents, seed, _base_of(name, base, trained),
                                       None if save_memories is None else str(memory_path(save_memories, name, gf.name)))
              for (_, gf, steps, ents, sc), name in tasks)
    records = []
    for ((spec, gf, *_), name), (rows, took) in zip(tasks, tqdm(out, total=len(tasks), desc="systems x games",
                                                                  disable=not progress)):
        records.extend({**r, "system": name, "rooms": spec.n_rooms, "game": gf.name, "game_seconds": took}
                       for r in rows)
    return records, scenarios, skipped


def _episode(gf: GameFile, agent: str, config: AgentConfig, base: Mapping[str, Any] | None = None) -> EpisodeResult:
    """One episode of ``agent`` (``"none"``, ``"perfect"`` or a MAGS system) on ``gf``."""
    if agent == "none":
        return run_episode(gf, None, config)
    if agent == "perfect":
        return run_episode(gf, config=config, perfect_memory=True)
    system = make_system(agent, seed=config.seed, **dict(base or {}))
    try:
        return run_episode(gf, system, config)
    finally:
        system.close()


def agent_study(specs: Sequence[GameSpec], agents: Sequence[str], config: AgentConfig | None = None, *,
                episodes: int = 1, cache_dir: str | Path | None = None, n_jobs: int = 1,
                progress: bool = True, base: Mapping[str, Any] | None = None,
                trained: Mapping[str, Any] | None = None) -> tuple[list[dict], dict[str, str]]:
    """Episodes of :class:`MemoryAgent` on each game: ``"none"`` or a system of :data:`SYSTEMS`.

    Here ``"none"`` is the agent *without* memory (it observes and asks nothing: random exits), not
    the ``none`` memory mode (that would ask a reader with an empty memory block and follow its guesses).

    Episode ``i`` of a game uses ``config.seed + i``. The games are generated here, the episodes run
    over ``n_jobs`` processes (joblib; 1: in this process): each is independent, so the rows are the
    same, in the same order, for any ``n_jobs``. Returns (rows, skipped systems with reasons): an
    unknown name or a system whose models are missing is skipped with the reason. ``base`` and
    ``trained``: as in :func:`state_question_study`.
    """
    from joblib import Parallel, delayed
    from tqdm.auto import tqdm

    cfg = config or AgentConfig()
    skipped = {}
    for a in dict.fromkeys(agents):
        if a != "none":
            why = _unavailable(a, _base_of(a, base, trained)) if a in SYSTEMS else f"unknown system {a!r}"
            if why is not None:
                skipped[a] = why
    games = {spec: make_game(spec, cache_dir=cache_dir) for spec in specs}  # compiled once, before the workers
    jobs = [(s, i, a) for s in specs for i in range(episodes) for a in agents if a not in skipped]
    par = Parallel(n_jobs=n_jobs, return_as="generator")
    out = par(delayed(_episode)(games[spec], agent, dataclasses.replace(cfg, seed=cfg.seed + i),
                                _base_of(agent, base, trained))
              for spec, i, agent in jobs)
    rows = []
    for (spec, i, agent), r in zip(jobs, tqdm(out, total=len(jobs), desc="episodes", disable=not progress)):
        rows.append({**dataclasses.asdict(r), "agent": agent, "kind": spec.kind, "rooms": spec.n_rooms,
                     "episode": i})
    return rows, skipped
