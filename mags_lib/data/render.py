"""Render procedural worlds into training examples for the ask and write roles.

Each example is a plain dict (one dataset row)::

    id, role, kind, input, response, ops, n_ops, world_id, template_ids, context, gold_facts, source

* ``response`` is protocol text (:func:`mags_lib.protocol.asks_to_text` / ``writes_to_text``);
  ``ops`` the same operations structured (``{"role", "content", "triplet"}``);
* ``context`` (ask role) holds the world facts a memory would contain when the question is asked --
  the gold facts plus distractor facts of the same world -- and ``gold_facts`` the facts the
  questions need: the ask-retrieval reward builds a small graph from ``context`` and checks that the
  asked queries retrieve ``gold_facts``;
* ``kind`` says which situation was rendered (see :data:`WRITE_KINDS` / :data:`ASK_KINDS`).

Ground truth conventions (also the documentation of the generated datasets):

* write: one triplet per stated fact, canonical relation labels from
  :mod:`mags_lib.data.templates`, pronouns and first person resolved to the entity name; an update
  or correction stores only the new value (the graph supersedes the old one); questions, chit-chat,
  a speaker's small talk (``"Jon: Congrats, that's huge!"``), facts already listed under ``Memory:`` in an
  exchange, and gibberish store nothing;
* ask: one query per question, ``"<subject> <noun>"`` (``"blorps diet"``), pronouns and first person
  resolved; a multi-hop question asks for the link and for the attribute of the linked entity
  (``"blorps leader"``, ``"home town of the leader of blorps"``); statements and gibberish ask nothing.

Splits are by world (:func:`generate_role_splits`): the worlds of each split come from disjoint
world lists sharing one name registry, so no invented entity appears in two splits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
from tqdm.auto import tqdm

from .. import protocol
from .templates import (
    CHIT_CHAT,
    CONNECTIVES,
    CORRECTION_FRAMES,
    DIALOGUE_INTROS,
    EXCHANGE_FRAME,
    PERSONA_INTROS,
    PRONOUNS,
    QUESTION_JOINERS,
    QUESTION_LEADS,
    QUESTION_TAILS,
    RELATIONS_BY_KEY,
    RULE_CHANGE_PREFIXES,
    SMALL_TALK,
    STATEMENT_LEADS,
    UPDATE_PREFIXES,
    Relation,
    sentence_case,
)
from .worlds import Fact, NameRegistry, World, WorldConfig, _check_int, draw_value, generate_worlds

__all__ = [
    "ASK_KINDS",
    "EMPTY_KINDS",
    "ROLES",
    "SPLITS",
    "WRITE_KINDS",
    "GenerationConfig",
    "generate_role_splits",
    "gibberish",
    "render_example",
    "render_split",
]

SPLITS = ("train", "validation", "test")
ROLES = ("ask", "write", "answer")  # the answer role's rows come from mags_lib.data.answer


def _answer_kinds() -> dict[str, float]:
    from .answer import ANSWER_KINDS

    return ANSWER_KINDS

# kind -> sampling weight
WRITE_KINDS: dict[str, float] = {
    "single": 0.12, "multi": 0.16, "persona": 0.12, "update": 0.12, "contradiction": 0.08,
    "mixed": 0.08, "distractor": 0.1, "exchange": 0.06, "question_only": 0.05, "noise": 0.05, "small_talk": 0.06,
}
ASK_KINDS: dict[str, float] = {
    "single": 0.2, "multi": 0.16, "mixed": 0.14, "multihop": 0.14, "persona": 0.1, "distractor": 0.12,
    "no_question": 0.07, "noise": 0.07,
}
# role -> the kinds whose gold is empty (nothing to write / nothing to ask)
EMPTY_KINDS: dict[str, frozenset[str]] = {"write": frozenset({"question_only", "noise", "small_talk"}),
                                          "ask": frozenset({"no_question", "noise"})}


@dataclass
class GenerationConfig:
    """Sizes and mix of the generated datasets (numbers of examples are per role)."""

    n_train: int = 5000  # training examples per role
    n_validation: int = 500  # validation examples per role
    n_test: int = 500  # test examples per role
    worlds_train: int = 300  # worlds reserved for the train split
    worlds_validation: int = 40  # worlds reserved for validation
    worlds_test: int = 40  # worlds reserved for test
    seed: int = 0  # one seed for worlds and rendering
    context_size: int = 12  # facts in an ask example's context (gold + distractors)
    write_kinds: dict[str, float] = field(default_factory=lambda: dict(WRITE_KINDS))
    ask_kinds: dict[str, float] = field(default_factory=lambda: dict(ASK_KINDS))
    answer_kinds: dict[str, float] = field(default_factory=lambda: dict(_answer_kinds()))
    world: WorldConfig = field(default_factory=WorldConfig)
    roles: tuple[str, ...] = ("ask", "write", "answer")  # roles rendered by generate_role_splits

    def __post_init__(self) -> None:
        for name in ("n_train", "n_validation", "n_test", "worlds_train", "worlds_validation", "worlds_test",
                     "seed", "context_size"):
            setattr(self, name, _check_int(getattr(self, name), f"GenerationConfig.{name}"))  # 2.5, 3.0: refused
        if self.seed < 0:
            raise ValueError(f"GenerationConfig.seed must be >= 0 (it seeds numpy), got {self.seed}")
        for name in ("n_train", "n_validation", "n_test"):
            if getattr(self, name) < 0:
                raise ValueError(f"GenerationConfig.{name} must be >= 0, got {getattr(self, name)}")
        for name in ("worlds_train", "worlds_validation", "worlds_test"):
            if getattr(self, name) < 1:
                raise ValueError(f"GenerationConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.context_size < 4:
            raise ValueError(f"context_size must be >= 4, got {self.context_size}")
        bad_roles = set(self.roles) - set(ROLES)
        if bad_roles or not self.roles:
            raise ValueError(f"roles must be a non-empty subset of {ROLES}, got {self.roles}")
        self.roles = tuple(self.roles)
        for label, kinds, known in (("write_kinds", self.write_kinds, WRITE_KINDS),
                                    ("ask_kinds", self.ask_kinds, ASK_KINDS),
                                    ("answer_kinds", self.answer_kinds, _answer_kinds())):
            unknown = set(kinds) - set(known)
            if unknown:
                raise ValueError(f"unknown {label} {sorted(unknown)}: choose from {sorted(known)}")
            if not kinds or any(v < 0 for v in kinds.values()) or sum(kinds.values()) <= 0:
                raise ValueError(f"{label} needs non-negative weights with a positive sum, got {kinds}")

    def sizes(self) -> dict[str, int]:
        return {"train": self.n_train, "validation": self.n_validation, "test": self.n_test}

    def n_worlds(self) -> dict[str, int]:
        return {"train": self.worlds_train, "validation": self.worlds_validation, "test": self.worlds_test}


class _Skip(Exception):
    """The chosen world cannot render the chosen kind; the caller draws again."""


# ------------------------------------------------------------------------------------------ helpers
_A_AN = re.compile(r"\b([Aa]) (?=[aeiouAEIOU])")


def _fix(text: str) -> str:
    text = _A_AN.sub(lambda m: m.group(1) + "n ", text)
    return " ".join(text.split())


def _pick(rng: np.random.Generator, seq):
    if not seq:
        raise _Skip("empty choice")
    return seq[int(rng.integers(len(seq)))]


def _idx(rng: np.random.Generator, seq) -> int:
    if not seq:
        raise _Skip("empty choice")
    return int(rng.integers(len(seq)))


def _pronoun(world: World, subject: str) -> str | None:
    ent = world.entity(subject)
    if ent.type == "person":
        return PRONOUNS["person_" + (ent.gender or "f")]["subj"]
    return PRONOUNS.get(ent.type, {}).get("subj")


def _statement(rel: Relation, subj: str, obj: str, rng, *, pronoun: str | None = None) -> tuple[str, str]:
    """One statement sentence and its template id; ``pronoun`` replaces a sentence-initial subject."""
    options = list(range(len(rel.statements)))
    if pronoun:
        lead = [i for i in options if rel.statements[i].startswith("{S}")]
        if lead:
            options, subj = lead, pronoun
    j = _pick(rng, options)
    return sentence_case(_fix(rel.statements[j].format(S=subj, O=obj))), f"{rel.key}.s{j}"


def _subject_led(rel: Relation, tid: str) -> bool:
    """Whether statement template ``tid`` (``"<rel>.s<j>"``) opens with its subject alone: only after such a
    sentence does a pronoun name that subject ("Flojouits prey on kloolixes. They run away from clocks." reads as
    the flojouits)."""
    text = rel.statements[int(tid.rsplit(".s", 1)[1])]
    return text.startswith("{S}") and not text.startswith("{S} and {O}")  # "she and Snijiman are ...": two people


def _question(rel: Relation, subj: str, rng, *, pronoun: str | None = None) -> tuple[str, str]:
    j = _idx(rng, rel.questions)
    text = rel.questions[j]
    # pronoun as the subject of the question only ("What do they eat?"); "of it" reads badly
    if pronoun and "the {S}" not in text and re.search(r"(do|does|is|are) \{S\}", text):
        subj = pronoun
    return sentence_case(_fix(text.format(S=subj))), f"{rel.key}.q{j}"


def _query(rel: Relation, subj: str) -> str:
    return f"{subj} {rel.noun}"


def _write_ops(triplets) -> list[dict]:
    return [{"role": "write", "content": f"{s},{r},{o}", "triplet": [s, r, o]} for s, r, o in triplets]


def _ask_ops(queries) -> list[dict]:
    return [{"role": "ask", "content": q, "triplet": []} for q in queries]


def _decap(s: str, world: World) -> str:
    """Lower the first letter of a sentence that follows a connective, unless it is a proper name.

    Species are written in lower case ("by the way, blorps eat..."); person and place names keep
    their capital; "I" stays.
    """
    low = s.lower()
    for e in world.entities:
        if low.startswith((e.name.lower() + " ", e.name.lower() + "'")):
            return e.name + s[len(e.name):]
    if s.startswith(("I ", "I'")):
        return s
    return s[:1].lower() + s[1:]


def _join(sentences: list[str], rng, world: World) -> str:
    out = []
    for i, s in enumerate(sentences):
        if i:
            c = _pick(rng, CONNECTIVES)
            if c:
                s = c + _decap(s, world)
        out.append(s)
    return " ".join(out)


def _join_questions(qs: list[str], rng, world: World) -> str:
    text = qs[0]
    for q in qs[1:]:
        joiner = _pick(rng, QUESTION_JOINERS)
        text += joiner + (q if joiner == " " or joiner.endswith(": ") else _decap(q, world))
    return text


_GIB_CONS = "bcdfghjklmnpqrstvwxz"
_KEYBOARD = ("asdf", "qwerty", "jkl;", "zxcv", "uiop", "hjkl", "asdfgh", "wasd", "ghjk", "poiuy")
_LOREM = ("lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit", "sed", "tempor")
_ACKS = ("ok", "k", "lol", "hmm", "...", "?", "ok thanks", "yes", "nope", "brb", "test test", "123")


def gibberish(rng: np.random.Generator) -> tuple[str, str]:
    """Random noise that must map to the empty output, and its style id.

    Styles: consonant clusters (never an invented name: names always hold vowels), keyboard mash,
    lorem ipsum, digits and punctuation, bare acknowledgements.
    """
    style = _pick(rng, ("clusters", "keyboard", "lorem", "symbols", "ack"))
    n = int(rng.integers(1, 9))
    if style == "clusters":
        words = ["".join(rng.choice(list(_GIB_CONS), size=int(rng.integers(2, 8)))) for _ in range(n)]
        text = " ".join(words)
    elif style == "keyboard":
        text = " ".join(str(rng.choice(_KEYBOARD)) for _ in range(n))
    elif style == "lorem":
        text = " ".join(str(rng.choice(_LOREM)) for _ in range(n + 2)) + "."
    elif style == "symbols":
        pieces = [str(int(rng.integers(0, 10_000))) for _ in range(n)]
        pieces += [str(rng.choice(["?!", "...", "#", "%%", "--", "!!!", "@", "&"])) for _ in range(n)]
        rng.shuffle(pieces)
        text = " ".join(pieces)
    else:
        text = str(rng.choice(_ACKS))
    if rng.random() < 0.3:
        text = text.upper()
    return text, f"noise.{style}"


def _functional_facts(world: World) -> list[Fact]:
    return [f for f in world.facts if RELATIONS_BY_KEY[f.relation].functional]


def _new_value(world: World, fact: Fact, rng) -> str:
    rel = RELATIONS_BY_KEY[fact.relation]
    try:
        return draw_value(rel, world, fact.subject, rng, exclude=(fact.object,))
    except ValueError as exc:
        raise _Skip(str(exc)) from exc


# ------------------------------------------------------------------------------------ write kinds
def _w_single(world, rng):
    f = _pick(rng, world.facts)
    text, tid = _statement(RELATIONS_BY_KEY[f.relation], f.subject, f.object, rng)
    return text, [f.triplet], [tid]


def _sample_facts(world, rng, n):
    """Up to ``n`` distinct facts, half the time all about one subject (for pronoun chains)."""
    if rng.random() < 0.5:
        subj = _pick(rng, sorted({f.subject for f in world.facts}))
        pool = world.facts_about(subj)
    else:
        pool = world.facts
    if len(pool) < 2:
        raise _Skip("too few facts")
    return [pool[i] for i in rng.choice(len(pool), size=min(n, len(pool)), replace=False)]


def _w_multi(world, rng):
    chosen = _sample_facts(world, rng, int(rng.integers(2, 5)))
    sents, trips, tids, prev = [], [], [], None
    for f in chosen:
        pron = _pronoun(world, f.subject) if f.subject == prev and rng.random() < 0.7 else None
        rel = RELATIONS_BY_KEY[f.relation]
        s, tid = _statement(rel, f.subject, f.object, rng, pronoun=pron)
        sents.append(s)
        trips.append(f.triplet)
        tids.append(tid)
        prev = f.subject if _subject_led(rel, tid) else None  # after "{O} prey on {S}." no pronoun for S
    return _join(sents, rng, world), trips, tids


_TALK = CHIT_CHAT + SMALL_TALK  # what a speaker says that states no fact


def _greeting(rng, name: str, others: list[str]) -> tuple[str, str] | None:
    """Half the time, when there is someone else: a dialogue turn's start, ``"<name>: <greeting naming one of
    others>"``, and its template id; else None."""
    if others and rng.random() < 0.5:
        ii = _idx(rng, DIALOGUE_INTROS)
        return DIALOGUE_INTROS[ii].format(N=name, A=_pick(rng, others)), f"dialogue.{ii}"
    return None


