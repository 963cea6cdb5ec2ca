"""LoCoMo: loader, session dates, evidence recall@k and QA F1 with LoCoMo's own normalisation.

LoCoMo (Maharana et al., 2024) is ten long two-speaker conversations (19-35 dated sessions,
369-689 turns each) with 1,986 questions, each with the dialog ids (``dia_id``, e.g. ``"D1:3"``)
of the turns that hold its answer. The file ``locomo10.json`` is CC BY-NC 4.0: evaluation only,
never committed here. :func:`load_locomo` takes its path (default :func:`default_path`,
``../shared/data/locomo/locomo10.json`` beside the project, or ``$MAGS_LOCOMO``).

The loader is tolerant of the file's known quirks and counts each one (``LoCoMo.quirks``, with
examples in ``LoCoMo.quirk_examples``):

* evidence entries holding several ids (``"D8:6; D9:17"``, ``"D9:1 D4:4 D4:6"``): split;
* malformed ids (``"D:11:26"``, ``"D30:05"``): repaired to the canonical ``"D11:26"``, ``"D30:5"``;
* ids that name no turn of the conversation (``"D"``, or a turn that does not exist): dropped from
  the question's evidence and counted; a question left without evidence is excluded from recall
  averages (it has nothing to find), and counted;
* integer answers (``2022``, ``3``): turned into text;
* image turns: the shared image is known only by its BLIP caption, appended to the turn's text as
  ``[shares <caption>]`` (LoCoMo's own rendering);
* category-5 (adversarial) questions carry the plausible but wrong ``adversarial_answer`` and
  usually no ``answer``: the right reply is that the conversation does not say (scored as LoCoMo
  does, see :func:`qa_score`);
* session dates with no session (``conv-26`` dates sessions 20-35 that hold no turns): ignored;
* session dates like ``"1:56 pm on 8 May, 2023"``: parsed to real datetimes
  (:func:`parse_session_date`).

Anything else malformed (not JSON, a conversation without speakers or without a ``qa`` list, an
unparseable date, a category-5 question with neither answer) raises :class:`LoCoMoFormatError` naming
the place and the value.

Metrics (DESIGN.md):

* :func:`evidence_recall` -- per question, the share of its evidence dia_ids found among the
  sources of the top-k retrieved items;
* :func:`qa_score` -- QA F1 as LoCoMo's evaluation computes it: answers normalised (commas and
  punctuation removed, lower case, the words a/an/the/and removed), tokens Porter-stemmed, token
  F1; category 1 (multi-hop) splits prediction and answer at commas and averages, over the answer's
  parts, the best F1 against any predicted part; category 3 keeps the answer's part before the first
  ``;``; category 5 scores 1 when the reply says "not mentioned" or "no information available".
"""

from __future__ import annotations

import json
import os
import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

__all__ = [
    "CAT5_NOT_MENTIONED",
    "CATEGORIES",
    "Conversation",
    "LoCoMo",
    "LoCoMoFormatError",
    "LoCoMoNotFoundError",
    "Question",
    "Session",
    "Turn",
    "canonical_dia_ids",
    "default_path",
    "evidence_recall",
    "load_locomo",
    "normalize_answer",
    "parse_session_date",
    "qa_score",
    "token_f1",
]

CATEGORIES: dict[int, str] = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
"""LoCoMo's question categories, as DESIGN.md names them."""

CAT5_NOT_MENTIONED = "Not mentioned in the conversation"
"""The right reply to a category-5 (adversarial) question, as LoCoMo's evaluation offers it."""

WHERE_TO_GET = (
    "LoCoMo (CC BY-NC 4.0, evaluation only, never committed here) is the file data/locomo10.json of "
    "the snap-research/locomo repository; put it at ../shared/data/locomo/locomo10.json beside the "
    "project, set $MAGS_LOCOMO to its path, or pass the path explicitly"
)


class LoCoMoFormatError(ValueError):
    """The file is not LoCoMo as this loader knows it; the message says where and what."""


