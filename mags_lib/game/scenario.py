"""Game scenarios: the JSON format of DESIGN.md, its loader and its writer.

A scenario file is ``{"name", "description", "events": [...]}``; each event is either an
observation ``{"say": text}`` or a question ``{"ask": text, "answer": [aliases], "kind": k}`` with
``k`` in :data:`KINDS`. ``abstain`` questions have an empty alias list (the right response says the
information is not in memory); every other kind needs at least one alias.

Optional keys (all documented here, all kept on a round trip):

* per event: ``time`` (ISO date ``"2024-03-05"`` or date-time, when it was said or asked: passed to
  ``MAGS.observe(time=)`` / ``ask(time=)``), ``source`` (source id of a ``say``, default
  ``"<name>:<event index>"``), ``speaker`` (who says it: resolves first person);
* per ``ask``: ``n_changes`` (how many times the asked fact changed before the question) and
  ``distance`` (events since the fact was last stated), written by the generator so that update
  accuracy can be read against the number of changes and retention against distance;
* top level: ``gold`` (the generator's ground truth for operation quality: a list of
  ``{"subject", "relation", "object", "stated", "superseded"}`` with event indices, see
  :class:`GoldFact`), ``entities`` (gold entities: ``{"name", "core", "type"}``) and ``meta``.

Any other key is an error: a misspelt ``"answers"`` must not silently turn a question into
something else. A malformed file raises :class:`ScenarioError` naming the file, the event index and
the problem.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_SCENARIO_DIR",
    "KINDS",
    "Event",
    "GoldEntity",
    "GoldFact",
    "Scenario",
    "ScenarioError",
    "example_scenarios",
    "load_scenario",
    "load_scenarios",
    "save_scenario",
    "scenario_from_dict",
]

KINDS = ("recall", "update", "multihop", "retention", "abstain")
DEFAULT_SCENARIO_DIR = "../shared/scenarios"  # DESIGN.md's examples, relative to the project root

_EVENT_KEYS = {"say": {"say", "time", "source", "speaker"},
               "ask": {"ask", "answer", "kind", "time", "n_changes", "distance"}}
_TOP_KEYS = {"name", "description", "events", "gold", "entities", "meta"}


class ScenarioError(ValueError):
    """A scenario file or dict that does not follow the format (the message says where and what)."""


@dataclass(frozen=True)
class Event:
    """One event of a scenario: an observation (``say``) or a question (``ask``)."""

    text: str
    type: str  # "say" | "ask"
    answer: tuple[str, ...] = ()  # ask: accepted aliases (empty for abstain)
    kind: str | None = None  # ask: one of KINDS
    time: str | None = None
    source: str | None = None  # say: source id
    speaker: str | None = None  # say: who speaks (resolves "I")
    n_changes: int | None = None  # ask: changes of the asked fact before the question
    distance: int | None = None  # ask: events since the asked fact was last stated

    @property
    def is_ask(self) -> bool:
        return self.type == "ask"

    def to_dict(self) -> dict:
        """The event as JSON (optional keys only when set)."""
        if self.type == "say":
            d: dict[str, Any] = {"say": self.text}
            extra = (("time", self.time), ("source", self.source), ("speaker", self.speaker))
        else:
            d = {"ask": self.text, "answer": list(self.answer), "kind": self.kind}
            extra = (("time", self.time), ("n_changes", self.n_changes), ("distance", self.distance))
        d.update({k: v for k, v in extra if v is not None})
        return d


@dataclass(frozen=True)
class GoldFact:
    """A fact the scenario states, as the generator knows it.

    ``stated`` is the index of the ``say`` event that states it; ``superseded`` the index of the
    ``say`` that replaces it by a newer value (None while it still holds at the end).
    """

    subject: str
    relation: str
    object: str
    stated: int
    superseded: int | None = None

    def to_dict(self) -> dict:
        return {"subject": self.subject, "relation": self.relation, "object": self.object,
                "stated": self.stated, "superseded": self.superseded}


@dataclass(frozen=True)
class GoldEntity:
    """An invented entity the scenario mentions: its full name and its invented word."""

    name: str
    core: str
    type: str = ""

    def to_dict(self) -> dict:
        return {"name": self.name, "core": self.core, "type": self.type}


@dataclass
class Scenario:
    """A named list of events, optionally with the generator's ground truth."""

    name: str
    description: str
    events: list[Event]
    gold: list[GoldFact] = field(default_factory=list)
    entities: list[GoldEntity] = field(default_factory=list)
    meta: dict = field(default_factory=dict)
    path: str | None = None  # file it was loaded from

    @property
    def asks(self) -> list[tuple[int, Event]]:
        """``(event index, event)`` of every question."""
        return [(i, e) for i, e in enumerate(self.events) if e.is_ask]

    @property
    def has_gold(self) -> bool:
        return bool(self.gold)

    def to_dict(self) -> dict:
        d: dict[str, Any] = {"name": self.name, "description": self.description,
                             "events": [e.to_dict() for e in self.events]}
        if self.gold:
            d["gold"] = [g.to_dict() for g in self.gold]
        if self.entities:
            d["entities"] = [e.to_dict() for e in self.entities]
        if self.meta:
            d["meta"] = self.meta
        return d