def _w_persona(world, rng):
    persons = [p for p in world.by_type("person")
               if any(RELATIONS_BY_KEY[f.relation].first_person for f in world.facts_about(p.name))]
    p = _pick(rng, persons)
    facts = [f for f in world.facts_about(p.name) if RELATIONS_BY_KEY[f.relation].first_person]
    chosen = [facts[i] for i in rng.choice(len(facts), size=min(len(facts), int(rng.integers(1, 4))),
                                           replace=False)]
    others = [q.name for q in world.by_type("person") if q.name != p.name]
    greeting = _greeting(rng, p.name, others)  # a dialogue turn addressed to someone else
    if greeting is not None:
        intro, tid = greeting
    else:
        ii = _idx(rng, PERSONA_INTROS)
        intro, tid = PERSONA_INTROS[ii].format(N=p.name), f"intro.{ii}"
    sents, trips, tids = [], [], [tid]
    for f in chosen:
        rel = RELATIONS_BY_KEY[f.relation]
        j = _idx(rng, rel.first_person)
        sents.append(_fix(rel.first_person[j].format(O=f.object)))
        trips.append(f.triplet)
        tids.append(f"{rel.key}.fp{j}")
    if rng.random() < 0.3:  # small talk among the facts, which stores nothing
        j = _idx(rng, _TALK)
        sents.insert(int(rng.integers(0, len(sents) + 1)), _TALK[j])
        tids.append(f"talk.{j}")
    return (intro + " " + " ".join(sents)).replace(":  ", ": "), trips, tids