class LoCoMoNotFoundError(FileNotFoundError):
    """No LoCoMo file where one was looked for.

    ``explicit`` says whether the place was asked for (a path passed, or ``$MAGS_LOCOMO`` set): a
    command treats that as a mistake (a usage error), and only the default place, absent, as an
    optional input left out (one ``skipped`` line).
    """

    def __init__(self, message: str, explicit: bool):
        super().__init__(message)
        self.explicit = explicit


FILE_NAME = "locomo10.json"


def default_path() -> Path:
    """``$MAGS_LOCOMO``, else ``<project>/../shared/data/locomo/locomo10.json``."""
    env = os.environ.get("MAGS_LOCOMO")
    if env:
        return Path(env)
    from ..models import project_root

    return project_root().parent / "shared" / "data" / "locomo" / FILE_NAME


def _resolve_path(path: str | Path | None) -> Path:
    """The LoCoMo file to read: ``path``, or :func:`default_path`; a folder stands for its ``locomo10.json``.

    Raises :class:`LoCoMoNotFoundError` (``explicit`` when ``path`` was given or ``$MAGS_LOCOMO`` is set)
    when there is no such file, saying what was looked for and where to get it.
    """
    env = os.environ.get("MAGS_LOCOMO")
    explicit = path is not None or bool(env)
    where = (f"{path}" if path is not None else f"$MAGS_LOCOMO={env}" if env else None)
    p = Path(path) if path is not None else default_path()
    if p.is_dir():
        inside = p / FILE_NAME
        if inside.is_file():
            return inside
        raise LoCoMoNotFoundError(f"LoCoMo: {where or p} is a directory; expected {inside} (the file itself, or a "
                                  f"folder holding it). {WHERE_TO_GET}.", explicit)
    if not p.is_file():
        what = f"{where} (no such file)" if where else str(p)
        fix = ("Fix the path (or unset $MAGS_LOCOMO to use the default place)" if path is None and env
               else "Fix the path" if explicit else "")
        raise LoCoMoNotFoundError(f"LoCoMo file not found at {what}. {fix + '. ' if fix else ''}{WHERE_TO_GET}.",
                                  explicit)
    return p


# ------------------------------------------------------------------------------------------------
# dates
_MONTHS = {m.lower(): i for i, m in enumerate(
    ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
     "November", "December"], start=1)}
_MONTHS.update({k[:3]: v for k, v in list(_MONTHS.items())})
_DATE = re.compile(
    r"^\s*(\d{1,2}):(\d{2})\s*([ap])\.?\s*m\.?\s+on\s+(\d{1,2})\s+([a-z]+)\.?\s*,?\s*(\d{4})\s*$", re.IGNORECASE)


def parse_session_date(text: str) -> datetime:
    """A LoCoMo session date string as a naive :class:`~datetime.datetime`.

    The file writes ``"<h>:<mm> <am|pm> on <day> <Month>, <year>"``; 12 am is midnight, 12 pm noon.
    Case, spacing, ``a.m.``-style dots and three-letter month names are tolerated.

    Raises
    ------
    ValueError
        For any other shape, or an impossible date (the message quotes the text).

    Examples
    --------
    >>> parse_session_date("1:56 pm on 8 May, 2023")
    datetime.datetime(2023, 5, 8, 13, 56)
    >>> parse_session_date("12:28 am on 8 November, 2023")
    datetime.datetime(2023, 11, 8, 0, 28)
    >>> parse_session_date("12:04 pm on 19 Jan, 2024")
    datetime.datetime(2024, 1, 19, 12, 4)
    """
    if not isinstance(text, str):
        raise ValueError(f"session date must be text like '1:56 pm on 8 May, 2023', got {text!r}")
    m = _DATE.match(text)
    if not m:
        raise ValueError(f"cannot parse session date {text!r}: expected '<h>:<mm> <am|pm> on <day> <Month>, "
                         "<year>', e.g. '1:56 pm on 8 May, 2023'")
    hour, minute, ampm, day, month, year = m.groups()
    mon = _MONTHS.get(month.lower())
    h = int(hour)
    if mon is None or not 1 <= h <= 12:
        raise ValueError(f"cannot parse session date {text!r}: unknown month {month!r} or hour {hour!r}")
    h = h % 12 + (12 if ampm.lower() == "p" else 0)
    try:
        return datetime(int(year), mon, int(day), h, int(minute))
    except ValueError as e:
        raise ValueError(f"impossible session date {text!r}: {e}") from e


