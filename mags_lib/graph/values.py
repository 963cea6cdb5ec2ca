"""Validation and normalisation of values at the boundary of the memory (graph and agent).

Whatever the public API accepts must be savable as JSON afterwards, and replay to the same graph.
So every value entering :class:`~mags_lib.graph.LiquidGraph` (and :class:`mags_lib.MAGS`) goes
through one of these functions first, which either returns a plain Python value or raises a
``TypeError`` / ``ValueError`` naming the argument:

* text -> ``str`` that is valid UTF-8: a well-formed surrogate pair becomes its character and a
  lone surrogate (``"caf\\udce9"``, from ``surrogateescape`` decoding) becomes U+FFFD; bytes
  and other types are refused;
* times -> ISO 8601 strings: ``datetime.date`` / ``datetime`` (``isoformat()``), ``numpy.datetime64``,
  a date in words (LoCoMo's ``"1:56 pm on 8 May, 2023"``, see :func:`parse_session_date`), or any
  other string kept as given;
* source ids -> strings (integers, numpy integers included, are converted);
* numbers -> ``float`` / ``int`` (numpy scalars included), finite, in range;
* node ids -> the public string id (``"n3"``, ``"ep0"``), numpy integers included.
"""

from __future__ import annotations

import datetime as _dt
import math
import numbers
import re
from collections.abc import Sequence

import numpy as np

__all__ = ["chronological_order", "clean_int", "clean_source", "clean_text", "clean_time", "clean_unit",
           "earliest_time", "instant_key", "is_iso_time", "parse_session_date", "said_after", "time_order_key"]


def clean_text(text: object, name: str = "text", *, allow_empty: bool = False) -> str:
    """``text`` as valid-UTF-8 ``str`` (lone surrogates replaced by U+FFFD).

    >>> clean_text("caf\\udce9"), clean_text("\\ud83d\\ude00") == "\\U0001F600"
    ('caf\\ufffd', True)
    >>> clean_text(b"x")
    Traceback (most recent call last):
    ...
    TypeError: text must be a string (str), got bytes; decode bytes first
    """
    if not isinstance(text, str):
        hint = "; decode bytes first" if isinstance(text, (bytes, bytearray)) else ""
        raise TypeError(f"{name} must be a string (str), got {type(text).__name__}{hint}")
    text = str(text)  # numpy str_ and other subclasses become plain str
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if not allow_empty and not text.strip():
        raise ValueError(f"{name} is empty: pass a non-empty string")
    return text


def clean_time(value: object, name: str = "time") -> str | None:
    """A time stamp as an ISO 8601 string (None stays None).

    An ISO string loses the spaces around it and a space between date and time becomes ``T``
    (``"2023-05-08 13:56"``, as pandas and SQL print times), as ``isoformat()`` writes it: the memory
    compares observation times as strings, and ``" "`` sorts before ``"T"``.

    >>> clean_time(_dt.date(2023, 5, 8)), clean_time(np.datetime64("2023-05-08T10:00"))
    ('2023-05-08', '2023-05-08T10:00')
    >>> clean_time(" 2023-05-08 13:56 ")
    '2023-05-08T13:56'
    """
    if value is None:
        return None
    if isinstance(value, _dt.time):  # a time of day names no moment: it would sort among dates as text
        raise TypeError(f"{name} is a time of day without a date ({value.isoformat()}): pass a datetime "
                        f"(datetime.combine(day, {name})) or an ISO string like '2023-05-08T{value.isoformat()}'")
    if isinstance(value, _dt.date):  # datetime is a date; pandas Timestamp is a datetime
        iso = value.isoformat()
        if iso == "NaT":  # pandas' NaT is a datetime too
            raise ValueError(f"{name} is NaT (not a time)")
        return iso
    if isinstance(value, np.datetime64):
        if np.isnat(value):
            raise ValueError(f"{name} is NaT (not a time)")
        return str(np.datetime_as_string(value))
    if isinstance(value, str):
        text = clean_text(value, name, allow_empty=True)
        return parse_session_date(text) or _iso_form(text) or text
    raise TypeError(f"{name} must be a date, a datetime or an ISO string like '2023-05-08', "
                    f"got {type(value).__name__}")


_ISO_SPACE_TIME = re.compile(r"(\d{4}-\d{2}-\d{2}) +(\d{2}:\d{2}.*)")