def _w_small_talk(world, rng):
    """A speaker's turn of small talk, sometimes greeting another person first: it stores nothing."""
    persons = [p.name for p in world.by_type("person")]
    if not persons:
        raise _Skip("no person")
    name = _pick(rng, persons)
    greeting = _greeting(rng, name, [q for q in persons if q != name])
    intro, tids = (greeting[0], [greeting[1]]) if greeting is not None else (f"{name}:", [])
    sents = []
    for j in rng.choice(len(_TALK), size=int(rng.integers(1, 3)), replace=False):
        sents.append(_TALK[int(j)])
        tids.append(f"talk.{int(j)}")
    return intro + " " + " ".join(sents), [], tids


def _update_sentence(world, f: Fact, new: str, rng) -> tuple[str, str]:
    rel = RELATIONS_BY_KEY[f.relation]
    j = _idx(rng, rel.updates)
    prefixes = RULE_CHANGE_PREFIXES if rel.subject_type == "game" else UPDATE_PREFIXES
    body = rel.updates[j].format(S=f.subject, O=new, OLD=f.object)
    pre = _pick(rng, prefixes)
    if pre and "Rule change" in body:
        pre = ""
    return _fix(pre + sentence_case(body)), f"{rel.key}.u{j}"


def _w_update(world, rng):
    f = _pick(rng, _functional_facts(world))
    new = _new_value(world, f, rng)
    text, tid = _update_sentence(world, f, new, rng)
    trips, tids = [(f.subject, f.label, new)], [tid]
    if rng.random() < 0.3:  # plus an unrelated plain fact
        g = _pick(rng, [x for x in world.facts if x.subject != f.subject] or [f])
        if g is not f:
            s, t2 = _statement(RELATIONS_BY_KEY[g.relation], g.subject, g.object, rng)
            text, trips, tids = _join([text, s], rng, world), trips + [g.triplet], tids + [t2]
    return text, trips, tids