# ------------------------------------------------------------------------------------------------
# data model
@dataclass(frozen=True)
class Turn:
    """One dialog turn.

    Attributes
    ----------
    dia_id : str
        ``"D<session>:<n>"``, the id evidence refers to.
    speaker, text : str
        As in the file.
    session : int
        Session number (1-based).
    position : int
        0-based position of the turn in the whole conversation.
    time : datetime
        The session's date.
    caption : str or None
        BLIP caption of the image the speaker shared, if any.
    """

    dia_id: str
    speaker: str
    text: str
    session: int
    position: int
    time: datetime
    caption: str | None = None

    def utterance(self) -> str:
        """The turn's own words, with the shared image's caption appended (no speaker)."""
        return f"{self.text} [shares {self.caption}]" if self.caption else self.text

    def render(self) -> str:
        """``"<speaker>: <text> [shares <caption>]"``: what the retrievers index and MAGS observes.

        >>> from datetime import datetime
        >>> Turn("D1:5", "Caroline", "Look!", 1, 4, datetime(2023, 5, 8), "a photo of a dog").render()
        'Caroline: Look! [shares a photo of a dog]'
        """
        return f"{self.speaker}: {self.utterance()}"


@dataclass(frozen=True)
class Session:
    """A dated session of turns."""

    number: int
    date: datetime
    date_text: str
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class Question:
    """One LoCoMo question.

    Attributes
    ----------
    answer : str or None
        The gold answer as text (integers converted); ``None`` for a category-5 question that
        only has an ``adversarial_answer``.
    evidence : tuple of str
        The canonical dia_ids of its evidence that name turns of the conversation (repaired,
        deduplicated, in file order).
    raw_evidence : tuple of str
        The evidence entries exactly as in the file.
    adversarial_answer : str or None
        Category 5: the plausible but unsupported answer LoCoMo offers as the wrong option.
    """

    sample_id: str
    index: int
    question: str
    answer: str | None
    category: int
    evidence: tuple[str, ...]
    raw_evidence: tuple[str, ...] = ()
    adversarial_answer: str | None = None

    @property
    def category_name(self) -> str:
        return CATEGORIES[self.category]

    @property
    def key(self) -> str:
        """``"<sample_id>#<index>"``, unique in the dataset."""
        return f"{self.sample_id}#{self.index}"


@dataclass(frozen=True)
class Conversation:
    """One LoCoMo conversation: two speakers, dated sessions, questions."""

    sample_id: str
    speaker_a: str
    speaker_b: str
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...]

    @property
    def turns(self) -> list[Turn]:
        """Every turn, in order."""
        return [t for s in self.sessions for t in s.turns]

    @property
    def n_turns(self) -> int:
        return sum(len(s.turns) for s in self.sessions)

    def turn(self, dia_id: str) -> Turn:
        """The turn with this (canonical) dia_id."""
        for t in self.turns:
            if t.dia_id == dia_id:
                return t
        raise KeyError(f"{self.sample_id} has no turn {dia_id!r}")