def _iso_form(text: str) -> str | None:
    """``text`` as ISO written by ``isoformat()`` (no surrounding spaces, ``T`` between date and time) when it
    is an ISO time, else None."""
    t = text.strip()
    if not is_iso_time(t):
        return None
    m = _ISO_SPACE_TIME.fullmatch(t)
    return f"{m.group(1)}T{m.group(2)}" if m else t


def is_iso_time(value: str | None) -> bool:
    """Whether ``value`` starts with an ISO date (``YYYY-MM-DD``): such strings sort chronologically.

    >>> is_iso_time("2023-05-08T13:56"), is_iso_time("last summer"), is_iso_time(None)
    (True, False, False)
    """
    return bool(value) and _ISO_DATE.match(value) is not None


_ISO_DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}(?::\d{2}(?::\d{2}(?:\.\d{1,6})?)?)?(Z|[+-]\d{2}:?\d{2})?")


def instant_key(value: str | None) -> str | None:
    """An observation time as text that sorts by the moment it names: an ISO date and time is written in UTC
    when it has a UTC offset (or ``Z``), without the offset, and to the precision it needs (``10:00:00`` and
    ``10:00`` are one key); a date alone, and anything else, is returned as is.

    The memory compares and orders times as text, and keeps and shows them as written: ``2023-05-08T23:00-05:00``
    is four hours after ``2023-05-09T01:00+00:00`` although its text sorts first, and ``2023-05-08T10:00:00`` is
    the moment ``2023-05-08T10:00`` names although its text sorts after it. A time without an offset is taken as
    written (its zone is unknown). A date alone sorts before the times of its day: :func:`said_after` does not
    count those as later. A time the calendar cannot convert (out of range, a 25th hour) is kept as written.

    >>> instant_key("2023-05-08T23:00-05:00"), instant_key("2023-05-09T01:00Z"), instant_key("2023-05-08")
    ('2023-05-09T04:00', '2023-05-09T01:00', '2023-05-08')
    >>> instant_key("2023-05-08T10:00:00"), instant_key("2023-05-08T10:00:00.500+00:00")
    ('2023-05-08T10:00', '2023-05-08T10:00:00.500000')
    >>> instant_key("9999-12-31T23:00-05:00")  # past the calendar's end in UTC: as written
    '9999-12-31T23:00-05:00'
    """
    if not isinstance(value, str):
        return value
    m = _ISO_DATETIME.fullmatch(value)
    if m is None:
        return value
    try:
        moment = _dt.datetime.fromisoformat(value)
        if m.group(1) is not None:
            moment = moment.astimezone(_dt.timezone.utc).replace(tzinfo=None)
    except (ValueError, OverflowError):  # an offset out of range, a 25th hour, past year 9999 in UTC
        return value
    spec = "microseconds" if moment.microsecond else "seconds" if moment.second else "minutes"
    return moment.isoformat(timespec=spec)


def said_after(a: str | None, b: str | None) -> bool:
    """Whether time ``a`` is later than time ``b`` by the moments they name (:func:`instant_key`); a date alone
    is neither before nor after the times of its own day (it does not say when in the day).

    >>> said_after("2023-05-08T10:00", "2023-05-08"), said_after("2023-05-09", "2023-05-08T23:59")
    (False, True)
    >>> said_after("2023-05-08T10:00:00+00:00", "2023-05-08T10:00Z"), said_after("2023-05-08T23:00-05:00", "2023-05-09T01:00")
    (False, True)
    """
    if not a or not b:
        return False
    ka, kb = instant_key(a), instant_key(b)
    return ka > kb and not (len(kb) == 10 and ka.startswith(kb))


def earliest_time(a: str | None, b: str | None) -> str | None:
    """The earlier of two observation times (by :func:`instant_key`) when both are ISO, else the first one given.

    >>> earliest_time("2023-05-08", "2022-01-01"), earliest_time(None, "2022-01-01"), earliest_time("May", "2022")
    ('2022-01-01', '2022-01-01', 'May')
    >>> earliest_time("2023-05-09T01:00+00:00", "2023-05-08T23:00-05:00")
    '2023-05-09T01:00+00:00'
    """
    if is_iso_time(a) and is_iso_time(b):
        return min(a, b, key=instant_key)
    return a if a is not None else b


