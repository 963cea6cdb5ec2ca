"""Examples for the answer role (the reader), rendered from the same procedural worlds.

An example is a question, the recalled memory items a MAGS system would hand the reader, and the
gold answer: the short value that answers it, or exactly :data:`mags_lib.protocol.ABSTAIN_ANSWER`
when nothing recalled answers it. Items are what the graph's recall returns -- facts as
``"subject relation object"`` (the canonical relation labels of :mod:`~mags_lib.data.templates`) and
episodes as the raw sentences that were said (first person with their ``speaker``) -- rendered by
:func:`mags_lib.protocol.format_item`: the date first when known, a superseded fact marked
``no longer true`` (``since <date>`` when the update's date is known). The answer model is trained on
exactly that memory block, so the agent must
render recalled items the same way.

Row columns (beside the common ``id, role, kind, input, response, world_id, template_ids, source``;
``ops`` / ``context`` are empty, ``n_ops`` is 0):

* ``input`` -- the question; ``response`` -- the gold answer text;
* ``memory`` -- the items in prompt order, the dated ones oldest first in the places dated ones hold
  (as :meth:`mags_lib.MAGS.ask` shows them, :func:`mags_lib.graph.values.chronological_order`):
  ``{"text", "time", "current", "speaker", "until"}`` (``time``, ``speaker`` and ``until`` may be
  ``None``; ``current`` is ``False`` for a superseded fact, else ``None``; ``until``: when a superseded
  fact stopped being true -- the date of the update in ``update`` examples, unknown in
  ``superseded_only`` ones, as the memory shows both);
* ``aliases`` -- accepted answers (empty when the gold answer is the abstention);
* ``gold_facts`` -- the world facts that answer the question (empty for abstentions).

Kinds (:data:`ANSWER_KINDS`, with their sampling weights):

``fact``            the answer is a fact among distractor facts and episodes
``episode``         the answer is in a sentence that was said (third person)
``persona``         a first-person sentence of a speaker; other speakers' sentences distract
``multihop``        two items chain (``blorps are led by Zarn``, ``Zarn lives in Pell Ridge``)
``update``          an older value marked ``no longer true`` (since the update's date, when dated)
                    and the current one: answer the current
``newest``          two unmarked values with dates: the later one (the later line) is current
``unanswerable``    items about the same subject (other relations) or the same relation (other
                    subjects), never the asked one: abstain
``empty``           nothing was recalled: abstain
``superseded_only`` only a value marked ``no longer true``: abstain (the current value is unknown)
"""

from __future__ import annotations

import datetime as _dt

import numpy as np

from .. import protocol
from ..graph.dates import MONTH_NAMES, day_label
from ..graph.values import chronological_order
from .render import _fix, _idx, _new_value, _pick, _question, _Skip, _statement, _update_sentence
from .templates import RELATIONS_BY_KEY, sentence_case
from .worlds import Fact, World

__all__ = ["ANSWER_KINDS", "DATE_STYLES", "format_date", "render_answer"]

ANSWER_KINDS: dict[str, float] = {
    "fact": 0.16, "episode": 0.1, "persona": 0.1, "multihop": 0.1, "update": 0.12, "newest": 0.06,
    "unanswerable": 0.2, "empty": 0.08, "superseded_only": 0.08,
}
ABSTAIN_KINDS = frozenset({"unanswerable", "empty", "superseded_only"})

DATE_STYLES = ("iso", "day_month_year", "locomo")


def format_date(day: _dt.date, style: str, minute: int = 0) -> str:
    """A date as memory items carry it: ``iso`` (``2023-05-08``), ``day_month_year`` (``8 May 2023``)
    or ``locomo`` (LoCoMo's session stamps, ``1:56 pm on 8 May, 2023``; ``minute`` of the day).

    >>> d = _dt.date(2023, 5, 8)
    >>> format_date(d, "iso"), format_date(d, "day_month_year"), format_date(d, "locomo", 13 * 60 + 56)
    ('2023-05-08', '8 May 2023', '1:56 pm on 8 May, 2023')
    """
    if style == "iso":
        return day.isoformat()
    if style == "day_month_year":
        return day_label(day)
    if style == "locomo":
        h, m = divmod(int(minute) % 1440, 60)
        return f"{(h - 1) % 12 + 1}:{m:02d} {'am' if h < 12 else 'pm'} on {day.day} {MONTH_NAMES[day.month - 1]}, {day.year}"
    raise ValueError(f"unknown date style {style!r}: choose from {DATE_STYLES}")