@dataclass
class LoCoMo:
    """The loaded dataset, with the quirks met while reading it."""

    path: Path
    conversations: list[Conversation]
    quirks: Counter = field(default_factory=Counter)
    quirk_examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def n_questions(self) -> int:
        return sum(len(c.questions) for c in self.conversations)

    @property
    def n_turns(self) -> int:
        return sum(c.n_turns for c in self.conversations)

    def questions(self) -> list[Question]:
        return [q for c in self.conversations for q in c.questions]

    def conversation(self, sample_id: str) -> Conversation:
        for c in self.conversations:
            if c.sample_id == sample_id:
                return c
        raise KeyError(f"no conversation {sample_id!r}; there are {[c.sample_id for c in self.conversations]}")

    def category_counts(self) -> dict[int, int]:
        return dict(sorted(Counter(q.category for q in self.questions()).items()))

    def quirk_report(self) -> list[str]:
        """One line per quirk: its count and up to three examples."""
        lines = []
        for name, n in sorted(self.quirks.items()):
            ex = self.quirk_examples.get(name, [])[:3]
            lines.append(f"{name}: {n}" + (f" (e.g. {'; '.join(ex)})" if ex else ""))
        return lines

    def summary(self) -> str:
        cats = ", ".join(f"{CATEGORIES[c]} {n}" for c, n in self.category_counts().items())
        return (f"LoCoMo {self.path.name}: {len(self.conversations)} conversations, {self.n_turns} turns, "
                f"{self.n_questions} questions ({cats})")


# ------------------------------------------------------------------------------------------------
# loading
_ID = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")
_SESSION_KEY = re.compile(r"^session_(\d+)$")
_SESSION_DATE_KEY = re.compile(r"^session_(\d+)_date_time$")


def canonical_dia_ids(entry: str) -> list[str]:
    """The canonical dia_ids written in one evidence entry (possibly none, possibly several).

    >>> canonical_dia_ids("D1:3"), canonical_dia_ids("D8:6; D9:17"), canonical_dia_ids("D:11:26")
    (['D1:3'], ['D8:6', 'D9:17'], ['D11:26'])
    >>> canonical_dia_ids("D30:05"), canonical_dia_ids("D")
    (['D30:5'], [])
    """
    return [f"D{int(a)}:{int(b)}" for a, b in _ID.findall(str(entry))]


class _Quirks:
    def __init__(self) -> None:
        self.counts: Counter = Counter()
        self.examples: dict[str, list[str]] = {}

    def add(self, name: str, example: str, n: int = 1) -> None:
        self.counts[name] += n
        ex = self.examples.setdefault(name, [])
        if len(ex) < 5:
            ex.append(example)


def load_locomo(path: str | Path | None = None) -> LoCoMo:
    """Read ``locomo10.json`` (see the module docstring for the quirks it tolerates).

    Parameters
    ----------
    path : str or Path, optional
        The file, or a folder holding ``locomo10.json``; default :func:`default_path`.

    Raises
    ------
    LoCoMoNotFoundError
        A :class:`FileNotFoundError`, when the file is absent, saying where to get it; its ``explicit``
        says whether the place was asked for (``path`` given, or ``$MAGS_LOCOMO`` set).
    LoCoMoFormatError
        When it is not LoCoMo (the message names the conversation, the key and the value).
    """
    path = _resolve_path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise LoCoMoFormatError(f"{path} is not valid JSON ({e}); expected LoCoMo's locomo10.json. "
                                f"{WHERE_TO_GET}.") from e
    if not isinstance(data, list) or not data:
        raise LoCoMoFormatError(f"{path}: expected a non-empty JSON list of conversations, got "
                                f"{type(data).__name__}{'' if data else ' (empty)'}")
    q = _Quirks()
    convs = [_conversation(path, i, raw, q) for i, raw in enumerate(data)]
    ids = Counter(c.sample_id for c in convs)
    dup = [s for s, n in ids.items() if n > 1]
    if dup:
        raise LoCoMoFormatError(f"{path}: sample_id repeated: {dup}")
    return LoCoMo(path=path, conversations=convs, quirks=q.counts, quirk_examples=q.examples)