def time_order_key(value: str | None) -> str | None:
    """An item's time as sortable ISO text: ISO as is (in UTC when it has an offset: :func:`instant_key`), a date
    in words converted (:func:`parse_session_date`); None for no time or one that names no date.

    >>> time_order_key("2023-05-08T13:56"), time_order_key("1:56 pm on 8 May, 2023"), time_order_key("8 May 2023")
    ('2023-05-08T13:56', '2023-05-08T13:56', '2023-05-08')
    >>> time_order_key("2023-05-08 23:00-05:00")  # the space form, as pandas prints times, in UTC too
    '2023-05-09T04:00'
    >>> time_order_key("last summer"), time_order_key(None)
    (None, None)
    """
    if not isinstance(value, str) or not value.strip():
        return None
    value = " ".join(value.split())
    return instant_key(_iso_form(value) or value) if is_iso_time(value) else parse_session_date(value)


def chronological_order(times: Sequence[str | None]) -> list[int]:
    """The order that shows dated items oldest first, each undated item staying where it was.

    The memory block the reader sees (:meth:`mags_lib.MAGS.ask`, the answer data of
    :mod:`mags_lib.data.answer`) lists recalled items so: the dated ones take the places the dated ones
    held, in time order (ties keep their given order), so the later of two dated values is always the
    later line. ``times`` as :func:`time_order_key` reads them; returns indices into ``times``.

    >>> chronological_order(["2023-05-08", None, "8 April 2023", "1:56 pm on 9 May, 2023", "someday"])
    [2, 1, 0, 3, 4]
    """
    keys = [time_order_key(t) for t in times]
    dated = [i for i, k in enumerate(keys) if k is not None]
    slots = iter(sorted(dated, key=lambda i: keys[i]))
    return [next(slots) if k is not None else i for i, k in enumerate(keys)]


_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_SESSION_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%I:%M %p on %B %d, %Y",
                    "%d %B, %Y", "%d %B %Y", "%B %d, %Y", "%d %b %Y", "%b %d, %Y")


def parse_session_date(text: str) -> str | None:
    """An ISO string for a conversation's date written in words (LoCoMo's session dates), or None.

    Reads ``"1:56 pm on 8 May, 2023"`` (LoCoMo), ``"8 May 2023"``, ``"May 8, 2023"``; anything else
    (already ISO, or not a date) gives None and is kept as written by :func:`clean_time`.

    >>> parse_session_date("1:56 pm on 8 May, 2023"), parse_session_date("May 8, 2023")
    ('2023-05-08T13:56', '2023-05-08')
    >>> parse_session_date("2023-05-08") is None, parse_session_date("yesterday") is None
    (True, True)
    """
    t = " ".join(text.split())
    if not t or t[0].isdigit() and "-" in t[:5]:
        return None
    for fmt in _SESSION_FORMATS:
        try:
            d = _dt.datetime.strptime(t, fmt)
        except ValueError:
            continue
        return d.strftime("%Y-%m-%dT%H:%M") if "%H" in fmt or "%I" in fmt else d.date().isoformat()
    return None


def clean_source(value: object, name: str = "source") -> str | None:
    """A source id as a string (None stays None); integers are converted.

    >>> clean_source(np.int64(7)), clean_source("D1:3")
    ('7', 'D1:3')
    """
    if value is None:
        return None
    if isinstance(value, str):
        return clean_text(value, name, allow_empty=True)
    if isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)):
        return str(int(value))
    raise TypeError(f"{name} must be a string id such as 'D1:3' (or an integer), got {type(value).__name__}")


def clean_unit(value: object, name: str) -> float:
    """A finite number in [0, 1] as ``float`` (numpy scalars included)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number in [0, 1], got {value!r}")
    v = float(value)
    if not (math.isfinite(v) and 0.0 <= v <= 1.0):
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")
    return v


def clean_int(value: object, name: str, *, minimum: int | None = None) -> int:
    """An integer (numpy integers included; bools, floats and strings refused) as ``int``.

    >>> clean_int(np.int32(3), "k", minimum=1)
    3
    >>> clean_int("3", "k", minimum=1)
    Traceback (most recent call last):
    ...
    TypeError: k must be an integer >= 1, got '3'
    """
    bound = "" if minimum is None else f" >= {minimum}"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer{bound}, got {value!r}")
    v = int(value)
    if minimum is not None and v < minimum:
        raise ValueError(f"{name} must be an integer{bound}, got {v}")
    return v