def _w_contradiction(world, rng):
    f = _pick(rng, _functional_facts(world))
    new = _new_value(world, f, rng)
    rel = RELATIONS_BY_KEY[f.relation]
    stmt, tid = _statement(rel, f.subject, new, rng)
    j = _idx(rng, CORRECTION_FRAMES)
    text = CORRECTION_FRAMES[j].format(STATEMENT=stmt, OLD=f.object)
    return _fix(text), [(f.subject, f.label, new)], [f"correction.{j}", tid]


def _w_mixed(world, rng):
    facts = [world.facts[i] for i in rng.choice(len(world.facts), size=int(rng.integers(2, 4)), replace=False)]
    q = facts[-1]
    sents, trips, tids = [], [], []
    for f in facts[:-1]:
        s, tid = _statement(RELATIONS_BY_KEY[f.relation], f.subject, f.object, rng)
        sents.append(s)
        trips.append(f.triplet)
        tids.append(tid)
    qs, qid = _question(RELATIONS_BY_KEY[q.relation], q.subject, rng)
    pos = int(rng.integers(0, len(sents) + 1))
    sents.insert(pos, qs)
    tids.append(qid)
    return " ".join(sents), trips, tids


def _w_distractor(world, rng):
    facts = [world.facts[i] for i in rng.choice(len(world.facts), size=int(rng.integers(1, 3)), replace=False)]
    sents, trips, tids = [], [], []
    for f in facts:
        s, tid = _statement(RELATIONS_BY_KEY[f.relation], f.subject, f.object, rng)
        sents.append(s)
        trips.append(f.triplet)
        tids.append(tid)
    for _ in range(int(rng.integers(1, 3))):
        j = _idx(rng, CHIT_CHAT)
        sents.insert(int(rng.integers(0, len(sents) + 1)), CHIT_CHAT[j])
        tids.append(f"chit.{j}")
    return " ".join(sents), trips, tids