# the extended ISO forms the memory reads as times: YYYY-MM-DD, optionally T/space hh:mm[:ss[.f]] and an offset
# (Python also parses "20240306" and "2024-W10-2", which the graph would keep as text and sort wrongly)
_ISO_TIME = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:\d{2})?)?")


def _check_time(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ScenarioError(f"{where}: 'time' must be an ISO date string like \"2024-03-05\", got {value!r}")
    try:
        if not _ISO_TIME.fullmatch(value):
            raise ValueError("not the extended form")
        (date.fromisoformat if len(value) == 10 else datetime.fromisoformat)(value)
    except ValueError as e:
        raise ScenarioError(f"{where}: 'time' {value!r} is not an ISO date (YYYY-MM-DD) or date-time "
                            "(YYYY-MM-DDThh:mm[:ss])") from e
    return value


def _event(raw: Any, where: str) -> Event:
    from .score import normalize

    if not isinstance(raw, dict):
        raise ScenarioError(f"{where}: an event must be an object with 'say' or 'ask', got {type(raw).__name__}")
    has_say, has_ask = "say" in raw, "ask" in raw
    if has_say == has_ask:
        raise ScenarioError(f"{where}: an event needs exactly one of 'say' or 'ask' (keys: {sorted(raw)})")
    typ = "say" if has_say else "ask"
    unknown = set(raw) - _EVENT_KEYS[typ]
    if unknown:
        raise ScenarioError(f"{where}: unknown keys {sorted(unknown)} for a '{typ}' event; "
                            f"allowed: {sorted(_EVENT_KEYS[typ])}")
    text = raw[typ]
    if not isinstance(text, str) or not text.strip():
        raise ScenarioError(f"{where}: '{typ}' must be a non-empty string, got {text!r}")
    time = _check_time(raw["time"], where) if raw.get("time") is not None else None
    for key in ("source", "speaker"):
        if raw.get(key) is not None and (not isinstance(raw[key], str) or not raw[key].strip()):
            raise ScenarioError(f"{where}: '{key}' must be a non-empty string, got {raw[key]!r}")
    if typ == "say":
        return Event(text=text.strip(), type="say", time=time, source=raw.get("source"),
                     speaker=raw.get("speaker"))
    if "kind" not in raw:
        raise ScenarioError(f"{where}: an 'ask' needs a 'kind' ({' | '.join(KINDS)})")
    kind = raw["kind"]
    if kind not in KINDS:
        raise ScenarioError(f"{where}: unknown kind {kind!r}; use one of {', '.join(KINDS)}")
    if "answer" not in raw:
        raise ScenarioError(f"{where}: an 'ask' needs 'answer', a list of aliases ([] for abstain)")
    ans = raw["answer"]
    if not isinstance(ans, list) or not all(isinstance(a, str) for a in ans):
        raise ScenarioError(f"{where}: 'answer' must be a list of strings, got {ans!r}")
    if kind == "abstain" and ans:
        raise ScenarioError(f"{where}: an 'abstain' question has no answer: use \"answer\": [] (got {ans!r})")
    if kind != "abstain" and not ans:
        raise ScenarioError(f"{where}: a '{kind}' question needs at least one alias in 'answer'")
    empty = [a for a in ans if not normalize(a)]
    if empty:
        raise ScenarioError(f"{where}: aliases {empty!r} are empty after normalisation (lower case, "
                            "no punctuation, no a/an/the) and could never match")
    counts = {}
    for key in ("n_changes", "distance"):
        v = raw.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
            raise ScenarioError(f"{where}: '{key}' must be an integer >= 0, got {v!r}")
        counts[key] = v
    return Event(text=text.strip(), type="ask", answer=tuple(ans), kind=kind, time=time, **counts)


def scenario_from_dict(d: Any, origin: str = "<dict>") -> Scenario:
    """Check and build a :class:`Scenario` from parsed JSON; ``origin`` names it in errors."""
    if not isinstance(d, dict):
        raise ScenarioError(f"{origin}: a scenario must be a JSON object, got {type(d).__name__}")
    unknown = set(d) - _TOP_KEYS
    if unknown:
        raise ScenarioError(f"{origin}: unknown top-level keys {sorted(unknown)}; allowed: {sorted(_TOP_KEYS)}")
    for key in ("name", "description"):
        if not isinstance(d.get(key), str) or (key == "name" and not d[key].strip()):
            raise ScenarioError(f"{origin}: '{key}' must be a{' non-empty' if key == 'name' else ''} string, "
                                f"got {d.get(key)!r}")
    events = d.get("events")
    if not isinstance(events, list) or not events:
        raise ScenarioError(f"{origin}: 'events' must be a non-empty list")
    evs = [_event(raw, f"{origin}: event {i}") for i, raw in enumerate(events)]
    for key in ("gold", "entities"):
        if d.get(key) is not None and not isinstance(d[key], list):
            raise ScenarioError(f"{origin}: '{key}' must be a list of objects, got {type(d[key]).__name__}")
    gold = []
    for j, g in enumerate(d.get("gold") or []):
        where = f"{origin}: gold fact {j}"
        try:
            if not isinstance(g, dict):
                raise TypeError(f"got {type(g).__name__}")
            gf = GoldFact(**g)
        except TypeError as e:
            raise ScenarioError(f"{where}: needs subject, relation, object, stated, superseded ({e})") from None
        for key in ("subject", "relation", "object"):
            v = getattr(gf, key)
            if not isinstance(v, str) or not v.strip():
                raise ScenarioError(f"{where}: '{key}' must be a non-empty string, got {v!r}")
        for key in ("stated", "superseded"):
            v = getattr(gf, key)
            if v is None and key == "superseded":
                continue
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < len(evs) or evs[v].type != "say":
                raise ScenarioError(f"{where}: '{key}' must be the index of a 'say' event, got {v!r}")
        if gf.superseded is not None and gf.superseded <= gf.stated:
            raise ScenarioError(f"{where}: 'superseded' ({gf.superseded}) must come after 'stated' ({gf.stated})")
        gold.append(gf)
    ents = []
    for j, e in enumerate(d.get("entities") or []):
        try:
            if not isinstance(e, dict):
                raise TypeError(f"got {type(e).__name__}")
            ent = GoldEntity(**e)
        except TypeError as err:
            raise ScenarioError(f"{origin}: entity {j}: needs name, core, type ({err})") from None
        if not all(isinstance(getattr(ent, k), str) for k in ("name", "core", "type")) or not ent.name.strip():
            raise ScenarioError(f"{origin}: entity {j}: name, core and type must be strings (name non-empty), "
                                f"got {e!r:.80}")
        ents.append(ent)
    meta = d.get("meta")
    meta = {} if meta is None else meta
    if not isinstance(meta, dict):
        raise ScenarioError(f"{origin}: 'meta' must be an object, got {type(meta).__name__}")
    return Scenario(name=d["name"].strip(), description=d["description"], events=evs, gold=gold,
                    entities=ents, meta=meta)


def load_scenario(path: str | Path) -> Scenario:
    """Load and check one scenario file.

    Raises
    ------
    ScenarioError
        Naming the file, the event index and the problem (or the JSON syntax error's line).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ScenarioError(f"{path}: cannot read ({e.strerror or e})") from e
    except UnicodeDecodeError as e:
        raise ScenarioError(f"{path}: not UTF-8 text (byte {e.start}: {e.reason}); save the file as UTF-8") from None
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise ScenarioError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    sc = scenario_from_dict(d, origin=str(path))
    sc.path = str(path)
    return sc


def load_scenarios(paths: str | Path | Iterable[str | Path]) -> list[Scenario]:
    """Scenarios from a folder (every ``*.json``, sorted) or a list of files; names must be unique."""
    if isinstance(paths, (str, Path)):
        p = Path(paths)
        files = sorted(p.glob("*.json")) if p.is_dir() else [p]
    else:
        files = [Path(x) for x in paths]
    out = [load_scenario(f) for f in files]
    names = [s.name for s in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        where = "; ".join(f"{n!r} in {', '.join(str(f) for f, s in zip(files, out) if s.name == n)}" for n in dup)
        raise ScenarioError(f"scenario names must be unique, repeated: {where}")
    return out


def save_scenario(scenario: Scenario, path: str | Path) -> Path:
    """Write a scenario as JSON (atomically), in the form loading gives: the checked scenario, whose name and
    texts are stripped of surrounding whitespace. What is written loads back equal; what could not be read
    is refused (:class:`ScenarioError`) and nothing is written."""
    from ..repro import atomic_write_text

    d = scenario_from_dict(json.loads(json.dumps(scenario.to_dict())), origin=str(path)).to_dict()
    return atomic_write_text(path, json.dumps(d, indent=1, ensure_ascii=False) + "\n")


def example_scenarios(path: str | Path | None = None, *, verbose: bool = True) -> list[Scenario]:
    """The example scenarios of ``../shared/scenarios/`` (optional input).

    Returns an empty list, saying so in one line, when the folder is absent.
    """
    from ..models import project_root

    p = Path(path) if path is not None else Path(DEFAULT_SCENARIO_DIR)
    if not p.is_absolute():
        p = (project_root() / p).resolve()
    if not p.is_dir() or not any(p.glob("*.json")):
        if verbose:
            print(f"[game] example scenarios skipped: no *.json in {p} (copy DESIGN.md's scenario files there "
                  "to include them)")
        return []
    return load_scenarios(p)
