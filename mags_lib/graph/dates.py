"""Relative dates ("yesterday", "last Saturday", "two weeks ago") resolved against the date they were said.

A conversation says "I went to a support group yesterday"; a question asks "When did she go?" and
expects "7 May 2023". :func:`resolve_relative_dates` finds the relative date expressions of a text and
resolves each against the observation's date (its ``time``, an ISO string), with the granularity the
phrase has -- "last year" is a year, "last month" a month, "last week" a week, not a day:

===========================================  ============  ==============================================
phrase                                       granularity   resolved (said on Monday 8 May 2023)
===========================================  ============  ==============================================
today, tonight, this morning/afternoon/...   day           2023-05-08
yesterday, last night                        day           2023-05-07
(the) day before yesterday                   day           2023-05-06
tomorrow, the day after tomorrow             day           2023-05-09, 2023-05-10
last / next <weekday>                        day           the nearest one strictly before / after
this <weekday>                               day           that weekday of the current week (Mon-Sun)
last / this / next week                      week          the previous / current / next Mon-Sun week
last / this / next weekend                   weekend       the Saturday-Sunday of that week
last / this / next month, year               month, year   2023-04 / 2023-05 / 2023-06, 2022 / ...
N days ago, in N days                        day           2023-05-08 -/+ N days
N weeks ago, in N weeks                      week          the Mon-Sun week holding that day
N weekends / months / years ago              as the unit   N weekends / calendar months / years back
===========================================  ============  ==============================================

"this past week/weekend/<weekday>" is "last ...", "this coming <weekday>" is "next <weekday>".
Weeks are calendar weeks (Monday to Sunday, ISO 8601), so "last week" and "two weeks ago" are
consistent: the week before the current one, and the week before that. "last <weekday>" is the
nearest such day before the reference (said on Saturday 15 July 2023, "last Friday" is 14 July, the
day LoCoMo's annotators give as "the Friday before 15 July 2023"), not the Friday of the previous
week. N is digits or a number word up to twenty, "a"/"an" (1), "a couple (of)" (2) and "a few" (3):
the last two are vague, so their resolution is marked ``approximate`` (shown as "about ..."), as is
a phrase after a hedge ("about five years ago").

What is **not** resolved (each is a rule below, tested in ``tests/test_relative_dates.py``):

* text without an ISO reference date (``None`` or a time kept as written, "last summer"): nothing;
* a phrase inside a word ("todays", "yesterdays") -- matches are whole words;
* "last"/"next" alone ("the last time"), and a bare weekday ("Saturday Night Live", "on Friday":
  past or future is the tense's call, not the word's);
* a phrase after "the" or a possessive ("the last week", "for the last month", "my last year of
  college", "his last Friday"): a duration or a final item, not a calendar date;
* a phrase followed by "of" ("last week of May", "last night of the trip") or by "in" and a month ("last
  weekend in May");
* a count that is the tail of a longer number ("twenty-one years ago", "2.5 years ago"): numbers above twenty
  are not read, and a part of one is not read either;
* a day phrase after "from" ("a week from today"): an offset from that day;
* "last/next <weekday>" followed by a capitalised word other than "I" ("last Sunday Times"): a name;
* a phrase directly followed by the absolute date it stands for ("last Friday (14 July)",
  "yesterday, 7 May 2023", "last year, 2022", "last month (June 2023)"): the text already says it;
* "in N days/weeks" in a negated clause ("haven't talked in a few days", "wasn't built in a day")
  or after "first time": a duration, not a future date.

Each resolution is a :class:`DateSpan`: where the phrase is (``start``, ``end``), what it says, its
``granularity``, its first and last day, its ISO ``value`` ("2023-05-07", "2023-04", "2022", or an
ISO 8601 interval "2023-05-01/2023-05-07" for a week or weekend) and a ``label`` in words ("7 May
2023", "April 2023", "2022", "1 to 7 May 2023") -- the form LoCoMo's answers and the write model's
dates take, so that a resolved date is typed like any other date
(:func:`mags_lib.graph.engram.typed_signature`: never merged with another date by similarity).
:func:`annotate_relative_dates` writes the label next to each phrase ("yesterday [7 May 2023]"),
:func:`resolve_date_field` replaces a triplet field that is only a relative date.

>>> [(s.phrase, s.value, s.granularity) for s in resolve_relative_dates(
...     "I went to a support group yesterday and ran a race last Saturday.", "2023-05-08T13:56")]
[('yesterday', '2023-05-07', 'day'), ('last Saturday', '2023-05-06', 'day')]
>>> annotate_relative_dates("We're thinking about going camping next month.", "2023-05-25")
"We're thinking about going camping next month [June 2023]."
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass

__all__ = ["GRANULARITIES", "MONTH_NAMES", "DateSpan", "annotate_relative_dates", "day_label",
           "excluded_relative_dates", "reference_date", "resolve_date_field", "resolve_relative_dates"]

GRANULARITIES = ("day", "weekend", "week", "month", "year")
"""What a resolved phrase names, finest first."""

MONTH_NAMES = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
               "October", "November", "December")
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
# abbreviations only capitalised: "sat", "sun", "wed" and "mon" are also words ("I last sat down")
_WEEKDAY_ABBR = {"Mon": 0, "Tue": 1, "Tues": 1, "Wed": 2, "Thu": 3, "Thur": 3, "Thurs": 3, "Fri": 4, "Sat": 5,
                 "Sun": 6}
_NUMBER_WORDS = {w: i for i, w in enumerate(
    ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
     "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"])}
_NUMBER = (r"\d{1,3}|" + "|".join(sorted(_NUMBER_WORDS, key=len, reverse=True))
           + r"|an?\s+couple(?:\s+of)?|a\s+few|an?")
_WEEKDAY = r"(?:" + "|".join(_WEEKDAYS) + r")|(?-i:" + "|".join(sorted(_WEEKDAY_ABBR, key=len, reverse=True)) + r")"

_PATTERN = re.compile(
    r"\b(?:"
    r"(?P<day_rel>(?:the\s+)?day\s+before\s+yesterday|(?:the\s+)?day\s+after\s+tomorrow|yesterday|today|tonight"
    r"|tomorrow"
    r"|last\s+night|this\s+(?:morning|afternoon|evening))"
    rf"|(?P<wd_rel>last|next|this\s+past|this\s+coming|this)\s+(?P<wd>{_WEEKDAY})"
    r"|(?P<unit_rel>last|next|this\s+past|this)\s+(?P<unit>week|weekend|month|year)"
    rf"|(?P<ago_n>{_NUMBER})\s+(?P<ago_unit>day|week|weekend|month|year)s?\s+ago"
    rf"|in\s+(?P<in_n>{_NUMBER})\s+(?P<in_unit>day|week)s?"
    r")\b",
    re.IGNORECASE)

_DAY_OFFSETS = {"the day before yesterday": -2, "yesterday": -1, "last night": -1, "today": 0, "tonight": 0,
                "this morning": 0, "this afternoon": 0, "this evening": 0, "tomorrow": 1,
                "the day after tomorrow": 2}
# the end of a longer number a count may be the tail of: "twenty-one years ago", "2.5 years ago", "1,000 days"
_NUMBER_GOES_ON = re.compile(r"(?:\d[.,]|\b(?:twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|thousand)"
                             r"[\s-]+)$", re.IGNORECASE)
_DETERMINERS = {"the", "my", "your", "his", "its", "our", "their", "whose"}  # not "her": "I saw her last week"
_HEDGES = re.compile(r"\b(?:about|around|roughly|nearly|almost|approximately)\s+$", re.IGNORECASE)
_NEGATED_CLAUSE = re.compile(r"(?:n't|n’t|\bnot\b|\bnever\b|\bno\b|\bfirst\s+time\b)[^.,;:!?()\-–—]*$",
                             re.IGNORECASE)
_MONTH_RE = (r"(?:" + "|".join(m.lower() for m in MONTH_NAMES)
             + r"|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec)\b\.?")
_ABSOLUTE_AFTER = re.compile(
    r"\s*[,(\[:–—-]?\s*(?:on\s+|in\s+)?(?:\d{4}-\d{2}(?:-\d{2})?\b|\d{1,2}(?:st|nd|rd|th)?\s+" + _MONTH_RE
    + r"|" + _MONTH_RE + r"\s+(?:\d{1,2}|(?:19|20)\d{2})\b|(?:19|20)\d{2}\b)", re.IGNORECASE)


def day_label(day: _dt.date) -> str:
    """A day in words, as LoCoMo's answers and the resolved dates write it.

    >>> day_label(_dt.date(2023, 5, 8))
    '8 May 2023'
    """
    return f"{day.day} {MONTH_NAMES[day.month - 1]} {day.year}"


@dataclass(frozen=True)
class DateSpan:
    """One relative date expression of a text, resolved against a reference date.

    Attributes
    ----------
    start, end : int
        Where the phrase is: ``text[start:end] == phrase``.
    phrase : str
        The expression as written ("last Saturday").
    kind : str
        Its kind, for counting: ``"yesterday"``, ``"last <weekday>"``, ``"next month"``, ``"<n> weeks
        ago"``, ``"in <n> days"``, ...
    granularity : str
        One of :data:`GRANULARITIES`.
    first, last : datetime.date
        The first and last day it names (equal for a day).
    approximate : bool
        A vague count ("a few days ago", "a couple of weeks ago") or a hedge ("about a year ago").
    """

    start: int
    end: int
    phrase: str
    kind: str
    granularity: str
    first: _dt.date
    last: _dt.date
    approximate: bool = False

    @property
    def value(self) -> str:
        """ISO 8601: ``2023-05-07`` (day), ``2023-04`` (month), ``2022`` (year), ``2023-05-01/2023-05-07``
        (week or weekend: an interval)."""
        if self.granularity == "day":
            return self.first.isoformat()
        if self.granularity == "month":
            return self.first.isoformat()[:7]
        if self.granularity == "year":
            return str(self.first.year)
        return f"{self.first.isoformat()}/{self.last.isoformat()}"

    @property
    def label(self) -> str:
        """The date in words: ``7 May 2023``, ``April 2023``, ``2022``, ``1 to 7 May 2023``,
        ``29 May to 4 June 2023``; ``about ...`` when approximate."""
        a, b = self.first, self.last
        if self.granularity == "day":
            text = day_label(a)
        elif self.granularity == "month":
            text = f"{MONTH_NAMES[a.month - 1]} {a.year}"
        elif self.granularity == "year":
            text = str(a.year)
        elif a.year != b.year:
            text = f"{a.day} {MONTH_NAMES[a.month - 1]} {a.year} to {b.day} {MONTH_NAMES[b.month - 1]} {b.year}"
        elif a.month != b.month:
            text = f"{a.day} {MONTH_NAMES[a.month - 1]} to {b.day} {MONTH_NAMES[b.month - 1]} {b.year}"
        else:
            text = f"{a.day} to {b.day} {MONTH_NAMES[b.month - 1]} {b.year}"
        return f"about {text}" if self.approximate else text


def reference_date(ref: object) -> _dt.date | None:
    """The date an ISO time stamp (or a ``date`` / ``datetime``) names; None for anything else.

    >>> reference_date("2023-05-08T13:56"), reference_date("last summer"), reference_date("2023-02-30")
    (datetime.date(2023, 5, 8), None, None)
    """
    if isinstance(ref, _dt.datetime):
        return ref.date()
    if isinstance(ref, _dt.date):
        return ref
    if not isinstance(ref, str) or not re.match(r"\d{4}-\d{2}-\d{2}(?:$|[T ])", ref):
        return None
    try:
        return _dt.date.fromisoformat(ref[:10])
    except ValueError:
        return None


def _count(text: str) -> tuple[int, bool]:
    """The number a count word says, and whether it is vague ("a few", "a couple of")."""
    t = " ".join(text.lower().split())
    if t.isdigit():
        return int(t), False
    if t in _NUMBER_WORDS:
        return _NUMBER_WORDS[t], False
    if "couple" in t:
        return 2, True
    if t == "a few":
        return 3, True
    return 1, False  # "a", "an"


def _weekday(text: str) -> int:
    return _WEEKDAY_ABBR[text] if text in _WEEKDAY_ABBR else _WEEKDAYS.index(text.lower())


def _add_months(year: int, month: int, n: int) -> tuple[int, int]:
    k = year * 12 + (month - 1) + n
    return k // 12, k % 12 + 1


def _month_span(year: int, month: int) -> tuple[_dt.date, _dt.date]:
    nxt = _add_months(year, month, 1)
    return _dt.date(year, month, 1), _dt.date(nxt[0], nxt[1], 1) - _dt.timedelta(days=1)


def _week(day: _dt.date) -> tuple[_dt.date, _dt.date]:
    monday = day - _dt.timedelta(days=day.weekday())
    return monday, monday + _dt.timedelta(days=6)


def _resolve(m: re.Match, ref: _dt.date) -> tuple[str, str, _dt.date, _dt.date, bool] | None:
    """(kind, granularity, first, last, approximate) of one match, or None (out of the calendar's range)."""
    g = m.groupdict()
    day = _dt.timedelta(days=1)
    try:
        if g["day_rel"]:
            key = " ".join(g["day_rel"].lower().split())
            key = "the " + key if key.startswith("day ") else key  # "Day before yesterday I ran"
            d = ref + _DAY_OFFSETS[key] * day
            kind = "this morning/afternoon/evening" if key.startswith("this ") else key
            return kind, "day", d, d, False
        if g["wd"]:
            rel = " ".join(g["wd_rel"].lower().split())
            wd = _weekday(g["wd"])
            if rel in ("last", "this past"):
                d = ref - ((ref.weekday() - wd) % 7 or 7) * day
                rel = "last"
            elif rel in ("next", "this coming"):
                d = ref + ((wd - ref.weekday()) % 7 or 7) * day
                rel = "next"
            else:  # this: that weekday of the current Monday-Sunday week
                d = _week(ref)[0] + wd * day
            return f"{rel} <weekday>", "day", d, d, False
        if g["unit"]:
            rel = " ".join(g["unit_rel"].lower().split())
            n = {"last": -1, "this past": -1, "this": 0, "next": 1}[rel]
            rel = "last" if rel == "this past" else rel
            unit = g["unit"].lower()
            return (f"{rel} {unit}",) + _unit_span(unit, ref, n) + (False,)
        if g["ago_unit"]:
            n, vague = _count(g["ago_n"])
            unit = g["ago_unit"].lower()
            if unit == "day":
                d = ref - n * day
                return "<n> days ago", "day", d, d, vague
            if unit == "week":
                return ("<n> weeks ago", "week") + _week(ref - 7 * n * day) + (vague,)
            return (f"<n> {unit}s ago",) + _unit_span(unit, ref, -n) + (vague,)
        n, vague = _count(g["in_n"])
        if g["in_unit"].lower() == "day":
            d = ref + n * day
            return "in <n> days", "day", d, d, vague
        return ("in <n> weeks", "week") + _week(ref + 7 * n * day) + (vague,)
    except (OverflowError, ValueError):  # beyond year 1..9999
        return None


def _unit_span(unit: str, ref: _dt.date, n: int) -> tuple[str, _dt.date, _dt.date]:
    """(granularity, first, last) of the ``unit`` (week, weekend, month, year) ``n`` units from ``ref``'s."""
    if unit == "week":
        return ("week",) + _week(ref + _dt.timedelta(days=7 * n))
    if unit == "weekend":
        sat = _week(ref + _dt.timedelta(days=7 * n))[0] + _dt.timedelta(days=5)
        return "weekend", sat, sat + _dt.timedelta(days=1)
    if unit == "month":
        return ("month",) + _month_span(*_add_months(ref.year, ref.month, n))
    return "year", _dt.date(ref.year + n, 1, 1), _dt.date(ref.year + n, 12, 31)


def _skipped(m: re.Match, text: str) -> bool:
    """Whether a match is not a relative date here (the exclusions of the module docstring)."""
    g = m.groupdict()
    before = text[:m.start()]
    after = text[m.end():]
    prev = re.search(r"(\w+)\W*$", before)
    prev_word = prev.group(1).lower() if prev and not re.search(r"[.!?;:]\s*$", before) else ""
    calendar = g["wd"] or g["unit"] or (g["day_rel"] and g["day_rel"].lower().startswith(("last", "this")))
    if calendar and prev_word in _DETERMINERS:
        return True  # "the last week", "my last year of college"
    if calendar and re.match(r"\s+of\b", after, re.IGNORECASE):
        return True  # "last week of May", "last night of the trip"
    if calendar and re.match(r"\s+in\s+" + _MONTH_RE, after, re.IGNORECASE):
        return True  # "last weekend in May": that month's, not the one before the reference
    if (g["ago_n"] or g["in_n"]) and _NUMBER_GOES_ON.search(before):
        return True  # "twenty-one years ago": only numbers up to twenty are read, never the tail of a longer one
    if g["day_rel"] and re.search(r"\bfrom\s+$", before, re.IGNORECASE):
        return True  # "a week from today": an offset from the day, not the day
    if g["wd"] and re.match(r"\s+(?!I\b|I['’])[A-Z]", after):
        return True  # "last Sunday Times": a name goes on
    if g["in_unit"] and _NEGATED_CLAUSE.search(before):
        return True  # "haven't talked in a few days": a duration
    return bool(_ABSOLUTE_AFTER.match(after))  # "last Friday (14 July)": already absolute


def resolve_relative_dates(text: str, ref_time: object) -> list[DateSpan]:
    """Every relative date expression of ``text``, resolved against ``ref_time``, in text order.

    Parameters
    ----------
    text : str
        Any text (an observed turn, a triplet field).
    ref_time : str, date or datetime
        When the text was said: an ISO date or time stamp (``"2023-05-08"``, ``"2023-05-08T13:56"``)
        or a ``date`` / ``datetime``. ``None`` or any other string: nothing is resolved.

    Returns
    -------
    list of DateSpan
        Non-overlapping, in order; see the module docstring for the phrases and the rules.

    Examples
    --------
    >>> [(s.phrase, s.label) for s in resolve_relative_dates(
    ...     "Last Fri I took my kids to a pottery workshop; a friend made it ten years ago.", "2023-07-15")]
    [('Last Fri', '14 July 2023'), ('ten years ago', '2013')]
    >>> [s.value for s in resolve_relative_dates("I went hiking last week", "2023-08-25")]
    ['2023-08-14/2023-08-20']
    >>> resolve_relative_dates("the last time we met, yesterday's news", None)
    []
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a string (str), got {type(text).__name__}")
    ref = reference_date(ref_time)
    if ref is None:
        return []
    out = []
    for m in _PATTERN.finditer(text):
        if _skipped(m, text):
            continue
        res = _resolve(m, ref)
        if res is None:
            continue
        kind, gran, first, last, vague = res
        hedged = bool(_HEDGES.search(text[:m.start()]))
        out.append(DateSpan(m.start(), m.end(), m.group(0), kind, gran, first, last, vague or hedged))
    return out


def excluded_relative_dates(text: str) -> list[str]:
    """The candidate phrases of ``text`` an exclusion rule of the module docstring left unresolved (for
    measuring the rules).

    >>> excluded_relative_dates("In the last year I haven't talked to him in a few days; yesterday too.")
    ['last year', 'in a few days']
    """
    return [m.group(0) for m in _PATTERN.finditer(text) if _skipped(m, text)]


def annotate_relative_dates(text: str, ref_time: object) -> str:
    """``text`` with each relative date followed by its resolution in brackets ("yesterday [7 May 2023]").

    Unchanged when nothing resolves (no ISO ``ref_time``, no relative date).

    >>> annotate_relative_dates("Last Friday I went to a council meeting.", "2023-07-15T13:00")
    'Last Friday [14 July 2023] I went to a council meeting.'
    >>> annotate_relative_dates("Last Friday I went to a council meeting.", "mid-July")
    'Last Friday I went to a council meeting.'
    """
    spans = resolve_relative_dates(text, ref_time)
    if not spans:
        return text
    parts, at = [], 0
    for s in spans:
        parts += [text[at:s.end], f" [{s.label}]"]
        at = s.end
    return "".join(parts) + text[at:]


_FIELD_PREFIX = re.compile(r"(?:(?:on|in|since|from|until|till|by|during|over|around|about|before|after)\s+)?$",
                           re.IGNORECASE)


def resolve_date_field(text: str, ref_time: object) -> str | None:
    """The resolved date for a triplet field that is only a relative date, else None.

    The field may start with a preposition ("on", "since", "in", ...), kept: ``"since last year"``
    becomes ``"since 2022"``. A field with anything else in it ("the park yesterday") is left to the
    caller (None).

    >>> resolve_date_field("yesterday", "2023-05-08"), resolve_date_field("since last year", "2023-05-08")
    ('7 May 2023', 'since 2022')
    >>> resolve_date_field("the park yesterday", "2023-05-08") is None, resolve_date_field("yesterday", None)
    (True, None)
    """
    t = text.strip()
    spans = resolve_relative_dates(t, ref_time)
    if len(spans) != 1 or t[spans[0].end:].strip(" .!,;") or not _FIELD_PREFIX.fullmatch(t[:spans[0].start]):
        return None
    return t[:spans[0].start] + spans[0].label
