"""The memory protocol: tags, parser, serializer, GBNF grammars and every prompt template.

Pure text: this module imports no model code. The protocol is the seed project's::

    <memory_ask>query text</memory_ask>                    recall step, one tag per query
    <memory_write>subject,relation,object</memory_write>   engram step, one tag per triplet

An input with nothing to store or ask maps to the empty output.

Comma and backslash rule (deterministic)
----------------------------------------
A write's content splits on its first two *unescaped* commas. In the subject and the relation
there are two escapes: ``\\,`` is a literal comma and ``\\\\`` a literal backslash; any other
backslash is literal as written (``C:\\Users`` stays as it is). The object is everything after the
second separator, verbatim -- commas and backslashes included -- so it needs no escaping
(``Paris,is,big, old and busy`` -> ``("Paris", "is", "big, old and busy")``). Fields are stripped
of surrounding whitespace.

:func:`escape_field` escapes every backslash and comma of a subject or relation, and
:func:`serialize` / :func:`writes_to_text` use it, so every triplet whose fields hold no angle
bracket round-trips: ``parse(writes_to_text([t])).triplets == [t]`` (whitespace collapsed), e.g.
``("C:\\\\", "is", "a drive")`` and ``("a\\\\,b", "r", "o")``. The write grammar produces exactly
these escapes.

Parser modes
------------
``strict``: the whole text must be zero or more well-formed tags of the role, separated by
whitespace only; every tag lowercase and closed; contents non-empty; writes with three non-empty
fields. Anything else is a problem (the well-formed ops are still returned). Adherence is the share
of outputs that parse in strict mode with no problem.

``lenient``: recovers what a reader would: tag names in any case and with stray spaces, text outside
tags ignored, a last tag left unclosed at the end of the text (or closed by the next opening tag),
wrong-role tags dropped. Problems list only what could not be recovered.
:func:`parse` never raises, whatever the text, and runs in linear time in both modes: a tag opens at
an opening tag that has a matching closing tag after it and ends at the first such closing tag,
found by one tokenising pass (no regex scans the rest of the text once per tag), and every pattern
is free of backtracking (possessive quantifiers). :data:`SCAN_WORK` counts the characters the strict
parser's scans examine, so tests bound its work without a clock.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

__all__ = [
    "ROLES", "TAGS", "Op", "Parsed", "parse", "split_triplet", "escape_field", "serialize", "SCAN_WORK",
    "asks_to_text", "writes_to_text", "normalize_text", "normalize_answer", "normalize_triplet", "abstains",
    "alias_in", "matching_alias", "GRAMMARS", "grammar",
    "SYSTEM_PROMPTS", "TRAINED_SYSTEM_PROMPTS", "FEW_SHOT", "build_messages", "format_facts", "format_item",
    "ABSTAIN_ANSWER", "ABSTAIN_PHRASES", "AnswerForm", "answer_form",
]

ROLES = ("ask", "write")
TAGS = {"ask": "memory_ask", "write": "memory_write"}
_TAG_TO_ROLE = {v: k for k, v in TAGS.items()}
ABSTAIN_ANSWER = "I don't know: that is not in my memory."
ABSTAIN_PHRASES: tuple[str, ...] = (
    ABSTAIN_ANSWER,  # what the answer prompt tells the reader to say
    "not in my memory", "not in memory", "not in the memory", "no memory of",
    "i don't know", "i do not know", "i dont know", "don't know", "do not know",
    "i don't remember", "i do not remember", "can't remember", "cannot remember",
    "no information", "no relevant facts", "no relevant information", "not enough information",
    "i'm not sure", "i am not sure", "not sure",
    "unknown", "not known", "no idea", "no record", "not mentioned", "never mentioned",
    "wasn't mentioned", "was not mentioned", "haven't been told", "have not been told", "wasn't told",
    "was not told", "can't answer", "cannot answer", "can't tell", "cannot tell", "cannot say", "can't say",
    "does not say", "doesn't say", "do not have that information", "don't have that information",
    "don't have information", "do not have information", "know nothing",
    "don't have any information", "do not have any information", "don't have any record", "do not have any record",
    "don't recall", "do not recall", "can't recall", "cannot recall", "no recollection", "nothing in my memory",
    "not stored", "not recorded", "not aware", "not specified", "not stated", "not provided",
    "does not mention", "doesn't mention", "no mention",
)
"""Phrases that make a response an abstention ("the information is unknown / not in memory"), matched
after :func:`normalize_answer` as whole-word runs (:func:`abstains`): one list for every scorer (the game's,
the reader's held-out metrics, the rewards). Their words never count as an answer (:func:`alias_in`)."""


@dataclass(frozen=True)
class Op:
    """One memory operation: ``role`` is ``"ask"`` or ``"write"``; writes carry their ``triplet``."""

    role: str
    content: str
    triplet: tuple[str, str, str] | None = None

    def to_text(self) -> str:
        """This op as protocol text (escaping commas in subject and relation)."""
        if self.role == "write" and self.triplet is not None:
            body = ",".join([escape_field(self.triplet[0]), escape_field(self.triplet[1]), self.triplet[2]])
        else:
            body = self.content
        tag = TAGS[self.role]
        return f"<{tag}>{body}</{tag}>"


@dataclass
class Parsed:
    """The operations found in a text and the problems met on the way."""

    ops: list[Op] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No problem found (for strict mode: the text adheres to the protocol)."""
        return not self.problems

    @property
    def asks(self) -> list[str]:
        return [op.content for op in self.ops if op.role == "ask"]

    @property
    def triplets(self) -> list[tuple[str, str, str]]:
        return [op.triplet for op in self.ops if op.role == "write" and op.triplet is not None]


class ScanWork:
    """Characters examined by the strict parser's scans, and the number of scans (reset by tests)."""

    def __init__(self) -> None:
        self.chars = 0
        self.calls = 0

    def reset(self) -> None:
        self.chars = self.calls = 0

    def add(self, n: int) -> None:
        self.chars += n
        self.calls += 1


SCAN_WORK = ScanWork()
"""Work counter of the strict parser (see :class:`ScanWork`)."""

# A subject/relation field: runs of ordinary characters, the escapes \\ and \, or a backslash that
# escapes nothing (literal). The alternatives start differently and every quantifier is possessive.
_FIELD = re.compile(r"(?:[^\\,]++|\\[\\,]|\\(?![\\,]))*+")
_UNESCAPE = re.compile(r"\\([\\,])")


def escape_field(text: str) -> str:
    r"""Escape a subject or relation: every backslash as ``\\\\`` and every comma as ``\\,``.

    >>> escape_field("Smith, John")
    'Smith\\, John'
    >>> escape_field("C:\\")
    'C:\\\\'
    """
    return text.replace("\\", "\\\\").replace(",", "\\,")


def _split_fields(content: str) -> tuple[str, str, str] | None:
    """The raw subject, relation and object of write content (escapes kept), or None."""
    n = len(content)
    m1 = _FIELD.match(content)
    p = m1.end()
    if p >= n:  # the field ends only at an unescaped comma or at the end
        return None
    m2 = _FIELD.match(content, p + 1)
    q = m2.end()
    if q >= n:
        return None
    SCAN_WORK.add(q)
    return m1.group(), m2.group(), content[q + 1:]


def split_triplet(content: str) -> tuple[str, str, str] | None:
    r"""Split write content on its first two unescaped commas; ``None`` unless 3 non-empty fields.

    Subject and relation are unescaped (``\\,`` -> ``,`` and ``\\\\`` -> ``\\``); the object is
    verbatim. See the module docstring for the rule.

    >>> split_triplet("Paris,is,big, old and busy")
    ('Paris', 'is', 'big, old and busy')
    >>> split_triplet(r"Smith\, John,works at,ACME")
    ('Smith, John', 'works at', 'ACME')
    >>> split_triplet(r"C:\\,is,a drive")
    ('C:\\', 'is', 'a drive')
    >>> split_triplet("only,two") is None
    True
    """
    parts = _split_fields(content)
    if parts is None:
        return None
    s, r = (_UNESCAPE.sub(r"\1", x).strip() for x in parts[:2])
    o = parts[2].strip()  # the object is kept verbatim: only subject and relation are escaped
    if not (s and r and o):
        return None
    return (s, r, o)


_TAG_TOKEN = re.compile(r"<(/?)(memory_ask|memory_write)>")
_MALFORMED = re.compile(r"<\s*+/?\s*+memory", re.IGNORECASE)
_LENIENT_OPEN = re.compile(r"<\s*+(memory[_ ]?(?:ask|write))\s*+>", re.IGNORECASE)
_LENIENT_CLOSE = re.compile(r"<\s*+/\s*+(memory[_ ]?(?:ask|write))\s*+>", re.IGNORECASE)
STRICT_PATTERNS = (_TAG_TOKEN, _MALFORMED, _FIELD, _UNESCAPE)
"""Every regex the strict parser runs (each linear in the text it scans)."""


def _make_op(role: str, content: str, problems: list[str], where: str) -> Op | None:
    content = content.strip()
    if not content:
        problems.append(f"empty <{TAGS[role]}> tag {where}")
        return None
    if "<" in content or ">" in content:
        problems.append(f"angle bracket inside <{TAGS[role]}> content {content[:40]!r} {where}")
        return None
    if role == "write":
        trip = split_triplet(content)
        if trip is None:
            n = 3 if _split_fields(content) is not None else 1 + (_FIELD.match(content).end() < len(content))
            problems.append(f"write content {content[:60]!r} {where} is not subject,relation,object "
                            f"({n} field(s) or an empty field)")
            return None
        return Op("write", content, trip)
    return Op("ask", content)


def _short(text: str) -> str:
    short = " ".join(text[:120].split())
    return repr(short if len(short) <= 40 and len(text) <= 120 else short[:37] + "...")


def _parse_strict(text: str, role: str | None) -> Parsed:
    """Strict mode in one pass: tokenise every tag, then pair each opening tag (in order, from the
    end of the previous pair) with the first closing tag of its name after it. An opening tag with no
    such closing tag is no tag, as in the definition ``<(t)>(.*?)</\\1>`` applied left to right."""
    out = Parsed()
    work = SCAN_WORK
    tokens = list(_TAG_TOKEN.finditer(text))
    work.add(len(text))
    closes: dict[str, list[int]] = {"memory_ask": [], "memory_write": []}
    for k, t in enumerate(tokens):
        if t.group(1):
            closes[t.group(2)].append(k)
    nxt = {"memory_ask": 0, "memory_write": 0}  # next candidate closing tag per name (only moves forward)
    pos = 0
    i = 0
    for k, t in enumerate(tokens):
        if t.group(1) or t.start() < pos:
            continue
        name = t.group(2)
        lst, j = closes[name], nxt[name]
        start = j
        while j < len(lst) and lst[j] < k:
            j += 1
        work.add(j - start)  # closing tags stepped over (each at most once per parse)
        nxt[name] = j
        if j == len(lst):
            continue
        close = tokens[lst[j]]
        gap = text[pos:t.start()]
        work.add(len(gap))
        if gap.strip():
            out.problems.append(f"text outside tags: {_short(gap)}")
        pos = close.end()
        content = text[t.end():close.start()]
        work.add(len(content))
        tag_role = _TAG_TO_ROLE[name]
        i += 1
        if role is not None and tag_role != role:
            out.problems.append(f"<{name}> tag #{i} in a {role} output")
            continue
        op = _make_op(tag_role, content, out.problems, f"(tag #{i})")
        if op is not None:
            out.ops.append(op)
    tail = text[pos:]
    work.add(len(tail))
    if tail.strip():
        if _MALFORMED.search(tail):
            out.problems.append(f"malformed or unclosed tag: {_short(tail)}")
        else:
            out.problems.append(f"text outside tags: {_short(tail)}")
    return out


def _parse_lenient(text: str, role: str | None) -> Parsed:
    out = Parsed()
    opens = list(_LENIENT_OPEN.finditer(text))
    for i, m in enumerate(opens):
        tag_role = "ask" if "ask" in m.group(1).lower() else "write"
        end_limit = opens[i + 1].start() if i + 1 < len(opens) else len(text)
        close = _LENIENT_CLOSE.search(text, m.end(), end_limit)
        content = text[m.end():close.start() if close else end_limit]
        if not close:
            # An unclosed tag ends at the next opening tag, or the end of the line/text.
            content = content.split("\n")[0] if i + 1 == len(opens) else content
        if role is not None and tag_role != role:
            out.problems.append(f"dropped a {tag_role} tag in a {role} output")
            continue
        content = _unquote(content)
        op = _make_op(tag_role, content, out.problems, f"(tag #{i + 1})")
        if op is not None and op.triplet is not None:
            fields = tuple(_unquote(f) for f in op.triplet)
            if fields != op.triplet and all(fields):
                op = Op("write", f"{escape_field(fields[0])},{escape_field(fields[1])},{fields[2]}", fields)
        if op is not None:
            out.ops.append(op)
    return out


def _unquote(text: str) -> str:
    """``text`` stripped, without the quotes that wrap all of it (the same mark at both ends and nowhere
    between, repeated): ``'"Old Tom"'`` -> ``Old Tom``; the quotes of a quoted word inside (``Where is "Old
    Tom"``, ``"Bob", likes, "jazz"`` as a whole) stay."""
    text = text.strip()
    while len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'`" and text[0] not in text[1:-1]:
        text = text[1:-1].strip()
    return text


def parse(text: object, role: str | None = None, mode: str = "strict") -> Parsed:
    """Parse model output into operations and problems; never raises.

    Parameters
    ----------
    text : str
        The model's output (anything else is reported as a problem).
    role : {"ask", "write", None}
        When given, tags of the other role are problems (strict) or dropped (lenient).
    mode : {"strict", "lenient"}

    Examples
    --------
    >>> p = parse("<memory_write>Blorps,eat,frozen lemons</memory_write>", role="write")
    >>> p.ok, p.triplets
    (True, [('Blorps', 'eat', 'frozen lemons')])
    >>> parse("", role="ask").ok
    True
    >>> parse("Sure! <memory_ask>blorp diet</memory_ask>", role="ask").ok
    False
    >>> parse("Sure! <MEMORY_ASK>blorp diet", role="ask", mode="lenient").asks
    ['blorp diet']
    """
    if mode not in ("strict", "lenient"):
        return Parsed(problems=[f"unknown parse mode {mode!r}: use 'strict' or 'lenient'"])
    if role is not None and role not in ROLES:
        return Parsed(problems=[f"unknown role {role!r}: use 'ask' or 'write'"])
    if not isinstance(text, str):
        return Parsed(problems=[f"output is {type(text).__name__}, not text"])
    try:
        return _parse_strict(text, role) if mode == "strict" else _parse_lenient(text, role)
    except Exception as exc:  # the contract is to never raise; report instead
        return Parsed(problems=[f"parser error {type(exc).__name__}: {exc}"])


def serialize(ops: Iterable[Op]) -> str:
    """Protocol text for ``ops`` (no separator between tags, as in the seed's datasets)."""
    return "".join(op.to_text() for op in ops)


def asks_to_text(queries: Sequence[str]) -> str:
    """``["a", "b"]`` -> ``<memory_ask>a</memory_ask><memory_ask>b</memory_ask>``."""
    return serialize(Op("ask", " ".join(q.split())) for q in queries)


def writes_to_text(triplets: Sequence[Sequence[str]]) -> str:
    """Triplets -> write tags, escaping backslashes and commas in subject and relation.

    Whitespace inside a field is collapsed. A triplet that could not be parsed back (not three
    fields, an empty field, an angle bracket) raises ``ValueError``.

    >>> t = writes_to_text([("Smith, John", "likes", "tea, hot")])
    >>> t
    '<memory_write>Smith\\\\, John,likes,tea, hot</memory_write>'
    >>> parse(t, role="write").triplets
    [('Smith, John', 'likes', 'tea, hot')]
    """
    ops = []
    for t in triplets:
        if isinstance(t, str) or len(t) != 3:
            raise ValueError(f"a triplet has 3 fields (subject, relation, object), got {t!r:.80}")
        s, r, o = (" ".join(str(x).split()) for x in t)
        if not (s and r and o):
            raise ValueError(f"triplet {tuple(t)!r:.80} has an empty field")
        if any("<" in x or ">" in x for x in (s, r, o)):
            raise ValueError(f"triplet {tuple(t)!r:.80} holds an angle bracket, which the protocol cannot carry")
        ops.append(Op("write", f"{escape_field(s)},{escape_field(r)},{o}", (s, r, o)))
    return serialize(ops)


_ARTICLES = re.compile(r"\b(a|an|the)\b")
# typographic quotes, apostrophes and dashes count as the ASCII punctuation they stand for ("don’t" is "don't")
_TYPOGRAPHIC = "\u2018\u2019\u201a\u201b\u2032\u201c\u201d\u201e\u201f\u2033\u00ab\u00bb\u2010\u2011\u2012\u2013\u2014\u2015\u2212\u2026"
_PUNCT = str.maketrans({c: " " for c in string.punctuation + _TYPOGRAPHIC})


def normalize_text(s: str) -> str:
    """Lower case, punctuation (ASCII and typographic) and the articles a/an/the removed, whitespace collapsed.

    >>> normalize_text("The Blorps eat  frozen-lemons!")
    'blorps eat frozen lemons'
    >>> normalize_text("I don\u2019t know \u2013 O\u2019Brien")
    'i don t know o brien'
    """
    s = str(s).lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", s).split())


# a number's own punctuation: a thousands comma ("1,380") is dropped, a decimal point, a time's colon, a date's or
# a range's hyphen and a fraction's slash ("3.5", "10:30", "2024-01-18", "10-15", "3/15") kept, so that no part of
# a number matches as a number of its own
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_IN_NUMBER = re.compile(r"(?<=\d)([.:/-])(?=\d)")
_KEEP = {".": "\x00", ":": "\x01", "/": "\x02", "-": "\x03"}
_SIGN = re.compile(r"(?<![\w.:/-])[-\u2212](?=\d)")  # a minus sign opening a number: "-5" is not "5"


def normalize_answer(s: str) -> str:
    """:func:`normalize_text` for scoring answers, numbers kept whole.

    The scorers (the game's, the reader's metrics, the rewards) compare aliases with responses as
    whole-word runs; there, ``"380"`` must not match ``"1,380 points"`` nor ``"5"`` match ``"3.5"``.
    A comma between a digit and a group of exactly three digits is dropped (``"1,380"`` is
    ``"1380"``), a period, colon, hyphen or slash between digits is kept (``"3.5"``, ``"10:30"``,
    ``"2024-01-18"``, ``"10-15"``, ``"3/15"``: "18" is no answer found in a date), and so is a minus sign
    that opens a number (``"-5 degrees"`` is not ``"5 degrees"``); everything else is :func:`normalize_text`.

    >>> normalize_answer("He scored 1,380 points at 10:30, i.e. 3.5 a minute.")
    'he scored 1380 points at 10:30 i e 3.5 minute'
    >>> normalize_answer("Rooms 1,2 and 3, as of 2024-01-18: 10-15 six-sided dice.")
    'rooms 1 2 and 3 as of 2024-01-18 10-15 six sided dice'
    >>> normalize_answer("It was -5 degrees (\u22123 at night), a well-known -- cold spell.")
    'it was -5 degrees -3 at night well known cold spell'
    """
    s = _SIGN.sub(_KEEP["-"], _IN_NUMBER.sub(lambda m: _KEEP[m.group(1)], _THOUSANDS.sub("", str(s))))
    s = normalize_text(s)
    for char, mark in _KEEP.items():
        s = s.replace(mark, char)
    return s


_ABSTAIN_RUNS = tuple(dict.fromkeys(normalize_answer(p) for p in ABSTAIN_PHRASES))  # ABSTAIN_PHRASES normalised


def abstains(response: str) -> bool:
    """Whether the response says the information is unknown / not in memory: one of
    :data:`ABSTAIN_PHRASES` occurs in it, after :func:`normalize_answer`, as a whole-word run.

    >>> abstains("Sorry, I do not know."), abstains("They live in Porto."), abstains("I know nothing of it")
    (True, False, True)
    """
    r = f" {normalize_answer(response)} "
    return any(f" {p} " in r for p in _ABSTAIN_RUNS)


def _runs(words: list[str], phrase: list[str]) -> list[tuple[int, int]]:
    """Word spans ``[i, j)`` where ``phrase`` occurs in ``words``."""
    n = len(phrase)
    return [(i, i + n) for i in range(len(words) - n + 1) if n and words[i:i + n] == phrase]


_NEGATORS = frozenset({"not", "never"})


def _negated(words: list[str], i: int) -> bool:
    """Whether the run starting at word ``i`` is denied by the word before it: "not figs", "never figs",
    "isn't figs" (normalised "isn t figs": any "...n't")."""
    return i > 0 and (words[i - 1] in _NEGATORS or (words[i - 1] == "t" and i > 1 and words[i - 2].endswith("n")))


def matching_alias(response: str, aliases: Sequence[str]) -> str | None:
    """The first of ``aliases`` that occurs in ``response`` as a whole-word run (the game's rule, DESIGN.md),
    after :func:`normalize_answer`, other than inside an abstention phrase; None when none does. The
    "nothing" of "I know nothing about it" does not answer "What are you carrying?", nor the "memory" of
    "not in my memory"; an alias that holds more than the phrase ("unknown soldier") still counts. Nor does
    an occurrence the word before denies ("Not figs, lemons.", "It isn't figs", "never figs"). The
    response is normalised, and its abstention phrases found, once for all the aliases.

    >>> matching_alias("They eat the frozen lemons.", ["lemon", "frozen lemons"])
    'frozen lemons'
    >>> matching_alias("I know nothing about it.", ["nothing"]), matching_alias("Nothing.", ["nothing"])
    (None, 'nothing')
    >>> matching_alias("Not figs, lemons.", ["figs"]), matching_alias("Figs, not lemons.", ["figs"])
    (None, 'figs')
    """
    words = normalize_answer(response).split()
    inside: list[tuple[int, int]] | None = None  # abstention spans, found on the first alias that occurs
    for alias in aliases:
        found = [(i, j) for i, j in _runs(words, normalize_answer(alias).split()) if not _negated(words, i)]
        if not found:
            continue
        if inside is None:
            inside = [span for p in _ABSTAIN_RUNS for span in _runs(words, p.split())]
        if any(not any(s <= i and j <= e for s, e in inside) for i, j in found):
            return alias
    return None


# words that neither answer nor abstain: a reply's politeness and glue ("sorry", "that"), beside the stopwords
_FILLER = frozenset({"sorry", "unfortunately", "afraid", "well", "hmm", "answer", "yes", "no", "ok", "okay", "sure"})


@dataclass(frozen=True)
class AnswerForm:
    """How a reply answers: the alias it names (:func:`matching_alias`'s rule), whether it abstains outside
    that alias (an abstention phrase inside the alias, "Unknown Pleasures", is the answer), and the content
    words it says besides both (stopwords and fillers left out): a guess beside an abstention, or other
    candidates beside the answer."""

    alias: str | None
    abstains: bool
    extra: tuple[str, ...]

    def strict(self, n_alias_words: int = 1, slack: int = 2) -> bool | None:
        """Whether the reply commits: True for one answer and nothing else (at most ``max(slack,
        n_alias_words)`` other content words, "They eat frozen lemons"), False for a hedge (an answer or a guess
        beside an abstention) or a list of candidates, None for a pure abstention."""
        if self.abstains and not self.extra and self.alias is None:
            return None
        if self.abstains:
            return False
        return len(self.extra) <= max(slack, n_alias_words)


def answer_form(response: str, aliases: Sequence[str] = (), question: str | None = None) -> AnswerForm:
    """The :class:`AnswerForm` of ``response`` for ``aliases`` (empty: a question nothing answers); words of
    ``question`` are not counted as extra ("I don't know where Mina lives" abstains, and guesses nothing).

    >>> answer_form("Not sure, figs?", ["figs"]).strict(), answer_form("Frozen lemons.", ["frozen lemons"]).strict()
    (False, True)
    >>> answer_form(ABSTAIN_ANSWER).strict(), answer_form("Unknown Pleasures", ["Unknown Pleasures"]).abstains
    (None, False)
    >>> answer_form("plums, lemons, caves, figs, dates", ["figs"]).strict(), answer_form("Not sure, figs?").strict()
    (False, False)
    """
    from .graph.lexical import stopword_set

    words = normalize_answer(response).split()
    absts = [span for p in _ABSTAIN_RUNS for span in _runs(words, p.split())]
    alias, spans = None, []
    for a in aliases:
        found = [(i, j) for i, j in _runs(words, normalize_answer(a).split())
                 if not any(s <= i and j <= e for s, e in absts) and not _negated(words, i)]
        if found:
            alias, spans = a, found
            break
    outside = [(s, e) for s, e in absts if not any(i <= s and e <= j for i, j in spans)]
    covered = {k for s, e in spans + outside for k in range(s, e)}
    stop = stopword_set("en_plus") | _FILLER | frozenset(normalize_answer(question or "").split())
    extra = tuple(w for k, w in enumerate(words) if k not in covered and w not in stop)
    return AnswerForm(alias, bool(outside), extra)


def alias_in(response: str, alias: str) -> bool:
    """Whether ``alias`` answers ``response`` by :func:`matching_alias`'s rule.

    >>> alias_in("They eat the frozen lemons.", "frozen lemons"), alias_in("category", "cat")
    (True, False)
    >>> alias_in("1,380 points", "380"), alias_in("1,380 points", "1,380"), alias_in("1380", "1,380")
    (False, True, True)
    >>> alias_in("I know nothing about it.", "nothing"), alias_in("Nothing.", "nothing")
    (False, True)
    >>> alias_in("The unknown soldier.", "unknown soldier")
    True
    """
    return matching_alias(response, [alias]) is not None


def normalize_triplet(t: Sequence[str]) -> tuple[str, str, str]:
    """Each field through :func:`normalize_text` (for exact-triplet matching)."""
    return tuple(normalize_text(x) for x in t)  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------------
# GBNF grammars (llama.cpp constrained decoding).
# Every character for which str.isspace() is true, as a GBNF character-class body: a field may not
# start with one (the parser strips fields, and a blank field is a strict-mode problem).
_GBNF_SPACE = ("\\t\\n\\x0B\\x0C\\r\\x1C-\\x20\\x85\\xA0\\u1680\\u2000-\\u200A\\u2028\\u2029"
               "\\u202F\\u205F\\u3000")


def grammar(role: str, *, min_ops: int = 0, max_ops: int = 4, max_field_chars: int = 40,
            max_object_chars: int = 64) -> str:
    """A GBNF grammar for ``role`` whose outputs always end and always parse strictly.

    Bounded everywhere: a small model can loop inside an unbounded tag (``blue,blue,blue,...``)
    until ``max_new_tokens`` cuts it, leaving an unclosed tag. So the number of tags and every
    field's length are capped, every field starts with a non-space character (the strict parser
    rejects blank fields), and ``min_ops`` operations can be required.
    Every string it accepts parses under ``protocol.parse(text, role, "strict")`` with no problem.

    Parameters
    ----------
    role : {"ask", "write"}
    min_ops, max_ops : int
        Number of tags (``0 <= min_ops <= max_ops``, ``max_ops >= 1``).
    max_field_chars : int
        Longest subject / relation / ask query, in characters.
    max_object_chars : int
        Longest object, in characters.
    """
    if role not in ("ask", "write"):
        raise ValueError(f"role must be 'ask' or 'write', got {role!r}")
    if not (0 <= min_ops <= max_ops and max_ops >= 1):
        raise ValueError(f"need 0 <= min_ops <= max_ops and max_ops >= 1, got {min_ops}, {max_ops}")
    if max_field_chars < 1 or max_object_chars < 1:
        raise ValueError("max_field_chars and max_object_chars must be >= 1")
    expr = ""
    for i in range(max_ops, 0, -1):
        inner = f"op {expr}".strip()
        expr = f"({inner})" if i <= min_ops else f"({inner})?"
    lines = [f"root ::= {expr}"]
    if role == "ask":
        lines += [
            'op ::= "<memory_ask>" qstart qchar{0,%d} "</memory_ask>"' % (max_field_chars - 1),
            f"qstart ::= [^<>{_GBNF_SPACE}]",
            "qchar ::= [^<>\\n]",
        ]
    else:
        lines += [
            'op ::= "<memory_write>" field "," field "," obj "</memory_write>"',
            "field ::= fstart fchar{0,%d}" % (max_field_chars - 1),
            f'fstart ::= [^,<>\\\\{_GBNF_SPACE}] | "\\\\," | "\\\\\\\\"',
            'fchar ::= [^,<>\\n\\\\] | "\\\\," | "\\\\\\\\"',
            "obj ::= ostart ochar{0,%d}" % (max_object_chars - 1),
            f"ostart ::= [^<>{_GBNF_SPACE}]",
            "ochar ::= [^<>\\n]",
        ]
    return "\n".join(lines) + "\n"


GRAMMARS: dict[str, str] = {role: grammar(role, max_ops=8) for role in ROLES}
"""Default GBNF grammar per role (up to 8 tags, bounded fields), for llama.cpp's constrained decoding."""


# --------------------------------------------------------------------------------------------------
# Prompt templates: every role's system prompt and few-shot examples live here, nowhere else.
SYSTEM_PROMPTS: dict[str, str] = {
    "write": (
        "You store facts in a memory. Rewrite each fact stated in the input as "
        "<memory_write>subject,relation,object</memory_write>, one tag per fact, and output nothing "
        "else. Questions, greetings and gibberish store nothing: output nothing for them."
    ),
    "ask": (
        "You look things up in a memory. For each thing the input asks about, output "
        "<memory_ask>short search query</memory_ask>, one tag per query, and nothing else. "
        "If the input asks nothing, output nothing."
    ),
    "answer": (
        "Answer the question in a few words, using only the memory facts given. "
        f"If the facts do not contain the answer, reply exactly: {ABSTAIN_ANSWER}"
    ),
    "router": (
        "Decide what to do with the input. Reply with one word: 'store' if it states facts to "
        "remember, 'answer' if it asks a question."
    ),
}

# A trained model's prompt: no few-shot block and a short system prompt (the role is learned, not
# explained), so a training example and every later call cost few tokens. Which prompt a model was
# trained with is recorded in its meta.json (see mags_lib.roles); the agent uses exactly that prompt.
TRAINED_SYSTEM_PROMPTS: dict[str, str] = {
    "write": "Store the facts of the input as <memory_write>subject,relation,object</memory_write> tags.",
    "ask": "Turn what the input asks into <memory_ask>search query</memory_ask> tags.",
    "answer": "Answer the question in a few words from the memory, or say it is not in memory.",
}

FEW_SHOT: dict[str, list[tuple[str, str]]] = {
    "write": [
        ("Trelms are green lizards that live in salt marshes.",
         "<memory_write>Trelms,are,green lizards</memory_write>"
         "<memory_write>Trelms,live in,salt marshes</memory_write>"),
        ("My sister Odalie works as a glassblower in Vennick.",
         "<memory_write>Odalie,is sister of,me</memory_write>"
         "<memory_write>Odalie,works as,glassblower</memory_write>"
         "<memory_write>Odalie,works in,Vennick</memory_write>"),
        ("What time does the market open?", ""),
        ("Update: the Grolt festival moved from May to October.",
         "<memory_write>Grolt festival,takes place in,October</memory_write>"),
    ],
    "ask": [
        ("What do trelms eat?", "<memory_ask>trelms diet</memory_ask>"),
        ("Where does Odalie work, and what is her job?",
         "<memory_ask>Odalie workplace</memory_ask><memory_ask>Odalie job</memory_ask>"),
        ("Trelms are green lizards.", ""),
        ("Who leads the creatures that live in the salt marshes?",
         "<memory_ask>creatures living in salt marshes</memory_ask>"
         "<memory_ask>leader of those creatures</memory_ask>"),
    ],
    "router": [
        ("Blorps eat frozen lemons.", "store"),
        ("What do blorps eat?", "answer"),
    ],
    "answer": [],
}


def format_item(text: str, *, time: str | None = None, current: bool | None = None,
                speaker: str | None = None, until: str | None = None) -> str:
    """One recalled memory item as a line of the answer prompt's memory block.

    The date comes first in parentheses when known; ``current=False`` marks a superseded fact
    (``no longer true``, and ``since <until>`` when the date it was superseded is known);
    ``current=None`` or ``True`` adds no marker (a valid fact is the default);
    ``speaker`` prefixes an episode with who said it. Whitespace in every part is collapsed, so an
    item is always one line. The answer model is trained on exactly this format
    (:mod:`mags_lib.data.answer`), so the agent must render recalled items with it.

    Parameters
    ----------
    text : str
        A fact (``"subject relation object"``) or an episode (the raw sentence).
    time : str, optional
        When it was observed, verbatim (``"2023-05-08"``, ``"8 May 2023"``, ...).
    current : bool, optional
        ``False`` for a fact that was superseded.
    speaker : str, optional
        Who said it (episodes).
    until : str, optional
        When a superseded item stopped being true (ignored unless ``current`` is False).

    Examples
    --------
    >>> format_item("Caroline moved to Boston", time="2023-05-08")
    '(2023-05-08) Caroline moved to Boston'
    >>> format_item("Caroline lives in Denver", time="2023-04-01", current=False)
    '(2023-04-01, no longer true) Caroline lives in Denver'
    >>> format_item("Caroline lives in Denver", time="2023-04-01", current=False, until="2023-05-08")
    '(2023-04-01, no longer true since 2023-05-08) Caroline lives in Denver'
    >>> format_item("I work as a baker.", speaker="Odalie")
    'Odalie: I work as a baker.'
    >>> format_item("blorps  eat\\nlemons", current=False)
    '(no longer true) blorps eat lemons'
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"a memory item needs non-empty text, got {text!r}")
    if current not in (None, True, False):
        raise TypeError(f"current must be True, False or None, got {current!r}")
    line = " ".join(text.split())
    if speaker is not None and str(speaker).strip():
        line = f"{' '.join(str(speaker).split())}: {line}"
    tags = []
    if time is not None and str(time).strip():
        tags.append(" ".join(str(time).split()))
    if current is False:
        since = " ".join(str(until).split()) if until is not None else ""
        tags.append(f"no longer true since {since}" if since else "no longer true")
    return f"({', '.join(tags)}) {line}" if tags else line


def format_facts(facts: Sequence) -> str:
    """The memory block of the answer prompt: one numbered item a line, or a 'no facts' line.

    Each entry is a line of text (used as is, whitespace collapsed) or a mapping with the keywords
    of :func:`format_item` (``text``, ``time``, ``current``, ``speaker``, ``until``).

    >>> print(format_facts(["blorps eat lemons", {"text": "blorps eat figs", "time": "2023-01-02",
    ...                                           "current": False}]))
    Memory:
    1. blorps eat lemons
    2. (2023-01-02, no longer true) blorps eat figs
    >>> format_facts([])
    'Memory: (no relevant facts)'
    """
    if not facts:
        return "Memory: (no relevant facts)"
    lines = []
    for f in facts:
        if isinstance(f, str):
            lines.append(" ".join(f.split()))
        elif isinstance(f, Mapping):
            lines.append(format_item(f.get("text", ""), time=f.get("time"), current=f.get("current"),
                                     speaker=f.get("speaker"), until=f.get("until")))
        else:
            raise TypeError(f"a memory item is a str or a mapping with 'text', got {type(f).__name__}")
    return "Memory:\n" + "\n".join(f"{i + 1}. {line}" for i, line in enumerate(lines))


def build_messages(role: str, text: str, *, few_shot: int = 0, facts: Sequence | None = None,
                   system: str | None = None) -> list[dict[str, str]]:
    """Chat messages for ``role`` in ``("ask", "write", "answer", "router")``.

    Parameters
    ----------
    role : str
    text : str
        The input (for ``answer``: the question).
    few_shot : int
        How many of ``FEW_SHOT[role]`` to prepend as user/assistant turns (clipped to what exists).
    facts : list of str or mappings, optional
        Recalled items, for the ``answer`` role only (see :func:`format_facts`).
    system : str, optional
        The system prompt (default ``SYSTEM_PROMPTS[role]``; a trained model's own prompt is
        ``TRAINED_SYSTEM_PROMPTS[role]``, see :mod:`mags_lib.roles`).

    Examples
    --------
    >>> [m["role"] for m in build_messages("write", "Blorps eat lemons.", few_shot=1)]
    ['system', 'user', 'assistant', 'user']
    """
    if role not in SYSTEM_PROMPTS:
        raise ValueError(f"unknown role {role!r}: use one of {sorted(SYSTEM_PROMPTS)}")
    if few_shot < 0:
        raise ValueError(f"few_shot must be >= 0, got {few_shot}")
    msgs = [{"role": "system", "content": SYSTEM_PROMPTS[role] if system is None else system}]
    for inp, out in FEW_SHOT[role][:few_shot]:
        msgs.append({"role": "user", "content": inp})
        msgs.append({"role": "assistant", "content": out})
    if role == "answer":
        content = f"{format_facts(list(facts or []))}\n\nQuestion: {text}"
    else:
        if facts:
            raise ValueError("facts are only used by the 'answer' role")
        content = text
    msgs.append({"role": "user", "content": content})
    return msgs