def _w_exchange(world, rng):
    if len(world.facts) < 4:
        raise _Skip("too few facts")
    idx = rng.choice(len(world.facts), size=4, replace=False)
    asked, known, user_fact, new_fact = (world.facts[i] for i in idx)
    q, qid = _question(RELATIONS_BY_KEY[asked.relation], asked.subject, rng)
    tids = [qid, "exchange"]
    trips = []
    question = q
    if rng.random() < 0.6:
        s, tid = _statement(RELATIONS_BY_KEY[user_fact.relation], user_fact.subject, user_fact.object, rng)
        question = f"{q} {s}" if rng.random() < 0.5 else f"{s} {q}"
        trips.append(user_fact.triplet)
        tids.append(tid)
    memory = [asked, known]
    rng.shuffle(memory)
    mem_text = "\n".join(f"Memory {i + 1}: {m.subject},{m.label},{m.object}" for i, m in enumerate(memory))
    ans, tid_a = _statement(RELATIONS_BY_KEY[asked.relation], asked.subject, asked.object, rng)
    new, tid_n = _statement(RELATIONS_BY_KEY[new_fact.relation], new_fact.subject, new_fact.object, rng)
    lead = _pick(rng, ("Also, ", "I can add that ", "Note that ", ""))
    response = f"{ans} {lead}{_decap(new, world) if lead else new}"
    trips.append(new_fact.triplet)
    tids += [tid_a, tid_n]
    text = EXCHANGE_FRAME.format(QUESTION=question, MEMORY=mem_text, RESPONSE=_fix(response))
    return text, trips, tids