class _Clock:
    """Dates of one example: one style, strictly increasing days from a random start."""

    def __init__(self, rng: np.random.Generator, dated: bool) -> None:
        self.rng = rng
        self.dated = dated
        self.style = DATE_STYLES[int(rng.choice(len(DATE_STYLES), p=[0.5, 0.3, 0.2]))]
        self.start = _dt.date(2022, 1, 1) + _dt.timedelta(days=int(rng.integers(0, 3 * 365)))

    def at(self, offset_days: int) -> str | None:
        if not self.dated:
            return None
        day = self.start + _dt.timedelta(days=int(offset_days))
        return format_date(day, self.style, int(self.rng.integers(8 * 60, 22 * 60)))


def _item(text: str, time: str | None = None, current: bool | None = None, speaker: str | None = None,
          until: str | None = None) -> dict:
    return {"text": " ".join(text.split()), "time": time, "current": current, "speaker": speaker, "until": until}


def _fact_text(f: Fact, obj: str | None = None) -> str:
    return f"{f.subject} {f.label} {f.object if obj is None else obj}"


def _as_item(world: World, f: Fact, rng, clock: _Clock, day: int, *, episode_p: float = 0.3,
             obj: str | None = None, current: bool | None = None, tids: list | None = None) -> dict:
    """``f`` as a stored fact, or (with probability ``episode_p``) as the sentence that said it."""
    obj = f.object if obj is None else obj
    if current is None and rng.random() < episode_p:
        rel = RELATIONS_BY_KEY[f.relation]
        if rel.first_person and world.entity(f.subject).type == "person" and rng.random() < 0.5:
            j = _idx(rng, rel.first_person)
            if tids is not None:
                tids.append(f"{rel.key}.f{j}")
            return _item(_fix(rel.first_person[j].format(O=obj)), clock.at(day), None, f.subject)
        text, tid = _statement(rel, f.subject, obj, rng)
        if tids is not None:
            tids.append(tid)
        return _item(text, clock.at(day))
    return _item(_fact_text(f, obj), clock.at(day), current)


# Relations whose statement holds both ways ("A has sibling B": B's sibling is A; "A is near B": A is near
# B as seen from B): a fact (A, r, B) answers the question about B's r, so it is no distractor for it.
_SYMMETRIC = frozenset({"sibling", "near"})


def _also_answers(asked: Fact, other: Fact) -> bool:
    """Whether ``other`` answers the question about ``asked`` with another value (a symmetric relation
    read backwards: ``Snabroel has sibling Baisis`` answers "Who is the sibling of Baisis?")."""
    return (other.relation == asked.relation and other.relation in _SYMMETRIC and other.object == asked.subject
            and other.subject != asked.object)


def _reverse_of(asked: Fact, other: Fact) -> bool:
    """Whether ``other`` is a fact of ``asked``'s symmetric relation about ``asked``'s subject read backwards
    (whatever its value): it answers the question about ``asked``."""
    return other.relation == asked.relation and other.relation in _SYMMETRIC and other.object == asked.subject


