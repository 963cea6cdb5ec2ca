"""Relative dates in LoCoMo, and how often their resolution agrees with the temporal questions' answers.

Usage::

    python -m mags_lib.bench.dates                      # ../shared/data/locomo/locomo10.json
    python -m mags_lib.bench.dates --data path/to/locomo10.json --out results/bench

Two measurements of :mod:`mags_lib.graph.dates` on LoCoMo's real conversations (no model, about a
second):

* **turns** -- how many of the 5,882 turns hold a relative date expression the parser resolves, per
  kind ("yesterday", "last <weekday>", "last week", "<n> years ago", ...), and, for context, how
  many hold vague ones it leaves alone ("recently", "the other day", a bare "on Friday");
* **temporal questions** -- LoCoMo's category-2 questions ("When did Caroline go to the LGBTQ
  support group?") whose evidence turns hold a resolved phrase: each phrase is resolved against its
  turn's session date, and the resolution is compared with the gold answer.

The agreement check. The gold answer is read as a period (:func:`gold_period`): an absolute date
("7 May 2023", "May 7, 2023", "13 August" with the session's year) is that day; a month ("June 2023",
"April.2023", "early May 2023") the month; a year ("2022") the year; "summer 2022" June to August;
the annotators' relative forms are anchored on the date they name: "the day before D" is D - 1,
"the <weekday> before D" the nearest such day before D, "the week before D" the seven days before D,
"two weeks before D" the seven before those, "the weekend before D" the last Saturday-Sunday ending
before D, "the <weekday> after D" the nearest after, "the week / weekend of D" the Monday-Sunday week holding
D / its Saturday and Sunday, "the first / last week of <month>" its first / last seven days, "a few
days before D" D - 6 to D - 2, "between October 19 and 24 2023" those days. Answers
that are not dates ("Chicago"), durations ("four months") or themselves relative ("10 years ago")
are not periods and are counted apart. A resolution **agrees** with the gold when its period
overlaps the gold's and is not coarser (no more days): "yesterday" said on 8 May 2023 agrees with
"7 May 2023"; "last week" with "the week before 9 June 2023"; "last month" (a month) does not agree
with a gold day. It agrees **exactly** when both periods are the same days (our calendar week
Monday-Sunday and the annotators' "seven days before D" differ unless D is a Monday). A question
agrees when one of its evidence phrases does; the questions whose evidence holds exactly one phrase
are reported apart (no choice among phrases), per kind. For comparison, the same check with the
session date itself as the answer (what the reader had before relative dates were resolved: the
turn's date) is reported beside it. Every disagreement is listed in the JSON.

Writes ``results/bench/dates.json`` (``--out`` changes the folder): counts, question keys, the relative
phrases with their session dates and resolutions, the gold periods; LoCoMo's own words (question
texts, gold answers, example turns) only with ``--with-text``, for inspection (the data is CC BY-NC
4.0 and never committed here).
"""

from __future__ import annotations

import argparse
import calendar
import datetime as _dt
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from ..graph.dates import excluded_relative_dates, resolve_relative_dates

__all__ = ["VAGUE", "agrees", "gold_period", "main", "run"]

Period = tuple[_dt.date, _dt.date]

VAGUE = {
    "recently / lately": re.compile(r"\b(?:recently|lately)\b", re.IGNORECASE),
    "the other day": re.compile(r"\bthe other day\b", re.IGNORECASE),
    "a while ago": re.compile(r"\b(?:a (?:little |short )?while|some time) (?:ago|back)\b", re.IGNORECASE),
    "bare weekday (on Friday)": re.compile(r"\bon (?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)s?\b",
                                           re.IGNORECASE),
}
"""Vague time expressions the parser leaves alone, counted for context."""

_MONTHS = {m[:3].lower(): i for i, m in enumerate(calendar.month_name) if m}
_WEEKDAYS = {d.lower(): i for i, d in enumerate(calendar.day_name)}
_COUNTS = {"a": 1, "one": 1, "two": 2, "three": 3, "four": 4}


def _month(tok: str) -> int | None:
    """A month name or abbreviation, typos of the tail tolerated ("januarty"); None otherwise."""
    return _MONTHS.get(tok[:3]) if tok.isalpha() and 3 <= len(tok) <= 9 else None