def _w_question_only(world, rng):
    n = int(rng.integers(1, 3))
    facts = [world.facts[i] for i in rng.choice(len(world.facts), size=n, replace=False)]
    qs, tids = [], []
    for f in facts:
        q, tid = _question(RELATIONS_BY_KEY[f.relation], f.subject, rng)
        qs.append(q)
        tids.append(tid)
    return _join_questions(qs, rng, world), [], tids


def _w_noise(world, rng):
    text, tid = gibberish(rng)
    return text, [], [tid]


_WRITE_RENDER = {"single": _w_single, "multi": _w_multi, "persona": _w_persona, "update": _w_update,
                 "contradiction": _w_contradiction, "mixed": _w_mixed, "distractor": _w_distractor,
                 "exchange": _w_exchange, "question_only": _w_question_only, "noise": _w_noise,
                 "small_talk": _w_small_talk}


# -------------------------------------------------------------------------------------- ask kinds
def _questionable(world) -> list[Fact]:
    return list(world.facts)


def _a_single(world, rng):
    f = _pick(rng, _questionable(world))
    rel = RELATIONS_BY_KEY[f.relation]
    q, tid = _question(rel, f.subject, rng)
    return q, [_query(rel, f.subject)], [f], [tid]


def _a_multi(world, rng):
    chosen = _sample_facts(world, rng, int(rng.integers(2, 4)))
    qs, queries, tids, prev = [], [], [], None
    for f in chosen:
        rel = RELATIONS_BY_KEY[f.relation]
        pron = _pronoun(world, f.subject) if f.subject == prev and rng.random() < 0.5 else None
        q, tid = _question(rel, f.subject, rng, pronoun=pron)
        qs.append(q)
        queries.append(_query(rel, f.subject))
        tids.append(tid)
        prev = f.subject
    return _join_questions(qs, rng, world), queries, chosen, tids


def _a_mixed(world, rng):
    subj = _pick(rng, sorted({f.subject for f in world.facts}))
    facts = world.facts_about(subj)
    if len(facts) < 2:
        raise _Skip("too few facts")
    idx = rng.choice(len(facts), size=min(len(facts), int(rng.integers(2, 4))), replace=False)
    chosen = [facts[i] for i in idx]
    asked = chosen[-1]
    sents, tids, led = [], [], False
    for f in chosen[:-1]:
        pron = _pronoun(world, subj) if led else None  # a pronoun only after a sentence its subject opens
        rel = RELATIONS_BY_KEY[f.relation]
        s, tid = _statement(rel, f.subject, f.object, rng, pronoun=pron)
        sents.append(s)
        tids.append(tid)
        led = _subject_led(rel, tid)
    rel = RELATIONS_BY_KEY[asked.relation]
    q, qid = _question(rel, subj, rng, pronoun=_pronoun(world, subj) if led else None)
    return " ".join(sents + [q]), [_query(rel, subj)], [asked], tids + [qid]


def _a_multihop(world, rng):
    links = [f for f in world.facts if RELATIONS_BY_KEY[f.relation].linking]
    rng.shuffle(links)
    for f1 in links:
        rel1 = RELATIONS_BY_KEY[f1.relation]
        second = [g for g in world.facts_about(f1.object) if not RELATIONS_BY_KEY[g.relation].linking
                  or g.relation != f1.relation]
        if not second:
            continue
        f2 = _pick(rng, second)
        rel2 = RELATIONS_BY_KEY[f2.relation]
        desc = rel1.descriptor.format(S=f1.subject)
        j = _idx(rng, rel2.questions)
        q = sentence_case(_fix(rel2.questions[j].format(S=desc).replace("the the ", "the ")))
        queries = [_query(rel1, f1.subject), f"{rel2.noun} of {desc}"]
        return q, queries, [f1, f2], [f"{rel1.key}.d", f"{rel2.key}.q{j}"]
    raise _Skip("no two-hop chain")