def _require(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise LoCoMoFormatError(f"{where}: {what}")


def _conversation(path: Path, i: int, raw: object, q: _Quirks) -> Conversation:
    where = f"{path}: conversation {i}"
    _require(isinstance(raw, dict), where, f"expected an object, got {type(raw).__name__}")
    sample_id = str(raw.get("sample_id", f"conv-{i}"))
    where = f"{path}: {sample_id}"
    conv = raw.get("conversation")
    _require(isinstance(conv, dict), where, "no 'conversation' object")
    for key in ("speaker_a", "speaker_b"):
        _require(isinstance(conv.get(key), str) and conv[key].strip() != "", where, f"no {key!r} name")
    numbers = sorted({int(m.group(1)) for k in conv for m in [_SESSION_KEY.match(k)] if m})
    dated = {int(m.group(1)) for k in conv for m in [_SESSION_DATE_KEY.match(k)] if m}
    for n in sorted(dated - set(numbers)):
        q.add("session_dates_without_turns", f"{sample_id} session_{n}")
    sessions: list[Session] = []
    position = 0
    seen: set[str] = set()
    for n in numbers:
        turns_raw = conv[f"session_{n}"]
        _require(isinstance(turns_raw, list), where, f"session_{n} is not a list of turns")
        if not turns_raw:
            q.add("empty_sessions", f"{sample_id} session_{n}")
            continue
        date_text = conv.get(f"session_{n}_date_time")
        _require(date_text is not None, where, f"session_{n} has turns but no session_{n}_date_time")
        try:
            date = parse_session_date(date_text)
        except ValueError as e:
            raise LoCoMoFormatError(f"{where}: session_{n}_date_time: {e}") from e
        turns = []
        for j, t in enumerate(turns_raw):
            tw = f"{where} session_{n} turn {j}"
            _require(isinstance(t, dict), tw, f"expected an object, got {type(t).__name__}")
            for key in ("speaker", "dia_id", "text"):
                _require(isinstance(t.get(key), str), tw, f"missing or non-text {key!r}")
            ids = canonical_dia_ids(t["dia_id"])
            _require(len(ids) == 1, tw, f"unreadable dia_id {t['dia_id']!r}")
            dia_id = ids[0]
            if dia_id != t["dia_id"]:
                q.add("turn_dia_ids_repaired", f"{sample_id} {t['dia_id']!r} -> {dia_id}")
            if dia_id in seen:
                q.add("duplicate_turn_dia_ids", f"{sample_id} {dia_id}")
            seen.add(dia_id)
            caption = t.get("blip_caption")
            caption = caption.strip() if isinstance(caption, str) and caption.strip() else None
            if caption:
                q.add("image_turns_with_captions", f"{sample_id} {dia_id}")
            text = t["text"]
            if not text.strip() and not caption:
                q.add("empty_turns", f"{sample_id} {dia_id}")
            turns.append(Turn(dia_id=dia_id, speaker=t["speaker"], text=text, session=n, position=position,
                              time=date, caption=caption))
            position += 1
        sessions.append(Session(number=n, date=date, date_text=date_text, turns=tuple(turns)))
    _require(bool(sessions), where, "no session with turns")
    _require("qa" in raw, where, f"no 'qa' list of questions (its keys: {', '.join(sorted(map(str, raw)))}); "
             "LoCoMo's conversations each hold one: is the key misspelt?")
    qa_raw = raw["qa"]
    _require(isinstance(qa_raw, list), where, f"'qa' is not a list of questions: {type(qa_raw).__name__}")
    if not qa_raw:
        q.add("conversations_without_questions", sample_id)
    questions = [_question(where, sample_id, k, item, seen, q) for k, item in enumerate(qa_raw)]
    return Conversation(sample_id=sample_id, speaker_a=conv["speaker_a"], speaker_b=conv["speaker_b"],
                        sessions=tuple(sessions), questions=tuple(questions))


def _question(where: str, sample_id: str, k: int, item: object, turn_ids: set[str], q: _Quirks) -> Question:
    qw = f"{where} qa {k}"
    _require(isinstance(item, dict), qw, f"expected an object, got {type(item).__name__}")
    _require(isinstance(item.get("question"), str) and item["question"].strip() != "", qw, "no question text")
    cat = item.get("category")
    _require(not isinstance(cat, bool) and cat in CATEGORIES, qw,
             f"category must be one of {sorted(CATEGORIES)}, got {cat!r}")
    ev_raw = item.get("evidence", [])
    _require(isinstance(ev_raw, list), qw, f"'evidence' is not a list: {ev_raw!r}")
    tag = f"{sample_id} qa {k}"
    ev: list[str] = []
    for e in ev_raw:
        ids = canonical_dia_ids(e)
        if len(ids) > 1:
            q.add("evidence_entries_with_several_ids", f"{tag}: {e!r}")
        elif len(ids) == 1 and ids[0] != e:
            q.add("evidence_ids_repaired", f"{tag}: {e!r} -> {ids[0]}")
        if not ids:
            q.add("evidence_ids_unresolvable", f"{tag}: {e!r} (no dia_id in it)")
        for d in ids:
            if d not in turn_ids:
                q.add("evidence_ids_unresolvable", f"{tag}: {e!r} ({d} is no turn of {sample_id})")
            elif d in ev:
                q.add("evidence_ids_repeated", f"{tag}: {d}")
            else:
                ev.append(d)
    if not ev_raw:
        q.add("questions_without_evidence_in_file", tag)
    elif not ev:
        q.add("questions_left_without_evidence", tag)
    answer = item.get("answer")
    if isinstance(answer, bool) or (answer is not None and not isinstance(answer, (str, int, float))):
        raise LoCoMoFormatError(f"{qw}: answer must be text or a number, got {answer!r}")
    if isinstance(answer, (int, float)):
        q.add("numeric_answers", f"{tag}: {answer!r}")
        answer = str(answer)
    adv = item.get("adversarial_answer")
    adv = None if adv is None else str(adv)
    if cat == 5:
        if answer is None and adv is None:
            raise LoCoMoFormatError(f"{qw}: category-5 (adversarial) question with neither 'adversarial_answer' "
                                    "nor 'answer': nothing to offer as the wrong option; add its "
                                    "'adversarial_answer' or drop the question")
        if answer is None:
            q.add("category5_adversarial_answer_only", tag)
        else:
            q.add("category5_with_answer_too", f"{tag}: answer {answer!r}, adversarial {adv!r}")
    elif answer is None:
        raise LoCoMoFormatError(f"{qw}: category {cat} question without an 'answer'")
    return Question(sample_id=sample_id, index=k, question=item["question"].strip(), answer=answer,
                    category=int(cat), evidence=tuple(ev), raw_evidence=tuple(str(e) for e in ev_raw),
                    adversarial_answer=adv)


# ------------------------------------------------------------------------------------------------
# evidence recall
def evidence_recall(evidence: Iterable[str], retrieved_sources: Sequence[Iterable[str]], k: int) -> float | None:
    """Share of a question's evidence dia_ids among the sources of its top-``k`` retrieved items.

    Parameters
    ----------
    evidence : iterable of str
        The question's evidence dia_ids (repeats count once).
    retrieved_sources : sequence of iterables of str
        For each retrieved item, best first, the source ids it carries (a turn retriever's item has
        one; a memory fact may carry several).
    k : int
        Items considered.

    Returns
    -------
    float or None
        ``None`` when the question has no evidence (nothing to find: excluded from averages).

    Raises
    ------
    TypeError
        When ``evidence``, or an entry of ``retrieved_sources``, is a str (its characters would be
        taken for ids).

    Examples
    --------
    >>> evidence_recall(["D1:3", "D2:1"], [["D1:3"], ["D5:5"], ["D2:1"]], k=2)
    0.5
    >>> evidence_recall(["D1:3", "D2:1"], [["D1:3"], ["D5:5"], ["D2:1"]], k=3)
    1.0
    >>> evidence_recall(["D1:3"], [["D2:2", "D1:3"]], k=1), evidence_recall([], [["D1:3"]], k=1)
    (1.0, None)
    """
    if int(k) < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if isinstance(evidence, str):
        raise TypeError(f"evidence must be a list of dia_ids, e.g. ['D1:3'], not the str {evidence!r} "
                        "(its characters would be taken for ids)")
    retrieved_sources = list(retrieved_sources)
    for i, sources in enumerate(retrieved_sources):
        if isinstance(sources, str):
            raise TypeError(f"retrieved_sources must hold one list of source ids per retrieved item, e.g. "
                            f"[['D1:3'], ['D2:1']]; item {i} is the str {sources!r} (its characters would be taken "
                            "for ids): wrap each item's ids in a list")
    ev = set(evidence)
    if not ev:
        return None
    found: set[str] = set()
    for sources in retrieved_sources[: int(k)]:
        found.update(sources)
    return len(ev & found) / len(ev)


# ------------------------------------------------------------------------------------------------
# QA F1, LoCoMo's normalisation (reimplemented from its evaluation code's behaviour)
_LOCOMO_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_LOCOMO_PUNCT = set(string.punctuation)


def normalize_answer(s: str) -> str:
    """LoCoMo's answer normalisation.

    Commas deleted, lower case, every ASCII punctuation character deleted (not replaced by a space),
    the words a / an / the / and replaced by a space, whitespace collapsed.

    >>> normalize_answer("The cat, the dog and a bird!")
    'cat dog bird'
    >>> normalize_answer("7 May 2023"), normalize_answer("self-care")
    ('7 may 2023', 'selfcare')
    """
    s = str(s).replace(",", "").lower()
    s = "".join(ch for ch in s if ch not in _LOCOMO_PUNCT)
    s = _LOCOMO_ARTICLES.sub(" ", s)
    return " ".join(s.split())


def _stems(s: str) -> list[str]:
    from ..graph.lexical import porter_stemmer  # the stemmer LoCoMo's evaluation uses (NLTK's default mode)

    ps = porter_stemmer()
    return [ps.stem(w) for w in normalize_answer(s).split()]


def token_f1(prediction: str, answer: str) -> float:
    """Token F1 of LoCoMo: normalised, Porter-stemmed tokens, multiset overlap.

    >>> token_f1("She went to Paris", "paris")
    0.4
    >>> token_f1("running dogs", "dog runs"), token_f1("", "x")
    (1.0, 0.0)
    """
    p, g = _stems(prediction), _stems(answer)
    common = sum((Counter(p) & Counter(g)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def _multi_answer_f1(prediction: str, answer: str) -> float:
    preds = [x.strip() for x in prediction.split(",")]
    golds = [x.strip() for x in answer.split(",")]
    return sum(max(token_f1(p, g) for p in preds) for g in golds) / len(golds)


def qa_score(prediction: str, answer: str | None, category: int) -> float:
    """LoCoMo's per-question QA score (its "F1").

    Parameters
    ----------
    prediction : str
        The reader's reply (for category 5, after mapping an option letter to the option's text).
    answer : str or None
        The gold answer (ignored for category 5).
    category : int
        1 multi-hop: comma-separated parts, mean over the answer's parts of the best token F1
        against any predicted part; 2 temporal, 4 single-hop: token F1; 3 open-domain: token F1
        against the answer's part before the first ``;``; 5 adversarial: 1.0 when the reply
        contains "not mentioned" or "no information available" (case-insensitive), else 0.0.

    Examples
    --------
    >>> qa_score("Paris, Rome", "Rome, Paris, Oslo", 1)  # 1 + 1 + 0 over three gold parts
    0.6666666666666666
    >>> qa_score("psychology", "Psychology, counseling certification; maybe", 3)  # 1 of 3 gold tokens
    0.5
    >>> qa_score("Not mentioned in the conversation", None, 5), qa_score("Yes", None, 5)
    (1.0, 0.0)
    """
    if category not in CATEGORIES:
        raise ValueError(f"category must be one of {sorted(CATEGORIES)}, got {category!r}")
    prediction = str(prediction)
    if category == 5:
        low = prediction.lower()
        return 1.0 if ("not mentioned" in low or "no information available" in low) else 0.0
    if answer is None:
        raise ValueError(f"category {category} needs a gold answer")
    answer = str(answer)
    if category == 1:
        return _multi_answer_f1(prediction, answer)
    if category == 3:
        answer = answer.split(";")[0].strip()
    return token_f1(prediction, answer)