def _date(text: str, year: int) -> tuple[str, Period] | None:
    """An absolute date in words: a day, a month or a year (``year`` fills a missing one)."""
    toks = text.split()
    nums = [t for t in toks if t.isdigit()]
    months = [m for m in (_month(t) for t in toks if not t.isdigit()) if m]
    other = [t for t in toks if not t.isdigit() and not _month(t)]
    if other or len(months) > 1 or len(nums) > 2:
        return None
    years = [int(n) for n in nums if len(n) == 4]
    days = [int(n) for n in nums if len(n) <= 2]
    if len(years) > 1 or len(days) > 1 or (days and not months):
        return None
    y = years[0] if years else year
    try:
        if months and days:
            d = _dt.date(y, months[0], days[0])
            return "day", (d, d)
        if months:
            last = calendar.monthrange(y, months[0])[1]
            return "month", (_dt.date(y, months[0], 1), _dt.date(y, months[0], last))
        if years:
            return "year", (_dt.date(y, 1, 1), _dt.date(y, 12, 31))
    except ValueError:
        return None
    return None


def _normalise(answer: str) -> str:
    t = answer.lower().replace("`", "")
    t = re.sub(r"(\d+)(?:st|nd|rd|th)\b", r"\1", t)
    t = re.sub(r"(\d)([a-z])", r"\1 \2", t)
    t = re.sub(r"([a-z])\.(\d)", r"\1 \2", t)
    t = re.sub(r"[,.;:!?()]", " ", t)
    return " ".join(t.split())


def gold_period(answer: str | None, session: _dt.date) -> tuple[str, Period] | None:
    """The period a LoCoMo temporal answer names, and its form, or None (not a date; see the module docstring).

    ``session`` supplies the year of a date written without one.

    >>> s = _dt.date(2023, 7, 15)
    >>> gold_period("The Friday before 15 July 2023", s)
    ('<weekday> before', (datetime.date(2023, 7, 14), datetime.date(2023, 7, 14)))
    >>> gold_period("The week before 9 June 2023", s)[1]
    (datetime.date(2023, 6, 2), datetime.date(2023, 6, 8))
    >>> gold_period("April.2023", s)[0], gold_period("13 August", s)[1][0], gold_period("four months", s)
    ('month', datetime.date(2023, 8, 13), None)
    """
    if not answer:
        return None
    t = _normalise(answer)
    t = re.sub(r"^(?:on|in|around|about|early|late|mid|since|end of|the end of) ", "", t)
    t = re.sub(r"^(?:the )?last (week|weekend) before ", r"the \1 before ", t)
    m = re.fullmatch(r"(?:between |(?:the )?(?:week|night) of )?([a-z]+) (\d{1,2}) (?:to|and) (\d{1,2})(?: (\d{4}))?", t)
    if m and _month(m.group(1)):  # "between October 19 and 24 2023", "the week of April 3 to 9"
        y = int(m.group(4)) if m.group(4) else session.year
        try:
            return "range", (_dt.date(y, _month(m.group(1)), int(m.group(2))),
                             _dt.date(y, _month(m.group(1)), int(m.group(3))))
        except ValueError:
            return None
    day = _dt.timedelta(days=1)
    m = re.fullmatch(r"(first|last) (week|weekend) of (.+)", t)
    if m:
        got = _date(m.group(3), session.year)
        if not got or got[0] != "month":
            return None
        a, b = got[1]
        if m.group(2) == "week":
            return f"{m.group(1)} week of", ((a, a + 6 * day) if m.group(1) == "first" else (b - 6 * day, b))
        if m.group(1) == "first":
            sat = a + ((5 - a.weekday()) % 7) * day
        else:  # the last Saturday of the month (its Sunday may fall in the next month)
            sat = b - ((b.weekday() - 5) % 7) * day
        return f"{m.group(1)} weekend of", (sat, sat + day)
    m = re.fullmatch(r"(?:(?:the|a|on) )*(?:(few|a|one|two|three|four) )?(day|week|weekend|"
                     + "|".join(_WEEKDAYS) + r")s? (before|after|of) (.+)", t)
    if m:
        got = _date(m.group(4), session.year)
        if not got or got[0] != "day":
            return None
        d = got[1][0]
        n = _COUNTS.get(m.group(1) or "a", 1)
        unit, rel = m.group(2), m.group(3)
        if unit in _WEEKDAYS and rel == "before":
            x = d - ((d.weekday() - _WEEKDAYS[unit]) % 7 or 7) * day
            return "<weekday> before", (x, x)
        if unit in _WEEKDAYS and rel == "after":
            x = d + ((_WEEKDAYS[unit] - d.weekday()) % 7 or 7) * day
            return "<weekday> after", (x, x)
        if unit == "day" and rel == "before":
            if m.group(1) == "few":
                return "few days before", (d - 6 * day, d - 2 * day)
            return "day before", (d - n * day, d - n * day)
        if unit == "week" and rel == "before":
            return "week before", (d - 7 * n * day, d - (7 * n - 6) * day)
        if unit == "week" and rel == "of":
            mon = d - d.weekday() * day
            return "week of", (mon, mon + 6 * day)
        if unit == "weekend":
            if rel == "before":
                sat = d - ((d.weekday() - 5) % 7 or 7) * day
                sat = sat if sat + day < d else sat - 7 * day
                sat -= 7 * (n - 1) * day
            elif rel == "after":
                sat = d + ((5 - d.weekday()) % 7 or 7) * day
            else:  # "the weekend of D": the Saturday-Sunday of D's Monday-Sunday week
                sat = d + (5 - d.weekday()) * day
            return f"weekend {rel}", (sat, sat + day)
        return None
    m = re.fullmatch(r"(?:the )?summer (?:of )?(\d{4})", t)
    if m:
        y = int(m.group(1))
        return "summer", (_dt.date(y, 6, 1), _dt.date(y, 8, 31))
    return _date(t, session.year)