def _a_persona(world, rng):
    persons = [p for p in world.by_type("person")
               if any(RELATIONS_BY_KEY[f.relation].first_person_questions for f in world.facts_about(p.name))]
    p = _pick(rng, persons)
    facts = [f for f in world.facts_about(p.name) if RELATIONS_BY_KEY[f.relation].first_person_questions]
    f = _pick(rng, facts)
    rel = RELATIONS_BY_KEY[f.relation]
    ii = _idx(rng, PERSONA_INTROS)
    j = _idx(rng, rel.first_person_questions)
    text = PERSONA_INTROS[ii].format(N=p.name) + " " + rel.first_person_questions[j]
    return text.replace(":  ", ": "), [_query(rel, p.name)], [f], [f"intro.{ii}", f"{rel.key}.fq{j}"]


def _a_distractor(world, rng):
    q, queries, gold, tids = _a_single(world, rng)
    sents = [q]
    for _ in range(int(rng.integers(1, 3))):
        j = _idx(rng, CHIT_CHAT)
        sents.insert(int(rng.integers(0, len(sents) + 1)), CHIT_CHAT[j])
        tids.append(f"chit.{j}")
    return " ".join(sents), queries, gold, tids


def _a_no_question(world, rng):
    text, _trips, tids = _w_multi(world, rng) if rng.random() < 0.6 else _w_single(world, rng)
    return text, [], [], tids


def _a_noise(world, rng):
    text, tid = gibberish(rng)
    return text, [], [], [tid]


_ASK_RENDER = {"single": _a_single, "multi": _a_multi, "mixed": _a_mixed, "multihop": _a_multihop,
               "persona": _a_persona, "distractor": _a_distractor, "no_question": _a_no_question,
               "noise": _a_noise}


_STATEMENT_LED = {"single", "multi", "distractor", "mixed"}  # write kinds that may get a lead
_QUESTION_LED = {"single", "multi", "multihop"}  # ask kinds that may get a lead and/or a tail


def _frame(text: str, tids: list[str], role: str, kind: str, world: World, rng) -> str:
    """Sometimes wrap a whole input in a lead ("Fun fact: ...") or a tail ("... Thanks!")."""
    if role == "write" and kind in _STATEMENT_LED and rng.random() < 0.25:
        j = _idx(rng, STATEMENT_LEADS)
        tids.append(f"lead.s{j}")
        return STATEMENT_LEADS[j] + _decap(text, world)
    if role == "ask" and kind in _QUESTION_LED:
        if rng.random() < 0.25:
            j = _idx(rng, QUESTION_LEADS)
            tids.append(f"lead.q{j}")
            text = QUESTION_LEADS[j] + (_decap(text, world) if QUESTION_LEADS[j].endswith(", ") else text)
        if rng.random() < 0.15:
            j = _idx(rng, QUESTION_TAILS)
            tids.append(f"tail.q{j}")
            text = text + QUESTION_TAILS[j]
    return text


def _context(world: World, gold: list[Fact], size: int, rng) -> list[list[str]]:
    others = [f for f in world.facts if f not in gold]
    k = max(0, min(len(others), size - len(gold)))
    picked = [others[i] for i in rng.choice(len(others), size=k, replace=False)] if k else []
    ctx = list(gold) + picked
    order = rng.permutation(len(ctx))
    return [list(ctx[i].triplet) for i in order]


def render_example(world: World, role: str, kind: str, rng: np.random.Generator, *,
                   context_size: int = 12) -> dict:
    """Render one example of ``kind`` for ``role`` from ``world`` (answer role: see
    :func:`mags_lib.data.answer.render_answer`; ``context_size`` concerns the ask role only).

    Raises
    ------
    ValueError
        For an unknown role or kind.
    LookupError
        When this world cannot render this kind (e.g. no two-hop chain); draw another world.
    """
    if role == "write":
        if kind not in _WRITE_RENDER:
            raise ValueError(f"unknown write kind {kind!r}: choose from {sorted(_WRITE_RENDER)}")
        try:
            text, trips, tids = _WRITE_RENDER[kind](world, rng)
        except _Skip as exc:
            raise LookupError(f"world {world.world_id} cannot render write/{kind}: {exc}") from exc
        text = _frame(text, tids, "write", kind, world, rng)
        trips = list(dict.fromkeys(tuple(t) for t in trips))
        return {"role": "write", "kind": kind, "input": text, "response": protocol.writes_to_text(trips),
                "ops": _write_ops(trips), "n_ops": len(trips), "world_id": world.world_id,
                "template_ids": tids, "context": [], "gold_facts": [list(t) for t in trips],
                "source": "generated"}
    if role == "ask":
        if kind not in _ASK_RENDER:
            raise ValueError(f"unknown ask kind {kind!r}: choose from {sorted(_ASK_RENDER)}")
        try:
            text, queries, gold, tids = _ASK_RENDER[kind](world, rng)
        except _Skip as exc:
            raise LookupError(f"world {world.world_id} cannot render ask/{kind}: {exc}") from exc
        text = _frame(text, tids, "ask", kind, world, rng)
        queries = list(dict.fromkeys(queries))
        return {"role": "ask", "kind": kind, "input": text, "response": protocol.asks_to_text(queries),
                "ops": _ask_ops(queries), "n_ops": len(queries), "world_id": world.world_id,
                "template_ids": tids, "context": _context(world, gold, context_size, rng),
                "gold_facts": [list(f.triplet) for f in gold], "source": "generated"}
    if role == "answer":
        from .answer import render_answer

        return render_answer(world, kind, rng)
    raise ValueError(f"unknown role {role!r}: use 'ask', 'write' or 'answer'")