def _distractors(world: World, rng, exclude: set, n: int, *, prefer_subject: str | None = None,
                 prefer_relation: str | None = None) -> list[Fact]:
    """``n`` facts of ``world`` whose (subject, relation) is not in ``exclude``; half of them (when
    possible) about ``prefer_subject`` or of ``prefer_relation`` (near misses)."""
    pool = [f for f in world.facts if (f.subject, f.relation) not in exclude]
    near = [f for f in pool if f.subject == prefer_subject or f.relation == prefer_relation]
    out: list[Fact] = []
    if near and n:
        k = min(len(near), max(1, n // 2))
        out += [near[i] for i in rng.choice(len(near), size=k, replace=False)]
    rest = [f for f in pool if f not in out]
    k = min(len(rest), n - len(out))
    if k > 0:
        out += [rest[i] for i in rng.choice(len(rest), size=k, replace=False)]
    return out


def _n_distractors(rng) -> int:
    return int(rng.choice([0, 1, 2, 3, 4, 5, 6, 7], p=[0.06, 0.12, 0.16, 0.18, 0.16, 0.14, 0.1, 0.08]))


def _shuffle_in(rng, items: list[dict], gold: list[dict], *, keep_order: bool = False) -> list[dict]:
    """Insert ``gold`` items at random positions of ``items`` (in their order when ``keep_order``)."""
    out = list(items)
    if keep_order:
        positions = sorted(int(rng.integers(0, len(out) + len(gold))) for _ in gold)
    else:
        positions = [int(rng.integers(0, len(out) + 1 + i)) for i in range(len(gold))]
    for pos, g in zip(positions, gold):
        out.insert(min(pos, len(out)), g)
    return out


def _question_for(world: World, f: Fact, rng, tids: list) -> str:
    q, tid = _question(RELATIONS_BY_KEY[f.relation], f.subject, rng)
    tids.append(tid)
    return q


def _a_fact(world, rng, clock, *, episode_p):
    f = _pick(rng, world.facts)
    tids: list[str] = []
    q = _question_for(world, f, rng, tids)
    dis = _distractors(world, rng, {(f.subject, f.relation)}, _n_distractors(rng), prefer_subject=f.subject,
                       prefer_relation=f.relation)
    items = [_as_item(world, d, rng, clock, int(rng.integers(0, 200)), tids=tids) for d in dis]
    items = [it for it, d in zip(items, dis) if not _also_answers(f, d)]  # a second answer is no distractor
    gold = _as_item(world, f, rng, clock, int(rng.integers(0, 200)), episode_p=episode_p, tids=tids)
    return q, f.object, [f], _shuffle_in(rng, items, [gold]), tids


def _k_fact(world, rng, clock):
    return _a_fact(world, rng, clock, episode_p=0.0)


def _k_episode(world, rng, clock):
    return _a_fact(world, rng, clock, episode_p=1.0)


def _k_persona(world, rng, clock):
    persons = [p.name for p in world.by_type("person")
               if any(RELATIONS_BY_KEY[f.relation].first_person for f in world.facts_about(p.name))]
    subject = _pick(rng, persons)
    f = _pick(rng, [f for f in world.facts_about(subject) if RELATIONS_BY_KEY[f.relation].first_person])
    rel = RELATIONS_BY_KEY[f.relation]
    tids: list[str] = []
    q = _question_for(world, f, rng, tids)
    j = _idx(rng, rel.first_person)
    tids.append(f"{rel.key}.f{j}")
    gold = _item(_fix(rel.first_person[j].format(O=f.object)), clock.at(int(rng.integers(0, 200))), None, subject)
    # other speakers saying the same kind of thing, and the subject's other facts
    others = [g for g in world.facts if g.relation == f.relation and g.subject != subject
              and RELATIONS_BY_KEY[g.relation].first_person]
    items, answers_too = [], []
    for g in [others[i] for i in rng.choice(len(others), size=min(len(others), int(rng.integers(0, 3))),
                                            replace=False)] if others else []:
        k = _idx(rng, rel.first_person)
        items.append(_item(_fix(rel.first_person[k].format(O=g.object)), clock.at(int(rng.integers(0, 200))),
                           None, g.subject))
        answers_too.append(_also_answers(f, g))
    dis = _distractors(world, rng, {(f.subject, f.relation)}, max(0, _n_distractors(rng) - len(items)),
                       prefer_subject=subject)
    items += [_as_item(world, d, rng, clock, int(rng.integers(0, 200)), tids=tids) for d in dis]
    answers_too += [_also_answers(f, d) for d in dis]
    order = rng.permutation(len(items))  # what rng.shuffle(items) did, before the filter (same draws)
    items = [items[i] for i in order if not answers_too[i]]  # a second answer is no distractor
    return q, f.object, [f], _shuffle_in(rng, items, [gold]), tids


def _k_multihop(world, rng, clock):
    links = [f for f in world.facts if RELATIONS_BY_KEY[f.relation].linking]
    order = rng.permutation(len(links))
    for i in order:
        f1 = links[int(i)]
        second = [g for g in world.facts_about(f1.object) if g.relation != f1.relation]
        if not second:
            continue
        f2 = _pick(rng, second)
        rel1, rel2 = RELATIONS_BY_KEY[f1.relation], RELATIONS_BY_KEY[f2.relation]
        desc = rel1.descriptor.format(S=f1.subject)
        j = _idx(rng, rel2.questions)
        q = sentence_case(_fix(rel2.questions[j].format(S=desc).replace("the the ", "the ")))
        tids = [f"{rel1.key}.d", f"{rel2.key}.q{j}"]
        dis = _distractors(world, rng, {(f1.subject, f1.relation), (f2.subject, f2.relation)},
                           max(0, _n_distractors(rng) - 1), prefer_relation=f2.relation)
        # no second first hop (a symmetric fact read backwards: "Cob has sibling Ana" makes Cob a sibling of Ana
        # too), which a distractor about its rel2 would complete into a second chain with another answer
        # nor a second answer to the second hop ("X is near <f2.subject>" when f2 is "<f2.subject> near Y")
        dis = [d for d in dis if not _also_answers(f1, d) and not _also_answers(f2, d)]
        items = [_as_item(world, d, rng, clock, int(rng.integers(0, 200)), tids=tids) for d in dis]
        gold = [_as_item(world, f, rng, clock, int(rng.integers(0, 200)), tids=tids) for f in (f1, f2)]
        return q, f2.object, [f1, f2], _shuffle_in(rng, items, gold), tids
    raise _Skip("no two-hop chain")


def _functional(world: World) -> list[Fact]:
    return [f for f in world.facts if RELATIONS_BY_KEY[f.relation].functional]


def _k_update(world, rng, clock):
    f = _pick(rng, _functional(world))
    new = _new_value(world, f, rng)
    tids: list[str] = []
    q = _question_for(world, f, rng, tids)
    t_old = int(rng.integers(0, 150))
    t_new = t_old + int(rng.integers(1, 90))
    old_item = _item(_fact_text(f), clock.at(t_old), False)
    if rng.random() < 0.4:  # the change as it was said
        text, tid = _update_sentence(world, f, new, rng)
        tids.append(tid)
        new_item = _item(text, clock.at(t_new))
    else:
        new_item = _item(_fact_text(f, new), clock.at(t_new))
    dis = _distractors(world, rng, {(f.subject, f.relation)}, max(0, _n_distractors(rng) - 1),
                       prefer_subject=f.subject)
    items = [_as_item(world, d, rng, clock, int(rng.integers(0, 240)), tids=tids) for d in dis]
    old_item["until"] = new_item["time"]  # superseded when the update was said (None when undated)
    gold = [old_item, new_item]
    if rng.random() < 0.5:
        gold.reverse()
    return q, new, [Fact(f.subject, f.relation, f.label, new)], _shuffle_in(rng, items, gold, keep_order=True), tids


def _k_newest(world, rng, clock):
    if not clock.dated:
        clock.dated = True
    f = _pick(rng, _functional(world))
    new = _new_value(world, f, rng)
    tids: list[str] = []
    q = _question_for(world, f, rng, tids)
    t_old = int(rng.integers(0, 150))
    t_new = t_old + int(rng.integers(1, 120))
    gold = [_item(_fact_text(f), clock.at(t_old)), _item(_fact_text(f, new), clock.at(t_new))]
    if rng.random() < 0.5:
        gold.reverse()
    dis = _distractors(world, rng, {(f.subject, f.relation)}, max(0, _n_distractors(rng) - 2),
                       prefer_subject=f.subject)
    items = [_as_item(world, d, rng, clock, int(rng.integers(0, 240)), tids=tids) for d in dis]
    return q, new, [Fact(f.subject, f.relation, f.label, new)], _shuffle_in(rng, items, gold, keep_order=True), tids


def _k_unanswerable(world, rng, clock):
    f = _pick(rng, world.facts)
    tids: list[str] = []
    q = _question_for(world, f, rng, tids)
    n = max(1, _n_distractors(rng))
    dis = _distractors(world, rng, {(f.subject, f.relation)}, n, prefer_subject=f.subject,
                       prefer_relation=f.relation)
    if not dis:
        raise _Skip("no distractor")
    # no item may carry the answer's words (a sentence about another fact could mention it)
    items = [_as_item(world, d, rng, clock, int(rng.integers(0, 240)), tids=tids) for d in dis]
    # nor answer it at all: a symmetric relation read backwards gives another value or, said in the first person
    # by the answer itself ("Bian: My sibling is called Leneabathia."), the same one, whose name is the speaker
    items = [it for it, d in zip(items, dis) if not _reverse_of(f, d)
             and not any(protocol.normalize_text(f.object) in protocol.normalize_text(it.get(k) or "")
                         for k in ("text", "speaker"))]
    if not items:
        raise _Skip("every distractor mentions or gives the answer")
    return q, None, [], items, tids


def _k_empty(world, rng, clock):
    f = _pick(rng, world.facts)
    tids: list[str] = []
    return _question_for(world, f, rng, tids), None, [], [], tids


def _k_superseded_only(world, rng, clock):
    f = _pick(rng, _functional(world))
    tids: list[str] = []
    q = _question_for(world, f, rng, tids)
    old = _item(_fact_text(f), clock.at(int(rng.integers(0, 150))), False)
    dis = _distractors(world, rng, {(f.subject, f.relation)}, max(0, _n_distractors(rng) - 1),
                       prefer_subject=f.subject)
    items = [_as_item(world, d, rng, clock, int(rng.integers(0, 240)), tids=tids) for d in dis]
    items = [it for it in items if protocol.normalize_text(f.object) not in protocol.normalize_text(it["text"])]
    return q, None, [], _shuffle_in(rng, items, [old]), tids


_RENDER = {"fact": _k_fact, "episode": _k_episode, "persona": _k_persona, "multihop": _k_multihop,
           "update": _k_update, "newest": _k_newest, "unanswerable": _k_unanswerable, "empty": _k_empty,
           "superseded_only": _k_superseded_only}
assert set(_RENDER) == set(ANSWER_KINDS)


def render_answer(world: World, kind: str, rng: np.random.Generator) -> dict:
    """One answer-role example of ``kind`` from ``world`` (a dataset row without its ``id``).

    Raises
    ------
    ValueError
        For an unknown kind.
    LookupError
        When this world cannot render this kind (e.g. no two-hop chain); draw another world.
    """
    if kind not in _RENDER:
        raise ValueError(f"unknown answer kind {kind!r}: choose from {sorted(_RENDER)}")
    clock = _Clock(rng, dated=bool(rng.random() < 0.7))
    try:
        question, answer, gold, items, tids = _RENDER[kind](world, rng, clock)
    except _Skip as exc:
        raise LookupError(f"world {world.world_id} cannot render answer/{kind}: {exc}") from exc
    # as the agent shows recalled items: dated ones oldest first, in the places dated ones held
    items = [items[i] for i in chronological_order([it["time"] for it in items])]
    return {"role": "answer", "kind": kind, "input": question,
            "response": protocol.ABSTAIN_ANSWER if answer is None else answer,
            "ops": [], "n_ops": 0, "world_id": world.world_id, "template_ids": tids, "context": [],
            "gold_facts": [list(f.triplet) for f in gold], "source": "generated",
            "memory": items, "aliases": [] if answer is None else [answer]}