def agrees(ours: Period, gold: Period) -> bool:
    """Whether a resolved period agrees with the gold one: they overlap and ours is not coarser.

    >>> d = _dt.date
    >>> agrees((d(2023, 5, 7), d(2023, 5, 7)), (d(2023, 5, 1), d(2023, 5, 31)))
    True
    >>> agrees((d(2023, 5, 1), d(2023, 5, 31)), (d(2023, 5, 7), d(2023, 5, 7)))
    False
    """
    return ours[0] <= gold[1] and gold[0] <= ours[1] and (ours[1] - ours[0]) <= (gold[1] - gold[0])


def _share(k: int, n: int) -> float | None:
    return round(k / n, 4) if n else None


def run(data: str | Path | None = None, *, out_dir: str | Path = "results/bench", progress: bool = True,
        with_text: bool = False) -> dict:
    """Measure and write ``<out_dir>/dates.json``; returns it.

    ``with_text``: also write LoCoMo's own words (question texts, gold answers, example turns), for
    inspection. Off by default: the file is CC BY-NC 4.0 and never committed here, so the JSON holds
    counts, question keys, the relative phrases, the session dates and the periods only.
    """
    from .. import repro
    from .locomo import load_locomo

    say = print if progress else (lambda *a, **k: None)
    t0 = time.perf_counter()
    lc = load_locomo(data)
    # -- turns ----------------------------------------------------------------------------------
    n_turns = turns_with = n_approx = 0
    spans_by_kind, turns_by_kind, gran, vague, excluded = Counter(), Counter(), Counter(), Counter(), Counter()
    excluded_examples: list[str] = []
    for conv in lc.conversations:
        for t in conv.turns:
            n_turns += 1
            spans = resolve_relative_dates(t.text, t.time)
            turns_with += bool(spans)
            n_approx += sum(s.approximate for s in spans)
            spans_by_kind.update(s.kind for s in spans)
            turns_by_kind.update({s.kind for s in spans})
            gran.update(s.granularity for s in spans)
            for phrase in excluded_relative_dates(t.text):
                excluded[" ".join(phrase.lower().split())] += 1
                if with_text and len(excluded_examples) < 15:
                    excluded_examples.append(t.text)
            for name, rx in VAGUE.items():
                vague[name] += bool(rx.search(t.text))
    turns = {"n_turns": n_turns, "turns_with_relative_date": turns_with, "share": _share(turns_with, n_turns),
             "n_phrases": sum(spans_by_kind.values()), "phrases_by_kind": dict(spans_by_kind.most_common()),
             "turns_by_kind": dict(turns_by_kind.most_common()), "phrases_by_granularity": dict(gran.most_common()),
             "approximate_phrases": n_approx, "excluded_by_a_rule": dict(excluded.most_common()),
             "excluded_examples": excluded_examples, "turns_with_vague_expressions": dict(vague)}
    say(f"[dates] {turns_with} of {n_turns} turns hold a resolved relative date ({turns['n_phrases']} phrases): "
        + ", ".join(f"{k} {v}" for k, v in spans_by_kind.most_common(8)))
    # -- temporal questions ----------------------------------------------------------------------------
    n_cat2 = with_phrase = 0
    no_period, forms = Counter(), Counter()
    rows = []
    for conv in lc.conversations:
        for q in conv.questions:
            if q.category != 2:
                continue
            n_cat2 += 1
            ev = [conv.turn(e) for e in q.evidence]
            spans = [(t, s) for t in ev for s in resolve_relative_dates(t.text, t.time)]
            if not spans:
                continue
            with_phrase += 1
            session = spans[0][0].time.date()
            gold = gold_period(q.answer, session)
            if gold is None:
                a = _normalise(q.answer or "")
                no_period[a if with_text else ("a duration or relative" if re.search(
                    r"\b(?:days?|weeks?|months?|years?|ago|before|after)\b", a) else "not a date")] += 1
                continue
            form, period = gold
            forms[form] += 1
            ok = [agrees((s.first, s.last), period) for _, s in spans]
            exact = [(s.first, s.last) == period for _, s in spans]
            base = any(agrees((t.time.date(), t.time.date()), period) for t in ev)
            rows.append({"question": q.key, **({"text": q.question, "gold": q.answer} if with_text else {}),
                         "gold_form": form,
                         "gold_period": [period[0].isoformat(), period[1].isoformat()],
                         "phrases": [{"turn": t.dia_id, "session_date": t.time.date().isoformat(), "phrase": s.phrase,
                                      "kind": s.kind, "resolved": s.label, "value": s.value, "agrees": a}
                                     for (t, s), a in zip(spans, ok)],
                         "agrees": any(ok), "exact": any(exact), "session_date_agrees": base})
    n = len(rows)
    single = [r for r in rows if len(r["phrases"]) == 1]
    per_kind: dict[str, dict] = {}
    for r in single:
        k = per_kind.setdefault(r["phrases"][0]["kind"], {"n": 0, "agree": 0})
        k["n"] += 1
        k["agree"] += r["agrees"]
    for k in per_kind.values():
        k["share"] = _share(k["agree"], k["n"])
    agree = sum(r["agrees"] for r in rows)
    questions = {
        "n_temporal_questions": n_cat2, "with_resolved_phrase_in_evidence": with_phrase,
        "gold_not_a_period": sum(no_period.values()), "gold_not_a_period_answers": dict(no_period.most_common()),
        "scored": n, "gold_forms": dict(forms.most_common()),
        "agree": agree, "agree_share": _share(agree, n),
        "exact": sum(r["exact"] for r in rows), "exact_share": _share(sum(r["exact"] for r in rows), n),
        "session_date_agree": sum(r["session_date_agrees"] for r in rows),
        "session_date_agree_share": _share(sum(r["session_date_agrees"] for r in rows), n),
        "single_phrase": {"scored": len(single), "agree": sum(r["agrees"] for r in single),
                          "agree_share": _share(sum(r["agrees"] for r in single), len(single)),
                          "per_kind": dict(sorted(per_kind.items(), key=lambda kv: -kv[1]["n"]))},
        "disagreements": [r for r in rows if not r["agrees"]],
    }
    say(f"[dates] temporal questions: {with_phrase} of {n_cat2} have a resolved phrase in their evidence; "
        f"{n} with a dated gold answer: resolution agrees on {agree} ({questions['agree_share']}), exactly on "
        f"{questions['exact']}; the session date alone on {questions['session_date_agree']}")
    result = {"turns": turns, "temporal_questions": questions, "rows": rows,
              "meta": {"data": str(lc.path.name), "git_sha": repro.git_sha(),
                       "wall_time_s": round(time.perf_counter() - t0, 2)}}
    repro.atomic_write_text(Path(out_dir) / "dates.json", json.dumps(result, indent=1, ensure_ascii=False))
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: see the module docstring."""
    p = argparse.ArgumentParser(prog="python -m mags_lib.bench.dates", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=None, help="locomo10.json (default: ../shared/data/locomo/locomo10.json "
                                                "beside the project, or $MAGS_LOCOMO)")
    p.add_argument("--out", default="results/bench", help="output folder for dates.json")
    p.add_argument("--with-text", action="store_true", help="also write question texts, gold answers and example "
                   "turns (LoCoMo's words: for inspection, not to commit)")
    a = p.parse_args(argv)
    run(a.data, out_dir=a.out, with_text=a.with_text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