def _key(ex: dict):
    """What makes two examples the same: the input (answer role: the question with its memory block)."""
    return ex["input"] if ex["role"] != "answer" else (ex["input"], protocol.format_facts(ex["memory"]))


def render_split(worlds: list[World], role: str, n: int, rng: np.random.Generator, *,
                 kinds: dict[str, float], split: str, context_size: int = 12,
                 progress: bool = True, exclude: set | None = None) -> list[dict]:
    """``n`` distinct examples (no repeated input; for the answer role no repeated question with the same
    memory) of ``role`` drawn round-robin over ``worlds``; none is one of ``exclude`` (the examples of the
    other splits, see :func:`_key`: world-free inputs such as noise could otherwise repeat across splits)."""
    if not worlds:
        raise ValueError("render_split needs at least one world")
    names = [k for k, w in kinds.items() if w > 0]
    p = np.array([kinds[k] for k in names], dtype=float)
    p /= p.sum()
    rows, seen, attempts = [], set(), 0
    max_attempts = 50 * max(n, 1)
    bar = tqdm(total=n, desc=f"{role}/{split}", disable=not progress, leave=False)
    while len(rows) < n:
        attempts += 1
        if attempts > max_attempts:
            raise RuntimeError(f"could only render {len(rows)} distinct {role} examples for {split} "
                               f"out of {n}: add worlds (GenerationConfig.worlds_{split})")
        world = worlds[(attempts - 1) % len(worlds)]
        kind = names[int(rng.choice(len(names), p=p))]
        try:
            ex = render_example(world, role, kind, rng, context_size=context_size)
        except LookupError:
            continue
        key = _key(ex)
        if key in seen or (exclude is not None and key in exclude):
            continue
        seen.add(key)
        ex["id"] = f"gen-{role}-{split}-{len(rows):06d}"
        rows.append(ex)
        bar.update(1)
    bar.close()
    return rows


def generate_role_splits(config: GenerationConfig | None = None, *, progress: bool = True
                         ) -> tuple[dict[str, dict[str, list[dict]]], dict[str, list[World]]]:
    """Generate worlds per split and render every role's examples.

    Returns
    -------
    rows : dict
        ``rows[role][split]`` -> list of example dicts.
    worlds : dict
        ``worlds[split]`` -> the worlds of that split (disjoint invented names across splits).
    """
    cfg = config or GenerationConfig()
    registry = NameRegistry()
    worlds = {split: generate_worlds(cfg.n_worlds()[split], seed=cfg.seed, prefix=f"{split[:2]}",
                                     registry=registry, config=cfg.world)
              for split in SPLITS}
    rows: dict[str, dict[str, list[dict]]] = {}
    for r_i, role in enumerate(ROLES):
        if role not in cfg.roles:
            continue
        kinds = {"ask": cfg.ask_kinds, "write": cfg.write_kinds, "answer": cfg.answer_kinds}[role]
        rows[role] = {}
        earlier: set = set()  # examples of the splits drawn before: no input is in two splits
        for s_i, split in enumerate(SPLITS):
            rng = np.random.default_rng([cfg.seed, r_i, s_i])
            rows[role][split] = render_split(worlds[split], role, cfg.sizes()[split], rng, kinds=kinds,
                                             split=split, context_size=cfg.context_size, progress=progress,
                                             exclude=earlier)
            earlier |= {_key(ex) for ex in rows[role][split]}
    return rows, worlds
